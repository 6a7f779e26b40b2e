/* zdtm: file leases come back (issue 16 §4), the process their owner. A
 * read lease on one file, a write lease on another (F_SETLEASE); before,
 * a process holding one was refused.
 * Verify: F_GETLEASE gives each lease back; a child's non-blocking open
 * of the read-leased file for writing fails with EWOULDBLOCK and breaks
 * the lease: the holder, this process (the restorer took the lease as it,
 * with its pid), gets the break signal (SIGIO).
 */
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include "zdtm.h"

static volatile sig_atomic_t broken;

static void on_sigio(int sig)
{
	(void)sig;
	broken = 1;
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	char p1[PATH_MAX], p2[PATH_MAX];
	zdtm_path(p1, sizeof p1, "read-leased");
	zdtm_path(p2, sizeof p2, "write-leased");
	zdtm_check(zdtm_write_file("read-leased", "r\n") == 0 && zdtm_write_file("write-leased", "w\n") == 0, "files");
	int r = open(p1, O_RDONLY), w = open(p2, O_RDWR);
	zdtm_check(r >= 0 && w >= 0, "open");
	zdtm_check(fcntl(r, F_SETLEASE, F_RDLCK) == 0, "F_SETLEASE F_RDLCK");
	zdtm_check(fcntl(w, F_SETLEASE, F_WRLCK) == 0, "F_SETLEASE F_WRLCK");
	signal(SIGIO, on_sigio);
	zdtm_ready();
	zdtm_wait_verify();
	if (zdtm_corrupt)
		zdtm_check(fcntl(r, F_SETLEASE, F_UNLCK) == 0, "corrupt");
	int lr = fcntl(r, F_GETLEASE), lw = fcntl(w, F_GETLEASE);
	if (lr != F_RDLCK || lw != F_WRLCK)
		zdtm_fail("F_GETLEASE: %d and %d, expected F_RDLCK %d and F_WRLCK %d", lr, lw, F_RDLCK, F_WRLCK);
	/* the raw clone: librrc refuses fork() (a protected process stays one
	 * process), and this is after the last dump */
	long c = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
	zdtm_check(c >= 0, "clone");
	if (c == 0) {
		long fd = syscall(SYS_openat, AT_FDCWD, p1, O_WRONLY | O_NONBLOCK, 0);
		syscall(SYS_exit_group, fd == -1 && errno == EWOULDBLOCK ? 0 : 1);
	}
	int st;
	zdtm_check(waitpid((pid_t)c, &st, 0) == (pid_t)c, "waitpid");
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		zdtm_fail("a conflicting open of the read-leased file did not fail with EWOULDBLOCK");
	for (int i = 0; i < 200 && !broken; i++)
		zdtm_sleep_ms(5);
	if (!broken)
		zdtm_fail("no SIGIO for the lease break: the lease's owner is not this process");
	zdtm_pass();
}
