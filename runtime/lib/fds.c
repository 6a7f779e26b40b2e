/* SPDX-License-Identifier: MIT
 *
 * File descriptor capture, in the pause (RRC §4.6: what the container fork
 * shares between parent and snapshot must be read while the threads are
 * stopped: file offsets, pipe contents, eventfd counters, epoll interest
 * lists, timer settings). Walks /proc/self/fd, classifies each fd and
 * dispatches to one file per kind (files-reg.c, pipes.c, eventfd.c,
 * epoll.c, timerfd.c, sockets.c), as CRIU does. Records are appended to
 * the scratch arena; the snapshot child writes them into the FDS section.
 *
 * The pause pays for every syscall here, so the walk asks as little as it
 * can: library fds are known by number; pipes and sockets are known by
 * fstat (the device of pipefs or sockfs); only the others have their
 * /proc link read (~5 us each). A TCP connection found in the last
 * capture with the same inode and the same two addresses keeps that
 * capture's family, type, protocol and options (sockets.c).
 *
 * ASYNC-SIGNAL-SAFE: the whole file.
 */
#include <fcntl.h>
#include <errno.h>
#include <sys/stat.h>
#include "rrc_lib.h"
#include "lib-fds.h"
#include "mqueue.h"
#include "rr-log.h"
#include "rr-replay.h"

struct rrc_fd *rrc_fd_append(uint32_t path_len, uint32_t data_len)
{
	struct rrc_scratch *s = rrc_s;
	uint64_t need = (sizeof(struct rrc_fd) + path_len + 7) & ~7ull;
	if (s->fdbuf_len + need > s->fdbuf_cap)
		return 0;
	struct rrc_fd *f = (struct rrc_fd *)(s->fdbuf + s->fdbuf_len);
	rrc_memset(f, 0, need);
	f->path_len = path_len;
	f->data_len = data_len;
	s->fdbuf_len += need;
	s->nr_fds++;
	return f;
}

uint8_t *rrc_fd_data_reserve(uint32_t n, uint32_t *padded, const char *full, int fd)
{
	struct rrc_scratch *s = rrc_s;
	uint32_t p8 = (n + 7u) & ~7u;
	if (s->fdbuf_len + p8 > s->fdbuf_cap) {
		rrc_set_err(RRC_ERR_UNSUPPORTED_FD, 0, full, fd, 0);
		return 0;
	}
	uint8_t *at = s->fdbuf + s->fdbuf_len;
	rrc_memset(at + n, 0, p8 - n);
	s->fdbuf_len += p8;
	if (padded)
		*padded = p8;
	return at;
}

int rrc_fd_data_put(const void *p, uint32_t n, const char *full, int fd)
{
	uint8_t *at = rrc_fd_data_reserve(n, 0, full, fd);
	if (!at)
		return -1;
	rrc_memcpy(at, p, n);
	return 0;
}

long rrc_read_fdinfo(int fd, char *buf, size_t cap)
{
	char path[64];
	rrc_proc_path(path, sizeof path, "fdinfo", fd);
	return rrc_read_file(path, buf, cap);
}

/* The value after "key" at the start of a line, or NULL. */
const char *rrc_fdinfo_field(const char *buf, const char *key)
{
	size_t kl = rrc_strlen(key);
	const char *p = buf;
	while (*p) {
		if (!rrc_strncmp(p, key, kl))
			return rrc_skip_ws(p + kl);
		while (*p && *p != '\n')
			p++;
		if (*p)
			p++;
	}
	return 0;
}

static int lib_fd_kind(int fd)
{
	if (fd == rrc_g.listen_fd)
		return RRC_FD_LIB_CONTROL;
	if (fd == rrc_g.uffd || fd == rrc_g.conn_fd || fd == rrc_g.pagemap_fd ||
	    fd == rrc_g.maps_fd || fd == rrc_g.image_fd || fd == rrc_s->walk_fd || fd == rrc_s->diag_fd ||
	    (rrc_s->unix_nl && fd == rrc_s->unix_nl - 1) ||
	    fd == rrc_s->res_rfd || fd == rrc_s->res_wfd || fd == rrc_rp_log_fd() || rrc_rr_log_owns(fd))
		return RRC_FD_LIB_INTERNAL;
	for (uint32_t i = 0; i < rrc_s->nr_libpipes; i++)
		if (fd == rrc_s->libpipes[i].rfd || fd == rrc_s->libpipes[i].wfd)
			return RRC_FD_LIB_INTERNAL;
	return 0;
}

static void unsupported(int fd, const char *what, const char *link)
{
	size_t l;
	char *m = rrc_s->err_msg;
	rrc_set_err(RRC_ERR_UNSUPPORTED_FD, 0, "fd ", fd, " is ");
	l = rrc_strlen(m);
	l = rrc_bput(m, sizeof rrc_s->err_msg, l, what);
	l = rrc_bput(m, sizeof rrc_s->err_msg, l, " (");
	l = rrc_bput(m, sizeof rrc_s->err_msg, l, link);
	rrc_bput(m, sizeof rrc_s->err_msg, l, "), which a checkpoint cannot describe");
}

/* Classify one fd. Returns the kind, 0 for "needs a closer look" (sockets,
 * paths), or -1 with the error set. */
static int classify(int fd, const char *link)
{
	if (rrc_startswith(link, "pipe:["))
		return RRC_FD_PIPE;
	if (rrc_startswith(link, "socket:["))
		return 0;
	if (!rrc_strncmp(link, "anon_inode:[eventfd]", 21))
		return RRC_FD_EVENTFD;
	if (!rrc_strncmp(link, "anon_inode:[eventpoll]", 23))
		return RRC_FD_EPOLL;
	if (!rrc_strncmp(link, "anon_inode:[timerfd]", 21))
		return RRC_FD_TIMERFD;
	if (!rrc_strncmp(link, "anon_inode:[signalfd]", 22))
		return RRC_FD_SIGNALFD;
	if (!rrc_strncmp(link, "anon_inode:inotify", 19))
		return RRC_FD_INOTIFY;
	if (!rrc_strncmp(link, "anon_inode:[io_uring]", 22)) {
		rrc_set_err(RRC_ERR_IO_URING, 0, "fd ", fd,
			    " is an io_uring instance: its in-flight requests cannot be checkpointed");
		return -1;
	}
	if (rrc_startswith(link, "anon_inode:")) {
		const char *what = "an anonymous-inode object";
		if (rrc_startswith(link, "anon_inode:[fanotify]"))
			what = "a fanotify instance";
		else if (rrc_startswith(link, "anon_inode:[pidfd]"))
			what = "a pidfd";
		else if (rrc_startswith(link, "anon_inode:[userfaultfd]"))
			what = "a userfaultfd";
		unsupported(fd, what, link);
		return -1;
	}
	if (rrc_is_mqueue(fd, link))
		return RRC_FD_MQUEUE;
	if (link[0] == '/') {
		size_t l = rrc_strlen(link);
		/* a file deleted while open, a memfd: its contents go into
		 * the image (files-ghost.c) */
		if (rrc_path_deleted(link, l) || rrc_startswith(link, "/memfd:"))
			return RRC_FD_GHOST;
		return 0;
	}
	unsupported(fd, "an object of an unsupported kind", link);
	return -1;
}

struct walk {
	int failed;
	uint64_t prev_off;              /* cursor in the last capture's records */
};

/* The last capture's record of fd, or NULL. Both walks go up in fd
 * order (proc_readfd), so the cursor only moves forward. */
static const struct rrc_fd *prev_record(struct walk *w, int fd)
{
	struct rrc_scratch *s = rrc_s;
	while (w->prev_off < s->fdprev_len) {
		const struct rrc_fd *p = (const struct rrc_fd *)(s->fdprev + w->prev_off);
		if (p->fd >= fd)
			return p->fd == fd ? p : 0;
		w->prev_off += rrc_fd_rec_size(p);
	}
	return 0;
}

/* Pipes and sockets of the kernel's own file systems, told by fstat (a
 * named FIFO, or an O_PATH fd of a socket file, lives on a disk file
 * system and goes by its link): RRC_FD_PIPE, 0 for a socket, -1 for
 * anything else. */
static int kind_by_stat(const struct stat *st)
{
	struct rrc_scratch *s = rrc_s;
	if (S_ISFIFO(st->st_mode) && s->pipefs_dev && st->st_dev == s->pipefs_dev)
		return RRC_FD_PIPE;
	if (S_ISSOCK(st->st_mode) && s->sockfs_dev && st->st_dev == s->sockfs_dev)
		return 0;
	return -1;
}

/* A record for fd with room for a path of plen bytes, or NULL with the
 * error set and w->failed. */
static struct rrc_fd *new_record(struct walk *w, int fd, uint32_t plen, int kind)
{
	struct rrc_fd *f = rrc_fd_append(plen, 0);
	if (!f) {
		rrc_set_err(RRC_ERR_UNSUPPORTED_FD, 0, "too many fds for the library's buffer at fd ", fd, 0);
		w->failed = 1;
		return 0;
	}
	f->fd = fd;
	f->kind = (uint32_t)kind;
	return f;
}

/* A thread of the process: tgkill with signal 0 asks the kernel (the
 * pause helper, a process of its own, asks about the application's pid). */
static int is_thread(int tid)
{
	long r = tid > 0 ? rrc_sys_tgkill(rrc_g.pid, tid, 0) : -ESRCH;
	return r == 0 || r == -EPERM;
}

/* Signal-driven I/O (O_ASYNC): whom the open file description signals
 * when the fd becomes ready (F_GETOWN_EX) and with what (F_GETSIG, 0:
 * SIGIO), into *o (image.h struct rrc_fown). Carried only for an owner a
 * restore can mean: the process (its pid, or its process group when the
 * group is its own: the restore makes it so again) or one of its threads
 * (a tid, or a pid naming one: the restore gives the threads their tids
 * back). A lease sets an owner too, for its break signal: the process
 * itself, carried alike. Another process or process group, or a thread
 * that is gone, is refused, naming the fd and the owner. No owner (0) is
 * carried as none. 0, or -1 with the error set. */
static int capture_fown(int fd, struct rrc_fown *o)
{
	struct f_owner_ex ex = { 0, 0 };
	long r = rrc_sys_fcntl(fd, F_GETOWN_EX, (long)&ex);
	long sig = r < 0 ? r : rrc_sys_fcntl(fd, F_GETSIG, 0);
	if (sig < 0) {
		rrc_set_err(RRC_ERR_UNSUPPORTED_FD, (int)-sig, "cannot read the owner and signal of fd ", fd,
			    " (O_ASYNC)");
		return -1;
	}
	int pid = rrc_g.pid, ok;
	const char *who, *why;
	switch (ex.type) {
	case F_OWNER_TID:
		ok = is_thread(ex.pid);
		who = " for thread ";
		why = " (its owner, F_SETOWN_EX), not a thread of this process: a restore could not signal it";
		break;
	case F_OWNER_PID:
		ok = ex.pid == pid || is_thread(ex.pid);
		who = " for process ";
		why = " (its owner, F_SETOWN), not this process or one of its threads: a restore could not signal it";
		break;
	case F_OWNER_PGRP:
		ok = ex.pid == pid && rrc_sys_getpgid(pid) == pid;
		who = " for process group ";
		why = " (its owner, F_SETOWN), not the process's own group: a restore could not signal it";
		break;
	default:
		ok = 0;
		who = " for an owner of an unknown type, ";
		why = " (F_GETOWN_EX)";
	}
	if (ex.pid && !ok) {
		char *m = rrc_s->err_msg;
		rrc_set_err(RRC_ERR_UNSUPPORTED_FD, 0, "fd ", fd, " does signal-driven I/O (O_ASYNC)");
		size_t l = rrc_strlen(m);
		l = rrc_bput(m, sizeof rrc_s->err_msg, l, who);
		l = rrc_bput_u64(m, sizeof rrc_s->err_msg, l, (uint64_t)(uint32_t)ex.pid);
		rrc_bput(m, sizeof rrc_s->err_msg, l, why);
		return -1;
	}
	o->owner_type = (uint32_t)ex.type;
	o->owner = ex.pid;
	o->signal = (uint32_t)sig;
	o->reserved = 0;
	return 0;
}

/* One fd's record, in the pause. Returns 0, or 1 with w->failed set. */
static int capture_in_pause(struct walk *w, int fd, int lk)
{
	struct rrc_scratch *s = rrc_s;
	if (lk == RRC_FD_LIB_INTERNAL && (fd == s->walk_fd || fd == s->diag_fd || (s->unix_nl && fd == s->unix_nl - 1)))
		return 0; /* the walk's own directory fd, the TCP and unix tables' sockets: gone in a moment */
	if (lk == RRC_FD_LIB_INTERNAL) /* not restored (the library remakes them): the kind is all */
		return new_record(w, fd, 0, lk) ? 0 : 1;
	struct stat st;
	long r = rrc_sys_fstat(fd, &st);
	if (r == -EBADF)
		return 0; /* a library fd of this walk (pipes.c), listed then closed */
	if (r < 0) {
		rrc_set_err(RRC_ERR_UNSUPPORTED_FD, (int)-r, "fstat failed on fd ", fd, 0);
		w->failed = 1;
		return 1;
	}
	/* the link only where fstat cannot tell: files (their path goes into
	 * the record) and anonymous inodes */
	char *link = s->pathbuf;
	uint32_t plen = 0;
	int kind = lk ? lk : kind_by_stat(&st);
	if (kind < 0) {
		char lpath[64];
		rrc_proc_path(lpath, sizeof lpath, "fd", fd);
		long n = rrc_sys_readlinkat(AT_FDCWD, lpath, link, RRC_PATH_MAX - 1);
		if (n == -ENOENT)
			return 0; /* as above */
		if (n < 0) {
			rrc_set_err(RRC_ERR_UNSUPPORTED_FD, (int)-n, "cannot read the link of fd ", fd, 0);
			w->failed = 1;
			return 1;
		}
		link[n] = 0;
		kind = classify(fd, link);
		if (kind < 0) {
			w->failed = 1;
			return 1;
		}
		if ((kind == 0 && !rrc_startswith(link, "socket:[")) || kind == RRC_FD_GHOST || kind == RRC_FD_MQUEUE)
			plen = (uint32_t)n;
	}
	int is_socket = kind == 0 && !plen;
	struct rrc_fd *f = new_record(w, fd, plen, kind);
	if (!f)
		return 1;
	f->fd_flags = (uint32_t)rrc_sys_fcntl(fd, F_GETFD, 0);
	f->file_flags = (uint32_t)rrc_sys_fcntl(fd, F_GETFL, 0);
	f->ino = st.st_ino;
	f->mode = st.st_mode;
	f->rdev = (uint32_t)st.st_rdev;
	if (plen)
		rrc_memcpy((char *)(f + 1), link, plen);
	if (lk)
		return 0;
	struct rrc_fown fown;
	int async = (f->file_flags & O_ASYNC) != 0;
	if (async && capture_fown(fd, &fown) < 0) {
		w->failed = 1;
		return 1;
	}

	switch (kind) {
	case 0:
		if (is_socket) {
			const struct rrc_fd *prev = prev_record(w, fd);
			r = rrc_capture_socket(f, fd, prev);
			if (r == 0)
				r = rrc_capture_sockopts(f, fd, prev);
			if (r == 0 && f->kind == RRC_FD_UNIX_OTHER)
				r = rrc_capture_unix_peer(f, fd);
		} else
			r = rrc_capture_reg(f, link);
		break;
	case RRC_FD_PIPE:    r = rrc_capture_pipe(f, fd); break;
	case RRC_FD_EVENTFD: r = rrc_capture_eventfd(f, fd); break;
	case RRC_FD_EPOLL:   r = rrc_capture_epoll(fd, f); break;
	case RRC_FD_TIMERFD: r = rrc_capture_timerfd(f, fd); break;
	case RRC_FD_SIGNALFD: r = rrc_capture_signalfd(f, fd); break;
	case RRC_FD_GHOST:   r = rrc_capture_ghost(f, fd); break;
	case RRC_FD_INOTIFY: r = rrc_capture_inotify(f, fd); break;
	case RRC_FD_MQUEUE: r = rrc_capture_mqueue(f, fd); break;
	default: r = 0;
	}
	/* the owner after the kind's data (rrc_fd_fown_off): the record is
	 * still the last in the buffer */
	if (r == 0 && async) {
		if ((uint8_t *)f + rrc_fd_fown_off(f) != s->fdbuf + s->fdbuf_len) {
			rrc_set_err(RRC_ERR_UNSUPPORTED_FD, 0, "fd ", fd, ": its record is not the last in the fd buffer");
			r = -1;
		} else if ((r = rrc_fd_data_put(&fown, sizeof fown, "fd buffer full at fd ", fd)) == 0) {
			f->fd_flags |= RRC_FD_F_FOWN;
		}
	}
	if (r < 0) {
		w->failed = 1;
		return 1;
	}
	return 0;
}

static int capture_one(long nfd, void *arg)
{
	int fd = (int)nfd;
	return capture_in_pause(arg, fd, lib_fd_kind(fd));
}

/* The fd's link still reads link (n bytes): the application, running
 * during the check, did not close or replace it in the meantime (its
 * getsockopt answers would then be another socket's, or none). */
static int same_link(const char *lpath, const char *link, long n)
{
	char again[64];
	long m = rrc_sys_readlinkat(AT_FDCWD, lpath, again, sizeof again - 1);
	return m == n && m < (long)sizeof again - 1 && rrc_memeq(again, link, (size_t)n);
}

/* A file, directory or device the restorer will open by its path: that
 * path must name the file open now (not, say, a POSIX message queue,
 * whose link "/name" is its queue file system's, or a file of a mount
 * that is not the process's). -1 with the error set if it does not. */
static int path_names_another(int fd, const char *lpath, const char *link, long n)
{
	struct stat open_st, path_st;
	if (rrc_sys_fstat(fd, &open_st) < 0)
		return 0; /* closed meanwhile: the pause decides */
	long r = rrc_sys_fstatat(AT_FDCWD, link, &path_st, 0);
	if (r == -EACCES || r == -EPERM)
		return 0; /* a server that dropped root may not see the path its fd was opened by as root; the
			   * restorer, root, does */
	if (r == 0 && (path_st.st_dev != open_st.st_dev || path_st.st_ino != open_st.st_ino))
		r = rrc_sys_fstatat(AT_FDCWD, link, &path_st, AT_SYMLINK_NOFOLLOW); /* an O_PATH fd of a symlink */
	if (r == 0 && path_st.st_dev == open_st.st_dev && path_st.st_ino == open_st.st_ino)
		return 0;
	if (!same_link(lpath, link, n))
		return 0; /* renamed or replaced while it was read: the pause decides */
	rrc_set_err(RRC_ERR_UNSUPPORTED_FD, 0, "fd ", fd, ": its path ");
	size_t l = rrc_strlen(rrc_s->err_msg);
	l = rrc_bput(rrc_s->err_msg, sizeof rrc_s->err_msg, l, link);
	rrc_bput(rrc_s->err_msg, sizeof rrc_s->err_msg, l,
		 r == 0 ? " names another file than the one open (a POSIX message queue, a file of another "
			  "mount namespace): a restore would open the wrong one"
			: " names no file here (a POSIX message queue, a file of another mount namespace): a "
			  "restore could not open it");
	return -1;
}

/* The pre-pause check of one fd: its kind can be described. */
static int check_one(long nfd, void *arg)
{
	struct walk *w = arg;
	int fd = (int)nfd;
	char *link = rrc_s->pathbuf;
	char lpath[64];

	if (lib_fd_kind(fd))
		return 0;
	rrc_proc_path(lpath, sizeof lpath, "fd", fd);
	long n = rrc_sys_readlinkat(AT_FDCWD, lpath, link, RRC_PATH_MAX - 1);
	if (n == -ENOENT || n == -EBADF)
		return 0; /* closed meanwhile (the check runs before the pause) */
	if (n < 0) {
		rrc_set_err(RRC_ERR_UNSUPPORTED_FD, (int)-n, "cannot read the link of fd ", fd, 0);
		w->failed = 1;
		return 1;
	}
	link[n] = 0;
	int k = classify(fd, link);
	if (k == 0 && rrc_startswith(link, "socket:[")) {
		struct rrc_fd tmp;
		rrc_memset(&tmp, 0, sizeof tmp);
		tmp.fd = fd;
		k = rrc_capture_socket(&tmp, fd, 0);
		if (k < 0 && !same_link(lpath, link, n)) {
			rrc_s->err_code = 0; /* closed or replaced while it was read: the pause decides */
			return 0;
		}
	}
	if (k == 0 && link[0] == '/' && path_names_another(fd, lpath, link, n) < 0)
		k = -1;
	if (k < 0 || (fd >= RRC_MAX_FDS && (rrc_set_err(RRC_ERR_UNSUPPORTED_FD, 0,
			"fd number too large for the library: ", fd, 0), 1))) {
		w->failed = 1;
		return 1;
	}
	return 0;
}

/* Before pausing (ordinary thread context, but written with the same
 * raw calls): refuse io_uring and fd kinds the image cannot describe. */
int rrc_fds_check(void)
{
	struct walk w = { 0 };
	rrc_s->tcp_v6 = 0; /* the check's sockets tell (a pause with the helper dumps by it) */
	char dir[64];
	rrc_proc_path(dir, sizeof dir, "fd", -1);
	long r = rrc_for_each_num_dirent(dir, rrc_s->dirbuf, sizeof rrc_s->dirbuf, check_one, &w);
	if (w.failed)
		return -1;
	if (r < 0) {
		rrc_set_err(RRC_ERR_UNSUPPORTED_FD, (int)-r, "cannot read /proc/self/fd", -1, 0);
		return -1;
	}
	return 0;
}

int rrc_fds_capture(void)
{
	struct rrc_scratch *s = rrc_s;
	struct walk w = { 0 };

	/* the last capture's records stay readable in the other buffer */
	uint8_t *last = s->fdbuf;
	s->fdbuf = s->fdprev;
	s->fdprev = last;
	s->fdprev_len = s->fdbuf_len;
	s->fdbuf_len = 0;
	s->nr_fds = 0;
	s->nr_libpipes = 0;
	s->tcp_v6 = 0;
	char dir[64];
	rrc_proc_path(dir, sizeof dir, "fd", -1);
	long r = rrc_for_each_num_dirent(dir, s->dirbuf, sizeof s->dirbuf, capture_one, &w);
	rrc_unix_walk_end();
	if (!w.failed && r < 0)
		rrc_set_err(RRC_ERR_UNSUPPORTED_FD, (int)-r, "cannot read /proc/self/fd", -1, 0);
	if (!w.failed && r >= 0 && (rrc_fds_share() < 0 || rrc_ghosts_check() < 0))
		w.failed = 1;
	if (w.failed || r < 0) {
		/* a partial list is no reference for the next capture */
		s->fdbuf_len = 0;
		rrc_fds_cleanup();
		return -1;
	}
	return 0;
}

void rrc_fds_cleanup(void)
{
	struct rrc_scratch *s = rrc_s;
	for (uint32_t i = 0; i < s->nr_libpipes; i++) {
		rrc_libfd_close(s->libpipes[i].rfd);
		rrc_libfd_close(s->libpipes[i].wfd);
	}
	s->nr_libpipes = 0;
}
