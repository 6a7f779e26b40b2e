/* zdtm: process attributes beyond struct rrc_process (issue 16 §4; the
 * image's PROCATTR section, runtime/lib/procattr.c, restore/main.c):
 * oom_score_adj 500 (raised: a restore may always raise it), the child
 * subreaper flag, THP disabled for the process, and no_new_privs (set
 * last by the restorer: it cannot be undone). Verify: all four as set.
 */
#include <sys/prctl.h>
#include "zdtm.h"

static int oom_score_adj(void)
{
	char buf[32] = "";
	int fd = open("/proc/self/oom_score_adj", O_RDONLY);
	zdtm_check(fd >= 0, "open oom_score_adj");
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	zdtm_check(n > 0, "read oom_score_adj");
	return atoi(buf);
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	int fd = open("/proc/self/oom_score_adj", O_WRONLY);
	zdtm_check(fd >= 0 && write(fd, "500", 3) == 3, "write oom_score_adj");
	close(fd);
	zdtm_check(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0, "PR_SET_CHILD_SUBREAPER");
	zdtm_check(prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) == 0, "PR_SET_THP_DISABLE");
	zdtm_check(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0, "PR_SET_NO_NEW_PRIVS");

	zdtm_ready();
	zdtm_wait_verify();

	if (zdtm_corrupt)
		zdtm_check(prctl(PR_SET_THP_DISABLE, 0, 0, 0, 0) == 0, "corrupt");
	int sub = -1;
	zdtm_check(prctl(PR_GET_CHILD_SUBREAPER, &sub, 0, 0, 0) == 0, "PR_GET_CHILD_SUBREAPER");
	int thp = prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0), nnp = prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0);
	int oom = oom_score_adj();
	if (oom != 500 || sub != 1 || thp != 1 || nnp != 1)
		zdtm_fail("oom_score_adj %d subreaper %d thp_disable %d no_new_privs %d, not 500 1 1 1", oom, sub, thp, nnp);
	zdtm_pass();
}
