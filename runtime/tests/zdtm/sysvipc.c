/* zdtm: what the process owns in its IPC namespace comes back (issue 16
 * §4; runtime/lib/sysvipc.c, restore/sysvipc.c, the image's SYSVIPC):
 *   S   a semaphore set of key 0x5eed0001, 5 semaphores set to 0, 1, 2,
 *       300 and 32767, its mode made 0640 after creation (IPC_SET);
 *   P   a private semaphore set (IPC_PRIVATE) of one semaphore at 7;
 *   Q   a message queue of key 0x5eed0002, mode 0620, its size lowered to
 *       9000 bytes, holding "alpha" (type 1), 300 bytes (type 7), an empty
 *       message (type 2) and "omega" (type 1);
 *   E   a private message queue, empty;
 *   kernel.msgmni set to 77 in the namespace (the process is root in it).
 * Verify: every id as it was (the application keeps its ids), keys,
 * modes, sizes and values; Q's messages in their order, then empty; E
 * there and empty; msgmni 77; then a new set can be made.
 *
 * Run alone (test_selfcheck) the program makes itself an IPC namespace
 * first, as uts.c does its UTS one: it must not touch the host's.
 */
#include <sched.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include "zdtm.h"

#define SKEY 0x5eed0001
#define QKEY 0x5eed0002
#define BIG 300

static const unsigned short svals[5] = { 0, 1, 2, 300, 32767 };

struct msg {
	long mtype;
	char text[BIG];
};

static unsigned char bigpat(int i) { return (unsigned char)(i * 31 + 7); }

static void send(int q, long type, const void *text, size_t len)
{
	struct msg m = { .mtype = type };
	memcpy(m.text, text, len);
	zdtm_check(msgsnd(q, &m, len, 0) == 0, "msgsnd");
}

static void expect_msg(int q, long type, const void *text, size_t len, const char *what)
{
	struct msg m;
	ssize_t n = msgrcv(q, &m, sizeof m.text, 0, IPC_NOWAIT);
	if (n != (ssize_t)len || m.mtype != type || memcmp(m.text, text, len))
		zdtm_fail("queue Q: %s: got %zd bytes of type %ld (%s)", what, n, n >= 0 ? m.mtype : 0,
			  n < 0 ? strerror(errno) : "other contents");
}

static void write_msgmni(const char *v)
{
	int fd = open("/proc/sys/kernel/msgmni", O_WRONLY);
	zdtm_check(fd >= 0 && write(fd, v, strlen(v)) == (ssize_t)strlen(v), "write kernel.msgmni");
	close(fd);
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	const char *pre = getenv("LD_PRELOAD");
	if (!pre || !strstr(pre, "librrc"))
		zdtm_check(unshare(CLONE_NEWIPC) == 0, "unshare(CLONE_NEWIPC)");
	write_msgmni("77");

	int s = semget(SKEY, 5, IPC_CREAT | IPC_EXCL | 0600);
	zdtm_check(s >= 0, "semget S");
	zdtm_check(semctl(s, 0, SETALL, svals) == 0, "SETALL S");
	struct semid_ds sds;
	zdtm_check(semctl(s, 0, IPC_STAT, &sds) == 0, "IPC_STAT S");
	sds.sem_perm.mode = 0640;
	zdtm_check(semctl(s, 0, IPC_SET, &sds) == 0, "IPC_SET S");
	int p = semget(IPC_PRIVATE, 1, 0600);
	zdtm_check(p >= 0 && semctl(p, 0, SETVAL, 7) == 0, "P");

	int q = msgget(QKEY, IPC_CREAT | IPC_EXCL | 0620);
	zdtm_check(q >= 0, "msgget Q");
	struct msqid_ds qds;
	zdtm_check(msgctl(q, IPC_STAT, &qds) == 0, "IPC_STAT Q");
	qds.msg_qbytes = 9000;
	zdtm_check(msgctl(q, IPC_SET, &qds) == 0, "IPC_SET Q");
	char big[BIG];
	for (int i = 0; i < BIG; i++)
		big[i] = (char)bigpat(i);
	send(q, 1, "alpha", 5);
	send(q, 7, big, BIG);
	send(q, 2, "", 0);
	send(q, 1, "omega", 5);
	int e = msgget(IPC_PRIVATE, 0600);
	zdtm_check(e >= 0, "E");

	zdtm_ready();
	zdtm_wait_verify();

	if (zdtm_corrupt)
		semctl(s, 3, SETVAL, 301);
	unsigned short got[5];
	if (semctl(s, 0, GETALL, got) != 0)
		zdtm_fail("set S (id %d): GETALL: %s", s, strerror(errno));
	for (int i = 0; i < 5; i++)
		if (got[i] != svals[i])
			zdtm_fail("set S: semaphore %d is %u, not %u", i, got[i], svals[i]);
	if (semctl(s, 0, IPC_STAT, &sds) != 0 || sds.sem_perm.__key != SKEY || (sds.sem_perm.mode & 0777) != 0640 ||
	    sds.sem_nsems != 5)
		zdtm_fail("set S: key %#x mode %o, %lu semaphores", sds.sem_perm.__key, sds.sem_perm.mode & 0777,
			  (unsigned long)sds.sem_nsems);
	if (semget(SKEY, 0, 0) != s)
		zdtm_fail("key %#x names id %d, not %d", SKEY, semget(SKEY, 0, 0), s);
	if (semctl(p, 0, GETVAL) != 7)
		zdtm_fail("set P (id %d): value %d, not 7", p, semctl(p, 0, GETVAL));
	if (msgctl(q, IPC_STAT, &qds) != 0 || qds.msg_perm.__key != QKEY || (qds.msg_perm.mode & 0777) != 0620 ||
	    qds.msg_qbytes != 9000 || qds.msg_qnum != 4)
		zdtm_fail("queue Q (id %d): key %#x mode %o, %lu bytes at most, %lu messages", q, qds.msg_perm.__key,
			  qds.msg_perm.mode & 0777, (unsigned long)qds.msg_qbytes, (unsigned long)qds.msg_qnum);
	expect_msg(q, 1, "alpha", 5, "the first message");
	expect_msg(q, 7, big, BIG, "the second message");
	expect_msg(q, 2, "", 0, "the empty message");
	expect_msg(q, 1, "omega", 5, "the last message");
	struct msg m;
	if (msgrcv(q, &m, sizeof m.text, 0, IPC_NOWAIT) >= 0 || errno != ENOMSG)
		zdtm_fail("queue Q: a fifth message");
	if (msgctl(e, IPC_STAT, &qds) != 0 || qds.msg_qnum != 0)
		zdtm_fail("queue E (id %d): %s", e, strerror(errno));
	char v[16] = "";
	int fd = open("/proc/sys/kernel/msgmni", O_RDONLY);
	if (fd < 0 || read(fd, v, sizeof v - 1) <= 0 || atoi(v) != 77)
		zdtm_fail("kernel.msgmni is %s, not 77", v);
	int n = semget(IPC_PRIVATE, 2, 0600);
	if (n < 0 || n == s || n == p)
		zdtm_fail("a new set: id %d", n);
	zdtm_pass();
}
