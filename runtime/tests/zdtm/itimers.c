/* zdtm: interval timers come back armed (issue 16 §4; PROCATTR's
 * itimers, runtime/lib/procattr.c, restore/main.c).
 *
 * Set up: SIGALRM counted by a handler; ITIMER_REAL every 4 s (first in
 * 4 s); ITIMER_PROF 100 s ahead, every 50 s (CPU time: it never expires
 * here). Verify (after the restore): each interval as set; the time left
 * within it (REAL in (0, 4] s, PROF in (90, 100] s, give or take the
 * kernel's rounding to its tick); and ITIMER_REAL
 * still fires: SIGALRM reaches the handler again within 6 s.
 */
#include <signal.h>
#include <sys/time.h>
#include "zdtm.h"

static volatile sig_atomic_t alarms;

static void on_alarm(int sig)
{
	(void)sig;
	alarms++;
}

static double secs(struct timeval t)
{
	return (double)t.tv_sec + (double)t.tv_usec / 1e6;
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	struct sigaction sa = { .sa_handler = on_alarm, .sa_flags = SA_RESTART };
	zdtm_check(sigaction(SIGALRM, &sa, NULL) == 0, "sigaction SIGALRM");
	struct itimerval real = { { 4, 0 }, { 4, 0 } }, prof = { { 50, 0 }, { 100, 0 } };
	zdtm_check(setitimer(ITIMER_REAL, &real, NULL) == 0, "setitimer REAL");
	zdtm_check(setitimer(ITIMER_PROF, &prof, NULL) == 0, "setitimer PROF");

	zdtm_ready();
	zdtm_wait_verify();

	if (zdtm_corrupt) {
		struct itimerval off = { { 0, 0 }, { 0, 0 } };
		zdtm_check(setitimer(ITIMER_REAL, &off, NULL) == 0, "corrupt");
	}
	struct itimerval r, p;
	zdtm_check(getitimer(ITIMER_REAL, &r) == 0 && getitimer(ITIMER_PROF, &p) == 0, "getitimer");
	if (secs(r.it_interval) != 4.0 || secs(r.it_value) <= 0 || secs(r.it_value) > 4.1)
		zdtm_fail("ITIMER_REAL: every %.3f s, %.3f s left; not every 4 s with (0, 4] s left",
			  secs(r.it_interval), secs(r.it_value));
	if (secs(p.it_interval) != 50.0 || secs(p.it_value) <= 90.0 || secs(p.it_value) > 100.1)
		zdtm_fail("ITIMER_PROF: every %.3f s, %.3f s left; not every 50 s with (90, 100] s left",
			  secs(p.it_interval), secs(p.it_value));
	int before = alarms;
	for (int i = 0; i < 600 && alarms == before; i++)
		zdtm_sleep_ms(10);
	if (alarms == before)
		zdtm_fail("no SIGALRM within 6 s of the verify (ITIMER_REAL not armed)");
	zdtm_pass();
}
