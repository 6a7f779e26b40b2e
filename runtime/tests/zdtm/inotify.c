/* zdtm: inotify watches come back (issue 16 §4), with their numbers.
 * Servers and their frameworks watch their configuration (a reload on
 * change); before, a process holding an inotify instance was refused.
 *   ifd   watches the directory "watched" by a relative path (made
 *         absolute against the cwd of the add: $ZDTM_DIR), number 1; a
 *         watch of "conf2" added and removed (number 2: a gap the restore
 *         must keep); the file "conf" by its absolute path, number 3;
 *   ifd2  a second instance watching "watched" too: its number 1 is the
 *         same file as ifd's (the library names a watch by number and file).
 * Verify: a file created in "watched" is an IN_CREATE event on number 1 of
 * both instances, a write of "conf" an IN_MODIFY on number 3; adding the
 * directory again gives its number back, a new watch number 4.
 */
#include <sys/inotify.h>
#include "zdtm.h"

static int ifd, ifd2;

/* the next event of fd is wd's, with mask bit want, and name (or none) */
static void expect_event(int fd, int wd, uint32_t want, const char *name, const char *what)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	ssize_t n = -1;
	for (int i = 0; i < 200 && n < 0; i++) {
		n = read(fd, buf, sizeof buf);
		if (n < 0 && errno == EAGAIN)
			zdtm_sleep_ms(5);
		else if (n < 0)
			zdtm_fail("%s: read: errno %d", what, errno);
	}
	if (n < (ssize_t)sizeof(struct inotify_event))
		zdtm_fail("%s: no event", what);
	const struct inotify_event *e = (const struct inotify_event *)buf;
	if (e->wd != wd || !(e->mask & want))
		zdtm_fail("%s: an event of watch %d, mask 0x%x; expected watch %d, mask 0x%x", what, e->wd, e->mask, wd,
			  want);
	if (name && (!e->len || strcmp(e->name, name)))
		zdtm_fail("%s: the event names '%s', expected '%s'", what, e->len ? e->name : "", name);
}

static void drain(int fd)
{
	char buf[4096];
	while (read(fd, buf, sizeof buf) > 0)
		;
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	char dir[PATH_MAX], conf[PATH_MAX], conf2[PATH_MAX];
	zdtm_path(dir, sizeof dir, "watched");
	zdtm_path(conf, sizeof conf, "conf");
	zdtm_path(conf2, sizeof conf2, "conf2");
	zdtm_check(mkdir(dir, 0755) == 0 || errno == EEXIST, "mkdir watched");
	zdtm_check(zdtm_write_file("conf", "a = 1\n") == 0 && zdtm_write_file("conf2", "b\n") == 0, "files");
	char cwd[PATH_MAX];
	zdtm_check(getcwd(cwd, sizeof cwd) != NULL && chdir(zdtm_dir) == 0, "chdir to the zdtm dir");

	ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	ifd2 = inotify_init1(IN_NONBLOCK);
	zdtm_check(ifd >= 0 && ifd2 >= 0, "inotify_init1");
	int wd_dir = inotify_add_watch(ifd, "watched", IN_CREATE | IN_DELETE);
	int wd_gap = inotify_add_watch(ifd, conf2, IN_MODIFY);
	zdtm_check(wd_gap >= 0 && inotify_rm_watch(ifd, wd_gap) == 0, "a watch added and removed");
	int wd_conf = inotify_add_watch(ifd, conf, IN_MODIFY | IN_CLOSE_WRITE);
	int wd2 = inotify_add_watch(ifd2, dir, IN_CREATE);
	zdtm_check(wd_dir == 1 && wd_gap == 2 && wd_conf == 3 && wd2 == 1, "watch numbers 1, 2, 3 and 1");
	drain(ifd); /* the removal's IN_IGNORED */
	zdtm_check(chdir(cwd) == 0, "chdir back"); /* the relative path was the cwd's of the add */

	zdtm_ready();
	zdtm_wait_verify();

	if (zdtm_corrupt)
		zdtm_check(inotify_rm_watch(ifd, wd_dir) == 0 && (drain(ifd), 1), "corrupt");
	char made[PATH_MAX];
	zdtm_path(made, sizeof made, "watched/new");
	int f = open(made, O_CREAT | O_WRONLY, 0644);
	zdtm_check(f >= 0, "create watched/new");
	close(f);
	expect_event(ifd, wd_dir, IN_CREATE, "new", "ifd, watched");
	expect_event(ifd2, 1, IN_CREATE, "new", "ifd2, watched");
	int cf = open(conf, O_WRONLY | O_APPEND); /* in place: a rename would end the watch */
	zdtm_check(cf >= 0 && write(cf, "a = 2\n", 6) == 6, "write conf");
	close(cf);
	expect_event(ifd, wd_conf, IN_MODIFY, NULL, "ifd, conf");
	int again = inotify_add_watch(ifd, dir, IN_CREATE | IN_DELETE);
	if (again != wd_dir)
		zdtm_fail("the directory added again is watch %d, expected its number %d", again, wd_dir);
	int fresh = inotify_add_watch(ifd, conf2, IN_MODIFY);
	if (fresh != 4)
		zdtm_fail("a new watch is number %d, expected 4", fresh);
	zdtm_pass();
}
