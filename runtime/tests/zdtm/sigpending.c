/* zdtm: signals pending at the snapshot come back pending, each for the
 * thread or the process it was sent to, with its siginfo.
 *
 * Every thread blocks SIGUSR1, SIGUSR2, SIGHUP, SIGRTMIN+1, SIGRTMIN+2.
 * Then, before ready:
 *   - the main thread: raise(SIGUSR1)           its own
 *   - the process: kill(getpid(), SIGHUP)         the process's
 *   - the process: sigqueue SIGRTMIN+1 with 7, 8  the process's, SI_QUEUE, in order
 *   - thread T: pthread_sigqueue SIGRTMIN+2, 42   T's, SI_QUEUE
 *   - thread T: pthread_kill(SIGUSR2)             T's
 * (the si_code of raise, kill and pthread_kill is whatever this kernel
 * gives: learnt at start from the same calls with SIGURG)
 * Verify: /proc/self/task/TID/status of the main thread and of T show
 * those sets as the thread's (SigPnd) and the process's (ShdPnd), then
 * sigtimedwait takes each with the right code, sender and value, the
 * two SIGRTMIN+1 in the order sent, and nothing else is pending.
 * ZDTM_CORRUPT=1: the main thread takes its SIGUSR1 before verifying.
 */
#include <pthread.h>
#include <signal.h>
#include "zdtm.h"

static pthread_t worker;
/* the si_code this kernel gives raise(), kill() and pthread_kill() */
static int code_raise, code_kill, code_pthread_kill;
static volatile pid_t worker_tid;
static volatile int worker_go, worker_done;
static char worker_err[256];

static void block_all_five(void)
{
	sigset_t s;
	sigemptyset(&s);
	sigaddset(&s, SIGUSR1);
	sigaddset(&s, SIGUSR2);
	sigaddset(&s, SIGHUP);
	sigaddset(&s, SIGRTMIN + 1);
	sigaddset(&s, SIGRTMIN + 2);
	pthread_sigmask(SIG_BLOCK, &s, NULL);
}

static uint64_t bit(int sig)
{
	return 1ull << (sig - 1);
}

/* SigPnd and ShdPnd of a thread. */
static void pending_of(pid_t tid, uint64_t *own, uint64_t *shared)
{
	char path[64], line[256];
	snprintf(path, sizeof path, "/proc/self/task/%d/status", (int)tid);
	FILE *f = fopen(path, "r");
	zdtm_check(f != NULL, "open a thread's status");
	*own = *shared = ~0ull;
	while (fgets(line, sizeof line, f)) {
		unsigned long long v;
		if (sscanf(line, "SigPnd: %llx", &v) == 1)
			*own = v;
		else if (sscanf(line, "ShdPnd: %llx", &v) == 1)
			*shared = v;
	}
	fclose(f);
}

/* Takes sig now: its code, sender and value must be these. */
static const char *take(int sig, int code, int value)
{
	static char why[200];
	sigset_t s;
	sigemptyset(&s);
	sigaddset(&s, sig);
	siginfo_t si;
	struct timespec now = { 0, 0 };
	if (sigtimedwait(&s, &si, &now) != sig) {
		snprintf(why, sizeof why, "signal %d is not pending", sig);
		return why;
	}
	if (si.si_code != code || si.si_pid != getpid() || (value >= 0 && si.si_value.sival_int != value)) {
		snprintf(why, sizeof why, "signal %d: code %d pid %d value %d, not code %d pid %d value %d", sig,
			 si.si_code, (int)si.si_pid, si.si_value.sival_int, code, (int)getpid(), value);
		return why;
	}
	return NULL;
}

static void *work(void *arg)
{
	(void)arg;
	block_all_five();
	worker_tid = (pid_t)syscall(SYS_gettid);
	while (!worker_go)
		zdtm_sleep_ms(5);
	uint64_t own, shared;
	pending_of(worker_tid, &own, &shared);
	const char *e = NULL;
	if (own != (bit(SIGUSR2) | bit(SIGRTMIN + 2)))
		snprintf(worker_err, sizeof worker_err, "thread T: own pending %llx, not SIGUSR2 and SIGRTMIN+2",
			 (unsigned long long)own);
	else if ((e = take(SIGRTMIN + 2, SI_QUEUE, 42)) || (e = take(SIGUSR2, code_pthread_kill, -1)))
		snprintf(worker_err, sizeof worker_err, "thread T: %s", e);
	worker_done = 1;
	return NULL;
}

/* The si_code the kernel gives a signal sent by send(). */
static int code_of(void (*send)(void))
{
	sigset_t s;
	sigemptyset(&s);
	sigaddset(&s, SIGURG);
	pthread_sigmask(SIG_BLOCK, &s, NULL);
	send();
	siginfo_t si;
	zdtm_check(sigwaitinfo(&s, &si) == SIGURG, "sigwaitinfo SIGURG");
	return si.si_code;
}

static void send_raise(void) { raise(SIGURG); }
static void send_kill(void) { kill(getpid(), SIGURG); }
static void send_pthread_kill(void) { pthread_kill(pthread_self(), SIGURG); }

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	code_raise = code_of(send_raise);
	code_kill = code_of(send_kill);
	code_pthread_kill = code_of(send_pthread_kill);
	block_all_five();
	zdtm_check(pthread_create(&worker, NULL, work, NULL) == 0, "pthread_create");
	while (!worker_tid)
		zdtm_sleep_ms(1);
	zdtm_check(raise(SIGUSR1) == 0, "raise SIGUSR1");
	zdtm_check(kill(getpid(), SIGHUP) == 0, "kill SIGHUP");
	zdtm_check(sigqueue(getpid(), SIGRTMIN + 1, (union sigval){ .sival_int = 7 }) == 0, "sigqueue 7");
	zdtm_check(sigqueue(getpid(), SIGRTMIN + 1, (union sigval){ .sival_int = 8 }) == 0, "sigqueue 8");
	zdtm_check(pthread_sigqueue(worker, SIGRTMIN + 2, (union sigval){ .sival_int = 42 }) == 0, "pthread_sigqueue");
	zdtm_check(pthread_kill(worker, SIGUSR2) == 0, "pthread_kill SIGUSR2");

	zdtm_ready();
	zdtm_wait_verify();

	if (zdtm_corrupt) {
		sigset_t s;
		int sig;
		sigemptyset(&s);
		sigaddset(&s, SIGUSR1);
		sigwait(&s, &sig);
	}
	uint64_t own, shared;
	pending_of((pid_t)getpid(), &own, &shared);
	if (own != bit(SIGUSR1))
		zdtm_fail("main thread: own pending %llx, not SIGUSR1", (unsigned long long)own);
	if (shared != (bit(SIGHUP) | bit(SIGRTMIN + 1)))
		zdtm_fail("the process's pending %llx, not SIGHUP and SIGRTMIN+1", (unsigned long long)shared);
	const char *e;
	if ((e = take(SIGUSR1, code_raise, -1)) || (e = take(SIGHUP, code_kill, -1)) || (e = take(SIGRTMIN + 1, SI_QUEUE, 7)) ||
	    (e = take(SIGRTMIN + 1, SI_QUEUE, 8)))
		zdtm_fail("main thread: %s", e);
	worker_go = 1;
	while (!worker_done)
		zdtm_sleep_ms(1);
	if (worker_err[0])
		zdtm_fail("%s", worker_err);
	uint64_t left = 0;
	sigset_t p;
	sigpending(&p);
	for (int sig = 1; sig < 64; sig++)
		if (sig != SIGRTMAX && sigismember(&p, sig))
			left |= bit(sig);
	if (left)
		zdtm_fail("still pending after taking them all: %llx", (unsigned long long)left);
	zdtm_pass();
}
