/* SPDX-License-Identifier: MIT
 *
 * File locks (issue 16 §4): flock, POSIX (fcntl F_SETLK, lockf) and OFD
 * locks, read in the pause from the fdinfo of each regular file and
 * directory (the kernel lists there, as "lock:" lines, the locks whose
 * file is this fd's and whose owner is this process's fd table or this
 * open file: fs/locks.c, show_fd_locks) and appended to the fd's record
 * as its data (image.h struct rrc_file_lock). rrc-restore takes them again
 * once every fd is in place (restore/file-locks.c), leases (F_SETLEASE)
 * too: a lease is the open file's, and the restorer, whose pid the
 * restored process keeps, takes it again as its owner. A lease being
 * broken (another process opened the file: its open waits for the
 * holder), an NFS delegation and anything this reader does not know are
 * refused by name.
 * ASYNC-SIGNAL-SAFE (the pause; the pause helper when there is one).
 */
#include "rrc_lib.h"

/* the next space-separated word at *p: its start, *p past it */
static const char *word(const char **p, size_t *len)
{
	const char *s = *p;
	while (*s == ' ' || *s == '\t')
		s++;
	const char *e = s;
	while (*e && *e != ' ' && *e != '\t' && *e != '\n')
		e++;
	*len = (size_t)(e - s);
	*p = e;
	return s;
}

static int is(const char *w, size_t n, const char *lit)
{
	return n == rrc_strlen(lit) && !rrc_strncmp(w, lit, n);
}

static int refuse(int fd, const char *what)
{
	rrc_set_err(RRC_ERR_UNSUPPORTED_FD, 0, "fd ", fd, " holds ");
	size_t l = rrc_strlen(rrc_s->err_msg);
	rrc_bput(rrc_s->err_msg, sizeof rrc_s->err_msg, l, what);
	return -1;
}

/* One "lock:" line's value ("1: POSIX  ADVISORY  WRITE 7 00:2a:1234 0
 * EOF"): the lock, or -1 with the error set. */
static int parse_lock(int fd, const char *p, struct rrc_file_lock *lk)
{
	size_t n;
	const char *w = word(&p, &n); /* "1:" */
	w = word(&p, &n);
	if (is(w, n, "FLOCK"))
		lk->kind = RRC_LOCK_FLOCK;
	else if (is(w, n, "POSIX"))
		lk->kind = RRC_LOCK_POSIX;
	else if (is(w, n, "OFDLCK"))
		lk->kind = RRC_LOCK_OFD;
	else if (is(w, n, "LEASE"))
		lk->kind = RRC_LOCK_LEASE;
	else if (is(w, n, "DELEG"))
		return refuse(fd, "an NFS delegation, which an image does not carry");
	else
		return refuse(fd, "a file lock of a kind the library does not know (see its fdinfo)");
	w = word(&p, &n); /* ADVISORY; a lease's state */
	if (lk->kind == RRC_LOCK_LEASE && !is(w, n, "ACTIVE"))
		return refuse(fd, "a file lease being broken (another process is opening the file), which a restore "
			      "could not take again in that state");
	w = word(&p, &n);
	if (is(w, n, "READ"))
		lk->type = 0;
	else if (is(w, n, "WRITE"))
		lk->type = 1;
	else
		return refuse(fd, "a file lock that is neither READ nor WRITE (see its fdinfo)");
	word(&p, &n); /* pid */
	word(&p, &n); /* dev:ino */
	const char *end;
	w = word(&p, &n);
	uint64_t start = rrc_parse_u64(w, 10, &end);
	if (end == w)
		return refuse(fd, "a file lock whose range the library cannot read");
	w = word(&p, &n);
	if (lk->kind == RRC_LOCK_FLOCK || lk->kind == RRC_LOCK_LEASE) {
		lk->start = lk->len = 0;
	} else if (is(w, n, "EOF")) {
		lk->start = (int64_t)start;
		lk->len = 0;
	} else {
		uint64_t last = rrc_parse_u64(w, 10, &end);
		if (end == w || last < start)
			return refuse(fd, "a file lock whose range the library cannot read");
		lk->start = (int64_t)start;
		lk->len = (int64_t)(last - start + 1);
	}
	return 0;
}

int rrc_capture_locks(struct rrc_fd *f, int fd)
{
	struct rrc_scratch *s = rrc_s;
	char *buf = s->textbuf;
	long r = rrc_read_fdinfo(fd, buf, sizeof s->textbuf - 1);
	if (r < 0) {
		rrc_set_err(RRC_ERR_UNSUPPORTED_FD, (int)-r, "cannot read the fdinfo of fd ", fd, " (its file locks)");
		return -1;
	}
	buf[r] = 0;
	/* the record is the last in the buffer: its locks follow its path */
	uint32_t n = 0;
	for (const char *p = buf; (p = rrc_fdinfo_field(p, "lock:")) != 0;) {
		struct rrc_file_lock lk;
		if (parse_lock(fd, p, &lk) < 0)
			return -1;
		if (n == RRC_LOCKS_PER_FD)
			return refuse(fd, "more file locks than the 64 an fd's record carries");
		if (rrc_fd_data_put(&lk, sizeof lk, "fd buffer full at the file locks of fd ", fd) < 0)
			return -1;
		n++;
		while (*p && *p != '\n') /* the next line */
			p++;
	}
	f->data_len = n * (uint32_t)sizeof(struct rrc_file_lock);
	return 0;
}
