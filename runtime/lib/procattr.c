/* SPDX-License-Identifier: MIT
 *
 * Process attributes beyond struct rrc_process (issue 16 §4): the image's
 * PROCATTR section (image.h struct rrc_procattr), which rrc-restore sets
 * again (restore/main.c).
 *
 *   oom_score_adj      /proc/self/oom_score_adj (a restore may not lower it
 *                      below what it inherited without CAP_SYS_RESOURCE:
 *                      it warns and keeps it, as for rlimits)
 *   no_new_privs       the main thread's (/proc/self/status NoNewPrivs: a
 *                      thread's flag; the restorer sets it for all, last:
 *                      it cannot be undone)
 *   child_subreaper    PR_GET_CHILD_SUBREAPER
 *   thp_disable        PR_GET_THP_DISABLE
 *   itimers            ITIMER_REAL (alarm), ITIMER_VIRTUAL, ITIMER_PROF:
 *                      the interval and the time left, which the restorer
 *                      arms again (CRIU does the same): a timer does not
 *                      run between the snapshot and the restore, so after
 *                      a failover it fires that much later
 *
 * Read by the control thread just before the pause (each is one system
 * call and they change rarely, if ever, once a server runs). A seccomp
 * filter is refused here: its BPF program cannot be read back from inside
 * the process (PTRACE_SECCOMP_GET_FILTER needs a tracer), so no restore
 * could install it again.
 * Ordinary thread context, raw system calls.
 */
#include <sys/prctl.h>
#include "rrc_lib.h"
#include "creds.h"

/* A field of /proc/self/status, which shows the main thread's (seccomp
 * and no_new_privs are a thread's: the control thread's own would be
 * those it was created with); -1 if absent. */
static long status_field(const char *buf, const char *key)
{
	const char *v = rrc_fdinfo_field(buf, key);
	return v ? (long)rrc_parse_u64(v, 10, 0) : -1;
}

int rrc_procattr_capture(void)
{
	struct rrc_procattr *a = &rrc_s->procattr;
	char st[4096];
	long sn = rrc_read_file("/proc/self/status", st, sizeof st - 1);
	st[sn > 0 ? sn : 0] = 0;
	if (status_field(st, "Seccomp:") > 0) {
		rrc_set_err(RRC_ERR_PROCESS_STATE, 0,
			    "the process runs under a seccomp filter: its BPF program cannot be read back from "
			    "inside the process, so no restore could install it again", -1, 0);
		return -1;
	}
	/* the credentials from the same read (creds.c) */
	if (rrc_creds_capture(st) < 0)
		return -1;
	rrc_memset(a, 0, sizeof *a);
	a->size = sizeof *a;
	char buf[32];
	long n = rrc_read_file("/proc/self/oom_score_adj", buf, sizeof buf - 1);
	if (n > 0) {
		buf[n] = 0;
		const char *p = buf;
		int neg = *p == '-';
		long v = (long)rrc_parse_u64(p + neg, 10, 0);
		a->oom_score_adj = (int32_t)(neg ? -v : v);
		a->valid |= RRC_PA_OOM_SCORE_ADJ;
	}
	a->no_new_privs = status_field(st, "NoNewPrivs:") > 0;
	int sub = 0;
	if (rrc_sys_prctl(PR_GET_CHILD_SUBREAPER, (unsigned long)&sub, 0, 0, 0) == 0)
		a->child_subreaper = sub != 0;
	long r = rrc_sys_prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0);
	a->thp_disable = r > 0;
	int itimers = 1;
	for (int which = 0; which < 3; which++) {
		struct { long isec, iusec, vsec, vusec; } it = { 0 };
		if (rrc_sys_getitimer(which, &it) < 0) {
			itimers = 0;
			continue;
		}
		a->itimers[which] = (struct rrc_itimer){ it.isec, it.iusec, it.vsec, it.vusec };
	}
	if (itimers)
		a->valid |= RRC_PA_ITIMERS;
	/* The private expedited membarrier registrations: no file shows them,
	 * but a command the process did not register for fails with EPERM
	 * (one it did costs an IPI to the CPUs running its threads: none
	 * but this one run in the pause). MEMBARRIER_CMD_REGISTER_GLOBAL_
	 * EXPEDITED cannot be told this way (anyone may send a global one):
	 * not carried. */
	static const uint32_t cmds[] = { 1u << 3 /* PRIVATE_EXPEDITED */, 1u << 5 /* _SYNC_CORE */,
					 1u << 7 /* _RSEQ */ };
	long supported = rrc_syscall3(SYS_membarrier, 0 /* MEMBARRIER_CMD_QUERY */, 0, 0);
	if (supported >= 0) {
		for (unsigned i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
			if ((supported & cmds[i]) && rrc_syscall3(SYS_membarrier, cmds[i], 0, 0) == 0)
				a->membarrier |= cmds[i];
		a->valid |= RRC_PA_MEMBARRIER;
	}
	/* the UTS namespace's names (the container's own) */
	struct { char sysname[65], nodename[65], release[65], version[65], machine[65], domainname[65]; } u;
	if (rrc_syscall1(SYS_uname, (long)&u) == 0) {
		rrc_memcpy(a->nodename, u.nodename, sizeof a->nodename);
		rrc_memcpy(a->domainname, u.domainname, sizeof a->domainname);
		a->nodename[sizeof a->nodename - 1] = a->domainname[sizeof a->domainname - 1] = 0;
		a->valid |= RRC_PA_UTS;
	}
	return 0;
}
