/* SPDX-License-Identifier: MIT
 *
 * POSIX timers (timer_create) through a checkpoint: each timer's id,
 * clock, notification (signal, value, thread) and setting (time left,
 * interval) are read just before the pause, as the interval timers are
 * (procattr.c), into a table in the library's memory, which every image
 * holds; after a restore the control thread creates each again with its
 * own id (prctl PR_TIMER_CREATE_RESTORE_IDS, Linux 6.16: the id the
 * application holds in its timer_t stays valid) and arms it with the time
 * it had left. CRIU does the same in its restorer.
 *
 * Read from /proc/self/timers (id, signal and value, notify kind and
 * thread, clock) and timer_gettime. Not carried: the overrun count of a
 * timer that expired while its signal was pending (the signal itself is:
 * sigpending.c). A timer created between the read and the pause is not
 * in the image (the same window as the interval timers').
 *
 * Refused at dump, naming the cause: more timers than the table holds, a
 * kernel without restore ids (the restore could not give the ids back).
 * The capture runs on the control thread before the pause (libc allowed);
 * rrc_timers_restored after a restore, with the threads parked: raw
 * system calls only.
 */
#include <errno.h>
#include <string.h>
#include "rrc_lib.h"
#include "posix-timers.h"

#define TIMERS_MAX 64
#define PR_TIMER_CREATE_RESTORE_IDS 77
#define PR_TIMER_CREATE_RESTORE_IDS_OFF 0
#define PR_TIMER_CREATE_RESTORE_IDS_ON 1
#define PR_TIMER_CREATE_RESTORE_IDS_GET 2
#ifndef SIGEV_THREAD_ID
#define SIGEV_THREAD_ID 4
#endif

struct saved_timer {
	int32_t id, clock, notify, signo, tid;
	uint64_t value;                 /* sigev_value */
	struct rrc_ts left, interval;   /* timer_gettime */
};

/* The table of the last capture (in every image). */
static struct saved_timer table[TIMERS_MAX];
static uint32_t nr_timers;

/* The value of the line "KEY ..." of the block [p, end), or NULL. */
static const char *field(const char *p, const char *end, const char *key)
{
	const char *q = rrc_fdinfo_field(p, key);
	return q && q < end ? q : NULL;
}

/* One "ID:" block of /proc/self/timers, [p, end). 0 or -1. */
static int parse_block(const char *p, const char *end, struct saved_timer *t)
{
	const char *q;
	if (!(q = field(p, end, "ID:")))
		return -1;
	t->id = (int32_t)rrc_parse_u64(q, 10, NULL);
	if (!(q = field(p, end, "signal:")))
		return -1;
	t->signo = (int32_t)rrc_parse_u64(q, 10, &q);
	if (*q != '/')
		return -1;
	t->value = rrc_parse_u64(q + 1, 16, NULL);
	if (!(q = field(p, end, "notify:")))
		return -1;
	int kind;
	if (!rrc_strncmp(q, "signal/", 7))
		kind = SIGEV_SIGNAL, q += 7;
	else if (!rrc_strncmp(q, "none/", 5))
		kind = SIGEV_NONE, q += 5;
	else if (!rrc_strncmp(q, "thread/", 7))
		kind = SIGEV_THREAD, q += 7;
	else
		return -1;
	int to_thread = !rrc_strncmp(q, "tid.", 4);
	if (!to_thread && rrc_strncmp(q, "pid.", 4))
		return -1;
	t->tid = (int32_t)rrc_parse_u64(q + 4, 10, NULL);
	t->notify = kind | (to_thread ? SIGEV_THREAD_ID : 0);
	if (!(q = field(p, end, "ClockID:")))
		return -1;
	/* CPU-time clocks are negative (they name a thread or process) */
	int neg = *q == '-';
	t->clock = (int32_t)rrc_parse_u64(q + neg, 10, NULL);
	if (neg)
		t->clock = -t->clock;
	return 0;
}

/* The next timer's block at or after p ("ID: " at a line's start, not
 * the end of "ClockID: "), or NULL. */
static const char *next_block(const char *buf, const char *p)
{
	for (const char *q = p; (q = strstr(q, "ID: ")) != NULL; q += 4)
		if (q == buf || q[-1] == '\n')
			return q;
	return NULL;
}

int rrc_timers_capture(void)
{
	char buf[16384];
	char msg[300];
	size_t l;
	long n = rrc_read_file("/proc/self/timers", buf, sizeof buf - 1);
	uint32_t count = 0;
	if (n > 0) {
		buf[n] = 0;
		for (const char *q = buf; (q = next_block(buf, q)) != NULL; q += 4)
			count++;
	}
	if (count == 0) {
		if (RRC_LOAD(&nr_timers)) /* (untouched while there are none) */
			RRC_STORE(&nr_timers, 0);
		return 0;
	}
	if (count > TIMERS_MAX || (size_t)n >= sizeof buf - 1) {
		l = rrc_bput(msg, sizeof msg, 0, "the process has ");
		l = rrc_bput_u64(msg, sizeof msg, l, count);
		l = rrc_bput(msg, sizeof msg, l, " POSIX timers (timer_create); at most ");
		l = rrc_bput_u64(msg, sizeof msg, l, TIMERS_MAX);
		rrc_bput(msg, sizeof msg, l, " are carried through a checkpoint");
		rrc_set_err(RRC_ERR_TIMERS, 0, msg, -1, 0);
		return -1;
	}
	if (rrc_sys_prctl(PR_TIMER_CREATE_RESTORE_IDS, PR_TIMER_CREATE_RESTORE_IDS_GET, 0, 0, 0) < 0) {
		rrc_set_err(RRC_ERR_TIMERS, 0,
			    "the process has POSIX timers (timer_create) and this kernel cannot create a timer with "
			    "a given id (prctl PR_TIMER_CREATE_RESTORE_IDS, Linux 6.16): a restore could not give "
			    "the application its timers back", -1, 0);
		return -1;
	}
	uint32_t k = 0;
	const char *p = next_block(buf, buf);
	while (p) {
		const char *next = next_block(buf, p + 4);
		const char *end = next ? next : buf + n;
		struct saved_timer *t = &table[k];
		struct { struct rrc_ts interval, value; } its;
		if (parse_block(p, end, t) < 0 || rrc_sys_timer_gettime(t->id, &its) < 0) {
			l = rrc_bput(msg, sizeof msg, 0, "cannot read POSIX timer ");
			l = rrc_bput_u64(msg, sizeof msg, l, (uint64_t)t->id);
			rrc_bput(msg, sizeof msg, l, " (/proc/self/timers, timer_gettime): it would not come back");
			rrc_set_err(RRC_ERR_TIMERS, 0, msg, -1, 0);
			return -1;
		}
		t->left = its.value;
		t->interval = its.interval;
		k++;
		p = next;
	}
	RRC_STORE(&nr_timers, k);
	return 0;
}

void rrc_timers_restored(void)
{
	uint32_t n = RRC_LOAD(&nr_timers);
	char m[200];
	size_t l;
	for (uint32_t i = 0; i < n && i < TIMERS_MAX; i++) {
		const struct saved_timer *t = &table[i];
		/* struct sigevent: value, signo, notify, then the thread id */
		struct { uint64_t value; int32_t signo, notify, tid, pad[11]; } ev;
		rrc_memset(&ev, 0, sizeof ev);
		ev.value = t->value;
		ev.signo = t->signo;
		ev.notify = t->notify;
		ev.tid = t->tid;
		int32_t id = t->id;
		long r = rrc_sys_prctl(PR_TIMER_CREATE_RESTORE_IDS, PR_TIMER_CREATE_RESTORE_IDS_ON, 0, 0, 0);
		if (r == 0)
			r = rrc_sys_timer_create(t->clock, &ev, &id);
		rrc_sys_prctl(PR_TIMER_CREATE_RESTORE_IDS, PR_TIMER_CREATE_RESTORE_IDS_OFF, 0, 0, 0);
		if (r == 0 && id == t->id) {
			struct { struct rrc_ts interval, value; } its = { t->interval, t->left };
			if (its.value.sec || its.value.nsec)
				r = rrc_sys_timer_settime(id, 0, &its, NULL);
		} else if (r == 0) {
			r = -EEXIST;
		}
		if (r < 0) {
			l = rrc_bput(m, sizeof m, 0, "after restore: POSIX timer ");
			l = rrc_bput_u64(m, sizeof m, l, (uint64_t)t->id);
			l = rrc_bput(m, sizeof m, l, " could not be created again (errno ");
			l = rrc_bput_u64(m, sizeof m, l, (uint64_t)-r);
			rrc_bput(m, sizeof m, l, ")");
			rrc_log(m);
		}
	}
}
