/* SPDX-License-Identifier: MIT
 *
 * sigpending.c: signals pending at a pause, carried through it and
 * through the image instead of refusing the dump.
 *
 * The contract with quiesce.c: the park handler calls rrc_sigs_save
 * right after it parks in a pause (before it tells the control thread it
 * is parked), and rrc_sigs_requeue when it leaves the pause (a dump that
 * went on or failed, or a restore: the saved signals are in the image).
 * With control.c: rrc_sigs_settle before a quiesce, rrc_sigs_check after
 * it. ASYNC-SIGNAL-SAFE: every function.
 */
#ifndef RRC_SIGPENDING_H
#define RRC_SIGPENDING_H

#include <stdint.h>

/* In the park handler of thread tid: dequeues the signals pending for it
 * (`pending`, from rt_sigpending, without the park signal) into the
 * pool; the main thread also takes those pending for the process. */
void rrc_sigs_save(uint64_t pending, int32_t tid, int is_main) __attribute__((visibility("hidden")));
/* In the park handler after the pause: queues the thread's saved signals
 * again (the main thread the process's too), in the order they were
 * pending. */
void rrc_sigs_requeue(int32_t tid, int is_main) __attribute__((visibility("hidden")));
/* Control thread, before signalling the threads: waits for the last
 * pause's signals to be queued again, then empties the pool. 0, or -1
 * with the error set. */
int rrc_sigs_settle(void) __attribute__((visibility("hidden")));
/* Control thread, every thread parked: 0 if every pending signal is in
 * the pool, or -1 with the error set naming what could not be saved. */
int rrc_sigs_check(void) __attribute__((visibility("hidden")));

#endif /* RRC_SIGPENDING_H */
