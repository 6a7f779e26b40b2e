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
 * The snapshot by copy (precopy.c) writes the same image with the same
 * code: its state is captured in the pause by rrc_copy_capture*, on the
 * control thread, its pages come from the page store, and the writer is
 * a process sharing the memory (rrc_copy_writer_main). What differs is
 * marked copy_mode.
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
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include "rrc/crc32c.h"
#include "rrc_lib.h"
#include "creds.h"
#include "sysvipc.h"

#define USER_END 0x7ffffffff000ull
#define OBUF     (1u << 20)
/* Around each parked thread's saved stack pointer, the pages its park
 * handler may write after it counted itself parked, i.e. after the scan:
 * the handler's own frame (quiesce.c; its futex calls are inline). The
 * fork snapshot takes a generous window (its child reads it for free);
 * the copy snapshot copies it in the pause: the page of the stack
 * pointer and one on each side. */
#define STACK_WINDOW (8 * 4096ull)
#define STACK_WINDOW_COPY 4096ull

/* The capture of a copy snapshot runs these functions in the pause, on
 * the control thread: there a failure must return to the caller
 * (guarded, below) instead of ending the thread. */
static void *capture_jmp[5];
static int capture_escape, capture_code;

static __attribute__((noreturn)) void die(int code)
{
	if (capture_escape) {
		capture_code = code;
		__builtin_longjmp(capture_jmp, 1);
	}
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
	case RRC_SNAP_INCOMPLETE: return "copy snapshot: a present page of a full image was never copied (a bug)";
	case RRC_SNAP_VMAS: return "more VMAs (or longer VMA names) than the library's lists hold: they are sized from vm.max_map_count when the library starts (the limit was raised since? a restart of the service, or a restore, sizes them anew)";
	case RRC_SNAP_DELETED: return "a mapping of a file deleted while the dump ran, after its check (see /proc/PID/maps): the next dump carries it (maps-deleted.c)";
	}
	return "unknown failure";
}

/* Runs a capture step on the control thread (before or in the pause): a
 * die() in it comes back here as -1 with the error set. */
static int guarded(void (*step)(void))
{
	capture_escape = 1;
	if (__builtin_setjmp(capture_jmp)) {
		if (!rrc_s->err_code)
			rrc_set_err(RRC_ERR_SNAPSHOT, 0, "copy snapshot: ", -1, rrc_snapshot_strerror(capture_code));
		capture_escape = 0;
		return -1;
	}
	step();
	capture_escape = 0;
	return 0;
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
	uint64_t ino;             /* file kinds: the mapped file (FILEIDS) */
	uint32_t dev_major, dev_minor;
	uint32_t name_off;
	uint32_t special;         /* no pages: vdso, vvar, vsyscall, shared file */
	uint64_t pres_first;      /* its present regions: pres[pres_first..+pres_n) */
	uint64_t pres_n;
};
static struct cvma *vmas;
static uint32_t nr_vmas;
static char *names;
static uint64_t names_len;
static int maps_fd, pm_fd;
static int copy_mode;     /* a copy snapshot's capture (rrc_copy_begin) */

static int name_is(const char *n, const char *w) { return !rrc_strncmp(n, w, rrc_strlen(w) + 1); }

/* Names read before the pause (rrc_copy_prefetch): a file's path costs the
 * kernel a d_path per VMA (~0.2 us of ~0.8), which the pause skips for a
 * VMA with the same bounds, file and offset as then (a path renamed in
 * between is recorded as it was then). *cursor walks the ascending list.
 * 1 with the name copied into name, 0 if the pause must ask for it. */
static int name_known(const struct rrc_helper_box *b, const struct procmap_query *q, char *name,
		      uint64_t *cursor)
{
	while (*cursor < b->nr_vnames && b->vnames[*cursor].start < q->vma_start)
		(*cursor)++;
	if (*cursor >= b->nr_vnames)
		return 0;
	const struct rrc_vma_name *v = &b->vnames[*cursor];
	if (v->start != q->vma_start || v->end != q->vma_end || v->pgoff != q->vma_offset ||
	    v->inode != q->inode || v->dev_major != q->dev_major || v->dev_minor != q->dev_minor)
		return 0;
	rrc_memcpy(name, b->vname_text + v->text_off, v->text_len + 1);
	return 1;
}

long rrc_vma_query_named(int fd, uint64_t addr, struct procmap_query *q, char *name, uint64_t *cursor)
{
	const struct rrc_helper_box *b = rrc_s->helper.box;
	if (!b || !b->nr_vnames)
		return rrc_vma_query(fd, addr, 0, q, name, RRC_PATH_MAX);
	long r = rrc_vma_query(fd, addr, 0, q, NULL, 0);
	if (r == 0 && !name_known(b, q, name, cursor))
		r = rrc_vma_query(fd, q->vma_start, 0, q, name, RRC_PATH_MAX);
	return r;
}

/* Before the pause of a copy snapshot: the memory map with names. When it
 * does not fit, the list is left empty and the pause asks for every name. */
static void prefetch_names(void)
{
	struct rrc_helper_box *b = rrc_phelper_box();
	uint64_t addr = 0;
	if (!b)
		return;
	b->nr_vnames = 0;
	b->vname_len = 0;
	for (;;) {
		struct procmap_query q;
		if (b->nr_vnames >= b->cap_vmas || b->cap_names - b->vname_len < RRC_PATH_MAX)
			goto overflow;
		char *name = b->vname_text + b->vname_len;
		long r = rrc_vma_query(rrc_g.maps_fd, addr, 0, &q, name, RRC_PATH_MAX);
		if (r == -ENOENT)
			return;
		if (r < 0)
			goto overflow;
		addr = q.vma_end;
		uint32_t nl = (uint32_t)rrc_strlen(name);
		b->vnames[b->nr_vnames++] = (struct rrc_vma_name){
			.start = q.vma_start, .end = q.vma_end, .pgoff = q.vma_offset, .inode = q.inode,
			.dev_major = q.dev_major, .dev_minor = q.dev_minor,
			.text_off = (uint32_t)b->vname_len, .text_len = nl };
		b->vname_len += nl + 1;
	}
overflow:
	b->nr_vnames = 0;
}

/* One VMA of the memory map; its name is at names + names_len. */
static void add_vma(const struct procmap_query *q, const char *name)
{
	struct rrc_scratch *s = rrc_s;
	if (rrc_in_ranges(s->lib_excluded, s->nr_lib_excluded, q->vma_start, q->vma_end)) {
		/* left out only if it is wholly the library's: a VMA that
		 * merged library and application memory must not be
		 * dropped silently (the arena has guard pages for this) */
		if (!rrc_within_ranges(s->lib_excluded, s->nr_lib_excluded, q->vma_start, q->vma_end))
			die(RRC_SNAP_LIBMERGE);
		return;
	}
	if (nr_vmas >= s->vma_cap)
		die(RRC_SNAP_VMAS);
	struct cvma *c = &vmas[nr_vmas];
	rrc_memset(c, 0, sizeof *c);
	c->v.start = q->vma_start;
	c->v.end = q->vma_end;
	c->v.pgoff = q->vma_offset;
	c->v.prot = ((q->vma_flags & PROCMAP_QUERY_VMA_READABLE) ? PROT_READ : 0) |
		    ((q->vma_flags & PROCMAP_QUERY_VMA_WRITABLE) ? PROT_WRITE : 0) |
		    ((q->vma_flags & PROCMAP_QUERY_VMA_EXECUTABLE) ? PROT_EXEC : 0);
	int shared = (q->vma_flags & PROCMAP_QUERY_VMA_SHARED) != 0;
	int file = q->inode != 0 || name[0] == '/';
	uint32_t nl = (uint32_t)rrc_strlen(name);
	if (name_is(name, "[vdso]")) {
		c->v.kind = RRC_VMA_VDSO; c->special = 1;
	} else if (rrc_startswith(name, "[vvar")) {
		c->v.kind = RRC_VMA_VVAR; c->special = 1;
	} else if (name_is(name, "[vsyscall]")) {
		c->v.kind = RRC_VMA_VSYSCALL; c->special = 1;
	} else if (shared) {
		if (q->vma_flags & PROCMAP_QUERY_VMA_WRITABLE)
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
		/* the restorer maps a file again by its path: a file deleted
		 * since (an upgraded binary or library, a memfd) has none. The
		 * pause made the private ones anonymous (maps-deleted.c): one
		 * here was deleted after the check, and an image taken now
		 * could never be restored */
		if (rrc_path_deleted(name, nl))
			die(RRC_SNAP_DELETED);
		c->v.path_len = nl;
		c->ino = q->inode;
		c->dev_major = q->dev_major;
		c->dev_minor = q->dev_minor;
		c->name_off = (uint32_t)names_len;
		names_len += nl + 1;
	}
	if ((s->req.flags & RRC_DUMP_F_INCREMENTAL) && !c->special &&
	    !rrc_in_ranges(s->untracked, s->nr_untracked, c->v.start, c->v.end))
		c->v.flags |= RRC_VMA_F_TRACKED;
	nr_vmas++;
}

/* Per VMA: its record, and room for its name (a path) on average. */
#define NAME_BYTES_PER_VMA 256u
/* The child's working memory for 65536 VMAs and everything else. */
#define AREA_BASE (512ull << 20)

uint64_t rrc_vma_names_cap(uint64_t vma_cap)
{
	return (vma_cap * NAME_BYTES_PER_VMA + 4095) & ~4095ull; /* whole pages (pause-helper.c lays them out in a row) */
}

uint64_t rrc_snapshot_area_len(uint64_t vma_cap)
{
	uint64_t more = vma_cap > 65536 ? vma_cap - 65536 : 0;
	/* whole pages: what follows in the scratch map stays page-aligned */
	return (AREA_BASE + more * (sizeof(struct cvma) + NAME_BYTES_PER_VMA) + 4095) & ~4095ull;
}

static void read_vmas_begin(void)
{
	vmas = alloc(sizeof *vmas * rrc_s->vma_cap);
	names = alloc(rrc_s->vma_names_cap);
}

/* The memory map, from the kernel. */
static void read_vmas(void)
{
	uint64_t addr = 0, cursor = 0;
	read_vmas_begin();
	for (;;) {
		struct procmap_query q;
		char *name = names + names_len;
		if (rrc_s->vma_names_cap - names_len < RRC_PATH_MAX)
			die(RRC_SNAP_VMAS);
		long r = copy_mode ? rrc_vma_query_named(maps_fd, addr, &q, name, &cursor)
				   : rrc_vma_query(maps_fd, addr, 0, &q, name, RRC_PATH_MAX);
		if (r == -ENOENT)
			break;
		if (r < 0)
			die(RRC_SNAP_MAPS);
		addr = q.vma_end;
		add_vma(&q, name);
	}
}

/* The memory map the pause helper read meanwhile (pause-helper.c). */
static void read_vmas_from(const struct rrc_helper_box *b)
{
	read_vmas_begin();
	for (uint64_t i = 0; i < b->nr_vmas; i++) {
		const struct rrc_ph_vma *v = &b->vmas[i];
		char *name = names + names_len;
		if (rrc_s->vma_names_cap - names_len < RRC_PATH_MAX)
			die(RRC_SNAP_VMAS);
		rrc_memcpy(name, b->names + v->name_off, v->name_len + 1);
		add_vma(&v->q, name);
	}
}

/* ---- in-image predicate over ascending addresses ---- */
static struct rrc_range *force;
static uint32_t nr_force;
static uint64_t wcur, fcur;

static void build_force(uint64_t window)
{
	struct rrc_scratch *s = rrc_s;
	uint32_t n = rrc_g.nslots < RRC_MAX_THREADS ? rrc_g.nslots : RRC_MAX_THREADS;
	force = alloc(sizeof *force * (s->nr_untracked + n + 2));
	for (uint32_t i = 0; i < s->nr_untracked; i++)
		force[nr_force++] = s->untracked[i];
	for (uint32_t i = 0; i < n; i++) {
		uint64_t sp = rrc_g.slots[i].t.resume.rsp & ~4095ull;
		force[nr_force++] = (struct rrc_range){ sp - window, sp + 4096 + window };
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

/* ---- present pages, per VMA ----
 * A defined page is present or swapped and neither the zero page nor a
 * page-cache page of a file mapping. The page-cache test costs a lookup of
 * every page's struct page (~1.7 ms per 100 MB here): it is only asked for
 * file-backed VMAs, an anonymous one cannot hold such pages. */
static struct page_region *pres;
static uint64_t nr_pres, cap_pres;

/* One PAGEMAP_SCAN of c's defined pages in [lo, hi) into vec[0..cap):
 * the count (0 only if [lo, hi) has none); *walk_end: where it stopped.
 * uffd-wp markers come back from the kernel as swapped pages: they are
 * holes (memory.c, rrc_drop_markers). */
static uint64_t present_scan(const struct cvma *c, uint64_t lo, uint64_t hi, struct page_region *vec,
			     uint64_t cap, uint64_t *walk_end)
{
	struct page_region got[128];
	uint64_t not = c->v.kind == RRC_VMA_FILE_PRIVATE ? PAGE_IS_FILE | PAGE_IS_PFNZERO : PAGE_IS_PFNZERO;
	struct pm_scan_arg a = { .size = sizeof a, .flags = 0, .start = lo, .end = hi,
				 .vec = (uint64_t)got, .vec_len = cap < 128 ? cap : 128,
				 .category_inverted = not, .category_mask = not,
				 .category_anyof_mask = PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
				 .return_mask = PAGE_IS_PRESENT | PAGE_IS_SWAPPED };
	long r = rrc_sys_ioctl(pm_fd, PAGEMAP_SCAN, &a);
	if (r < 0)
		die(RRC_SNAP_SCAN);
	uint64_t stop, n = rrc_drop_markers(pm_fd, got, (uint64_t)r, vec, cap, &stop);
	if (r > 0 && !stop)
		die(RRC_SNAP_SCAN);
	/* the kernel's walk_end if everything it reported was taken */
	*walk_end = r > 0 && stop < got[r - 1].end ? stop : a.walk_end;
	return n;
}

static void scan_vma_presence(struct cvma *c)
{
	c->pres_first = nr_pres;
	c->pres_n = 0;
	if (c->special)
		return;
	uint64_t start = c->v.start;
	while (start < c->v.end) {
		if (nr_pres == cap_pres)
			die(RRC_SNAP_ENOMEM);
		nr_pres += present_scan(c, start, c->v.end, pres + nr_pres, cap_pres - nr_pres, &start);
	}
	c->pres_n = nr_pres - c->pres_first;
}

static int carried;       /* copy snapshot: tracked VMAs' presence from the last image's */
static int deferred(const struct cvma *c);

/* Every VMA's present regions; in the pause of a copy snapshot, all but
 * the deferred VMAs (rrc_copy_capture_last scans those) and, when the
 * defined set is carried over, the tracked ones (see carry_presence). */
static void capture_presence(void)
{
	cap_pres = 1u << 20;
	pres = alloc(sizeof *pres * cap_pres);
	for (uint32_t i = 0; i < nr_vmas; i++) {
		if (copy_mode && (deferred(&vmas[i]) || (carried && (vmas[i].v.flags & RRC_VMA_F_TRACKED)))) {
			vmas[i].pres_first = nr_pres;
			vmas[i].pres_n = 0;
			continue;
		}
		scan_vma_presence(&vmas[i]);
	}
}

/* ---- the defined set carried over from the last copy image ----
 * Scanning every VMA for its present pages costs ~1 ms per 100 MB in the
 * pause. A page of a tracked (write-protected) VMA changes between defined
 * and not only through the application, and every such change goes
 * through "written" (measured on 6.18 with MADV_DONTNEED, and MADV_FREE
 * followed by MADV_PAGEOUT: the dropped page is a hole without its
 * write-protect marker, and reading it maps the zero page, also
 * unmarked): written to, it is in the page store (a scan reported it);
 * dropped, it is a hole; dropped and read, a written zero page, copied
 * (zeros) like any written page. So, for the tracked VMAs, defined now =
 * (defined in the last image, or copied in this dump) minus the pages
 * dropped since they were last armed: holes without their marker, which
 * the pause's write-protect scan reports in the same walk (memory.c,
 * rrc_scan; around those pages only, precopy.c, wide_ranges). */

/* ---- the copy snapshot's page copies, by address ----
 * The store's runs (precopy.c) in copy order, one entry per page, sorted
 * by address with a stable radix sort: the last entry of an address is
 * its latest copy. */
struct spage { uint64_t vaddr, slot; };
static struct spage *spages;
static uint64_t nr_spages, scur;

static void build_store_index(void)
{
	struct rrc_pstore *ps = &rrc_s->pstore;
	uint64_t n = ps->used;
	struct spage *a = alloc(sizeof *a * (n + 1)), *b = alloc(sizeof *b * (n + 1));
	uint64_t *count = alloc(sizeof *count * 4096);
	uint64_t k = 0;
	for (uint64_t r = 0; r < ps->nr_runs; r++)
		for (uint64_t i = 0; i < ps->runs[r].npages; i++)
			a[k++] = (struct spage){ ps->runs[r].vaddr + i * RRC_PAGE_SIZE, ps->runs[r].slot + i };
	/* page numbers are below 2^36 (USER_END >> 12): three 12-bit digits */
	for (int shift = 12; shift < 48; shift += 12) {
		rrc_memset(count, 0, sizeof *count * 4096);
		for (uint64_t i = 0; i < k; i++)
			count[(a[i].vaddr >> shift) & 4095]++;
		uint64_t sum = 0;
		for (int d = 0; d < 4096; d++) {
			uint64_t c = count[d];
			count[d] = sum;
			sum += c;
		}
		for (uint64_t i = 0; i < k; i++)
			b[count[(a[i].vaddr >> shift) & 4095]++] = a[i];
		struct spage *t = a;
		a = b;
		b = t;
	}
	uint64_t m = 0;
	for (uint64_t i = 0; i < k; i++) {
		if (m && a[m - 1].vaddr == a[i].vaddr)
			a[m - 1] = a[i];
		else
			a[m++] = a[i];
	}
	spages = a;
	nr_spages = m;
}

/* The store's slot of page x, or -1 (cursor: ascending queries). */
static int64_t store_slot(uint64_t x)
{
	while (scur < nr_spages && spages[scur].vaddr < x)
		scur++;
	return scur < nr_spages && spages[scur].vaddr == x ? (int64_t)spages[scur].slot : -1;
}

/* Is x in the store, and up to where does that answer hold? */
static int in_store(uint64_t x, uint64_t end, uint64_t *until)
{
	int in = store_slot(x) >= 0;
	uint64_t y = x + RRC_PAGE_SIZE;
	uint64_t i = scur;
	if (in) {
		while (y < end && i + 1 < nr_spages && spages[i + 1].vaddr == y) {
			i++;
			y += RRC_PAGE_SIZE;
		}
	} else {
		y = scur < nr_spages && spages[scur].vaddr < end ? spages[scur].vaddr : end;
	}
	*until = y;
	return in;
}

/* The tracked VMAs' present regions (see "the defined set carried over"
 * above): the last image's defined ranges and this dump's page copies,
 * both ascending, merged, minus the dropped pages, cut by VMA. */
static void carry_presence(void)
{
	struct rrc_pstore *ps = &rrc_s->pstore;
	const struct rrc_range *d = ps->defined[ps->cur];
	const struct page_region *undef = ps->holes;
	uint64_t nr_undef = ps->nr_holes;
	uint64_t nd = ps->nr_defined[ps->cur], di = 0, si = 0, ui = 0;
	uint32_t vi = 0;
	for (;;) {
		/* next range of the union (D u S), by ascending start */
		uint64_t a, b;
		if (di < nd && (si >= nr_spages || d[di].start <= spages[si].vaddr)) {
			a = d[di].start;
			b = d[di].end;
			di++;
		} else if (si < nr_spages) {
			a = spages[si].vaddr;
			b = a + RRC_PAGE_SIZE;
			si++;
		} else
			break;
		/* extend while the next piece of either list touches it */
		for (;;) {
			if (di < nd && d[di].start <= b) {
				if (d[di].end > b)
					b = d[di].end;
				di++;
			} else if (si < nr_spages && spages[si].vaddr <= b) {
				if (spages[si].vaddr + RRC_PAGE_SIZE > b)
					b = spages[si].vaddr + RRC_PAGE_SIZE;
				si++;
			} else
				break;
		}
		/* [a, b) minus the undefined regions, cut by the tracked VMAs */
		while (a < b) {
			while (ui < nr_undef && undef[ui].end <= a)
				ui++;
			uint64_t e = b;
			if (ui < nr_undef) {
				if (undef[ui].start <= a) {
					a = undef[ui].end;
					continue;
				}
				if (undef[ui].start < e)
					e = undef[ui].start;
			}
			while (vi < nr_vmas && vmas[vi].v.end <= a)
				vi++;
			if (vi >= nr_vmas)
				return;
			struct cvma *c = &vmas[vi];
			if (c->v.start >= e) {
				a = c->v.start < b ? c->v.start : b;
				continue;
			}
			uint64_t lo = a > c->v.start ? a : c->v.start, hi = e < c->v.end ? e : c->v.end;
			if ((c->v.flags & RRC_VMA_F_TRACKED) && lo < hi) {
				if (c->pres_n == 0)
					c->pres_first = nr_pres;
				if (nr_pres == cap_pres)
					die(RRC_SNAP_ENOMEM);
				pres[nr_pres++] = (struct page_region){ lo, hi, PAGE_IS_PRESENT };
				c->pres_n++;
			}
			a = hi > a ? hi : e;
		}
	}
}

/* This image's defined ranges, for the next copy snapshot's carry_presence
 * (rrc_pstore_done makes them current if the image is complete). */
static void save_defined(void)
{
	struct rrc_pstore *ps = &rrc_s->pstore;
	struct rrc_range *out = ps->defined[ps->cur ^ 1];
	uint64_t n = 0;
	for (uint64_t i = 0; i < nr_pme; i++) {
		uint64_t a = pme[i].vaddr, b = a + (uint64_t)pme[i].nr_pages * RRC_PAGE_SIZE;
		if (n && out[n - 1].end == a) {
			out[n - 1].end = b;
			continue;
		}
		if (n == ps->cap_defined) {
			ps->nr_defined[ps->cur ^ 1] = ~0ull; /* the next copy snapshot scans */
			return;
		}
		out[n++] = (struct rrc_range){ a, b };
	}
	ps->nr_defined[ps->cur ^ 1] = n;
}

static void build_pagemap(void)
{
	int full = !(rrc_s->req.flags & RRC_DUMP_F_INCREMENTAL);
	cap_pme = 8u << 20;
	pme = alloc(sizeof *pme * cap_pme);
	if (copy_mode)
		scur = 0;
	else
		build_force(STACK_WINDOW);
	for (uint32_t i = 0; i < nr_vmas; i++) {
		struct cvma *c = &vmas[i];
		for (uint64_t k = c->pres_first; k < c->pres_first + c->pres_n; k++) {
			uint64_t x = pres[k].start;
			while (x < pres[k].end) {
				uint64_t until;
				int in;
				if (copy_mode) {
					in = in_store(x, pres[k].end, &until);
					if (full && !in)
						die(RRC_SNAP_INCOMPLETE);
				} else {
					in = full ? 1 : in_image(x, &until);
					if (full)
						until = pres[k].end;
				}
				if (until > pres[k].end)
					until = pres[k].end;
				add_pme(x, until, in ? RRC_PME_IN_IMAGE : 0);
				x = until;
			}
		}
	}
}

/* ---- PROCESS ---- */
/* What only exec or prctl(PR_SET_MM/PR_SET_NAME) changes: a copy snapshot
 * reads it before the pause (rrc_copy_prefetch), where it may open files;
 * the pause itself opens none (the pause helper lists the fd table at the
 * same time). buf: a scratch buffer of 64 KiB. */
static void fill_process_stable(struct rrc_process *p, char *buf)
{
	long n;

	p->pid = (uint32_t)rrc_g.pid;
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

	n = rrc_read_file("/proc/self/auxv", buf, 65536);
	if (n <= 0)
		die(RRC_SNAP_PROC);
	uint32_t words = (uint32_t)(n / 8);
	if (words > RRC_AUXV_MAX)
		words = RRC_AUXV_MAX;
	rrc_memcpy(p->auxv, buf, words * 8ull);
	p->auxv_words = words;
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
	/* replaced by an upgrade: the file now at the path stands for it
	 * (the check before the pause found one there, maps-deleted.c) */
	if (rrc_path_cut_deleted(p->exe_path, (size_t)n))
		p->flags |= RRC_PROC_EXE_REPLACED;
}

/* What the application changes with ordinary calls: read with the
 * threads parked (syscalls only). */
static void fill_process_volatile(struct rrc_process *p)
{
	long um = rrc_sys_umask(0);
	rrc_sys_umask((int)um);
	p->umask = (uint32_t)um;
	p->personality = (uint32_t)rrc_sys_personality(0xffffffff);
	p->nr_threads = (rrc_g.nslots < RRC_MAX_THREADS ? rrc_g.nslots : RRC_MAX_THREADS) + 1;
	p->brk = (uint64_t)rrc_sys_brk(0);
	for (int i = 0; i < RRC_RLIMIT_MAX; i++) {
		struct rrc_rlimit rl = { ~0ull, ~0ull };
		if (rrc_sys_getrlimit(i, &rl) == 0)
			p->rlimits[i] = rl;
		else
			p->rlimits[i] = (struct rrc_rlimit){ ~0ull, ~0ull };
	}
	rrc_memset(p->cwd, 0, sizeof p->cwd);
	if (rrc_sys_getcwd(p->cwd, RRC_PATH_MAX) < 0)
		die(RRC_SNAP_PROC);
}

/* A file VMA whose path is the one before's (a library's segments): one
 * record for the run. */
static int same_file_as_previous(uint32_t i)
{
	const struct cvma *a = &vmas[i], *b = i ? &vmas[i - 1] : 0;
	return b && b->v.path_len && b->ino == a->ino && b->v.path_len == a->v.path_len &&
	       rrc_memeq(names + a->name_off, names + b->name_off, a->v.path_len);
}

/* A file of the data directory (rrc exec --data-dir): a failover rebuilds
 * it from the FILEOPS, with the backup's times; its identity is not
 * recorded (not checked). */
static int in_data_dir(const struct cvma *c)
{
	if (!rrc_fj_enabled())
		return 0;
	const char *d = rrc_fj_dir(), *p = names + c->name_off;
	size_t dl = rrc_strlen(d);
	return c->v.path_len > dl && !rrc_strncmp(p, d, dl) && p[dl] == '/';
}

/* A private file mapping's first VMA of its run, not in the data
 * directory. A shared one is left out: its pages are the file's whatever
 * it holds, before a restore as after. */
static int file_id_wanted(uint32_t i)
{
	const struct cvma *c = &vmas[i];
	return c->v.kind == RRC_VMA_FILE_PRIVATE && c->v.path_len && !same_file_as_previous(i) && !in_data_dir(c);
}

/* FILEIDS (image.h): each file mapping's file, as found now by its path;
 * one that is not the mapping's any more (a rename over it since the
 * pause) is marked, and a restore refuses it. Outside the pause (the
 * snapshot child, or the copy snapshot's writer). */
static void write_file_ids(void)
{
	struct rrc_file_ids h = { 0, 0 };
	for (uint32_t i = 0; i < nr_vmas; i++)
		if (file_id_wanted(i))
			h.count++;
	if (!h.count)
		return;
	sec_begin();
	o_put(&h, sizeof h);
	for (uint32_t i = 0; i < nr_vmas; i++) {
		const struct cvma *c = &vmas[i];
		if (!file_id_wanted(i))
			continue;
		char path[RRC_PATH_MAX];
		rrc_memcpy(path, names + c->name_off, c->v.path_len);
		path[c->v.path_len] = 0;
		struct stat st;
		struct rrc_file_id id = { 0, 0, 0, RRC_FILEID_REPLACED, c->v.path_len, 0 };
		if (rrc_sys_fstatat(AT_FDCWD, path, &st, 0) == 0 && st.st_ino == c->ino &&
		    major(st.st_dev) == c->dev_major && minor(st.st_dev) == c->dev_minor)
			id = (struct rrc_file_id){ (uint64_t)st.st_size, st.st_mtim.tv_sec, (uint32_t)st.st_mtim.tv_nsec, 0,
						   c->v.path_len, 0 };
		o_put(&id, sizeof id);
		o_put(path, c->v.path_len);
		o_pad8();
	}
	sec_end(RRC_SEC_FILEIDS);
}

static void write_fds(void)
{
	struct rrc_scratch *s = rrc_s;
	static const uint8_t z[8];

	for (uint64_t off = 0; off < s->fdbuf_len;) {
		struct rrc_fd *f = (struct rrc_fd *)(s->fdbuf + off);
		uint64_t rec = rrc_fd_rec_size(f);
		/* signal-driven I/O ends the record's data in the image (image.h
		 * struct rrc_fown); a DUP's is its object's, written once */
		struct rrc_fd out = *f;
		int fown = (f->fd_flags & RRC_FD_F_FOWN) && f->kind != RRC_FD_DUP;
		out.fd_flags &= ~RRC_FD_F_FOWN;
		if (fown) {
			out.fd_flags |= RRC_FD_F_FOWN;
			out.data_len += (uint32_t)sizeof(struct rrc_fown);
		}
		o_put(&out, sizeof out);
		o_put(f + 1, f->path_len);
		if (rrc_fd_data_inline(f)) {
			o_put((uint8_t *)(f + 1) + ((f->path_len + 7ull) & ~7ull), f->data_len);
		} else if ((f->kind == RRC_FD_PIPE || f->kind == RRC_FD_FIFO) && f->data_len) {
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
		if (fown)
			o_put((uint8_t *)f + rrc_fd_fown_off(f), sizeof(struct rrc_fown));
		uint64_t pad = (8 - ((out.path_len + out.data_len) & 7)) & 7;
		if (pad)
			o_put(z, pad);
		off += rec;
	}
}

static uint64_t t0;

/* ---- state captured for the image (fork: by the child; copy: in the pause) ---- */
static struct rrc_process *cproc;
static struct rrc_sigaction *csigs;       /* 64 */
static struct rrc_thread *cthreads;
static uint32_t nr_cthreads;

static void capture_process(void)
{
	cproc = alloc(sizeof *cproc);
	if (copy_mode) {
		rrc_memcpy(cproc, &rrc_s->pstore.proc_stable, sizeof *cproc);
	} else {
		rrc_memset(cproc, 0, sizeof *cproc);
		fill_process_stable(cproc, alloc(65536));
	}
	fill_process_volatile(cproc);
}

/* Before the pause of a copy snapshot: the process's stable fields (see
 * fill_process_stable) and the VMAs' names (prefetch_names). 0, or -1
 * with the error set. */
static void prefetch_stable(void)
{
	struct rrc_process *p = &rrc_s->pstore.proc_stable;
	rrc_memset(p, 0, sizeof *p);
	fill_process_stable(p, rrc_s->textbuf); /* a scratch buffer the pause uses later */
}

int rrc_copy_prefetch(void)
{
	if (guarded(prefetch_stable) < 0)
		return -1;
	prefetch_names();
	return 0;
}

/* The actions: a fork child has the parent's copy (clone() without
 * CLONE_SIGHAND); the pause reads the process's own. */
static void capture_signals(void)
{
	csigs = alloc(sizeof *csigs * 64);
	for (int sig = 1; sig <= 64; sig++) {
		struct rrc_sigaction *a = &csigs[sig - 1];
		rrc_memset(a, 0, sizeof *a);
		if (rrc_sys_rt_sigaction(sig, 0, a) < 0)
			rrc_memset(a, 0, sizeof *a);
	}
}

/* The parked application threads, then the control thread. */
static void capture_threads(void)
{
	uint32_t nt = rrc_g.nslots < RRC_MAX_THREADS ? rrc_g.nslots : RRC_MAX_THREADS;
	cthreads = alloc(sizeof *cthreads * (nt + 1));
	for (uint32_t i = 0; i < nt; i++)
		rrc_memcpy(&cthreads[i], &rrc_g.slots[i].t, sizeof *cthreads);
	rrc_memcpy(&cthreads[nt], &rrc_g.ctl_slot.t, sizeof *cthreads);
	nr_cthreads = nt + 1;
}

static __attribute__((noreturn)) void snapshot(void);
static __attribute__((noreturn)) void write_image(void);

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
	pres = NULL;
	nr_pres = cap_pres = 0;
	spages = NULL;
	nr_spages = scur = 0;
	copy_mode = 0;
	carried = 0;
	cproc = NULL;
	csigs = NULL;
	cthreads = NULL;
	nr_cthreads = 0;
	capture_escape = capture_code = 0;
	t0 = 0;
}

static void start_arena(void)
{
	struct rrc_scratch *s = rrc_s;
	reset_child_state();
	t0 = rrc_mono_ns();
	arena = s->child_area;
	arena_cap = s->child_area_len;
	arena_used = 0;
}

/* The writing process (fork child or copy writer) leaves the control
 * thread's stack, which is part of the image, for one in the arena. */
static __attribute__((noreturn)) void run_on_arena_stack(void (*fn)(void))
{
	uint8_t *stack = alloc(1u << 20);
	op = alloc(sizeof *op);
	rrc_memset(op, 0, sizeof *op);
	rrc_call_on_stack(stack + (1u << 20), fn);
}

/* Entered right after clone(), on the control thread's stack, which is
 * part of the image: move to a stack in the child area first. */
__attribute__((noreturn)) void rrc_snapshot_main(void)
{
	/* The control thread's rseq registration came along with clone(): the
	 * kernel would go on writing cpu_id/mm_cid into its area (glibc's TCB,
	 * part of the image) whenever this child is preempted or migrates, so
	 * the page data's CRC pass and its write pass could read different
	 * bytes. Unregistered, nothing but this code writes image memory. */
	if (rrc_g.ctl_slot.t.rseq_addr)
		rrc_sys_rseq(rrc_g.ctl_slot.t.rseq_addr, rrc_g.ctl_slot.t.rseq_len, 1 /* RSEQ_FLAG_UNREGISTER */,
			     rrc_g.ctl_slot.t.rseq_sig);
	start_arena();
	run_on_arena_stack(snapshot);
}

/* The fork snapshot: this child's memory is the frozen process. */
static __attribute__((noreturn)) void snapshot(void)
{
	long fd = rrc_sys_openat(-100, "/proc/self/maps", O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		die(RRC_SNAP_MAPS);
	maps_fd = (int)fd;
	fd = rrc_sys_openat(-100, "/proc/self/pagemap", O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		die(RRC_SNAP_SCAN);
	pm_fd = (int)fd;
	capture_process();
	read_vmas();
	capture_presence();
	capture_signals();
	capture_threads();
	write_image();
}

/* ---- the copy snapshot (precopy.c): capture in the pause ---- */

/* VMAs holding the library's always-dumped ranges (rrc_g, the control
 * thread's stack): the control thread writes them until the end of the
 * pause, so their pages are scanned and copied last. */
static int deferred(const struct cvma *c)
{
	struct rrc_scratch *s = rrc_s;
	return rrc_in_ranges(s->lib_always, s->nr_lib_always, c->v.start, c->v.end);
}

/* First VMA whose end is above x. */
static uint32_t vma_at(uint64_t x)
{
	uint32_t lo = 0, hi = nr_vmas;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (vmas[mid].v.end <= x)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static void put(uint64_t a, uint64_t b, const struct cvma *c)
{
	if (a < b && rrc_pstore_put(a, b, (c->v.prot & PROT_READ) != 0) < 0)
		die(RRC_SNAP_ENOMEM);
}

/* The present pages of [lo, hi) in c, asked of the kernel: a tracked VMA
 * has no captured present regions when the defined set is carried over
 * (capture_presence), and the stack windows and missed ranges are few and
 * small. */
static void put_present(uint64_t lo, uint64_t hi, const struct cvma *c)
{
	struct page_region v[64];
	while (lo < hi) {
		uint64_t r = present_scan(c, lo, hi, v, 64, &lo);
		for (uint64_t k = 0; k < r; k++)
			put(v[k].start, v[k].end, c);
	}
}

/* Copies [a, b) as the VMAs cut it; with_pres: only its present pages. */
static void put_range(uint64_t a, uint64_t b, int with_pres)
{
	for (uint32_t i = vma_at(a); i < nr_vmas && vmas[i].v.start < b; i++) {
		const struct cvma *c = &vmas[i];
		if (c->special || deferred(c))
			continue;
		uint64_t lo = a > c->v.start ? a : c->v.start, hi = b < c->v.end ? b : c->v.end;
		if (!with_pres) {
			put(lo, hi, c);
			continue;
		}
		if (carried && (c->v.flags & RRC_VMA_F_TRACKED)) {
			put_present(lo, hi, c);
			continue;
		}
		for (uint64_t k = c->pres_first; k < c->pres_first + c->pres_n; k++) {
			if (pres[k].end <= lo)
				continue;
			if (pres[k].start >= hi)
				break;
			put(pres[k].start > lo ? pres[k].start : lo, pres[k].end < hi ? pres[k].end : hi, c);
		}
	}
}

/* The copy snapshot's pause, in three steps on the control thread after
 * its scan, the pause helper (pause-helper.c) running alongside since
 * the quiesce:
 *  1. rrc_copy_begin: the arena set up;
 *  2. rrc_copy_capture: the process's fields, the signal actions and the
 *     memory map (the one the helper read during the scan, or read here
 *     without a helper);
 *  3. rrc_copy_capture_pages, the helper still listing the fd table: the
 *     present pages of the untracked VMAs, and the copies: the pages
 *     written since the last pre-copy pass, the VMAs dumped whole, the
 *     parked threads' stack windows and what pre-copy missed.
 * Then the control thread takes the TCP table if asked (control.c) and the
 * helper's fd table (rrc_phelper_join). ASYNC-SIGNAL-SAFE, all of it. */
void rrc_copy_begin(int carry)
{
	start_arena();
	copy_mode = 1;
	carried = carry;
	maps_fd = rrc_g.maps_fd;
	pm_fd = rrc_g.pagemap_fd;
}

static struct rrc_helper_box *map_from; /* the helper's memory map, or NULL */

static void capture_state(void)
{
	struct rrc_scratch *s = rrc_s;
	capture_process();
	capture_signals();
	s->dbg_ns[4] = rrc_mono_ns();
	if (!map_from) {
		read_vmas();
	} else {
		/* ready by now, mostly: the helper read it during the scan */
		if (rrc_phelper_wait_map() < 0)
			die(RRC_SNAP_MAPS); /* with the helper's error set */
		s->dbg_ns[11] = rrc_mono_ns();
		read_vmas_from(map_from);
	}
	s->dbg_ns[5] = rrc_mono_ns();
}

int rrc_copy_capture(struct rrc_helper_box *from_helper)
{
	map_from = from_helper;
	return guarded(capture_state);
}

static void capture_pages(void)
{
	struct rrc_scratch *s = rrc_s;
	struct rrc_pstore *ps = &s->pstore;
	s->dbg_ns[6] = rrc_mono_ns();
	/* the deferred VMAs get no present regions here: see rrc_copy_capture_last */
	capture_presence();
	s->dbg_ns[7] = rrc_mono_ns();
	for (uint64_t i = 0; i < s->nr_written; i++)
		put_range(s->written[i].start, s->written[i].end, 0);
	build_force(STACK_WINDOW_COPY);
	for (uint32_t i = 0; i < nr_force; i++)
		put_range(force[i].start, force[i].end, 1);
	for (uint32_t i = 0; i < ps->nr_missed; i++)
		put_range(ps->missed[i].start, ps->missed[i].end, 1);
	s->dbg_ns[8] = rrc_mono_ns();
}

int rrc_copy_capture_pages(void)
{
	return guarded(capture_pages);
}

static void capture_deferred(void)
{
	capture_threads();
	for (uint32_t i = 0; i < nr_vmas; i++) {
		struct cvma *c = &vmas[i];
		if (c->special || !deferred(c))
			continue;
		scan_vma_presence(c);
		uint64_t first = c->pres_first;
		for (uint64_t k = first; k < nr_pres; k++)
			put(pres[k].start, pres[k].end, c);
	}
}

/* The end of the pause, after the control thread saved its context: the
 * threads' records, and the VMAs the control thread wrote until now.
 * ASYNC-SIGNAL-SAFE. */
int rrc_copy_capture_last(void)
{
	return guarded(capture_deferred);
}

/* The writer: a process sharing the memory (CLONE_VM|CLONE_VFORK) entered
 * on the control thread's stack; the captured state and the arena stay as
 * the pause left them. */
__attribute__((noreturn)) void rrc_copy_writer_main(void)
{
	t0 = rrc_mono_ns();
	run_on_arena_stack(write_image);
}

/* ---- the image, from the captured state ---- */
static __attribute__((noreturn)) void write_image(void)
{
	struct rrc_scratch *s = rrc_s;
	o.fd = rrc_g.image_fd;
	o.buf = alloc(OBUF);
	/* A reader that goes away must end this child with RRC_SNAP_EPIPE,
	 * not kill it with SIGPIPE (the application's disposition was
	 * inherited). Blocking it changes nothing captured: the SIGNALS
	 * section holds actions, and the threads' masks were saved before
	 * the clone. */
	uint64_t pipe_mask = 1ull << (13 /* SIGPIPE */ - 1);
	rrc_sys_rt_sigprocmask(0 /* SIG_BLOCK */, &pipe_mask, NULL);
	if (copy_mode) {
		build_store_index();
		if (carried)
			carry_presence();
	}

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
	emit_section(RRC_SEC_PROCESS, cproc, sizeof *cproc);

	/* VMAS */
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
	if (copy_mode)
		save_defined();
	emit_section(RRC_SEC_PAGEMAP, pme, nr_pme * sizeof *pme);

	/* THREADS */
	emit_section(RRC_SEC_THREADS, cthreads, (uint64_t)nr_cthreads * sizeof *cthreads);

	/* FDS */
	sec_begin();
	write_fds();
	sec_end(RRC_SEC_FDS);

	/* SIGNALS */
	emit_section(RRC_SEC_SIGNALS, csigs, 64 * sizeof *csigs);

	/* PROCATTR: read by the control thread before the pause (procattr.c) */
	if (rrc_s->procattr.size)
		emit_section(RRC_SEC_PROCATTR, &rrc_s->procattr, sizeof rrc_s->procattr);
	/* CREDS: with PROCATTR, before the pause (creds.c) */
	if (rrc_s->procattr.size) {
		const void *cp;
		uint64_t cl;
		rrc_creds_section(&cp, &cl);
		emit_section(RRC_SEC_CREDS, cp, cl);
	}
	/* SYSVIPC: taken in the pause (sysvipc.c), when there is something */
	{
		const void *ip;
		uint64_t il;
		if (rrc_sysvipc_section(&ip, &il))
			emit_section(RRC_SEC_SYSVIPC, ip, il);
	}
	write_file_ids();

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

	/* PAGES, in pagemap order: from this child's memory (fork), where
	 * unreadable VMAs are made readable in this disposable copy (the VMAS
	 * section already holds their protection), or from the page store
	 * (copy). */
	if (!copy_mode)
		for (uint32_t i = 0; i < nr_vmas; i++)
			if (!vmas[i].special && !(vmas[i].v.prot & PROT_READ))
				rrc_sys_mprotect((void *)vmas[i].v.start, vmas[i].v.end - vmas[i].v.start,
						 (int)vmas[i].v.prot | PROT_READ);
	/* Between the two passes nothing in the image may change: the
	 * statics of this file are in the library's .bss, which is dumped
	 * (alloc() moves arena_used), so allocate first. */
	uint64_t nr_iov = 0;
	struct iovec *iov = alloc(sizeof *iov * (copy_mode ? pages_in_image + 1 : nr_pme + 1));
	scur = 0;
	for (uint64_t i = 0; i < nr_pme; i++) {
		if (!(pme[i].flags & RRC_PME_IN_IMAGE))
			continue;
		if (!copy_mode) {
			iov[nr_iov++] = (struct iovec){ (void *)pme[i].vaddr, (uint64_t)pme[i].nr_pages * RRC_PAGE_SIZE };
			continue;
		}
		for (uint64_t k = 0; k < pme[i].nr_pages; k++) {
			int64_t slot = store_slot(pme[i].vaddr + k * RRC_PAGE_SIZE);
			if (slot < 0)
				die(RRC_SNAP_INCOMPLETE); /* the pagemap said it is in the store */
			uint8_t *p = rrc_s->pstore.pages + (uint64_t)slot * RRC_PAGE_SIZE;
			if (nr_iov && (uint8_t *)iov[nr_iov - 1].iov_base + iov[nr_iov - 1].iov_len == p)
				iov[nr_iov - 1].iov_len += RRC_PAGE_SIZE;
			else
				iov[nr_iov++] = (struct iovec){ p, RRC_PAGE_SIZE };
		}
	}
	/* first pass: length and CRC, for the header that precedes the data */
	uint32_t crc = 0;
	uint64_t len = 0;
	for (uint64_t i = 0; i < nr_iov; i++) {
		crc = rrc_crc32c_extend(crc, iov[i].iov_base, iov[i].iov_len);
		len += iov[i].iov_len;
	}
	emit_header(RRC_SEC_PAGES, len, crc);
	o_flush();
	/* second pass: the data, straight from memory */
	for (uint64_t i = 0; i < nr_iov; i += 1024)
		o_writev(iov + i, (int)(nr_iov - i < 1024 ? nr_iov - i : 1024));
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
