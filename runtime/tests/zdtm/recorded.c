/* zdtm: a multithreaded program whose every recordable call it counts
 * itself, for `rrc exec --record` (tests/test_record.py).
 *
 * Four workers loop until verify: lock the shared mutex, bump the shared
 * counter, unlock; every 4th round a trylock of a second mutex the main
 * thread holds now and then (successes and EBUSY counted apart); every 8th
 * a timedlock of it with a deadline 1 ms away; a clock_gettime every round,
 * a gettimeofday and a time() every 16th, a getrandom of 24 bytes every 32nd,
 * an arc4random every 64th. Workers 0 and 1 also pass tokens through a
 * condition variable (0 produces, 1 consumes, both wait on it). Odd
 * workers take an rwlock to read every round, even ones to write every
 * 4th; a spinlock every 8th; worker 0 posts a semaphore that worker 2
 * trywaits; all pass a barrier three times and a pthread_once at the
 * start; a 1 ms sleep every 16th round.
 *
 * Verify: join the workers; the shared counter equals the sum of their
 * acquisitions. $ZDTM_DIR/counts.json gets each worker's tid and counts:
 * the log must hold exactly these events for that tid.
 * ZDTM_CORRUPT=1: one acquisition is counted twice.
 */
#include <pthread.h>
#include <semaphore.h>
#include <sys/random.h>
#include <sys/time.h>
#include "zdtm.h"

#define NW 4

struct counts {
	pid_t tid;
	long locks_shared, qlock_locks, trylock_ok, trylock_busy, timed_ok, timed_out, clocks, randoms, cond_waits;
	long rd, wr, spins, sem_ok, sem_busy, sleeps, barriers, serial, once_ran;
};

static pthread_mutex_t shared = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t second = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t qlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t qcond = PTHREAD_COND_INITIALIZER;
static long counter, queued;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static pthread_spinlock_t spin;
static sem_t sem;
static pthread_barrier_t barrier;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static __thread int ran_once;
static void once_init(void) { ran_once = 1; }
static int stop;
static struct counts cnt[NW];

static void *worker(void *arg)
{
	int w = (int)(long)arg;
	struct counts *c = &cnt[w];
	c->tid = zdtm_gettid();
	pthread_once(&once, once_init);
	c->once_ran = ran_once;
	for (int i = 0; i < 3; i++) {
		if (pthread_barrier_wait(&barrier) == PTHREAD_BARRIER_SERIAL_THREAD)
			c->serial++;
		c->barriers++;
	}
	/* stop is read under a lock its writer holds: a replay sees it at the
	 * same point of the lock order (an unsynchronized read would be a data
	 * race, which replay does not reproduce) */
	int quit = 0;
	for (long r = 1; !quit; r++) {
		if (r % 16 == 0) {
			zdtm_sleep_ms(1); /* a few thousand events a second per thread, not millions */
			c->sleeps++;
		}
		if (w % 2) {
			pthread_rwlock_rdlock(&rw);
			c->rd++;
		} else if (r % 4 == 0) {
			pthread_rwlock_wrlock(&rw);
			c->wr++;
		}
		if (w % 2 || r % 4 == 0)
			pthread_rwlock_unlock(&rw);
		if (r % 8 == 0) {
			pthread_spin_lock(&spin);
			c->spins++;
			pthread_spin_unlock(&spin);
		}
		if (w == 0 && r % 4 == 0)
			sem_post(&sem);
		if (w == 2 && r % 2 == 0) {
			if (sem_trywait(&sem) == 0)
				c->sem_ok++;
			else
				c->sem_busy++;
		}
		pthread_mutex_lock(&shared);
		counter++;
		quit = stop;
		pthread_mutex_unlock(&shared);
		c->locks_shared++;
		if (r % 4 == 0) {
			if (pthread_mutex_trylock(&second) == 0) {
				c->trylock_ok++;
				pthread_mutex_unlock(&second);
			} else {
				c->trylock_busy++;
			}
		}
		if (r % 8 == 0) {
			struct timespec dl;
			clock_gettime(CLOCK_REALTIME, &dl);
			c->clocks++;
			dl.tv_nsec += 1000000;
			if (dl.tv_nsec >= 1000000000) {
				dl.tv_sec++;
				dl.tv_nsec -= 1000000000;
			}
			if (pthread_mutex_timedlock(&second, &dl) == 0) {
				c->timed_ok++;
				pthread_mutex_unlock(&second);
			} else {
				c->timed_out++;
			}
		}
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		c->clocks++;
		if (r % 16 == 0) {
			struct timeval tv;
			gettimeofday(&tv, NULL);
			(void)time(NULL);
			c->clocks += 2;
		}
		if (r % 32 == 0) {
			unsigned char b[24];
			if (getrandom(b, sizeof b, 0) == (ssize_t)sizeof b)
				c->randoms++;
		}
		if (r % 64 == 0) {
			(void)arc4random();
			c->randoms++;
		}
		if (w < 2 && r % 2 == 0) {
			pthread_mutex_lock(&qlock);
			c->qlock_locks++;
			if (w == 0) {
				queued++;
				pthread_cond_signal(&qcond);
			} else {
				while (queued == 0 && !stop) {
					struct timespec dl;
					clock_gettime(CLOCK_REALTIME, &dl);
					c->clocks++;
					dl.tv_sec += 1;
					pthread_cond_timedwait(&qcond, &qlock, &dl);
					c->cond_waits++;
				}
				if (queued)
					queued--;
			}
			pthread_mutex_unlock(&qlock);
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	pthread_t th[NW];
	zdtm_check(pthread_spin_init(&spin, PTHREAD_PROCESS_PRIVATE) == 0 && sem_init(&sem, 0, 0) == 0 &&
		   pthread_barrier_init(&barrier, NULL, NW) == 0, "spin/sem/barrier init");
	for (int w = 0; w < NW; w++)
		zdtm_check(pthread_create(&th[w], NULL, worker, (void *)(long)w) == 0, "pthread_create");
	zdtm_ready();
	while (!zdtm_should_verify()) {
		/* hold the second mutex now and then: trylocks see EBUSY, timed
		 * locks time out */
		pthread_mutex_lock(&second);
		zdtm_sleep_ms(3);
		pthread_mutex_unlock(&second);
		zdtm_sleep_ms(2);
	}
	pthread_mutex_lock(&qlock);
	pthread_mutex_lock(&shared);
	stop = 1; /* under both locks its readers take */
	pthread_mutex_unlock(&shared);
	pthread_cond_broadcast(&qcond);
	pthread_mutex_unlock(&qlock);
	for (int w = 0; w < NW; w++)
		pthread_join(th[w], NULL);
	long sum = 0;
	char json[8192];
	size_t n = (size_t)snprintf(json, sizeof json, "[");
	for (int w = 0; w < NW; w++) {
		struct counts *c = &cnt[w];
		sum += c->locks_shared;
		n += (size_t)snprintf(json + n, sizeof json - n,
				      "%s{\"tid\":%d,\"locks_shared\":%ld,\"qlock_locks\":%ld,\"trylock_ok\":%ld,\"trylock_busy\":%ld,"
				      "\"timed_ok\":%ld,\"timed_out\":%ld,\"clocks\":%ld,\"randoms\":%ld,\"cond_waits\":%ld,"
				      "\"rd\":%ld,\"wr\":%ld,\"spins\":%ld,\"sem_ok\":%ld,\"sem_busy\":%ld,\"sleeps\":%ld,"
				      "\"barriers\":%ld,\"serial\":%ld,\"once_ran\":%ld}",
				      w ? "," : "", (int)c->tid, c->locks_shared, c->qlock_locks, c->trylock_ok, c->trylock_busy, c->timed_ok,
				      c->timed_out, c->clocks, c->randoms, c->cond_waits, c->rd, c->wr, c->spins, c->sem_ok,
				      c->sem_busy, c->sleeps, c->barriers, c->serial, c->once_ran);
	}
	snprintf(json + n, sizeof json - n, "]\n");
	zdtm_check(zdtm_write_file("counts.json", json) == 0, "writing counts.json");
	if (zdtm_corrupt)
		sum++;
	if (sum != counter)
		zdtm_fail("the shared counter is %ld, the workers acquired its mutex %ld times", counter, sum);
	zdtm_pass();
}
