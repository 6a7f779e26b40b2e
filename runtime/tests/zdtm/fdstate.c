/* zdtm: file descriptors of regular files, directories and devices: their
 * numbers, offsets, flags and the files they name.
 *
 *   fd RW   (O_RDWR):   round r writes 32-byte record r at the current
 *                       offset, so after R rounds the offset is 32*R;
 *   fd RO   (O_RDONLY|O_CLOEXEC, moved to fd 100): each round reads 13
 *                       bytes and checks them, wrapping at EOF;
 *   fd APP  (O_WRONLY|O_APPEND): three lines at set-up, one after restore
 *                       that must land at the end;
 *   fd NB   (O_RDONLY|O_NONBLOCK) on the same file as RO, offset 4321;
 *   fd DIR  (O_DIRECTORY): 40 files; part of the entries read with
 *                       getdents64 before the dump, the rest after: no
 *                       entry lost or repeated;
 *   fd 50   /dev/null, O_WRONLY.
 *
 * After a restore the file contents on disk are whatever the original
 * process left (rrc does not roll files back): the verifier accepts records
 * written after the snapshot only where they are the same deterministic
 * records, which is what re-running the same rounds produces.
 */
#include <dirent.h>
#include <sys/sysmacros.h>
#include "zdtm.h"

#define REC 32
#define RO_SIZE 10000
#define NFILES 40

static int fd_rw, fd_ro = 100, fd_app, fd_nb, fd_dir, fd_null = 50;
static char dpath[PATH_MAX / 2];
static struct stat st_rw, st_ro, st_dir;
static long ro_pos;

static void record(char *buf, long r)
{
	char tmp[REC + 1];
	snprintf(tmp, sizeof(tmp), "rec %08ld %016lx..\n", r, (unsigned long)zdtm_mix((uint64_t)r) );
	memcpy(buf, tmp, REC);
}

static uint8_t ro_byte(long i) { return (uint8_t)((i * 7 + 3) & 0xff); }

static void ro_step(const char *when)
{
	uint8_t buf[13];
	ssize_t n = read(fd_ro, buf, sizeof(buf));
	if (n < 0)
		zdtm_fail("%s: read from RO fd: %s", when, strerror(errno));
	for (ssize_t i = 0; i < n; i++)
		if (buf[i] != ro_byte(ro_pos + i))
			zdtm_fail("%s: RO fd read byte %ld = %u, expected %u (offset wrong?)", when,
				  ro_pos + i, buf[i], ro_byte(ro_pos + i));
	ro_pos += n;
	if (n < (ssize_t)sizeof(buf)) {
		zdtm_check(lseek(fd_ro, 0, SEEK_SET) == 0, "lseek RO");
		ro_pos = 0;
	}
}

static void rw_step(long r)
{
	char buf[REC];
	record(buf, r);
	zdtm_check(write(fd_rw, buf, REC) == REC, "write RW");
}

/* names returned by getdents64 into set (bitmap over f00..f39, '.', '..') */
static int dir_read(int fd, size_t bufsz, unsigned long long *seen, int max_calls)
{
	char buf[1024];
	int calls = 0;
	for (; calls < max_calls; calls++) {
		long n = syscall(SYS_getdents64, fd, buf, bufsz);
		if (n < 0)
			zdtm_fail("getdents64: %s", strerror(errno));
		if (n == 0)
			return 0;
		for (long off = 0; off < n;) {
			struct dirent64 *d = (struct dirent64 *)(buf + off);
			int bit;
			if (!strcmp(d->d_name, "."))
				bit = NFILES;
			else if (!strcmp(d->d_name, ".."))
				bit = NFILES + 1;
			else if (d->d_name[0] == 'f' && strlen(d->d_name) == 3)
				bit = atoi(d->d_name + 1);
			else
				zdtm_fail("unexpected directory entry '%s'", d->d_name);
			if (*seen & (1ull << bit))
				zdtm_fail("directory entry '%s' returned twice", d->d_name);
			*seen |= 1ull << bit;
			off += d->d_reclen;
		}
	}
	return 1;
}

static void expect_flags(int fd, int want, const char *what)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0)
		zdtm_fail("%s (fd %d) is not open after restore: %s", what, fd, strerror(errno));
	int mask = O_ACCMODE | O_APPEND | O_NONBLOCK | O_DIRECTORY;
	if ((fl & mask) != (want & mask))
		zdtm_fail("%s (fd %d) has flags %#o, expected %#o", what, fd, fl & mask, want & mask);
}

static void expect_file(int fd, const struct stat *want, const char *what)
{
	struct stat st;
	zdtm_check(fstat(fd, &st) == 0, "fstat");
	if (st.st_ino != want->st_ino || st.st_dev != want->st_dev)
		zdtm_fail("%s (fd %d) names another file: inode %lu, expected %lu", what, fd,
			  (unsigned long)st.st_ino, (unsigned long)want->st_ino);
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	char p[PATH_MAX];
	snprintf(dpath, sizeof(dpath), "%s/fdstate.dir", zdtm_dir);
	zdtm_check(mkdir(dpath, 0755) == 0 || errno == EEXIST, "mkdir");
	for (int i = 0; i < NFILES; i++) {
		snprintf(p, sizeof(p), "%s/f%02d", dpath, i);
		int f = open(p, O_WRONLY | O_CREAT, 0644);
		zdtm_check(f >= 0, "create dir entry");
		close(f);
	}
	snprintf(p, sizeof(p), "%s/ro.dat", zdtm_dir);
	int f = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	zdtm_check(f >= 0, "create ro.dat");
	for (long i = 0; i < RO_SIZE; i++) {
		uint8_t b = ro_byte(i);
		zdtm_check(write(f, &b, 1) == 1, "write ro.dat");
	}
	close(f);

	int ro = open(p, O_RDONLY | O_CLOEXEC);
	zdtm_check(ro >= 0 && dup3(ro, fd_ro, O_CLOEXEC) == fd_ro, "open ro.dat at fd 100");
	close(ro);
	fd_nb = open(p, O_RDONLY | O_NONBLOCK);
	zdtm_check(fd_nb >= 0 && lseek(fd_nb, 4321, SEEK_SET) == 4321, "open ro.dat O_NONBLOCK");
	snprintf(p, sizeof(p), "%s/rw.dat", zdtm_dir);
	fd_rw = open(p, O_RDWR | O_CREAT | O_TRUNC, 0644);
	snprintf(p, sizeof(p), "%s/app.dat", zdtm_dir);
	fd_app = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
	zdtm_check(fd_rw >= 0 && fd_app >= 0, "open rw.dat/app.dat");
	for (int i = 0; i < 3; i++)
		zdtm_check(write(fd_app, "line before dump\n", 17) == 17, "write app.dat");
	int nul = open("/dev/null", O_WRONLY);
	zdtm_check(nul >= 0 && dup2(nul, fd_null) == fd_null, "open /dev/null at fd 50");
	close(nul);
	fd_dir = open(dpath, O_RDONLY | O_DIRECTORY);
	zdtm_check(fd_dir >= 0, "open directory");
	unsigned long long seen_before = 0, seen_after = 0;
	dir_read(fd_dir, 100, &seen_before, 4); /* a few entries per call */
	off_t dir_pos = lseek(fd_dir, 0, SEEK_CUR);
	fstat(fd_rw, &st_rw);
	fstat(fd_ro, &st_ro);
	fstat(fd_dir, &st_dir);

	long r = 0;
	for (; r < 4; r++) {
		rw_step(r);
		ro_step("set-up");
	}
	zdtm_ready();
	while (!zdtm_should_verify()) {
		rw_step(r);
		ro_step("before the dump");
		r++;
		zdtm_sleep_ms(2);
	}
	if (zdtm_corrupt)
		lseek(fd_rw, 1, SEEK_CUR);

	/* RW: offset, then the records on disk */
	off_t pos = lseek(fd_rw, 0, SEEK_CUR);
	if (pos != (off_t)r * REC)
		zdtm_fail("RW fd offset %ld after %ld records, expected %ld", (long)pos, r, r * REC);
	expect_flags(fd_rw, O_RDWR, "RW fd");
	expect_file(fd_rw, &st_rw, "RW fd");
	struct stat st;
	fstat(fd_rw, &st);
	if (st.st_size % REC != 0 || st.st_size < pos)
		zdtm_fail("rw.dat has size %ld (offset %ld)", (long)st.st_size, (long)pos);
	for (long i = 0; i < st.st_size / REC; i++) {
		char want[REC], got[REC];
		record(want, i);
		zdtm_check(pread(fd_rw, got, REC, i * REC) == REC, "pread rw.dat");
		if (memcmp(want, got, REC) != 0)
			zdtm_fail("rw.dat record %ld is '%.*s'", i, REC - 1, got);
	}
	rw_step(r); /* overwrites what the original may have written after the snapshot */
	if (lseek(fd_rw, 0, SEEK_CUR) != (off_t)(r + 1) * REC)
		zdtm_fail("RW fd offset did not advance by one record");

	/* RO at fd 100: offset, FD_CLOEXEC, next bytes */
	if (lseek(fd_ro, 0, SEEK_CUR) != ro_pos)
		zdtm_fail("RO fd 100 offset %ld, expected %ld", (long)lseek(fd_ro, 0, SEEK_CUR), ro_pos);
	if (fcntl(fd_ro, F_GETFD) != FD_CLOEXEC)
		zdtm_fail("RO fd 100 lost FD_CLOEXEC");
	expect_flags(fd_ro, O_RDONLY, "RO fd 100");
	expect_file(fd_ro, &st_ro, "RO fd 100");
	ro_step("after restore");

	/* NB: O_NONBLOCK and its own offset */
	expect_flags(fd_nb, O_RDONLY | O_NONBLOCK, "O_NONBLOCK fd");
	if (lseek(fd_nb, 0, SEEK_CUR) != 4321)
		zdtm_fail("O_NONBLOCK fd offset %ld, expected 4321", (long)lseek(fd_nb, 0, SEEK_CUR));
	if (fcntl(fd_nb, F_GETFD) != 0)
		zdtm_fail("O_NONBLOCK fd gained FD_CLOEXEC");

	/* APP: O_APPEND writes go to the end */
	expect_flags(fd_app, O_WRONLY | O_APPEND, "O_APPEND fd");
	zdtm_check(write(fd_app, "line after restore\n", 19) == 19, "write app.dat");
	fstat(fd_app, &st);
	if (lseek(fd_app, 0, SEEK_CUR) != st.st_size || st.st_size != 3 * 17 + 19)
		zdtm_fail("O_APPEND fd: offset %ld, file size %ld, expected %d", (long)lseek(fd_app, 0, SEEK_CUR),
			  (long)st.st_size, 3 * 17 + 19);

	/* /dev/null at fd 50 */
	fstat(fd_null, &st);
	if (!S_ISCHR(st.st_mode) || major(st.st_rdev) != 1 || minor(st.st_rdev) != 3)
		zdtm_fail("fd 50 is not /dev/null (mode %o rdev %u:%u)", st.st_mode, major(st.st_rdev),
			  minor(st.st_rdev));
	expect_flags(fd_null, O_WRONLY, "/dev/null fd 50");

	/* DIR: position, then the rest of the entries */
	expect_file(fd_dir, &st_dir, "directory fd");
	expect_flags(fd_dir, O_RDONLY | O_DIRECTORY, "directory fd");
	if (lseek(fd_dir, 0, SEEK_CUR) != dir_pos)
		zdtm_fail("directory fd position %ld, was %ld", (long)lseek(fd_dir, 0, SEEK_CUR), (long)dir_pos);
	dir_read(fd_dir, sizeof(char[1024]), &seen_after, 1000);
	if (seen_before & seen_after)
		zdtm_fail("directory entries %#llx returned before and after the dump", seen_before & seen_after);
	if ((seen_before | seen_after) != (1ull << (NFILES + 2)) - 1)
		zdtm_fail("directory entries missing: %#llx", ~(seen_before | seen_after) & ((1ull << (NFILES + 2)) - 1));
	if (!seen_before || !seen_after)
		zdtm_fail("directory read was not split across the dump (%#llx / %#llx)", seen_before, seen_after);
	printf("fdstate: %ld records, RO offset %ld\n", r, ro_pos);
	zdtm_pass();
}
