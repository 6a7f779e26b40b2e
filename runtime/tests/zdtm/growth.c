/* zdtm: brk and stack keep growing after a restore.
 *
 * Before "ready": the heap is grown with sbrk by 8 MiB and filled with a
 * pattern (and rewritten page by page between dumps); malloc'd blocks of
 * several sizes hold patterns; the main thread's stack is used 256 KiB
 * deep once and unwound (so [stack] is larger than its current use).
 *
 * After "verify" appears (that is, in the restored process):
 *   - sbrk(0) must be where it was, the sbrk'd and malloc'd data intact;
 *   - brk grows by 32 MiB (written, read back), shrinks by 16 MiB and grows
 *     again: the re-grown pages must be zero;
 *   - recursion with alloca(64 KiB) per frame, 96 frames (6 MiB, beyond
 *     anything used before the dump): [stack] must grow, as MAP_GROWSDOWN
 *     does, and every frame's buffer must survive until its unwind;
 *   - a 64 MiB malloc (mmap'd by glibc) and many small ones work.
 */
#include <alloca.h>
#include <sys/mman.h>
#include "zdtm.h"

#define PG 4096ul
#define HEAP0 (8ul << 20)

static uint8_t *heap0;  /* start of our sbrk'd region */
static void *brk_at_ready;
static void *blocks[8];
static const size_t block_size[8] = { 24, 200, 4000, 70000, 300000, 1 << 20, 17, 5000000 };

static unsigned long stack_vma_start(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	zdtm_check(f != NULL, "open /proc/self/maps");
	char line[512];
	unsigned long s = 0, e;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "[stack]")) {
			sscanf(line, "%lx-%lx", &s, &e);
			break;
		}
	fclose(f);
	return s;
}

static long deep(int depth, int max, size_t chunk)
{
	uint8_t *buf = alloca(chunk);
	zdtm_fill(buf, chunk, 0x57ac0000ull + (uint64_t)depth, 1);
	long below = depth + 1 < max ? deep(depth + 1, max, chunk) : 0;
	if (below < 0)
		return below;
	long w = zdtm_cmp_fill(buf, chunk, 0x57ac0000ull + (uint64_t)depth, 1);
	if (w >= 0)
		zdtm_fail("stack frame %d: alloca buffer word %ld changed", depth, w);
	return below + 1;
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	heap0 = sbrk((intptr_t)HEAP0);
	zdtm_check(heap0 != (void *)-1, "sbrk 8 MiB");
	const unsigned long npages = HEAP0 / PG;
	for (unsigned long p = 0; p < npages; p++)
		zdtm_fill(heap0 + p * PG, PG, 0xbe00000ull + p, 0);
	for (int i = 0; i < 8; i++) {
		blocks[i] = malloc(block_size[i]);
		zdtm_check(blocks[i] != NULL, "malloc");
		zdtm_fill(blocks[i], block_size[i] & ~7ul, 0xb10c0000ull + (uint64_t)i, 3);
	}
	zdtm_check(deep(0, 4, 64 << 10) == 4, "stack use before ready");
	unsigned long stack_before = stack_vma_start();
	zdtm_ready();
	/* after every malloc of the set-up (stdio's buffers included) */
	brk_at_ready = sbrk(0);

	long r = 1, R = 0;
	while (!zdtm_should_verify()) {
		unsigned long p = (unsigned long)r % npages;
		zdtm_fill(heap0 + p * PG, PG, 0xbe00000ull + p, (uint64_t)r);
		R = r++;
		if (r % 64 == 0)
			zdtm_sleep_ms(1);
	}
	if (zdtm_corrupt)
		heap0[5 * PG + 9] ^= 0x10;

	/* brk and old heap contents */
	if (sbrk(0) != brk_at_ready)
		zdtm_fail("brk is %p, was %p before the dump", sbrk(0), brk_at_ready);
	for (unsigned long p = 0; p < npages; p++) {
		long lr = zdtm_last_round_congruent(R, (long)p, (long)npages);
		long w = zdtm_cmp_fill(heap0 + p * PG, PG, 0xbe00000ull + p, (uint64_t)(lr < 0 ? 0 : lr));
		if (w >= 0)
			zdtm_fail("sbrk'd heap page %lu word %ld differs (expected round %ld data)", p, w, lr < 0 ? 0 : lr);
	}
	for (int i = 0; i < 8; i++)
		if (zdtm_cmp_fill(blocks[i], block_size[i] & ~7ul, 0xb10c0000ull + (uint64_t)i, 3) >= 0)
			zdtm_fail("malloc'd block %d (%zu bytes) changed", i, block_size[i]);

	/* brk growth, shrink, regrowth */
	uint8_t *more = sbrk(32 << 20);
	if (more == (void *)-1)
		zdtm_fail("sbrk(+32 MiB) after restore: %s", strerror(errno));
	for (unsigned long off = 0; off < (32ul << 20); off += PG)
		zdtm_fill(more + off, PG, 0x6e00000ull + off / PG, 9);
	for (unsigned long off = 0; off < (32ul << 20); off += PG)
		if (zdtm_cmp_fill(more + off, PG, 0x6e00000ull + off / PG, 9) >= 0)
			zdtm_fail("brk growth: page at +%lu reads back wrong", off);
	zdtm_check(sbrk(-(16 << 20)) != (void *)-1, "sbrk(-16 MiB)");
	uint8_t *again = sbrk(16 << 20);
	zdtm_check(again != (void *)-1, "sbrk(+16 MiB) again");
	for (unsigned long off = 0; off < (16ul << 20); off += 8)
		if (*(uint64_t *)(again + off) != 0)
			zdtm_fail("brk regrowth: byte at +%lu not zero", off);

	/* stack growth beyond anything used before the dump */
	long frames = deep(0, 96, 64 << 10);
	if (frames != 96)
		zdtm_fail("deep recursion returned %ld frames", frames);
	unsigned long stack_after = stack_vma_start();
	if (!stack_after || stack_after >= stack_before)
		zdtm_fail("[stack] did not grow down: start %#lx, was %#lx", stack_after, stack_before);

	/* malloc still works, large (mmap'd by glibc) and small */
	uint8_t *big = malloc(64 << 20);
	zdtm_check(big != NULL, "malloc 64 MiB");
	memset(big, 0xa5, 64 << 20);
	for (unsigned long off = 0; off < (64ul << 20); off += PG)
		if (big[off] != 0xa5)
			zdtm_fail("malloc'd 64 MiB block reads back wrong at %lu", off);
	free(big);
	for (int i = 0; i < 10000; i++) {
		char *s = malloc((size_t)(i % 500) + 1);
		zdtm_check(s != NULL, "malloc small");
		s[0] = (char)i;
		free(s);
	}
	printf("growth: stack %#lx -> %#lx, brk %p\n", stack_before, stack_after, sbrk(0));
	zdtm_pass();
}
