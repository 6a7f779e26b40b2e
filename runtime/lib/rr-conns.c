/* SPDX-License-Identifier: MIT
 *
 * The clients' TCP connections during a failover's replay (rr-conns.h).
 *
 * Raw syscalls, nonblocking: the replay must never wait on a client (its
 * packets are held at the gate until the service is live). What cannot be
 * done at once (bytes not in the receive queue, a send buffer full) is a
 * fault of that connection: counted, reported by REPLAY_STATUS, and the
 * connection gets no more of the replay's bytes (a stream with a hole
 * would deliver wrong bytes); at go-live it is reset.
 */
#include <errno.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include "rrc_lib.h"
#include "rr-conns.h"
#include "rr-fds.h"

enum { C_UNKNOWN = 0, C_CLIENT, C_OTHER, C_BROKEN };

static int on;
static uint8_t kind[RRC_MAX_FDS];
static struct rrc_rc_stats st;
/* what the clients were sent, and per client fd the offset its client
 * holds bytes up to (mapped when there is a record: 32 KiB off .bss) */
static const struct rrc_log_released *released;
static uint64_t *held_to;

void rrc_rc_setup(int enable)
{
	on = enable;
	released = 0;
	rrc_memset(kind, 0, sizeof kind);
	rrc_memset(&st, 0, sizeof st);
	if (held_to)
		rrc_memset(held_to, 0, RRC_MAX_FDS * sizeof *held_to);
}

void rrc_rc_released(const struct rrc_log_released *r)
{
	if (!on || !r || !r->nr_conns)
		return;
	if (!held_to) {
		long m = rrc_sys_mmap(0, RRC_MAX_FDS * sizeof *held_to, PROT_READ | PROT_WRITE,
				      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m < 0 && m > -4096) {
			rrc_log("replay: no memory for the clients' released offsets: every replayed byte is sent");
			return;
		}
		held_to = (uint64_t *)m;
	}
	released = r;
}

void rrc_rc_fd_closed(int fd)
{
	if (fd >= 0 && fd < RRC_MAX_FDS) {
		kind[fd] = C_UNKNOWN;
		if (held_to)
			held_to[fd] = 0;
	}
}

void rrc_rc_stats(struct rrc_rc_stats *out)
{
	*out = st;
}

/* The released offset of the connection peer -> fd's local address */
static uint64_t released_of(int fd, const uint8_t *peer, uint32_t pl)
{
	uint8_t local[128];
	uint32_t ll = sizeof local, la, pa;
	uint16_t lp, pp;
	if (!released || rrc_sys_getsockname(fd, local, &ll) != 0 || !rrc_sockaddr_v4(local, ll, &la, &lp) ||
	    !rrc_sockaddr_v4(peer, pl, &pa, &pp))
		return 0;
	const struct rrc_log_released_conn *c = (const void *)(released + 1);
	for (uint32_t i = 0; i < released->nr_conns; i++)
		if (c[i].local_addr == la && c[i].peer_addr == pa && c[i].local_port == lp && c[i].peer_port == pp)
			return c[i].released;
	return 0;
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
		if (kind[fd] == C_CLIENT) {
			st.connections++;
			if (held_to)
				held_to[fd] = released_of(fd, peer, pl);
		}
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

/* How many of an output's first bytes (at stream offset at) its client
 * has already: they are not sent again. */
static uint64_t held_by_client(int fd, uint64_t at, uint64_t len)
{
	uint64_t to = held_to ? held_to[fd] : 0;
	uint64_t skip = to <= at ? 0 : to - at < len ? to - at : len;
	st.skipped_bytes += skip;
	return skip;
}

void rrc_rc_output(int fd, uint64_t at, const struct iovec *iov, int cnt, uint64_t len)
{
	if (!client(fd) || kind[fd] == C_BROKEN)
		return;
	uint64_t skip = held_by_client(fd, at, len);
	len -= skip;
	for (int i = 0; i < cnt && len; i++) {
		uint64_t k = iov[i].iov_len;
		if (skip >= k) {
			skip -= k;
			continue;
		}
		k -= skip;
		k = k < len ? k : len;
		if (send_all(fd, (const uint8_t *)iov[i].iov_base + skip, k) < 0)
			return;
		skip = 0;
		len -= k;
	}
}

void rrc_rc_output_file(int fd, uint64_t at, int in, int64_t off, uint64_t len)
{
	if (!client(fd) || kind[fd] == C_BROKEN)
		return;
	uint64_t skip = held_by_client(fd, at, len);
	off += (int64_t)skip;
	len -= skip;
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

/* connect(AF_UNSPEC) disconnects a TCP socket: an established one sends
 * its peer an RST (at snd_nxt: the end of what the client was sent, where
 * it stands or, if some bytes are still on their way, in its window) and
 * keeps ECONNRESET for the application's next call. */
static void reset(int fd)
{
	struct { uint16_t family; uint8_t rest[14]; } unspec = { AF_UNSPEC, { 0 } };
	rrc_sys_connect(fd, &unspec, sizeof unspec);
	st.reset++;
}

void rrc_rc_replay_over(void)
{
	if (!on)
		return;
	for (int fd = 0; fd < RRC_MAX_FDS; fd++) {
		uint64_t sent;
		if (kind[fd] == C_OTHER || !rrc_fdt_sent(fd, &sent) || !client(fd))
			continue;
		int behind = held_to && sent < held_to[fd];
		if (behind) {
			char m[160];
			size_t l = rrc_bput(m, sizeof m, 0, "replay: client connection on fd ");
			l = rrc_bput_u64(m, sizeof m, l, (uint64_t)fd);
			rrc_bput(m, sizeof m, l, ": the replay ended short of what its client was sent");
			rrc_log(m);
			st.behind++;
		}
		if (behind || kind[fd] == C_BROKEN)
			reset(fd);
	}
}
