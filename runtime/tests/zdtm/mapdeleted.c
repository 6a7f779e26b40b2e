/* zdtm: mappings of files deleted since they were mapped (issue 16 §1, §4;
 * runtime/lib/maps-deleted.c), as an upgrade leaves a running server:
 *   D   $ZDTM_DIR/mapdeleted.dat, 6 pages and 100 bytes, mapped private
 *       read-write over 7 pages (the last one partly past the file's end);
 *       page 1 written at once; page 3 made PROT_NONE (a split VMA);
 *   M   a memfd of 3 pages mapped private read-only, its fd closed (a
 *       memfd's mapping is always named " (deleted)");
 *   L   a copy of libm in $ZDTM_DIR, dlopen'd (an upgraded library: its
 *       code, read-only data, relro and the loader's PROT_NONE gaps).
 * Steps (a dump after each): 0 as set up, D and L still on disk; 1 D and
 * L deleted (the dump that first finds them gone must carry every page);
 * 2 page 2 of D written (an incremental of the copy); 3 nothing.
 * Verify: every byte of D (the file's, the writes of steps 0 and 2, page 3
 * made readable again, zeros past the file's end in the last page), every
 * byte of M, and L's cos() against the linked libm's for a few values;
 * then a write to a page of D never written.
 */
#include <dlfcn.h>
#include <math.h>
#include <sys/mman.h>
#include "zdtm.h"

#define PG 4096ul
#define D_SIZE (6 * PG + 100)
#define D_PAGES 7ul
#define M_PAGES 3ul

static uint8_t *D, *M;
static double (*lcos)(double);
static char dpath[PATH_MAX], lpath[PATH_MAX];

static uint8_t dpat(size_t i) { return (uint8_t)(i * 7 + 3); }
static uint8_t mpat(size_t i) { return (uint8_t)(i * 11 + 5); }

static void copy_file(const char *from, const char *to)
{
	int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0755);
	zdtm_check(in >= 0 && out >= 0, "open the library and its copy");
	static char buf[1 << 16];
	ssize_t n;
	while ((n = read(in, buf, sizeof buf)) > 0)
		zdtm_check(write(out, buf, (size_t)n) == n, "write the copy");
	zdtm_check(n == 0, "read the library");
	close(in);
	close(out);
}

static void set_up(void)
{
	snprintf(dpath, sizeof dpath, "%s/mapdeleted.dat", zdtm_dir);
	int fd = open(dpath, O_RDWR | O_CREAT | O_TRUNC, 0644);
	zdtm_check(fd >= 0, "open the data file");
	static uint8_t buf[D_SIZE];
	for (size_t i = 0; i < D_SIZE; i++)
		buf[i] = dpat(i);
	zdtm_check(write(fd, buf, D_SIZE) == (ssize_t)D_SIZE, "write the data file");
	D = mmap(NULL, D_PAGES * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	zdtm_check(D != MAP_FAILED, "mmap the data file");
	close(fd);
	zdtm_fill(D + PG, PG, 0xd1, 0);
	zdtm_check(mprotect(D + 3 * PG, PG, PROT_NONE) == 0, "mprotect page 3");

	int m = memfd_create("mapdeleted", 0);
	zdtm_check(m >= 0, "memfd_create");
	static uint8_t mbuf[M_PAGES * PG];
	for (size_t i = 0; i < sizeof mbuf; i++)
		mbuf[i] = mpat(i);
	zdtm_check(write(m, mbuf, sizeof mbuf) == (ssize_t)sizeof mbuf, "write the memfd");
	M = mmap(NULL, sizeof mbuf, PROT_READ, MAP_PRIVATE, m, 0);
	zdtm_check(M != MAP_FAILED, "mmap the memfd");
	close(m);

	Dl_info info;
	zdtm_check(dladdr((void *)cos, &info) && info.dli_fname && info.dli_fname[0] == '/', "dladdr(cos)");
	snprintf(lpath, sizeof lpath, "%s/libm-copy.so", zdtm_dir);
	copy_file(info.dli_fname, lpath);
	void *h = dlopen(lpath, RTLD_NOW | RTLD_LOCAL);
	zdtm_check(h != NULL, "dlopen the copy of libm");
	lcos = (double (*)(double))dlsym(h, "cos");
	zdtm_check(lcos != NULL && (void *)lcos != (void *)cos, "cos from the copy");
}

static void verify(unsigned step)
{
	if (zdtm_corrupt)
		D[5 * PG + 17] ^= 1;
	zdtm_check(mprotect(D + 3 * PG, PG, PROT_READ | PROT_WRITE) == 0, "mprotect page 3 back");
	for (size_t p = 0; p < D_PAGES; p++) {
		const uint8_t *pg = D + p * PG;
		long w;
		if (p == 1 && (w = zdtm_cmp_fill(pg, PG, 0xd1, 0)) >= 0)
			zdtm_fail("D page 1: word %ld is not the write of step 0", w);
		if (p == 2 && step >= 2 && (w = zdtm_cmp_fill(pg, PG, 0xd2, 2)) >= 0)
			zdtm_fail("D page 2: word %ld is not the write of step 2", w);
		if (p == 1 || (p == 2 && step >= 2))
			continue;
		for (size_t i = 0; i < PG; i++) {
			size_t off = p * PG + i;
			uint8_t want = off < D_SIZE ? dpat(off) : 0;
			if (pg[i] != want)
				zdtm_fail("D page %zu byte %zu: %#x, not %#x%s", p, i, pg[i], want,
					  off < D_SIZE ? " (the file's)" : " (past the file's end)");
		}
	}
	for (size_t i = 0; i < M_PAGES * PG; i++)
		if (M[i] != mpat(i))
			zdtm_fail("M byte %zu: %#x, not %#x", i, M[i], mpat(i));
	for (double x = -3; x < 3; x += 0.37) {
		double a = lcos(x), b = cos(x);
		if (memcmp(&a, &b, sizeof a))
			zdtm_fail("cos(%g) of the deleted copy of libm is %a, the linked one's %a", x, a, b);
	}
	/* still private memory: a write to a page never written */
	uint8_t want = 0x5a;
	D[4 * PG] = want;
	zdtm_check(D[4 * PG] == want && D[4 * PG + 1] == dpat(4 * PG + 1), "write to page 4");
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	set_up();
	unsigned step = 0;
	for (;; step++) {
		if (step == 1)
			zdtm_check(unlink(dpath) == 0 && unlink(lpath) == 0, "delete the data file and the library");
		else if (step == 2)
			zdtm_fill(D + 2 * PG, PG, 0xd2, 2);
		if (zdtm_step_done(step))
			break;
	}
	verify(step);
	printf("mapdeleted: verified after step %u\n", step);
	zdtm_pass();
	return 0;
}
