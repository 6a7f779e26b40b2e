/* zdtm: threads that make and close fds all the time, and a thread that
 * sends, for `rrc exec --record` (tests/test_record.py).
 *
 * Four churn threads loop: open /dev/null, a UDP socket, a pipe, dup of
 * the first, dup2 of the socket onto that dup, an F_DUPFD of the first at
 * 20 or above, then close everything; the
 * kernel gives each new fd the lowest free number, so which number a
 * thread gets depends on what the others did just before: the log's order
 * of these calls must reproduce every number. A sender writes message r
 * (1..3000 bytes, from r) on a unix socketpair with write, send, writev,
 * sendmsg and sendfile (from a file it writes and reads back with pread
 * and readv, deleted once open: a ghost file) in turn, a
 * reader drains the other
 * end.
 *
 * Verify: $ZDTM_DIR/fdchurn.json gets the sender's tid, fd, messages and
 * bytes, each churn thread's rounds, and the fds open at the start.
 */
#include <pthread.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/sendfile.h>
#include <sys/uio.h>
#include "zdtm.h"

#define NC 4

static long rounds[NC];
static pid_t sender_tid;
static long sent_msgs, sent_bytes;
static int sp[2];

static void *churn(void *arg)
{
	int k = (int)(long)arg;
	while (!zdtm_stopped()) {
		int a = open("/dev/null", O_RDONLY | O_CLOEXEC);
		int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		int p[2];
		if (a < 0 || s < 0 || pipe(p) != 0)
			zdtm_fail("churn %d: open/socket/pipe failed", k);
		int d = dup(a);
		int d2 = dup2(s, d);
		int f = fcntl(a, F_DUPFD_CLOEXEC, 20);
		if (d < 0 || d2 != d || f < 20)
			zdtm_fail("churn %d: dup/dup2/F_DUPFD failed", k);
		close(f);
		close(a);
		close(s);
		close(p[0]);
		close(p[1]);
		close(d2);
		rounds[k]++;
		if (rounds[k] % 8 == 0)
			zdtm_sleep_ms(1);
	}
	return NULL;
}

static void *sender(void *arg)
{
	(void)arg;
	sender_tid = zdtm_gettid();
	char buf[4096];
	char path[PATH_MAX];
	zdtm_path(path, sizeof path, "sendfile.src");
	int mfd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (mfd < 0)
		zdtm_fail("sender: cannot create %s", path);
	/* deleted at once: its contents go into the image (a ghost file), so
	 * that a replay from the checkpoint finds what the file held then,
	 * even with the cut between a pwrite and its read-back (the recorded
	 * run rewrote the file after it: a named file would hold that) */
	if (unlink(path) != 0)
		zdtm_fail("sender: cannot remove %s", path);
	for (long r = 1; !zdtm_stopped(); r++) {
		size_t n = zdtm_message(r, buf);
		ssize_t w;
		switch (r % 5) {
		case 4: {
			/* sendfile from a file holding the message */
			off_t off = 0;
			char back[4096], back2[4096];
			struct iovec bv[2] = { { back2, n / 3 }, { back2 + n / 3, n - n / 3 } };
			if (pwrite(mfd, buf, n, 0) != (ssize_t)n || pread(mfd, back, n, 0) != (ssize_t)n ||
			    memcmp(back, buf, n) || lseek(mfd, 0, SEEK_SET) != 0 || readv(mfd, bv, 2) != (ssize_t)n ||
			    memcmp(back2, buf, n))
				zdtm_fail("sender: the file does not hold the message");
			w = sendfile(sp[0], mfd, &off, n);
			break;
		}
		case 0: w = write(sp[0], buf, n); break;
		case 1: w = send(sp[0], buf, n, 0); break;
		case 2: {
			struct iovec v[2] = { { buf, n / 2 }, { buf + n / 2, n - n / 2 } };
			w = writev(sp[0], v, 2);
			break;
		}
		default: {
			struct iovec v[1] = { { buf, n } };
			struct msghdr m = { .msg_iov = v, .msg_iovlen = 1 };
			w = sendmsg(sp[0], &m, 0);
			break;
		}
		}
		if (w != (ssize_t)n)
			zdtm_fail("sender: message %ld: %zd of %zu bytes sent", r, w, n);
		sent_msgs++;
		sent_bytes += w;
		zdtm_sleep_ms(1);
	}
	return NULL;
}

static void *reader(void *arg)
{
	(void)arg;
	char buf[8192];
	while (read(sp[1], buf, sizeof buf) > 0)
		;
	return NULL;
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	/* the fds open before anything is made: where the log's order starts */
	char initial[256] = "";
	for (int fd = 0, n = 0; fd < 64; fd++)
		if (fcntl(fd, F_GETFD) != -1)
			n += snprintf(initial + n, sizeof initial - (size_t)n, "%s%d", n ? "," : "", fd);
	zdtm_check(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) == 0, "socketpair");
	pthread_t ct[NC], st, rt;
	zdtm_check(pthread_create(&rt, NULL, reader, NULL) == 0, "pthread_create");
	zdtm_check(pthread_create(&st, NULL, sender, NULL) == 0, "pthread_create");
	for (int k = 0; k < NC; k++)
		zdtm_check(pthread_create(&ct[k], NULL, churn, (void *)(long)k) == 0, "pthread_create");
	zdtm_ready();
	zdtm_wait_verify();
	zdtm_stop();
	for (int k = 0; k < NC; k++)
		pthread_join(ct[k], NULL);
	pthread_join(st, NULL);
	shutdown(sp[0], SHUT_WR);
	pthread_join(rt, NULL);
	char json[1024];
	snprintf(json, sizeof json,
		 "{\"sender_tid\":%d,\"fd\":%d,\"messages\":%ld,\"bytes\":%ld,\"rounds\":[%ld,%ld,%ld,%ld],\"initial\":[%s]}\n",
		 (int)sender_tid, sp[0], sent_msgs, sent_bytes, rounds[0], rounds[1], rounds[2], rounds[3], initial);
	zdtm_check(zdtm_write_file("fdchurn.json", json) == 0, "writing fdchurn.json");
	zdtm_pass();
}
