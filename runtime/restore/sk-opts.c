/* SPDX-License-Identifier: MIT
 *
 * rrc-restore phase 1: socket options. A socket record's data is the
 * socket's options as the library read them at the snapshot (struct
 * rrc_sockopts, image.h); each one whose `valid` bit is on is set again:
 * those a bind depends on (the device, a foreign address) before the bind
 * (sk-inet.c), the others once every fd is at its number and the repaired
 * connections are out of repair mode (fds.c), so that a connection rebuilt
 * at a failover keeps TCP_NODELAY, its keepalive and its buffers. A
 * classic BPF socket filter is attached again from the program the
 * options end with (SO_GET_FILTER gave it back at the snapshot), as
 * CRIU's sockets.c does.
 *
 * Buffers: only a buffer the application locked (SO_BUF_LOCK) is set
 * again, to half the size getsockopt reported (the kernel doubles what it
 * is given), with the FORCE variant so that the system's maximum does not
 * cut it; then SO_BUF_LOCK takes the recorded locks, which also lifts the
 * ones rrc-repair's queue filling left (an unlocked buffer keeps the
 * kernel's autotuning).
 */
#include <errno.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include "rrc/uapi.h"
#include "sk.h"

static int is_socket_kind(uint32_t kind)
{
	return kind >= RRC_FD_INET_LISTEN && kind <= RRC_FD_UNIX_OTHER;
}

/* The record's options into *o: 0 when it has none (an image written
 * before they were carried); a record this restorer cannot read fails.
 * Copied out: the data follows a path whose length the image sets. */
static int opts_of(const struct rfd *r, struct rrc_sockopts *o)
{
	uint32_t size;

	if (!is_socket_kind(r->f->kind) || r->data_len == 0)
		return 0;
	if (r->data_len < 8)
		rst_fail(RRC_RST_IMAGE, 0, (uint32_t)r->f->fd, "fd %d: socket options of %u bytes: truncated",
			 r->f->fd, r->data_len);
	memcpy(&size, r->data, sizeof(size));
	if (size < RRC_SOCKOPTS_SIZE || size > r->data_len)
		rst_fail(RRC_RST_IMAGE, 0, (uint32_t)r->f->fd,
			 "fd %d: socket options say %u bytes in a record of %u (this restorer reads %u)", r->f->fd,
			 size, r->data_len, RRC_SOCKOPTS_SIZE);
	memcpy(o, r->data, sizeof(*o));
	if ((o->valid & RRC_SO_FILTER) && (o->filter_len > RRC_SOCK_FILTER_MAX ||
					    size < RRC_SOCKOPTS_SIZE + o->filter_len * sizeof(struct sock_filter)))
		rst_fail(RRC_RST_IMAGE, 0, (uint32_t)r->f->fd,
			 "fd %d: a socket filter of %u instructions in socket options of %u bytes", r->f->fd,
			 o->filter_len, size);
	return 1;
}

/* SO_ATTACH_FILTER with the program recorded (the last filter_len
 * instructions of the options), then SO_LOCK_FILTER: a locked filter
 * cannot be changed, its lock included, so it comes last. */
static void filter(const struct rfd *r, int fd, const struct rrc_sockopts *o)
{
	if (o->filter_len) {
		struct sock_filter prog[RRC_SOCK_FILTER_MAX];
		size_t bytes = o->filter_len * sizeof(prog[0]);

		memcpy(prog, r->data + o->size - bytes, bytes);
		struct sock_fprog fp = { .len = o->filter_len, .filter = prog };
		if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &fp, sizeof(fp)) < 0)
			rst_fail(RRC_RST_FD, errno, (uint32_t)fd,
				 "fd %d: %s %s: SO_ATTACH_FILTER of its %u-instruction filter failed: %s", fd,
				 sk_proto_str(r->f), sk_addr_str(&r->f->u.sock.local), o->filter_len,
				 rst_strerror(errno));
	}
	if (o->filter_lock)
		sk_setopt(r, fd, SOL_SOCKET, SO_LOCK_FILTER, 1, "SO_LOCK_FILTER");
}

static int inet(const struct rfd *r)
{
	return r->f->u.sock.family == AF_INET || r->f->u.sock.family == AF_INET6;
}

/* SO_BINDTODEVICE, IP(V6)_FREEBIND, IP(V6)_TRANSPARENT of o on fd */
static void bind_opts(const struct rfd *r, int fd, const struct rrc_sockopts *o)
{
	int v6 = r->f->u.sock.family == AF_INET6, lvl = v6 ? IPPROTO_IPV6 : IPPROTO_IP;

	if (!inet(r))
		return;
	if ((o->valid & RRC_SO_BINDTODEVICE) && o->bindtodevice[0]) {
		char dev[sizeof(o->bindtodevice) + 1] = { 0 };

		memcpy(dev, o->bindtodevice, sizeof(o->bindtodevice));
		if (setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, dev, (socklen_t)strlen(dev) + 1) < 0)
			rst_fail(RRC_RST_FD, errno, (uint32_t)r->f->fd,
				 "fd %d: %s %s: SO_BINDTODEVICE %s failed (no such interface here?): %s", r->f->fd,
				 sk_proto_str(r->f), sk_addr_str(&r->f->u.sock.local), dev, rst_strerror(errno));
	}
	if ((o->valid & RRC_SO_FREEBIND) && o->freebind)
		sk_setopt(r, fd, lvl, v6 ? IPV6_FREEBIND : IP_FREEBIND, 1, "IP_FREEBIND");
	if ((o->valid & RRC_SO_TRANSPARENT) && o->transparent)
		sk_setopt(r, fd, lvl, v6 ? IPV6_TRANSPARENT : IP_TRANSPARENT, 1, "IP_TRANSPARENT");
}

void sk_opts_before_bind(const struct rfd *r, int fd)
{
	struct rrc_sockopts o;

	if (opts_of(r, &o))
		bind_opts(r, fd, &o);
}

static void apply(const struct rfd *r, const struct rrc_sockopts *o)
{
	int fd = r->f->fd, stream = (r->f->u.sock.type & 0xf) == SOCK_STREAM;

	/* what a bind needed is in place already, but for a socket nothing
	 * bound here (a placed repaired connection, one restored closed) */
	if (r->f->kind == RRC_FD_INET_CONN)
		bind_opts(r, fd, o);
	if (inet(r) && stream) {
		if (o->valid & RRC_SO_NODELAY)
			sk_setopt(r, fd, IPPROTO_TCP, TCP_NODELAY, o->nodelay, "TCP_NODELAY");
		if (o->valid & RRC_SO_KEEPIDLE) {
			sk_setopt(r, fd, IPPROTO_TCP, TCP_KEEPIDLE, o->keepidle, "TCP_KEEPIDLE");
			sk_setopt(r, fd, IPPROTO_TCP, TCP_KEEPINTVL, o->keepintvl, "TCP_KEEPINTVL");
			sk_setopt(r, fd, IPPROTO_TCP, TCP_KEEPCNT, o->keepcnt, "TCP_KEEPCNT");
		}
		if (o->valid & RRC_SO_CORK)
			sk_setopt(r, fd, IPPROTO_TCP, TCP_CORK, o->cork, "TCP_CORK");
	}
	if (inet(r) && (o->valid & RRC_SO_KEEPALIVE))
		sk_setopt(r, fd, SOL_SOCKET, SO_KEEPALIVE, o->keepalive ? 1 : 0, "SO_KEEPALIVE");
	if (inet(r) && (o->valid & RRC_SO_BROADCAST))
		sk_setopt(r, fd, SOL_SOCKET, SO_BROADCAST, o->broadcast ? 1 : 0, "SO_BROADCAST");
	if (o->valid & RRC_SO_LINGER) {
		struct linger lg = { .l_onoff = o->linger_onoff, .l_linger = o->linger_secs };

		if (setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) < 0)
			rst_fail(RRC_RST_FD, errno, (uint32_t)fd, "fd %d: %s %s: setsockopt SO_LINGER failed: %s", fd,
				 sk_proto_str(r->f), sk_addr_str(&r->f->u.sock.local), rst_strerror(errno));
	}
	if (o->valid & RRC_SO_PRIORITY)
		sk_setopt(r, fd, SOL_SOCKET, SO_PRIORITY, o->priority, "SO_PRIORITY");
	if (o->valid & RRC_SO_BUFS) {
		if (o->buf_lock & SOCK_SNDBUF_LOCK)
			sk_setopt(r, fd, SOL_SOCKET, SO_SNDBUFFORCE, o->sndbuf / 2, "SO_SNDBUFFORCE");
		if (o->buf_lock & SOCK_RCVBUF_LOCK)
			sk_setopt(r, fd, SOL_SOCKET, SO_RCVBUFFORCE, o->rcvbuf / 2, "SO_RCVBUFFORCE");
		sk_setopt(r, fd, SOL_SOCKET, SO_BUF_LOCK, o->buf_lock, "SO_BUF_LOCK");
	}
	if (o->valid & RRC_SO_FILTER)
		filter(r, fd, o);
}

uint32_t sk_opts_conn_flags(const struct rfd *r)
{
	struct rrc_sockopts o;

	return opts_of(r, &o) ? o.conn_flags : 0;
}

void sk_opts_apply(struct fd_ctx *x)
{
	size_t n = 0;

	for (size_t i = 0; i < x->c->nr_fds; i++) {
		const struct rfd *r = &x->c->fds[i];
		struct rrc_sockopts o;

		if (opts_of(r, &o)) {
			apply(r, &o);
			n++;
		}
	}
	rst_log("socket options set on %zu sockets", n);
}
