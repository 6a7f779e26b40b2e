/* SPDX-License-Identifier: MIT
 *
 * rrc-restore phase 1: epoll instances. The instance is created in fd
 * order; its interest list (rrc_epoll_entry[] in the record's data, from
 * fdinfo "tfd: events: data:") is added once every fd of the image
 * exists, so that entries may name fds with higher numbers or other epoll
 * instances.
 */
#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>
#include "restore.h"

void restore_epoll(struct fd_ctx *x, struct rfd *r)
{
	int fd = epoll_create1(EPOLL_CLOEXEC);

	if (fd < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)r->f->fd, "fd %d: epoll_create1 failed: %s",
			 r->f->fd, rst_strerror(errno));
	if (r->data_len % sizeof(struct rrc_epoll_entry))
		rst_fail(RRC_RST_FD, 0, (uint32_t)r->f->fd, "fd %d: epoll interest list of %u bytes is malformed",
			 r->f->fd, r->data_len);
	fd_place(x, fd_high(x, fd), r);
}

void restore_epoll_entries(struct fd_ctx *x, struct rfd *r)
{
	size_t n = r->data_len / sizeof(struct rrc_epoll_entry);

	for (size_t i = 0; i < n; i++) {
		struct rrc_epoll_entry e;
		struct epoll_event ev;
		const struct rfd *t;

		memcpy(&e, r->data + i * sizeof(e), sizeof(e));
		t = fd_find(x, e.fd);
		if (!t || t->f->kind == RRC_FD_LIB_INTERNAL)
			rst_fail(RRC_RST_FD, 0, (uint32_t)r->f->fd,
				 "fd %d: epoll entry for fd %d, which the image does not restore", r->f->fd, e.fd);
		ev.events = e.events;
		ev.data.u64 = e.data;
		if (epoll_ctl(r->f->fd, EPOLL_CTL_ADD, e.fd, &ev) < 0)
			rst_fail(RRC_RST_FD, errno, (uint32_t)r->f->fd,
				 "fd %d: epoll_ctl ADD fd %d (events 0x%x) failed: %s", r->f->fd, e.fd,
				 e.events, rst_strerror(errno));
	}
}
