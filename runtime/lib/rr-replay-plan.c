/* SPDX-License-Identifier: MIT
 *
 * The replay's decisions over an indexed log (rr-replay-plan.h): no I/O,
 * memory from mmap, ASYNC-SIGNAL-SAFE (the loader runs in the post-restore
 * path). Unit-checked by runtime/tests/rp_plan_check.c.
 */
#include <sys/mman.h>
#include "rrc_lib.h"
#include "rr-replay-plan.h"

/* ---- numbers ---- */

int rrc_rp_numbered(const struct rrc_log_event *e, uint64_t *key, uint64_t *seq)
{
	uint64_t k = 0;
	switch (e->kind) {
	case RRC_EV_MUTEX_LOCK: case RRC_EV_RWLOCK_RD: case RRC_EV_RWLOCK_WR:
	case RRC_EV_SPIN_LOCK: case RRC_EV_SEM_WAIT:
		if (e->result == 0)
			k = e->obj;
		break;
	case RRC_EV_BARRIER: /* the serial thread's -1 is a success too */
		if (e->result == 0 || e->result == -1)
			k = e->obj;
		break;
	case RRC_EV_COND_WAIT:
		if (e->data_len == 8)
			rrc_memcpy(&k, e + 1, 8);
		break;
	case RRC_EV_FD: case RRC_EV_ACCEPT:
		k = RP_KEY_FDT;
		break;
	case RRC_EV_THREAD_CREATE:
		k = RP_KEY_CREATIONS;
		break;
	case RRC_EV_EPOLL_WAIT: case RRC_EV_EPOLL_CTL:
		k = RRC_EPOLL_KEY(e->obj);
		break;
	}
	if (!k)
		return 0;
	if (key)
		*key = k;
	if (seq)
		*seq = e->seq;
	return 1;
}

/* An rwlock's release event (its seq: the object's last acquisition
 * before it). */
static int released(const struct rrc_log_event *e, uint64_t *key, uint64_t *seq)
{
	if (e->kind != RRC_EV_RWLOCK_UNLOCK || e->seq == RRC_SEQ_NONE)
		return 0;
	*key = e->obj;
	*seq = e->seq;
	return 1;
}

/* Where the release an acquisition found happened, as the previous
 * holder's count of events then (rrc/rrlog.h released_at; 0: no release
 * came between, or not a kind that carries it). */
static uint64_t release_point(const struct rrc_log_event *e)
{
	/* a condition wait that timed out took its mutex again too */
	int got = e->result == 0 || e->kind == RRC_EV_COND_WAIT;
	return RRC_EV_CARRIES_RELEASE(e->kind) && got ? e->released_at : 0;
}

/* ---- a (key, number) -> value map, open addressing; key 0 is empty ---- */

struct slot { uint64_t key, seq, val; };
struct map { struct slot *s; uint64_t mask, bytes; };

static int map_init(struct map *m, uint64_t entries)
{
	uint64_t cap = 16;
	while (cap < 2 * entries + 16)
		cap <<= 1;
	m->bytes = cap * sizeof *m->s;
	long a = rrc_sys_mmap(0, m->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (a < 0 && a > -4096)
		return -1;
	m->s = (struct slot *)a;
	m->mask = cap - 1;
	return 0;
}

static void map_free(struct map *m)
{
	if (m->s)
		rrc_sys_munmap(m->s, m->bytes);
	m->s = 0;
}

static void map_clear(struct map *m)
{
	rrc_memset(m->s, 0, m->bytes);
}

static struct slot *map_find(struct map *m, uint64_t key, uint64_t seq)
{
	uint64_t i = ((key * 0x9e3779b97f4a7c15ull) ^ (seq * 0xc2b2ae3d27d4eb4full)) & m->mask;
	for (;; i = (i + 1) & m->mask)
		if (m->s[i].key == 0 || (m->s[i].key == key && m->s[i].seq == seq))
			return &m->s[i];
}

/* 1 inserted, 0 present already */
static int map_put(struct map *m, uint64_t key, uint64_t seq, uint64_t val)
{
	struct slot *s = map_find(m, key, seq);
	if (s->key)
		return 0;
	*s = (struct slot){ key, seq, val };
	return 1;
}

/* Releases: several per (object, number) (a recursive mutex's, an
 * rwlock's readers'), kept as (object | RELEASED, number * RELEASES_MAX + j) */
#define RELEASED     (1ull << 63)
#define RELEASES_MAX 4096ull

static int release_put(struct map *m, uint64_t key, uint64_t seq, uint64_t val)
{
	for (uint64_t j = 0; j < RELEASES_MAX; j++)
		if (map_put(m, key | RELEASED, seq * RELEASES_MAX + j, val))
			return 0;
	return -1;
}

static struct slot *release_at(struct map *m, uint64_t key, uint64_t seq, uint64_t j)
{
	return j < RELEASES_MAX ? map_find(m, key | RELEASED, seq * RELEASES_MAX + j) : 0;
}

static int replayed(const struct rp_thread *t)
{
	return t->role != RP_NONE;
}

#define VAL(thread, index) (((uint64_t)(thread) << 32) | (index))

/* Every replayed thread's numbered events and releases from its start to
 * its end (`whole`: to its last event): (key, number) -> (thread, index). */
static int index_events(struct rp_plan *p, struct map *m, int whole)
{
	uint64_t entries = 0;
	for (uint32_t k = 0; k < p->nr_threads; k++) {
		struct rp_thread *t = &p->threads[k];
		if (replayed(t))
			entries += (whole ? t->n : t->end) - t->start;
	}
	if (!m->s && map_init(m, entries) < 0)
		return -1;
	map_clear(m);
	for (uint32_t k = 0; k < p->nr_threads; k++) {
		struct rp_thread *t = &p->threads[k];
		if (!replayed(t))
			continue;
		for (uint32_t i = t->start; i < (whole ? t->n : t->end); i++) {
			const struct rrc_log_event *e = t->ev[i];
			uint64_t key, seq;
			if (rrc_rp_numbered(e, &key, &seq) && !map_put(m, key, seq, VAL(k, i)))
				return -2;
			if (released(e, &key, &seq) && release_put(m, key, seq, VAL(k, i)) < 0)
				return -3;
			uint64_t order = rrc_ev_order(e);
			if (order)
				map_put(m, RP_KEY_RETURNS, order, VAL(k, i));
		}
	}
	return 0;
}

static int refuse(struct rp_plan *p, const char *why)
{
	p->why = why;
	return -1;
}

/* ---- where a log cut short is consistent ---- */

static int index_refused(struct rp_plan *p, int x)
{
	return refuse(p, x == -1 ? "no memory to index the log's numbers"
			 : x == -2 ? "two events of the log carry the same number of one object"
				   : "more releases of one acquisition than a replay indexes (4096)");
}

/* the first number of key, from the image's counter on, the log does not
 * hold (cached per round) */
static uint64_t reach(struct rp_plan *p, struct map *ix, struct map *cache, uint64_t key)
{
	struct slot *c = map_find(cache, key, 0);
	if (c->key)
		return c->val;
	uint64_t s = p->counter(key);
	while (map_find(ix, key, s)->key)
		s++;
	*c = (struct slot){ key, 0, s };
	return s;
}

/* 1 if acquisition e, (key, seq), found its object free: an exclusive holder
 * of number seq - 1 the log holds had released it, and that release must
 * be in what is replayed too (a crash can leave the holder's ring
 * undrained after its acquisition while the next holder's was written: a
 * replay would stop the holder inside its critical section, and the next
 * one could never acquire). A mutex's or spinlock's release is where e's
 * released_at says, in the holder's events; a writer's of an rwlock, an
 * event of its own. -1: e says the release came before the holder's
 * acquisition. */
static int release_missing(struct rp_plan *p, struct map *ix, const struct rrc_log_event *e, uint64_t key,
			   uint64_t seq)
{
	if (seq == 0 || seq - 1 < p->counter(key))
		return 0; /* held since before the image: its release may be before the cut */
	struct slot *h = map_find(ix, key, seq - 1);
	if (!h->key)
		return 0;
	const struct rp_thread *holder = &p->threads[h->val >> 32];
	uint16_t held = holder->ev[(uint32_t)h->val]->kind;
	if (RRC_EV_CARRIES_RELEASE(held)) {
		/* a release comes after the acquisition it ends */
		if (release_point(e) && release_point(e) <= (uint32_t)h->val)
			return -1;
		return holder->end < release_point(e);
	}
	if (held != RRC_EV_RWLOCK_WR)
		return 0;
	struct slot *r = release_at(ix, key, seq - 1, 0);
	return !r || !r->key;
}

int rp_plan_trim(struct rp_plan *p)
{
	uint64_t events = 0;
	for (uint32_t k = 0; k < p->nr_threads; k++) {
		struct rp_thread *t = &p->threads[k];
		t->end = replayed(t) ? t->n_end : t->start;
		if (t->end < t->start)
			t->end = t->start;
		events += t->end - t->start;
	}
	struct map ix = { 0 }, cache = { 0 };
	if (map_init(&cache, events) < 0)
		return refuse(p, "no memory to index the log's numbers");
	int r = 0;
	for (int changed = 1; changed && !r;) {
		changed = 0;
		int x = index_events(p, &ix, 0);
		if (x < 0) {
			r = index_refused(p, x);
			break;
		}
		map_clear(&cache);
		for (uint32_t k = 0; k < p->nr_threads && !r; k++) {
			struct rp_thread *t = &p->threads[k];
			if (t->role == RP_BORN && t->end > t->start &&
			    !(t->birth < reach(p, &ix, &cache, RP_KEY_CREATIONS))) {
				t->end = t->start; /* its creation is not in the consistent log */
				changed = 1;
				continue;
			}
			for (uint32_t i = t->start; i < t->end; i++) {
				uint64_t key, seq;
				if (!rrc_rp_numbered(t->ev[i], &key, &seq))
					continue;
				if (seq < p->counter(key)) {
					r = refuse(p, "an event's number is below the image's counter of its object "
						      "(the log does not continue this image)");
					break;
				}
				int missing = seq < reach(p, &ix, &cache, key) ? release_missing(p, &ix, t->ev[i], key, seq) : 1;
				if (missing < 0) {
					r = refuse(p, "an acquisition's previous holder released the object before it "
						      "acquired it (released_at): the log is inconsistent");
					break;
				}
				if (missing) {
					t->end = i;
					changed = 1;
					break;
				}
			}
		}
	}
	map_free(&ix);
	map_free(&cache);
	return r;
}

/* ---- going live at an output ---- */

int rp_plan_find_output(struct rp_plan *p, int32_t fd, uint64_t bytes, uint32_t *thread, uint32_t *index)
{
	int found = 0;
	for (uint32_t k = 0; k < p->nr_threads; k++) {
		const struct rp_thread *t = &p->threads[k];
		if (!replayed(t))
			continue;
		for (uint32_t i = t->start; i < t->n; i++) {
			const struct rrc_log_event *e = t->ev[i];
			if (e->kind != RRC_EV_OUTPUT || e->obj != (uint64_t)(int64_t)fd ||
			    e->data_len != sizeof(struct rrc_log_output))
				continue;
			struct rrc_log_output o;
			rrc_memcpy(&o, e + 1, sizeof o);
			if (o.offset + o.length != bytes || o.length == 0)
				continue;
			if (found++)
				return refuse(p, "two outputs of that fd end at that byte (the number was reused): "
						 "the output to go live at is ambiguous");
			*thread = k;
			*index = i;
		}
	}
	return found ? 0 : refuse(p, "no output after the image's cut ends at that byte of that fd");
}

/* includes thread k's first n events in the cut */
static void include_to(struct rp_plan *p, uint32_t k, uint64_t n, int *changed)
{
	struct rp_thread *t = &p->threads[k];
	if (t->n_end < n) {
		t->n_end = (uint32_t)n;
		*changed = 1;
	}
}

/* includes the event at slot s in the cut: its thread up to it */
static void include(struct rp_plan *p, const struct slot *s, int *changed)
{
	include_to(p, (uint32_t)(s->val >> 32), (uint32_t)s->val + 1ull, changed);
}

static const char *const lost = "the output depends on an event the log does not hold (a crash's tail)";

static int require(struct rp_plan *p, struct map *ix, uint64_t key, uint64_t seq, int *changed)
{
	struct slot *s = map_find(ix, key, seq);
	if (!s->key)
		return refuse(p, lost);
	include(p, s, changed);
	return 0;
}

/* what event e needs before it in any cut that holds it */
static int needs(struct rp_plan *p, struct map *ix, const struct rrc_log_event *e, int returns, int *changed)
{
	uint64_t key, seq;
	if (rrc_rp_numbered(e, &key, &seq)) {
		if (seq > p->counter(key) && require(p, ix, key, seq - 1, changed) < 0)
			return -1;
		/* the object free: the holder before it up to its release */
		uint64_t at = release_point(e);
		struct slot *h = at && seq > 0 ? map_find(ix, key, seq - 1) : 0;
		if (h && h->key) {
			/* the holder's events up to the release: all of them
			 * in the log, or the release is not */
			if (at > p->threads[h->val >> 32].n)
				return refuse(p, lost);
			include_to(p, (uint32_t)(h->val >> 32), at, changed);
		}
		/* an rwlock's: every release of the acquisition before it */
		for (uint64_t j = 0; seq > 0; j++) {
			struct slot *r = release_at(ix, key, seq - 1, j);
			if (!r || !r->key)
				break;
			include(p, r, changed);
		}
	}
	uint64_t order = rrc_ev_order(e);
	if (returns && order > p->returns_base + 1)
		return require(p, ix, RP_KEY_RETURNS, order - 1, changed);
	return 0;
}

/* Extends every replayed thread's n_end (set by the caller to what must
 * be held) to the least consistent cut holding it. */
static int close_cut(struct rp_plan *p, struct map *ix, int returns)
{
	/* each thread's events from `done` to n_end are still to look at */
	uint64_t done_bytes = (uint64_t)p->nr_threads * 4 + 4;
	long a = rrc_sys_mmap(0, done_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (a < 0 && a > -4096)
		return refuse(p, "no memory to index the log's numbers");
	uint32_t *done = (uint32_t *)a;
	for (uint32_t k = 0; k < p->nr_threads; k++)
		done[k] = p->threads[k].start;
	int r = 0;
	for (int changed = 1; changed && !r;) {
		changed = 0;
		for (uint32_t k = 0; k < p->nr_threads && !r; k++) {
			struct rp_thread *t = &p->threads[k];
			if (!replayed(t) || done[k] >= t->n_end)
				continue;
			if (t->role == RP_BORN && done[k] == t->start && t->birth >= p->counter(RP_KEY_CREATIONS))
				r = require(p, ix, RP_KEY_CREATIONS, t->birth, &changed);
			for (uint32_t i = done[k]; i < t->n_end && !r; i++)
				r = needs(p, ix, t->ev[i], returns, &changed);
			done[k] = t->n_end;
		}
	}
	rrc_sys_munmap(done, done_bytes);
	return r;
}

/* Indexes the log, lets seed() set what the cut must hold (every n_end
 * starts at its thread's start: nothing), then closes it. */
static int until(struct rp_plan *p, int returns, void (*seed)(struct rp_plan *, const void *), const void *arg)
{
	struct map ix = { 0 };
	int x = index_events(p, &ix, 1);
	if (x < 0) {
		map_free(&ix);
		return index_refused(p, x);
	}
	for (uint32_t k = 0; k < p->nr_threads; k++)
		p->threads[k].n_end = p->threads[k].start;
	seed(p, arg);
	int r = close_cut(p, &ix, returns);
	map_free(&ix);
	return r;
}

struct one_event { uint32_t thread, index; };
static void seed_event(struct rp_plan *p, const void *arg)
{
	const struct one_event *o = arg;
	p->threads[o->thread].n_end = o->index + 1;
}

int rp_plan_until(struct rp_plan *p, uint32_t thread, uint32_t index, int returns)
{
	struct one_event o = { thread, index };
	return until(p, returns, seed_event, &o);
}

/* an output to a connection of r that begins below its released offset,
 * or the close or shutdown whose FIN its client was sent (RRC_EVF_FIN) */
int rp_output_released(const struct rrc_log_event *e, const struct rrc_log_released *r)
{
	if (e->kind != RRC_EV_OUTPUT || e->data_len != sizeof(struct rrc_log_output))
		return 0;
	struct rrc_log_output o;
	rrc_memcpy(&o, e + 1, sizeof o);
	int fin = (e->flags & RRC_EVF_FIN) != 0;
	if (o.family != RRC_OUT_INET || !(o.length || fin))
		return 0;
	const struct rrc_log_released_conn *c = (const void *)(r + 1);
	for (uint32_t i = 0; i < r->nr_conns; i++)
		if (c[i].local_addr == o.local_addr && c[i].peer_addr == o.peer_addr &&
		    c[i].local_port == o.local_port && c[i].peer_port == o.peer_port)
			return fin ? (c[i].flags & RRC_RELEASED_FIN) && o.offset <= c[i].released
				   : o.offset < c[i].released;
	return 0;
}

struct released_seed { const struct rrc_log_released *r; uint32_t *limit; };
static void seed_released(struct rp_plan *p, const void *arg)
{
	const struct released_seed *s = arg;
	for (uint32_t k = 0; k < p->nr_threads; k++) {
		struct rp_thread *t = &p->threads[k];
		if (!replayed(t))
			continue;
		for (uint32_t i = t->start; i < s->limit[k]; i++)
			if (rp_output_released(t->ev[i], s->r))
				t->n_end = i + 1;
	}
}

int rp_plan_until_released(struct rp_plan *p, const struct rrc_log_released *r, int returns)
{
	/* the outputs are looked for up to each thread's end as it was */
	uint64_t bytes = (uint64_t)p->nr_threads * 4 + 4;
	long a = rrc_sys_mmap(0, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (a < 0 && a > -4096)
		return refuse(p, "no memory to index the log's numbers");
	struct released_seed s = { r, (uint32_t *)a };
	for (uint32_t k = 0; k < p->nr_threads; k++)
		s.limit[k] = p->threads[k].n_end;
	int x = until(p, returns, seed_released, &s);
	rrc_sys_munmap(s.limit, bytes);
	return x;
}

/* ---- how far returns can be ordered ---- */

uint64_t rp_plan_returns_reach(struct rp_plan *p)
{
	uint64_t n = 0;
	for (uint32_t k = 0; k < p->nr_threads; k++)
		if (replayed(&p->threads[k]))
			n += p->threads[k].end - p->threads[k].start;
	/* a bit per return number base+1 .. base+n: more events than that
	 * cannot all be contiguous */
	uint64_t bytes = n / 8 + 8;
	long a = rrc_sys_mmap(0, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (a < 0 && a > -4096)
		return p->returns_base + 1; /* order nothing */
	uint8_t *seen = (uint8_t *)a;
	for (uint32_t k = 0; k < p->nr_threads; k++) {
		const struct rp_thread *t = &p->threads[k];
		if (!replayed(t))
			continue;
		for (uint32_t i = t->start; i < t->end; i++) {
			uint64_t r = rrc_ev_order(t->ev[i]);
			if (r > p->returns_base && r - p->returns_base - 1 < n) {
				uint64_t b = r - p->returns_base - 1;
				seen[b / 8] |= (uint8_t)(1u << (b % 8));
			}
		}
	}
	uint64_t b = 0;
	while (b < n && (seen[b / 8] >> (b % 8)) & 1)
		b++;
	rrc_sys_munmap(seen, bytes);
	return p->returns_base + 1 + b;
}
