/* SPDX-License-Identifier: MIT
 *
 * Recording of synchronization and threads (issue 13 §1; RRC §4.1,
 * HyCoR §4.1): the order of every successful acquisition, per object.
 *
 *   pthread_mutex_lock trylock timedlock clocklock   MUTEX_LOCK (flags TRY / TIMED)
 *   pthread_cond_wait timedwait clockwait             COND_WAIT: the mutex reacquired
 *   pthread_create (a trampoline in the new thread)   THREAD_CREATE, THREAD_START, THREAD_EXIT
 *
 * An acquisition takes the object's next sequence number while it holds
 * the object (rr-log.c's table), so the numbers are the acquisition order:
 * a replay lets a thread acquire only when its number is the object's next.
 * A failed trylock or a timeout is recorded without a number (RRC: in
 * replay it fails at once, without trying). Unlocks carry no order of
 * their own and are not recorded; a condition variable's wait is recorded
 * as the acquisition of its mutex on the way out (Castor replays it as
 * unlock, wait for the turn, lock).
 *
 * The real functions: glibc exports __pthread_mutex_lock & co. under a
 * public version, bound below with .symver, so the wrappers call them without dlsym (jemalloc locks
 * mutexes while it initializes, possibly before this library's
 * constructor: a lazy dlsym there could recurse into malloc). The
 * condition variable calls come from dlvsym in the constructor.
 *
 * Not recorded yet (issue 13 continues): rwlocks, spinlocks, semaphores,
 * pthread_once, barriers, join; glibc-internal locks are out of any
 * preload's reach (README).
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include "rrc_lib.h"
#include "rr-log.h"

/* glibc's aliases of the mutex calls, bound by version (they are not
 * default versions, so a plain reference would not link) */
extern int real_mutex_lock(pthread_mutex_t *);
extern int real_mutex_trylock(pthread_mutex_t *);
__asm__(".symver real_mutex_lock, __pthread_mutex_lock@GLIBC_2.2.5");
__asm__(".symver real_mutex_trylock, __pthread_mutex_trylock@GLIBC_2.2.5");

static int (*real_timedlock)(pthread_mutex_t *, const struct timespec *);
static int (*real_clocklock)(pthread_mutex_t *, clockid_t, const struct timespec *);
static int (*real_cond_wait)(pthread_cond_t *, pthread_mutex_t *);
static int (*real_cond_timedwait)(pthread_cond_t *, pthread_mutex_t *, const struct timespec *);
static int (*real_cond_clockwait)(pthread_cond_t *, pthread_mutex_t *, clockid_t, const struct timespec *);
static int (*real_create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

void rrc_sync_resolve(void) RRC_HIDDEN;
void rrc_sync_resolve(void)
{
	real_timedlock = dlsym(RTLD_NEXT, "pthread_mutex_timedlock");
	real_clocklock = dlsym(RTLD_NEXT, "pthread_mutex_clocklock");
	/* the 2.3.2 ABI: the one every program built since 2002 uses */
	real_cond_wait = dlvsym(RTLD_NEXT, "pthread_cond_wait", "GLIBC_2.3.2");
	real_cond_timedwait = dlvsym(RTLD_NEXT, "pthread_cond_timedwait", "GLIBC_2.3.2");
	real_cond_clockwait = dlsym(RTLD_NEXT, "pthread_cond_clockwait");
	real_create = dlsym(RTLD_NEXT, "pthread_create");
}

/* After an acquisition attempt that returned r (0: acquired). */
static void acquired(uint16_t kind, uint16_t flags, const void *obj, pthread_mutex_t *m, int r)
{
	rrc_hook_enter();
	uint64_t seq = r == 0 ? rrc_rr_obj_seq(m) : 0;
	uint64_t maddr = (uint64_t)m;
	rrc_rr_event(kind, flags, (uint64_t)obj, seq, -(int64_t)r, kind == RRC_EV_COND_WAIT ? &maddr : 0,
		     kind == RRC_EV_COND_WAIT ? 8 : 0);
	rrc_hook_leave();
}

int pthread_mutex_lock(pthread_mutex_t *m)
{
	if (!rrc_rr_recording())
		return real_mutex_lock(m);
	rrc_rr_reserve(0);
	int r = real_mutex_lock(m); /* may block: parkable, outside the guard */
	acquired(RRC_EV_MUTEX_LOCK, 0, m, m, r);
	return r;
}

int pthread_mutex_trylock(pthread_mutex_t *m)
{
	if (!rrc_rr_recording())
		return real_mutex_trylock(m);
	rrc_rr_reserve(0);
	int r = real_mutex_trylock(m);
	acquired(RRC_EV_MUTEX_LOCK, RRC_EVF_TRY, m, m, r);
	return r;
}

int pthread_mutex_timedlock(pthread_mutex_t *m, const struct timespec *at)
{
	if (!real_timedlock)
		rrc_sync_resolve();
	if (!rrc_rr_recording())
		return real_timedlock(m, at);
	rrc_rr_reserve(0);
	int r = real_timedlock(m, at);
	acquired(RRC_EV_MUTEX_LOCK, RRC_EVF_TIMED, m, m, r);
	return r;
}

int pthread_mutex_clocklock(pthread_mutex_t *m, clockid_t clk, const struct timespec *at)
{
	if (!real_clocklock)
		rrc_sync_resolve();
	if (!rrc_rr_recording())
		return real_clocklock(m, clk, at);
	rrc_rr_reserve(0);
	int r = real_clocklock(m, clk, at);
	acquired(RRC_EV_MUTEX_LOCK, RRC_EVF_TIMED, m, m, r);
	return r;
}

int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
{
	if (!real_cond_wait)
		rrc_sync_resolve();
	if (!rrc_rr_recording())
		return real_cond_wait(c, m);
	rrc_rr_reserve(8);
	int r = real_cond_wait(c, m);
	acquired(RRC_EV_COND_WAIT, 0, c, m, 0); /* the mutex is held again whatever r is */
	return r;
}

int pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *at)
{
	if (!real_cond_timedwait)
		rrc_sync_resolve();
	if (!rrc_rr_recording())
		return real_cond_timedwait(c, m, at);
	rrc_rr_reserve(8);
	int r = real_cond_timedwait(c, m, at);
	rrc_hook_enter();
	uint64_t seq = rrc_rr_obj_seq(m), maddr = (uint64_t)m;
	rrc_rr_event(RRC_EV_COND_WAIT, RRC_EVF_TIMED, (uint64_t)c, seq, -(int64_t)r, &maddr, 8);
	rrc_hook_leave();
	return r;
}

int pthread_cond_clockwait(pthread_cond_t *c, pthread_mutex_t *m, clockid_t clk, const struct timespec *at)
{
	if (!real_cond_clockwait)
		rrc_sync_resolve();
	if (!rrc_rr_recording())
		return real_cond_clockwait(c, m, clk, at);
	rrc_rr_reserve(8);
	int r = real_cond_clockwait(c, m, clk, at);
	rrc_hook_enter();
	uint64_t seq = rrc_rr_obj_seq(m), maddr = (uint64_t)m;
	rrc_rr_event(RRC_EV_COND_WAIT, RRC_EVF_TIMED, (uint64_t)c, seq, -(int64_t)r, &maddr, 8);
	rrc_hook_leave();
	return r;
}

/* ---- threads ---- */

/* The order of thread creations: THREAD_CREATE's seq in the creator and
 * THREAD_START's in the new thread pair them up. */
static uint8_t creations;

struct start {
	void *(*fn)(void *);
	void *arg;
	uint32_t creator;
	uint64_t birth;
};

static void ended(void *unused)
{
	(void)unused;
	rrc_rr_thread_exit();
}

static void *trampoline(void *p)
{
	struct start s = *(struct start *)p;
	free(p);
	rrc_rr_creator = s.creator;
	rrc_rr_birth = s.birth;
	rrc_rr_reserve(0); /* takes this thread's ring: THREAD_START */
	void *ret;
	pthread_cleanup_push(ended, 0);
	ret = s.fn(s.arg);
	pthread_cleanup_pop(1);
	return ret;
}

int pthread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
	if (!real_create)
		rrc_sync_resolve();
	if (!rrc_rr_recording())
		return real_create(th, attr, fn, arg);
	struct start *s = malloc(sizeof *s);
	if (!s)
		return EAGAIN;
	rrc_rr_reserve(0);
	rrc_hook_enter();
	uint64_t birth = rrc_rr_obj_seq(&creations);
	*s = (struct start){ fn, arg, (uint32_t)rrc_sys_gettid(), birth };
	int r = real_create(th, attr, trampoline, s);
	if (r)
		free(s);
	rrc_rr_event(RRC_EV_THREAD_CREATE, 0, 0, birth, -(int64_t)r, 0, 0);
	rrc_hook_leave();
	return r;
}
