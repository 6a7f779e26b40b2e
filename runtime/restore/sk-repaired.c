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
 *
 * A message of two int32s {listener fd, RRC_ACCEPT_QUEUE_TAG} carries a
 * connection the primary's kernel had completed but the application had
 * not accepted (rrc/accept-queue.h): it must be a TCP connection on the
 * port (and address, unless the listener is bound to the wildcard) of an
 * RRC_FD_INET_LISTEN record; it stays above the image's fd numbers, goes
 * through repair mode like the others, and is listed, in the order
 * received, in the table the restored library reads
 * (repaired_write_accept_queue; runtime/lib/accept-queue.c hands it to the
 * application's next accept() on that listener).
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <fcntl.h>
#include "rrc/accept-queue.h"
#include "rrc/crc32c.h"
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
	size_t cap = 0, cap_pend = 0;

	for (;;) {
		union { char buf[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } ctl;
		int32_t words[2] = { 0, 0 }, target;
		struct iovec iov = { words, sizeof(words) };
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
				 "repaired sockets: message %zu carries no socket, or more than one",
				 x->nr_rep + x->nr_pend + 1);
		if ((n != 4 && n != 8) || (msg.msg_flags & MSG_TRUNC) ||
		    (n == 8 && words[1] != RRC_ACCEPT_QUEUE_TAG))
			rst_fail(RRC_RST_USAGE, 0, 0,
				 "repaired sockets: message %zu carries %zd bytes, expected the fd number (4 bytes) "
				 "or a listener's fd number and the accept-queue tag (8 bytes)",
				 x->nr_rep + x->nr_pend + 1, n);
		target = words[0];
		if (target < 0)
			rst_fail(RRC_RST_USAGE, 0, 0, "repaired sockets: fd number %d is negative", (int)target);
		if (n == 8) {
			if (x->nr_pend == RRC_ACCEPT_QUEUE_MAX)
				rst_fail(RRC_RST_USAGE, 0, 0, "repaired sockets: more than %u waiting for accept()",
					 RRC_ACCEPT_QUEUE_MAX);
			if (x->nr_pend == cap_pend) {
				struct pending_accept *n2;

				cap_pend = cap_pend ? cap_pend * 2 : 16;
				n2 = xcalloc(cap_pend, sizeof(*n2));
				if (x->nr_pend)
					memcpy(n2, x->pend, x->nr_pend * sizeof(*n2));
				free(x->pend);
				x->pend = n2;
			}
			x->pend[x->nr_pend].listener = target;
			x->pend[x->nr_pend].fd = fd;
			x->nr_pend++;
			continue;
		}
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
	rst_log("%zu repaired socket(s) received, %zu of them waiting for accept()", x->nr_rep + x->nr_pend,
		x->nr_pend);
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

static int is_wildcard(const struct rrc_sockaddr *a)
{
	struct sockaddr_storage s;
	static const struct in6_addr any6 = IN6ADDR_ANY_INIT;

	sk_addr(a, &s);
	if (s.ss_family == AF_INET)
		return ((const struct sockaddr_in *)&s)->sin_addr.s_addr == htonl(INADDR_ANY);
	if (s.ss_family == AF_INET6)
		return !memcmp(&((const struct sockaddr_in6 *)&s)->sin6_addr, &any6, sizeof(any6));
	return 0;
}

static int port_of(const struct rrc_sockaddr *a)
{
	struct sockaddr_storage s;

	sk_addr(a, &s);
	if (s.ss_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)&s)->sin_port);
	if (s.ss_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)&s)->sin6_port);
	return -1;
}

/* Connections for the accept queue: each on a listener of the image, with
 * that listener's port (and address unless it is the wildcard). */
static void pending_check(struct fd_ctx *x)
{
	int have_control = 0;

	for (size_t i = 0; i < x->c->nr_fds; i++)
		if (x->c->fds[i].f->kind == RRC_FD_LIB_CONTROL)
			have_control = 1;
	if (x->nr_pend && !have_control)
		rst_fail(RRC_RST_FD, 0, 0,
			 "%zu repaired connection(s) wait for accept(), but the image has no librrc control "
			 "socket to hand them to", x->nr_pend);
	for (size_t k = 0; k < x->nr_pend; k++) {
		struct pending_accept *p = &x->pend[k];
		const struct rfd *r = fd_find(x, p->listener);
		struct rrc_sockaddr local, peer;
		int on = TCP_REPAIR_ON;

		if (!r || r->f->kind != RRC_FD_INET_LISTEN)
			rst_fail(RRC_RST_FD, 0, (uint32_t)p->listener,
				 "repaired connection for accept() on fd %d: the image's fd %d is %s, not a "
				 "listening TCP socket", p->listener, p->listener,
				 r ? fd_kind_name(r->f->kind) : "absent");
		if (sockopt_int(p->fd, SOL_SOCKET, SO_TYPE) != SOCK_STREAM ||
		    sockopt_int(p->fd, SOL_SOCKET, SO_PROTOCOL) != IPPROTO_TCP)
			rst_fail(RRC_RST_FD, 0, (uint32_t)p->listener,
				 "repaired connection for accept() on fd %d: not a TCP socket", p->listener);
		if (sock_name(p->fd, 0, &local) < 0 || sock_name(p->fd, 1, &peer) < 0)
			rst_fail(RRC_RST_FD, errno, (uint32_t)p->listener,
				 "repaired connection for accept() on fd %d: not connected (%s)", p->listener,
				 rst_strerror(errno));
		if (port_of(&local) != port_of(&r->f->u.sock.local) ||
		    (!is_wildcard(&r->f->u.sock.local) && !same_addr(&local, &r->f->u.sock.local)))
			rst_fail(RRC_RST_FD, 0, (uint32_t)p->listener,
				 "repaired connection %s <-> %s for accept() on fd %d: the listener is %s",
				 sk_addr_str(&local), sk_addr_str(&peer), p->listener,
				 sk_addr_str(&r->f->u.sock.local));
		if (setsockopt(p->fd, IPPROTO_TCP, TCP_REPAIR, &on, sizeof(on)) < 0)
			rst_fail(RRC_RST_FD, errno, (uint32_t)p->listener,
				 "repaired connection for accept() on fd %d: entering repair mode failed: %s",
				 p->listener, rst_strerror(errno));
	}
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
	pending_check(x);
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
	for (size_t k = 0; k < x->nr_pend; k++) {
		int off = TCP_REPAIR_OFF;

		if (setsockopt(x->pend[k].fd, IPPROTO_TCP, TCP_REPAIR, &off, sizeof(off)) < 0)
			rst_fail(RRC_RST_FD, errno, (uint32_t)x->pend[k].listener,
				 "connection for accept() on fd %d: leaving repair mode failed: %s",
				 x->pend[k].listener, rst_strerror(errno));
	}
	if (x->nr_rep + x->nr_pend)
		rst_log("%zu repaired connection(s) out of repair mode", x->nr_rep + x->nr_pend);
}

/* The table the restored library reads (rrc/accept-queue.h), next to the
 * control socket: `$RRC_CONTROL.accept-queue`. */
void repaired_write_accept_queue(struct fd_ctx *x)
{
	struct rrc_accept_queue_header h = { RRC_ACCEPT_QUEUE_MAGIC, RRC_ACCEPT_QUEUE_VERSION,
					     (uint32_t)x->nr_pend, 0 };
	size_t elen = x->nr_pend * sizeof(struct rrc_accept_queue_entry);
	struct rrc_accept_queue_entry *e;
	char path[4096];
	int fd;

	if (!x->nr_pend)
		return;
	e = xcalloc(x->nr_pend, sizeof(*e));
	for (size_t k = 0; k < x->nr_pend; k++) {
		e[k].listener_fd = x->pend[k].listener;
		e[k].sock_fd = x->pend[k].fd;
	}
	h.crc = rrc_crc32c_extend(rrc_crc32c(&h, sizeof(h)), e, elen);
	snprintf(path, sizeof(path), "%s%s", x->control_path, RRC_ACCEPT_QUEUE_SUFFIX);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, &h, sizeof(h)) != (ssize_t)sizeof(h) || write(fd, e, elen) != (ssize_t)elen)
		rst_fail(RRC_RST_FD, errno, 0, "writing the accept-queue table %s: %s", path, rst_strerror(errno));
	close(fd);
	free(e);
	rst_log("%zu connection(s) waiting for accept() listed in %s", x->nr_pend, path);
}
