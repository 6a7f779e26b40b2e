/* zdtm: memory that changes shape between dumps, every way a page can stop
 * or start being defined.
 *
 * Every millisecond, round r does (all deterministic in r):
 *   - page r % 64 of a 64-page anonymous region is written (data of round r);
 *   - r % 4 == 1: page (r + 17) % 64 is dropped with MADV_DONTNEED, then read
 *     (the zero page gets mapped);
 *   - r % 4 == 3: page (r + 33) % 64 is freed with MADV_FREE and reclaimed at
 *     once with MADV_PAGEOUT (what memory pressure would do later), then read
 *     (zero; or, when the kernel kept the page -- it does while a fork
 *     snapshot shares it -- the old data, then cleared by hand);
 *   - r % 16 == 0: a 4-page mapping is moved with mremap to the other of two
 *     fixed places and its first page rewritten; the place it left is
 *     reserved again (PROT_NONE, so that the mmap below cannot land there);
 *   - r % 8 == 4: a 2-page mapping is unmapped and a new one mapped wherever
 *     the kernel puts it, filled with data of round r;
 *   - the last page of the user address space (mapped there at start) is
 *     rewritten: ranges computed around it must not run past the end.
 * Beside the rounds, a thread replaces a read-only private mapping of one
 * file page at a fixed place by one of the next of NFILES files every
 * ~50 us (the same bounds, another file: a name the copy snapshot read just
 * before its pause must not be taken for the file mapped at the pause).
 * Before each replacement it checks that the page is the file it mapped
 * last; after a restore, the first check is of the restored mapping.
 * The state after round R is a pure function of R: the verifier recomputes
 * it. A dropped page that comes back with data, a moved page lost or left
 * behind, a stale mapping resurrected: each is a FAIL naming the page.
 */
#include <pthread.h>
#include <sys/mman.h>
#include "zdtm.h"

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif

#define PAGE   4096ul
#define NPAGES 64l

static uint8_t *region;                /* 64 pages */
static uint8_t *place[2];              /* the moving mapping's two places */
static uint8_t *fresh;                 /* the remapped 2-page mapping */
static uint8_t *top;                   /* the last user page */
static uint8_t *filepage;              /* the file page mapped in turn */
#define NFILES 7
static int files[NFILES];
static volatile long file_mapped;      /* the file the page maps */
static volatile int file_stop, file_wrong = -1; /* file_wrong: the file found instead */
#define TOP_PAGE 0x7fffffffe000ul

/* The last round <= R that did something to page p of the region:
 * > 0 a write in that round, < 0 a drop in round -result, 0 nothing. */
static long last_event(long R, long p)
{
	for (long r = R; r >= 1 && r > R - 4 * NPAGES; r--) {
		if (r % 4 == 1 && (r + 17) % NPAGES == p)
			return -r; /* dropped after the write of the same round */
		if (r % 4 == 3 && (r + 33) % NPAGES == p)
			return -r;
		if (r % NPAGES == p)
			return r;
	}
	return 0;
}

static int is_zero(const uint8_t *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (p[i])
			return 0;
	return 1;
}

static void round_step(long r)
{
	zdtm_fill(region + (size_t)(r % NPAGES) * PAGE, PAGE, (uint64_t)(r % NPAGES), (uint64_t)r);
	if (r % 4 == 1 || r % 4 == 3) {
		uint8_t *pg = region + (size_t)((r + (r % 4 == 1 ? 17 : 33)) % NPAGES) * PAGE;
		if (r % 4 == 1) {
			zdtm_check(madvise(pg, PAGE, MADV_DONTNEED) == 0, "madvise(MADV_DONTNEED)");
		} else {
			zdtm_check(madvise(pg, PAGE, MADV_FREE) == 0, "madvise(MADV_FREE)");
			zdtm_check(madvise(pg, PAGE, MADV_PAGEOUT) == 0, "madvise(MADV_PAGEOUT)");
		}
		if (r % 4 == 1)
			zdtm_check(*(volatile uint64_t *)pg == 0, "a page dropped with MADV_DONTNEED reads back as zero");
		else if (!is_zero(pg, PAGE))
			memset(pg, 0, PAGE); /* not reclaimed */
	}
	if (r % 16 == 0) {
		long gen = r / 16;
		uint8_t *from = place[(gen - 1) % 2], *to = place[gen % 2];
		zdtm_check(mremap(from, 4 * PAGE, 4 * PAGE, MREMAP_MAYMOVE | MREMAP_FIXED, to) == to, "mremap");
		zdtm_check(mmap(from, 4 * PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == from,
			   "mmap PROT_NONE over the place left");
		zdtm_fill(to, PAGE, 1000, (uint64_t)gen);
	}
	zdtm_fill(top, PAGE, 3000, (uint64_t)r);
	if (r % 8 == 4) {
		zdtm_check(munmap(fresh, 2 * PAGE) == 0, "munmap");
		fresh = mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		zdtm_check(fresh != MAP_FAILED, "mmap");
		zdtm_fill(fresh, 2 * PAGE, 2000, (uint64_t)r);
	}
}

static void *file_swapper(void *arg)
{
	(void)arg;
	while (!file_stop) {
		long k = file_mapped;
		if (zdtm_cmp_fill(filepage, PAGE, (uint64_t)(4000 + k), 0) >= 0 && file_wrong < 0)
			file_wrong = (int)k;
		k = (k + 1) % NFILES;
		if (mmap(filepage, PAGE, PROT_READ, MAP_PRIVATE | MAP_FIXED, files[k], 0) != filepage)
			abort();
		file_mapped = k;
		struct timespec ts = { 0, 50000 };
		nanosleep(&ts, NULL);
	}
	return NULL;
}

static void verify(long R)
{
	for (long p = 0; p < NPAGES; p++) {
		const uint8_t *pg = region + (size_t)p * PAGE;
		long e = last_event(R, p);
		if (e <= 0) {
			if (!is_zero(pg, PAGE))
				zdtm_fail("region page %ld is not zero after round %ld (%s in round %ld)", p, R,
					  e ? "dropped" : "never written", -e);
		} else if (zdtm_cmp_fill(pg, PAGE, (uint64_t)p, (uint64_t)e) >= 0) {
			zdtm_fail("region page %ld does not hold the data of round %ld (after round %ld)", p, e, R);
		}
	}
	long gen = R / 16;
	uint8_t *here = place[gen % 2], *gone = place[(gen + 1) % 2];
	unsigned char vec[4];
	zdtm_check(mincore(gone, 4 * PAGE, vec) == 0, "mincore of the place left");
	if ((vec[0] | vec[1] | vec[2] | vec[3]) & 1)
		zdtm_fail("the place the mapping moved away from (generation %ld) has pages", gen);
	if (zdtm_cmp_fill(here, PAGE, 1000, (uint64_t)gen) >= 0)
		zdtm_fail("the moved mapping's first page is not of generation %ld", gen);
	for (long i = 1; i < 4; i++)
		if (zdtm_cmp_fill(here + i * PAGE, PAGE, (uint64_t)(1000 + i), 0) >= 0)
			zdtm_fail("page %ld of the moved mapping lost its data (generation %ld)", i, gen);
	long rf = R >= 4 ? R - ((R - 4) % 8) : 0;
	if (zdtm_cmp_fill(fresh, 2 * PAGE, 2000, (uint64_t)rf) >= 0)
		zdtm_fail("the remapped mapping does not hold the data of round %ld", rf);
	if (zdtm_cmp_fill(top, PAGE, 3000, (uint64_t)R) >= 0)
		zdtm_fail("the last user page does not hold the data of round %ld", R);
	if (file_wrong >= 0)
		zdtm_fail("the file page mapped file %ld held another file's data", (long)file_wrong);
	if (zdtm_cmp_fill(filepage, PAGE, (uint64_t)(4000 + file_mapped), 0) >= 0)
		zdtm_fail("the file page is not file %ld's", (long)file_mapped);
	printf("vmachurn: verified after round %ld\n", R);
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	region = mmap(NULL, NPAGES * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	zdtm_check(region != MAP_FAILED, "mmap region");
	madvise(region, NPAGES * PAGE, MADV_NOHUGEPAGE);
	place[0] = mmap(NULL, 8 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	zdtm_check(place[0] != MAP_FAILED, "mmap places");
	place[1] = place[0] + 4 * PAGE;
	zdtm_check(mprotect(place[1], 4 * PAGE, PROT_NONE) == 0, "mprotect place 1");
	zdtm_fill(place[0], PAGE, 1000, 0);
	for (long i = 1; i < 4; i++)
		zdtm_fill(place[0] + i * PAGE, PAGE, (uint64_t)(1000 + i), 0);
	fresh = mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	zdtm_check(fresh != MAP_FAILED, "mmap fresh");
	zdtm_fill(fresh, 2 * PAGE, 2000, 0);
	top = mmap((void *)TOP_PAGE, PAGE, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	zdtm_check(top == (uint8_t *)TOP_PAGE, "mmap of the last user page");
	zdtm_fill(top, PAGE, 3000, 0);
	for (long k = 0; k < NFILES; k++) {
		char path[PATH_MAX], name[32];
		uint8_t data[PAGE];
		snprintf(name, sizeof(name), "vmachurn-%ld.dat", k);
		zdtm_path(path, sizeof(path), name);
		files[k] = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
		zdtm_fill(data, PAGE, (uint64_t)(4000 + k), 0);
		zdtm_check(files[k] >= 0 && write(files[k], data, PAGE) == (ssize_t)PAGE, "write a file of the file page");
	}
	filepage = mmap(NULL, PAGE, PROT_READ, MAP_PRIVATE, files[0], 0);
	zdtm_check(filepage != MAP_FAILED, "mmap of the file page");
	pthread_t swapper;
	zdtm_check(pthread_create(&swapper, NULL, file_swapper, NULL) == 0, "pthread_create");
	zdtm_ready();

	long R = zdtm_rounds(round_step, 1);
	file_stop = 1;
	pthread_join(swapper, NULL);
	if (zdtm_corrupt) /* one byte of the page the last round wrote */
		region[(size_t)(R % NPAGES) * PAGE + 5] ^= 1;
	verify(R);
	zdtm_pass();
}
