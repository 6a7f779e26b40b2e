/* zdtm: ghost files (issue 16 §4; RRC_FD_GHOST, runtime/lib/files-ghost.c,
 * restore/files-ghost.c):
 *   m      memfd "rrc-ghost" (sealing allowed): 10000 bytes, sealed
 *          against shrinking and growing, offset 1234; m2 = dup(m)
 *   p      memfd "plain" (no sealing: F_SEAL_SEAL): "hello"
 *   g      a file of $ZDTM_DIR, O_RDWR | O_APPEND, 3000 bytes, offset 100,
 *          then unlinked
 *   w      a log of $ZDTM_DIR open O_WRONLY | O_APPEND, 3 MiB and 123
 *          bytes written, then unlinked (a rotation the server was not
 *          told of): over the 1 MiB a readable ghost may hold, carried by
 *          its size only, as nothing can read it
 * Verify: contents byte for byte, seals, offsets, O_APPEND, the dup
 * sharing the offset, the names (/memfd:..., " (deleted)"), no link left
 * to the deleted file, and both files still writable; the log's size,
 * offset, flags and name, and a write appending at its end.
 */
#include <sys/mman.h>
#include "zdtm.h"

#define MSIZE 10000
#define GSIZE 3000
#define WSIZE (3 * 1024 * 1024 + 123)

static unsigned char mpat(int i) { return (unsigned char)(i * 13 + 1); }
static unsigned char gpat(int i) { return (unsigned char)(i * 5 + 2); }

static void contents(int fd, int size, unsigned char (*pat)(int), const char *what)
{
	static unsigned char buf[MSIZE + 1];
	ssize_t n = pread(fd, buf, sizeof buf, 0);
	if (n != size)
		zdtm_fail("%s: %zd bytes, not %d", what, n, size);
	for (int i = 0; i < size; i++)
		if (buf[i] != pat(i))
			zdtm_fail("%s: byte %d differs", what, i);
}

static void link_of(int fd, const char *prefix, const char *suffix, const char *what)
{
	char self[64], l[PATH_MAX];
	snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
	ssize_t n = readlink(self, l, sizeof l - 1);
	l[n > 0 ? n : 0] = 0;
	size_t sl = strlen(suffix);
	if (n <= 0 || strncmp(l, prefix, strlen(prefix)) || (size_t)n < sl || strcmp(l + n - sl, suffix))
		zdtm_fail("%s: its link reads \"%s\"", what, l);
}

int main(int argc, char **argv)
{
	static unsigned char buf[MSIZE];
	zdtm_init(argc, argv);
	int m = memfd_create("rrc-ghost", MFD_ALLOW_SEALING);
	zdtm_check(m >= 0, "memfd_create");
	for (int i = 0; i < MSIZE; i++)
		buf[i] = mpat(i);
	zdtm_check(write(m, buf, MSIZE) == MSIZE, "write the memfd");
	zdtm_check(fcntl(m, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0, "seal");
	zdtm_check(lseek(m, 1234, SEEK_SET) == 1234, "lseek");
	int m2 = dup(m);
	int p = memfd_create("plain", 0);
	zdtm_check(p >= 0 && write(p, "hello", 5) == 5, "the plain memfd");
	char path[PATH_MAX];
	zdtm_path(path, sizeof path, "gone");
	int g = open(path, O_RDWR | O_CREAT | O_APPEND, 0640);
	zdtm_check(g >= 0, "open gone");
	for (int i = 0; i < GSIZE; i++)
		buf[i] = gpat(i);
	zdtm_check(write(g, buf, GSIZE) == GSIZE, "write gone");
	zdtm_check(lseek(g, 100, SEEK_SET) == 100, "lseek gone");
	zdtm_check(unlink(path) == 0, "unlink gone");
	zdtm_path(path, sizeof path, "log");
	int w = open(path, O_WRONLY | O_CREAT | O_APPEND, 0600);
	zdtm_check(w >= 0, "open the log");
	for (int i = 0; i < 3 * 256; i++)
		zdtm_check(write(w, buf, 4096) == 4096, "write the log");
	zdtm_check(write(w, buf, 123) == 123 && unlink(path) == 0, "finish and unlink the log");

	zdtm_ready();
	zdtm_wait_verify();

	if (zdtm_corrupt)
		zdtm_check(pwrite(m, "X", 1, 5) == 1, "corrupt");
	contents(m, MSIZE, mpat, "the sealed memfd");
	contents(g, GSIZE, gpat, "the deleted file");
	char hello[8] = "";
	if (pread(p, hello, sizeof hello, 0) != 5 || memcmp(hello, "hello", 5))
		zdtm_fail("the plain memfd: not \"hello\"");
	int seals = fcntl(m, F_GET_SEALS), pseals = fcntl(p, F_GET_SEALS);
	if (seals != (F_SEAL_SHRINK | F_SEAL_GROW) || pseals != F_SEAL_SEAL)
		zdtm_fail("seals %#x and %#x, not %#x and %#x", seals, pseals, F_SEAL_SHRINK | F_SEAL_GROW, F_SEAL_SEAL);
	if (lseek(m, 0, SEEK_CUR) != 1234 || lseek(g, 0, SEEK_CUR) != 100)
		zdtm_fail("offsets %lld and %lld, not 1234 and 100", (long long)lseek(m, 0, SEEK_CUR),
			  (long long)lseek(g, 0, SEEK_CUR));
	zdtm_check(lseek(m2, 7, SEEK_SET) == 7, "lseek the dup");
	if (lseek(m, 0, SEEK_CUR) != 7)
		zdtm_fail("the memfd's dup does not share its offset");
	if (!(fcntl(g, F_GETFL) & O_APPEND) || (fcntl(g, F_GETFL) & O_ACCMODE) != O_RDWR)
		zdtm_fail("the deleted file is not O_RDWR | O_APPEND");
	link_of(m, "/memfd:rrc-ghost", " (deleted)", "the sealed memfd");
	link_of(g, "/", " (deleted)", "the deleted file");
	struct stat st;
	if (fstat(g, &st) || st.st_nlink != 0 || (st.st_mode & 0777) != 0640)
		zdtm_fail("the deleted file: %lu links, mode %o", (unsigned long)st.st_nlink, st.st_mode & 0777);
	if (pwrite(m, "ok", 2, 0) != 2 || write(g, "more", 4) != 4)
		zdtm_fail("the ghosts are not writable");
	if (fstat(w, &st) || st.st_size != WSIZE || st.st_nlink != 0 || (st.st_mode & 0777) != 0600 ||
	    lseek(w, 0, SEEK_CUR) != WSIZE)
		zdtm_fail("the write-only log: size %lld, offset %lld, %lu links, mode %o (want %d at %d, 0 links, 600)",
			  (long long)st.st_size, (long long)lseek(w, 0, SEEK_CUR), (unsigned long)st.st_nlink,
			  st.st_mode & 0777, WSIZE, WSIZE);
	if ((fcntl(w, F_GETFL) & (O_ACCMODE | O_APPEND)) != (O_WRONLY | O_APPEND))
		zdtm_fail("the log is not O_WRONLY | O_APPEND");
	link_of(w, "/", " (deleted)", "the write-only log");
	if (write(w, "tail", 4) != 4 || fstat(w, &st) || st.st_size != WSIZE + 4)
		zdtm_fail("the log's write does not append at its end (size %lld)", (long long)st.st_size);
	zdtm_pass();
}
