/* SPDX-License-Identifier: MIT
 *
 * Sockets: family, type, protocol, options that matter for re-binding,
 * local and peer addresses, listen backlog (recorded by the listen()
 * wrapper in guards.c); the options the restorer sets again (the record's
 * data, struct rrc_sockopts, with a classic socket filter's program), read
 * again only when a setsockopt call may have changed them. TCP connections
 * are described but restored unconnected (architecture.md); netlink,
 * packet and raw sockets are refused.
 * ASYNC-SIGNAL-SAFE.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
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

/* The permission bits of a unix socket's file (bound to a path, not an
 * abstract name), with RRC_SOCK_FILE_MODE; 0 if there is none (abstract,
 * unnamed, or the file was removed since the bind). A relative name is
 * the process's cwd's (the pause helper's own cwd may be older). */
static uint32_t unix_file_mode(const struct rrc_sockaddr *a)
{
	uint32_t n = a->len > 2 ? a->len - 2u : 0; /* sun_path's bytes */
	const char *name = (const char *)a->addr + 2;
	if (!n || !name[0] || n >= RRC_PATH_MAX - 80)
		return 0;
	char path[RRC_PATH_MAX];
	size_t l = 0;
	if (name[0] != '/') {
		l = rrc_proc_path(path, sizeof path, "cwd", -1);
		l = rrc_bput(path, sizeof path, l, "/");
	}
	if (l + n + 1 > sizeof path)
		return 0;
	rrc_memcpy(path + l, name, n);
	path[l + n] = 0;
	struct stat st;
	if (rrc_sys_fstatat(AT_FDCWD, path, &st, 0) < 0 || !S_ISSOCK(st.st_mode))
		return 0;
	return (st.st_mode & 07777) | RRC_SOCK_FILE_MODE;
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

	if (family == AF_UNIX && (listening || (type & 0xf) == SOCK_DGRAM)) /* a bound datagram socket's too */
		f->u.sock.file_mode = unix_file_mode(&f->u.sock.local);
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

/* ---- options: the record's data (struct rrc_sockopts, image.h) ---- */

/* The wrapper bumps an fd's count before and after each setsockopt: an
 * odd count is a call under way (a thread parked in it), after which the
 * options must be read again; an even count that did not move since the
 * last capture of the same socket says nothing changed them. */
void rrc_sockopt_bump(int fd)
{
	if (fd < 0 || fd >= RRC_MAX_FDS)
		return;
	uint32_t g = __atomic_add_fetch(&rrc_g.sockopt_gen[fd], 1, __ATOMIC_SEQ_CST);
	if (rrc_s && rrc_s->helper.box) /* the pause helper's copy (pause-helper.c) */
		__atomic_store_n(&rrc_s->helper.box->sockopt_gen[fd], g, __ATOMIC_SEQ_CST);
}

static uint32_t sockopt_gen(int fd)
{
	return rrc_s->helper.in_helper ? rrc_s->helper.box->sockopt_gen[fd] : rrc_g.sockopt_gen[fd];
}

/* getsockopt of an int into *out; 1 if read */
static int read_int(int fd, int lvl, int name, int32_t *out)
{
	int v = 0;
	socklen_t l = sizeof v;
	if (rrc_sys_getsockopt(fd, lvl, name, &v, &l) < 0 || l != sizeof v)
		return 0;
	*out = v;
	return 1;
}

static void read_options(struct rrc_sockopts *o, int fd, const struct rrc_fd *f)
{
	int family = f->u.sock.family, type = f->u.sock.type & 0xf;
	int inet = family == AF_INET || family == AF_INET6;
	if (inet && type == SOCK_STREAM) {
		if (read_int(fd, IPPROTO_TCP, TCP_NODELAY, &o->nodelay))
			o->valid |= RRC_SO_NODELAY;
		if (read_int(fd, IPPROTO_TCP, TCP_CORK, &o->cork))
			o->valid |= RRC_SO_CORK;
		if (read_int(fd, IPPROTO_TCP, TCP_KEEPIDLE, &o->keepidle) &&
		    read_int(fd, IPPROTO_TCP, TCP_KEEPINTVL, &o->keepintvl) &&
		    read_int(fd, IPPROTO_TCP, TCP_KEEPCNT, &o->keepcnt))
			o->valid |= RRC_SO_KEEPIDLE;
	}
	if (inet) {
		if (read_int(fd, SOL_SOCKET, SO_KEEPALIVE, &o->keepalive))
			o->valid |= RRC_SO_KEEPALIVE;
		if (read_int(fd, SOL_SOCKET, SO_BROADCAST, &o->broadcast))
			o->valid |= RRC_SO_BROADCAST;
		int lvl = family == AF_INET6 ? IPPROTO_IPV6 : IPPROTO_IP;
		if (read_int(fd, lvl, family == AF_INET6 ? IPV6_FREEBIND : IP_FREEBIND, &o->freebind))
			o->valid |= RRC_SO_FREEBIND;
		if (read_int(fd, lvl, family == AF_INET6 ? IPV6_TRANSPARENT : IP_TRANSPARENT, &o->transparent))
			o->valid |= RRC_SO_TRANSPARENT;
		char dev[16];
		socklen_t dl = sizeof dev;
		rrc_memset(dev, 0, sizeof dev);
		if (rrc_sys_getsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, dev, &dl) >= 0) {
			rrc_memcpy(o->bindtodevice, dev, dl < sizeof dev ? dl : sizeof dev);
			o->bindtodevice[sizeof o->bindtodevice - 1] = 0;
			o->valid |= RRC_SO_BINDTODEVICE;
		}
	}
	struct linger lg;
	socklen_t ll = sizeof lg;
	if (rrc_sys_getsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, &ll) >= 0 && ll == sizeof lg) {
		o->linger_onoff = lg.l_onoff;
		o->linger_secs = lg.l_linger;
		o->valid |= RRC_SO_LINGER;
	}
	if (read_int(fd, SOL_SOCKET, SO_PRIORITY, &o->priority))
		o->valid |= RRC_SO_PRIORITY;
	if (read_int(fd, SOL_SOCKET, SO_RCVBUF, &o->rcvbuf) && read_int(fd, SOL_SOCKET, SO_SNDBUF, &o->sndbuf) &&
	    read_int(fd, SOL_SOCKET, SO_BUF_LOCK, &o->buf_lock))
		o->valid |= RRC_SO_BUFS;
}

/* The socket filter's length in instructions (0: none) into *len; -1 with
 * the error set for one that cannot be read back (eBPF). */
static int filter_len(int fd, uint32_t *len)
{
	socklen_t n = 0;
	*len = 0;
	long r = rrc_sys_getsockopt(fd, SOL_SOCKET, SO_GET_FILTER, 0, &n);
	if (r < 0) {
		if (r == -EACCES) {
			rrc_set_err(RRC_ERR_UNSUPPORTED_FD, 0, "socket fd ", fd,
				    " has an eBPF filter attached (SO_ATTACH_BPF): the image carries classic "
				    "BPF filters only, and an eBPF program cannot be read back from the socket");
			return -1;
		}
		return 0; /* no filter support on this socket: nothing to carry */
	}
	if (n > RRC_SOCK_FILTER_MAX) {
		rrc_set_err(RRC_ERR_UNSUPPORTED_FD, 0, "socket fd ", fd, "'s filter is longer than BPF_MAXINSNS");
		return -1;
	}
	*len = n;
	return 0;
}

/* The record's data: the options, then the socket filter's program. A
 * socket no setsockopt touched since the last capture (prev) has them as
 * they were: copied, filter included. */
/* RRC_SK_*: a TCP socket without a peer address whose reads are at their
 * end had a connection (both FINs done, or reset: the kernel's tcp_done
 * shut it down both ways); one never connected reads ENOTCONN. A poll
 * tells them apart without consuming a pending error (a read or SO_ERROR
 * would); connected sockets, told by their peer address, are not asked. */
static uint32_t conn_flags(const struct rrc_fd *f, int fd)
{
	if (f->kind != RRC_FD_INET_CONN || f->u.sock.peer.len)
		return 0;
	struct pollfd p = { fd, POLLIN | POLLRDHUP, 0 };
	struct { long sec, nsec; } now = { 0, 0 };
	return rrc_sys_ppoll(&p, 1, &now) == 1 && (p.revents & POLLRDHUP) ? RRC_SK_RDHUP : 0;
}

int rrc_capture_sockopts(struct rrc_fd *f, int fd, const struct rrc_fd *prev)
{
	static const char full[] = "fd buffer full at the options of socket fd ";
	struct rrc_sockopts o;
	rrc_memset(&o, 0, sizeof o);
	uint32_t gen = fd < RRC_MAX_FDS ? sockopt_gen(fd) : 1;
	const struct rrc_sockopts *p = 0;
	if (prev && prev->kind == f->kind && prev->ino == f->ino && prev->data_len >= sizeof o)
		p = (const struct rrc_sockopts *)((const uint8_t *)(prev + 1) + ((prev->path_len + 7ull) & ~7ull));
	uint32_t cf = conn_flags(f, fd);
	if (p && p->size >= sizeof o && p->size <= prev->data_len && p->gen == gen && !(gen & 1)) {
		uint8_t *at = rrc_fd_data_reserve(p->size, 0, full, fd);
		if (!at) /* no setsockopt since: as they were, but for the connection's end */
			return -1;
		rrc_memcpy(at, p, p->size);
		((struct rrc_sockopts *)at)->conn_flags = cf;
		f->data_len = p->size;
		return 0;
	}
	o.gen = gen;
	o.conn_flags = cf;
	read_options(&o, fd, f);
	uint32_t nf = 0;
	if (filter_len(fd, &nf) < 0)
		return -1;
	int32_t locked = 0;
	if (read_int(fd, SOL_SOCKET, SO_LOCK_FILTER, &locked)) {
		o.valid |= RRC_SO_FILTER;
		o.filter_lock = locked ? 1 : 0;
	}
	o.size = (uint32_t)sizeof o + nf * (uint32_t)sizeof(struct sock_filter);
	uint8_t *at = rrc_fd_data_reserve(o.size, 0, full, fd);
	if (!at)
		return -1;
	if (nf) {
		socklen_t got = nf;
		if (rrc_sys_getsockopt(fd, SOL_SOCKET, SO_GET_FILTER, at + sizeof o, &got) < 0 || got != nf) {
			rrc_set_err(RRC_ERR_UNSUPPORTED_FD, 0, "socket fd ", fd,
				    "'s filter changed while it was read (SO_GET_FILTER)");
			return -1;
		}
		if (!(o.valid & RRC_SO_FILTER)) { /* a filter without SO_LOCK_FILTER to read: carried unlocked */
			o.valid |= RRC_SO_FILTER;
			o.filter_lock = 0;
		}
		o.filter_len = (uint16_t)nf;
	}
	rrc_memcpy(at, &o, sizeof o);
	f->data_len = o.size;
	return 0;
}
