/* SPDX-License-Identifier: MIT
 *
 * rrc-restore phase 1: unix sockets. A listening socket is bound again at
 * its path (a stale socket file left by the dead process is removed first)
 * or abstract name; librrc's control socket is bound at $RRC_CONTROL, the
 * path the container gives every restored process (docs/architecture.md).
 * A path is bound relative to the process's cwd, and the socket file gets
 * the mode it had.
 * Other unix sockets (connected ones): two records that name each other
 * as peers (struct rrc_unix_peer after the options, image.h) are the two
 * ends of one socketpair of the process and come back as one, each end
 * with the bytes that were queued for it (written from the other end) and
 * its shutdown state; a socket whose peer is not in the process comes back
 * as one end of a fresh socketpair whose other end is closed once its
 * queued bytes are written: it reads them, then EOF, as from a peer gone.
 * Datagram and seqpacket queues are written message by message. A
 * datagram socket bound to a name or connected to one comes back by name
 * (named_dgram, then unix_dgram_connect_all once every name is bound).
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include "sk.h"

static void unlink_stale(const struct rfd *r, const char *path)
{
	struct stat st;

	if (lstat(path, &st) < 0)
		return;
	if (!S_ISSOCK(st.st_mode))
		rst_fail(RRC_RST_FD, EADDRINUSE, (uint32_t)r->f->fd,
			 "fd %d: cannot bind unix socket %s: a file that is not a socket is in the way",
			 r->f->fd, path);
	if (unlink(path) < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)r->f->fd, "fd %d: cannot remove stale socket %s: %s",
			 r->f->fd, path, rst_strerror(errno));
}

/* fd bound at sun (a stale socket file removed first), its file given the
 * mode the record has (the bind made it with the umask's; a relative name
 * is the cwd's, which the restorer entered before the fds: main.c) */
static void bind_at(const struct rfd *r, int fd, const struct sockaddr_un *sun, socklen_t len, const char *what)
{
	int path = len > offsetof(struct sockaddr_un, sun_path) && sun->sun_path[0];
	uint32_t mode = r->f->u.sock.file_mode;

	if (path)
		unlink_stale(r, sun->sun_path);
	if (bind(fd, (const struct sockaddr *)sun, len) < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)r->f->fd, "fd %d: cannot bind unix socket %s: %s",
			 r->f->fd, what, rst_strerror(errno));
	if (path && (mode & RRC_SOCK_FILE_MODE) && chmod(sun->sun_path, mode & 07777) < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)r->f->fd, "fd %d: cannot set the mode %04o of unix socket %s: %s",
			 r->f->fd, mode & 07777, sun->sun_path, rst_strerror(errno));
}

static int listener(const struct rfd *r, int type, const struct sockaddr_un *sun, socklen_t len,
		    const char *what)
{
	int fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
	int backlog = r->f->u.sock.backlog > 0 ? r->f->u.sock.backlog : 128;

	if (fd < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)r->f->fd, "fd %d: socket(AF_UNIX) failed: %s",
			 r->f->fd, rst_strerror(errno));
	bind_at(r, fd, sun, len, what);
	if (listen(fd, backlog) < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)r->f->fd, "fd %d: cannot listen on unix socket %s: %s",
			 r->f->fd, what, rst_strerror(errno));
	return fd;
}

/* The rrc_unix_peer of a UNIX_OTHER record, after its options, or NULL
 * (an image from before it); *queued points at its bytes. */
static const struct rrc_unix_peer *peer_of(const struct rfd *r, const uint8_t **queued)
{
	uint32_t size;
	if (r->f->kind != RRC_FD_UNIX_OTHER || r->data_len < 4)
		return 0;
	memcpy(&size, r->data, 4);
	if (size > r->data_len || r->data_len - size < sizeof(struct rrc_unix_peer))
		return 0;
	const struct rrc_unix_peer *p = (const struct rrc_unix_peer *)(r->data + size);
	if (p->queued > r->data_len - size - sizeof *p)
		rst_fail(RRC_RST_IMAGE, 0, (uint32_t)r->f->fd, "fd %d: %u queued bytes, but the record holds %u",
			 r->f->fd, p->queued, (unsigned)(r->data_len - size - sizeof *p));
	*queued = (const uint8_t *)(p + 1);
	return p;
}

/* The next message of a datagram or seqpacket queue at *off, or 0 at its
 * end; a message that overruns the queue fails the restore. */
static const uint8_t *next_msg(const struct rfd *r, const struct rrc_unix_peer *p, const uint8_t *bytes,
			       uint32_t *off, uint32_t *len)
{
	struct rrc_unix_msg m;

	if (*off >= p->queued)
		return 0;
	if (p->queued - *off < sizeof(m))
		rst_fail(RRC_RST_IMAGE, 0, (uint32_t)r->f->fd, "fd %d: a queued message's header is cut at byte %u of %u",
			 r->f->fd, *off, p->queued);
	memcpy(&m, bytes + *off, sizeof(m));
	*off += (uint32_t)sizeof(m);
	if (m.len > p->queued - *off)
		rst_fail(RRC_RST_IMAGE, 0, (uint32_t)r->f->fd,
			 "fd %d: a queued message of %u bytes at byte %u of %u overruns the queue", r->f->fd, m.len,
			 *off, p->queued);
	*len = m.len;
	*off += m.len;
	return bytes + *off - m.len;
}

/* The bytes queued for r's socket, sent again from `from`: its peer, or
 * (to set, for an unconnected named socket) a socket of the restorer's.
 * A stream socket's as they are; a datagram or seqpacket socket's message
 * by message. */
static void refill(const struct rfd *r, int from, const struct rrc_unix_peer *p, const uint8_t *bytes,
		   const struct sockaddr_storage *to, socklen_t tolen)
{
	uint32_t off = 0, len;
	const uint8_t *m;
	/* the queue may have grown under the application's buffer sizes,
	 * which are set again later (sk-opts.c) */
	int room = (int)p->queued * 2 + 65536;
	if (p->queued)
		setsockopt(from, SOL_SOCKET, SO_SNDBUFFORCE, &room, sizeof room);
	if ((r->f->u.sock.type & 0xf) != SOCK_STREAM) {
		uint32_t n = 0;
		while ((m = next_msg(r, p, bytes, &off, &len)) != 0) {
			if (sendto(from, m, len, MSG_DONTWAIT | MSG_NOSIGNAL, (const struct sockaddr *)to, tolen) !=
			    (ssize_t)len)
				rst_fail(RRC_RST_FD, errno, (uint32_t)r->f->fd,
					 "fd %d: cannot queue its message %u (%u bytes) again: %s", r->f->fd, n, len,
					 rst_strerror(errno));
			n++;
		}
		return;
	}
	while (off < p->queued) {
		ssize_t n = send(from, bytes + off, p->queued - off, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n <= 0)
			rst_fail(RRC_RST_FD, errno, (uint32_t)r->f->fd, "fd %d: cannot queue its %u unread bytes again: %s",
				 r->f->fd, p->queued, n < 0 ? rst_strerror(errno) : "short write");
		off += (uint32_t)n;
	}
}

static void shut(const struct rfd *r, int fd, uint32_t flags)
{
	int how = (flags & 3) == 3 ? SHUT_RDWR : (flags & 2) ? SHUT_WR : SHUT_RD;
	if (flags & 3 && shutdown(fd, how) < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)r->f->fd, "fd %d: shutdown(%d) failed: %s", r->f->fd, how,
			 rst_strerror(errno));
}

/* A unix address with a name (a path, an abstract or autobound name) */
static int named(const struct rrc_sockaddr *a)
{
	return a->family == AF_UNIX && a->len > sizeof(sa_family_t);
}

/* A datagram socket bound to a name or connected to one is made by name
 * (named_dgram), not as a socketpair: a socketpair's ends are unnamed. */
static int is_named_dgram(const struct rrc_fd *f)
{
	return f->kind == RRC_FD_UNIX_OTHER && (f->u.sock.type & 0xf) == SOCK_DGRAM &&
	       (named(&f->u.sock.local) || named(&f->u.sock.peer));
}

/* A connected unix socket: with its peer if the process has it */
static int connected(struct fd_ctx *x, struct rfd *r, int type)
{
	int sv[2];
	const uint8_t *q = 0, *pq = 0;
	const struct rrc_unix_peer *p = peer_of(r, &q), *pp = 0;
	struct rfd *peer = 0;

	for (size_t i = 0; p && p->peer_ino && i < x->c->nr_fds; i++) {
		struct rfd *o = &x->c->fds[i];
		if (o != r && !o->done && o->f->kind == RRC_FD_UNIX_OTHER && !is_named_dgram(o->f) &&
		    o->f->ino == p->peer_ino &&
		    (pp = peer_of(o, &pq)) != 0 && pp->peer_ino == r->f->ino) {
			peer = o;
			break;
		}
	}
	if (socketpair(AF_UNIX, type | SOCK_CLOEXEC, 0, sv) < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)r->f->fd, "fd %d: socketpair failed: %s", r->f->fd,
			 rst_strerror(errno));
	/* both above the image's numbers before either is placed */
	sv[0] = fd_high(x, sv[0]);
	sv[1] = fd_high(x, sv[1]);
	if (p)
		refill(r, sv[1], p, q, 0, 0);
	if (peer) {
		refill(peer, sv[0], pp, pq, 0, 0);
		shut(r, sv[0], p->shutdown);
		shut(peer, sv[1], pp->shutdown);
		rst_log("fd %d and fd %d: one socketpair again, %u and %u bytes queued", r->f->fd, peer->f->fd,
			p->queued, pp->queued);
		fd_place(x, sv[1], peer);
		peer->done = 1;
	} else {
		if (p)
			shut(r, sv[0], p->shutdown & 2); /* its receive side ends with the peer's close */
		close(sv[1]);
	}
	return sv[0];
}

/* A datagram socket by name: bound again to its name (a stale socket file
 * removed first, the file's mode as it was), its queued datagrams sent to
 * it again from a socket of the restorer's (unnamed, as their senders
 * were: the dump refuses named ones), unconnected for now:
 * unix_dgram_connect_all connects it once every name is bound. */
static int named_dgram(struct fd_ctx *x, struct rfd *r)
{
	const struct rrc_fd *f = r->f;
	const uint8_t *q = 0;
	const struct rrc_unix_peer *p = peer_of(r, &q);
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)f->fd, "fd %d: socket(AF_UNIX, SOCK_DGRAM) failed: %s", f->fd,
			 rst_strerror(errno));
	fd = fd_high(x, fd);
	if (!named(&f->u.sock.local)) {
		if (p && p->queued)
			rst_fail(RRC_RST_IMAGE, 0, (uint32_t)f->fd,
				 "fd %d: datagrams queued on an unnamed socket connected to %s: nothing could send them "
				 "to it again", f->fd, sk_addr_str(&f->u.sock.peer));
		return fd;
	}
	struct sockaddr_storage ss;
	socklen_t len = sk_addr(&f->u.sock.local, &ss);
	struct sockaddr_un sun;

	memcpy(&sun, &ss, sizeof(sun));
	bind_at(r, fd, &sun, len, sk_addr_str(&f->u.sock.local));
	if (p && p->queued) {
		int from = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

		if (from < 0)
			rst_fail(RRC_RST_FD, errno, (uint32_t)f->fd, "fd %d: socket for its queue failed: %s", f->fd,
				 rst_strerror(errno));
		refill(r, from, p, q, &ss, len);
		close(from);
	}
	return fd;
}

/* The peer of a socket whose peer went away: one that existed, was
 * connected to and closed, so that a send fails with ECONNREFUSED as it
 * would have (a socket left unconnected would say ENOTCONN). */
static void connect_to_gone(const struct rfd *r)
{
	int gone = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	socklen_t len = sizeof(sun);

	if (gone < 0 || bind(gone, (struct sockaddr *)&sun, sizeof(sa_family_t)) < 0 || /* autobind */
	    getsockname(gone, (struct sockaddr *)&sun, &len) < 0 ||
	    connect(r->f->fd, (struct sockaddr *)&sun, len) < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)r->f->fd, "fd %d: cannot make its gone peer: %s", r->f->fd,
			 rst_strerror(errno));
	close(gone);
}

void unix_dgram_connect_all(struct fd_ctx *x)
{
	for (size_t i = 0; i < x->c->nr_fds; i++) {
		const struct rfd *r = &x->c->fds[i];
		const struct rrc_fd *f = r->f;

		if (!is_named_dgram(f) || !named(&f->u.sock.peer))
			continue;
		struct sockaddr_storage ss;
		socklen_t len = sk_addr(&f->u.sock.peer, &ss);

		if (connect(f->fd, (const struct sockaddr *)&ss, len) == 0) {
			rst_log("fd %d: unix datagram socket connected to %s again", f->fd, sk_addr_str(&f->u.sock.peer));
			continue;
		}
		/* the peer is not here (a daemon's /dev/log on the old host):
		 * the socket finds it gone, as when a peer closes */
		rst_log("fd %d: its peer %s is not here (%s): connected to a closed one", f->fd,
			sk_addr_str(&f->u.sock.peer), rst_strerror(errno));
		connect_to_gone(r);
	}
}

void restore_unix(struct fd_ctx *x, struct rfd *r)
{
	const struct rrc_fd *f = r->f;
	int type = (f->u.sock.type & 0xf) ? (f->u.sock.type & 0xf) : SOCK_STREAM;
	struct sockaddr_un sun;
	int fd;

	if (f->kind == RRC_FD_LIB_CONTROL) {
		size_t n = strlen(x->control_path);

		if (n >= sizeof(sun.sun_path))
			rst_fail(RRC_RST_FD, ENAMETOOLONG, (uint32_t)f->fd,
				 "fd %d: control socket path %s is too long", f->fd, x->control_path);
		memset(&sun, 0, sizeof(sun));
		sun.sun_family = AF_UNIX;
		memcpy(sun.sun_path, x->control_path, n);
		fd = listener(r, SOCK_STREAM, &sun, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1),
			      x->control_path);
	} else if (f->kind == RRC_FD_UNIX_LISTEN) {
		struct sockaddr_storage ss;
		socklen_t len = sk_addr(&f->u.sock.local, &ss);

		if (len <= offsetof(struct sockaddr_un, sun_path))
			rst_fail(RRC_RST_FD, 0, (uint32_t)f->fd, "fd %d: listening unix socket without a name",
				 f->fd);
		memcpy(&sun, &ss, sizeof(sun));
		fd = listener(r, type, &sun, len, sk_addr_str(&f->u.sock.local));
	} else if (is_named_dgram(f)) {
		fd = named_dgram(x, r);
	} else {
		fd = connected(x, r, type);
	}
	fd_place(x, fd_high(x, fd), r);
}
