/* SPDX-License-Identifier: MIT
 *
 * The pause helper: a process of its own that works for a copy snapshot's
 * pause on the second CPU (precopy.c, snapshot.c).
 *
 * Most of a pause is waiting for the kernel: the write-protect scan of
 * the application's page tables (memory.c), the memory map (one
 * PROCMAP_QUERY per VMA), the fd table (fstat, readlink, getsockopt per
 * fd). The application's threads are parked, so a CPU is free. But a
 * task running in the application's memory on that CPU turns every TLB
 * flush of the scan into an interrupt of that CPU (measured on this VM:
 * a 134 MB scan 4 to 13 times slower with a busy thread in the same
 * memory, unchanged with a busy process in another), so the helper has a
 * memory of its own, and works while the control thread scans:
 *
 *   control thread: READY, quiesce, GO, scan, process fields, [wait: map],
 *                   copies, TCP table if asked, [wait: DONE], the
 *                   library's own pages, release
 *   helper:         wakes, spins  memory map -> MAP_DONE, fd table,
 *                                 [TCP table: see below] -> DONE, sleeps
 *
 * The control thread takes the TCP table itself after its copies, on a
 * netlink socket it opened before GO (the helper's fd walk knows it), so
 * that the two tables are taken side by side: only a pause whose fd walk
 * finds an IPv6 TCP socket the check before the pause had not seen takes
 * the table again, with AF_INET6, after the join. The helper takes it
 * only if that socket could not be opened.
 *
 * READY wakes it before the pause (waking an idle vCPU costs the waker
 * ~20 us and the wakee 50-80 us on this VM); it then spins, yielding its
 * CPU to anyone else who wants it (the threads the quiesce signals), so
 * that GO in the pause is a store it sees at once.
 *
 * It shares the fd table (CLONE_FILES): its fstat, readlink and
 * getsockopt see the application's fds, and the library's fd on
 * /proc/self/maps (opened by the application) reads the application's
 * memory map. fds.c and sk-diag.c run unchanged in it, on its own copy
 * of the scratch arena; the results are copied into a MAP_SHARED mailbox
 * (struct rrc_helper_box) mapped at the same address in both processes.
 *
 * It is started in the pause of the first copy snapshot, the application
 * parked: a clone without CLONE_VM copies the page tables of everything
 * it inherits (the fork snapshot's cost), so the application's big
 * private VMAs are made MADV_DONTFORK for the clone and MADV_DOFORK again
 * right after it, with no application thread running to move a VMA in
 * between. The helper then sleeps on the mailbox's futex (shared, not
 * private: two processes) between pauses.
 *
 * It is nobody's business but the library's: exit signal 0 (invisible to
 * the application's wait()), every signal blocked, PR_SET_PDEATHSIG so it
 * dies with the control thread, skipped by the children refusal
 * (control.c), in no image, and neither is the mailbox (lib_excluded,
 * and MADV_DONTFORK so that a fork snapshot's child never has it). The
 * scratch arena is mapped afresh after a restore: the next copy snapshot
 * starts a new helper. RRC_PAUSE_HELPER=0 keeps it off: the control
 * thread then does all of it, one step after the other.
 */
#include <elf.h>
#include <errno.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include "rrc_lib.h"
#include "creds.h"
#include "rr-sink.h"

/* The application's VMAs smaller than this are inherited by the helper
 * (their page tables are cheap to copy, and the libraries' data is
 * among them); bigger private ones are left out of the clone. */
#define PH_INHERIT_MAX (256u << 10)
#define PH_MAX_DONTFORK 512
/* The helper's work takes well under a millisecond; a helper that is
 * stuck (stopped by a debugger, starved) fails the pause after this. */
#define PH_TIMEOUT_NS (2000ull * 1000 * 1000)
/* The control thread spins this long before it sleeps on the futex: on
 * this VM waking an idle vCPU costs 15-40 us. */
#define PH_SPIN_NS (300ull * 1000)
/* The helper spins after READY this long at most (a quiesce takes
 * ~0.2 ms; one that fails sends no GO), then sleeps. */
#define PH_READY_SPIN_NS (20ull * 1000 * 1000)

#define WNOHANG_ 1
#define WALL_ 0x40000000

/* ---------------- in the helper process ---------------- */

/* The memory map, with every VMA's name. 0 or -errno. */
static int read_map(struct rrc_helper_box *b)
{
	uint64_t addr = 0, cursor = 0;
	b->nr_vmas = 0;
	b->names_len = 0;
	for (;;) {
		if (b->nr_vmas >= b->cap_vmas || b->cap_names - b->names_len < RRC_PATH_MAX)
			return -ENOSPC;
		struct rrc_ph_vma *v = &b->vmas[b->nr_vmas];
		char *name = b->names + b->names_len;
		long r = rrc_vma_query_named(rrc_g.maps_fd, addr, &v->q, name, &cursor);
		if (r == -ENOENT)
			return 0;
		if (r < 0)
			return (int)r;
		addr = v->q.vma_end;
		v->name_off = (uint32_t)b->names_len;
		v->name_len = (uint32_t)rrc_strlen(name);
		b->names_len += v->name_len + 1;
		b->nr_vmas++;
	}
}

static void wake(volatile uint32_t *w)
{
	rrc_sys_futex(w, RRC_FUTEX_WAKE_SHARED, 1, 0);
}

/* One pause: the request's fds are the library's for this dump (the
 * helper's copy of rrc_g has those of the pause that started it). */
static void serve(struct rrc_helper_box *b)
{
	struct rrc_scratch *s = rrc_s;
	b->start_ns = rrc_mono_ns();
	rrc_g.image_fd = b->image_fd;
	rrc_g.conn_fd = b->conn_fd;
	s->res_rfd = b->res_rfd;
	s->res_wfd = b->res_wfd;
	s->diag_fd = b->diag_fd;
	rrc_rr_sink_mirror(b->log_fd, b->log_handed_fd);
	s->err_code = 0;
	s->err_errno = 0;
	s->err_msg[0] = 0;

	b->map_rc = read_map(b);
	b->map_ns = rrc_mono_ns();
	RRC_STORE(&b->map_done, 1);
	wake(&b->map_done);

	s->nr_tcp = 0;
	s->tcp_dumps = 0;
	b->fds_rc = rrc_fds_capture();
	b->fds_ns = rrc_mono_ns();
	b->tcp_v6 = s->tcp_v6;
	b->tcp_rc = b->do_tcp && b->fds_rc == 0 ? rrc_tcp_capture(-1) : 0;
	b->fdbuf_len = b->fds_rc == 0 ? s->fdbuf_len : 0;
	b->nr_fds = s->nr_fds;
	rrc_memcpy(b->fdbuf, s->fdbuf, b->fdbuf_len);
	b->nr_libpipes = s->nr_libpipes; /* fds.c closed them if it failed */
	rrc_memcpy(b->libpipes, s->libpipes, s->nr_libpipes * sizeof *s->libpipes);
	b->nr_tcp = s->nr_tcp;
	b->tcp_dumps = s->tcp_dumps;
	rrc_memcpy(b->tcp, s->tcp, (size_t)s->nr_tcp * sizeof *s->tcp);
	b->err_code = s->err_code;
	b->err_errno = s->err_errno;
	rrc_memcpy(b->err_msg, s->err_msg, sizeof b->err_msg);
	b->done_ns = rrc_mono_ns();
	RRC_STORE(&b->state, RRC_PH_DONE);
	wake(&b->state);
}

static __attribute__((noreturn)) void helper_main(void)
{
	struct rrc_scratch *s = rrc_s;
	struct rrc_helper_box *b = s->helper.box;
	s->helper.in_helper = 1;
	rrc_sys_prctl(1 /* PR_SET_PDEATHSIG */, 9 /* SIGKILL */, 0, 0, 0);
	if (rrc_sys_getppid() != b->app_pid)
		rrc_sys_exit(0); /* the application is already gone */
	uint64_t all = ~0ull;
	rrc_sys_rt_sigprocmask(2 /* SIG_SETMASK */, &all, 0);
	rrc_sys_prctl(15 /* PR_SET_NAME */, (unsigned long)"rrc-pause", 0, 0, 0); /* for ps */
	for (;;) {
		uint32_t st = RRC_LOAD(&b->state);
		if (st == RRC_PH_GO) {
			serve(b);
			continue;
		}
		if (st == RRC_PH_READY) {
			uint64_t t0 = rrc_mono_ns();
			while (RRC_LOAD(&b->state) == RRC_PH_READY && rrc_mono_ns() - t0 < PH_READY_SPIN_NS)
				rrc_sys_sched_yield();
			if (RRC_LOAD(&b->state) != RRC_PH_READY)
				continue;
		}
		/* the control thread wakes only a helper that says it sleeps */
		RRC_STORE(&b->sleeping, 1);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		if (RRC_LOAD(&b->state) == st)
			rrc_sys_futex(&b->state, RRC_FUTEX_WAIT_SHARED, st, 0);
		RRC_STORE(&b->sleeping, 0);
	}
}

/* ---------------- in the application ---------------- */

int32_t rrc_phelper_backlog(int fd)
{
	if (fd < 0 || fd >= RRC_MAX_FDS)
		return 0;
	return rrc_s->helper.in_helper ? rrc_s->helper.box->backlog[fd] : rrc_g.backlog[fd];
}

/* Sets the state, waking the helper if it sleeps. */
static void tell(struct rrc_helper_box *b, uint32_t st)
{
	RRC_STORE(&b->state, st);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (RRC_LOAD(&b->sleeping))
		wake(&b->state);
}

/* The mailbox, mapped at the first copy snapshot (its names read before
 * the pause live here). NULL if it cannot be mapped. */
struct rrc_helper_box *rrc_phelper_box(void)
{
	struct rrc_scratch *s = rrc_s;
	struct rrc_pause_helper *h = &s->helper;
	if (h->box)
		return h->box;
	uint64_t head = (sizeof(struct rrc_helper_box) + 4095) & ~4095ull;
	/* sized as the snapshot's own lists (init.c); the names read before
	 * the pause take as much room again */
	uint64_t nvmas = s->vma_cap, names = s->vma_names_cap;
	uint64_t vlen = (nvmas * sizeof(struct rrc_ph_vma) + 4095) & ~4095ull;
	uint64_t nlen = (nvmas * sizeof(struct rrc_vma_name) + 4095) & ~4095ull;
	uint64_t tlen = ((uint64_t)s->cap_tcp * sizeof *s->tcp + 4095) & ~4095ull;
	uint64_t len = head + vlen + nlen + 2 * names + s->fdbuf_cap + tlen;
	/* shmem: pages exist only where written */
	long r = rrc_sys_mmap(0, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (r < 0 && r > -4096)
		return 0;
	uint8_t *p = (uint8_t *)r;
	struct rrc_helper_box *b = (struct rrc_helper_box *)p;
	b->vmas = (struct rrc_ph_vma *)(p + head);
	b->cap_vmas = nvmas;
	b->vnames = (struct rrc_vma_name *)(p + head + vlen);
	b->names = (char *)(p + head + vlen + nlen);
	b->vname_text = b->names + names;
	b->cap_names = names;
	b->fdbuf = (uint8_t *)b->vname_text + names;
	b->tcp = (struct rrc_tcp_stream *)(b->fdbuf + s->fdbuf_cap);
	/* a fork snapshot's child never has it; the helper's start undoes
	 * this for its clone */
	rrc_sys_madvise(b, len, MADV_DONTFORK);
	h->box = b;
	h->box_len = len;
	rrc_lib_ranges();
	return b;
}

/* The library's own image, text to the end of its bss, from its program
 * headers (the linker's __ehdr_start: this object's ELF header). Its data
 * and bss hold the library's state, the helper's included: a bss over
 * PH_INHERIT_MAX (a static buffer) must not be left out of the clone.
 * Memory reads only: ASYNC-SIGNAL-SAFE. */
extern const Elf64_Ehdr __ehdr_start __attribute__((visibility("hidden")));
static void lib_image(uint64_t *start, uint64_t *end)
{
	const Elf64_Ehdr *eh = &__ehdr_start;
	const Elf64_Phdr *ph = (const Elf64_Phdr *)((const uint8_t *)eh + eh->e_phoff);
	uint64_t base = (uint64_t)eh, lo = ~0ull, hi = 0;
	for (uint32_t i = 0; i < eh->e_phnum; i++) {
		if (ph[i].p_type != PT_LOAD)
			continue;
		if (ph[i].p_vaddr < lo)
			lo = ph[i].p_vaddr;
		if (ph[i].p_vaddr + ph[i].p_memsz > hi)
			hi = ph[i].p_vaddr + ph[i].p_memsz;
	}
	/* the first PT_LOAD maps the header: the load bias is its address
	 * less that segment's page-aligned vaddr (0 for a shared object) */
	*start = base;
	*end = base - (lo & ~4095ull) + hi;
}

/* [a, b) shrunk to whole pages, made MADV_DONTFORK and recorded. */
static void leave_out_range(struct rrc_range *out, uint32_t *n, uint32_t cap, uint64_t a, uint64_t b)
{
	a = (a + 4095) & ~4095ull;
	b &= ~4095ull;
	if (*n < cap && a < b && rrc_sys_madvise((void *)a, b - a, MADV_DONTFORK) == 0)
		out[(*n)++] = (struct rrc_range){ a, b };
}

/* What the helper does not inherit, made MADV_DONTFORK for the clone:
 * the application's big private VMAs, and the parts of the scratch it
 * never uses (the scan's list, the snapshot child's area, the journal).
 * The count. Threads parked: nothing else changes the map meanwhile. */
static uint32_t leave_out(struct rrc_range *out, uint32_t cap)
{
	struct rrc_scratch *s = rrc_s;
	struct procmap_query q;
	uint64_t addr = 0, lib_start, lib_end;
	uint32_t n = 0;
	lib_image(&lib_start, &lib_end);
	leave_out_range(out, &n, cap, (uint64_t)s->written, (uint64_t)(s->written + s->cap_written));
	leave_out_range(out, &n, cap, (uint64_t)s->child_area, (uint64_t)s->child_area + s->child_area_len);
	/* the journal and, after it, the SysV IPC buffer (sysvipc.c) */
	leave_out_range(out, &n, cap, (uint64_t)s->journal, (uint64_t)s->sysv + RRC_SYSV_CAP);
	while (n < cap && rrc_vma_query(rrc_g.maps_fd, addr, 0, &q, 0, 0) == 0) {
		addr = q.vma_end;
		if ((q.vma_flags & PROCMAP_QUERY_VMA_SHARED) || q.vma_end - q.vma_start < PH_INHERIT_MAX)
			continue;
		/* a file's text: not copied anyway (no private pages), and the
		 * helper may run the C library's */
		if (q.inode && !(q.vma_flags & PROCMAP_QUERY_VMA_WRITABLE))
			continue;
		if (rrc_in_ranges(s->lib_excluded, s->nr_lib_excluded, q.vma_start, q.vma_end) ||
		    rrc_in_ranges(s->lib_always, s->nr_lib_always, q.vma_start, q.vma_end))
			continue;
		if (q.vma_start < lib_end && q.vma_end > lib_start)
			continue; /* the library's data and bss */
		leave_out_range(out, &n, cap, q.vma_start, q.vma_end);
	}
	return n;
}

static void keep_apart(struct rrc_pause_helper *h);

/* Before any dump: a helper that died (killed, or out of memory) is
 * reaped (a copy snapshot's pause then starts another). */
void rrc_phelper_reap(void)
{
	struct rrc_pause_helper *h = &rrc_s->helper;
	int status;
	if (h->pid > 0 && rrc_sys_wait4((int)h->pid, &status, WNOHANG_ | WALL_) == h->pid)
		h->pid = 0;
}

/* Before a copy snapshot's pause: a live helper is woken to spin. */
void rrc_phelper_ready(void)
{
	struct rrc_pause_helper *h = &rrc_s->helper;
	if (h->pid > 0) {
		keep_apart(h);
		tell(h->box, RRC_PH_READY);
	}
}

/* Pause path. ASYNC-SIGNAL-SAFE. */
int rrc_phelper_spawn(void)
{
	struct rrc_pause_helper *h = &rrc_s->helper;
	h->joined = 1;
	if (rrc_g.no_pause_helper)
		return 0;
	if (h->pid > 0)
		return 1;
	/* a helper with fewer capabilities than the application's main
	 * thread would be denied the application's /proc (creds.c) */
	if (!rrc_creds_helper_may_read())
		return 0;
	uint64_t t0 = rrc_mono_ns();
	struct rrc_helper_box *b = rrc_phelper_box();
	if (!b)
		return 0;
	/* kept out of fork snapshots since the last start, not out of this clone */
	rrc_sys_madvise(b, h->box_len, MADV_DOFORK);
	/* a second CPU or nothing: on one CPU the helper would only take
	 * turns with the control thread */
	rrc_memset(h->cpus, 0, sizeof h->cpus);
	long ml = rrc_sys_sched_getaffinity(0, sizeof h->cpus, h->cpus);
	uint32_t ncpu = 0;
	for (long i = 0; ml > 0 && i < ml / 8; i++)
		ncpu += (uint32_t)__builtin_popcountll(h->cpus[i]);
	if (ncpu < 2)
		return 0;
	h->away_from = -1;
	rrc_lib_ranges();
	struct rrc_range out[PH_MAX_DONTFORK];
	uint32_t n = leave_out(out, PH_MAX_DONTFORK);
	b->state = RRC_PH_IDLE;
	b->sleeping = 0;
	b->app_pid = rrc_g.pid;
	rrc_memcpy(b->backlog, rrc_g.backlog, sizeof b->backlog);
	rrc_inotify_to_box(b->inotify);
	long pid = rrc_clone_on_stack(0x00000400 /* CLONE_FILES; exit signal 0 */,
				      rrc_s->helper_stack + RRC_HELPER_STACK, helper_main);
	for (uint32_t i = 0; i < n; i++)
		rrc_sys_madvise((void *)out[i].start, out[i].end - out[i].start, MADV_DOFORK);
	rrc_sys_madvise(b, h->box_len, MADV_DONTFORK);
	h->pid = pid > 0 ? pid : 0;
	h->starts++;
	h->spawn_ns = rrc_mono_ns() - t0;
	return h->pid > 0;
}

/* The helper is kept off the control thread's CPU: woken there, it
 * would preempt the control thread rather than run beside it (the
 * scheduler likes to wake a task where its waker runs). Changed only
 * when the control thread has moved since the last pause. */
static void keep_apart(struct rrc_pause_helper *h)
{
	unsigned cpu;
	if (rrc_sys_getcpu(&cpu) < 0 || (int32_t)cpu == h->away_from || cpu >= 64 * 16)
		return;
	uint64_t mask[16];
	rrc_memcpy(mask, h->cpus, sizeof mask);
	mask[cpu / 64] &= ~(1ull << (cpu % 64));
	if (rrc_sys_sched_setaffinity((int)h->pid, sizeof mask, mask) == 0)
		h->away_from = (int32_t)cpu;
}

/* Pause path, right after the quiesce. tcp: the helper takes the TCP
 * table too; diag_fd: the control thread's socket for taking it itself
 * (not listed among the application's fds), or -1. ASYNC-SIGNAL-SAFE. */
void rrc_phelper_go(int tcp, int diag_fd)
{
	struct rrc_pause_helper *h = &rrc_s->helper;
	struct rrc_helper_box *b = h->box;
	b->image_fd = rrc_g.image_fd;
	b->conn_fd = rrc_g.conn_fd;
	b->res_rfd = rrc_s->res_rfd;
	b->res_wfd = rrc_s->res_wfd;
	rrc_rr_sink_fds(&b->log_fd, &b->log_handed_fd);
	b->do_tcp = (uint32_t)tcp;
	b->diag_fd = diag_fd;
	b->map_done = 0;
	b->go_ns = rrc_mono_ns();
	h->joined = 0;
	tell(b, RRC_PH_GO);
}

static void helper_lost(struct rrc_pause_helper *h, const char *why)
{
	int status;
	rrc_sys_kill((int)h->pid, 9);
	while (rrc_sys_wait4((int)h->pid, &status, WALL_) == -EINTR)
		;
	rrc_set_err(RRC_ERR_SNAPSHOT, 0, "the pause helper process (pid ", h->pid, why);
	h->pid = 0;
	h->joined = 1;
}

/* Until *w == want: spins first, then sleeps. 0, or -1 with the error set
 * if the helper died or is stuck (it is then gone). */
static int wait_for(volatile uint32_t *w, uint32_t want)
{
	struct rrc_pause_helper *h = &rrc_s->helper;
	uint64_t t0 = rrc_mono_ns();
	uint32_t v;
	while ((v = RRC_LOAD(w)) != want) {
		uint64_t now = rrc_mono_ns();
		if (now - t0 < PH_SPIN_NS) {
			__builtin_ia32_pause();
			continue;
		}
		int status;
		if (rrc_sys_wait4((int)h->pid, &status, WNOHANG_ | WALL_) == h->pid) {
			h->pid = 0;
			h->joined = 1;
			rrc_set_err(RRC_ERR_SNAPSHOT, 0, "the pause helper process died in the pause", -1, 0);
			return -1;
		}
		if (now - t0 > PH_TIMEOUT_NS) {
			helper_lost(h, ") did not finish within 2 s: killed");
			return -1;
		}
		struct rrc_ts ts = { 0, 10 * 1000 * 1000 };
		rrc_sys_futex(w, RRC_FUTEX_WAIT_SHARED, v, &ts);
	}
	return 0;
}

/* Pause path. ASYNC-SIGNAL-SAFE. */
int rrc_phelper_wait_map(void)
{
	struct rrc_helper_box *b = rrc_s->helper.box;
	if (wait_for(&b->map_done, 1) < 0)
		return -1;
	if (b->map_rc == -ENOSPC) { /* read_map: more VMAs than the box holds */
		rrc_set_err(RRC_ERR_SNAPSHOT, 0, "copy snapshot: ", -1, rrc_snapshot_strerror(RRC_SNAP_VMAS));
		return -1;
	}
	if (b->map_rc < 0) {
		rrc_set_err(RRC_ERR_SNAPSHOT, -b->map_rc, "the pause helper could not read the memory map", -1, 0);
		return -1;
	}
	return 0;
}

/* Its libraries' pipes are the dump's (closed by rrc_fds_cleanup). */
static void take_pipes(const struct rrc_helper_box *b)
{
	struct rrc_scratch *s = rrc_s;
	s->nr_libpipes = b->nr_libpipes;
	rrc_memcpy(s->libpipes, b->libpipes, b->nr_libpipes * sizeof *b->libpipes);
}

/* Pause path: the fd records and the TCP table, as if this thread had
 * taken them (fds.c, sk-diag.c). ASYNC-SIGNAL-SAFE. */
int rrc_phelper_join(void)
{
	struct rrc_scratch *s = rrc_s;
	struct rrc_pause_helper *h = &s->helper;
	struct rrc_helper_box *b = h->box;
	if (wait_for(&b->state, RRC_PH_DONE) < 0)
		return -1;
	h->joined = 1;
	take_pipes(b);
	if (b->fds_rc < 0 || b->tcp_rc < 0) {
		s->err_code = b->err_code;
		s->err_errno = b->err_errno;
		rrc_memcpy(s->err_msg, b->err_msg, sizeof s->err_msg);
		return -1;
	}
	/* the last capture's records stay the reference (fds.c) */
	uint8_t *last = s->fdbuf;
	s->fdbuf = s->fdprev;
	s->fdprev = last;
	s->fdprev_len = s->fdbuf_len;
	rrc_memcpy(s->fdbuf, b->fdbuf, b->fdbuf_len);
	s->fdbuf_len = b->fdbuf_len;
	s->nr_fds = b->nr_fds;
	s->tcp_v6 = b->tcp_v6;
	if (b->do_tcp) {
		rrc_memcpy(s->tcp, b->tcp, (size_t)b->nr_tcp * sizeof *s->tcp);
		s->nr_tcp = b->nr_tcp;
		s->tcp_dumps = b->tcp_dumps;
	}
	return 0;
}

/* After a pause that failed before its join, application running: the
 * helper finishes this pause's request before it can take another, and
 * the pipes it made are closed with the dump's. */
void rrc_phelper_settle(void)
{
	struct rrc_pause_helper *h = &rrc_s->helper;
	if (h->joined || h->pid <= 0)
		return;
	uint32_t code = rrc_s->err_code;
	int32_t err = rrc_s->err_errno;
	char msg[sizeof rrc_s->err_msg];
	rrc_memcpy(msg, rrc_s->err_msg, sizeof msg);
	if (wait_for(&h->box->state, RRC_PH_DONE) == 0)
		take_pipes(h->box);
	h->joined = 1;
	/* the pause's own error is the one to report */
	rrc_s->err_code = code;
	rrc_s->err_errno = err;
	rrc_memcpy(rrc_s->err_msg, msg, sizeof msg);
}
