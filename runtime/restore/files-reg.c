/* SPDX-License-Identifier: MIT
 *
 * rrc-restore phase 1: regular files, directories and character devices,
 * reopened by path (CRIU's files-reg.c). The open flags are the recorded
 * F_GETFL minus those that would change the file (O_CREAT, O_TRUNC,
 * O_EXCL) and O_ASYNC, which open() would show without arming it (no
 * fasync call): the blob sets it by F_SETFL once its owner is set
 * (fds.c fown_check); the offset is set back with lseek. The file's contents are not
 * part of the image: the file system is the container's (DESIGN §2.3
 * ships file writes separately).
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "restore.h"

void restore_reg(struct fd_ctx *x, struct rfd *r)
{
	const struct rrc_fd *f = r->f;
	int flags = (int)f->file_flags & ~(O_CREAT | O_TRUNC | O_EXCL | O_ASYNC);
	size_t plen = strlen(r->path);
	struct stat st;
	int fd;

	if (!plen || r->path[0] != '/')
		rst_fail(RRC_RST_FD, 0, (uint32_t)f->fd, "fd %d: no absolute path recorded (\"%s\")",
			 f->fd, r->path);
	if (path_is_deleted(r->path))
		rst_fail(RRC_RST_FD, ENOENT, (uint32_t)f->fd,
			 "fd %d: %s was deleted before the checkpoint; it cannot be reopened", f->fd, r->path);
	if (f->kind == RRC_FD_DIR)
		flags |= O_DIRECTORY;
	fd = open(r->path, flags | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)f->fd, "fd %d: cannot open %s: %s", f->fd, r->path,
			 rst_strerror(errno));
	if (fstat(fd, &st) == 0) {
		if (f->kind == RRC_FD_REG && !S_ISREG(st.st_mode))
			rst_fail(RRC_RST_FD, 0, (uint32_t)f->fd, "fd %d: %s is no longer a regular file",
				 f->fd, r->path);
		if (f->kind == RRC_FD_CHR && (!S_ISCHR(st.st_mode) || (f->rdev && st.st_rdev != f->rdev)))
			rst_fail(RRC_RST_FD, 0, (uint32_t)f->fd,
				 "fd %d: %s is not the character device it was", f->fd, r->path);
		if (f->kind == RRC_FD_REG && f->ino && st.st_ino != f->ino)
			rst_log("warning: fd %d: %s is another file than at the checkpoint (inode %llu, was %llu)",
				f->fd, r->path, (unsigned long long)st.st_ino, (unsigned long long)f->ino);
	}
	if ((f->kind == RRC_FD_REG || f->kind == RRC_FD_DIR) && !(f->file_flags & O_PATH)) {
		if (lseek(fd, (off_t)f->pos, SEEK_SET) < 0)
			rst_fail(RRC_RST_FD, errno, (uint32_t)f->fd, "fd %d: cannot seek %s to %llu: %s",
				 f->fd, r->path, (unsigned long long)f->pos, rst_strerror(errno));
	}
	fd_place(x, fd_high(x, fd), r);
}
