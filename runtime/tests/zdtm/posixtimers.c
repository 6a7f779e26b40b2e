/* zdtm: POSIX timers come back with their ids, clocks, notifications and
 * the time they had left.
 *
 *   A  CLOCK_MONOTONIC, SIGUSR1 (blocked) with value 1234, once in 3600 s
 *   B  CLOCK_REALTIME, no notification, every 50 s, first in 100 s
 *   -  a timer created and deleted (the ids after it must stay as they are)
 *   C  CLOCK_MONOTONIC, SIGRTMIN+3 with value 77 to thread W only, every 20 ms
 * Verify: timer_gettime of A, B, C through the timer_t the program holds
 * (a timer created again with another id fails here), their settings; the
 * kernel's view (/proc/self/timers) of A's and C's notification; then W
 * gets C's signal again, with its value and SI_TIMER, at least 3 times
 * within 2 s. ZDTM_CORRUPT=1: A is deleted first.
 */
#include <pthread.h>
#include <signal.h>
#include "zdtm.h"

static timer_t ta, tb, tc;
static volatile pid_t w_tid;
static volatile int w_ticks, w_bad, w_counting;

static void on_tick(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)uc;
	if (!w_counting)
		return;
	if (si->si_code != SI_TIMER || si->si_value.sival_int != 77 || (pid_t)syscall(SYS_gettid) != w_tid)
		w_bad = 1;
	w_ticks++;
}

static void *worker(void *arg)
{
	(void)arg;
	w_tid = (pid_t)syscall(SYS_gettid);
	for (;;)
		pause();
	return NULL;
}

static double secs(struct timespec t)
{
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* The /proc/self/timers block of timer id, "" if none. */
static void block_of(long id, char *out, size_t len)
{
	char buf[8192];
	FILE *f = fopen("/proc/self/timers", "r");
	zdtm_check(f != NULL, "open /proc/self/timers");
	size_t n = fread(buf, 1, sizeof buf - 2, f);
	fclose(f);
	buf[n] = 0;
	char key[32];
	snprintf(key, sizeof key, "\nID: %ld\n", id);
	memmove(buf + 1, buf, n + 1);
	buf[0] = '\n';
	char *p = strstr(buf, key);
	out[0] = 0;
	if (!p)
		return;
	p++;
	char *end = strstr(p, "\nID: ");
	size_t l = end ? (size_t)(end - p) : strlen(p);
	if (l >= len)
		l = len - 1;
	memcpy(out, p, l);
	out[l] = 0;
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	sigset_t usr1;
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &usr1, NULL);
	struct sigaction sa = { .sa_sigaction = on_tick, .sa_flags = SA_SIGINFO | SA_RESTART };
	zdtm_check(sigaction(SIGRTMIN + 3, &sa, NULL) == 0, "sigaction");
	pthread_t w;
	zdtm_check(pthread_create(&w, NULL, worker, NULL) == 0, "pthread_create");
	while (!w_tid)
		zdtm_sleep_ms(1);

	struct sigevent ea = { .sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGUSR1, .sigev_value.sival_int = 1234 };
	zdtm_check(timer_create(CLOCK_MONOTONIC, &ea, &ta) == 0, "timer_create A");
	struct itimerspec once = { { 0, 0 }, { 3600, 0 } };
	zdtm_check(timer_settime(ta, 0, &once, NULL) == 0, "timer_settime A");
	struct sigevent eb = { .sigev_notify = SIGEV_NONE };
	zdtm_check(timer_create(CLOCK_REALTIME, &eb, &tb) == 0, "timer_create B");
	struct itimerspec every = { { 50, 0 }, { 100, 0 } };
	zdtm_check(timer_settime(tb, 0, &every, NULL) == 0, "timer_settime B");
	timer_t gone;
	zdtm_check(timer_create(CLOCK_MONOTONIC, &eb, &gone) == 0 && timer_delete(gone) == 0, "a deleted timer");
	struct sigevent ec = { .sigev_notify = SIGEV_THREAD_ID, .sigev_signo = SIGRTMIN + 3, .sigev_value.sival_int = 77 };
	ec._sigev_un._tid = w_tid;
	zdtm_check(timer_create(CLOCK_MONOTONIC, &ec, &tc) == 0, "timer_create C");
	struct itimerspec tick = { { 0, 20000000 }, { 0, 20000000 } };
	zdtm_check(timer_settime(tc, 0, &tick, NULL) == 0, "timer_settime C");

	zdtm_ready();
	zdtm_wait_verify();

	if (zdtm_corrupt)
		timer_delete(ta);
	struct itimerspec a, b, c;
	if (timer_gettime(ta, &a) || timer_gettime(tb, &b) || timer_gettime(tc, &c))
		zdtm_fail("timer_gettime through the program's timer_t: %s", strerror(errno));
	if (secs(a.it_interval) != 0 || secs(a.it_value) <= 3000 || secs(a.it_value) > 3600)
		zdtm_fail("A: every %.3f s, %.3f s left; not once with (3000, 3600] s left", secs(a.it_interval), secs(a.it_value));
	if (secs(b.it_interval) != 50 || secs(b.it_value) <= 0 || secs(b.it_value) > 100)
		zdtm_fail("B: every %.3f s, %.3f s left; not every 50 s with (0, 100] s left", secs(b.it_interval), secs(b.it_value));
	if (secs(c.it_interval) != 0.02)
		zdtm_fail("C: every %.3f s, not every 0.02 s", secs(c.it_interval));
	char blk[512], want[64];
	block_of((long)(intptr_t)ta, blk, sizeof blk);
	if (!strstr(blk, "signal: 10/00000000000004d2") || !strstr(blk, "notify: signal/pid."))
		zdtm_fail("A in /proc/self/timers: %s", blk);
	block_of((long)(intptr_t)tc, blk, sizeof blk);
	snprintf(want, sizeof want, "notify: signal/tid.%d", (int)w_tid);
	if (!strstr(blk, want))
		zdtm_fail("C in /proc/self/timers, not to thread %d: %s", (int)w_tid, blk);
	w_counting = 1;
	for (int i = 0; i < 200 && w_ticks < 3; i++)
		zdtm_sleep_ms(10);
	if (w_ticks < 3)
		zdtm_fail("C fired %d times in 2 s, not every 20 ms", w_ticks);
	if (w_bad)
		zdtm_fail("C's signal reached another thread, or without its value or SI_TIMER");
	zdtm_pass();
}
