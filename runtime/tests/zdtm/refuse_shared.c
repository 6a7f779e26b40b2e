/* Refusal probe: writable shared memory (tests/test_refusals.py).
 *
 *   refuse_shared libc  through libc: mmap(MAP_SHARED|MAP_ANONYMOUS, RW),
 *                       mmap(MAP_SHARED, RW) of a file, and mprotect(RW) of
 *                       a read-only shared file mapping must fail under rrc
 *                       (EPERM), while a read-only shared file mapping is
 *                       allowed; results in $ZDTM_DIR/shmresult.
 *   refuse_shared raw   a writable MAP_SHARED|MAP_ANONYMOUS mapping made by
 *                       a raw mmap syscall (rrc/sys.h), which no wrapper
 *                       sees: `rrc dump` must refuse, naming the shared
 *                       mapping.
 *   refuse_shared deleted_shared
 *                       a read-only shared mapping of a file deleted after
 *                       it was mapped: its pages are the file's, which the
 *                       image cannot carry (a private one is carried: zdtm
 *                       mapdeleted); `rrc dump` must refuse, naming it.
 *   refuse_shared deleted_writer
 *                       a private mapping of a deleted file that the
 *                       process also holds open for writing (fd 20): its
 *                       unwritten pages follow the file's writes, which a
 *                       copy would not; `rrc dump` must refuse, naming the fd.
 *   refuse_shared deleted_big
 *                       a private mapping of a deleted (sparse) file of
 *                       300 MiB: more than a dump copies in its pause;
 *                       `rrc dump` must refuse, naming the limit.
 */
#include <sys/mman.h>
#include "zdtm.h"
#include "../../include/rrc/sys.h"

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	const char *mode = argc > 1 ? argv[1] : "libc";
	char res[512];
	if (!strcmp(mode, "libc")) {
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/shared.dat", zdtm_dir);
		int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
		zdtm_check(fd >= 0 && ftruncate(fd, 8192) == 0, "create shared.dat");
		errno = 0;
		void *a = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		int ea = errno;
		errno = 0;
		void *f = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		int ef = errno;
		errno = 0;
		void *ro = mmap(NULL, 8192, PROT_READ, MAP_SHARED, fd, 0);
		int ero = errno;
		int mp = -2, emp = 0;
		if (ro != MAP_FAILED) {
			errno = 0;
			mp = mprotect(ro, 8192, PROT_READ | PROT_WRITE);
			emp = errno;
		}
		snprintf(res, sizeof(res), "anon=%d errno=%d file=%d errno=%d ro=%d errno=%d mprotect=%d errno=%d\n",
			 a == MAP_FAILED ? -1 : 1, ea, f == MAP_FAILED ? -1 : 1, ef, ro == MAP_FAILED ? -1 : 1, ero,
			 mp, emp);
	} else if (!strcmp(mode, "deleted_big")) {
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/big.dat", zdtm_dir);
		int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
		zdtm_check(fd >= 0 && ftruncate(fd, 300 << 20) == 0, "create big.dat");
		void *m = mmap(NULL, 300 << 20, PROT_READ, MAP_PRIVATE, fd, 0);
		close(fd);
		snprintf(res, sizeof(res), "deleted=%d\n", m != MAP_FAILED && unlink(path) == 0);
	} else if (!strcmp(mode, "deleted_shared") || !strcmp(mode, "deleted_writer")) {
		int shared = !strcmp(mode, "deleted_shared");
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/deleted.dat", zdtm_dir);
		int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
		zdtm_check(fd >= 0 && write(fd, "gone", 4) == 4, "create deleted.dat");
		void *m = mmap(NULL, 4096, PROT_READ, shared ? MAP_SHARED : MAP_PRIVATE, fd, 0);
		if (shared)
			close(fd);
		else
			zdtm_check(dup2(fd, 20) == 20 && close(fd) == 0, "keep deleted.dat open as fd 20");
		int ok = m != MAP_FAILED && unlink(path) == 0 && !memcmp(m, "gone", 4);
		snprintf(res, sizeof(res), "deleted=%d\n", ok);
	} else {
		long p = rrc_sys_mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (p > 0)
			memset((void *)p, 0x5a, 1 << 20);
		snprintf(res, sizeof(res), "rawmmap=%d\n", p > 0 || p < -4095 ? 1 : (int)p);
	}
	zdtm_check(zdtm_write_file("shmresult", res) == 0, "write shmresult");
	printf("refuse_shared: %s", res);
	zdtm_ready();
	zdtm_wait_verify();
	zdtm_pass();
}
