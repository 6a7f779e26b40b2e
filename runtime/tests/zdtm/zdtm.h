/* SPDX-License-Identifier: MIT
 *
 * zdtm.h: the protocol shared by rrc's zdtm-style test programs (in the
 * spirit of CRIU's zdtm suite: one program per kind of state).
 *
 * Protocol, driven by tests/test_zdtm.py through files in $ZDTM_DIR (a
 * directory of the host file system, visible inside the container):
 *
 *   1. the program sets up its state, then creates $ZDTM_DIR/ready;
 *   2. it keeps running, mutating its state deterministically where the
 *      test is about change between dumps, while the harness dumps it
 *      (full, then incrementals), kills it and restores it;
 *   3. it polls for $ZDTM_DIR/verify about every 5 ms (zdtm_should_verify);
 *   4. then checks its state byte for byte and writes $ZDTM_DIR/result:
 *      "PASS\n" or "FAIL: <what differs>\n", and exits (0 or 1).
 *
 * For replay (tests/test_replay.py), $ZDTM_RUN_MS=N replaces the verify
 * file by time: the program verifies N ms after ready by CLOCK_MONOTONIC,
 * a value the record log holds, so a replay of its log verifies at the
 * same point of its execution; then, instead of exiting, it idles (so the
 * replay can end and go live). Its result and digest files, written
 * again by the replay, must equal the recorded run's.
 *
 * Files are written to a temporary name and renamed, so the harness never
 * reads half a file. The programs use only ordinary libc (they stand for
 * applications); the few that need a raw syscall to bypass librrc's
 * wrappers take it from rrc/sys.h, the project's one raw-syscall layer.
 */
#ifndef ZDTM_H
#define ZDTM_H

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/syscall.h>

/* Not every program uses every helper. */
#define ZDTM_FN static __attribute__((unused))

static const char *zdtm_dir;
static const char *zdtm_name = "zdtm";
/* ZDTM_CORRUPT=1: self-test of a verifier. Just before verifying, the
 * program damages the state it is about to check (one program-specific
 * change), so the result must be FAIL. Used by tests/test_zdtm.py to show
 * that every verifier can fail. */
ZDTM_FN int zdtm_corrupt;

ZDTM_FN void zdtm_path(char *buf, size_t len, const char *file)
{
	snprintf(buf, len, "%s/%s", zdtm_dir, file);
}

/* Writes $ZDTM_DIR/<file> atomically (tmp + rename). */
ZDTM_FN int zdtm_write_file(const char *file, const char *text)
{
	char path[PATH_MAX], tmp[PATH_MAX + 8];
	zdtm_path(path, sizeof(path), file);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	size_t len = strlen(text), off = 0;
	while (off < len) {
		ssize_t n = write(fd, text + off, len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			close(fd);
			return -1;
		}
		off += (size_t)n;
	}
	close(fd);
	return rename(tmp, path);
}

ZDTM_FN int zdtm_file_exists(const char *file)
{
	char path[PATH_MAX];
	zdtm_path(path, sizeof(path), file);
	/* with the effective ids and capabilities: access() takes the real
	 * ones, which a program that dropped privileges (creds.c) lacks */
	return faccessat(AT_FDCWD, path, F_OK, AT_EACCESS) == 0;
}

/* $ZDTM_RUN_MS: verify that long after ready (0: when the file appears) */
static uint64_t zdtm_run_ns, zdtm_ready_ns;

ZDTM_FN void zdtm_sleep_ms(unsigned ms);

/* After the result: exit, or under $ZDTM_RUN_MS idle for good. */
__attribute__((noreturn)) ZDTM_FN void zdtm_end(int code)
{
	if (zdtm_run_ns)
		for (;;)
			zdtm_sleep_ms(20);
	exit(code);
}

/* Result: the first failure wins; the program exits after writing it. */
ZDTM_FN void zdtm_pass(void)
{
	zdtm_write_file("result", "PASS\n");
	printf("%s: PASS\n", zdtm_name);
	fflush(stdout);
	zdtm_end(0);
}

__attribute__((format(printf, 1, 2), noreturn))
ZDTM_FN void zdtm_fail(const char *fmt, ...)
{
	char msg[1024];
	int n = snprintf(msg, sizeof(msg), "FAIL: ");
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg + n, sizeof(msg) - (size_t)n - 2, fmt, ap);
	va_end(ap);
	strcat(msg, "\n");
	zdtm_write_file("result", msg);
	printf("%s: %s", zdtm_name, msg);
	fflush(stdout);
	zdtm_end(1);
}

/* A set-up step failed: nothing to verify, say so. */
#define zdtm_check(cond, what) \
	do { if (!(cond)) zdtm_fail("%s: %s (errno %d: %s) at %s:%d", zdtm_name, what, \
				    errno, strerror(errno), __FILE__, __LINE__); } while (0)

ZDTM_FN void zdtm_init(int argc, char **argv)
{
	(void)argc;
	const char *slash = strrchr(argv[0], '/');
	zdtm_name = slash ? slash + 1 : argv[0];
	zdtm_dir = getenv("ZDTM_DIR");
	if (!zdtm_dir || !*zdtm_dir) {
		fprintf(stderr, "%s: ZDTM_DIR is not set (see zdtm.h for the protocol)\n", zdtm_name);
		exit(2);
	}
	/* Output goes to rrc's --log file: unbuffered lines keep it readable
	 * across a dump/kill/restore. */
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *c = getenv("ZDTM_CORRUPT");
	zdtm_corrupt = c && *c && strcmp(c, "0") != 0;
	const char *run = getenv("ZDTM_RUN_MS");
	zdtm_run_ns = run && *run ? strtoull(run, NULL, 10) * 1000000ull : 0;
}

ZDTM_FN void zdtm_ready(void)
{
	if (zdtm_write_file("ready", "ready\n") != 0) {
		fprintf(stderr, "%s: cannot write %s/ready: %s\n", zdtm_name, zdtm_dir, strerror(errno));
		exit(2);
	}
	printf("%s: ready\n", zdtm_name);
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	zdtm_ready_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Rate-limited check for $ZDTM_DIR/verify: at most one access() per 5 ms,
 * so that tight mutation loops can call it every iteration. */
ZDTM_FN uint64_t zdtm_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

ZDTM_FN int zdtm_should_verify(void)
{
	static uint64_t next;
	uint64_t now = zdtm_now_ns();
	if (now < next)
		return 0;
	next = now + 5000000ull;
	if (zdtm_run_ns)
		return zdtm_ready_ns && now - zdtm_ready_ns >= zdtm_run_ns;
	return zdtm_file_exists("verify");
}

/* Sleeps ~ms; a signal of the program's own only shortens it (rrc's
 * park signal does not: librrc's waits.c carries the sleep on). */
ZDTM_FN void zdtm_sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* Step `step` of a stepped program is in place: says so in
 * $ZDTM_DIR/step (ready after step 0), then waits for the harness: the
 * next step ($ZDTM_DIR/next, taken: 0) or the verify (1), whichever it
 * asks for first. */
ZDTM_FN int zdtm_step_done(unsigned step)
{
	char text[32];
	snprintf(text, sizeof(text), "%u\n", step);
	zdtm_write_file("step", text);
	if (step == 0)
		zdtm_ready();
	char next[PATH_MAX];
	zdtm_path(next, sizeof(next), "next");
	for (;;) {
		if (zdtm_should_verify())
			return 1;
		if (access(next, F_OK) == 0) {
			unlink(next);
			return 0;
		}
		zdtm_sleep_ms(1);
	}
}

/* Runs step(1), step(2), ... ms milliseconds apart until the harness asks
 * to verify; returns the last round completed, from which the verifier
 * recomputes the state. */
ZDTM_FN long zdtm_rounds(void (*step)(long), unsigned ms)
{
	long last = 0;
	for (long r = 1; !zdtm_should_verify(); r++) {
		step(r);
		last = r;
		zdtm_sleep_ms(ms);
	}
	return last;
}

/* The last round r <= R with r == k (mod m) and r >= 1, -1 if none: for
 * verifiers of programs whose round r writes item r mod m. */
ZDTM_FN long zdtm_last_round_congruent(long R, long k, long m)
{
	if (R < 1)
		return -1;
	long r = R - (((R - k) % m) + m) % m;
	return r >= 1 ? r : -1;
}

/* Blocks until verify appears (polling every 5 ms). */
ZDTM_FN void zdtm_wait_verify(void)
{
	while (!zdtm_should_verify())
		zdtm_sleep_ms(5);
}

#ifdef _PTHREAD_H
/* A stop flag for worker threads, read and written under a mutex: a
 * replay sees it change at the same point of the lock order (a plain flag
 * would be a data race, which a replay does not reproduce: README). */
static pthread_mutex_t zdtm_stop_lock = PTHREAD_MUTEX_INITIALIZER;
static int zdtm_stop_flag;
ZDTM_FN int zdtm_stopped(void)
{
	pthread_mutex_lock(&zdtm_stop_lock);
	int v = zdtm_stop_flag;
	pthread_mutex_unlock(&zdtm_stop_lock);
	return v;
}
ZDTM_FN void zdtm_stop(void)
{
	pthread_mutex_lock(&zdtm_stop_lock);
	zdtm_stop_flag = 1;
	pthread_mutex_unlock(&zdtm_stop_lock);
}
#endif

/* Message r of a stream: 1..3000 bytes of letters, all from r (the
 * record tests recompute them to check what the log says was sent). */
ZDTM_FN size_t zdtm_message(long r, char *buf)
{
	size_t n = 1 + (size_t)((r * 7919) % 3000);
	for (size_t i = 0; i < n; i++)
		buf[i] = (char)('a' + (r + (long)i) % 26);
	return n;
}

/* Deterministic 64-bit mixing (splitmix64): page and buffer patterns are
 * derived from (what, generation, index) so a verifier can recompute them. */
ZDTM_FN inline uint64_t zdtm_mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

ZDTM_FN inline uint64_t zdtm_pattern(uint64_t a, uint64_t b, uint64_t c)
{
	return zdtm_mix(a * 0x100000001b3ull ^ zdtm_mix(b * 0xff51afd7ed558ccdull ^ zdtm_mix(c)));
}

ZDTM_FN void zdtm_fill(void *buf, size_t len, uint64_t a, uint64_t b)
{
	uint64_t *w = buf;
	for (size_t i = 0; i < len / 8; i++)
		w[i] = zdtm_pattern(a, b, i);
}

/* Returns the index of the first differing 64-bit word, or -1. */
ZDTM_FN long zdtm_cmp_fill(const void *buf, size_t len, uint64_t a, uint64_t b)
{
	const uint64_t *w = buf;
	for (size_t i = 0; i < len / 8; i++)
		if (w[i] != zdtm_pattern(a, b, i))
			return (long)i;
	return -1;
}

ZDTM_FN pid_t zdtm_gettid(void)
{
	return (pid_t)syscall(SYS_gettid);
}

/* The syscall thread TID of this process is blocked in (first field of
 * /proc/self/task/TID/syscall), or -1 when it runs in user space. */
ZDTM_FN long zdtm_task_syscall(pid_t tid)
{
	char path[64], buf[128] = "";
	snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", tid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	long nr = -1;
	if (fgets(buf, sizeof(buf), f) && buf[0] >= '0' && buf[0] <= '9')
		nr = atol(buf);
	fclose(f);
	return nr;
}

/* Thread-join with a deadline: a thread that never wakes up after a
 * restore is a failure, not a hang. */
#ifdef _PTHREAD_H
ZDTM_FN int zdtm_join(pthread_t t, void **ret, unsigned timeout_ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += timeout_ms / 1000;
	ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return pthread_timedjoin_np(t, ret, &ts);
}
#endif

#endif /* ZDTM_H */
