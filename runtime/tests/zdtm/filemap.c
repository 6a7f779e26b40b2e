/* zdtm: private file mappings, written pages and unwritten ones.
 *
 * A 64-page file $ZDTM_DIR/filemap.dat is mapped three times, MAP_PRIVATE
 * (the fd is closed afterwards: only the mappings hold the file):
 *   A: whole file, read-write. Pages 0..15 written (copied on write) and
 *      rewritten between dumps, page k in every round r == k (mod 16);
 *      pages 16..31 only read (page cache, never copied); pages 32..39
 *      written in round r == k (mod 8) and, for even k, dropped again with
 *      MADV_DONTNEED (they must read back as the file's data); 40..63
 *      never touched.
 *   B: file pages 16..47, read-only.
 *   C: file pages 8..23, read-write, its first page written, then its
 *      first half made read-only with mprotect (a split VMA).
 * The file itself must never change: private writes do not reach it.
 *
 * Verify: every page of A, B and C against the file's data or the pattern
 * of the round that last wrote it, protections (from /proc/self/maps) and
 * the mapped file's identity; then copy-on-write must still work on a page
 * never touched before.
 */
#include <sys/mman.h>
#include "zdtm.h"

#define PG 4096ul
#define NPAGES 64ul
#define A_TAG 0xa000ull
#define C_TAG 0xc000ull

static uint8_t *A, *B, *C;
static char fpath[PATH_MAX];
static struct stat fst;

static void file_page(uint8_t *buf, unsigned long p) { zdtm_fill(buf, PG, 0xf11e0000ull + p, 7); }

static void round_step(long r)
{
	long k = r % 16;
	zdtm_fill(A + (unsigned long)k * PG, PG, A_TAG + (uint64_t)k, (uint64_t)r);
	long e = r % 8;
	zdtm_fill(A + (32ul + (unsigned long)e) * PG, PG, A_TAG + 32 + (uint64_t)e, (uint64_t)r);
	if (e % 2 == 0)
		zdtm_check(madvise(A + (32ul + (unsigned long)e) * PG, PG, MADV_DONTNEED) == 0, "madvise");
}

static void expect_file(const uint8_t *pg, unsigned long file_page_no, const char *where)
{
	static uint8_t want[PG];
	file_page(want, file_page_no);
	if (memcmp(pg, want, PG) != 0)
		zdtm_fail("%s: expected the file's data (file page %lu), found other data", where, file_page_no);
}

static void expect_pattern(const uint8_t *pg, uint64_t tag, long round, const char *where)
{
	long w = zdtm_cmp_fill(pg, PG, tag, (uint64_t)round);
	if (w >= 0)
		zdtm_fail("%s: word %ld differs from the data written in round %ld", where, w, round);
}

/* Protection string of the mapping containing addr, from /proc/self/maps. */
static void check_maps(uint8_t *addr, const char *want_perms, const char *what)
{
	FILE *f = fopen("/proc/self/maps", "r");
	zdtm_check(f != NULL, "open /proc/self/maps");
	char line[PATH_MAX + 128];
	while (fgets(line, sizeof(line), f)) {
		unsigned long s, e, off, ino;
		char perms[8], dev[16];
		int pos = 0;
		if (sscanf(line, "%lx-%lx %7s %lx %15s %lu %n", &s, &e, perms, &off, dev, &ino, &pos) < 6)
			continue;
		if ((unsigned long)addr < s || (unsigned long)addr >= e)
			continue;
		fclose(f);
		char *path = line + pos;
		path[strcspn(path, "\n")] = 0;
		if (strcmp(perms, want_perms) != 0)
			zdtm_fail("%s: mapping %lx-%lx has permissions %s, expected %s", what, s, e, perms, want_perms);
		if (ino != fst.st_ino || strcmp(path, fpath) != 0)
			zdtm_fail("%s: mapping %lx-%lx maps '%s' inode %lu, expected '%s' inode %lu", what, s, e,
				  path, ino, fpath, (unsigned long)fst.st_ino);
		return;
	}
	fclose(f);
	zdtm_fail("%s: no mapping at %p", what, (void *)addr);
}

static void verify(long R)
{
	char where[96];
	for (unsigned long p = 0; p < NPAGES; p++) {
		uint8_t *pg = A + p * PG;
		snprintf(where, sizeof(where), "mapping A page %lu", p);
		if (p < 16) {
			long r = zdtm_last_round_congruent(R, (long)p, 16);
			expect_pattern(pg, A_TAG + p, r < 0 ? 0 : r, where);
		} else if (p >= 32 && p < 40) {
			long k = (long)p - 32, r = zdtm_last_round_congruent(R, k, 8);
			if (r < 0 || k % 2 == 0)
				expect_file(pg, p, where);
			else
				expect_pattern(pg, A_TAG + p, r, where);
		} else {
			expect_file(pg, p, where);
		}
	}
	for (unsigned long p = 0; p < 32; p++) {
		snprintf(where, sizeof(where), "mapping B page %lu", p);
		expect_file(B + p * PG, 16 + p, where);
	}
	expect_pattern(C, C_TAG, 0, "mapping C page 0");
	for (unsigned long p = 1; p < 16; p++) {
		snprintf(where, sizeof(where), "mapping C page %lu", p);
		expect_file(C + p * PG, 8 + p, where);
	}
	check_maps(A, "rw-p", "mapping A");
	check_maps(B, "r--p", "mapping B");
	check_maps(C, "r--p", "mapping C (first half)");
	check_maps(C + 8 * PG, "rw-p", "mapping C (second half)");

	/* The file on disk is untouched. */
	int fd = open(fpath, O_RDONLY);
	zdtm_check(fd >= 0, "reopen file");
	static uint8_t buf[PG];
	for (unsigned long p = 0; p < NPAGES; p++) {
		zdtm_check(pread(fd, buf, PG, (off_t)(p * PG)) == (ssize_t)PG, "pread");
		snprintf(where, sizeof(where), "file page %lu on disk", p);
		expect_file(buf, p, where);
	}
	/* Copy-on-write still works on a page never touched before. */
	A[50 * PG + 3] ^= 0xff;
	zdtm_check(pread(fd, buf, PG, 50 * PG) == (ssize_t)PG, "pread");
	expect_file(buf, 50, "file page 50 after a private write");
	close(fd);
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	snprintf(fpath, sizeof(fpath), "%s/filemap.dat", zdtm_dir);
	int fd = open(fpath, O_RDWR | O_CREAT | O_TRUNC, 0644);
	zdtm_check(fd >= 0, "create filemap.dat");
	static uint8_t buf[PG];
	for (unsigned long p = 0; p < NPAGES; p++) {
		file_page(buf, p);
		zdtm_check(write(fd, buf, PG) == (ssize_t)PG, "write file");
	}
	zdtm_check(fsync(fd) == 0 && fstat(fd, &fst) == 0, "fsync/fstat");
	A = mmap(NULL, NPAGES * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	B = mmap(NULL, 32 * PG, PROT_READ, MAP_PRIVATE, fd, 16 * PG);
	C = mmap(NULL, 16 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 8 * PG);
	zdtm_check(A != MAP_FAILED && B != MAP_FAILED && C != MAP_FAILED, "mmap file");
	close(fd);

	for (unsigned long p = 0; p < 16; p++)
		zdtm_fill(A + p * PG, PG, A_TAG + p, 0);
	volatile uint64_t sink = 0;
	for (unsigned long p = 16; p < 32; p++)
		sink += *(volatile uint64_t *)(A + p * PG);
	zdtm_fill(C, PG, C_TAG, 0);
	zdtm_check(mprotect(C, 8 * PG, PROT_READ) == 0, "mprotect");
	(void)sink;
	zdtm_ready();

	long R = zdtm_rounds(round_step, 2);
	if (zdtm_corrupt)
		A[3 * PG + 100] ^= 1;
	verify(R);
	printf("filemap: verified after round %ld\n", R);
	zdtm_pass();
}
