/* SPDX-License-Identifier: MIT
 *
 * Recording of time and randomness (issue 13 §1; RRC §4.1): results that
 * nothing in the process's memory determines, returned to the application
 * and logged with their bytes.
 *
 *   clock_gettime gettimeofday time clock    CLOCK (obj: clock id, or RRC_CLOCK_*; the time
 *                                            in seq and result, no data: the commonest
 *                                            event of redis, kept to a header)
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
#include "rr-replay.h"

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

uint64_t rrc_rr_now_ns(void)
{
	struct timespec ts;
	if (!real_clock_gettime || real_clock_gettime(CLOCK_MONOTONIC, &ts) < 0)
		return rrc_mono_ns();
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Replay: this thread's next event, of this kind on this obj (NULL: not
 * replaying, or live); its data copied out (at most cap bytes). */
static const struct rrc_log_event *replayed(uint16_t kind, uint64_t obj, void *out, size_t cap)
{
	if (!rrc_rr_replaying())
		return 0;
	const struct rrc_log_event *e = rrc_rp_next(kind, obj);
	if (e && out && e->data_len) {
		if (e->data_len > cap)
			rrc_rp_diverge("a call asking for fewer bytes:", cap);
		rrc_memcpy(out, rrc_rp_data(e), e->data_len);
	}
	return e;
}

/* A clock's replayed reading: seconds and the fraction (ns or µs) into
 * *sec and *frac when it succeeded. 0 or -1 with errno; 1: not replaying
 * (or live). */
static int clock_replayed(uint64_t obj, int64_t *sec, long *frac)
{
	const struct rrc_log_event *e = replayed(RRC_EV_CLOCK, obj, 0, 0);
	if (!e)
		return 1;
	if (e->result >= 0) {
		*sec = (int64_t)e->seq;
		*frac = (long)e->result;
	}
	return rrc_rp_result(e) < 0 ? -1 : 0; /* the result is the fraction, the call's 0 */
}

int clock_gettime(clockid_t clk, struct timespec *ts)
{
	RESOLVE(clock_gettime);
	if (rrc_rr_replaying()) {
		int64_t sec = 0;
		long ns = 0;
		int r = clock_replayed((uint64_t)(int64_t)clk, &sec, &ns);
		if (r <= 0) {
			if (r == 0)
				*ts = (struct timespec){ (time_t)sec, ns };
			return r;
		}
	}
	if (!rrc_rr_recording())
		return real_clock_gettime(clk, ts);
	rrc_rr_reserve(0);
	rrc_hook_enter();
	int r = real_clock_gettime(clk, ts);
	rrc_rr_event(RRC_EV_CLOCK, 0, (uint64_t)(int64_t)clk, r == 0 ? (uint64_t)ts->tv_sec : 0,
		     r < 0 ? -errno : ts->tv_nsec, 0, 0);
	rrc_hook_leave();
	return r;
}

int gettimeofday(struct timeval *tv, void *tz)
{
	RESOLVE(gettimeofday);
	if (!rrc_rr_recording() && !rrc_rr_replaying())
		return real_gettimeofday(tv, tz);
	/* glibc declares tv nonnull, old programs pass NULL anyway: the
	 * compiler must not assume it */
	struct timeval *v = tv;
	__asm__("" : "+r"(v));
	if (rrc_rr_replaying()) {
		int64_t sec = 0;
		long us = 0;
		int r = clock_replayed(RRC_CLOCK_GETTIMEOFDAY, &sec, &us);
		if (r <= 0) {
			if (r == 0 && v)
				*v = (struct timeval){ (time_t)sec, us };
			return r;
		}
	}
	if (!rrc_rr_recording())
		return real_gettimeofday(tv, tz);
	rrc_rr_reserve(0);
	rrc_hook_enter();
	int r = real_gettimeofday(tv, tz);
	/* a NULL tv: recorded as the reading 0.0, which nobody sees */
	rrc_rr_event(RRC_EV_CLOCK, 0, RRC_CLOCK_GETTIMEOFDAY, r == 0 && v ? (uint64_t)v->tv_sec : 0,
		     r < 0 ? -errno : v ? v->tv_usec : 0, 0, 0);
	rrc_hook_leave();
	return r;
}

time_t time(time_t *t)
{
	RESOLVE(time);
	const struct rrc_log_event *e = replayed(RRC_EV_CLOCK, RRC_CLOCK_TIME, 0, 0);
	if (e) {
		time_t v = (time_t)e->result;
		rrc_rp_done();
		if (t)
			*t = v;
		return v;
	}
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
	const struct rrc_log_event *e = replayed(RRC_EV_CLOCK, CLOCK_PROCESS_CPUTIME_ID, 0, 0);
	if (e)
		return (clock_t)rrc_rp_result(e);
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
	if (rrc_rr_replaying()) {
		/* chunk by chunk, as recorded */
		size_t done = 0;
		do {
			size_t n = len - done > RRC_LOG_MAX_DATA ? RRC_LOG_MAX_DATA : len - done;
			const struct rrc_log_event *e = replayed(RRC_EV_RANDOM, flags, (char *)buf + done, n);
			if (!e)
				return done ? (ssize_t)done : real_getrandom(buf, len, flags);
			ssize_t r = rrc_rp_result(e);
			if (r < 0)
				return done ? (ssize_t)done : -1;
			done += (size_t)r;
			if ((size_t)r < n)
				break;
		} while (done < len);
		return (ssize_t)done;
	}
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
	const struct rrc_log_event *e = len <= 256 ? replayed(RRC_EV_RANDOM, 0, buf, len) : 0;
	if (e)
		return rrc_rp_result(e) < 0 ? -1 : 0;
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
	uint32_t v = 0;
	const struct rrc_log_event *e = replayed(RRC_EV_RANDOM, 0, &v, 4);
	if (e) {
		rrc_rp_done();
		return v;
	}
	if (!rrc_rr_recording())
		return real_arc4random();
	rrc_rr_reserve(4);
	rrc_hook_enter();
	v = real_arc4random();
	rrc_rr_event(RRC_EV_RANDOM, 0, 0, 0, 4, &v, 4);
	rrc_hook_leave();
	return v;
}

uint32_t arc4random_uniform(uint32_t bound)
{
	RESOLVE(arc4random_uniform);
	uint32_t v = 0;
	const struct rrc_log_event *e = replayed(RRC_EV_RANDOM, bound, &v, 4);
	if (e) {
		rrc_rp_done();
		return v;
	}
	if (!rrc_rr_recording())
		return real_arc4random_uniform(bound);
	rrc_rr_reserve(4);
	rrc_hook_enter();
	v = real_arc4random_uniform(bound);
	rrc_rr_event(RRC_EV_RANDOM, 0, bound, 0, 4, &v, 4);
	rrc_hook_leave();
	return v;
}

void arc4random_buf(void *buf, size_t len)
{
	RESOLVE(arc4random_buf);
	for (size_t done = 0; rrc_rr_replaying() && done < len;) {
		size_t n = len - done > RRC_LOG_MAX_DATA ? RRC_LOG_MAX_DATA : len - done;
		const struct rrc_log_event *e = replayed(RRC_EV_RANDOM, 0, (char *)buf + done, n);
		if (!e) {
			real_arc4random_buf((char *)buf + done, len - done);
			return;
		}
		rrc_rp_done();
		done += n;
		if (done == len)
			return;
	}
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
