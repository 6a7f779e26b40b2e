/* SPDX-License-Identifier: MIT
 *
 * The clients' TCP connections during a failover's replay (rr-conns.h).
 *
 * Raw syscalls, nonblocking: the replay must never wait on a client (its
 * packets are held at the gate until the service is live). What cannot be
 * done at once (bytes not in the receive queue, a send buffer full) is a
 * fault of that connection: counted, reported by REPLAY_STATUS, and the
 * connection gets no more of the replay's bytes (a stream with a hole
 * would deliver wrong bytes; the failover resets what is out of step).
 */
#include <errno.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include "rrc_lib.h"
#include "rr-conns.h"

enum { C_UNKNOWN = 0, C_CLIENT, C_OTHER, C_BROKEN };

static int on;
static uint8_t kind[RRC_MAX_FDS];
static struct rrc_rc_stats st;

void rrc_rc_setup(int enable)
{
	on = enable;
	rrc_memset(kind, 0, sizeof kind);
	rrc_memset(&st, 0, sizeof st);
}

void rrc_rc_fd_closed(int fd)
{
	if (fd >= 0 && fd < RRC_MAX_FDS)
		kind[fd] = C_UNKNOWN;
}

void rrc_rc_stats(struct rrc_rc_stats *out)
{
	*out = st;
}

/* A connected TCP socket (a stand-in of an accept is not connected). */
static int client(int fd)
{
	if (!on || fd < 0 || fd >= RRC_MAX_FDS)
		return 0;
	if (kind[fd] == C_UNKNOWN) {
		int type = 0, domain = 0;
		uint32_t tl = sizeof type, dl = sizeof domain;
		uint8_t peer[128];
		uint32_t pl = sizeof peer;
		kind[fd] = rrc_sys_getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 && type == SOCK_STREAM &&
				   rrc_sys_getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &dl) == 0 &&
				   (domain == AF_INET || domain == AF_INET6) && rrc_sys_getpeername(fd, peer, &pl) == 0
			   ? C_CLIENT
			   : C_OTHER;
		if (kind[fd] == C_CLIENT)
			st.connections++;
	}
	return kind[fd] == C_CLIENT || kind[fd] == C_BROKEN;
}

static void fault(int fd, uint64_t bytes, const char *what)
{
	if (kind[fd] != C_BROKEN) {
		char m[160];
		size_t l = rrc_bput(m, sizeof m, 0, "replay: client connection on fd ");
		l = rrc_bput_u64(m, sizeof m, l, (uint64_t)fd);
		l = rrc_bput(m, sizeof m, l, ": ");
		rrc_bput(m, sizeof m, l, what);
		rrc_log(m);
	}
	kind[fd] = C_BROKEN;
	st.faults += bytes ? bytes : 1;
}

int rrc_rc_read(int fd, const void *bytes, uint64_t len)
{
	if (!client(fd))
		return 0;
	if (kind[fd] == C_BROKEN || !len)
		return 1;
	const uint8_t *want = bytes;
	uint8_t buf[4096];
	uint64_t got = 0;
	while (got < len) {
		uint64_t k = len - got < sizeof buf ? len - got : sizeof buf;
		long r = rrc_syscall6(SYS_recvfrom, fd, (long)buf, (long)k, MSG_DONTWAIT, 0, 0);
		if (r == -EINTR)
			continue;
		if (r <= 0) {
			fault(fd, len - got, "the bytes the log says it read are not in its receive queue");
			return 1;
		}
		if (!rrc_memeq(buf, want + got, (size_t)r)) {
			fault(fd, len - got, "its receive queue holds other bytes than the log's");
			return 1;
		}
		got += (uint64_t)r;
		st.read_bytes += (uint64_t)r;
	}
	return 1;
}

static int send_all(int fd, const void *p, uint64_t n)
{
	while (n) {
		long r = rrc_syscall6(SYS_sendto, fd, (long)p, (long)n, MSG_DONTWAIT | MSG_NOSIGNAL, 0, 0);
		if (r == -EINTR)
			continue;
		if (r <= 0) {
			fault(fd, n, r == -EAGAIN ? "its send buffer is full" : "sending the replayed output failed");
			return -1;
		}
		p = (const uint8_t *)p + r;
		n -= (uint64_t)r;
		st.sent_bytes += (uint64_t)r;
	}
	return 0;
}

void rrc_rc_output(int fd, const struct iovec *iov, int cnt, uint64_t len)
{
	if (!client(fd) || kind[fd] == C_BROKEN)
		return;
	for (int i = 0; i < cnt && len; i++) {
		uint64_t k = iov[i].iov_len < len ? iov[i].iov_len : len;
		if (send_all(fd, iov[i].iov_base, k) < 0)
			return;
		len -= k;
	}
}

void rrc_rc_output_file(int fd, int in, int64_t off, uint64_t len)
{
	if (!client(fd) || kind[fd] == C_BROKEN)
		return;
	uint8_t chunk[4096];
	while (len) {
		uint64_t k = len < sizeof chunk ? len : sizeof chunk;
		long g = rrc_syscall4(SYS_pread64, in, (long)chunk, (long)k, (long)off);
		if (g <= 0) {
			fault(fd, len, "the file a replayed sendfile sent from is shorter now");
			return;
		}
		if (send_all(fd, chunk, (uint64_t)g) < 0)
			return;
		off += g;
		len -= (uint64_t)g;
	}
}
