/* SPDX-License-Identifier: MIT
 *
 * rrc-restore phase 1: eventfd, with its counter (from fdinfo "eventfd-count")
 * and semaphore mode.
 */
#include <errno.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include "restore.h"

void restore_eventfd(struct fd_ctx *x, struct rfd *r)
{
	const struct rrc_fd *f = r->f;
	uint64_t count = f->u.eventfd.count;
	int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK | (f->u.eventfd.semaphore ? EFD_SEMAPHORE : 0));

	if (fd < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)f->fd, "fd %d: eventfd failed: %s", f->fd,
			 rst_strerror(errno));
	/* write() adds to the counter; the initval argument is only 32 bits */
	if (count && write(fd, &count, sizeof(count)) != sizeof(count))
		rst_fail(RRC_RST_FD, errno, (uint32_t)f->fd, "fd %d: cannot set the eventfd counter to %llu: %s",
			 f->fd, (unsigned long long)count, rst_strerror(errno));
	fd_place(x, fd_high(x, fd), r);
}
