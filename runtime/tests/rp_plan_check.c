/* SPDX-License-Identifier: MIT
 *
 * Unit checks of the replay's decisions (lib/rr-replay-plan.c) on logs
 * built in memory: which events are numbered, where a log cut short is
 * consistent, the least consistent cut holding an output, how far the
 * order of returns can be enforced. No process, no restore: run by
 * tests/test_replay_options.py (test_the_replay_plan_passes_its_unit_checks),
 * exit 0 when all pass.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rr-replay-plan.h"

/* lib/util.c's scratch pointer (unused here: util.c keeps the library's
 * /proc path beside its freestanding helpers) */
struct rrc_scratch *rrc_s;

static int failures;
#define CHECK(cond) do { if (!(cond)) { fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #cond); failures++; } } while (0)

/* ---- a log in memory ---- */

#define MAX_EV 32
struct ev_store {
	struct rrc_log_event e;
	uint8_t data[48]; /* an output record's */
};
struct tlog {
	struct ev_store store[MAX_EV];
	const struct rrc_log_event *ptr[MAX_EV];
};

static uint64_t next_ret;

#define M 0x5000

static void add(struct rp_thread *t, struct tlog *l, uint16_t kind, uint64_t obj, uint64_t seq, int64_t result,
		const void *data, uint32_t len)
{
	struct ev_store *s = &l->store[t->n];
	memset(s, 0, sizeof *s);
	s->e = (struct rrc_log_event){ .kind = kind, .data_len = len, .obj = obj, .seq = seq, .result = result };
	if (RRC_EV_IS_CALL(kind)) {
		s->e.ret = ++next_ret;
		s->e.ret_ns = 1000 * s->e.ret;
	} else if (RRC_EV_ORDERED_SYNC(kind)) {
		s->e.ord = ++next_ret; /* log version 6: acquisitions in the same order */
	}
	memcpy(s->data, data, len);
	l->ptr[t->n] = &s->e;
	t->ev = l->ptr;
	t->n++;
	t->n_end = t->n;
}

/* a mutex acquired: number seq, its previous holder's release after that
 * holder's event released_at - 1 (0: none between) */
static void lock(struct rp_thread *t, struct tlog *l, uint64_t seq, uint64_t released_at)
{
	add(t, l, RRC_EV_MUTEX_LOCK, M, seq, 0, 0, 0);
	l->store[t->n - 1].e.released_at = released_at;
}

static void output(struct rp_thread *t, struct tlog *l, int fd, uint64_t offset, uint64_t length)
{
	struct rrc_log_output o = { .offset = offset, .length = length, .crc = 7 };
	add(t, l, RRC_EV_OUTPUT, (uint64_t)fd, 0, (int64_t)length, &o, sizeof o);
}

/* an output to the connection from client port `port` to 10.0.0.1:6379 */
static void conn_output(struct rp_thread *t, struct tlog *l, uint16_t port, uint64_t offset, uint64_t length)
{
	struct rrc_log_output o = { .offset = offset, .length = length, .crc = 7, .family = RRC_OUT_INET,
				    .local_addr = 0x0100000a, .peer_addr = 0x0900000a, .local_port = 0xeb18,
				    .peer_port = port };
	add(t, l, RRC_EV_OUTPUT, 5, 0, (int64_t)length, &o, sizeof o);
}

/* the image's counters: every key at 0, the mutex at 0x5000 at `mutex_at` */
static uint64_t mutex_at;
static uint64_t counters(uint64_t key)
{
	return key == 0x5000 ? mutex_at : 0;
}

static void reset(struct rp_thread *t, int n)
{
	memset(t, 0, sizeof *t * (size_t)n);
	for (int k = 0; k < n; k++) {
		t[k].role = RP_CUT;
		t[k].tid = 100 + (uint32_t)k;
	}
	next_ret = 0;
	mutex_at = 0;
}

static struct rp_plan plan(struct rp_thread *t, uint32_t n)
{
	return (struct rp_plan){ .threads = t, .nr_threads = n, .counter = counters };
}

static void numbered(void)
{
	struct rp_thread t[1];
	struct tlog l;
	reset(t, 1);
	uint64_t mtx = 0x7000, key = 0, seq = 0;
	add(&t[0], &l, RRC_EV_MUTEX_LOCK, M, 3, 0, 0, 0);
	add(&t[0], &l, RRC_EV_MUTEX_LOCK, M, 0, -16 /* EBUSY */, 0, 0);
	add(&t[0], &l, RRC_EV_COND_WAIT, 0x6000, 4, 0, &mtx, 8);
	add(&t[0], &l, RRC_EV_FD, RRC_FDOP_OPEN, 9, 5, 0, 0);
	add(&t[0], &l, RRC_EV_EPOLL_WAIT, 4, 2, 1, 0, 0);
	add(&t[0], &l, RRC_EV_READ, 5, 0, 3, "abc", 3);
	CHECK(rrc_rp_numbered(t[0].ev[0], &key, &seq) && key == M && seq == 3);
	CHECK(!rrc_rp_numbered(t[0].ev[1], 0, 0)); /* a failed trylock took no number */
	CHECK(rrc_rp_numbered(t[0].ev[2], &key, &seq) && key == mtx && seq == 4); /* on the mutex */
	CHECK(rrc_rp_numbered(t[0].ev[3], &key, &seq) && key == RP_KEY_FDT && seq == 9);
	CHECK(rrc_rp_numbered(t[0].ev[4], &key, &seq) && key == RRC_EPOLL_KEY(4) && seq == 2);
	CHECK(!rrc_rp_numbered(t[0].ev[5], 0, 0));
	/* calls carry their returns, acquisitions (a failed trylock too) their
	 * places in the same order (version 6), no release here */
	CHECK(t[0].ev[3]->ret == 4 && t[0].ev[4]->ret == 5 && t[0].ev[5]->ret == 6);
	CHECK(t[0].ev[0]->ord == 1 && t[0].ev[1]->ord == 2 && t[0].ev[2]->ord == 3);
	CHECK(t[0].ev[0]->released_at == 0);
	CHECK(rrc_ev_order(t[0].ev[2]) == 3 && rrc_ev_order(t[0].ev[5]) == 6);
}

/* A crash: thread 1's lock #1 never reached the log, so thread 0 cannot
 * replay its lock #2, nor what follows; a thread born of a creation that
 * is cut off is dropped. */
static void trim_a_crash_tail(void)
{
	struct rp_thread t[3];
	struct tlog l[3];
	reset(t, 3);
	lock(&t[0], &l[0], 0, 0);
	lock(&t[0], &l[0], 2, 1);
	add(&t[0], &l[0], RRC_EV_THREAD_CREATE, 102, 0, 0, 0, 0);
	add(&t[1], &l[1], RRC_EV_CLOCK, 1, 0, 0, 0, 0);
	t[2].role = RP_BORN;
	t[2].birth = 0;
	add(&t[2], &l[2], RRC_EV_THREAD_START, 100, 0, 0, 0, 0);
	add(&t[2], &l[2], RRC_EV_CLOCK, 1, 0, 0, 0, 0);
	struct rp_plan p = plan(t, 3);
	CHECK(rp_plan_trim(&p) == 0);
	CHECK(t[0].end == 1); /* before lock #2: #1 is missing */
	CHECK(t[1].end == 1);
	CHECK(t[2].end == 0); /* its creation came after the end */
	/* the same log whole: nothing cut */
	reset(t, 3);
	struct tlog l2[3];
	lock(&t[0], &l2[0], 0, 0);
	lock(&t[1], &l2[1], 1, 1);
	lock(&t[0], &l2[0], 2, 1);
	add(&t[0], &l2[0], RRC_EV_THREAD_CREATE, 102, 0, 0, 0, 0);
	t[2].role = RP_BORN;
	add(&t[2], &l2[2], RRC_EV_THREAD_START, 100, 0, 0, 0, 0);
	p = plan(t, 3);
	CHECK(rp_plan_trim(&p) == 0);
	CHECK(t[0].end == 3 && t[1].end == 1 && t[2].end == 1);
	/* starting from the image's counter: the log from lock #1 on */
	reset(t, 2);
	struct tlog l3[2];
	mutex_at = 1;
	lock(&t[0], &l3[0], 1, 0);
	lock(&t[1], &l3[1], 2, 1);
	p = plan(t, 2);
	CHECK(rp_plan_trim(&p) == 0 && t[0].end == 1 && t[1].end == 1);
	/* a crash after thread 0's lock #1 was written, before the event
	 * after which it released was: thread 1's lock #2 found the mutex
	 * released after thread 0's second event; replayed without it,
	 * thread 0 would stop holding the mutex and thread 1 never get it */
	reset(t, 2);
	struct tlog l4[2];
	mutex_at = 1;
	lock(&t[0], &l4[0], 1, 0);
	add(&t[1], &l4[1], RRC_EV_CLOCK, 1, 0, 0, 0, 0);
	lock(&t[1], &l4[1], 2, 2);
	p = plan(t, 2);
	CHECK(rp_plan_trim(&p) == 0 && t[0].end == 1 && t[1].end == 1);
	/* that event in the log: the release is too */
	add(&t[0], &l4[0], RRC_EV_CLOCK, 1, 0, 0, 0, 0);
	t[0].n_end = t[0].n;
	t[1].n_end = t[1].n;
	CHECK(rp_plan_trim(&p) == 0 && t[0].end == 2 && t[1].end == 2);
	/* a condition wait that timed out took the mutex again: after the
	 * release its event names, missing here */
	reset(t, 2);
	struct tlog l8[2];
	uint64_t mtx = M;
	lock(&t[0], &l8[0], 0, 0);
	add(&t[1], &l8[1], RRC_EV_COND_WAIT, 0x6000, 1, -110 /* ETIMEDOUT */, &mtx, 8);
	l8[1].store[0].e.released_at = 2;
	p = plan(t, 2);
	CHECK(rp_plan_trim(&p) == 0 && t[0].end == 1 && t[1].end == 0);
	/* a recursive mutex taken again by its holder: no release between */
	reset(t, 1);
	struct tlog l6[1];
	lock(&t[0], &l6[0], 0, 0);
	lock(&t[0], &l6[0], 1, 0);
	p = plan(t, 1);
	CHECK(rp_plan_trim(&p) == 0 && t[0].end == 2);
	/* readers of an rwlock hold it together: no release needed between */
	reset(t, 2);
	struct tlog l5[2];
	add(&t[0], &l5[0], RRC_EV_RWLOCK_RD, M, 0, 0, 0, 0);
	add(&t[1], &l5[1], RRC_EV_RWLOCK_RD, M, 1, 0, 0, 0);
	p = plan(t, 2);
	CHECK(rp_plan_trim(&p) == 0 && t[0].end == 1 && t[1].end == 1);
	/* a writer's release is an event: missing, the next writer waits */
	reset(t, 2);
	struct tlog l7[2];
	add(&t[0], &l7[0], RRC_EV_RWLOCK_WR, M, 0, 0, 0, 0);
	add(&t[1], &l7[1], RRC_EV_RWLOCK_WR, M, 1, 0, 0, 0);
	p = plan(t, 2);
	CHECK(rp_plan_trim(&p) == 0 && t[0].end == 1 && t[1].end == 0);
	add(&t[0], &l7[0], RRC_EV_RWLOCK_UNLOCK, M, 0, 0, 0, 0);
	t[0].n_end = t[0].n;
	t[1].n_end = t[1].n;
	CHECK(rp_plan_trim(&p) == 0 && t[0].end == 2 && t[1].end == 1);
}

static void trim_refuses(void)
{
	struct rp_thread t[2];
	struct tlog l[2];
	reset(t, 2);
	add(&t[0], &l[0], RRC_EV_MUTEX_LOCK, M, 0, 0, 0, 0);
	add(&t[1], &l[1], RRC_EV_MUTEX_LOCK, M, 0, 0, 0, 0);
	struct rp_plan p = plan(t, 2);
	CHECK(rp_plan_trim(&p) < 0 && p.why && strstr(p.why, "same number"));
	reset(t, 2);
	struct tlog l2[1];
	mutex_at = 3;
	add(&t[0], &l2[0], RRC_EV_MUTEX_LOCK, M, 1, 0, 0, 0);
	p = plan(t, 1);
	CHECK(rp_plan_trim(&p) < 0 && p.why && strstr(p.why, "below the image's counter"));
	/* a release placed before the acquisition it ends (numbers swapped
	 * by hand, say) */
	reset(t, 2);
	struct tlog l3[2];
	add(&t[0], &l3[0], RRC_EV_CLOCK, 1, 0, 0, 0, 0);
	lock(&t[0], &l3[0], 0, 0);
	lock(&t[1], &l3[1], 1, 1);
	p = plan(t, 2);
	CHECK(rp_plan_trim(&p) < 0 && p.why && strstr(p.why, "inconsistent"));
	l3[1].store[0].e.released_at = 2;
	CHECK(rp_plan_trim(&p) == 0 && t[0].end == 2 && t[1].end == 1);
}

static void find_output(void)
{
	struct rp_thread t[2];
	struct tlog l[2];
	reset(t, 2);
	output(&t[0], &l[0], 5, 0, 10);
	output(&t[1], &l[1], 6, 0, 4);
	output(&t[0], &l[0], 5, 10, 7);
	struct rp_plan p = plan(t, 2);
	uint32_t th = 9, ix = 9;
	CHECK(rp_plan_find_output(&p, 5, 17, &th, &ix) == 0 && th == 0 && ix == 1);
	CHECK(rp_plan_find_output(&p, 6, 4, &th, &ix) == 0 && th == 1 && ix == 0);
	CHECK(rp_plan_find_output(&p, 5, 12, &th, &ix) < 0 && strstr(p.why, "no output"));
	output(&t[1], &l[1], 5, 10, 7); /* fd 5 reused, the same byte count */
	CHECK(rp_plan_find_output(&p, 5, 17, &th, &ix) < 0 && strstr(p.why, "ambiguous"));
	/* before a thread's start (the cut) is not after the image */
	reset(t, 1);
	struct tlog l2[1];
	output(&t[0], &l2[0], 5, 0, 10);
	add(&t[0], &l2[0], RRC_EV_CLOCK, 1, 0, 0, 0, 0);
	t[0].start = 1;
	p = plan(t, 1);
	CHECK(rp_plan_find_output(&p, 5, 10, &th, &ix) < 0);
}

/*   thread 0: lock#0  clock  (release)  output fd 5  lock#2
 *   thread 1: clock  lock#1  output fd 6  (release)  clock
 *   thread 2: clock  clock
 * Going live after thread 1's output needs its lock#1, hence thread 0's
 * lock#0 and its events up to the release (and nothing else); with the
 * order of returns, every call that returned before that output too. */
static void until_an_output(void)
{
	struct rp_thread t[3];
	struct tlog l[3];
	reset(t, 3);
	lock(&t[0], &l[0], 0, 0);                               /* 0 */
	add(&t[2], &l[2], RRC_EV_CLOCK, 1, 0, 0, 0, 0);        /* ret 1 */
	add(&t[0], &l[0], RRC_EV_CLOCK, 1, 0, 0, 0, 0);        /* 1, ret 2 */
	add(&t[1], &l[1], RRC_EV_CLOCK, 1, 0, 0, 0, 0);        /* 0, ret 3 */
	lock(&t[1], &l[1], 1, 2);                               /* 1: released after thread 0's event 1 */
	add(&t[2], &l[2], RRC_EV_CLOCK, 1, 0, 0, 0, 0);        /* ret 4 */
	output(&t[1], &l[1], 6, 0, 4);                          /* 2, ret 5 */
	output(&t[0], &l[0], 5, 0, 9);                          /* 2, ret 6 */
	add(&t[1], &l[1], RRC_EV_CLOCK, 1, 0, 0, 0, 0);        /* 3, ret 7 */
	lock(&t[0], &l[0], 2, 3);                               /* 3: released after thread 1's event 2 */
	struct rp_plan p = plan(t, 3);
	uint32_t th, ix;
	CHECK(rp_plan_find_output(&p, 6, 4, &th, &ix) == 0 && th == 1 && ix == 2);
	CHECK(rp_plan_until(&p, th, ix, 0) == 0);
	CHECK(t[1].n_end == 3);
	CHECK(t[0].n_end == 2); /* lock#0 and its events up to the release, not its output */
	CHECK(t[2].n_end == 0);
	CHECK(rp_plan_trim(&p) == 0 && t[0].end == 2 && t[1].end == 3 && t[2].end == 0);
	/* with returns: 1..4 before ret 5 */
	for (int k = 0; k < 3; k++)
		t[k].n_end = t[k].n;
	CHECK(rp_plan_until(&p, th, ix, 1) == 0);
	CHECK(t[1].n_end == 3 && t[0].n_end == 2 && t[2].n_end == 2);
	/* thread 0's output needs thread 1's lock#1? no: lock#2 is after it */
	for (int k = 0; k < 3; k++)
		t[k].n_end = t[k].n;
	CHECK(rp_plan_find_output(&p, 5, 9, &th, &ix) == 0 && th == 0 && ix == 2);
	CHECK(rp_plan_until(&p, th, ix, 0) == 0 && t[0].n_end == 3 && t[1].n_end == 0 && t[2].n_end == 0);
	/* a release the log does not reach (its holder's events after its
	 * acquisition lost): refused, not replayed into a wait */
	reset(t, 2);
	struct tlog l3[2];
	lock(&t[0], &l3[0], 0, 0);
	lock(&t[1], &l3[1], 1, 4);
	output(&t[1], &l3[1], 6, 0, 4);
	p = plan(t, 2);
	CHECK(rp_plan_until(&p, 1, 1, 0) < 0 && strstr(p.why, "does not hold"));
	/* an output that depends on what the log lost is refused */
	reset(t, 2);
	struct tlog l2[2];
	add(&t[1], &l2[1], RRC_EV_MUTEX_LOCK, M, 1, 0, 0, 0); /* #0 missing */
	output(&t[1], &l2[1], 6, 0, 4);
	add(&t[0], &l2[0], RRC_EV_CLOCK, 1, 0, 0, 0, 0);
	p = plan(t, 2);
	CHECK(rp_plan_until(&p, 1, 1, 0) < 0 && strstr(p.why, "does not hold"));
}

/* A failover's log (released record): up to every output with a byte
 * its client was sent, and what it depends on; nothing past it.
 *   thread 0: lock#0  A[0,10)  (release)  clock  A[10,20)
 *   thread 1: clock  lock#1  B[0,5)  clock  B[5,9) */
static void until_released(void)
{
	struct rp_thread t[2];
	struct tlog l[2];
	reset(t, 2);
	lock(&t[0], &l[0], 0, 0);              /* 0 */
	conn_output(&t[0], &l[0], 100, 0, 10); /* 1 */
	add(&t[0], &l[0], RRC_EV_CLOCK, 1, 0, 0, 0, 0);
	conn_output(&t[0], &l[0], 100, 10, 10); /* 3 */
	add(&t[1], &l[1], RRC_EV_CLOCK, 1, 0, 0, 0, 0);
	lock(&t[1], &l[1], 1, 2);              /* 1: released after thread 0's event 1 */
	conn_output(&t[1], &l[1], 200, 0, 5);  /* 2 */
	add(&t[1], &l[1], RRC_EV_CLOCK, 1, 0, 0, 0, 0);
	conn_output(&t[1], &l[1], 200, 5, 4);  /* 4 */
	struct {
		struct rrc_log_released r;
		struct rrc_log_released_conn c[2];
	} rel = { { 2, 0 }, { { 0x0100000a, 0x0900000a, 0xeb18, 100, 0, 12 }, { 0x0100000a, 0x0900000a, 0xeb18, 200, 0, 0 } } };
	struct rp_plan p = plan(t, 2);
	/* A up to 12: A[10,20) began below it; nothing of B */
	CHECK(rp_plan_until_released(&p, &rel.r, 0) == 0 && t[0].n_end == 4 && t[1].n_end == 0);
	/* B's first byte too: its output, its lock, its holder up to the release */
	rel.c[0].released = 10;
	rel.c[1].released = 1;
	for (int k = 0; k < 2; k++)
		t[k].n_end = t[k].n;
	CHECK(rp_plan_until_released(&p, &rel.r, 0) == 0 && t[0].n_end == 2 && t[1].n_end == 3);
	CHECK(rp_plan_trim(&p) == 0 && t[0].end == 2 && t[1].end == 3);
	/* B's whole stream; A's bytes all sent before the cut (thread 0's
	 * start past both of A's outputs): nothing of thread 0 is needed */
	rel.c[1].released = 9;
	for (int k = 0; k < 2; k++)
		t[k].n_end = t[k].n;
	t[0].start = 4;
	rel.c[0].released = 20;
	mutex_at = 1;
	CHECK(rp_plan_until_released(&p, &rel.r, 0) == 0 && t[0].n_end == 4 && t[1].n_end == 5);
	mutex_at = 0;
	t[0].start = 0;
	/* nothing released after the cut, or to other connections: the
	 * replay ends where it begins (the image is what the clients saw) */
	rel.c[0].released = rel.c[1].released = 0;
	rel.c[0].peer_port = 300;
	for (int k = 0; k < 2; k++)
		t[k].n_end = t[k].n;
	CHECK(rp_plan_until_released(&p, &rel.r, 0) == 0 && t[0].n_end == 0 && t[1].n_end == 0);
	/* only up to each thread's end as it was (a later cut's) */
	rel.c[0].peer_port = 100;
	rel.c[0].released = 20;
	t[0].n_end = 2;
	t[1].n_end = 0;
	CHECK(rp_plan_until_released(&p, &rel.r, 0) == 0 && t[0].n_end == 2);
	/* a released output that depends on what the log lost is refused */
	reset(t, 1);
	struct tlog l2[1];
	add(&t[0], &l2[0], RRC_EV_MUTEX_LOCK, M, 1, 0, 0, 0); /* #0 missing */
	conn_output(&t[0], &l2[0], 100, 0, 4);
	p = plan(t, 1);
	CHECK(rp_plan_until_released(&p, &rel.r, 0) < 0 && strstr(p.why, "does not hold"));
	/* an output to no connection, or of no bytes, is never released */
	reset(t, 1);
	struct tlog l3[1];
	output(&t[0], &l3[0], 5, 0, 4);
	conn_output(&t[0], &l3[0], 100, 0, 0);
	p = plan(t, 1);
	CHECK(!rp_output_released(t[0].ev[0], &rel.r) && !rp_output_released(t[0].ev[1], &rel.r));
	CHECK(rp_plan_until_released(&p, &rel.r, 0) == 0 && t[0].n_end == 0);
}

static void returns_reach(void)
{
	struct rp_thread t[2];
	struct tlog l[2];
	reset(t, 2);
	add(&t[0], &l[0], RRC_EV_CLOCK, 1, 0, 0, 0, 0); /* 1 */
	add(&t[1], &l[1], RRC_EV_CLOCK, 1, 0, 0, 0, 0); /* 2 */
	add(&t[1], &l[1], RRC_EV_CLOCK, 1, 0, 0, 0, 0); /* 3 */
	add(&t[0], &l[0], RRC_EV_CLOCK, 1, 0, 0, 0, 0); /* 4 */
	for (int k = 0; k < 2; k++)
		t[k].end = t[k].n;
	struct rp_plan p = plan(t, 2);
	CHECK(rp_plan_returns_reach(&p) == 5);
	t[1].end = 1; /* return 3 is not replayed: 1 and 2 can be ordered */
	CHECK(rp_plan_returns_reach(&p) == 3);
	/* from an image whose count of returns stood at 2 */
	t[1].end = 2;
	t[1].start = 1;
	t[0].start = 1;
	p.returns_base = 2;
	CHECK(rp_plan_returns_reach(&p) == 5);
	t[1].start = 2; /* return 3 was before the cut? then nothing after 2 is held from 3 */
	CHECK(rp_plan_returns_reach(&p) == 3);

	/* acquisitions take their places among the returns (version 6): a
	 * lock's place not replayed stops the order there */
	reset(t, 2);
	add(&t[0], &l[0], RRC_EV_CLOCK, 1, 0, 0, 0, 0); /* 1 */
	lock(&t[1], &l[1], 0, 0);                       /* 2 */
	add(&t[0], &l[0], RRC_EV_CLOCK, 1, 0, 0, 0, 0); /* 3 */
	add(&t[1], &l[1], RRC_EV_CLOCK, 1, 0, 0, 0, 0); /* 4 */
	CHECK(l[1].store[0].e.ord == 2 && l[0].store[1].e.ret == 3);
	for (int k = 0; k < 2; k++)
		t[k].end = t[k].n;
	p = plan(t, 2);
	CHECK(rp_plan_returns_reach(&p) == 5);
	t[1].start = 1; /* the lock before the cut: 1 is all that can be ordered */
	CHECK(rp_plan_returns_reach(&p) == 2);
}

int main(void)
{
	numbered();
	trim_a_crash_tail();
	trim_refuses();
	find_output();
	until_an_output();
	until_released();
	returns_reach();
	if (failures) {
		fprintf(stderr, "rp_plan_check: %d checks failed\n", failures);
		return 1;
	}
	printf("rp_plan_check: all checks passed\n");
	return 0;
}
