/* zdtm: an application that closes what it did not open (issue 16 §2).
 *
 * Daemons walk /proc/self/fd and close what they find, call
 * close_range(3, ~0U) or closefrom(3), and dup2 onto numbers of their
 * choosing. librrc's own fds (control socket, userfaultfd, pagemap, maps,
 * log) must survive all of it, and the next checkpoint must work
 * (runtime/lib/lib-fds.c). The program's own state is a pipe at fds 3/4
 * holding STEP bytes and a file at fd 5; every other number is fair game.
 *
 * Steps (as fdreuse.c's: the harness creates $ZDTM_DIR/next, the program
 * answers with $ZDTM_DIR/step), each followed by a dump; every step:
 *
 *   1. close every fd /proc/self/fd lists from 6 up: those that fail
 *      (EBADF) are the library's; none may be one the program made;
 *   2. dup2 and dup3 of the pipe onto each of those: must fail with
 *      EBADF, and the library's fd must still be open after;
 *   3. close_range(6, ~0U, 0) and closefrom(6): must succeed, and the
 *      library's fds must still be open after;
 *   4. fds made at 900 and up (F_DUPFD 900), where the library keeps its
 *      own, CHURN of them: every number the library used and gave up
 *      during the dumps (image, sink, snapshot pipes, control
 *      connections) is taken again here, and each close must succeed and
 *      close (a number the library still called its own would refuse the
 *      application's close and leak the fd);
 *   5. one more byte into the pipe.
 * $ZDTM_DIR/libfds says how many library fds step 1 found at each step.
 * Verify (after a restore, and after one more step and dump there): the
 * pipe holds one byte per step, 0, 1, 2, ..., and the file its text.
 */
#include <dirent.h>
#include <linux/close_range.h>
#include "zdtm.h"

#define PIPE_R 3
#define PIPE_W 4
#define FILE_FD 5
#define FIRST_FREE 6
#define CHURN 300
#define MAX_LIB 64

static const char text[] = "the program's own file\n";

static int is_open(int fd)
{
	return fcntl(fd, F_GETFD) >= 0;
}

/* A dup onto the library's fd lib succeeded: a failure of the library,
 * unless the library closed that fd of its own meanwhile (a control
 * connection it finished serving: the fds step 1 finds are a moving set).
 * Then the number is free and the program's close of the dup succeeds; a
 * number the library still owns refuses it (EBADF) and the dup took the
 * library's fd. */
static int library_gave_up(int lib)
{
	return close(lib) == 0;
}

/* Step 1: the numbers whose close failed. */
static int close_all_listed(int lib[MAX_LIB])
{
	int fds[4096], n = 0, nlib = 0;
	DIR *d = opendir("/proc/self/fd");
	zdtm_check(d != NULL, "opendir /proc/self/fd");
	int dfd = dirfd(d);
	struct dirent *e;
	while ((e = readdir(d)) && n < 4096) {
		int fd = atoi(e->d_name);
		if (e->d_name[0] >= '0' && e->d_name[0] <= '9' && fd >= FIRST_FREE && fd != dfd)
			fds[n++] = fd;
	}
	closedir(d);
	for (int i = 0; i < n; i++) {
		if (close(fds[i]) == 0)
			continue; /* something the program inherited */
		if (errno != EBADF)
			zdtm_fail("close(%d): errno %d, not EBADF", fds[i], errno);
		if (!is_open(fds[i]))
			continue; /* a transient fd of the library (a control connection) it closed meanwhile */
		if (nlib < MAX_LIB)
			lib[nlib++] = fds[i];
	}
	return nlib;
}

static void step(unsigned s)
{
	int lib[MAX_LIB];
	int nlib = close_all_listed(lib);
	const char *pre = getenv("LD_PRELOAD");
	if (nlib == 0 && pre && strstr(pre, "librrc")) /* alone (test_selfcheck) there is none */
		zdtm_fail("step %u: no fd refused its close: the library's fds were closed", s);
	for (int i = 0; i < nlib; i++) {
		errno = 0;
		if (dup2(PIPE_R, lib[i]) != -1 || errno != EBADF) {
			if (library_gave_up(lib[i]))
				continue;
			zdtm_fail("step %u: dup2 onto the library's fd %d did not fail with EBADF (errno %d)", s, lib[i], errno);
		}
		errno = 0;
		if (dup3(PIPE_R, lib[i], O_CLOEXEC) != -1 || errno != EBADF) {
			if (library_gave_up(lib[i]))
				continue;
			zdtm_fail("step %u: dup3 onto the library's fd %d did not fail with EBADF (errno %d)", s, lib[i], errno);
		}
	}
	zdtm_check(close_range(FIRST_FREE, ~0U, 0) == 0, "close_range");
	closefrom(FIRST_FREE);
	for (int i = 0; i < nlib; i++) {
		if (is_open(lib[i]))
			continue;
		/* Gone: closed by close_range/closefrom (the library still calls
		 * the number its own: a dup onto it is refused), or by the library
		 * itself meanwhile (it forgets a number before closing it). */
		if (dup2(PIPE_R, lib[i]) == lib[i] && close(lib[i]) == 0)
			continue;
		zdtm_fail("step %u: the library's fd %d was closed by dup2, dup3, close_range or closefrom", s, lib[i]);
	}
	int churn[CHURN];
	for (int i = 0; i < CHURN; i++) {
		churn[i] = fcntl(PIPE_R, F_DUPFD_CLOEXEC, 900);
		zdtm_check(churn[i] >= 900, "F_DUPFD 900");
	}
	for (int i = 0; i < CHURN; i++) {
		if (close(churn[i]) != 0)
			zdtm_fail("step %u: close(%d) of the program's own fd failed (errno %d): the library still "
				  "calls the number its own", s, churn[i], errno);
		if (is_open(churn[i]))
			zdtm_fail("step %u: fd %d still open after its close", s, churn[i]);
	}
	char b = (char)s;
	zdtm_check(write(PIPE_W, &b, 1) == 1, "write pipe");
	char say[32];
	snprintf(say, sizeof say, "%d\n", nlib);
	zdtm_write_file("libfds", say);
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	int p[2];
	zdtm_check(pipe(p) == 0, "pipe");
	zdtm_check(dup2(p[0], PIPE_R) == PIPE_R && dup2(p[1], PIPE_W) == PIPE_W, "dup2 pipe");
	if (p[0] != PIPE_R && p[0] != PIPE_W)
		close(p[0]);
	if (p[1] != PIPE_R && p[1] != PIPE_W)
		close(p[1]);
	char path[PATH_MAX];
	zdtm_path(path, sizeof path, "own-file");
	int f = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	zdtm_check(f >= 0, "open own-file");
	zdtm_check(write(f, text, sizeof text - 1) == (ssize_t)sizeof text - 1, "write own-file");
	zdtm_check(dup2(f, FILE_FD) == FILE_FD, "dup2 file");
	if (f != FILE_FD)
		close(f);
	unsigned s = 0;
	for (;; s++) {
		step(s);
		if (zdtm_step_done(s))
			break;
	}
	/* verify: one byte per step, in order */
	if (zdtm_corrupt) {
		char b = 0x7f;
		zdtm_check(write(PIPE_W, &b, 1) == 1, "corrupt");
	}
	zdtm_check(fcntl(PIPE_R, F_SETFL, O_NONBLOCK) == 0, "O_NONBLOCK");
	char got[256];
	ssize_t n = read(PIPE_R, got, sizeof got);
	if (n != (ssize_t)s + 1)
		zdtm_fail("the pipe holds %zd bytes, %u steps were made", n, s + 1);
	for (unsigned i = 0; i <= s; i++)
		if (got[i] != (char)i)
			zdtm_fail("pipe byte %u is %d, not %u", i, got[i], i);
	char back[64] = "";
	zdtm_check(pread(FILE_FD, back, sizeof back, 0) == (ssize_t)sizeof text - 1, "pread own-file");
	if (memcmp(back, text, sizeof text - 1))
		zdtm_fail("the file at fd %d reads \"%s\"", FILE_FD, back);
	zdtm_pass();
}
