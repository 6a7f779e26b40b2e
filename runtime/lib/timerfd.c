/* SPDX-License-Identifier: MIT
 *
 * timerfd: clock and settime flags from fdinfo, the remaining time and
 * interval from timerfd_gettime (relative), expirations not yet read
 * ("ticks").
 * ASYNC-SIGNAL-SAFE.
 */
#include "rrc_lib.h"

int rrc_capture_timerfd(struct rrc_fd *f, int fd)
{
	char *buf = rrc_s->textbuf;
	long r = rrc_read_fdinfo(fd, buf, 4096);
	const char *v = r > 0 ? rrc_fdinfo_field(buf, "clockid:") : 0;
	if (!v) {
		rrc_set_err(RRC_ERR_UNSUPPORTED_FD, r < 0 ? (int)-r : 0, "cannot read fdinfo of timerfd ", fd, 0);
		return -1;
	}
	f->u.timerfd.clockid = (int32_t)rrc_parse_u64(v, 10, 0);
	v = rrc_fdinfo_field(buf, "ticks:");
	f->u.timerfd.ticks = v ? rrc_parse_u64(v, 10, 0) : 0;
	v = rrc_fdinfo_field(buf, "settime flags:");
	f->u.timerfd.flags = v ? (uint32_t)rrc_parse_u64(v, 8, 0) : 0;
	struct { struct rrc_ts interval, value; } its;
	r = rrc_sys_timerfd_gettime(fd, &its);
	if (r < 0) {
		rrc_set_err(RRC_ERR_UNSUPPORTED_FD, (int)-r, "timerfd_gettime failed on fd ", fd, 0);
		return -1;
	}
	f->u.timerfd.value_sec = its.value.sec;
	f->u.timerfd.value_nsec = its.value.nsec;
	f->u.timerfd.interval_sec = its.interval.sec;
	f->u.timerfd.interval_nsec = its.interval.nsec;
	return 0;
}
