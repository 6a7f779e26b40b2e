/* SPDX-License-Identifier: MIT
 *
 * Recording of time and randomness (issue 13 §1; RRC §4.1): results that
 * nothing in the process's memory determines, returned to the application
 * and logged with their bytes.
 *
 *   clock_gettime gettimeofday time clock    CLOCK (obj: clock id, or RRC_CLOCK_*)
 *   getrandom getentropy arc4random arc4random_buf arc4random_uniform
 *                                            RANDOM (data: the bytes)
 *
 * The vDSO is reached through libc's functions, so wrapping them covers it
 * for every caller that goes through the PLT; a program that reads the
 * vDSO or executes rdtsc itself is not seen (README: what recording
 * admits). glibc's own internal calls (arc4random's getrandom) never reach
 * a preload: arc4random* are wrapped as such.
 *
 * Each call runs inside the hook guard with its event, so a checkpoint's
 * cut never falls between them. getrandom of more than RRC_LOG_MAX_DATA
 * bytes is made as several calls, one event each.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <sys/random.h>
#include <sys/time.h>
#include "rrc_lib.h"
#include "rr-log.h"

static int (*real_clock_gettime)(clockid_t, struct timespec *);
static int (*real_gettimeofday)(struct timeval *, void *);
static time_t (*real_time)(time_t *);
static clock_t (*real_clock)(void);
static ssize_t (*real_getrandom)(void *, size_t, unsigned int);
static int (*real_getentropy)(void *, size_t);
static uint32_t (*real_arc4random)(void);
static void (*real_arc4random_buf)(void *, size_t);
static uint32_t (*real_arc4random_uniform)(uint32_t);

#define RESOLVE(name) do { if (!real_##name) real_##name = dlsym(RTLD_NEXT, #name); } while (0)

void rrc_time_resolve(void) RRC_HIDDEN;
void rrc_time_resolve(void)
{
	RESOLVE(clock_gettime); RESOLVE(gettimeofday); RESOLVE(time); RESOLVE(clock);
	RESOLVE(getrandom); RESOLVE(getentropy); RESOLVE(arc4random); RESOLVE(arc4random_buf);
	RESOLVE(arc4random_uniform);
}

int clock_gettime(clockid_t clk, struct timespec *ts)
{
	RESOLVE(clock_gettime);
	if (!rrc_rr_recording())
		return real_clock_gettime(clk, ts);
	rrc_rr_reserve(sizeof *ts);
	rrc_hook_enter();
	int r = real_clock_gettime(clk, ts);
	rrc_rr_event(RRC_EV_CLOCK, 0, (uint64_t)(int64_t)clk, 0, r < 0 ? -errno : 0, r == 0 ? ts : 0,
		     r == 0 ? sizeof *ts : 0);
	rrc_hook_leave();
	return r;
}

int gettimeofday(struct timeval *tv, void *tz)
{
	RESOLVE(gettimeofday);
	if (!rrc_rr_recording())
		return real_gettimeofday(tv, tz);
	/* glibc declares tv nonnull, old programs pass NULL anyway: the
	 * compiler must not assume it */
	struct timeval *v = tv;
	__asm__("" : "+r"(v));
	rrc_rr_reserve(sizeof *tv);
	rrc_hook_enter();
	int r = real_gettimeofday(tv, tz);
	rrc_rr_event(RRC_EV_CLOCK, 0, RRC_CLOCK_GETTIMEOFDAY, 0, r < 0 ? -errno : 0, r == 0 && v ? v : 0,
		     r == 0 && v ? sizeof *v : 0);
	rrc_hook_leave();
	return r;
}

time_t time(time_t *t)
{
	RESOLVE(time);
	if (!rrc_rr_recording())
		return real_time(t);
	rrc_rr_reserve(0);
	rrc_hook_enter();
	time_t r = real_time(t);
	rrc_rr_event(RRC_EV_CLOCK, 0, RRC_CLOCK_TIME, 0, (int64_t)r, 0, 0);
	rrc_hook_leave();
	return r;
}

clock_t clock(void)
{
	RESOLVE(clock);
	if (!rrc_rr_recording())
		return real_clock();
	rrc_rr_reserve(0);
	rrc_hook_enter();
	clock_t r = real_clock();
	rrc_rr_event(RRC_EV_CLOCK, 0, CLOCK_PROCESS_CPUTIME_ID, 0, (int64_t)r, 0, 0);
	rrc_hook_leave();
	return r;
}

ssize_t getrandom(void *buf, size_t len, unsigned int flags)
{
	RESOLVE(getrandom);
	if (!rrc_rr_recording())
		return real_getrandom(buf, len, flags);
	size_t done = 0;
	do {
		size_t n = len - done > RRC_LOG_MAX_DATA ? RRC_LOG_MAX_DATA : len - done;
		rrc_rr_reserve((uint32_t)n);
		rrc_hook_enter();
		ssize_t r = real_getrandom((char *)buf + done, n, flags);
		int e = errno;
		rrc_rr_event(RRC_EV_RANDOM, 0, flags, 0, r < 0 ? -e : r, (char *)buf + done, r > 0 ? (uint32_t)r : 0);
		rrc_hook_leave();
		if (r < 0) {
			errno = e;
			return done ? (ssize_t)done : -1;
		}
		done += (size_t)r;
		if ((size_t)r < n)
			break; /* short, as the kernel gave it: the caller sees that */
	} while (done < len);
	return (ssize_t)done;
}

int getentropy(void *buf, size_t len)
{
	RESOLVE(getentropy);
	if (!rrc_rr_recording() || len > 256)
		return real_getentropy(buf, len);
	rrc_rr_reserve((uint32_t)len);
	rrc_hook_enter();
	int r = real_getentropy(buf, len);
	rrc_rr_event(RRC_EV_RANDOM, 0, 0, 0, r < 0 ? -errno : (int64_t)len, buf, r == 0 ? (uint32_t)len : 0);
	rrc_hook_leave();
	return r;
}

uint32_t arc4random(void)
{
	RESOLVE(arc4random);
	if (!rrc_rr_recording())
		return real_arc4random();
	rrc_rr_reserve(4);
	rrc_hook_enter();
	uint32_t v = real_arc4random();
	rrc_rr_event(RRC_EV_RANDOM, 0, 0, 0, 4, &v, 4);
	rrc_hook_leave();
	return v;
}

uint32_t arc4random_uniform(uint32_t bound)
{
	RESOLVE(arc4random_uniform);
	if (!rrc_rr_recording())
		return real_arc4random_uniform(bound);
	rrc_rr_reserve(4);
	rrc_hook_enter();
	uint32_t v = real_arc4random_uniform(bound);
	rrc_rr_event(RRC_EV_RANDOM, 0, bound, 0, 4, &v, 4);
	rrc_hook_leave();
	return v;
}

void arc4random_buf(void *buf, size_t len)
{
	RESOLVE(arc4random_buf);
	if (!rrc_rr_recording()) {
		real_arc4random_buf(buf, len);
		return;
	}
	for (size_t done = 0; done < len;) {
		size_t n = len - done > RRC_LOG_MAX_DATA ? RRC_LOG_MAX_DATA : len - done;
		rrc_rr_reserve((uint32_t)n);
		rrc_hook_enter();
		real_arc4random_buf((char *)buf + done, n);
		rrc_rr_event(RRC_EV_RANDOM, 0, 0, 0, (int64_t)n, (char *)buf + done, (uint32_t)n);
		rrc_hook_leave();
		done += n;
	}
}
