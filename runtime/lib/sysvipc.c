/* SPDX-License-Identifier: MIT
 *
 * SysV IPC objects and the IPC sysctls (issue 16 §4: what the process
 * owns in its namespaces). rrc starts every process in an IPC namespace
 * of its own (rrc-container), so every semaphore set and message queue
 * there is the process's, and a restore gets an empty namespace: without
 * them the process's next semop or msgrcv on its id fails with EINVAL.
 *
 * In the pause (every thread parked: no semop or msgsnd under way), the
 * objects go into a buffer of this module, which the image's writer
 * emits as the SYSVIPC section (image.h): each set's values (GETALL),
 * each queue's messages oldest first, read without taking them
 * (msgrcv's MSG_COPY, the kernel's checkpoint/restore interface, as
 * CRIU's ipc_ns.c does), ids, keys, owners, creators and modes
 * (SEM_STAT_ANY, MSG_STAT_ANY: whatever the mode). The namespace's SysV
 * limits (kernel.sem, msgmax, msgmnb, msgmni, shmmax, shmall, shmmni)
 * come from the same info calls, three syscalls in the pause; they are
 * carried when they differ from those the process started (or was
 * restored) with, which a restore's new namespace has.
 *
 * Not carried, and refused by name: shared memory segments (attached
 * ones are writable MAP_SHARED memory; the others are not carried yet),
 * objects beyond the buffer. Not carried: kernel.shm_rmid_forced and the
 * fs.mqueue limits (no info call gives them: a /proc read per dump), the semaphore
 * adjustments a SEM_UNDO operation left (the kernel shows no process's
 * undo list), and the times and pids of the last operations.
 */
#include <errno.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include "rrc_lib.h"
#include "sysvipc.h"

/* The section's bytes, in the scratch arena (rrc_s->sysv, RRC_SYSV_CAP:
 * a buffer this big in the library's own data would keep it from the
 * pause helper, which inherits no private VMA over 256 kB) */
#define BLOB_CAP RRC_SYSV_CAP
static uint64_t blob_len;

static uint8_t *buf(void)
{
	return rrc_s->sysv;
}

static int refuse_obj(const char *what, long id, int32_t key, const char *why)
{
	rrc_set_err(RRC_ERR_PROCESS_STATE, 0, "the process has a SysV ", -1, 0);
	char *m = rrc_s->err_msg;
	size_t cap = sizeof rrc_s->err_msg, l = rrc_strlen(m);
	l = rrc_bput(m, cap, l, what);
	l = rrc_bput(m, cap, l, " (id ");
	l = rrc_bput_u64(m, cap, l, (uint64_t)id);
	l = rrc_bput(m, cap, l, ", key ");
	l = rrc_bput_hex(m, cap, l, (uint32_t)key);
	l = rrc_bput(m, cap, l, ") in its IPC namespace");
	rrc_bput(m, cap, l, why);
	return -1;
}

/* ---- the SysV limits: the IPC info calls give them (no /proc read) ---- */

static uint64_t at_start[RRC_IPC_SYSCTLS];
static int start_valid;

/* the limits, from SEM_INFO and MSG_INFO (which give the usage too, into
 * *si and *mi) and the shared memory IPC_INFO; 0, or -1 */
static int read_limits(uint64_t *v, struct seminfo *si, struct msginfo *mi, long *smax, long *mmax)
{
	struct shminfo shi;
	*smax = rrc_sys_semctl(0, 0, SEM_INFO, si);
	*mmax = rrc_sys_msgctl(0, MSG_INFO, mi);
	if (*smax < 0 || *mmax < 0 || rrc_sys_shmctl(0, IPC_INFO, &shi) < 0)
		return -1;
	v[RRC_IPC_SEM_MSL] = (uint64_t)si->semmsl;
	v[RRC_IPC_SEM_MNS] = (uint64_t)si->semmns;
	v[RRC_IPC_SEM_OPM] = (uint64_t)si->semopm;
	v[RRC_IPC_SEM_MNI] = (uint64_t)si->semmni;
	v[RRC_IPC_MSGMAX] = (uint64_t)mi->msgmax;
	v[RRC_IPC_MSGMNB] = (uint64_t)mi->msgmnb;
	v[RRC_IPC_MSGMNI] = (uint64_t)mi->msgmni;
	v[RRC_IPC_SHMMAX] = shi.shmmax;
	v[RRC_IPC_SHMALL] = shi.shmall;
	v[RRC_IPC_SHMMNI] = shi.shmmni;
	return 0;
}

/* At the start and after a restore: the namespace's limits then, which a
 * restore's new namespace has too (the same kernel's defaults, or those
 * the restore set). ASYNC-SIGNAL-SAFE. */
void rrc_sysvipc_remember(void)
{
	struct seminfo si;
	struct msginfo mi;
	long a, b;
	start_valid = read_limits(at_start, &si, &mi, &a, &b) == 0;
}

/* ---- before the pause ---- */

/* Shared memory segments: refused (the first one named). */
int rrc_sysvipc_check(void)
{
	struct shm_info si;
	long max = rrc_sys_shmctl(0, SHM_INFO, &si);
	if (max < 0 || si.used_ids == 0)
		return 0;
	for (long i = 0; i <= max; i++) {
		struct shmid_ds ds;
		long id = rrc_sys_shmctl((int)i, SHM_STAT_ANY, &ds);
		if (id >= 0)
			return refuse_obj("shared memory segment", id, ds.shm_perm.__key,
					  ": an image does not carry shared memory segments yet, and a restore's "
					  "namespace would not have it (ipcs lists them)");
	}
	return 0;
}

/* ---- in the pause: ASYNC-SIGNAL-SAFE ---- */

static void *take(uint64_t n)
{
	n = (n + 7) & ~7ull;
	if (blob_len + n > BLOB_CAP)
		return 0;
	void *p = buf() + blob_len;
	rrc_memset(p, 0, n);
	blob_len += n;
	return p;
}

static void perm_of(struct rrc_sysv_perm *o, const struct ipc_perm *p, long id)
{
	*o = (struct rrc_sysv_perm){ .key = p->__key, .id = (int32_t)id, .uid = p->uid, .gid = p->gid,
				     .cuid = p->cuid, .cgid = p->cgid, .mode = p->mode & 0777 };
}

static const char too_big[] = ": its state is more than the 256 kB an image carries of SysV IPC objects";

static int capture_sems(struct rrc_sysvipc *h, const struct seminfo *si, long max)
{
	if (si->semusz == 0) /* the sets in use (SEM_INFO) */
		return 0;
	for (long i = 0; i <= max; i++) {
		struct semid_ds ds;
		long id = rrc_sys_semctl((int)i, 0, SEM_STAT_ANY, &ds);
		if (id < 0)
			continue;
		struct rrc_sysv_sem *s = take(sizeof *s);
		uint16_t *vals = s ? take(ds.sem_nsems * sizeof(uint16_t)) : 0;
		if (!vals)
			return refuse_obj("semaphore set", id, ds.sem_perm.__key, too_big);
		perm_of(&s->perm, &ds.sem_perm, id);
		s->nsems = (uint32_t)ds.sem_nsems;
		long r = rrc_sys_semctl((int)id, 0, GETALL, vals);
		if (r < 0) {
			rrc_s->err_errno = (int)-r;
			return refuse_obj("semaphore set", id, ds.sem_perm.__key,
					  " whose values it may not read (GETALL), which the image would carry");
		}
		h->nr_sems++;
	}
	return 0;
}

static int capture_msqs(struct rrc_sysvipc *h, const struct msginfo *mi, long max)
{
	if (mi->msgpool == 0) /* the queues in use (MSG_INFO) */
		return 0;
	for (long i = 0; i <= max; i++) {
		struct msqid_ds ds;
		long id = rrc_sys_msgctl((int)i, MSG_STAT_ANY, &ds);
		if (id < 0)
			continue;
		/* raising a queue's size past msgmnb takes CAP_SYS_RESOURCE,
		 * which the restorer has not */
		if (ds.msg_qbytes > (unsigned long)mi->msgmnb)
			return refuse_obj("message queue", id, ds.msg_perm.__key,
					  " whose size was raised past kernel.msgmnb (CAP_SYS_RESOURCE), which a restore "
					  "cannot do");
		struct rrc_sysv_msq *q = take(sizeof *q);
		if (!q)
			return refuse_obj("message queue", id, ds.msg_perm.__key, too_big);
		perm_of(&q->perm, &ds.msg_perm, id);
		q->qbytes = ds.msg_qbytes;
		for (uint64_t k = 0; k < ds.msg_qnum; k++) {
			/* the kernel writes mtype then the text: straight into the
			 * record, whose header is fixed up after */
			uint64_t room = BLOB_CAP - blob_len;
			if (room < sizeof(struct rrc_sysv_msg) + 8)
				return refuse_obj("message queue", id, ds.msg_perm.__key, too_big);
			struct rrc_sysv_msg *m = (struct rrc_sysv_msg *)(buf() + blob_len);
			uint8_t *at = (uint8_t *)m + sizeof *m - sizeof(long); /* mtype, then the text after the header */
			/* the text's room rounded down to 8: its padding fits too */
			long n = rrc_sys_msgrcv((int)id, at, (room - sizeof *m) & ~7ull, (long)k, MSG_COPY | IPC_NOWAIT);
			if (n < 0) {
				rrc_s->err_errno = (int)-n;
				return refuse_obj("message queue", id, ds.msg_perm.__key,
						  n == -E2BIG ? too_big
							      : " whose messages cannot be read without taking them "
								"(msgrcv MSG_COPY)");
			}
			long mtype;
			rrc_memcpy(&mtype, at, sizeof mtype);
			m->mtype = mtype;
			m->len = (uint32_t)n;
			m->reserved = 0;
			uint64_t rec = (sizeof *m + (uint64_t)n + 7) & ~7ull;
			rrc_memset((uint8_t *)m + sizeof *m + n, 0, rec - sizeof *m - (uint64_t)n); /* the padding */
			blob_len += rec;
			q->nr_msgs++;
		}
		h->nr_msqs++;
	}
	return 0;
}

int rrc_sysvipc_capture(void)
{
	blob_len = 0;
	struct rrc_sysvipc *h = take(sizeof *h);
	h->version = RRC_SYSVIPC_VERSION;
	struct seminfo si;
	struct msginfo mi;
	long smax, mmax;
	if (read_limits(h->sysctl, &si, &mi, &smax, &mmax) < 0) {
		blob_len = 0;
		return 0; /* no SysV IPC in this kernel */
	}
	for (int i = 0; i < RRC_IPC_SYSCTLS; i++)
		if (!start_valid || h->sysctl[i] != at_start[i])
			h->sysctls_valid = (1u << RRC_IPC_SYSCTLS) - 1; /* changed since the start: all of them */
	if (capture_sems(h, &si, smax) < 0 || capture_msqs(h, &mi, mmax) < 0) {
		blob_len = 0;
		return -1;
	}
	if (!h->nr_sems && !h->nr_msqs && !h->sysctls_valid)
		blob_len = 0; /* nothing: no section */
	return 0;
}

int rrc_sysvipc_section(const void **p, uint64_t *len)
{
	*p = buf();
	*len = blob_len;
	return blob_len != 0;
}
