/* SPDX-License-Identifier: MIT
 * rrc-restore phase 1: socket helpers shared by sk-inet.c and sk-unix.c. */
#ifndef RRC_RESTORE_SK_H
#define RRC_RESTORE_SK_H
#include <sys/socket.h>
#include "restore.h"

socklen_t sk_addr(const struct rrc_sockaddr *ra, struct sockaddr_storage *ss);
const char *sk_addr_str(const struct rrc_sockaddr *ra);
const char *sk_proto_str(const struct rrc_fd *f);
/* setsockopt of an int, or the restore fails naming the socket and name */
void sk_setopt(const struct rfd *r, int fd, int level, int opt, int val, const char *name);

/* sk-opts.c: the options a socket record carries (struct rrc_sockopts) */
/* SO_BINDTODEVICE, IP(V6)_FREEBIND, IP(V6)_TRANSPARENT, on the socket fd
 * about to be bound for r */
void sk_opts_before_bind(const struct rfd *r, int fd);
/* every option of every socket record, once each fd is at its number
 * and the repaired connections are out of repair mode */
void sk_opts_apply(struct fd_ctx *x);
/* the record's RRC_SK_* (0 without options) */
uint32_t sk_opts_conn_flags(const struct rfd *r);
#endif
