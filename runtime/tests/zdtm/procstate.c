/* zdtm: process-wide state: cwd, umask, rlimits, comm, argv/environ and
 * the auxiliary vector (the mm fields PR_SET_MM_MAP restores).
 *
 * Set-up: chdir into $ZDTM_DIR/cwd.d, umask 027, RLIMIT_NOFILE soft 777,
 * RLIMIT_CORE 0, RLIMIT_MSGQUEUE 12345/23456, comm "zdtm-proc". Between
 * dumps a counter in .data changes. Verify all of it, plus that
 * /proc/self/cmdline and /proc/self/environ (read through arg_start..
 * env_end) still show our argv and environment, and AT_RANDOM's bytes and
 * AT_PAGESZ from getauxval.
 */
#include <sys/auxv.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include "zdtm.h"

extern char **environ;
static char cwd0[PATH_MAX];
static uint8_t random0[16];

static size_t read_all(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY);
	zdtm_check(fd >= 0, path);
	size_t got = 0;
	ssize_t n;
	while (got < len && (n = read(fd, buf + got, len - got)) > 0)
		got += (size_t)n;
	close(fd);
	return got;
}

static void expect_limit(int res, rlim_t cur, rlim_t max, const char *name)
{
	struct rlimit rl;
	getrlimit(res, &rl);
	if (rl.rlim_cur != cur || rl.rlim_max != max)
		zdtm_fail("%s is %lu/%lu, expected %lu/%lu", name, (unsigned long)rl.rlim_cur,
			  (unsigned long)rl.rlim_max, (unsigned long)cur, (unsigned long)max);
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	snprintf(cwd0, sizeof(cwd0), "%s/cwd.d", zdtm_dir);
	zdtm_check(mkdir(cwd0, 0755) == 0 || errno == EEXIST, "mkdir");
	zdtm_check(chdir(cwd0) == 0 && getcwd(cwd0, sizeof(cwd0)), "chdir");
	umask(027);
	struct rlimit nofile;
	getrlimit(RLIMIT_NOFILE, &nofile);
	struct rlimit rl = { 777, nofile.rlim_max };
	zdtm_check(setrlimit(RLIMIT_NOFILE, &rl) == 0, "RLIMIT_NOFILE");
	rl = (struct rlimit){ 0, 0 };
	zdtm_check(setrlimit(RLIMIT_CORE, &rl) == 0, "RLIMIT_CORE");
	rl = (struct rlimit){ 12345, 23456 };
	zdtm_check(setrlimit(RLIMIT_MSGQUEUE, &rl) == 0, "RLIMIT_MSGQUEUE");
	zdtm_check(prctl(PR_SET_NAME, "zdtm-proc") == 0, "PR_SET_NAME");
	memcpy(random0, (void *)getauxval(AT_RANDOM), 16);
	static char cmdline0[4096], environ0[65536];
	size_t cl0 = read_all("/proc/self/cmdline", cmdline0, sizeof(cmdline0));
	size_t el0 = read_all("/proc/self/environ", environ0, sizeof(environ0));
	zdtm_ready();
	static volatile uint64_t counter;
	while (!zdtm_should_verify()) {
		counter++;
		zdtm_sleep_ms(1);
	}
	if (zdtm_corrupt)
		umask(022);

	char cwd[PATH_MAX];
	if (!getcwd(cwd, sizeof(cwd)) || strcmp(cwd, cwd0) != 0)
		zdtm_fail("cwd is '%s', expected '%s'", cwd, cwd0);
	mode_t m = umask(0);
	if (m != 027)
		zdtm_fail("umask is %03o, expected 027", m);
	expect_limit(RLIMIT_NOFILE, 777, nofile.rlim_max, "RLIMIT_NOFILE");
	expect_limit(RLIMIT_CORE, 0, 0, "RLIMIT_CORE");
	expect_limit(RLIMIT_MSGQUEUE, 12345, 23456, "RLIMIT_MSGQUEUE");
	char comm[17] = "";
	prctl(PR_GET_NAME, comm);
	if (strcmp(comm, "zdtm-proc") != 0)
		zdtm_fail("comm is '%s', expected 'zdtm-proc'", comm);
	if (memcmp((void *)getauxval(AT_RANDOM), random0, 16) != 0)
		zdtm_fail("AT_RANDOM bytes changed");
	if (getauxval(AT_PAGESZ) != 4096)
		zdtm_fail("AT_PAGESZ is %lu", getauxval(AT_PAGESZ));
	static char cmdline[4096], env[65536];
	size_t cl = read_all("/proc/self/cmdline", cmdline, sizeof(cmdline));
	if (cl != cl0 || memcmp(cmdline, cmdline0, cl) != 0)
		zdtm_fail("/proc/self/cmdline changed (%zu bytes, was %zu): arg_start/arg_end not restored?", cl, cl0);
	size_t el = read_all("/proc/self/environ", env, sizeof(env));
	if (el != el0 || memcmp(env, environ0, el) != 0)
		zdtm_fail("/proc/self/environ changed (%zu bytes, was %zu): env_start/env_end not restored?", el, el0);
	if (strcmp(argv[0], cmdline0) != 0 || !getenv("ZDTM_DIR"))
		zdtm_fail("argv[0] or the environment in memory changed");
	printf("procstate: counter %lu\n", (unsigned long)counter);
	zdtm_pass();
}
