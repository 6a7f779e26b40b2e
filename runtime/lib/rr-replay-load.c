/* SPDX-License-Identifier: MIT
 *
 * Loading a log for replay (rr-replay.h; issue 13 §4): in the post-restore
 * path, every other thread parked, so ASYNC-SIGNAL-SAFE code only (raw
 * syscalls, no libc, memory from mmap).
 *
 *  1. map the log, check its header and every batch (`rrc restore` checked
 *     the file already; the library does not trust what it was handed);
 *  2. find the cut of the restored image;
 *  3. split each thread's batches into incarnations (a tid the kernel gave
 *     again starts over at event 0 with THREAD_START) and index every
 *     event;
 *  4. choose who replays what: each thread of the cut from its position
 *     on; a thread born after the checkpoint (its THREAD_START numbered at
 *     or past the image's count of creations) from its first event, claimed
 *     by the creation that makes it (rrc_rp_thread_born);
 *  5. end the log where it is consistent (rp_plan_trim): a log cut short
 *     by a crash can hold a thread's acquisition number n of an object
 *     while number n - 1, which another thread had not written out yet, is
 *     missing. Each thread's replay ends before its first event whose
 *     number is not reachable from the image's counter through numbers the
 *     log holds; repeated until nothing changes. What is cut off is
 *     reported as dropped. With `--replay-until FD:BYTES` each thread
 *     first ends at the least consistent cut holding that output
 *     (rp_plan_until); with the order of returns enforced, how far it can
 *     be (rp_plan_returns_reach).
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include "rrc_lib.h"
#include "lib-fds.h"
#include "rrc/crc32c.h"
#include "rr-replay-int.h"
#include "rr-conns.h"
#include "rr-replay-plan.h"

struct rp_state rp = { .log_fd = -1 };

int rrc_rp_log_fd(void)
{
	return rp.log_fd;
}

static void *map_zero(uint64_t bytes)
{
	/* NORESERVE: the index of a trimmed log has room for the events
	 * before each thread's base, never touched */
	long m = rrc_sys_mmap(0, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
			      -1, 0);
	return m < 0 && m > -4096 ? 0 : (void *)m;
}

static int fail(const char *what, uint64_t at)
{
	char m[300];
	size_t l = rrc_bput(m, sizeof m, 0, "replay refused: ");
	l = rrc_bput(m, sizeof m, l, what);
	if (at != ~0ull) {
		l = rrc_bput(m, sizeof m, l, " (at byte ");
		l = rrc_bput_u64(m, sizeof m, l, at);
		l = rrc_bput(m, sizeof m, l, ")");
	}
	rp_diverged(m); /* REPLAY_STATUS reports why, nothing runs */
	return -1;
}

/* ---- 1-3: the batches, the cut, the incarnations ---- */

struct batch_view {
	const struct rrc_log_batch *b;
	const uint8_t *payload;
};

/* 0: a batch; 1: the log ends inside its last batch (a recording cut
 * short: what precedes it is replayed, `rrc restore` said so); -1: refused */
static int check_batch(const uint8_t *base, uint64_t size, uint64_t off, struct batch_view *v)
{
	if (size - off < sizeof(struct rrc_log_batch))
		return 1;
	const struct rrc_log_batch *b = (const void *)(base + off);
	if (b->magic != RRC_LOG_BATCH_MAGIC)
		return fail("a batch without its magic number", off);
	if (rrc_crc32c(b, offsetof(struct rrc_log_batch, header_crc)) != b->header_crc)
		return fail("a batch header's CRC32C does not match", off);
	if (b->payload_len > RRC_LOG_MAX_PAYLOAD || (b->payload_len & 7))
		return fail("a batch's payload is too long or not a multiple of 8", off);
	if (size - off - sizeof *b < b->payload_len)
		return 1;
	v->b = b;
	v->payload = base + off + sizeof *b;
	if (rrc_crc32c(v->payload, b->payload_len) != b->payload_crc)
		return fail("a batch payload's CRC32C does not match", off);
	return 0;
}

/* Walks a batch's events: calls fn(ctx, event) for each; -1 on a shape error. */
static int each_event(const struct batch_view *v, int (*fn)(void *, const struct rrc_log_event *), void *ctx)
{
	uint32_t at = 0, n = 0;
	while (n < v->b->nr_events) {
		if (v->b->payload_len - at < sizeof(struct rrc_log_event))
			return -1;
		const struct rrc_log_event *e = (const void *)(v->payload + at);
		uint32_t len = (uint32_t)sizeof *e + ((e->data_len + 7u) & ~7u);
		if (e->data_len > RRC_LOG_MAX_DATA || v->b->payload_len - at < len)
			return -1;
		if (fn && fn(ctx, e) < 0)
			return -1;
		at += len;
		n++;
	}
	return at == v->b->payload_len ? 0 : -1;
}

/* the newest incarnation of tid among the first `known` (both passes
 * meet the incarnations in the same order) */
static struct rp_thread *incarnation_of(uint32_t tid, uint32_t known)
{
	for (uint32_t i = known; i-- > 0;)
		if (rp.threads[i].tid == tid)
			return &rp.threads[i];
	return 0;
}

struct fill { struct rp_thread *t; };
static int fill_one(void *ctx, const struct rrc_log_event *e)
{
	struct fill *f = ctx;
	f->t->ev[f->t->n++] = e;
	return 0;
}

/* Pass 1 counts (ev == 0), pass 2 fills. */
static int index_batches(const uint8_t *base, uint64_t size, int fill_pass)
{
	uint64_t off = sizeof(struct rrc_log_header), events = 0;
	uint32_t batch = 0;
	while (off < size) {
		struct batch_view v = { 0, 0 };
		int c = check_batch(base, size, off, &v);
		if (c < 0)
			return -1;
		if (c > 0)
			break; /* a partial last batch */
		if (v.b->batch_seq != batch)
			return fail("batches out of order", off);
		if (v.b->tid == 0) {
			if (!fill_pass && each_event(&v, 0, 0) < 0)
				return fail("a malformed process-wide record", off);
			const uint8_t *p = v.payload;
			for (uint32_t k = 0; k < v.b->nr_events && !fill_pass; k++) {
				const struct rrc_log_event *e = (const void *)p;
				const struct rrc_log_cut *c = (const void *)(e + 1);
				int whole = e->kind == RRC_EV_CUT && e->data_len >= sizeof *c &&
					    (uint64_t)c->nr_threads * sizeof(struct rrc_log_cut_thread) + sizeof *c == e->data_len;
				if (whole && rrc_memeq(c->image_id, rp.image_id, 16)) {
					rp.cut = c;
					rp.cut_batch = batch;
				}
				if (whole && rp.has_end && rrc_memeq(c->image_id, rp.end_id, 16))
					rp.end_cut = c;
				if (e->kind == RRC_EV_RELEASED) {
					const struct rrc_log_released *r = (const void *)(e + 1);
					if (e->data_len < sizeof *r ||
					    (uint64_t)r->nr_conns * sizeof(struct rrc_log_released_conn) + sizeof *r != e->data_len)
						return fail("a released record of the wrong length", off);
					rp.released = r;
				}
				p += sizeof *e + ((e->data_len + 7u) & ~7u);
			}
		} else {
			struct rp_thread *t = incarnation_of(v.b->tid, fill_pass ? rp.fill_next : rp.nr_threads);
			if (!t || v.b->first_event == 0) {
				/* a thread's first batch in a log the backup kept since
				 * a checkpoint starts where that log was trimmed */
				uint64_t first = t ? 0 : v.b->first_event;
				if (first > 0xffffffffull - v.b->nr_events)
					return fail("a thread's events are numbered beyond what a replay indexes", off);
				if (!fill_pass) {
					if (rp.nr_threads >= RP_MAX_THREADS)
						return fail("more thread incarnations than a replay indexes (4096)", off);
					t = &rp.threads[rp.nr_threads++];
					t->tid = v.b->tid;
					t->first_batch = batch;
					t->base = t->n_all = (uint32_t)first;
					events += first;
				} else {
					t = &rp.threads[rp.fill_next++];
					t->n = t->base;
				}
			}
			if (!fill_pass) {
				if (v.b->first_event != t->n_all)
					return fail("a thread's events are not numbered in sequence", off);
				if (each_event(&v, 0, 0) < 0)
					return fail("a malformed event", off);
				t->n_all += v.b->nr_events;
				events += v.b->nr_events;
			} else {
				struct fill f = { t };
				each_event(&v, fill_one, &f);
			}
		}
		off += sizeof(struct rrc_log_batch) + v.b->payload_len;
		batch++;
	}
	if (!fill_pass)
		rp.nr_events_all = events;
	return 0;
}

/* ---- 4: who replays what ---- */

static int choose(void)
{
	const struct rrc_log_cut_thread *ct = (const void *)(rp.cut + 1);
	uint64_t births = rp_counter_now(RP_KEY_CREATIONS);
	for (uint32_t i = 0; i < rp.cut->nr_threads; i++) {
		/* the incarnation live at the cut: the newest begun before it, or
		 * (a thread whose first batch was written after the cut) the first */
		struct rp_thread *pick = 0;
		for (uint32_t k = 0; k < rp.nr_threads; k++) {
			struct rp_thread *t = &rp.threads[k];
			if (t->tid != ct[i].tid)
				continue;
			if (!pick || t->first_batch < rp.cut_batch)
				pick = t;
			if (t->first_batch > rp.cut_batch)
				break;
		}
		if (!pick) {
			if (ct[i].next_event == 0)
				continue; /* a thread with nothing logged, before or after */
			return fail("a thread of the cut has no events in the log", ~0ull);
		}
		if (ct[i].next_event > pick->n)
			return fail("the cut is past a thread's last event", ~0ull);
		if (ct[i].next_event < pick->base)
			return fail("the log was trimmed past the cut of a thread", ~0ull);
		pick->role = RP_CUT;
		pick->start = (uint32_t)ct[i].next_event;
	}
	for (uint32_t k = 0; k < rp.nr_threads; k++) {
		struct rp_thread *t = &rp.threads[k];
		if (t->role != RP_NONE || t->base || t->n == 0 || t->ev[0]->kind != RRC_EV_THREAD_START)
			continue;
		t->creator = (uint32_t)t->ev[0]->obj;
		t->birth = t->ev[0]->seq;
		if (t->birth >= births)
			t->role = RP_BORN; /* created after the checkpoint */
		else if (rrc_sys_tgkill(rrc_g.pid, (int)t->tid, 0) == 0 && t->first_batch > rp.cut_batch)
			t->role = RP_CUT;  /* created before it, not yet started at it: restored */
	}
	return 0;
}

/* ---- 4b: up to a later checkpoint's cut (`--replay-to`) ---- */

/* Each thread of the later cut ends at its position there; one not in it
 * had ended before it (or was born after it: then its creation is past
 * its creator's end, and the consistency pass drops it). The state at
 * that cut is the later image's: a replay that ends there goes live in
 * exactly that state. */
static int end_at_cut(void)
{
	const struct rrc_log_cut_thread *ct = (const void *)(rp.end_cut + 1);
	if (rp.end_cut->sequence <= rp.cut->sequence)
		return fail("the cut to replay to is not after the restored image's", ~0ull);
	for (uint32_t k = 0; k < rp.nr_threads; k++) {
		struct rp_thread *t = &rp.threads[k];
		if (t->role == RP_NONE)
			continue;
		for (uint32_t i = 0; i < rp.end_cut->nr_threads; i++)
			if (ct[i].tid == t->tid && ct[i].next_event < t->n_end)
				t->n_end = (uint32_t)ct[i].next_event;
	}
	return 0;
}

/* ---- 5: where the log is consistent, where it goes live (rr-replay-plan.c) ---- */

static struct rp_plan plan_of(void)
{
	return (struct rp_plan){ .threads = rp.threads, .nr_threads = rp.nr_threads, .counter = rp_counter_now,
				 .returns_base = RRC_LOAD(rrc_rr_returns()) };
}

/* `--replay-until FD:BYTES`: every thread ends at the least consistent
 * cut that holds that output */
static int end_at_output(const struct rrc_replay_request *rq)
{
	struct rp_plan p = plan_of();
	uint32_t t, i;
	if (rp_plan_find_output(&p, rq->until_fd, rq->until_bytes, &t, &i) < 0 ||
	    rp_plan_until(&p, t, i, rq->races != RRC_RACES_OFF) < 0)
		return fail(p.why, ~0ull);
	rp.until_thread = t;
	rp.until_index = i;
	return 0;
}

/* A failover's log: every thread ends at the least consistent cut that
 * holds every output its clients were sent (RRC §4.4) */
static int end_at_released(const struct rrc_replay_request *rq)
{
	struct rp_plan p = plan_of();
	if (rp_plan_until_released(&p, rp.released, rq->races != RRC_RACES_OFF) < 0)
		return fail(p.why, ~0ull);
	return 0;
}

static int trim(const struct rrc_replay_request *rq)
{
	struct rp_plan p = plan_of();
	if (rp_plan_trim(&p) < 0)
		return fail(p.why, ~0ull);
	if (rq->until_fd >= 0 && rp.threads[rp.until_thread].end <= rp.until_index)
		return fail("the output to go live at depends on events the log does not hold", ~0ull);
	rp.returns_limit = rq->races == RRC_RACES_OFF ? 0 : rp_plan_returns_reach(&p);
	return 0;
}

/* ---- the whole ---- */

int rrc_rp_load(const uint8_t id[16], const struct rrc_replay_request *rq)
{
	int fd = rq->fd;
	uint64_t t0 = rrc_mono_ns();
	struct stat st;
	/* an image taken after an earlier replay holds that replay's state */
	uint32_t gen = rp.generation + 1;
	rrc_memset(&rp, 0, sizeof rp);
	rp.generation = gen;
	rp.log_fd = -1;
	rp_debts_reset();
	rrc_memcpy(rp.image_id, id, 16);
	if (rq->flags & RRC_REPLAY_END) {
		rrc_memcpy(rp.end_id, rq->to, 16);
		rp.has_end = 1;
	}
	rp.log_fd = fd;
	rrc_libfd_own(fd); /* the restorer put it there */
	rp.timeout_ns = (uint64_t)(rq->timeout_ms ? rq->timeout_ms : 5000) * 1000000ull;
	rp.races = rq->races;
	rp.pace_max_ns = (uint64_t)(rq->pace_max_us ? rq->pace_max_us : 10000) * 1000ull;
	rrc_rc_setup(rq->flags & RRC_REPLAY_CONNECTIONS);
	if ((rq->flags & RRC_REPLAY_END) && rq->until_fd >= 0)
		return fail("a replay goes live at an image's cut or at an output, not both", ~0ull);
	if (rrc_sys_fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return fail("the log handed over is not a regular file", ~0ull);
	uint64_t size = (uint64_t)st.st_size;
	if (size < sizeof(struct rrc_log_header))
		return fail("the log is shorter than its header", ~0ull);
	long m = rrc_sys_mmap(0, size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (m < 0 && m > -4096)
		return fail("cannot map the log", ~0ull);
	const uint8_t *base = (const uint8_t *)m;
	rp.log_map = base;
	rp.log_len = size;
	const struct rrc_log_header *h = (const void *)base;
	if (!rrc_memeq(h->magic, RRC_LOG_MAGIC, 8))
		return fail("not a record log (magic)", 0);
	if (h->version != RRC_LOG_VERSION)
		return fail("a log of another version", 0);
	if (rrc_crc32c(h, offsetof(struct rrc_log_header, header_crc)) != h->header_crc)
		return fail("the log header's CRC32C does not match", 0);
	rp.threads = map_zero(RP_MAX_THREADS * sizeof *rp.threads);
	if (!rp.threads)
		return fail("no memory for the replay's threads", ~0ull);
	if (index_batches(base, size, 0) < 0)
		return -1;
	if (!rp.cut)
		return fail("the log holds no cut for the restored image", ~0ull);
	if (rp.has_end && !rp.end_cut)
		return fail("the log holds no cut for the image to replay to", ~0ull);
	const struct rrc_log_event **all = map_zero((rp.nr_events_all + 1) * sizeof *all);
	if (!all)
		return fail("no memory to index the log's events", ~0ull);
	uint64_t at = 0;
	for (uint32_t k = 0; k < rp.nr_threads; k++) {
		rp.threads[k].ev = all + at;
		at += rp.threads[k].n_all;
	}
	rp.fill_next = 0;
	index_batches(base, size, 1);
	for (uint32_t k = 0; k < rp.nr_threads; k++)
		rp.threads[k].n_end = rp.threads[k].n;
	/* the replay's end: a later image's cut, an output, what a failover's
	 * clients were sent, or the log's consistent end */
	int to_released = rp.released && (rq->flags & RRC_REPLAY_CONNECTIONS) && !rp.end_cut && rq->until_fd < 0;
	if (choose() < 0 || (rp.end_cut && end_at_cut() < 0) || (rq->until_fd >= 0 && end_at_output(rq) < 0) ||
	    (to_released && end_at_released(rq) < 0) || trim(rq) < 0)
		return -1;
	rrc_rc_released(to_released ? rp.released : 0);
	for (uint32_t k = 0; k < rp.nr_threads; k++) {
		struct rp_thread *t = &rp.threads[k];
		if (t->role == RP_NONE)
			continue;
		rp.total += t->end - t->start;
		rp.dropped += t->n_end - t->end;
		t->pos = t->start;
		rp.nr_replayed++;
	}
	rp.remaining = rp.total;
	rp.load_ns = rrc_mono_ns() - t0;
	rp.progress_at = rrc_mono_ns();
	/* a failover with a spare: record again from go-live (without it, or
	 * if it cannot be, the process goes live unrecorded: logged) */
	rp.record_after = (rq->flags & RRC_REPLAY_RECORD) && rrc_rr_prepare_continue() == 0;
	if (rp.total) {
		RRC_STORE(&rp.state, RP_RUNNING);
		RRC_STORE(&rrc_rr_mode, RRC_RR_REPLAY);
	} else {
		rp_go_live();
	}
	return 0;
}
