/* SPDX-License-Identifier: MIT
 *
 * epoll: the interest list from /proc/self/fdinfo ("tfd: N events: X
 * data: D" lines), stored as rrc_epoll_entry[] in the record's data.
 * Ready lists are not saved: the restored epoll reports readiness anew.
 *
 * An entry is keyed by the fd number it was added with and the file that
 * number held then. The restorer adds each entry again through that
 * number, so the number must still hold that file: after dup2(a, b) and
 * close(a) the set still watches a's file under "tfd: a", and an image
 * would register nothing (a closed) or another file at a (the numbers
 * collide: a later "tfd: a" entry). Each entry's line names the watched
 * file's inode and device: an fstat of the number must show the same
 * (sockets, files: an inode is theirs alone). Anonymous inodes (eventfd,
 * timerfd, epoll: one inode for all) and pipes (both ends share theirs)
 * are asked kcmp(KCMP_EPOLL_TFD), which compares the very file (toff:
 * the entry's rank among those of one number). It walks the whole set
 * per call (~10 us each in a set of 1000, measured): only those entries
 * pay it. A mismatch refuses the dump, naming the epoll fd and the
 * number. CRIU checks the same.
 * ASYNC-SIGNAL-SAFE.
 */
#include <errno.h>
#include <sys/stat.h>
#include "rrc_lib.h"

#ifndef KCMP_EPOLL_TFD
#define KCMP_EPOLL_TFD 7
#endif

struct kcmp_slot { uint32_t efd, tfd, toff; };

/* The value after key in [p, eol), or NULL. */
static const char *in_line(const char *p, const char *eol, const char *key)
{
	size_t kl = rrc_strlen(key);
	for (; p + kl <= eol; p++)
		if (!rrc_strncmp(p, key, kl))
			return p + kl;
	return 0;
}

/* The kernel's dev_t of an fdinfo "sdev:" field, as stat encodes it. */
static uint64_t user_dev(uint64_t kdev)
{
	uint64_t major = kdev >> 20, minor = kdev & 0xfffff;
	return ((major & 0xfff) << 8) | ((major & ~0xfffull) << 32) | (minor & 0xff) | ((minor & ~0xffull) << 12);
}

/* The entry (tfd, its rank toff, the watched file's ino and kernel dev)
 * watches the file fd tfd holds now. */
static int still_held(int epfd, int32_t tfd, uint32_t toff, uint64_t ino, uint64_t kdev)
{
	struct stat st;
	long r = rrc_sys_fstat(tfd, &st);
	int named = ino || kdev; /* the line names the file (ino: and sdev:, Linux 4.x on) */
	if (r == 0 && named && (st.st_ino != ino || st.st_dev != user_dev(kdev)))
		r = 1; /* another file */
	if (r == 0 && (!named || st.st_dev == rrc_s->anonfs_dev || S_ISFIFO(st.st_mode))) {
		struct kcmp_slot slot = { (uint32_t)epfd, (uint32_t)tfd, toff };
		long self = rrc_sys_getpid();
		r = rrc_sys_kcmp(self, self, KCMP_EPOLL_TFD, (unsigned long)tfd, (unsigned long)&slot);
	}
	if (r == 0)
		return 1;
	size_t l;
	char *m = rrc_s->err_msg;
	rrc_set_err(RRC_ERR_UNSUPPORTED_FD, r < 0 ? (int)-r : 0, "epoll fd ", epfd, " watches a file added as fd ");
	l = rrc_strlen(m);
	l = rrc_bput_u64(m, sizeof rrc_s->err_msg, l, (uint64_t)tfd);
	rrc_bput(m, sizeof rrc_s->err_msg, l, r == -EBADF
		 ? ", which is closed now (the file lives on through a dup): a restore could not add it again"
		 : ", which holds another file now (dup2 or close after EPOLL_CTL_ADD): a restore would add the wrong file");
	return 0;
}

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
	uint64_t seen[RRC_MAX_FDS / 64] = { 0 };
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
		const char *eol = rrc_next_line(q, end);
		const char *t = in_line(q, eol, " ino:");
		uint64_t ino = t ? rrc_parse_u64(t, 16, 0) : 0;
		t = in_line(q, eol, " sdev:");
		uint64_t kdev = t ? rrc_parse_u64(t, 16, 0) : 0;
		/* earlier entries of the same number (rare: counted only then) */
		uint32_t toff = 0;
		if (e.fd >= 0 && e.fd < RRC_MAX_FDS && (seen[e.fd / 64] >> (e.fd % 64)) & 1) {
			for (uint32_t i = 0; i < n; i++)
				if (((const struct rrc_epoll_entry *)(s->fdbuf + rec_off + sizeof *f))[i].fd == e.fd)
					toff++;
		} else if (e.fd >= 0 && e.fd < RRC_MAX_FDS) {
			seen[e.fd / 64] |= 1ull << (e.fd % 64);
		}
		if (!still_held(fd, e.fd, toff, ino, kdev))
			return -1;
		if (rrc_fd_data_put(&e, sizeof e, "fd buffer full at epoll fd ", fd) < 0)
			return -1;
		n++;
	}
	f = (struct rrc_fd *)(s->fdbuf + rec_off);
	f->data_len = n * (uint32_t)sizeof(struct rrc_epoll_entry);
	return 0;
}
