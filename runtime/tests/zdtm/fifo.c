/* zdtm: FIFOs (named pipes) come back open at their paths, with the bytes
 * in flight (issue 16 §4); before, a process holding one was refused.
 *   fifo   read end (non-blocking) and write end, a dup of the write end,
 *          bytes written and not read, more at every step while the
 *          harness dumps;
 *   fifo2  opened read-write, with bytes in it;
 *   fifo3  a write end whose reader went: a write fails with EPIPE.
 * Verify: fifo's reader reads every byte written, in order, and one
 * written after the restore through the dup; fifo2 reads its bytes; fifo3
 * says EPIPE; each fd is still the FIFO at its path (fstat against stat).
 */
#include <signal.h>
#include <sys/stat.h>
#include "zdtm.h"

static void same_file(int fd, const char *path, const char *what)
{
	struct stat a, b;
	zdtm_check(fstat(fd, &a) == 0 && stat(path, &b) == 0, "stat");
	if (!S_ISFIFO(a.st_mode) || a.st_ino != b.st_ino || a.st_dev != b.st_dev)
		zdtm_fail("%s: the fd is not the FIFO at %s", what, path);
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	signal(SIGPIPE, SIG_IGN);
	char p1[PATH_MAX], p2[PATH_MAX], p3[PATH_MAX];
	zdtm_path(p1, sizeof p1, "fifo");
	zdtm_path(p2, sizeof p2, "fifo2");
	zdtm_path(p3, sizeof p3, "fifo3");
	unlink(p1);
	unlink(p2);
	unlink(p3);
	zdtm_check(mkfifo(p1, 0600) == 0 && mkfifo(p2, 0600) == 0 && mkfifo(p3, 0600) == 0, "mkfifo");
	int r = open(p1, O_RDONLY | O_NONBLOCK);
	int w = open(p1, O_WRONLY);
	int wdup = dup(w);
	int rw = open(p2, O_RDWR);
	int gone = open(p3, O_RDONLY | O_NONBLOCK);
	int w3 = open(p3, O_WRONLY);
	zdtm_check(r >= 0 && w >= 0 && wdup >= 0 && rw >= 0 && gone >= 0 && w3 >= 0, "open the FIFOs");
	close(gone);
	zdtm_check(write(rw, "two", 3) == 3, "write fifo2");

	unsigned n = 0;
	zdtm_ready();
	while (!zdtm_should_verify()) {
		char b = (char)(n & 0x7f);
		zdtm_check(write(w, &b, 1) == 1, "write fifo");
		n++;
		zdtm_sleep_ms(2);
		if (n == 30000)
			zdtm_fail("no verify after %u writes", n);
	}
	if (zdtm_corrupt) {
		char b;
		zdtm_check(read(r, &b, 1) == 1, "corrupt");
	}
	char x = 0x7f;
	zdtm_check(write(wdup, &x, 1) == 1, "write through the dup");
	static char got[32768];
	ssize_t k = read(r, got, sizeof got);
	if (k != (ssize_t)n + 1)
		zdtm_fail("fifo: %zd bytes read, %u written", k, n + 1);
	for (unsigned i = 0; i < n; i++)
		if (got[i] != (char)(i & 0x7f))
			zdtm_fail("fifo: byte %u is %d, expected %u", i, got[i], i & 0x7f);
	if (got[n] != 0x7f)
		zdtm_fail("fifo: the byte written through the dup is %d", got[n]);
	char two[8] = "";
	zdtm_check(fcntl(rw, F_SETFL, O_NONBLOCK) == 0, "O_NONBLOCK fifo2");
	if (read(rw, two, sizeof two) != 3 || memcmp(two, "two", 3))
		zdtm_fail("fifo2: read '%s', expected 'two'", two);
	errno = 0;
	if (write(w3, "x", 1) != -1 || errno != EPIPE)
		zdtm_fail("fifo3: a write without a reader gave errno %d, not EPIPE", errno);
	same_file(r, p1, "fifo reader");
	same_file(w, p1, "fifo writer");
	same_file(rw, p2, "fifo2");
	zdtm_pass();
}
