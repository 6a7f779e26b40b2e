/* SPDX-License-Identifier: MIT
 *
 * The replay engine's own state, shared by its two files only:
 * rr-replay-load.c (the log mapped and indexed, once) and rr-replay.c
 * (threads consuming their events). Not for the wrappers: their contract is
 * rr-replay.h.
 */
#ifndef RRC_RR_REPLAY_INT_H
#define RRC_RR_REPLAY_INT_H

#include <stdint.h>
#include "rr-replay.h"

#define RP_MAX_THREADS 4096u

/* What a thread of the log replays */
enum { RP_NONE = 0, RP_CUT, RP_BORN };
/* rp.state (also rrc_ctl_replay.state) */
enum { RP_OFF = 0, RP_RUNNING = 1, RP_LIVE = 2, RP_DIVERGED = 3 };

/* One incarnation of a thread in the log */
struct rp_thread {
	uint32_t tid;                       /* in the log (a restored thread's too) */
	uint32_t role;                      /* RP_* */
	uint32_t creator;                   /* THREAD_START's obj, for RP_BORN */
	uint32_t first_batch;               /* stream position of its first batch */
	uint64_t birth;                     /* THREAD_START's seq */
	const struct rrc_log_event **ev;    /* its events, index = the log's numbering */
	uint32_t n, n_all;                  /* filled, counted (from 0: base included) */
	uint32_t base;                      /* its first event in this log: 0, or (a log the
					     * backup kept since a checkpoint) where it was
					     * trimmed; ev[0 .. base) are not there */
	uint32_t n_end;                     /* n, or its position at the cut replayed to */
	uint32_t start, end;                /* what it replays: [start, end) */
	volatile uint32_t pos;              /* its next event */
	volatile uint32_t claimed;          /* a live thread replays it */
	volatile uint32_t live_tid;         /* that thread's tid now */
	/* what it waits for, for reports: the turn of (wait_obj, wait_seq) */
	volatile uint32_t waiting;          /* 0, 1 a turn, 2 going live */
	volatile uint64_t wait_obj, wait_seq, wait_now;
};

struct rp_state {
	volatile uint32_t state;            /* RP_*; futex: going live, diverging */
	uint32_t generation;                /* +1 per load: a thread's identity from an earlier replay is stale */
	int log_fd;                         /* -1 before a load */
	const uint8_t *log_map;             /* the log, mapped (private, read-only) */
	uint64_t log_len;
	uint8_t image_id[16];
	const struct rrc_log_cut *cut;
	uint32_t cut_batch;
	uint8_t end_id[16];                 /* `--replay-to`: go live at this image's cut */
	int has_end;
	int record_after;                   /* RRC_REPLAY_RECORD, and the recording prepared */
	const struct rrc_log_cut *end_cut;
	const struct rrc_log_released *released; /* a failover's: what the clients were sent */
	struct rp_thread *threads;
	uint32_t nr_threads, fill_next, nr_replayed;
	uint64_t nr_events_all;
	uint64_t total, dropped;
	volatile uint64_t remaining;
	volatile uint64_t progress;         /* events consumed */
	uint64_t timeout_ns;
	uint64_t load_ns, started_ns, live_ns;
	volatile uint64_t progress_at;      /* watchdog: when progress last moved */
	uint64_t progress_seen;
	volatile uint64_t outputs, output_bytes;
	volatile uint64_t debts_left;       /* bytes/counts not taken back at go-live */
	volatile uint32_t report_taken;
	char report[768];
	/* `--replay-until`: the output's thread and event */
	uint32_t until_thread, until_index;
	/* data races (RRC §4.7): enum rrc_races; returns below the limit
	 * return in their recorded order; the last one's recorded time and
	 * when it was replayed (written by the turn's holder only) */
	uint32_t races;
	uint64_t pace_max_ns;
	uint64_t returns_limit;
	uint64_t last_ret_ns, last_done_ns;
	volatile uint64_t returns_ordered, paced_ns;
};

extern struct rp_state rp RRC_HIDDEN_RP;

/* Forgets an earlier replay's per-fd debts (a load). */
void rp_debts_reset(void) RRC_HIDDEN_RP;
/* A key's counter as the image left it (0 if never numbered). */
uint64_t rp_counter_now(uint64_t key) RRC_HIDDEN_RP;
/* The replay stops for good with msg as its report (the first report
 * wins), logged; threads waiting to go live are woken to stop. */
void rp_diverged(const char *msg) RRC_HIDDEN_RP;
/* Every thread goes live (the last event was consumed, or there was none
 * to replay). */
void rp_go_live(void) RRC_HIDDEN_RP;

#endif /* RRC_RR_REPLAY_INT_H */
