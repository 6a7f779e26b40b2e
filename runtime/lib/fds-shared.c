/* SPDX-License-Identifier: MIT
 *
 * Open file descriptions shared by several fds (issue 16 §3).
 *
 * dup, dup2 and fcntl(F_DUPFD) give a second number to the same open file
 * description: the two share the file offset and the status flags
 * (O_NONBLOCK, O_APPEND), and a socket, an eventfd or an epoll set is one
 * object whichever number is used. Restored as two objects, a dup'd
 * listener would be bound twice, a dup'd eventfd would be two counters,
 * and an O_NONBLOCK set through one number would no longer show through
 * the other. CRIU finds such fds with kcmp(KCMP_FILE) and restores the
 * later ones by dup; so does this, after the fd walk: each record whose
 * open file description an earlier fd has becomes RRC_FD_DUP naming that
 * fd (the earliest), and the restorer dup3()s it (restore/fds.c).
 *
 * kcmp is asked only of candidates: the same kind, inode, status flags,
 * and record contents (u, path, data), which two numbers of one open file
 * description always have. Sockets cannot be opened again by path, so one
 * socket inode is one open file description: no kcmp. The records index
 * goes into the directory buffer, free once the walk is over.
 *
 * ASYNC-SIGNAL-SAFE: the whole file (it runs in the pause, in the pause
 * helper when there is one: it shares the fd table, kcmp of its own pid
 * compares the application's fds).
 */
#include <errno.h>
#include "rrc_lib.h"

#ifndef KCMP_FILE
#define KCMP_FILE 0
#endif

static int shareable(uint32_t kind)
{
	return kind == RRC_FD_REG || kind == RRC_FD_DIR || kind == RRC_FD_CHR || kind == RRC_FD_PIPE || kind == RRC_FD_GHOST ||
	       kind == RRC_FD_FIFO ||
	       kind == RRC_FD_EVENTFD || kind == RRC_FD_EPOLL || kind == RRC_FD_TIMERFD || kind == RRC_FD_SIGNALFD ||
	       kind == RRC_FD_INOTIFY ||
	       (kind >= RRC_FD_INET_LISTEN && kind <= RRC_FD_UNIX_OTHER);
}

static int is_socket(uint32_t kind)
{
	return kind >= RRC_FD_INET_LISTEN && kind <= RRC_FD_UNIX_OTHER;
}

/* a and b may be one open file description: everything recorded alike */
static int alike(const struct rrc_fd *a, const struct rrc_fd *b)
{
	if (a->kind != b->kind || a->ino != b->ino || a->file_flags != b->file_flags || a->mode != b->mode ||
	    a->pos != b->pos || a->path_len != b->path_len)
		return 0;
	if (is_socket(a->kind))
		return 1; /* one inode, one socket; its record may vary (carried over, or not) */
	if (a->kind == RRC_FD_PIPE || a->kind == RRC_FD_FIFO)
		return 1; /* the first end of a pipe carries its data (has_data, data_len): kcmp decides */
	if (!rrc_memeq(&a->u, &b->u, sizeof a->u) || a->data_len != b->data_len)
		return 0;
	/* the path, and the data where it is in the buffer (rrc_fd_data_inline) */
	return rrc_memeq(a + 1, b + 1, a->path_len + (rrc_fd_data_inline(a) ? a->data_len : 0));
}

int rrc_fds_share(void)
{
	struct rrc_scratch *s = rrc_s;
	uint32_t *at = (uint32_t *)(void *)s->dirbuf;
	uint32_t cap = sizeof s->dirbuf / sizeof *at, n = 0;
	long self = rrc_sys_getpid();

	for (uint64_t off = 0; off < s->fdbuf_len;) {
		const struct rrc_fd *f = (const struct rrc_fd *)(s->fdbuf + off);
		if (shareable(f->kind)) {
			if (n == cap) {
				rrc_set_err(RRC_ERR_UNSUPPORTED_FD, 0, "too many fds to compare their open files (at fd ",
					    f->fd, ")");
				return -1;
			}
			at[n++] = (uint32_t)off;
		}
		off += rrc_fd_rec_size(f);
	}
	for (uint32_t i = 1; i < n; i++) {
		struct rrc_fd *f = (struct rrc_fd *)(s->fdbuf + at[i]);
		for (uint32_t j = 0; j < i; j++) {
			const struct rrc_fd *e = (const struct rrc_fd *)(s->fdbuf + at[j]);
			if (e->kind == RRC_FD_DUP || !alike(e, f))
				continue;
			if (!is_socket(f->kind)) {
				long r = rrc_sys_kcmp(self, self, KCMP_FILE, (unsigned long)e->fd, (unsigned long)f->fd);
				if (r == -ENOSYS || r == -EPERM) {
					rrc_set_err(RRC_ERR_UNSUPPORTED_FD, (int)-r, "kcmp cannot compare fd ", f->fd,
						    "'s open file with an alike fd's (is kcmp allowed?)");
					return -1;
				}
				if (r != 0)
					continue;
			}
			int32_t of = e->fd;
			f->kind = RRC_FD_DUP;
			rrc_memset(&f->u, 0, sizeof f->u);
			f->u.dup.of = of;
			break;
		}
	}
	return 0;
}
