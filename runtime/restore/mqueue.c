/* SPDX-License-Identifier: MIT
 *
 * rrc-restore phase 1: POSIX message queues (RRC_FD_MQUEUE,
 * runtime/lib/mqueue.c). The container's IPC namespace is new, and so is
 * its queue file system: the first fd of each queue makes it again
 * (mq_open with O_CREAT | O_EXCL, its name, the limits and the mode the
 * record holds) and sends it its messages in the order they were taken;
 * a queue whose name was removed (" (deleted)") loses it again at once.
 * Every fd of the queue, the first one included, is then an open of its
 * /proc link with the fd's access mode (so an unlinked queue can be
 * opened again, and no fd shares the restorer's descriptor); O_NONBLOCK
 * follows with the other fds' (fds.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <mqueue.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "restore.h"

/* The queue's name, without the kernel's " (deleted)"; 1 if it had it. */
static int queue_name(const struct rfd *r, char *name, size_t cap)
{
	snprintf(name, cap, "%s", r->path);
	return path_cut_deleted(name);
}

/* The queue's messages into q: the record's data, checked. */
static void send_messages(const struct rfd *r, mqd_t q)
{
	const struct rrc_fd *f = r->f;
	uint32_t off = 0;
	for (uint32_t i = 0; i < f->u.mqueue.nr_msgs; i++) {
		struct rrc_mq_msg m;
		if (r->data_len - off < sizeof m)
			rst_fail(RRC_RST_IMAGE, 0, (uint32_t)f->fd, "fd %d: message %u of its queue runs past the record",
				 f->fd, i);
		memcpy(&m, r->data + off, sizeof m);
		uint32_t padded = ((uint32_t)sizeof m + m.len + 7u) & ~7u;
		if (r->data_len - off < padded || m.len > (uint64_t)f->u.mqueue.msgsize)
			rst_fail(RRC_RST_IMAGE, 0, (uint32_t)f->fd, "fd %d: message %u of its queue (%u bytes) runs past "
				 "the record or its queue's message size", f->fd, i, m.len);
		if (mq_send(q, (const char *)r->data + off + sizeof m, m.len, m.prio) < 0)
			rst_fail(RRC_RST_FD, errno, (uint32_t)f->fd, "fd %d: sending message %u to %s again failed: %s", f->fd,
				 i, r->path, rst_strerror(errno));
		off += padded;
	}
	if (off != r->data_len)
		rst_fail(RRC_RST_IMAGE, 0, (uint32_t)f->fd, "fd %d: %u bytes after its queue's %u messages", f->fd,
			 r->data_len - off, f->u.mqueue.nr_msgs);
}

/* The first record of r's queue (its inode), restored before r. */
static const struct rfd *first_of(const struct fd_ctx *x, const struct rfd *r)
{
	for (size_t i = 0; i < x->c->nr_fds; i++) {
		const struct rfd *e = &x->c->fds[i];
		if (e == r)
			break;
		if (e->f->kind == RRC_FD_MQUEUE && e->f->ino == r->f->ino)
			return e;
	}
	return 0;
}

void restore_mqueue(struct fd_ctx *x, struct rfd *r)
{
	const struct rrc_fd *f = r->f;
	char name[RRC_PATH_MAX], self[64];
	int unlinked = queue_name(r, name, sizeof name);
	const struct rfd *first = first_of(x, r);
	if (!first != !!f->u.mqueue.first || (!f->u.mqueue.first && f->u.mqueue.nr_msgs))
		rst_fail(RRC_RST_IMAGE, 0, (uint32_t)f->fd, "fd %d: a queue's record says first %u with %u messages, "
			 "but it %s the first fd of %s", f->fd, f->u.mqueue.first, f->u.mqueue.nr_msgs,
			 first ? "is not" : "is", r->path);
	if (first) {
		snprintf(self, sizeof self, "/proc/self/fd/%d", first->f->fd);
	} else {
		struct mq_attr a = { .mq_maxmsg = f->u.mqueue.maxmsg, .mq_msgsize = f->u.mqueue.msgsize };
		mqd_t q = mq_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, f->mode & 0777, &a);
		if (q < 0)
			rst_fail(RRC_RST_FD, errno, (uint32_t)f->fd,
				 "fd %d: cannot make the message queue %s again (%ld messages of %ld bytes at most): %s", f->fd,
				 name, (long)a.mq_maxmsg, (long)a.mq_msgsize, rst_strerror(errno));
		send_messages(r, q);
		if (unlinked && mq_unlink(name) < 0)
			rst_fail(RRC_RST_FD, errno, (uint32_t)f->fd, "fd %d: mq_unlink(%s) failed: %s", f->fd, name,
				 rst_strerror(errno));
		/* the queue lives on in q until r's own open below */
		snprintf(self, sizeof self, "/proc/self/fd/%d", (int)q);
		int fd = open(self, (int)(f->file_flags & O_ACCMODE) | O_CLOEXEC);
		if (fd < 0)
			rst_fail(RRC_RST_FD, errno, (uint32_t)f->fd, "fd %d: cannot open %s again for its access mode: %s",
				 f->fd, r->path, rst_strerror(errno));
		mq_close(q);
		rst_log("fd %d: message queue %s made again with its %u message(s)%s", f->fd, name,
			f->u.mqueue.nr_msgs, unlinked ? ", its name removed" : "");
		fd_place(x, fd_high(x, fd), r);
		return;
	}
	/* another open of a queue an earlier fd made: through that fd's link
	 * (at its number by now) */
	int fd = open(self, (int)(f->file_flags & O_ACCMODE) | O_CLOEXEC);
	if (fd < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)f->fd, "fd %d: cannot open the message queue %s again: %s", f->fd,
			 r->path, rst_strerror(errno));
	rst_log("fd %d: message queue %s opened again", f->fd, name);
	fd_place(x, fd_high(x, fd), r);
}
