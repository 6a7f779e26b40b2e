/* SPDX-License-Identifier: MIT
 *
 * signalfd: the set of signals it reads, from /proc/self/fdinfo
 * ("sigmask:", hex). The signals themselves are the thread's and the
 * process's pending signals, which are carried on their own
 * (sigpending.c): a restored signalfd reads them again.
 * ASYNC-SIGNAL-SAFE.
 */
#include "rrc_lib.h"

int rrc_capture_signalfd(struct rrc_fd *f, int fd)
{
	char *buf = rrc_s->textbuf;
	long r = rrc_read_fdinfo(fd, buf, 4096);
	const char *v = r > 0 ? rrc_fdinfo_field(buf, "sigmask:") : 0;
	if (!v) {
		rrc_set_err(RRC_ERR_UNSUPPORTED_FD, r < 0 ? (int)-r : 0, "cannot read the signal set of signalfd ", fd, 0);
		return -1;
	}
	f->u.signalfd.sigmask = rrc_parse_u64(v, 16, 0);
	return 0;
}
