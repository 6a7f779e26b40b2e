/* SPDX-License-Identifier: MIT
 *
 * ASYNC-SIGNAL-SAFE, freestanding: phase 2 of rrc-restore, the restorer
 * blob (CRIU's "restorer" PIE, DMTCP's mtcp_restart second stage).
 *
 * It runs from a region that no image VMA uses, on its own stack, with all
 * its data in the argument area (struct blob_args) built by phase 1. It
 * replaces the restorer's address space by the image's and turns the
 * restorer's threads into the image's threads:
 *   1. block every signal, drop the restorer's rseq registration,
 *      unmap every mapping of the restorer except this region;
 *   2. put the vDSO where the image had it (ARCH_MAP_VDSO_64);
 *   3. map every VMA at its address, pread its pages from the images,
 *      set the recorded protections;
 *   4. PR_SET_MM_MAP (code/data/brk/stack/arg/env/auxv + exe), signal
 *      actions, librrc's restore area;
 *   5. clone3 every thread with its TID (set_tid), set up its TLS, robust
 *      list, clear_child_tid and rseq;
 *   6. arm signal-driven I/O (owner, signal, O_ASYNC), now that every
 *      owner thread exists, report "ok", and jump every thread to the
 *      resume context the library saved (RRC §4.6: the library's code
 *      takes over from there).
 * No libc: raw syscalls from rrc/sys.h only; no globals (the flat copy
 * carries no .data/.bss); the build rejects any relocation.
 */
#include <stdint.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <linux/mman.h>
#include <linux/prctl.h>
#include <linux/sched.h>
#include <asm/prctl.h>
#include "rrc/crc32c.h"
#include "rrc/creds.h"
#include "rrc/sys.h"
#include "rrc/uapi.h"
#include "blob.h"
#include "pie-util.h"

#define PROT_READ  0x1
#define PROT_WRITE 0x2
#define PROT_EXEC  0x4
#define MAP_PRIVATE_ 0x02
#define MAP_SHARED_  0x01
#define MAP_FIXED_   0x10
#define MAP_ANON_    0x20
#define MAP_GROWSDOWN_ 0x100
#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#define O_RDONLY_  0
#define O_CLOEXEC_ 02000000
#define AT_FDCWD_  (-100)
#define FUTEX_WAIT_ 0
#define FUTEX_WAKE_ 1
#define RSEQ_FLAG_UNREGISTER_ 1
#define PAGE 4096ul
#define MADV_POPULATE_WRITE_ 23
#define F_GETFL_      3
#define F_SETFL_      4
#define F_SETSIG_     10
#define F_SETOWN_EX_  15
#define F_OWNER_PGRP_ 2
#define O_ASYNC_      020000

PIE_HIDDEN __attribute__((noreturn)) void restorer_main(struct blob_args *a);

static void blog(struct blob_args *a, struct msg *m)
{
	if (a->log_fd < 0)
		return;
	struct msg t = { 0 };
	uint64_t us = (rrc_mono_ns() - a->t0_ns) / 1000;

	msg_str(&t, "rrc-restore[blob]: +");
	msg_dec(&t, (int64_t)(us / 1000));
	msg_str(&t, ".");
	msg_dec(&t, (int64_t)(us % 1000 / 100));
	msg_str(&t, "ms ");
	rrc_sys_write(a->log_fd, t.buf, t.len);
	rrc_sys_write(a->log_fd, m->buf, m->len);
	rrc_sys_write(a->log_fd, "\n", 1);
}

/* Report the failure on the status fd and exit: pid 1 exiting tears the
 * namespaces down, so nothing half-restored survives. */
static __attribute__((noreturn)) void bfail(struct blob_args *a, int code, long err,
					    uint32_t detail, struct msg *m)
{
	struct rrc_restore_status st;

	memset(&st, 0, sizeof(st));
	st.magic = RRC_RESTORE_STATUS_MAGIC;
	st.code = code;
	st.sys_errno = (int32_t)err;
	st.detail = detail;
	memcpy(st.message, m->buf, m->len < sizeof(st.message) - 1 ? m->len : sizeof(st.message) - 1);
	blog(a, m);
	if (a->status_fd >= 0)
		rrc_sys_write(a->status_fd, &st, sizeof(st));
	rrc_sys_exit_group(code);
}

/* "WHAT ADDR: errno N (NAME)" */
static __attribute__((noreturn)) void bfail_at(struct blob_args *a, int code, const char *what,
					       uint64_t addr, long err)
{
	struct msg m = { 0 };

	msg_str(&m, what);
	msg_str(&m, " ");
	msg_hex(&m, addr);
	if (err) {
		msg_str(&m, ": ");
		msg_errno(&m, err);
	}
	bfail(a, code, err, (uint32_t)(addr >> 12), &m);
}

static void unmap_restorer(struct blob_args *a)
{
	uint64_t all = ~0ull;
	long r;

	/* no signal may run a restorer handler (unmapped soon) or an image
	 * handler (not mapped yet); the image's mask comes back with the
	 * threads' signal frames */
	rrc_sys_rt_sigprocmask(2 /* SIG_SETMASK */, &all, NULL);

	/* the kernel writes the cpu id into a registered rseq area on every
	 * return to user space: it must not point into unmapped memory */
	if (a->self_rseq_addr) {
		r = rrc_sys_rseq(a->self_rseq_addr, a->self_rseq_len, RSEQ_FLAG_UNREGISTER_, a->self_rseq_sig);
		if (r < 0)
			bfail_at(a, RRC_RST_INTERNAL, "cannot unregister the restorer's rseq area",
				 a->self_rseq_addr, -r);
	}
	for (uint32_t i = 0; i < a->nr_unmap; i++) {
		r = rrc_sys_munmap((void *)a->unmap[i].start, a->unmap[i].end - a->unmap[i].start);
		if (r < 0)
			bfail_at(a, RRC_RST_INTERNAL, "cannot unmap the restorer's mapping at",
				 a->unmap[i].start, -r);
	}
}

/* The image's code (glibc) keeps pointers into the vDSO, so it must be at
 * the image's address. On Linux 6.18, ARCH_MAP_VDSO_64 takes the start of
 * the whole area ([vvar], [vvar_vclock], then [vdso] text), maps it there
 * if the range is free (a hint, not MAP_FIXED) and returns the text size;
 * it refuses with EEXIST while any vDSO piece is mapped, hence the unmap
 * first. Phase 1 checked that the sizes and offsets of the pieces equal
 * the image's. */
static void place_vdso(struct blob_args *a)
{
	long r;

	if (!a->vdso_area_start)
		return;
	r = rrc_sys_arch_prctl(ARCH_MAP_VDSO_64, a->vdso_area_start);
	if (r < 0)
		bfail_at(a, RRC_RST_VDSO, "ARCH_MAP_VDSO_64 failed for the image's vDSO at",
			 a->vdso_area_start, -r);
	if (r > 0 && (uint64_t)r != a->vdso_text_len)
		bfail_at(a, RRC_RST_VDSO, "vDSO size differs from the image's: image from another kernel? size",
			 (uint64_t)r, 0);
	/* the address is only a hint: make sure the text landed where the
	 * image had it (a free page there would be mapped by the probe) */
	r = rrc_sys_mmap((void *)a->vdso_text_start, PAGE, PROT_READ,
			 MAP_PRIVATE_ | MAP_ANON_ | MAP_FIXED_NOREPLACE, -1, 0);
	if (r != -17 /* EEXIST */) {
		if (r >= 0)
			rrc_sys_munmap((void *)r, PAGE);
		bfail_at(a, RRC_RST_VDSO, "the kernel did not put the vDSO at the image's address",
			 a->vdso_text_start, 0);
	}
}

static int vma_is_special(const struct blob_vma *v)
{
	return v->kind == RRC_VMA_VDSO || v->kind == RRC_VMA_VVAR || v->kind == RRC_VMA_VSYSCALL;
}

static void map_vmas(struct blob_args *a)
{
	long r;

	for (uint32_t i = 0; i < a->nr_vmas; i++) {
		const struct blob_vma *v = &a->vmas[i];
		uint64_t len = v->end - v->start;
		int flags = MAP_FIXED_;
		int fd = -1;

		if (vma_is_special(v))
			continue;
		if (v->flags & RRC_VMA_F_GROWSDOWN || v->kind == RRC_VMA_STACK)
			flags |= MAP_GROWSDOWN_;
		switch (v->kind) {
		case RRC_VMA_FILE_PRIVATE:
		case RRC_VMA_FILE_SHARED_RO:
			fd = (int)rrc_sys_openat(AT_FDCWD_, v->path, O_RDONLY_ | O_CLOEXEC_, 0);
			if (fd < 0) {
				struct msg m = { 0 };
				msg_str(&m, "cannot open ");
				msg_str(&m, v->path);
				msg_str(&m, " to map it at ");
				msg_hex(&m, v->start);
				msg_str(&m, ": ");
				msg_errno(&m, -fd);
				bfail(a, RRC_RST_MEMORY, -fd, (uint32_t)(v->start >> 12), &m);
			}
			if (v->kind == RRC_VMA_FILE_SHARED_RO) {
				/* read-only shared: no page data to fill */
				r = rrc_sys_mmap((void *)v->start, len, v->prot & ~PROT_WRITE,
						 flags | MAP_SHARED_, fd, (long)v->pgoff);
			} else {
				r = rrc_sys_mmap((void *)v->start, len, PROT_READ | PROT_WRITE,
						 flags | MAP_PRIVATE_, fd, (long)v->pgoff);
			}
			rrc_sys_close(fd);
			break;
		default: /* ANON, HEAP, STACK */
			r = rrc_sys_mmap((void *)v->start, len, PROT_READ | PROT_WRITE,
					 flags | MAP_PRIVATE_ | MAP_ANON_, -1, 0);
			break;
		}
		if (r < 0)
			bfail_at(a, RRC_RST_MEMORY, "cannot map the VMA at", v->start, -r);
		if ((uint64_t)r != v->start)
			bfail_at(a, RRC_RST_MEMORY, "the kernel mapped elsewhere the VMA at", v->start, 0);
	}
}

/* Exactly n bytes from the stream into buf; returns 0, or the failing
 * read's result (0: end of stream, <0: -errno). */
static long stream_read(struct blob_args *a, void *buf, uint64_t n)
{
	uint64_t done = 0;

	while (done < n) {
		long r = rrc_sys_read(a->stream_fd, (char *)buf + done, n - done);

		if (r == -4 /* EINTR */)
			continue;
		if (r <= 0)
			return r ? r : -1000;
		done += (uint64_t)r;
	}
	a->stream_pos += n;
	return 0;
}

static __attribute__((noreturn)) void stream_fail(struct blob_args *a, const char *what, uint64_t at, long r)
{
	struct msg m = { 0 };

	msg_str(&m, "image stream: ");
	msg_str(&m, what);
	msg_str(&m, " (stream offset ");
	msg_dec(&m, (int64_t)at);
	msg_str(&m, ")");
	if (r == -1000)
		msg_str(&m, ": truncated");
	else if (r < 0) {
		msg_str(&m, ": ");
		msg_errno(&m, -r);
	}
	bfail(a, RRC_RST_IMAGE, r < 0 && r != -1000 ? -r : 0, 1, &m);
}

/* The page data of an image on a pipe, straight into place, checked as it
 * comes: the PAGES CRC, then the END section phase 1 predicted, then the
 * end of the stream (nothing may follow END). Nothing of the process runs
 * before all of it held. */
static void fill_pages_stream(struct blob_args *a)
{
	uint32_t crc = 0;
	uint8_t tail[sizeof(a->stream_tail) + 1];
	long r;

	for (uint32_t i = 0; i < a->nr_fills; i++) {
		const struct blob_fill *f = &a->fills[i];

		if (f->off != a->stream_pos)
			stream_fail(a, "page data out of stream order", f->off, 0);
		r = stream_read(a, (void *)f->vaddr, f->len);
		if (r)
			stream_fail(a, "reading section PAGES", a->stream_pos, r);
		crc = rrc_crc32c_extend(crc, (const void *)f->vaddr, f->len);
	}
	if (crc != a->stream_pages_crc)
		stream_fail(a, "section PAGES checksum mismatch", a->stream_pos, 0);
	if (a->stream_tail_len) {
		r = stream_read(a, tail, a->stream_tail_len);
		if (r)
			stream_fail(a, "reading section END", a->stream_pos, r);
		for (uint32_t k = 0; k < a->stream_tail_len; k++)
			if (tail[k] != a->stream_tail[k])
				stream_fail(a, "PAGES is not followed by the END section it implies (PAGES must be the last section)",
					    a->stream_pos - a->stream_tail_len, 0);
	}
	r = rrc_sys_read(a->stream_fd, tail, 1);
	if (r != 0)
		stream_fail(a, r > 0 ? "bytes follow the END section" : "waiting for the end of the stream",
			    a->stream_pos, r > 0 ? 0 : r);
}

/* Allocates every page to fill before any data is copied: one
 * MADV_POPULATE_WRITE per run faults its pages in a batch, which costs
 * less than taking one fault per page inside read()/pread() (measured
 * ~20 ms less for 110 MB on the 2-CPU VM). For a stream it also happens
 * while the agent is still encoding, so it is off the copy's path.
 * Best effort: where it fails, the copy faults the pages in as before. */
static void populate_fills(struct blob_args *a)
{
	for (uint32_t i = 0; i < a->nr_fills; i++)
		rrc_sys_madvise((void *)a->fills[i].vaddr, a->fills[i].len, MADV_POPULATE_WRITE_);
}

static void fill_pages(struct blob_args *a)
{
	struct msg m = { 0 };

	populate_fills(a);
	msg_str(&m, "memory mapped and allocated");
	blog(a, &m);
	if (a->stream_fd >= 0) {
		fill_pages_stream(a);
		return;
	}
	for (uint32_t i = 0; i < a->nr_fills; i++) {
		const struct blob_fill *f = &a->fills[i];
		uint64_t done = 0;

		while (done < f->len) {
			long r = rrc_sys_pread(f->fd, (void *)(f->vaddr + done), f->len - done,
					       (long)(f->off + done));
			if (r == -4 /* EINTR */)
				continue;
			if (r <= 0) {
				struct msg m = { 0 };
				msg_str(&m, "image ");
				msg_dec(&m, f->image + 1);
				msg_str(&m, ": cannot read the pages of ");
				msg_hex(&m, f->vaddr + done);
				msg_str(&m, r == 0 ? ": truncated" : ": ");
				if (r < 0)
					msg_errno(&m, -r);
				bfail(a, RRC_RST_IMAGE, -r, f->image + 1, &m);
			}
			done += (uint64_t)r;
		}
	}
}

static void protect_vmas(struct blob_args *a)
{
	for (uint32_t i = 0; i < a->nr_vmas; i++) {
		const struct blob_vma *v = &a->vmas[i];
		long r;

		if (vma_is_special(v) || v->kind == RRC_VMA_FILE_SHARED_RO)
			continue;
		if (v->prot == (PROT_READ | PROT_WRITE))
			continue;
		r = rrc_sys_mprotect((void *)v->start, v->end - v->start, (int)v->prot);
		if (r < 0)
			bfail_at(a, RRC_RST_MEMORY, "cannot set the protection of the VMA at", v->start, -r);
	}
}

/* prctl(PR_SET_MM, PR_SET_MM_MAP) is the one PR_SET_MM form that needs no
 * CAP_SYS_RESOURCE (CRIU does the same); the exe link change needs
 * CAP_CHECKPOINT_RESTORE and no remaining mapping of the old exe, which the
 * unmap above guarantees. */
static void set_mm(struct blob_args *a)
{
	long r;

	a->mm.auxv = (uint64_t)a->auxv;
	r = rrc_sys_prctl(PR_SET_MM, PR_SET_MM_MAP, (unsigned long)&a->mm, sizeof(a->mm), 0);
	if (r < 0) {
		struct msg m = { 0 };
		msg_str(&m, "PR_SET_MM_MAP (brk ");
		msg_hex(&m, a->mm.brk);
		msg_str(&m, ", stack ");
		msg_hex(&m, a->mm.start_stack);
		msg_str(&m, ", exe fd ");
		msg_dec(&m, a->exe_fd);
		msg_str(&m, ") failed: ");
		msg_errno(&m, -r);
		bfail(a, RRC_RST_PROCESS, -r, 0, &m);
	}
}

static void set_sigactions(struct blob_args *a)
{
	for (int sig = 1; sig <= 64; sig++) {
		long r;

		if (sig == 9 || sig == 19) /* SIGKILL, SIGSTOP: fixed */
			continue;
		r = rrc_sys_rt_sigaction(sig, &a->sigs[sig - 1], 0);
		if (r < 0)
			bfail_at(a, RRC_RST_PROCESS, "rt_sigaction failed for signal", (uint64_t)sig, -r);
	}
}

static void fill_restore_area(struct blob_args *a)
{
	struct rrc_restore_area *ra = (struct rrc_restore_area *)a->restore_area_addr;

	if (!ra)
		return;
	ra->blob_start = a->region_start;
	ra->blob_len = a->region_len;
	memcpy(ra->image_id, a->image_id, 16);
	ra->nr_threads = a->nr_threads;
	ra->threads_back = 0;
	ra->replay = a->replay;
	__atomic_store_n(&ra->magic, RRC_RESTORE_AREA_MAGIC, __ATOMIC_RELEASE);
}

/* Per-thread kernel state that lives outside memory: FS/GS base, robust
 * list, clear_child_tid, rseq. Returns 0 or -errno with *what set. */
static long thread_setup(const struct rrc_thread *t, int set_fs, const char **what)
{
	long r;

	if (set_fs) {
		*what = "ARCH_SET_FS";
		r = rrc_sys_arch_prctl(ARCH_SET_FS, t->fs_base);
		if (r < 0)
			return r;
	}
	if (t->gs_base) {
		*what = "ARCH_SET_GS";
		r = rrc_sys_arch_prctl(ARCH_SET_GS, t->gs_base);
		if (r < 0)
			return r;
	}
	if (t->robust_list) {
		*what = "set_robust_list";
		r = rrc_syscall2(SYS_set_robust_list, (long)t->robust_list, (long)t->robust_list_len);
		if (r < 0)
			return r;
	}
	/* set_tid_address returns the caller's TID: the check that clone3
	 * (or the namespace, for the main thread) gave the image's TID */
	*what = "set_tid_address (TID check)";
	r = rrc_syscall1(SYS_set_tid_address, (long)t->clear_child_tid);
	if (r != (long)t->tid)
		return r < 0 ? r : -22;
	if (t->rseq_addr) {
		*what = "rseq registration";
		r = rrc_sys_rseq(t->rseq_addr, t->rseq_len, 0, t->rseq_sig);
		if (r < 0)
			return r;
	}
	return 0;
}

static void child_thread(void *arg)
{
	struct blob_thread *bt = arg;
	struct blob_args *a = bt->args;
	const char *what = "";
	long r;

	/* CLONE_SETTLS already set FS */
	r = thread_setup(&bt->t, 0, &what);
	/* an application thread takes the image's credentials now; the
	 * library's control thread keeps root's for what it still does after
	 * the restore, and takes them itself (lib/creds.c) */
	if (r == 0 && a->has_creds && !(bt->t.flags & RRC_THR_F_CONTROL)) {
		/* a thread with capability sets of its own (capset is a
		 * thread's): the main thread's credentials with its sets */
		struct rrc_creds own = a->creds;
		if (bt->own_caps) {
			own.cap_inh = bt->caps.cap_inh;
			own.cap_prm = bt->caps.cap_prm;
			own.cap_eff = bt->caps.cap_eff;
			own.cap_amb = bt->caps.cap_amb;
		}
		r = rrc_creds_apply(&own, &what);
	}
	if (r < 0) {
		a->fail_tid = bt->t.tid;
		a->fail_errno = (int32_t)-r;
		a->fail_what = what;
		__atomic_store_n(&a->failed, 1, __ATOMIC_RELEASE);
	}
	__atomic_add_fetch(&a->ready, 1, __ATOMIC_ACQ_REL);
	rrc_sys_futex(&a->ready, FUTEX_WAKE_, 1, NULL);
	if (r < 0)
		for (;;)
			rrc_sys_futex(&a->go, FUTEX_WAIT_, 0, NULL); /* exit_group ends us */
	while (!__atomic_load_n(&a->go, __ATOMIC_ACQUIRE))
		rrc_sys_futex(&a->go, FUTEX_WAIT_, 0, NULL);
	blob_resume(&bt->t.resume);
}

struct clone_args_v2 {
	uint64_t flags, pidfd, child_tid, parent_tid, exit_signal;
	uint64_t stack, stack_size, tls, set_tid, set_tid_size, cgroup;
};

static void make_threads(struct blob_args *a)
{
	uint32_t children = 0;

	for (uint32_t i = 0; i < a->nr_threads; i++) {
		struct blob_thread *bt = &a->threads[i];
		struct clone_args_v2 ca;
		int32_t tid = (int32_t)bt->t.tid;
		long r;

		if (i == a->main_index)
			continue;
		memset(&ca, 0, sizeof(ca));
		ca.flags = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD |
			   CLONE_SYSVSEM | CLONE_SETTLS;
		ca.stack = bt->stack_lo;
		ca.stack_size = bt->stack_size;
		ca.tls = bt->t.fs_base;
		ca.set_tid = (uint64_t)&tid;
		ca.set_tid_size = 1;
		r = blob_clone3(&ca, sizeof(ca), child_thread, bt);
		if (r < 0) {
			struct msg m = { 0 };
			msg_str(&m, "clone3 with set_tid ");
			msg_dec(&m, tid);
			msg_str(&m, " failed: ");
			msg_errno(&m, -r);
			if (r == -17)
				msg_str(&m, " (TID in use: not pid 1 of a fresh pid namespace?)");
			bfail(a, RRC_RST_THREAD, -r, (uint32_t)tid, &m);
		}
		children++;
	}
	for (;;) {
		uint32_t n = __atomic_load_n(&a->ready, __ATOMIC_ACQUIRE);
		if (n >= children)
			break;
		rrc_sys_futex(&a->ready, FUTEX_WAIT_, n, NULL);
	}
	if (a->failed) {
		struct msg m = { 0 };
		msg_str(&m, "thread ");
		msg_dec(&m, a->fail_tid);
		msg_str(&m, ": ");
		msg_str(&m, a->fail_what);
		msg_str(&m, " failed: ");
		msg_errno(&m, a->fail_errno);
		bfail(a, RRC_RST_THREAD, a->fail_errno, a->fail_tid, &m);
	}
}

/* Signal-driven I/O (restore/fds.c fown_check), armed here because every
 * owner exists now (the threads, with their tids) and every signal is
 * blocked until the threads resume: what an armed fd signals from here on
 * waits, pending, for the process's own actions and masks. The owner
 * before O_ASYNC, so that no signal goes to no one; F_SETFL with O_ASYNC
 * calls the file's fasync hook through this fd number, which the signals
 * then carry as si_fd. An owner that is the process's group: the
 * restorer's group is its launcher's (rrc-container's setsid), so the
 * process becomes the leader of its own first, as it was. */
static void set_fowns(struct blob_args *a)
{
	for (uint32_t i = 0; i < a->nr_fowns; i++) {
		const struct blob_fown *o = &a->fowns[i];
		struct { int32_t type, pid; } ex = { (int32_t)o->owner_type, o->owner };
		const char *what = "F_SETSIG";
		long r = rrc_sys_fcntl(o->fd, F_SETSIG_, o->signal);

		if (r == 0 && o->owner && o->owner_type == F_OWNER_PGRP_ && rrc_sys_getpgid(0) != o->owner) {
			what = "setpgid (the owner is the process's own group)";
			r = rrc_sys_setpgid(0, 0);
		}
		if (r == 0 && o->owner) {
			what = "F_SETOWN_EX";
			r = rrc_sys_fcntl(o->fd, F_SETOWN_EX_, (long)&ex);
		}
		if (r >= 0) {
			what = "F_GETFL";
			r = rrc_sys_fcntl(o->fd, F_GETFL_, 0);
		}
		if (r >= 0) {
			what = "F_SETFL O_ASYNC";
			r = rrc_sys_fcntl(o->fd, F_SETFL_, r | O_ASYNC_);
		}
		if (r < 0) {
			struct msg m = { 0 };
			msg_str(&m, "fd ");
			msg_dec(&m, o->fd);
			msg_str(&m, ": signal-driven I/O: ");
			msg_str(&m, what);
			msg_str(&m, " failed: ");
			msg_errno(&m, -r);
			bfail(a, RRC_RST_FD, -r, (uint32_t)o->fd, &m);
		}
	}
	if (a->nr_fowns) {
		struct msg m = { 0 };
		msg_str(&m, "signal-driven I/O armed on ");
		msg_dec(&m, a->nr_fowns);
		msg_str(&m, " fd(s)");
		blog(a, &m);
	}
}

void restorer_main(struct blob_args *a)
{
	struct blob_thread *mt;
	const char *what = "";
	struct msg m = { 0 };
	long r;

	if (a->magic != BLOB_ARGS_MAGIC) {
		msg_str(&m, "restorer blob: bad argument area");
		bfail(a, RRC_RST_INTERNAL, 0, 0, &m);
	}
	unmap_restorer(a);
	place_vdso(a);
	map_vmas(a);
	fill_pages(a);
	msg_str(&m, "memory mapped and filled");
	blog(a, &m);
	m.len = 0;
	protect_vmas(a);
	set_mm(a);
	set_sigactions(a);
	fill_restore_area(a);
	make_threads(a);
	set_fowns(a);

	/* The main thread (TID 1: the restorer's own) last. Everything that
	 * can fail is done before "ok" is written. */
	mt = &a->threads[a->main_index];
	r = thread_setup(&mt->t, 1, &what);
	/* last: clone3 with set_tid and PR_SET_MM needed root's */
	if (r == 0 && a->has_creds)
		r = rrc_creds_apply(&a->creds, &what);
	if (r < 0) {
		msg_str(&m, "thread ");
		msg_dec(&m, mt->t.tid);
		msg_str(&m, ": ");
		msg_str(&m, what);
		msg_str(&m, " failed: ");
		msg_errno(&m, -r);
		bfail(a, RRC_RST_THREAD, -r, mt->t.tid, &m);
	}
	msg_str(&m, "resuming ");
	msg_dec(&m, a->nr_threads);
	msg_str(&m, " threads");
	blog(a, &m);
	if (a->status_fd >= 0)
		rrc_sys_write(a->status_fd, &a->ok, sizeof(a->ok));
	for (uint32_t i = 0; i < a->nr_close_fds; i++)
		rrc_sys_close(a->close_fds[i]);
	__atomic_store_n(&a->go, 1, __ATOMIC_RELEASE);
	rrc_sys_futex(&a->go, FUTEX_WAKE_, 0x7fffffff, NULL);
	blob_resume(&mt->t.resume);
}
