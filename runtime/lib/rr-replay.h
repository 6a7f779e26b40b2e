/* SPDX-License-Identifier: MIT
 *
 * rr-replay.c: deterministic replay after a restore (issue 13 §4; RRC
 * §4.2, HyCoR §4.1). The contract between the wrappers (rr-*.c, waits.c,
 * accept-queue.c, wrap-files.c) and the replay engine.
 *
 * `rrc restore --replay LOG` hands the log to the restored library
 * (rrc_rp_load, in the post-restore path, before any thread runs). From
 * then on every application thread consumes its own events, from the
 * image's cut on, in order. A wrapper in replay mode:
 *
 *     if (rrc_rr_replaying()) {
 *             const struct rrc_log_event *e = rrc_rp_next(KIND, obj);
 *             if (e) {                      // the recorded outcome
 *                     ... return it, or make the call again and check it
 *                     rrc_rp_done();        // consumed
 *                     return ...;
 *             }
 *             // NULL: this thread's log has ended and every thread went
 *             // live together: the call runs live
 *     }
 *
 * An event other than the one the call expects is a divergence
 * (rrc_rp_diverge): the report names the thread, the event index, what was
 * expected and what happened, and the thread stops for good (never a wrong
 * output: outputs are suppressed until every thread goes live, which a
 * divergence prevents). A thread that waits for its turn too long, or a
 * replay that stops progressing, is reported by the watchdog
 * (rrc_rp_status, polled by `rrc restore`).
 *
 * Order (what the recording numbered): rrc_rp_turn() waits until an
 * object's counter (rr-log.c's table, or the fd table's sequence) reaches
 * the event's number; rrc_rp_advance() moves it on after the acquisition.
 */
#ifndef RRC_RR_REPLAY_H
#define RRC_RR_REPLAY_H

#include <stdint.h>
#include "rr-log.h"

#define RRC_HIDDEN_RP __attribute__((visibility("hidden")))

/* Replay is on and the calling thread is replayed. */
static inline int rrc_rr_replaying(void)
{
	return __atomic_load_n(&rrc_rr_mode, __ATOMIC_RELAXED) == RRC_RR_REPLAY && !rrc_rr_library_thread_flag;
}

/* Post-restore (ASYNC-SIGNAL-SAFE, threads parked): maps the log on
 * rq->fd, finds the cut of image `id`, indexes each thread's events from
 * it (up to the cut of image rq->to, or the output rq->until_fd /
 * until_bytes: every thread goes live in that state) and turns replay on,
 * with rq->races (RRC §4.7). 0, or -1 after logging why (the process then
 * stays parked for good: a restore asked to replay must not run live
 * without). */
struct rrc_replay_request;
int rrc_rp_load(const uint8_t id[16], const struct rrc_replay_request *rq) RRC_HIDDEN_RP;

/* The log's fd while a restored process keeps it (a library fd), or -1. */
int rrc_rp_log_fd(void) RRC_HIDDEN_RP;

/* Every thread went live (or nothing was replayed). */
int rrc_rp_live(void) RRC_HIDDEN_RP;

/* The calling thread's next event, which must be of `kind` on `obj`
 * (RRC_RP_ANY: any obj). NULL: the thread's log has ended; it waited until
 * every thread went live. */
#define RRC_RP_ANY (~0ull)
const struct rrc_log_event *rrc_rp_next(uint16_t kind, uint64_t obj) RRC_HIDDEN_RP;
/* kind 0: any kind (the caller checks it) */
/* The same, but at the end of the thread's log it returns NULL at once;
 * rrc_rp_wait_live() then waits until every thread went live (a call that
 * must give something up first, as a condition wait its mutex). */
const struct rrc_log_event *rrc_rp_peek(uint16_t kind, uint64_t obj) RRC_HIDDEN_RP;
void rrc_rp_wait_live(void) RRC_HIDDEN_RP;
/* The event rrc_rp_next returned is consumed (its effects are done). */
void rrc_rp_done(void) RRC_HIDDEN_RP;
/* A call begun while recording that completed, or came back, after a
 * restore into replay (it was parked between the call and its event):
 * its event is the thread's next; consumed (its number's turn taken), its
 * recorded result returned (`result` if the log has ended). */
int64_t rrc_rp_late(uint16_t kind, uint64_t obj, int64_t result) RRC_HIDDEN_RP;
/* Consumes e and returns its outcome the libc way: -1 with errno set, or
 * the result. */
long rrc_rp_result(const struct rrc_log_event *e) RRC_HIDDEN_RP;
static inline const void *rrc_rp_data(const struct rrc_log_event *e) { return e + 1; }

/* Whether e carries a number (a successful acquisition, an fd-table call,
 * a creation), and which: (key, number); key is the object's address. */
int rrc_rp_numbered(const struct rrc_log_event *e, uint64_t *key, uint64_t *seq) RRC_HIDDEN_RP;

/* An output suppressed and checked (the status counts them). */
void rrc_rp_output(uint64_t bytes) RRC_HIDDEN_RP;

/* Waits until *counter == seq (the object's turn); what names the object
 * in reports. */
void rrc_rp_turn(volatile uint64_t *counter, uint64_t seq, const char *what, uint64_t obj) RRC_HIDDEN_RP;
/* *counter + 1, and wakes whoever waits for a turn on it. */
void rrc_rp_advance(volatile uint64_t *counter) RRC_HIDDEN_RP;

/* A divergence at the calling thread's current event: reported (the first
 * one wins), then the thread stops for good. `got` says what the program
 * did instead. */
void rrc_rp_diverge(const char *got, uint64_t got_value) __attribute__((noreturn)) RRC_HIDDEN_RP;

/* pthread_create in replay: the new thread's identity in the log (its
 * creator's recorded tid and the creation's number), set by the trampoline
 * before the thread's first event. */
void rrc_rp_thread_born(uint32_t creator, uint64_t birth) RRC_HIDDEN_RP;
/* The calling thread's identity in the log (a restored thread: its tid). */
uint32_t rrc_rp_self(void) RRC_HIDDEN_RP;

/* Reads of objects inside the process (pipes, eventfd, timerfd): the
 * replay returns the recorded bytes; what they took from the kernel object
 * is taken from it too, without blocking, now or at go-live. */
void rrc_rp_owe(int fd, const void *bytes, uint64_t len) RRC_HIDDEN_RP;
void rrc_rp_fd_closed(int fd) RRC_HIDDEN_RP;

/* A wrapped call that may block, for the park handler: after a restore
 * into replay, a thread parked inside it (the kernel about to restart the
 * call) gets EINTR instead, so that its wrapper replays the call. */
extern __thread int rrc_rp_in_call __attribute__((tls_model("initial-exec"))) RRC_HIDDEN_RP;
/* `call`, marked as such while recording (rec) */
#define RRC_IN_CALL(rec, call) ({ \
		rrc_rp_in_call = (rec); \
		__typeof__(call) r_in_ = (call); \
		rrc_rp_in_call = 0; \
		r_in_; })
/* The park handler, resumed after a restore: rewrites the saved context
 * as above (ASYNC-SIGNAL-SAFE). */
void rrc_rp_unpark(void *ucontext) RRC_HIDDEN_RP;

/* The replay's state for the control protocol (REPLAY_STATUS); also the
 * watchdog: no progress for the timeout is a divergence. */
struct rrc_ctl_replay;
void rrc_rp_status(struct rrc_ctl_replay *out, char *msg, uint32_t cap, uint32_t *msg_len) RRC_HIDDEN_RP;

#endif /* RRC_RR_REPLAY_H */
