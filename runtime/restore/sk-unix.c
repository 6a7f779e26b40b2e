/* SPDX-License-Identifier: MIT
 *
 * rrc-restore phase 1: unix sockets. A listening socket is bound again at
 * its path (a stale socket file left by the dead process is removed first)
 * or abstract name; librrc's control socket is bound at $RRC_CONTROL, the
 * path the container gives every restored process (docs/architecture.md).
 * A path is bound relative to the process's cwd, and the socket file gets
 * the mode it had.
 * Other unix sockets (connected ones) come back as one end of a fresh
 * socketpair whose other end is closed: the peer is gone.
 */
#include <errno.h>
#include <string.h>
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

static int listener(const struct rfd *r, int type, const struct sockaddr_un *sun, socklen_t len,
		    const char *what)
{
	int fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
	int backlog = r->f->u.sock.backlog > 0 ? r->f->u.sock.backlog : 128;

	if (fd < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)r->f->fd, "fd %d: socket(AF_UNIX) failed: %s",
			 r->f->fd, rst_strerror(errno));
	if (len > offsetof(struct sockaddr_un, sun_path) && sun->sun_path[0])
		unlink_stale(r, sun->sun_path);
	if (bind(fd, (const struct sockaddr *)sun, len) < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)r->f->fd, "fd %d: cannot bind unix socket %s: %s",
			 r->f->fd, what, rst_strerror(errno));
	if (listen(fd, backlog) < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)r->f->fd, "fd %d: cannot listen on unix socket %s: %s",
			 r->f->fd, what, rst_strerror(errno));
	return fd;
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
		/* the file's mode as the application left it (the bind made it
		 * with the umask's); a relative name is the cwd's, which the
		 * restorer entered before the fds (main.c) */
		if ((f->u.sock.file_mode & RRC_SOCK_FILE_MODE) && sun.sun_path[0] &&
		    chmod(sun.sun_path, f->u.sock.file_mode & 07777) < 0)
			rst_fail(RRC_RST_FD, errno, (uint32_t)f->fd, "fd %d: cannot set the mode %04o of unix socket %s: %s",
				 f->fd, f->u.sock.file_mode & 07777, sun.sun_path, rst_strerror(errno));
	} else {
		int sv[2];

		if (socketpair(AF_UNIX, type | SOCK_CLOEXEC, 0, sv) < 0)
			rst_fail(RRC_RST_FD, errno, (uint32_t)f->fd, "fd %d: socketpair failed: %s", f->fd,
				 rst_strerror(errno));
		close(sv[1]);
		fd = sv[0];
	}
	fd_place(x, fd_high(x, fd), r);
}
