/* SPDX-License-Identifier: MIT
 *
 * rrc-restore phase 1: timerfd. The image holds the remaining time (relative,
 * as /proc/PID/fdinfo shows it), the interval and the expirations not yet
 * read; the timer is re-armed with the remaining time (the time spent
 * between checkpoint and restore is not charged to it, as in CRIU) and the
 * expiration count is put back with TFD_IOC_SET_TICKS.
 */
#include <errno.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/timerfd.h>
#include <linux/timerfd.h>
#include <unistd.h>
#include "restore.h"

#ifndef TFD_IOC_SET_TICKS
#define TFD_IOC_SET_TICKS _IOW('T', 0, uint64_t)
#endif

void restore_timerfd(struct fd_ctx *x, struct rfd *r)
{
	const struct rrc_fd *f = r->f;
	struct itimerspec its = {
		.it_value = { f->u.timerfd.value_sec, f->u.timerfd.value_nsec },
		.it_interval = { f->u.timerfd.interval_sec, f->u.timerfd.interval_nsec },
	};
	uint64_t ticks = f->u.timerfd.ticks;
	int fd = timerfd_create(f->u.timerfd.clockid, TFD_CLOEXEC);

	if (fd < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)f->fd, "fd %d: timerfd_create(clock %d) failed: %s",
			 f->fd, f->u.timerfd.clockid, rst_strerror(errno));
	/* armed periodic timer whose current period just ran out: fire at once */
	if (!its.it_value.tv_sec && !its.it_value.tv_nsec &&
	    (its.it_interval.tv_sec || its.it_interval.tv_nsec))
		its.it_value.tv_nsec = 1;
	if (timerfd_settime(fd, 0, &its, NULL) < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)f->fd, "fd %d: timerfd_settime failed: %s", f->fd,
			 rst_strerror(errno));
	if (ticks && ioctl(fd, TFD_IOC_SET_TICKS, &ticks) < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)f->fd, "fd %d: TFD_IOC_SET_TICKS(%llu) failed: %s",
			 f->fd, (unsigned long long)ticks, rst_strerror(errno));
	fd_place(x, fd_high(x, fd), r);
}
