/* SPDX-License-Identifier: MIT
 *
 * epoll: the interest list from /proc/self/fdinfo ("tfd: N events: X
 * data: D" lines), stored as rrc_epoll_entry[] in the record's data.
 * Ready lists are not saved: the restored epoll reports readiness anew.
 * ASYNC-SIGNAL-SAFE.
 */
#include "rrc_lib.h"

int rrc_capture_epoll(int fd, struct rrc_fd *f)
{
	struct rrc_scratch *s = rrc_s;
	char *buf = s->textbuf;
	long r = rrc_read_fdinfo(fd, buf, sizeof s->textbuf);
	if (r < 0) {
		rrc_set_err(RRC_ERR_UNSUPPORTED_FD, (int)-r, "cannot read fdinfo of epoll fd ", fd, 0);
		return -1;
	}
	if ((uint64_t)r + 1 >= sizeof s->textbuf) {
		rrc_set_err(RRC_ERR_UNSUPPORTED_FD, 0, "interest list too long for the library at epoll fd ", fd, 0);
		return -1;
	}
	/* the entries follow the record (fd_append reserved only the path) */
	uint32_t n = 0;
	const char *p = buf, *end = buf + r;
	uint64_t rec_off = (uint64_t)((uint8_t *)f - s->fdbuf);
	for (; p < end; p = rrc_next_line(p, end)) {
		if (rrc_strncmp(p, "tfd:", 4))
			continue;
		const char *q = rrc_skip_ws(p + 4);
		struct rrc_epoll_entry e;
		e.fd = (int32_t)rrc_parse_u64(q, 10, &q);
		q = rrc_skip_ws(q);
		if (rrc_strncmp(q, "events:", 7))
			continue;
		e.events = (uint32_t)rrc_parse_u64(rrc_skip_ws(q + 7), 16, &q);
		q = rrc_skip_ws(q);
		if (rrc_strncmp(q, "data:", 5))
			continue;
		e.data = rrc_parse_u64(rrc_skip_ws(q + 5), 16, &q);
		if (s->fdbuf_len + sizeof e > s->fdbuf_cap) {
			rrc_set_err(RRC_ERR_UNSUPPORTED_FD, 0, "fd buffer full at epoll fd ", fd, 0);
			return -1;
		}
		rrc_memcpy(s->fdbuf + s->fdbuf_len, &e, sizeof e);
		s->fdbuf_len += sizeof e;
		n++;
	}
	f = (struct rrc_fd *)(s->fdbuf + rec_off);
	f->data_len = n * (uint32_t)sizeof(struct rrc_epoll_entry);
	return 0;
}
