/* zdtm: timerfd settings.
 *
 *   T1 CLOCK_MONOTONIC, periodic 50 ms: keeps firing after restore;
 *   T2 CLOCK_REALTIME, one-shot in 1000 s;
 *   T3 CLOCK_MONOTONIC, disarmed, O_NONBLOCK;
 *   T4 CLOCK_BOOTTIME, re-armed every round r: 3600 s, interval 1000+r ms;
 *   T5 CLOCK_MONOTONIC, absolute (TFD_TIMER_ABSTIME) 2000 s from set-up;
 *   T6 CLOCK_MONOTONIC, one-shot 1 ms that expired before the dump and was
 *      never read: its tick must still be there.
 * Verify: timerfd_gettime of each (intervals exactly, remaining times
 * within the time that can have passed), the clock in fdinfo, reads.
 */
#include <sys/timerfd.h>
#include "zdtm.h"

static int t[7];

static int64_t ms(const struct timespec *ts) { return (int64_t)ts->tv_sec * 1000 + ts->tv_nsec / 1000000; }

static void arm(int fd, int flags, int64_t value_ms, int64_t interval_ms)
{
	struct itimerspec its = {
		.it_value = { value_ms / 1000, (long)(value_ms % 1000) * 1000000L },
		.it_interval = { interval_ms / 1000, (long)(interval_ms % 1000) * 1000000L },
	};
	zdtm_check(timerfd_settime(fd, flags, &its, NULL) == 0, "timerfd_settime");
}

static void expect_timer(int i, int64_t lo_ms, int64_t hi_ms, int64_t interval_ms)
{
	struct itimerspec its;
	zdtm_check(timerfd_gettime(t[i], &its) == 0, "timerfd_gettime");
	int64_t v = ms(&its.it_value), iv = ms(&its.it_interval);
	if (iv != interval_ms || its.it_interval.tv_nsec % 1000000 != 0)
		zdtm_fail("T%d interval %lds %ldns, expected %ld ms", i, (long)its.it_interval.tv_sec,
			  its.it_interval.tv_nsec, (long)interval_ms);
	if (v < lo_ms || v > hi_ms)
		zdtm_fail("T%d remaining %ld ms, expected between %ld and %ld", i, (long)v, (long)lo_ms, (long)hi_ms);
}

static int fdinfo_clock(int fd)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	FILE *f = fopen(path, "r");
	zdtm_check(f != NULL, "fdinfo");
	int c = -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "clockid: %d", &c) == 1)
			break;
	fclose(f);
	return c;
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	static const int clk[7] = { 0, CLOCK_MONOTONIC, CLOCK_REALTIME, CLOCK_MONOTONIC, CLOCK_BOOTTIME,
				    CLOCK_MONOTONIC, CLOCK_MONOTONIC };
	for (int i = 1; i <= 6; i++) {
		t[i] = timerfd_create(clk[i], i == 3 || i == 6 ? TFD_NONBLOCK : 0);
		zdtm_check(t[i] >= 0, "timerfd_create");
	}
	arm(t[1], 0, 50, 50);
	arm(t[2], 0, 1000000, 0);
	arm(t[4], 0, 3600000, 1000);
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	int64_t abs_ms = ms(&now) + 2000000;
	arm(t[5], TFD_TIMER_ABSTIME, abs_ms, 0);
	arm(t[6], 0, 1, 0);
	zdtm_sleep_ms(20);
	zdtm_ready();
	long r = 1, R = 0;
	while (!zdtm_should_verify()) {
		arm(t[4], 0, 3600000, 1000 + r);
		R = r++;
		zdtm_sleep_ms(2);
	}
	if (zdtm_corrupt)
		arm(t[4], 0, 3600000, 1000 + R + 1);
	/* Generous lower bounds: the process may have been dumped, killed and
	 * restored minutes later; the upper bounds are exact. */
	expect_timer(1, 0, 50, 50);
	expect_timer(2, 900000, 1000000, 0);
	expect_timer(3, 0, 0, 0);
	expect_timer(4, 3500000, 3600000, 1000 + R);
	expect_timer(5, 1900000, 2000000, 0);
	expect_timer(6, 0, 0, 0);
	for (int i = 1; i <= 6; i++)
		if (fdinfo_clock(t[i]) != clk[i])
			zdtm_fail("T%d runs on clock %d, expected %d", i, fdinfo_clock(t[i]), clk[i]);
	uint64_t ticks = 0;
	if (read(t[6], &ticks, 8) != 8 || ticks != 1)
		zdtm_fail("T6: the expired one-shot timer's tick was lost (read %lu)", (unsigned long)ticks);
	if (read(t[3], &ticks, 8) != -1 || errno != EAGAIN)
		zdtm_fail("T3: a disarmed O_NONBLOCK timer did not give EAGAIN");
	if (read(t[1], &ticks, 8) != 8 || ticks < 1)
		zdtm_fail("T1: the periodic timer did not fire");
	if (!(fcntl(t[3], F_GETFL) & O_NONBLOCK) || (fcntl(t[1], F_GETFL) & O_NONBLOCK))
		zdtm_fail("timerfd O_NONBLOCK flags changed");
	zdtm_pass();
}
