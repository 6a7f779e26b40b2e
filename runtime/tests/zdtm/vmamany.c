/* zdtm: more VMAs than the snapshot lists used to hold (65536).
 *
 * One region of N pages (argv[1], default 70000) is cut into N VMAs by
 * giving every other page another protection (read-write, read-only,
 * read-write...): neighbours with different protections never merge.
 * Every 64th page holds data of its own (written before its protection
 * was set); every other page was never touched. The process needs
 * vm.max_map_count above N (tests/test_zdtm.py raises it for the test).
 *
 * Verify: the region is still N VMAs with the same protections, in
 * /proc/self/maps, and every page holds what it held (data or zero).
 * ZDTM_CORRUPT=1 makes one read-only page read-write first: it merges
 * with its two neighbours, which the count of VMAs shows.
 *
 * ZDTM_VMAMANY_WAIT=1: the setup waits for $ZDTM_DIR/go (the test raises
 * vm.max_map_count only after the library has started).
 */
#include <sys/mman.h>
#include "zdtm.h"

#define PAGE 4096ul

static uint8_t *region;
static long npages;

static int writable(long i)
{
	return i % 2 == 0;
}

static uint64_t word(long i)
{
	return 0x766d616d616e7900ull ^ ((uint64_t)i * 0x9e3779b97f4a7c15ull);
}

/* The VMAs inside the region, with their protections checked. */
static long count_vmas(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	zdtm_check(f != NULL, "open /proc/self/maps");
	char line[512];
	long n = 0;
	uintptr_t lo = (uintptr_t)region, hi = lo + npages * PAGE;
	while (fgets(line, sizeof line, f)) {
		unsigned long a, b;
		char perms[5];
		if (sscanf(line, "%lx-%lx %4s", &a, &b, perms) != 3 || a < lo || b > hi)
			continue;
		long first = (long)((a - lo) / PAGE);
		int rw = perms[0] == 'r' && perms[1] == 'w';
		if (rw != writable(first) || perms[0] != 'r')
			zdtm_fail("page %ld: VMA %lx-%lx is %s", first, a, b, perms);
		n++;
	}
	fclose(f);
	return n;
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	npages = argc > 1 ? atol(argv[1]) : 70000;
	if (getenv("ZDTM_VMAMANY_WAIT"))
		while (!zdtm_file_exists("go"))
			zdtm_sleep_ms(5);
	region = mmap(NULL, npages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	zdtm_check(region != MAP_FAILED, "mmap the region");
	for (long i = 0; i < npages; i += 64) {
		memcpy(region + i * PAGE, &(uint64_t){ word(i) }, 8);
		memcpy(region + i * PAGE + PAGE - 8, &(uint64_t){ ~word(i) }, 8);
	}
	for (long i = 1; i < npages; i += 2)
		if (mprotect(region + i * PAGE, PAGE, PROT_READ)) {
			zdtm_fail("mprotect page %ld of %ld: %s (vm.max_map_count too low?)", i, npages, strerror(errno));
		}
	long n = count_vmas();
	if (n != npages)
		zdtm_fail("the region is %ld VMAs after setup, not %ld", n, npages);

	zdtm_ready();
	zdtm_wait_verify();

	if (zdtm_corrupt)
		zdtm_check(mprotect(region + PAGE, PAGE, PROT_READ | PROT_WRITE) == 0, "corrupt");
	n = count_vmas();
	if (n != npages)
		zdtm_fail("the region is %ld VMAs, not %ld", n, npages);
	for (long i = 0; i < npages; i++) {
		uint64_t a, b;
		memcpy(&a, region + i * PAGE, 8);
		memcpy(&b, region + i * PAGE + PAGE - 8, 8);
		uint64_t wa = i % 64 == 0 ? word(i) : 0, wb = i % 64 == 0 ? ~word(i) : 0;
		if (a != wa || b != wb)
			zdtm_fail("page %ld holds %016llx..%016llx, not %016llx..%016llx", i,
				  (unsigned long long)a, (unsigned long long)b, (unsigned long long)wa, (unsigned long long)wb);
	}
	zdtm_pass();
}
