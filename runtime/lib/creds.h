/* SPDX-License-Identifier: MIT
 *
 * creds.c: the process's credentials carried through a checkpoint, and a
 * process that switched users (memcached -u, a server's user setting)
 * made dumpable for the time of a dump. The contract with control.c:
 * rrc_creds_dump_begin first in a dump (0, or -1 with the error set),
 * rrc_creds_dump_end when the dump is over (not in a restored process);
 * rrc_creds_capture among the checks before the pause, with the main
 * thread's /proc/self/status (procattr.c reads it); rrc_creds_check in
 * the pause (ASYNC-SIGNAL-SAFE); with snapshot.c: rrc_creds_image for the
 * CREDS section; with restored.c: rrc_creds_restored, last before the
 * threads run (raw system calls only).
 */
#ifndef RRC_LIB_CREDS_H
#define RRC_LIB_CREDS_H

#include "rrc/image.h"

int rrc_creds_dump_begin(void) __attribute__((visibility("hidden")));
void rrc_creds_dump_end(void) __attribute__((visibility("hidden")));
int rrc_creds_capture(const char *status) __attribute__((visibility("hidden")));
int rrc_creds_check(void) __attribute__((visibility("hidden")));
void rrc_creds_park_main(void) __attribute__((visibility("hidden")));
void rrc_creds_park_thread(int32_t tid) __attribute__((visibility("hidden")));
const struct rrc_creds *rrc_creds_image(void) __attribute__((visibility("hidden")));
void rrc_creds_section(const void **p, uint64_t *len) __attribute__((visibility("hidden")));
int rrc_creds_helper_may_read(void) __attribute__((visibility("hidden")));
void rrc_creds_restored(void) __attribute__((visibility("hidden")));

#endif /* RRC_LIB_CREDS_H */
