/* SPDX-License-Identifier: MIT
 *
 * rr-replay-plan.c: the replay's decisions over an indexed log, apart from
 * any I/O (issue 13 §4; the shape of rrc-gate's GateCore): which events
 * carry a number and on what, where a log cut short by a crash is still
 * consistent, the least consistent cut that holds a given output, or
 * every output its clients were sent (going live there), and how far the
 * order of returns can be enforced. Driven by rr-replay-load.c after a
 * restore, and by runtime/tests/rp_plan_check.c on logs built in memory.
 *
 * ASYNC-SIGNAL-SAFE: raw syscalls for memory, no libc.
 */
#ifndef RRC_RR_REPLAY_PLAN_H
#define RRC_RR_REPLAY_PLAN_H

#include <stdint.h>
#include "rr-replay-int.h"

/* The keys of numbered events besides objects' addresses (which are never
 * below a page) */
#define RP_KEY_FDT       1ull   /* the fd table's sequence */
#define RP_KEY_CREATIONS 2ull   /* pthread_create's births */
#define RP_KEY_RETURNS   3ull   /* the order of system calls' returns (RRC §4.7) */

struct rp_plan {
	struct rp_thread *threads;          /* each: ev[0..n), role, start, n_end */
	uint32_t nr_threads;
	/* a key's counter as the image left it (the next number it gives) */
	uint64_t (*counter)(uint64_t key);
	/* the image's count of returns: the first return to replay is base + 1 */
	uint64_t returns_base;
	const char *why;                    /* a refusal's cause */
};

/* Which events carry a number, and on what key: rrc_rp_numbered
 * (rr-replay.h), implemented here. */

/* Each replayed thread's [start, end): up to its n_end, then ended before
 * its first event whose number the image's counter cannot reach through
 * numbers the log holds (a crash leaves other threads' rings undrained),
 * until nothing changes. 0, or -1 with why (two events with one number, a
 * number below the image's counter). */
int rp_plan_trim(struct rp_plan *p);

/* The output event that brings fd's stream to `bytes` (its offset plus
 * length), among the replayed threads' events from their start: 0 and
 * where; -1 with why if there is none, or more than one. */
int rp_plan_find_output(struct rp_plan *p, int32_t fd, uint64_t bytes, uint32_t *thread, uint32_t *index);

/* Every replayed thread's n_end set to the least consistent cut holding
 * event `index` of `thread`: that event, everything before it on its
 * thread, and for every event held the one numbered just before it on the
 * same object (its creation for a thread born after the image; with
 * `returns`, the return just before it), transitively. 0, or -1 with why
 * (an event it depends on is not in the log). */
int rp_plan_until(struct rp_plan *p, uint32_t thread, uint32_t index, int returns);

/* Every replayed thread's n_end set to the least consistent cut holding
 * every output, up to each thread's n_end as it was, to a connection of
 * `r` that begins below its released offset: a failover's replay up to
 * the last output its clients were sent (RRC §4.4), and no further. None:
 * each thread ends at its start (the image is what the clients saw). 0,
 * or -1 with why (as rp_plan_until). */
int rp_plan_until_released(struct rp_plan *p, const struct rrc_log_released *r, int returns);

/* Whether event e is an output to a connection of r that begins below its
 * released offset (some of its bytes reached the client). */
int rp_output_released(const struct rrc_log_event *e, const struct rrc_log_released *r);

/* The first return number above the base that no replayed event (in
 * [start, end)) holds: returns below it can be replayed in their order
 * without waiting for one that never comes. */
uint64_t rp_plan_returns_reach(struct rp_plan *p);

#endif /* RRC_RR_REPLAY_PLAN_H */
