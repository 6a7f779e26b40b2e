/* SPDX-License-Identifier: MIT
 *
 * sysvipc.c: what the process owns in its IPC namespace (rrc starts every
 * process in one of its own): SysV semaphore sets and message queues,
 * carried in the image's SYSVIPC section with their ids, and the
 * namespace's IPC sysctls; shared memory segments are refused.
 *
 *     rrc_sysvipc_remember();             // at the start, after a restore
 *     if (rrc_sysvipc_check() < 0) ...    // before the pause: error set
 *     if (rrc_sysvipc_capture() < 0) ...  // in the pause: error set
 *     if (rrc_sysvipc_section(&p, &n)) emit(RRC_SEC_SYSVIPC, p, n);
 */
#ifndef RRC_LIB_SYSVIPC_H
#define RRC_LIB_SYSVIPC_H
#include <stdint.h>

void rrc_sysvipc_remember(void) __attribute__((visibility("hidden")));
int rrc_sysvipc_check(void) __attribute__((visibility("hidden")));
int rrc_sysvipc_capture(void) __attribute__((visibility("hidden")));
int rrc_sysvipc_section(const void **p, uint64_t *len) __attribute__((visibility("hidden")));
#endif
