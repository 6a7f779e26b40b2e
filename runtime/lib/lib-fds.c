/* SPDX-License-Identifier: MIT
 *
 * The library's own fds, kept from the application (issue 16 §2).
 *
 * Daemons close what they did not open: a loop over every number up to
 * RLIMIT_NOFILE, a walk of /proc/self/fd, close_range(3, ~0U) or
 * closefrom(3); some dup2 onto numbers of their choosing. Any of these
 * would take the library's control socket, userfaultfd, pagemap, maps and
 * log fds, and the next checkpoint would fail, or worse, the log would be
 * written into an application's file. rr keeps its reserved fds the same
 * way (rr.h, RR_RESERVED_ROOT_DIR_FD: the tracee's close of it is ignored
 * and a dup onto it fails with EBADF).
 *
 * Here an owned number is one bit of a bitmap. The application's close of
 * one fails with EBADF, as if it were not open, and closes nothing: in rr
 * mode the call is logged with that result, and a replay gets the same
 * whether the number is the library's there too or free (it cannot be the
 * application's: its fd table replays identically). dup2/dup3 onto an
 * owned number fail with EBADF (a dup2 onto a number the application never
 * had is rare; the message names the cause once). close_range and
 * closefrom close the gaps between owned numbers.
 *
 * The invariant that keeps it right: a number is owned only while the
 * library holds it open. Every library close of an owned fd goes through
 * rrc_libfd_close (or rrc_libfd_forget first, when the number is handed
 * over), and a restore forgets all (the library remakes its fds, some at
 * other numbers). A stale bit would make the application's close of that
 * number fail and leak its fd: tests/test_zdtm.py's libfds program reuses
 * every number the library used across dumps and checks each close.
 *
 * ASYNC-SIGNAL-SAFE: atomics and raw system calls only.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include "rrc_lib.h"
#include "lib-fds.h"

static uint64_t owned[LIB_FD_TRACKED / 64];

void rrc_libfd_own(int fd)
{
	if (fd < 0 || fd >= LIB_FD_TRACKED)
		return; /* unprotected; such a process is refused at dump anyway (RRC_MAX_FDS) */
	__atomic_fetch_or(&owned[fd / 64], 1ull << (fd % 64), __ATOMIC_SEQ_CST);
}

void rrc_libfd_forget(int fd)
{
	if (fd >= 0 && fd < LIB_FD_TRACKED)
		__atomic_fetch_and(&owned[fd / 64], ~(1ull << (fd % 64)), __ATOMIC_SEQ_CST);
}

long rrc_libfd_close(int fd)
{
	rrc_libfd_forget(fd);
	return rrc_sys_close(fd);
}

int rrc_libfd_is(int fd)
{
	if (fd < 0 || fd >= LIB_FD_TRACKED)
		return 0;
	return (__atomic_load_n(&owned[fd / 64], __ATOMIC_SEQ_CST) >> (fd % 64)) & 1;
}

int rrc_libfd_next(unsigned lo, unsigned hi)
{
	if (hi >= LIB_FD_TRACKED)
		hi = LIB_FD_TRACKED - 1;
	for (unsigned fd = lo; fd <= hi;) {
		uint64_t w = __atomic_load_n(&owned[fd / 64], __ATOMIC_SEQ_CST) >> (fd % 64);
		if (w) {
			unsigned at = fd + (unsigned)__builtin_ctzll(w);
			return at <= hi ? (int)at : -1;
		}
		fd = (fd / 64 + 1) * 64;
	}
	return -1;
}

int rrc_libfd_refuse(const char *call, int fd)
{
	static int said_close, said_dup;
	int *said = call[0] == 'd' ? &said_dup : &said_close;
	if (!__atomic_exchange_n(said, 1, __ATOMIC_RELAXED)) {
		char m[200];
		size_t l = rrc_bput(m, sizeof m, 0, "the application's ");
		l = rrc_bput(m, sizeof m, l, call);
		l = rrc_bput(m, sizeof m, l, " on fd ");
		l = rrc_bput_u64(m, sizeof m, l, (uint64_t)fd);
		rrc_bput(m, sizeof m, l, " failed with EBADF: the fd is the library's own (said once per kind)");
		rrc_log(m);
	}
	errno = EBADF;
	return -1;
}

void rrc_libfd_reset(void)
{
	/* only the words in use: the others' pages stay untouched */
	for (unsigned i = 0; i < LIB_FD_TRACKED / 64; i++)
		if (__atomic_load_n(&owned[i], __ATOMIC_SEQ_CST))
			__atomic_store_n(&owned[i], 0, __ATOMIC_SEQ_CST);
}

int rrc_fd_high(int fd)
{
	if (fd < 0)
		return fd;
	if (fd < LIB_FD_BASE) {
		long n = rrc_sys_fcntl(fd, F_DUPFD_CLOEXEC, LIB_FD_BASE);
		if (n >= 0) {
			rrc_sys_close(fd);
			fd = (int)n;
		} /* else RLIMIT_NOFILE too low: owned where it is */
	}
	rrc_libfd_own(fd);
	return fd;
}
