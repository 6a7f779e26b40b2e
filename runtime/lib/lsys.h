/* SPDX-License-Identifier: MIT
 *
 * Named raw syscalls used only by librrc.so, built on the rrc_syscallN
 * layer of rrc/sys.h (which stays the only place with inline asm).
 * Return the kernel's result: >= 0 or -errno.
 * ASYNC-SIGNAL-SAFE: everything in this header.
 */
#ifndef RRC_LSYS_H
#define RRC_LSYS_H
#include "rrc/sys.h"

struct rrc_kstat;
static inline long lsys_getdents64(int fd, void *buf, size_t n) { return rrc_syscall3(SYS_getdents64, fd, (long)buf, (long)n); }
static inline long lsys_readlinkat(int dfd, const char *p, char *buf, size_t n) { return rrc_syscall4(SYS_readlinkat, dfd, (long)p, (long)buf, (long)n); }
static inline long lsys_fcntl(int fd, int cmd, long arg) { return rrc_syscall3(SYS_fcntl, fd, cmd, arg); }
static inline long lsys_fstat(int fd, void *st) { return rrc_syscall2(SYS_fstat, fd, (long)st); }
static inline long lsys_pipe2(int *fds, int flags) { return rrc_syscall2(SYS_pipe2, (long)fds, flags); }
static inline long lsys_tee(int in, int out, size_t len, unsigned flags) { return rrc_syscall4(SYS_tee, in, out, (long)len, flags); }
static inline long lsys_getsockopt(int fd, int lvl, int opt, void *val, void *len)
{ return rrc_syscall5(SYS_getsockopt, fd, lvl, opt, (long)val, (long)len); }
static inline long lsys_getsockname(int fd, void *a, void *len) { return rrc_syscall3(SYS_getsockname, fd, (long)a, (long)len); }
static inline long lsys_getpeername(int fd, void *a, void *len) { return rrc_syscall3(SYS_getpeername, fd, (long)a, (long)len); }
static inline long lsys_wait4(int pid, int *st, int opts) { return rrc_syscall4(SYS_wait4, pid, (long)st, opts, 0); }
static inline long lsys_getrlimit(int res, void *rl) { return rrc_syscall4(SYS_prlimit64, 0, res, 0, (long)rl); }
static inline long lsys_rt_sigaction(int sig, const void *act, void *old) { return rrc_syscall4(SYS_rt_sigaction, sig, (long)act, (long)old, 8); }
static inline long lsys_umask(int m) { return rrc_syscall1(SYS_umask, m); }
static inline long lsys_personality(unsigned long p) { return rrc_syscall1(SYS_personality, (long)p); }
static inline long lsys_getcwd(char *buf, size_t n) { return rrc_syscall2(SYS_getcwd, (long)buf, (long)n); }
static inline long lsys_get_robust_list(int tid, void *head, void *len) { return rrc_syscall3(SYS_get_robust_list, tid, (long)head, (long)len); }
static inline long lsys_timerfd_gettime(int fd, void *cur) { return rrc_syscall2(SYS_timerfd_gettime, fd, (long)cur); }
static inline long lsys_madvise(void *a, size_t n, int adv) { return rrc_syscall3(SYS_madvise, (long)a, (long)n, adv); }
static inline long lsys_userfaultfd(int flags) { return rrc_syscall1(SYS_userfaultfd, flags); }
/* fork-like clone: no CLONE_VM, exit signal 0 (no SIGCHLD to the
 * application, invisible to its wait()); the child returns 0 on the same stack. */
static inline long lsys_clone_snapshot(void) { return rrc_syscall5(SYS_clone, 0, 0, 0, 0, 0); }
static inline long lsys_exit(int code) { return rrc_syscall1(SYS_exit, code); }
static inline long lsys_pwrite(int fd, const void *b, size_t n, long off) { return rrc_syscall4(SYS_pwrite64, fd, (long)b, (long)n, off); }
static inline long lsys_brk(unsigned long a) { return rrc_syscall1(SYS_brk, (long)a); }
static inline long lsys_kill(int pid, int sig) { return rrc_syscall2(SYS_kill, pid, sig); }

/* process-private futexes (FUTEX_PRIVATE_FLAG): cheaper, and every
 * waiter and waker is in this process */
#define RRC_FUTEX_WAIT (0 | 128)
#define RRC_FUTEX_WAKE (1 | 128)
struct rrc_ts { long sec, nsec; };
#endif
