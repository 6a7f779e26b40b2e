/* SPDX-License-Identifier: MIT
 *
 * The fd table's order and the outputs (issue 13 §1; RRC §4.1, HyCoR §4.1,
 * whose kernel gives every access to the fd table a sequence number).
 *
 * Every call that creates, duplicates or closes an fd runs, while
 * recording, under one process-wide lock of the library and takes the
 * next number of one process-wide sequence with it; its FD event (or
 * ACCEPT) carries that number. A replay that makes these calls in that
 * order gets every fd at the same number, since the kernel always gives
 * the lowest free one. The library's own fds are made high
 * (rrc_fd_high) under the same lock, so that they never take a number
 * the application would have had.
 *
 *   here:            socket socketpair pipe pipe2 eventfd timerfd_create
 *                    epoll_create epoll_create1 memfd_create fclose
 *   wrap-files.c:    open* creat* close dup dup2 dup3 fcntl(F_DUPFD*) fopen fdopen
 *   accept-queue.c:  accept accept4 (nonblocking listeners: under the lock;
 *                    a blocking accept is not, it would hold the lock while
 *                    it waits: its number is taken when it returns)
 *
 * The table also knows each fd's kind (set where it is made, else learnt
 * once by fstat) and, for sockets, how many bytes the process has sent on
 * it: outputs to sockets are logged as OUTPUT (offset, length, CRC32C of
 * the bytes), whatever their outcome (a partial count or EAGAIN is
 * nondeterministic too).
 *
 * Not ordered (README): fds libc makes inside its own functions (opendir,
 * mkstemp, getaddrinfo, syslog...), raw syscalls.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include "rrc_lib.h"
#include "lib-fds.h"
#include "rrc/crc32c.h"
#include "rr-log.h"
#include "rr-fds.h"
#include "rr-epoll.h"
#include "rr-replay.h"
#include "rr-conns.h"

enum { K_UNKNOWN = 0, K_SOCKET, K_FILE, K_OTHER };

/* conn: 0 not learnt yet, 1 learnt (addresses below), 2 not an IPv4
 * TCP connection */
struct fdt_entry {
	uint32_t kind;
	uint16_t conn;
	uint16_t pad;
	uint64_t sent;
	uint64_t made;                  /* the number of the call that made it (0: unknown) */
	uint32_t local_addr, peer_addr; /* network byte order */
	uint16_t local_port, peer_port;
	uint32_t pad2;
};

/* In ordinary memory (in every image): a replay from a checkpoint
 * continues the sequence, the kinds and the offsets where it left them. */
static struct fdt {
	volatile uint32_t lock;         /* futex: 0 free, 1 held, 2 contended */
	volatile int32_t owner;
	uint64_t seq;                   /* the next number */
	struct fdt_entry e[RRC_MAX_FDS];
} *fdt;

static __thread int held __attribute__((tls_model("initial-exec")));

int rrc_fdt_init(void)
{
	long m = rrc_sys_mmap(0, sizeof *fdt, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m < 0 && m > -4096)
		return (int)m;
	fdt = (struct fdt *)m;
	return 0;
}

static void lock(void)
{
	int32_t me = (int32_t)rrc_sys_gettid();
	uint32_t c = 0;
	if (__atomic_compare_exchange_n(&fdt->lock, &c, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		goto got;
	if (c != 2)
		c = __atomic_exchange_n(&fdt->lock, 2, __ATOMIC_ACQUIRE);
	while (c != 0) {
		rrc_sys_futex(&fdt->lock, RRC_FUTEX_WAIT, 2, 0);
		c = __atomic_exchange_n(&fdt->lock, 2, __ATOMIC_ACQUIRE);
	}
got:
	RRC_STORE(&fdt->owner, me);
}

static void unlock(void)
{
	RRC_STORE(&fdt->owner, 0);
	if (__atomic_exchange_n(&fdt->lock, 0, __ATOMIC_RELEASE) == 2)
		rrc_sys_futex(&fdt->lock, RRC_FUTEX_WAKE, 1, 0);
}

/* Replay: the call waits for its number's turn in the fd table, holds the
 * lock (the library's own fds wait meanwhile), is made again and must give
 * the recorded fd. */
#define REPLAYED 2

int rrc_fdt_begin(void)
{
	if (!fdt || held || rrc_rr_is_library_thread())
		return 0; /* the library's, or inside another fd call (fclose's close) */
	if (rrc_rr_replaying()) {
		const struct rrc_log_event *e = rrc_rp_next(0, RRC_RP_ANY);
		if (!e)
			return 0; /* live */
		if (e->kind != RRC_EV_FD && e->kind != RRC_EV_ACCEPT)
			rrc_rp_diverge("a call that changes the fd table", ~0ull);
		rrc_rp_turn(rrc_fdt_counter(), e->seq, "the fd table", 0);
		lock();
		held = 1;
		return REPLAYED;
	}
	if (!rrc_rr_recording())
		return 0; /* not recording */
	rrc_rr_reserve(RRC_FIN_ROOM); /* a close may add a FIN output */
	lock();
	if (rrc_rr_replaying()) {
		/* parked waiting for the lock, restored into replay: the call
		 * takes its turn instead */
		unlock();
		return rrc_fdt_begin();
	}
	held = 1;
	return 1;
}

void rrc_fdt_cancel(int t)
{
	if (t && held) {
		held = 0;
		unlock();
	}
}

void rrc_fdt_drop_held(void)
{
	if (held) {
		held = 0;
		unlock();
	}
}

volatile uint64_t *rrc_fdt_counter(void)
{
	return fdt ? (volatile uint64_t *)&fdt->seq : 0;
}

/* The replayed call's outcome against its event; the number moves on. */
static void replayed_end(uint16_t kind, uint64_t obj, int64_t result)
{
	int e = errno;
	const struct rrc_log_event *ev = rrc_rp_next(kind, obj);
	if (ev && ev->result != result)
		rrc_rp_diverge(result < 0 ? "the call failed with -errno" : "the call gave fd", (uint64_t)result);
	rrc_rp_advance(rrc_fdt_counter());
	held = 0;
	unlock();
	rrc_rp_done();
	errno = e;
}

static void set_kind(int fd, uint32_t kind)
{
	if (fd >= 0 && fd < RRC_MAX_FDS)
		fdt->e[fd] = (struct fdt_entry){ .kind = kind };
}

/* The fd the numbered call `seq` made: which connection of a 4-tuple its
 * outputs belong to (the backup's gate tells incarnations apart by it). */
static void note_made(int64_t fd, uint64_t seq)
{
	if (fd >= 0 && fd < RRC_MAX_FDS)
		fdt->e[fd].made = seq;
}

static void end_with(int t, uint16_t kind, uint64_t obj, int64_t result, const void *data, uint32_t len,
		     const struct rrc_fin *fin)
{
	if (!t)
		return;
	if (t == REPLAYED) {
		replayed_end(kind, obj, result);
		return;
	}
	int e = errno;
	if (kind == RRC_EV_ACCEPT)
		note_made(result, fdt->seq);
	rrc_hook_enter();
	rrc_rr_event(kind, 0, obj, fdt->seq++, result, data, len);
	if (fin)
		rrc_fin_event(fin, (int)result);
	rrc_hook_leave();
	held = 0;
	unlock();
	errno = e;
}

void rrc_fdt_end(int t, uint16_t kind, uint64_t obj, int64_t result, const void *data, uint32_t len)
{
	end_with(t, kind, obj, result, data, len, 0);
}

void rrc_fdt_end_close(int t, int64_t result, int fd, const struct rrc_fin *fin)
{
	int32_t fds[2] = { fd, -1 };
	end_with(t, RRC_EV_FD, RRC_FDOP_CLOSE, result, fds, sizeof fds, fin);
	if (t == REPLAYED)
		rrc_fin_replayed(fd);
}

void rrc_fdt_end_fd(int t, uint16_t op, int64_t result, int32_t a, int32_t b)
{
	if (t == 1 && result >= 0 && op != RRC_FDOP_CLOSE && op != RRC_FDOP_CLOSE_RANGE) {
		/* a pair (pipe, socketpair: result 0) or one fd (the result) */
		int pair = op != RRC_FDOP_DUP && op != RRC_FDOP_DUPFD && result == 0 && a >= 0 && b >= 0;
		note_made(pair ? a : result, fdt->seq);
		if (pair)
			note_made(b, fdt->seq);
	}
	int32_t fds[2] = { a, b };
	rrc_fdt_end(t, RRC_EV_FD, op, result, fds, sizeof fds);
}

void rrc_fdt_made(int fd, int socket)
{
	if (fdt)
		set_kind(fd, socket ? K_SOCKET : K_UNKNOWN); /* the others: learnt when it matters */
}

void rrc_fdt_closed(int fd)
{
	if (fdt)
		set_kind(fd, K_UNKNOWN);
	rrc_rp_fd_closed(fd);
	rrc_rc_fd_closed(fd);
	rrc_ep_fd_closed(fd);
}

void rrc_fdt_restored(void)
{
	/* the image was taken with the control thread holding the lock */
	if (fdt) {
		RRC_STORE(&fdt->owner, 0);
		RRC_STORE(&fdt->lock, 0);
	}
	held = 0;
}

/* Also while replaying: a library fd made between two replayed calls
 * would take the number the second must get. */
static int lib_locks;

void rrc_fdt_lib_begin(void)
{
	lib_locks = fdt && rrc_rr_mode != RRC_RR_OFF;
	if (lib_locks)
		lock();
}

void rrc_fdt_lib_end(void)
{
	if (lib_locks)
		unlock();
	lib_locks = 0;
}

/* ---- outputs ---- */

/* An fd's kind: noted where the fd is made for sockets, else learnt once
 * by fstat and kept until the fd is closed. */
static uint32_t kind_of(int fd)
{
	if (fd < 0)
		return K_OTHER;
	if (fd < RRC_MAX_FDS && fdt->e[fd].kind != K_UNKNOWN)
		return fdt->e[fd].kind;
	struct stat st;
	uint32_t k = K_OTHER;
	if (rrc_sys_fstat(fd, &st) == 0)
		k = S_ISSOCK(st.st_mode) ? K_SOCKET : S_ISREG(st.st_mode) ? K_FILE : K_OTHER;
	/* /proc and /sys files are regular files whose bytes are the
	 * kernel's of the moment (redis reads /proc/self/stat): their bytes
	 * go into the log like a pipe's, a replay could not read them again */
	if (k == K_FILE) {
		struct { long type; long rest[15]; } fs;
		if (rrc_syscall2(SYS_fstatfs, fd, (long)&fs) == 0 &&
		    (fs.type == 0x9fa0 /* PROC_SUPER_MAGIC */ || fs.type == 0x62656572 /* SYSFS_MAGIC */))
			k = K_OTHER;
	}
	if (fd < RRC_MAX_FDS)
		fdt->e[fd].kind = k;
	return k;
}

static int is_socket(int fd) { return kind_of(fd) == K_SOCKET; }

int rrc_fdt_is_file(int fd)
{
	return fdt && kind_of(fd) == K_FILE;
}

int rrc_fdt_sent(int fd, uint64_t *sent)
{
	if (!fdt || fd < 0 || fd >= RRC_MAX_FDS || fdt->e[fd].kind != K_SOCKET)
		return 0;
	*sent = fdt->e[fd].sent;
	return 1;
}

/* The connection an output goes to, learnt at the fd's first output
 * (two raw calls per connection): what the backup's gate knows it by. */
static void learn_conn(int fd)
{
	if (fd >= RRC_MAX_FDS || fdt->e[fd].conn)
		return;
	struct fdt_entry *x = &fdt->e[fd];
	int type = 0;
	uint32_t tl = sizeof type;
	uint8_t l[28], p[28]; /* sockaddr_in6: an IPv4-mapped one counts */
	uint32_t ll = sizeof l, pl = sizeof p, la, pa;
	uint16_t lp, pp;
	if (rrc_sys_getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 && type == SOCK_STREAM &&
	    rrc_sys_getsockname(fd, l, &ll) == 0 && rrc_sockaddr_v4(l, ll, &la, &lp) &&
	    rrc_sys_getpeername(fd, p, &pl) == 0 && rrc_sockaddr_v4(p, pl, &pa, &pp)) {
		x->local_addr = la;
		x->local_port = lp;
		x->peer_addr = pa;
		x->peer_port = pp;
		x->conn = 1;
	} else {
		x->conn = 2;
	}
}

int rrc_out_begin(int fd)
{
	if (!fdt || !rrc_rr_recording() || !is_socket(fd))
		return 0;
	learn_conn(fd);
	rrc_rr_reserve(sizeof(struct rrc_log_output));
	return 1;
}

/* Replay: the output's event, checked (offset, CRC32C of the bytes the
 * program gives now), or NULL if live. crc_of(ctx, length) computes it. */
/* How a checked output goes out on a client connection in a failover's
 * replay (rr-conns.h): the bytes of ctx, `len` of them. */
typedef void (*send_fn)(int fd, uint64_t at, const void *ctx, uint64_t len);

static const struct rrc_log_event *out_replay(int fd, uint32_t (*crc_of)(const void *, uint64_t, uint64_t *),
					      send_fn send_of, const void *ctx)
{
	if (!fdt || !rrc_rr_replaying() || !is_socket(fd))
		return 0;
	const struct rrc_log_event *e = rrc_rp_next(RRC_EV_OUTPUT, (uint64_t)fd);
	if (!e)
		return 0; /* live: sent for real */
	struct rrc_log_output o;
	rrc_memcpy(&o, rrc_rp_data(e), sizeof o);
	uint64_t at = fd < RRC_MAX_FDS ? fdt->e[fd].sent : 0;
	if (o.offset != at)
		rrc_rp_diverge("an output at stream offset", at);
	uint64_t have = 0;
	uint32_t crc = crc_of(ctx, o.length, &have);
	if (have < o.length)
		rrc_rp_diverge("an output shorter than the recorded one, bytes", have);
	if (crc != o.crc)
		rrc_rp_diverge("an output whose CRC32C differs", crc);
	rrc_rp_output(o.length);
	if (fd < RRC_MAX_FDS)
		fdt->e[fd].sent += o.length;
	if (o.length)
		send_of(fd, at, ctx, o.length);
	return e;
}

struct iov_ctx { const struct iovec *iov; int cnt; };
static uint32_t iov_crc(const void *ctx, uint64_t len, uint64_t *have)
{
	const struct iov_ctx *c = ctx;
	*have = 0;
	for (int i = 0; i < c->cnt; i++)
		*have += c->iov[i].iov_len;
	return rrc_rr_crc_iov(c->iov, c->cnt, len);
}

static void iov_send(int fd, uint64_t at, const void *ctx, uint64_t len)
{
	const struct iov_ctx *c = ctx;
	rrc_rc_output(fd, at, c->iov, c->cnt, len);
}

int rrc_out_replayed(int fd, const struct iovec *iov, int cnt, ssize_t *r)
{
	struct iov_ctx c = { iov, cnt };
	const struct rrc_log_event *e = out_replay(fd, iov_crc, iov_send, &c);
	if (!e)
		return 0;
	*r = rrc_rp_result(e);
	return 1;
}

/* An output begun while recording that returns after a restore into
 * replay (parked between the call and its event, or before its syscall,
 * which then ran on the restored stand-in of its socket): its event is
 * this thread's next, checked against the bytes like a replayed one; the
 * program sees the recorded outcome. 1 if so (*r set). */
static void sent_already(int fd, uint64_t at, const void *ctx, uint64_t len)
{
	(void)fd, (void)at, (void)ctx, (void)len;
}

static int out_late(int fd, const void *ctx, uint32_t (*crc_of)(const void *, uint64_t, uint64_t *), ssize_t *r)
{
	if (!rrc_rr_replaying())
		return 0;
	/* its bytes went out already: before the checkpoint (the restored
	 * connection stands after them) or on the restored connection */
	const struct rrc_log_event *ev = out_replay(fd, crc_of, sent_already, ctx);
	if (ev)
		*r = rrc_rp_result(ev);
	return 1;
}

/* Where an output of fd's stands (the bytes it sent before) and its
 * connection, if learnt (RRC_OUT_INET). */
static void name_output(const struct fdt_entry *x, struct rrc_log_output *o)
{
	o->offset = x->sent;
	o->made = x->made;
	if (x->conn == 1) {
		o->family = RRC_OUT_INET;
		o->local_addr = x->local_addr;
		o->peer_addr = x->peer_addr;
		o->local_port = x->local_port;
		o->peer_port = x->peer_port;
	}
}

/* The OUTPUT event of a send that returned r (errno e): its bytes' CRC
 * (crc_of over ctx), all inside the hook guard, after a last look at the
 * mode there: a thread parked anywhere between its call and this guard and
 * restored into replay has no event to write, its call is the log's next
 * (out_late). The result for the program. */
static ssize_t out_event(int fd, ssize_t r, int e, const void *ctx,
			 uint32_t (*crc_of)(const void *, uint64_t, uint64_t *))
{
	rrc_hook_enter();
	if (!rrc_rr_recording()) {
		rrc_hook_leave();
		errno = e;
		out_late(fd, ctx, crc_of, &r);
		return r;
	}
	uint64_t have;
	struct rrc_log_output o = { .length = r > 0 ? (uint64_t)r : 0,
				    .crc = r > 0 ? crc_of(ctx, (uint64_t)r, &have) : 0 };
	if (fd >= 0 && fd < RRC_MAX_FDS) {
		struct fdt_entry *x = &fdt->e[fd];
		name_output(x, &o);
		if (r > 0)
			x->sent += (uint64_t)r;
	}
	rrc_rr_event(RRC_EV_OUTPUT, 0, (uint64_t)fd, 0, r < 0 ? -e : r, &o, sizeof o);
	rrc_hook_leave();
	errno = e;
	return r;
}

/* ---- the end of sending: a FIN output (RRC_EVF_FIN) ----
 *
 * A server that closes its connections after replying (HTTP/1.0, ab
 * without -k, a QUIT) makes its kernel send a FIN that its client waits
 * for. Without a record of it the backup's gate holds that FIN until the
 * next checkpoint is committed; with one it goes out as soon as the log
 * holding the program's shutdown or close is at the backup, like the
 * bytes before it (docs/gate.md "The log's cover"), and a failover's
 * replay makes that call again, which sends the same FIN. Only for a
 * learnt IPv4 TCP connection; the gate checks that the server's FIN
 * stands exactly at the offset named (a close of one of two fds of a
 * socket sends none, an RST is not a FIN). */
void rrc_fin_note(int fd, struct rrc_fin *f)
{
	f->fd = -1;
	if (!fdt || fd < 0 || fd >= RRC_MAX_FDS || !rrc_rr_recording() || !is_socket(fd))
		return;
	learn_conn(fd); /* before a close, while the socket still has its names */
	const struct fdt_entry *x = &fdt->e[fd];
	if (x->conn != 1)
		return;
	f->o = (struct rrc_log_output){ 0 };
	name_output(x, &f->o);
	f->fd = fd;
}

void rrc_fin_event(const struct rrc_fin *f, int result)
{
	if (f->fd >= 0 && result == 0 && rrc_rr_recording())
		rrc_rr_event(RRC_EV_OUTPUT, RRC_EVF_FIN, (uint64_t)f->fd, 0, 0, &f->o, sizeof f->o);
}

void rrc_fin_replayed(int fd)
{
	const struct rrc_log_event *e = rrc_rp_peek(0, RRC_RP_ANY);
	if (e && e->kind == RRC_EV_OUTPUT && (e->flags & RRC_EVF_FIN) && e->obj == (uint64_t)fd)
		rrc_rp_result(e);
}

ssize_t rrc_out_end(int t, int fd, const struct iovec *iov, int cnt, ssize_t r)
{
	if (!t)
		return r;
	struct iov_ctx c = { iov, cnt };
	if (out_late(fd, &c, iov_crc, &r))
		return r;
	return out_event(fd, r, errno, &c, iov_crc);
}

/* ---- the calls that make fds, without another home ---- */

static int (*real_socket)(int, int, int);
static int (*real_socketpair)(int, int, int, int[2]);
static int (*real_pipe)(int[2]);
static int (*real_pipe2)(int[2], int);
static int (*real_eventfd)(unsigned int, int);
static int (*real_timerfd_create)(int, int);
static int (*real_epoll_create)(int);
static int (*real_epoll_create1)(int);
static int (*real_memfd_create)(const char *, unsigned int);
static int (*real_fclose)(FILE *);
static ssize_t (*real_send)(int, const void *, size_t, int);
static ssize_t (*real_sendto)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
static ssize_t (*real_sendmsg)(int, const struct msghdr *, int);
static ssize_t (*real_sendfile)(int, int, off_t *, size_t);

#define RESOLVE(name) do { if (!real_##name) real_##name = dlsym(RTLD_NEXT, #name); } while (0)

void rrc_fds_resolve(void)
{
	RESOLVE(socket); RESOLVE(socketpair); RESOLVE(pipe); RESOLVE(pipe2); RESOLVE(eventfd);
	RESOLVE(timerfd_create); RESOLVE(epoll_create); RESOLVE(epoll_create1); RESOLVE(memfd_create);
	RESOLVE(fclose); RESOLVE(send); RESOLVE(sendto); RESOLVE(sendmsg); RESOLVE(sendfile);
}

/* One fd made by `call`: ordered, logged, its kind noted. */
#define MAKE_ONE(op, is_sock, call) do { \
		int t_ = rrc_fdt_begin(); \
		int fd_ = (call); \
		if (fd_ >= 0) \
			rrc_fdt_made(fd_, (is_sock)); \
		rrc_fdt_end_fd(t_, (op), fd_ < 0 ? -errno : fd_, fd_, -1); \
		return fd_; \
	} while (0)

int socket(int dom, int type, int proto)
{
	RESOLVE(socket);
	MAKE_ONE(RRC_FDOP_SOCKET, 1, real_socket(dom, type, proto));
}

int eventfd(unsigned int v, int fl)
{
	RESOLVE(eventfd);
	MAKE_ONE(RRC_FDOP_EVENTFD, 0, real_eventfd(v, fl));
}

int timerfd_create(int clk, int fl)
{
	RESOLVE(timerfd_create);
	MAKE_ONE(RRC_FDOP_TIMERFD, 0, real_timerfd_create(clk, fl));
}

int epoll_create(int size)
{
	RESOLVE(epoll_create);
	MAKE_ONE(RRC_FDOP_EPOLL, 0, real_epoll_create(size));
}

int epoll_create1(int fl)
{
	RESOLVE(epoll_create1);
	MAKE_ONE(RRC_FDOP_EPOLL, 0, real_epoll_create1(fl));
}

int memfd_create(const char *name, unsigned int fl)
{
	RESOLVE(memfd_create);
	MAKE_ONE(RRC_FDOP_OTHER, 0, real_memfd_create(name, fl));
}

/* Two fds: the event's data names both; result 0 or -errno. */
static int made_two(int t, uint16_t op, int r, int fds[2], int sock)
{
	if (r == 0) {
		rrc_fdt_made(fds[0], sock);
		rrc_fdt_made(fds[1], sock);
	}
	rrc_fdt_end_fd(t, op, r < 0 ? -errno : 0, r == 0 ? fds[0] : -1, r == 0 ? fds[1] : -1);
	return r;
}

int socketpair(int dom, int type, int proto, int fds[2])
{
	RESOLVE(socketpair);
	int t = rrc_fdt_begin();
	return made_two(t, RRC_FDOP_SOCKET, real_socketpair(dom, type, proto, fds), fds, 1);
}

int pipe(int fds[2])
{
	RESOLVE(pipe);
	int t = rrc_fdt_begin();
	return made_two(t, RRC_FDOP_PIPE, real_pipe(fds), fds, 0);
}

int pipe2(int fds[2], int fl)
{
	RESOLVE(pipe2);
	int t = rrc_fdt_begin();
	return made_two(t, RRC_FDOP_PIPE, real_pipe2(fds, fl), fds, 0);
}

int fclose(FILE *f)
{
	RESOLVE(fclose);
	int t = rrc_fdt_begin();
	int fd = t && f ? fileno(f) : -1;
	int r = real_fclose(f);
	if (t)
		rrc_fdt_closed(fd);
	rrc_fdt_end_fd(t, RRC_FDOP_CLOSE, r < 0 ? -errno : 0, fd, -1);
	return r;
}

/* ---- socket outputs without another home (write/writev: wrap-files.c) ---- */

ssize_t send(int fd, const void *buf, size_t n, int fl)
{
	RESOLVE(send);
	struct iovec v = { (void *)buf, n };
	ssize_t r;
	if (rrc_out_replayed(fd, &v, 1, &r))
		return r;
	int t = rrc_out_begin(fd);
	r = real_send(fd, buf, n, fl);
	return rrc_out_end(t, fd, &v, 1, r);
}

ssize_t sendto(int fd, const void *buf, size_t n, int fl, const struct sockaddr *to, socklen_t tl)
{
	RESOLVE(sendto);
	struct iovec v = { (void *)buf, n };
	ssize_t r;
	if (rrc_out_replayed(fd, &v, 1, &r))
		return r;
	int t = rrc_out_begin(fd);
	r = real_sendto(fd, buf, n, fl, to, tl);
	return rrc_out_end(t, fd, &v, 1, r);
}

ssize_t sendmsg(int fd, const struct msghdr *m, int fl)
{
	RESOLVE(sendmsg);
	ssize_t r;
	if (m && rrc_out_replayed(fd, m->msg_iov, (int)m->msg_iovlen, &r))
		return r;
	int t = rrc_out_begin(fd);
	r = real_sendmsg(fd, m, fl);
	return rrc_out_end(t, fd, m ? m->msg_iov : 0, m ? (int)m->msg_iovlen : 0, r);
}

/* A file's bytes from an offset, read back without moving it. */
struct file_ctx { int fd; long start; };
static uint32_t file_crc(const void *ctx, uint64_t len, uint64_t *have)
{
	const struct file_ctx *c = ctx;
	uint8_t chunk[4096];
	uint32_t crc = 0;
	*have = 0;
	while (*have < len) {
		size_t k = len - *have < sizeof chunk ? (size_t)(len - *have) : sizeof chunk;
		long g = rrc_syscall4(SYS_pread64, c->fd, (long)chunk, (long)k, c->start + (long)*have);
		if (g <= 0)
			break;
		crc = rrc_crc32c_extend(crc, chunk, (size_t)g);
		*have += (uint64_t)g;
	}
	return crc;
}

static void file_send(int fd, uint64_t at, const void *ctx, uint64_t len)
{
	const struct file_ctx *c = ctx;
	rrc_rc_output_file(fd, at, c->fd, c->start, len);
}

/* sendfile's bytes come from a file: the CRC covers what was sent, read
 * back from the file at the offset sendfile used (pread, no offset moved). */
ssize_t sendfile(int out, int in, off_t *off, size_t n)
{
	RESOLVE(sendfile);
	int active = rrc_rr_replaying() || rrc_rr_recording();
	struct file_ctx c = { in, active ? (off ? (long)*off : rrc_sys_lseek(in, 0, SEEK_CUR)) : 0 };
	const struct rrc_log_event *ev = active ? out_replay(out, file_crc, file_send, &c) : 0;
	if (ev) {
		/* the file's offset moves as the real call would have moved it */
		if (ev->result > 0 && off)
			*off += ev->result;
		else if (ev->result > 0)
			rrc_sys_lseek(in, ev->result, SEEK_CUR);
		return rrc_rp_result(ev);
	}
	int t = rrc_out_begin(out);
	ssize_t r = real_sendfile(out, in, off, n);
	if (!t || out_late(out, &c, file_crc, &r))
		return r;
	return out_event(out, r, errno, &c, file_crc);
}

ssize_t sendfile64(int out, int in, off_t *off, size_t n) __attribute__((alias("sendfile")));
