/* zdtm: signal handlers, masks and the alternate stack.
 *
 * Handlers: SIGUSR1 (SA_SIGINFO | SA_RESTART, blocks SIGUSR2 and SIGTERM),
 * SIGUSR2 (SA_NODEFER | SA_RESETHAND, blocks SIGINT), SIGRTMIN+3
 * (SA_SIGINFO | SA_ONSTACK on a sigaltstack), SIGPIPE ignored, SIGHUP
 * default, SIGWINCH whose sa_mask changes every round. The main thread's
 * mask changes every round; four threads each block their own set with
 * pthread_sigmask and sleep.
 *
 * Verify: sigaction(sig, NULL, &old) and pthread_sigmask(0, NULL, &cur)
 * against what was set (rrc's own park signal, SIGRTMAX, is left out: the
 * library keeps it unblocked), sigaltstack, then delivery: a queued SIGUSR1
 * reaches its handler with its value and with SIGUSR2/SIGTERM blocked,
 * SIGUSR2 resets itself to SIG_DFL, SIGRTMIN+3 runs on the alternate stack.
 */
#include <pthread.h>
#include <signal.h>
#include "zdtm.h"

#define NT 4
static volatile int stop;
static char terr[NT][256];
static uint8_t altstack[64 << 10];

static volatile int usr1_got, usr1_value, usr1_mask_ok, usr1_code;
static volatile int usr2_got, rt3_got, rt3_onstack;

static void h_info(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	if (sig == SIGUSR1) {
		sigset_t cur;
		pthread_sigmask(SIG_BLOCK, NULL, &cur);
		usr1_mask_ok = sigismember(&cur, SIGUSR2) && sigismember(&cur, SIGTERM) && sigismember(&cur, SIGUSR1);
		usr1_value = si->si_value.sival_int;
		usr1_code = si->si_code;
		usr1_got++;
	} else {
		int local;
		rt3_onstack = (uint8_t *)&local >= altstack && (uint8_t *)&local < altstack + sizeof(altstack);
		rt3_got++;
	}
}

static void h_plain(int sig) { if (sig == SIGUSR2) usr2_got++; }

static void set(int sig, void *h, int flags, const int *mask)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	if (flags & SA_SIGINFO)
		sa.sa_sigaction = h;
	else
		sa.sa_handler = h;
	sa.sa_flags = flags;
	sigemptyset(&sa.sa_mask);
	for (; mask && *mask; mask++)
		sigaddset(&sa.sa_mask, *mask);
	zdtm_check(sigaction(sig, &sa, NULL) == 0, "sigaction");
}

#define FLAGS_CHECKED (SA_SIGINFO | SA_RESTART | SA_NODEFER | SA_RESETHAND | SA_ONSTACK)

/* Compares signals 1..63 (64 = SIGRTMAX is rrc's, 32/33 are glibc's). */
static int same_set(const sigset_t *a, const sigset_t *b, int *which)
{
	for (int s = 1; s < 64; s++) {
		if (s == 32 || s == 33)
			continue;
		if (sigismember(a, s) != sigismember(b, s)) {
			*which = s;
			return 0;
		}
	}
	return 1;
}

static void mkset(sigset_t *s, const int *sigs)
{
	sigemptyset(s);
	for (; *sigs; sigs++)
		sigaddset(s, *sigs);
}

static void expect_action(int sig, void *h, int flags, const int *mask)
{
	struct sigaction old;
	zdtm_check(sigaction(sig, NULL, &old) == 0, "sigaction(NULL)");
	void *got = (flags & SA_SIGINFO) ? (void *)old.sa_sigaction : (void *)old.sa_handler;
	if (got != h)
		zdtm_fail("signal %d: handler %p, expected %p", sig, got, h);
	if ((old.sa_flags & FLAGS_CHECKED) != (flags & FLAGS_CHECKED))
		zdtm_fail("signal %d: flags %#x, expected %#x", sig, old.sa_flags & FLAGS_CHECKED, flags & FLAGS_CHECKED);
	sigset_t want;
	mkset(&want, mask);
	int which;
	if (!same_set(&old.sa_mask, &want, &which))
		zdtm_fail("signal %d: sa_mask differs at signal %d", sig, which);
}

static void thread_set(int t, sigset_t *s)
{
	sigemptyset(s);
	if (t & 1) sigaddset(s, SIGUSR2);
	if (t & 2) sigaddset(s, SIGTERM);
	sigaddset(s, SIGRTMIN + t);
	sigaddset(s, SIGALRM);
	sigaddset(s, SIGCHLD);
}

static void *thread(void *arg)
{
	int t = (int)(long)arg;
	sigset_t s, cur;
	thread_set(t, &s);
	pthread_sigmask(SIG_SETMASK, &s, NULL);
	while (!stop)
		zdtm_sleep_ms(3);
	pthread_sigmask(SIG_BLOCK, NULL, &cur);
	int which;
	if (!same_set(&cur, &s, &which))
		snprintf(terr[t], sizeof(terr[t]), "thread %d: signal mask differs at signal %d (%s)", t, which,
			 sigismember(&cur, which) ? "blocked, should not be" : "not blocked, should be");
	return NULL;
}

static void main_mask(long r, sigset_t *s)
{
	sigemptyset(s);
	sigaddset(s, SIGRTMIN + 10 + (int)(r % 8));
	if (r & 1)
		sigaddset(s, SIGQUIT);
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	static const int m_usr1[] = { SIGUSR2, SIGTERM, 0 }, m_usr2[] = { SIGINT, 0 }, m_none[] = { 0 };
	int m_rt3[] = { SIGRTMIN + 5, 0 };
	stack_t ss = { .ss_sp = altstack, .ss_size = sizeof(altstack), .ss_flags = 0 };
	zdtm_check(sigaltstack(&ss, NULL) == 0, "sigaltstack");
	set(SIGUSR1, (void *)h_info, SA_SIGINFO | SA_RESTART, m_usr1);
	set(SIGUSR2, (void *)h_plain, SA_NODEFER | SA_RESETHAND, m_usr2);
	set(SIGRTMIN + 3, (void *)h_info, SA_SIGINFO | SA_ONSTACK, m_rt3);
	set(SIGPIPE, (void *)SIG_IGN, 0, m_none);
	set(SIGHUP, (void *)SIG_DFL, 0, m_none);
	pthread_t th[NT];
	for (int t = 0; t < NT; t++)
		zdtm_check(pthread_create(&th[t], NULL, thread, (void *)(long)t) == 0, "pthread_create");
	zdtm_ready();
	long r = 1, R = 0;
	while (!zdtm_should_verify()) {
		int wm[] = { SIGRTMIN + 20 + (int)(r % 6), 0 };
		set(SIGWINCH, (void *)h_plain, SA_RESTART, wm);
		sigset_t s;
		main_mask(r, &s);
		pthread_sigmask(SIG_SETMASK, &s, NULL);
		R = r++;
		zdtm_sleep_ms(2);
	}
	if (zdtm_corrupt)
		set(SIGUSR1, (void *)h_info, SA_SIGINFO, m_usr1);

	stop = 1;
	for (int t = 0; t < NT; t++) {
		if (zdtm_join(th[t], NULL, 5000) != 0)
			zdtm_fail("thread %d did not stop", t);
		if (terr[t][0])
			zdtm_fail("%s", terr[t]);
	}
	expect_action(SIGUSR1, (void *)h_info, SA_SIGINFO | SA_RESTART, m_usr1);
	expect_action(SIGUSR2, (void *)h_plain, SA_NODEFER | SA_RESETHAND, m_usr2);
	expect_action(SIGRTMIN + 3, (void *)h_info, SA_SIGINFO | SA_ONSTACK, m_rt3);
	expect_action(SIGPIPE, (void *)SIG_IGN, 0, m_none);
	expect_action(SIGHUP, (void *)SIG_DFL, 0, m_none);
	expect_action(SIGTERM, (void *)SIG_DFL, 0, m_none);
	int wm[] = { SIGRTMIN + 20 + (int)(R % 6), 0 };
	expect_action(SIGWINCH, (void *)h_plain, SA_RESTART, wm);
	sigset_t want, cur;
	main_mask(R, &want);
	pthread_sigmask(SIG_BLOCK, NULL, &cur);
	int which;
	if (!same_set(&cur, &want, &which))
		zdtm_fail("main thread: signal mask differs at signal %d after round %ld", which, R);
	stack_t os;
	zdtm_check(sigaltstack(NULL, &os) == 0, "sigaltstack(NULL)");
	if (os.ss_sp != altstack || os.ss_size != sizeof(altstack) || os.ss_flags != 0)
		zdtm_fail("sigaltstack is %p+%zu flags %d, expected %p+%zu", os.ss_sp, os.ss_size, os.ss_flags,
			  (void *)altstack, sizeof(altstack));

	/* delivery */
	union sigval v = { .sival_int = 0x5151 };
	zdtm_check(pthread_sigqueue(pthread_self(), SIGUSR1, v) == 0, "pthread_sigqueue");
	if (usr1_got != 1 || usr1_value != 0x5151 || usr1_code != SI_QUEUE || !usr1_mask_ok)
		zdtm_fail("SIGUSR1 handler: called %d times, value %#x, code %d, sa_mask applied %d", usr1_got,
			  usr1_value, usr1_code, usr1_mask_ok);
	raise(SIGUSR2);
	struct sigaction old;
	sigaction(SIGUSR2, NULL, &old);
	if (usr2_got != 1 || old.sa_handler != SIG_DFL)
		zdtm_fail("SIGUSR2: handler called %d times, then handler %p (SA_RESETHAND should give SIG_DFL)",
			  usr2_got, (void *)old.sa_handler);
	raise(SIGRTMIN + 3);
	if (rt3_got != 1 || !rt3_onstack)
		zdtm_fail("SIGRTMIN+3: handler called %d times, on the alternate stack: %d", rt3_got, rt3_onstack);
	zdtm_pass();
}
