/* SPDX-License-Identifier: MIT
 *
 * Ghost files (issue 16 §4, CRIU's term): a regular file deleted while
 * the process holds it open, and a memfd. No path leads to them any more,
 * so their contents go into the image, read in the pause (the process is
 * parked: nothing writes them meanwhile) into the record's data; the
 * restorer makes a memfd, or an O_TMPFILE in the deleted file's
 * directory, with those contents (restore/files-ghost.c). A memfd's
 * seals are carried (F_GET_SEALS). A write-only fd's contents cannot
 * be read through it and are not carried, only its size, at any size
 * (restored as a hole: a log deleted by a rotation the server was not
 * told of). Refused by name: readable contents over RRC_GHOST_MAX
 * (1 MiB), a deleted directory or special file, locks on a ghost, and two open files of one ghost that are not dups of one
 * another (a restore would make two files of it). A private mapping of
 * a deleted file becomes anonymous memory instead (maps-deleted.c).
 * ASYNC-SIGNAL-SAFE (the pause; the pause helper when there is one).
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include "rrc_lib.h"

#ifndef F_GET_SEALS
#define F_GET_SEALS 1034
#endif

static int refuse(int fd, const char *why)
{
	rrc_set_err(RRC_ERR_UNSUPPORTED_FD, 0, "fd ", fd, why);
	return -1;
}

int rrc_capture_ghost(struct rrc_fd *f, int fd)
{
	struct rrc_scratch *s = rrc_s;
	struct stat st;
	long r = rrc_sys_fstat(fd, &st);
	if (r < 0) {
		rrc_set_err(RRC_ERR_UNSUPPORTED_FD, (int)-r, "fstat failed on fd ", fd, 0);
		return -1;
	}
	if (!S_ISREG(st.st_mode))
		return refuse(fd, " is a deleted directory or special file, which a checkpoint cannot describe");
	/* write-only (a log the server appends to, deleted by a rotation it
	 * was not told of): its contents cannot be read through the fd and
	 * nothing else can open the file, so only its size is carried, at
	 * any size; the restore makes a file of that size with nothing
	 * written (a hole), which the fd's writes, offsets and fstat cannot
	 * tell from the original */
	int write_only = (f->file_flags & O_ACCMODE) == O_WRONLY;
	if ((uint64_t)st.st_size > RRC_GHOST_MAX && !write_only)
		return refuse(fd, " is a deleted file or memfd of more than 1 MiB open for reading, whose contents an image does not "
			      "carry (a write-only one is carried by its size)");
	/* locks on it: the record's data is its contents */
	r = rrc_read_fdinfo(fd, s->textbuf, sizeof s->textbuf - 1);
	if (r > 0) {
		s->textbuf[r] = 0;
		if (rrc_fdinfo_field(s->textbuf, "lock:"))
			return refuse(fd, " is a deleted file or memfd holding file locks, which an image does not carry for it");
	}
	const char *path = (const char *)(f + 1);
	f->u.ghost.size = (uint64_t)st.st_size;
	f->u.ghost.memfd = f->path_len >= 7 && !rrc_strncmp(path, "/memfd:", 7);
	long seals = f->u.ghost.memfd ? rrc_sys_fcntl(fd, F_GET_SEALS, 0) : 0;
	f->u.ghost.seals = seals < 0 ? 0 : (uint32_t)seals;
	long pos = rrc_sys_lseek(fd, 0, 1 /* SEEK_CUR */);
	f->pos = pos < 0 ? 0 : (uint64_t)pos;
	if (write_only)
		return 0;
	/* the contents, after the path (the record is the last) */
	uint32_t size = (uint32_t)st.st_size, padded;
	uint8_t *dst = rrc_fd_data_reserve(size, &padded, "fd buffer full at the contents of fd ", fd);
	if (!dst)
		return -1;
	uint32_t got = 0;
	while (got < size) {
		long n = rrc_sys_pread(fd, dst + got, size - got, (long)got);
		if (n == -EINTR)
			continue;
		if (n <= 0) {
			rrc_set_err(RRC_ERR_UNSUPPORTED_FD, n < 0 ? (int)-n : 0, "cannot read the contents of deleted file or memfd fd ",
				    fd, 0);
			return -1;
		}
		got += (uint32_t)n;
	}
	f->data_len = padded;
	return 0;
}

int rrc_ghosts_check(void)
{
	struct rrc_scratch *s = rrc_s;
	for (uint64_t a = 0; a < s->fdbuf_len;) {
		const struct rrc_fd *fa = (const struct rrc_fd *)(s->fdbuf + a);
		a += rrc_fd_rec_size(fa);
		if (fa->kind != RRC_FD_GHOST)
			continue;
		for (uint64_t b = a; b < s->fdbuf_len;) {
			const struct rrc_fd *fb = (const struct rrc_fd *)(s->fdbuf + b);
			b += rrc_fd_rec_size(fb);
			if (fb->kind == RRC_FD_GHOST && fb->ino == fa->ino) {
				rrc_set_err(RRC_ERR_UNSUPPORTED_FD, 0, "fds ", fa->fd, 0);
				size_t l = rrc_strlen(s->err_msg);
				l = rrc_bput(s->err_msg, sizeof s->err_msg, l, " and ");
				l = rrc_bput_u64(s->err_msg, sizeof s->err_msg, l, (uint64_t)fb->fd);
				rrc_bput(s->err_msg, sizeof s->err_msg, l,
					 " are two open files of one deleted file or memfd, which a restore would make two files");
				return -1;
			}
		}
	}
	return 0;
}
