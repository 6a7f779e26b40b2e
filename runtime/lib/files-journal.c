/* SPDX-License-Identifier: MIT
 *
 * The file journal: every change the application makes under its data
 * directory ($RRC_DATA_DIR, `rrc exec --data-dir`) is appended here, in
 * the order the changes completed, as FILEOPS records (rrc/image.h). The
 * snapshot child writes the records since the previous checkpoint into the
 * image, so that the backup's copy of the data directory advances exactly
 * with the committed memory (replaces the DNC page-cache capture + DRBD of
 * NiLiCon §4 / RRC §4.6 "file system state" in user space).
 *
 * Consistency with the snapshot instant: a wrapper that changes a data-dir
 * file holds the *hook guard* (rrc_hook_enter/leave, a per-thread depth)
 * from before the real call until its record is appended. The park handler
 * (quiesce.c) does not park a thread inside the guard: it marks the park
 * pending and returns; the wrapper, on leaving, sends itself the park
 * signal and parks then (DESIGN §2.1, Tardigrade's checkpoint guard). So at
 * the snapshot every completed change has its record and no record exists
 * for a change that has not happened. One journal lock, taken inside the
 * guard, orders the changes and their records identically across threads.
 *
 * Memory: the records live in the scratch arena (rrc_s->journal), which is
 * left out of images and mapped afresh after a restore, so a restored
 * process starts with an empty journal (its data directory is the committed
 * state). What must survive a restore (the data directory, which fds are
 * tracked) is in this file's statics, in the library's .bss (in the image).
 *
 * Cut and commit: in the pause the control thread records the journal's
 * length (rrc_fj_cut); the snapshot child writes [0, cut); when the child
 * has reported success, the parent drops [0, cut) (rrc_fj_commit). A failed
 * dump drops nothing: the next image (full or not) carries those records,
 * since the backup's copy only ever advances with a complete image.
 *
 * ASYNC-SIGNAL-SAFE: the whole file (raw syscalls, no allocation). The
 * guard functions run in the park handler's context and in wrappers.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include "rrc_lib.h"
#include "lib-fds.h"

/* ---- state in the image (.bss) ---- */
static char fj_dir[RRC_PATH_MAX];       /* canonical, no trailing '/' */
static uint32_t fj_dir_len;
static int fj_on;                       /* a data directory is tracked */
static uint64_t fj_tracked[RRC_MAX_FDS / 64]; /* fds open for writing on a data-dir file */

/* ---- per thread: the hook guard ---- */
__thread uint32_t rrc_hook_depth __attribute__((tls_model("initial-exec")));
__thread uint32_t rrc_park_pending __attribute__((tls_model("initial-exec")));

int rrc_fj_enabled(void) { return fj_on && rrc_s && rrc_s->journal; }
const char *rrc_fj_dir(void) { return fj_dir; }

void rrc_hook_enter(void)
{
	rrc_hook_depth++;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
}

/* Parks now if the park signal came while inside the guard: the signal is
 * sent again to this thread, whose handler then finds the guard released. */
void rrc_hook_leave(void)
{
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	if (--rrc_hook_depth == 0) {
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
		if (rrc_park_pending) {
			rrc_park_pending = 0;
			rrc_sys_tgkill(rrc_g.pid, (int)rrc_sys_gettid(), RRC_PARK_SIG);
		}
	}
}

/* ---- the journal lock: futex mutex, recursive for one thread (a signal
 * handler of the application may write a data file inside a wrapper) ---- */
void rrc_fj_lock(void)
{
	struct rrc_fj *j = rrc_s->journal;
	int32_t me = (int32_t)rrc_sys_gettid();
	if (RRC_LOAD(&j->owner) == me) {
		j->recursion++;
		return;
	}
	uint32_t c = 0;
	if (!__atomic_compare_exchange_n(&j->lock, &c, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
		if (c != 2)
			c = __atomic_exchange_n(&j->lock, 2, __ATOMIC_ACQUIRE);
		while (c != 0) {
			rrc_sys_futex(&j->lock, RRC_FUTEX_WAIT, 2, 0);
			c = __atomic_exchange_n(&j->lock, 2, __ATOMIC_ACQUIRE);
		}
	}
	RRC_STORE(&j->owner, me);
	j->recursion = 0;
}

void rrc_fj_unlock(void)
{
	struct rrc_fj *j = rrc_s->journal;
	if (j->recursion) {
		j->recursion--;
		return;
	}
	RRC_STORE(&j->owner, 0);
	if (__atomic_exchange_n(&j->lock, 0, __ATOMIC_RELEASE) == 2)
		rrc_sys_futex(&j->lock, RRC_FUTEX_WAKE, 1, 0);
}

/* Marks the journal unusable: every later dump is refused with this reason
 * (the backup's copy can no longer be brought to the process's state). */
void rrc_fj_break(const char *why)
{
	struct rrc_fj *j = rrc_s->journal;
	if (!j->broken) {
		j->broken = 1;
		size_t l = rrc_bput(j->why, sizeof j->why, 0, why);
		(void)l;
		char m[300];
		l = rrc_bput(m, sizeof m, 0, "file journal: ");
		rrc_bput(m, sizeof m, l, why);
		rrc_log(m);
	}
}

/* ---- the fd table ---- */
int rrc_fj_fd_tracked(int fd)
{
	if (!fj_on || fd < 0 || fd >= RRC_MAX_FDS)
		return 0;
	return (__atomic_load_n(&fj_tracked[fd / 64], __ATOMIC_RELAXED) >> (fd % 64)) & 1;
}

void rrc_fj_fd_set(int fd, int on)
{
	if (!fj_on || fd < 0)
		return;
	if (fd >= RRC_MAX_FDS) {
		if (on)
			rrc_fj_break("a data-directory file was opened at an fd above the library's limit (4096)");
		return;
	}
	uint64_t bit = 1ull << (fd % 64);
	if (on)
		__atomic_fetch_or(&fj_tracked[fd / 64], bit, __ATOMIC_RELAXED);
	else
		__atomic_fetch_and(&fj_tracked[fd / 64], ~bit, __ATOMIC_RELAXED);
}

/* ---- paths ---- */

/* Lexical normalisation of an absolute path in place ("." and ".." and
 * repeated '/' removed); returns the new length. */
static size_t normalize(char *p, size_t n)
{
	size_t o = 0; /* output length; p[0] == '/' */
	size_t i = 0;
	while (i < n) {
		while (i < n && p[i] == '/')
			i++;
		size_t s = i;
		while (i < n && p[i] != '/')
			i++;
		size_t cl = i - s;
		if (cl == 0 || (cl == 1 && p[s] == '.'))
			continue;
		if (cl == 2 && p[s] == '.' && p[s + 1] == '.') {
			while (o > 0 && p[o] != '/')
				o--;
			/* o now at the '/' before the last component (or 0) */
			continue;
		}
		p[o] = '/';
		for (size_t k = 0; k < cl; k++)
			p[o + 1 + k] = p[s + k];
		o += 1 + cl;
	}
	if (o == 0)
		p[o++] = '/';
	p[o] = 0;
	return o;
}

/* The data-dir-relative part of absolute path abs (length n): its offset in
 * abs, or -1 if abs is not strictly below the data directory. */
static long rel_of(const char *abs, size_t n)
{
	if (n <= fj_dir_len + 1 || rrc_strncmp(abs, fj_dir, fj_dir_len) || abs[fj_dir_len] != '/')
		return -1;
	return (long)fj_dir_len + 1;
}

static long fd_link(int fd, char *buf, size_t cap)
{
	char lp[40];
	size_t l = rrc_bput(lp, sizeof lp, 0, "/proc/self/fd/");
	rrc_bput_u64(lp, sizeof lp, l, (uint64_t)fd);
	long r = rrc_sys_readlinkat(AT_FDCWD, lp, buf, cap - 1);
	if (r < 0 || (size_t)r >= cap - 1)
		return -1;
	buf[r] = 0;
	return r;
}

/* The data-dir-relative path of an open fd (from the kernel, so renames and
 * symlinks are accounted for), copied to out; -1 if it is not a file below
 * the data directory or no longer linked. */
long rrc_fj_fd_relpath(int fd, char *out, size_t cap)
{
	char *buf = out;
	long n = fd_link(fd, buf, cap);
	if (n <= 0 || buf[0] != '/')
		return -1;
	if (rrc_path_deleted(buf, (size_t)n))
		return -1;
	long off = rel_of(buf, (size_t)n);
	if (off < 0)
		return -1;
	size_t rl = (size_t)n - (size_t)off;
	for (size_t i = 0; i <= rl; i++)
		out[i] = buf[off + i];
	return (long)rl;
}

/* Resolves (dirfd, path) lexically to a data-dir-relative path in out
 * (NUL-terminated); returns its length, or -1 if it is not below the data
 * directory. Symlinks inside the path are not followed (documented limit). */
long rrc_fj_relpath(int dirfd, const char *path, char *out, size_t cap)
{
	if (!path || !*path || cap < 2)
		return -1;
	size_t pl = rrc_strlen(path), n = 0;
	if (path[0] != '/') {
		long r;
		if (dirfd == AT_FDCWD) {
			r = rrc_sys_getcwd(out, cap);
			if (r <= 0)
				return -1;
			r = (long)rrc_strlen(out);
		} else {
			r = fd_link(dirfd, out, cap);
		}
		if (r <= 0 || out[0] != '/')
			return -1;
		n = (size_t)r;
		if (n + 1 + pl + 1 > cap)
			return -1;
		out[n++] = '/';
	} else if (pl + 1 > cap) {
		return -1;
	}
	rrc_memcpy(out + n, path, pl);
	n += pl;
	out[n] = 0;
	n = normalize(out, n);
	long off = rel_of(out, n);
	if (off < 0)
		return -1;
	size_t rl = n - (size_t)off;
	for (size_t i = 0; i <= rl; i++)
		out[i] = out[off + i];
	return (long)rl;
}

/* ---- records ---- */

static uint8_t *reserve(uint64_t n)
{
	struct rrc_fj *j = rrc_s->journal;
	if (j->broken)
		return 0;
	if (n > j->cap - j->len) {
		rrc_fj_break("the journal of data-directory changes overflowed its 256 MiB "
			     "(too many file writes between two checkpoints)");
		return 0;
	}
	uint8_t *p = j->data + j->len;
	j->len += n;
	return p;
}

/* Appends one record; data from data_len bytes spread over iov (may be
 * NULL with data_len 0). Called with the journal lock held. */
void rrc_fj_append_iov(uint32_t type, uint32_t mode, const char *rel, uint32_t rel_len,
		       const struct iovec *iov, int iovcnt, uint64_t data_len,
		       uint64_t offset, uint64_t length)
{
	struct rrc_fj *j = rrc_s->journal;
	/* one record holds at most 1 GiB of data: larger writes are split */
	while (1) {
		uint32_t chunk = data_len > (1u << 30) ? (1u << 30) : (uint32_t)data_len;
		uint64_t sz = sizeof(struct rrc_fileop) + rel_len + chunk;
		sz = (sz + 7) & ~7ull;
		uint8_t *p = reserve(sz);
		if (!p)
			return;
		struct rrc_fileop *op = (struct rrc_fileop *)p;
		op->type = type;
		op->mode = mode;
		op->path_len = rel_len;
		op->data_len = chunk;
		op->offset = offset;
		op->length = type == RRC_FOP_WRITE ? chunk : length;
		uint8_t *q = p + sizeof *op;
		rrc_memcpy(q, rel, rel_len);
		q += rel_len;
		uint64_t left = chunk;
		while (left && iovcnt > 0) {
			if (!iov->iov_len) {
				iov++;
				iovcnt--;
				continue;
			}
			uint64_t k = iov->iov_len < left ? iov->iov_len : left;
			rrc_memcpy(q, iov->iov_base, k);
			q += k;
			left -= k;
			if (k == iov->iov_len) {
				iov++;
				iovcnt--;
			} else {
				/* the rest of this iov starts the next chunk */
				static __thread struct iovec rest __attribute__((tls_model("initial-exec")));
				rest.iov_base = (uint8_t *)iov->iov_base + k;
				rest.iov_len = iov->iov_len - k;
				iov = &rest;
			}
		}
		while ((uint64_t)(q - p) < sz)
			*q++ = 0;
		j->nr_ops++;
		j->data_bytes += chunk;
		data_len -= chunk;
		offset += chunk;
		if (!data_len)
			return;
	}
}

void rrc_fj_append(uint32_t type, uint32_t mode, const char *rel, uint32_t rel_len,
		   const void *data, uint64_t data_len, uint64_t offset, uint64_t length)
{
	struct iovec v = { (void *)data, data_len };
	rrc_fj_append_iov(type, mode, rel, rel_len, &v, 1, data_len, offset, length);
}

/* A file that appeared in the data directory with content the journal has
 * not seen (renamed or linked in from outside): its whole content. */
void rrc_fj_import_file(const char *rel, uint32_t rel_len)
{
	char abs[RRC_PATH_MAX + 8];
	size_t l = rrc_bput(abs, sizeof abs, 0, fj_dir);
	l = rrc_bput(abs, sizeof abs, l, "/");
	if (l + rel_len + 1 > sizeof abs)
		return rrc_fj_break("a path below the data directory is too long");
	rrc_memcpy(abs + l, rel, rel_len);
	abs[l + rel_len] = 0;
	long fd = rrc_sys_openat(AT_FDCWD, abs, O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0);
	if (fd < 0)
		return rrc_fj_break("cannot read a file moved into the data directory");
	struct stat st;
	if (rrc_sys_fstat((int)fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		rrc_libfd_close((int)fd);
		return rrc_fj_break("a directory or special file was moved into the data directory (not journaled)");
	}
	rrc_fj_append(RRC_FOP_CREATE, st.st_mode & 07777, rel, rel_len, 0, 0, 0, 0);
	rrc_fj_append(RRC_FOP_TRUNCATE, 0, rel, rel_len, 0, 0, 0, 0);
	uint64_t off = 0;
	for (;;) {
		struct rrc_fj *j = rrc_s->journal;
		/* read straight into a reserved record: no bounce buffer */
		uint64_t want = 1u << 20;
		uint64_t sz = (sizeof(struct rrc_fileop) + rel_len + want + 7) & ~7ull;
		uint64_t at = j->len;
		uint8_t *p = reserve(sz);
		if (!p)
			break;
		long r = rrc_sys_pread((int)fd, p + sizeof(struct rrc_fileop) + rel_len, want, (long)off);
		if (r <= 0) {
			j->len = at; /* give the reservation back */
			if (r < 0)
				rrc_fj_break("cannot read a file moved into the data directory");
			break;
		}
		j->len = at + ((sizeof(struct rrc_fileop) + rel_len + (uint64_t)r + 7) & ~7ull);
		struct rrc_fileop *op = (struct rrc_fileop *)p;
		op->type = RRC_FOP_WRITE;
		op->mode = 0;
		op->path_len = rel_len;
		op->data_len = (uint32_t)r;
		op->offset = off;
		op->length = (uint64_t)r;
		rrc_memcpy(p + sizeof *op, rel, rel_len);
		for (uint8_t *q = p + sizeof *op + rel_len + r; q < j->data + j->len; q++)
			*q = 0;
		j->nr_ops++;
		j->data_bytes += (uint64_t)r;
		off += (uint64_t)r;
	}
	rrc_libfd_close((int)fd);
}

/* ---- set-up ---- */

/* The constructor: $RRC_DATA_DIR (absolute). getenv is fine here. */
void rrc_fj_init(void)
{
	const char *d = getenv("RRC_DATA_DIR");
	if (!d || !*d)
		return;
	size_t n = rrc_strlen(d);
	if (d[0] != '/' || n + 1 > sizeof fj_dir) {
		rrc_log("RRC_DATA_DIR must be an absolute path: data directory not tracked");
		return;
	}
	rrc_memcpy(fj_dir, d, n + 1);
	n = normalize(fj_dir, n);
	if (n == 1) {
		rrc_log("RRC_DATA_DIR may not be /: data directory not tracked");
		return;
	}
	fj_dir_len = (uint32_t)n;
	fj_on = 1;
}

/* ---- the pause (control thread, threads parked) and the snapshot child ---- */

/* 0, or -1 with the error set: the journal cannot describe the changes. */
int rrc_fj_check(void)
{
	if (!rrc_fj_enabled())
		return 0;
	struct rrc_fj *j = rrc_s->journal;
	if (RRC_LOAD(&j->broken)) {
		rrc_set_err(RRC_ERR_FILE_JOURNAL, 0, "the data directory's changes cannot be checkpointed: ",
			    -1, j->why);
		return -1;
	}
	return 0;
}

void rrc_fj_cut(void)
{
	if (!rrc_fj_enabled())
		return;
	struct rrc_fj *j = rrc_s->journal;
	j->cut_len = j->len;
	j->cut_nr = j->nr_ops;
	j->cut_bytes = j->data_bytes;
}

/* HOLD (control.c), every application thread parked outside the hook
 * guard: each record so far describes a change that is complete in the
 * files, and no change is half done. The records are dropped, so that from
 * here on the journal holds exactly the changes made after this instant:
 * a copy of the data directory taken before the threads run again, plus
 * the next image's FILEOPS, is the process's directory at that image. No
 * thread holds the journal lock (it is only taken inside the guard). */
void rrc_fj_discard(uint64_t *ops, uint64_t *bytes)
{
	*ops = *bytes = 0;
	if (!rrc_fj_enabled())
		return;
	struct rrc_fj *j = rrc_s->journal;
	*ops = j->nr_ops;
	*bytes = j->data_bytes;
	j->len = j->nr_ops = j->data_bytes = 0;
	j->cut_len = j->cut_nr = j->cut_bytes = 0;
}

/* In the snapshot child: the FILEOPS payload is hdr + [p, p + *len). */
int rrc_fj_section(struct rrc_fileops_header *hdr, const uint8_t **p, uint64_t *len)
{
	if (!rrc_fj_enabled())
		return 0;
	struct rrc_fj *j = rrc_s->journal;
	hdr->version = RRC_FILEOPS_VERSION;
	hdr->nr_ops = (uint32_t)j->cut_nr;
	hdr->data_bytes = j->cut_bytes;
	*p = j->data;
	*len = j->cut_len;
	return 1;
}

/* The parent, after the child: drop what the image holds (ok) or keep it
 * for the next image (failed). Application threads run again: locked. */
void rrc_fj_commit(int ok)
{
	if (!rrc_fj_enabled())
		return;
	struct rrc_fj *j = rrc_s->journal;
	rrc_fj_lock();
	if (ok && j->cut_len) {
		uint64_t rest = j->len - j->cut_len;
		/* move the tail down in blocks no longer than the distance, so
		 * that no block overlaps its destination */
		for (uint64_t done = 0; done < rest;) {
			uint64_t k = rest - done < j->cut_len ? rest - done : j->cut_len;
			rrc_memcpy(j->data + done, j->data + j->cut_len + done, k);
			done += k;
		}
		j->len = rest;
		j->nr_ops -= j->cut_nr;
		j->data_bytes -= j->cut_bytes;
	}
	j->cut_len = j->cut_nr = j->cut_bytes = 0;
	rrc_fj_unlock();
}
