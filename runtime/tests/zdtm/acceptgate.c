/* acceptgate: a TCP server that accepts only once a gate file exists
 * (tests/test_failover.py::test_failure_between_connect_and_accept).
 *
 *   usage: acceptgate PORT GATEFILE
 *
 * Listens on 0.0.0.0:PORT (non-blocking, backlog 64). Until GATEFILE
 * exists it accepts nothing (it looks for the file every 10 ms), so the
 * clients' handshakes complete in the kernel and their connections wait in
 * the listener's accept queue, requests unread. Then an epoll loop, as
 * real servers have: when the listener is readable, accept until EAGAIN,
 * alternately with accept4(SOCK_NONBLOCK | SOCK_CLOEXEC) and plain
 * accept(); each request line "HELLO <tag>" is answered with
 *
 *   REPLY <tag> peer=<address from accept()> match=<0|1> flags=<ok|bad>
 *
 * match=1: getpeername() of the accepted socket equals the address accept()
 * wrote; flags=ok: O_NONBLOCK and FD_CLOEXEC right after accept were what
 * the call asked for (both set for accept4, neither for accept). After a
 * failover these come from librrc's accept wrapper, which hands over the
 * repaired connections (runtime/lib/accept-queue.c).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include "zdtm.h"

struct conn { int fd; size_t len; char peer[64]; int match, flags_ok; char buf[4096]; };

static void addr_str(const struct sockaddr_in *a, char *out, size_t n)
{
	char ip[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
	snprintf(out, n, "%s:%u", ip, ntohs(a->sin_port));
}

static void serve(struct conn *c, int ep)
{
	for (;;) {
		ssize_t k = read(c->fd, c->buf + c->len, sizeof(c->buf) - 1 - c->len);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && errno == EAGAIN)
			return;
		if (k <= 0) {
			printf("acceptgate: %s closed\n", c->peer);
			fflush(stdout);
			epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
			close(c->fd);
			free(c);
			return;
		}
		c->len += (size_t)k;
		char *start = c->buf, *nl;
		while ((nl = memchr(start, '\n', c->len - (size_t)(start - c->buf)))) {
			char out[256];
			*nl = 0;
			const char *tag = !strncmp(start, "HELLO ", 6) ? start + 6 : "?";
			int n = snprintf(out, sizeof(out), "REPLY %s peer=%s match=%d flags=%s\n", tag, c->peer,
					 c->match, c->flags_ok ? "ok" : "bad");
			if (write(c->fd, out, (size_t)n) != n)
				perror("acceptgate: write");
			start = nl + 1;
		}
		c->len -= (size_t)(start - c->buf);
		memmove(c->buf, start, c->len);
		if (c->len == sizeof(c->buf) - 1)
			c->len = 0;
	}
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: acceptgate PORT GATEFILE\n");
		return 2;
	}
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1])),
				 .sin_addr.s_addr = htonl(INADDR_ANY) };
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(lfd, 64) != 0) {
		perror("acceptgate: listen");
		return 1;
	}
	printf("acceptgate: listening on 0.0.0.0:%s, accepting once %s exists\n", argv[1], argv[2]);
	fflush(stdout);
	while (access(argv[2], F_OK) != 0)
		zdtm_sleep_ms(10);
	printf("acceptgate: gate open\n");
	fflush(stdout);

	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event lev = { .events = EPOLLIN, .data.ptr = NULL };
	epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &lev);
	unsigned long accepted = 0;
	for (;;) {
		struct epoll_event evs[64];
		int n = epoll_wait(ep, evs, 64, -1);
		if (n < 0 && errno == EINTR)
			continue;
		for (int i = 0; i < n; i++) {
			if (evs[i].data.ptr) {
				serve(evs[i].data.ptr, ep);
				continue;
			}
			for (;;) {
				struct sockaddr_in peer, real;
				socklen_t plen = sizeof(peer), rlen = sizeof(real);
				int with4 = accepted % 2 == 0;
				memset(&peer, 0, sizeof(peer));
				int fd = with4 ? accept4(lfd, (struct sockaddr *)&peer, &plen, SOCK_NONBLOCK | SOCK_CLOEXEC)
					       : accept(lfd, (struct sockaddr *)&peer, &plen);
				if (fd < 0) {
					if (errno != EAGAIN && errno != EINTR)
						perror("acceptgate: accept");
					break;
				}
				accepted++;
				struct conn *c = calloc(1, sizeof(*c));
				c->fd = fd;
				int nb = (fcntl(fd, F_GETFL) & O_NONBLOCK) != 0;
				int cx = (fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0;
				c->flags_ok = with4 ? (nb && cx) : (!nb && !cx);
				memset(&real, 0, sizeof(real));
				c->match = getpeername(fd, (struct sockaddr *)&real, &rlen) == 0 && plen == rlen &&
					   real.sin_port == peer.sin_port && real.sin_addr.s_addr == peer.sin_addr.s_addr;
				addr_str(&peer, c->peer, sizeof(c->peer));
				printf("acceptgate: accepted fd %d from %s (%s, nonblock %d, cloexec %d, match %d)\n", fd,
				       c->peer, with4 ? "accept4" : "accept", nb, cx, c->match);
				fflush(stdout);
				if (!nb)
					fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
				struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
				epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
				serve(c, ep); /* a request may already be there */
			}
		}
	}
}
