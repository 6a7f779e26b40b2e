/* SPDX-License-Identifier: MIT
 *
 * rrc-restore phase 1: inotify instances (RRC_FD_INOTIFY,
 * runtime/lib/inotify.c). Each watch is added again by the path the
 * library recorded, in the order of their numbers; the kernel numbers a
 * new watch one past the last it gave (idr_alloc_cyclic), so a watch that
 * comes back with a lower number than it had is removed and added again
 * until it has its own, as CRIU's fsnotify.c does. Those removals queue
 * IN_IGNORED events, which are read away before the instance is placed:
 * the dump refused an instance with events queued, so it had none.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>
#include "restore.h"

#define MAX_RENUMBER (1u << 20) /* add/remove rounds for one watch's number */

struct watch {
	struct rrc_inotify_watch w;
	const char *path;
};

static int by_wd(const void *a, const void *b)
{
	const struct watch *x = a, *y = b;
	return (x->w.wd > y->w.wd) - (x->w.wd < y->w.wd);
}

/* The record's watches, checked against its data; sorted by number. */
static struct watch *watches_of(const struct rfd *r, uint32_t *n)
{
	const struct rrc_fd *f = r->f;
	struct watch *ws = calloc(f->u.inotify.nr_watches + 1, sizeof(*ws));
	uint32_t off = 0;

	if (!ws)
		rst_fail(RRC_RST_FD, ENOMEM, (uint32_t)f->fd, "fd %d: %u inotify watches: out of memory", f->fd,
			 f->u.inotify.nr_watches);
	for (uint32_t i = 0; i < f->u.inotify.nr_watches; i++) {
		if (off > r->data_len || r->data_len - off < sizeof(ws[i].w))
			rst_fail(RRC_RST_IMAGE, 0, (uint32_t)f->fd, "fd %d: inotify watch %u of %u is cut", f->fd, i,
				 f->u.inotify.nr_watches);
		memcpy(&ws[i].w, r->data + off, sizeof(ws[i].w));
		off += (uint32_t)sizeof(ws[i].w);
		uint32_t plen = ws[i].w.path_len;
		if (plen == 0 || plen > RRC_INOTIFY_PATH_MAX || plen > r->data_len - off ||
		    r->data[off + plen - 1] != 0 || ws[i].w.wd <= 0)
			rst_fail(RRC_RST_IMAGE, 0, (uint32_t)f->fd, "fd %d: inotify watch %u: a path of %u bytes, number %d",
				 f->fd, i, plen, ws[i].w.wd);
		ws[i].path = (const char *)r->data + off;
		off += (plen + 7u) & ~7u;
	}
	*n = f->u.inotify.nr_watches;
	qsort(ws, *n, sizeof(*ws), by_wd);
	for (uint32_t i = 1; i < *n; i++)
		if (ws[i].w.wd == ws[i - 1].w.wd)
			rst_fail(RRC_RST_IMAGE, 0, (uint32_t)f->fd, "fd %d: two inotify watches numbered %d", f->fd,
				 ws[i].w.wd);
	return ws;
}

static void add(const struct rfd *r, int fd, const struct watch *w, int last)
{
	for (uint32_t round = 0; round < MAX_RENUMBER; round++) {
		int got = inotify_add_watch(fd, w->path, w->w.mask);

		if (got < 0)
			rst_fail(RRC_RST_FD, errno, (uint32_t)r->f->fd, "fd %d: cannot watch %s again (inotify watch %d): %s",
				 r->f->fd, w->path, w->w.wd, rst_strerror(errno));
		if (got == w->w.wd)
			return;
		if (got <= last)
			rst_fail(RRC_RST_FD, 0, (uint32_t)r->f->fd,
				 "fd %d: %s is the file of inotify watch %d already here, not a file of its own "
				 "(watch %d)", r->f->fd, w->path, got, w->w.wd);
		if (got > w->w.wd)
			break;
		inotify_rm_watch(fd, got);
	}
	rst_fail(RRC_RST_FD, 0, (uint32_t)r->f->fd, "fd %d: inotify watch %d of %s could not get its number back",
		 r->f->fd, w->w.wd, w->path);
}

void restore_inotify(struct fd_ctx *x, struct rfd *r)
{
	uint32_t n = 0;
	struct watch *ws = watches_of(r, &n);
	int fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK), last = 0;

	if (fd < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)r->f->fd, "fd %d: inotify_init1 failed: %s", r->f->fd,
			 rst_strerror(errno));
	fd = fd_high(x, fd);
	for (uint32_t i = 0; i < n; i++) {
		add(r, fd, &ws[i], last);
		last = ws[i].w.wd;
	}
	/* the renumbering's IN_IGNORED events */
	char buf[4096];
	while (read(fd, buf, sizeof(buf)) > 0)
		;
	rst_log("fd %d: inotify with %u watches", r->f->fd, n);
	free(ws);
	fd_place(x, fd, r);
}
