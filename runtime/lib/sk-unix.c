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
 * Refused, by name: datagrams queued on a datagram or seqpacket socket
 * (their boundaries are not carried yet), file descriptors or credentials
 * in flight (SCM_RIGHTS, SCM_CREDENTIALS: MSG_PEEK would install the fds
 * here), a peek offset the application set (SO_PEEK_OFF: a peek would
 * move it), a receive queue over RRC_UNIX_QUEUE_MAX.
 * ASYNC-SIGNAL-SAFE (the pause; in the pause helper when there is one).
 */
#include <errno.h>
#include <sys/socket.h>
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
	if (p.queued) {
		int peek_off = -1;
		socklen_t l = sizeof peek_off;
		if (f->u.sock.type != SOCK_STREAM)
			return refuse(fd, " has datagrams queued for reading, whose boundaries an image does not carry yet");
		if (p.queued > RRC_UNIX_QUEUE_MAX)
			return refuse(fd, " has more than 1 MiB queued for reading");
		if (rrc_sys_getsockopt(fd, SOL_SOCKET, SO_PEEK_OFF, &peek_off, &l) == 0 && peek_off >= 0)
			return refuse(fd, " has a peek offset (SO_PEEK_OFF) that reading its queue would move");
	}
	uint32_t len;
	uint8_t *at = rrc_fd_data_reserve((uint32_t)sizeof p + p.queued, &len, "fd buffer full at unix socket fd ", fd);
	if (!at)
		return -1;
	rrc_memcpy(at, &p, sizeof p);
	uint8_t *dst = at + sizeof p;
	if (p.queued) {
		struct iovec iov = { dst, p.queued };
		struct msghdr mh;
		rrc_memset(&mh, 0, sizeof mh);
		mh.msg_iov = &iov;
		mh.msg_iovlen = 1;
		long n;
		do
			n = rrc_sys_recvmsg(fd, &mh, MSG_PEEK | MSG_DONTWAIT);
		while (n == -EINTR);
		if (mh.msg_flags & MSG_CTRUNC)
			return refuse(fd, " has file descriptors or credentials in flight (SCM_RIGHTS, SCM_CREDENTIALS), "
				      "which an image does not carry");
		if (n != (long)p.queued)
			return refuse(fd, ": its queued bytes could not all be read (file descriptors in flight behind them?)");
	}
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
