/* Refusal probe: a process that forks (not a state test: tests/test_refusals.py).
 *
 *   refuse_fork libc   fork() and posix_spawn() through libc: under rrc both
 *                      must fail (librrc's wrappers refuse them, ENOSYS) and
 *                      the process keeps running; the results are written
 *                      to $ZDTM_DIR/forkresult ("fork=-1 errno=38 ...").
 *   refuse_fork raw    fork through a raw syscall (rrc/sys.h), which no
 *                      wrapper sees: the child sleeps; `rrc dump` must then
 *                      refuse the process, naming its child.
 * Then "ready", and the verify/result protocol of zdtm.h (PASS if still alive).
 */
#include <spawn.h>
#include <sys/wait.h>
#include "zdtm.h"
#include "../../include/rrc/sys.h"

extern char **environ;

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	const char *mode = argc > 1 ? argv[1] : "libc";
	char res[256];
	if (!strcmp(mode, "libc")) {
		errno = 0;
		pid_t p = fork();
		if (p == 0)
			_exit(0);
		int fork_errno = errno;
		if (p > 0)
			waitpid(p, NULL, 0);
		pid_t sp = 0;
		char *args[] = { "/bin/true", NULL };
		int se = posix_spawn(&sp, "/bin/true", NULL, NULL, args, environ);
		if (se == 0)
			waitpid(sp, NULL, 0);
		snprintf(res, sizeof(res), "fork=%d errno=%d posix_spawn=%d\n", p > 0 ? 1 : p, fork_errno, se);
	} else {
		long p = rrc_syscall0(SYS_fork);
		if (p == 0) {
			for (;;)
				rrc_syscall0(SYS_pause);
		}
		snprintf(res, sizeof(res), "rawfork=%ld\n", p > 0 ? 1 : p);
	}
	zdtm_check(zdtm_write_file("forkresult", res) == 0, "write forkresult");
	printf("refuse_fork: %s", res);
	zdtm_ready();
	zdtm_wait_verify();
	zdtm_pass();
}
