/* zdtm: listening and bound sockets: TCP listener, UDP socket, unix
 * listener. They must be bound again at the same addresses with the same
 * options, and the TCP listener must accept new connections after a
 * restore, both the harness's (from outside the process) and its own.
 *
 * The TCP port is $ZDTM_PORT (0 = kernel's choice), written to
 * $ZDTM_DIR/port before "ready". A server thread answers each connection:
 * it reads one line and replies "echo: <line>" then closes.
 */
#include <pthread.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include "zdtm.h"

static int tfd, ufd, xfd;
static struct sockaddr_in taddr, uaddr;
static struct sockaddr_un xaddr;
static volatile int served;

static void *server(void *arg)
{
	(void)arg;
	for (;;) {
		int c = accept(tfd, NULL, NULL);
		if (c < 0) {
			if (errno == EINTR)
				continue;
			return NULL;
		}
		char buf[256], out[300];
		size_t got = 0;
		while (got < sizeof(buf) - 1) {
			ssize_t n = read(c, buf + got, sizeof(buf) - 1 - got);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				break;
			got += (size_t)n;
			if (memchr(buf, '\n', got))
				break;
		}
		buf[got] = 0;
		int len = snprintf(out, sizeof(out), "echo: %s", buf);
		if (write(c, out, (size_t)len) == len)
			served++;
		close(c);
	}
}

static int getopt_int(int fd, int level, int name)
{
	int v = -1;
	socklen_t l = sizeof(v);
	getsockopt(fd, level, name, &v, &l);
	return v;
}

static void expect_name(int fd, const void *want, socklen_t wlen, const char *what)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
		zdtm_fail("%s: getsockname: %s", what, strerror(errno));
	if (len != wlen || memcmp(&ss, want, wlen) != 0)
		zdtm_fail("%s: bound to another address after restore", what);
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	const char *ps = getenv("ZDTM_PORT");
	tfd = socket(AF_INET, SOCK_STREAM, 0);
	zdtm_check(tfd >= 0, "socket");
	int one = 1;
	zdtm_check(setsockopt(tfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0, "SO_REUSEADDR");
	taddr = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons(ps ? (uint16_t)atoi(ps) : 0),
				      .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	zdtm_check(bind(tfd, (struct sockaddr *)&taddr, sizeof(taddr)) == 0, "bind TCP");
	zdtm_check(listen(tfd, 64) == 0, "listen");
	socklen_t l = sizeof(taddr);
	getsockname(tfd, (struct sockaddr *)&taddr, &l);

	ufd = socket(AF_INET, SOCK_DGRAM, 0);
	uaddr = (struct sockaddr_in){ .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	zdtm_check(ufd >= 0 && bind(ufd, (struct sockaddr *)&uaddr, sizeof(uaddr)) == 0, "bind UDP");
	l = sizeof(uaddr);
	getsockname(ufd, (struct sockaddr *)&uaddr, &l);

	xfd = socket(AF_UNIX, SOCK_STREAM, 0);
	xaddr.sun_family = AF_UNIX;
	snprintf(xaddr.sun_path, sizeof(xaddr.sun_path), "%s/unix.sock", zdtm_dir);
	unlink(xaddr.sun_path);
	zdtm_check(xfd >= 0 && bind(xfd, (struct sockaddr *)&xaddr, sizeof(xaddr)) == 0, "bind unix");
	zdtm_check(listen(xfd, 8) == 0, "listen unix");

	pthread_t th;
	zdtm_check(pthread_create(&th, NULL, server, NULL) == 0, "pthread_create");
	char port[32];
	snprintf(port, sizeof(port), "%u\n", ntohs(taddr.sin_port));
	zdtm_check(zdtm_write_file("port", port) == 0, "write port file");
	printf("sockets: TCP 127.0.0.1:%u UDP %u unix %s\n", ntohs(taddr.sin_port), ntohs(uaddr.sin_port), xaddr.sun_path);
	zdtm_ready();
	zdtm_wait_verify();
	if (zdtm_corrupt)
		close(ufd);

	expect_name(tfd, &taddr, sizeof(taddr), "TCP listener");
	expect_name(ufd, &uaddr, sizeof(uaddr), "UDP socket");
	struct sockaddr_un xn;
	socklen_t xl = sizeof(xn);
	if (getsockname(xfd, (struct sockaddr *)&xn, &xl) != 0 || strcmp(xn.sun_path, xaddr.sun_path) != 0)
		zdtm_fail("unix listener: bound to '%s', expected '%s'", xn.sun_path, xaddr.sun_path);
	if (getopt_int(tfd, SOL_SOCKET, SO_ACCEPTCONN) != 1 || getopt_int(xfd, SOL_SOCKET, SO_ACCEPTCONN) != 1)
		zdtm_fail("a listener is not listening (TCP %d, unix %d)", getopt_int(tfd, SOL_SOCKET, SO_ACCEPTCONN),
			  getopt_int(xfd, SOL_SOCKET, SO_ACCEPTCONN));
	if (getopt_int(tfd, SOL_SOCKET, SO_REUSEADDR) != 1)
		zdtm_fail("TCP listener lost SO_REUSEADDR");
	if (getopt_int(ufd, SOL_SOCKET, SO_TYPE) != SOCK_DGRAM || getopt_int(tfd, SOL_SOCKET, SO_TYPE) != SOCK_STREAM)
		zdtm_fail("socket types changed");

	/* Our own connection to the TCP listener. */
	int c = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(c, (struct sockaddr *)&taddr, sizeof(taddr)) != 0)
		zdtm_fail("connect to own TCP listener: %s", strerror(errno));
	zdtm_check(write(c, "self\n", 5) == 5, "write");
	char buf[64] = "";
	ssize_t n = 0, k;
	while ((k = read(c, buf + n, sizeof(buf) - 1 - (size_t)n)) > 0)
		n += k;
	close(c);
	if (strcmp(buf, "echo: self\n") != 0)
		zdtm_fail("own TCP connection got '%s'", buf);
	/* unix listener accepts */
	int x = socket(AF_UNIX, SOCK_STREAM, 0);
	if (connect(x, (struct sockaddr *)&xaddr, sizeof(xaddr)) != 0)
		zdtm_fail("connect to own unix listener: %s", strerror(errno));
	int xa = accept(xfd, NULL, NULL);
	if (xa < 0 || write(x, "u", 1) != 1 || read(xa, buf, 1) != 1 || buf[0] != 'u')
		zdtm_fail("unix listener: accepted connection does not carry data");
	/* UDP receives */
	int u = socket(AF_INET, SOCK_DGRAM, 0);
	sendto(u, "dgram", 5, 0, (struct sockaddr *)&uaddr, sizeof(uaddr));
	n = recv(ufd, buf, sizeof(buf), 0);
	if (n != 5 || memcmp(buf, "dgram", 5) != 0)
		zdtm_fail("UDP socket: received %zd bytes", n);
	printf("sockets: served %d connections\n", served);
	zdtm_pass();
}
