/* SPDX-License-Identifier: MIT
 *
 * Dirty-page tracking with userfaultfd write-protect in async mode and
 * PAGEMAP_SCAN: the user-space replacement for soft-dirty, which RRC §4.6
 * and NiLiCon §4.2 use through CRIU's incremental checkpoints.
 *
 * What this kernel (6.18) was observed to do (experiments in the report):
 *  - UFFDIO_REGISTER_MODE_WP without arming: every page of the VMA, present
 *    or not, reports PAGE_IS_WRITTEN. One PM_SCAN_WP_MATCHING scan reports
 *    them and arms them (WP_UNPOPULATED installs markers on empty PTEs).
 *  - a WP_MATCHING scan reports and re-arms atomically; a read fault on an
 *    empty page maps the zero page and is not "written".
 *  - MADV_DONTNEED'd pages report WRITTEN (marker gone) but not present:
 *    the snapshot child only dumps *defined* pages, so they become zero.
 *  - fork() keeps the parent's tracking intact; the child loses it (all of
 *    its pages look written), so the child only uses present/swapped.
 *  - PM_SCAN_CHECK_WPASYNC stops with EPERM at the first unregistered VMA,
 *    walk_end is then the END of the range (useless), and the pages of the
 *    registered VMAs before it have been re-armed and their results LOST.
 *    So we never use CHECK_WPASYNC: a plain WP_MATCHING scan silently
 *    skips unregistered VMAs, and a second, non-arming scan with
 *    category_inverted = PAGE_IS_WPALLOWED lists the unregistered ones.
 *  - with a full output vector walk_end is the first unprocessed page:
 *    the scan continues from there.
 *  - a uffd-wp PTE marker (a hole armed by a scan without a presence
 *    filter, or a file page reclaimed while armed) is reported as
 *    PAGE_IS_SWAPPED, like a page really swapped out or under migration;
 *    only the classic /proc/self/pagemap entry (its swap type and
 *    offset) tells them apart: rrc_drop_markers.
 * Cost: ~1 ms per WP_MATCHING scan of 100 MB of populated anonymous memory
 * when few pages are written, ~2.3 ms when all are.
 *
 * The scan only matches pages that are written AND present or swapped.
 * Matching holes too would make every scan install uffd-wp markers over the
 * whole virtual extent of each registered VMA (8 MB thread stacks, jemalloc
 * reservations): page tables get allocated, and scan and fork costs grow
 * with virtual size instead of resident size. Leaving holes alone is
 * correct: a page faulted in later carries no write-protect bit and is
 * reported written at the next scan; an armed page that is zapped
 * (MADV_DONTNEED) becomes a hole, is no longer defined, and the snapshot
 * records it as zero.
 *
 * The pause-path functions (rrc_scan and what it calls) are
 * ASYNC-SIGNAL-SAFE: ioctls and raw syscalls on preallocated buffers.
 */
#include <fcntl.h>
#include <errno.h>
#include <sys/mman.h>
#include "rrc_lib.h"
#include "lib-fds.h"
#include "rr-log.h"

#define USER_END 0x7ffffffff000ull

int rrc_uffd_open(void)
{
	long fd = rrc_sys_userfaultfd(O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
	if (fd < 0)
		fd = rrc_sys_userfaultfd(O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return (int)fd;
	struct uffdio_api api = { .api = UFFD_API,
				  .features = UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_WP_UNPOPULATED };
	long r = rrc_sys_ioctl((int)fd, UFFDIO_API, &api);
	if (r < 0) {
		rrc_libfd_close((int)fd);
		return (int)r;
	}
	return (int)fd;
}

/* One VMA at or after addr, through maps_fd (a /proc/<pid>/maps of the
 * memory to ask about); its name into name[0..cap) unless name is NULL.
 * Returns 0, or -ENOENT past the last one. ASYNC-SIGNAL-SAFE. */
long rrc_vma_query(int maps_fd, uint64_t addr, uint64_t flags, struct procmap_query *q, char *name, uint32_t cap)
{
	rrc_memset(q, 0, sizeof *q);
	q->size = sizeof *q;
	q->query_flags = PROCMAP_QUERY_COVERING_OR_NEXT_VMA | flags;
	q->query_addr = addr;
	if (name) {
		q->vma_name_addr = (uint64_t)name;
		q->vma_name_size = cap;
		name[0] = 0;
	}
	return rrc_sys_ioctl(maps_fd, PROCMAP_QUERY, q);
}

/* The same of this process's memory. */
static long vma_query(uint64_t addr, uint64_t flags, struct procmap_query *q, char *name, uint32_t cap)
{
	return rrc_vma_query(rrc_g.maps_fd, addr, flags, q, name, cap);
}

/* Classic /proc/self/pagemap entries (Documentation/admin-guide/mm/pagemap.rst) */
#define PM_SWAP  (1ull << 62)
#define PM_FRAME ((1ull << 55) - 1)   /* swap type (bits 0-4) and offset when swapped */

/* A uffd-wp marker's pagemap entry, learnt on a probe page of our own
 * (the encoding of marker swap entries depends on the kernel's build):
 * two pages, the first written, the second armed as a hole by a scan
 * without a presence filter. 0 if it cannot be learnt (the swap bits
 * need CAP_SYS_ADMIN): rrc_drop_markers then keeps every swapped page. */
void rrc_marker_learn(void)
{
	rrc_g.marker_frame = 0;
	long m = rrc_sys_mmap(0, 2 * RRC_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m < 0 && m > -4096)
		return;
	uint64_t a = (uint64_t)m;
	*(volatile char *)a = 1;
	struct uffdio_register reg = { .range = { a, 2 * RRC_PAGE_SIZE }, .mode = UFFDIO_REGISTER_MODE_WP };
	if (rrc_sys_ioctl(rrc_g.uffd, UFFDIO_REGISTER, &reg) == 0) {
		struct page_region v[2];
		struct pm_scan_arg s = { .size = sizeof s, .flags = PM_SCAN_WP_MATCHING, .start = a,
					 .end = a + 2 * RRC_PAGE_SIZE, .vec = (uint64_t)v, .vec_len = 2,
					 .category_mask = PAGE_IS_WRITTEN, .return_mask = PAGE_IS_WRITTEN };
		uint64_t e = 0;
		if (rrc_sys_ioctl(rrc_g.pagemap_fd, PAGEMAP_SCAN, &s) >= 0 &&
		    rrc_sys_pread(rrc_g.pagemap_fd, &e, sizeof e, (long)((a + RRC_PAGE_SIZE) / RRC_PAGE_SIZE * 8)) == sizeof e &&
		    (e & PM_SWAP))
			rrc_g.marker_frame = e & PM_FRAME;
		struct uffdio_range r = { a, 2 * RRC_PAGE_SIZE };
		rrc_sys_ioctl(rrc_g.uffd, UFFDIO_UNREGISTER, &r);
	}
	rrc_sys_munmap((void *)a, 2 * RRC_PAGE_SIZE);
}

/* The regions v[0..n) of a scan returning PAGE_IS_PRESENT and
 * PAGE_IS_SWAPPED through pm (a pagemap fd), without the uffd-wp markers
 * among the swapped ones, into out[0..cap). Returns the count; *stop is where it stopped (the end
 * of v[n - 1] if everything fitted), or 0 if the pagemap could not be
 * read. ASYNC-SIGNAL-SAFE. */
uint64_t rrc_drop_markers(int pm, const struct page_region *v, uint64_t n, struct page_region *out,
			  uint64_t cap, uint64_t *stop)
{
	uint64_t k = 0;
	*stop = n ? v[n - 1].end : 0;
	for (uint64_t i = 0; i < n; i++) {
		if ((v[i].categories & PAGE_IS_PRESENT) || !rrc_g.marker_frame) {
			if (k == cap) {
				*stop = v[i].start;
				return k;
			}
			out[k++] = v[i];
			continue;
		}
		uint64_t a = v[i].start;
		while (a < v[i].end) {
			uint64_t e[256];
			uint64_t np = (v[i].end - a) / RRC_PAGE_SIZE;
			if (np > 256)
				np = 256;
			long r = rrc_sys_pread(pm, e, np * 8, (long)(a / RRC_PAGE_SIZE * 8));
			if (r < 8) {
				*stop = 0;
				return k;
			}
			for (long j = 0; j < r / 8; j++, a += RRC_PAGE_SIZE) {
				if ((e[j] & PM_SWAP) && (e[j] & PM_FRAME) == rrc_g.marker_frame)
					continue; /* a hole */
				if (k && out[k - 1].end == a && out[k - 1].categories == v[i].categories) {
					out[k - 1].end = a + RRC_PAGE_SIZE;
					continue;
				}
				if (k == cap) {
					*stop = a;
					return k;
				}
				out[k++] = (struct page_region){ a, a + RRC_PAGE_SIZE, v[i].categories };
			}
		}
	}
	return k;
}

int rrc_in_ranges(const struct rrc_range *r, uint32_t n, uint64_t a, uint64_t b)
{
	for (uint32_t i = 0; i < n; i++)
		if (a < r[i].end && r[i].start < b)
			return 1;
	return 0;
}

/* 1 if [a, b) lies inside one of the ranges. */
int rrc_within_ranges(const struct rrc_range *r, uint32_t n, uint64_t a, uint64_t b)
{
	for (uint32_t i = 0; i < n; i++)
		if (r[i].start <= a && b <= r[i].end)
			return 1;
	return 0;
}

static int special_name(const char *name)
{
	return !rrc_strncmp(name, "[vdso]", 7) || rrc_startswith(name, "[vvar") ||
	       !rrc_strncmp(name, "[vsyscall]", 11) || rrc_startswith(name, "[uprobes");
}

/* The library's own memory: the scratch arena is excluded from images;
 * the VMAs holding rrc_g and the control thread's stack are never
 * registered and always dumped whole (the control thread writes them
 * between the scan and the fork). */
void rrc_lib_ranges(void)
{
	struct rrc_scratch *s = rrc_s;
	struct procmap_query q;
	uint64_t a = (uint64_t)&rrc_g, b = a + sizeof rrc_g;

	s->nr_lib_excluded = 0;
	s->lib_excluded[s->nr_lib_excluded++] =
		(struct rrc_range){ (uint64_t)rrc_g.scratch, (uint64_t)rrc_g.scratch + rrc_g.scratch_len };
	if (rrc_pstore_range(&s->lib_excluded[s->nr_lib_excluded]))
		s->nr_lib_excluded++; /* the copy snapshot's page store */
	if (s->helper.box) /* the pause helper's mailbox (pause-helper.c) */
		s->lib_excluded[s->nr_lib_excluded++] =
			(struct rrc_range){ (uint64_t)s->helper.box, (uint64_t)s->helper.box + s->helper.box_len };
	uint64_t rs, re;
	if (rrc_rr_ring_range(&rs, &re)) /* the record log's rings (rr-log.c) */
		s->lib_excluded[s->nr_lib_excluded++] = (struct rrc_range){ rs, re };
	s->nr_lib_always = 0;
	while (a < b && s->nr_lib_always < 3) {
		if (vma_query(a, 0, &q, 0, 0) < 0 || q.vma_start > a)
			break;
		s->lib_always[s->nr_lib_always++] = (struct rrc_range){ q.vma_start, q.vma_end };
		a = q.vma_end;
	}
	if (rrc_g.ctl_stack)
		s->lib_always[s->nr_lib_always++] =
			(struct rrc_range){ (uint64_t)rrc_g.ctl_stack, (uint64_t)rrc_g.ctl_stack + RRC_CTL_STACK };
}

static int registrable(const struct procmap_query *q, const char *name)
{
	struct rrc_scratch *s = rrc_s;
	if (q->vma_flags & PROCMAP_QUERY_VMA_SHARED)
		return 0;
	if (special_name(name))
		return 0;
	if (q->vma_end > USER_END)
		return 0;
	if (rrc_in_ranges(s->lib_excluded, s->nr_lib_excluded, q->vma_start, q->vma_end) ||
	    rrc_in_ranges(s->lib_always, s->nr_lib_always, q->vma_start, q->vma_end))
		return 0;
	return 1;
}

static long uffd_register(uint64_t a, uint64_t b)
{
	struct uffdio_register reg = { .range = { a, b - a }, .mode = UFFDIO_REGISTER_MODE_WP };
	return rrc_sys_ioctl(rrc_g.uffd, UFFDIO_REGISTER, &reg);
}

/* Arms write-protection on every registered page (the result is dropped). */
static void arm_all(void)
{
	struct rrc_scratch *s = rrc_s;
	uint64_t start = 0;
	for (;;) {
		struct pm_scan_arg a = { .size = sizeof a, .flags = PM_SCAN_WP_MATCHING,
					 .start = start, .end = USER_END,
					 .vec = (uint64_t)s->written, .vec_len = s->cap_written,
					 .category_mask = PAGE_IS_WRITTEN,
					 .category_anyof_mask = PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
					 .return_mask = PAGE_IS_WRITTEN };
		long r = rrc_sys_ioctl(rrc_g.pagemap_fd, PAGEMAP_SCAN, &a);
		if (r < 0 || (uint64_t)r < s->cap_written || a.walk_end >= USER_END)
			break;
		start = a.walk_end;
	}
}

int rrc_register_all(int wp_arm)
{
	char name[RRC_PATH_MAX];
	struct procmap_query q;
	uint64_t addr = 0;
	int n = 0;

	rrc_lib_ranges();
	while (vma_query(addr, 0, &q, name, sizeof name) == 0) {
		addr = q.vma_end;
		if (!registrable(&q, name))
			continue;
		if (uffd_register(q.vma_start, q.vma_end) == 0)
			n++;
	}
	if (wp_arm)
		arm_all();
	return n;
}

static int add_untracked(uint64_t a, uint64_t b, int newly)
{
	struct rrc_scratch *s = rrc_s;
	/* the registration after resume re-walks each range's VMAs and skips
	 * the library's ranges whole, so an application VMA only joins the
	 * range of the one right before it when that is the application's
	 * too (a region cut into many VMAs stays one range) */
	if (newly && s->nr_untracked) {
		struct rrc_range *last = &s->untracked[s->nr_untracked - 1];
		if (last->end == a && !rrc_in_ranges(s->lib_always, s->nr_lib_always, last->start, last->end)) {
			last->end = b;
			return 0;
		}
	}
	if (s->nr_untracked >= s->vma_cap) {
		rrc_set_err(RRC_ERR_UNSUPPORTED_MAPPING, 0, "more than ", (long)s->vma_cap,
			    " untracked VMAs (vm.max_map_count when the library started)");
		return -1;
	}
	s->untracked[s->nr_untracked++] = (struct rrc_range){ a, b };
	return 0;
}

/* The library's excluded ranges (rrc_lib_ranges) in ascending order, for
 * scans that step around them. Returns the count. ASYNC-SIGNAL-SAFE. */
uint32_t rrc_lib_excluded_sorted(struct rrc_range out[4])
{
	struct rrc_scratch *s = rrc_s;
	uint32_t n = s->nr_lib_excluded;
	rrc_memcpy(out, s->lib_excluded, n * sizeof *out);
	for (uint32_t i = 1; i < n; i++)
		for (uint32_t j = i; j && out[j - 1].start > out[j].start; j--) {
			struct rrc_range t = out[j];
			out[j] = out[j - 1];
			out[j - 1] = t;
		}
	return n;
}

/* The unregistered VMAs in [lo, hi) into s->untracked. ASYNC-SIGNAL-SAFE. */
static int scan_untracked(uint64_t lo, uint64_t hi)
{
	struct rrc_scratch *s = rrc_s;
	struct page_region *uvec = s->uvec;
	uint64_t start = lo;
	for (;;) {
		struct pm_scan_arg a = { .size = sizeof a, .flags = 0, .start = start, .end = hi,
					 .vec = (uint64_t)uvec, .vec_len = 512,
					 .category_inverted = PAGE_IS_WPALLOWED,
					 .category_mask = PAGE_IS_WPALLOWED,
					 .return_mask = PAGE_IS_WPALLOWED };
		long r = rrc_sys_ioctl(rrc_g.pagemap_fd, PAGEMAP_SCAN, &a);
		if (r < 0) {
			rrc_set_err(RRC_ERR_SNAPSHOT, (int)-r, "PAGEMAP_SCAN (untracked VMAs) failed", -1, 0);
			return -1;
		}
		for (long i = 0; i < r; i++) {
			uint64_t addr = uvec[i].start;
			while (addr < uvec[i].end) {
				struct procmap_query q;
				char name[RRC_PATH_MAX];
				if (vma_query(addr, 0, &q, name, sizeof name) < 0 || q.vma_start >= uvec[i].end)
					break;
				addr = q.vma_end;
				if ((q.vma_flags & PROCMAP_QUERY_VMA_SHARED) || special_name(name) ||
				    rrc_in_ranges(s->lib_excluded, s->nr_lib_excluded, q.vma_start, q.vma_end))
					continue;
				if (s->nr_untracked &&
				    s->untracked[s->nr_untracked - 1].end > q.vma_start)
					continue; /* already listed (two scan ranges in one VMA) */
				int lib = rrc_in_ranges(s->lib_always, s->nr_lib_always, q.vma_start, q.vma_end);
				if (add_untracked(q.vma_start, q.vma_end, !lib) < 0)
					return -1;
				if (!lib)
					s->nr_newly_untracked++;
			}
		}
		if (r < 512 || a.walk_end >= hi)
			return 0;
		start = a.walk_end;
	}
}

/* One written scan of [start, end) into s->written. with_holes: also the
 * pages written and dropped since (holes whose write-protect marker is
 * gone), re-armed and moved to holes[] -- only over page tables that
 * exist (see rrc_scan). 0, or -1 with the error set. */
static int scan_written(uint64_t start, uint64_t end, int with_holes, struct rrc_holes *h)
{
	struct rrc_scratch *s = rrc_s;
	while (start < end) {
		uint64_t room = s->cap_written - s->nr_written;
		if (room == 0) {
			if (with_holes || h) {
				/* the carried defined set needs every hole: give up */
				rrc_set_err(RRC_ERR_SNAPSHOT, 0, "more than ", (long)s->cap_written,
					    " written ranges in one scan; the next dump is full");
				return -1;
			}
			/* out of room: everything from here on goes into the image
			 * (and stays "written" for the next scan too: correct, bigger) */
			s->scan_overflow_from = start;
			return 0;
		}
		struct page_region *v = s->written + s->nr_written;
		struct pm_scan_arg a = { .size = sizeof a, .flags = PM_SCAN_WP_MATCHING,
					 .start = start, .end = end, .vec = (uint64_t)v, .vec_len = room,
					 .category_mask = PAGE_IS_WRITTEN,
					 .category_anyof_mask = with_holes ? 0 : PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
					 .return_mask = PAGE_IS_WRITTEN | PAGE_IS_PRESENT | PAGE_IS_SWAPPED };
		long r = rrc_sys_ioctl(rrc_g.pagemap_fd, PAGEMAP_SCAN, &a);
		if (r < 0) {
			rrc_set_err(RRC_ERR_SNAPSHOT, (int)-r, "PAGEMAP_SCAN failed", -1, 0);
			return -1;
		}
		uint64_t kept = 0;
		for (long i = 0; i < r; i++) {
			if (!(v[i].categories & (PAGE_IS_PRESENT | PAGE_IS_SWAPPED))) {
				if (h->nr == h->cap) {
					rrc_set_err(RRC_ERR_SNAPSHOT, 0, "more than ", (long)h->cap,
						    " dropped ranges in one scan; the next dump is full");
					return -1;
				}
				h->v[h->nr++] = v[i];
				continue;
			}
			s->written_pages += (v[i].end - v[i].start) / RRC_PAGE_SIZE;
			v[kept++] = v[i];
		}
		s->nr_written += kept;
		if ((uint64_t)r < room || a.walk_end >= end)
			return 0;
		start = a.walk_end;
	}
	return 0;
}

/* Pause path. ASYNC-SIGNAL-SAFE.
 * Without h: the written pages (present or swapped), re-armed. With h (a
 * copy snapshot carrying the last image's defined set over, snapshot.c):
 * also the pages dropped since they were last armed, in the same walk.
 * A dropped page is a hole whose write-protect marker is gone (measured:
 * MADV_DONTNEED, and MADV_FREE then reclaim); matching holes needs no
 * presence filter, which must only be left off where the page tables
 * exist -- elsewhere the scan would build page tables to put markers over
 * every unpopulated page (the 2 MiB-aligned ranges h->wide, around every
 * page the last image defined or this dump copied). */
int rrc_scan(struct rrc_holes *h)
{
	struct rrc_scratch *s = rrc_s;

	rrc_lib_ranges();
	s->nr_written = 0;
	s->written_pages = 0;
	s->scan_overflow_from = 0;
	s->nr_untracked = 0;
	s->nr_newly_untracked = 0;

	s->dbg_ns[0] = rrc_mono_ns();
	/* 1. written pages of registered VMAs, re-armed in the same pass */
	uint64_t from = 0;
	for (uint64_t i = 0; h && i < h->nr_wide; i++) {
		if (scan_written(from, h->wide[i].start, 0, h) < 0 ||
		    scan_written(h->wide[i].start, h->wide[i].end, 1, h) < 0)
			return -1;
		from = h->wide[i].end;
	}
	if (scan_written(from, USER_END, 0, h) < 0)
		return -1;

	/* 2. VMAs not registered (created since the last dump, or not
	 * registrable): all their defined pages go into this image. The
	 * library's excluded memory (scratch arena, page store) is never
	 * registered and never dumped: the scan steps around it rather than
	 * walk its page tables (~0.3 ms in a pause). */
	s->dbg_ns[1] = rrc_mono_ns();
	struct rrc_range ex[4];
	uint32_t nex = rrc_lib_excluded_sorted(ex);
	uint64_t lo = 0;
	for (uint32_t i = 0; i <= nex; i++) {
		uint64_t hi = i < nex ? ex[i].start : USER_END;
		if (lo < hi && scan_untracked(lo, hi) < 0)
			return -1;
		if (i < nex && ex[i].end > lo)
			lo = ex[i].end;
	}
	s->dbg_ns[2] = rrc_mono_ns();
	return 0;
}

/* After the threads run again: track the untracked VMAs from now on.
 * Pages written before registration carry no WP bit and will be reported
 * written by the next scan. */
void rrc_register_untracked(void)
{
	struct rrc_scratch *s = rrc_s;
	for (uint32_t i = 0; i < s->nr_untracked; i++) {
		struct rrc_range *r = &s->untracked[i];
		if (rrc_in_ranges(s->lib_always, s->nr_lib_always, r->start, r->end))
			continue;
		/* the VMA may have changed meanwhile: register what is there now */
		uint64_t addr = r->start;
		while (addr < r->end) {
			struct procmap_query q;
			char name[RRC_PATH_MAX];
			if (vma_query(addr, 0, &q, name, sizeof name) < 0 || q.vma_start >= r->end)
				break;
			addr = q.vma_end;
			if (registrable(&q, name))
				uffd_register(q.vma_start, q.vma_end);
		}
	}
}

/* Refusal: a writable shared mapping (a MAP_SHARED page written by the
 * application after the fork would change the snapshot, and the restorer
 * could not give it back its sharing). */
int rrc_check_maps(void)
{
	struct procmap_query q;
	char name[RRC_PATH_MAX];
	uint64_t addr = 0;
	while (vma_query(addr, PROCMAP_QUERY_VMA_SHARED | PROCMAP_QUERY_VMA_WRITABLE, &q, name,
			 sizeof name) == 0) {
		addr = q.vma_end;
		if (rrc_in_ranges(rrc_s->lib_excluded, rrc_s->nr_lib_excluded, q.vma_start, q.vma_end))
			continue;
		size_t l;
		rrc_set_err(RRC_ERR_SHARED_WRITE, 0, "writable shared mapping ", -1, 0);
		l = rrc_strlen(rrc_s->err_msg);
		l = rrc_bput_hex(rrc_s->err_msg, sizeof rrc_s->err_msg, l, q.vma_start);
		l = rrc_bput(rrc_s->err_msg, sizeof rrc_s->err_msg, l, "-");
		l = rrc_bput_hex(rrc_s->err_msg, sizeof rrc_s->err_msg, l, q.vma_end);
		l = rrc_bput(rrc_s->err_msg, sizeof rrc_s->err_msg, l, " ");
		l = rrc_bput(rrc_s->err_msg, sizeof rrc_s->err_msg, l, name[0] ? name : "(anonymous)");
		rrc_bput(rrc_s->err_msg, sizeof rrc_s->err_msg, l,
			 ": a protected process cannot have writable MAP_SHARED memory");
		return -1;
	}
	return 0;
}
