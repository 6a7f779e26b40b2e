/* SPDX-License-Identifier: MIT
 *
 * eventfd: counter and semaphore mode from /proc/self/fdinfo (the counter
 * is printed in hex). The counter is shared with the snapshot child, so it
 * is read in the pause.
 * ASYNC-SIGNAL-SAFE.
 */
#include "rrc_lib.h"

int rrc_capture_eventfd(struct rrc_fd *f, int fd)
{
	char *buf = rrc_s->textbuf;
	long r = rrc_read_fdinfo(fd, buf, 4096);
	const char *v = r > 0 ? rrc_fdinfo_field(buf, "eventfd-count:") : 0;
	if (!v) {
		rrc_set_err(RRC_ERR_UNSUPPORTED_FD, r < 0 ? (int)-r : 0, "cannot read the eventfd counter of fd ", fd, 0);
		return -1;
	}
	f->u.eventfd.count = rrc_parse_u64(v, 16, 0);
	v = rrc_fdinfo_field(buf, "eventfd-semaphore:");
	f->u.eventfd.semaphore = v ? (uint32_t)rrc_parse_u64(v, 10, 0) : 0;
	return 0;
}
