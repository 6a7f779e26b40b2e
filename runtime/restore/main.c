/* SPDX-License-Identifier: MIT
 *
 * rrc-restore: build a process again from a checkpoint chain.
 *
 *   rrc-restore --status-fd N [--log-fd M] [--repaired-fds R] [--replay-fd L] IMAGE...
 *   rrc-restore --status-fd N [--log-fd M] [--repaired-fds R] --image-stream S
 *
 * IMAGE... is the chain, from the full image to the newest. With
 * --image-stream, one full image arrives on fd S (a pipe) instead: the
 * failover streams the backup's committed state without writing it to a
 * file first (image-read.c). `rrc restore`
 * starts this program as pid 1 of fresh pid, mount, uts and ipc namespaces
 * (and the chosen network namespace), /proc remounted, a private tmpfs on
 * /run/rrc-container, inside the container's cgroup, with $RRC_CONTROL the
 * control socket path to bind. One struct rrc_restore_status record goes
 * to fd N (include/rrc/restore-status.h). Fd R, if given, is a socket on
 * which TCP connections rebuilt with TCP_REPAIR arrive, each for an fd
 * number of the image (sk-repaired.c). Fd L, if given, is the record log
 * `rrc restore --replay` checked: it stays open in the restored process,
 * whose library replays it from the image's cut (lib/rr-replay.c); no
 * progress for T ms is a divergence.
 *
 * Phase 1 (this program, ordinary C): verify the chain, resolve pages,
 * cwd/umask/comm/personality, recreate fds at their numbers, rlimits, then
 * map the restorer blob and jump to it. Phase 2 (restore/pie/, the blob):
 * see restore/pie/restorer.c. docs/restore.md describes the whole sequence.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/stat.h>
#include <unistd.h>
#include "rrc/control.h"
#include "rrc/creds.h"
#include "rrc/sys.h"
#include "restore.h"

static void usage(void)
{
	rst_fail(RRC_RST_USAGE, 0, 0,
		 "usage: rrc-restore --status-fd N [--log-fd M] [--repaired-fds R] [--replay-fd L [--replay-timeout-ms T] [--replay-to IMAGE_ID] "
		 "[--replay-until FD:BYTES] [--replay-races off|order|pace] [--replay-pace-max-us U] [--replay-connections] [--replay-record]] "
		 "{IMAGE... | --image-stream FD}");
}

static int parse_fd(const char *s)
{
	char *end;
	long v = strtol(s, &end, 10);

	if (!*s || *end || v < 0 || v > 1 << 20)
		usage();
	if (fcntl((int)v, F_GETFD) < 0)
		rst_fail(RRC_RST_USAGE, errno, 0, "fd %ld given on the command line is not open", v);
	return (int)v;
}

/* rlimits as recorded; a limit this process may not raise (no
 * CAP_SYS_RESOURCE) is kept as it is, with a warning */
static void restore_rlimits(const struct rrc_process *p)
{
	for (int i = 0; i < RRC_RLIMIT_MAX && i < RLIM_NLIMITS; i++) {
		struct rlimit rl = { p->rlimits[i].cur, p->rlimits[i].max }, cur;

		if (getrlimit(i, &cur) < 0 || (cur.rlim_cur == rl.rlim_cur && cur.rlim_max == rl.rlim_max))
			continue;
		if (setrlimit(i, &rl) < 0)
			rst_log("warning: cannot set rlimit %d to %llu/%llu (kept %llu/%llu): %s", i,
				(unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max,
				(unsigned long long)cur.rlim_cur, (unsigned long long)cur.rlim_max,
				rst_strerror(errno));
	}
}

/* PROCATTR (image.h), but no_new_privs: set last (restore_no_new_privs) */
static void restore_attrs(const struct rrc_procattr *a)
{
	if (!a)
		return;
	if (a->valid & RRC_PA_OOM_SCORE_ADJ) {
		char v[16];
		int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC), n = snprintf(v, sizeof v, "%d", a->oom_score_adj);
		if (fd < 0 || write(fd, v, (size_t)n) != n)
			rst_log("warning: cannot set oom_score_adj to %d (kept what rrc-restore had): %s",
				a->oom_score_adj, rst_strerror(errno));
		if (fd >= 0)
			close(fd);
	}
	if (prctl(PR_SET_CHILD_SUBREAPER, (unsigned long)a->child_subreaper, 0, 0, 0) < 0)
		rst_fail(RRC_RST_PROCESS, errno, 0, "PR_SET_CHILD_SUBREAPER failed: %s", rst_strerror(errno));
	if (prctl(PR_SET_THP_DISABLE, (unsigned long)a->thp_disable, 0, 0, 0) < 0)
		rst_fail(RRC_RST_PROCESS, errno, 0, "PR_SET_THP_DISABLE failed: %s", rst_strerror(errno));
	/* membarrier registrations are the mm's, which the restored process
	 * keeps: each command's register command is the next bit up */
	for (uint32_t cmd = 1u << 3; cmd <= 1u << 7; cmd <<= 2)
		if ((a->valid & RRC_PA_MEMBARRIER) && (a->membarrier & cmd) &&
		    syscall(SYS_membarrier, cmd << 1, 0, 0) < 0)
			rst_fail(RRC_RST_PROCESS, errno, 0, "membarrier registration 0x%x failed: %s", cmd << 1,
				 rst_strerror(errno));
	/* the container's UTS namespace is the restorer's own (rrc-container
	 * makes one for every process it starts): its names as they were, on
	 * whatever host the restore runs */
	if (a->valid & RRC_PA_UTS) {
		if (sethostname(a->nodename, strlen(a->nodename)) < 0)
			rst_fail(RRC_RST_PROCESS, errno, 0, "sethostname(%s) failed: %s", a->nodename, rst_strerror(errno));
		if (setdomainname(a->domainname, strlen(a->domainname)) < 0)
			rst_fail(RRC_RST_PROCESS, errno, 0, "setdomainname(%s) failed: %s", a->domainname,
				 rst_strerror(errno));
	}
}

/* The interval timers with the time they had left: just before the jump,
 * so that a signal they send finds the process's own actions (the blob
 * sets them first; every signal is blocked until the threads resume). */
static void restore_itimers(const struct rrc_procattr *a)
{
	if (!a || !(a->valid & RRC_PA_ITIMERS))
		return;
	/* a timer about to expire must not kill the restorer with SIGALRM's
	 * default action: its signal waits, pending, for the process's own
	 * handler and mask (the blob blocks everything too, and each thread
	 * resumes with its recorded mask) */
	sigset_t all;
	sigfillset(&all);
	if (sigprocmask(SIG_BLOCK, &all, NULL) < 0)
		rst_fail(RRC_RST_PROCESS, errno, 0, "blocking signals before the timers: %s", rst_strerror(errno));
	for (int which = 0; which < 3; which++) {
		const struct rrc_itimer *t = &a->itimers[which];
		struct itimerval v = { { t->interval_sec, t->interval_usec }, { t->value_sec, t->value_usec } };
		if (!t->value_sec && !t->value_usec)
			continue;
		if (setitimer(which, &v, NULL) < 0)
			rst_fail(RRC_RST_PROCESS, errno, 0, "setitimer(%d, %lld.%06lld s left, every %lld.%06lld s) failed: %s",
				 which, (long long)t->value_sec, (long long)t->value_usec, (long long)t->interval_sec,
				 (long long)t->interval_usec, rst_strerror(errno));
	}
}

/* It cannot be undone, and nothing after it needs what it forbids (no
 * exec follows: the blob maps the process's memory and resumes it). */
static void restore_no_new_privs(const struct rrc_procattr *a)
{
	if (a && a->no_new_privs && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		rst_fail(RRC_RST_PROCESS, errno, 0, "PR_SET_NO_NEW_PRIVS failed: %s", rst_strerror(errno));
}

/* The image's credentials are given to the threads by the blob, at the
 * very end (rrc/creds.h); what would make that fail is found here, before
 * anything changed: capabilities this restorer cannot grant (a capability
 * set only shrinks), or its own lack of the capabilities the change
 * needs. */
static void check_creds(const struct rrc_creds *cr)
{
	uint64_t prm, eff;
	if (!cr)
		return;
	long r = rrc_creds_caps_self(&prm, &eff);
	if (r < 0)
		rst_fail(RRC_RST_PROCESS, (int)-r, 0, "capget failed: %s", rst_strerror((int)-r));
	uint64_t need = 1ull << 6 /* CAP_SETGID */ | 1ull << 7 /* CAP_SETUID */ | 1ull << 8 /* CAP_SETPCAP */;
	if ((eff & need) != need)
		rst_fail(RRC_RST_PROCESS, EPERM, 0,
			 "rrc-restore lacks CAP_SETUID, CAP_SETGID or CAP_SETPCAP (effective %#llx): it cannot give the "
			 "process its credentials (uid %u, gid %u)", (unsigned long long)eff, cr->euid, cr->egid);
	uint64_t bnd = 0;
	for (unsigned cap = 0; cap < 64; cap++) {
		int in = prctl(PR_CAPBSET_READ, cap, 0, 0, 0);
		if (in < 0)
			break;
		if (in)
			bnd |= 1ull << cap;
	}
	uint64_t missing = (cr->cap_prm | cr->cap_inh) & ~prm;
	if (missing)
		rst_fail(RRC_RST_PROCESS, EPERM, 0,
			 "the image's process had capabilities %#llx that rrc-restore does not have (its permitted set "
			 "is %#llx): a restore cannot grant them", (unsigned long long)missing, (unsigned long long)prm);
	if (cr->cap_bnd & ~bnd)
		rst_log("warning: the image's bounding set %#llx has capabilities %#llx this restorer's has not; "
			"they stay out of it", (unsigned long long)cr->cap_bnd, (unsigned long long)(cr->cap_bnd & ~bnd));
}

static void restore_process(const struct rrc_process *p)
{
	if (p->cwd[0] && chdir(p->cwd) < 0)
		rst_fail(RRC_RST_PROCESS, errno, 0, "cannot change to the working directory %s: %s", p->cwd,
			 rst_strerror(errno));
	umask((mode_t)p->umask);
	if (p->personality != 0xffffffffu && personality(p->personality) < 0)
		rst_fail(RRC_RST_PROCESS, errno, 0, "personality(0x%x) failed: %s", p->personality,
			 rst_strerror(errno));
	if (prctl(PR_SET_NAME, p->comm, 0, 0, 0) < 0)
		rst_fail(RRC_RST_PROCESS, errno, 0, "PR_SET_NAME failed: %s", rst_strerror(errno));
}

int main(int argc, char **argv)
{
	struct chain c;
	struct fd_ctx x;
	struct blob_plan_in in;
	int nimg, *own, nr_own = 0, i, repaired_fd = -1, stream_fd = -1, replay_fd = -1;
	size_t nr_fowns;
	struct rrc_replay_request rq = { .fd = -1, .until_fd = -1 };
	const char *replay_to_hex = 0, *replay_until = 0, *replay_races = 0;
	const char *control;

	rst_t0_ns = rrc_mono_ns();
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--status-fd") && i + 1 < argc)
			rst_status_fd = parse_fd(argv[++i]);
		else if (!strcmp(argv[i], "--log-fd") && i + 1 < argc)
			rst_log_fd = parse_fd(argv[++i]);
		else if (!strcmp(argv[i], "--repaired-fds") && i + 1 < argc)
			repaired_fd = parse_fd(argv[++i]);
		else if (!strcmp(argv[i], "--image-stream") && i + 1 < argc)
			stream_fd = parse_fd(argv[++i]);
		else if (!strcmp(argv[i], "--replay-fd") && i + 1 < argc)
			replay_fd = parse_fd(argv[++i]);
		else if (!strcmp(argv[i], "--replay-timeout-ms") && i + 1 < argc)
			rq.timeout_ms = (uint32_t)strtoul(argv[++i], 0, 10);
		else if (!strcmp(argv[i], "--replay-to") && i + 1 < argc)
			replay_to_hex = argv[++i];
		else if (!strcmp(argv[i], "--replay-until") && i + 1 < argc)
			replay_until = argv[++i];
		else if (!strcmp(argv[i], "--replay-races") && i + 1 < argc)
			replay_races = argv[++i];
		else if (!strcmp(argv[i], "--replay-pace-max-us") && i + 1 < argc)
			rq.pace_max_us = (uint32_t)strtoul(argv[++i], 0, 10);
		else if (!strcmp(argv[i], "--replay-connections"))
			rq.flags |= RRC_REPLAY_CONNECTIONS;
		else if (!strcmp(argv[i], "--replay-record"))
			rq.flags |= RRC_REPLAY_RECORD;
		else if (!strcmp(argv[i], "--"))
			{ i++; break; }
		else if (argv[i][0] == '-' && argv[i][1])
			usage();
		else
			break;
	}
	if (rst_status_fd < 0)
		usage();
	nimg = argc - i;
	if (stream_fd >= 0 && nimg)
		usage();
	if (stream_fd >= 0)
		nimg = 1;
	if (nimg < 1)
		usage();
	if (nimg > 60)
		rst_fail(RRC_RST_USAGE, 0, 0, "a chain of %d images is too long (at most 60)", nimg);
	if (getpid() != 1)
		rst_fail(RRC_RST_USAGE, 0, 0,
			 "rrc-restore must run as pid 1 of a fresh pid namespace (getpid() = %d): "
			 "the threads' TIDs must be free", (int)getpid());
	control = getenv("RRC_CONTROL");
	if (!control || !*control)
		control = RRC_CTL_DEFAULT_PATH;
	if (control[0] != '/') { /* the restorer's cwd is left for the process's (below) */
		static char abs_control[PATH_MAX];
		if (!getcwd(abs_control, sizeof abs_control) ||
		    strlen(abs_control) + 1 + strlen(control) >= sizeof abs_control)
			rst_fail(RRC_RST_USAGE, errno, 0, "$RRC_CONTROL %s: relative, and the cwd cannot be read", control);
		strcat(abs_control, "/");
		strcat(abs_control, control);
		control = abs_control;
	}
	rst_log("restoring a chain of %d image(s), control socket %s", nimg, control);
	memset(&x, 0, sizeof(x));
	/* first: the launcher blocks until they are read */
	if (repaired_fd >= 0) {
		repaired_receive(&x, repaired_fd);
		/* a restorer started in advance (failover) waited here: the
		 * log's times count from the hand-over */
		rst_t0_ns = rrc_mono_ns();
		rst_log("handed over: %zu repaired connection(s), %zu to accept", x.nr_rep, x.nr_pend);
	}

	if (stream_fd >= 0)
		chain_load_stream(&c, stream_fd);
	else
		chain_load(&c, nimg, argv + i);
	if (c.proc->pid != 1)
		rst_fail(RRC_RST_IMAGE, 0, (uint32_t)c.n,
			 "image %d (%s): the process was pid %u in its namespace; only pid 1 (rrc exec) can be restored",
			 c.n, c.newest->path, c.proc->pid);
	chain_resolve_pages(&c);
	mem_check_vmas(&c);
	mem_check_vdso(&c);
	check_creds(c.creds);
	locks_check(&c);
	sysvipc_check(&c);
	nr_fowns = fown_check(&c);

	/* fds: ours (images, status, log, repaired sockets) move above the
	 * image's numbers */
	x.c = &c;
	x.control_path = control;
	repaired_check(&x);
	own = xcalloc((size_t)nimg + 3 + x.nr_rep + x.nr_pend, sizeof(int));
	for (int k = 0; k < nimg; k++)
		own[nr_own++] = c.imgs[k].fd;
	own[nr_own++] = rst_status_fd;
	own[nr_own++] = rst_log_fd;
	for (size_t k = 0; k < x.nr_rep; k++)
		own[nr_own++] = x.rep[k].fd;
	for (size_t k = 0; k < x.nr_pend; k++) /* stay above the image's numbers */
		own[nr_own++] = x.pend[k].fd;
	own[nr_own++] = replay_fd; /* the log: stays open, a library fd of the process */
	fds_prepare(&x, own, nr_own);
	/* the process's cwd, umask, personality and name before its fds: a
	 * unix socket bound to a relative name is bound again in that cwd
	 * (everything the restorer itself opens from here on has an absolute
	 * path: the executable from /proc/PID/exe, the control socket made
	 * absolute above) */
	restore_process(c.proc);
	restore_attrs(c.attrs);
	sysvipc_restore(&c);
	if (replay_fd >= 0) {
		replay_fd = own[nr_own - 1];
		rst_log("replaying the record log on fd %d after the restore", replay_fd);
	}
	for (int k = 0; k < nimg; k++)
		c.imgs[k].fd = own[k];
	for (size_t k = 0; k < x.nr_rep; k++)
		x.rep[k].fd = own[nimg + 2 + (int)k];
	for (size_t k = 0; k < x.nr_pend; k++)
		x.pend[k].fd = own[nimg + 2 + (int)x.nr_rep + (int)k];
	fds_restore(&x);

	memset(&in, 0, sizeof(in));
	in.c = &c;
	in.nr_fowns = nr_fowns;
	in.exe_fd = -1;
	if (c.proc->exe_path[0]) {
		int fd = open(c.proc->exe_path, O_RDONLY | O_CLOEXEC);

		if (fd < 0)
			rst_fail(RRC_RST_PROCESS, errno, 0, "cannot open the executable %s: %s",
				 c.proc->exe_path, rst_strerror(errno));
		in.exe_fd = fd_high(&x, fd);
	}
	/* the file locks once no fd of the process is closed any more */
	locks_restore(&c);
	rq.fd = replay_fd;
	if (replay_races) {
		if (!strcmp(replay_races, "off"))
			rq.races = RRC_RACES_OFF;
		else if (!strcmp(replay_races, "order"))
			rq.races = RRC_RACES_ORDER;
		else if (!strcmp(replay_races, "pace"))
			rq.races = RRC_RACES_PACE;
		else
			rst_fail(RRC_RST_USAGE, 0, 0, "--replay-races %s: not off, order or pace", replay_races);
	}
	if (replay_until) {
		char *end = 0;
		long fd = strtol(replay_until, &end, 10);
		if (fd < 0 || fd > 0x7fffffff || *end != ':' || !end[1])
			rst_fail(RRC_RST_USAGE, 0, 0, "--replay-until %s: not FD:BYTES", replay_until);
		rq.until_fd = (int32_t)fd;
		rq.until_bytes = strtoull(end + 1, &end, 10);
		if (*end)
			rst_fail(RRC_RST_USAGE, 0, 0, "--replay-until %s: not FD:BYTES", replay_until);
	}
	if (replay_to_hex) {
		if (strlen(replay_to_hex) != 32)
			rst_fail(RRC_RST_USAGE, 0, 0, "--replay-to %s: not an image id (32 hex digits)", replay_to_hex);
		for (int k = 0; k < 16; k++) {
			unsigned v;
			if (sscanf(replay_to_hex + 2 * k, "%2x", &v) != 1)
				rst_fail(RRC_RST_USAGE, 0, 0, "--replay-to %s: not an image id (32 hex digits)", replay_to_hex);
			rq.to[k] = (uint8_t)v;
		}
		rq.flags |= RRC_REPLAY_END;
	}
	in.replay = rq;
	in.image_fds = xcalloc((size_t)nimg, sizeof(int));
	for (int k = 0; k < nimg; k++)
		in.image_fds[k] = c.imgs[k].fd;

	restore_rlimits(c.proc);
	restore_no_new_privs(c.attrs);
	restore_itimers(c.attrs);
	mem_jump_to_blob(&in);
}
