/* SPDX-License-Identifier: MIT
 *
 * Interposed libc entry points that keep the process inside what a
 * checkpoint can describe (architecture.md "Refusals"):
 *  - no second process: fork, vfork, posix_spawn(p), system, popen, daemon,
 *    clone without CLONE_THREAD fail with ENOSYS (the service keeps running,
 *    e.g. Redis answers BGSAVE with an error), as RRC's single-process
 *    prototype requires;
 *  - no writable MAP_SHARED memory (mmap, mmap64, mprotect: EPERM): the
 *    snapshot child would see the parent's later writes;
 *  - the park signal (64) stays deliverable: it is stripped from masks and
 *    cannot be caught or ignored by the application;
 *  - listen() backlogs are recorded for the FDS section.
 * Each refusal writes one line to stderr naming the cause. While the
 * library is passive (no RRC_CONTROL) every wrapper just calls libc.
 */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include "rrc_lib.h"

#define REAL(name) real_##name
#define RESOLVE(name) do { if (!REAL(name)) REAL(name) = dlsym(RTLD_NEXT, #name); } while (0)

static pid_t (*real_fork)(void);
static pid_t (*real_vfork)(void);
static int (*real_posix_spawn)(pid_t *, const char *, const posix_spawn_file_actions_t *,
			       const posix_spawnattr_t *, char *const[], char *const[]);
static int (*real_posix_spawnp)(pid_t *, const char *, const posix_spawn_file_actions_t *,
				const posix_spawnattr_t *, char *const[], char *const[]);
static int (*real_system)(const char *);
static FILE *(*real_popen)(const char *, const char *);
static int (*real_daemon)(int, int);
static int (*real_clone)(int (*)(void *), void *, int, void *, ...);
static void *(*real_mmap)(void *, size_t, int, int, int, off_t);
static void *(*real_mmap64)(void *, size_t, int, int, int, off_t);
static int (*real_mprotect)(void *, size_t, int);
static int (*real_sigprocmask)(int, const sigset_t *, sigset_t *);
static int (*real_pthread_sigmask)(int, const sigset_t *, sigset_t *);
static int (*real_sigsuspend)(const sigset_t *);
int (*rrc_real_sigaction)(int, const struct sigaction *, struct sigaction *);
static sighandler_t (*real_signal)(int, sighandler_t);
static int (*real_listen)(int, int);

/* Called by the constructor, so that later wrappers never call dlsym
 * (which may allocate) at a bad moment. */
void rrc_guards_resolve(void) RRC_HIDDEN;
void rrc_guards_resolve(void)
{
	RESOLVE(fork); RESOLVE(vfork); RESOLVE(posix_spawn); RESOLVE(posix_spawnp);
	RESOLVE(system); RESOLVE(popen); RESOLVE(daemon); RESOLVE(clone);
	RESOLVE(mmap); RESOLVE(mmap64); RESOLVE(mprotect);
	RESOLVE(sigprocmask); RESOLVE(pthread_sigmask); RESOLVE(sigsuspend);
	if (!rrc_real_sigaction)
		rrc_real_sigaction = dlsym(RTLD_NEXT, "sigaction");
	RESOLVE(signal); RESOLVE(listen);
}

static void refuse_log(const char *call, const char *why)
{
	char m[300];
	size_t l = rrc_bput(m, sizeof m, 0, "refusing ");
	l = rrc_bput(m, sizeof m, l, call);
	l = rrc_bput(m, sizeof m, l, ": ");
	rrc_bput(m, sizeof m, l, why);
	rrc_log(m);
}

static const char single[] = "a protected process must remain a single process";

pid_t fork(void)
{
	if (rrc_g.active) {
		refuse_log("fork()", single);
		errno = ENOSYS;
		return -1;
	}
	RESOLVE(fork);
	return real_fork();
}

pid_t vfork(void)
{
	if (rrc_g.active) {
		refuse_log("vfork()", single);
		errno = ENOSYS;
		return -1;
	}
	/* vfork cannot be wrapped transparently (the child would return into
	 * our frame); fork semantics are a safe substitute when passive. */
	RESOLVE(fork);
	return real_fork();
}

int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
		const posix_spawnattr_t *at, char *const argv[], char *const envp[])
{
	if (rrc_g.active) {
		refuse_log("posix_spawn()", single);
		return ENOSYS;
	}
	RESOLVE(posix_spawn);
	return real_posix_spawn(pid, path, fa, at, argv, envp);
}

int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
		 const posix_spawnattr_t *at, char *const argv[], char *const envp[])
{
	if (rrc_g.active) {
		refuse_log("posix_spawnp()", single);
		return ENOSYS;
	}
	RESOLVE(posix_spawnp);
	return real_posix_spawnp(pid, file, fa, at, argv, envp);
}

int system(const char *cmd)
{
	if (rrc_g.active) {
		refuse_log("system()", single);
		errno = ENOSYS;
		return -1;
	}
	RESOLVE(system);
	return real_system(cmd);
}

FILE *popen(const char *cmd, const char *type)
{
	if (rrc_g.active) {
		refuse_log("popen()", single);
		errno = ENOSYS;
		return 0;
	}
	RESOLVE(popen);
	return real_popen(cmd, type);
}

int daemon(int nochdir, int noclose)
{
	if (rrc_g.active) {
		refuse_log("daemon()", single);
		errno = ENOSYS;
		return -1;
	}
	RESOLVE(daemon);
	return real_daemon(nochdir, noclose);
}

int clone(int (*fn)(void *), void *stack, int flags, void *arg, ...)
{
	va_list ap;
	va_start(ap, arg);
	void *ptid = va_arg(ap, void *);
	void *tls = va_arg(ap, void *);
	void *ctid = va_arg(ap, void *);
	va_end(ap);
	if (rrc_g.active && !(flags & CLONE_THREAD)) {
		refuse_log("clone() without CLONE_THREAD", single);
		errno = ENOSYS;
		return -1;
	}
	RESOLVE(clone);
	return real_clone(fn, stack, flags, arg, ptid, tls, ctid);
}

static int shared_writable(int prot, int flags)
{
	int type = flags & 0x0f; /* MAP_TYPE: MAP_SHARED, MAP_PRIVATE, MAP_SHARED_VALIDATE */
	return (prot & PROT_WRITE) && (type == MAP_SHARED || type == 0x03 /* MAP_SHARED_VALIDATE */);
}

static const char nosharedw[] =
	"a protected process cannot have writable MAP_SHARED memory (the checkpoint copy would change under it)";

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	if (rrc_g.active && shared_writable(prot, flags)) {
		refuse_log("mmap(MAP_SHARED, PROT_WRITE)", nosharedw);
		errno = EPERM;
		return MAP_FAILED;
	}
	if (!real_mmap) {
		/* before the constructor (another library's constructor): dlsym
		 * could itself mmap, so use the raw call */
		long r = rrc_sys_mmap(addr, len, prot, flags, fd, off);
		if (r < 0 && r > -4096) {
			errno = (int)-r;
			return MAP_FAILED;
		}
		return (void *)r;
	}
	return real_mmap(addr, len, prot, flags, fd, off);
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return mmap(addr, len, prot, flags, fd, off);
}

/* Does [addr, addr+len) touch a MAP_SHARED VMA? */
static int range_has_shared(void *addr, size_t len)
{
	struct procmap_query q;
	if (rrc_g.maps_fd < 0 || rrc_vma_query(rrc_g.maps_fd, (uint64_t)addr, PROCMAP_QUERY_VMA_SHARED, &q, 0, 0) < 0)
		return 0;
	return q.vma_start < (uint64_t)addr + len;
}

int mprotect(void *addr, size_t len, int prot)
{
	if (rrc_g.active && (prot & PROT_WRITE) && range_has_shared(addr, len)) {
		refuse_log("mprotect(PROT_WRITE) of a MAP_SHARED mapping", nosharedw);
		errno = EPERM;
		return -1;
	}
	if (!real_mprotect) {
		long r = rrc_sys_mprotect(addr, len, prot);
		if (r < 0) {
			errno = (int)-r;
			return -1;
		}
		return 0;
	}
	return real_mprotect(addr, len, prot);
}

/* ---- the park signal stays deliverable ---- */

static const sigset_t *strip(int how, const sigset_t *set, sigset_t *copy)
{
	if (!rrc_g.active || !set || how == SIG_UNBLOCK || !sigismember(set, RRC_PARK_SIG))
		return set;
	*copy = *set;
	sigdelset(copy, RRC_PARK_SIG);
	return copy;
}

int sigprocmask(int how, const sigset_t *set, sigset_t *old)
{
	sigset_t c;
	RESOLVE(sigprocmask);
	return real_sigprocmask(how, strip(how, set, &c), old);
}

int pthread_sigmask(int how, const sigset_t *set, sigset_t *old)
{
	sigset_t c;
	RESOLVE(pthread_sigmask);
	return real_pthread_sigmask(how, strip(how, set, &c), old);
}

int sigsuspend(const sigset_t *mask)
{
	sigset_t c;
	RESOLVE(sigsuspend);
	return real_sigsuspend(strip(SIG_SETMASK, mask, &c));
}

int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	if (!rrc_real_sigaction)
		rrc_real_sigaction = dlsym(RTLD_NEXT, "sigaction");
	if (rrc_g.active && sig == RRC_PARK_SIG && act) {
		refuse_log("sigaction(64)", "signal 64 (SIGRTMAX) is reserved by rrc to park threads");
		errno = EINVAL;
		return -1;
	}
	if (rrc_g.active && act && sigismember(&act->sa_mask, RRC_PARK_SIG)) {
		struct sigaction a = *act;
		sigdelset(&a.sa_mask, RRC_PARK_SIG);
		return rrc_real_sigaction(sig, &a, old);
	}
	return rrc_real_sigaction(sig, act, old);
}

sighandler_t signal(int sig, sighandler_t h)
{
	if (rrc_g.active && sig == RRC_PARK_SIG) {
		refuse_log("signal(64)", "signal 64 (SIGRTMAX) is reserved by rrc to park threads");
		errno = EINVAL;
		return SIG_ERR;
	}
	RESOLVE(signal);
	return real_signal(sig, h);
}

int listen(int fd, int backlog)
{
	RESOLVE(listen);
	int r = real_listen(fd, backlog);
	if (r == 0 && fd >= 0 && fd < RRC_MAX_FDS) {
		rrc_g.backlog[fd] = backlog > 0 ? backlog : 1;
		if (rrc_s && rrc_s->helper.box) /* the pause helper's copy (pause-helper.c) */
			rrc_s->helper.box->backlog[fd] = rrc_g.backlog[fd];
	}
	return r;
}
