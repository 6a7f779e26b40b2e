/* SPDX-License-Identifier: MIT
 *
 * Pipes. The bytes in flight belong to both the running parent and the
 * snapshot, so they are copied in the pause with tee() (which duplicates
 * without consuming) into a library pipe of the same capacity; the
 * snapshot child reads that pipe into the image. The data goes with the
 * first fd of each pipe in fd order (image.h), so each pipe inode is
 * captured once. A FIFO (a named pipe, RRC_FD_FIFO) is captured the same
 * way, once its path is checked to still name it: the restorer opens it
 * there again.
 * ASYNC-SIGNAL-SAFE.
 */
#include <fcntl.h>
#include <errno.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include "rrc_lib.h"
#include "lib-fds.h"

#ifndef F_GETPIPE_SZ
#define F_SETPIPE_SZ 1031
#define F_GETPIPE_SZ 1032
#endif

/* An earlier record of the same pipe (FIFOs: the same inode at the same
 * path; pipefs and a disk's inode numbers are apart by kind). */
static int pipe_seen(const struct rrc_fd *self)
{
	struct rrc_scratch *s = rrc_s;
	for (uint64_t off = 0; off < s->fdbuf_len;) {
		const struct rrc_fd *f = (const struct rrc_fd *)(s->fdbuf + off);
		if (f == self)
			break;
		if (f->kind == self->kind && f->ino == self->ino && f->path_len == self->path_len &&
		    rrc_memeq(f + 1, self + 1, f->path_len))
			return 1;
		off += rrc_fd_rec_size(f);
	}
	return 0;
}

int rrc_capture_pipe(struct rrc_fd *f, int fd)
{
	struct rrc_scratch *s = rrc_s;
	long sz = rrc_sys_fcntl(fd, F_GETPIPE_SZ, 0);
	f->u.pipe.pipe_size = sz > 0 ? (uint32_t)sz : 65536;
	if (pipe_seen(f))
		return 0;

	/* a readable end of this pipe: the fd itself, or a new one through /proc */
	int rfd = fd, opened = 0;
	if ((f->file_flags & O_ACCMODE) == O_WRONLY) {
		char p[64];
		rrc_proc_path(p, sizeof p, "fd", fd);
		long r = rrc_sys_openat(AT_FDCWD, p, O_RDONLY | O_NONBLOCK | O_CLOEXEC, 0);
		if (r < 0) {
			rrc_set_err(RRC_ERR_UNSUPPORTED_FD, (int)-r, "cannot open a read end of the pipe at fd ", fd, 0);
			return -1;
		}
		rfd = (int)r;
		opened = 1;
	}
	int avail = 0;
	long r = rrc_sys_ioctl(rfd, FIONREAD, &avail);
	if (r < 0 || avail <= 0) {
		if (opened)
			rrc_libfd_close(rfd);
		return 0;
	}
	if (s->nr_libpipes >= RRC_MAX_LIBPIPES) {
		if (opened)
			rrc_libfd_close(rfd);
		rrc_set_err(RRC_ERR_UNSUPPORTED_FD, 0, "too many pipes holding data (fd ", fd, ")");
		return -1;
	}
	int p[2];
	r = rrc_sys_pipe2(p, O_CLOEXEC | O_NONBLOCK);
	if (r < 0)
		goto fail;
	/* register before anything can fail, so cleanup closes it */
	s->libpipes[s->nr_libpipes].rfd = p[0];
	s->libpipes[s->nr_libpipes].wfd = p[1];
	s->libpipes[s->nr_libpipes].app_fd = fd;
	s->libpipes[s->nr_libpipes].len = 0;
	s->nr_libpipes++;
	if (rrc_sys_fcntl(p[1], F_SETPIPE_SZ, f->u.pipe.pipe_size) < 0 && avail > 65536) {
		r = -ENOMEM;
		goto fail;
	}
	uint32_t got = 0;
	while (got < (uint32_t)avail) {
		r = rrc_sys_tee(rfd, p[1], (size_t)avail - got, 2 /* SPLICE_F_NONBLOCK */);
		if (r <= 0)
			break;
		got += (uint32_t)r;
		/* tee copies from the start of the pipe each time: one call
		 * normally takes everything; stop if it did not move forward */
		break;
	}
	if (got != (uint32_t)avail) {
		r = r < 0 ? r : -EIO;
		goto fail;
	}
	s->libpipes[s->nr_libpipes - 1].len = got;
	f->u.pipe.has_data = 1;
	f->data_len = got;
	if (opened)
		rrc_libfd_close(rfd);
	return 0;
fail:
	if (opened)
		rrc_libfd_close(rfd);
	rrc_set_err(RRC_ERR_UNSUPPORTED_FD, (int)-r, "cannot copy the contents of the pipe at fd ", fd, 0);
	return -1;
}

int rrc_capture_fifo(struct rrc_fd *f, int fd, const char *link)
{
	struct stat st;
	if (rrc_sys_fstatat(AT_FDCWD, link, &st, 0) < 0 || !S_ISFIFO(st.st_mode) || st.st_ino != f->ino) {
		rrc_set_err(RRC_ERR_UNSUPPORTED_FD, 0, "fd ", fd, " is a FIFO no longer at its path (");
		size_t l = rrc_strlen(rrc_s->err_msg);
		l = rrc_bput(rrc_s->err_msg, sizeof rrc_s->err_msg, l, link);
		rrc_bput(rrc_s->err_msg, sizeof rrc_s->err_msg, l, "): a restore would open another one");
		return -1;
	}
	f->kind = RRC_FD_FIFO;
	return rrc_capture_pipe(f, fd);
}
