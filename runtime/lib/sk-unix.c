/* SPDX-License-Identifier: MIT
 *
 * Connected unix sockets (issue 16 §4): a socketpair between two parts of
 * the process (a thread's wake-up channel, a worker's queue) must come
 * back as one connected pair, with what was written and not yet read and
 * with its shutdown state; before, each end came back alone, its peer
 * gone. For each connected unix socket (UNIX_OTHER) the walk appends,
 * after its options, a struct rrc_unix_peer (image.h): its peer's inode,
 * its shutdown flags and the bytes queued for reading from it, taken with
 * MSG_PEEK (which leaves them there). Peers and shutdown flags come from
 * NETLINK_SOCK_DIAG (AF_UNIX, UDIAG_SHOW_PEER | UDIAG_SHOW_RQLEN), one
 * dump per walk, at its first connected unix socket, on a netlink socket
 * of the walk's own (a library fd the walk skips).
 * A datagram or seqpacket socket's queue is read message by message (a
 * peek offset moves each peek past the last, as CRIU's sk-queue.c reads
 * queues), with its boundaries (struct rrc_unix_msg before each).
 * Refused, by name: datagrams from a named sender (a restore could not
 * send them from that address again), file descriptors or credentials in
 * flight (SCM_RIGHTS, SCM_CREDENTIALS: MSG_PEEK would install the fds
 * here), a peek offset the application set (SO_PEEK_OFF: a peek would
 * move it), a receive queue over RRC_UNIX_QUEUE_MAX.
 * ASYNC-SIGNAL-SAFE (the pause; in the pause helper when there is one).
 */
#include <errno.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include "rrc_lib.h"

#define UNIX_DIAG_SEQ 0x756e6978u /* "unix" */

static long unix_each(const uint8_t *msg, long len, void *arg)
{
	struct rrc_scratch *s = arg;
	struct unix_diag_msg m;
	if (len < (long)sizeof m)
		return 0;
	rrc_memcpy(&m, msg, sizeof m);
	if (s->nr_unix >= RRC_MAX_UNIX)
		return -ENOSPC;
	struct rrc_unix_ent *e = &s->unix_tab[s->nr_unix++];
	rrc_memset(e, 0, sizeof *e);
	e->ino = m.udiag_ino;
	const uint8_t *a = msg + NLMSG_ALIGN(sizeof m), *end = msg + len;
	while (a + sizeof(struct nlattr) <= end) {
		struct nlattr na;
		rrc_memcpy(&na, a, sizeof na);
		if (na.nla_len < sizeof na || a + na.nla_len > end)
			break;
		const uint8_t *v = a + NLA_HDRLEN;
		if (na.nla_type == UNIX_DIAG_PEER && na.nla_len >= NLA_HDRLEN + 4) {
			uint32_t p;
			rrc_memcpy(&p, v, 4);
			e->peer = p;
		} else if (na.nla_type == UNIX_DIAG_RQLEN && na.nla_len >= NLA_HDRLEN + sizeof(struct unix_diag_rqlen)) {
			struct unix_diag_rqlen q;
			rrc_memcpy(&q, v, sizeof q);
			e->rqueue = q.udiag_rqueue;
		} else if (na.nla_type == UNIX_DIAG_SHUTDOWN && na.nla_len >= NLA_HDRLEN + 1) {
			e->shutdown = *v;
		}
		a += NLA_ALIGN(na.nla_len);
	}
	return 0;
}

static int read_table(int fd)
{
	struct rrc_scratch *s = rrc_s;
	s->nr_unix = 0;
	if (!s->unix_nl) {
		long nl = rrc_tcp_diag_socket();
		if (nl < 0) {
			rrc_set_err(RRC_ERR_UNSUPPORTED_FD, (int)-nl, "cannot open NETLINK_SOCK_DIAG for unix socket fd ", fd, 0);
			return -1;
		}
		s->unix_nl = (int)nl + 1;
	}
	struct unix_diag_req req;
	rrc_memset(&req, 0, sizeof req);
	req.sdiag_family = AF_UNIX;
	req.udiag_states = ~0u;
	req.udiag_show = UDIAG_SHOW_PEER | UDIAG_SHOW_RQLEN;
	long r = rrc_diag_dump(s->unix_nl - 1, &req, sizeof req, UNIX_DIAG_SEQ, s->nlbuf, sizeof s->nlbuf, unix_each, s);
	if (r < 0) {
		rrc_set_err(RRC_ERR_UNSUPPORTED_FD, (int)-r, r == -ENOSPC ? "more unix sockets in the namespace than the library "
			    "looks through, at fd " : "cannot list the unix sockets (NETLINK_SOCK_DIAG), at fd ", fd, 0);
		return -1;
	}
	s->unix_read = 1;
	return 0;
}

static int refuse(int fd, const char *why)
{
	rrc_set_err(RRC_ERR_UNSUPPORTED_FD, 0, "unix socket fd ", fd, why);
	return -1;
}

/* peek's result when it refused the socket (the error is set) */
#define PEEK_REFUSED (-1000000L)

/* One MSG_PEEK of the queue's next message (at the peek offset if one is
 * set) into dst: the bytes or -errno, *flags the message's msg_flags.
 * name/namelen: the sender's address (datagrams), or NULL. */
static long peek_raw(int fd, void *dst, uint32_t cap, void *name, uint32_t *namelen, int *flags)
{
	struct iovec iov = { dst, cap };
	struct msghdr mh;
	rrc_memset(&mh, 0, sizeof mh);
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_name = name;
	mh.msg_namelen = name ? *namelen : 0;
	long n;
	do
		n = rrc_sys_recvmsg(fd, &mh, MSG_PEEK | MSG_DONTWAIT);
	while (n == -EINTR);
	if (name)
		*namelen = mh.msg_namelen;
	*flags = mh.msg_flags;
	return n;
}

/* A peek into dst: the bytes, -errno, or PEEK_REFUSED. Control data
 * (SCM_RIGHTS, SCM_CREDENTIALS) cannot be carried: MSG_PEEK would install
 * the fds here. A message cut short (larger than cap) is refused. */
static long peek(int fd, void *dst, uint32_t cap, void *name, uint32_t *namelen)
{
	int flags;
	long n = peek_raw(fd, dst, cap, name, namelen, &flags);
	if (n >= 0 && (flags & MSG_CTRUNC)) {
		refuse(fd, " has file descriptors or credentials in flight (SCM_RIGHTS, SCM_CREDENTIALS), "
		       "which an image does not carry");
		return PEEK_REFUSED;
	}
	if (n >= 0 && (flags & MSG_TRUNC)) {
		refuse(fd, " has more than 1 MiB queued for reading");
		return PEEK_REFUSED;
	}
	return n;
}

/* A datagram or seqpacket socket's queue as messages (struct
 * rrc_unix_msg, each followed by its bytes) written at dst, cap bytes at
 * most: the peek offset (SO_PEEK_OFF, off by default; the application's is
 * refused before) moves a peek past each message in turn, and goes back
 * off after. eof: a peek past the end reads 0 (a seqpacket socket whose
 * receive side is shut). Returns the bytes written, or -1 having set the error. */
static long peek_messages(int fd, uint8_t *dst, uint32_t cap, int eof)
{
	int zero = 0, off = -1;
	uint32_t used = 0;
	long r = 0;
	/* An empty message, once peeked (by an earlier dump, or by the
	 * application), is skipped by every peek at an offset (the kernel's
	 * __skb_try_recv_from_queue): at the head of the queue a peek without
	 * one still sees it (and marks it peeked: the offset peeks below
	 * skip it for sure). One behind others is not seen again: README,
	 * known limits. */
	uint8_t head;
	int head_flags;
	long h = peek_raw(fd, &head, 1, 0, 0, &head_flags); /* cut to 1 byte but for an empty one */
	if (h == 0 && !eof) {
		struct rrc_unix_msg m = { 0 };
		if (cap < sizeof m)
			return refuse(fd, " has more than 1 MiB queued for reading");
		rrc_memcpy(dst, &m, sizeof m);
		used = (uint32_t)sizeof m;
	}
	if (rrc_sys_setsockopt(fd, SOL_SOCKET, SO_PEEK_OFF, &zero, sizeof zero) < 0)
		return refuse(fd, ": its datagrams cannot be peeked one by one (SO_PEEK_OFF)");
	for (;;) {
		struct rrc_unix_msg m;
		if (cap - used < sizeof m) {
			r = refuse(fd, " has more than 1 MiB queued for reading");
			break;
		}
		uint8_t name[sizeof(struct sockaddr_un)];
		uint32_t namelen = sizeof name;
		long n = peek(fd, dst + used + sizeof m, cap - used - (uint32_t)sizeof m, name, &namelen);
		if (n == -EAGAIN || (n == 0 && eof))
			break; /* the end of the queue */
		if (n < 0) {
			r = n == PEEK_REFUSED ? -1 : refuse(fd, ": its queued datagrams could not be read");
			break;
		}
		if (namelen > sizeof(sa_family_t)) {
			r = refuse(fd, " has datagrams queued from a named sender, whose address a restore "
				   "could not send them from again");
			break;
		}
		m.len = (uint32_t)n;
		rrc_memcpy(dst + used, &m, sizeof m);
		used += (uint32_t)sizeof m + m.len;
	}
	rrc_sys_setsockopt(fd, SOL_SOCKET, SO_PEEK_OFF, &off, sizeof off);
	return r < 0 ? -1 : (long)used;
}

int rrc_capture_unix_peer(struct rrc_fd *f, int fd)
{
	struct rrc_scratch *s = rrc_s;
	if (!s->unix_read && read_table(fd) < 0)
		return -1;
	struct rrc_unix_peer p = { 0, 0, 0 };
	for (uint32_t i = 0; i < s->nr_unix; i++)
		if (s->unix_tab[i].ino == f->ino) {
			p.peer_ino = s->unix_tab[i].peer;
			p.shutdown = s->unix_tab[i].shutdown;
			p.queued = s->unix_tab[i].rqueue;
			break;
		}
	/* a datagram socket's rqueue is its first datagram's length, which
	 * may be 0: its queue is read whatever it says */
	int messages = (f->u.sock.type & 0xf) != SOCK_STREAM;
	if (p.queued || messages) {
		int peek_off = -1;
		socklen_t l = sizeof peek_off;
		if (p.queued > RRC_UNIX_QUEUE_MAX)
			return refuse(fd, " has more than 1 MiB queued for reading");
		if (rrc_sys_getsockopt(fd, SOL_SOCKET, SO_PEEK_OFF, &peek_off, &l) == 0 && peek_off >= 0)
			return refuse(fd, " has a peek offset (SO_PEEK_OFF) that reading its queue would move");
	}
	/* a datagram socket with a name, or connected to one, comes back by
	 * name (restore/sk-unix.c); what that cannot rebuild is refused */
	int named_local = f->u.sock.local.len > sizeof(sa_family_t), named_peer = f->u.sock.peer.len > sizeof(sa_family_t);
	if ((f->u.sock.type & 0xf) == SOCK_DGRAM && named_local && p.peer_ino && !named_peer)
		return refuse(fd, " is bound to a name and connected to a socket without one (a socketpair's end "
			      "bound after): a restore could not connect them again");
	uint8_t *at = s->fdbuf + s->fdbuf_len; /* filled in place, then reserved */
	uint32_t room = s->fdbuf_cap - s->fdbuf_len;
	if (room < sizeof p)
		return refuse(fd, ": the library's fd buffer is full");
	room -= (uint32_t)sizeof p;
	if (room > RRC_UNIX_QUEUE_MAX)
		room = RRC_UNIX_QUEUE_MAX;
	if (messages) {
		/* a seqpacket socket whose receive side is shut reads 0 (EOF)
		 * past its queue: to its reader an empty message is the same */
		int eof = (f->u.sock.type & 0xf) == SOCK_SEQPACKET && (p.shutdown & 1);
		long n = peek_messages(fd, at + sizeof p, room, eof);
		if (n < 0)
			return -1;
		p.queued = (uint32_t)n;
		if (n && (f->u.sock.type & 0xf) == SOCK_DGRAM && !named_local && named_peer)
			return refuse(fd, " has datagrams queued and is connected to a named socket without a name of "
				      "its own: a restore could not send them to it again");
	} else if (p.queued) {
		if (p.queued > room)
			return refuse(fd, ": the library's fd buffer is full");
		long n = peek(fd, at + sizeof p, p.queued, 0, 0);
		if (n == PEEK_REFUSED)
			return -1;
		if (n != (long)p.queued)
			return refuse(fd, ": its queued bytes could not all be read (file descriptors in flight behind them?)");
	}
	rrc_memcpy(at, &p, sizeof p);
	uint32_t len;
	if (!rrc_fd_data_reserve((uint32_t)sizeof p + p.queued, &len, "fd buffer full at unix socket fd ", fd))
		return -1;
	f->data_len += len;
	return 0;
}

void rrc_unix_walk_end(void)
{
	struct rrc_scratch *s = rrc_s;
	if (s->unix_nl)
		rrc_sys_close(s->unix_nl - 1);
	s->unix_nl = 0;
	s->unix_read = 0;
}
