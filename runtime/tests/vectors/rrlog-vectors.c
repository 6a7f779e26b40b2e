/* SPDX-License-Identifier: MIT
 *
 * The record log's shared vectors (rrc/rrlog.h), written from the C
 * structs: rrlog-good.bin is the log crates/rrc-image/src/rrlog/tests.rs
 * builds as sample() (two threads, a cut), byte for byte; the others
 * break one rule each and must be refused by name.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include "rrc/crc32c.h"
#include "rrc/rrlog.h"
#include "vecout.h"

#define PIN(t, f, off) _Static_assert(offsetof(struct t, f) == (off), #t "." #f)
PIN(rrc_log_header, version, 8);
PIN(rrc_log_header, log_id, 16);
PIN(rrc_log_header, created_ns, 32);
PIN(rrc_log_header, pid, 40);
PIN(rrc_log_header, header_crc, 44);
_Static_assert(sizeof(struct rrc_log_header) == 48, "rrc_log_header size");
PIN(rrc_log_batch, tid, 4);
PIN(rrc_log_batch, batch_seq, 8);
PIN(rrc_log_batch, first_event, 16);
PIN(rrc_log_batch, nr_events, 24);
PIN(rrc_log_batch, payload_len, 28);
PIN(rrc_log_batch, payload_crc, 32);
PIN(rrc_log_batch, header_crc, 36);
_Static_assert(sizeof(struct rrc_log_batch) == 40, "rrc_log_batch size");
PIN(rrc_log_event, data_len, 4);
PIN(rrc_log_event, obj, 8);
PIN(rrc_log_event, seq, 16);
PIN(rrc_log_event, result, 24);
PIN(rrc_log_event, ret, 32);
PIN(rrc_log_event, ret_ns, 40);
_Static_assert(sizeof(struct rrc_log_event) == 48, "rrc_log_event size");
PIN(rrc_log_output, family, 20);
PIN(rrc_log_output, local_addr, 24);
PIN(rrc_log_output, peer_addr, 28);
PIN(rrc_log_output, local_port, 32);
PIN(rrc_log_output, peer_port, 34);
PIN(rrc_log_output, made, 40);
_Static_assert(sizeof(struct rrc_log_output) == 48, "rrc_log_output size");
_Static_assert(sizeof(struct rrc_log_mark) == 16, "rrc_log_mark size");
_Static_assert(sizeof(struct rrc_log_cut) == 32, "rrc_log_cut size");
_Static_assert(sizeof(struct rrc_log_cut_thread) == 16, "rrc_log_cut_thread size");

static void header(struct buf *b, uint32_t version)
{
	struct rrc_log_header h;
	memset(&h, 0, sizeof h);
	memcpy(h.magic, RRC_LOG_MAGIC, 8);
	h.version = version;
	memset(h.log_id, 7, sizeof h.log_id);
	h.created_ns = 1700000000000000000ull;
	h.pid = 1;
	h.header_crc = rrc_crc32c(&h, offsetof(struct rrc_log_header, header_crc));
	put(b, &h, sizeof h);
}

/* A batch under construction: events go to `payload`, then out(). */
struct batch {
	uint32_t tid, n;
	uint64_t seq, first;
	struct buf payload;
};

/* the order of returns the sample's calls take */
static uint64_t returns;

static void event(struct batch *bt, uint16_t kind, uint64_t obj, uint64_t seq, int64_t result,
		  const void *data, uint32_t len)
{
	struct rrc_log_event e = { .kind = kind, .data_len = len, .obj = obj, .seq = seq, .result = result };
	if (RRC_EV_IS_CALL(kind)) {
		e.ret = ++returns;
		e.ret_ns = 1000 * e.ret;
	} else if (RRC_EV_ORDERED_SYNC(kind)) {
		e.ord = ++returns;
	}
	put(&bt->payload, &e, sizeof e);
	put(&bt->payload, data, len);
	pad8(&bt->payload);
	bt->n++;
}

static void out(struct buf *b, struct batch *bt)
{
	struct rrc_log_batch h = {
		.magic = RRC_LOG_BATCH_MAGIC, .tid = bt->tid, .batch_seq = bt->seq, .first_event = bt->first,
		.nr_events = bt->n, .payload_len = (uint32_t)bt->payload.len,
		.payload_crc = rrc_crc32c(bt->payload.p, bt->payload.len),
	};
	h.header_crc = rrc_crc32c(&h, offsetof(struct rrc_log_batch, header_crc));
	put(b, &h, sizeof h);
	put(b, bt->payload.p, bt->payload.len);
	bt->payload.len = 0;
	bt->n = 0;
}

/* returns the offset where the last batch starts */
static size_t good(struct buf *b, uint32_t version)
{
	header(b, version);
	returns = 0;
	struct batch bt = { .tid = 1, .seq = 0, .first = 0 };
	event(&bt, RRC_EV_THREAD_START, 0, 0, 0, NULL, 0);
	event(&bt, RRC_EV_CLOCK, 1, 1, 2, NULL, 0); /* 1 s 2 ns */
	event(&bt, RRC_EV_THREAD_CREATE, 2, 0, 0, NULL, 0);
	event(&bt, RRC_EV_MUTEX_LOCK, 0x5000, 0, 0, NULL, 0);
	out(b, &bt);
	bt = (struct batch){ .tid = 2, .seq = 1, .first = 0 };
	event(&bt, RRC_EV_THREAD_START, 1, 0, 0, NULL, 0);
	event(&bt, RRC_EV_RANDOM, 0, 0, 5, "abcde", 5);
	/* 5 bytes to 10.0.0.9:40000 from 10.0.0.1:6379, on fd 5 made by
	 * the fd table's call 7 */
	struct rrc_log_output o = { .offset = 0, .length = 5, .crc = 0x12345678, .family = RRC_OUT_INET,
				    .local_addr = htonl(0x0a000001), .peer_addr = htonl(0x0a000009),
				    .local_port = htons(6379), .peer_port = htons(40000), .made = 7 };
	event(&bt, RRC_EV_OUTPUT, 5, 0, 5, &o, sizeof o);
	out(b, &bt);
	struct {
		struct rrc_log_cut c;
		struct rrc_log_cut_thread t[2];
	} cut = { .c = { .sequence = 3, .nr_threads = 2 }, .t = { { .tid = 1, .next_event = 4 }, { .tid = 2, .next_event = 2 } } };
	memset(cut.c.image_id, 9, sizeof cut.c.image_id);
	bt = (struct batch){ .tid = 0, .seq = 2, .first = 0 };
	event(&bt, RRC_EV_CUT, 0, 0, 0, &cut, sizeof cut);
	out(b, &bt);
	/* a release mark: thread 1's first 4 events, thread 2's 3 */
	struct {
		struct rrc_log_mark m;
		struct rrc_log_cut_thread t[2];
	} mark = { .m = { .number = 1, .nr_threads = 2 }, .t = { { .tid = 1, .next_event = 4 }, { .tid = 2, .next_event = 3 } } };
	bt = (struct batch){ .tid = 0, .seq = 3, .first = 0 };
	event(&bt, RRC_EV_MARK, 0, 0, 0, &mark, sizeof mark);
	/* what the client of fd 5's connection was sent: 3 bytes */
	struct {
		struct rrc_log_released r;
		struct rrc_log_released_conn c[1];
	} rel = { .r = { .nr_conns = 1 }, .c = { { .local_addr = htonl(0x0a000001), .peer_addr = htonl(0x0a000009),
						   .local_port = htons(6379), .peer_port = htons(40000), .released = 3 } } };
	event(&bt, RRC_EV_RELEASED, 0, 0, 0, &rel, sizeof rel);
	out(b, &bt);
	size_t last = b->len;
	bt = (struct batch){ .tid = 1, .seq = 4, .first = 4 };
	/* the mutex again, released after this thread's event 3 */
	event(&bt, RRC_EV_MUTEX_LOCK, 0x5000, 1, 0, NULL, 0);
	struct rrc_log_event *acq = (struct rrc_log_event *)(bt.payload.p + bt.payload.len - sizeof *acq);
	acq->released_at = 4;
	out(b, &bt);
	free(bt.payload.p);
	return last;
}

void rrlog_vectors(void)
{
	struct buf b = { 0 };
	size_t last = good(&b, RRC_LOG_VERSION);
	emit("rrlog-good.bin", &b);
	size_t full = b.len;
	b.len = last + sizeof(struct rrc_log_batch) + 8;   /* the last batch cut short */
	emit("rrlog-truncated.bin", &b);
	b.len = full;
	b.p[last + sizeof(struct rrc_log_batch) + 9] ^= 0x10; /* one bit of the last event */
	emit("rrlog-bad-crc.bin", &b);
	b.len = 0;
	good(&b, RRC_LOG_VERSION + 1);                       /* a consistent log of the next version */
	emit("rrlog-other-version.bin", &b);
	free(b.p);
}
