/* SPDX-License-Identifier: MIT
 *
 * rrc-restore phase 1: TCP and UDP sockets. Listening sockets get their
 * options (SO_REUSEADDR, SO_REUSEPORT, IPV6_V6ONLY, and those a bind
 * depends on: sk-opts.c), their address and their backlog back; UDP sockets their local (and connected peer)
 * address. An established TCP connection gets the socket handed in for
 * its fd, rebuilt with TCP_REPAIR (sk-repaired.c). Without one its peer
 * is gone (`rrc restore` by hand: the dumped process's end was closed),
 * and it comes back ended, as a connection whose peer closed and then
 * reset: reads at EOF, writes failing with EPIPE, poll's
 * IN|RDHUP|HUP, the options it had. So does one that had ended before
 * the dump (both FINs done, or reset: RRC_SK_RDHUP), which read EOF then
 * too. The socket is an unconnected one shut down both ways: the kernel
 * sets the shutdown flags of an unconnected TCP socket (inet_shutdown,
 * with ENOTCONN) and its reads then return 0 where they would say
 * ENOTCONN (tcp_recvmsg checks RCV_SHUTDOWN first), as tcp_done leaves a
 * connection that ended. A socket never connected comes back unconnected.
 */
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <unistd.h>
#include "sk.h"

static int port_of(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)ss)->sin_port);
	if (ss->ss_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
	return 0;
}

static int is_any(const struct sockaddr_storage *ss)
{
	static const struct in6_addr any6 = IN6ADDR_ANY_INIT;

	if (ss->ss_family == AF_INET)
		return ((const struct sockaddr_in *)ss)->sin_addr.s_addr == htonl(INADDR_ANY);
	if (ss->ss_family == AF_INET6)
		return !memcmp(&((const struct sockaddr_in6 *)ss)->sin6_addr, &any6, sizeof(any6));
	return 1;
}

void restore_inet(struct fd_ctx *x, struct rfd *r)
{
	const struct rrc_fd *f = r->f;
	int family = f->u.sock.family;
	int type = f->u.sock.type & 0xf;
	struct sockaddr_storage ss;
	socklen_t len;
	int fd, force_reuse;

	if (family != AF_INET && family != AF_INET6)
		rst_fail(RRC_RST_FD, 0, (uint32_t)f->fd, "fd %d: inet socket of family %d", f->fd, family);
	if (f->kind == RRC_FD_INET_CONN) {
		struct repaired *p = repaired_for(x, f->fd);

		if (p) {
			/* checked against the record by repaired_check */
			rst_log("fd %d: TCP connection %s <-> %s: repaired socket placed", f->fd,
				sk_addr_str(&f->u.sock.local), sk_addr_str(&f->u.sock.peer));
			fd_place(x, p->fd, r);
			p->fd = f->fd;
			return;
		}
		fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP);
		if (fd < 0)
			rst_fail(RRC_RST_FD, errno, (uint32_t)f->fd, "fd %d: socket failed: %s", f->fd,
				 rst_strerror(errno));
		int ended = f->u.sock.peer.len || (sk_opts_conn_flags(r) & RRC_SK_RDHUP);
		if (ended && shutdown(fd, SHUT_RDWR) < 0 && errno != ENOTCONN)
			rst_fail(RRC_RST_FD, errno, (uint32_t)f->fd, "fd %d: shutdown of the ended connection failed: %s",
				 f->fd, rst_strerror(errno));
		rst_log("fd %d: TCP connection %s <-> %s restored %s", f->fd, sk_addr_str(&f->u.sock.local),
			sk_addr_str(&f->u.sock.peer), ended ? "ended (EOF, EPIPE)" : "unconnected");
		fd_place(x, fd_high(x, fd), r);
		return;
	}
	if (f->kind == RRC_FD_INET_LISTEN)
		type = SOCK_STREAM;
	fd = socket(family, type | SOCK_CLOEXEC, f->u.sock.protocol);
	if (fd < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)f->fd, "fd %d: socket(%d, %d, %d) failed: %s", f->fd,
			 family, type, f->u.sock.protocol, rst_strerror(errno));
	fd = fd_high(x, fd);
	/* A listener sharing its port with handed-in connections needs
	 * SO_REUSEADDR at bind and at listen (the connections, in repair mode,
	 * have SK_FORCE_REUSE); it gets its recorded value after listen. */
	force_reuse = f->kind == RRC_FD_INET_LISTEN && x->nr_rep + x->nr_pend > 0 && !f->u.sock.reuseaddr;
	if (f->u.sock.reuseaddr || force_reuse)
		sk_setopt(r, fd, SOL_SOCKET, SO_REUSEADDR, 1, "SO_REUSEADDR");
	if (f->u.sock.reuseport)
		sk_setopt(r, fd, SOL_SOCKET, SO_REUSEPORT, 1, "SO_REUSEPORT");
	if (family == AF_INET6)
		sk_setopt(r, fd, IPPROTO_IPV6, IPV6_V6ONLY, f->u.sock.v6only ? 1 : 0, "IPV6_V6ONLY");
	/* options a bind depends on (the device, a foreign address) */
	sk_opts_before_bind(r, fd);

	len = sk_addr(&f->u.sock.local, &ss);
	if (f->kind == RRC_FD_INET_LISTEN || port_of(&ss) || !is_any(&ss)) {
		if (bind(fd, (struct sockaddr *)&ss, len) < 0)
			rst_fail(RRC_RST_FD, errno, (uint32_t)f->fd, "fd %d: cannot bind %s %s: %s", f->fd,
				 sk_proto_str(f), sk_addr_str(&f->u.sock.local), rst_strerror(errno));
	}
	if (f->kind == RRC_FD_INET_LISTEN) {
		if (listen(fd, f->u.sock.backlog > 0 ? f->u.sock.backlog : 128) < 0)
			rst_fail(RRC_RST_FD, errno, (uint32_t)f->fd, "fd %d: cannot listen on %s %s: %s", f->fd,
				 sk_proto_str(f), sk_addr_str(&f->u.sock.local), rst_strerror(errno));
		if (force_reuse)
			sk_setopt(r, fd, SOL_SOCKET, SO_REUSEADDR, 0, "SO_REUSEADDR");
	} else if (f->u.sock.peer.family == family) {
		struct sockaddr_storage ps;
		socklen_t plen = sk_addr(&f->u.sock.peer, &ps);

		if (port_of(&ps) && connect(fd, (struct sockaddr *)&ps, plen) < 0)
			rst_fail(RRC_RST_FD, errno, (uint32_t)f->fd, "fd %d: cannot connect %s to %s: %s", f->fd,
				 sk_proto_str(f), sk_addr_str(&f->u.sock.peer), rst_strerror(errno));
	}
	fd_place(x, fd, r);
}
