/* SPDX-License-Identifier: MIT
 *
 * close_range and closefrom, around the library's own fds (lib-fds.c,
 * issue 16 §2). glibc's closefrom makes the close_range system call
 * inside libc, where no preload reaches, so both are interposed.
 *
 * Closing: the system call runs on the gaps between owned fds (a few
 * calls: the library holds a handful), so a daemon's close_range(3, ~0U)
 * leaves the control socket, userfaultfd, pagemap, maps and log fds
 * open. CLOSE_RANGE_CLOEXEC runs whole (the library's fds are close-on-
 * exec already); CLOSE_RANGE_UNSHARE is honoured by the first call.
 *
 * While recording, the call is one FD event (RRC_FDOP_CLOSE_RANGE, in the
 * fd table's order: rr-fds.c) and a replay makes it again. Every number
 * of the span the fd table tracks is forgotten as close forgets its fd
 * (rrc_fdt_closed: kinds, epoll and replay bookkeeping); a data-directory
 * file's journal bit stays until the number is used again (wrap-files.c
 * clears it then).
 * A connection closed this way sends its FIN with no FIN output in the
 * log: the gate releases it at the next commit instead (docs/gate.md).
 */
#include <dlfcn.h>
#include <errno.h>
#include <linux/close_range.h>
#include "rrc_lib.h"
#include "lib-fds.h"
#include "rr-log.h"
#include "rr-fds.h"
#include "rrc/rrlog.h"

static int (*real_close_range)(unsigned, unsigned, int);

static int sys_close_range(unsigned first, unsigned last, int flags)
{
	if (!real_close_range)
		real_close_range = dlsym(RTLD_NEXT, "close_range");
	if (real_close_range)
		return real_close_range(first, last, flags);
	long r = rrc_syscall3(__NR_close_range, first, last, (unsigned)flags);
	if (r < 0) {
		errno = (int)-r;
		return -1;
	}
	return 0;
}

/* The span closed but the owned fds in it. */
static int around_owned(unsigned first, unsigned last, int flags)
{
	if (flags & CLOSE_RANGE_CLOEXEC || rrc_rr_is_library_thread())
		return sys_close_range(first, last, flags);
	unsigned lo = first;
	for (;;) {
		int own = lo <= last ? rrc_libfd_next(lo, last) : -1;
		unsigned hi = own < 0 ? last : (unsigned)own - 1;
		if (own != (int)lo && lo <= hi) {
			if (sys_close_range(lo, hi, flags) < 0)
				return -1;
			flags &= ~CLOSE_RANGE_UNSHARE;
		}
		if (own < 0 || (unsigned)own == last)
			break;
		lo = (unsigned)own + 1;
	}
	if (flags & CLOSE_RANGE_UNSHARE) /* every number in the span was owned */
		return sys_close_range(~0u, ~0u, CLOSE_RANGE_UNSHARE);
	return 0;
}

int close_range(unsigned first, unsigned last, int flags)
{
	if (first > last || (flags & ~(CLOSE_RANGE_CLOEXEC | CLOSE_RANGE_UNSHARE))) {
		errno = EINVAL;
		return -1;
	}
	int t = rrc_fdt_begin();
	int r = around_owned(first, last, flags);
	int e = errno;
	if (r == 0 && !(flags & CLOSE_RANGE_CLOEXEC))
		for (unsigned fd = first; fd <= last && fd < RRC_MAX_FDS; fd++)
			if (!rrc_libfd_is((int)fd))
				rrc_fdt_closed((int)fd);
	errno = e;
	rrc_fdt_end_fd(t, RRC_FDOP_CLOSE_RANGE, r < 0 ? -errno : 0, (int32_t)first, (int32_t)last);
	return r;
}

void closefrom(int lowfd)
{
	close_range(lowfd < 0 ? 0 : (unsigned)lowfd, ~0u, 0);
}
