/* SPDX-License-Identifier: MIT
 *
 * rrc-restore: the process's IPC namespace (the image's SYSVIPC section,
 * runtime/lib/sysvipc.c). rrc-container gives the restorer a fresh IPC
 * namespace, the process's from now on: its SysV limits are set as the
 * image has them (those it carries, where the new namespace differs),
 * then every semaphore set and message queue is made
 * again with its id (the kernel's sem_next_id / msg_next_id, which a
 * creation takes and resets, as CRIU's ipc_ns.c does), key, creator
 * (the restorer takes the creator's effective ids for the call), owner,
 * mode, values and messages, oldest first. Checked whole before the
 * restore changes anything (sysvipc_check); an id the kernel does not
 * give, or a value it refuses, fails the restore naming the object.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <unistd.h>
#include "restore.h"

struct cursor {
	const uint8_t *p, *end;
	const struct chain *c;
};

/* the next n bytes (padded to 8), or the restore fails naming what */
static const void *take(struct cursor *k, uint64_t n, const char *what)
{
	uint64_t padded = (n + 7) & ~7ull;
	if ((uint64_t)(k->end - k->p) < padded)
		rst_fail(RRC_RST_IMAGE, 0, 0, "section SYSVIPC: %s runs past the section's end", what);
	const void *at = k->p;
	k->p += padded;
	return at;
}

static void write_sysctl(const char *name, const char *value)
{
	char path[96];
	snprintf(path, sizeof path, "/proc/sys/%s", name);
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, value, strlen(value)) != (ssize_t)strlen(value))
		rst_fail(RRC_RST_PROCESS, errno, 0, "cannot set %s to %s in the IPC namespace: %s", path, value,
			 rst_strerror(errno));
	close(fd);
}

static const char *const sysctl_name[RRC_IPC_SYSCTLS] = {
	[RRC_IPC_MSGMAX] = "kernel/msgmax",
	[RRC_IPC_MSGMNB] = "kernel/msgmnb",
	[RRC_IPC_MSGMNI] = "kernel/msgmni",
	[RRC_IPC_SHMMAX] = "kernel/shmmax",
	[RRC_IPC_SHMALL] = "kernel/shmall",
	[RRC_IPC_SHMMNI] = "kernel/shmmni",
};

/* The value of /proc/sys/NAME now, as the file gives it (no newline). */
static void sysctl_now(const char *name, char *v, size_t cap)
{
	char path[96];
	snprintf(path, sizeof path, "/proc/sys/%s", name);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, v, cap - 1) : -1;
	if (fd >= 0)
		close(fd);
	v[n > 0 ? n : 0] = 0;
	for (char *p = v; *p; p++)
		if (*p == '\n' || *p == '\t')
			*p = *p == '\t' ? ' ' : 0;
}

/* name to value, unless it is that already (the new namespace's defaults
 * are the same kernel's: most are) */
static void set_sysctl(const char *name, const char *value)
{
	char now[96];
	sysctl_now(name, now, sizeof now);
	if (strcmp(now, value))
		write_sysctl(name, value);
}

static void set_sysctls(const struct rrc_sysvipc *h)
{
	char v[96];
	const uint64_t *s = h->sysctl;
	uint32_t ok = h->sysctls_valid;
	uint32_t sem = 1u << RRC_IPC_SEM_MSL | 1u << RRC_IPC_SEM_MNS | 1u << RRC_IPC_SEM_OPM | 1u << RRC_IPC_SEM_MNI;
	if ((ok & sem) == sem) {
		snprintf(v, sizeof v, "%llu %llu %llu %llu", (unsigned long long)s[RRC_IPC_SEM_MSL],
			 (unsigned long long)s[RRC_IPC_SEM_MNS], (unsigned long long)s[RRC_IPC_SEM_OPM],
			 (unsigned long long)s[RRC_IPC_SEM_MNI]);
		set_sysctl("kernel/sem", v);
	}
	for (int i = RRC_IPC_MSGMAX; i < RRC_IPC_SYSCTLS; i++)
		if (ok & (1u << i)) {
			snprintf(v, sizeof v, "%llu", (unsigned long long)s[i]);
			set_sysctl(sysctl_name[i], v);
		}
}

/* The next creation of kind ("sem", "msg") takes id, as its creator. */
static void next_id(const char *kind, const struct rrc_sysv_perm *p)
{
	char name[32], v[16];
	snprintf(name, sizeof name, "kernel/%s_next_id", kind);
	snprintf(v, sizeof v, "%d", p->id);
	write_sysctl(name, v);
	if (setegid(p->cgid) < 0 || seteuid(p->cuid) < 0)
		rst_fail(RRC_RST_PROCESS, errno, 0, "cannot take the creator's ids %u:%u for SysV %s id %d: %s", p->cuid,
			 p->cgid, kind, p->id, rst_strerror(errno));
}

static void created(const char *kind, const struct rrc_sysv_perm *p, int got)
{
	int e = errno;
	if (seteuid(0) < 0 || setegid(0) < 0)
		rst_fail(RRC_RST_PROCESS, errno, 0, "cannot take root's ids again: %s", rst_strerror(errno));
	if (got < 0)
		rst_fail(RRC_RST_PROCESS, e, 0, "cannot make the SysV %s id %d (key %#x) again: %s", kind, p->id,
			 (unsigned)p->key, rst_strerror(e));
	if (got != p->id)
		rst_fail(RRC_RST_PROCESS, 0, 0, "the SysV %s of key %#x came back with id %d, not %d", kind,
			 (unsigned)p->key, got, p->id);
}

static void restore_sem(const struct rrc_sysv_sem *s, const uint16_t *vals)
{
	next_id("sem", &s->perm);
	int id = semget(s->perm.key, (int)s->nsems, IPC_CREAT | IPC_EXCL | (int)(s->perm.mode & 0777));
	created("semaphore set", &s->perm, id);
	struct semid_ds ds = { .sem_perm = { .uid = s->perm.uid, .gid = s->perm.gid, .mode = (unsigned short)s->perm.mode } };
	if (semctl(id, 0, IPC_SET, &ds) < 0 || semctl(id, 0, SETALL, vals) < 0)
		rst_fail(RRC_RST_PROCESS, errno, 0, "SysV semaphore set id %d: setting its owner, mode and values failed: %s",
			 id, rst_strerror(errno));
}

static void restore_msq(const struct rrc_sysv_msq *q)
{
	next_id("msg", &q->perm);
	int id = msgget(q->perm.key, IPC_CREAT | IPC_EXCL | (int)(q->perm.mode & 0777));
	created("message queue", &q->perm, id);
	struct msqid_ds ds = { .msg_perm = { .uid = q->perm.uid, .gid = q->perm.gid, .mode = (unsigned short)q->perm.mode },
			       .msg_qbytes = q->qbytes };
	if (msgctl(id, IPC_SET, &ds) < 0)
		rst_fail(RRC_RST_PROCESS, errno, 0, "SysV message queue id %d: setting its owner, mode and size (%llu) failed: %s",
			 id, (unsigned long long)q->qbytes, rst_strerror(errno));
}

static void send_msg(const struct rrc_sysv_msq *q, const struct rrc_sysv_msg *m)
{
	struct { long mtype; char text[]; } *buf = xmalloc(sizeof(long) + m->len + 1);
	buf->mtype = (long)m->mtype;
	memcpy(buf->text, m + 1, m->len);
	if (msgsnd(q->perm.id, buf, m->len, IPC_NOWAIT) < 0)
		rst_fail(RRC_RST_PROCESS, errno, 0, "SysV message queue id %d: sending a message of %u bytes again failed: %s",
			 q->perm.id, m->len, rst_strerror(errno));
	free(buf);
}

/* One pass over the section: checks it whole, and with apply makes it. */
static void walk(const struct chain *c, int apply)
{
	const struct img *nw = c->newest;
	if (!nw->have[RRC_SEC_SYSVIPC])
		return;
	struct cursor k = { nw->sec[RRC_SEC_SYSVIPC], (const uint8_t *)nw->sec[RRC_SEC_SYSVIPC] + nw->sec_len[RRC_SEC_SYSVIPC], c };
	const struct rrc_sysvipc *h = take(&k, sizeof *h, "the header");
	if (h->version != RRC_SYSVIPC_VERSION || (h->sysctls_valid >> RRC_IPC_SYSCTLS))
		rst_fail(RRC_RST_IMAGE, 0, 0, "section SYSVIPC: version %u (this restorer reads %u), sysctls_valid %u",
			 h->version, RRC_SYSVIPC_VERSION, h->sysctls_valid);
	if (apply && h->sysctls_valid)
		set_sysctls(h);
	for (uint32_t i = 0; i < h->nr_sems; i++) {
		const struct rrc_sysv_sem *s = take(&k, sizeof *s, "a semaphore set");
		if (s->nsems == 0 || s->nsems > 32000 || s->perm.id < 0)
			rst_fail(RRC_RST_IMAGE, 0, 0, "section SYSVIPC: a semaphore set of id %d with %u semaphores",
				 s->perm.id, s->nsems);
		const uint16_t *vals = take(&k, s->nsems * sizeof(uint16_t), "a semaphore set's values");
		if (apply)
			restore_sem(s, vals);
	}
	for (uint32_t i = 0; i < h->nr_msqs; i++) {
		const struct rrc_sysv_msq *q = take(&k, sizeof *q, "a message queue");
		if (q->perm.id < 0)
			rst_fail(RRC_RST_IMAGE, 0, 0, "section SYSVIPC: a message queue of id %d", q->perm.id);
		if (apply)
			restore_msq(q);
		for (uint32_t j = 0; j < q->nr_msgs; j++) {
			const struct rrc_sysv_msg *m = take(&k, sizeof *m, "a message");
			if (m->mtype <= 0)
				rst_fail(RRC_RST_IMAGE, 0, 0, "section SYSVIPC: a message of type %lld in queue id %d",
					 (long long)m->mtype, q->perm.id);
			take(&k, m->len, "a message's text");
			if (apply)
				send_msg(q, m);
		}
	}
	if (k.p != k.end)
		rst_fail(RRC_RST_IMAGE, 0, 0, "section SYSVIPC: %zu bytes after its last object", (size_t)(k.end - k.p));
	if (apply)
		rst_log("IPC namespace: %u semaphore set(s), %u message queue(s)%s", h->nr_sems, h->nr_msqs,
			h->sysctls_valid ? ", its IPC sysctls" : "");
}

void sysvipc_check(const struct chain *c)
{
	walk(c, 0);
}

void sysvipc_restore(const struct chain *c)
{
	walk(c, 1);
}
