/* SPDX-License-Identifier: MIT
 * rrc-restore phase 1: socket helpers shared by sk-inet.c and sk-unix.c. */
#ifndef RRC_RESTORE_SK_H
#define RRC_RESTORE_SK_H
#include <sys/socket.h>
#include "restore.h"

socklen_t sk_addr(const struct rrc_sockaddr *ra, struct sockaddr_storage *ss);
const char *sk_addr_str(const struct rrc_sockaddr *ra);
const char *sk_proto_str(const struct rrc_fd *f);
#endif
