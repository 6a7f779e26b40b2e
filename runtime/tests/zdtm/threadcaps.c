/* zdtm: threads with capability sets of their own come back with them
 * (issue 16 §4, credentials; runtime/lib/creds.c, the CREDS section's
 * thread list, restore/pie/restorer.c). capset (and libcap's
 * cap_set_proc) changes the calling thread's sets only:
 *   W1  drops CAP_NET_RAW from its effective set (it stays permitted);
 *   W2  drops CAP_NET_BIND_SERVICE from its effective and permitted sets
 *       and adds CAP_SYS_TIME to its inheritable one;
 *   the main thread keeps all of its own.
 * Verify (each thread its own, capget): W1's, W2's and the main thread's
 * sets as they were; then W1 raises CAP_NET_RAW again (still permitted),
 * W2 cannot raise CAP_NET_BIND_SERVICE (dropped for good).
 */
#include <linux/capability.h>
#include <pthread.h>
#include "zdtm.h"

struct caps { uint64_t eff, prm, inh; };

static struct caps get(void)
{
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2];
	zdtm_check(syscall(SYS_capget, &h, d) == 0, "capget");
	return (struct caps){ d[0].effective | (uint64_t)d[1].effective << 32,
			      d[0].permitted | (uint64_t)d[1].permitted << 32,
			      d[0].inheritable | (uint64_t)d[1].inheritable << 32 };
}

static int set(struct caps c)
{
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2] = {
		{ (uint32_t)c.eff, (uint32_t)c.prm, (uint32_t)c.inh },
		{ (uint32_t)(c.eff >> 32), (uint32_t)(c.prm >> 32), (uint32_t)(c.inh >> 32) } };
	return (int)syscall(SYS_capset, &h, d);
}

static struct caps main_caps, w1_want, w2_want;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int ready, verify, done;
static char failure[256];

static void fail_once(const char *what, struct caps got, struct caps want)
{
	pthread_mutex_lock(&lock);
	if (!failure[0])
		snprintf(failure, sizeof failure, "%s: eff %#llx prm %#llx inh %#llx, not %#llx %#llx %#llx", what,
			 (unsigned long long)got.eff, (unsigned long long)got.prm, (unsigned long long)got.inh,
			 (unsigned long long)want.eff, (unsigned long long)want.prm, (unsigned long long)want.inh);
	pthread_mutex_unlock(&lock);
}

static int same(struct caps a, struct caps b) { return a.eff == b.eff && a.prm == b.prm && a.inh == b.inh; }

static void *worker(void *arg)
{
	int n = (int)(long)arg;
	struct caps c = get();
	if (n == 1) {
		c.eff &= ~(1ull << CAP_NET_RAW);
		w1_want = c;
	} else {
		c.eff &= ~(1ull << CAP_NET_BIND_SERVICE);
		c.prm &= ~(1ull << CAP_NET_BIND_SERVICE);
		c.inh |= 1ull << CAP_SYS_TIME;
		w2_want = c;
	}
	zdtm_check(set(c) == 0, "capset (this thread's)");
	pthread_mutex_lock(&lock);
	ready++;
	pthread_cond_broadcast(&cond);
	while (!verify)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);
	struct caps got = get();
	if (!same(got, n == 1 ? w1_want : w2_want))
		fail_once(n == 1 ? "W1" : "W2", got, n == 1 ? w1_want : w2_want);
	else if (n == 1) {
		got.eff |= 1ull << CAP_NET_RAW;
		if (set(got) != 0)
			fail_once("W1 raising CAP_NET_RAW (still permitted) failed", got, w1_want);
	} else {
		got.eff |= 1ull << CAP_NET_BIND_SERVICE;
		if (set(got) == 0)
			fail_once("W2 raised CAP_NET_BIND_SERVICE (dropped from its permitted set)", got, w2_want);
	}
	pthread_mutex_lock(&lock);
	done++;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);
	return NULL;
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	main_caps = get();
	zdtm_check(main_caps.eff & (1ull << CAP_NET_RAW), "run as root (CAP_NET_RAW)");
	pthread_t t[2];
	for (long i = 0; i < 2; i++)
		zdtm_check(pthread_create(&t[i], NULL, worker, (void *)(i + 1)) == 0, "pthread_create");
	pthread_mutex_lock(&lock);
	while (ready < 2)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);

	zdtm_ready();
	zdtm_wait_verify();

	if (zdtm_corrupt) {
		struct caps c = get();
		c.eff &= ~(1ull << CAP_NET_RAW);
		zdtm_check(set(c) == 0, "corrupt");
	}
	pthread_mutex_lock(&lock);
	verify = 1;
	pthread_cond_broadcast(&cond);
	while (done < 2)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);
	struct caps m = get();
	if (!same(m, main_caps))
		fail_once("the main thread", m, main_caps);
	if (failure[0])
		zdtm_fail("%s", failure);
	zdtm_pass();
}
