/* SPDX-License-Identifier: MIT
 *
 * Connections handed to accept() after a failover (issue 4 §2; RRC §4.4,
 * NiLiCon §V-E: the backup continues every connection the committed state
 * knows of).
 *
 * A connection whose handshake the primary's kernel completed but that the
 * application had not accept()ed at the checkpoint sits in its listener's
 * kernel accept queue: in the checkpoint's TCP table (inode 0), in no fd.
 * The backup rebuilds it with TCP_REPAIR like the others; rrc-restore
 * hands it here through a small table file (rrc/accept-queue.h), tagged
 * with its listener's fd number. A restored listener is a fresh socket
 * whose kernel queue is empty, so the connection must come out of the
 * application's next accept() on that listener, and the listener must
 * look readable to poll/epoll/select and wake a thread blocked in accept().
 *
 * The trick: for each such connection the library makes one loopback
 * connection of its own to the listener (a "dummy"), before any
 * application thread runs again and while the service's traffic is still
 * blocked at the host (no real client can get ahead of it: the kernel's
 * accept queue is FIFO). The listener is then readable for real. The
 * accept()/accept4() wrappers below let libc accept as usual; when the
 * connection accepted is one of the dummies (its peer address is a
 * dummy's local address), they close the dummy's client end (SO_LINGER 0:
 * a reset, no TIME_WAIT), dup3() the repaired socket onto the number the
 * kernel just gave (atomically closing the dummy's server end, so the
 * number the application gets is the one accept() picked), apply the
 * accept4 flags (SOCK_NONBLOCK, SOCK_CLOEXEC) and write the client's
 * address into *addr. The application never sees a dummy. Matching is by
 * the dummy's address, not by listener fd number, so a listener reached
 * through another fd (dup) works too, and a thread that was blocked in
 * accept() at the checkpoint (its syscall restarts after the restore,
 * inside this wrapper's frame) gets the substitution as well.
 *
 * A failover in rr mode replays the log on the clients' own connections
 * (rr-conns.h): the connections the clients opened after the checkpoint
 * come too, and the primary may have accepted some of them, and some of
 * the accept queue's, during the replayed interval. Those are parked, not
 * queued: a replayed accept whose recorded peer (and listener port) is a
 * parked connection's puts it at the recorded fd number, in place of the
 * stand-in a standalone replay gets; at go-live the ones left get their
 * dummies (rrc_aq_replay_over), before any thread runs live.
 *
 * A dump is refused while any such connection waits (rrc_aq_check): its
 * socket and dummy are not in the application's fd table, and an image
 * would lose them. The wait is short in practice (the next accept()).
 *
 * ASYNC-SIGNAL-SAFE: the whole file (rrc_aq_restore runs before the
 * threads are released, which may hold libc locks; accept() is
 * async-signal-safe and so must its wrapper be). Raw syscalls only.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include "rrc/accept-queue.h"
#include "rrc/crc32c.h"
#include "rrc_lib.h"
#include "lib-fds.h"
#include "accept-queue.h"
#include "rr-conns.h"
#include "rr-io.h"
#include "rr-replay.h"
#include "rr-fds.h"
#include "waits.h"
#include "rrc/rrlog.h"

#define DUMMY_CONNECT_S 1 /* a loopback handshake takes microseconds */

enum { AQ_FREE = 0, AQ_PENDING, AQ_TAKING, AQ_DONE, AQ_PARKED };

/* One repaired connection waiting for accept(). In .bss, hence in images;
 * reset by rrc_aq_restore (and dumps are refused while one is pending). */
struct aq_entry {
	volatile uint32_t state;
	int32_t  listener_fd;
	int32_t  sock_fd;     /* the repaired socket (library fd, high) */
	int32_t  dummy_fd;    /* our client end of the dummy connection */
	/* pending: the dummy's local address (its peer as accepted);
	 * parked: the client's address */
	uint16_t family, port;
	uint8_t  addr[16];
	uint16_t local_port; /* parked: the service's port */
};

static struct aq_entry aq[RRC_ACCEPT_QUEUE_MAX];
static uint32_t aq_n;
static volatile uint32_t aq_pending;

static int (*real_accept)(int, struct sockaddr *, socklen_t *);
static int (*real_accept4)(int, struct sockaddr *, socklen_t *, int);

/* From the constructor: no dlsym in the wrappers. */
void rrc_aq_resolve(void)
{
	if (!real_accept)
		real_accept = dlsym(RTLD_NEXT, "accept");
	if (!real_accept4)
		real_accept4 = dlsym(RTLD_NEXT, "accept4");
}

static void log_num(const char *a, long n, const char *b, long err)
{
	char m[300];
	size_t l = rrc_bput(m, sizeof m, 0, a);
	if (n >= 0)
		l = rrc_bput_u64(m, sizeof m, l, (uint64_t)n);
	l = rrc_bput(m, sizeof m, l, b);
	if (err) {
		l = rrc_bput(m, sizeof m, l, " (errno ");
		l = rrc_bput_u64(m, sizeof m, l, (uint64_t)err);
		l = rrc_bput(m, sizeof m, l, ")");
	}
	rrc_log(m);
}

/* family, port, address bytes of a sockaddr (v4 or v6; an IPv4-mapped
 * IPv6 address, as a dual-stack listener reports an IPv4 client, counts as
 * the IPv4 one: the repaired sockets are IPv4) */
static int addr_key(const struct sockaddr_storage *ss, uint16_t *family, uint16_t *port, uint8_t addr[16])
{
	uint32_t v4;
	rrc_memset(addr, 0, 16);
	*family = ss->ss_family;
	if (rrc_sockaddr_v4(ss, sizeof *ss, &v4, port)) {
		*family = AF_INET;
		rrc_memcpy(addr, &v4, 4);
		return 0;
	}
	if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const void *)ss;
		*port = a->sin6_port;
		rrc_memcpy(addr, &a->sin6_addr, 16);
		return 0;
	}
	return -1;
}

/* The port a socket is bound to (network order), or -1. */
static int local_port_of(int fd)
{
	struct sockaddr_storage ss;
	uint32_t len = sizeof ss;
	uint16_t family, port;
	uint8_t key[16];
	if (rrc_sys_getsockname(fd, &ss, &len) < 0 || addr_key(&ss, &family, &port, key) < 0)
		return -1;
	return port;
}

static void close_reset(int fd)
{
	struct linger lg = { 1, 0 };
	rrc_sys_setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
	rrc_libfd_close(fd);
}

/* The dummy connection for one repaired socket: connect to the listener's
 * own address (loopback if it is bound to the wildcard). Returns the
 * connected client end or -errno. */
static long dummy_connect(int listener, struct aq_entry *e)
{
	struct sockaddr_storage ss;
	uint32_t len = sizeof ss;
	long r = rrc_sys_getsockname(listener, &ss, &len);
	if (r < 0)
		return r;
	if (ss.ss_family == AF_INET) {
		struct sockaddr_in *a = (void *)&ss;
		if (a->sin_addr.s_addr == htonl(INADDR_ANY))
			a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	} else if (ss.ss_family == AF_INET6) {
		struct sockaddr_in6 *a = (void *)&ss;
		static const uint8_t any[16];
		if (rrc_memeq(&a->sin6_addr, any, 16)) {
			rrc_memset(&a->sin6_addr, 0, 16);
			a->sin6_addr.s6_addr[15] = 1; /* ::1 */
		}
	} else {
		return -EAFNOSUPPORT;
	}
	long d = rrc_sys_socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP);
	if (d < 0)
		return d;
	d = rrc_fd_high((int)d);
	r = rrc_sys_connect((int)d, &ss, len);
	if (r == -EINPROGRESS) {
		struct pollfd p = { .fd = (int)d, .events = POLLOUT };
		struct rrc_ts ts = { DUMMY_CONNECT_S, 0 };
		r = rrc_sys_ppoll(&p, 1, &ts);
		if (r == 0)
			r = -ETIMEDOUT; /* the listener's queue is full: SYN dropped */
		if (r > 0) {
			int err = 0;
			uint32_t el = sizeof err;
			r = rrc_sys_getsockopt((int)d, SOL_SOCKET, SO_ERROR, &err, &el);
			if (r == 0 && err)
				r = -err;
		}
	}
	if (r < 0) {
		rrc_libfd_close((int)d);
		return r;
	}
	len = sizeof ss;
	r = rrc_sys_getsockname((int)d, &ss, &len);
	if (r < 0 || addr_key(&ss, &e->family, &e->port, e->addr) < 0) {
		close_reset((int)d);
		return r < 0 ? r : -EAFNOSUPPORT;
	}
	return d;
}

/* After a restore, before the application's threads are released: read
 * rrc-restore's table (if any) and queue each connection behind a dummy. */
void rrc_aq_restore(int park)
{
	static union {
		struct rrc_accept_queue_header h;
		uint8_t b[sizeof(struct rrc_accept_queue_header) +
			  RRC_ACCEPT_QUEUE_MAX * sizeof(struct rrc_accept_queue_entry) + 1];
	} buf;
	struct sockaddr_un un;
	uint32_t ul = sizeof un;
	char path[sizeof un.sun_path + sizeof RRC_ACCEPT_QUEUE_SUFFIX];

	rrc_memset(aq, 0, sizeof aq);
	aq_n = 0;
	RRC_STORE(&aq_pending, 0);
	if (rrc_g.listen_fd < 0)
		return;
	rrc_memset(&un, 0, sizeof un);
	if (rrc_sys_getsockname(rrc_g.listen_fd, &un, &ul) < 0 || un.sun_family != AF_UNIX || !un.sun_path[0])
		return;
	size_t l = rrc_bput(path, sizeof path, 0, un.sun_path);
	rrc_bput(path, sizeof path, l, RRC_ACCEPT_QUEUE_SUFFIX);
	long fd = rrc_sys_openat(-100 /* AT_FDCWD */, path, O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return; /* nothing was waiting for accept() */
	size_t got = 0;
	for (;;) {
		long n = rrc_sys_read((int)fd, buf.b + got, sizeof buf.b - got);
		if (n == -EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
		if (got == sizeof buf.b)
			break;
	}
	rrc_libfd_close((int)fd);
	rrc_sys_unlinkat(-100, path, 0);

	struct rrc_accept_queue_header h = buf.h;
	uint32_t crc = h.crc;
	h.crc = 0;
	size_t want = sizeof h + (size_t)h.count * sizeof(struct rrc_accept_queue_entry);
	if (got < sizeof h || h.magic != RRC_ACCEPT_QUEUE_MAGIC || h.version != RRC_ACCEPT_QUEUE_VERSION ||
	    h.count > RRC_ACCEPT_QUEUE_MAX || got != want ||
	    rrc_crc32c_extend(rrc_crc32c(&h, sizeof h), buf.b + sizeof h, want - sizeof h) != crc) {
		log_num("after restore: the accept-queue table is invalid (", (long)got,
			" bytes); connections waiting for accept() are lost", 0);
		return;
	}
	const struct rrc_accept_queue_entry *ent = (const void *)(buf.b + sizeof h);
	for (uint32_t i = 0; i < h.count; i++) {
		struct aq_entry *e = &aq[aq_n];
		struct stat st;
		int sock = ent[i].sock_fd;
		if (sock < 0 || rrc_sys_fstat(sock, &st) < 0 || !S_ISSOCK(st.st_mode)) {
			log_num("after restore: accept-queue entry ", (long)i, " names no socket: skipped", 0);
			continue;
		}
		if (park) {
			struct sockaddr_storage ss;
			uint32_t len = sizeof ss;
			int lp = local_port_of(sock);
			if (rrc_sys_getpeername(sock, &ss, &len) < 0 ||
			    addr_key(&ss, &e->family, &e->port, e->addr) < 0 || lp < 0) {
				log_num("after restore: accept-queue entry ", (long)i,
					" is not a connected socket: closed", 0);
				close_reset(sock);
				continue;
			}
			e->local_port = (uint16_t)lp;
			e->listener_fd = ent[i].listener_fd;
			e->sock_fd = rrc_fd_high(sock);
			e->dummy_fd = -1;
			RRC_STORE(&e->state, AQ_PARKED);
			aq_n++;
			RRC_ATOMIC_INC(&aq_pending);
			continue;
		}
		long d = dummy_connect(ent[i].listener_fd, e);
		if (d < 0) {
			/* without a dummy nobody would ever accept it: closed, the
			 * client sees a reset (its unread request is dropped) */
			log_num("after restore: a repaired connection waiting for accept() on fd ",
				ent[i].listener_fd, " is closed: the loopback connection to its listener failed",
				-d);
			close_reset(sock);
			continue;
		}
		e->listener_fd = ent[i].listener_fd;
		e->sock_fd = rrc_fd_high(sock);
		e->dummy_fd = (int)d;
		RRC_STORE(&e->state, AQ_PENDING);
		aq_n++;
		RRC_ATOMIC_INC(&aq_pending);
	}
	if (aq_n)
		log_num("after restore: ", (long)aq_n,
			park ? " repaired connection(s) kept for the replay's accepts"
			     : " repaired connection(s) queued for accept()", 0);
}

/* e's connection was handed out or closed: it waits no more. */
static void entry_done(struct aq_entry *e)
{
	e->sock_fd = e->dummy_fd = -1;
	RRC_STORE(&e->state, AQ_DONE);
	__atomic_sub_fetch(&aq_pending, 1, __ATOMIC_SEQ_CST);
}

void rrc_aq_replay_over(void)
{
	uint32_t queued = 0;
	for (uint32_t i = 0; i < aq_n; i++) {
		struct aq_entry *e = &aq[i];
		if (RRC_LOAD(&e->state) != AQ_PARKED)
			continue;
		long d = dummy_connect(e->listener_fd, e);
		if (d < 0) {
			log_num("replay over: a repaired connection waiting for accept() on fd ", e->listener_fd,
				" is closed: the loopback connection to its listener failed", -d);
			close_reset(e->sock_fd);
			entry_done(e);
			continue;
		}
		e->dummy_fd = (int)d;
		RRC_STORE(&e->state, AQ_PENDING);
		queued++;
	}
	if (queued)
		log_num("replay over: ", (long)queued,
			" repaired connection(s) the replay did not accept queued for accept()", 0);
}

/* Pause path: 0, or -1 with the error set. */
int rrc_aq_check(void)
{
	uint32_t n = RRC_LOAD(&aq_pending);
	if (!n)
		return 0;
	rrc_set_err(RRC_ERR_UNSUPPORTED_FD, 0, "", (long)n,
		    " repaired connection(s) still wait for the application's accept() (an image now "
		    "would lose them): try again later");
	return -1;
}

/* e's repaired socket takes fd number c (closing what c was: the dummy's
 * server end, or a replay's stand-in), with accept4's flags. The number
 * the application gets. e is AQ_TAKING. */
static int put_in_place(struct aq_entry *e, int c, int flags)
{
	long fl = rrc_sys_fcntl(e->sock_fd, F_GETFL, 0);
	if (fl >= 0)
		rrc_sys_fcntl(e->sock_fd, F_SETFL, (fl & ~O_NONBLOCK) | ((flags & SOCK_NONBLOCK) ? O_NONBLOCK : 0));
	int ret = c;
	if (rrc_sys_dup3(e->sock_fd, c, (flags & SOCK_CLOEXEC) ? O_CLOEXEC : 0) < 0) {
		/* cannot happen with two open fds; never hand out what c was */
		rrc_libfd_close(c);
		ret = e->sock_fd;
		rrc_libfd_forget(ret); /* the application's now */
		rrc_sys_fcntl(ret, F_SETFD, (flags & SOCK_CLOEXEC) ? FD_CLOEXEC : 0);
	} else {
		rrc_libfd_close(e->sock_fd);
	}
	return ret;
}

/* A replayed accept on listener fd of the connection from the recorded
 * peer address (len bytes) got stand-in c: the parked connection from that
 * peer to that listener's port, if any, takes c's number instead. */
static int take_parked(int listener, const void *peer, uint32_t len, int c, int flags)
{
	struct sockaddr_storage ss;
	uint16_t family, port;
	uint8_t key[16];
	if (!RRC_LOAD(&aq_pending))
		return c;
	rrc_memset(&ss, 0, sizeof ss);
	rrc_memcpy(&ss, peer, len < sizeof ss ? len : sizeof ss);
	int lp = local_port_of(listener);
	if (addr_key(&ss, &family, &port, key) < 0 || lp < 0)
		return c;
	for (uint32_t i = 0; i < aq_n; i++) {
		struct aq_entry *e = &aq[i];
		uint32_t want = AQ_PARKED;
		if (RRC_LOAD(&e->state) != AQ_PARKED || e->family != family || e->port != port ||
		    e->local_port != (uint16_t)lp || !rrc_memeq(e->addr, key, 16))
			continue;
		if (!__atomic_compare_exchange_n(&e->state, &want, AQ_TAKING, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
			return c;
		int ret = put_in_place(e, c, flags);
		rrc_rc_fd_closed(ret); /* a new object at that number: a client connection now */
		entry_done(e);
		return ret;
	}
	return c;
}

/* c was just accepted. If it is a dummy, it becomes the repaired socket. */
static int substitute(int c, struct sockaddr *addr, socklen_t *alen, int flags)
{
	struct sockaddr_storage ss;
	uint32_t len = sizeof ss;
	uint16_t family, port;
	uint8_t key[16];
	int saved = errno;

	if (rrc_sys_getpeername(c, &ss, &len) < 0 || addr_key(&ss, &family, &port, key) < 0)
		return c;
	for (uint32_t i = 0; i < aq_n; i++) {
		struct aq_entry *e = &aq[i];
		uint32_t want = AQ_PENDING;
		if (RRC_LOAD(&e->state) != AQ_PENDING || e->family != family || e->port != port ||
		    !rrc_memeq(e->addr, key, 16))
			continue;
		if (!__atomic_compare_exchange_n(&e->state, &want, AQ_TAKING, 0, __ATOMIC_SEQ_CST,
						 __ATOMIC_SEQ_CST))
			return c;
		close_reset(e->dummy_fd);
		int ret = put_in_place(e, c, flags);
		if (addr && alen) {
			len = sizeof ss;
			if (rrc_sys_getpeername(ret, &ss, &len) == 0) {
				rrc_memcpy(addr, &ss, *alen < len ? *alen : len);
				*alen = len;
			}
		}
		entry_done(e);
		errno = saved;
		return ret;
	}
	return c;
}

/* While recording (rr-io.c, rr-fds.c): every accept takes its fd under
 * the fd table's lock, so that its number is in the table's order. On a
 * nonblocking listener the call is made under the lock. A blocking one
 * cannot hold the lock while it waits: it waits for a connection without
 * it (poll, parkable), then accepts under the lock with the listener made
 * nonblocking for that one call (another thread may have taken the
 * connection meanwhile: then it waits again). The event: ACCEPT, the new
 * fd, the peer's address. */
static int accept_begin(int fd, int *rec, int *blocking)
{
	*rec = rrc_rr_io_reserve(128);
	*blocking = 0;
	if (!*rec)
		return 0;
	long fl = rrc_sys_fcntl(fd, F_GETFL, 0);
	if (fl >= 0 && !(fl & O_NONBLOCK)) {
		*blocking = 1;
		return 0;
	}
	return rrc_fdt_begin();
}

/* A blocking listener's accept, in the fd table's order (above). *t gets
 * the lock's token when a connection was taken. */
static int accept_in_order(int fd, struct sockaddr *addr, socklen_t *alen, int flags, int *t)
{
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		uint32_t parks = rrc_parks_seen;
		long r = RRC_IN_CALL(1, rrc_syscall3(SYS_poll, (long)&p, 1, -1));
		if (r < 0) {
			if (r == -EINTR && (rrc_parks_seen != parks || rrc_rr_replaying())) {
				if (rrc_rr_replaying()) {
					errno = EINTR; /* the caller replays it */
					return -1;
				}
				continue; /* a park: carried on */
			}
			errno = (int)-r; /* the application's own signal interrupts accept too */
			return -1;
		}
		*t = rrc_fdt_begin();
		if (*t != 1) { /* restored into replay meanwhile */
			rrc_fdt_cancel(*t);
			*t = 0;
			errno = EINTR;
			return -1;
		}
		long fl = rrc_sys_fcntl(fd, F_GETFL, 0);
		if (fl >= 0)
			rrc_sys_fcntl(fd, F_SETFL, fl | O_NONBLOCK);
		int c = real_accept4(fd, addr, alen, flags);
		int e = errno;
		if (fl >= 0)
			rrc_sys_fcntl(fd, F_SETFL, fl);
		if (c >= 0 || (e != EAGAIN && e != EWOULDBLOCK)) {
			errno = e;
			return c;
		}
		rrc_fdt_cancel(*t); /* another thread took it: wait again */
		*t = 0;
	}
}

static int accept_end(int rec, int t, int fd, int c, const struct sockaddr *addr, const socklen_t *alen)
{
	if (!rec)
		return c;
	int e = errno;
	if (c >= 0)
		rrc_fdt_made(c, 1);
	if (!t)
		t = rrc_fdt_begin(); /* a failed blocking accept: in the order too */
	/* the peer's address, also when the caller did not ask for it: a
	 * failover's replay gives the connection from that peer to this call */
	struct sockaddr_storage peer;
	const void *d = addr;
	uint32_t n = c >= 0 && addr && alen ? (uint32_t)*alen : 0;
	if (c >= 0 && !(addr && alen)) {
		n = sizeof peer;
		d = &peer;
		if (rrc_sys_getpeername(c, &peer, &n) < 0)
			n = 0;
	}
	errno = e;
	rrc_fdt_end(t, RRC_EV_ACCEPT, (uint64_t)fd, c < 0 ? -e : c, d, n > 128 ? 128 : n);
	return c;
}

/* Replay: in the fd table's turn, a stand-in takes the recorded number: a
 * TCP socket of the peer's family, not connected (a standalone replay has
 * no connection to give); a failover's replay puts the client's own
 * connection there (take_parked). 1 if replayed (*c the outcome), 0 if
 * live. */
static int accept_replayed_with(int t, int fd, struct sockaddr *addr, socklen_t *alen, int flags, int *c);

static int accept_replayed(int fd, struct sockaddr *addr, socklen_t *alen, int flags, int *c)
{
	if (!rrc_rr_replaying())
		return 0;
	int t = rrc_fdt_begin();
	if (!t)
		return 0;
	return accept_replayed_with(t, fd, addr, alen, flags, c);
}

/* The same, the fd table's turn taken already (t). */
static int accept_replayed_with(int t, int fd, struct sockaddr *addr, socklen_t *alen, int flags, int *c)
{
	const struct rrc_log_event *e = rrc_rp_next(RRC_EV_ACCEPT, (uint64_t)fd);
	int r = -1, err = e->result < 0 ? (int)-e->result : 0;
	if (e->result >= 0) {
		uint16_t family = AF_INET;
		if (e->data_len >= 2)
			rrc_memcpy(&family, rrc_rp_data(e), 2);
		long s = rrc_sys_socket(family == AF_INET6 ? AF_INET6 : family == AF_UNIX ? AF_UNIX : AF_INET,
					SOCK_STREAM | (flags & (SOCK_NONBLOCK | SOCK_CLOEXEC)), 0);
		r = s < 0 ? -1 : (int)s;
		err = s < 0 ? (int)-s : 0;
		if (r >= 0 && e->data_len >= 2)
			r = take_parked(fd, rrc_rp_data(e), e->data_len, r, flags);
		if (r >= 0) {
			rrc_fdt_made(r, 1);
			if (addr && alen) {
				socklen_t n = e->data_len < *alen ? e->data_len : *alen;
				rrc_memcpy(addr, rrc_rp_data(e), n);
				*alen = e->data_len;
			}
		}
	}
	errno = err;
	rrc_fdt_end(t, RRC_EV_ACCEPT, (uint64_t)fd, r < 0 ? -err : r, 0, 0);
	*c = r;
	errno = err;
	return 1;
}

/* An accept begun while recording that returns after a restore into
 * replay: interrupted (rr-replay.c rewrote the restarted call) or given a
 * live connection, which the replay cannot have: reset. Then replayed. */
static int accept_late(int fd, int c, struct sockaddr *addr, socklen_t *alen, int flags, int *out)
{
	if (!rrc_rr_replaying())
		return 0;
	if (c >= 0)
		close_reset(c);
	return accept_replayed(fd, addr, alen, flags, out);
}

/* accept and accept4 (four: which the program called; the real call is
 * the same one) */
static int accept_call(int fd, struct sockaddr *addr, socklen_t *alen, int flags, int four)
{
	int c;
	if (accept_replayed(fd, addr, alen, flags, &c))
		return c;
	int rec, blocking, t = accept_begin(fd, &rec, &blocking);
	if (t && rrc_rr_replaying()) {
		/* parked waiting for the fd table's lock at a checkpoint and
		 * restored into replay: the turn is taken (rr-fds.c); the call
		 * is replayed, a parked connection put in place, not made */
		accept_replayed_with(t, fd, addr, alen, flags, &c);
		return c;
	}
	c = blocking ? accept_in_order(fd, addr, alen, flags, &t)
		     : RRC_IN_CALL(rec, four ? real_accept4(fd, addr, alen, flags) : real_accept(fd, addr, alen));
	if (accept_late(fd, c, addr, alen, flags, &c))
		return c;
	if (c >= 0 && RRC_LOAD(&aq_pending))
		c = substitute(c, addr, alen, flags);
	return accept_end(rec, t, fd, c, addr, alen);
}

int accept(int fd, struct sockaddr *addr, socklen_t *alen)
{
	if (!real_accept)
		rrc_aq_resolve();
	return accept_call(fd, addr, alen, 0, 0);
}

int accept4(int fd, struct sockaddr *addr, socklen_t *alen, int flags)
{
	if (!real_accept4)
		rrc_aq_resolve();
	return accept_call(fd, addr, alen, flags, 1);
}
