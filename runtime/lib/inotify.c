/* SPDX-License-Identifier: MIT
 *
 * inotify instances (issue 16 §4): each watch the fdinfo lists ("inotify
 * wd:%x ino:%lx sdev:%x mask:%x ...") is recorded with the path the
 * library's wrapper saw it added by (inotify.h), after checking that the
 * path still names the watched file. Refused, by name: events queued and
 * not yet read (an image does not carry them: the application reads them
 * within moments, and the next checkpoint succeeds), a watch the library
 * cannot name (added by a raw system call, a path too long, too many), a
 * watched file no longer at its path (moved, or replaced: a restore would
 * watch another file). CRIU finds a watch's path through its file handle
 * (open_by_handle_at, which needs CAP_DAC_READ_SEARCH: a server that
 * dropped its privileges has none, and a handle means nothing on another
 * host's file system).
 * ASYNC-SIGNAL-SAFE (the pause; in the pause helper when there is one).
 */
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include "rrc_lib.h"

/* the value after " key:" in line, in hex, or ~0 if absent */
static uint64_t field(const char *line, const char *key)
{
	size_t kl = rrc_strlen(key);
	for (const char *p = line; *p && *p != '\n'; p++)
		if ((p == line || p[-1] == ' ') && !rrc_strncmp(p, key, kl))
			return rrc_parse_u64(p + kl, 16, 0);
	return ~0ull;
}

static int refuse_watch(int fd, uint64_t wd, const char *why)
{
	char *m = rrc_s->err_msg;
	size_t cap = sizeof rrc_s->err_msg;
	rrc_set_err(RRC_ERR_UNSUPPORTED_FD, 0, "inotify fd ", fd, ": watch ");
	size_t l = rrc_strlen(m);
	l = rrc_bput_u64(m, cap, l, wd);
	rrc_bput(m, cap, l, why);
	return -1;
}

/* one watch into the record's data */
static int capture_watch(int fd, const char *line)
{
	uint64_t wd = field(line, "wd:"), ino = field(line, "ino:"), sdev = field(line, "sdev:"),
		 mask = field(line, "mask:");
	if (wd == ~0ull || ino == ~0ull || sdev == ~0ull || mask == ~0ull)
		return refuse_watch(fd, wd, ": its fdinfo line cannot be read");
	/* the fdinfo's device is the kernel's (major << 20 | minor) */
	uint64_t dev = makedev((unsigned)(sdev >> 20), (unsigned)(sdev & 0xfffff));
	const struct rrc_inotify_ent *e = rrc_inotify_find((int32_t)wd, dev, ino);
	if (!e)
		return refuse_watch(fd, wd, " has no path the library knows (added by a raw system call, by a path "
					"longer than 255 bytes, or past the library's 1024 watches)");
	struct stat st;
	if (rrc_sys_fstatat(AT_FDCWD, e->path, &st, (mask & 0x02000000 /* IN_DONT_FOLLOW */) ? AT_SYMLINK_NOFOLLOW : 0) < 0 ||
	    st.st_dev != dev || st.st_ino != ino)
		return refuse_watch(fd, wd, ": the file it watches is no longer at the path it was added by "
					"(moved or replaced): a restore would watch another file");
	uint32_t plen = (uint32_t)rrc_strlen(e->path) + 1;
	struct rrc_inotify_watch w = { (int32_t)wd, (uint32_t)mask, ino, (uint32_t)sdev, plen };
	uint8_t *at = rrc_fd_data_reserve((uint32_t)sizeof w + plen, 0, "fd buffer full at inotify fd ", fd);
	if (!at)
		return -1;
	rrc_memcpy(at, &w, sizeof w);
	rrc_memcpy(at + sizeof w, e->path, plen);
	return 0;
}

int rrc_capture_inotify(struct rrc_fd *f, int fd)
{
	int queued = 0;
	if (rrc_sys_ioctl(fd, FIONREAD, &queued) == 0 && queued > 0) {
		rrc_set_err(RRC_ERR_UNSUPPORTED_FD, 0, "inotify fd ", fd,
			    " has events queued and not yet read, which an image does not carry");
		return -1;
	}
	char *buf = rrc_s->textbuf;
	long r = rrc_read_fdinfo(fd, buf, sizeof rrc_s->textbuf - 1);
	if (r < 0 || r >= (long)sizeof rrc_s->textbuf - 1) {
		rrc_set_err(RRC_ERR_UNSUPPORTED_FD, r < 0 ? (int)-r : 0, "cannot read the watches of inotify fd ", fd, 0);
		return -1;
	}
	buf[r] = 0;
	uint64_t start = rrc_s->fdbuf_len;
	uint32_t n = 0;
	for (const char *p = buf; *p;) {
		if (!rrc_strncmp(p, "inotify ", 8)) {
			if (capture_watch(fd, p) < 0)
				return -1;
			n++;
		}
		while (*p && *p != '\n')
			p++;
		if (*p)
			p++;
	}
	f->u.inotify.nr_watches = n;
	f->data_len = (uint32_t)(rrc_s->fdbuf_len - start);
	return 0;
}
