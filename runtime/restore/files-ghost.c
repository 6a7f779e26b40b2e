/* SPDX-License-Identifier: MIT
 *
 * rrc-restore phase 1: ghost files (RRC_FD_GHOST, runtime/lib/files-ghost.c):
 * a memfd is made again by memfd_create with its name and seals, a file
 * deleted while open as an O_TMPFILE in the directory it was deleted from
 * (no name, as before; the directory must exist here); either gets the
 * image's contents (a write-only one its size only: a hole), then the access mode it was open with (reopened
 * through /proc/self/fd), O_APPEND, and its offset. O_NONBLOCK follows with
 * the other fds' (fds.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "restore.h"

#ifndef F_ADD_SEALS
#define F_ADD_SEALS 1033
#endif
#ifndef F_SEAL_SEAL
#define F_SEAL_SEAL 0x0001
#endif

void restore_ghost(struct fd_ctx *x, struct rfd *r)
{
	const struct rrc_fd *f = r->f;
	uint64_t size = f->u.ghost.size;
	char name[RRC_PATH_MAX];
	int fd;

	/* a write-only one carries no contents (runtime/lib/files-ghost.c) */
	int write_only = (f->file_flags & O_ACCMODE) == O_WRONLY;
	if (write_only ? r->data_len != 0 : (size > RRC_GHOST_MAX || size > r->data_len))
		rst_fail(RRC_RST_IMAGE, 0, (uint32_t)f->fd, "fd %d: a %sghost file of %llu bytes, the record holds %u",
			 f->fd, write_only ? "write-only " : "", (unsigned long long)size, r->data_len);
	snprintf(name, sizeof name, "%s", r->path);
	path_cut_deleted(name);
	if (f->u.ghost.memfd) {
		unsigned flags = MFD_CLOEXEC | (f->u.ghost.seals & F_SEAL_SEAL ? 0 : MFD_ALLOW_SEALING);
		fd = memfd_create(name + 7 /* "/memfd:" */, flags);
		if (fd < 0)
			rst_fail(RRC_RST_FD, errno, (uint32_t)f->fd, "fd %d: memfd_create(%s) failed: %s", f->fd,
				 name + 7, rst_strerror(errno));
	} else {
		char *slash = strrchr(name, '/');
		if (slash == name)
			slash[1] = 0;
		else if (slash)
			*slash = 0;
		fd = open(name, O_TMPFILE | O_RDWR | O_CLOEXEC, f->mode & 07777);
		if (fd < 0)
			rst_fail(RRC_RST_FD, errno, (uint32_t)f->fd,
				 "fd %d: cannot make the deleted file %s again (O_TMPFILE in %s): %s", f->fd, r->path, name,
				 rst_strerror(errno));
	}
	if (write_only && ftruncate(fd, (off_t)size) < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)f->fd, "fd %d: cannot size %s to %llu bytes: %s", f->fd, r->path,
			 (unsigned long long)size, rst_strerror(errno));
	for (uint64_t off = 0; off < size && !write_only;) {
		ssize_t w = pwrite(fd, r->data + off, size - off, (off_t)off);
		if (w <= 0)
			rst_fail(RRC_RST_FD, errno, (uint32_t)f->fd, "fd %d: cannot write the contents of %s: %s", f->fd,
				 r->path, w < 0 ? rst_strerror(errno) : "short write");
		off += (uint64_t)w;
	}
	if (f->u.ghost.memfd && (f->u.ghost.seals & ~F_SEAL_SEAL) &&
	    fcntl(fd, F_ADD_SEALS, f->u.ghost.seals) < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)f->fd, "fd %d: cannot seal %s again (seals %#x): %s", f->fd,
			 r->path, f->u.ghost.seals, rst_strerror(errno));
	int acc = (int)(f->file_flags & O_ACCMODE);
	if (acc != O_RDWR) {
		char self[64];
		snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
		int again = open(self, acc | O_CLOEXEC);
		if (again < 0)
			rst_fail(RRC_RST_FD, errno, (uint32_t)f->fd, "fd %d: cannot open %s again for its access mode: %s",
				 f->fd, r->path, rst_strerror(errno));
		close(fd);
		fd = again;
	}
	if ((f->file_flags & O_APPEND) && fcntl(fd, F_SETFL, O_APPEND) < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)f->fd, "fd %d: F_SETFL O_APPEND failed: %s", f->fd,
			 rst_strerror(errno));
	if (lseek(fd, (off_t)f->pos, SEEK_SET) < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)f->fd, "fd %d: lseek to %llu failed: %s", f->fd,
			 (unsigned long long)f->pos, rst_strerror(errno));
	rst_log("fd %d: %s made again with its %llu bytes%s", f->fd, r->path, (unsigned long long)size,
		write_only ? " (write-only: its size, no contents)" : "");
	fd_place(x, fd_high(x, fd), r);
}
