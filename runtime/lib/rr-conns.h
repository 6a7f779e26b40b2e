/* SPDX-License-Identifier: MIT
 *
 * rr-conns.c: the clients' TCP connections during a failover's replay
 * (issue 14 §4; RRC §4.4).
 *
 * A failover restores the last committed checkpoint with each client
 * connection rebuilt (TCP_REPAIR) at that checkpoint's state: its
 * receive queue holds every byte the client sent after what the
 * checkpoint's process had read, its send side stands where the
 * checkpoint's process had written. The replay then runs the log: a
 * replayed read returns the recorded bytes, and here takes the same
 * bytes off the connection and checks them; a replayed output is checked
 * against the log (rr-fds.c) and here sent for real. At go-live every
 * connection is where the primary's was at the replay's end: the client
 * sees the bytes it had already (TCP drops them as duplicates) and the
 * rest, nothing twice, nothing different.
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

#define RRC_HIDDEN_RC __attribute__((visibility("hidden")))

/* From rrc_rp_load: whether the connections are the clients' own. */
void rrc_rc_setup(int on) RRC_HIDDEN_RC;

/* A replayed read of `len` recorded bytes on fd: 1 if fd is a client
 * connection (its bytes taken off it and compared), 0 if not. */
int rrc_rc_read(int fd, const void *bytes, uint64_t len) RRC_HIDDEN_RC;

/* A replayed output of `len` bytes on fd, already checked against the
 * log: sent for real if fd is a client connection. The bytes are the
 * program's iov, or a file's from an offset (sendfile: in >= 0). */
void rrc_rc_output(int fd, const struct iovec *iov, int cnt, uint64_t len) RRC_HIDDEN_RC;
void rrc_rc_output_file(int fd, int in, int64_t off, uint64_t len) RRC_HIDDEN_RC;

/* fd was closed (its number may come back as another object). */
void rrc_rc_fd_closed(int fd) RRC_HIDDEN_RC;

struct rrc_rc_stats {
	uint64_t connections;     /* client connections the replay read or wrote */
	uint64_t read_bytes;      /* taken off them */
	uint64_t sent_bytes;      /* sent on them */
	uint64_t faults;          /* bytes that were not there, differed, or could not be sent:
				   * those connections are out of step with their clients */
};
void rrc_rc_stats(struct rrc_rc_stats *out) RRC_HIDDEN_RC;

#endif /* RRC_RR_CONNS_H */
