/* SPDX-License-Identifier: MIT
 *
 * rrc-restore phase 1: the fd table. Every rrc_fd of the newest image is
 * recreated at its own number (CRIU's files.c does the same dance): the
 * restorer's own fds (images, status, log) first move above the highest
 * number the image uses, everything else inherited is closed, then each
 * kind's file (files-reg.c, pipes.c, ...) creates its object, which is
 * moved to its number with dup3. Epoll interest lists are filled last,
 * when every target fd exists. Finally FD_CLOEXEC and O_NONBLOCK are set
 * as recorded.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "restore.h"
#include "sk.h"

struct rfd *fd_find(struct fd_ctx *x, int fd)
{
	for (size_t i = 0; i < x->c->nr_fds; i++)
		if (x->c->fds[i].f->fd == fd)
			return &x->c->fds[i];
	return NULL;
}

/* Move fd above every number the image uses (so that creating objects
 * never lands on, or is clobbered by, a number still to be placed). */
int fd_high(struct fd_ctx *x, int fd)
{
	int h;

	if (fd > x->max_target)
		return fd;
	h = fcntl(fd, F_DUPFD_CLOEXEC, x->max_target + 1);
	if (h < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)fd, "cannot move fd %d above fd %d: %s", fd,
			 x->max_target, rst_strerror(errno));
	close(fd);
	return h;
}

void fd_place(struct fd_ctx *x, int tmp, const struct rfd *r)
{
	int target = r->f->fd;

	if (tmp == target)
		return;
	if (dup3(tmp, target, O_CLOEXEC) < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)target, "fd %d: dup3 to its number failed: %s",
			 target, rst_strerror(errno));
	close(tmp);
}

/* own[] are updated in place to their new numbers */
void fds_prepare(struct fd_ctx *x, int *own, int nr_own)
{
	struct rlimit rl;

	x->max_target = -1;
	for (size_t i = 0; i < x->c->nr_fds; i++)
		if (x->c->fds[i].f->fd > x->max_target)
			x->max_target = x->c->fds[i].f->fd;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && (rlim_t)x->max_target + 1 + (rlim_t)nr_own + 8 > rl.rlim_cur) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
		if ((rlim_t)x->max_target + 1 + (rlim_t)nr_own + 8 > rl.rlim_cur)
			rst_fail(RRC_RST_FD, EMFILE, (uint32_t)x->max_target,
				 "the image uses fd %d, RLIMIT_NOFILE allows %llu", x->max_target,
				 (unsigned long long)rl.rlim_cur);
	}
	for (int i = 0; i < nr_own; i++) {
		int old = own[i];
		if (old < 0)
			continue;
		own[i] = fd_high(x, old);
		if (old == rst_status_fd)
			rst_status_fd = own[i];
		if (old == rst_log_fd)
			rst_log_fd = own[i];
	}
	/* close everything inherited that is not ours: the numbers must be
	 * free, and fds the image does not have must not leak into it.
	 * close_range over the gaps between our own (sorted) fds. */
	{
		int sorted[nr_own > 0 ? nr_own : 1], n = 0;
		unsigned int lo = 0;

		for (int i = 0; i < nr_own; i++) {
			int v = own[i], j = n;

			if (v < 0)
				continue;
			while (j > 0 && sorted[j - 1] > v) {
				sorted[j] = sorted[j - 1];
				j--;
			}
			sorted[j] = v;
			n++;
		}
		for (int i = 0; i <= n; i++) {
			unsigned int hi = i < n ? (unsigned int)sorted[i] : ~0u;

			if (hi > lo && syscall(SYS_close_range, lo, hi - 1, 0) < 0)
				rst_fail(RRC_RST_FD, errno, 0, "close_range(%u, %u) failed: %s", lo, hi - 1,
					 rst_strerror(errno));
			if (i < n)
				lo = (unsigned int)sorted[i] + 1;
		}
	}
}

static const char deleted[] = " (deleted)";

int path_is_deleted(const char *path)
{
	size_t n = strlen(path);
	return n > sizeof deleted - 1 && !strcmp(path + n - (sizeof deleted - 1), deleted);
}

int path_cut_deleted(char *path)
{
	if (!path_is_deleted(path))
		return 0;
	path[strlen(path) - (sizeof deleted - 1)] = 0;
	return 1;
}

const char *fd_kind_name(uint32_t kind)
{
	switch (kind) {
	case RRC_FD_REG: return "REG";
	case RRC_FD_GHOST: return "GHOST";
	case RRC_FD_DIR: return "DIR";
	case RRC_FD_CHR: return "CHR";
	case RRC_FD_PIPE: return "PIPE";
	case RRC_FD_EVENTFD: return "EVENTFD";
	case RRC_FD_EPOLL: return "EPOLL";
	case RRC_FD_TIMERFD: return "TIMERFD";
	case RRC_FD_SIGNALFD: return "SIGNALFD";
	case RRC_FD_INOTIFY: return "INOTIFY";
	case RRC_FD_FIFO: return "FIFO";
	case RRC_FD_MQUEUE: return "MQUEUE";
	case RRC_FD_INET_LISTEN: return "INET_LISTEN";
	case RRC_FD_INET_DGRAM: return "INET_DGRAM";
	case RRC_FD_INET_CONN: return "INET_CONN";
	case RRC_FD_UNIX_LISTEN: return "UNIX_LISTEN";
	case RRC_FD_UNIX_OTHER: return "UNIX_OTHER";
	case RRC_FD_DUP: return "DUP";
	case RRC_FD_LIB_CONTROL: return "LIB_CONTROL";
	case RRC_FD_LIB_INTERNAL: return "LIB_INTERNAL";
	}
	return "unknown";
}

static void set_flags(const struct rfd *r)
{
	int fd = r->f->fd, fl;

	if (fcntl(fd, F_SETFD, (r->f->fd_flags & FD_CLOEXEC) ? FD_CLOEXEC : 0) < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)fd, "fd %d: F_SETFD failed: %s", fd,
			 rst_strerror(errno));
	fl = fcntl(fd, F_GETFL);
	if (fl < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)fd, "fd %d: F_GETFL failed: %s", fd,
			 rst_strerror(errno));
	if ((fl & O_NONBLOCK) != (int)(r->f->file_flags & O_NONBLOCK)) {
		fl = (fl & ~O_NONBLOCK) | (int)(r->f->file_flags & O_NONBLOCK);
		if (fcntl(fd, F_SETFL, fl) < 0)
			rst_fail(RRC_RST_FD, errno, (uint32_t)fd, "fd %d: F_SETFL O_NONBLOCK failed: %s", fd,
				 rst_strerror(errno));
	}
}

static int is_tid(const struct chain *c, int32_t tid)
{
	for (size_t i = 0; i < c->nr_threads; i++)
		if ((int32_t)c->threads[i].tid == tid)
			return 1;
	return 0;
}

/* Signal-driven I/O (image.h struct rrc_fown), checked before anything
 * changes: an owner the restored process will have (itself, its own
 * process group, one of its threads), on a record made as an object of
 * its own (a DUP's is its object's). It is set later, by the blob once
 * every thread exists (restore/pie/restorer.c): a thread owner is not
 * there before the blob makes it with its tid, and with O_ASYNC armed
 * there, every signal blocked until the threads resume, a signal sent
 * meanwhile stays pending for the process rather than reaching the
 * restorer (pid 1 of its namespace: a signal it does not handle would be
 * dropped). Returns how many the blob arms. */
size_t fown_check(const struct chain *c)
{
	size_t n = 0;

	for (size_t i = 0; i < c->nr_fds; i++) {
		const struct rfd *r = &c->fds[i];
		const struct rrc_fown *o = &r->fown;
		int fd = r->f->fd, ok;
		static const char *const types[] = { "thread", "process", "process group" };

		if (!r->has_fown)
			continue;
		if (r->f->kind == RRC_FD_DUP || r->f->kind == RRC_FD_LIB_INTERNAL || r->f->kind == RRC_FD_LIB_CONTROL)
			rst_fail(RRC_RST_IMAGE, 0, (uint32_t)c->n,
				 "image %d (%s): fd %d (%s) has signal-driven I/O of its own, which only an fd "
				 "made as an object of its own can", c->n, c->newest->path, fd, fd_kind_name(r->f->kind));
		switch (o->owner_type) {
		case F_OWNER_TID:
			ok = is_tid(c, o->owner);
			break;
		case F_OWNER_PID:
			ok = o->owner == (int32_t)c->proc->pid || is_tid(c, o->owner);
			break;
		case F_OWNER_PGRP:
			ok = o->owner == (int32_t)c->proc->pid;
			break;
		default:
			ok = 0;
		}
		if (o->owner_type > F_OWNER_PGRP || (o->owner && !ok) || o->signal > 64 || o->reserved)
			rst_fail(RRC_RST_IMAGE, 0, (uint32_t)c->n,
				 "image %d (%s): fd %d: signal-driven I/O for %s %d (owner type %u), signal %u: the "
				 "owner must be the process, its own process group or one of its threads, the signal "
				 "at most 64", c->n, c->newest->path, fd,
				 o->owner_type <= F_OWNER_PGRP ? types[o->owner_type] : "an owner", o->owner,
				 o->owner_type, o->signal);
		if (o->owner)
			rst_log("fd %d: signal-driven I/O for %s %d, signal %u (set once the threads exist)", fd,
				types[o->owner_type], o->owner, o->signal);
		else
			rst_log("fd %d: signal-driven I/O without an owner, signal %u (set once the threads exist)", fd,
				o->signal);
		n++;
	}
	return n;
}

/* An RRC_FD_DUP record: its number gets the open file description of the
 * fd it names, made by its own record (never a duplicate, never the
 * library's). */
static void restore_dup(struct fd_ctx *x, struct rfd *r)
{
	int fd = r->f->fd, of = r->f->u.dup.of;
	const struct rfd *o = fd_find(x, of);

	if (!o || o == r || !o->done || o->f->kind == RRC_FD_DUP || o->f->kind == RRC_FD_LIB_INTERNAL ||
	    o->f->kind == RRC_FD_LIB_CONTROL)
		rst_fail(RRC_RST_FD, 0, (uint32_t)fd, "fd %d: a duplicate of fd %d, which the image %s", fd, of,
			 !o || o == r ? "does not have" : "does not restore as an object of its own");
	if (dup3(of, fd, O_CLOEXEC) < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)fd, "fd %d: dup3 of fd %d failed: %s", fd, of,
			 rst_strerror(errno));
	r->path = o->path;
	r->done = 1;
}

void fds_restore(struct fd_ctx *x)
{
	struct chain *c = x->c;
	size_t restored = 0;

	for (size_t i = 0; i < c->nr_fds; i++) {
		struct rfd *r = &c->fds[i];

		if (r->done)
			continue;
		switch (r->f->kind) {
		case RRC_FD_REG:
		case RRC_FD_DIR:
		case RRC_FD_CHR:
			restore_reg(x, r);
			break;
		case RRC_FD_PIPE:
			restore_pipe(x, r);
			break;
		case RRC_FD_EVENTFD:
			restore_eventfd(x, r);
			break;
		case RRC_FD_EPOLL:
			restore_epoll(x, r);
			break;
		case RRC_FD_TIMERFD:
			restore_timerfd(x, r);
			break;
		case RRC_FD_SIGNALFD:
			restore_signalfd(x, r);
			break;
		case RRC_FD_INOTIFY:
			restore_inotify(x, r);
			break;
		case RRC_FD_FIFO:
			restore_fifo(x, r);
			break;
		case RRC_FD_GHOST:
			restore_ghost(x, r);
			break;
		case RRC_FD_MQUEUE:
			restore_mqueue(x, r);
			break;
		case RRC_FD_INET_LISTEN:
		case RRC_FD_INET_DGRAM:
		case RRC_FD_INET_CONN:
			restore_inet(x, r);
			break;
		case RRC_FD_UNIX_LISTEN:
		case RRC_FD_UNIX_OTHER:
		case RRC_FD_LIB_CONTROL:
			restore_unix(x, r);
			break;
		case RRC_FD_LIB_INTERNAL:
			/* the library remakes its own fds; the number stays free */
			r->done = 1;
			continue;
		case RRC_FD_DUP:
			continue; /* once every object is made (below) */
		default:
			rst_fail(RRC_RST_FD, 0, (uint32_t)r->f->fd, "fd %d: unknown fd kind %u",
				 r->f->fd, r->f->kind);
		}
		r->done = 1;
	}
	/* later numbers of one open file description: before the epoll
	 * sets are filled, which may name them */
	for (size_t i = 0; i < c->nr_fds; i++)
		if (c->fds[i].f->kind == RRC_FD_DUP)
			restore_dup(x, &c->fds[i]);
	/* every unix name is bound: datagram sockets connect to theirs */
	unix_dgram_connect_all(x);
	for (size_t i = 0; i < c->nr_fds; i++)
		if (c->fds[i].f->kind == RRC_FD_EPOLL)
			restore_epoll_entries(x, &c->fds[i]);
	/* every listener is bound: the handed-in connections can go live */
	repaired_leave_repair(x);
	/* every socket at its number, out of repair: its options */
	sk_opts_apply(x);
	/* connections not yet accepted: the restored library's table */
	repaired_write_accept_queue(x);
	for (size_t i = 0; i < c->nr_fds; i++) {
		struct rfd *r = &c->fds[i];

		if (r->f->kind == RRC_FD_LIB_INTERNAL)
			continue;
		set_flags(r);
		restored++;
		rst_log("fd %d: %s %s%s", r->f->fd, fd_kind_name(r->f->kind), r->path,
			(r->f->fd_flags & FD_CLOEXEC) ? " (cloexec)" : "");
	}
	rst_log("%zu fds restored", restored);
}
