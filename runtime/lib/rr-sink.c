/* SPDX-License-Identifier: MIT
 *
 * Where the record log's bytes go (rr-sink.h): a file or a connected
 * socket, bare or as sealed rrc-wire frames. Raw syscalls only.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include "rrc_lib.h"
#include "lib-fds.h"
#include "rrc/crc32c.h"
#include "rrc/sha256.h"
#include "rr-sink.h"

/* crates/rrc-wire/src/frame.rs: the frame header and the kinds the log
 * travels in (numbers are part of the format) */
#define WIRE_MAGIC      "RRCW"
#define WIRE_VERSION    2u
#define WIRE_HEADER     24u
#define WIRE_FLAG_MAC   1u
#define WIRE_LOG_HEADER 30u
#define WIRE_LOG_BATCH  31u
#define KEY_LEN         32u

static struct {
	int fd;
	int is_socket;          /* sendmsg with MSG_NOSIGNAL: a backup gone must not kill the process */
	int framed;             /* rrc-wire frames (a log session), not the bare stream */
	int sealed;             /* ... each with a MAC */
	struct rrc_hmac keyed;  /* HMAC state after the key: copied for each frame */
	uint64_t seq;           /* the next frame's number */
} sink = { .fd = -1 };

/* A recording that continues a replayed process (rr-log.c), or one whose
 * sink failed while a spare waits to be its next backup (`replaceable`):
 * until RECORD hands a sink over, units are dropped (`awaiting`); the
 * control thread leaves the sink in `handed` and the writer adopts it at
 * its next pass. */
static int awaiting;
static volatile uint32_t replaceable;
static struct {
	volatile uint32_t ready;
	int fd;
	int framed, sealed;
	uint64_t seq;
	uint8_t key[KEY_LEN];
} handed;

static void drop_pending(void);

int rrc_rr_sink_owns(int fd)
{
	return fd >= 0 && (fd == sink.fd || (RRC_LOAD(&handed.ready) && fd == handed.fd));
}

void rrc_rr_sink_fds(int32_t *fd, int32_t *handed_fd)
{
	*fd = sink.fd;
	*handed_fd = RRC_LOAD(&handed.ready) ? handed.fd : -1;
}

void rrc_rr_sink_mirror(int32_t fd, int32_t handed_fd)
{
	sink.fd = fd;
	handed.fd = handed_fd;
	RRC_STORE(&handed.ready, handed_fd >= 0);
}

void rrc_rr_sink_await(void)
{
	sink.fd = -1;
	awaiting = 1;
	RRC_STORE(&handed.ready, 0);
}

int rrc_rr_sink_hand(int fd, const uint8_t *key, uint64_t first_frame, int framed)
{
	/* (awaiting is the writer's: a sink that failed and was replaceable,
	 * or is about to fail, is replaced all the same) */
	if (!(awaiting || RRC_LOAD(&replaceable)) || RRC_LOAD(&handed.ready))
		return -1;
	/* the last spare's: a failure of this one ends the recording */
	RRC_STORE(&replaceable, 0);
	handed.fd = fd;
	handed.framed = framed;
	handed.sealed = key != 0;
	if (key)
		rrc_memcpy(handed.key, key, KEY_LEN);
	handed.seq = first_frame;
	RRC_STORE(&handed.ready, 1);
	return 0;
}

/* The sink from here on: fd (a library fd), frames (always with a key:
 * sealed with it), the first frame's number. The caller wipes the key. */
static void install(int fd, int is_socket, int framed, const uint8_t *key, uint64_t first_frame)
{
	sink.is_socket = is_socket;
	sink.framed = framed || key;
	sink.sealed = key != 0;
	if (key)
		rrc_hmac_init(&sink.keyed, key, KEY_LEN);
	sink.seq = first_frame;
	sink.fd = fd;
}

int rrc_rr_sink_adopt(void)
{
	if (!RRC_LOAD(&handed.ready))
		return 0;
	if (sink.fd >= 0)
		rrc_libfd_close(sink.fd); /* replaced before it failed */
	drop_pending();
	struct stat st;
	/* nothing is pending: units without a sink were dropped whole */
	install(handed.fd, rrc_sys_fstat(handed.fd, &st) == 0 && S_ISSOCK(st.st_mode), handed.framed,
		handed.sealed ? handed.key : 0, handed.seq);
	rrc_memset(handed.key, 0, KEY_LEN);
	awaiting = 0;
	RRC_STORE(&handed.ready, 0);
	return 1;
}

int rrc_rr_sink_lost(void)
{
	if (!RRC_LOAD(&replaceable) || !sink.is_socket)
		return 0;
	rrc_libfd_close(sink.fd);
	sink.fd = -1;
	awaiting = 1;
	drop_pending();
	return 1;
}

void rrc_rr_sink_forget(void)
{
	sink.fd = -1;
	awaiting = 0;
	RRC_STORE(&replaceable, 0);
}

static int refuse(const char *what, long err)
{
	rrc_log_failure("not recording: ", what, (int)err);
	return -1;
}

/* A decimal number of the environment, or -1. */
static long env_number(const char *name)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return -1;
	long n = 0;
	for (; *v; v++) {
		if (*v < '0' || *v > '9' || n > (1l << 40))
			return -2;
		n = n * 10 + (*v - '0');
	}
	return n;
}

static int read_key(int kfd, uint8_t key[KEY_LEN])
{
	uint32_t got = 0;
	while (got < KEY_LEN) {
		long r = rrc_sys_read(kfd, key + got, KEY_LEN - got);
		if (r == -EINTR)
			continue;
		if (r <= 0)
			break;
		got += (uint32_t)r;
	}
	rrc_libfd_close(kfd);
	return got == KEY_LEN ? 0 : -1;
}

int rrc_rr_sink_open(void)
{
	const char *path = getenv("RRC_RECORD");
	long fd = env_number("RRC_RECORD_FD"), kfd = env_number("RRC_RECORD_KEY_FD"), seq = env_number("RRC_RECORD_SEQ");
	long framed = env_number("RRC_RECORD_FRAMED"), repl = env_number("RRC_RECORD_REPLACEABLE");
	if ((!path || !*path) && fd == -1)
		return 0;
	if (fd == -2 || kfd == -2 || seq == -2 || framed == -2 || repl == -2)
		return refuse("$RRC_RECORD_FD, $RRC_RECORD_KEY_FD, $RRC_RECORD_SEQ, $RRC_RECORD_FRAMED or "
			      "$RRC_RECORD_REPLACEABLE is not a number", 0);
	int is_socket = 0;
	if (path && *path) {
		fd = rrc_sys_openat(AT_FDCWD, path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd < 0)
			return refuse("cannot create the log file $RRC_RECORD", -fd);
	} else {
		struct stat st;
		long r = rrc_sys_fstat((int)fd, &st);
		if (r < 0)
			return refuse("$RRC_RECORD_FD is not an open fd", -r);
		is_socket = S_ISSOCK(st.st_mode);
		rrc_sys_fcntl((int)fd, F_SETFD, FD_CLOEXEC);
	}
	uint8_t key[KEY_LEN];
	if (kfd >= 0 && read_key((int)kfd, key) < 0)
		return refuse("$RRC_RECORD_KEY_FD did not hold a 32-byte key", 0);
	install(rrc_fd_high((int)fd), is_socket, framed == 1, kfd >= 0 ? key : 0, seq > 0 ? (uint64_t)seq : 0);
	rrc_memset(key, 0, KEY_LEN);
	RRC_STORE(&replaceable, repl == 1);
	/* the application's children do not record into it */
	unsetenv("RRC_RECORD");
	unsetenv("RRC_RECORD_FD");
	unsetenv("RRC_RECORD_KEY_FD");
	unsetenv("RRC_RECORD_SEQ");
	unsetenv("RRC_RECORD_FRAMED");
	unsetenv("RRC_RECORD_REPLACEABLE");
	return 1;
}

int rrc_rr_sink_prompt(void)
{
	return sink.fd >= 0 && sink.is_socket;
}

/* every byte of v[0..n), or -errno */
static long put_all(struct iovec *v, int n)
{
	while (n > 0) {
		long w;
		if (sink.is_socket) {
			struct msghdr m = { .msg_iov = v, .msg_iovlen = (size_t)n };
			w = rrc_sys_sendmsg(sink.fd, &m, MSG_NOSIGNAL);
		} else {
			w = rrc_sys_writev(sink.fd, v, n);
		}
		if (w == -EINTR)
			continue;
		if (w < 0)
			return w;
		if (w == 0)
			return -EIO;
		while (n > 0 && (uint64_t)w >= v->iov_len) {
			w -= (long)v->iov_len;
			v++;
			n--;
		}
		if (n > 0) {
			v->iov_base = (uint8_t *)v->iov_base + w;
			v->iov_len -= (size_t)w;
		}
	}
	return 0;
}

static void le16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void le32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }

/* Units waiting for the flush: their iovecs, and the bytes they own
 * (frame headers, batch headers, MACs). The writer's alone. */
#define PEND_IOV   512
#define PEND_BYTES 32768
struct pending {
	struct iovec v[PEND_IOV];
	int n;
	uint8_t own[PEND_BYTES];
	uint32_t used;
};
/* In the log's region (rr-log.c: excluded from images, like the rings
 * whose bytes it points to), not in the library's .bss: the pause
 * helper inherits the library's data only while it is small
 * (pause-helper.c, PH_INHERIT_MAX). */
static struct pending *pend_area;
#define pend (*pend_area)

size_t rrc_rr_sink_area_size(void)
{
	return sizeof(struct pending);
}

void rrc_rr_sink_attach(void *area)
{
	pend_area = area;
}

long rrc_rr_sink_flush(void)
{
	long r = pend.n ? put_all(pend.v, pend.n) : 0;
	pend.n = 0;
	pend.used = 0;
	return r;
}

/* The units waiting are forgotten (their sink is gone or replaced). */
static void drop_pending(void)
{
	if (pend_area) {
		pend.n = 0;
		pend.used = 0;
	}
}

/* A copy of p's bytes in the pending area (room was checked). */
static struct iovec own(const void *p, size_t len)
{
	struct iovec v = { pend.own + pend.used, len };
	rrc_memcpy(pend.own + pend.used, p, len);
	pend.used += (uint32_t)((len + 7u) & ~7u);
	return v;
}

long rrc_rr_sink_put(int header, const struct iovec *pieces, int n, uint32_t len, int held)
{
	if (sink.fd < 0 && awaiting && pend_area)
		return 0; /* no sink yet: dropped (the log that continues begins later) */
	if (sink.fd < 0 || !pend_area || n < 1 || n > 6)
		return -EBADF;
	/* room for this unit: its iovecs (a frame header, the pieces, a MAC)
	 * and the bytes it owns */
	size_t owned = WIRE_HEADER + RRC_SHA256_LEN + ((pieces[0].iov_len + 7u) & ~7ul);
	if (pend.n + n + 2 > PEND_IOV || pend.used + owned > PEND_BYTES) {
		long f = rrc_rr_sink_flush();
		if (f < 0)
			return f;
	}
	struct iovec first = own(pieces[0].iov_base, pieces[0].iov_len);
	if (!sink.framed) {
		pend.v[pend.n++] = first;
		for (int i = 1; i < n; i++)
			pend.v[pend.n++] = pieces[i];
		return held ? 0 : rrc_rr_sink_flush();
	}
	/* a frame: header (crates/rrc-wire/src/frame.rs Frame::header), the
	 * payload, and when sealed HMAC(key, number ‖ header ‖ payload) */
	uint8_t h[WIRE_HEADER], mac[RRC_SHA256_LEN], seq[8];
	uint32_t crc = 0;
	for (int i = 0; i < n; i++)
		crc = rrc_crc32c_extend(crc, pieces[i].iov_base, pieces[i].iov_len);
	rrc_memcpy(h, WIRE_MAGIC, 4);
	le16(h + 4, WIRE_VERSION);
	le16(h + 6, header ? WIRE_LOG_HEADER : WIRE_LOG_BATCH);
	le32(h + 8, len);
	le32(h + 12, crc);
	le32(h + 16, sink.sealed ? WIRE_FLAG_MAC : 0);
	le32(h + 20, rrc_crc32c(h, 20));
	pend.v[pend.n++] = own(h, WIRE_HEADER);
	pend.v[pend.n++] = first;
	for (int i = 1; i < n; i++)
		pend.v[pend.n++] = pieces[i];
	sink.seq++;
	if (sink.sealed) {
		for (int i = 0; i < 8; i++)
			seq[i] = (uint8_t)((sink.seq - 1) >> (8 * i));
		struct rrc_hmac m = sink.keyed;
		rrc_hmac_update(&m, seq, 8);
		rrc_hmac_update(&m, h, WIRE_HEADER);
		for (int i = 0; i < n; i++)
			rrc_hmac_update(&m, pieces[i].iov_base, pieces[i].iov_len);
		rrc_hmac_final(&m, mac);
		pend.v[pend.n++] = own(mac, RRC_SHA256_LEN);
	}
	return held ? 0 : rrc_rr_sink_flush();
}
