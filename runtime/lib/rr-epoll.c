/* SPDX-License-Identifier: MIT
 *
 * epoll registrations, for the record log (rr-epoll.h; issue 13 §1, §4).
 *
 * epoll_wait returns, for each ready fd, the 64-bit value the program gave
 * epoll_ctl: often a pointer to its own connection object. A replay
 * re-executes the program's allocations, but glibc's malloc is not
 * deterministic across threads (its arena locks are internal: README), so
 * the object of fd 7 may be at another address in the replay than in the
 * recording. The log therefore names the fd of each returned event too,
 * and a replay hands the program the value its own epoll_ctl registered
 * for that fd, not the recorded one.
 *
 * The tables live in ordinary memory (in every image): a restored process
 * knows what was registered before the checkpoint, as the restored epoll
 * instance does. Kept while recording or replaying only.
 *
 * Order (RRC §4.1's accesses to shared kernel objects): a program may
 * hand an object from thread to thread through the epoll instance alone
 * (a worker re-arms a connection with EPOLLONESHOT; the epoll thread gets
 * it back from epoll_wait and queues it, writing it before it takes any
 * lock). A replay returns epoll_wait's recorded events at once, so it must
 * also wait until the re-arming call was replayed. Every epoll_ctl and
 * every return of epoll_wait takes the instance's next number
 * (RRC_EPOLL_KEY in the object table), under a lock held inside the hook
 * guard: epoll_ctl's number before the call, so that a wait it woke
 * numbers after it. A replay takes them in that order.
 *
 * EPOLLONESHOT: an event epoll_wait returns disables its fd in the
 * kernel's instance until the program re-arms it (EPOLL_CTL_MOD). A replay
 * returns the recorded events without the kernel, so it disables those
 * fds itself, or the instance would report them again once live (mtkv: a
 * connection a worker is serving handed to a second worker). A MOD cannot
 * disable (the kernel adds EPOLLHUP and EPOLLERR to every MOD), so the fd
 * is removed (DEL) and marked "disarmed"; from then on, in replay and live
 * alike, the program's calls on it behave as on a disabled registration:
 * MOD re-arms (an ADD), DEL succeeds, ADD fails with EEXIST, until the
 * program removes or closes it.
 */
#include <dlfcn.h>
#include <errno.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include "rrc_lib.h"
#include "rr-log.h"
#include "rr-replay.h"
#include "rr-epoll.h"

#define SLOTS (1u << 15)

/* (epfd, fd) -> data, and (epfd, data) -> fd; entries are overwritten,
 * never removed (an fd closed without EPOLL_CTL_DEL leaves its entry, which
 * the next registration of that fd or that value replaces). Mapped on first
 * use (ordinary private memory, in every image), not in the library's
 * .bss: the pause helper inherits the library's data only while it is
 * small (pause-helper.c). */
struct fwd { int32_t epfd, fd; uint64_t data; uint32_t events, disarmed; };
struct rev { uint64_t data; int32_t epfd, fd; };
static struct fwd *fwd;
static struct rev *rev;
static volatile uint32_t lock;
static volatile uint32_t nr_disarmed;

/* Under the lock. 0 if the tables cannot be mapped (nothing is noted: a
 * replay then falls back to the recorded values). */
static int tables(void)
{
	if (fwd)
		return 1;
	long m = rrc_sys_mmap(0, SLOTS * (sizeof *fwd + sizeof *rev), PROT_READ | PROT_WRITE,
			      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m < 0 && m > -4096)
		return 0;
	rev = (struct rev *)(m + SLOTS * sizeof *fwd);
	fwd = (struct fwd *)m;
	return 1;
}

/* Inside the hook guard: a park waits until the lock is given back, so
 * no image holds it taken. */
static void take(void)
{
	rrc_hook_enter();
	while (__atomic_exchange_n(&lock, 1, __ATOMIC_ACQUIRE))
		while (RRC_LOAD(&lock))
			__builtin_ia32_pause();
}

static void give(void)
{
	__atomic_store_n(&lock, 0, __ATOMIC_RELEASE);
	rrc_hook_leave();
}

static uint32_t h2(uint64_t a, uint64_t b)
{
	return (uint32_t)(((a * 0x9e3779b97f4a7c15ull) ^ (b * 0xc2b2ae3d27d4eb4full)) >> 49) & (SLOTS - 1);
}

/* The entry of (epfd, fd), under the lock; 0 if none (or no tables). */
static struct fwd *entry(int epfd, int fd)
{
	if (!fwd)
		return 0;
	for (uint32_t i = h2((uint64_t)epfd, (uint64_t)fd), n = 0; n < SLOTS; n++, i = (i + 1) & (SLOTS - 1)) {
		struct fwd *f = &fwd[i];
		if (f->epfd == 0 && f->fd == 0 && f->data == 0)
			return 0;
		if (f->epfd == epfd && f->fd == fd)
			return f;
	}
	return 0;
}

/* +1 on EPOLL_CTL_ADD/MOD, 0 on DEL; the slot used (full table: dropped,
 * the replay then falls back to the recorded value) */
static void note(int epfd, int fd, uint64_t data, uint32_t events, int add)
{
	take();
	if (!tables()) {
		give();
		return;
	}
	for (uint32_t i = h2((uint64_t)epfd, (uint64_t)fd), n = 0; n < SLOTS; n++, i = (i + 1) & (SLOTS - 1)) {
		struct fwd *f = &fwd[i];
		if (f->epfd == 0 && f->fd == 0 && f->data == 0) { /* empty (epfd 0 is never an epoll fd here) */
			if (!add)
				break;
			*f = (struct fwd){ epfd, fd, data, events, 0 };
			break;
		}
		if (f->epfd == epfd && f->fd == fd) {
			f->data = add ? data : ~0ull;
			f->events = add ? events : 0;
			if (f->disarmed)
				__atomic_sub_fetch(&nr_disarmed, 1, __ATOMIC_RELAXED);
			f->disarmed = 0;
			break;
		}
	}
	if (add) {
		for (uint32_t i = h2((uint64_t)epfd, data), n = 0; n < SLOTS; n++, i = (i + 1) & (SLOTS - 1)) {
			struct rev *r = &rev[i];
			if ((r->epfd == 0 && r->fd == 0 && r->data == 0) || (r->epfd == epfd && r->data == data)) {
				*r = (struct rev){ data, epfd, fd };
				break;
			}
		}
	}
	give();
}

static int (*real_epoll_ctl)(int, int, int, struct epoll_event *);

/* The order's locks, one per epoll fd modulo 64 (memcached's workers each
 * have their own instance: no contention between them): taken inside the
 * hook guard only, for non-blocking work, so that no parked thread holds
 * one. */
static volatile uint32_t order_lock[64];

uint64_t rrc_ep_order(int epfd)
{
	volatile uint32_t *l = &order_lock[(uint32_t)epfd & 63];
	while (__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE))
		while (RRC_LOAD(l))
			__builtin_ia32_pause();
	uint64_t n = rrc_rr_obj_seq((const void *)RRC_EPOLL_KEY(epfd));
	__atomic_store_n(l, 0, __ATOMIC_RELEASE);
	return n;
}

static void noted(int epfd, int op, int fd, const struct epoll_event *ev)
{
	if (epfd <= 0 || fd < 0)
		return;
	if (op == EPOLL_CTL_DEL)
		note(epfd, fd, 0, 0, 0);
	else if (ev)
		note(epfd, fd, ev->data.u64, ev->events, 1);
}

/* epoll_ctl on the kernel's instance, a disarmed registration behaving as
 * a disabled one (above) */
static int ctl_real(int epfd, int op, int fd, struct epoll_event *ev)
{
	if (RRC_LOAD(&nr_disarmed)) {
		take();
		struct fwd *f = entry(epfd, fd);
		int disarmed = f && f->disarmed;
		give();
		if (disarmed && op == EPOLL_CTL_ADD) {
			errno = EEXIST;
			return -1;
		}
		if (disarmed && op == EPOLL_CTL_DEL)
			return 0; /* noted: the entry forgotten */
		if (disarmed && op == EPOLL_CTL_MOD)
			op = EPOLL_CTL_ADD; /* re-armed */
	}
	return real_epoll_ctl(epfd, op, fd, ev);
}

void rrc_ep_replayed_wait(int epfd, const int32_t *fds, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		if (fds[i] < 0)
			continue;
		take();
		struct fwd *f = entry(epfd, fds[i]);
		int disarm = f && f->data != ~0ull && (f->events & EPOLLONESHOT) && !f->disarmed;
		if (disarm) {
			f->disarmed = 1;
			__atomic_add_fetch(&nr_disarmed, 1, __ATOMIC_RELAXED);
		}
		give();
		if (disarm)
			real_epoll_ctl(epfd, EPOLL_CTL_DEL, fds[i], 0);
	}
}

void rrc_ep_fd_closed(int fd)
{
	if (!RRC_LOAD(&nr_disarmed))
		return;
	take();
	for (uint32_t i = 0; fwd && i < SLOTS; i++) {
		struct fwd *f = &fwd[i];
		if (f->fd == fd && f->disarmed) {
			f->disarmed = 0;
			f->data = ~0ull; /* the kernel dropped it with the file */
			__atomic_sub_fetch(&nr_disarmed, 1, __ATOMIC_RELAXED);
		}
	}
	give();
}

/* Replay: in the instance's order, made again, its outcome checked. */
static int ctl_replayed(int epfd, int op, int fd, struct epoll_event *ev, int *live)
{
	const struct rrc_log_event *e = rrc_rp_next(RRC_EV_EPOLL_CTL, (uint64_t)epfd);
	*live = !e;
	if (!e)
		return 0;
	struct rrc_log_epoll_ctl rec;
	rrc_memcpy(&rec, rrc_rp_data(e), sizeof rec);
	if (rec.op != (uint32_t)op || rec.fd != fd)
		rrc_rp_diverge("an epoll_ctl on another fd or with another op, fd", (uint64_t)fd);
	volatile uint64_t *c = rrc_rr_obj_counter((const void *)RRC_EPOLL_KEY(epfd), 1);
	rrc_rp_turn(c, e->seq, "the epoll instance", (uint64_t)epfd);
	int r = ctl_real(epfd, op, fd, ev);
	int64_t got = r < 0 ? -(int64_t)errno : r;
	if (r == 0)
		noted(epfd, op, fd, ev);
	rrc_rp_advance(c);
	if (got != e->result)
		rrc_rp_diverge("epoll_ctl returning", (uint64_t)got);
	rrc_rp_done();
	return r;
}

int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	if (!real_epoll_ctl)
		real_epoll_ctl = dlsym(RTLD_NEXT, "epoll_ctl");
	if (rrc_rr_replaying()) {
		int live, r = ctl_replayed(epfd, op, fd, ev, &live);
		if (!live)
			return r;
	}
	if (!rrc_rr_recording()) {
		int r = ctl_real(epfd, op, fd, ev);
		if (r == 0 && rrc_rr_mode != RRC_RR_OFF)
			noted(epfd, op, fd, ev);
		return r;
	}
	rrc_rr_reserve(sizeof(struct rrc_log_epoll_ctl));
	rrc_hook_enter();
	uint64_t n = rrc_ep_order(epfd);
	int r = ctl_real(epfd, op, fd, ev);
	int err = errno;
	if (r == 0)
		noted(epfd, op, fd, ev);
	struct rrc_log_epoll_ctl rec = { (uint32_t)op, fd, ev ? ev->events : 0, 0 };
	rrc_rr_event(RRC_EV_EPOLL_CTL, 0, (uint64_t)epfd, n, r < 0 ? -(int64_t)err : r, &rec, sizeof rec);
	rrc_hook_leave();
	errno = err;
	return r;
}

int32_t rrc_ep_fd_of(int epfd, uint64_t data)
{
	int32_t fd = -1;
	take();
	if (!fwd) {
		give();
		return -1;
	}
	for (uint32_t i = h2((uint64_t)epfd, data), n = 0; n < SLOTS; n++, i = (i + 1) & (SLOTS - 1)) {
		struct rev *r = &rev[i];
		if (r->epfd == 0 && r->fd == 0 && r->data == 0)
			break;
		if (r->epfd == epfd && r->data == data) {
			fd = r->fd;
			break;
		}
	}
	give();
	return fd;
}

int rrc_ep_data_of(int epfd, int32_t fd, uint64_t *data)
{
	int found = 0;
	take();
	if (!fwd) {
		give();
		return 0;
	}
	for (uint32_t i = h2((uint64_t)epfd, (uint64_t)fd), n = 0; n < SLOTS; n++, i = (i + 1) & (SLOTS - 1)) {
		struct fwd *f = &fwd[i];
		if (f->epfd == 0 && f->fd == 0 && f->data == 0)
			break;
		if (f->epfd == epfd && f->fd == fd) {
			found = f->data != ~0ull;
			*data = f->data;
			break;
		}
	}
	give();
	return found;
}
