/* SPDX-License-Identifier: MIT
 *
 * The snapshot child (RRC §4.6 "container fork", here a clone() without
 * CLONE_VM and with exit signal 0): a copy-on-write image of the process
 * as it was when every thread was parked. It writes one checkpoint image
 * (rrc/image.h) into the fd received with the DUMP request, directly from
 * its own memory, and exits; the parent is already running again. The fd
 * is written strictly forward from its current position, so it may be a
 * file, a pipe or a socket (it must be blocking).
 *
 * ASYNC-SIGNAL-SAFE: the whole file. The parked threads may have held
 * malloc's or stdio's locks at the fork, so no libc: raw syscalls, and
 * working memory from the scratch arena's child area (which is excluded
 * from the image by address, so the child's buffers are not dumped).
 *
 * Which pages go into the image (architecture.md): a page is *defined* if
 * present or swapped and not a page-cache page of a file mapping nor the
 * zero page. A defined page is written into this image if it was written
 * since the parent (the parent's scan), lies in an untracked VMA, near a
 * parked thread's stack pointer (written after the scan by the handler's
 * last instructions), beyond a scan overflow, or the image is full.
 */
#include <fcntl.h>
#include <errno.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include "rrc/crc32c.h"
#include "rrc_lib.h"

#define USER_END 0x7ffffffff000ull
#define OBUF     (1u << 20)
#define STACK_WINDOW (8 * 4096ull)

static __attribute__((noreturn)) void die(int code)
{
	rrc_sys_exit(code); /* only this thread exists in the child */
	rrc_sys_exit_group(code);
}

const char *rrc_snapshot_strerror(int code)
{
	switch (code) {
	case RRC_SNAP_EIO: return "cannot write the image (write error on the image fd, or the fd is non-blocking)";
	case RRC_SNAP_EPIPE: return "the image reader went away (EPIPE): the stream was closed before the image was complete";
	case RRC_SNAP_ENOMEM: return "out of working memory for the image (too many VMAs or page ranges)";
	case RRC_SNAP_MAPS: return "cannot read its own memory map (PROCMAP_QUERY)";
	case RRC_SNAP_SCAN: return "PAGEMAP_SCAN of its own memory failed";
	case RRC_SNAP_SHARED_WRITE: return "the process has a writable shared mapping";
	case RRC_SNAP_PIPE: return "cannot read back saved pipe contents";
	case RRC_SNAP_PROC: return "cannot read /proc/self (stat, auxv, exe or cwd)";
	case RRC_SNAP_TOOBIG: return "a VMA or shared anonymous mapping the format cannot describe";
	case RRC_SNAP_LIBMERGE: return "a VMA holds both librrc's scratch memory and application memory";
	}
	return "unknown failure";
}

/* ---- bump allocator in the child area ---- */
static uint8_t *arena;
static uint64_t arena_used, arena_cap;
static void *alloc(uint64_t n)
{
	n = (n + 63) & ~63ull;
	if (arena_used + n > arena_cap)
		die(RRC_SNAP_ENOMEM);
	void *p = arena + arena_used;
	arena_used += n;
	return p;
}

/* ---- output: a pure forward stream ----
 * The image fd may be a file, a pipe or a socket whose reader consumes the
 * image while it is written (architecture.md, epochs: staging buffer ->
 * backup), so nothing is ever sought back to: no lseek, no pwrite. A
 * section header carries its payload's length and CRC, so each payload is
 * known before its header goes out: metadata sections are built in the
 * arena first (they are small); the page data's CRC is computed in a first
 * pass over memory and the data written in a second pass straight from
 * memory. Both passes read the same bytes: this child's memory is a frozen
 * copy-on-write snapshot (RRC §4.6) that nothing else writes.
 * The state lives in the child area, not in .bss: the library's .bss is
 * dumped into the image and must not change while it is being written. */
static struct out {
	int fd;
	uint64_t off;             /* stream bytes written before buf[0] */
	uint8_t *buf;             /* small writes are coalesced here */
	uint64_t blen;
	uint8_t *sec;             /* metadata payload being built: the arena's free tail */
	uint64_t sec_len, sec_cap;
	uint32_t nsec;
} *op;
#define o (*op)

static void o_check(long r)
{
	if (r == -EPIPE)
		die(RRC_SNAP_EPIPE); /* the reader closed its end (SIGPIPE is blocked) */
	if (r <= 0)
		die(RRC_SNAP_EIO);   /* 0: a write that makes no progress; EAGAIN: fd not blocking */
}

/* All of [p, p+n) to the fd: short writes resumed, EINTR retried. */
static void o_write(const void *p, uint64_t n)
{
	const uint8_t *q = p;
	while (n) {
		long r = rrc_sys_write(o.fd, q, n > (1ull << 30) ? (1ull << 30) : n);
		if (r == -EINTR)
			continue;
		o_check(r);
		q += r;
		n -= (uint64_t)r;
		o.off += (uint64_t)r;
	}
}

/* All of iov[0..cnt) (consumed), from memory without a copy. */
static void o_writev(struct iovec *iov, int cnt)
{
	while (cnt && !iov->iov_len) {
		iov++;
		cnt--;
	}
	while (cnt) {
		long r = rrc_sys_writev(o.fd, iov, cnt);
		if (r == -EINTR)
			continue;
		o_check(r);
		o.off += (uint64_t)r;
		uint64_t left = (uint64_t)r;
		while (cnt && left >= iov->iov_len) {
			left -= iov->iov_len;
			iov++;
			cnt--;
		}
		if (cnt) {
			iov->iov_base = (uint8_t *)iov->iov_base + left;
			iov->iov_len -= left;
		}
	}
}

static void o_flush(void)
{
	uint64_t n = o.blen;
	o.blen = 0;
	o_write(o.buf, n);
}

/* Stream offset of the next byte. */
static uint64_t o_pos(void) { return o.off + o.blen; }

/* Appends to the stream: small pieces are coalesced, large ones are
 * written from where they are. */
static void o_emit(const void *p, uint64_t n)
{
	if (n > OBUF / 4) {
		o_flush(); /* what is buffered comes first */
		o_write(p, n);
		return;
	}
	if (o.blen + n > OBUF)
		o_flush();
	rrc_memcpy(o.buf + o.blen, p, n);
	o.blen += n;
}

static void emit_pad(uint64_t len)
{
	static const uint8_t z[8];
	uint64_t pad = (8 - (len & 7)) & 7;
	if (pad)
		o_emit(z, pad); /* padding after a payload is not part of it */
}

static void emit_header(uint32_t type, uint64_t len, uint32_t crc)
{
	struct rrc_section_header h = { .type = type, .flags = 0, .length = len, .payload_crc = crc };
	h.header_crc = rrc_crc32c(&h, 20);
	o_emit(&h, sizeof h);
	o.nsec++;
}

/* A section whose payload is already contiguous in memory. */
static void emit_section(uint32_t type, const void *p, uint64_t n)
{
	emit_header(type, n, rrc_crc32c(p, n));
	o_emit(p, n);
	emit_pad(n);
}

/* Metadata sections: the payload is built in the arena's free tail
 * (nothing is allocated between sec_begin and sec_end), then emitted. */
static void sec_begin(void)
{
	o.sec = arena + arena_used;
	o.sec_cap = arena_cap - arena_used;
	o.sec_len = 0;
}

static void *o_reserve(uint64_t n)
{
	if (n > o.sec_cap - o.sec_len)
		die(RRC_SNAP_ENOMEM);
	void *p = o.sec + o.sec_len;
	o.sec_len += n;
	return p;
}

static void o_put(const void *p, uint64_t n)
{
	rrc_memcpy(o_reserve(n), p, n);
}

static void o_pad8(void)
{
	static const uint8_t z[8];
	uint64_t pad = (8 - (o.sec_len & 7)) & 7;
	if (pad)
		o_put(z, pad); /* padding inside a payload is part of it */
}

static void sec_end(uint32_t type)
{
	emit_section(type, o.sec, o.sec_len);
	o.sec = NULL;
	o.sec_len = o.sec_cap = 0;
}

/* ---- own memory map ---- */
struct cvma {
	struct rrc_vma v;
	uint32_t name_off;
	uint32_t special;         /* no pages: vdso, vvar, vsyscall, shared file */
};
static struct cvma *vmas;
static uint32_t nr_vmas;
static char *names;
static uint64_t names_len;
static int maps_fd, pm_fd;

static int name_is(const char *n, const char *w) { return !rrc_strncmp(n, w, rrc_strlen(w) + 1); }

static void read_vmas(void)
{
	struct rrc_scratch *s = rrc_s;
	uint64_t addr = 0;
	vmas = alloc(sizeof *vmas * 65536);
	names = alloc(16u << 20);
	for (;;) {
		struct procmap_query q;
		char *name = names + names_len;
		if ((16u << 20) - names_len < RRC_PATH_MAX)
			die(RRC_SNAP_ENOMEM);
		rrc_memset(&q, 0, sizeof q);
		q.size = sizeof q;
		q.query_flags = PROCMAP_QUERY_COVERING_OR_NEXT_VMA;
		q.query_addr = addr;
		q.vma_name_addr = (uint64_t)name;
		q.vma_name_size = RRC_PATH_MAX;
		name[0] = 0;
		long r = rrc_sys_ioctl(maps_fd, PROCMAP_QUERY, &q);
		if (r == -ENOENT)
			break;
		if (r < 0)
			die(RRC_SNAP_MAPS);
		addr = q.vma_end;
		if (rrc_in_ranges(s->lib_excluded, s->nr_lib_excluded, q.vma_start, q.vma_end)) {
			/* left out only if it is wholly the library's: a VMA that
			 * merged library and application memory must not be
			 * dropped silently (the arena has guard pages for this) */
			if (!rrc_within_ranges(s->lib_excluded, s->nr_lib_excluded, q.vma_start, q.vma_end))
				die(RRC_SNAP_LIBMERGE);
			continue;
		}
		if (nr_vmas >= 65536)
			die(RRC_SNAP_ENOMEM);
		struct cvma *c = &vmas[nr_vmas];
		rrc_memset(c, 0, sizeof *c);
		c->v.start = q.vma_start;
		c->v.end = q.vma_end;
		c->v.pgoff = q.vma_offset;
		c->v.prot = ((q.vma_flags & PROCMAP_QUERY_VMA_READABLE) ? PROT_READ : 0) |
			    ((q.vma_flags & PROCMAP_QUERY_VMA_WRITABLE) ? PROT_WRITE : 0) |
			    ((q.vma_flags & PROCMAP_QUERY_VMA_EXECUTABLE) ? PROT_EXEC : 0);
		int shared = (q.vma_flags & PROCMAP_QUERY_VMA_SHARED) != 0;
		int file = q.inode != 0 || name[0] == '/';
		uint32_t nl = (uint32_t)rrc_strlen(name);
		if (name_is(name, "[vdso]")) {
			c->v.kind = RRC_VMA_VDSO; c->special = 1;
		} else if (rrc_startswith(name, "[vvar")) {
			c->v.kind = RRC_VMA_VVAR; c->special = 1;
		} else if (name_is(name, "[vsyscall]")) {
			c->v.kind = RRC_VMA_VSYSCALL; c->special = 1;
		} else if (shared) {
			if (q.vma_flags & PROCMAP_QUERY_VMA_WRITABLE)
				die(RRC_SNAP_SHARED_WRITE);
			if (!file || name[0] != '/')
				die(RRC_SNAP_TOOBIG);
			c->v.kind = RRC_VMA_FILE_SHARED_RO; c->special = 1;
		} else if (name_is(name, "[heap]")) {
			c->v.kind = RRC_VMA_HEAP;
		} else if (name_is(name, "[stack]")) {
			c->v.kind = RRC_VMA_STACK;
			c->v.flags |= RRC_VMA_F_GROWSDOWN;
		} else if (file && name[0] == '/') {
			c->v.kind = RRC_VMA_FILE_PRIVATE;
		} else {
			c->v.kind = RRC_VMA_ANON;
		}
		if (c->v.kind == RRC_VMA_FILE_PRIVATE || c->v.kind == RRC_VMA_FILE_SHARED_RO) {
			c->v.path_len = nl;
			c->name_off = (uint32_t)names_len;
			names_len += nl + 1;
		}
		if ((s->req.flags & RRC_DUMP_F_INCREMENTAL) && !c->special &&
		    !rrc_in_ranges(s->untracked, s->nr_untracked, c->v.start, c->v.end))
			c->v.flags |= RRC_VMA_F_TRACKED;
		nr_vmas++;
	}
}

/* ---- in-image predicate over ascending addresses ---- */
static struct rrc_range *force;
static uint32_t nr_force;
static uint64_t wcur, fcur;

static void build_force(void)
{
	struct rrc_scratch *s = rrc_s;
	uint32_t n = rrc_g.nslots < RRC_MAX_THREADS ? rrc_g.nslots : RRC_MAX_THREADS;
	force = alloc(sizeof *force * (s->nr_untracked + n + 2));
	for (uint32_t i = 0; i < s->nr_untracked; i++)
		force[nr_force++] = s->untracked[i];
	for (uint32_t i = 0; i < n; i++) {
		uint64_t sp = rrc_g.slots[i].t.resume.rsp & ~4095ull;
		force[nr_force++] = (struct rrc_range){ sp - STACK_WINDOW, sp + STACK_WINDOW };
	}
	if (s->scan_overflow_from)
		force[nr_force++] = (struct rrc_range){ s->scan_overflow_from, USER_END };
	/* insertion sort by start; then merge overlaps */
	for (uint32_t i = 1; i < nr_force; i++) {
		struct rrc_range t = force[i];
		uint32_t j = i;
		while (j && force[j - 1].start > t.start) {
			force[j] = force[j - 1];
			j--;
		}
		force[j] = t;
	}
	uint32_t m = 0;
	for (uint32_t i = 0; i < nr_force; i++) {
		if (m && force[i].start <= force[m - 1].end) {
			if (force[i].end > force[m - 1].end)
				force[m - 1].end = force[i].end;
		} else
			force[m++] = force[i];
	}
	nr_force = m;
}

/* Is x in the image, and up to where does that answer hold? */
static int in_image(uint64_t x, uint64_t *until)
{
	struct rrc_scratch *s = rrc_s;
	uint64_t lim = USER_END;
	int in = 0;
	while (wcur < s->nr_written && s->written[wcur].end <= x)
		wcur++;
	if (wcur < s->nr_written) {
		if (s->written[wcur].start <= x) {
			in = 1;
			lim = s->written[wcur].end;
		} else
			lim = s->written[wcur].start;
	}
	while (fcur < nr_force && force[fcur].end <= x)
		fcur++;
	if (fcur < nr_force) {
		if (force[fcur].start <= x) {
			if (!in || force[fcur].end > lim)
				lim = force[fcur].end;
			in = 1;
		} else if (!in && force[fcur].start < lim)
			lim = force[fcur].start;
	}
	/* when written and forced overlap, "in" holds at least to the larger
	 * end only if contiguous; staying conservative is enough: the caller
	 * asks again at lim */
	*until = lim;
	return in;
}

static struct rrc_pagemap_entry *pme;
static uint64_t nr_pme, cap_pme, pages_in_image;

static void add_pme(uint64_t a, uint64_t b, uint32_t flags)
{
	while (a < b) {
		uint64_t n = (b - a) / RRC_PAGE_SIZE;
		if (n > 0x80000000ull)
			n = 0x80000000ull;
		if (nr_pme && pme[nr_pme - 1].flags == flags &&
		    pme[nr_pme - 1].vaddr + (uint64_t)pme[nr_pme - 1].nr_pages * RRC_PAGE_SIZE == a &&
		    pme[nr_pme - 1].nr_pages + n < 0xffffffffull) {
			pme[nr_pme - 1].nr_pages += (uint32_t)n;
		} else {
			if (nr_pme >= cap_pme)
				die(RRC_SNAP_ENOMEM);
			pme[nr_pme++] = (struct rrc_pagemap_entry){ a, (uint32_t)n, flags };
		}
		if (flags & RRC_PME_IN_IMAGE)
			pages_in_image += n;
		a += n * RRC_PAGE_SIZE;
	}
}

static void build_pagemap(void)
{
	int full = !(rrc_s->req.flags & RRC_DUMP_F_INCREMENTAL);
	struct page_region *vec = alloc(sizeof *vec * 65536);
	cap_pme = 8u << 20;
	pme = alloc(sizeof *pme * cap_pme);
	build_force();
	for (uint32_t i = 0; i < nr_vmas; i++) {
		struct cvma *c = &vmas[i];
		if (c->special)
			continue;
		uint64_t start = c->v.start;
		for (;;) {
			struct pm_scan_arg a = { .size = sizeof a, .flags = 0, .start = start, .end = c->v.end,
						 .vec = (uint64_t)vec, .vec_len = 65536,
						 .category_inverted = PAGE_IS_FILE | PAGE_IS_PFNZERO,
						 .category_mask = PAGE_IS_FILE | PAGE_IS_PFNZERO,
						 .category_anyof_mask = PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
						 .return_mask = PAGE_IS_PRESENT };
			long r = rrc_sys_ioctl(pm_fd, PAGEMAP_SCAN, &a);
			if (r < 0)
				die(RRC_SNAP_SCAN);
			for (long k = 0; k < r; k++) {
				uint64_t x = vec[k].start;
				while (x < vec[k].end) {
					uint64_t until;
					int in = full ? 1 : in_image(x, &until);
					if (full || until > vec[k].end)
						until = vec[k].end;
					add_pme(x, until, in ? RRC_PME_IN_IMAGE : 0);
					x = until;
				}
			}
			if (r < 65536 || a.walk_end >= c->v.end)
				break;
			start = a.walk_end;
		}
	}
}

/* ---- PROCESS ---- */
static void fill_process(struct rrc_process *p)
{
	char *buf = alloc(65536);
	long n;

	p->pid = (uint32_t)rrc_g.pid;
	long um = rrc_sys_umask(0);
	rrc_sys_umask((int)um);
	p->umask = (uint32_t)um;
	p->personality = (uint32_t)rrc_sys_personality(0xffffffff);
	p->nr_threads = (rrc_g.nslots < RRC_MAX_THREADS ? rrc_g.nslots : RRC_MAX_THREADS) + 1;

	n = rrc_read_file("/proc/self/stat", buf, 65536);
	if (n <= 0)
		die(RRC_SNAP_PROC);
	const char *q = buf + n;
	while (q > buf && *q != ')')
		q--;
	if (*q != ')')
		die(RRC_SNAP_PROC);
	q += 2; /* field 3 (state) starts here */
	uint64_t f[64] = { 0 };
	for (int field = 3; field < 64 && *q && *q != '\n'; field++) {
		/* one space-separated token; non-numeric (state) and negative
		 * (priority, nice) fields are of no interest here */
		if (*q >= '0' && *q <= '9')
			f[field] = rrc_parse_u64(q, 10, &q);
		while (*q && *q != ' ' && *q != '\n')
			q++;
		if (*q == ' ')
			q++;
	}
	p->start_code = f[26];
	p->end_code = f[27];
	p->start_stack = f[28];
	p->start_data = f[45];
	p->end_data = f[46];
	p->start_brk = f[47];
	p->arg_start = f[48];
	p->arg_end = f[49];
	p->env_start = f[50];
	p->env_end = f[51];
	p->brk = (uint64_t)rrc_sys_brk(0);

	n = rrc_read_file("/proc/self/auxv", buf, 65536);
	if (n <= 0)
		die(RRC_SNAP_PROC);
	uint32_t words = (uint32_t)(n / 8);
	if (words > RRC_AUXV_MAX)
		words = RRC_AUXV_MAX;
	rrc_memcpy(p->auxv, buf, words * 8ull);
	p->auxv_words = words;
	for (int i = 0; i < RRC_RLIMIT_MAX; i++) {
		struct rrc_rlimit rl = { ~0ull, ~0ull };
		if (rrc_sys_getrlimit(i, &rl) == 0)
			p->rlimits[i] = rl;
		else
			p->rlimits[i] = (struct rrc_rlimit){ ~0ull, ~0ull };
	}
	p->restore_area_addr = (uint64_t)&rrc_g.restore_area;

	/* comm of the main thread (ours is the control thread's) */
	char path[64];
	size_t l = rrc_bput(path, sizeof path, 0, "/proc/");
	l = rrc_bput_u64(path, sizeof path, l, (uint64_t)rrc_g.pid);
	l = rrc_bput(path, sizeof path, l, "/task/");
	l = rrc_bput_u64(path, sizeof path, l, (uint64_t)rrc_g.pid);
	rrc_bput(path, sizeof path, l, "/comm");
	n = rrc_read_file(path, buf, 64);
	if (n < 0)
		n = rrc_read_file("/proc/self/comm", buf, 64);
	for (long i = 0; i < n && i < 15 && buf[i] != '\n'; i++)
		p->comm[i] = buf[i];

	n = rrc_sys_readlinkat(-100, "/proc/self/exe", p->exe_path, RRC_PATH_MAX - 1);
	if (n < 0)
		die(RRC_SNAP_PROC);
	n = rrc_sys_getcwd(p->cwd, RRC_PATH_MAX);
	if (n < 0)
		die(RRC_SNAP_PROC);
}

static void write_fds(void)
{
	struct rrc_scratch *s = rrc_s;
	static const uint8_t z[8];

	for (uint64_t off = 0; off < s->fdbuf_len;) {
		struct rrc_fd *f = (struct rrc_fd *)(s->fdbuf + off);
		uint64_t rec = rrc_fd_rec_size(f);
		o_put(f, sizeof *f);
		o_put(f + 1, f->path_len);
		if (f->kind == RRC_FD_EPOLL) {
			o_put((uint8_t *)(f + 1) + ((f->path_len + 7ull) & ~7ull), f->data_len);
		} else if (f->kind == RRC_FD_PIPE && f->data_len) {
			int rfd = -1;
			for (uint32_t i = 0; i < s->nr_libpipes; i++)
				if (s->libpipes[i].app_fd == f->fd)
					rfd = s->libpipes[i].rfd;
			if (rfd < 0)
				die(RRC_SNAP_PIPE);
			uint8_t *dst = o_reserve(f->data_len);
			uint32_t left = f->data_len;
			while (left) {
				long r = rrc_sys_read(rfd, dst, left);
				if (r == -EINTR)
					continue;
				if (r <= 0)
					die(RRC_SNAP_PIPE);
				dst += r;
				left -= (uint32_t)r;
			}
		}
		uint64_t pad = (8 - ((f->path_len + f->data_len) & 7)) & 7;
		if (pad)
			o_put(z, pad);
		off += rec;
	}
}

static uint64_t t0;

static __attribute__((noreturn)) void snapshot(void);

/* The statics of this file live in the library's .bss, which is part of
 * every image: a restored process carries the values the previous
 * snapshot child had while it was writing. Each child therefore starts by
 * resetting all of them (every static of this file that is not constant
 * must be listed here). */
static void reset_child_state(void)
{
	arena = NULL;
	arena_used = arena_cap = 0;
	op = NULL;
	vmas = NULL;
	nr_vmas = 0;
	names = NULL;
	names_len = 0;
	maps_fd = pm_fd = -1;
	force = NULL;
	nr_force = 0;
	wcur = fcur = 0;
	pme = NULL;
	nr_pme = cap_pme = pages_in_image = 0;
	t0 = 0;
}

/* Entered right after clone(), on the control thread's stack, which is
 * part of the image: move to a stack in the child area first. */
__attribute__((noreturn)) void rrc_snapshot_main(void)
{
	struct rrc_scratch *s = rrc_s;
	/* The control thread's rseq registration came along with clone(): the
	 * kernel would go on writing cpu_id/mm_cid into its area (glibc's TCB,
	 * part of the image) whenever this child is preempted or migrates, so
	 * the page data's CRC pass and its write pass could read different
	 * bytes. Unregistered, nothing but this code writes image memory. */
	if (rrc_g.ctl_slot.t.rseq_addr)
		rrc_sys_rseq(rrc_g.ctl_slot.t.rseq_addr, rrc_g.ctl_slot.t.rseq_len, 1 /* RSEQ_FLAG_UNREGISTER */,
			     rrc_g.ctl_slot.t.rseq_sig);
	reset_child_state();
	t0 = rrc_mono_ns();
	arena = s->child_area;
	arena_cap = s->child_area_len;
	arena_used = 0;
	uint8_t *stack = alloc(1u << 20);
	op = alloc(sizeof *op);
	rrc_memset(op, 0, sizeof *op);
	rrc_call_on_stack(stack + (1u << 20), snapshot);
}

static __attribute__((noreturn)) void snapshot(void)
{
	struct rrc_scratch *s = rrc_s;
	o.fd = rrc_g.image_fd;
	o.buf = alloc(OBUF);
	long fd = rrc_sys_openat(-100, "/proc/self/maps", O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		die(RRC_SNAP_MAPS);
	maps_fd = (int)fd;
	fd = rrc_sys_openat(-100, "/proc/self/pagemap", O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		die(RRC_SNAP_SCAN);
	pm_fd = (int)fd;
	/* A reader that goes away must end this child with RRC_SNAP_EPIPE,
	 * not kill it with SIGPIPE (the application's disposition was
	 * inherited). Blocking it changes nothing captured: the SIGNALS
	 * section holds actions, and the threads' masks were saved before
	 * the clone. */
	uint64_t pipe_mask = 1ull << (13 /* SIGPIPE */ - 1);
	rrc_sys_rt_sigprocmask(0 /* SIG_BLOCK */, &pipe_mask, NULL);

	/* image header */
	struct rrc_image_header h;
	rrc_memset(&h, 0, sizeof h);
	rrc_memcpy(h.magic, RRC_IMAGE_MAGIC, 8);
	h.version = RRC_IMAGE_VERSION;
	int incr = (s->req.flags & RRC_DUMP_F_INCREMENTAL) != 0;
	h.flags = incr ? 0 : RRC_IMG_F_FULL;
	rrc_memcpy(h.image_id, s->req.image_id, 16);
	if (incr)
		rrc_memcpy(h.parent_id, s->req.parent_id, 16);
	h.sequence = rrc_g.cur_sequence;
	h.created_ns = s->created_ns;
	h.header_crc = rrc_crc32c(&h, 64);
	o_emit(&h, sizeof h);

	/* PROCESS */
	struct rrc_process *p = alloc(sizeof *p);
	rrc_memset(p, 0, sizeof *p);
	fill_process(p);
	sec_begin();
	o_put(p, sizeof *p);
	sec_end(RRC_SEC_PROCESS);

	/* VMAS */
	read_vmas();
	sec_begin();
	for (uint32_t i = 0; i < nr_vmas; i++) {
		o_put(&vmas[i].v, sizeof vmas[i].v);
		if (vmas[i].v.path_len)
			o_put(names + vmas[i].name_off, vmas[i].v.path_len);
		o_pad8();
	}
	sec_end(RRC_SEC_VMAS);

	/* PAGEMAP: already contiguous in the arena */
	build_pagemap();
	emit_section(RRC_SEC_PAGEMAP, pme, nr_pme * sizeof *pme);

	/* THREADS: the parked application threads, then the control thread */
	sec_begin();
	uint32_t nt = rrc_g.nslots < RRC_MAX_THREADS ? rrc_g.nslots : RRC_MAX_THREADS;
	for (uint32_t i = 0; i < nt; i++)
		o_put(&rrc_g.slots[i].t, sizeof(struct rrc_thread));
	o_put(&rrc_g.ctl_slot.t, sizeof(struct rrc_thread));
	sec_end(RRC_SEC_THREADS);

	/* FDS */
	sec_begin();
	write_fds();
	sec_end(RRC_SEC_FDS);

	/* SIGNALS: the actions are copied by clone() without CLONE_SIGHAND */
	sec_begin();
	for (int sig = 1; sig <= 64; sig++) {
		struct rrc_sigaction a;
		rrc_memset(&a, 0, sizeof a);
		if (rrc_sys_rt_sigaction(sig, 0, &a) < 0)
			rrc_memset(&a, 0, sizeof a);
		o_put(&a, sizeof a);
	}
	sec_end(RRC_SEC_SIGNALS);

	/* FILEOPS: the data directory's changes up to the snapshot instant
	 * (files-journal.c), straight from the journal in the arena */
	{
		struct rrc_fileops_header fh;
		const uint8_t *fp;
		uint64_t fl;
		if (rrc_fj_section(&fh, &fp, &fl)) {
			uint32_t fcrc = rrc_crc32c_extend(rrc_crc32c(&fh, sizeof fh), fp, fl);
			emit_header(RRC_SEC_FILEOPS, sizeof fh + fl, fcrc);
			o_emit(&fh, sizeof fh);
			o_emit(fp, fl);
			emit_pad(sizeof fh + fl); /* none: records are padded to 8 */
		}
	}

	/* TCP: the stream table captured in the pause (sk-diag.c) */
	sec_begin();
	struct rrc_tcp_table tt = { .count = s->nr_tcp, .record_size = sizeof(struct rrc_tcp_stream) };
	o_put(&tt, sizeof tt);
	o_put(s->tcp, (uint64_t)s->nr_tcp * sizeof(struct rrc_tcp_stream));
	sec_end(RRC_SEC_TCP);

	/* PAGES, in pagemap order. Unreadable VMAs are made readable in this
	 * disposable copy (the VMAS section already holds their protection). */
	for (uint32_t i = 0; i < nr_vmas; i++)
		if (!vmas[i].special && !(vmas[i].v.prot & PROT_READ))
			rrc_sys_mprotect((void *)vmas[i].v.start, vmas[i].v.end - vmas[i].v.start,
					 (int)vmas[i].v.prot | PROT_READ);
	/* Between the two passes nothing in the image may change: the
	 * statics of this file are in the library's .bss, which is dumped
	 * (alloc() moves arena_used), so allocate first. */
	struct iovec *iov = alloc(sizeof *iov * 1024);
	/* first pass: length and CRC, for the header that precedes the data */
	uint32_t crc = 0;
	uint64_t len = 0;
	for (uint64_t i = 0; i < nr_pme; i++)
		if (pme[i].flags & RRC_PME_IN_IMAGE) {
			uint64_t n = (uint64_t)pme[i].nr_pages * RRC_PAGE_SIZE;
			crc = rrc_crc32c_extend(crc, (void *)pme[i].vaddr, n);
			len += n;
		}
	emit_header(RRC_SEC_PAGES, len, crc);
	o_flush();
	/* second pass: the data, straight from memory */
	int niov = 0;
	for (uint64_t i = 0; i < nr_pme; i++) {
		if (!(pme[i].flags & RRC_PME_IN_IMAGE))
			continue;
		iov[niov].iov_base = (void *)pme[i].vaddr;
		iov[niov].iov_len = (uint64_t)pme[i].nr_pages * RRC_PAGE_SIZE;
		if (++niov == 1024) {
			o_writev(iov, niov);
			niov = 0;
		}
	}
	o_writev(iov, niov);
	emit_pad(len); /* none: whole pages */

	/* END */
	struct rrc_end e = { .sections = o.nsec, .reserved = 0, .image_bytes = o_pos() };
	emit_section(RRC_SEC_END, &e, sizeof e);
	o_flush();

	struct rrc_ctl_dump_done done = { .pages = pages_in_image, .bytes = o.off,
					  .write_ns = rrc_mono_ns() - t0 };
	if (rrc_write_all(s->res_wfd, &done, sizeof done) < 0)
		die(RRC_SNAP_EIO);
	die(RRC_SNAP_OK);
}
