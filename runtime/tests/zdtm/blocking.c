/* zdtm: threads blocked in read, accept, epoll_wait and recvfrom across a
 * dump/restore.
 *
 * One thread each blocks in read() on a pipe, accept() on a TCP listener
 * (127.0.0.1, port chosen by the kernel), epoll_wait() on an epoll set
 * holding an eventfd, recvfrom() on a bound UDP socket. "ready" is written
 * once /proc/self/task/TID/syscall shows each of them inside a syscall.
 * Interrupted by rrc's park signal, read/accept/recvfrom are restarted by
 * the kernel (SA_RESTART), epoll_wait returns EINTR and is retried, as any
 * real server does.
 *
 * Verify: the main thread makes each wait complete (writes the pipe,
 * connects and sends, bumps the eventfd, sends a datagram); each thread
 * checks the exact bytes/values it received and the peer it saw.
 */
#include <pthread.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include "zdtm.h"

enum { T_READ, T_ACCEPT, T_EPOLL, T_RECV, NT };
static const char *tname[NT] = { "read", "accept", "epoll_wait", "recvfrom" };
static volatile pid_t ttid[NT];
static char terr[NT][256];

static int pipefd[2], lfd, ep, efd, ufd;
static struct sockaddr_in laddr, uaddr;
static volatile uint16_t client_port; /* published by main before connecting */
static int corrupt_pipe;

#define MSG_READ   "wake up, reader: 0123456789"
#define MSG_ACCEPT "hello from a new connection"
#define MSG_UDP    "datagram after restore"
#define EP_COOKIE  0xfeedface12345678ull

static void *blocker(void *arg)
{
	int t = (int)(long)arg;
	pid_t tid = zdtm_gettid();
	ttid[t] = tid;
	char buf[256];
	ssize_t n;
	switch (t) {
	case T_READ:
		while ((n = read(pipefd[0], buf, sizeof(buf))) < 0 && errno == EINTR)
			;
		if (n != (ssize_t)strlen(MSG_READ) || memcmp(buf, MSG_READ, (size_t)n) != 0)
			snprintf(terr[t], sizeof(terr[t]), "read returned %zd bytes '%.*s', expected '%s'",
				 n, n > 0 ? (int)n : 0, buf, MSG_READ);
		break;
	case T_ACCEPT: {
		struct sockaddr_in peer;
		socklen_t plen = sizeof(peer);
		int c;
		while ((c = accept(lfd, (struct sockaddr *)&peer, &plen)) < 0 && errno == EINTR)
			;
		if (c < 0) {
			snprintf(terr[t], sizeof(terr[t]), "accept failed: %s", strerror(errno));
			break;
		}
		size_t got = 0;
		while (got < strlen(MSG_ACCEPT)) {
			n = read(c, buf + got, sizeof(buf) - got);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				break;
			got += (size_t)n;
		}
		if (got != strlen(MSG_ACCEPT) || memcmp(buf, MSG_ACCEPT, got) != 0)
			snprintf(terr[t], sizeof(terr[t]), "accepted connection delivered %zu bytes '%.*s'",
				 got, (int)got, buf);
		else if (ntohs(peer.sin_port) != client_port)
			snprintf(terr[t], sizeof(terr[t]), "accepted peer port %u, client bound %u",
				 ntohs(peer.sin_port), client_port);
		close(c);
		break;
	}
	case T_EPOLL: {
		struct epoll_event ev[4];
		int k;
		while ((k = epoll_wait(ep, ev, 4, -1)) < 0 && errno == EINTR)
			;
		uint64_t v = 0;
		if (k != 1)
			snprintf(terr[t], sizeof(terr[t]), "epoll_wait returned %d events (%s)", k,
				 k < 0 ? strerror(errno) : "expected 1");
		else if (ev[0].data.u64 != EP_COOKIE || !(ev[0].events & EPOLLIN))
			snprintf(terr[t], sizeof(terr[t]), "epoll_wait event data %#llx events %#x",
				 (unsigned long long)ev[0].data.u64, ev[0].events);
		else if (read(efd, &v, 8) != 8 || v != 42)
			snprintf(terr[t], sizeof(terr[t]), "eventfd read %lu, expected 42", (unsigned long)v);
		break;
	}
	case T_RECV: {
		struct sockaddr_in from;
		socklen_t flen = sizeof(from);
		while ((n = recvfrom(ufd, buf, sizeof(buf), 0, (struct sockaddr *)&from, &flen)) < 0 &&
		       errno == EINTR)
			;
		if (n != (ssize_t)strlen(MSG_UDP) || memcmp(buf, MSG_UDP, (size_t)n) != 0)
			snprintf(terr[t], sizeof(terr[t]), "recvfrom returned %zd bytes", n);
		break;
	}
	}
	if (!terr[t][0] && zdtm_gettid() != tid)
		snprintf(terr[t], sizeof(terr[t]), "TID changed from %d to %d", tid, zdtm_gettid());
	return NULL;
}

static void bind_loopback(int fd, struct sockaddr_in *a, const char *what)
{
	memset(a, 0, sizeof(*a));
	a->sin_family = AF_INET;
	a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	zdtm_check(bind(fd, (struct sockaddr *)a, sizeof(*a)) == 0, what);
	socklen_t len = sizeof(*a);
	zdtm_check(getsockname(fd, (struct sockaddr *)a, &len) == 0, "getsockname");
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	zdtm_check(pipe(pipefd) == 0, "pipe");
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	zdtm_check(lfd >= 0, "socket");
	bind_loopback(lfd, &laddr, "bind TCP 127.0.0.1");
	zdtm_check(listen(lfd, 16) == 0, "listen");
	efd = eventfd(0, 0);
	ep = epoll_create1(0);
	zdtm_check(efd >= 0 && ep >= 0, "eventfd/epoll_create1");
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = EP_COOKIE };
	zdtm_check(epoll_ctl(ep, EPOLL_CTL_ADD, efd, &ev) == 0, "epoll_ctl");
	ufd = socket(AF_INET, SOCK_DGRAM, 0);
	zdtm_check(ufd >= 0, "socket UDP");
	bind_loopback(ufd, &uaddr, "bind UDP 127.0.0.1");
	corrupt_pipe = zdtm_corrupt;

	pthread_t th[NT];
	for (int t = 0; t < NT; t++)
		zdtm_check(pthread_create(&th[t], NULL, blocker, (void *)(long)t) == 0, "pthread_create");
	for (int tries = 0;; tries++) {
		int in = 0;
		for (int t = 0; t < NT; t++)
			in += ttid[t] && zdtm_task_syscall(ttid[t]) >= 0;
		if (in == NT)
			break;
		if (tries > 2000)
			zdtm_fail("set-up: only %d of %d threads blocked in a syscall", in, NT);
		zdtm_sleep_ms(5);
	}
	printf("blocking: TCP listener on port %u, UDP on %u\n", ntohs(laddr.sin_port), ntohs(uaddr.sin_port));
	zdtm_ready();
	zdtm_wait_verify();

	const char *msg = corrupt_pipe ? "wake up, reader: 0123456780" : MSG_READ;
	zdtm_check(write(pipefd[1], msg, strlen(msg)) == (ssize_t)strlen(msg), "write pipe");

	int c = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in caddr = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	zdtm_check(c >= 0 && bind(c, (struct sockaddr *)&caddr, sizeof(caddr)) == 0, "bind client");
	socklen_t clen = sizeof(caddr);
	getsockname(c, (struct sockaddr *)&caddr, &clen);
	client_port = ntohs(caddr.sin_port);
	if (connect(c, (struct sockaddr *)&laddr, sizeof(laddr)) != 0)
		zdtm_fail("connect to the restored listener 127.0.0.1:%u: %s", ntohs(laddr.sin_port), strerror(errno));
	zdtm_check(write(c, MSG_ACCEPT, strlen(MSG_ACCEPT)) == (ssize_t)strlen(MSG_ACCEPT), "write socket");

	uint64_t one = 42;
	zdtm_check(write(efd, &one, 8) == 8, "write eventfd");

	int u = socket(AF_INET, SOCK_DGRAM, 0);
	zdtm_check(sendto(u, MSG_UDP, strlen(MSG_UDP), 0, (struct sockaddr *)&uaddr, sizeof(uaddr)) ==
		   (ssize_t)strlen(MSG_UDP), "sendto");

	for (int t = 0; t < NT; t++) {
		if (zdtm_join(th[t], NULL, 5000) != 0)
			zdtm_fail("thread blocked in %s (TID %d) did not return within 5 s", tname[t], ttid[t]);
		if (terr[t][0])
			zdtm_fail("thread blocked in %s: %s", tname[t], terr[t]);
	}
	close(c);
	close(u);
	zdtm_pass();
}
