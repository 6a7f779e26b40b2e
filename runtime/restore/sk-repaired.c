/* SPDX-License-Identifier: MIT
 *
 * rrc-restore phase 1: established TCP connections handed in already
 * rebuilt (--repaired-fds N). On failover the backup rebuilds each client
 * connection of the checkpoint with TCP_REPAIR in the container's network
 * namespace (RRC §4.4, NiLiCon §V-E: the backup's kernel must continue
 * the connection where the committed state left it) and the launcher
 * (crates/rrc-launch) sends the sockets here over a SOCK_SEQPACKET
 * socketpair: one message per socket, SCM_RIGHTS carrying it, data the fd
 * number (int32) it must get, then EOF.
 *
 * Every socket is received before anything is placed; each must be a TCP
 * socket for an RRC_FD_INET_CONN record of the image, with that record's
 * local and peer addresses (else the restore fails naming the fd and both
 * address pairs). It is put in repair mode right away (it may have come
 * out of it): in repair mode the kernel lets a listening socket of the
 * image bind and listen on the same port (sk_reuse = SK_FORCE_REUSE),
 * which an established socket out of repair mode forbids (measured on
 * 6.18: EADDRINUSE at listen() even with SO_REUSEADDR on the listener).
 * sk-inet.c places it instead of a closed socket; once every fd is placed
 * it leaves repair mode (TCP_REPAIR_OFF, which sends the peer a window
 * probe) before the flags are set.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "sk.h"

#ifndef TCP_REPAIR
#define TCP_REPAIR 19
#endif
#ifndef TCP_REPAIR_ON
#define TCP_REPAIR_ON 1
#define TCP_REPAIR_OFF 0
#endif

#define REPAIRED_MAX 65536

/* Reads every message until EOF; the channel is closed afterwards. */
void repaired_receive(struct fd_ctx *x, int chan)
{
	size_t cap = 0;

	for (;;) {
		union { char buf[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } ctl;
		int32_t target;
		struct iovec iov = { &target, sizeof(target) };
		struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
				      .msg_controllen = sizeof(ctl.buf) };
		struct cmsghdr *cm;
		ssize_t n;
		int fd = -1;

		n = recvmsg(chan, &msg, MSG_CMSG_CLOEXEC);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			rst_fail(RRC_RST_USAGE, errno, 0, "repaired sockets: recvmsg on the channel failed: %s",
				 rst_strerror(errno));
		if (n == 0 && msg.msg_controllen == 0)
			break; /* EOF: the launcher sent everything */
		for (cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm))
			if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
			    cm->cmsg_len == CMSG_LEN(sizeof(int)))
				memcpy(&fd, CMSG_DATA(cm), sizeof(int));
		if (fd < 0 || (msg.msg_flags & MSG_CTRUNC))
			rst_fail(RRC_RST_USAGE, 0, 0,
				 "repaired sockets: message %zu carries no socket, or more than one", x->nr_rep + 1);
		if (n != (ssize_t)sizeof(target) || (msg.msg_flags & MSG_TRUNC))
			rst_fail(RRC_RST_USAGE, 0, 0,
				 "repaired sockets: message %zu carries %zd bytes, expected the fd number (4 bytes)",
				 x->nr_rep + 1, n);
		if (target < 0)
			rst_fail(RRC_RST_USAGE, 0, 0, "repaired sockets: fd number %d is negative", (int)target);
		for (size_t k = 0; k < x->nr_rep; k++)
			if (x->rep[k].target == target)
				rst_fail(RRC_RST_FD, 0, (uint32_t)target, "repaired sockets: two sockets for fd %d",
					 (int)target);
		if (x->nr_rep == REPAIRED_MAX)
			rst_fail(RRC_RST_USAGE, 0, 0, "repaired sockets: more than %d", REPAIRED_MAX);
		if (x->nr_rep == cap) {
			struct repaired *n2;

			cap = cap ? cap * 2 : 16;
			n2 = xcalloc(cap, sizeof(*n2));
			if (x->nr_rep)
				memcpy(n2, x->rep, x->nr_rep * sizeof(*n2));
			free(x->rep);
			x->rep = n2;
		}
		x->rep[x->nr_rep].target = target;
		x->rep[x->nr_rep].fd = fd;
		x->nr_rep++;
	}
	close(chan);
	rst_log("%zu repaired socket(s) received", x->nr_rep);
}

static int sockopt_int(int fd, int level, int opt)
{
	int v = -1;
	socklen_t len = sizeof(v);

	if (getsockopt(fd, level, opt, &v, &len) < 0)
		return -1;
	return v;
}

/* The socket's address as the image records one (getsockname's bytes). */
static int sock_name(int fd, int peer, struct rrc_sockaddr *ra)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int rc = peer ? getpeername(fd, (struct sockaddr *)&ss, &len) : getsockname(fd, (struct sockaddr *)&ss, &len);

	memset(ra, 0, sizeof(*ra));
	if (rc < 0)
		return -1;
	if (len > sizeof(ra->addr))
		len = sizeof(ra->addr);
	ra->family = ss.ss_family;
	ra->len = (uint16_t)len;
	memcpy(ra->addr, &ss, len);
	return 0;
}

/* Same family, address and port (flow label and scope are not compared). */
static int same_addr(const struct rrc_sockaddr *a, const struct rrc_sockaddr *b)
{
	struct sockaddr_storage x, y;

	sk_addr(a, &x);
	sk_addr(b, &y);
	if (x.ss_family != y.ss_family)
		return 0;
	if (x.ss_family == AF_INET) {
		const struct sockaddr_in *p = (const void *)&x, *q = (const void *)&y;
		return p->sin_port == q->sin_port && p->sin_addr.s_addr == q->sin_addr.s_addr;
	}
	if (x.ss_family == AF_INET6) {
		const struct sockaddr_in6 *p = (const void *)&x, *q = (const void *)&y;
		return p->sin6_port == q->sin6_port && !memcmp(&p->sin6_addr, &q->sin6_addr, sizeof(p->sin6_addr));
	}
	return 0;
}

/* Before any fd is placed: every socket must fit its record. */
void repaired_check(struct fd_ctx *x)
{
	for (size_t k = 0; k < x->nr_rep; k++) {
		struct repaired *p = &x->rep[k];
		const struct rfd *r = fd_find(x, p->target);
		struct rrc_sockaddr local, peer;
		int on = TCP_REPAIR_ON;

		if (!r)
			rst_fail(RRC_RST_FD, 0, (uint32_t)p->target,
				 "repaired socket for fd %d: the image has no fd %d", p->target, p->target);
		if (r->f->kind != RRC_FD_INET_CONN) {
			char what[160];
			uint32_t kd = r->f->kind;

			if (kd >= RRC_FD_INET_LISTEN && kd <= RRC_FD_UNIX_OTHER)
				snprintf(what, sizeof(what), "%s (%s %s)", fd_kind_name(kd), sk_proto_str(r->f),
					 sk_addr_str(&r->f->u.sock.local));
			else if (r->path[0])
				snprintf(what, sizeof(what), "%s (%.120s)", fd_kind_name(kd), r->path);
			else
				snprintf(what, sizeof(what), "%s", fd_kind_name(kd));
			rst_fail(RRC_RST_FD, 0, (uint32_t)p->target,
				 "repaired socket for fd %d: the image's fd %d is %s, not a TCP connection",
				 p->target, p->target, what);
		}
		if (sockopt_int(p->fd, SOL_SOCKET, SO_TYPE) != SOCK_STREAM ||
		    sockopt_int(p->fd, SOL_SOCKET, SO_PROTOCOL) != IPPROTO_TCP)
			rst_fail(RRC_RST_FD, 0, (uint32_t)p->target,
				 "repaired socket for fd %d: not a TCP socket", p->target);
		if (sock_name(p->fd, 0, &local) < 0 || sock_name(p->fd, 1, &peer) < 0)
			rst_fail(RRC_RST_FD, errno, (uint32_t)p->target,
				 "repaired socket for fd %d: not connected (%s)", p->target, rst_strerror(errno));
		if (!same_addr(&local, &r->f->u.sock.local) || !same_addr(&peer, &r->f->u.sock.peer))
			rst_fail(RRC_RST_FD, 0, (uint32_t)p->target,
				 "fd %d: repaired socket is %s <-> %s, the image has %s <-> %s", p->target,
				 sk_addr_str(&local), sk_addr_str(&peer), sk_addr_str(&r->f->u.sock.local),
				 sk_addr_str(&r->f->u.sock.peer));
		if (setsockopt(p->fd, IPPROTO_TCP, TCP_REPAIR, &on, sizeof(on)) < 0)
			rst_fail(RRC_RST_FD, errno, (uint32_t)p->target,
				 "repaired socket for fd %d: entering repair mode failed: %s", p->target,
				 rst_strerror(errno));
	}
}

struct repaired *repaired_for(struct fd_ctx *x, int target)
{
	for (size_t k = 0; k < x->nr_rep; k++)
		if (x->rep[k].target == target)
			return &x->rep[k];
	return NULL;
}

/* After every fd is placed (listeners bound): the connections go live. */
void repaired_leave_repair(struct fd_ctx *x)
{
	for (size_t k = 0; k < x->nr_rep; k++) {
		int off = TCP_REPAIR_OFF, fd = x->rep[k].target;

		if (setsockopt(fd, IPPROTO_TCP, TCP_REPAIR, &off, sizeof(off)) < 0)
			rst_fail(RRC_RST_FD, errno, (uint32_t)fd, "fd %d: leaving repair mode failed: %s", fd,
				 rst_strerror(errno));
	}
	if (x->nr_rep)
		rst_log("%zu repaired connection(s) out of repair mode", x->nr_rep);
}
