/* SPDX-License-Identifier: MIT
 *
 * Credentials (issue 16 §4: servers that drop privileges, as Debian's own
 * configurations run them).
 *
 * A process that switched users with setuid/setgid (memcached -u
 * memcache, lighttpd's server.username) is no longer dumpable: the kernel
 * makes its /proc files root's and denies it its own /proc/self/pagemap,
 * mem, fdinfo and timers, which a checkpoint reads, and denies its pause
 * helper (another process) the application's /proc. A dump therefore
 * makes the process dumpable for its duration (prctl(PR_SET_DUMPABLE, 1)
 * is always allowed to a process on itself) and puts the application's
 * setting back when it is over; the image records the application's
 * setting (a value 2, suid_dumpable's "root only", which prctl cannot set,
 * comes back as 0). While the dump runs, processes of the same user could
 * ptrace the server: the window is the dump's (pre-copy included).
 *
 * The credentials themselves (ids, supplementary groups, the capability
 * sets, securebits) are the main thread's, from /proc/self/status read
 * just before the pause (securebits, which no /proc file shows, by the
 * main thread itself in its park handler) into this file's state, in the
 * library's memory and so in every image (the CREDS section too). glibc's setuid and its
 * kin change every thread's (a signal to each), the library's threads
 * included: a control thread whose ids differ from the main thread's
 * means a thread changed its own with a raw system call, which is refused
 * (the image gives one set to all threads). In the pause the control
 * thread checks its ids again (a setuid between the capture and the
 * pause). After a restore the restorer gave the application's threads
 * their credentials; the control thread takes its own last
 * (rrc_creds_restored), after the work that still needs root (POSIX
 * timers with their ids), and sets the recorded dumpable flag.
 */
#include <sys/prctl.h>
#include "rrc_lib.h"
#include "rrc/creds.h"
#include "creds.h"
#include "rr-log.h"

static struct rrc_creds captured;  /* the image's; .bss: in every image */
static int captured_valid;
static int app_dumpable = -1;      /* the application's, while a dump runs */
static volatile int32_t main_secbits = -1; /* the main thread's, from its park handler */
/* the CREDS section: the main thread's, then the threads whose
 * capability sets are their own (rrc_creds_park_thread) */
static struct {
	struct rrc_creds c;
	uint32_t nr, reserved;
	struct rrc_thread_caps t[RRC_THREAD_CAPS_MAX];
} section;
static uint32_t nr_differ;          /* may pass RRC_THREAD_CAPS_MAX: refused */
static int32_t differ_failed;       /* a thread could not read its own sets */

int rrc_creds_dump_begin(void)
{
	RRC_STORE(&nr_differ, 0); /* the park handlers list them again */
	RRC_STORE(&differ_failed, 0);
	long d = rrc_sys_prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
	if (d < 0) {
		rrc_set_err(RRC_ERR_PROCESS_STATE, (int)-d, "PR_GET_DUMPABLE failed", -1, 0);
		return -1;
	}
	app_dumpable = (int)d;
	if (d == 1)
		return 0;
	long r = rrc_sys_prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
	if (r < 0) {
		app_dumpable = -1;
		rrc_set_err(RRC_ERR_PROCESS_STATE, (int)-r,
			    "the process is not dumpable (it switched users, or called prctl(PR_SET_DUMPABLE, 0)) "
			    "and prctl(PR_SET_DUMPABLE, 1) failed: the kernel would deny it its own "
			    "/proc/self/pagemap and mem, which a checkpoint reads", -1, 0);
		return -1;
	}
	return 0;
}

void rrc_creds_dump_end(void)
{
	if (app_dumpable >= 0 && app_dumpable != 1)
		rrc_sys_prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	app_dumpable = -1;
}

/* "Uid:\t0\t0\t0\t0": four numbers after key; 0 or -1 */
static int four_ids(const char *status, const char *key, uint32_t *out)
{
	const char *p = rrc_fdinfo_field(status, key);
	if (!p)
		return -1;
	for (int i = 0; i < 4; i++) {
		const char *end;
		p = rrc_skip_ws(p);
		out[i] = (uint32_t)rrc_parse_u64(p, 10, &end);
		if (end == p)
			return -1;
		p = end;
	}
	return 0;
}

static int cap_set(const char *status, const char *key, uint64_t *out)
{
	const char *p = rrc_fdinfo_field(status, key), *end;
	if (!p)
		return -1;
	*out = rrc_parse_u64(p, 16, &end);
	return end == p ? -1 : 0;
}

/* "Groups:\t1 2 3 \n" (empty: "Groups:\t\n") */
static int groups(const char *status, struct rrc_creds *c)
{
	const char *p = rrc_fdinfo_field(status, "Groups:");
	if (!p)
		return -1;
	c->nr_groups = 0;
	for (;;) {
		const char *end;
		p = rrc_skip_ws(p);
		if (*p == '\n')
			return 0;
		uint64_t g = rrc_parse_u64(p, 10, &end);
		if (end == p)
			return -1; /* the buffer ended within the line */
		if (c->nr_groups == RRC_CREDS_GROUPS_MAX)
			return -2;
		c->groups[c->nr_groups++] = (uint32_t)g;
		p = end;
	}
}

static void refuse(const char *a, long num, const char *b)
{
	rrc_set_err(RRC_ERR_PROCESS_STATE, 0, a, num, b);
}

int rrc_creds_capture(const char *status)
{
	struct rrc_creds c;
	rrc_memset(&c, 0, sizeof c);
	uint32_t u[4], g[4];
	if (four_ids(status, "Uid:", u) < 0 || four_ids(status, "Gid:", g) < 0 ||
	    cap_set(status, "CapInh:", &c.cap_inh) < 0 || cap_set(status, "CapPrm:", &c.cap_prm) < 0 ||
	    cap_set(status, "CapEff:", &c.cap_eff) < 0 || cap_set(status, "CapBnd:", &c.cap_bnd) < 0 ||
	    cap_set(status, "CapAmb:", &c.cap_amb) < 0) {
		refuse("cannot read the credentials (Uid, Gid, Cap*) from /proc/self/status", -1, 0);
		return -1;
	}
	int gr = groups(status, &c);
	if (gr == -2) {
		refuse("the process has more than ", RRC_CREDS_GROUPS_MAX,
		       " supplementary groups, more than the image carries");
		return -1;
	}
	if (gr < 0) {
		refuse("cannot read the supplementary groups from /proc/self/status", -1, 0);
		return -1;
	}
	c.uid = u[0], c.euid = u[1], c.suid = u[2], c.fsuid = u[3];
	c.gid = g[0], c.egid = g[1], c.sgid = g[2], c.fsgid = g[3];
	/* this thread's: the main thread's own replaces it in the pause
	 * (rrc_creds_park_main), where it has one */
	long sb = rrc_sys_prctl(PR_GET_SECUREBITS, 0, 0, 0, 0);
	c.secbits = sb < 0 ? 0 : (uint32_t)sb;
	c.dumpable = app_dumpable == 1;
	/* the control thread's ids: the main thread's, unless a thread
	 * changed its own by a raw system call */
	uint32_t r, e, s;
	if (rrc_sys_getresuid(&r, &e, &s) < 0 || r != c.uid || e != c.euid || s != c.suid ||
	    rrc_sys_getresgid(&r, &e, &s) < 0 || r != c.gid || e != c.egid || s != c.sgid) {
		refuse("the threads do not all have the main thread's user and group ids (uid ", c.euid,
		       "): a thread changed its own with a raw system call (glibc's setuid changes every "
		       "thread's); the image gives all threads one set of credentials");
		return -1;
	}
	captured = c;
	captured_valid = 1;
	return 0;
}

/* In the pause: the ids are still those captured (a setuid in between
 * changed every thread's, this one's too). ASYNC-SIGNAL-SAFE. */
/* The main thread's park handler: securebits are a thread's, and no
 * /proc file shows another thread's. ASYNC-SIGNAL-SAFE. */
void rrc_creds_park_main(void)
{
	long sb = rrc_sys_prctl(PR_GET_SECUREBITS, 0, 0, 0, 0);
	RRC_STORE(&main_secbits, sb < 0 ? -1 : (int32_t)sb);
}

/* Another application thread's park handler: its capability sets are its
 * own (capset, and libcap's cap_set_proc, change the calling thread's
 * only). One whose sets differ from the main thread's is listed, and the
 * image's CREDS section carries the list after the main thread's
 * credentials (struct rrc_thread_caps): the restorer gives that thread
 * its own sets. The list is emptied at each dump's start
 * (rrc_creds_dump_begin) and kept until the image is written.
 * ASYNC-SIGNAL-SAFE. */

void rrc_creds_park_thread(int32_t tid)
{
	struct rrc_thread_caps t = { (uint32_t)tid, 0, 0, 0, 0, 0 };
	/* the library's threads take the main thread's at a restore (restored.c) */
	if (!captured_valid || rrc_rr_is_library_thread())
		return;
	if (rrc_creds_thread_caps(&t) < 0) {
		RRC_STORE(&differ_failed, tid);
		return;
	}
	if (t.cap_inh == captured.cap_inh && t.cap_prm == captured.cap_prm && t.cap_eff == captured.cap_eff &&
	    t.cap_amb == captured.cap_amb)
		return;
	uint32_t i = __atomic_fetch_add(&nr_differ, 1, __ATOMIC_RELAXED);
	if (i < RRC_THREAD_CAPS_MAX)
		section.t[i] = t;
}

/* The CREDS section: the main thread's credentials, then the threads
 * whose capability sets are their own, if any. */
void rrc_creds_section(const void **p, uint64_t *len)
{
	uint32_t n = RRC_LOAD(&nr_differ);
	section.c = captured;
	section.nr = n;
	section.reserved = 0;
	*p = &section;
	*len = sizeof section.c + (n ? 8 + (uint64_t)n * sizeof section.t[0] : 0);
}

int rrc_creds_check(void)
{
	int32_t failed = RRC_LOAD(&differ_failed);
	uint32_t n = RRC_LOAD(&nr_differ);
	if (failed || n > RRC_THREAD_CAPS_MAX) {
		if (failed)
			refuse("thread ", failed, " could not read its own capability sets (capget) in the pause");
		else
			refuse("more than 64 threads have capability sets of their own (capset is a thread's), which "
			       "an image does not carry", -1, 0);
		RRC_STORE(&differ_failed, 0);
		RRC_STORE(&main_secbits, -1);
		return -1;
	}
	int32_t sb = RRC_LOAD(&main_secbits);
	if (sb >= 0)
		captured.secbits = (uint32_t)sb;
	RRC_STORE(&main_secbits, -1);
	uint32_t r, e, s, gr, ge, gs;
	if (rrc_sys_getresuid(&r, &e, &s) == 0 && r == captured.uid && e == captured.euid && s == captured.suid &&
	    rrc_sys_getresgid(&gr, &ge, &gs) == 0 && gr == captured.gid && ge == captured.egid && gs == captured.sgid)
		return 0;
	refuse("the process changed its user or group ids between the capture of its credentials and the "
	       "pause (a setuid during the dump): the next dump takes the new ones", -1, 0);
	return -1;
}

/* A pause helper started now has this thread's credentials; the kernel
 * lets it read the application's /proc only with the same ids (checked
 * at capture) and every capability the application's main thread has
 * permitted, or CAP_SYS_PTRACE (cap_ptrace_access_check). A process
 * that kept capabilities its library's threads lost (capset is a
 * thread's: the main thread's own) is dumped without a helper, on the
 * control thread alone. */
int rrc_creds_helper_may_read(void)
{
	uint64_t prm, eff;
	if (!captured_valid)
		return 1;
	if (rrc_creds_caps_self(&prm, &eff) < 0)
		return 0;
	if ((captured.cap_prm & ~prm) == 0 || (eff & (1ull << 19 /* CAP_SYS_PTRACE */)))
		return 1;
	static int said;
	if (!said) {
		said = 1;
		rrc_log("copy snapshots without the pause helper: the application's main thread has capabilities "
			"the library's threads lost, and a helper without them would be denied its /proc");
	}
	return 0;
}

const struct rrc_creds *rrc_creds_image(void)
{
	return &captured;
}

/* After a restore: the control thread takes the credentials the
 * restorer gave the application's threads, then the dumpable flag is the
 * application's again. Raw system calls. */
void rrc_creds_restored(void)
{
	const char *what = "";
	app_dumpable = -1; /* the dump this image came from was not over */
	if (!captured_valid)
		return;
	long r = rrc_creds_apply(&captured, &what);
	if (r < 0) {
		char m[200];
		size_t l = rrc_bput(m, sizeof m, 0, "after restore: the control thread kept root's credentials: ");
		l = rrc_bput(m, sizeof m, l, what);
		l = rrc_bput(m, sizeof m, l, " failed, errno ");
		rrc_bput_u64(m, sizeof m, l, (uint64_t)-r);
		rrc_log(m);
	}
	rrc_sys_prctl(PR_SET_DUMPABLE, captured.dumpable ? 1 : 0, 0, 0, 0);
}
