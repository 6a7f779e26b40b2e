/* zdtm: 1 to 64 threads (argv[1], default 4), all running across the dump.
 *
 * Each thread fills a 4 KiB buffer on its own stack with the pattern of
 * its iteration k, then publishes k, and sleeps 1 ms; its TID, pthread_t
 * and a __thread value are recorded at start. After a restore every
 * thread must come back with its TID (rrc-restore recreates them with
 * clone3 + set_tid), stop when told, and find its stack buffer holding
 * the pattern of its last published iteration.
 */
#include <pthread.h>
#include <dirent.h>
#include "zdtm.h"

#define MAXT 64
static int nthreads = 4;
static volatile int stop;
static volatile uint64_t iter[MAXT];
static pid_t tids[MAXT];
static pthread_t selves[MAXT];
static char terr[MAXT][200];
static __thread int my_index = -1;

static void *worker(void *arg)
{
	int t = (int)(long)arg;
	my_index = t;
	tids[t] = zdtm_gettid();
	selves[t] = pthread_self();
	uint64_t buf[512];
	uint64_t k = 0;
	zdtm_fill(buf, sizeof(buf), (uint64_t)t, k);
	iter[t] = k;
	while (!stop) {
		k++;
		zdtm_fill(buf, sizeof(buf), (uint64_t)t, k);
		__atomic_store_n(&iter[t], k, __ATOMIC_RELEASE);
		zdtm_sleep_ms(1);
	}
	long w = zdtm_cmp_fill(buf, sizeof(buf), (uint64_t)t, k);
	if (w >= 0)
		snprintf(terr[t], sizeof(terr[t]), "thread %d: stack buffer word %ld differs (iteration %lu)", t, w,
			 (unsigned long)k);
	else if (zdtm_gettid() != tids[t])
		snprintf(terr[t], sizeof(terr[t]), "thread %d: TID %d, was %d", t, zdtm_gettid(), tids[t]);
	else if (my_index != t || !pthread_equal(pthread_self(), selves[t]))
		snprintf(terr[t], sizeof(terr[t]), "thread %d: TLS index %d / pthread_self changed", t, my_index);
	return NULL;
}

static int task_exists(pid_t tid)
{
	char p[64];
	snprintf(p, sizeof(p), "/proc/self/task/%d", tid);
	return access(p, F_OK) == 0;
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	if (argc > 1)
		nthreads = atoi(argv[1]);
	if (nthreads < 1 || nthreads > MAXT)
		zdtm_fail("thread count %d outside 1..%d", nthreads, MAXT);
	pthread_t th[MAXT];
	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setstacksize(&a, 256 << 10);
	for (int t = 0; t < nthreads; t++)
		zdtm_check(pthread_create(&th[t], &a, worker, (void *)(long)t) == 0, "pthread_create");
	for (int t = 0; t < nthreads; t++)
		while (!__atomic_load_n(&tids[t], __ATOMIC_ACQUIRE))
			zdtm_sleep_ms(1);
	zdtm_ready();
	zdtm_wait_verify();
	if (zdtm_corrupt)
		tids[nthreads - 1] += 1000;
	for (int t = 0; t < nthreads; t++)
		if (!task_exists(tids[t]))
			zdtm_fail("thread %d: TID %d is not in /proc/self/task", t, tids[t]);
	/* every thread makes progress again */
	uint64_t before[MAXT];
	for (int t = 0; t < nthreads; t++)
		before[t] = __atomic_load_n(&iter[t], __ATOMIC_ACQUIRE);
	for (int t = 0; t < nthreads; t++) {
		int waited = 0;
		while (__atomic_load_n(&iter[t], __ATOMIC_ACQUIRE) == before[t]) {
			if (++waited > 5000)
				zdtm_fail("thread %d (TID %d) makes no progress", t, tids[t]);
			zdtm_sleep_ms(1);
		}
	}
	stop = 1;
	for (int t = 0; t < nthreads; t++) {
		if (zdtm_join(th[t], NULL, 5000) != 0)
			zdtm_fail("thread %d did not stop within 5 s", t);
		if (terr[t][0])
			zdtm_fail("%s", terr[t]);
	}
	for (int t = 0; t < nthreads; t++)
		for (int u = t + 1; u < nthreads; u++)
			if (tids[t] == tids[u])
				zdtm_fail("threads %d and %d share TID %d", t, u, tids[t]);
	printf("threads: %d threads verified\n", nthreads);
	zdtm_pass();
}
