/* zdtm: credentials (issue 16 §4; the image's CREDS section,
 * runtime/lib/creds.c, common/creds.c). Three threads, as root at start,
 * end up as a server that dropped privileges but kept a few
 * capabilities: supplementary groups 3 7 11; gids 1001/1002/1003 and uids
 * 2001/2002/2003 (real/effective/saved; glibc changes every thread's);
 * then in each thread (capabilities, the bounding set and securebits are
 * a thread's): SECBIT_KEEP_CAPS, CAP_SYS_BOOT out of the bounding set,
 * permitted {DAC_OVERRIDE, KILL, NET_BIND_SERVICE}, effective
 * {DAC_OVERRIDE, NET_BIND_SERVICE} (DAC_OVERRIDE: the zdtm directory is
 * root's), inheritable and ambient {NET_BIND_SERVICE}. The uid change left
 * the process not dumpable (fs.suid_dumpable 0).
 * Verify: every thread has all of that, and the process is not dumpable.
 */
#include <pthread.h>
#include <grp.h>
#include <sys/prctl.h>
#include <linux/capability.h>
#include "zdtm.h"

#define NTHREADS 3
#define CAP(c) (1u << (c))
static const uint32_t want_prm = CAP(CAP_DAC_OVERRIDE) | CAP(CAP_KILL) | CAP(CAP_NET_BIND_SERVICE);
static const uint32_t want_eff = CAP(CAP_DAC_OVERRIDE) | CAP(CAP_NET_BIND_SERVICE);
static const uint32_t want_inh = CAP(CAP_NET_BIND_SERVICE);
static const gid_t want_groups[] = { 3, 7, 11 };

static pthread_barrier_t barrier;
static volatile int verify_now;
static char verdict[NTHREADS][200];

static int caps_get(struct __user_cap_data_struct d[2])
{
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	return (int)syscall(SYS_capget, &h, d);
}

static int caps_set(uint32_t eff, uint32_t prm, uint32_t inh)
{
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2] = { { eff, prm, inh }, { 0, 0, 0 } };
	return (int)syscall(SYS_capset, &h, d);
}

/* this thread's part before the id change, and after it */
static void own_caps_before(void)
{
	zdtm_check(prctl(PR_SET_SECUREBITS, 1 << 4 /* SECBIT_KEEP_CAPS */, 0, 0, 0) == 0, "SECBIT_KEEP_CAPS");
	zdtm_check(prctl(PR_CAPBSET_DROP, CAP_SYS_BOOT, 0, 0, 0) == 0, "PR_CAPBSET_DROP");
}

static void own_caps_after(void)
{
	zdtm_check(caps_set(want_eff, want_prm, want_inh) == 0, "capset");
	zdtm_check(prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_NET_BIND_SERVICE, 0, 0) == 0, "ambient raise");
}

/* what this thread has, against what it should have: "" or a description */
static void check_own(char *out, size_t n)
{
	uid_t r, e, s;
	gid_t gr, ge, gs, g[16];
	struct __user_cap_data_struct d[2];
	out[0] = 0;
	if (getresuid(&r, &e, &s) || r != 2001 || e != 2002 || s != 2003) {
		snprintf(out, n, "uids %u/%u/%u", r, e, s);
		return;
	}
	if (getresgid(&gr, &ge, &gs) || gr != 1001 || ge != 1002 || gs != 1003) {
		snprintf(out, n, "gids %u/%u/%u", gr, ge, gs);
		return;
	}
	int ng = getgroups(16, g);
	if (ng != 3 || memcmp(g, want_groups, sizeof want_groups)) {
		snprintf(out, n, "%d supplementary groups, first %u", ng, ng > 0 ? g[0] : 0);
		return;
	}
	long fsuid = syscall(SYS_setfsuid, -1), fsgid = syscall(SYS_setfsgid, -1);
	if (fsuid != 2002 || fsgid != 1002) {
		snprintf(out, n, "fsuid %ld fsgid %ld", fsuid, fsgid);
		return;
	}
	if (caps_get(d) || d[0].permitted != want_prm || d[0].effective != want_eff || d[0].inheritable != want_inh ||
	    d[1].permitted || d[1].effective || d[1].inheritable) {
		snprintf(out, n, "capabilities eff %#x prm %#x inh %#x", d[0].effective, d[0].permitted, d[0].inheritable);
		return;
	}
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, CAP_NET_BIND_SERVICE, 0, 0) != 1 ||
	    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, CAP_KILL, 0, 0) != 0) {
		snprintf(out, n, "ambient set");
		return;
	}
	if (prctl(PR_CAPBSET_READ, CAP_SYS_BOOT, 0, 0, 0) != 0 || prctl(PR_CAPBSET_READ, CAP_SYS_ADMIN, 0, 0, 0) != 1) {
		snprintf(out, n, "bounding set: CAP_SYS_BOOT %d CAP_SYS_ADMIN %d",
			 prctl(PR_CAPBSET_READ, CAP_SYS_BOOT, 0, 0, 0), prctl(PR_CAPBSET_READ, CAP_SYS_ADMIN, 0, 0, 0));
		return;
	}
	int sb = prctl(PR_GET_SECUREBITS, 0, 0, 0, 0);
	if (sb != 1 << 4)
		snprintf(out, n, "securebits %#x", sb);
}

static void *worker(void *arg)
{
	int i = (int)(intptr_t)arg;
	own_caps_before();
	pthread_barrier_wait(&barrier); /* 1: every thread keeps its capabilities */
	pthread_barrier_wait(&barrier); /* 2: the ids changed */
	own_caps_after();
	pthread_barrier_wait(&barrier); /* 3: set up */
	while (!__atomic_load_n(&verify_now, __ATOMIC_ACQUIRE))
		zdtm_sleep_ms(5);
	check_own(verdict[i], sizeof verdict[i]);
	pthread_barrier_wait(&barrier); /* 4: checked */
	return 0;
}

int main(int argc, char **argv)
{
	pthread_t th[NTHREADS - 1];
	zdtm_init(argc, argv);
	zdtm_check(pthread_barrier_init(&barrier, 0, NTHREADS) == 0, "barrier");
	for (int i = 1; i < NTHREADS; i++)
		zdtm_check(pthread_create(&th[i - 1], 0, worker, (void *)(intptr_t)i) == 0, "pthread_create");
	zdtm_check(setgroups(3, want_groups) == 0, "setgroups");
	own_caps_before();
	pthread_barrier_wait(&barrier);
	zdtm_check(setresgid(1001, 1002, 1003) == 0, "setresgid");
	zdtm_check(setresuid(2001, 2002, 2003) == 0, "setresuid");
	pthread_barrier_wait(&barrier);
	own_caps_after();
	pthread_barrier_wait(&barrier);
	zdtm_check(prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0, "not dumpable after the id change");

	zdtm_ready();
	zdtm_wait_verify();

	if (zdtm_corrupt)
		zdtm_check(caps_set(want_eff, want_prm & ~CAP(CAP_KILL), want_inh) == 0, "corrupt");
	__atomic_store_n(&verify_now, 1, __ATOMIC_RELEASE);
	check_own(verdict[0], sizeof verdict[0]);
	pthread_barrier_wait(&barrier);
	for (int i = 0; i < NTHREADS; i++)
		if (verdict[i][0])
			zdtm_fail("thread %d: %s", i, verdict[i]);
	int dumpable = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
	if (dumpable != 0)
		zdtm_fail("dumpable %d, not 0 as the uid change left it", dumpable);
	zdtm_pass();
}
