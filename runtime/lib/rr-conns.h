/* SPDX-License-Identifier: MIT
 *
 * rr-conns.c: the clients' TCP connections during a failover's replay
 * (issue 14 §4; RRC §4.4).
 *
 * A failover restores the last committed checkpoint with each client
 * connection rebuilt (TCP_REPAIR) where its client stands: its receive
 * queue holds every byte the client sent after what the checkpoint's
 * process had read; its send side is at the end of what the backup's gate
 * released, with the bytes the client has not acknowledged queued. The
 * replay then runs the log up to the last output the clients were sent
 * (the log's released record, rrlog.h): a replayed read returns the
 * recorded bytes, and here takes the same bytes off the connection and
 * checks them; a replayed output is checked against the log (rr-fds.c)
 * and here sent for real, except its bytes below the connection's released
 * offset (the client has them, the socket stands past them). At go-live
 * every connection is where the primary's was: nothing twice, nothing
 * different. One that is not (bytes missing or different, or the replay
 * ended short of what its client was sent) is reset, its client told at
 * once, the application sees ECONNRESET.
 *
 * Only with RRC_REPLAY_CONNECTIONS (rrc-restore --replay-connections): a
 * standalone replay's connections are stand-ins. Only connected TCP
 * sockets count; anything else a replayed read or output touches is left
 * as the replay engine leaves it.
 */
#ifndef RRC_RR_CONNS_H
#define RRC_RR_CONNS_H

#include <stdint.h>
#include <sys/uio.h>
#include "rrc/rrlog.h"

#define RRC_HIDDEN_RC __attribute__((visibility("hidden")))

/* From rrc_rp_load: whether the connections are the clients' own. */
void rrc_rc_setup(int on) RRC_HIDDEN_RC;

/* From rrc_rp_load once the log is indexed: what the clients were sent
 * (the log's released record; 0: nothing is skipped). Read while the
 * replay runs only. */
void rrc_rc_released(const struct rrc_log_released *r) RRC_HIDDEN_RC;

/* A replayed read of `len` recorded bytes on fd: 1 if fd is a client
 * connection (its bytes taken off it and compared), 0 if not. */
int rrc_rc_read(int fd, const void *bytes, uint64_t len) RRC_HIDDEN_RC;

/* A replayed output of `len` bytes on fd at stream offset `at`, already
 * checked against the log: sent for real if fd is a client connection,
 * from its released offset on. The bytes are the program's iov, or a
 * file's from an offset (sendfile). */
void rrc_rc_output(int fd, uint64_t at, const struct iovec *iov, int cnt, uint64_t len) RRC_HIDDEN_RC;
void rrc_rc_output_file(int fd, uint64_t at, int in, int64_t off, uint64_t len) RRC_HIDDEN_RC;

/* fd was closed (its number may come back as another object). */
void rrc_rc_fd_closed(int fd) RRC_HIDDEN_RC;

/* At go-live (rp_go_live): every client connection out of step with its
 * client is reset. */
void rrc_rc_replay_over(void) RRC_HIDDEN_RC;

struct rrc_rc_stats {
	uint64_t connections;     /* client connections the replay read or wrote */
	uint64_t read_bytes;      /* taken off them */
	uint64_t sent_bytes;      /* sent on them */
	uint64_t faults;          /* bytes that were not there, differed, or could not be sent:
				   * those connections are out of step with their clients */
	uint64_t skipped_bytes;   /* replayed output bytes their clients had already */
	uint64_t behind;          /* connections whose replay ended short of what their client was sent */
	uint64_t reset;           /* connections reset at go-live (out of step or behind) */
};
void rrc_rc_stats(struct rrc_rc_stats *out) RRC_HIDDEN_RC;

#endif /* RRC_RR_CONNS_H */
