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
#include "rrc/rrlog.h"

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

/* The end of sending on a connection (shutdown SHUT_WR/SHUT_RDWR, close):
 *
 *     struct rrc_fin fin;
 *     rrc_fin_note(fd, &fin);        // recording, before the call: room reserved
 *                                    // (RRC_FIN_ROOM more), the connection learnt
 *     r = real_close(fd);            // or shutdown
 *     ... inside the hook guard of the call's own event, right after it:
 *     rrc_fin_event(&fin, r);        // an OUTPUT with RRC_EVF_FIN if r == 0
 *
 * and in replay, once the call's own event is consumed (or late):
 *     rrc_fin_replayed(fd);          // its FIN output, if the recording has one */
struct rrc_fin {
	int fd;                          /* -1: none to log */
	struct rrc_log_output o;
};
/* room for a call's event with up to 8 bytes of data and a FIN output,
 * one of them across the ring's end */
#define RRC_FIN_ROOM (8 + 2 * (sizeof(struct rrc_log_event) + sizeof(struct rrc_log_output)))
void rrc_fin_note(int fd, struct rrc_fin *f) RRC_HIDDEN_FDS;
/* close's FD event (rrc_fdt_end_fd's), then its FIN output, or in replay
 * both consumed */
void rrc_fdt_end_close(int t, int64_t result, int fd, const struct rrc_fin *fin) RRC_HIDDEN_FDS;
void rrc_fin_event(const struct rrc_fin *f, int result) RRC_HIDDEN_FDS;
void rrc_fin_replayed(int fd) RRC_HIDDEN_FDS;

#endif /* RRC_RR_FDS_H */
