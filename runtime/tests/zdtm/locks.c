/* zdtm: threads parked in mutex, condvar, rwlock, semaphore and raw futex
 * waits across a dump/restore, plus threads contending on a mutex.
 *
 * Set-up: the main thread holds a mutex, a read lock and a semaphore at 0;
 * one thread blocks on each (pthread_mutex_lock, pthread_cond_wait,
 * pthread_rwlock_wrlock, sem_wait, FUTEX_WAIT on a plain word). "ready" is
 * written only once /proc/self/task/TID/syscall shows every waiter inside
 * futex(2), so the dump really catches them asleep in the kernel.
 * Meanwhile four contender threads lock a mutex, bump a shared counter and
 * their own, unlock: the mutex word and its waiters change all the time.
 *
 * Verify: the main thread releases every waiter with a value it publishes
 * under the lock; each waiter checks it got that value and that its TID is
 * the one it had at start. Contenders stop; the shared counter must equal
 * the sum of theirs (a lost or doubled critical section breaks it). A
 * waiter that never wakes makes the timed join fail.
 */
#include <pthread.h>
#include <semaphore.h>
#include <linux/futex.h>
#include "zdtm.h"

#define NCONTEND 4

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t cm = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static sem_t sem;
static volatile uint32_t fword;

static volatile uint64_t published; /* written by main before each release */
static int cond_pred;

enum { W_MUTEX, W_COND, W_RWLOCK, W_SEM, W_FUTEX, NWAIT };
static const char *wname[NWAIT] = { "mutex", "condvar", "rwlock", "semaphore", "futex" };
static volatile pid_t wtid[NWAIT];
static char werr[NWAIT][200];

static pthread_mutex_t ctr_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile uint64_t shared_counter;
static volatile uint64_t own_counter[NCONTEND];
static volatile int stop_contenders;

static void check_woken(int w, uint64_t expect)
{
	if (zdtm_gettid() != wtid[w])
		snprintf(werr[w], sizeof(werr[w]), "%s waiter: TID changed from %d to %d",
			 wname[w], wtid[w], zdtm_gettid());
	else if (published != expect)
		snprintf(werr[w], sizeof(werr[w]), "%s waiter: woke up seeing %#lx, expected %#lx",
			 wname[w], (unsigned long)published, (unsigned long)expect);
}

static void *waiter(void *arg)
{
	int w = (int)(long)arg;
	wtid[w] = zdtm_gettid();
	int r = 0;
	switch (w) {
	case W_MUTEX:
		r = pthread_mutex_lock(&m);
		check_woken(w, 0x1001);
		pthread_mutex_unlock(&m);
		break;
	case W_COND:
		pthread_mutex_lock(&cm);
		while (!cond_pred)
			r = pthread_cond_wait(&cv, &cm);
		check_woken(w, 0x1002);
		pthread_mutex_unlock(&cm);
		break;
	case W_RWLOCK:
		r = pthread_rwlock_wrlock(&rw);
		check_woken(w, 0x1003);
		pthread_rwlock_unlock(&rw);
		break;
	case W_SEM:
		while ((r = sem_wait(&sem)) != 0 && errno == EINTR)
			;
		check_woken(w, 0x1004);
		break;
	case W_FUTEX:
		while (__atomic_load_n(&fword, __ATOMIC_ACQUIRE) == 0)
			syscall(SYS_futex, &fword, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
		check_woken(w, 0x1005);
		break;
	}
	if (r != 0 && !werr[w][0])
		snprintf(werr[w], sizeof(werr[w]), "%s waiter: wait returned %d", wname[w], r);
	return NULL;
}

static void *contender(void *arg)
{
	int i = (int)(long)arg;
	while (!stop_contenders) {
		pthread_mutex_lock(&ctr_lock);
		shared_counter++;
		own_counter[i]++;
		pthread_mutex_unlock(&ctr_lock);
		if ((own_counter[i] & 1023) == 0)
			zdtm_sleep_ms(1);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	zdtm_check(sem_init(&sem, 0, 0) == 0, "sem_init");
	pthread_mutex_lock(&m);
	pthread_rwlock_rdlock(&rw);

	pthread_t wt[NWAIT], ct[NCONTEND];
	for (int w = 0; w < NWAIT; w++)
		zdtm_check(pthread_create(&wt[w], NULL, waiter, (void *)(long)w) == 0, "pthread_create");
	for (int i = 0; i < NCONTEND; i++)
		zdtm_check(pthread_create(&ct[i], NULL, contender, (void *)(long)i) == 0, "pthread_create");

	for (int tries = 0;; tries++) {
		int asleep = 0;
		for (int w = 0; w < NWAIT; w++)
			asleep += wtid[w] && zdtm_task_syscall(wtid[w]) == SYS_futex;
		if (asleep == NWAIT)
			break;
		if (tries > 2000)
			zdtm_fail("set-up: only %d of %d waiters reached futex(2)", asleep, NWAIT);
		zdtm_sleep_ms(5);
	}
	zdtm_ready();
	zdtm_wait_verify();

	/* Release every waiter, each with its own published value. */
	published = 0x1001;
	pthread_mutex_unlock(&m);
	int stuck[NWAIT] = { 0 };
	stuck[W_MUTEX] = zdtm_join(wt[W_MUTEX], NULL, 5000) != 0;

	pthread_mutex_lock(&cm);
	published = 0x1002;
	cond_pred = 1;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&cm);
	stuck[W_COND] = zdtm_join(wt[W_COND], NULL, 5000) != 0;

	published = 0x1003;
	pthread_rwlock_unlock(&rw);
	stuck[W_RWLOCK] = zdtm_join(wt[W_RWLOCK], NULL, 5000) != 0;

	published = 0x1004;
	sem_post(&sem);
	stuck[W_SEM] = zdtm_join(wt[W_SEM], NULL, 5000) != 0;

	published = 0x1005;
	__atomic_store_n(&fword, 1, __ATOMIC_RELEASE);
	syscall(SYS_futex, &fword, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
	stuck[W_FUTEX] = zdtm_join(wt[W_FUTEX], NULL, 5000) != 0;

	for (int w = 0; w < NWAIT; w++) {
		if (stuck[w])
			zdtm_fail("%s waiter (TID %d) did not wake up within 5 s of its release", wname[w], wtid[w]);
		if (werr[w][0])
			zdtm_fail("%s", werr[w]);
	}

	stop_contenders = 1;
	for (int i = 0; i < NCONTEND; i++)
		if (zdtm_join(ct[i], NULL, 5000) != 0)
			zdtm_fail("contender %d did not stop (stuck on the mutex?)", i);
	uint64_t sum = 0;
	for (int i = 0; i < NCONTEND; i++)
		sum += own_counter[i];
	if (zdtm_corrupt)
		shared_counter++;
	if (sum != shared_counter)
		zdtm_fail("contended counter %lu != sum of per-thread counters %lu",
			  (unsigned long)shared_counter, (unsigned long)sum);
	if (pthread_mutex_trylock(&ctr_lock) != 0)
		zdtm_fail("contended mutex still locked after every contender stopped");
	printf("locks: %d waiters woke, %lu contended increments\n", NWAIT, (unsigned long)sum);
	zdtm_pass();
}
