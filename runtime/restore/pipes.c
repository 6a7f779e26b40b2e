/* SPDX-License-Identifier: MIT
 *
 * rrc-restore phase 1: pipes. The ends of one pipe share the inode number
 * recorded in rrc_fd.ino; the bytes in flight (captured with tee by the
 * library, so the application's pipe kept them) are in the data of one
 * end's record. One pipe is made per inode, sized as recorded, refilled,
 * and every fd of that inode gets the end of its access mode. An end
 * absent from the image is closed: the reader then sees EOF after the data,
 * the writer EPIPE, as they would have had the other side gone.
 * A FIFO (a named pipe) is opened again at its path: first by the
 * restorer, read-write (which never blocks, and keeps the FIFO's buffer
 * while its fds are opened), sized and refilled through that fd, then
 * once per fd with the fd's own access mode (non-blocking: with the
 * restorer's end open a write-only open needs no reader), then the
 * restorer's end is closed.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "restore.h"

/* F_SETPIPE_SZ of fd (what: "the pipe", "the FIFO PATH") to first's
 * recorded capacity, if it differs */
static void size_pipe(int fd, const struct rfd *first, const char *what)
{
	uint32_t want = first->f->u.pipe.pipe_size;

	if (want && fcntl(fd, F_GETPIPE_SZ) != (int)want && fcntl(fd, F_SETPIPE_SZ, (int)want) < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)first->f->fd, "fd %d: cannot size %s to %u bytes: %s",
			 first->f->fd, what, want, rst_strerror(errno));
}

/* with_data's bytes written into fd, a non-blocking write end: data that
 * does not fit is an error, not a hang */
static void put_back(int fd, const struct rfd *with_data, const char *what)
{
	for (uint32_t off = 0; off < with_data->data_len;) {
		ssize_t w = write(fd, with_data->data + off, with_data->data_len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			rst_fail(RRC_RST_FD, errno, (uint32_t)with_data->f->fd, "fd %d: cannot put %u bytes back into %s: %s",
				 with_data->f->fd, with_data->data_len, what, w < 0 ? rst_strerror(errno) : "short write");
		off += (uint32_t)w;
	}
}

void restore_pipe(struct fd_ctx *x, struct rfd *first)
{
	struct chain *c = x->c;
	const struct rfd *with_data = NULL;
	int have_read = 0, p[2];
	uint64_t ino = first->f->ino;

	for (size_t i = 0; i < c->nr_fds; i++) {
		const struct rfd *r = &c->fds[i];

		if (r->f->kind != RRC_FD_PIPE || r->f->ino != ino)
			continue;
		if ((r->f->file_flags & O_ACCMODE) == O_RDONLY)
			have_read = 1;
		if (r->data_len && !with_data)
			with_data = r;
	}
	if (pipe2(p, O_CLOEXEC) < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)first->f->fd, "fd %d: pipe2 failed: %s",
			 first->f->fd, rst_strerror(errno));
	p[0] = fd_high(x, p[0]);
	p[1] = fd_high(x, p[1]);
	size_pipe(p[1], first, "the pipe");
	if (with_data && have_read) {
		fcntl(p[1], F_SETFL, O_NONBLOCK);
		put_back(p[1], with_data, "the pipe");
		fcntl(p[1], F_SETFL, 0);
	} else if (with_data) {
		rst_log("fd %d: %u bytes in a pipe without reader are dropped", with_data->f->fd,
			with_data->data_len);
	}
	for (size_t i = 0; i < c->nr_fds; i++) {
		struct rfd *r = &c->fds[i];
		int end;

		if (r->f->kind != RRC_FD_PIPE || r->f->ino != ino)
			continue;
		end = (r->f->file_flags & O_ACCMODE) == O_RDONLY ? p[0] : p[1];
		if (dup3(end, r->f->fd, O_CLOEXEC) < 0)
			rst_fail(RRC_RST_FD, errno, (uint32_t)r->f->fd, "fd %d: dup3 failed: %s", r->f->fd,
				 rst_strerror(errno));
		r->done = 1;
	}
	close(p[0]);
	close(p[1]);
}

/* r's FIFO: the same inode at the same path */
static int same_fifo(const struct rfd *a, const struct rfd *b)
{
	return b->f->kind == RRC_FD_FIFO && b->f->ino == a->f->ino && !strcmp(a->path, b->path);
}

void restore_fifo(struct fd_ctx *x, struct rfd *first)
{
	struct chain *c = x->c;
	const struct rfd *with_data = NULL;
	int own = open(first->path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
	struct stat st;

	if (own < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)first->f->fd, "fd %d: cannot open the FIFO %s: %s", first->f->fd,
			 first->path, rst_strerror(errno));
	if (fstat(own, &st) < 0 || !S_ISFIFO(st.st_mode))
		rst_fail(RRC_RST_FD, 0, (uint32_t)first->f->fd, "fd %d: %s is not a FIFO here", first->f->fd,
			 first->path);
	own = fd_high(x, own);
	char what[PATH_MAX + 16];
	snprintf(what, sizeof(what), "the FIFO %s", first->path);
	size_pipe(own, first, what);
	for (size_t i = 0; i < c->nr_fds; i++)
		if (same_fifo(first, &c->fds[i]) && c->fds[i].data_len && !with_data)
			with_data = &c->fds[i];
	if (with_data)
		put_back(own, with_data, what);
	for (size_t i = 0; i < c->nr_fds; i++) {
		struct rfd *r = &c->fds[i];

		if (!same_fifo(first, r))
			continue;
		int fd = open(r->path, (int)(r->f->file_flags & O_ACCMODE) | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0)
			rst_fail(RRC_RST_FD, errno, (uint32_t)r->f->fd, "fd %d: cannot open the FIFO %s again: %s",
				 r->f->fd, r->path, rst_strerror(errno));
		fd_place(x, fd_high(x, fd), r);
		r->done = 1;
	}
	if (with_data)
		rst_log("FIFO %s: %u bytes put back", first->path, with_data->data_len);
	close(own);
}
