/* SPDX-License-Identifier: MIT
 *
 * posix-timers.c: POSIX timers carried through a checkpoint in the
 * library's memory. The contract with control.c: rrc_timers_capture among
 * the checks before the pause (0, or -1 with the error set naming what is
 * refused); with restored.c: rrc_timers_restored after a restore, before
 * the threads run (raw system calls only).
 */
#ifndef RRC_POSIX_TIMERS_H
#define RRC_POSIX_TIMERS_H

int rrc_timers_capture(void) __attribute__((visibility("hidden")));
void rrc_timers_restored(void) __attribute__((visibility("hidden")));

#endif /* RRC_POSIX_TIMERS_H */
