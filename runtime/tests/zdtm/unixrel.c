/* zdtm: a unix socket bound to a relative name, its file's mode, and the
 * cwd it was bound in (issue 16 §3, §4).
 *
 * The program enters $ZDTM_DIR/wd, binds a listening unix socket to the
 * relative name "rel.sock", sets its file's mode to 0640 and listens;
 * a second listener is bound to an absolute path with mode 0604.
 * rrc-restore runs from another directory: it must bind the first name in
 * the process's cwd (not its own) and give both files their modes.
 * Verify (after the restore): the cwd is wd; each listener's name is as
 * bound; each file is a socket with its mode; a connection to each file
 * by its absolute path is accepted by its listener.
 */
#include <sys/socket.h>
#include <sys/un.h>
#include "zdtm.h"

#define REL 10
#define ABS 11

static void listen_at(const char *name, int at, mode_t mode)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof a.sun_path, "%s", name);
	int s = socket(AF_UNIX, SOCK_STREAM, 0);
	zdtm_check(s >= 0, "socket");
	zdtm_check(bind(s, (struct sockaddr *)&a, sizeof a) == 0, "bind");
	zdtm_check(chmod(name, mode) == 0, "chmod");
	zdtm_check(listen(s, 4) == 0, "listen");
	zdtm_check(dup2(s, at) == at, "dup2");
	close(s);
}

static void check(int lfd, const char *bound, const char *abs_path, mode_t mode)
{
	struct sockaddr_un a;
	socklen_t l = sizeof a;
	zdtm_check(getsockname(lfd, (struct sockaddr *)&a, &l) == 0, "getsockname");
	if (strcmp(a.sun_path, bound))
		zdtm_fail("fd %d is bound to \"%s\", not \"%s\"", lfd, a.sun_path, bound);
	struct stat st;
	if (stat(abs_path, &st) != 0 || !S_ISSOCK(st.st_mode))
		zdtm_fail("%s is not a socket file (errno %d)", abs_path, errno);
	if ((st.st_mode & 07777) != mode)
		zdtm_fail("%s has mode %04o, not %04o", abs_path, st.st_mode & 07777, mode);
	struct sockaddr_un to = { .sun_family = AF_UNIX };
	snprintf(to.sun_path, sizeof to.sun_path, "%s", abs_path);
	int c = socket(AF_UNIX, SOCK_STREAM, 0);
	zdtm_check(c >= 0, "socket");
	if (connect(c, (struct sockaddr *)&to, sizeof to) != 0)
		zdtm_fail("connect to %s: errno %d (nobody listens there)", abs_path, errno);
	int s = accept(lfd, NULL, NULL);
	if (s < 0)
		zdtm_fail("accept on fd %d: errno %d", lfd, errno);
	close(s);
	close(c);
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	char wd[PATH_MAX], rel_abs[PATH_MAX + 16], abs_name[PATH_MAX + 16];
	snprintf(wd, sizeof wd, "%s/wd", zdtm_dir);
	zdtm_check(mkdir(wd, 0755) == 0 || errno == EEXIST, "mkdir wd");
	snprintf(rel_abs, sizeof rel_abs, "%s/rel.sock", wd);
	snprintf(abs_name, sizeof abs_name, "%s/abs.sock", zdtm_dir);
	if (strlen(abs_name) >= sizeof(((struct sockaddr_un *)0)->sun_path))
		zdtm_fail("ZDTM_DIR too long for a unix socket path: %s", abs_name);
	zdtm_check(chdir(wd) == 0, "chdir wd");
	listen_at("rel.sock", REL, 0640);
	listen_at(abs_name, ABS, 0604);

	zdtm_ready();
	zdtm_wait_verify();

	if (zdtm_corrupt)
		zdtm_check(chmod(rel_abs, 0600) == 0, "corrupt");
	char cwd[PATH_MAX];
	if (!getcwd(cwd, sizeof cwd) || strcmp(cwd, wd))
		zdtm_fail("cwd is %s, not %s", cwd, wd);
	check(REL, "rel.sock", rel_abs, 0640);
	check(ABS, abs_name, abs_name, 0604);
	zdtm_pass();
}
