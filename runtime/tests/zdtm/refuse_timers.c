/* Refusal probe: kernel state that no image holds yet, which `rrc dump`
 * must refuse (naming it) rather than lose silently:
 *   posix    70 POSIX timers (timer_create + timer_settime): more than
 *            the library carries (64; fewer are: zdtm posixtimers)
 *   pending  70 instances of a blocked real-time signal pending for the
 *            process, values 0..69: more than the library carries (64);
 *            clearing takes them all and checks they are all there, in
 *            order (a refused dump must have queued back what it took)
 * Once "$ZDTM_DIR/clear" appears the probe removes that state (disarms,
 * deletes, or consumes the signal with sigwait) and writes "cleared", so
 * the test can show that the same process then dumps fine.
 */
#include <signal.h>
#include <sys/time.h>
#include <time.h>
#include "zdtm.h"

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	if (argc != 2)
		zdtm_fail("usage: refuse_timers posix|pending");
	const char *mode = argv[1];
	timer_t tid[70];
	sigset_t usr1;
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);

	if (!strcmp(mode, "posix")) {
		struct sigevent ev = { .sigev_notify = SIGEV_NONE };
		struct itimerspec its = { { 0, 0 }, { 3600, 0 } };
		for (int i = 0; i < 70; i++) {
			zdtm_check(timer_create(CLOCK_MONOTONIC, &ev, &tid[i]) == 0, "timer_create");
			zdtm_check(timer_settime(tid[i], 0, &its, NULL) == 0, "timer_settime");
		}
	} else if (!strcmp(mode, "pending")) {
		sigset_t rt;
		sigemptyset(&rt);
		sigaddset(&rt, SIGRTMIN + 1);
		zdtm_check(pthread_sigmask(SIG_BLOCK, &rt, NULL) == 0, "block SIGRTMIN+1");
		for (int i = 0; i < 70; i++)
			zdtm_check(sigqueue(getpid(), SIGRTMIN + 1, (union sigval){ .sival_int = i }) == 0, "sigqueue");
	} else {
		zdtm_fail("unknown mode %s", mode);
	}
	zdtm_ready();
	while (!zdtm_file_exists("clear"))
		zdtm_sleep_ms(5);
	if (!strcmp(mode, "posix")) {
		for (int i = 0; i < 70; i++)
			zdtm_check(timer_delete(tid[i]) == 0, "timer_delete");
	} else {
		sigset_t rt;
		sigemptyset(&rt);
		sigaddset(&rt, SIGRTMIN + 1);
		for (int i = 0; i < 70; i++) {
			siginfo_t si;
			struct timespec now = { 0, 0 };
			if (sigtimedwait(&rt, &si, &now) != SIGRTMIN + 1)
				zdtm_fail("only %d of the 70 signals are pending after the refused dumps", i);
			if (si.si_value.sival_int != i)
				zdtm_fail("signal %d of 70 carries %d", i, si.si_value.sival_int);
		}
		(void)usr1;
	}
	zdtm_check(zdtm_write_file("cleared", "1\n") == 0, "write cleared");
	zdtm_wait_verify();
	zdtm_pass();
}
