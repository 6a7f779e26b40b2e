/* SPDX-License-Identifier: MIT
 *
 * The TCP stream table (image section TCP, rrc/image.h): for every TCP
 * socket of the process's network namespace, how far the application had
 * written and read at the snapshot instant, in sequence numbers relative to
 * the stream's ISN+1. The replication gate releases a server->client
 * segment once a committed checkpoint covers its end (RRC §4.5, NiLiCon
 * §IV: output is held until the state that produced it is committed); the
 * failover path uses the same table for TCP_REPAIR.
 *
 * Source: NETLINK_SOCK_DIAG, SOCK_DIAG_BY_FAMILY with inet_diag_req_v2 and
 * INET_DIAG_INFO, for AF_INET and AF_INET6, all states. That covers
 * sockets the process holds, connections still in an accept queue,
 * orphaned (closed, still sending) ones, request socks and TIME_WAIT.
 *
 * The formula, measured on kernel 6.18 by runtime/tests/sk_diag_check.c
 * (tests/test_tcp_table.py runs it; it checks every case below on both
 * ends of loopback connections, IPv4 and IPv6, against the byte counts the
 * program itself wrote and read):
 *
 *   write_seq_rel = tcpi_bytes_acked + idiag_wqueue - (active open ? 1 : 0)
 *   read_seq_rel  = tcpi_bytes_received - idiag_rqueue
 *
 * (wqueue = write_seq - snd_una and rqueue = rcv_nxt - copied_seq, so the
 * sums telescope). The SYN: a passive (accepted) socket's bytes_acked is
 * snd_una - (ISN+1), but an active open's is snd_una - ISN (measured: a
 * client that wrote 777 bytes, all acked, reports bytes_acked 778 and
 * wqueue 0; right after connect() it reports 1). bytes_received excludes
 * the peer's SYN on both sides. See classify() for telling the two apart.
 * The FIN counts 1 in both: shutdown(SHUT_WR) with N bytes written gives
 * N+1 whether the FIN is acked, sent and unacked, or queued behind unsent
 * data; the reader's read_seq_rel becomes N+1 when the kernel consumes the
 * FIN, which is at the latest when read() returns 0, and already when the
 * last data byte is read if the FIN was coalesced into that skb (measured:
 * reading exactly the N bytes gave N+1 with rqueue 0; a FIN on its own skb
 * gave N with rqueue 1). Cases checked, IPv4 and IPv6, both ends: data
 * acked and read, acked and unread (peer's receive queue), unsent (peer's
 * window closed: tcpi_notsent_bytes > 0), sent and unacked (the peer's
 * ACKs dropped by an iptables rule: tcpi_unacked > 0), a connection not
 * yet accept()ed (inode 0, rqueue = bytes the client sent), an orphan
 * closed with unsent data (FIN_WAIT1, inode 0). SYN_SENT reports wqueue 1
 * (the unacked SYN) and gets no sequence values (RRC_TCP_F_SEQ unset),
 * like LISTEN, request socks and TIME_WAIT (which has no tcp_info).
 *
 * Consistency. The application is parked, so write_seq and copied_seq do
 * not move, but ACKs and data still arrive. The kernel reads rqueue and
 * wqueue without the socket lock (tcp_diag_get_info) and then tcp_info
 * under it, so one dump can see snd_una (rcv_nxt) advance in between and
 * over-state write_seq_rel (read_seq_rel) by the bytes just acked
 * (received): for the gate that would release output the checkpoint does
 * not cover. Hence repeated dumps: snd_una and rcv_nxt only grow, and
 * bytes_acked/bytes_received follow them exactly, so when a socket shows
 * the same bytes_acked and bytes_received in two consecutive dumps, the
 * queue lengths of the second dump were read while neither moved and its
 * values are exact. Dumps are repeated until every socket of the last
 * dump is settled against the one before (normally two dumps).
 *
 * ASYNC-SIGNAL-SAFE: the whole file (runs in the pause; raw syscalls only).
 */
#include <errno.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <linux/inet_diag.h>
#include <linux/tcp.h>
#include "rrc_lib.h"

#define TCP_MAX_DUMPS 16

enum { TCPS_ESTABLISHED = 1, TCPS_SYN_SENT, TCPS_SYN_RECV, TCPS_FIN_WAIT1, TCPS_FIN_WAIT2,
       TCPS_TIME_WAIT, TCPS_CLOSE, TCPS_CLOSE_WAIT, TCPS_LAST_ACK, TCPS_LISTEN, TCPS_CLOSING,
       TCPS_NEW_SYN_RECV, TCPS_BOUND_INACTIVE };

/* States of a synchronized full socket, where both formulas hold. */
static int seq_state(unsigned st)
{
	switch (st) {
	case TCPS_ESTABLISHED: case TCPS_FIN_WAIT1: case TCPS_FIN_WAIT2:
	case TCPS_CLOSE_WAIT: case TCPS_LAST_ACK: case TCPS_CLOSING:
		return 1;
	}
	return 0;
}

static uint16_t be16(uint16_t v) { return (uint16_t)((v >> 8) | (v << 8)); }

static void fill(struct rrc_tcp_stream *t, const struct inet_diag_msg *m, const uint8_t *attrs, long alen)
{
	struct tcp_info ti;
	int info = 0;

	rrc_memset(&ti, 0, sizeof ti);
	/* attributes: struct nlattr/rtattr { u16 len; u16 type; }, 4-aligned */
	while (alen >= 4) {
		uint16_t l, type;
		rrc_memcpy(&l, attrs, 2);
		rrc_memcpy(&type, attrs + 2, 2);
		if (l < 4 || l > alen)
			break;
		if (type == INET_DIAG_INFO) {
			uint32_t n = l - 4u;
			/* an older kernel reports a shorter tcp_info: the rest stays zero */
			rrc_memcpy(&ti, attrs + 4, n < sizeof ti ? n : sizeof ti);
			info = 1;
		}
		uint32_t step = (l + 3u) & ~3u;
		if (step > (uint64_t)alen)
			break;
		attrs += step;
		alen -= step;
	}
	rrc_memset(t, 0, sizeof *t);
	t->family = m->idiag_family;
	t->state = m->idiag_state;
	t->local_port = be16(m->id.idiag_sport);
	t->remote_port = be16(m->id.idiag_dport);
	rrc_memcpy(t->local_addr, m->id.idiag_src, m->idiag_family == AF_INET ? 4 : 16);
	rrc_memcpy(t->remote_addr, m->id.idiag_dst, m->idiag_family == AF_INET ? 4 : 16);
	t->inode = m->idiag_inode;
	t->cookie = (uint64_t)m->id.idiag_cookie[0] | ((uint64_t)m->id.idiag_cookie[1] << 32);
	t->rqueue = m->idiag_rqueue;
	t->wqueue = m->idiag_wqueue;
	t->ifindex = m->id.idiag_if;
	if (info) {
		t->flags |= RRC_TCP_F_INFO;
		t->options = ti.tcpi_options;
		t->snd_wscale = ti.tcpi_snd_wscale;
		t->rcv_wscale = ti.tcpi_rcv_wscale;
		t->snd_mss = ti.tcpi_snd_mss;
		t->bytes_acked = ti.tcpi_bytes_acked;
		t->bytes_received = ti.tcpi_bytes_received;
		if (seq_state(t->state)) {
			t->flags |= RRC_TCP_F_SEQ;
			/* the SYN correction of an active open: classify() */
			t->write_seq_rel = t->bytes_acked + t->wqueue;
			t->read_seq_rel = t->bytes_received - t->rqueue;
		}
	}
}

/* One SOCK_DIAG_BY_FAMILY dump of one family (the states of the mask),
 * appended at out[*n]. */
long rrc_diag_dump(int nl, const void *body, size_t body_len, uint32_t seq, uint8_t *buf, size_t buflen,
		   long (*each)(const uint8_t *msg, long len, void *arg), void *arg)
{
	struct {
		struct nlmsghdr nlh;
		uint8_t body[96];
	} req;
	if (body_len > sizeof req.body)
		return -EINVAL;
	rrc_memset(&req, 0, sizeof req);
	req.nlh.nlmsg_len = (uint32_t)(NLMSG_HDRLEN + body_len);
	req.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	req.nlh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
	req.nlh.nlmsg_seq = seq;
	rrc_memcpy(req.body, body, body_len);
	struct sockaddr_nl kernel;
	rrc_memset(&kernel, 0, sizeof kernel);
	kernel.nl_family = AF_NETLINK;
	long r;
	do
		r = rrc_sys_sendto(nl, &req, req.nlh.nlmsg_len, 0, &kernel, sizeof kernel);
	while (r == -EINTR);
	if (r < 0)
		return r;
	for (;;) {
		do
			r = rrc_sys_recvfrom(nl, buf, buflen, 0, NULL, NULL);
		while (r == -EINTR);
		if (r < 0)
			return r;
		if (r == 0)
			return -EIO;
		const uint8_t *p = buf;
		long left = r;
		while (left >= (long)sizeof(struct nlmsghdr)) {
			struct nlmsghdr h;
			rrc_memcpy(&h, p, sizeof h);
			if (h.nlmsg_len < sizeof h || h.nlmsg_len > (uint64_t)left)
				return -EIO;
			if (h.nlmsg_seq != seq)
				goto next; /* a stale message of an earlier request */
			if (h.nlmsg_type == NLMSG_DONE)
				return 0;
			if (h.nlmsg_type == NLMSG_ERROR) {
				struct nlmsgerr e;
				if (h.nlmsg_len < NLMSG_LENGTH(sizeof e))
					return -EIO;
				rrc_memcpy(&e, p + NLMSG_HDRLEN, sizeof e);
				return e.error ? e.error : -EIO;
			}
			if (h.nlmsg_type == SOCK_DIAG_BY_FAMILY) {
				long e = each(p + NLMSG_HDRLEN, (long)h.nlmsg_len - NLMSG_HDRLEN, arg);
				if (e < 0)
					return e;
			}
		next:;
			uint32_t step = NLMSG_ALIGN(h.nlmsg_len);
			if (step >= (uint64_t)left)
				break;
			p += step;
			left -= step;
		}
	}
}

struct tcp_out {
	struct rrc_tcp_stream *out;
	uint32_t *n, cap;
};

static long tcp_each(const uint8_t *msg, long len, void *arg)
{
	struct tcp_out *o = arg;
	struct inet_diag_msg m;
	if (len < (long)sizeof m)
		return 0;
	rrc_memcpy(&m, msg, sizeof m);
	if (*o->n >= o->cap)
		return -ENOSPC;
	long hdr = NLMSG_ALIGN(sizeof m);
	fill(&o->out[(*o->n)++], &m, msg + hdr, len - hdr < 0 ? 0 : len - hdr);
	return 0;
}

static long dump_family(int nl, uint8_t family, uint32_t states, uint32_t seq, struct rrc_tcp_stream *out,
			uint32_t *n, uint32_t cap, uint8_t *buf, size_t buflen)
{
	struct inet_diag_req_v2 req;
	rrc_memset(&req, 0, sizeof req);
	req.sdiag_family = family;
	req.sdiag_protocol = IPPROTO_TCP;
	req.idiag_ext = 1u << (INET_DIAG_INFO - 1);
	req.idiag_states = states;
	struct tcp_out o = { out, n, cap };
	return rrc_diag_dump(nl, &req, sizeof req, seq, buf, buflen, tcp_each, &o);
}

static int addr_zero(const uint8_t *a)
{
	for (int i = 0; i < 16; i++)
		if (a[i])
			return 0;
	return 1;
}

/* An active open counts its SYN in tcpi_bytes_acked (tcp_ack() advances
 * snd_una from the ISN when the SYN-ACK arrives), a passive one does not
 * (the child is created with snd_una = ISN+1). The kernel reports neither
 * which it was nor the ISN, so: a connection is passive if a listener of
 * the same table has its local port and address (or the wildcard). */
static void classify(struct rrc_tcp_stream *a, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		struct rrc_tcp_stream *t = &a[i];
		if (!(t->flags & RRC_TCP_F_SEQ))
			continue;
		int passive = 0;
		for (uint32_t j = 0; j < n && !passive; j++)
			passive = a[j].state == TCPS_LISTEN && a[j].family == t->family &&
				  a[j].local_port == t->local_port &&
				  (addr_zero(a[j].local_addr) || rrc_memeq(a[j].local_addr, t->local_addr, 16));
		if (!passive && t->bytes_acked > 0) {
			t->flags |= RRC_TCP_F_ACTIVE;
			t->write_seq_rel--;
		}
	}
}

/* Shell sort by cookie: consecutive dumps are matched by a merge walk. */
static void sort_by_cookie(struct rrc_tcp_stream *a, uint32_t n)
{
	static const uint32_t gaps[] = { 701, 301, 132, 57, 23, 10, 4, 1 };
	for (unsigned g = 0; g < sizeof gaps / sizeof gaps[0]; g++) {
		uint32_t gap = gaps[g];
		for (uint32_t i = gap; i < n; i++) {
			struct rrc_tcp_stream t = a[i];
			uint32_t j = i;
			while (j >= gap && a[j - gap].cookie > t.cookie) {
				a[j] = a[j - gap];
				j -= gap;
			}
			a[j] = t;
		}
	}
}

/* Is every socket of cur with sequence values unchanged since prev? */
static int settled(const struct rrc_tcp_stream *cur, uint32_t n, const struct rrc_tcp_stream *prev, uint32_t np)
{
	uint32_t j = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (!(cur[i].flags & RRC_TCP_F_SEQ))
			continue;
		while (j < np && prev[j].cookie < cur[i].cookie)
			j++;
		if (j >= np || prev[j].cookie != cur[i].cookie || !(prev[j].flags & RRC_TCP_F_SEQ) ||
		    prev[j].bytes_acked != cur[i].bytes_acked || prev[j].bytes_received != cur[i].bytes_received)
			return 0;
	}
	return 1;
}

long rrc_tcp_table_read(int nl_fd, struct rrc_tcp_stream *out, struct rrc_tcp_stream *spare, uint32_t cap,
			uint8_t *buf, size_t buflen, int v6, uint32_t *dumps)
{
	long nl = nl_fd >= 0 ? nl_fd : rrc_tcp_diag_socket();
	if (nl < 0)
		return nl;
	struct rrc_tcp_stream *cur = out, *prev = spare;
	uint32_t np = 0;
	long ret = -EAGAIN;
	for (uint32_t k = 1; k <= TCP_MAX_DUMPS; k++) {
		/* Every state, request socks and TIME_WAIT included. Listeners
		 * only in the first dump: the kernel finds them by walking its
		 * listening hash, which all namespaces share (~0.1 ms a walk
		 * here), and with the application parked they neither appear nor
		 * go; later dumps take them over from the previous one. */
		/* Never TCP_BOUND_INACTIVE (6.6+: bound, neither listening nor
		 * connected; no sequence numbers): asking for it makes the kernel
		 * walk the bind hash, which all namespaces share, in every dump
		 * (measured: 0.19 ms a dump of an empty namespace with it, sk_diag_check). */
		uint32_t states = (k == 1 ? ~0u : ~(1u << TCPS_LISTEN)) & ~(1u << TCPS_BOUND_INACTIVE);
		uint32_t n = 0;
		long r = dump_family((int)nl, AF_INET, states, 2 * k, cur, &n, cap, buf, buflen);
		if (r == 0 && v6)
			r = dump_family((int)nl, AF_INET6, states, 2 * k + 1, cur, &n, cap, buf, buflen);
		for (uint32_t i = 0; r == 0 && k > 1 && i < np; i++) {
			if (prev[i].state != TCPS_LISTEN)
				continue;
			if (n >= cap)
				r = -ENOSPC;
			else
				cur[n++] = prev[i];
		}
		if (r < 0) {
			ret = r;
			break;
		}
		*dumps = k;
		classify(cur, n);
		sort_by_cookie(cur, n);
		if (k > 1 && settled(cur, n, prev, np)) {
			if (cur != out)
				rrc_memcpy(out, cur, (size_t)n * sizeof *out);
			ret = n;
			break;
		}
		struct rrc_tcp_stream *t = cur;
		cur = prev;
		prev = t;
		np = n;
	}
	if (nl_fd < 0)
		rrc_sys_close((int)nl);
	return ret;
}

int rrc_tcp_diag_socket(void)
{
	return (int)rrc_sys_socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
}

/* Pause path: the table for the snapshot child (rrc_s->tcp). */
int rrc_tcp_capture(int nl_fd)
{
	struct rrc_scratch *s = rrc_s;
	uint32_t dumps = 0;
	long n = rrc_tcp_table_read(nl_fd, s->tcp, s->tcp_prev, s->cap_tcp, s->nlbuf, sizeof s->nlbuf, s->tcp_v6 != 0, &dumps);
	s->tcp_dumps = dumps;
	if (n >= 0) {
		s->nr_tcp = (uint32_t)n;
		return 0;
	}
	s->nr_tcp = 0;
	if (n == -ENOSPC)
		rrc_set_err(RRC_ERR_TCP_TABLE, 0, "the TCP stream table is full: more than ", s->cap_tcp,
			    " TCP sockets in the network namespace");
	else if (n == -EAGAIN)
		rrc_set_err(RRC_ERR_TCP_TABLE, 0, "the TCP stream table did not settle in ", TCP_MAX_DUMPS,
			    " NETLINK_SOCK_DIAG dumps (ACKs or data kept arriving); the dump can be retried");
	else
		rrc_set_err(RRC_ERR_TCP_TABLE, (int)-n, "the NETLINK_SOCK_DIAG dump of the TCP sockets failed", -1, 0);
	return -1;
}
