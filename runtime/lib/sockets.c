/* SPDX-License-Identifier: MIT
 *
 * Sockets: family, type, protocol, options that matter for re-binding,
 * local and peer addresses, listen backlog (recorded by the listen()
 * wrapper in guards.c). TCP connections are described but restored
 * unconnected (architecture.md); netlink, packet and raw sockets are refused.
 * ASYNC-SIGNAL-SAFE.
 */
#include <sys/socket.h>
#include <netinet/in.h>
#include "rrc_lib.h"

static int getopt_int(int fd, int lvl, int opt)
{
	int v = 0;
	socklen_t l = sizeof v;
	if (rrc_sys_getsockopt(fd, lvl, opt, &v, &l) < 0)
		return 0;
	return v;
}

static void get_addr(int fd, struct rrc_sockaddr *a, int peer)
{
	socklen_t l = sizeof a->addr + 4; /* family + len + reserved precede addr */
	uint8_t raw[128];
	l = sizeof raw;
	long r = peer ? rrc_sys_getpeername(fd, raw, &l) : rrc_sys_getsockname(fd, raw, &l);
	if (r < 0 || l < 2)
		return;
	if (l > sizeof a->addr)
		l = sizeof a->addr;
	uint16_t fam;
	rrc_memcpy(&fam, raw, 2);
	a->family = fam;
	a->len = (uint16_t)l;
	rrc_memcpy(a->addr, raw, l);
}

static int same_addr(const struct rrc_sockaddr *a, const struct rrc_sockaddr *b)
{
	return a->family == b->family && a->len == b->len && rrc_memeq(a->addr, b->addr, a->len);
}

/* A TCP connection is asked its two addresses only, when the last capture
 * (prev, the same fd) saw the same socket inode connected between the
 * same addresses: family, type and protocol cannot have changed, and the
 * options are not used to restore a connection (their values are those
 * of the first capture that saw it connected). Nine syscalls fewer per
 * connection in the pause. 1 if carried, 0 if it needs the full capture. */
static int carry_connection(struct rrc_fd *f, int fd, const struct rrc_fd *prev)
{
	if (!prev || prev->kind != RRC_FD_INET_CONN || prev->ino != f->ino)
		return 0;
	struct rrc_sockaddr local, peer;
	rrc_memset(&local, 0, sizeof local);
	rrc_memset(&peer, 0, sizeof peer);
	get_addr(fd, &local, 0);
	get_addr(fd, &peer, 1);
	if (!same_addr(&local, &prev->u.sock.local) || !same_addr(&peer, &prev->u.sock.peer))
		return 0;
	rrc_memcpy(&f->u.sock, &prev->u.sock, sizeof f->u.sock);
	f->kind = RRC_FD_INET_CONN;
	return 1;
}

static int capture_socket(struct rrc_fd *f, int fd, const struct rrc_fd *prev);

/* prev: the last capture's record of this fd, or NULL. */
int rrc_capture_socket(struct rrc_fd *f, int fd, const struct rrc_fd *prev)
{
	int r = capture_socket(f, fd, prev);
	/* the TCP table dumps AF_INET6 only if some socket may have IPv6
	 * (or IPv4-mapped) connections: a dump of a family walks the whole
	 * connection hash (sk-diag.c) */
	if (f->u.sock.family == AF_INET6 && f->u.sock.type == SOCK_STREAM)
		rrc_s->tcp_v6 = 1;
	return r;
}

static int capture_socket(struct rrc_fd *f, int fd, const struct rrc_fd *prev)
{
	if (carry_connection(f, fd, prev))
		return 0;
	int family = getopt_int(fd, SOL_SOCKET, SO_DOMAIN);
	int type = getopt_int(fd, SOL_SOCKET, SO_TYPE);
	int listening = getopt_int(fd, SOL_SOCKET, SO_ACCEPTCONN);
	const char *what = 0;

	f->u.sock.family = family;
	f->u.sock.type = type;
	f->u.sock.protocol = getopt_int(fd, SOL_SOCKET, SO_PROTOCOL);
	f->u.sock.reuseaddr = (uint32_t)getopt_int(fd, SOL_SOCKET, SO_REUSEADDR);
	f->u.sock.reuseport = (uint32_t)getopt_int(fd, SOL_SOCKET, SO_REUSEPORT);
	if (family == AF_INET6)
		f->u.sock.v6only = (uint32_t)getopt_int(fd, IPPROTO_IPV6, IPV6_V6ONLY);
	if (listening) {
		int b = rrc_phelper_backlog(fd);
		f->u.sock.backlog = b > 0 ? b : 4096; /* unknown: listen() bypassed the wrapper */
	}
	get_addr(fd, &f->u.sock.local, 0);
	get_addr(fd, &f->u.sock.peer, 1);

	if (family == AF_INET || family == AF_INET6) {
		if (type == SOCK_STREAM)
			f->kind = listening ? RRC_FD_INET_LISTEN : RRC_FD_INET_CONN;
		else if (type == SOCK_DGRAM)
			f->kind = RRC_FD_INET_DGRAM;
		else
			what = "a raw IP socket";
	} else if (family == AF_UNIX) {
		f->kind = listening ? RRC_FD_UNIX_LISTEN : RRC_FD_UNIX_OTHER;
	} else if (family == AF_NETLINK) {
		what = "a netlink socket";
	} else if (family == AF_PACKET) {
		what = "a packet socket";
	} else {
		what = "a socket of an unsupported family";
	}
	if (what) {
		size_t l;
		rrc_set_err(RRC_ERR_UNSUPPORTED_FD, 0, "fd ", f->fd, " is ");
		l = rrc_strlen(rrc_s->err_msg);
		l = rrc_bput(rrc_s->err_msg, sizeof rrc_s->err_msg, l, what);
		l = rrc_bput(rrc_s->err_msg, sizeof rrc_s->err_msg, l, " (family ");
		l = rrc_bput_u64(rrc_s->err_msg, sizeof rrc_s->err_msg, l, (uint64_t)family);
		rrc_bput(rrc_s->err_msg, sizeof rrc_s->err_msg, l, "), which a checkpoint cannot describe");
		return -1;
	}
	return 0;
}
