/* SPDX-License-Identifier: MIT
 *
 * Deterministic replay (rr-replay.h; issue 13 §4; RRC §4.2, HyCoR §4.1):
 * each thread consuming its events, turns, divergence, going live.
 *
 * - A thread's identity in the log: a restored thread is its tid (rrc-restore
 *   gives every thread its tid again); a thread created during the replay
 *   is named by its creation (creator, birth), which pthread_create's
 *   trampoline hands over before the thread's first event.
 * - Turns: an acquisition waits until its object's counter (the table
 *   rr-log.c keeps in ordinary memory, so the image holds where each
 *   object stood) is the event's number, acquires for real, then moves the
 *   counter on. The fd table's sequence and the births the same way.
 * - Going live: the thread that consumes the last event of the replay
 *   turns replay off and wakes the threads that reached the end of their
 *   own events and wait (rrc_rp_next returning NULL): all go live together.
 * - A divergence stops its thread for good and keeps every other one from
 *   going live; `rrc restore --replay` reads the report (REPLAY_STATUS) and
 *   removes the container.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/ucontext.h>
#include "rrc_lib.h"
#include "lib-fds.h"
#include "rrc/control.h"
#include "rr-replay-int.h"
#include "rr-replay-plan.h"
#include "rr-fds.h"
#include "rr-conns.h"
#include "accept-queue.h"

static __thread struct rp_thread *rp_me __attribute__((tls_model("initial-exec")));
static __thread uint32_t rp_me_generation __attribute__((tls_model("initial-exec")));
static __thread uint32_t born_creator __attribute__((tls_model("initial-exec")));
static __thread uint64_t born_birth __attribute__((tls_model("initial-exec")));
static __thread int born_set __attribute__((tls_model("initial-exec")));
__thread int rrc_rp_in_call __attribute__((tls_model("initial-exec")));

/* a thread the log does not know: it has nothing to replay */
static struct rp_thread nobody;

/* ---- names for reports ---- */

static const char *kind_name(uint16_t k)
{
	switch (k) {
	case RRC_EV_THREAD_START: return "thread_start";
	case RRC_EV_THREAD_CREATE: return "thread_create";
	case RRC_EV_THREAD_EXIT: return "thread_exit";
	case RRC_EV_THREAD_JOIN: return "thread_join";
	case RRC_EV_MUTEX_LOCK: return "mutex_lock";
	case RRC_EV_RWLOCK_UNLOCK: return "rwlock_unlock";
	case RRC_EV_COND_WAIT: return "cond_wait";
	case RRC_EV_RWLOCK_RD: return "rwlock_rd";
	case RRC_EV_RWLOCK_WR: return "rwlock_wr";
	case RRC_EV_SPIN_LOCK: return "spin_lock";
	case RRC_EV_SEM_WAIT: return "sem_wait";
	case RRC_EV_ONCE: return "once";
	case RRC_EV_BARRIER: return "barrier";
	case RRC_EV_READ: return "read";
	case RRC_EV_ACCEPT: return "accept";
	case RRC_EV_EPOLL_WAIT: return "epoll_wait";
	case RRC_EV_POLL: return "poll";
	case RRC_EV_SELECT: return "select";
	case RRC_EV_CLOCK: return "clock";
	case RRC_EV_RANDOM: return "random";
	case RRC_EV_SLEEP: return "sleep";
	case RRC_EV_FD: return "fd";
	case RRC_EV_OUTPUT: return "output";
	case RRC_EV_SOCKNAME: return "sockname";
	case RRC_EV_IOCTL: return "ioctl";
	case RRC_EV_SOCKOPT: return "sockopt";
	case RRC_EV_EPOLL_CTL: return "epoll_ctl";
	default: return "?";
	}
}

/* ---- numbers and counters ---- */

static volatile uint64_t *counter_of(uint64_t key, int create)
{
	if (key == RP_KEY_FDT)
		return rrc_fdt_counter();
	if (key == RP_KEY_CREATIONS)
		key = (uint64_t)rrc_rr_creations();
	return rrc_rr_obj_counter((const void *)key, create);
}

uint64_t rp_counter_now(uint64_t key)
{
	volatile uint64_t *c = counter_of(key, 0);
	return c ? RRC_LOAD(c) : 0;
}

/* ---- reports ---- */

static void report_set(const char *msg)
{
	if (__atomic_exchange_n(&rp.report_taken, 1, __ATOMIC_SEQ_CST))
		return;
	rrc_bput(rp.report, sizeof rp.report, 0, msg);
}

static size_t put_event(char *m, size_t cap, size_t l, const struct rrc_log_event *e)
{
	l = rrc_bput(m, cap, l, kind_name(e->kind));
	l = rrc_bput(m, cap, l, " obj=");
	l = rrc_bput_hex(m, cap, l, e->obj);
	l = rrc_bput(m, cap, l, " seq=");
	l = rrc_bput_u64(m, cap, l, e->seq);
	l = rrc_bput(m, cap, l, " result=");
	if (e->result < 0) {
		l = rrc_bput(m, cap, l, "-");
		l = rrc_bput_u64(m, cap, l, (uint64_t)-e->result);
	} else {
		l = rrc_bput_u64(m, cap, l, (uint64_t)e->result);
	}
	return l;
}

static size_t put_thread(char *m, size_t cap, size_t l, const struct rp_thread *t)
{
	l = rrc_bput(m, cap, l, "thread ");
	l = rrc_bput_u64(m, cap, l, t->tid);
	l = rrc_bput(m, cap, l, " at event #");
	return rrc_bput_u64(m, cap, l, t->pos);
}

static void __attribute__((noreturn)) stop_forever(void)
{
	uint32_t never = 0;
	rrc_fdt_drop_held();
	for (;;)
		rrc_sys_futex(&never, RRC_FUTEX_WAIT, 0, 0);
}

void rp_diverged(const char *msg)
{
	report_set(msg);
	RRC_STORE(&rp.state, RP_DIVERGED);
	rrc_sys_futex(&rp.state, RRC_FUTEX_WAKE, 0x7fffffff, 0);
	rrc_log(msg);
}

void rrc_rp_diverge(const char *got, uint64_t got_value)
{
	struct rp_thread *t = rp_me ? rp_me : &nobody;
	char m[600];
	size_t l = rrc_bput(m, sizeof m, 0, "replay diverged: ");
	l = put_thread(m, sizeof m, l, t);
	if (t->pos < t->end) {
		l = rrc_bput(m, sizeof m, l, ": expected ");
		l = put_event(m, sizeof m, l, t->ev[t->pos]);
	}
	l = rrc_bput(m, sizeof m, l, "; got ");
	l = rrc_bput(m, sizeof m, l, got);
	if (got_value != ~0ull) {
		l = rrc_bput(m, sizeof m, l, " ");
		rrc_bput_hex(m, sizeof m, l, got_value);
	}
	rp_diverged(m);
	stop_forever();
}

/* ---- identity ---- */

static struct rp_thread *me(void)
{
	if (rp_me && rp_me_generation == rp.generation)
		return rp_me;
	if (rp_me_generation != rp.generation) /* a thread of an earlier replay, restored */
		born_set = 0;
	uint32_t tid = (uint32_t)rrc_sys_gettid();
	struct rp_thread *found = &nobody;
	for (uint32_t k = 0; k < rp.nr_threads; k++) {
		struct rp_thread *t = &rp.threads[k];
		int mine = born_set ? t->role == RP_BORN && t->creator == born_creator && t->birth == born_birth
				    : t->role == RP_CUT && t->tid == tid;
		if (mine && !RRC_LOAD(&t->claimed)) {
			found = t;
			break;
		}
	}
	if (found != &nobody) {
		RRC_STORE(&found->claimed, 1);
		RRC_STORE(&found->live_tid, tid);
	}
	rp_me = found;
	rp_me_generation = rp.generation;
	return found;
}

uint32_t rrc_rp_self(void)
{
	struct rp_thread *t = me();
	return t == &nobody ? (uint32_t)rrc_sys_gettid() : t->tid;
}

void rrc_rp_thread_born(uint32_t creator, uint64_t birth)
{
	born_creator = creator;
	born_birth = birth;
	born_set = 1;
	rp_me = 0;
	rp_me_generation = rp.generation;
}

/* ---- going live ---- */

static void settle_debts(int final);


void rp_go_live(void)
{
	settle_debts(1);
	/* the connections out of step with their clients are reset (before
	 * the log is unmapped: it reads the released record), those no
	 * replayed accept took wait for live ones */
	rrc_rc_replay_over();
	rrc_aq_replay_over();
	rp.live_ns = rp.started_ns ? rrc_mono_ns() - rp.started_ns : 0;
	RRC_STORE(&rrc_rr_mode, RRC_RR_OFF);
	/* a failover with a spare: recorded again from here, every thread
	 * between two calls (rr-log.c) */
	if (rp.record_after) {
		rrc_rr_continue();
		/* this process is checkpointed again: the log (a failover's
		 * memfd, gone from every file system) must not be in its images.
		 * Nothing reads it after the last event: each thread is at its
		 * end, the index points to no event any more. */
		rrc_sys_munmap((void *)rp.log_map, rp.log_len);
		rrc_libfd_close(rp.log_fd);
		rp.log_map = 0;
		rp.log_fd = -1;
		rp.cut = rp.end_cut = 0;
	}
	RRC_STORE(&rp.state, RP_LIVE);
	rrc_sys_futex(&rp.state, RRC_FUTEX_WAKE, 0x7fffffff, 0);
}

static void wait_live(struct rp_thread *t)
{
	t->waiting = 2;
	for (;;) {
		uint32_t s = RRC_LOAD(&rp.state);
		if (s == RP_LIVE)
			break;
		if (s == RP_DIVERGED)
			stop_forever();
		rrc_sys_futex(&rp.state, RRC_FUTEX_WAIT, s, 0);
	}
	t->waiting = 0;
}

int rrc_rp_live(void)
{
	return RRC_LOAD(&rp.state) == RP_LIVE;
}

/* ---- consuming ---- */

const struct rrc_log_event *rrc_rp_peek(uint16_t kind, uint64_t obj)
{
	if (RRC_LOAD(&rp.state) == RP_DIVERGED)
		stop_forever();
	if (!rp.started_ns)
		__atomic_compare_exchange_n(&rp.started_ns, &(uint64_t){ 0 }, rrc_mono_ns(), 0, __ATOMIC_SEQ_CST,
					    __ATOMIC_SEQ_CST);
	struct rp_thread *t = me();
	if (t->pos >= t->end)
		return 0;
	const struct rrc_log_event *e = t->ev[t->pos];
	if ((kind && e->kind != kind) || (obj != RRC_RP_ANY && e->obj != obj)) {
		char got[80];
		size_t l = rrc_bput(got, sizeof got, 0, kind_name(kind));
		rrc_bput(got, sizeof got, l, obj == RRC_RP_ANY ? "" : " on obj");
		rrc_rp_diverge(got, obj);
	}
	return e;
}

void rrc_rp_wait_live(void)
{
	wait_live(me());
}

const struct rrc_log_event *rrc_rp_next(uint16_t kind, uint64_t obj)
{
	const struct rrc_log_event *e = rrc_rp_peek(kind, obj);
	if (!e)
		wait_live(me());
	return e;
}

/* RRC §4.7: a system call returns in its recorded place among every
 * thread's returns (a turn on the count of returns, which the image holds
 * as its cut left it) and, pacing, no sooner after the previous return
 * than it came in the recording (at most pace_max). A lock acquisition
 * takes its place in the same order (not paced: it has no time). Here,
 * once the event's own turns are taken, as the recording numbered it once
 * they were. */
static void return_in_order(const struct rrc_log_event *e)
{
	uint64_t n = rrc_ev_order(e);
	if (rp.races == RRC_RACES_OFF || !n || n >= rp.returns_limit)
		return;
	volatile uint64_t *count = rrc_rr_returns();
	rrc_rp_turn(count, n - 1, "the order of returns", n);
	if (!RRC_EV_IS_CALL(e->kind)) {
		rp.returns_ordered++;
		rrc_rp_advance(count);
		return;
	}
	uint64_t now = rrc_rr_now_ns();
	if (rp.races == RRC_RACES_PACE && rp.last_ret_ns && e->ret_ns > rp.last_ret_ns) {
		uint64_t gap = e->ret_ns - rp.last_ret_ns;
		uint64_t until = rp.last_done_ns + (gap < rp.pace_max_ns ? gap : rp.pace_max_ns);
		uint64_t t0 = now;
		while (now < until) {
			/* sleep what the timer slack allows, spin (yielding) the rest */
			if (until - now > 200000) {
				uint64_t nap = until - now - 100000;
				struct rrc_ts ts = { (long)(nap / 1000000000ull), (long)(nap % 1000000000ull) };
				uint32_t never = 0;
				rrc_sys_futex(&never, RRC_FUTEX_WAIT, 0, &ts);
			} else {
				rrc_sys_sched_yield();
			}
			now = rrc_rr_now_ns();
		}
		rp.paced_ns += now - t0;
	}
	rp.last_ret_ns = e->ret_ns;
	rp.last_done_ns = now;
	rp.returns_ordered++;
	rrc_rp_advance(count);
}

void rrc_rp_done(void)
{
	struct rp_thread *t = rp_me;
	if (!t || t == &nobody || rp_me_generation != rp.generation)
		return;
	if (t->pos < t->end)
		return_in_order(t->ev[t->pos]);
	t->pos++;
	__atomic_add_fetch(&rp.progress, 1, __ATOMIC_RELAXED);
	if (__atomic_sub_fetch(&rp.remaining, 1, __ATOMIC_SEQ_CST) == 0)
		rp_go_live();
}

int64_t rrc_rp_late(uint16_t kind, uint64_t obj, int64_t result)
{
	const struct rrc_log_event *e = rrc_rp_next(kind, obj);
	if (!e)
		return result;
	uint64_t key, seq;
	if (rrc_rp_numbered(e, &key, &seq)) {
		volatile uint64_t *c = counter_of(key, 1);
		rrc_rp_turn(c, seq, "the object", key);
		rrc_rp_advance(c);
	}
	int64_t r = e->result;
	rrc_rp_done();
	return r;
}

long rrc_rp_result(const struct rrc_log_event *e)
{
	int64_t res = e->result;
	rrc_rp_done();
	if (res < 0) {
		errno = (int)-res;
		return -1;
	}
	return (long)res;
}

void rrc_rp_output(uint64_t bytes)
{
	__atomic_add_fetch(&rp.outputs, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&rp.output_bytes, bytes, __ATOMIC_RELAXED);
}

/* ---- turns ---- */

/* Who sleeps on which counter, hashed by its address: rrc_rp_advance
 * skips the FUTEX_WAKE system call when no thread sleeps on a counter of
 * the slot (most advances: a replayed memcached made two wakes per event,
 * nearly all for nobody). A collision costs only a wake for nobody.
 * Dekker's pattern, both sides sequentially consistent: the sleeper counts
 * itself, then reads the counter; the advancer moves the counter, then
 * reads the count. One of them sees the other: either the sleeper sees
 * the new number (and does not sleep, or FUTEX_WAIT finds the value
 * changed), or the advancer sees the sleeper and wakes it. */
#define RP_SLEEPER_SLOTS 64
static uint32_t sleepers[RP_SLEEPER_SLOTS];

static uint32_t *sleepers_of(volatile uint64_t *counter)
{
	uint64_t a = (uint64_t)(uintptr_t)counter >> 3;
	return &sleepers[(a ^ (a >> 6) ^ (a >> 12)) % RP_SLEEPER_SLOTS];
}

/* Before sleeping, up to this many yields (well under a millisecond):
 * the thread whose turn it is mostly runs on the other CPU and is done
 * within microseconds, while a sleep costs a wake-up latency at every
 * hand-over, and the threads of an ordered replay hand over at almost
 * every event. Measured (bench/replay.py, memcached -t 4 at 7000 ops/s,
 * --replay-races order): 53 ms of replay per 100 ms of log sleeping at
 * once, 5.5 ms with this bound; 10000 was no faster. Spinning without
 * yielding would take the CPU from that thread when it shares the CPU. */
#define RP_TURN_YIELDS 1000

void rrc_rp_turn(volatile uint64_t *counter, uint64_t seq, const char *what, uint64_t obj)
{
	struct rp_thread *t = me();
	uint32_t *sl = sleepers_of(counter);
	unsigned yields = 0;
	for (;;) {
		uint64_t c = RRC_LOAD(counter);
		if (c == seq)
			break;
		if (c > seq) {
			char got[120];
			size_t l = rrc_bput(got, sizeof got, 0, what);
			l = rrc_bput(got, sizeof got, l, " already at number ");
			rrc_bput_u64(got, sizeof got, l, c);
			rrc_rp_diverge(got, obj);
		}
		t->wait_obj = obj;
		t->wait_seq = seq;
		t->wait_now = c;
		t->waiting = 1;
		if (RRC_LOAD(&rp.state) == RP_DIVERGED)
			stop_forever();
		if (yields < RP_TURN_YIELDS) {
			yields++;
			rrc_sys_sched_yield();
			continue;
		}
		__atomic_add_fetch(sl, 1, __ATOMIC_SEQ_CST);
		if (RRC_LOAD(counter) == c) {
			/* woken by an advance on the slot; the timeout only lets a
			 * sleeper far from its turn see a divergence (rp.state) */
			struct rrc_ts ts = { 0, 50000000 };
			rrc_sys_futex((volatile uint32_t *)counter, RRC_FUTEX_WAIT, (uint32_t)c, &ts);
		}
		__atomic_sub_fetch(sl, 1, __ATOMIC_SEQ_CST);
	}
	t->waiting = 0;
}

void rrc_rp_advance(volatile uint64_t *counter)
{
	__atomic_add_fetch(counter, 1, __ATOMIC_SEQ_CST);
	if (RRC_LOAD(sleepers_of(counter)))
		rrc_sys_futex((volatile uint32_t *)counter, RRC_FUTEX_WAKE, 0x7fffffff, 0);
}

/* ---- what reads took from objects inside the process ---- */

enum { DEBT_NONE = 0, DEBT_BYTES, DEBT_COUNT, DEBT_DRAIN };
static struct { uint8_t learnt, kind; uint64_t owed; } debts[RRC_MAX_FDS];

static uint8_t debt_kind(int fd)
{
	struct stat st;
	if (rrc_sys_fstat(fd, &st) < 0)
		return DEBT_NONE;
	if (S_ISFIFO(st.st_mode))
		return DEBT_BYTES;
	char p[40], link[64];
	size_t l = rrc_bput(p, sizeof p, 0, "/proc/self/fd/");
	rrc_bput_u64(p, sizeof p, l, (uint64_t)fd);
	long n = rrc_sys_readlinkat(AT_FDCWD, p, link, sizeof link - 1);
	if (n <= 0)
		return DEBT_NONE;
	link[n] = 0;
	if (n >= 20 && rrc_memeq(link, "anon_inode:[eventfd]", 20))
		return DEBT_COUNT;
	if (n >= 20 && rrc_memeq(link, "anon_inode:[timerfd]", 20))
		return DEBT_DRAIN;
	return DEBT_NONE;
}

#define RWF_NOWAIT_ 0x8
static long read_nowait(int fd, void *buf, size_t n)
{
	struct { void *b; size_t n; } v = { buf, n };
	return rrc_syscall6(SYS_preadv2, fd, (long)&v, 1, -1, -1, RWF_NOWAIT_);
}

/* Takes back what is owed, as far as the object holds it now. */
static void settle(int fd)
{
	uint8_t buf[4096];
	switch (debts[fd].kind) {
	case DEBT_BYTES:
		while (debts[fd].owed) {
			long r = read_nowait(fd, buf, debts[fd].owed < sizeof buf ? debts[fd].owed : sizeof buf);
			if (r <= 0)
				break;
			debts[fd].owed -= (uint64_t)r;
		}
		break;
	case DEBT_COUNT: /* an eventfd's read takes the whole count: the surplus goes back */
		while (debts[fd].owed) {
			uint64_t v = 0;
			if (read_nowait(fd, &v, 8) != 8)
				break;
			if (v > debts[fd].owed) {
				uint64_t back = v - debts[fd].owed;
				rrc_sys_write(fd, &back, 8);
				debts[fd].owed = 0;
			} else {
				debts[fd].owed -= v;
			}
		}
		break;
	case DEBT_DRAIN: /* a timerfd's expirations are time's, not the log's */
		read_nowait(fd, buf, 8);
		debts[fd].owed = 0;
		break;
	}
}

void rrc_rp_owe(int fd, const void *bytes, uint64_t len)
{
	if (fd < 0 || fd >= RRC_MAX_FDS || !len)
		return;
	if (!debts[fd].learnt) {
		debts[fd].kind = debt_kind(fd);
		debts[fd].learnt = 1;
	}
	if (debts[fd].kind == DEBT_NONE)
		return;
	if (debts[fd].kind == DEBT_COUNT) {
		uint64_t v = 0;
		rrc_memcpy(&v, bytes, len < 8 ? len : 8);
		debts[fd].owed += v;
	} else {
		debts[fd].owed += len;
	}
	settle(fd);
}

void rp_debts_reset(void)
{
	rrc_memset(debts, 0, sizeof debts);
}

static void settle_debts(int final)
{
	for (int fd = 0; fd < RRC_MAX_FDS; fd++) {
		if (!debts[fd].learnt || debts[fd].kind == DEBT_NONE)
			continue;
		settle(fd);
		if (final)
			rp.debts_left += debts[fd].owed;
	}
}

/* A closed fd's debt ends with it (the number may come back as another
 * object). */
void rrc_rp_fd_closed(int fd)
{
	if (fd >= 0 && fd < RRC_MAX_FDS)
		debts[fd].learnt = 0, debts[fd].owed = 0;
}

/* ---- a thread parked inside a call, restored into replay ---- */

void rrc_rp_unpark(void *ucv)
{
	if (RRC_LOAD(&rrc_rr_mode) != RRC_RR_REPLAY || !rrc_rp_in_call)
		return;
	ucontext_t *uc = ucv;
	greg_t *g = uc->uc_mcontext.gregs;
	const uint8_t *ip = (const uint8_t *)g[REG_RIP];
	/* the kernel set the call up to be made again on return from the
	 * handler: ip back on the `syscall` instruction, rax the call's
	 * number. It returns EINTR instead, into the wrapper, which replays. */
	if (((uint64_t)ip & 4095) != 4095 && ip[0] == 0x0f && ip[1] == 0x05 && g[REG_RAX] >= 0 &&
	    g[REG_RAX] < 1024) {
		g[REG_RAX] = -EINTR;
		g[REG_RIP] += 2;
	}
}

/* ---- status and watchdog ---- */

static void stalled(void)
{
	char m[768];
	size_t l = rrc_bput(m, sizeof m, 0, "replay diverged: no progress for ");
	l = rrc_bput_u64(m, sizeof m, l, rp.timeout_ns / 1000000);
	l = rrc_bput(m, sizeof m, l, " ms;");
	int shown = 0;
	for (uint32_t k = 0; k < rp.nr_threads && shown < 6; k++) {
		struct rp_thread *t = &rp.threads[k];
		if (t->role == RP_NONE || t->pos >= t->end)
			continue;
		shown++;
		l = rrc_bput(m, sizeof m, l, " ");
		l = put_thread(m, sizeof m, l, t);
		l = rrc_bput(m, sizeof m, l, " (");
		l = put_event(m, sizeof m, l, t->ev[t->pos]);
		if (!t->claimed) {
			l = rrc_bput(m, sizeof m, l, ") never ran;");
		} else if (t->waiting == 1) {
			l = rrc_bput(m, sizeof m, l, ") waits for its turn, the object is at ");
			l = rrc_bput_u64(m, sizeof m, l, t->wait_now);
			l = rrc_bput(m, sizeof m, l, ";");
		} else {
			l = rrc_bput(m, sizeof m, l, ") did not come to it;");
		}
	}
	rp_diverged(m);
}

void rrc_rp_status(struct rrc_ctl_replay *o, char *msg, uint32_t cap, uint32_t *msg_len)
{
	uint64_t now = rrc_mono_ns();
	if (RRC_LOAD(&rp.state) == RP_RUNNING) {
		uint64_t p = RRC_LOAD(&rp.progress);
		if (p != rp.progress_seen) {
			rp.progress_seen = p;
			rp.progress_at = now;
		} else if (now - rp.progress_at > rp.timeout_ns) {
			stalled();
		}
	}
	rrc_memset(o, 0, sizeof *o);
	o->state = RRC_LOAD(&rp.state);
	o->threads = rp.nr_replayed;
	o->events_total = rp.total;
	o->events_done = RRC_LOAD(&rp.progress);
	o->events_dropped = rp.dropped;
	o->outputs = RRC_LOAD(&rp.outputs);
	o->output_bytes = RRC_LOAD(&rp.output_bytes);
	o->load_ns = rp.load_ns;
	o->replay_ns = o->state == RP_LIVE ? rp.live_ns : rp.started_ns ? now - rp.started_ns : 0;
	o->debts_left = rp.debts_left;
	o->returns_ordered = RRC_LOAD(&rp.returns_ordered);
	o->paced_ns = RRC_LOAD(&rp.paced_ns);
	struct rrc_rc_stats c;
	rrc_rc_stats(&c);
	o->connections = c.connections;
	o->conn_read_bytes = c.read_bytes;
	o->conn_sent_bytes = c.sent_bytes;
	o->conn_faults = c.faults;
	o->conn_skipped_bytes = c.skipped_bytes;
	o->conn_behind = c.behind;
	o->conn_reset = c.reset;
	uint32_t n = 0;
	if (RRC_LOAD(&rp.report_taken))
		while (n < cap && rp.report[n])
			n++;
	rrc_memcpy(msg, rp.report, n);
	*msg_len = n;
}
