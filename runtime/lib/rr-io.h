/* SPDX-License-Identifier: MIT
 *
 * rr-io.c: recording of input, for the wrappers that live in other files
 * (accept in accept-queue.c, the readiness waits in waits.c).
 *
 *     int rec = rrc_rr_io_reserve(max data);   // before the call (may wait)
 *     r = real(...);
 *     if (rec) rrc_rr_log_input(kind, fd, r or -errno, data, len);
 */
#ifndef RRC_RR_IO_H
#define RRC_RR_IO_H

#include <stdint.h>

#define RRC_HIDDEN_IO __attribute__((visibility("hidden")))

void rrc_io_resolve(void) RRC_HIDDEN_IO;    /* constructor */
/* 1 if recording (room reserved for `bytes`, capped at RRC_LOG_MAX_DATA), 0 if not */
int rrc_rr_io_reserve(uint32_t bytes) RRC_HIDDEN_IO;
/* the event, in the hook guard; data longer than RRC_LOG_MAX_DATA is not kept */
void rrc_rr_log_input(uint16_t kind, int obj, int64_t result, const void *data, uint32_t len) RRC_HIDDEN_IO;

#endif /* RRC_RR_IO_H */
