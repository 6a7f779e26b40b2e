/* SPDX-License-Identifier: MIT
 *
 * rrc-restore phase 1: the file locks of regular files and directories
 * (a REG or DIR record's data, image.h struct rrc_file_lock; captured by
 * runtime/lib/file-locks.c). Checked before anything changes; taken last,
 * once every fd is in place and the executable is open: closing any fd of
 * a file drops every POSIX lock the process holds on it (fcntl(2)), and
 * placing fds closes temporary numbers. flock and OFD locks belong to the
 * open file, so a DUP record, which shares it, takes nothing itself.
 * Non-blocking: a lock another process holds now fails the restore,
 * naming it. A lease (F_SETLEASE) is the open file's too; the restorer
 * takes it as its owner, and the restored process keeps its pid.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include "restore.h"

static const struct rrc_file_lock *locks_of(const struct rfd *r, size_t *n)
{
	*n = 0;
	if ((r->f->kind != RRC_FD_REG && r->f->kind != RRC_FD_DIR) || !r->data_len)
		return 0;
	*n = r->data_len / sizeof(struct rrc_file_lock);
	return (const struct rrc_file_lock *)r->data;
}

static const char *kind_name(uint32_t k)
{
	return k == RRC_LOCK_FLOCK ? "flock" : k == RRC_LOCK_POSIX ? "POSIX" : k == RRC_LOCK_OFD ? "OFD" :
	       k == RRC_LOCK_LEASE ? "lease" : "?";
}

void locks_check(const struct chain *c)
{
	for (size_t i = 0; i < c->nr_fds; i++) {
		const struct rfd *r = &c->fds[i];
		size_t n;
		const struct rrc_file_lock *l = locks_of(r, &n);
		if ((r->f->kind == RRC_FD_REG || r->f->kind == RRC_FD_DIR) &&
		    (r->data_len % sizeof *l || n > RRC_LOCKS_PER_FD))
			rst_fail(RRC_RST_IMAGE, 0, (uint32_t)r->f->fd,
				 "fd %d: %u bytes of file locks, not a whole number of at most %d records",
				 r->f->fd, r->data_len, RRC_LOCKS_PER_FD);
		for (size_t k = 0; k < n; k++)
			if (l[k].kind < RRC_LOCK_FLOCK || l[k].kind > RRC_LOCK_LEASE || l[k].type > 1 ||
			    l[k].start < 0 || l[k].len < 0)
				rst_fail(RRC_RST_IMAGE, 0, (uint32_t)r->f->fd,
					 "fd %d: file lock %zu is malformed (kind %u, type %u, start %lld, length %lld)",
					 r->f->fd, k, l[k].kind, l[k].type, (long long)l[k].start, (long long)l[k].len);
	}
}

void locks_restore(const struct chain *c)
{
	for (size_t i = 0; i < c->nr_fds; i++) {
		const struct rfd *r = &c->fds[i];
		size_t n;
		const struct rrc_file_lock *l = locks_of(r, &n);
		for (size_t k = 0; k < n; k++) {
			int fd = r->f->fd, rc;
			if (l[k].kind == RRC_LOCK_FLOCK) {
				rc = flock(fd, (l[k].type ? LOCK_EX : LOCK_SH) | LOCK_NB);
			} else if (l[k].kind == RRC_LOCK_LEASE) {
				rc = fcntl(fd, F_SETLEASE, l[k].type ? F_WRLCK : F_RDLCK);
			} else {
				struct flock fl = { .l_type = (short)(l[k].type ? F_WRLCK : F_RDLCK), .l_whence = SEEK_SET,
						    .l_start = l[k].start, .l_len = l[k].len };
				rc = fcntl(fd, l[k].kind == RRC_LOCK_OFD ? F_OFD_SETLK : F_SETLK, &fl);
			}
			if (rc < 0)
				rst_fail(RRC_RST_FD, errno, (uint32_t)fd,
					 "fd %d (%s): cannot take its %s %s lock (bytes %lld, length %lld, 0: to the end) "
					 "again: %s%s", fd, r->path, kind_name(l[k].kind), l[k].type ? "write" : "read",
					 (long long)l[k].start, (long long)l[k].len, rst_strerror(errno),
					 errno == EAGAIN || errno == EWOULDBLOCK ? " (another process holds a conflicting lock)" : "");
			rst_log("fd %d: %s %s lock taken again", fd, kind_name(l[k].kind), l[k].type ? "write" : "read");
		}
	}
}
