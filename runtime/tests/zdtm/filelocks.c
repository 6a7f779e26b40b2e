/* zdtm: file locks (issue 16 §4; a REG or DIR record's data,
 * runtime/lib/file-locks.c, restore/file-locks.c). In $ZDTM_DIR:
 *   data   fd A (read-write): POSIX write lock on bytes 0..99 and POSIX
 *          read lock from 200 to the end; fd C = dup(A); fd B, another
 *          open of the same file: OFD write lock on bytes 100..149
 *   ex     flock LOCK_EX on fd D, and fd E = dup(D) shares it
 *   sh     flock LOCK_SH
 *   the directory itself: flock LOCK_SH through a directory fd
 * Verify, from new open files of this process (an OFD lock conflicts
 * with POSIX and OFD locks of other open files, a flock with another open
 * file's): each lock is there with its kind, type and range, the gaps are
 * free, and nothing else is locked.
 */
#include <sys/file.h>
#include "zdtm.h"

static int open_in(const char *name, int flags)
{
	char p[PATH_MAX];
	zdtm_path(p, sizeof p, name);
	int fd = open(p, flags | O_CREAT, 0644);
	zdtm_check(fd >= 0, "open");
	return fd;
}

static int setlk(int fd, int cmd, short type, off_t start, off_t len)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = len };
	return fcntl(fd, cmd, &fl);
}

/* the probe's open file of "data": never closed, since closing any fd
 * of a file drops every POSIX lock the process holds on it */
static int probe = -1;

/* what a write lock on [start, start+len) from a new open file meets */
static void expect(const char *what, off_t start, off_t len, short type, off_t at, off_t got_len, pid_t pid)
{
	if (probe < 0)
		probe = open_in("data", O_RDWR);
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = start, .l_len = len };
	zdtm_check(fcntl(probe, F_OFD_GETLK, &fl) == 0, "F_OFD_GETLK");
	if (fl.l_type != type || (type != F_UNLCK && (fl.l_start != at || fl.l_len != got_len || fl.l_pid != pid)))
		zdtm_fail("%s: a probe of bytes %lld+%lld met type %d at %lld+%lld pid %d, not type %d at %lld+%lld pid %d",
			  what, (long long)start, (long long)len, fl.l_type, (long long)fl.l_start, (long long)fl.l_len,
			  (int)fl.l_pid, type, (long long)at, (long long)got_len, (int)pid);
}

/* a flock from a new open file of name: 0 granted, else errno */
static int try_flock(const char *name, int dir, int op)
{
	char p[PATH_MAX];
	if (dir)
		snprintf(p, sizeof p, "%s", zdtm_dir);
	else
		zdtm_path(p, sizeof p, name);
	int fd = open(p, dir ? O_RDONLY | O_DIRECTORY : O_RDONLY);
	zdtm_check(fd >= 0, "open for the flock probe");
	int r = flock(fd, op | LOCK_NB) == 0 ? 0 : errno;
	close(fd);
	return r;
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	int a = open_in("data", O_RDWR);
	zdtm_check(ftruncate(a, 4096) == 0, "ftruncate");
	zdtm_check(setlk(a, F_SETLK, F_WRLCK, 0, 100) == 0, "POSIX write lock");
	zdtm_check(setlk(a, F_SETLK, F_RDLCK, 200, 0) == 0, "POSIX read lock to EOF");
	int c = dup(a);
	int b = open_in("data", O_RDWR);
	zdtm_check(setlk(b, F_OFD_SETLK, F_WRLCK, 100, 50) == 0, "OFD write lock");
	int d = open_in("ex", O_RDONLY);
	zdtm_check(flock(d, LOCK_EX) == 0, "flock LOCK_EX");
	int e = dup(d);
	int sh = open_in("sh", O_RDONLY);
	zdtm_check(flock(sh, LOCK_SH) == 0, "flock LOCK_SH");
	int dir = open(zdtm_dir, O_RDONLY | O_DIRECTORY);
	zdtm_check(dir >= 0 && flock(dir, LOCK_SH) == 0, "flock of the directory");

	zdtm_ready();
	zdtm_wait_verify();

	if (zdtm_corrupt)
		zdtm_check(setlk(b, F_OFD_SETLK, F_UNLCK, 100, 50) == 0, "corrupt");
	pid_t self = getpid();
	expect("POSIX write lock", 0, 100, F_WRLCK, 0, 100, self);
	expect("OFD write lock", 100, 50, F_WRLCK, 100, 50, -1);
	expect("the gap", 150, 50, F_UNLCK, 0, 0, 0);
	expect("POSIX read lock to EOF", 200, 0, F_RDLCK, 200, 0, self);
	if (try_flock("ex", 0, LOCK_SH) != EWOULDBLOCK)
		zdtm_fail("ex: a shared flock from another open file was granted or failed otherwise: not locked LOCK_EX");
	if (try_flock("sh", 0, LOCK_SH) != 0 || try_flock("sh", 0, LOCK_EX) != EWOULDBLOCK)
		zdtm_fail("sh: not locked LOCK_SH (a shared probe must pass, an exclusive one not)");
	if (try_flock(0, 1, LOCK_SH) != 0 || try_flock(0, 1, LOCK_EX) != EWOULDBLOCK)
		zdtm_fail("the directory: not locked LOCK_SH");
	/* the duplicates share the locks of their open files */
	zdtm_check(flock(e, LOCK_UN) == 0, "flock LOCK_UN through the dup");
	if (try_flock("ex", 0, LOCK_EX) != 0)
		zdtm_fail("ex: unlocking through the dup did not free the lock: the dup is not the same open file");
	(void)c;
	zdtm_pass();
}
