/* SPDX-License-Identifier: MIT
 *
 * Recording of input: what reads, receives, accepts and readiness waits
 * returned (issue 13 §1; RRC §4.1). The bytes a call returned are in its
 * event, so a replay needs nothing but the log; in the next issue the
 * backup's gate also holds a client's bytes, and the log may then name
 * them instead.
 *
 *   read readv pread pread64 recv recvfrom recvmsg   READ (obj: fd; data: the bytes,
 *                                                    recvfrom/recvmsg: rrc_log_recv first)
 *   accept accept4 (accept-queue.c calls in here)    ACCEPT (result: the fd; data: peer address)
 *   epoll_wait epoll_pwait epoll_pwait2              EPOLL_WAIT (data: the events)
 *   poll ppoll                                       POLL (data: the pollfd array after)
 *   select pselect                                   SELECT (data: the three sets after)
 *   (waits.c calls in here for the last three)
 *   getsockname getpeername                          SOCKNAME (seq 0 / 1; data: the address)
 *   ioctl FIONREAD TIOCOUTQ                          IOCTL (seq: the request; data: the int)
 *   shutdown setsockopt getsockopt connect           SOCKOPT (seq: which; getsockopt: the value)
 *
 * While recording, a read of anything but a regular file returns at most
 * RRC_LOG_MAX_DATA (64 KiB), and a readiness wait at most what fits in
 * that: a shorter read or fewer events, which the calls allow. A regular
 * file's reads are whole, their bytes named by a CRC32C (flag FILE): a
 * replay reads them again and checks them.
 *
 * A call that may block is made before the hook guard, its event appended
 * inside it: a thread parked between the two logs its call as the first
 * event after the cut, which is what a replay from that checkpoint (the
 * call's effects in the image, the thread past it) expects. Not recorded
 * yet: recvmmsg (issue 13 continues).
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include "rrc_lib.h"
#include "rr-log.h"
#include "rr-io.h"
#include "rr-fds.h"
#include "rr-replay.h"
#include "rr-conns.h"
#include "rrc/crc32c.h"

static ssize_t (*real_read)(int, void *, size_t);
static ssize_t (*real_readv)(int, const struct iovec *, int);
static ssize_t (*real_pread)(int, void *, size_t, off_t);
static ssize_t (*real_recv)(int, void *, size_t, int);
static ssize_t (*real_recvfrom)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
static ssize_t (*real_recvmsg)(int, struct msghdr *, int);

#define RESOLVE(name) do { if (!real_##name) real_##name = dlsym(RTLD_NEXT, #name); } while (0)

void rrc_io_resolve(void)
{
	RESOLVE(read); RESOLVE(readv); RESOLVE(pread); RESOLVE(recv); RESOLVE(recvfrom); RESOLVE(recvmsg);
}

#define CAP RRC_LOG_MAX_DATA

static inline size_t capped(size_t n) { return n > CAP ? CAP : n; }

enum how { HOW_READ, HOW_PREAD, HOW_READV };
static int input_late(int fd, const struct iovec *iov, int cnt, enum how how, off_t off, struct msghdr *m, ssize_t *r);

/* Enters the hook guard to log a call's event; a thread restored into
 * replay since its call (parked anywhere between the call and here) leaves
 * it and runs `late` instead: its call is the log's next event. */
#define LOG_OR_LATE(late) do { \
		rrc_hook_enter(); \
		if (!rrc_rr_recording()) { \
			rrc_hook_leave(); \
			late; \
		} \
	} while (0)

/* The event of a read-like call that returned r into v; errno kept. A
 * regular file's bytes are named by their CRC32C: a replay reads them
 * again from the file (restored with the checkpoint, or the same file)
 * and checks them. */
static ssize_t logged_read(int fd, const struct iovec *v, enum how how, off_t off, ssize_t r, int file)
{
	int e = errno;
	const void *buf = v->iov_base;
	LOG_OR_LATE({ errno = e; input_late(fd, v, 1, how, off, 0, &r); return r; });
	if (file) {
		uint32_t crc = r > 0 ? rrc_crc32c(buf, (size_t)r) : 0;
		rrc_rr_event(RRC_EV_READ, RRC_EVF_FILE, (uint64_t)fd, 0, r < 0 ? -e : r, &crc, sizeof crc);
	} else {
		rrc_rr_event(RRC_EV_READ, 0, (uint64_t)fd, 0, r < 0 ? -e : r, r > 0 ? buf : 0, r > 0 ? (uint32_t)r : 0);
	}
	rrc_hook_leave();
	errno = e;
	return r;
}

/* The bytes a read may return while recording: a regular file's all (its
 * event holds a CRC), anything else's at most CAP. */
static size_t readable(int fd, size_t n, int *file)
{
	*file = rrc_fdt_is_file(fd);
	rrc_rr_reserve(*file ? 4 : (uint32_t)capped(n));
	return *file ? n : capped(n);
}

/* ---- replay ---- */

/* How a regular file's read is made again: the same call, raw (enum how above). */

static ssize_t again(enum how how, int fd, const struct iovec *iov, int cnt, off_t off)
{
	long r = how == HOW_READV ? rrc_syscall3(SYS_readv, fd, (long)iov, cnt)
		 : how == HOW_PREAD ? rrc_syscall4(SYS_pread64, fd, (long)iov[0].iov_base, (long)iov[0].iov_len, off)
				    : rrc_syscall3(SYS_read, fd, (long)iov[0].iov_base, (long)iov[0].iov_len);
	if (r < 0 && r > -4096) {
		errno = (int)-r;
		return -1;
	}
	return r;
}

/* The recorded bytes into iov; diverges if they do not fit. */
static void scatter(const uint8_t *p, uint64_t n, const struct iovec *iov, int cnt)
{
	for (int i = 0; i < cnt && n; i++) {
		size_t k = iov[i].iov_len < n ? iov[i].iov_len : (size_t)n;
		rrc_memcpy(iov[i].iov_base, p, k);
		p += k;
		n -= k;
	}
	if (n)
		rrc_rp_diverge("a read into a buffer shorter than the recorded bytes, short by", n);
}

/* Replay of a read-like call: the recorded bytes (a regular file's are
 * read again and checked by CRC32C; what a pipe's or an eventfd's read
 * took is taken from them too). For recvfrom/recvmsg, m receives the
 * address, control data and flags. 1 if replayed (*r the outcome), 0 if
 * the call runs live. */
static int input_replay(int fd, const struct iovec *iov, int cnt, enum how how, off_t off, struct msghdr *m,
			ssize_t *r, int take)
{
	if (!rrc_rr_replaying())
		return 0;
	const struct rrc_log_event *e = rrc_rp_next(RRC_EV_READ, (uint64_t)fd);
	if (!e)
		return 0;
	const uint8_t *d = rrc_rp_data(e);
	if (e->flags & RRC_EVF_FILE) {
		ssize_t got = again(how, fd, iov, cnt, off);
		int64_t now = got < 0 ? -errno : got;
		if (now != e->result)
			rrc_rp_diverge("a regular file's read returned", (uint64_t)now);
		uint32_t crc = rrc_rr_crc_iov(iov, cnt, got > 0 ? (size_t)got : 0), want = 0;
		rrc_memcpy(&want, d, e->data_len < 4 ? e->data_len : 4);
		if (got > 0 && crc != want)
			rrc_rp_diverge("a regular file's bytes with CRC32C", crc);
		*r = rrc_rp_result(e);
		return 1;
	}
	uint64_t n = e->result > 0 ? (uint64_t)e->result : 0;
	if (e->flags & RRC_EVF_MSG) {
		struct rrc_log_recv h;
		rrc_memcpy(&h, d, sizeof h);
		d += sizeof h;
		scatter(d, n, iov, cnt);
		if (take)
			rrc_rc_read(fd, d, n);
		if (m) {
			if (m->msg_name && h.name_len) {
				uint32_t k = h.name_len < m->msg_namelen ? h.name_len : m->msg_namelen;
				rrc_memcpy(m->msg_name, d + n, k);
			}
			m->msg_namelen = h.name_len;
			if (m->msg_control && h.control_len) {
				uint32_t k = h.control_len < m->msg_controllen ? h.control_len : (uint32_t)m->msg_controllen;
				rrc_memcpy(m->msg_control, d + n + h.name_len, k);
			}
			m->msg_controllen = h.control_len;
			m->msg_flags = (int)h.msg_flags;
		}
	} else {
		scatter(d, n, iov, cnt);
		if (!take || !rrc_rc_read(fd, d, n))
			rrc_rp_owe(fd, d, n);
	}
	*r = rrc_rp_result(e);
	return 1;
}

static int input_replayed(int fd, const struct iovec *iov, int cnt, enum how how, off_t off, struct msghdr *m,
			  ssize_t *r)
{
	return input_replay(fd, iov, cnt, how, off, m, r, 1);
}

/* A read begun while recording that returns after a restore into replay:
 * the program must see its recorded outcome, whether the call completed
 * before the checkpoint (its bytes are in the image: the recorded ones, the
 * same), was interrupted (the restarted call rewritten to EINTR,
 * rr-replay.c), or ran after the restore (parked before its syscall: then
 * on the restored stand-in of its fd). So it is replayed; only a regular
 * file's read, which the restored offset makes the same whenever it ran,
 * keeps its real outcome, which must be the recorded one. 1 if handled. */
static int input_late(int fd, const struct iovec *iov, int cnt, enum how how, off_t off, struct msghdr *m, ssize_t *r)
{
	if (!rrc_rr_replaying())
		return 0;
	int e = errno;
	const struct rrc_log_event *ev = rrc_rp_peek(RRC_EV_READ, (uint64_t)fd);
	if (ev && (ev->flags & RRC_EVF_FILE) && !(*r < 0 && e == EINTR)) {
		if (ev->result != (*r < 0 ? -e : *r))
			rrc_rp_diverge("a regular file's read at the checkpoint returned", (uint64_t)*r);
		rrc_rp_done();
		errno = e;
		return 1;
	}
	/* the call already took its bytes off the socket: before the
	 * checkpoint (the restored connection starts after them) or on the
	 * restored one */
	return input_replay(fd, iov, cnt, how, off, m, r, 0);
}

ssize_t read(int fd, void *buf, size_t n)
{
	RESOLVE(read);
	struct iovec v = { buf, n };
	ssize_t r;
	if (input_replayed(fd, &v, 1, HOW_READ, 0, 0, &r))
		return r;
	if (!rrc_rr_recording())
		return real_read(fd, buf, n);
	int file;
	n = readable(fd, n, &file);
	r = RRC_IN_CALL(1, real_read(fd, buf, n));
	if (input_late(fd, &v, 1, HOW_READ, 0, 0, &r))
		return r;
	return logged_read(fd, &v, HOW_READ, 0, r, file);
}

ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
	RESOLVE(pread);
	struct iovec v = { buf, n };
	ssize_t r;
	if (input_replayed(fd, &v, 1, HOW_PREAD, off, 0, &r))
		return r;
	if (!rrc_rr_recording())
		return real_pread(fd, buf, n, off);
	int file;
	n = readable(fd, n, &file);
	r = RRC_IN_CALL(1, real_pread(fd, buf, n, off));
	if (input_late(fd, &v, 1, HOW_PREAD, off, 0, &r))
		return r;
	return logged_read(fd, &v, HOW_READ, 0, r, file);
}

ssize_t pread64(int fd, void *buf, size_t n, off_t off) __attribute__((alias("pread")));

ssize_t recv(int fd, void *buf, size_t n, int flags)
{
	RESOLVE(recv);
	struct iovec v = { buf, n };
	ssize_t r;
	if (input_replayed(fd, &v, 1, HOW_READ, 0, 0, &r))
		return r;
	if (!rrc_rr_recording())
		return real_recv(fd, buf, n, flags);
	rrc_rr_reserve((uint32_t)capped(n));
	r = RRC_IN_CALL(1, real_recv(fd, buf, capped(n), flags));
	if (input_late(fd, &v, 1, HOW_READ, 0, 0, &r))
		return r;
	return logged_read(fd, &v, HOW_READ, 0, r, 0);
}

/* iov[0..cnt) cut to at most CAP bytes in total, into out (IOV_MAX
 * entries); returns the entries kept. */
static int cap_iov(const struct iovec *iov, int cnt, struct iovec *out)
{
	size_t left = CAP;
	int k = 0;
	for (int i = 0; i < cnt && i < 1024 && left; i++) {
		out[k] = iov[i];
		if (out[k].iov_len > left)
			out[k].iov_len = left;
		left -= out[k].iov_len;
		k++;
	}
	return k;
}

/* The event of a call that returned r bytes scattered over iov: a head,
 * the first r bytes, then up to two tails (address, control data). */
static void log_iov(uint16_t flags, int fd, const struct iovec *iov, int cnt, ssize_t r, int e,
		    const void *head, uint32_t head_len, const void *tail1, uint32_t len1,
		    const void *tail2, uint32_t len2)
{
	struct iovec p[1024 + 3];
	int n = 0;
	if (head_len)
		p[n++] = (struct iovec){ (void *)head, head_len };
	size_t want = r > 0 ? (size_t)r : 0;
	for (int i = 0; i < cnt && want; i++) {
		size_t k = iov[i].iov_len < want ? iov[i].iov_len : want;
		p[n++] = (struct iovec){ iov[i].iov_base, k };
		want -= k;
	}
	if (len1)
		p[n++] = (struct iovec){ (void *)tail1, len1 };
	if (len2)
		p[n++] = (struct iovec){ (void *)tail2, len2 };
	rrc_rr_eventv(RRC_EV_READ, flags, (uint64_t)fd, 0, r < 0 ? -e : r, p, n);
}

ssize_t readv(int fd, const struct iovec *iov, int cnt)
{
	RESOLVE(readv);
	ssize_t rr_;
	if (cnt >= 0 && cnt <= 1024 && input_replayed(fd, iov, cnt, HOW_READV, 0, 0, &rr_))
		return rr_;
	if (!rrc_rr_recording())
		return real_readv(fd, iov, cnt);
	if (cnt > 0 && cnt <= 1024 && rrc_fdt_is_file(fd)) {
		/* a regular file: whole, named by the CRC32C of what came back */
		rrc_rr_reserve(4);
		ssize_t r = real_readv(fd, iov, cnt);
		if (input_late(fd, iov, cnt, HOW_READV, 0, 0, &r))
			return r;
		int e = errno;
		uint32_t crc = rrc_rr_crc_iov(iov, cnt, r > 0 ? (size_t)r : 0);
		LOG_OR_LATE({ errno = e; input_late(fd, iov, cnt, HOW_READV, 0, 0, &r); return r; });
		rrc_rr_event(RRC_EV_READ, RRC_EVF_FILE, (uint64_t)fd, 0, r < 0 ? -e : r, &crc, sizeof crc);
		rrc_hook_leave();
		errno = e;
		return r;
	}
	struct iovec v[1024];
	int bad = cnt < 0 || cnt > 1024; /* the kernel refuses it: EINVAL, recorded as such */
	int k = bad ? 0 : cap_iov(iov, cnt, v);
	rrc_rr_reserve(CAP);
	ssize_t r = RRC_IN_CALL(1, bad ? real_readv(fd, iov, cnt) : real_readv(fd, v, k));
	if (!bad && input_late(fd, v, k, HOW_READV, 0, 0, &r))
		return r;
	int e = errno;
	if (!bad)
		LOG_OR_LATE({ errno = e; input_late(fd, v, k, HOW_READV, 0, 0, &r); return r; });
	else
		rrc_hook_enter();
	log_iov(0, fd, v, r > 0 ? k : 0, r, e, 0, 0, 0, 0, 0, 0);
	rrc_hook_leave();
	errno = e;
	return r;
}

/* The address and control data of recvfrom/recvmsg are small (at most
 * 128 + 256 bytes are kept); what does not fit is not returned either. */
#define NAME_MAX_LOG 128u
#define CONTROL_MAX_LOG 256u

ssize_t recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *addr, socklen_t *alen)
{
	RESOLVE(recvfrom);
	struct iovec v1 = { buf, n };
	struct msghdr mh = { .msg_name = addr, .msg_namelen = addr && alen ? *alen : 0 };
	ssize_t r;
	if (input_replayed(fd, &v1, 1, HOW_READ, 0, &mh, &r)) {
		if (alen && addr)
			*alen = mh.msg_namelen;
		return r;
	}
	if (!rrc_rr_recording())
		return real_recvfrom(fd, buf, n, flags, addr, alen);
	n = capped(n);
	rrc_rr_reserve((uint32_t)(n + sizeof(struct rrc_log_recv) + NAME_MAX_LOG));
	r = RRC_IN_CALL(1, real_recvfrom(fd, buf, n, flags, addr, alen));
	if (input_late(fd, &v1, 1, HOW_READ, 0, &mh, &r)) {
		if (alen && addr)
			*alen = mh.msg_namelen;
		return r;
	}
	int e = errno;
	LOG_OR_LATE({
		errno = e;
		input_late(fd, &v1, 1, HOW_READ, 0, &mh, &r);
		if (alen && addr)
			*alen = mh.msg_namelen;
		return r;
	});
	struct rrc_log_recv h = { 0 };
	if (r >= 0 && addr && alen)
		h.name_len = *alen < NAME_MAX_LOG ? *alen : NAME_MAX_LOG;
	struct iovec one = { buf, r > 0 ? (size_t)r : 0 };
	log_iov(RRC_EVF_MSG, fd, &one, 1, r, e, &h, sizeof h, addr, h.name_len, 0, 0);
	rrc_hook_leave();
	errno = e;
	return r;
}

ssize_t recvmsg(int fd, struct msghdr *m, int flags)
{
	RESOLVE(recvmsg);
	ssize_t rr_;
	if (m && m->msg_iovlen <= 1024 && input_replayed(fd, m->msg_iov, (int)m->msg_iovlen, HOW_READ, 0, m, &rr_))
		return rr_;
	if (!rrc_rr_recording() || !m || m->msg_iovlen > 1024) /* the last: EINVAL, nothing returned */
		return real_recvmsg(fd, m, flags);
	struct iovec v[1024];
	struct msghdr mm = *m;
	mm.msg_iovlen = (size_t)cap_iov(m->msg_iov, (int)m->msg_iovlen, v);
	mm.msg_iov = v;
	if (mm.msg_controllen > CONTROL_MAX_LOG)
		mm.msg_controllen = CONTROL_MAX_LOG;
	if (mm.msg_namelen > NAME_MAX_LOG)
		mm.msg_namelen = NAME_MAX_LOG;
	rrc_rr_reserve(CAP);
	ssize_t r = RRC_IN_CALL(1, real_recvmsg(fd, &mm, flags));
	if (input_late(fd, m->msg_iov, (int)m->msg_iovlen, HOW_READ, 0, m, &r))
		return r;
	int e = errno;
	m->msg_namelen = mm.msg_namelen;
	m->msg_controllen = mm.msg_controllen;
	m->msg_flags = mm.msg_flags;
	LOG_OR_LATE({ errno = e; input_late(fd, m->msg_iov, (int)m->msg_iovlen, HOW_READ, 0, m, &r); return r; });
	struct rrc_log_recv h = { 0 };
	if (r >= 0) {
		h.name_len = mm.msg_name ? mm.msg_namelen : 0;
		h.control_len = mm.msg_control ? (uint32_t)mm.msg_controllen : 0;
		h.msg_flags = (uint32_t)mm.msg_flags;
	}
	log_iov(RRC_EVF_MSG, fd, v, (int)mm.msg_iovlen, r, e, &h, sizeof h, mm.msg_name, h.name_len,
		mm.msg_control, h.control_len);
	rrc_hook_leave();
	errno = e;
	return r;
}

/* ---- socket addresses: the kernel picks ephemeral ports ---- */

static int (*real_getsockname)(int, struct sockaddr *, socklen_t *);
static int (*real_getpeername)(int, struct sockaddr *, socklen_t *);

static int sockname(int peer, int fd, struct sockaddr *addr, socklen_t *alen,
		    int (*real)(int, struct sockaddr *, socklen_t *))
{
	if (rrc_rr_replaying() && alen) {
		const struct rrc_log_event *e = rrc_rp_next(RRC_EV_SOCKNAME, (uint64_t)fd);
		if (e) {
			if (e->seq != (uint64_t)peer)
				rrc_rp_diverge(peer ? "getpeername" : "getsockname", (uint64_t)fd);
			if (e->result >= 0) {
				socklen_t k = e->data_len < *alen ? e->data_len : *alen;
				if (addr)
					rrc_memcpy(addr, rrc_rp_data(e), k);
				*alen = (socklen_t)e->result;
				rrc_rp_done();
				return 0;
			}
			return (int)rrc_rp_result(e);
		}
	}
	if (!rrc_rr_recording() || !alen)
		return real(fd, addr, alen);
	socklen_t given = *alen;
	rrc_rr_reserve(128);
	rrc_hook_enter();
	int r = real(fd, addr, alen);
	int err = errno;
	uint32_t keep = r == 0 && addr ? (uint32_t)(*alen < given ? *alen : given) : 0;
	rrc_rr_event(RRC_EV_SOCKNAME, 0, (uint64_t)fd, (uint64_t)peer, r == 0 ? (int64_t)*alen : -(int64_t)err, addr,
		     keep > 128 ? 128 : keep);
	rrc_hook_leave();
	errno = err;
	return r;
}

int getsockname(int fd, struct sockaddr *addr, socklen_t *alen)
{
	RESOLVE(getsockname);
	return sockname(0, fd, addr, alen, real_getsockname);
}

int getpeername(int fd, struct sockaddr *addr, socklen_t *alen)
{
	RESOLVE(getpeername);
	return sockname(1, fd, addr, alen, real_getpeername);
}

/* ---- the bytes waiting on a socket or pipe (lighttpd asks FIONREAD) ---- */

#define FIONREAD_ 0x541B
#define TIOCOUTQ_ 0x5411
static int (*real_ioctl)(int, unsigned long, ...);

int ioctl(int fd, unsigned long req, ...)
{
	va_list ap;
	va_start(ap, req);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	RESOLVE(ioctl);
	if (req != FIONREAD_ && req != TIOCOUTQ_)
		return real_ioctl(fd, req, arg);
	if (rrc_rr_replaying()) {
		const struct rrc_log_event *e = rrc_rp_next(RRC_EV_IOCTL, (uint64_t)fd);
		if (e) {
			if (e->seq != req)
				rrc_rp_diverge("an ioctl with request", req);
			if (e->result >= 0 && e->data_len == 4 && arg)
				rrc_memcpy(arg, rrc_rp_data(e), 4);
			return (int)rrc_rp_result(e);
		}
	}
	if (!rrc_rr_recording())
		return real_ioctl(fd, req, arg);
	rrc_rr_reserve(4);
	rrc_hook_enter();
	int r = real_ioctl(fd, req, arg);
	int err = errno;
	rrc_rr_event(RRC_EV_IOCTL, 0, (uint64_t)fd, req, r < 0 ? -(int64_t)err : r, arg, r >= 0 && arg ? 4 : 0);
	rrc_hook_leave();
	errno = err;
	return r;
}

/* ---- calls on a connection whose outcome is the connection's ---- */

/* lighttpd decides how to close a connection on shutdown()'s outcome,
 * servers read SO_ERROR after a connect: in a replay the connection is a
 * stand-in (or in another state), so the call is made again but its
 * recorded outcome is what the program sees. */
enum { SOCK_SHUTDOWN = 1, SOCK_SETOPT, SOCK_GETOPT, SOCK_CONNECT };
static int (*real_shutdown)(int, int);
static int (*real_setsockopt)(int, int, int, const void *, socklen_t);
static int (*real_getsockopt)(int, int, int, void *, socklen_t *);
static int (*real_connect)(int, const struct sockaddr *, socklen_t);

/* The recorded outcome of a replayed call (made again already); consumed. */
static int sockop_result(int op, const struct rrc_log_event *e, void *val, socklen_t *len)
{
	if (e->seq != (uint64_t)op)
		rrc_rp_diverge("a socket call of another kind:", (uint64_t)op);
	if (op == SOCK_GETOPT && e->result == 0 && e->data_len >= 4 && val && len) {
		uint32_t l;
		rrc_memcpy(&l, rrc_rp_data(e), 4);
		uint32_t k = e->data_len - 4 < *len ? e->data_len - 4 : *len;
		rrc_memcpy(val, (const uint8_t *)rrc_rp_data(e) + 4, k);
		*len = l;
	}
	return (int)rrc_rp_result(e);
}

/* fin: the FIN output the call may send (rr-fds.h; fd -1: none) */
static int sockop_logged(int op, int fd, int r, const void *val, const socklen_t *len, const struct rrc_fin *fin)
{
	int err = errno;
	LOG_OR_LATE({ /* parked around the call, restored into replay: the recorded outcome */
		int64_t rec = rrc_rr_replaying() ? rrc_rp_late(RRC_EV_SOCKOPT, (uint64_t)fd, r < 0 ? -(int64_t)err : r)
						 : (r < 0 ? -(int64_t)err : r);
		if (fin->fd >= 0 && rrc_rr_replaying())
			rrc_fin_replayed(fd);
		errno = rec < 0 ? (int)-rec : err;
		return rec < 0 ? -1 : (int)rec;
	});
	uint8_t d[132];
	uint32_t n = 0;
	if (op == SOCK_GETOPT && r == 0 && len && val) {
		uint32_t l = *len, k = l < 128 ? l : 128;
		rrc_memcpy(d, &l, 4);
		rrc_memcpy(d + 4, val, k);
		n = 4 + k;
	}
	rrc_rr_event(RRC_EV_SOCKOPT, 0, (uint64_t)fd, (uint64_t)op, r < 0 ? -(int64_t)err : r, d, n);
	rrc_fin_event(fin, r);
	rrc_hook_leave();
	errno = err;
	return r;
}

/* fin_fd: the fd whose FIN the call sends (a shutdown of its write side),
 * else -1: logged as an output after the call's event (rr-fds.h) */
#define SOCKOP(op, fd, val, len, call, fin_fd) do { \
		if (rrc_rr_replaying()) { \
			const struct rrc_log_event *e_ = rrc_rp_next(RRC_EV_SOCKOPT, (uint64_t)(fd)); \
			int r_ = (call); /* made again (or live, the log ended) */ \
			if (!e_) \
				return r_; \
			r_ = sockop_result((op), e_, (val), (len)); \
			if ((fin_fd) >= 0) \
				rrc_fin_replayed(fin_fd); \
			return r_; \
		} \
		if (!rrc_rr_recording()) \
			return (call); \
		rrc_rr_reserve(RRC_FIN_ROOM); /* the largest event (132 bytes) or a FIN after it */ \
		struct rrc_fin fin_; \
		rrc_fin_note((fin_fd), &fin_); \
		return sockop_logged((op), (fd), (call), (val), (len), &fin_); \
	} while (0)

/* SHUT_WR and SHUT_RDWR send the FIN */
int shutdown(int fd, int how)
{
	RESOLVE(shutdown);
	SOCKOP(SOCK_SHUTDOWN, fd, 0, 0, real_shutdown(fd, how), how == SHUT_WR || how == SHUT_RDWR ? fd : -1);
}

static int setsockopt_call(int fd, int level, int name, const void *val, socklen_t len)
{
	RESOLVE(setsockopt);
	SOCKOP(SOCK_SETOPT, fd, 0, 0, real_setsockopt(fd, level, name, val, len), -1);
}

/* The fd's count goes odd for the call and even after it: a checkpoint
 * reads the options of a socket again when it moved (sockets.c). */
int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
	rrc_sockopt_bump(fd);
	int r = setsockopt_call(fd, level, name, val, len);
	int e = errno;
	rrc_sockopt_bump(fd);
	errno = e;
	return r;
}

int getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	RESOLVE(getsockopt);
	SOCKOP(SOCK_GETOPT, fd, val, len, real_getsockopt(fd, level, name, val, len), -1);
}

int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	RESOLVE(connect);
	SOCKOP(SOCK_CONNECT, fd, 0, 0, real_connect(fd, addr, len), -1);
}

/* ---- called by the wrappers of other files ---- */

int rrc_rr_io_reserve(uint32_t bytes)
{
	if (!rrc_rr_recording())
		return 0;
	rrc_rr_reserve(bytes > CAP ? CAP : bytes);
	return 1;
}

void rrc_rr_log_input(uint16_t kind, int obj, int64_t result, const void *data, uint32_t len)
{
	rrc_hook_enter();
	int recording = rrc_rr_recording();
	if (!recording)
		rrc_hook_leave();
	if (!recording && rrc_rr_replaying()) {
		/* a call completed before a checkpoint this process was restored
		 * from into replay: its event is this thread's next, and must match */
		int e = errno;
		if (rrc_rp_late(kind, (uint64_t)(int64_t)obj, result) != result)
			rrc_rp_diverge("a call completed at the checkpoint returned", (uint64_t)result);
		errno = e;
		return;
	}
	if (!recording)
		return;
	rrc_rr_event(kind, 0, (uint64_t)(int64_t)obj, 0, result, data, len > CAP ? 0 : len);
	rrc_hook_leave();
}
