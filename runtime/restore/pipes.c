/* SPDX-License-Identifier: MIT
 *
 * rrc-restore phase 1: pipes. The ends of one pipe share the inode number
 * recorded in rrc_fd.ino; the bytes in flight (captured with tee by the
 * library, so the application's pipe kept them) are in the data of one
 * end's record. One pipe is made per inode, sized as recorded, refilled,
 * and every fd of that inode gets the end of its access mode. An end
 * absent from the image is closed: the reader then sees EOF after the data,
 * the writer EPIPE, as they would have had the other side gone.
 */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include "restore.h"

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
	if (first->f->u.pipe.pipe_size) {
		int cur = fcntl(p[1], F_GETPIPE_SZ);

		if (cur != (int)first->f->u.pipe.pipe_size &&
		    fcntl(p[1], F_SETPIPE_SZ, (int)first->f->u.pipe.pipe_size) < 0)
			rst_fail(RRC_RST_FD, errno, (uint32_t)first->f->fd,
				 "fd %d: cannot size the pipe to %u bytes: %s", first->f->fd,
				 first->f->u.pipe.pipe_size, rst_strerror(errno));
	}
	if (with_data && have_read) {
		const uint8_t *d = with_data->data;
		uint32_t left = with_data->data_len;

		/* non-blocking: data that does not fit is an error, not a hang */
		fcntl(p[1], F_SETFL, O_NONBLOCK);
		while (left) {
			ssize_t w = write(p[1], d, left);
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0)
				rst_fail(RRC_RST_FD, errno, (uint32_t)with_data->f->fd,
					 "fd %d: cannot put %u bytes back into the pipe: %s",
					 with_data->f->fd, with_data->data_len, rst_strerror(errno));
			d += w;
			left -= (uint32_t)w;
		}
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
