/* zdtm: input calls of every recorded kind, each counted by the program,
 * with a hash of every byte received (tests/test_record.py).
 *
 * Producers write messages of varying length (1..3000 bytes, contents
 * from the round number) into a pipe, a unix stream socketpair and a UDP
 * socket, and connect to a TCP listener. Consumers, one thread per kind:
 *   R_READ      read() and readv() on the pipe
 *   R_RECV      recv() and recvmsg() on the socketpair
 *   R_UDP       recvfrom() on the UDP socket
 *   R_ACCEPT    accept4() on the listener (then reads the 4-byte hello)
 *   R_WAIT      epoll_wait on an eventfd the producer bumps, poll() and
 *               select() on a second pipe
 * Each consumer counts its calls by kind and hashes (FNV-1a 64) every byte
 * the calls returned, in order. At verify the counts and hashes go to
 * $ZDTM_DIR/inputs.json; the log must hold exactly these events, with
 * these bytes. (Not one of test_zdtm.py's cycle programs: it checks
 * nothing of its own state.)
 */
#include <poll.h>
#include <pthread.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include "zdtm.h"

enum { R_READ, R_RECV, R_UDP, R_ACCEPT, R_WAIT, NR };
static const char *rname[NR] = { "read", "recv", "udp", "accept", "wait" };

struct rcount {
	pid_t tid;
	long calls[8];    /* by call, per consumer (see names in main) */
	long bytes;
	uint64_t hash;
};

static struct rcount rc[NR];
static int pipefd[2], sp[2], udp_rx, udp_tx, lfd, efd, ep, wpipe[2];
static struct sockaddr_in laddr, uaddr;

static void hash_in(struct rcount *c, const void *p, ssize_t n)
{
	const uint8_t *b = p;
	for (ssize_t i = 0; i < n; i++) {
		c->hash ^= b[i];
		c->hash *= 0x100000001b3ull;
	}
	if (n > 0)
		c->bytes += n;
}

static void *producer(void *arg)
{
	(void)arg;
	char buf[4096];
	for (long r = 1; !zdtm_stopped(); r++) {
		size_t n = zdtm_message(r, buf);
		if (write(pipefd[1], buf, n) < 0 && errno != EAGAIN)
			break;
		if (send(sp[1], buf, n, MSG_DONTWAIT) < 0 && errno != EAGAIN)
			break;
		sendto(udp_tx, buf, n < 1400 ? n : 1400, 0, (struct sockaddr *)&uaddr, sizeof uaddr);
		uint64_t one = 1;
		if (write(efd, &one, 8) != 8)
			break;
		if (write(wpipe[1], "w", 1) != 1 && errno != EAGAIN)
			break;
		if (r % 10 == 0) {
			int c = socket(AF_INET, SOCK_STREAM, 0);
			if (c >= 0 && connect(c, (struct sockaddr *)&laddr, sizeof laddr) == 0)
				(void)write(c, "helo", 4);
			if (c >= 0)
				close(c);
		}
		zdtm_sleep_ms(2);
	}
	return NULL;
}

static void *consumer(void *arg)
{
	int k = (int)(long)arg;
	struct rcount *c = &rc[k];
	c->tid = zdtm_gettid();
	c->hash = 0xcbf29ce484222325ull;
	char buf[8192];
	for (long r = 1; !zdtm_stopped(); r++) {
		ssize_t n;
		switch (k) {
		case R_READ:
			if (r % 2) {
				n = read(pipefd[0], buf, sizeof buf);
				c->calls[0]++;
			} else {
				struct iovec v[2] = { { buf, 100 }, { buf + 100, 2000 } };
				n = readv(pipefd[0], v, 2);
				c->calls[1]++;
			}
			hash_in(c, buf, n);
			break;
		case R_RECV:
			if (r % 2) {
				n = recv(sp[0], buf, sizeof buf, 0);
				c->calls[0]++;
			} else {
				struct iovec v[2] = { { buf, 10 }, { buf + 10, 4000 } };
				struct msghdr m = { .msg_iov = v, .msg_iovlen = 2 };
				n = recvmsg(sp[0], &m, 0);
				c->calls[1]++;
			}
			hash_in(c, buf, n);
			break;
		case R_UDP: {
			struct sockaddr_in from;
			socklen_t fl = sizeof from;
			n = recvfrom(udp_rx, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl);
			c->calls[0]++;
			hash_in(c, buf, n);
			break;
		}
		case R_ACCEPT: {
			int a = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
			c->calls[0]++;
			if (a >= 0) {
				n = read(a, buf, 4);
				c->calls[1]++;
				hash_in(c, buf, n);
				close(a);
			}
			break;
		}
		case R_WAIT: {
			struct epoll_event ev;
			int e = epoll_wait(ep, &ev, 1, 50);
			c->calls[0]++;
			if (e == 1) {
				uint64_t v;
				n = read(efd, &v, 8);
				c->calls[3]++;
				hash_in(c, &v, n);
			}
			struct pollfd pf = { .fd = wpipe[0], .events = POLLIN };
			int p = poll(&pf, 1, 50);
			c->calls[1]++;
			fd_set rs;
			FD_ZERO(&rs);
			FD_SET(wpipe[0], &rs);
			struct timeval tv = { 0, 50000 };
			int s = select(wpipe[0] + 1, &rs, NULL, NULL, &tv);
			c->calls[2]++;
			if (p == 1 || s == 1) {
				n = read(wpipe[0], buf, sizeof buf);
				c->calls[3]++;
				hash_in(c, buf, n);
			}
			break;
		}
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	zdtm_check(pipe(pipefd) == 0 && pipe(wpipe) == 0, "pipe");
	fcntl(pipefd[1], F_SETFL, O_NONBLOCK);
	fcntl(wpipe[1], F_SETFL, O_NONBLOCK);
	zdtm_check(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0, "socketpair");
	udp_rx = socket(AF_INET, SOCK_DGRAM, 0);
	udp_tx = socket(AF_INET, SOCK_DGRAM, 0);
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	zdtm_check(udp_rx >= 0 && udp_tx >= 0 && lfd >= 0, "socket");
	uaddr = (struct sockaddr_in){ .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	laddr = uaddr;
	socklen_t al = sizeof uaddr;
	zdtm_check(bind(udp_rx, (struct sockaddr *)&uaddr, sizeof uaddr) == 0 &&
		   getsockname(udp_rx, (struct sockaddr *)&uaddr, &al) == 0, "bind udp");
	al = sizeof laddr;
	zdtm_check(bind(lfd, (struct sockaddr *)&laddr, sizeof laddr) == 0 && listen(lfd, 64) == 0 &&
		   getsockname(lfd, (struct sockaddr *)&laddr, &al) == 0, "listen");
	efd = eventfd(0, 0);
	ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 7 };
	zdtm_check(efd >= 0 && ep >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, efd, &ev) == 0, "epoll");
	pthread_t pt, ct[NR];
	for (int k = 0; k < NR; k++)
		zdtm_check(pthread_create(&ct[k], NULL, consumer, (void *)(long)k) == 0, "pthread_create");
	zdtm_check(pthread_create(&pt, NULL, producer, NULL) == 0, "pthread_create");
	zdtm_ready();
	zdtm_wait_verify();
	zdtm_stop();
	pthread_join(pt, NULL);
	/* wake every consumer for the last time: each blocked call returns */
	char last[4096];
	size_t n = zdtm_message(1, last);
	(void)write(pipefd[1], last, n);
	(void)send(sp[1], last, n, MSG_DONTWAIT);
	sendto(udp_tx, last, 10, 0, (struct sockaddr *)&uaddr, sizeof uaddr);
	int c = socket(AF_INET, SOCK_STREAM, 0);
	if (c >= 0 && connect(c, (struct sockaddr *)&laddr, sizeof laddr) == 0)
		(void)write(c, "bye!", 4);
	for (int k = 0; k < NR; k++)
		pthread_join(ct[k], NULL);
	if (c >= 0)
		close(c);
	char json[4096];
	size_t len = (size_t)snprintf(json, sizeof json, "[");
	for (int k = 0; k < NR; k++) {
		struct rcount *r = &rc[k];
		len += (size_t)snprintf(json + len, sizeof json - len,
					"%s{\"name\":\"%s\",\"tid\":%d,\"calls\":[%ld,%ld,%ld,%ld],\"bytes\":%ld,\"hash\":\"%016llx\"}",
					k ? "," : "", rname[k], (int)r->tid, r->calls[0], r->calls[1], r->calls[2], r->calls[3],
					r->bytes, (unsigned long long)r->hash);
	}
	snprintf(json + len, sizeof json - len, "]\n");
	zdtm_check(zdtm_write_file("inputs.json", json) == 0, "writing inputs.json");
	for (int k = 0; k < NR; k++)
		if (rc[k].calls[0] == 0)
			zdtm_fail("%s: no call made", rname[k]);
	zdtm_pass();
}
