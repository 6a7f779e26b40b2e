/* SPDX-License-Identifier: MIT
 *
 * POSIX message queues (mq_open; issue 16 §4, what the process owns in its
 * IPC namespace: each namespace has its own queue file system, and rrc
 * starts every process in an IPC namespace of its own). An fd of one
 * reads "/name" (or "/name (deleted)" once mq_unlink took the name) and
 * lives on that file system (MQUEUE_MAGIC), not at the path on the root.
 *
 * In the pause, each fd's record gets the queue's limits (mq_getsetattr);
 * the first fd of each queue (fd order) gets its messages too. The kernel
 * has no way to read a message without taking it, so they are taken and
 * sent back at once, in the order they came: highest priority first,
 * oldest first within one, which is the order the queue keeps again (no
 * other thread runs meanwhile, and the namespace is the process's). They
 * are taken through a descriptor of the library's own (the fd's
 * /proc link opened again, read-write and non-blocking), so an fd open
 * for one direction only, or blocking, changes nothing. restore/mqueue.c
 * makes the queue again with its name, limits and messages.
 *
 * Refused, naming the fd: a notification registered (mq_notify: its
 * process and signal are not carried), more than RRC_MQ_BYTES_MAX of
 * messages. Not carried: the queue file's owner and mode (the restorer
 * makes it with the mode the fd's fstat gave).
 * ASYNC-SIGNAL-SAFE (the pause; the pause helper when there is one).
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include "rrc_lib.h"

#define MQUEUE_MAGIC 0x19800202

struct mq_attr_k {                /* the kernel's struct mq_attr */
	long flags, maxmsg, msgsize, curmsgs, reserved[4];
};

static int refuse(int fd, const char *why)
{
	rrc_set_err(RRC_ERR_UNSUPPORTED_FD, 0, "fd ", fd, why);
	return -1;
}

int rrc_is_mqueue(int fd, const char *link)
{
	/* "/name": a queue's name has no other slash */
	if (link[0] != '/')
		return 0;
	for (const char *p = link + 1; *p; p++)
		if (*p == '/')
			return 0;
	struct statfs fs;
	return rrc_syscall2(SYS_fstatfs, fd, (long)&fs) == 0 && fs.f_type == MQUEUE_MAGIC;
}

/* The value after key in the queue's one-line status, or NULL. */
static const char *field(const char *status, const char *key)
{
	size_t kl = rrc_strlen(key);
	for (const char *p = status; *p; p++)
		if (!rrc_strncmp(p, key, kl))
			return p + kl;
	return 0;
}

/* A /proc/sys number (LONG_MAX if it cannot be read: no check). */
static long sysctl_now(const char *path)
{
	char b[32];
	long n = rrc_read_file(path, b, sizeof b - 1);
	if (n <= 0)
		return 0x7fffffffffffffffl;
	b[n] = 0;
	return (long)rrc_parse_u64(b, 10, 0);
}

/* An earlier record of this walk of the same queue (its inode)? */
static int seen_before(const struct rrc_fd *f)
{
	struct rrc_scratch *s = rrc_s;
	for (uint64_t a = 0; a < s->fdbuf_len;) {
		const struct rrc_fd *e = (const struct rrc_fd *)(s->fdbuf + a);
		if (e == f)
			return 0;
		if (e->kind == RRC_FD_MQUEUE && e->ino == f->ino)
			return 1;
		a += rrc_fd_rec_size(e);
	}
	return 0;
}

/* Takes the queue's n messages through q and sends them back in the same
 * order, appending each to the record's data. 0, or -1 with the error set
 * (a message that could not be sent back is named: it is lost). */
static int take_and_put_back(struct rrc_fd *f, int fd, int q, long n, long msgsize)
{
	char *buf = rrc_s->textbuf;
	uint32_t prio[64], len[64];
	struct { long sec, nsec; } now = { 0, 0 };
	if (n > 64)
		return refuse(fd, " is a POSIX message queue holding more than 64 messages, which an image does not carry");
	uint64_t at = 0;
	long got = 0;
	for (; got < n; got++) {
		long r = rrc_sys_mq_timedreceive(q, buf + at, (size_t)msgsize, &prio[got], &now);
		if (r < 0)
			break;
		len[got] = (uint32_t)r;
		at += (uint64_t)r;
	}
	/* back first, whatever happened */
	at = 0;
	for (long i = 0; i < got; i++) {
		long r = rrc_sys_mq_timedsend(q, buf + at, len[i], prio[i], &now);
		if (r < 0) {
			rrc_set_err(RRC_ERR_UNSUPPORTED_FD, (int)-r, "fd ", fd,
				    ": a message of its POSIX message queue could not be sent back after it was read "
				    "(it is lost)");
			return -1;
		}
		at += len[i];
	}
	if (got < n)
		return refuse(fd, ": its POSIX message queue's messages could not all be read");
	at = 0;
	uint32_t data = 0;
	for (long i = 0; i < got; i++) {
		struct rrc_mq_msg m = { prio[i], len[i] };
		uint32_t padded;
		uint8_t *dst = rrc_fd_data_reserve((uint32_t)sizeof m + len[i], &padded,
						   "fd buffer full at the messages of fd ", fd);
		if (!dst)
			return -1;
		rrc_memcpy(dst, &m, sizeof m);
		rrc_memcpy(dst + sizeof m, buf + at, len[i]);
		at += len[i];
		data += padded;
	}
	f->u.mqueue.nr_msgs = (uint32_t)got;
	f->data_len = data;
	return 0;
}

int rrc_capture_mqueue(struct rrc_fd *f, int fd)
{
	struct rrc_scratch *s = rrc_s;
	struct mq_attr_k a;
	long r = rrc_sys_mq_getsetattr(fd, 0, &a);
	if (r < 0) {
		rrc_set_err(RRC_ERR_UNSUPPORTED_FD, (int)-r, "mq_getsetattr failed on fd ", fd, 0);
		return -1;
	}
	f->u.mqueue.maxmsg = a.maxmsg;
	f->u.mqueue.msgsize = a.msgsize;
	f->u.mqueue.nr_msgs = 0;
	f->u.mqueue.first = !seen_before(f);
	if (!f->u.mqueue.first)
		return 0;
	if ((uint64_t)a.curmsgs * (uint64_t)a.msgsize > RRC_MQ_BYTES_MAX)
		return refuse(fd, " is a POSIX message queue holding more than 1 MiB of messages, which an image does not carry");
	/* a queue larger than the namespace's limits was made with
	 * CAP_SYS_RESOURCE, which the restorer has not */
	if (a.maxmsg > sysctl_now("/proc/sys/fs/mqueue/msg_max") ||
	    a.msgsize > sysctl_now("/proc/sys/fs/mqueue/msgsize_max"))
		return refuse(fd, " is a POSIX message queue larger than fs.mqueue.msg_max or msgsize_max allow "
				  "(made with CAP_SYS_RESOURCE, which a restore has not)");
	/* a descriptor of the library's own: read-write, non-blocking */
	char self[64];
	rrc_proc_path(self, sizeof self, "fd", fd);
	long q = rrc_sys_openat(AT_FDCWD, self, O_RDWR | O_NONBLOCK | O_CLOEXEC, 0);
	if (q < 0) {
		rrc_set_err(RRC_ERR_UNSUPPORTED_FD, (int)-q, "cannot open the POSIX message queue of fd ", fd,
			    " again to read it");
		return -1;
	}
	/* the queue's status is what a read of it gives ("QSIZE:... NOTIFY:...
	 * SIGNO:... NOTIFY_PID:..."): a notification is refused */
	int rc = 0;
	r = rrc_sys_pread((int)q, s->textbuf, 255, 0);
	if (r > 0) {
		s->textbuf[r] = 0;
		const char *np = field(s->textbuf, "NOTIFY_PID:");
		if (np && rrc_parse_u64(np, 10, 0) != 0)
			rc = refuse(fd, " is a POSIX message queue with a notification registered (mq_notify), which an "
					"image does not carry");
	}
	if (rc == 0 && a.curmsgs > 0)
		rc = take_and_put_back(f, fd, (int)q, a.curmsgs, a.msgsize);
	rrc_sys_close((int)q);
	return rc;
}
