/* SPDX-License-Identifier: MIT
 *
 * Quiesce: park every application thread at a known point (replaces the
 * cgroup freezer + CRIU parasite of RRC §4.6 / NiLiCon §3). The control
 * thread sends the park signal (SIGRTMAX) to every thread; each handler
 * records its thread state into a slot, saves a resume context and waits
 * on the generation futex. The interrupted registers, FPU state, signal
 * mask and sigaltstack stay in the kernel-built signal frame on the
 * thread's stack (part of the memory image): after a restore the thread
 * resumes inside this handler and its ordinary rt_sigreturn restores them.
 *
 * ASYNC-SIGNAL-SAFE: the whole file. A parked thread may hold malloc's or
 * stdio's lock, so nothing here may call libc: raw syscalls, preallocated
 * memory only.
 */
#include <fcntl.h>
#include <errno.h>
#include <ucontext.h>
#include <asm/prctl.h>
#include <sys/prctl.h>
#include "rrc_lib.h"
#include "creds.h"
#include "lib-fds.h"
#include "rr-replay.h"
#include "sigpending.h"
#include "waits.h"

/* glibc >= 2.35 publishes where its rseq area lives in the TCB. */
extern const ptrdiff_t __rseq_offset __attribute__((weak));
extern const unsigned int __rseq_size __attribute__((weak));

#define QUIESCE_TIMEOUT_NS 2000000000ull
#define QUIESCE_TICK_NS    10000000ull
/* The control thread waits for the last threads to park by yielding its
 * CPU this long before it sleeps: a parking thread may need that CPU, and
 * a control thread that slept is woken by an interrupt of an idle vCPU
 * (15-40 us on this VM). Measured: quiesce p90 0.19-0.20 ms instead of
 * 0.24-0.27 (bench/README.md). */
#define QUIESCE_SPIN_NS    500000ull

static void fill_common(struct rrc_thread *t)
{
	uint64_t v = 0, len = 0;

	t->tid = (uint32_t)rrc_sys_gettid();
	t->flags = (int)t->tid == rrc_g.pid ? RRC_THR_F_MAIN : 0;
	rrc_sys_arch_prctl(ARCH_GET_FS, (unsigned long)&v);
	t->fs_base = v;
	v = 0;
	rrc_sys_arch_prctl(ARCH_GET_GS, (unsigned long)&v);
	t->gs_base = v;
	v = 0;
	rrc_sys_get_robust_list(0, &v, &len);
	t->robust_list = v;
	t->robust_list_len = len;
	v = 0;
	rrc_sys_prctl(PR_GET_TID_ADDRESS, (unsigned long)&v, 0, 0, 0);
	t->clear_child_tid = v;
	t->rseq_addr = 0;
	t->rseq_len = 0;
	t->rseq_sig = 0;
	if (&__rseq_size && &__rseq_offset && __rseq_size) {
		t->rseq_addr = t->fs_base + (uint64_t)__rseq_offset;
		/* the kernel's registration length is at least the original 32 bytes */
		t->rseq_len = __rseq_size < 32 ? 32 : __rseq_size;
		t->rseq_sig = RSEQ_SIG;
	}
}

void rrc_fill_self_slot(struct rrc_slot *s)
{
	uint64_t mask = 0;

	rrc_memset(s, 0, sizeof *s);
	fill_common(&s->t);
	s->t.flags |= RRC_THR_F_CONTROL;
	rrc_sys_rt_sigprocmask(SIG_BLOCK, 0, &mask);
	s->t.sigmask = mask;
}

void rrc_park_handler(int sig, siginfo_t *si, void *ucv)
{
	/* generation first, then pausing: see rrc_release() */
	uint32_t gen = RRC_LOAD(&rrc_g.generation);
	/* a wait this signal cut short is issued again (waits.c); also when it
	 * arrives late, after the pause it was sent for */
	rrc_parks_seen++;
	if (!RRC_LOAD(&rrc_g.pausing))
		return;
	/* Inside a wrapper's guard (files-journal.c): a change and its journal
	 * record must not be split by the snapshot. The wrapper parks itself
	 * when it leaves the guard (it sends this signal again). */
	if (rrc_hook_depth) {
		rrc_park_pending = 1;
		return;
	}
	uint32_t idx = __atomic_fetch_add(&rrc_g.nslots, 1, __ATOMIC_SEQ_CST);
	volatile int restored = 0; /* set after the saved context returned a second time */
	if (idx < RRC_MAX_THREADS) {
		struct rrc_slot *s = &rrc_g.slots[idx];
		ucontext_t *uc = ucv;

		fill_common(&s->t);
		s->t.ucontext_addr = (uint64_t)uc;
		for (int i = 0; i < 23; i++)
			s->t.gregs[i] = (uint64_t)uc->uc_mcontext.gregs[i];
		rrc_memcpy(&s->t.sigmask, &uc->uc_sigmask, 8);
		/* Signals pending now (thread or process directed, blocked by the
		 * application or by this handler's mask) are kernel state that
		 * no image holds: taken into the library's memory, which is
		 * (sigpending.c), and queued again when the pause ends. */
		s->pending = 0;
		rrc_sys_rt_sigpending(&s->pending);
		uint64_t others = s->pending & ~(1ull << (RRC_PARK_SIG - 1));
		if (others)
			rrc_sigs_save(others, (int32_t)s->t.tid, s->t.flags & RRC_THR_F_MAIN);
		if (s->t.flags & RRC_THR_F_MAIN)
			rrc_creds_park_main(); /* its securebits: a thread's own (creds.c) */
		else
			rrc_creds_park_thread((int32_t)s->t.tid); /* its capabilities: a thread's own */
		if (rrc_ctx_save(&s->t.resume) == 0) {
			RRC_ATOMIC_INC(&rrc_g.parked);
			rrc_sys_futex(&rrc_g.parked, RRC_FUTEX_WAKE, 1, 0);
		} else {
			/* Restored by rrc-restore: tell the control thread we are back
			 * (its post-restore path waits for every thread). */
			RRC_ATOMIC_INC(&rrc_g.restore_area.threads_back);
			rrc_sys_futex(&rrc_g.restore_area.threads_back, RRC_FUTEX_WAKE, 1, 0);
			restored = 1;
		}
	} else {
		/* more threads than slots: counted, the dump is refused */
		RRC_ATOMIC_INC(&rrc_g.parked);
		rrc_sys_futex(&rrc_g.parked, RRC_FUTEX_WAKE, 1, 0);
	}
	while (RRC_LOAD(&rrc_g.generation) == gen)
		rrc_sys_futex(&rrc_g.generation, RRC_FUTEX_WAIT, gen, 0);
	/* the dump went on or failed, or this is a restore of its image:
	 * the signals taken above go back (the handler still blocks all, so
	 * they are delivered at its return, as they would have been) */
	if (idx < RRC_MAX_THREADS) {
		int32_t tid = (int32_t)rrc_sys_gettid();
		rrc_sigs_requeue(tid, tid == (int32_t)rrc_g.pid);
	}
	/* restored into replay inside a wrapped call the kernel would make
	 * again: the wrapper gets EINTR and replays it (RRC's syscall_skipped) */
	if (restored)
		rrc_rp_unpark(ucv);
}

void rrc_release(void)
{
	/* pausing is cleared before the generation moves, so a late handler
	 * either sees pausing == 0 or has read the old generation and is woken. */
	RRC_STORE(&rrc_g.pausing, 0);
	RRC_ATOMIC_INC(&rrc_g.generation);
	rrc_sys_futex(&rrc_g.generation, RRC_FUTEX_WAKE, 0x7fffffff, 0);
}

static int signal_tid(long tid, void *arg)
{
	struct rrc_scratch *s = rrc_s;
	int *newp = arg;

	if (tid == rrc_g.ctl_tid)
		return 0;
	for (uint32_t i = 0; i < s->nr_signalled; i++)
		if (s->signalled[i] == tid)
			return 0;
	if (s->nr_signalled >= RRC_MAX_THREADS) {
		*newp = -1;
		return 1;
	}
	long r = rrc_sys_tgkill(rrc_g.pid, (int)tid, RRC_PARK_SIG);
	if (r == -ESRCH)
		return 0; /* exited meanwhile */
	if (r < 0) {
		*newp = -1;
		return 1;
	}
	s->signalled[s->nr_signalled++] = (int32_t)tid;
	(*newp)++;
	return 0;
}

static int tid_parked(int32_t tid)
{
	uint32_t n = RRC_LOAD(&rrc_g.nslots);
	if (n > RRC_MAX_THREADS)
		n = RRC_MAX_THREADS;
	for (uint32_t i = 0; i < n; i++)
		if ((int32_t)rrc_g.slots[i].t.tid == tid)
			return 1;
	return 0;
}

/* A signalled thread that exited before running the handler never parks:
 * forget it. */
static void drop_exited(void)
{
	struct rrc_scratch *s = rrc_s;
	for (uint32_t i = 0; i < s->nr_signalled;) {
		char path[48];
		size_t l = rrc_bput(path, sizeof path, 0, "/proc/self/task/");
		rrc_bput_u64(path, sizeof path, l, (uint64_t)s->signalled[i]);
		long fd = rrc_sys_openat(AT_FDCWD, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
		if (fd >= 0) {
			rrc_libfd_close((int)fd);
			i++;
			continue;
		}
		if (tid_parked(s->signalled[i])) {
			i++;
			continue;
		}
		s->signalled[i] = s->signalled[--s->nr_signalled];
	}
}

int rrc_quiesce(void)
{
	struct rrc_scratch *s = rrc_s;
	uint64_t deadline = rrc_mono_ns() + QUIESCE_TIMEOUT_NS;

	s->nr_signalled = 0;
	s->dbg_quiesce[0] = rrc_mono_ns();
	s->dbg_quiesce[1] = s->dbg_quiesce[2] = 0;
	RRC_STORE(&rrc_g.parked, 0);
	RRC_STORE(&rrc_g.nslots, 0);
	RRC_STORE(&rrc_g.pausing, 1);
	for (;;) {
		int newly = 0;
		long r = rrc_for_each_num_dirent("/proc/self/task", s->dirbuf, sizeof s->dirbuf,
						 signal_tid, &newly);
		if (r < 0 || newly < 0) {
			rrc_release();
			rrc_set_err(RRC_ERR_QUIESCE, r < 0 ? (int)-r : 0,
				    newly < 0 ? "cannot signal every thread (more than 1024 threads?)"
					      : "cannot read /proc/self/task", -1, 0);
			return -1;
		}
		if (!s->dbg_quiesce[1])
			s->dbg_quiesce[1] = rrc_mono_ns();
		if (!newly && RRC_LOAD(&rrc_g.parked) >= s->nr_signalled)
			break; /* every thread we know is parked and no new one appeared */
		uint64_t spin0 = rrc_mono_ns();
		for (;;) {
			uint32_t p = RRC_LOAD(&rrc_g.parked);
			if (p >= s->nr_signalled)
				break;
			uint64_t now = rrc_mono_ns();
			if (now - spin0 < QUIESCE_SPIN_NS) {
				rrc_sys_sched_yield();
				continue;
			}
			if (now >= deadline) {
				size_t l;
				rrc_set_err(RRC_ERR_QUIESCE, 0,
					    "threads did not park within 2 s (park signal 64 blocked by a raw syscall?):", -1, 0);
				l = rrc_strlen(s->err_msg);
				for (uint32_t i = 0; i < s->nr_signalled; i++)
					if (!tid_parked(s->signalled[i])) {
						l = rrc_bput(s->err_msg, sizeof s->err_msg, l, " tid ");
						l = rrc_bput_u64(s->err_msg, sizeof s->err_msg, l,
								 (uint64_t)s->signalled[i]);
					}
				rrc_release();
				return -1;
			}
			struct rrc_ts ts = { 0, (long)QUIESCE_TICK_NS };
			long w = rrc_sys_futex(&rrc_g.parked, RRC_FUTEX_WAIT, p, &ts);
			if (w == -ETIMEDOUT)
				drop_exited();
		}
		if (!s->dbg_quiesce[2])
			s->dbg_quiesce[2] = rrc_mono_ns();
	}
	s->dbg_quiesce[3] = rrc_mono_ns();
	if (RRC_LOAD(&rrc_g.nslots) > RRC_MAX_THREADS) {
		rrc_release();
		rrc_set_err(RRC_ERR_QUIESCE, 0, "more threads than the library's ", RRC_MAX_THREADS,
			    " slots");
		return -1;
	}
	return 0;
}
