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
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include "rrc_lib.h"
#include "rr-log.h"
#include "rr-io.h"
#include "rr-fds.h"
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

/* The event of a read-like call that returned r into buf; errno kept. A
 * regular file's bytes are named by their CRC32C: a replay reads them
 * again from the file (restored with the checkpoint, or the same file)
 * and checks them. */
static ssize_t logged_read(int fd, const void *buf, ssize_t r, int file)
{
	int e = errno;
	rrc_hook_enter();
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

ssize_t read(int fd, void *buf, size_t n)
{
	RESOLVE(read);
	if (!rrc_rr_recording())
		return real_read(fd, buf, n);
	int file;
	n = readable(fd, n, &file);
	return logged_read(fd, buf, real_read(fd, buf, n), file);
}

ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
	RESOLVE(pread);
	if (!rrc_rr_recording())
		return real_pread(fd, buf, n, off);
	int file;
	n = readable(fd, n, &file);
	return logged_read(fd, buf, real_pread(fd, buf, n, off), file);
}

ssize_t pread64(int fd, void *buf, size_t n, off_t off) __attribute__((alias("pread")));

ssize_t recv(int fd, void *buf, size_t n, int flags)
{
	RESOLVE(recv);
	if (!rrc_rr_recording())
		return real_recv(fd, buf, n, flags);
	rrc_rr_reserve((uint32_t)capped(n));
	return logged_read(fd, buf, real_recv(fd, buf, capped(n), flags), 0);
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
	if (!rrc_rr_recording())
		return real_readv(fd, iov, cnt);
	if (cnt > 0 && cnt <= 1024 && rrc_fdt_is_file(fd)) {
		/* a regular file: whole, named by the CRC32C of what came back */
		rrc_rr_reserve(4);
		ssize_t r = real_readv(fd, iov, cnt);
		int e = errno;
		uint32_t crc = rrc_rr_crc_iov(iov, cnt, r > 0 ? (size_t)r : 0);
		rrc_hook_enter();
		rrc_rr_event(RRC_EV_READ, RRC_EVF_FILE, (uint64_t)fd, 0, r < 0 ? -e : r, &crc, sizeof crc);
		rrc_hook_leave();
		errno = e;
		return r;
	}
	struct iovec v[1024];
	int bad = cnt < 0 || cnt > 1024; /* the kernel refuses it: EINVAL, recorded as such */
	int k = bad ? 0 : cap_iov(iov, cnt, v);
	rrc_rr_reserve(CAP);
	ssize_t r = bad ? real_readv(fd, iov, cnt) : real_readv(fd, v, k);
	int e = errno;
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
	if (!rrc_rr_recording())
		return real_recvfrom(fd, buf, n, flags, addr, alen);
	n = capped(n);
	rrc_rr_reserve((uint32_t)(n + sizeof(struct rrc_log_recv) + NAME_MAX_LOG));
	ssize_t r = real_recvfrom(fd, buf, n, flags, addr, alen);
	int e = errno;
	rrc_hook_enter();
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
	ssize_t r = real_recvmsg(fd, &mm, flags);
	int e = errno;
	m->msg_namelen = mm.msg_namelen;
	m->msg_controllen = mm.msg_controllen;
	m->msg_flags = mm.msg_flags;
	rrc_hook_enter();
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
	rrc_rr_event(kind, 0, (uint64_t)(int64_t)obj, 0, result, data, len > CAP ? 0 : len);
	rrc_hook_leave();
}
