/* zdtm: large, sparse anonymous memory written heavily between dumps.
 *
 * A 1 GiB private anonymous mapping, cut into 4096 blocks of 64 pages.
 * Only 512 blocks ("slots") are ever written; the rest must stay zero and
 * non-resident (a restore must not populate what was never defined).
 *
 *   round 0 (set-up): slots 0..255 written (64 MiB);
 *   round r >= 1:     slot r % 512 rewritten whole, and when r % 3 == 0
 *                     the first half of slot (r + 128) % 512 is dropped
 *                     with MADV_DONTNEED (it must then read back as zero,
 *                     the case write-protect tracking alone would miss).
 *
 * A page written in round r holds zdtm_pattern(page, r, word). The state
 * after round R is a pure function of R, so the verifier recomputes every
 * page: a page taken from the wrong image of an incremental chain, a lost
 * page or a resurrected dropped page all show up.
 */
#include <sys/mman.h>
#include "zdtm.h"

#define PAGE        4096ul
#define BLK_PAGES   64ul
#define BLK_BYTES   (BLK_PAGES * PAGE)
#define NBLK        4096ul
#define REGION      (NBLK * BLK_BYTES) /* 1 GiB */
#define NSLOTS      512l
#define ZAP_PAGES   32ul

static uint8_t *region;

static long slot_block(long j) { return (j % 256) * 16 + (j >= 256 ? 8 : 0); }

static long block_slot(long b)
{
	if (b % 16 == 0)
		return b / 16;
	if (b % 16 == 8)
		return 256 + b / 16;
	return -1;
}

/* The last round that wrote slot j: 0 for round 0's, -1 if none. */
static long last_write(long R, long j)
{
	long r = zdtm_last_round_congruent(R, j, NSLOTS);
	if (r >= 1)
		return r;
	return j < 256 ? 0 : -1; /* round 0 wrote slots 0..255 */
}

static long last_zap(long R, long j)
{
	long jz = ((j - 128) % NSLOTS + NSLOTS) % NSLOTS;
	for (long r = zdtm_last_round_congruent(R, jz, NSLOTS); r >= 1; r -= NSLOTS)
		if (r % 3 == 0)
			return r;
	return -1;
}

static void write_slot(long j, long r)
{
	uint8_t *blk = region + (size_t)slot_block(j) * BLK_BYTES;
	uint64_t first = (uint64_t)slot_block(j) * BLK_PAGES;
	for (unsigned long p = 0; p < BLK_PAGES; p++)
		zdtm_fill(blk + p * PAGE, PAGE, first + p, (uint64_t)r);
}

static void round_step(long r)
{
	write_slot(r % NSLOTS, r);
	if (r % 3 == 0) {
		uint8_t *blk = region + (size_t)slot_block((r + 128) % NSLOTS) * BLK_BYTES;
		zdtm_check(madvise(blk, ZAP_PAGES * PAGE, MADV_DONTNEED) == 0, "madvise(MADV_DONTNEED)");
	}
}

static int is_zero(const uint8_t *p, size_t len)
{
	const uint64_t *w = (const uint64_t *)p;
	for (size_t i = 0; i < len / 8; i++)
		if (w[i])
			return 0;
	return 1;
}

static void verify(long R)
{
	static unsigned char vec[BLK_PAGES];
	/* Never-written blocks must not be resident: check before reading. */
	unsigned long resident = 0;
	for (unsigned long b = 0; b < NBLK; b++) {
		if (block_slot((long)b) >= 0)
			continue;
		zdtm_check(mincore(region + b * BLK_BYTES, BLK_BYTES, vec) == 0, "mincore");
		for (unsigned long i = 0; i < BLK_PAGES; i++)
			resident += vec[i] & 1;
	}
	if (resident)
		zdtm_fail("%lu pages of never-written blocks are resident (sparse memory populated)", resident);

	unsigned long checked = 0;
	for (unsigned long b = 0; b < NBLK; b++) {
		long j = block_slot((long)b);
		uint8_t *blk = region + b * BLK_BYTES;
		if (j < 0) {
			if (!is_zero(blk, BLK_BYTES))
				zdtm_fail("block %lu (never written) is not zero", b);
			continue;
		}
		long lw = last_write(R, j), lz = last_zap(R, j);
		for (unsigned long p = 0; p < BLK_PAGES; p++) {
			uint8_t *pg = blk + p * PAGE;
			uint64_t page_no = b * BLK_PAGES + p;
			int zapped = p < ZAP_PAGES && lz > lw;
			if (lw < 0 || zapped) {
				if (!is_zero(pg, PAGE))
					zdtm_fail("page %lu (block %lu slot %ld) should be zero after round %ld "
						  "(last write %ld, last MADV_DONTNEED %ld)", page_no, b, j, R, lw, lz);
				continue;
			}
			long w = zdtm_cmp_fill(pg, PAGE, page_no, (uint64_t)lw);
			if (w >= 0) {
				const uint64_t *words = (const uint64_t *)pg;
				long found = -1; /* which round's data is it, if any? */
				for (long r = R; r >= 0 && r > R - 4096; r--)
					if (words[w] == zdtm_pattern(page_no, (uint64_t)r, (uint64_t)w)) {
						found = r;
						break;
					}
				zdtm_fail("page %lu (block %lu slot %ld) word %ld differs after round %ld: "
					  "expected data of round %ld, found %s%ld", page_no, b, j, w, R, lw,
					  found >= 0 ? "data of round " : "unknown data ",
					  found >= 0 ? found : (long)words[w]);
			}
			checked++;
		}
	}
	printf("bigmem: %lu pages verified after round %ld\n", checked, R);
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	region = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	zdtm_check(region != MAP_FAILED, "mmap 1 GiB");
	/* No transparent huge pages: they would make a whole 2 MiB resident
	 * for one written byte and blur "sparse". */
	madvise(region, REGION, MADV_NOHUGEPAGE);

	for (long j = 0; j < 256; j++)
		write_slot(j, 0);
	zdtm_ready();

	/* 256 KiB every 20 ms: the whole live set (64 MiB) is rewritten only
	 * after ~5 s, so an incremental image between two dumps a fraction of
	 * a second apart must be much smaller than the full. */
	long R = zdtm_rounds(round_step, 20);
	if (zdtm_corrupt) {
		/* a slot written in round 0 or long ago: one byte changed */
		region[(size_t)slot_block(100) * BLK_BYTES + 5 * PAGE + 777] ^= 0x40;
	}
	verify(R);
	zdtm_pass();
}
