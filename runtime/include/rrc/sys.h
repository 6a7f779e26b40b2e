/* SPDX-License-Identifier: MIT
 *
 * The raw-syscall layer: the only place in rrc where syscalls are issued
 * without libc. Used by async-signal-safe code (park handler, snapshot
 * child) and by the freestanding restorer blob, where libc is either unsafe
 * (another thread may hold its locks) or absent. Functions return the
 * kernel's result: >= 0 on success, -errno on failure (no errno variable).
 * ASYNC-SIGNAL-SAFE: everything in this header.
 */
#ifndef RRC_SYS_H
#define RRC_SYS_H

#include <stdint.h>
#include <stddef.h>
#include <sys/syscall.h>

static inline long rrc_syscall0(long n)
{
	long r;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n) : "rcx", "r11", "memory");
	return r;
}
static inline long rrc_syscall1(long n, long a)
{
	long r;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a) : "rcx", "r11", "memory");
	return r;
}
static inline long rrc_syscall2(long n, long a, long b)
{
	long r;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b) : "rcx", "r11", "memory");
	return r;
}
static inline long rrc_syscall3(long n, long a, long b, long c)
{
	long r;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c)
			 : "rcx", "r11", "memory");
	return r;
}
static inline long rrc_syscall4(long n, long a, long b, long c, long d)
{
	long r;
	register long r10 __asm__("r10") = d;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10)
			 : "rcx", "r11", "memory");
	return r;
}
static inline long rrc_syscall5(long n, long a, long b, long c, long d, long e)
{
	long r;
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8)
			 : "rcx", "r11", "memory");
	return r;
}
static inline long rrc_syscall6(long n, long a, long b, long c, long d, long e, long f)
{
	long r;
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return r;
}


/* Named wrappers used by more than one file. Add here, not inline at call sites. */
static inline long rrc_sys_read(int fd, void *buf, size_t n) { return rrc_syscall3(SYS_read, fd, (long)buf, (long)n); }
static inline long rrc_sys_write(int fd, const void *buf, size_t n) { return rrc_syscall3(SYS_write, fd, (long)buf, (long)n); }
static inline long rrc_sys_pread(int fd, void *buf, size_t n, long off) { return rrc_syscall4(SYS_pread64, fd, (long)buf, (long)n, off); }
static inline long rrc_sys_openat(int dirfd, const char *path, int flags, int mode) { return rrc_syscall4(SYS_openat, dirfd, (long)path, flags, mode); }
static inline long rrc_sys_close(int fd) { return rrc_syscall1(SYS_close, fd); }
static inline long rrc_sys_lseek(int fd, long off, int whence) { return rrc_syscall3(SYS_lseek, fd, off, whence); }
static inline long rrc_sys_ioctl(int fd, unsigned long req, void *arg) { return rrc_syscall3(SYS_ioctl, fd, (long)req, (long)arg); }
static inline long rrc_sys_mmap(void *addr, size_t len, int prot, int flags, int fd, long off)
{ return rrc_syscall6(SYS_mmap, (long)addr, (long)len, prot, flags, fd, off); }
static inline long rrc_sys_munmap(void *addr, size_t len) { return rrc_syscall2(SYS_munmap, (long)addr, (long)len); }
/* POSIX message queues (runtime/lib/mqueue.c): attr is a struct mq_attr */
static inline long rrc_sys_mq_getsetattr(int fd, const void *nw, void *old) { return rrc_syscall3(SYS_mq_getsetattr, fd, (long)nw, (long)old); }
static inline long rrc_sys_mq_timedreceive(int fd, void *buf, size_t n, unsigned *prio, const void *ts) { return rrc_syscall5(SYS_mq_timedreceive, fd, (long)buf, (long)n, (long)prio, (long)ts); }
static inline long rrc_sys_mq_timedsend(int fd, const void *buf, size_t n, unsigned prio, const void *ts) { return rrc_syscall5(SYS_mq_timedsend, fd, (long)buf, (long)n, prio, (long)ts); }
/* SysV IPC (runtime/lib/sysvipc.c): arg is the union semun (a pointer) */
static inline long rrc_sys_semctl(int id, int num, int cmd, void *arg) { return rrc_syscall4(SYS_semctl, id, num, cmd, (long)arg); }
static inline long rrc_sys_msgctl(int id, int cmd, void *buf) { return rrc_syscall3(SYS_msgctl, id, cmd, (long)buf); }
static inline long rrc_sys_msgrcv(int id, void *msg, size_t sz, long typ, int flags) { return rrc_syscall5(SYS_msgrcv, id, (long)msg, (long)sz, typ, flags); }
static inline long rrc_sys_shmctl(int id, int cmd, void *buf) { return rrc_syscall3(SYS_shmctl, id, cmd, (long)buf); }
static inline long rrc_sys_mremap(void *old, size_t olen, size_t nlen, int flags, void *nw) { return rrc_syscall5(SYS_mremap, (long)old, (long)olen, (long)nlen, flags, (long)nw); }
static inline long rrc_sys_mprotect(void *addr, size_t len, int prot) { return rrc_syscall3(SYS_mprotect, (long)addr, (long)len, prot); }
static inline long rrc_sys_getppid(void) { return rrc_syscall0(SYS_getppid); }
static inline long rrc_sys_sched_yield(void) { return rrc_syscall0(SYS_sched_yield); }
static inline long rrc_sys_getcpu(unsigned *cpu) { return rrc_syscall3(SYS_getcpu, (long)cpu, 0, 0); }
static inline long rrc_sys_sched_getaffinity(int pid, size_t len, uint64_t *mask)
{ return rrc_syscall3(SYS_sched_getaffinity, pid, (long)len, (long)mask); }
static inline long rrc_sys_sched_setaffinity(int pid, size_t len, const uint64_t *mask)
{ return rrc_syscall3(SYS_sched_setaffinity, pid, (long)len, (long)mask); }
static inline long rrc_sys_gettid(void) { return rrc_syscall0(SYS_gettid); }
static inline long rrc_sys_getpid(void) { return rrc_syscall0(SYS_getpid); }
static inline long rrc_sys_getpgid(int pid) { return rrc_syscall1(SYS_getpgid, pid); }
static inline long rrc_sys_setpgid(int pid, int pgid) { return rrc_syscall2(SYS_setpgid, pid, pgid); }
static inline long rrc_sys_eventfd2(unsigned v, int fl) { return rrc_syscall2(SYS_eventfd2, v, fl); }
static inline long rrc_sys_kcmp(long pid1, long pid2, int type, unsigned long a, unsigned long b)
{ return rrc_syscall5(SYS_kcmp, pid1, pid2, type, (long)a, (long)b); }
static inline long rrc_sys_tgkill(int tgid, int tid, int sig) { return rrc_syscall3(SYS_tgkill, tgid, tid, sig); }
static inline long rrc_sys_futex(volatile uint32_t *uaddr, int op, uint32_t val, const void *timeout)
{ return rrc_syscall6(SYS_futex, (long)uaddr, op, val, (long)timeout, 0, 0); }
static inline long rrc_sys_arch_prctl(int code, unsigned long addr) { return rrc_syscall2(SYS_arch_prctl, code, (long)addr); }
static inline long rrc_sys_prctl(int op, unsigned long a, unsigned long b, unsigned long c, unsigned long d)
{ return rrc_syscall5(SYS_prctl, op, (long)a, (long)b, (long)c, (long)d); }
static inline long rrc_sys_rt_sigprocmask(int how, const uint64_t *set, uint64_t *old)
{ return rrc_syscall4(SYS_rt_sigprocmask, how, (long)set, (long)old, 8); }
static inline long rrc_sys_clock_gettime(int clk, void *ts) { return rrc_syscall2(SYS_clock_gettime, clk, (long)ts); }
static inline __attribute__((noreturn)) void rrc_sys_exit_group(int code)
{
	for (;;)
		rrc_syscall1(SYS_exit_group, code);
}

/* Used by librrc.so's pause path and snapshot child, and by the restorer blob. */
static inline long rrc_sys_getdents64(int fd, void *buf, size_t n) { return rrc_syscall3(SYS_getdents64, fd, (long)buf, (long)n); }
static inline long rrc_sys_readlinkat(int dfd, const char *p, char *buf, size_t n) { return rrc_syscall4(SYS_readlinkat, dfd, (long)p, (long)buf, (long)n); }
static inline long rrc_sys_fcntl(int fd, int cmd, long arg) { return rrc_syscall3(SYS_fcntl, fd, cmd, arg); }
static inline long rrc_sys_fstat(int fd, void *st) { return rrc_syscall2(SYS_fstat, fd, (long)st); }
static inline long rrc_sys_fstatat(int dfd, const char *p, void *st, int flags) { return rrc_syscall4(SYS_newfstatat, dfd, (long)p, (long)st, flags); }
static inline long rrc_sys_pipe2(int *fds, int flags) { return rrc_syscall2(SYS_pipe2, (long)fds, flags); }
static inline long rrc_sys_tee(int in, int out, size_t len, unsigned flags) { return rrc_syscall4(SYS_tee, in, out, (long)len, flags); }
static inline long rrc_sys_getsockopt(int fd, int lvl, int opt, void *val, void *len)
{ return rrc_syscall5(SYS_getsockopt, fd, lvl, opt, (long)val, (long)len); }
static inline long rrc_sys_getsockname(int fd, void *a, void *len) { return rrc_syscall3(SYS_getsockname, fd, (long)a, (long)len); }
static inline long rrc_sys_getpeername(int fd, void *a, void *len) { return rrc_syscall3(SYS_getpeername, fd, (long)a, (long)len); }
static inline long rrc_sys_wait4(int pid, int *st, int opts) { return rrc_syscall4(SYS_wait4, pid, (long)st, opts, 0); }
static inline long rrc_sys_getrlimit(int res, void *rl) { return rrc_syscall4(SYS_prlimit64, 0, res, 0, (long)rl); }
static inline long rrc_sys_rt_sigaction(int sig, const void *act, void *old) { return rrc_syscall4(SYS_rt_sigaction, sig, (long)act, (long)old, 8); }
static inline long rrc_sys_umask(int m) { return rrc_syscall1(SYS_umask, m); }
static inline long rrc_sys_personality(unsigned long p) { return rrc_syscall1(SYS_personality, (long)p); }
static inline long rrc_sys_getcwd(char *buf, size_t n) { return rrc_syscall2(SYS_getcwd, (long)buf, (long)n); }
static inline long rrc_sys_get_robust_list(int tid, void *head, void *len) { return rrc_syscall3(SYS_get_robust_list, tid, (long)head, (long)len); }
static inline long rrc_sys_timerfd_gettime(int fd, void *cur) { return rrc_syscall2(SYS_timerfd_gettime, fd, (long)cur); }
static inline long rrc_sys_madvise(void *a, size_t n, int adv) { return rrc_syscall3(SYS_madvise, (long)a, (long)n, adv); }
static inline long rrc_sys_userfaultfd(int flags) { return rrc_syscall1(SYS_userfaultfd, flags); }
/* fork-like clone: no CLONE_VM, exit signal 0 (no SIGCHLD to the
 * application, invisible to its wait()); the child returns 0 on the same stack. */
static inline long rrc_sys_clone_snapshot(void) { return rrc_syscall5(SYS_clone, 0, 0, 0, 0, 0); }
/* The copy snapshot's image writer (precopy.c): a process that shares the
 * memory (CLONE_VM) and suspends the caller until it exits (CLONE_VFORK),
 * exit signal 0. It runs on the caller's stack until it switches to its
 * own: it must not return from the caller's function, only call
 * noreturn code. */
static inline long rrc_sys_clone_writer(void) { return rrc_syscall5(SYS_clone, 0x00000100 /* CLONE_VM */ | 0x00004000 /* CLONE_VFORK */, 0, 0, 0, 0); }
/* iovs: arrays of the kernel's struct iovec; pid: our own (fault-safe copy) */
static inline long rrc_sys_process_vm_readv(int pid, const void *liov, unsigned long lcnt, const void *riov, unsigned long rcnt)
{ return rrc_syscall6(SYS_process_vm_readv, pid, (long)liov, (long)lcnt, (long)riov, (long)rcnt, 0); }
static inline long rrc_sys_exit(int code) { return rrc_syscall1(SYS_exit, code); }
static inline long rrc_sys_pwrite(int fd, const void *b, size_t n, long off) { return rrc_syscall4(SYS_pwrite64, fd, (long)b, (long)n, off); }
/* iov: an array of the kernel's struct iovec { void *base; size_t len; } */
static inline long rrc_sys_writev(int fd, const void *iov, int cnt) { return rrc_syscall3(SYS_writev, fd, (long)iov, cnt); }
static inline long rrc_sys_brk(unsigned long a) { return rrc_syscall1(SYS_brk, (long)a); }
static inline long rrc_sys_kill(int pid, int sig) { return rrc_syscall2(SYS_kill, pid, sig); }
/* sockets: NETLINK_SOCK_DIAG in the pause (runtime/lib/sk-diag.c) */
static inline long rrc_sys_socket(int domain, int type, int proto) { return rrc_syscall3(SYS_socket, domain, type, proto); }
static inline long rrc_sys_sendto(int fd, const void *buf, size_t n, int flags, const void *addr, uint32_t alen)
{ return rrc_syscall6(SYS_sendto, fd, (long)buf, (long)n, flags, (long)addr, alen); }
static inline long rrc_sys_sendmsg(int fd, const void *msg, int flags)
{ return rrc_syscall3(SYS_sendmsg, fd, (long)msg, flags); }
static inline long rrc_sys_recvfrom(int fd, void *buf, size_t n, int flags, void *addr, void *alen)
{ return rrc_syscall6(SYS_recvfrom, fd, (long)buf, (long)n, flags, (long)addr, (long)alen); }
/* the accept queue of repaired connections after a restore (runtime/lib/accept-queue.c) */
static inline long rrc_sys_recvmsg(int fd, void *msg, int flags) { return rrc_syscall3(SYS_recvmsg, fd, (long)msg, flags); }
static inline long rrc_sys_connect(int fd, const void *addr, uint32_t alen) { return rrc_syscall3(SYS_connect, fd, (long)addr, alen); }
static inline long rrc_sys_accept4(int fd, void *addr, void *alen, int flags) { return rrc_syscall4(SYS_accept4, fd, (long)addr, (long)alen, flags); }
static inline long rrc_sys_setsockopt(int fd, int lvl, int opt, const void *val, uint32_t len)
{ return rrc_syscall5(SYS_setsockopt, fd, lvl, opt, (long)val, len); }
static inline long rrc_sys_ppoll(void *fds, unsigned long n, const void *ts) { return rrc_syscall5(SYS_ppoll, (long)fds, (long)n, (long)ts, 0, 8); }
static inline long rrc_sys_dup3(int oldfd, int newfd, int flags) { return rrc_syscall3(SYS_dup3, oldfd, newfd, flags); }
static inline long rrc_sys_unlinkat(int dfd, const char *p, int flags) { return rrc_syscall3(SYS_unlinkat, dfd, (long)p, flags); }

/* process-private futexes (FUTEX_PRIVATE_FLAG): cheaper, and every
 * waiter and waker is in this process */
#define RRC_FUTEX_WAIT (0 | 128)
#define RRC_FUTEX_WAKE (1 | 128)
/* shared futexes: a word in a MAP_SHARED mapping that two processes
 * wait on (the pause helper's mailbox, pause-helper.c) */
#define RRC_FUTEX_WAIT_SHARED 0
#define RRC_FUTEX_WAKE_SHARED 1
struct rrc_ts { long sec, nsec; };
static inline long rrc_sys_rt_sigpending(uint64_t *set) { return rrc_syscall2(SYS_rt_sigpending, (long)set, 8); }
static inline long rrc_sys_rt_sigtimedwait(const uint64_t *set, void *info, const struct rrc_ts *timeout)
{ return rrc_syscall4(SYS_rt_sigtimedwait, (long)set, (long)info, (long)timeout, 8); }
static inline long rrc_sys_rt_sigqueueinfo(int tgid, int sig, const void *info)
{ return rrc_syscall3(SYS_rt_sigqueueinfo, tgid, sig, (long)info); }
static inline long rrc_sys_rt_tgsigqueueinfo(int tgid, int tid, int sig, const void *info)
{ return rrc_syscall4(SYS_rt_tgsigqueueinfo, tgid, tid, sig, (long)info); }
static inline long rrc_sys_getitimer(int which, void *val) { return rrc_syscall2(SYS_getitimer, which, (long)val); }
static inline long rrc_sys_timer_create(int clock, void *sigevent, int32_t *id)
{ return rrc_syscall3(SYS_timer_create, clock, (long)sigevent, (long)id); }
static inline long rrc_sys_timer_gettime(int32_t id, void *its) { return rrc_syscall2(SYS_timer_gettime, id, (long)its); }
static inline long rrc_sys_timer_settime(int32_t id, int flags, const void *its, void *old)
{ return rrc_syscall4(SYS_timer_settime, id, flags, (long)its, (long)old); }
static inline long rrc_sys_rseq(uint64_t addr, uint32_t len, int flags, uint32_t sig)
{ return rrc_syscall4(SYS_rseq, (long)addr, len, flags, sig); }

/* credentials (common/creds.c): per thread, as the kernel has them */
static inline long rrc_sys_setgroups(int n, const uint32_t *g) { return rrc_syscall2(SYS_setgroups, n, (long)g); }
static inline long rrc_sys_getgroups(int n, uint32_t *g) { return rrc_syscall2(SYS_getgroups, n, (long)g); }
static inline long rrc_sys_setresuid(uint32_t r, uint32_t e, uint32_t s) { return rrc_syscall3(SYS_setresuid, r, e, s); }
static inline long rrc_sys_setresgid(uint32_t r, uint32_t e, uint32_t s) { return rrc_syscall3(SYS_setresgid, r, e, s); }
static inline long rrc_sys_getresuid(uint32_t *r, uint32_t *e, uint32_t *s) { return rrc_syscall3(SYS_getresuid, (long)r, (long)e, (long)s); }
static inline long rrc_sys_getresgid(uint32_t *r, uint32_t *e, uint32_t *s) { return rrc_syscall3(SYS_getresgid, (long)r, (long)e, (long)s); }
static inline long rrc_sys_setfsuid(uint32_t u) { return rrc_syscall1(SYS_setfsuid, u); }
static inline long rrc_sys_setfsgid(uint32_t g) { return rrc_syscall1(SYS_setfsgid, g); }
static inline long rrc_sys_capget(void *hdr, void *data) { return rrc_syscall2(SYS_capget, (long)hdr, (long)data); }
static inline long rrc_sys_capset(void *hdr, const void *data) { return rrc_syscall2(SYS_capset, (long)hdr, (long)data); }

/* Monotonic nanoseconds through the raw syscall (no vDSO: safe in the
 * restorer blob, where the vDSO moves). */
static inline uint64_t rrc_mono_ns(void)
{
	struct { long sec, nsec; } ts;
	rrc_sys_clock_gettime(1 /* CLOCK_MONOTONIC */, &ts);
	return (uint64_t)ts.sec * 1000000000ull + (uint64_t)ts.nsec;
}

#endif /* RRC_SYS_H */
