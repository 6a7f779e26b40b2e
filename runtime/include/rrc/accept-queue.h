/* SPDX-License-Identifier: MIT
 *
 * The accept-queue hand-off: rrc-restore -> the restored librrc.so.
 *
 * At failover the backup also rebuilds (TCP_REPAIR) the connections the
 * primary's kernel had completed but the application had not accept()ed
 * yet (in the checkpoint's TCP table with inode 0, in no fd). They reach
 * rrc-restore over its --repaired-fds channel tagged with their listener's
 * fd number (docs/restore.md, "Repaired connections"); rrc-restore keeps
 * each at an fd number above the image's and, after every fd is placed,
 * writes this table to the file `<control socket path>` +
 * RRC_ACCEPT_QUEUE_SUFFIX (the path it bound the library's control socket
 * at: the restored library finds it with getsockname() on that socket).
 * The library reads it once after the restore, before any application
 * thread runs, unlinks it, and hands each socket to a later accept() on
 * that listener (runtime/lib/accept-queue.c). Entries are in queue order.
 *
 * Layout: the header, then `count` entries. `crc` is the CRC32C of the
 * header with crc = 0, followed by the entries.
 */
#ifndef RRC_ACCEPT_QUEUE_H
#define RRC_ACCEPT_QUEUE_H
#include <stdint.h>

#define RRC_ACCEPT_QUEUE_MAGIC   0x51434152u /* "RACQ" little-endian */
#define RRC_ACCEPT_QUEUE_VERSION 1u
#define RRC_ACCEPT_QUEUE_SUFFIX  ".accept-queue"
#define RRC_ACCEPT_QUEUE_MAX     1024u /* entries; more is refused by the restorer */
/* On the --repaired-fds channel, a message whose data is two int32s
 * {listener fd number, RRC_ACCEPT_QUEUE_TAG} carries a connection for the
 * accept queue (a 4-byte message carries one for an fd number). */
#define RRC_ACCEPT_QUEUE_TAG     1

struct rrc_accept_queue_header {
	uint32_t magic;
	uint32_t version;
	uint32_t count;
	uint32_t crc;
};

struct rrc_accept_queue_entry {
	int32_t listener_fd; /* the listening socket's fd number in the process */
	int32_t sock_fd;     /* where the connection's socket is now (out of repair mode) */
};

#endif /* RRC_ACCEPT_QUEUE_H */
