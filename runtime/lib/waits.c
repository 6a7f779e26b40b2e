/* SPDX-License-Identifier: MIT
 *
 * Waits that a checkpoint never cuts short (issue 13 §3; RRC §4.2).
 *
 * The park signal (quiesce.c) interrupts whatever the thread is doing. The
 * kernel restarts most blocking calls after a handler installed with
 * SA_RESTART (read, accept, recv, futex waits, wait4), but not these: they
 * return EINTR, and a sleep has then slept less than it asked for:
 *   nanosleep clock_nanosleep usleep sleep
 *   epoll_wait epoll_pwait epoll_pwait2 poll ppoll select pselect
 * (epoll and poll-like calls never restart after a handler; nanosleep's
 * restart block is dropped by the kernel when a handler runs). Every
 * checkpoint would then show the application an EINTR or a shortened wait
 * it would not otherwise have seen: redis's `DEBUG SLEEP 1` returned after
 * 0.3 s when a dump fell inside it. A restored thread is no different: it
 * resumes from the park handler's frame, whose saved return value is that
 * EINTR.
 *
 * Each wrapper notes the thread's park count (rrc_parks_seen, bumped by the
 * park handler, so also when the thread resumes after a restore), calls the
 * real function, and when it failed with EINTR while the count moved, calls
 * it again for what is left of the wait. The deadline is kept on the
 * clock the call names; what is left is never more than what was asked
 * (a restore on a host whose clock is behind would otherwise make it
 * longer). An EINTR the application's own signal caused still reaches it,
 * with nanosleep's remaining time, unless a park landed in the same call
 * (then its handler has run and the call goes on: the one case the
 * application could tell).
 *
 * These wrappers take no lock and no hook guard: a thread blocked in them
 * parks at once, like a thread outside the library. While recording
 * (rr-io.c), each logs its final outcome once, after any re-issue: SLEEP,
 * EPOLL_WAIT, POLL, SELECT. Each first gives the log writer the kick its
 * thread's outputs since its last wait owe (rrc_rr_before_wait, rr-log.c:
 * an event loop's replies go to the backup in one batch).
 */
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/uio.h>
#include "rrc_lib.h"
#include "waits.h"
#include "rr-io.h"
#include "rr-replay.h"
#include "rr-epoll.h"
#include "rr-log.h"

static int (*real_nanosleep)(const struct timespec *, struct timespec *);
static int (*real_clock_nanosleep)(clockid_t, int, const struct timespec *, struct timespec *);
static int (*real_epoll_wait)(int, struct epoll_event *, int, int);
static int (*real_epoll_pwait)(int, struct epoll_event *, int, int, const sigset_t *);
static int (*real_epoll_pwait2)(int, struct epoll_event *, int, const struct timespec *, const sigset_t *);
static int (*real_poll)(struct pollfd *, nfds_t, int);
static int (*real_ppoll)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *);
static int (*real_select)(int, fd_set *, fd_set *, fd_set *, struct timeval *);
static int (*real_pselect)(int, fd_set *, fd_set *, fd_set *, const struct timespec *, const sigset_t *);
static int (*real_clock_gettime)(clockid_t, struct timespec *);

#define RESOLVE(name) do { if (!real_##name) real_##name = dlsym(RTLD_NEXT, #name); } while (0)

void rrc_waits_resolve(void)
{
	RESOLVE(nanosleep); RESOLVE(clock_nanosleep); RESOLVE(epoll_wait); RESOLVE(epoll_pwait);
	RESOLVE(epoll_pwait2); RESOLVE(poll); RESOLVE(ppoll); RESOLVE(select); RESOLVE(pselect);
	RESOLVE(clock_gettime);
}

__thread uint32_t rrc_parks_seen __attribute__((tls_model("initial-exec")));

static inline uint32_t parks(void)
{
	/* written by the park handler on this very thread */
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	return *(volatile uint32_t *)&rrc_parks_seen;
}

/* The park count moved during a call that failed with EINTR. */
static inline int parked_in(uint32_t before, int r)
{
	return r < 0 && errno == EINTR && parks() != before;
}

#define NS 1000000000ll

static int64_t ts_ns(const struct timespec *t) { return (int64_t)t->tv_sec * NS + t->tv_nsec; }
static struct timespec ns_ts(int64_t ns)
{
	if (ns < 0)
		ns = 0;
	return (struct timespec){ .tv_sec = ns / NS, .tv_nsec = ns % NS };
}

/* A wait's deadline on one clock. `total` < 0: no bound (waits forever). */
struct deadline {
	clockid_t clock;
	int64_t start, total;
};

static int64_t now_on(clockid_t c)
{
	struct timespec t;
	RESOLVE(clock_gettime);
	if (real_clock_gettime(c, &t) < 0)
		return 0;
	return ts_ns(&t);
}

static struct deadline deadline_in(clockid_t c, int64_t total)
{
	return (struct deadline){ .clock = c, .start = total > 0 ? now_on(c) : 0, .total = total };
}

/* What is left: never below 0, never above what was asked. */
static int64_t left(const struct deadline *d)
{
	if (d->total <= 0)
		return d->total;
	int64_t spent = now_on(d->clock) - d->start;
	if (spent < 0)
		spent = 0; /* the clock went back (a restore elsewhere): start over, no longer */
	return spent >= d->total ? 0 : d->total - spent;
}

static int left_ms(const struct deadline *d)
{
	int64_t l = left(d);
	if (l < 0)
		return -1;
	int64_t ms = (l + 999999) / 1000000;
	return ms > 0x7fffffff ? 0x7fffffff : (int)ms;
}

/* ---- recording (rr-io.c): the final result, after any re-issue ---- */

/* While recording, at most as many events as fit in one event's data. */
/* An event's record: the epoll_event array, then the fd of each event
 * (rr-epoll.c; -1 if unknown): a replay gives the program the value it
 * registered for that fd itself. */
#define EV_REC (sizeof(struct epoll_event) + sizeof(int32_t))

#define EV_MAX_REC 1024 /* while recording, at most this many events a call (an fd array on the stack) */

static int rec_events(int *max)
{
	int cap = (int)(RRC_LOG_MAX_DATA / EV_REC) < EV_MAX_REC ? (int)(RRC_LOG_MAX_DATA / EV_REC) : EV_MAX_REC;
	if (*max > cap && rrc_rr_recording())
		*max = cap;
	return rrc_rr_io_reserve((uint32_t)((*max > 0 ? *max : 0) * EV_REC));
}

static int recorded_events(int rec, int ep, const struct epoll_event *ev, int ret)
{
	if (!rec)
		return ret;
	int e = errno;
	rrc_hook_enter();
	if (!rrc_rr_recording()) { /* came back, or was parked since, and restored into replay */
		rrc_hook_leave();
		rrc_rr_log_input(RRC_EV_EPOLL_WAIT, ep, ret < 0 ? -e : ret, 0, 0);
		errno = e;
	} else {
		uint32_t n = ret > 0 ? (uint32_t)ret : 0;
		int32_t fds[EV_MAX_REC];
		for (uint32_t i = 0; i < n && i < EV_MAX_REC; i++)
			fds[i] = rrc_ep_fd_of(ep, ev[i].data.u64);
		struct iovec p[2] = { { (void *)ev, n * sizeof *ev }, { fds, n * sizeof *fds } };
		rrc_rr_eventv(RRC_EV_EPOLL_WAIT, 0, (uint64_t)(int64_t)ep, rrc_ep_order(ep), ret < 0 ? -e : ret, p,
			      n ? 2 : 0);
		rrc_hook_leave();
		errno = e;
	}
	return ret;
}

static int recorded_poll(int rec, const struct pollfd *fds, nfds_t n, int ret)
{
	if (rec) {
		int e = errno;
		rrc_rr_log_input(RRC_EV_POLL, -1, ret < 0 ? -e : ret, fds, ret >= 0 ? (uint32_t)(n * sizeof *fds) : 0);
		errno = e;
	}
	return ret;
}

/* the sets the call was given, in order (r, w, x), each nfds bits rounded
 * up to 8 bytes */
static int recorded_select(int rec, int n, const fd_set *r, const fd_set *w, const fd_set *x, int ret)
{
	if (rec) {
		int e = errno;
		uint8_t sets[3 * sizeof(fd_set)];
		uint32_t one = n > 0 && n <= FD_SETSIZE ? (uint32_t)((n + 63) / 64 * 8) : 0, len = 0;
		const fd_set *s3[3] = { r, w, x };
		for (int i = 0; i < 3 && ret >= 0; i++)
			if (s3[i]) {
				rrc_memcpy(sets + len, s3[i], one);
				len += one;
			}
		rrc_rr_log_input(RRC_EV_SELECT, n, ret < 0 ? -e : ret, sets, len);
		errno = e;
	}
	return ret;
}

/* A sleep's outcome: 0, or -EINTR with what was left (its data). */
static int recorded_sleep(int rec, clockid_t clock, int64_t result, const struct timespec *left_)
{
	if (rec) {
		int e = errno;
		rrc_rr_log_input(RRC_EV_SLEEP, (int)clock, result, result == -EINTR ? left_ : 0,
				 result == -EINTR ? sizeof *left_ : 0);
		errno = e;
	}
	return result < 0 ? -1 : 0;
}

/* ---- replay (rr-replay.h): the recorded outcome, at once ---- */

static const struct rrc_log_event *replayed(uint16_t kind, uint64_t obj)
{
	return rrc_rr_replaying() ? rrc_rp_next(kind, obj) : 0;
}

static int replay_sleep(const struct rrc_log_event *e, struct timespec *rem, int errno_style)
{
	if (e->result == -EINTR && rem && e->data_len >= sizeof *rem)
		rrc_memcpy(rem, rrc_rp_data(e), sizeof *rem);
	if (errno_style)
		return (int)rrc_rp_result(e);
	int64_t res = e->result;
	rrc_rp_done();
	return (int)-res;
}

static int replay_events(const struct rrc_log_event *e, int ep, struct epoll_event *ev, int max)
{
	if (e->result > max)
		rrc_rp_diverge("an epoll_wait with room for fewer events:", (uint64_t)max);
	/* after the epoll_ctl calls that came before it (re-arming, adding) */
	volatile uint64_t *c = rrc_rr_obj_counter((const void *)RRC_EPOLL_KEY(ep), 1);
	rrc_rp_turn(c, e->seq, "the epoll instance", (uint64_t)ep);
	rrc_rp_advance(c);
	if (e->result > 0) {
		uint32_t n = (uint32_t)e->result;
		const uint8_t *d = rrc_rp_data(e);
		rrc_memcpy(ev, d, n * sizeof *ev);
		int32_t fds[EV_MAX_REC];
		for (uint32_t i = 0; e->data_len == n * EV_REC && i < n && i < EV_MAX_REC; i++) {
			int32_t fd;
			uint64_t now;
			rrc_memcpy(&fd, d + n * sizeof *ev + i * sizeof fd, sizeof fd);
			fds[i] = fd;
			if (fd >= 0 && rrc_ep_data_of(ep, fd, &now))
				ev[i].data.u64 = now; /* the program's own value for that fd */
		}
		if (e->data_len == n * EV_REC)
			rrc_ep_replayed_wait(ep, fds, n < EV_MAX_REC ? n : EV_MAX_REC);
	}
	return (int)rrc_rp_result(e);
}

static int replay_poll(const struct rrc_log_event *e, struct pollfd *fds, nfds_t n)
{
	if (e->result >= 0) {
		if (e->data_len != n * sizeof *fds)
			rrc_rp_diverge("a poll of a different number of fds:", n);
		const struct pollfd *rec = rrc_rp_data(e);
		for (nfds_t i = 0; i < n; i++) {
			if (rec[i].fd != fds[i].fd || rec[i].events != fds[i].events)
				rrc_rp_diverge("a poll of another fd or other events, fd", (uint64_t)fds[i].fd);
			fds[i].revents = rec[i].revents;
		}
	}
	return (int)rrc_rp_result(e);
}

static int replay_select(const struct rrc_log_event *e, int n, fd_set *r, fd_set *w, fd_set *x)
{
	if (e->result >= 0) {
		uint32_t one = n > 0 && n <= FD_SETSIZE ? (uint32_t)((n + 63) / 64 * 8) : 0, at = 0;
		fd_set *s3[3] = { r, w, x };
		for (int i = 0; i < 3; i++)
			if (s3[i]) {
				if (at + one > e->data_len)
					rrc_rp_diverge("a select of other sets", (uint64_t)n);
				rrc_memcpy(s3[i], (const uint8_t *)rrc_rp_data(e) + at, one);
				at += one;
			}
	}
	return (int)rrc_rp_result(e);
}

/* Each wait's loop starts with this: replayed (also after a park that
 * ended in a restore into replay: a call that came back then, whether it
 * completed before the checkpoint or ran after the restore, goes round
 * once more), its outcome is the log's. */
#define REPLAYED(kind, obj, how) do { \
		const struct rrc_log_event *e_ = replayed((kind), (obj)); \
		if (e_) \
			return how; \
	} while (0)

/* ---- sleeps ---- */

int nanosleep(const struct timespec *req, struct timespec *rem)
{
	RESOLVE(nanosleep);
	rrc_rr_before_wait();
	if (!req || req->tv_nsec < 0 || req->tv_nsec >= NS || req->tv_sec < 0)
		return real_nanosleep(req, rem);
	struct deadline d = deadline_in(CLOCK_MONOTONIC, ts_ns(req));
	struct timespec t = *req;
	int rec = rrc_rr_io_reserve(sizeof t);
	for (;;) {
		REPLAYED(RRC_EV_SLEEP, CLOCK_MONOTONIC, replay_sleep(e_, rem, 1));
		uint32_t p = parks();
		struct timespec r;
		int ret = real_nanosleep(&t, &r);
		if (rrc_rr_replaying())
			continue; /* came back after a restore into replay: the log's outcome (above) */
		if (!parked_in(p, ret)) {
			/* what is left matters only to an interrupted sleep */
			int intr = ret < 0 && errno == EINTR;
			struct timespec l = intr ? ns_ts(left(&d)) : (struct timespec){ 0, 0 };
			if (intr && rem)
				*rem = l;
			return recorded_sleep(rec, CLOCK_MONOTONIC, ret < 0 ? -errno : 0, &l);
		}
		t = ns_ts(left(&d));
	}
}

int clock_nanosleep(clockid_t clock, int flags, const struct timespec *req, struct timespec *rem)
{
	RESOLVE(clock_nanosleep);
	rrc_rr_before_wait();
	if (!req || req->tv_nsec < 0 || req->tv_nsec >= NS || req->tv_sec < 0)
		return real_clock_nanosleep(clock, flags, req, rem);
	/* an absolute sleep is simply issued again; a relative one keeps its
	 * deadline on its own clock (CPU-time clocks included) */
	struct deadline d = deadline_in(clock, (flags & TIMER_ABSTIME) ? 0 : ts_ns(req));
	struct timespec t = *req;
	int rec = rrc_rr_io_reserve(sizeof t);
	for (;;) {
		REPLAYED(RRC_EV_SLEEP, (uint64_t)(int64_t)clock, replay_sleep(e_, (flags & TIMER_ABSTIME) ? 0 : rem, 0));
		uint32_t p = parks();
		/* clock_nanosleep returns the error number, errno untouched */
		int ret = real_clock_nanosleep(clock, flags, &t, rem);
		if (rrc_rr_replaying())
			continue; /* came back after a restore into replay: the log's outcome (above) */
		if (ret != EINTR || parks() == p) {
			struct timespec l = ret == EINTR ? ns_ts(left(&d)) : (struct timespec){ 0, 0 };
			if (ret == EINTR && rem && !(flags & TIMER_ABSTIME))
				*rem = l;
			int e = errno;
			recorded_sleep(rec, clock, -ret, &l);
			errno = e;
			return ret;
		}
		if (!(flags & TIMER_ABSTIME))
			t = ns_ts(left(&d));
	}
}

/* glibc's usleep and sleep call nanosleep inside libc, out of the
 * preload's reach: both go through the wrapper above instead. */
int usleep(useconds_t us)
{
	struct timespec t = { .tv_sec = us / 1000000, .tv_nsec = (long)(us % 1000000) * 1000 };
	return nanosleep(&t, 0);
}

unsigned int sleep(unsigned int s)
{
	struct timespec t = { .tv_sec = s, .tv_nsec = 0 }, rem = { 0, 0 };
	if (nanosleep(&t, &rem) < 0 && errno == EINTR)
		return (unsigned)rem.tv_sec + (rem.tv_nsec > 0);
	return 0;
}

/* ---- readiness waits ---- */

int epoll_wait(int ep, struct epoll_event *ev, int max, int timeout)
{
	RESOLVE(epoll_wait);
	rrc_rr_before_wait();
	int rec = rec_events(&max);
	struct deadline d = deadline_in(CLOCK_MONOTONIC, timeout > 0 ? timeout * 1000000ll : timeout);
	for (;;) {
		REPLAYED(RRC_EV_EPOLL_WAIT, (uint64_t)ep, replay_events(e_, ep, ev, max));
		uint32_t p = parks();
		int ret = real_epoll_wait(ep, ev, max, timeout);
		if (rrc_rr_replaying())
			continue; /* came back after a restore into replay: the log's outcome (above) */
		if (!parked_in(p, ret))
			return recorded_events(rec, ep, ev, ret);
		timeout = left_ms(&d);
	}
}

int epoll_pwait(int ep, struct epoll_event *ev, int max, int timeout, const sigset_t *mask)
{
	RESOLVE(epoll_pwait);
	rrc_rr_before_wait();
	int rec = rec_events(&max);
	struct deadline d = deadline_in(CLOCK_MONOTONIC, timeout > 0 ? timeout * 1000000ll : timeout);
	for (;;) {
		REPLAYED(RRC_EV_EPOLL_WAIT, (uint64_t)ep, replay_events(e_, ep, ev, max));
		uint32_t p = parks();
		int ret = real_epoll_pwait(ep, ev, max, timeout, mask);
		if (rrc_rr_replaying())
			continue; /* came back after a restore into replay: the log's outcome (above) */
		if (!parked_in(p, ret))
			return recorded_events(rec, ep, ev, ret);
		timeout = left_ms(&d);
	}
}

int epoll_pwait2(int ep, struct epoll_event *ev, int max, const struct timespec *to, const sigset_t *mask)
{
	RESOLVE(epoll_pwait2);
	rrc_rr_before_wait();
	int rec = rec_events(&max);
	struct deadline d = deadline_in(CLOCK_MONOTONIC, to ? ts_ns(to) : -1);
	struct timespec t;
	for (;;) {
		REPLAYED(RRC_EV_EPOLL_WAIT, (uint64_t)ep, replay_events(e_, ep, ev, max));
		uint32_t p = parks();
		int ret = real_epoll_pwait2(ep, ev, max, to, mask);
		if (rrc_rr_replaying())
			continue; /* came back after a restore into replay: the log's outcome (above) */
		if (!parked_in(p, ret))
			return recorded_events(rec, ep, ev, ret);
		if (to) {
			t = ns_ts(left(&d));
			to = &t;
		}
	}
}

int poll(struct pollfd *fds, nfds_t n, int timeout)
{
	RESOLVE(poll);
	rrc_rr_before_wait();
	int rec = rrc_rr_io_reserve((uint32_t)(n * sizeof *fds));
	struct deadline d = deadline_in(CLOCK_MONOTONIC, timeout > 0 ? timeout * 1000000ll : timeout);
	for (;;) {
		REPLAYED(RRC_EV_POLL, RRC_RP_ANY, replay_poll(e_, fds, n));
		uint32_t p = parks();
		int ret = real_poll(fds, n, timeout);
		if (rrc_rr_replaying())
			continue; /* came back after a restore into replay: the log's outcome (above) */
		if (!parked_in(p, ret))
			return recorded_poll(rec, fds, n, ret);
		timeout = left_ms(&d);
	}
}

int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *to, const sigset_t *mask)
{
	RESOLVE(ppoll);
	rrc_rr_before_wait();
	int rec = rrc_rr_io_reserve((uint32_t)(n * sizeof *fds));
	struct deadline d = deadline_in(CLOCK_MONOTONIC, to ? ts_ns(to) : -1);
	struct timespec t;
	for (;;) {
		REPLAYED(RRC_EV_POLL, RRC_RP_ANY, replay_poll(e_, fds, n));
		uint32_t p = parks();
		int ret = real_ppoll(fds, n, to, mask);
		if (rrc_rr_replaying())
			continue; /* came back after a restore into replay: the log's outcome (above) */
		if (!parked_in(p, ret))
			return recorded_poll(rec, fds, n, ret);
		if (to) {
			t = ns_ts(left(&d));
			to = &t;
		}
	}
}

/* On EINTR the kernel leaves the fd sets as they were (it writes them only
 * on success), so the call can be issued again with the same sets. */
int select(int n, fd_set *r, fd_set *w, fd_set *x, struct timeval *tv)
{
	RESOLVE(select);
	rrc_rr_before_wait();
	int rec = rrc_rr_io_reserve(3 * sizeof(fd_set));
	struct deadline d = deadline_in(CLOCK_MONOTONIC, tv ? tv->tv_sec * NS + tv->tv_usec * 1000ll : -1);
	for (;;) {
		REPLAYED(RRC_EV_SELECT, (uint64_t)n, replay_select(e_, n, r, w, x));
		uint32_t p = parks();
		int ret = real_select(n, r, w, x, tv);
		if (rrc_rr_replaying())
			continue; /* came back after a restore into replay: the log's outcome (above) */
		if (!parked_in(p, ret))
			return recorded_select(rec, n, r, w, x, ret);
		if (tv) {
			int64_t l = left(&d);
			tv->tv_sec = l / NS;
			tv->tv_usec = (l % NS) / 1000;
		}
	}
}

int pselect(int n, fd_set *r, fd_set *w, fd_set *x, const struct timespec *to, const sigset_t *mask)
{
	RESOLVE(pselect);
	rrc_rr_before_wait();
	int rec = rrc_rr_io_reserve(3 * sizeof(fd_set));
	struct deadline d = deadline_in(CLOCK_MONOTONIC, to ? ts_ns(to) : -1);
	struct timespec t;
	for (;;) {
		REPLAYED(RRC_EV_SELECT, (uint64_t)n, replay_select(e_, n, r, w, x));
		uint32_t p = parks();
		int ret = real_pselect(n, r, w, x, to, mask);
		if (rrc_rr_replaying())
			continue; /* came back after a restore into replay: the log's outcome (above) */
		if (!parked_in(p, ret))
			return recorded_select(rec, n, r, w, x, ret);
		if (to) {
			t = ns_ts(left(&d));
			to = &t;
		}
	}
}
