/* SPDX-License-Identifier: MIT
 *
 * rr-fds.c: the fd table's order and the outputs, for the wrappers of
 * other files (wrap-files.c, accept-queue.c) and the library's own fds.
 *
 *     int t = rrc_fdt_begin();          // recording: the fd lock, room reserved
 *     int fd = real_open(...);
 *     if (fd >= 0) rrc_fdt_made(fd, 0);
 *     rrc_fdt_end_fd(t, RRC_FDOP_OPEN, fd < 0 ? -errno : fd, fd, -1);
 *
 *     int t = rrc_out_begin(fd);        // recording and fd is a socket
 *     r = real_write(...);
 *     return rrc_out_end(t, fd, iov, cnt, r);  // OUTPUT: offset, length, CRC32C
 */
#ifndef RRC_RR_FDS_H
#define RRC_RR_FDS_H

#include <stdint.h>
#include <sys/types.h>

#define RRC_HIDDEN_FDS __attribute__((visibility("hidden")))

struct iovec;
int rrc_fdt_init(void) RRC_HIDDEN_FDS;          /* rr-log.c's init: the table (0 or -errno) */
void rrc_fds_resolve(void) RRC_HIDDEN_FDS;      /* constructor */
/* 1: recording, the lock taken (end it with rrc_fdt_end*); 0: nothing to do
 * (not recording, a library thread, or inside another fd call) */
int rrc_fdt_begin(void) RRC_HIDDEN_FDS;
/* the event (kind FD or ACCEPT) with the next number, then the lock freed */
void rrc_fdt_end(int t, uint16_t kind, uint64_t obj, int64_t result, const void *data, uint32_t len) RRC_HIDDEN_FDS;
/* an FD event: obj = op (RRC_FDOP_*), data = the two fds a and b (-1: none) */
void rrc_fdt_end_fd(int t, uint16_t op, int64_t result, int32_t a, int32_t b) RRC_HIDDEN_FDS;
void rrc_fdt_made(int fd, int socket) RRC_HIDDEN_FDS;   /* a new fd and its kind */
void rrc_fdt_closed(int fd) RRC_HIDDEN_FDS;
/* the library's own fds outside a pause: only the lock (no event) */
void rrc_fdt_lib_begin(void) RRC_HIDDEN_FDS;
void rrc_fdt_lib_end(void) RRC_HIDDEN_FDS;
void rrc_fdt_restored(void) RRC_HIDDEN_FDS;     /* after a restore, before threads run */
/* the sequence's next number (the replay waits for its turns on it) */
volatile uint64_t *rrc_fdt_counter(void) RRC_HIDDEN_FDS;
/* The lock given up without an event (a call that will be made again). */
void rrc_fdt_cancel(int t) RRC_HIDDEN_FDS;
/* A replayed thread that stops for good (a divergence) gives the lock up:
 * the control thread needs it to report. */
void rrc_fdt_drop_held(void) RRC_HIDDEN_FDS;

int rrc_out_begin(int fd) RRC_HIDDEN_FDS;
/* a regular file (its reads are logged by CRC, replayed by reading again) */
int rrc_fdt_is_file(int fd) RRC_HIDDEN_FDS;
/* a socket the table knows: 1 and the bytes the process has sent on it */
int rrc_fdt_sent(int fd, uint64_t *sent) RRC_HIDDEN_FDS;
/* the call's result, or, after a restore into replay, the recorded one */
ssize_t rrc_out_end(int t, int fd, const struct iovec *iov, int cnt, ssize_t r) RRC_HIDDEN_FDS;
/* Replay: an output to a socket is not sent; its bytes are checked against
 * its event (offset, CRC32C) and *r is the recorded outcome. 1 if so, 0 if
 * the call is to be made (not replaying, not a socket, or live). */
int rrc_out_replayed(int fd, const struct iovec *iov, int cnt, ssize_t *r) RRC_HIDDEN_FDS;

#endif /* RRC_RR_FDS_H */
