/* zdtm: POSIX message queues come back (issue 16 §4; runtime/lib/mqueue.c,
 * restore/mqueue.c, fd kind MQUEUE):
 *   Q   "/zdtm-mq" made read-write, at most 8 messages of 64 bytes, mode
 *       0640, holding "b" (priority 1), "a1" and "a2" (priority 5, in that
 *       order) and an empty message (priority 3);
 *   R   the same queue opened again, read-only and non-blocking;
 *   W   a dup of Q's fd (one open file description);
 *   U   "/zdtm-mq-gone", write-only, its name removed (mq_unlink), holding
 *       one message of 64 bytes.
 * Verify: each fd's limits, flags and access mode; the messages in the
 * order a receive takes them (a1, a2, the empty one, b), through R; then
 * Q empty, a send through W read through Q; U still holds its message
 * (read through its /proc link) and its name is gone; Q's name opens.
 *
 * Run alone (test_selfcheck) the program makes itself an IPC namespace
 * first: its queues stay out of the host's.
 */
#include <mqueue.h>
#include <sched.h>
#include "zdtm.h"

static void send(mqd_t q, const char *m, size_t n, unsigned prio)
{
	zdtm_check(mq_send(q, m, n, prio) == 0, "mq_send");
}

static void expect(mqd_t q, const char *m, size_t n, unsigned prio, const char *what)
{
	char buf[64];
	unsigned p = 0;
	ssize_t got = mq_receive(q, buf, sizeof buf, &p);
	if (got != (ssize_t)n || p != prio || memcmp(buf, m, n))
		zdtm_fail("%s: got %zd bytes of priority %u (%s), not %zu of %u", what, got, p,
			  got < 0 ? strerror(errno) : "other contents", n, prio);
}

static void attrs(mqd_t q, long flags, long curmsgs, const char *what)
{
	struct mq_attr a;
	zdtm_check(mq_getattr(q, &a) == 0, "mq_getattr");
	if (a.mq_maxmsg != 8 || a.mq_msgsize != 64 || a.mq_flags != flags || a.mq_curmsgs != curmsgs)
		zdtm_fail("%s: %ld messages of %ld bytes at most, flags %#lx, %ld held (want 8, 64, %#lx, %ld)", what,
			  a.mq_maxmsg, a.mq_msgsize, a.mq_flags, a.mq_curmsgs, flags, curmsgs);
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	const char *pre = getenv("LD_PRELOAD");
	if (!pre || !strstr(pre, "librrc"))
		zdtm_check(unshare(CLONE_NEWIPC) == 0, "unshare(CLONE_NEWIPC)");
	struct mq_attr a = { .mq_maxmsg = 8, .mq_msgsize = 64 };
	mq_unlink("/zdtm-mq");
	mq_unlink("/zdtm-mq-gone");
	mqd_t q = mq_open("/zdtm-mq", O_RDWR | O_CREAT | O_EXCL, 0640, &a);
	zdtm_check(q >= 0, "mq_open Q");
	send(q, "b", 1, 1);
	send(q, "a1", 2, 5);
	send(q, "a2", 2, 5);
	send(q, "", 0, 3);
	mqd_t r = mq_open("/zdtm-mq", O_RDONLY | O_NONBLOCK);
	zdtm_check(r >= 0, "mq_open R");
	int w = dup(q);
	zdtm_check(w >= 0, "dup Q");
	mqd_t u = mq_open("/zdtm-mq-gone", O_WRONLY | O_CREAT | O_EXCL, 0600, &a);
	zdtm_check(u >= 0, "mq_open U");
	char big[64];
	for (int i = 0; i < 64; i++)
		big[i] = (char)(i * 7 + 1);
	send(u, big, 64, 9);
	zdtm_check(mq_unlink("/zdtm-mq-gone") == 0, "mq_unlink U");

	zdtm_ready();
	zdtm_wait_verify();

	if (zdtm_corrupt)
		send(q, "x", 1, 9);
	attrs(q, 0, 4, "Q");
	attrs(r, O_NONBLOCK, 4, "R");
	if ((fcntl(r, F_GETFL) & O_ACCMODE) != O_RDONLY || (fcntl(u, F_GETFL) & O_ACCMODE) != O_WRONLY ||
	    (fcntl(q, F_GETFL) & O_ACCMODE) != O_RDWR)
		zdtm_fail("access modes: Q %#x R %#x U %#x", fcntl(q, F_GETFL), fcntl(r, F_GETFL), fcntl(u, F_GETFL));
	expect(r, "a1", 2, 5, "the first message");
	expect(r, "a2", 2, 5, "the second message");
	expect(r, "", 0, 3, "the empty message");
	expect(r, "b", 1, 1, "the last message");
	char buf[64];
	if (mq_receive(r, buf, sizeof buf, NULL) >= 0 || errno != EAGAIN)
		zdtm_fail("Q: a fifth message, or R is not non-blocking (%s)", strerror(errno));
	send(w, "via dup", 7, 2);
	expect(q, "via dup", 7, 2, "a message sent through W");
	char self[64];
	snprintf(self, sizeof self, "/proc/self/fd/%d", (int)u);
	mqd_t ur = open(self, O_RDONLY);
	zdtm_check(ur >= 0, "open U again for reading");
	expect(ur, big, 64, 9, "U's message");
	if (mq_open("/zdtm-mq-gone", O_RDONLY) >= 0 || errno != ENOENT)
		zdtm_fail("U's name is back");
	mqd_t again = mq_open("/zdtm-mq", O_RDONLY);
	zdtm_check(again >= 0, "Q's name opens");
	zdtm_pass();
}
