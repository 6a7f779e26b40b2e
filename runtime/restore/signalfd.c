/* SPDX-License-Identifier: MIT
 *
 * rrc-restore phase 1: signalfd, reading the signal set it had (from
 * fdinfo "sigmask"). Its status flags (O_NONBLOCK) are set again with the
 * other fds'.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "restore.h"

void restore_signalfd(struct fd_ctx *x, struct rfd *r)
{
	const struct rrc_fd *f = r->f;
	uint64_t mask = f->u.signalfd.sigmask;
	/* the raw call: glibc's signalfd takes a sigset_t of 128 bytes */
	long fd = syscall(SYS_signalfd4, -1, &mask, sizeof mask, O_CLOEXEC);

	if (fd < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)f->fd, "fd %d: signalfd failed: %s", f->fd,
			 rst_strerror(errno));
	fd_place(x, fd_high(x, (int)fd), r);
}
