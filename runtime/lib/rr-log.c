/* SPDX-License-Identifier: MIT
 *
 * The record log inside the process (rr-log.h; rrc/rrlog.h; issue 13 §2).
 *
 * Memory, mapped once when recording starts:
 *  - the ring region (MAP_NORESERVE, excluded from images by address like
 *    the scratch arena: RRC's skipped VMA): a control page with the queue
 *    of cuts, then RING_SLOTS rings of RING_BYTES, one per live thread.
 *    Only the pages a thread's ring has used cost memory.
 *  - the object table (ordinary private memory, so in every image: a
 *    replay from a checkpoint continues each object's sequence where the
 *    checkpoint left it): address -> next sequence number, and where the
 *    object was last released (the next acquisition's released_at, so
 *    that a release costs two stores instead of an event); open
 *    addressing, entries never removed.
 *
 * A ring has one producer (its thread) and one consumer (the writer
 * thread): the producer writes a record, then publishes `head`; the writer
 * drains [tail, head) into batches and publishes `tail`. Records never wrap
 * around the end of the ring: a record that does not fit in what is left
 * before the end is preceded by a pad (an event header of kind 0 whose data
 * covers the rest; with fewer than 32 bytes left there is no header, both
 * sides skip them). Positions only grow; the offset is position % RING_DATA.
 *
 * The writer uses raw syscalls only (it must never record anything); what
 * it writes goes through rr-sink.c (a file, or sealed frames on a
 * connection to the backup).
 * A write that fails stops recording for good, with a message: a log with
 * a hole would replay wrongly, a process without a log still runs.
 *
 * ASYNC-SIGNAL-SAFE: rrc_rr_cut (the pause path).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include "rrc_lib.h"
#include "rrc/crc32c.h"
#include "rr-log.h"
#include "rr-fds.h"
#include "rr-sink.h"

#define RING_BYTES  (256u << 10)
#define RING_SLOTS  RRC_MAX_THREADS
#define RING_HDR    64u
#define RING_DATA   (RING_BYTES - RING_HDR)
#define EV_HDR      ((uint32_t)sizeof(struct rrc_log_event))
#define CUT_QUEUE   8
#define CUT_BYTES   (sizeof(struct rrc_log_cut) + RING_SLOTS * sizeof(struct rrc_log_cut_thread))
#define OBJ_BITS    18
#define OBJ_SLOTS   (1u << OBJ_BITS)
#define WRITER_TICK_NS 5000000l     /* drain at least this often */

/* EXITED: the thread logged its exit; its ring is freed once drained and
 * the thread gone (it may still record from TLS destructors meanwhile) */
enum { SLOT_FREE = 0, SLOT_LIVE, SLOT_EXITED };

struct ring {
	volatile uint64_t head;         /* bytes appended (producer) */
	volatile uint64_t tail;         /* bytes the writer has written out: room again */
	volatile uint64_t events;       /* events appended (producer), published after head */
	uint64_t drained_events;        /* writer: first event of its next batch */
	volatile uint32_t tid;
	volatile uint32_t state;        /* SLOT_* */
	volatile uint32_t space;        /* futex: bumped when the writer frees room */
	volatile uint32_t waiting;      /* the producer sleeps on `space` */
	uint64_t taken;                 /* writer: bytes handed to the sink (tail once flushed) */
	uint64_t marked;                /* writer: events the last release mark covered */
	uint8_t data[RING_DATA];
};
_Static_assert(sizeof(struct ring) == RING_BYTES, "ring layout");

struct cut_slot {
	volatile uint32_t full;         /* written in a pause, emptied by the writer */
	uint32_t len;
	uint8_t rec[CUT_BYTES];
};

/* The writer's counts for a release mark (below). */
struct mark_counts {
	uint32_t tid[RING_SLOTS];
	uint64_t count[RING_SLOTS];
	uint8_t rec[sizeof(struct rrc_log_mark) + RING_SLOTS * sizeof(struct rrc_log_cut_thread)];
};

/* The head of the region: what the pause and the writer share, and the
 * writer's own buffers (here rather than in the library's .bss, which the
 * pause helper inherits only while it is small: pause-helper.c). */
struct control {
	struct cut_slot cuts[CUT_QUEUE];
	uint32_t cut_next;              /* the pause's next slot */
	struct mark_counts counts;      /* writer */
	uint8_t record[EV_HDR + CUT_BYTES + 8]; /* writer: a tid-0 record being written */
};

struct obj {
	volatile uint64_t addr, seq;
	/* the last release: the object's count of numbers then (the number
	 * released + 1), and the releaser's count of events */
	volatile uint64_t rel_next, rel_at;
};

volatile int rrc_rr_mode;

/* The order of system calls' returns (RRC §4.7): the last number given.
 * Ordinary memory, so an image holds where it stood at its cut; a replay
 * ordering returns counts on from there (rr-replay.c). */
static volatile uint64_t returns;

volatile uint64_t *rrc_rr_returns(void)
{
	return &returns;
}

static struct {
	uint8_t *region;                 /* control + rings */
	uint64_t region_len;
	struct control *ctl;
	struct ring *rings;
	struct obj *objs;
	uint64_t batch_seq;              /* writer */
	volatile uint32_t kick;          /* futex: producers wake the writer */
	volatile uint32_t writer_sleeping;
	volatile uint32_t broken;
	volatile uint32_t slots_used;    /* rings ever taken: 0 .. slots_used - 1 (the writer looks no further) */
	volatile uint64_t outputs;       /* OUTPUT events appended, all threads */
	int prompt;                      /* the sink is a connection to the backup: an output wakes the writer */
	uint64_t mark_number;            /* writer: the last release mark's */
	uint64_t mark_outputs;           /* writer: `outputs` when the last mark's counts were taken */
	/* bumped when recording starts again after a restore: every thread's
	 * ring pointer (TLS, in the image) is into the region before */
	volatile uint32_t gen;
	int continuing;                  /* rrc_rr_prepare_continue ran: go-live records */
	int (*real_create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
} rr;

static __thread struct ring *my_ring __attribute__((tls_model("initial-exec")));
static __thread uint32_t my_ring_gen __attribute__((tls_model("initial-exec")));

/* The calling thread's ring in this recording, or NULL. */
static inline struct ring *mine(void)
{
	return my_ring_gen == rr.gen ? my_ring : 0;
}
/* the library's own threads (control, writer) never record (rr-log.h) */
__thread int rrc_rr_library_thread_flag __attribute__((tls_model("initial-exec")));
#define library_thread rrc_rr_library_thread_flag

void rrc_rr_library_thread(void)
{
	library_thread = 1;
}

int rrc_rr_is_library_thread(void)
{
	return library_thread;
}
/* the creator's tid, set by the pthread_create trampoline (rr-sync.c)
 * before the thread's first event */
__thread uint32_t rrc_rr_creator __attribute__((tls_model("initial-exec"))) RRC_HIDDEN;
__thread uint64_t rrc_rr_birth __attribute__((tls_model("initial-exec"))) RRC_HIDDEN;

static inline uint32_t rec_len(uint32_t data) { return EV_HDR + ((data + 7u) & ~7u); }

static void stop_recording(const char *why, long err)
{
	char m[300];
	size_t l = rrc_bput(m, sizeof m, 0, "recording stopped, the log is incomplete from here: ");
	l = rrc_bput(m, sizeof m, l, why);
	if (err) {
		l = rrc_bput(m, sizeof m, l, " (errno ");
		l = rrc_bput_u64(m, sizeof m, l, (uint64_t)err);
		rrc_bput(m, sizeof m, l, ")");
	}
	if (!__atomic_exchange_n(&rr.broken, 1, __ATOMIC_SEQ_CST))
		rrc_log(m);
	RRC_STORE(&rrc_rr_mode, RRC_RR_OFF);
	/* producers waiting for room: let them go */
	for (uint32_t i = 0; i < RING_SLOTS; i++)
		if (RRC_LOAD(&rr.rings[i].waiting)) {
			RRC_ATOMIC_INC(&rr.rings[i].space);
			rrc_sys_futex(&rr.rings[i].space, RRC_FUTEX_WAKE, 1, 0);
		}
}

/* The sink failed (its backup is gone): 1 if the recording goes on,
 * the log waiting for the next sink (a spare; rr-sink.h), 0 if not. */
static int sink_failed(long err)
{
	if (!rrc_rr_sink_lost())
		return 0;
	char m[200];
	size_t l = rrc_bput(m, sizeof m, 0, "the record log's connection failed (errno ");
	l = rrc_bput_u64(m, sizeof m, l, (uint64_t)err);
	rrc_bput(m, sizeof m, l, "): recording goes on, the log waits for the next backup's (RECORD)");
	rrc_log(m);
	return 1;
}

static void kick_writer(void)
{
	RRC_ATOMIC_INC(&rr.kick);
	if (RRC_LOAD(&rr.writer_sleeping))
		rrc_sys_futex(&rr.kick, RRC_FUTEX_WAKE, 1, 0);
}

/* An output's kick, deferred to its thread's next readiness wait or sleep
 * once the thread has shown it has an event loop (it waited before):
 * such a loop writes its replies in a burst and then waits, so one wake
 * carries the burst to the backup in one batch (RRC §4.5: the logging
 * thread batches) instead of a wake, a futex wait and a frame per reply
 * (measured before: 0.9 futex calls and 0.65 frames per redis request).
 * A thread that never waits kicks at once; one that writes and then
 * blocks elsewhere (a read on a blocking socket) is covered by the
 * writer's tick (WRITER_TICK_NS) at worst. */
static __thread int kick_owed __attribute__((tls_model("initial-exec")));
static __thread int waits_seen __attribute__((tls_model("initial-exec")));

void rrc_rr_before_wait(void)
{
	waits_seen = 1;
	if (kick_owed) {
		kick_owed = 0;
		kick_writer();
	}
}

/* ---- set-up ---- */

int rrc_rr_log_owns(int fd)
{
	return rrc_rr_sink_owns(fd);
}

int rrc_rr_ring_range(uint64_t *start, uint64_t *end)
{
	if (!rr.region)
		return 0;
	*start = (uint64_t)rr.region;
	*end = (uint64_t)rr.region + rr.region_len;
	return 1;
}

static int fail_init(const char *what, long err)
{
	rrc_log_failure("not recording: ", what, (int)err);
	return -1;
}

static void event_raw(struct ring *r, uint16_t kind, uint16_t flags, uint64_t obj, uint64_t seq,
		      int64_t result, uint64_t released_at, const struct iovec *data, int pieces, uint32_t len);
static struct ring *ring_take(void);

/* The region: the writer's control, the sink's pending area, the rings
 * (excluded from images: rrc_rr_ring_range). */
static int map_region(void)
{
	uint64_t ctl_len = (sizeof(struct control) + 4095) & ~4095ull;
	uint64_t sink_len = (rrc_rr_sink_area_size() + 4095) & ~4095ull;
	uint64_t len = ctl_len + sink_len + (uint64_t)RING_SLOTS * RING_BYTES;
	long m = rrc_map_guarded(len);
	if (m < 0 && m > -4096)
		return fail_init("cannot map the log rings", -m);
	rr.region = (uint8_t *)m;
	rr.region_len = len;
	rr.ctl = (struct control *)rr.region;
	rrc_rr_sink_attach(rr.region + ctl_len);
	rr.rings = (struct ring *)(rr.region + ctl_len + sink_len);
	return 0;
}

/* The log's header, through the sink. */
static long write_header(uint32_t flags)
{
	struct rrc_log_header h;
	rrc_memset(&h, 0, sizeof h);
	rrc_memcpy(h.magic, RRC_LOG_MAGIC, 8);
	h.version = RRC_LOG_VERSION;
	h.flags = flags;
	if (rrc_syscall3(SYS_getrandom, (long)h.log_id, sizeof h.log_id, 0) != sizeof h.log_id)
		return -EIO;
	struct { long sec, nsec; } rt;
	rrc_sys_clock_gettime(0 /* CLOCK_REALTIME */, &rt);
	h.created_ns = (uint64_t)rt.sec * 1000000000ull + (uint64_t)rt.nsec;
	h.pid = (uint32_t)rrc_sys_getpid();
	h.header_crc = rrc_crc32c(&h, __builtin_offsetof(struct rrc_log_header, header_crc));
	struct iovec hv = { &h, sizeof h };
	return rrc_rr_sink_put(1, &hv, 1, sizeof h, 0);
}

int rrc_rr_init(void)
{
	int sink = rrc_rr_sink_open();
	if (sink <= 0)
		return sink;
	if (map_region() < 0)
		return -1;
	long m = rrc_sys_mmap(0, OBJ_SLOTS * sizeof(struct obj), PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m < 0 && m > -4096)
		return fail_init("cannot map the object table", -m);
	rr.objs = (struct obj *)m;
	int fe = rrc_fdt_init();
	if (fe < 0)
		return fail_init("cannot map the fd table", -fe);
	long w = write_header(0);
	if (w < 0)
		return fail_init("cannot write the log header", -w);
	rr.prompt = rrc_rr_sink_prompt();
	RRC_STORE(&rrc_rr_mode, RRC_RR_RECORD);
	my_ring = ring_take(); /* the main thread: THREAD_START, creator 0 */
	my_ring_gen = rr.gen;
	return 0;
}

int rrc_rr_prepare_continue(void)
{
	if (!rr.objs)
		return fail_init("recording again after the replay: the process was never recorded", 0);
	/* the object table and the fd table are ordinary memory, restored
	 * with the image: the numbers go on from the replay's */
	rr.batch_seq = 0;
	rr.kick = rr.writer_sleeping = rr.broken = rr.slots_used = 0;
	rr.outputs = rr.mark_number = rr.mark_outputs = 0;
	rr.prompt = 0;
	if (map_region() < 0)
		return -1;
	rr.gen++;
	rrc_rr_sink_await();
	rr.real_create = dlsym(RTLD_NEXT, "pthread_create");
	rr.continuing = 1;
	return 0;
}

/* ---- rings: the producer side ---- */

static struct ring *ring_take(void)
{
	for (uint32_t i = 0; i < RING_SLOTS; i++) {
		struct ring *r = &rr.rings[i];
		uint32_t free_ = SLOT_FREE;
		if (RRC_LOAD(&r->state) != SLOT_FREE ||
		    !__atomic_compare_exchange_n(&r->state, &free_, SLOT_LIVE, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
			continue;
		if (i >= RRC_LOAD(&rr.slots_used))
			__atomic_store_n(&rr.slots_used, i + 1, __ATOMIC_RELEASE);
		/* the writer left it empty: head == tail */
		r->events = 0;
		r->drained_events = 0;
		r->head = r->tail = r->taken = 0;
		r->marked = 0;
		r->waiting = 0;
		RRC_STORE(&r->tid, (uint32_t)rrc_sys_gettid());
		event_raw(r, RRC_EV_THREAD_START, 0, rrc_rr_creator, rrc_rr_birth, 0, 0, 0, 0, 0);
		return r;
	}
	stop_recording("more live threads than the log has rings (1024)", 0);
	return 0;
}

static inline uint64_t room_needed(const struct ring *r, uint32_t len)
{
	uint32_t need = rec_len(len);
	uint32_t to_end = RING_DATA - (uint32_t)(r->head % RING_DATA);
	return to_end < need ? (uint64_t)need + to_end : need;
}

void rrc_rr_reserve(uint32_t len)
{
	/* after a restore the ring is not mapped any more: never touch it */
	if (library_thread || !rrc_rr_mode_on())
		return;
	if (!mine() && rrc_rr_mode_on()) {
		my_ring = ring_take();
		my_ring_gen = rr.gen;
	}
	struct ring *r = mine();
	if (!r)
		return;
	if (len > RRC_LOG_MAX_DATA)
		len = RRC_LOG_MAX_DATA;
	uint64_t need = room_needed(r, len);
	while (rrc_rr_mode_on()) {
		uint32_t sp = RRC_LOAD(&r->space);
		uint64_t used = r->head - RRC_LOAD(&r->tail);
		if (RING_DATA - used >= need)
			return;
		RRC_STORE(&r->waiting, 1);
		kick_writer();
		struct rrc_ts ts = { 0, 20000000l };
		rrc_sys_futex(&r->space, RRC_FUTEX_WAIT, sp, &ts);
		if (!rrc_rr_mode_on())
			return; /* restored while waiting: the ring is gone */
		RRC_STORE(&r->waiting, 0);
	}
}

/* Set while this thread writes a record: an application signal handler
 * that makes a recorded call in that instant would write over it. */
static __thread int writing __attribute__((tls_model("initial-exec")));

static void event_raw(struct ring *r, uint16_t kind, uint16_t flags, uint64_t obj, uint64_t seq,
		      int64_t result, uint64_t released_at, const struct iovec *data, int pieces, uint32_t len)
{
	if (writing) {
		stop_recording("a signal handler made a recorded call while its thread was appending an event "
			       "(asynchronous signals are not recorded)", 0);
		return;
	}
	writing = 1;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	uint64_t pos = r->head;
	uint32_t off = (uint32_t)(pos % RING_DATA), to_end = RING_DATA - off;
	uint32_t need = rec_len(len);
	if (to_end < need) {
		if (to_end >= EV_HDR) {
			struct rrc_log_event pad = { .kind = 0, .data_len = to_end - EV_HDR };
			rrc_memcpy(r->data + off, &pad, EV_HDR);
		}
		pos += to_end;
		off = 0;
	}
	struct rrc_log_event e = { .kind = kind, .flags = flags, .data_len = len, .obj = obj, .seq = seq,
				   .result = result };
	if (RRC_EV_IS_CALL(kind)) {
		/* the call has returned: its place among every thread's returns,
		 * and when (inside the hook guard, so a cut sees both or none) */
		e.ret = __atomic_add_fetch(&returns, 1, __ATOMIC_SEQ_CST);
		e.ret_ns = rrc_rr_now_ns();
	} else {
		e.released_at = released_at;
		/* an acquisition's place among the returns, taken holding the
		 * object: a replay that keeps it keeps a thread's unlocked reads
		 * between the same acquisitions of the others (RRC §4.7) */
		if (RRC_EV_ORDERED_SYNC(kind))
			e.ord = __atomic_add_fetch(&returns, 1, __ATOMIC_SEQ_CST);
	}
	rrc_memcpy(r->data + off, &e, EV_HDR);
	uint32_t at = off + EV_HDR, left = len;
	for (int i = 0; i < pieces && left; i++) {
		uint32_t k = data[i].iov_len < left ? (uint32_t)data[i].iov_len : left;
		rrc_memcpy(r->data + at, data[i].iov_base, k);
		at += k;
		left -= k;
	}
	if (need > EV_HDR + len)
		rrc_memset(r->data + off + EV_HDR + len, 0, need - EV_HDR - len);
	/* head, then the count: a count the writer reads is of events it
	 * can drain (a release mark must never name an event not yet there) */
	__atomic_store_n(&r->head, pos + need, __ATOMIC_RELEASE);
	__atomic_store_n(&r->events, r->events + 1, __ATOMIC_RELEASE);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	writing = 0;
	if (kind == RRC_EV_OUTPUT) {
		/* a reply waits at the backup's gate for the mark that covers it
		 * (RRC §4.5): the writer must not sleep its tick out */
		__atomic_add_fetch(&rr.outputs, 1, __ATOMIC_SEQ_CST);
		if (rr.prompt) {
			if (waits_seen && pos + need - RRC_LOAD(&r->tail) <= RING_DATA / 2)
				kick_owed = 1;
			else
				kick_writer();
			return;
		}
	}
	if (pos + need - RRC_LOAD(&r->tail) > RING_DATA / 2)
		kick_writer();
}

/* The wrapper reserved room for the event (rrc_rr_reserve): otherwise a
 * bug, and recording stops. */
static int room_for(struct ring *r, uint64_t len)
{
	if (len <= RRC_LOG_MAX_DATA && room_needed(r, (uint32_t)len) <= RING_DATA - (r->head - RRC_LOAD(&r->tail)))
		return 1;
	stop_recording("an event larger than its wrapper reserved room for (a bug)", 0);
	return 0;
}

/* One event of r's thread, its data gathered from pieces, if it fits. */
static void append(struct ring *r, uint16_t kind, uint16_t flags, uint64_t obj, uint64_t seq, int64_t result,
		   uint64_t released_at, const struct iovec *pieces, int n)
{
	uint64_t len = 0;
	for (int i = 0; i < n; i++)
		len += pieces[i].iov_len;
	if (room_for(r, len))
		event_raw(r, kind, flags, obj, seq, result, released_at, pieces, n, (uint32_t)len);
}

void rrc_rr_eventv(uint16_t kind, uint16_t flags, uint64_t obj, uint64_t seq, int64_t result,
		   const struct iovec *pieces, int n)
{
	struct ring *r = mine();
	if (r && rrc_rr_mode_on())
		append(r, kind, flags, obj, seq, result, 0, pieces, n);
}

void rrc_rr_event(uint16_t kind, uint16_t flags, uint64_t obj, uint64_t seq, int64_t result,
		  const void *data, uint32_t len)
{
	struct iovec one = { (void *)data, len };
	rrc_rr_eventv(kind, flags, obj, seq, result, &one, len ? 1 : 0);
}

void rrc_rr_thread_exit(void)
{
	struct ring *r = mine();
	if (!r || !rrc_rr_mode_on())
		return;
	rrc_rr_reserve(0);
	rrc_hook_enter();
	event_raw(r, RRC_EV_THREAD_EXIT, 0, 0, 0, 0, 0, 0, 0, 0);
	/* Not the thread's last moment: TLS destructors run after this (and
	 * jemalloc's take mutexes). The ring stays this thread's; the writer
	 * frees it once it is drained and the thread is gone. */
	RRC_STORE(&r->state, SLOT_EXITED);
	rrc_hook_leave();
	kick_writer();
}

uint32_t rrc_rr_crc_iov(const struct iovec *iov, int cnt, size_t len)
{
	uint32_t crc = 0;
	for (int i = 0; i < cnt && len; i++) {
		size_t n = iov[i].iov_len < len ? iov[i].iov_len : len;
		crc = rrc_crc32c_extend(crc, iov[i].iov_base, n);
		len -= n;
	}
	return crc;
}

/* ---- the object table ---- */

/* The calling thread's last entry: a lock and its unlock look the same
 * object up one after the other (entries never move: always valid) */
static __thread struct obj *last_obj __attribute__((tls_model("initial-exec")));

static struct obj *obj_entry(const void *addr, int create)
{
	uint64_t a = (uint64_t)addr;
	struct obj *last = last_obj;
	if (last && last->addr == a)
		return last;
	if (!rr.objs)
		return 0;
	uint32_t i = (uint32_t)((a >> 3) * 0x9e3779b97f4a7c15ull >> (64 - OBJ_BITS));
	for (uint32_t n = 0; n < OBJ_SLOTS; n++, i = (i + 1) & (OBJ_SLOTS - 1)) {
		struct obj *o = &rr.objs[i];
		uint64_t cur = RRC_LOAD(&o->addr);
		if (cur == 0) {
			if (!create)
				return 0;
			uint64_t zero = 0;
			if (!__atomic_compare_exchange_n(&o->addr, &zero, a, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
				cur = zero; /* taken meanwhile: by whom? */
			else
				cur = a;
		}
		if (cur == a) {
			if (!library_thread)
				last_obj = o;
			return o;
		}
	}
	return 0;
}

volatile uint64_t *rrc_rr_obj_counter(const void *addr, int create)
{
	struct obj *o = obj_entry(addr, create);
	return o ? &o->seq : 0;
}

static struct obj *obj_or_stop(const void *addr)
{
	struct obj *o = obj_entry(addr, 1);
	if (!o)
		stop_recording("more distinct synchronization objects than the table holds (262144)", 0);
	return o;
}

uint64_t rrc_rr_obj_seq(const void *addr)
{
	struct obj *o = obj_or_stop(addr);
	return o ? __atomic_fetch_add(&o->seq, 1, __ATOMIC_RELAXED) : 0;
}

void rrc_rr_released(const void *addr)
{
	struct ring *r = mine();
	struct obj *o = r && rrc_rr_mode_on() ? obj_or_stop(addr) : 0;
	if (!o)
		return;
	/* the object is still held: the next holder reads these after it
	 * acquired it (the lock orders the accesses) */
	__atomic_store_n(&o->rel_at, r->events, __ATOMIC_RELAXED);
	__atomic_store_n(&o->rel_next, __atomic_load_n(&o->seq, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
}

void rrc_rr_acquired(uint16_t kind, uint16_t flags, uint64_t obj, const void *on, int got, int64_t result,
		     const void *data, uint32_t len)
{
	struct ring *r = mine();
	if (!r || !rrc_rr_mode_on())
		return;
	uint64_t seq = 0, released_at = 0;
	if (got) {
		struct obj *o = obj_or_stop(on);
		if (!o)
			return;
		seq = __atomic_fetch_add(&o->seq, 1, __ATOMIC_RELAXED);
		if (seq > 0 && RRC_EV_CARRIES_RELEASE(kind) &&
		    __atomic_load_n(&o->rel_next, __ATOMIC_RELAXED) == seq)
			released_at = __atomic_load_n(&o->rel_at, __ATOMIC_RELAXED);
	}
	struct iovec one = { (void *)data, len };
	append(r, kind, flags, obj, seq, result, released_at, &one, len ? 1 : 0);
}

/* ---- the writer ---- */

/* One batch. `held`: its events are ring memory that stays put until the
 * sink's next flush (the ring's tail moves only after it); otherwise the
 * pieces are the caller's and are written before this returns. */
static int write_batch(uint32_t tid, uint64_t first, uint32_t nr, const struct iovec *pieces, int npieces,
		       uint32_t len, int held)
{
	struct rrc_log_batch h = {
		.magic = RRC_LOG_BATCH_MAGIC, .tid = tid, .batch_seq = rr.batch_seq, .first_event = first,
		.nr_events = nr, .payload_len = len,
	};
	uint32_t crc = 0;
	for (int i = 0; i < npieces; i++)
		crc = rrc_crc32c_extend(crc, pieces[i].iov_base, pieces[i].iov_len);
	h.payload_crc = crc;
	h.header_crc = rrc_crc32c(&h, __builtin_offsetof(struct rrc_log_batch, header_crc));
	struct iovec iov[3] = { { &h, sizeof h } };
	for (int i = 0; i < npieces; i++)
		iov[1 + i] = pieces[i];
	long w = rrc_rr_sink_put(0, iov, 1 + npieces, (uint32_t)sizeof h + len, held);
	if (w < 0 && !sink_failed(-w)) {
		stop_recording("cannot write the log", -w);
		return -1;
	}
	rr.batch_seq++;
	return 0;
}

/* One batch from a ring: the events in [taken, head), in at most two
 * pieces of contiguous memory (a pad or the ring's end closes a piece),
 * at most RRC_LOG_MAX_PAYLOAD bytes, handed to the sink. Returns 1 if it
 * wrote one, 0 if the ring held no event, -1 if the log broke. */
static int drain_one(struct ring *r)
{
	uint64_t head = __atomic_load_n(&r->head, __ATOMIC_ACQUIRE);
	uint64_t pos = r->taken, run = pos;
	struct iovec pieces[2];
	int np = 0;
	uint32_t cnt = 0, len = 0;
	while (pos < head) {
		uint32_t off = (uint32_t)(pos % RING_DATA), to_end = RING_DATA - off;
		if (pos > run && off == 0) { /* the piece reached the ring's end */
			if (np == 2)
				break;
			pieces[np++] = (struct iovec){ r->data + run % RING_DATA, pos - run };
			run = pos;
		}
		const struct rrc_log_event *e = (const void *)(r->data + off);
		if (to_end < EV_HDR || e->kind == 0) { /* a pad: the rest up to the end */
			if (pos > run) {
				if (np == 2)
					break;
				pieces[np++] = (struct iovec){ r->data + run % RING_DATA, pos - run };
			}
			pos += to_end;
			run = pos;
			continue;
		}
		uint32_t step = rec_len(e->data_len);
		if (len + step > RRC_LOG_MAX_PAYLOAD || (pos == run && np == 2))
			break;
		len += step;
		cnt++;
		pos += step;
	}
	if (pos > run) /* np < 2 here: with two pieces closed no event is taken */
		pieces[np++] = (struct iovec){ r->data + run % RING_DATA, pos - run };
	if (cnt && write_batch(RRC_LOAD(&r->tid), r->drained_events, cnt, pieces, np, len, 1) < 0)
		return -1;
	r->drained_events += cnt;
	r->taken = pos;
	return cnt ? 1 : 0;
}

/* After the sink's flush: what it wrote out is room again. */
static void give_back(uint32_t used)
{
	for (uint32_t i = 0; i < used; i++) {
		struct ring *r = &rr.rings[i];
		if (RRC_LOAD(&r->state) == SLOT_FREE || r->taken == RRC_LOAD(&r->tail))
			continue;
		__atomic_store_n(&r->tail, r->taken, __ATOMIC_RELEASE);
		if (RRC_LOAD(&r->waiting)) {
			RRC_ATOMIC_INC(&r->space);
			rrc_sys_futex(&r->space, RRC_FUTEX_WAKE, 1, 0);
		}
	}
}

/* One process-wide record (a cut, a mark) as a tid-0 batch of one event,
 * written out at once. */
static int write_record(uint16_t kind, const void *rec, uint32_t len)
{
	uint8_t *buf = rr.ctl->record;
	struct rrc_log_event e = { .kind = kind, .data_len = len };
	uint32_t n = EV_HDR + ((len + 7u) & ~7u);
	rrc_memcpy(buf, &e, EV_HDR);
	rrc_memcpy(buf + EV_HDR, rec, len);
	rrc_memset(buf + EV_HDR + len, 0, n - EV_HDR - len);
	struct iovec one = { buf, n };
	return write_batch(0, 0, 1, &one, 1, n, 0);
}

static void write_cuts(void)
{
	for (uint32_t i = 0; i < CUT_QUEUE; i++) {
		struct cut_slot *c = &rr.ctl->cuts[i];
		if (!RRC_LOAD(&c->full))
			continue;
		if (write_record(RRC_EV_CUT, c->rec, c->len) < 0)
			return;
		RRC_STORE(&c->full, 0);
	}
}

/* Adds (tid, next) to the n positions of t, kept ascending by tid as the
 * format wants them (cuts, marks); the new count. ASYNC-SIGNAL-SAFE. */
static uint32_t insert_by_tid(struct rrc_log_cut_thread *t, uint32_t n, uint32_t tid, uint64_t next)
{
	uint32_t j = n;
	while (j > 0 && t[j - 1].tid > tid) {
		t[j] = t[j - 1];
		j--;
	}
	t[j] = (struct rrc_log_cut_thread){ .tid = tid, .next_event = next };
	return n + 1;
}

/* ---- release marks (RRC §4.5's PBSN/BBSN) ----
 *
 * An output may leave the backup's gate once every event that happened
 * before it is at the backup. The writer takes each ring's count of
 * published events (`counts`), then drains every ring: an event counted
 * was published before its ring's count was read, so everything that
 * happened before it (published earlier, on any ring) was published
 * before the last count was read, hence before any ring is drained. The
 * mark written after the drain says so for the counted events. Events
 * published during the drain are marked by the next pass, at once when
 * they include an output (the loop in writer_main). */
#define counts (rr.ctl->counts)

static void take_counts(uint32_t used)
{
	for (uint32_t i = 0; i < used; i++) {
		struct ring *r = &rr.rings[i];
		counts.tid[i] = RRC_LOAD(&r->state) == SLOT_FREE ? 0 : RRC_LOAD(&r->tid);
		counts.count[i] = __atomic_load_n(&r->events, __ATOMIC_ACQUIRE);
	}
}

static int write_mark(uint32_t used)
{
	struct rrc_log_mark *m = (struct rrc_log_mark *)counts.rec;
	struct rrc_log_cut_thread *t = (struct rrc_log_cut_thread *)(counts.rec + sizeof *m);
	uint32_t n = 0;
	for (uint32_t i = 0; i < used; i++) {
		struct ring *r = &rr.rings[i];
		if (counts.tid[i] && counts.count[i] > r->marked)
			n = insert_by_tid(t, n, counts.tid[i], counts.count[i]);
	}
	if (!n)
		return 0;
	*m = (struct rrc_log_mark){ .number = ++rr.mark_number, .nr_threads = n };
	if (write_record(RRC_EV_MARK, counts.rec, (uint32_t)(sizeof *m + n * sizeof *t)) < 0)
		return -1;
	for (uint32_t i = 0; i < used; i++)
		if (counts.tid[i] && counts.count[i] > rr.rings[i].marked)
			rr.rings[i].marked = counts.count[i];
	return 0;
}

/* A thread gone whose last events no mark covers yet: its ring waits. */
static int exited_unmarked(uint32_t used)
{
	for (uint32_t i = 0; i < used; i++)
		if (RRC_LOAD(&rr.rings[i].state) == SLOT_EXITED && rr.rings[i].marked != RRC_LOAD(&rr.rings[i].events))
			return 1;
	return 0;
}

/* One pass: the cuts waiting, every ring drained, a mark if outputs came
 * since the last one (`outs`: rr.outputs read before the counts), the
 * sink flushed, the rings' room given back. Each step inside the hook
 * guard (writer_main). -1 once the log broke or the mode went off. */
static int adopt_sink(void);

static int writer_pass(uint64_t outs)
{
	if (adopt_sink() < 0)
		return -1;
	rrc_hook_enter();
	int ok = rrc_rr_mode_on();
	if (ok)
		write_cuts();
	rrc_hook_leave();
	uint32_t used = __atomic_load_n(&rr.slots_used, __ATOMIC_ACQUIRE);
	int mark = outs != rr.mark_outputs || exited_unmarked(used);
	if (mark)
		take_counts(used);
	int d = 0;
	for (uint32_t i = 0; ok && i < used && d >= 0; i++) {
		rrc_hook_enter();
		if (!(ok = rrc_rr_mode_on())) {
			rrc_hook_leave();
			break;
		}
		struct ring *r = &rr.rings[i];
		uint32_t st = RRC_LOAD(&r->state);
		if (st != SLOT_FREE) {
			while ((d = drain_one(r)) > 0)
				;
			/* an exited thread's ring is freed once its last events are
			 * written out and marked (a mark names its tid) */
			if (d >= 0 && st == SLOT_EXITED && r->tail == __atomic_load_n(&r->head, __ATOMIC_ACQUIRE) &&
			    r->marked == RRC_LOAD(&r->events) && rrc_sys_tgkill((int)rrc_sys_getpid(), (int)r->tid, 0) == -ESRCH)
				RRC_STORE(&r->state, SLOT_FREE);
		}
		rrc_hook_leave();
	}
	if (!ok || d < 0)
		return -1;
	rrc_hook_enter();
	if ((ok = rrc_rr_mode_on())) {
		if (mark && write_mark(used) == 0)
			rr.mark_outputs = outs;
		long f = rrc_rr_sink_flush();
		if (f < 0 && !sink_failed(-f))
			stop_recording("cannot write the log", -f);
		else
			give_back(used);
	}
	rrc_hook_leave();
	return ok && rrc_rr_mode_on() ? 0 : -1;
}

static void *writer_main(void *arg)
{
	(void)arg;
	rrc_rr_library_thread();
	rrc_sys_prctl(15 /* PR_SET_NAME */, (unsigned long)"rrc-log-writer", 0, 0, 0); /* as rrc-control's */
	/* parked by every checkpoint like the application's threads (below):
	 * the park signal open whatever mask the creating thread had (going
	 * live, rr-replay.c, an application thread inside a wrapper) */
	uint64_t park = 1ull << (RRC_PARK_SIG - 1);
	rrc_sys_rt_sigprocmask(1 /* SIG_UNBLOCK */, &park, 0);
	/* Every step that touches the rings runs inside the hook guard: this
	 * thread is parked by a checkpoint like any other, and the rings are
	 * not in the image, so it must never be restored in the middle of a
	 * drain (it would resume writing into memory that is not there). A
	 * park waits until the step is over; after a restore the mode is off
	 * and the loop ends before touching a ring again. */
	/* a writer restored with the image (it was parked like any thread)
	 * finds recording off and ends; when a failover's process records
	 * again (rrc_rr_continue), a new writer serves the new region, and
	 * the old one, which may wake only then, must not: its generation */
	uint32_t gen = rr.gen;
	while (rrc_rr_mode_on() && gen == RRC_LOAD(&rr.gen)) {
		uint32_t k = RRC_LOAD(&rr.kick);
		uint64_t outs = __atomic_load_n(&rr.outputs, __ATOMIC_SEQ_CST);
		if (writer_pass(outs) < 0)
			break;
		/* outputs during the pass: the mark that covers them needs a
		 * pass whose counts come after them, now (a client waits) */
		if (rr.prompt && __atomic_load_n(&rr.outputs, __ATOMIC_SEQ_CST) != outs)
			continue;
		/* else sleep a tick, or until an output, a ring half full or the
		 * library's exit kicks, so that batches are large and the writer
		 * does not take a CPU from the application on a small machine */
		RRC_STORE(&rr.writer_sleeping, 1);
		struct rrc_ts ts = { 0, WRITER_TICK_NS };
		rrc_sys_futex(&rr.kick, RRC_FUTEX_WAIT, k, &ts);
		RRC_STORE(&rr.writer_sleeping, 0);
	}
	return 0;
}

static void start_writer(int (*real_create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *))
{
	pthread_t th;
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	int e = real_create ? real_create(&th, &at, writer_main, 0) : ENOSYS;
	pthread_attr_destroy(&at);
	if (e)
		stop_recording("cannot start the log writer thread", e);
}

void rrc_rr_start(void)
{
	if (!rrc_rr_mode_on())
		return;
	/* the real pthread_create: the writer is the library's, never recorded */
	start_writer(dlsym(RTLD_NEXT, "pthread_create"));
}

int rrc_rr_continue(void)
{
	if (!rr.continuing)
		return 0;
	rr.continuing = 0;
	RRC_STORE(&rrc_rr_mode, RRC_RR_RECORD);
	start_writer(rr.real_create);
	return rrc_rr_mode_on();
}

void rrc_rr_wake_writer(void)
{
	kick_writer();
}

/* The writer's first pass with the sink RECORD handed over (a recording
 * that continues a replayed process, or one whose backup failed): the
 * header, then for every thread whose first events went before the sink
 * an empty batch at its position (where its log begins for the reader,
 * rrlog.rs), and release marks numbered from 1 again. */
static int adopt_sink(void)
{
	if (rrc_rr_sink_adopt() <= 0)
		return 0;
	rr.batch_seq = 0;
	rr.mark_number = 0;
	rr.prompt = rrc_rr_sink_prompt();
	long w = write_header(RRC_LOG_F_CONTINUES);
	if (w < 0) {
		stop_recording("cannot write the log header to the sink handed over", -w);
		return -1;
	}
	uint32_t used = __atomic_load_n(&rr.slots_used, __ATOMIC_ACQUIRE);
	for (uint32_t i = 0; i < used; i++) {
		struct ring *r = &rr.rings[i];
		if (RRC_LOAD(&r->state) != SLOT_FREE && r->drained_events > 0 &&
		    write_batch(RRC_LOAD(&r->tid), r->drained_events, 0, 0, 0, 0, 0) < 0)
			return -1;
	}
	return 0;
}

/* At exit: what the rings hold reaches the file (the writer drains, this
 * waits for it, 2 s at most: a writer parked by a dump in progress or
 * threads still producing must not keep the process from ending). */
static int drained(void)
{
	for (uint32_t i = 0; i < CUT_QUEUE; i++)
		if (RRC_LOAD(&rr.ctl->cuts[i].full))
			return 0;
	for (uint32_t i = 0; i < RING_SLOTS; i++) {
		struct ring *r = &rr.rings[i];
		if (RRC_LOAD(&r->state) != SLOT_FREE && RRC_LOAD(&r->tail) != __atomic_load_n(&r->head, __ATOMIC_ACQUIRE))
			return 0;
	}
	return 1;
}

__attribute__((destructor)) static void rr_fini(void)
{
	if (!rrc_rr_mode_on() || library_thread)
		return;
	uint64_t deadline = rrc_mono_ns() + 2000000000ull;
	while (rrc_rr_mode_on() && !drained() && rrc_mono_ns() < deadline) {
		kick_writer();
		struct rrc_ts ts = { 0, 1000000 };
		rrc_syscall2(SYS_nanosleep, (long)&ts, 0);
	}
}

/* ---- the cut (pause path: every other thread parked) ---- */

void rrc_rr_cut(const uint8_t id[16], uint64_t sequence)
{
	if (!rrc_rr_mode_on())
		return;
	struct control *c = rr.ctl;
	struct cut_slot *s = &c->cuts[c->cut_next % CUT_QUEUE];
	if (RRC_LOAD(&s->full)) {
		stop_recording("checkpoints faster than the log writer (8 cuts waiting)", 0);
		return;
	}
	struct rrc_log_cut *h = (struct rrc_log_cut *)s->rec;
	struct rrc_log_cut_thread *t = (struct rrc_log_cut_thread *)(s->rec + sizeof *h);
	rrc_memset(h, 0, sizeof *h);
	rrc_memcpy(h->image_id, id, 16);
	h->sequence = sequence;
	uint32_t n = 0;
	for (uint32_t i = 0; i < RING_SLOTS; i++) {
		struct ring *r = &rr.rings[i];
		if (RRC_LOAD(&r->state) == SLOT_FREE)
			continue;
		if (RRC_LOAD(&r->state) == SLOT_EXITED && rrc_sys_tgkill((int)rrc_sys_getpid(), (int)r->tid, 0) == -ESRCH)
			continue; /* gone: not in the image */
		n = insert_by_tid(t, n, r->tid, r->events);
	}
	h->nr_threads = n;
	s->len = (uint32_t)(sizeof *h + n * sizeof *t);
	c->cut_next++;
	RRC_STORE(&s->full, 1);
	/* at once: the backup commits this checkpoint's log trim and a
	 * failover replays from it only once the cut is there */
	kick_writer();
}

void rrc_rr_restored(void)
{
	/* the rings and the log fd are not in the image */
	RRC_STORE(&rrc_rr_mode, RRC_RR_OFF);
	rrc_rr_sink_forget();
	rr.region = 0;
	rr.region_len = 0;
}
