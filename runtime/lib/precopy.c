/* SPDX-License-Identifier: MIT
 *
 * The snapshot by copy (RRC_DUMP_F_COPY), the alternative to the snapshot
 * child of snapshot.c. A fork() of the parked process costs a page-table
 * copy of its whole resident memory inside the pause (~3-5 ms for 100 MB
 * on this VM): RRC needed a kernel patch (cfork, RRC §4.6) to go below
 * that. Here the pause copies only what was written since the last copy:
 *
 *  1. pre-copy, application running: write-protect scans (the same
 *     PAGEMAP_SCAN WP_MATCHING re-arm as the pause's, memory.c) report the
 *     pages written since the parent image, and each is copied into the
 *     page store below. A page the application writes again after its
 *     scan is reported again by the next scan, so a copy torn by a
 *     concurrent write is always replaced by a later one. Passes repeat
 *     while they still find many pages (the iterative pre-copy of live
 *     migration, as QEMU's RAM migration does it). For a full image the
 *     first pass reports and copies every present page.
 *  2. the pause (snapshot.c, rrc_copy_capture): the last scan finds the
 *     few pages written since the last pass; they, the VMAs dumped whole
 *     and the parked threads' stack windows are copied with the threads
 *     parked, with the rest of the state the image describes.
 *  3. after the pause, a writer (a CLONE_VM process, snapshot.c) writes the
 *     image from the store and the captured state while the application
 *     runs.
 *
 * The store is a mapping of its own, never in an image (lib_excluded) and
 * MADV_DONTFORK (a fork snapshot's child never reads it). Its pages stay
 * populated between dumps up to what the last dump used, so the pause
 * copies into memory that does not fault.
 *
 * Pre-copy reads the application's memory while it runs, and the
 * application may unmap it meanwhile: those reads go through
 * process_vm_readv on ourselves, which fails with EFAULT instead of
 * faulting. Ranges it could not read are recorded ("missed") and copied
 * in the pause if they still hold pages then. In the pause, memory is
 * read directly, through /proc/self/mem for pages the application made
 * unreadable.
 *
 * rrc_precopy runs on the control thread outside the pause; the functions
 * marked ASYNC-SIGNAL-SAFE below run in the pause.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include "rrc_lib.h"
#include "lib-fds.h"

#define USER_END 0x7ffffffff000ull
#define STORE_RUNS   (1ull << 22)          /* runs (96 MB virtual) */
#define STORE_PAGES  (1ull << 24)          /* 64 GB virtual of page copies */
#define STORE_DEFINED (1ull << 20)         /* defined ranges per buffer (16 MB virtual) */
#define STORE_HOLES  (1ull << 20)          /* dropped-page regions (24 MB virtual) */
#define STORE_WIDE   (1ull << 20)          /* 2 MiB-aligned ranges to look for them in (2 x 16 MB virtual) */
/* A pass that finds fewer written pages than this is the last one: the
 * pause copies what is written after it in a fraction of a millisecond. */
#define PRECOPY_ENOUGH 128
/* Passes beyond RRC_PRECOPY_PASSES while they still find many pages: up to
 * this many times as many, within this time. */
#define PRECOPY_EXTRA 4
#define PRECOPY_BUDGET_NS (50ull * 1000 * 1000)
/* Pages populated ahead of the pause's copies beyond what the last pause
 * needed (a copy into a populated page does not fault). */
#define PAUSE_RESERVE_MIN 2048

static long store_map(void)
{
	struct rrc_pstore *ps = &rrc_s->pstore;
	if (ps->map)
		return 0;
	uint64_t runs_len = STORE_RUNS * sizeof(struct rrc_pstore_run);
	uint64_t def_len = STORE_DEFINED * sizeof(struct rrc_range);
	uint64_t holes_len = STORE_HOLES * sizeof(struct page_region);
	uint64_t wide_len = 2 * STORE_WIDE * sizeof(struct rrc_range); /* and its spare half */
	uint64_t len = runs_len + 2 * def_len + holes_len + wide_len +
		       STORE_PAGES * RRC_PAGE_SIZE;
	/* guard pages on both sides, as for the scratch arena (init.c): an
	 * application mapping next to the store must not merge with it */
	long r = rrc_sys_mmap(0, len + 2 * 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (r < 0 && r > -4096)
		return r;
	uint8_t *p = (uint8_t *)r + 4096;
	long pr = rrc_sys_mprotect(p, len, PROT_READ | PROT_WRITE);
	if (pr == 0)
		pr = rrc_sys_madvise(p, len, MADV_DONTFORK);
	if (pr < 0) {
		rrc_sys_munmap((void *)r, len + 2 * 4096);
		return pr;
	}
	ps->runs = (struct rrc_pstore_run *)p;
	ps->cap_runs = STORE_RUNS;
	ps->defined[0] = (struct rrc_range *)(p + runs_len);
	ps->defined[1] = (struct rrc_range *)(p + runs_len + def_len);
	ps->cap_defined = STORE_DEFINED;
	ps->defined_valid = 0;
	ps->holes = (struct page_region *)(p + runs_len + 2 * def_len);
	ps->cap_holes = STORE_HOLES;
	ps->wide = (struct rrc_range *)(p + runs_len + 2 * def_len + holes_len);
	ps->cap_wide = STORE_WIDE;
	ps->pages = p + runs_len + 2 * def_len + holes_len + wide_len;
	ps->cap = STORE_PAGES;
	ps->populated = 0;
	ps->map = p;
	ps->map_len = len;
	return 0;
}

/* ASYNC-SIGNAL-SAFE. The store's mapping, for rrc_lib_ranges. */
int rrc_pstore_range(struct rrc_range *r)
{
	struct rrc_pstore *ps = &rrc_s->pstore;
	if (!ps->map)
		return 0;
	*r = (struct rrc_range){ (uint64_t)ps->map, (uint64_t)ps->map + ps->map_len };
	return 1;
}

/* Room for n more pages and one more run. ASYNC-SIGNAL-SAFE. */
static int room(uint64_t n)
{
	struct rrc_pstore *ps = &rrc_s->pstore;
	if (ps->used + n > ps->cap || ps->nr_runs >= ps->cap_runs) {
		rrc_set_err(RRC_ERR_SNAPSHOT, ENOMEM, "copy snapshot: the page store is full (",
			    (long)(ps->cap * RRC_PAGE_SIZE >> 30), " GB of page copies)");
		return -1;
	}
	return 0;
}

static void add_run(uint64_t vaddr, uint64_t npages)
{
	struct rrc_pstore *ps = &rrc_s->pstore;
	ps->runs[ps->nr_runs++] = (struct rrc_pstore_run){ vaddr, npages, ps->used };
	ps->used += npages;
}

static int add_missed(uint64_t a, uint64_t b)
{
	struct rrc_pstore *ps = &rrc_s->pstore;
	if (ps->nr_missed && ps->missed[ps->nr_missed - 1].end == a) {
		ps->missed[ps->nr_missed - 1].end = b;
		return 0;
	}
	if (ps->nr_missed >= RRC_MAX_MISSED) {
		rrc_set_err(RRC_ERR_SNAPSHOT, 0, "copy snapshot: more than ", RRC_MAX_MISSED,
			    " ranges were unmapped while being copied; the next dump is full");
		return -1;
	}
	ps->missed[ps->nr_missed++] = (struct rrc_range){ a, b };
	return 0;
}

/* Copies the regions vec[0..n) of the running application into the
 * store, in batches of one process_vm_readv each. What cannot be read is
 * recorded as missed. Returns the pages copied, or -1. */
static long copy_live(const struct page_region *vec, uint64_t n)
{
	struct rrc_pstore *ps = &rrc_s->pstore;
	struct iovec remote[256];
	long copied = 0;
	uint64_t i = 0;
	while (i < n) {
		uint64_t k = 0, pages = 0;
		while (i + k < n && k < 256) {
			uint64_t np = (vec[i + k].end - vec[i + k].start) / RRC_PAGE_SIZE;
			if (room(pages + np) < 0 || ps->nr_runs + k + 1 >= ps->cap_runs)
				return -1;
			remote[k].iov_base = (void *)vec[i + k].start;
			remote[k].iov_len = np * RRC_PAGE_SIZE;
			pages += np;
			k++;
		}
		struct iovec local = { ps->pages + ps->used * RRC_PAGE_SIZE, pages * RRC_PAGE_SIZE };
		long r = rrc_sys_process_vm_readv(rrc_g.pid, &local, 1, remote, k);
		uint64_t got = r > 0 ? (uint64_t)r / RRC_PAGE_SIZE : 0;
		/* the regions fully read, then the one it stopped in */
		uint64_t j = 0;
		for (; j < k; j++) {
			uint64_t np = remote[j].iov_len / RRC_PAGE_SIZE;
			if (np > got)
				break;
			add_run((uint64_t)remote[j].iov_base, np);
			copied += (long)np;
			got -= np;
		}
		if (j < k) {
			uint64_t a = (uint64_t)remote[j].iov_base;
			if (got) {
				add_run(a, got);
				copied += (long)got;
			}
			/* from the page it stopped at to the region's end: copied
			 * in the pause if it is still there; the regions after it
			 * are tried again in the next batch */
			if (add_missed(a + got * RRC_PAGE_SIZE, a + remote[j].iov_len) < 0)
				return -1;
			j++;
		}
		i += j;
	}
	return copied;
}

/* One pass: scan (and re-arm) the written pages -- or, for the first pass
 * of a full image, every present page -- and copy them. Returns the pages
 * the scan reported, or -1. */
static long precopy_pass(int all)
{
	struct rrc_scratch *s = rrc_s;
	uint64_t start = 0;
	long found = 0;
	for (;;) {
		struct pm_scan_arg a = { .size = sizeof a, .flags = PM_SCAN_WP_MATCHING,
					 .start = start, .end = USER_END,
					 .vec = (uint64_t)s->written, .vec_len = s->cap_written,
					 .category_mask = all ? 0 : PAGE_IS_WRITTEN,
					 .category_anyof_mask = PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
					 .return_mask = PAGE_IS_PRESENT | PAGE_IS_SWAPPED | PAGE_IS_WRITTEN };
		long r = rrc_sys_ioctl(rrc_g.pagemap_fd, PAGEMAP_SCAN, &a);
		if (r < 0) {
			rrc_set_err(RRC_ERR_SNAPSHOT, (int)-r, "copy snapshot: PAGEMAP_SCAN failed", -1, 0);
			return -1;
		}
		for (long i = 0; i < r; i++)
			found += (long)((s->written[i].end - s->written[i].start) / RRC_PAGE_SIZE);
		if (copy_live(s->written, (uint64_t)r) < 0)
			return -1;
		if ((uint64_t)r < s->cap_written || a.walk_end >= USER_END)
			break;
		start = a.walk_end;
	}
	return found;
}

#define PMD_SIZE (2ull << 20)

/* Appends [a, b), widened to 2 MiB boundaries, to the ascending list
 * out[0..*n), merging it with the last range. -1 if full. */
static int add_wide(struct rrc_range *out, uint64_t *n, uint64_t cap, uint64_t a, uint64_t b)
{
	a &= ~(PMD_SIZE - 1);
	b = (b + PMD_SIZE - 1) & ~(PMD_SIZE - 1);
	if (b > USER_END)
		b = USER_END; /* PAGEMAP_SCAN refuses a range past the user address space (EFAULT) */
	if (*n && out[*n - 1].end >= a) {
		if (b > out[*n - 1].end)
			out[*n - 1].end = b;
		return 0;
	}
	if (*n == cap)
		return -1;
	out[(*n)++] = (struct rrc_range){ a, b };
	return 0;
}

/* Where the pause's scan looks for dropped pages (memory.c, rrc_scan):
 * the 2 MiB-aligned ranges around every page the last image defined or
 * pre-copy copied. A page-table page covers 2 MiB, and none of those has
 * been freed since (dropping pages keeps the page table; unmapping
 * removes the VMA, which the scan then finds untracked). The last image's
 * ranges ascend, and so do each pre-copy pass's runs (a run below its
 * predecessor starts the next pass): each pass is merged in turn, through
 * the spare half of the buffer. 0, or -1 if they do not fit (the pause
 * then scans for present pages). */
static int wide_ranges(void)
{
	struct rrc_pstore *ps = &rrc_s->pstore;
	struct rrc_range *cur = ps->wide, *next = ps->wide + ps->cap_wide;
	const struct rrc_range *d = ps->defined[ps->cur];
	uint64_t n = 0;
	for (uint64_t i = 0; i < ps->nr_defined[ps->cur]; i++)
		if (add_wide(cur, &n, ps->cap_wide, d[i].start, d[i].end) < 0)
			return -1;
	for (uint64_t r = 0; r < ps->nr_runs;) {
		uint64_t end = r + 1;
		while (end < ps->nr_runs && ps->runs[end].vaddr > ps->runs[end - 1].vaddr)
			end++;
		uint64_t m = 0, i = 0;
		while (i < n || r < end) {
			int rc;
			if (r >= end || (i < n && cur[i].start <= ps->runs[r].vaddr)) {
				rc = add_wide(next, &m, ps->cap_wide, cur[i].start, cur[i].end);
				i++;
			} else {
				rc = add_wide(next, &m, ps->cap_wide, ps->runs[r].vaddr,
					      ps->runs[r].vaddr + ps->runs[r].npages * RRC_PAGE_SIZE);
				r++;
			}
			if (rc < 0)
				return -1;
		}
		rrc_memcpy(cur, next, m * sizeof *cur);
		n = m;
	}
	ps->nr_wide = n;
	return 0;
}

/* The store pages to keep populated: those used, and room for a pause
 * that copies twice `last` pages, at least PAUSE_RESERVE_MIN more. */
static uint64_t populated_target(uint64_t last)
{
	return rrc_s->pstore.used + 2 * last + PAUSE_RESERVE_MIN;
}

/* Populated store pages beyond those used: for twice the pages the last
 * scan found (or the last pause copied). */
static void reserve(uint64_t found)
{
	struct rrc_pstore *ps = &rrc_s->pstore;
	uint64_t want = populated_target(found > ps->last_pause_pages ? found : ps->last_pause_pages);
	if (want > ps->cap)
		want = ps->cap;
	if (want > ps->populated) {
		rrc_sys_madvise(ps->pages + ps->populated * RRC_PAGE_SIZE,
				(want - ps->populated) * RRC_PAGE_SIZE, MADV_POPULATE_WRITE);
		ps->populated = want;
	}
}

/* Before the pause of a copy snapshot. 0, or -1 with the error set; after
 * a failure the write-protection may have been re-armed over pages that
 * are in no image, so the caller makes the next dump full. */
int rrc_precopy(int full)
{
	struct rrc_pstore *ps = &rrc_s->pstore;
	uint64_t t0 = rrc_mono_ns();
	long r = store_map();
	if (r < 0) {
		rrc_set_err(RRC_ERR_SNAPSHOT, (int)-r, "copy snapshot: cannot map the page store", -1, 0);
		return -1;
	}
	if (ps->mem_fd <= 0) {
		long fd = rrc_sys_openat(-100, "/proc/self/mem", O_RDONLY | O_CLOEXEC, 0);
		if (fd < 0) {
			rrc_set_err(RRC_ERR_SNAPSHOT, (int)-fd, "copy snapshot: cannot open /proc/self/mem", -1, 0);
			return -1;
		}
		ps->mem_fd = rrc_fd_high((int)fd);
	}
	ps->used = ps->nr_runs = 0;
	ps->nr_missed = 0;
	ps->precopy_pages = ps->copy_pages = 0;
	ps->passes = 0;
	/* VMAs created since the last dump are tracked from here on: their
	 * pages are reported written by the next scan */
	rrc_register_all(0);
	/* A full image needs its first pass: it copies every present page.
	 * Passes stop when one finds few pages. An application writing as
	 * fast as the passes copy (redis rehashing a dict) gets more passes,
	 * within a time budget, rather than a pause that copies it all. */
	int max = rrc_g.precopy_passes > 0 || !full ? rrc_g.precopy_passes : 1;
	for (int pass = 0;; pass++) {
		int extra = pass >= max;
		if (extra && (pass >= PRECOPY_EXTRA * max || rrc_mono_ns() - t0 > PRECOPY_BUDGET_NS))
			break;
		long found = precopy_pass(full && pass == 0);
		if (found < 0)
			return -1;
		ps->passes++;
		/* the pause's copies go into populated pages: about twice what
		 * this pass found, since the pause finds what is written after */
		reserve((uint64_t)found);
		if (found < PRECOPY_ENOUGH)
			break;
	}
	ps->precopy_pages = ps->used;
	ps->nr_wide = 0;
	if (!full && ps->defined_valid && wide_ranges() < 0)
		ps->defined_valid = 0; /* too many: this dump scans for present pages */
	ps->precopy_ns = rrc_mono_ns() - t0;
	return 0;
}

/* ---- the pause: ASYNC-SIGNAL-SAFE from here ---- */

/* Copies [a, b) of the parked application into the store: directly if
 * readable, else through /proc/self/mem, which reads past the protection
 * (the pages of a PROT_NONE VMA are part of the image too). */
int rrc_pstore_put(uint64_t a, uint64_t b, int readable)
{
	struct rrc_pstore *ps = &rrc_s->pstore;
	uint64_t n = (b - a) / RRC_PAGE_SIZE;
	if (!n)
		return 0;
	if (room(n) < 0)
		return -1;
	uint8_t *dst = ps->pages + ps->used * RRC_PAGE_SIZE;
	if (readable) {
		rrc_memcpy(dst, (const void *)a, n * RRC_PAGE_SIZE);
	} else {
		uint64_t done = 0;
		while (done < n * RRC_PAGE_SIZE) {
			long r = rrc_sys_pread(ps->mem_fd, dst + done, n * RRC_PAGE_SIZE - done, (long)(a + done));
			if (r == -EINTR)
				continue;
			if (r <= 0) {
				rrc_set_err(RRC_ERR_SNAPSHOT, r < 0 ? (int)-r : EIO,
					    "copy snapshot: cannot read an unreadable VMA through /proc/self/mem", -1, 0);
				return -1;
			}
			done += (uint64_t)r;
		}
	}
	add_run(a, n);
	ps->copy_pages += n;
	if (ps->used > ps->populated)
		ps->populated = ps->used;
	return 0;
}

/* After the image is written (or the dump failed): pages beyond what this
 * dump used go back to the system; the rest stays populated for the next
 * pause. Not in the pause. */
void rrc_pstore_done(int ok)
{
	struct rrc_pstore *ps = &rrc_s->pstore;
	if (!ps->map)
		return;
	/* the writer left this image's defined ranges in the other buffer
	 * (nr_defined = ~0: they did not fit). Carrying them over means
	 * scanning for holes, which arms them (uffd-wp markers): only when a
	 * later presence scan can tell a marker from a swapped page
	 * (memory.c, rrc_marker_learn; not without CAP_SYS_ADMIN). */
	ps->defined_valid = ok && ps->nr_defined[ps->cur ^ 1] != ~0ull && rrc_g.marker_frame;
	if (ps->defined_valid)
		ps->cur ^= 1;
	ps->last_pause_pages = ps->copy_pages;
	uint64_t keep = populated_target(ps->last_pause_pages);
	if (keep < ps->populated) {
		rrc_sys_madvise(ps->pages + keep * RRC_PAGE_SIZE, (ps->populated - keep) * RRC_PAGE_SIZE,
				MADV_DONTNEED);
		ps->populated = keep;
	}
}

/* A fork snapshot re-armed pages whose defined state only its child saw. */
void rrc_pstore_forget(void)
{
	rrc_s->pstore.defined_valid = 0;
}
