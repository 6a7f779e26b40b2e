/* SPDX-License-Identifier: MIT
 *
 * rr-log.c: the record log inside the process (issue 13 §2; RRC §4.1,
 * §4.5). The contract between the recording wrappers (rr-*.c) and the log.
 *
 * Each application thread appends its events to a ring of its own (no
 * process-wide lock); a writer thread of the library drains the rings into
 * batches (rrc/rrlog.h) on the log file. Per-object order (RRC's per-lock
 * sequence numbers) comes from rrc_rr_obj_seq(), taken while the object is
 * held.
 *
 * A wrapper that records:
 *
 *     if (!rrc_rr_recording()) return real(...);
 *     rrc_rr_reserve(max data bytes);   // may wait for the writer: outside the guard
 *     rrc_hook_enter();                 // a park now waits until the event is in
 *     r = real(...);
 *     rrc_rr_event(kind, ...);
 *     rrc_hook_leave();
 *
 * so that a checkpoint's cut (rrc_rr_cut, in the pause, every thread
 * parked outside the guard) never falls between a call and its event. A
 * blocking call (a mutex lock) is made before the guard instead: a thread
 * parked after it acquired but before it logged records the acquisition
 * after the cut, with the object's sequence number as it then is, which is
 * what a replay from that checkpoint (the object held, the sequence in the
 * image) expects.
 */
#ifndef RRC_RR_LOG_H
#define RRC_RR_LOG_H

#include <stddef.h>
#include <stdint.h>
#include "rrc/rrlog.h"

#define RRC_HIDDEN_RR __attribute__((visibility("hidden")))

/* 0: off (the default); 1: recording. Read by every wrapper. */
extern volatile int rrc_rr_mode RRC_HIDDEN_RR;
#define RRC_RR_OFF    0
#define RRC_RR_RECORD 1
#define RRC_RR_REPLAY 2   /* after `rrc restore --replay`, until every thread went live (rr-replay.h) */
/* 1 in the library's own threads (control, writer): what they call goes
 * straight through, unrecorded and unnumbered (the control thread's
 * malloc takes jemalloc's mutexes in redis: numbering them would leave
 * holes in the application's order) */
extern __thread int rrc_rr_library_thread_flag __attribute__((tls_model("initial-exec"))) RRC_HIDDEN_RR;

/* Recording is on in this process (whatever the calling thread). */
static inline int rrc_rr_mode_on(void)
{
	return __atomic_load_n(&rrc_rr_mode, __ATOMIC_RELAXED) == RRC_RR_RECORD;
}

/* Recording is on and the calling thread is recorded. */
static inline int rrc_rr_recording(void)
{
	return __atomic_load_n(&rrc_rr_mode, __ATOMIC_RELAXED) == RRC_RR_RECORD && !rrc_rr_library_thread_flag;
}

/* Constructor, before the memory is registered: $RRC_RECORD (a path) turns
 * recording on; maps the rings and the object table, writes the header.
 * 0, or -1 after logging why (the process then runs unrecorded). */
int rrc_rr_init(void) RRC_HIDDEN_RR;
/* After the control thread: starts the writer thread. */
void rrc_rr_start(void) RRC_HIDDEN_RR;
/* Marks the calling thread as the library's: it never records. */
void rrc_rr_library_thread(void) RRC_HIDDEN_RR;
int rrc_rr_is_library_thread(void) RRC_HIDDEN_RR;
/* Whether fd is the log's (its sink, or the one RECORD handed over and
 * the writer has not taken yet): a library fd, in no image. */
int rrc_rr_log_owns(int fd) RRC_HIDDEN_RR;
/* The rings' range, excluded from images (memory.c). 0 if none. */
int rrc_rr_ring_range(uint64_t *start, uint64_t *end) RRC_HIDDEN_RR;

/* Waits, outside the hook guard, until the calling thread's ring has room
 * for an event with `data` bytes (at most RRC_LOG_MAX_DATA). */
void rrc_rr_reserve(uint32_t data) RRC_HIDDEN_RR;
/* Appends one event of the calling thread (inside the hook guard, after
 * rrc_rr_reserve of at least `len`; a wrapper splits a call that would
 * return more than RRC_LOG_MAX_DATA bytes into several calls). */
void rrc_rr_event(uint16_t kind, uint16_t flags, uint64_t obj, uint64_t seq, int64_t result,
		  const void *data, uint32_t len) RRC_HIDDEN_RR;
/* The next sequence number of the object at `addr` (a lock the caller now
 * holds): 0, 1, 2... per address. */
uint64_t rrc_rr_obj_seq(const void *addr) RRC_HIDDEN_RR;
/* A successful acquisition of the object at `on` (held now; a condition
 * wait's mutex) logged as `kind` on obj: numbered on it, with where its
 * previous holder released it (rrc/rrlog.h's released_at); a failed one
 * (got 0) unnumbered. Inside the hook guard, after rrc_rr_reserve(len). */
void rrc_rr_acquired(uint16_t kind, uint16_t flags, uint64_t obj, const void *on, int got, int64_t result,
		     const void *data, uint32_t len) RRC_HIDDEN_RR;
/* The release of the object at `addr` (a mutex, a spinlock, a condition
 * wait's mutex), still held: noted in its table entry for the next
 * acquisition's released_at, no event of its own. */
void rrc_rr_released(const void *addr) RRC_HIDDEN_RR;
/* The counter of the object at `addr` (the next number rrc_rr_obj_seq
 * gives), created if asked; 0 if absent and not created, or the table is
 * full. The replay waits for turns on it. */
volatile uint64_t *rrc_rr_obj_counter(const void *addr, int create) RRC_HIDDEN_RR;
/* The object pthread_create numbers births on (rr-sync.c). */
const void *rrc_rr_creations(void) RRC_HIDDEN_RR;
/* The CRC32C of the first `len` bytes spread over iov[0..cnt) (outputs and
 * regular-file reads are named by it). */
struct iovec;
uint32_t rrc_rr_crc_iov(const struct iovec *iov, int cnt, size_t len) RRC_HIDDEN_RR;
/* The same with the data gathered from pieces (their total is the data). */
struct iovec;
void rrc_rr_eventv(uint16_t kind, uint16_t flags, uint64_t obj, uint64_t seq, int64_t result,
		   const struct iovec *pieces, int n) RRC_HIDDEN_RR;

/* The last number given in the order of system calls' returns (RRC
 * §4.7; every RRC_EV_IS_CALL event's `ret`). A replay that orders returns
 * waits for turns on it. */
volatile uint64_t *rrc_rr_returns(void) RRC_HIDDEN_RR;
/* CLOCK_MONOTONIC through libc's vDSO (tens of nanoseconds, not a system
 * call): the returns' `ret_ns`, and a replay's pacing (rr-time.c). */
uint64_t rrc_rr_now_ns(void) RRC_HIDDEN_RR;

/* Threads (rr-sync.c's pthread_create trampoline): the creator's tid and
 * the creation's number, set in the new thread before its first event
 * (THREAD_START's obj and seq; 0 and 0 for the main thread). */
extern __thread uint32_t rrc_rr_creator __attribute__((tls_model("initial-exec"))) RRC_HIDDEN_RR;
extern __thread uint64_t rrc_rr_birth __attribute__((tls_model("initial-exec"))) RRC_HIDDEN_RR;
void rrc_rr_thread_exit(void) RRC_HIDDEN_RR;

/* The pause (control.c, every thread parked): each thread's position,
 * written to the log as a cut for image `id`. ASYNC-SIGNAL-SAFE. */
void rrc_rr_cut(const uint8_t id[16], uint64_t sequence) RRC_HIDDEN_RR;
/* After a restore, before threads are released: recording stops (the log
 * file and the rings are not in the image; replay is the next step). */
void rrc_rr_restored(void) RRC_HIDDEN_RR;
/* A failover with a spare (RRC_REPLAY_RECORD), from the replay's load,
 * before the threads run: a new region for recording again from go-live,
 * the sink awaited (units dropped until RECORD hands one). 0, or -1
 * after logging why (the process then runs unrecorded). */
int rrc_rr_prepare_continue(void) RRC_HIDDEN_RR;
/* At go-live (every application thread waits): recording on again and
 * the writer started, if prepared. 1 if recording. */
int rrc_rr_continue(void) RRC_HIDDEN_RR;
/* The control thread handed the sink over (RECORD). */
void rrc_rr_wake_writer(void) RRC_HIDDEN_RR;
/* The calling thread is about to wait for readiness or sleep (waits.c):
 * the writer gets the kick its outputs since the last wait owe. */
void rrc_rr_before_wait(void) RRC_HIDDEN_RR;

#endif /* RRC_RR_LOG_H */
