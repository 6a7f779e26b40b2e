/* zdtm: signal-driven I/O (O_ASYNC) comes back with its owner and its
 * signal (F_SETOWN, F_SETOWN_EX, F_SETSIG); before, a process doing it
 * was refused.
 *
 * Set up, at fixed numbers:
 *   A  20  a pipe's read end (its write end at AW 21): O_ASYNC and
 *          O_NONBLOCK, owner this process (F_SETOWN getpid()), signal
 *          SIGRTMIN+1 (F_SETSIG), armed through A
 *   D  22  dup(A): the same open file description, so the same owner,
 *          signal and flags
 *   S  23  a unix stream socketpair's end (the other at SW 24): O_ASYNC,
 *          owner the thread T (F_SETOWN_EX F_OWNER_TID), the default
 *          SIGIO; T waits for it with sigwaitinfo and reports
 *   G  25  another pipe's read end (its write end at GW 26): O_ASYNC,
 *          owner the process's own group (setpgid(0, 0), then F_SETOWN
 *          -getpid()), signal SIGRTMIN+2
 * SIGRTMIN+1 and +2 are blocked in every thread, SIGIO in T; the main
 * thread handles SIGIO, so a SIGIO sent to the process rather than to T
 * would show there.
 * Verify: F_GETOWN_EX, F_GETSIG and O_ASYNC (F_GETFL) of every fd as set
 * (D's as A's), the process its group's leader; no signal pending; then
 * a byte written to AW makes SIGRTMIN+1 pending with si_fd A, si_code
 * POLL_IN and POLLIN in si_band (sigtimedwait), one to GW SIGRTMIN+2 with
 * si_fd G, and one to SW wakes T with SIGIO, the main thread getting none.
 * ZDTM_CORRUPT=1: S's owner becomes the main thread first.
 */
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/socket.h>
#include "zdtm.h"

#define A 20
#define AW 21
#define D 22
#define S 23
#define SW 24
#define G 25
#define GW 26

static volatile sig_atomic_t main_sigio;
static sem_t started;
static pid_t t_tid;
/* T's report, read once T has ended (pthread_timedjoin_np) */
static int t_signo, t_errno;
static pid_t t_on;

static void on_sigio(int sig)
{
	(void)sig;
	main_sigio++;
}

static void *waiter(void *arg)
{
	(void)arg;
	sigset_t io;
	sigemptyset(&io);
	sigaddset(&io, SIGIO);
	t_tid = zdtm_gettid();
	sem_post(&started);
	siginfo_t si;
	int r;
	/* the dump's park signal, and the restore's return to it, interrupt the wait */
	while ((r = sigwaitinfo(&io, &si)) < 0 && errno == EINTR)
		;
	t_signo = r;
	t_errno = r < 0 ? errno : 0;
	t_on = zdtm_gettid();
	return NULL;
}

static void at(int fd, int target)
{
	zdtm_check(fd >= 0 && dup2(fd, target) == target, "dup2 to a fixed number");
	close(fd);
}

static void async_owner(int fd, int type, pid_t id, int sig, const char *what)
{
	struct f_owner_ex o = { type, id };
	zdtm_check(fcntl(fd, F_SETOWN_EX, &o) == 0, what);
	zdtm_check(fcntl(fd, F_SETSIG, sig) == 0, "F_SETSIG");
	zdtm_check(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_ASYNC) == 0, "F_SETFL O_ASYNC");
}

static void expect(int fd, const char *name, int type, pid_t id, int sig)
{
	struct f_owner_ex o = { -1, -1 };
	zdtm_check(fcntl(fd, F_GETOWN_EX, &o) == 0, "F_GETOWN_EX");
	int s = fcntl(fd, F_GETSIG), fl = fcntl(fd, F_GETFL);
	if ((int)o.type != type || o.pid != id)
		zdtm_fail("%s (fd %d): owner type %d id %d, expected type %d id %d", name, fd, (int)o.type, o.pid, type,
			  id);
	if (s != sig)
		zdtm_fail("%s (fd %d): F_GETSIG %d, expected %d", name, fd, s, sig);
	if (fl < 0 || !(fl & O_ASYNC))
		zdtm_fail("%s (fd %d): no O_ASYNC (flags %#x)", name, fd, fl);
}

/* A byte into w makes sig pending for the process, from fd r. */
static void delivered(int w, int r, int sig, const char *name)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, sig);
	zdtm_check(write(w, "x", 1) == 1, "write a byte");
	siginfo_t si;
	struct timespec two = { 2, 0 };
	int got;
	while ((got = sigtimedwait(&set, &si, &two)) < 0 && errno == EINTR)
		;
	if (got != sig)
		zdtm_fail("%s: no signal %d after a write (sigtimedwait: %d, errno %d)", name, sig, got, errno);
	if (si.si_fd != r || si.si_code != POLL_IN || !(si.si_band & POLLIN))
		zdtm_fail("%s: signal %d with si_fd %d, si_code %d, si_band %#lx: expected si_fd %d, si_code POLL_IN "
			  "(%d), POLLIN", name, sig, si.si_fd, si.si_code, (unsigned long)si.si_band, r, POLL_IN);
	char c;
	zdtm_check(read(r, &c, 1) == 1, "read the byte back");
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	int rt1 = SIGRTMIN + 1, rt2 = SIGRTMIN + 2;
	sigset_t block;
	sigemptyset(&block);
	sigaddset(&block, rt1);
	sigaddset(&block, rt2);
	sigaddset(&block, SIGIO);
	zdtm_check(sigprocmask(SIG_BLOCK, &block, NULL) == 0, "block the signals");
	/* T inherits all three blocked */
	pthread_t t;
	zdtm_check(sem_init(&started, 0, 0) == 0, "sem_init");
	zdtm_check(pthread_create(&t, NULL, waiter, NULL) == 0, "pthread_create");
	while (sem_wait(&started) < 0)
		zdtm_check(errno == EINTR, "sem_wait");
	struct sigaction sa = { .sa_handler = on_sigio, .sa_flags = SA_RESTART };
	zdtm_check(sigaction(SIGIO, &sa, NULL) == 0, "SIGIO handler");
	sigset_t io;
	sigemptyset(&io);
	sigaddset(&io, SIGIO);
	zdtm_check(sigprocmask(SIG_UNBLOCK, &io, NULL) == 0, "unblock SIGIO in the main thread");

	int p[2], sv[2];
	zdtm_check(pipe2(p, O_NONBLOCK) == 0, "pipe");
	at(p[0], A);
	at(p[1], AW);
	zdtm_check(fcntl(A, F_SETOWN, getpid()) == 0, "F_SETOWN getpid()");
	zdtm_check(fcntl(A, F_SETSIG, rt1) == 0, "F_SETSIG SIGRTMIN+1");
	zdtm_check(fcntl(A, F_SETFL, O_ASYNC | O_NONBLOCK) == 0, "F_SETFL O_ASYNC");
	zdtm_check(dup2(A, D) == D, "dup A to D");

	zdtm_check(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
	at(sv[0], S);
	at(sv[1], SW);
	async_owner(S, F_OWNER_TID, t_tid, 0, "F_SETOWN_EX F_OWNER_TID");

	zdtm_check(setpgid(0, 0) == 0, "setpgid(0, 0)");
	zdtm_check(pipe2(p, O_NONBLOCK) == 0, "pipe");
	at(p[0], G);
	at(p[1], GW);
	async_owner(G, F_OWNER_PGRP, getpid(), rt2, "F_SETOWN_EX F_OWNER_PGRP");

	zdtm_ready();
	zdtm_wait_verify();
	if (zdtm_corrupt)
		async_owner(S, F_OWNER_TID, zdtm_gettid(), 0, "corrupt");

	expect(A, "A", F_OWNER_PID, getpid(), rt1);
	expect(D, "D = dup(A)", F_OWNER_PID, getpid(), rt1);
	expect(S, "S", F_OWNER_TID, t_tid, 0);
	expect(G, "G", F_OWNER_PGRP, getpid(), rt2);
	if (getpgid(0) != getpid())
		zdtm_fail("process group %d, not its own (%d)", (int)getpgid(0), (int)getpid());
	sigset_t pending;
	zdtm_check(sigpending(&pending) == 0, "sigpending");
	if (sigismember(&pending, rt1) || sigismember(&pending, rt2) || main_sigio)
		zdtm_fail("a signal before any write: SIGRTMIN+1 %d, SIGRTMIN+2 %d, SIGIO in the main thread %d",
			  sigismember(&pending, rt1), sigismember(&pending, rt2), (int)main_sigio);

	delivered(AW, A, rt1, "A");
	delivered(GW, G, rt2, "G");

	zdtm_check(write(SW, "x", 1) == 1, "write a byte to SW");
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 2;
	int j = pthread_timedjoin_np(t, NULL, &until);
	if (j)
		zdtm_fail("S: thread %d did not get SIGIO after a write (join: %d)", (int)t_tid, j);
	if (t_signo != SIGIO || t_on != t_tid)
		zdtm_fail("S: thread %d's sigwaitinfo gave %d (errno %d), expected SIGIO %d", (int)t_on, t_signo,
			  t_errno, SIGIO);
	zdtm_sleep_ms(20);
	if (main_sigio)
		zdtm_fail("S: the main thread got SIGIO %d time(s): it went to the process, not to thread %d",
			  (int)main_sigio, (int)t_tid);
	zdtm_pass();
}
