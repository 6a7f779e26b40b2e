/* zdtm: sleeps and readiness waits that dumps and a restore fall into.
 *
 * One thread per call loops on a wait of known length with nothing to
 * wake it: nanosleep, clock_nanosleep (relative), usleep, sleep,
 * epoll_wait, epoll_pwait, epoll_pwait2, poll, ppoll, select, pselect. Each
 * wait must return as it would undisturbed (0, no EINTR, nothing ready)
 * and last at least what it asked for, however many park signals land in
 * it and although the process is killed and restored in the middle of one
 * (librrc's waits.c). A wait that came back early or with EINTR is
 * remembered with its thread and round.
 *
 * The application's own signals still interrupt: at verify, SIGUSR1 (no
 * SA_RESTART) goes to a thread blocked in epoll_wait without timeout, which
 * must see EINTR, and to one in a 60 s nanosleep, which must see EINTR
 * with the time left in rem.
 *
 * Verify: every wait thread finishes its current round and reports; at
 * least one round each, no early or interrupted one.
 * ZDTM_CORRUPT=1: a signal of the application's own with SA_RESTART (which
 * restarts nothing of these) lands in every wait thread: without the
 * wrappers' protection from *that*, the waits come back early or with
 * EINTR, and the verifier must say so.
 */
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include "zdtm.h"

enum { W_NANOSLEEP, W_CLOCK_NANOSLEEP, W_USLEEP, W_SLEEP, W_EPOLL_WAIT, W_EPOLL_PWAIT, W_EPOLL_PWAIT2,
       W_POLL, W_PPOLL, W_SELECT, W_PSELECT, NW };
static const char *wname[NW] = { "nanosleep", "clock_nanosleep", "usleep", "sleep", "epoll_wait",
				 "epoll_pwait", "epoll_pwait2", "poll", "ppoll", "select", "pselect" };
/* lengths differ so that dumps fall at many points of the waits */
static const int wms[NW] = { 120, 90, 70, 1000, 100, 130, 110, 80, 60, 140, 75 };

static pthread_t th[NW], th_appsig[2];
static long rounds[NW];
static char werr[NW][200];
static int ep, pipefd[2];
static volatile int appsig_ready[2], appsig_sent[2];
static char appsig_err[2][200];

static void on_signal(int sig) { (void)sig; }

/* One wait of wms[w] ms: its return value, errno kept. */
static int wait_once(int w)
{
	int ms = wms[w];
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	struct epoll_event ev;
	struct pollfd pf = { .fd = pipefd[0], .events = POLLIN };
	fd_set rs;
	FD_ZERO(&rs);
	FD_SET(pipefd[0], &rs);
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
	switch (w) {
	case W_NANOSLEEP: { struct timespec rem; return nanosleep(&ts, &rem); }
	case W_CLOCK_NANOSLEEP: { int e = clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL); errno = e; return e ? -1 : 0; }
	case W_USLEEP: return usleep((useconds_t)ms * 1000);
	case W_SLEEP: { unsigned left = sleep((unsigned)(ms / 1000)); if (left) errno = EINTR; return left ? -1 : 0; }
	case W_EPOLL_WAIT: return epoll_wait(ep, &ev, 1, ms);
	case W_EPOLL_PWAIT: return epoll_pwait(ep, &ev, 1, ms, NULL);
	case W_EPOLL_PWAIT2: return epoll_pwait2(ep, &ev, 1, &ts, NULL);
	case W_POLL: return poll(&pf, 1, ms);
	case W_PPOLL: return ppoll(&pf, 1, &ts, NULL);
	case W_SELECT: return select(pipefd[0] + 1, &rs, NULL, NULL, &tv);
	case W_PSELECT: return pselect(pipefd[0] + 1, &rs, NULL, NULL, &ts, NULL);
	}
	return -1;
}

static void *waiter(void *arg)
{
	int w = (int)(long)arg;
	while (!zdtm_stopped() && !werr[w][0]) {
		uint64_t t0 = zdtm_now_ns();
		int r = wait_once(w);
		int e = errno;
		uint64_t took = zdtm_now_ns() - t0;
		long round = ++rounds[w];
		if (r != 0)
			snprintf(werr[w], sizeof werr[w], "%s round %ld returned %d (errno %d: %s) after %.1f ms",
				 wname[w], round, r, e, strerror(e), (double)took / 1e6);
		else if (took < (uint64_t)wms[w] * 1000000ull)
			snprintf(werr[w], sizeof werr[w], "%s round %ld came back after %.1f ms of %d",
				 wname[w], round, (double)took / 1e6, wms[w]);
	}
	return NULL;
}

/* The application's own signal interrupts an endless epoll_wait (0) or a
 * 60 s nanosleep (1). */
static void *appsig_waiter(void *arg)
{
	int k = (int)(long)arg;
	appsig_ready[k] = 1;
	if (k == 0) {
		struct epoll_event ev;
		int r = epoll_wait(ep, &ev, 1, -1);
		if (!appsig_sent[k])
			snprintf(appsig_err[k], sizeof appsig_err[k], "epoll_wait(-1) returned %d (errno %d) before the application's signal", r, errno);
		else if (r != -1 || errno != EINTR)
			snprintf(appsig_err[k], sizeof appsig_err[k], "epoll_wait(-1) gave %d (errno %d) for the application's SIGUSR1, not EINTR", r, errno);
	} else {
		struct timespec ts = { 60, 0 }, rem = { -1, -1 };
		int r = nanosleep(&ts, &rem);
		if (!appsig_sent[k])
			snprintf(appsig_err[k], sizeof appsig_err[k], "nanosleep(60 s) returned %d (errno %d) before the application's signal", r, errno);
		else if (r != -1 || errno != EINTR)
			snprintf(appsig_err[k], sizeof appsig_err[k], "nanosleep(60 s) gave %d (errno %d) for the application's SIGUSR1, not EINTR", r, errno);
		else if (rem.tv_sec < 0 || rem.tv_sec > 60 || rem.tv_sec < 1)
			snprintf(appsig_err[k], sizeof appsig_err[k], "nanosleep(60 s) interrupted left rem %ld s", (long)rem.tv_sec);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	struct sigaction sa = { .sa_handler = on_signal };
	sigemptyset(&sa.sa_mask);
	zdtm_check(sigaction(SIGUSR1, &sa, NULL) == 0, "sigaction SIGUSR1");
	sa.sa_flags = SA_RESTART;
	zdtm_check(sigaction(SIGUSR2, &sa, NULL) == 0, "sigaction SIGUSR2");
	ep = epoll_create1(EPOLL_CLOEXEC);
	zdtm_check(ep >= 0, "epoll_create1");
	zdtm_check(pipe(pipefd) == 0, "pipe");
	for (int w = 0; w < NW; w++)
		zdtm_check(pthread_create(&th[w], NULL, waiter, (void *)(long)w) == 0, "pthread_create");
	/* the application's own signals are asynchronous: not recorded, so
	 * not part of a run meant for replay ($ZDTM_RUN_MS, zdtm.h) */
	int appsig = !zdtm_run_ns;
	for (int k = 0; k < 2 && appsig; k++)
		zdtm_check(pthread_create(&th_appsig[k], NULL, appsig_waiter, (void *)(long)k) == 0, "pthread_create");
	while (appsig && (!appsig_ready[0] || !appsig_ready[1]))
		zdtm_sleep_ms(1);
	zdtm_ready();
	uint64_t t0 = zdtm_now_ns();
	while (!zdtm_should_verify()) {
		zdtm_sleep_ms(5);
		/* the self-test's damage: an SA_RESTART signal of the
		 * application's own every ~40 ms, which none of these calls
		 * restarts */
		if (zdtm_corrupt && zdtm_now_ns() - t0 > 40000000ull) {
			for (int w = 0; w < NW; w++)
				pthread_kill(th[w], SIGUSR2);
			t0 = zdtm_now_ns();
		}
	}
	zdtm_stop();
	for (int w = 0; w < NW; w++)
		pthread_join(th[w], NULL);
	/* the blocked ones: to be sure each is inside its call, signal
	 * until it ends (a signal before the call starts is simply lost) */
	for (int k = 0; k < 2 && appsig; k++) {
		appsig_sent[k] = 1;
		for (;;) {
			pthread_kill(th_appsig[k], SIGUSR1);
			struct timespec dl;
			clock_gettime(CLOCK_REALTIME, &dl);
			dl.tv_nsec += 50000000L;
			if (dl.tv_nsec >= 1000000000L) {
				dl.tv_sec++;
				dl.tv_nsec -= 1000000000L;
			}
			if (pthread_timedjoin_np(th_appsig[k], NULL, &dl) == 0)
				break;
		}
		if (appsig_err[k][0])
			zdtm_fail("%s", appsig_err[k]);
	}
	/* the digest a replay must reproduce: each wait's rounds */
	char digest[1024];
	size_t n = 0;
	for (int w = 0; w < NW; w++)
		n += (size_t)snprintf(digest + n, sizeof digest - n, "%s%s %ld\n", "", wname[w], rounds[w]);
	zdtm_check(zdtm_write_file("rounds.txt", digest) == 0, "writing rounds.txt");
	for (int w = 0; w < NW; w++) {
		if (werr[w][0])
			zdtm_fail("%s", werr[w]);
		if (rounds[w] < 1)
			zdtm_fail("%s: no wait completed", wname[w]);
	}
	zdtm_pass();
}
