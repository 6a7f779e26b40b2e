/* SPDX-License-Identifier: MIT
 *
 * waits.c: blocking and timed waits that a park never cuts short.
 * The contract with quiesce.c: the park handler bumps rrc_parks_seen on
 * the thread it interrupts, first thing, every time it runs (parked at
 * once, deferred to the hook guard's exit, or arriving after its pause).
 * ASYNC-SIGNAL-SAFE: the counter.
 */
#ifndef RRC_WAITS_H
#define RRC_WAITS_H

#include <stdint.h>

extern __thread uint32_t rrc_parks_seen __attribute__((tls_model("initial-exec"))) __attribute__((visibility("hidden")));
void rrc_waits_resolve(void) __attribute__((visibility("hidden")));   /* constructor */

#endif /* RRC_WAITS_H */
