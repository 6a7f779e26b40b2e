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
 *   pthread_rwlock_{rd,wr}lock, try-, timed-, clock-   RWLOCK_RD / RWLOCK_WR
 *   pthread_spin_lock trylock                        SPIN_LOCK
 *   sem_wait trywait timedwait clockwait             SEM_WAIT (result -errno)
 *   pthread_once                                     ONCE (result 1 in the thread that ran it)
 *   pthread_barrier_wait                             BARRIER (result: who was the serial thread)
 *   pthread_join                                     THREAD_JOIN (obj: the pthread_t)
 *
 * Readers of an rwlock are numbered too, in the order they took it: a
 * replay in that order is one the program could have run. Releases
 * (unlock, sem_post, cond_signal, broadcast) are not recorded: the order
 * of the acquisitions they allow is. glibc-internal locks are out of any
 * preload's reach (README).
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
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
static int (*real_rdlock)(pthread_rwlock_t *), (*real_tryrdlock)(pthread_rwlock_t *);
static int (*real_wrlock)(pthread_rwlock_t *), (*real_trywrlock)(pthread_rwlock_t *);
static int (*real_timedrdlock)(pthread_rwlock_t *, const struct timespec *);
static int (*real_timedwrlock)(pthread_rwlock_t *, const struct timespec *);
static int (*real_clockrdlock)(pthread_rwlock_t *, clockid_t, const struct timespec *);
static int (*real_clockwrlock)(pthread_rwlock_t *, clockid_t, const struct timespec *);
static int (*real_spin_lock)(pthread_spinlock_t *), (*real_spin_trylock)(pthread_spinlock_t *);
static int (*real_sem_wait)(sem_t *), (*real_sem_trywait)(sem_t *);
static int (*real_sem_timedwait)(sem_t *, const struct timespec *);
static int (*real_sem_clockwait)(sem_t *, clockid_t, const struct timespec *);
static int (*real_once)(pthread_once_t *, void (*)(void));
static int (*real_barrier_wait)(pthread_barrier_t *);
static int (*real_join)(pthread_t, void **);

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
	real_rdlock = dlsym(RTLD_NEXT, "pthread_rwlock_rdlock");
	real_tryrdlock = dlsym(RTLD_NEXT, "pthread_rwlock_tryrdlock");
	real_wrlock = dlsym(RTLD_NEXT, "pthread_rwlock_wrlock");
	real_trywrlock = dlsym(RTLD_NEXT, "pthread_rwlock_trywrlock");
	real_timedrdlock = dlsym(RTLD_NEXT, "pthread_rwlock_timedrdlock");
	real_timedwrlock = dlsym(RTLD_NEXT, "pthread_rwlock_timedwrlock");
	real_clockrdlock = dlsym(RTLD_NEXT, "pthread_rwlock_clockrdlock");
	real_clockwrlock = dlsym(RTLD_NEXT, "pthread_rwlock_clockwrlock");
	real_spin_lock = dlsym(RTLD_NEXT, "pthread_spin_lock");
	real_spin_trylock = dlsym(RTLD_NEXT, "pthread_spin_trylock");
	real_sem_wait = dlsym(RTLD_NEXT, "sem_wait");
	real_sem_trywait = dlsym(RTLD_NEXT, "sem_trywait");
	real_sem_timedwait = dlsym(RTLD_NEXT, "sem_timedwait");
	real_sem_clockwait = dlsym(RTLD_NEXT, "sem_clockwait");
	real_once = dlsym(RTLD_NEXT, "pthread_once");
	real_barrier_wait = dlsym(RTLD_NEXT, "pthread_barrier_wait");
	real_join = dlsym(RTLD_NEXT, "pthread_join");
}

/* The event of an acquisition attempt on obj: numbered on `on` (the object
 * itself, or a condition variable's mutex) when it got it. A condition
 * wait's event names its mutex in its data. */
static void logged(uint16_t kind, uint16_t flags, const void *obj, const void *on, int got, int64_t result)
{
	uint64_t maddr = (uint64_t)on;
	int cond = kind == RRC_EV_COND_WAIT;
	rrc_hook_enter();
	rrc_rr_event(kind, flags, (uint64_t)obj, got ? rrc_rr_obj_seq(on) : 0, result, cond ? &maddr : 0,
		     cond ? 8 : 0);
	rrc_hook_leave();
}

/* The shape of every wrapper of this file: resolved; not recording, the
 * call alone; recording, room reserved, the call made before the guard (it
 * may block: parkable), its outcome logged after. */
#define UNRECORDED_OR_RESERVE(resolved, call, room) do { \
		if (!(resolved)) \
			rrc_sync_resolve(); \
		if (!rrc_rr_recording()) \
			return (call); \
		rrc_rr_reserve(room); \
	} while (0)

/* An acquisition that returns 0 or an error number. */
#define ACQUIRE(resolved, kind, flags, obj, call) do { \
		UNRECORDED_OR_RESERVE(resolved, call, 0); \
		int r_ = (call); \
		logged((kind), (flags), (obj), (obj), r_ == 0, -(int64_t)r_); \
		return r_; \
	} while (0)

/* A condition wait: its mutex is held again whatever it returns. */
#define COND_WAIT(resolved, flags, c, m, call) do { \
		UNRECORDED_OR_RESERVE(resolved, call, 8); \
		int r_ = (call); \
		logged(RRC_EV_COND_WAIT, (flags), (c), (m), 1, -(int64_t)r_); \
		return r_; \
	} while (0)

/* real_mutex_lock and real_mutex_trylock are bound at link time */
int pthread_mutex_lock(pthread_mutex_t *m) { ACQUIRE(1, RRC_EV_MUTEX_LOCK, 0, m, real_mutex_lock(m)); }
int pthread_mutex_trylock(pthread_mutex_t *m) { ACQUIRE(1, RRC_EV_MUTEX_LOCK, RRC_EVF_TRY, m, real_mutex_trylock(m)); }
int pthread_mutex_timedlock(pthread_mutex_t *m, const struct timespec *at)
{ ACQUIRE(real_timedlock, RRC_EV_MUTEX_LOCK, RRC_EVF_TIMED, m, real_timedlock(m, at)); }
int pthread_mutex_clocklock(pthread_mutex_t *m, clockid_t clk, const struct timespec *at)
{ ACQUIRE(real_clocklock, RRC_EV_MUTEX_LOCK, RRC_EVF_TIMED, m, real_clocklock(m, clk, at)); }

int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
{ COND_WAIT(real_cond_wait, 0, c, m, real_cond_wait(c, m)); }
int pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *at)
{ COND_WAIT(real_cond_timedwait, RRC_EVF_TIMED, c, m, real_cond_timedwait(c, m, at)); }
int pthread_cond_clockwait(pthread_cond_t *c, pthread_mutex_t *m, clockid_t clk, const struct timespec *at)
{ COND_WAIT(real_cond_clockwait, RRC_EVF_TIMED, c, m, real_cond_clockwait(c, m, clk, at)); }

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

/* ---- the other primitives ---- */

int pthread_rwlock_rdlock(pthread_rwlock_t *l) { ACQUIRE(real_rdlock, RRC_EV_RWLOCK_RD, 0, l, real_rdlock(l)); }
int pthread_rwlock_tryrdlock(pthread_rwlock_t *l) { ACQUIRE(real_tryrdlock, RRC_EV_RWLOCK_RD, RRC_EVF_TRY, l, real_tryrdlock(l)); }
int pthread_rwlock_wrlock(pthread_rwlock_t *l) { ACQUIRE(real_wrlock, RRC_EV_RWLOCK_WR, 0, l, real_wrlock(l)); }
int pthread_rwlock_trywrlock(pthread_rwlock_t *l) { ACQUIRE(real_trywrlock, RRC_EV_RWLOCK_WR, RRC_EVF_TRY, l, real_trywrlock(l)); }
int pthread_rwlock_timedrdlock(pthread_rwlock_t *l, const struct timespec *t)
{ ACQUIRE(real_timedrdlock, RRC_EV_RWLOCK_RD, RRC_EVF_TIMED, l, real_timedrdlock(l, t)); }
int pthread_rwlock_timedwrlock(pthread_rwlock_t *l, const struct timespec *t)
{ ACQUIRE(real_timedwrlock, RRC_EV_RWLOCK_WR, RRC_EVF_TIMED, l, real_timedwrlock(l, t)); }
int pthread_rwlock_clockrdlock(pthread_rwlock_t *l, clockid_t c, const struct timespec *t)
{ ACQUIRE(real_clockrdlock, RRC_EV_RWLOCK_RD, RRC_EVF_TIMED, l, real_clockrdlock(l, c, t)); }
int pthread_rwlock_clockwrlock(pthread_rwlock_t *l, clockid_t c, const struct timespec *t)
{ ACQUIRE(real_clockwrlock, RRC_EV_RWLOCK_WR, RRC_EVF_TIMED, l, real_clockwrlock(l, c, t)); }
int pthread_spin_lock(pthread_spinlock_t *l) { ACQUIRE(real_spin_lock, RRC_EV_SPIN_LOCK, 0, (const void *)l, real_spin_lock(l)); }
int pthread_spin_trylock(pthread_spinlock_t *l)
{ ACQUIRE(real_spin_trylock, RRC_EV_SPIN_LOCK, RRC_EVF_TRY, (const void *)l, real_spin_trylock(l)); }

/* sem_* return -1 and set errno: the outcome is 0 or -errno. */
#define SEM(real, flags, s, call) do { \
		UNRECORDED_OR_RESERVE(real, call, 0); \
		int r_ = (call); \
		int e_ = errno; \
		logged(RRC_EV_SEM_WAIT, (flags), (s), (s), r_ == 0, r_ == 0 ? 0 : -(int64_t)e_); \
		errno = e_; \
		return r_; \
	} while (0)

int sem_wait(sem_t *s) { SEM(real_sem_wait, 0, s, real_sem_wait(s)); }
int sem_trywait(sem_t *s) { SEM(real_sem_trywait, RRC_EVF_TRY, s, real_sem_trywait(s)); }
int sem_timedwait(sem_t *s, const struct timespec *t) { SEM(real_sem_timedwait, RRC_EVF_TIMED, s, real_sem_timedwait(s, t)); }
int sem_clockwait(sem_t *s, clockid_t c, const struct timespec *t)
{ SEM(real_sem_clockwait, RRC_EVF_TIMED, s, real_sem_clockwait(s, c, t)); }

int pthread_barrier_wait(pthread_barrier_t *b)
{
	if (!real_barrier_wait)
		rrc_sync_resolve();
	if (!rrc_rr_recording())
		return real_barrier_wait(b);
	rrc_rr_reserve(0);
	int r = real_barrier_wait(b);
	/* the serial thread's return is not an error: numbered like the others */
	logged(RRC_EV_BARRIER, 0, b, b, r == 0 || r == PTHREAD_BARRIER_SERIAL_THREAD, r);
	return r;
}

/* Which thread ran the init routine: known through a trampoline that
 * marks its thread (a routine may itself call pthread_once: kept per
 * level on the stack). */
static __thread void (*once_fn)(void) __attribute__((tls_model("initial-exec")));
static __thread int once_ran __attribute__((tls_model("initial-exec")));
static void once_trampoline(void)
{
	void (*fn)(void) = once_fn;
	once_ran = 1;
	fn();
}

int pthread_once(pthread_once_t *o, void (*init)(void))
{
	if (!real_once)
		rrc_sync_resolve();
	if (!rrc_rr_recording())
		return real_once(o, init);
	rrc_rr_reserve(0);
	void (*saved_fn)(void) = once_fn;
	int saved_ran = once_ran;
	once_fn = init;
	once_ran = 0;
	int r = real_once(o, once_trampoline);
	int ran = once_ran;
	once_fn = saved_fn;
	once_ran = saved_ran;
	rrc_hook_enter();
	rrc_rr_event(RRC_EV_ONCE, 0, (uint64_t)o, 0, r ? -(int64_t)r : ran, 0, 0);
	rrc_hook_leave();
	return r;
}

int pthread_join(pthread_t t, void **ret)
{
	if (!real_join)
		rrc_sync_resolve();
	if (!rrc_rr_recording())
		return real_join(t, ret);
	rrc_rr_reserve(0);
	int r = real_join(t, ret);
	rrc_hook_enter();
	rrc_rr_event(RRC_EV_THREAD_JOIN, 0, (uint64_t)t, 0, -(int64_t)r, 0, 0);
	rrc_hook_leave();
	return r;
}
