/* SPDX-License-Identifier: MIT
 *
 * Signals pending at a pause (a blocked signal, or one that arrived while
 * the threads parked) are kernel state no image holds. Instead of
 * refusing the dump, each parked thread takes its own out of the kernel
 * (rt_sigtimedwait, whole siginfo) into a pool in the library's memory,
 * which is part of every image; when the pause ends, the dump done or
 * failed, or the process restored from that image, each thread queues
 * its own again. CRIU reads them with PTRACE_PEEKSIGINFO and queues them
 * in its restorer; the same siginfo goes back here, by the same calls.
 *
 * Thread or process: rt_sigtimedwait takes a signal from the thread's own
 * queue first, then from the process's. A thread takes a signal while the
 * thread's own pending set (SigPnd of /proc/thread-self/status) has it,
 * so only its own; the main thread then also takes the process's. Each
 * goes back where it was: rt_tgsigqueueinfo to the thread, rt_sigqueueinfo
 * to the process. The kernel lets a thread queue a signal of any origin
 * (si_code >= 0: kill(), the kernel) to itself, and to its process only
 * from the main thread: so the main thread carries the process's. Without
 * a main thread (it exited), a signal pending for the process is refused
 * as before (rrc_sigs_check).
 *
 * Order: a thread's signals go back in the order it took them, which is
 * the kernel's (lowest number first; a real-time signal's instances in
 * the order they were sent). Asynchronous signals are not recorded in rr
 * mode: queuing them again is no more a divergence than their arrival.
 *
 * ASYNC-SIGNAL-SAFE: the whole file (the park handler runs it; a parked
 * thread may hold malloc's lock). The pool is this file's own and lives
 * in the library's .bss, in every image.
 */
#include <errno.h>
#include <fcntl.h>
#include "rrc_lib.h"
#include "sigpending.h"

/* Signals the pool holds across all threads; more pending refuses the
 * dump (and the ones taken go back). */
#define SIGS_MAX 64
#define SIGINFO_SIZE 128

enum { SIG_FREE = 0, SIG_SAVED = 1, SIG_REQUEUED = 2 };

struct saved_sig {
	int32_t tid;            /* whose queue it came from; 0: the process's */
	uint32_t state;         /* SIG_* */
	int32_t signo;
	uint32_t requeue_errno; /* a queue call that failed (lost: counted) */
	uint8_t info[SIGINFO_SIZE];
};

static struct saved_sig pool[SIGS_MAX];
/* entries claimed in this pause (may run past SIGS_MAX: refused) */
static uint32_t nr_claimed;
/* a thread could not tell its own signals from the process's */
static uint32_t unreadable;
/* Before any signal is taken in a pause, the first thread with one reads
 * how many are queued for the user (a bound on this process's): more
 * than the pool holds and none is taken (the dump is refused with every
 * signal where it was). Only signals arriving during the pause past that
 * bound can fill the pool midway: refused too, and the ones taken go back
 * behind those left (nothing lost; instances of one real-time signal may
 * then change order). */
enum { GATE_UNKNOWN = 0, GATE_READING = 1, GATE_OPEN = 2, GATE_SHUT = 3 };
static uint32_t gate;
/* more pending than the pool holds (the gate, or a take with no room) */
static uint32_t too_many;
/* signals that could not be queued again (kept across pauses), and how
 * many of them the log has told of */
static uint32_t lost, lost_told;
static uint32_t lost_errno;

/* From the thread's status file: the signals queued for its user (the
 * count of SigQ, decimal: a bound on what this process has pending), its
 * own pending set (SigPnd) and the process's (ShdPnd). -1 if unreadable.
 * Read with a small window: the handler runs on the application's stack. */
enum { ST_QUEUED, ST_OWN, ST_SHARED, ST_N };
static int read_status(uint64_t v[ST_N])
{
	static const char *const keys[ST_N] = { "\nSigQ:\t", "\nSigPnd:\t", "\nShdPnd:\t" };
	char buf[256];
	long fd = rrc_sys_openat(AT_FDCWD, "/proc/thread-self/status", O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	int state[ST_N] = { 0 }; /* 0 matching the key, 1 in the number, 2 done */
	size_t match[ST_N] = { 0 };
	int digits[ST_N] = { 0 };
	for (int k = 0; k < ST_N; k++)
		v[k] = 0;
	for (;;) {
		long n = rrc_sys_read((int)fd, buf, sizeof buf);
		if (n <= 0)
			break;
		for (long i = 0; i < n; i++) {
			char c = buf[i];
			for (int k = 0; k < ST_N; k++) {
				if (state[k] == 1) {
					int base = k == ST_QUEUED ? 10 : 16;
					int d = c >= '0' && c <= '9' ? c - '0' : base == 16 && c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
					if (d < 0 || digits[k] == 16) {
						state[k] = 2;
						continue;
					}
					v[k] = v[k] * (uint64_t)base + (uint64_t)d;
					digits[k]++;
				} else if (state[k] == 0) {
					const char *key = keys[k];
					if (c == key[match[k]]) {
						if (!key[++match[k]])
							state[k] = 1;
					} else {
						match[k] = c == key[0];
					}
				}
			}
		}
	}
	rrc_sys_close((int)fd);
	for (int k = 0; k < ST_N; k++)
		if (!digits[k])
			return -1;
	return 0;
}

/* Takes one instance of sig into the pool as tid's (0: the process's).
 * 1 taken, 0 none pending, -1 no room. */
static int take(int sig, int32_t tid)
{
	uint32_t i = __atomic_fetch_add(&nr_claimed, 1, __ATOMIC_SEQ_CST);
	if (i >= SIGS_MAX) {
		RRC_STORE(&too_many, 1);
		return -1;
	}
	struct saved_sig *e = &pool[i];
	uint64_t set = 1ull << (sig - 1);
	struct rrc_ts now = { 0, 0 };
	long r = rrc_sys_rt_sigtimedwait(&set, e->info, &now);
	if (r != sig) {
		e->state = SIG_FREE;    /* nothing taken: the entry stays unused */
		return 0;
	}
	e->tid = tid;
	e->signo = sig;
	e->requeue_errno = 0;
	RRC_STORE(&e->state, SIG_SAVED);
	return 1;
}

/* The gate's state once known (spins while another thread reads it). */
static uint32_t gate_state(void)
{
	uint32_t g = GATE_UNKNOWN;
	if (__atomic_compare_exchange_n(&gate, &g, GATE_READING, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
		uint64_t st[ST_N];
		if (read_status(st) < 0) {
			RRC_STORE(&unreadable, 1);
			g = GATE_SHUT;
		} else {
			g = st[ST_QUEUED] > SIGS_MAX ? GATE_SHUT : GATE_OPEN;
		}
		RRC_STORE(&gate, g);
		return g;
	}
	while ((g = RRC_LOAD(&gate)) == GATE_READING)
		rrc_sys_sched_yield();
	return g;
}

void rrc_sigs_save(uint64_t pending, int32_t tid, int is_main)
{
	if (gate_state() != GATE_OPEN) {
		RRC_STORE(&too_many, 1);
		return;
	}
	for (int sig = 1; sig <= 64; sig++) {
		if (!(pending & (1ull << (sig - 1))))
			continue;
		for (;;) {
			uint64_t st[ST_N];
			if (read_status(st) < 0) {
				RRC_STORE(&unreadable, 1);
				return;
			}
			int mine = (st[ST_OWN] >> (sig - 1)) & 1;
			/* the process's: the main thread takes it, if still there */
			if (!mine && (!is_main || !((st[ST_SHARED] >> (sig - 1)) & 1)))
				break;
			if (take(sig, mine ? tid : 0) <= 0)
				break;  /* none left, or no room (refused by the check) */
		}
	}
}

void rrc_sigs_requeue(int32_t tid, int is_main)
{
	uint32_t n = RRC_LOAD(&nr_claimed);
	if (n > SIGS_MAX)
		n = SIGS_MAX;
	int pid = (int)rrc_g.pid;
	for (uint32_t i = 0; i < n; i++) {
		struct saved_sig *e = &pool[i];
		if (RRC_LOAD(&e->state) != SIG_SAVED)
			continue;
		long r;
		if (e->tid == tid)
			r = rrc_sys_rt_tgsigqueueinfo(pid, tid, e->signo, e->info);
		else if (e->tid == 0 && is_main)
			r = rrc_sys_rt_sigqueueinfo(pid, e->signo, e->info);
		else
			continue;
		if (r < 0) {
			e->requeue_errno = (uint32_t)-r;
			RRC_STORE(&lost_errno, (uint32_t)-r);
			__atomic_fetch_add(&lost, 1, __ATOMIC_SEQ_CST);
		}
		RRC_STORE(&e->state, SIG_REQUEUED);
	}
}

/* Entries of the last pause not yet queued again (their thread has not
 * run since it was woken). */
static uint32_t outstanding(void)
{
	uint32_t n = RRC_LOAD(&nr_claimed), left = 0;
	if (n > SIGS_MAX)
		n = SIGS_MAX;
	for (uint32_t i = 0; i < n; i++)
		left += RRC_LOAD(&pool[i].state) == SIG_SAVED;
	return left;
}

int rrc_sigs_settle(void)
{
	uint32_t l = RRC_LOAD(&lost);
	if (l != lost_told) {
		char m[200];
		size_t n = rrc_bput(m, sizeof m, 0, "pending signals the last pauses took could not be queued again: ");
		n = rrc_bput_u64(m, sizeof m, n, l - lost_told);
		n = rrc_bput(m, sizeof m, n, " lost (errno ");
		n = rrc_bput_u64(m, sizeof m, n, RRC_LOAD(&lost_errno));
		rrc_bput(m, sizeof m, n, ")");
		rrc_log(m);
		lost_told = l;
	}
	/* a woken thread queues its signals before it leaves the handler:
	 * wait for that (it needs a CPU), at most a second */
	uint64_t deadline = rrc_mono_ns() + 1000000000ull;
	while (outstanding()) {
		if (rrc_mono_ns() > deadline) {
			rrc_set_err(RRC_ERR_PENDING_SIGNAL, 0,
				    "signals the last pause took out of the kernel are not queued again yet "
				    "(a thread has not run for a second); the dump can be retried", -1, 0);
			return -1;
		}
		rrc_sys_sched_yield();
	}
	/* (nothing written when nothing was taken: these pages would go into
	 * every incremental image) */
	if (!RRC_LOAD(&nr_claimed) && RRC_LOAD(&gate) == GATE_UNKNOWN)
		return 0;
	rrc_memset(pool, 0, sizeof pool);
	RRC_STORE(&nr_claimed, 0);
	RRC_STORE(&unreadable, 0);
	RRC_STORE(&too_many, 0);
	RRC_STORE(&gate, GATE_UNKNOWN);
	return 0;
}

int rrc_sigs_check(void)
{
	char msg[300];
	size_t l;
	if (RRC_LOAD(&unreadable)) {
		rrc_set_err(RRC_ERR_PENDING_SIGNAL, 0,
			    "a signal is pending and /proc/thread-self/status could not be read to tell whether "
			    "it is the thread's or the process's; the dump can be retried", -1, 0);
		return -1;
	}
	if (RRC_LOAD(&too_many)) {
		l = rrc_bput(msg, sizeof msg, 0, "more than ");
		l = rrc_bput_u64(msg, sizeof msg, l, SIGS_MAX);
		rrc_bput(msg, sizeof msg, l, " signals pending (for this process, or queued for its user: SigQ in "
			 "/proc/PID/status), more than the library carries through a snapshot; nothing was taken "
			 "from the kernel that did not go back; the dump can be retried");
		rrc_set_err(RRC_ERR_PENDING_SIGNAL, 0, msg, -1, 0);
		return -1;
	}
	/* what is still pending for the process (the control thread's own
	 * are the library's business, not the image's): the control thread
	 * blocks every signal, so its pending set holds both; the status file
	 * (tens of microseconds in the pause) only when it is not empty */
	uint64_t park = 1ull << (RRC_PARK_SIG - 1), any = 0;
	rrc_sys_rt_sigpending(&any);
	if (!(any & ~park))
		return 0;
	uint64_t st[ST_N];
	if (read_status(st) < 0) {
		rrc_set_err(RRC_ERR_PENDING_SIGNAL, 0, "cannot read /proc/thread-self/status for the signals "
			    "pending for the process; the dump can be retried", -1, 0);
		return -1;
	}
	uint64_t left = st[ST_SHARED] & ~park;
	if (left) {
		l = rrc_bput(msg, sizeof msg, 0, "signal ");
		l = rrc_bput_u64(msg, sizeof msg, l, (uint64_t)__builtin_ctzll(left) + 1);
		rrc_bput(msg, sizeof msg, l, " is pending for the process and the main thread did not take it (it "
			 "arrived after the main thread parked, or the main thread has exited: only the main "
			 "thread can queue a process's signal again as it was); the dump can be retried");
		rrc_set_err(RRC_ERR_PENDING_SIGNAL, 0, msg, -1, 0);
		return -1;
	}
	return 0;
}
