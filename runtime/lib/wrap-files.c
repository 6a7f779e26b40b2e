/* SPDX-License-Identifier: MIT
 *
 * Interposed libc entry points that change files, journaling every change
 * below the data directory (files-journal.c, FILEOPS in rrc/image.h):
 *   open open64 __open_2 __open64_2 openat openat64 __openat_2 __openat64_2
 *   creat creat64                         CREATE / TRUNCATE, fd tracked
 *   write pwrite pwrite64 writev pwritev pwritev64 pwritev2 pwritev64v2
 *                                         WRITE (offset actually written)
 *   ftruncate ftruncate64 truncate truncate64           TRUNCATE
 *   fallocate fallocate64 posix_fallocate posix_fallocate64  TRUNCATE / ZERO
 *   rename renameat renameat2, link linkat, symlink symlinkat
 *   unlink unlinkat, mkdir mkdirat, rmdir
 *   close dup dup2 dup3 fcntl fcntl64 (F_DUPFD*)         the fd table
 *   fopen fopen64 fdopen (freopen freopen64 refused into the data dir)
 * glibc's stdio writes through its internal __write, which no preload can
 * interpose, so a data-dir FILE* is a fopencookie() stream whose callbacks
 * call the wrappers above; its _fileno is the real fd, so fileno() and
 * fsync(fileno(fp)) work (Redis SAVE: fopen, fwrite, fflush, fsync, fclose,
 * rename).
 *
 * Each change runs inside the hook guard and the journal lock: the real
 * call, then its record (see files-journal.c for why). Calls on anything
 * outside the data directory cost one bitmap test (fd calls) or one
 * lexical path resolution (path calls) and go straight to libc.
 *
 * Not covered (documented in architecture.md): raw syscalls, io_uring
 * (refused at dump), sendfile/splice/copy_file_range into a data file,
 * writable shared mappings (refused), directories moved in or out of the
 * data directory (the journal breaks: every later dump is refused), chmod/
 * chown/utimes (metadata is not journaled), symlinks inside the data
 * directory used as path components by path calls.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include "rrc_lib.h"
#include "rr-fds.h"
#include "lib-fds.h"
#include "rr-log.h"
#include "rrc/rrlog.h"

#define REAL(name) real_##name
#define RESOLVE(name) do { if (!REAL(name)) REAL(name) = dlsym(RTLD_NEXT, #name); } while (0)

static int (*real_open)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static ssize_t (*real_pwritev)(int, const struct iovec *, int, off_t);
static ssize_t (*real_pwritev2)(int, const struct iovec *, int, off_t, int);
static int (*real_ftruncate)(int, off_t);
static int (*real_truncate)(const char *, off_t);
static int (*real_fallocate)(int, int, off_t, off_t);
static int (*real_posix_fallocate)(int, off_t, off_t);
static int (*real_renameat2)(int, const char *, int, const char *, unsigned);
static int (*real_renameat)(int, const char *, int, const char *);
static int (*real_linkat)(int, const char *, int, const char *, int);
static int (*real_symlinkat)(const char *, int, const char *);
static int (*real_unlinkat)(int, const char *, int);
static int (*real_mkdirat)(int, const char *, mode_t);
static int (*real_close)(int);
static int (*real_dup)(int);
static int (*real_dup3)(int, int, int);
static int (*real_dup2)(int, int);
static int (*real_fcntl)(int, int, ...);
static FILE *(*real_fopen)(const char *, const char *);
static FILE *(*real_fdopen)(int, const char *);
static FILE *(*real_freopen)(const char *, const char *, FILE *);

void rrc_wrap_files_resolve(void) RRC_HIDDEN;
void rrc_wrap_files_resolve(void)
{
	RESOLVE(open); RESOLVE(openat); RESOLVE(write); RESOLVE(pwrite); RESOLVE(writev);
	RESOLVE(pwritev); RESOLVE(pwritev2); RESOLVE(ftruncate); RESOLVE(truncate);
	RESOLVE(fallocate); RESOLVE(posix_fallocate); RESOLVE(renameat2); RESOLVE(renameat);
	RESOLVE(linkat); RESOLVE(symlinkat); RESOLVE(unlinkat); RESOLVE(mkdirat); RESOLVE(close);
	RESOLVE(dup); RESOLVE(dup3); RESOLVE(dup2); RESOLVE(fcntl); RESOLVE(fopen); RESOLVE(fdopen);
	RESOLVE(freopen);
}

/* Path buffers: one per thread would need TLS of 8 KiB; the journal lock
 * is held while they are used, so one static set suffices (recursion from
 * an application signal handler inside a wrapper gets its own frame's
 * copy: the buffers are on the stack). */
#define PBUF (RRC_PATH_MAX + 64)

static inline int on(void) { return rrc_g.active && rrc_fj_enabled(); }

/* ---- open ---- */

static int writable(int flags)
{
	return (flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_TRUNC));
}

/* After a successful open: track the fd if it is a writable data-dir file
 * and journal CREATE / TRUNCATE. Inside the guard and the lock. */
static void opened(int fd, int flags)
{
	char rel[PBUF];
	long rl = writable(flags) ? rrc_fj_fd_relpath(fd, rel, sizeof rel) : -1;
	if (rl <= 0) {
		rrc_fj_fd_set(fd, 0);
		return;
	}
	struct stat st;
	if (rrc_sys_fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		rrc_fj_fd_set(fd, 0);
		return;
	}
	if (flags & O_CREAT)
		rrc_fj_append(RRC_FOP_CREATE, st.st_mode & 07777, rel, (uint32_t)rl, 0, 0, 0, 0);
	if ((flags & O_TRUNC) && (flags & O_ACCMODE) != O_RDONLY)
		rrc_fj_append(RRC_FOP_TRUNCATE, 0, rel, (uint32_t)rl, 0, 0, 0, 0);
	rrc_fj_fd_set(fd, (flags & O_ACCMODE) != O_RDONLY);
}

static int openat_journaled(int dirfd, const char *path, int flags, mode_t mode)
{
	RESOLVE(openat);
	if (!on())
		return real_openat(dirfd, path, flags, mode);
	if (!writable(flags)) {
		/* a read-only fd is never tracked; a new fd number may reuse a
		 * tracked one closed behind our back (close_range, raw close) */
		int fd = real_openat(dirfd, path, flags, mode);
		if (fd >= 0 && rrc_fj_fd_tracked(fd)) {
			rrc_hook_enter();
			rrc_fj_fd_set(fd, 0);
			rrc_hook_leave();
		}
		return fd;
	}
	rrc_hook_enter();
	rrc_fj_lock();
	int fd = real_openat(dirfd, path, flags, mode);
	int e = errno;
	if (fd >= 0)
		opened(fd, flags);
	rrc_fj_unlock();
	rrc_hook_leave();
	errno = e;
	return fd;
}

/* Every open: in the fd table's order while recording (rr-fds.c). */
static int do_openat(int dirfd, const char *path, int flags, mode_t mode)
{
	int t = rrc_fdt_begin();
	int fd = openat_journaled(dirfd, path, flags, mode);
	if (fd >= 0)
		rrc_fdt_made(fd, 0);
	rrc_fdt_end_fd(t, RRC_FDOP_OPEN, fd < 0 ? -errno : fd, fd, -1);
	return fd;
}

static mode_t va_mode(int flags, va_list ap)
{
	return (flags & O_CREAT) || (flags & __O_TMPFILE) == __O_TMPFILE ? va_arg(ap, mode_t) : 0;
}

int open(const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t m = va_mode(flags, ap);
	va_end(ap);
	return do_openat(AT_FDCWD, path, flags, m);
}

int open64(const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t m = va_mode(flags, ap);
	va_end(ap);
	return do_openat(AT_FDCWD, path, flags, m);
}

int openat(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t m = va_mode(flags, ap);
	va_end(ap);
	return do_openat(dirfd, path, flags, m);
}

int openat64(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t m = va_mode(flags, ap);
	va_end(ap);
	return do_openat(dirfd, path, flags, m);
}

/* _FORTIFY_SOURCE entry points (flags without O_CREAT) */
int __open_2(const char *path, int flags) { return do_openat(AT_FDCWD, path, flags, 0); }
int __open64_2(const char *path, int flags) { return do_openat(AT_FDCWD, path, flags, 0); }
int __openat_2(int dirfd, const char *path, int flags) { return do_openat(dirfd, path, flags, 0); }
int __openat64_2(int dirfd, const char *path, int flags) { return do_openat(dirfd, path, flags, 0); }
int creat(const char *path, mode_t mode) { return do_openat(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode); }
int creat64(const char *path, mode_t mode) { return do_openat(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode); }

/* ---- writes ---- */

/* Journals a completed write of n bytes (from iov) on tracked fd at off;
 * off < 0: the write moved the file offset, which is now at its end. */
static void wrote(int fd, const struct iovec *iov, int cnt, ssize_t n, long off)
{
	if (n <= 0)
		return;
	char rel[PBUF];
	long rl = rrc_fj_fd_relpath(fd, rel, sizeof rel);
	if (rl <= 0)
		return; /* unlinked meanwhile, or the bit was stale */
	if (off < 0) {
		long cur = rrc_sys_lseek(fd, 0, SEEK_CUR);
		if (cur < 0)
			return rrc_fj_break("cannot find where a write to a data-directory file went");
		off = cur - n;
	}
	rrc_fj_append_iov(RRC_FOP_WRITE, 0, rel, (uint32_t)rl, iov, cnt, (uint64_t)n, (uint64_t)off, 0);
}

/* pwrite on an O_APPEND fd appends (Linux): the offset is the size before. */
static long pos_for_pwrite(int fd, off_t off)
{
	long fl = rrc_sys_fcntl(fd, F_GETFL, 0);
	if (fl >= 0 && (fl & O_APPEND)) {
		struct stat st;
		if (rrc_sys_fstat(fd, &st) < 0)
			return -1;
		return st.st_size;
	}
	return off;
}

ssize_t write(int fd, const void *buf, size_t n)
{
	RESOLVE(write);
	if (!rrc_fj_fd_tracked(fd)) {
		struct iovec v = { (void *)buf, n };
		ssize_t r;
		if (rrc_out_replayed(fd, &v, 1, &r)) /* a socket, in replay: suppressed, checked */
			return r;
		int t = rrc_out_begin(fd); /* a socket, while recording: an output */
		r = real_write(fd, buf, n);
		return rrc_out_end(t, fd, &v, 1, r);
	}
	rrc_hook_enter();
	rrc_fj_lock();
	ssize_t r = real_write(fd, buf, n);
	int e = errno;
	struct iovec v = { (void *)buf, r > 0 ? (size_t)r : 0 };
	wrote(fd, &v, 1, r, -1);
	rrc_fj_unlock();
	rrc_hook_leave();
	errno = e;
	return r;
}

ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
	RESOLVE(writev);
	if (!rrc_fj_fd_tracked(fd)) {
		ssize_t r;
		if (cnt >= 0 && rrc_out_replayed(fd, iov, cnt, &r))
			return r;
		int t = rrc_out_begin(fd);
		r = real_writev(fd, iov, cnt);
		return rrc_out_end(t, fd, iov, cnt, r);
	}
	rrc_hook_enter();
	rrc_fj_lock();
	ssize_t r = real_writev(fd, iov, cnt);
	int e = errno;
	wrote(fd, iov, cnt, r, -1);
	rrc_fj_unlock();
	rrc_hook_leave();
	errno = e;
	return r;
}

static ssize_t do_pwritev(int fd, const struct iovec *iov, int cnt, off_t off, int flags, int v2)
{
	RESOLVE(pwritev); RESOLVE(pwritev2);
	if (!rrc_fj_fd_tracked(fd))
		return v2 ? real_pwritev2(fd, iov, cnt, off, flags) : real_pwritev(fd, iov, cnt, off);
	rrc_hook_enter();
	rrc_fj_lock();
	/* pwritev2 with offset -1 uses and moves the file offset */
	long at = (v2 && off == -1) ? -1 : pos_for_pwrite(fd, off);
	if (v2 && (flags & RWF_APPEND))
		at = -1;
	ssize_t r = v2 ? real_pwritev2(fd, iov, cnt, off, flags) : real_pwritev(fd, iov, cnt, off);
	int e = errno;
	if (r > 0 && at < 0 && !(v2 && off == -1)) {
		/* RWF_APPEND: the data ended at the (new) size */
		struct stat st;
		if (rrc_sys_fstat(fd, &st) == 0)
			at = st.st_size - r;
		else
			rrc_fj_break("cannot find where a write to a data-directory file went");
	}
	wrote(fd, iov, cnt, r, at);
	rrc_fj_unlock();
	rrc_hook_leave();
	errno = e;
	return r;
}

ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off) { return do_pwritev(fd, iov, cnt, off, 0, 0); }
ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off_t off) { return do_pwritev(fd, iov, cnt, off, 0, 0); }
ssize_t pwritev2(int fd, const struct iovec *iov, int cnt, off_t off, int fl) { return do_pwritev(fd, iov, cnt, off, fl, 1); }
ssize_t pwritev64v2(int fd, const struct iovec *iov, int cnt, off_t off, int fl) { return do_pwritev(fd, iov, cnt, off, fl, 1); }

static ssize_t do_pwrite(int fd, const void *buf, size_t n, off_t off)
{
	RESOLVE(pwrite);
	if (!rrc_fj_fd_tracked(fd))
		return real_pwrite(fd, buf, n, off);
	rrc_hook_enter();
	rrc_fj_lock();
	long at = pos_for_pwrite(fd, off);
	ssize_t r = real_pwrite(fd, buf, n, off);
	int e = errno;
	struct iovec v = { (void *)buf, r > 0 ? (size_t)r : 0 };
	if (at < 0 && r > 0)
		rrc_fj_break("cannot find where a write to a data-directory file went");
	else
		wrote(fd, &v, 1, r, at);
	rrc_fj_unlock();
	rrc_hook_leave();
	errno = e;
	return r;
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) { return do_pwrite(fd, buf, n, off); }
ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off) { return do_pwrite(fd, buf, n, off); }

/* ---- sizes ---- */

static int do_ftruncate(int fd, off_t len)
{
	RESOLVE(ftruncate);
	if (!rrc_fj_fd_tracked(fd))
		return real_ftruncate(fd, len);
	rrc_hook_enter();
	rrc_fj_lock();
	int r = real_ftruncate(fd, len);
	int e = errno;
	char rel[PBUF];
	long rl;
	if (r == 0 && (rl = rrc_fj_fd_relpath(fd, rel, sizeof rel)) > 0)
		rrc_fj_append(RRC_FOP_TRUNCATE, 0, rel, (uint32_t)rl, 0, 0, (uint64_t)len, 0);
	rrc_fj_unlock();
	rrc_hook_leave();
	errno = e;
	return r;
}
int ftruncate(int fd, off_t len) { return do_ftruncate(fd, len); }
int ftruncate64(int fd, off_t len) { return do_ftruncate(fd, len); }

static int do_truncate(const char *path, off_t len)
{
	RESOLVE(truncate);
	char rel[PBUF];
	long rl;
	if (!on() || (rl = rrc_fj_relpath(AT_FDCWD, path, rel, sizeof rel)) <= 0)
		return real_truncate(path, len);
	rrc_hook_enter();
	rrc_fj_lock();
	int r = real_truncate(path, len);
	int e = errno;
	if (r == 0)
		rrc_fj_append(RRC_FOP_TRUNCATE, 0, rel, (uint32_t)rl, 0, 0, (uint64_t)len, 0);
	rrc_fj_unlock();
	rrc_hook_leave();
	errno = e;
	return r;
}
int truncate(const char *path, off_t len) { return do_truncate(path, len); }
int truncate64(const char *path, off_t len) { return do_truncate(path, len); }

/* fallocate changes content only through the size (mode 0 beyond EOF) or
 * by zeroing (PUNCH_HOLE, ZERO_RANGE); COLLAPSE/INSERT_RANGE shift data,
 * which the journal does not describe: refused on data files. */
#ifndef FALLOC_FL_KEEP_SIZE
#define FALLOC_FL_KEEP_SIZE 0x01
#define FALLOC_FL_PUNCH_HOLE 0x02
#define FALLOC_FL_ZERO_RANGE 0x10
#endif
static int do_fallocate(int fd, int mode, off_t off, off_t len, int posix)
{
	RESOLVE(fallocate); RESOLVE(posix_fallocate);
	if (!rrc_fj_fd_tracked(fd))
		return posix ? real_posix_fallocate(fd, off, len) : real_fallocate(fd, mode, off, len);
	if (mode & ~(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE)) {
		errno = EOPNOTSUPP;
		return -1;
	}
	rrc_hook_enter();
	rrc_fj_lock();
	int r = posix ? real_posix_fallocate(fd, off, len) : real_fallocate(fd, mode, off, len);
	int e = errno;
	char rel[PBUF];
	long rl;
	struct stat st;
	if ((posix ? r == 0 : r == 0) && (rl = rrc_fj_fd_relpath(fd, rel, sizeof rel)) > 0) {
		if (mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE))
			rrc_fj_append(RRC_FOP_ZERO, 0, rel, (uint32_t)rl, 0, 0, (uint64_t)off, (uint64_t)len);
		if (rrc_sys_fstat(fd, &st) == 0)
			rrc_fj_append(RRC_FOP_TRUNCATE, 0, rel, (uint32_t)rl, 0, 0, (uint64_t)st.st_size, 0);
		else
			rrc_fj_break("cannot stat a data-directory file after fallocate");
	}
	rrc_fj_unlock();
	rrc_hook_leave();
	errno = e;
	return r;
}
int fallocate(int fd, int mode, off_t off, off_t len) { return do_fallocate(fd, mode, off, len, 0); }
int fallocate64(int fd, int mode, off_t off, off_t len) { return do_fallocate(fd, mode, off, len, 0); }
int posix_fallocate(int fd, off_t off, off_t len) { return do_fallocate(fd, 0, off, len, 1); }
int posix_fallocate64(int fd, off_t off, off_t len) { return do_fallocate(fd, 0, off, len, 1); }

/* ---- names ---- */

static int is_dir_at(int dirfd, const char *path)
{
	struct stat st;
	return rrc_sys_fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
}

static int do_renameat2(int od, const char *op, int nd, const char *np, unsigned flags, int v2)
{
	RESOLVE(renameat2); RESOLVE(renameat);
	char orel[PBUF], nrel[PBUF];
	long ol = on() ? rrc_fj_relpath(od, op, orel, sizeof orel) : -1;
	long nl = on() ? rrc_fj_relpath(nd, np, nrel, sizeof nrel) : -1;
	if (ol <= 0 && nl <= 0)
		return v2 ? real_renameat2(od, op, nd, np, flags) : real_renameat(od, op, nd, np);
	rrc_hook_enter();
	rrc_fj_lock();
	int dir = is_dir_at(od, op);
	int r = v2 ? real_renameat2(od, op, nd, np, flags) : real_renameat(od, op, nd, np);
	int e = errno;
	if (r == 0) {
		if (v2 && (flags & RENAME_EXCHANGE))
			rrc_fj_break("renameat2(RENAME_EXCHANGE) in the data directory is not journaled");
		else if (ol > 0 && nl > 0)
			rrc_fj_append(RRC_FOP_RENAME, 0, orel, (uint32_t)ol, nrel, (uint64_t)nl, 0, 0);
		else if (dir)
			rrc_fj_break("a directory was moved into or out of the data directory (not journaled)");
		else if (ol > 0)
			rrc_fj_append(RRC_FOP_UNLINK, 0, orel, (uint32_t)ol, 0, 0, 0, 0);
		else
			rrc_fj_import_file(nrel, (uint32_t)nl);
	}
	rrc_fj_unlock();
	rrc_hook_leave();
	errno = e;
	return r;
}
int rename(const char *o, const char *n) { return do_renameat2(AT_FDCWD, o, AT_FDCWD, n, 0, 0); }
int renameat(int od, const char *o, int nd, const char *n) { return do_renameat2(od, o, nd, n, 0, 0); }
int renameat2(int od, const char *o, int nd, const char *n, unsigned fl) { return do_renameat2(od, o, nd, n, fl, 1); }

static int do_linkat(int od, const char *op, int nd, const char *np, int flags)
{
	RESOLVE(linkat);
	char orel[PBUF], nrel[PBUF];
	long nl = on() ? rrc_fj_relpath(nd, np, nrel, sizeof nrel) : -1;
	if (nl <= 0)
		return real_linkat(od, op, nd, np, flags);
	long ol = (flags & AT_EMPTY_PATH) && (!op || !*op) ? -1 : rrc_fj_relpath(od, op, orel, sizeof orel);
	rrc_hook_enter();
	rrc_fj_lock();
	int r = real_linkat(od, op, nd, np, flags);
	int e = errno;
	if (r == 0) {
		if (ol > 0 && !(flags & AT_SYMLINK_FOLLOW))
			rrc_fj_append(RRC_FOP_LINK, 0, orel, (uint32_t)ol, nrel, (uint64_t)nl, 0, 0);
		else
			rrc_fj_import_file(nrel, (uint32_t)nl);
	}
	rrc_fj_unlock();
	rrc_hook_leave();
	errno = e;
	return r;
}
int link(const char *o, const char *n) { return do_linkat(AT_FDCWD, o, AT_FDCWD, n, 0); }
int linkat(int od, const char *o, int nd, const char *n, int fl) { return do_linkat(od, o, nd, n, fl); }

static int do_symlinkat(const char *target, int nd, const char *np)
{
	RESOLVE(symlinkat);
	char nrel[PBUF];
	long nl = on() ? rrc_fj_relpath(nd, np, nrel, sizeof nrel) : -1;
	if (nl <= 0)
		return real_symlinkat(target, nd, np);
	rrc_hook_enter();
	rrc_fj_lock();
	int r = real_symlinkat(target, nd, np);
	int e = errno;
	if (r == 0)
		rrc_fj_append(RRC_FOP_SYMLINK, 0, nrel, (uint32_t)nl, target, rrc_strlen(target), 0, 0);
	rrc_fj_unlock();
	rrc_hook_leave();
	errno = e;
	return r;
}
int symlink(const char *t, const char *n) { return do_symlinkat(t, AT_FDCWD, n); }
int symlinkat(const char *t, int nd, const char *n) { return do_symlinkat(t, nd, n); }

static int do_unlinkat(int dfd, const char *path, int flags)
{
	RESOLVE(unlinkat);
	char rel[PBUF];
	long rl = on() ? rrc_fj_relpath(dfd, path, rel, sizeof rel) : -1;
	if (rl <= 0)
		return real_unlinkat(dfd, path, flags);
	rrc_hook_enter();
	rrc_fj_lock();
	int r = real_unlinkat(dfd, path, flags);
	int e = errno;
	if (r == 0)
		rrc_fj_append((flags & AT_REMOVEDIR) ? RRC_FOP_RMDIR : RRC_FOP_UNLINK, 0, rel, (uint32_t)rl,
			      0, 0, 0, 0);
	rrc_fj_unlock();
	rrc_hook_leave();
	errno = e;
	return r;
}
int unlink(const char *p) { return do_unlinkat(AT_FDCWD, p, 0); }
int unlinkat(int d, const char *p, int fl) { return do_unlinkat(d, p, fl); }
int rmdir(const char *p) { return do_unlinkat(AT_FDCWD, p, AT_REMOVEDIR); }

static int do_mkdirat(int dfd, const char *path, mode_t mode)
{
	RESOLVE(mkdirat);
	char rel[PBUF];
	long rl = on() ? rrc_fj_relpath(dfd, path, rel, sizeof rel) : -1;
	if (rl <= 0)
		return real_mkdirat(dfd, path, mode);
	rrc_hook_enter();
	rrc_fj_lock();
	int r = real_mkdirat(dfd, path, mode);
	int e = errno;
	struct stat st;
	if (r == 0)
		rrc_fj_append(RRC_FOP_MKDIR,
			      rrc_sys_fstatat(dfd, path, &st, AT_SYMLINK_NOFOLLOW) == 0 ? (st.st_mode & 07777) : (mode & 07777),
			      rel, (uint32_t)rl, 0, 0, 0, 0);
	rrc_fj_unlock();
	rrc_hook_leave();
	errno = e;
	return r;
}
int mkdir(const char *p, mode_t m) { return do_mkdirat(AT_FDCWD, p, m); }
int mkdirat(int d, const char *p, mode_t m) { return do_mkdirat(d, p, m); }

/* ---- the fd table ---- */

/* An owned fd (lib-fds.c): the application's close or dup of it, or dup
 * onto it, fails; the library's own threads close theirs through here
 * too (libc's close in control.c's paths): forgotten first. */
static int kept(int fd)
{
	if (!rrc_libfd_is(fd))
		return 0;
	if (rrc_rr_is_library_thread()) {
		rrc_libfd_forget(fd);
		return 0;
	}
	return 1;
}

/* dup2/dup3: the one of fd and newfd that is kept, or -1 */
static int kept_either(int fd, int nfd)
{
	return kept(fd) ? fd : kept(nfd) ? nfd : -1;
}

static int close_journaled(int fd)
{
	RESOLVE(close);
	if (kept(fd))
		return rrc_libfd_refuse("close", fd);
	if (!rrc_fj_fd_tracked(fd))
		return real_close(fd);
	rrc_hook_enter();
	rrc_fj_fd_set(fd, 0);
	int r = real_close(fd);
	rrc_hook_leave();
	return r;
}

/* newfd now refers to what oldfd does (or failed: unchanged). */
static void duped(int oldfd, int newfd)
{
	if (newfd < 0 || newfd == oldfd)
		return;
	rrc_fj_fd_set(newfd, rrc_fj_fd_tracked(oldfd));
}

static int dup_journaled(int fd)
{
	RESOLVE(dup);
	if (kept(fd))
		return rrc_libfd_refuse("dup", fd);
	if (!on())
		return real_dup(fd);
	rrc_hook_enter();
	int r = real_dup(fd);
	int e = errno;
	duped(fd, r);
	rrc_hook_leave();
	errno = e;
	return r;
}

static int dup2_journaled(int fd, int nfd)
{
	RESOLVE(dup2);
	int k = kept_either(fd, nfd);
	if (k >= 0)
		return rrc_libfd_refuse("dup2", k);
	if (!on())
		return real_dup2(fd, nfd);
	rrc_hook_enter();
	int r = real_dup2(fd, nfd);
	int e = errno;
	duped(fd, r);
	rrc_hook_leave();
	errno = e;
	return r;
}

static int dup3_journaled(int fd, int nfd, int fl)
{
	RESOLVE(dup3);
	int k = kept_either(fd, nfd);
	if (k >= 0)
		return rrc_libfd_refuse("dup3", k);
	if (!on())
		return real_dup3(fd, nfd, fl);
	rrc_hook_enter();
	int r = real_dup3(fd, nfd, fl);
	int e = errno;
	duped(fd, r);
	rrc_hook_leave();
	errno = e;
	return r;
}

static int fcntl_journaled(int fd, int cmd, long arg)
{
	if (kept(fd))
		return rrc_libfd_refuse("dup (fcntl F_DUPFD)", fd);
	if (!on() || (cmd != F_DUPFD && cmd != F_DUPFD_CLOEXEC))
		return real_fcntl(fd, cmd, arg);
	rrc_hook_enter();
	int r = real_fcntl(fd, cmd, arg);
	int e = errno;
	duped(fd, r);
	rrc_hook_leave();
	errno = e;
	return r;
}

/* The calls that close or duplicate fds: in the fd table's order while
 * recording (rr-fds.c); the journal's bookkeeping inside. */
int close(int fd)
{
	int t = rrc_fdt_begin();
	struct rrc_fin fin; /* a connection's close may send its FIN (rr-fds.h) */
	rrc_fin_note(t == 1 ? fd : -1, &fin);
	int r = close_journaled(fd);
	if (r == 0 || errno != EBADF)
		rrc_fdt_closed(fd); /* closed even when it reports EINTR or EIO */
	rrc_fdt_end_close(t, r < 0 ? -errno : 0, fd, &fin);
	return r;
}

/* A duplicate: its kind is learnt again when it matters. */
static int duplicated(int t, uint16_t op, int fd, int r, int target)
{
	if (r >= 0)
		rrc_fdt_closed(r);
	rrc_fdt_end_fd(t, op, r < 0 ? -errno : r, fd, target);
	return r;
}

int dup(int fd)
{
	int t = rrc_fdt_begin();
	return duplicated(t, RRC_FDOP_DUP, fd, dup_journaled(fd), -1);
}

int dup2(int fd, int nfd)
{
	int t = rrc_fdt_begin();
	return duplicated(t, RRC_FDOP_DUP, fd, dup2_journaled(fd, nfd), nfd);
}

int dup3(int fd, int nfd, int fl)
{
	int t = rrc_fdt_begin();
	return duplicated(t, RRC_FDOP_DUP, fd, dup3_journaled(fd, nfd, fl), nfd);
}

static int do_fcntl(int fd, int cmd, va_list ap)
{
	RESOLVE(fcntl);
	/* every fcntl argument is an int, a long or a pointer: pass a word */
	long arg = va_arg(ap, long);
	if (cmd != F_DUPFD && cmd != F_DUPFD_CLOEXEC)
		return real_fcntl(fd, cmd, arg);
	int t = rrc_fdt_begin();
	return duplicated(t, RRC_FDOP_DUPFD, fd, fcntl_journaled(fd, cmd, arg), (int)arg); /* the lowest free >= arg */
}

int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	int r = do_fcntl(fd, cmd, ap);
	va_end(ap);
	return r;
}

int fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	int r = do_fcntl(fd, cmd, ap);
	va_end(ap);
	return r;
}

/* ---- stdio ---- */

static ssize_t ck_read(void *c, char *buf, size_t n)
{
	return read((int)(intptr_t)c, buf, n);
}

static ssize_t ck_write(void *c, const char *buf, size_t n)
{
	/* stdio treats a short count as an error: write it all */
	size_t done = 0;
	while (done < n) {
		ssize_t r = write((int)(intptr_t)c, buf + done, n - done);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return done ? (ssize_t)done : -1;
		}
		if (r == 0)
			break;
		done += (size_t)r;
	}
	return (ssize_t)done;
}

static int ck_seek(void *c, off64_t *off, int whence)
{
	off64_t r = lseek64((int)(intptr_t)c, *off, whence);
	if (r < 0)
		return -1;
	*off = r;
	return 0;
}

static int ck_close(void *c)
{
	return close((int)(intptr_t)c);
}

/* A stream over tracked fd whose writes go through the write() wrapper. */
static FILE *cookie_stream(int fd, const char *mode)
{
	cookie_io_functions_t io = { ck_read, ck_write, ck_seek, ck_close };
	FILE *f = fopencookie((void *)(intptr_t)fd, mode, io);
	if (!f)
		return NULL;
	/* fileno(), fsync(fileno(f)), fstat(fileno(f)): the real fd. glibc's
	 * cookie jump table never uses _fileno for I/O. */
	f->_fileno = fd;
	/* a mode with 'a': every write goes to the end (fd has O_APPEND) */
	return f;
}

static int mode_flags(const char *m)
{
	int fl;
	switch (m[0]) {
	case 'r': fl = O_RDONLY; break;
	case 'w': fl = O_WRONLY | O_CREAT | O_TRUNC; break;
	case 'a': fl = O_WRONLY | O_CREAT | O_APPEND; break;
	default: return -1;
	}
	for (const char *p = m + 1; *p && *p != ','; p++) {
		if (*p == '+')
			fl = (fl & ~O_ACCMODE) | O_RDWR;
		else if (*p == 'e')
			fl |= O_CLOEXEC;
		else if (*p == 'x')
			fl |= O_EXCL;
	}
	return fl;
}

static FILE *do_fopen(const char *path, const char *mode)
{
	RESOLVE(fopen);
	char rel[PBUF];
	int fl;
	if (!on() || !mode || (fl = mode_flags(mode)) < 0 || !writable(fl) ||
	    rrc_fj_relpath(AT_FDCWD, path, rel, sizeof rel) <= 0) {
		int t = rrc_fdt_begin(); /* libc's open inside: ordered here */
		FILE *f = real_fopen(path, mode);
		int fd = f ? fileno(f) : -1;
		if (fd >= 0)
			rrc_fdt_made(fd, 0);
		rrc_fdt_end_fd(t, RRC_FDOP_OPEN, f ? fd : -errno, fd, -1);
		return f;
	}
	int fd = do_openat(AT_FDCWD, path, fl, 0666);
	if (fd < 0)
		return NULL;
	if (!rrc_fj_fd_tracked(fd)) {
		/* not a regular data file after all (symlink out, device...) */
		RESOLVE(fdopen);
		FILE *f = real_fdopen(fd, mode);
		if (!f) {
			int e = errno;
			close(fd);
			errno = e;
		}
		return f;
	}
	FILE *f = cookie_stream(fd, mode);
	if (!f) {
		int e = errno;
		close(fd);
		errno = e;
	}
	return f;
}
FILE *fopen(const char *path, const char *mode) { return do_fopen(path, mode); }
FILE *fopen64(const char *path, const char *mode) { return do_fopen(path, mode); }

FILE *fdopen(int fd, const char *mode)
{
	RESOLVE(fdopen);
	if (!rrc_fj_fd_tracked(fd))
		return real_fdopen(fd, mode);
	return cookie_stream(fd, mode);
}

static FILE *do_freopen(const char *path, const char *mode, FILE *f)
{
	RESOLVE(freopen);
	char rel[PBUF];
	int fl;
	if (on() && path && mode && (fl = mode_flags(mode)) >= 0 && writable(fl) &&
	    rrc_fj_relpath(AT_FDCWD, path, rel, sizeof rel) > 0) {
		/* freopen must keep the FILE object, which cannot become a
		 * cookie stream: its writes would bypass the journal */
		rrc_log("refusing freopen() for writing into the data directory: its writes could not be journaled");
		errno = EPERM;
		return NULL;
	}
	return real_freopen(path, mode, f);
}
FILE *freopen(const char *path, const char *mode, FILE *f) { return do_freopen(path, mode, f); }
FILE *freopen64(const char *path, const char *mode, FILE *f) { return do_freopen(path, mode, f); }
