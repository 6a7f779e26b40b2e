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
 * replay it fails at once, without trying). A release (unlock) of a mutex
 * or spinlock is no event: the releaser notes, while it still holds the
 * object, its own count of events in the object's table entry, and the
 * next acquisition's event carries it (released_at): a replay that goes
 * live at a cut other than a checkpoint's must not stop a thread inside a
 * critical section another thread's acquisition in the cut needs left
 * (rr-replay-plan.c), and that is all it needs to know of releases. Half
 * the events of a lock-heavy server (memcached) were releases. An rwlock's
 * release stays an event (RWLOCK_UNLOCK, seq: the object's last number):
 * readers hold it together, so the next writer cannot name one release.
 * A condition variable's wait is that release before it waits, then the
 * acquisition of its mutex on the way out (Castor replays it as unlock,
 * wait for the turn, lock).
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
 *   pthread_join tryjoin_np timedjoin_np clockjoin_np  THREAD_JOIN (obj: the pthread_t; flags TRY/TIMED)
 *
 * Readers of an rwlock are numbered too, in the order they took it: a
 * replay in that order is one the program could have run. sem_post,
 * cond_signal and broadcast are not recorded: the order of the
 * acquisitions they allow is. glibc-internal locks are out of any
 * preload's reach (README).
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdlib.h>
#include "rrc_lib.h"
#include "rr-log.h"
#include "rr-replay.h"

/* glibc's aliases of the mutex calls, bound by version (they are not
 * default versions, so a plain reference would not link) */
extern int real_mutex_lock(pthread_mutex_t *);
extern int real_mutex_trylock(pthread_mutex_t *);
extern int real_mutex_unlock(pthread_mutex_t *);
extern int real_rwlock_unlock(pthread_rwlock_t *);
__asm__(".symver real_mutex_lock, __pthread_mutex_lock@GLIBC_2.2.5");
__asm__(".symver real_mutex_trylock, __pthread_mutex_trylock@GLIBC_2.2.5");
__asm__(".symver real_mutex_unlock, __pthread_mutex_unlock@GLIBC_2.2.5");
__asm__(".symver real_rwlock_unlock, __pthread_rwlock_unlock@GLIBC_2.2.5");

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
static int (*real_spin_unlock)(pthread_spinlock_t *);
static int (*real_sem_wait)(sem_t *), (*real_sem_trywait)(sem_t *);
static int (*real_sem_timedwait)(sem_t *, const struct timespec *);
static int (*real_sem_clockwait)(sem_t *, clockid_t, const struct timespec *);
static int (*real_once)(pthread_once_t *, void (*)(void));
static int (*real_barrier_wait)(pthread_barrier_t *);
static int (*real_join)(pthread_t, void **), (*real_tryjoin)(pthread_t, void **);
static int (*real_timedjoin)(pthread_t, void **, const struct timespec *);
static int (*real_clockjoin)(pthread_t, void **, clockid_t, const struct timespec *);
static int (*real_cond_signal)(pthread_cond_t *), (*real_cond_broadcast)(pthread_cond_t *);

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
	real_spin_unlock = dlsym(RTLD_NEXT, "pthread_spin_unlock");
	real_sem_wait = dlsym(RTLD_NEXT, "sem_wait");
	real_sem_trywait = dlsym(RTLD_NEXT, "sem_trywait");
	real_sem_timedwait = dlsym(RTLD_NEXT, "sem_timedwait");
	real_sem_clockwait = dlsym(RTLD_NEXT, "sem_clockwait");
	real_once = dlsym(RTLD_NEXT, "pthread_once");
	real_barrier_wait = dlsym(RTLD_NEXT, "pthread_barrier_wait");
	real_tryjoin = dlsym(RTLD_NEXT, "pthread_tryjoin_np");
	real_timedjoin = dlsym(RTLD_NEXT, "pthread_timedjoin_np");
	real_clockjoin = dlsym(RTLD_NEXT, "pthread_clockjoin_np");
	real_join = dlsym(RTLD_NEXT, "pthread_join"); /* last: the others are resolved when it is */
	real_cond_signal = dlvsym(RTLD_NEXT, "pthread_cond_signal", "GLIBC_2.3.2");
	real_cond_broadcast = dlvsym(RTLD_NEXT, "pthread_cond_broadcast", "GLIBC_2.3.2");
}

/* The event of an acquisition attempt on obj: numbered on `on` (the object
 * itself, or a condition variable's mutex) when it got it. A condition
 * wait's event names its mutex in its data. */
static void logged(uint16_t kind, uint16_t flags, const void *obj, const void *on, int got, int64_t result)
{
	uint64_t maddr = (uint64_t)on;
	int cond = kind == RRC_EV_COND_WAIT;
	rrc_hook_enter();
	if (!rrc_rr_recording()) { /* parked since the call, restored into replay: the log's next */
		rrc_hook_leave();
		if (rrc_rr_replaying())
			rrc_rp_late(kind, (uint64_t)obj, result);
		return;
	}
	rrc_rr_acquired(kind, flags, (uint64_t)obj, on, got, result, cond ? &maddr : 0, cond ? 8 : 0);
	rrc_hook_leave();
}

/* The number of the object's last acquisition (an rwlock release's seq). */
static uint64_t last_number(const void *obj)
{
	volatile uint64_t *c = rrc_rr_obj_counter(obj, 0);
	uint64_t n = c ? RRC_LOAD(c) : 0;
	return n ? n - 1 : RRC_SEQ_NONE;
}

/* An rwlock release's event, logged while the object is still held. 1: logged,
 * inside the hook guard (the caller releases, then leaves it); 0: not
 * recording any more (parked, restored into replay: the caller replays). */
static int release_logged(uint16_t kind, const void *obj)
{
	rrc_hook_enter();
	if (!rrc_rr_recording()) {
		rrc_hook_leave();
		return 0;
	}
	rrc_rr_event(kind, 0, (uint64_t)obj, last_number(obj), 0, 0, 0);
	return 1;
}

/* ---- replay (rr-replay.h) ---- */

/* The real acquisitions a replay makes once it is the thread's turn (a
 * recorded trylock's success waits like a lock: the holder before it in
 * the order may not have released yet), and their undoing (a thread that
 * acquired in a call begun before the restore gives it back, then takes
 * its turn). */
typedef int (*op_fn)(void *);
static int lock_m(void *o) { return real_mutex_lock(o); }
static int unlock_m(void *o) { return real_mutex_unlock(o); }
static int rd_l(void *o) { return real_rdlock(o); }
static int wr_l(void *o) { return real_wrlock(o); }
static int unlock_l(void *o) { return real_rwlock_unlock(o); }
static int spin_l(void *o) { return real_spin_lock(o); }
/* glibc's pthread_spin_unlock has no alias to bind by version (a
 * versioned reference to pthread_spin_unlock binds to the wrapper below):
 * looked up like the others */
static int unlock_s(void *o)
{
	if (!real_spin_unlock)
		rrc_sync_resolve();
	return real_spin_unlock(o);
}
static int sem_w(void *o) { return real_sem_wait(o) ? errno : 0; }
static int sem_p(void *o) { return sem_post(o); }

/* An acquisition's recorded outcome: a success in its turn on obj, for
 * real; a failure (EBUSY, ETIMEDOUT...) at once, without trying. Returns
 * the recorded result (minus the error number); *live is set instead when
 * the thread's log has ended (every thread is live: the call is made). */
static int64_t replay_acquire(uint16_t kind, void *obj, op_fn acquire, int *live)
{
	const struct rrc_log_event *e = rrc_rp_next(kind, (uint64_t)obj);
	*live = !e;
	if (!e)
		return 0;
	int64_t res = e->result;
	uint64_t key, seq;
	if (rrc_rp_numbered(e, &key, &seq)) {
		volatile uint64_t *c = rrc_rr_obj_counter(obj, 1);
		rrc_rp_turn(c, seq, "the object", (uint64_t)obj);
		int r = acquire(obj);
		if (r)
			rrc_rp_diverge("an acquisition that failed in its turn with error", (uint64_t)r);
		rrc_rp_advance(c);
	}
	rrc_rp_done();
	return res;
}

/* An rwlock's release: its event consumed (an rwlock's reader may
 * release before or after another reader's acquisition, which the log
 * does not order: its number is not checked), the object released for
 * real. At the end of the thread's log it does not wait for go-live (a
 * thread holding a lock would keep the others from their turns): it
 * releases. */
static int replay_release(uint16_t kind, void *obj, op_fn release)
{
	if (rrc_rp_peek(kind, (uint64_t)obj))
		rrc_rp_done();
	return release(obj);
}

/* A condition wait: its mutex given up, taken again in its turn; the
 * condition variable itself is not waited on (a spurious wakeup in the
 * program's eyes, which POSIX allows, at the recorded point). */
static int64_t replay_cond(pthread_cond_t *c, pthread_mutex_t *m, int *live)
{
	const struct rrc_log_event *e = rrc_rp_peek(RRC_EV_COND_WAIT, (uint64_t)c);
	*live = 0;
	real_mutex_unlock(m);
	if (!e) {
		/* the log ends inside this wait: it lasts, the mutex given up as
		 * the wait does, until every thread goes live, then returns as a
		 * spurious wakeup (a thread waiting for go-live while holding the
		 * mutex would keep the others from their turns) */
		rrc_rp_wait_live();
		real_mutex_lock(m);
		return 0;
	}
	volatile uint64_t *cnt = rrc_rr_obj_counter(m, 1);
	rrc_rp_turn(cnt, e->seq, "the condition variable's mutex", (uint64_t)m);
	int r = real_mutex_lock(m);
	if (r)
		rrc_rp_diverge("a condition wait whose mutex failed with error", (uint64_t)r);
	rrc_rp_advance(cnt);
	int64_t res = e->result;
	rrc_rp_done();
	return res;
}

/* The shape of every wrapper of this file: resolved; replaying, the log's
 * outcome; not recording, the call alone; recording, room reserved, the
 * call made before the guard (it may block: parkable), its outcome logged
 * after. A call that returns after a restore into replay (begun while
 * recording, parked) gives back what it got and is replayed. */
#define UNRECORDED_OR_RESERVE(resolved, call, room) do { \
		if (!(resolved)) \
			rrc_sync_resolve(); \
		if (!rrc_rr_recording()) \
			return (call); \
		rrc_rr_reserve(room); \
	} while (0)

#define REPLAY_OR_LIVE(replay_expr, ret_expr) do { \
		if (rrc_rr_replaying()) { \
			int live_; \
			int64_t res_ = (replay_expr); \
			if (!live_) \
				return (ret_expr); \
		} \
	} while (0)

/* An acquisition that returns 0 or an error number. */
#define ACQUIRE(resolved, kind, flags, obj, call, acquire, undo) do { \
		if (!(resolved)) \
			rrc_sync_resolve(); \
		REPLAY_OR_LIVE(replay_acquire((kind), (void *)(obj), (acquire), &live_), (int)-res_); \
		UNRECORDED_OR_RESERVE(1, call, 0); \
		int r_ = (call); \
		if (rrc_rr_replaying()) { \
			if (r_ == 0) \
				(undo)((void *)(obj)); \
			REPLAY_OR_LIVE(replay_acquire((kind), (void *)(obj), (acquire), &live_), (int)-res_); \
			return (call); \
		} \
		logged((kind), (flags), (obj), (obj), r_ == 0, -(int64_t)r_); \
		return r_; \
	} while (0)

/* A condition wait: its mutex's release noted first (while held), then
 * the wait; the mutex is held again whatever it returns. */
#define COND_WAIT(resolved, flags, c, m, call) do { \
		if (!(resolved)) \
			rrc_sync_resolve(); \
		REPLAY_OR_LIVE(replay_cond((c), (m), &live_), (int)-res_); \
		UNRECORDED_OR_RESERVE(1, call, 8); \
		rrc_rr_released(m); \
		int r_ = (call); \
		if (rrc_rr_replaying()) { \
			/* parked in the wait, restored into replay: the mutex held \
			 * again, replay_cond gives it up for the turn */ \
			REPLAY_OR_LIVE(replay_cond((c), (m), &live_), (int)-res_); \
			return r_; \
		} \
		logged(RRC_EV_COND_WAIT, (flags), (c), (m), 1, -(int64_t)r_); \
		return r_; \
	} while (0)

/* An rwlock's release: its event logged while the object is held, then
 * released. */
#define RELEASE(kind, obj, release) do { \
		if (rrc_rr_replaying()) \
			return replay_release((kind), (void *)(obj), (release)); \
		if (!rrc_rr_recording()) \
			return (release)((void *)(obj)); \
		rrc_rr_reserve(0); \
		if (!release_logged((kind), (obj))) \
			return rrc_rr_replaying() ? replay_release((kind), (void *)(obj), (release)) \
						  : (release)((void *)(obj)); \
		int r_ = (release)((void *)(obj)); \
		rrc_hook_leave(); \
		return r_; \
	} while (0)

/* A mutex's or spinlock's release: noted for the next acquisition (no
 * event, no hook guard: a park between the note and the release resumes
 * into the release, whatever mode it resumes in); in replay the object is
 * simply released. */
#define RELEASE_NOTED(obj, release) do { \
		if (rrc_rr_recording()) \
			rrc_rr_released(obj); \
		return (release)((void *)(obj)); \
	} while (0)

int pthread_mutex_unlock(pthread_mutex_t *m) { RELEASE_NOTED(m, unlock_m); }
int pthread_rwlock_unlock(pthread_rwlock_t *l) { RELEASE(RRC_EV_RWLOCK_UNLOCK, l, unlock_l); }
int pthread_spin_unlock(pthread_spinlock_t *l) { RELEASE_NOTED((const void *)l, unlock_s); }

/* real_mutex_lock and real_mutex_trylock are bound at link time */
int pthread_mutex_lock(pthread_mutex_t *m) { ACQUIRE(1, RRC_EV_MUTEX_LOCK, 0, m, real_mutex_lock(m), lock_m, unlock_m); }
int pthread_mutex_trylock(pthread_mutex_t *m)
{ ACQUIRE(1, RRC_EV_MUTEX_LOCK, RRC_EVF_TRY, m, real_mutex_trylock(m), lock_m, unlock_m); }
int pthread_mutex_timedlock(pthread_mutex_t *m, const struct timespec *at)
{ ACQUIRE(real_timedlock, RRC_EV_MUTEX_LOCK, RRC_EVF_TIMED, m, real_timedlock(m, at), lock_m, unlock_m); }
int pthread_mutex_clocklock(pthread_mutex_t *m, clockid_t clk, const struct timespec *at)
{ ACQUIRE(real_clocklock, RRC_EV_MUTEX_LOCK, RRC_EVF_TIMED, m, real_clocklock(m, clk, at), lock_m, unlock_m); }

/* In replay, a signal wakes every real waiter: only threads parked in a
 * wait begun before the restore wait for real, and which of them the
 * recording woke is the log's to say (each then takes its turn). */
int pthread_cond_signal(pthread_cond_t *c)
{
	if (!real_cond_signal)
		rrc_sync_resolve();
	return rrc_rr_replaying() ? real_cond_broadcast(c) : real_cond_signal(c);
}

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
	int replay;     /* made in replay: the thread replays its events */
};

const void *rrc_rr_creations(void)
{
	return &creations;
}

static void ended(void *unused)
{
	(void)unused;
	if (rrc_rr_replaying()) {
		const struct rrc_log_event *e = rrc_rp_next(RRC_EV_THREAD_EXIT, RRC_RP_ANY);
		if (e)
			rrc_rp_done();
		return;
	}
	rrc_rr_thread_exit();
}

static void *trampoline(void *p)
{
	struct start s = *(struct start *)p;
	free(p);
	if (s.replay) {
		/* its identity in the log: the creation that made it */
		rrc_rp_thread_born(s.creator, s.birth);
		const struct rrc_log_event *e = rrc_rp_next(RRC_EV_THREAD_START, s.creator);
		if (e) {
			if (e->seq != s.birth)
				rrc_rp_diverge("a thread started by creation number", s.birth);
			rrc_rp_done();
		}
	} else {
		rrc_rr_creator = s.creator;
		rrc_rr_birth = s.birth;
		rrc_rr_reserve(0); /* takes this thread's ring: THREAD_START */
	}
	void *ret;
	pthread_cleanup_push(ended, 0);
	ret = s.fn(s.arg);
	pthread_cleanup_pop(1);
	return ret;
}

/* Replay: the creation in its turn among births, made for real when the
 * recording's succeeded. */
static int replay_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *), void *arg, int *live)
{
	const struct rrc_log_event *e = rrc_rp_next(RRC_EV_THREAD_CREATE, RRC_RP_ANY);
	*live = !e;
	if (!e)
		return 0;
	volatile uint64_t *c = rrc_rr_obj_counter(&creations, 1);
	rrc_rp_turn(c, e->seq, "the births", 0);
	int r = (int)-e->result;
	if (!r) {
		struct start *s = malloc(sizeof *s);
		if (!s)
			rrc_rp_diverge("no memory for a thread's start", ~0ull);
		*s = (struct start){ fn, arg, rrc_rp_self(), e->seq, 1 };
		r = real_create(th, attr, trampoline, s);
		if (r)
			rrc_rp_diverge("pthread_create failing with", (uint64_t)r);
	}
	rrc_rp_advance(c);
	rrc_rp_done();
	return r;
}

int pthread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
	if (!real_create)
		rrc_sync_resolve();
	if (rrc_rr_replaying()) {
		int live, r = replay_create(th, attr, fn, arg, &live);
		if (!live)
			return r;
	}
	if (!rrc_rr_recording())
		return real_create(th, attr, fn, arg);
	struct start *s = malloc(sizeof *s);
	if (!s)
		return EAGAIN;
	rrc_rr_reserve(0);
	rrc_hook_enter();
	uint64_t birth = rrc_rr_obj_seq(&creations);
	*s = (struct start){ fn, arg, (uint32_t)rrc_sys_gettid(), birth, 0 };
	int r = real_create(th, attr, trampoline, s);
	if (r)
		free(s);
	rrc_rr_event(RRC_EV_THREAD_CREATE, 0, 0, birth, -(int64_t)r, 0, 0);
	rrc_hook_leave();
	return r;
}

/* ---- the other primitives ---- */

int pthread_rwlock_rdlock(pthread_rwlock_t *l) { ACQUIRE(real_rdlock, RRC_EV_RWLOCK_RD, 0, l, real_rdlock(l), rd_l, unlock_l); }
int pthread_rwlock_tryrdlock(pthread_rwlock_t *l) { ACQUIRE(real_tryrdlock, RRC_EV_RWLOCK_RD, RRC_EVF_TRY, l, real_tryrdlock(l), rd_l, unlock_l); }
int pthread_rwlock_wrlock(pthread_rwlock_t *l) { ACQUIRE(real_wrlock, RRC_EV_RWLOCK_WR, 0, l, real_wrlock(l), wr_l, unlock_l); }
int pthread_rwlock_trywrlock(pthread_rwlock_t *l) { ACQUIRE(real_trywrlock, RRC_EV_RWLOCK_WR, RRC_EVF_TRY, l, real_trywrlock(l), wr_l, unlock_l); }
int pthread_rwlock_timedrdlock(pthread_rwlock_t *l, const struct timespec *t)
{ ACQUIRE(real_timedrdlock, RRC_EV_RWLOCK_RD, RRC_EVF_TIMED, l, real_timedrdlock(l, t), rd_l, unlock_l); }
int pthread_rwlock_timedwrlock(pthread_rwlock_t *l, const struct timespec *t)
{ ACQUIRE(real_timedwrlock, RRC_EV_RWLOCK_WR, RRC_EVF_TIMED, l, real_timedwrlock(l, t), wr_l, unlock_l); }
int pthread_rwlock_clockrdlock(pthread_rwlock_t *l, clockid_t c, const struct timespec *t)
{ ACQUIRE(real_clockrdlock, RRC_EV_RWLOCK_RD, RRC_EVF_TIMED, l, real_clockrdlock(l, c, t), rd_l, unlock_l); }
int pthread_rwlock_clockwrlock(pthread_rwlock_t *l, clockid_t c, const struct timespec *t)
{ ACQUIRE(real_clockwrlock, RRC_EV_RWLOCK_WR, RRC_EVF_TIMED, l, real_clockwrlock(l, c, t), wr_l, unlock_l); }
int pthread_spin_lock(pthread_spinlock_t *l) { ACQUIRE(real_spin_lock, RRC_EV_SPIN_LOCK, 0, (const void *)l, real_spin_lock(l), spin_l, unlock_s); }
int pthread_spin_trylock(pthread_spinlock_t *l)
{ ACQUIRE(real_spin_trylock, RRC_EV_SPIN_LOCK, RRC_EVF_TRY, (const void *)l, real_spin_trylock(l), spin_l, unlock_s); }

/* sem_* return -1 and set errno: the outcome is 0 or -errno. */
#define SEM(real, flags, s, call) do { \
		if (!(real)) \
			rrc_sync_resolve(); \
		REPLAY_OR_LIVE(replay_acquire(RRC_EV_SEM_WAIT, (void *)(s), sem_w, &live_), \
			       res_ ? (errno = (int)-res_, -1) : 0); \
		UNRECORDED_OR_RESERVE(1, call, 0); \
		int r_ = (call); \
		if (rrc_rr_replaying()) { \
			if (r_ == 0) \
				sem_p((void *)(s)); \
			REPLAY_OR_LIVE(replay_acquire(RRC_EV_SEM_WAIT, (void *)(s), sem_w, &live_), \
				       res_ ? (errno = (int)-res_, -1) : 0); \
			return (call); \
		} \
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
	if (rrc_rr_replaying()) {
		/* every thread passes the real barrier; who was the serial one,
		 * and the order of the returns, are the log's */
		const struct rrc_log_event *e = rrc_rp_next(RRC_EV_BARRIER, (uint64_t)b);
		if (e) {
			uint64_t key, seq;
			real_barrier_wait(b);
			if (rrc_rp_numbered(e, &key, &seq)) {
				volatile uint64_t *c = rrc_rr_obj_counter(b, 1);
				rrc_rp_turn(c, seq, "the barrier", (uint64_t)b);
				rrc_rp_advance(c);
			}
			int r = (int)e->result;
			rrc_rp_done();
			return r;
		}
	}
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
	if (rrc_rr_replaying()) {
		const struct rrc_log_event *e = rrc_rp_next(RRC_EV_ONCE, (uint64_t)o);
		if (e) {
			/* the thread that ran the routine runs it; the others wait
			 * until it is done (glibc's bit 2 of the control word: done) */
			if (e->result == 0)
				while (!(__atomic_load_n((volatile int *)o, __ATOMIC_ACQUIRE) & 2)) {
					struct rrc_ts ts = { 0, 1000000 };
					rrc_sys_futex((volatile uint32_t *)o, RRC_FUTEX_WAIT,
						      (uint32_t)__atomic_load_n((volatile int *)o, __ATOMIC_ACQUIRE), &ts);
				}
			int r = real_once(o, init);
			rrc_rp_done();
			return r;
		}
	}
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
	if (!rrc_rr_recording()) {
		rrc_hook_leave();
		if (rrc_rr_replaying())
			rrc_rp_late(RRC_EV_ONCE, (uint64_t)o, 0);
		return r;
	}
	rrc_rr_event(RRC_EV_ONCE, 0, (uint64_t)o, 0, r ? -(int64_t)r : ran, 0, 0);
	rrc_hook_leave();
	return r;
}

/* Joins: THREAD_JOIN, its outcome (a timed or try join may fail with
 * ETIMEDOUT or EBUSY: an outcome the replay returns at once; a success is
 * replayed by a real join, without a deadline, which a recorded clock
 * would have put in the past). */
static int join_logged(uint16_t flags, pthread_t t, int r)
{
	rrc_hook_enter();
	if (!rrc_rr_recording()) {
		rrc_hook_leave();
		if (rrc_rr_replaying())
			rrc_rp_late(RRC_EV_THREAD_JOIN, (uint64_t)t, 0);
		return r;
	}
	rrc_rr_event(RRC_EV_THREAD_JOIN, flags, (uint64_t)t, 0, -(int64_t)r, 0, 0);
	rrc_hook_leave();
	return r;
}

static int join_replayed(pthread_t t, void **ret, int *live)
{
	const struct rrc_log_event *e = rrc_rp_next(RRC_EV_THREAD_JOIN, (uint64_t)t);
	*live = !e;
	if (!e)
		return 0;
	int r = (int)-e->result;
	if (r == 0) {
		int got = real_join(t, ret);
		if (got)
			rrc_rp_diverge("pthread_join returning", (uint64_t)got);
	}
	rrc_rp_done();
	return r;
}

#define JOIN(flags, call) do { \
		if (!real_join) \
			rrc_sync_resolve(); \
		if (rrc_rr_replaying()) { \
			int live_, r_ = join_replayed(t, ret, &live_); \
			if (!live_) \
				return r_; \
		} \
		if (!rrc_rr_recording()) \
			return (call); \
		rrc_rr_reserve(0); \
		return join_logged((flags), t, (call)); \
	} while (0)

int pthread_join(pthread_t t, void **ret) { JOIN(0, real_join(t, ret)); }
int pthread_tryjoin_np(pthread_t t, void **ret) { JOIN(RRC_EVF_TRY, real_tryjoin(t, ret)); }
int pthread_timedjoin_np(pthread_t t, void **ret, const struct timespec *at)
{ JOIN(RRC_EVF_TIMED, real_timedjoin(t, ret, at)); }
int pthread_clockjoin_np(pthread_t t, void **ret, clockid_t c, const struct timespec *at)
{ JOIN(RRC_EVF_TIMED, real_clockjoin(t, ret, c, at)); }
