/* zdtm: TCP connections that ended, or whose peer is gone, read EOF after
 * a restore, not ENOTCONN (issue 16 §4; restore/sk-inet.c). Loopback
 * connections within the process, to its own listener L:
 *   A   established, both ends idle;
 *   B   the client end shut down writing: the server end B.s has the
 *       client's FIN (CLOSE_WAIT), unread;
 *   C   both ends shut down writing and the FINs acknowledged: both fds
 *       still open on sockets the kernel has closed (no peer address), as
 *       lighttpd's lingering close holds them;
 *   N   a TCP socket never connected.
 * A plain restore has no repaired socket for them: their peers are gone.
 * Verify: A's ends read EOF or nothing yet (EAGAIN: before any restore),
 * never ENOTCONN; B.s and both ends of C read EOF, as before the dump,
 * and writes on C fail with EPIPE; N is still unconnected (ENOTCONN) and
 * connects to L.
 */
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include "zdtm.h"

static int lfd;
static struct sockaddr_in la;

static void pair(int *c, int *s)
{
	*c = socket(AF_INET, SOCK_STREAM, 0);
	zdtm_check(*c >= 0 && connect(*c, (struct sockaddr *)&la, sizeof la) == 0, "connect to L");
	*s = accept(lfd, NULL, NULL);
	zdtm_check(*s >= 0, "accept");
}

/* what a non-blocking read gives: 0 (EOF), -errno, or 1 (bytes) */
static int read_result(int fd)
{
	char b[8];
	ssize_t n = recv(fd, b, sizeof b, MSG_DONTWAIT);
	return n < 0 ? -errno : n > 0 ? 1 : 0;
}

static void expect_eof(int fd, const char *what)
{
	int r = read_result(fd);
	if (r != 0)
		zdtm_fail("%s: a read gives %d (%s), not EOF", what, r, r < 0 ? strerror(-r) : "bytes");
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	signal(SIGPIPE, SIG_IGN);
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	la = (struct sockaddr_in){ .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof la;
	int one = 1;
	zdtm_check(lfd >= 0 && setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
			   bind(lfd, (struct sockaddr *)&la, sizeof la) == 0 && listen(lfd, 8) == 0 &&
			   getsockname(lfd, (struct sockaddr *)&la, &al) == 0, "listener L");
	int ac, as, bc, bs, cc, cs;
	pair(&ac, &as);
	pair(&bc, &bs);
	zdtm_check(shutdown(bc, SHUT_WR) == 0, "B: the client shuts down writing");
	pair(&cc, &cs);
	zdtm_check(shutdown(cc, SHUT_WR) == 0 && shutdown(cs, SHUT_WR) == 0, "C: both shut down writing");
	int n = socket(AF_INET, SOCK_STREAM, 0);
	zdtm_check(n >= 0, "N");
	for (int i = 0; i < 200 && (read_result(bs) != 0 || read_result(cs) != 0 || read_result(cc) != 0); i++)
		zdtm_sleep_ms(5); /* the FINs arrive (loopback: at once) */
	zdtm_check(read_result(bs) == 0 && read_result(cs) == 0 && read_result(cc) == 0, "the FINs arrived");
	struct sockaddr_in peer;
	socklen_t pl = sizeof peer;
	zdtm_check(getpeername(cc, (struct sockaddr *)&peer, &pl) < 0 && errno == ENOTCONN,
		   "C: the kernel closed both ends (no peer address)");

	zdtm_ready();
	zdtm_wait_verify();

	if (zdtm_corrupt)
		shutdown(n, SHUT_RDWR);
	int ra = read_result(ac), rs = read_result(as);
	if ((ra != 0 && ra != -EAGAIN) || (rs != 0 && rs != -EAGAIN))
		zdtm_fail("A: reads give %d and %d, not EOF (or nothing yet)", ra, rs);
	expect_eof(bs, "B's server end (CLOSE_WAIT)");
	expect_eof(cc, "C's client end (closed)");
	expect_eof(cs, "C's server end (closed)");
	if (send(cs, "x", 1, 0) != -1 || errno != EPIPE)
		zdtm_fail("C: a write does not fail with EPIPE (errno %d)", errno);
	int rn = read_result(n);
	if (rn != -ENOTCONN)
		zdtm_fail("N: a read gives %d, not ENOTCONN: it is no longer a socket never connected", rn);
	if (connect(n, (struct sockaddr *)&la, sizeof la) != 0)
		zdtm_fail("N: connect to L failed: %s", strerror(errno));
	zdtm_pass();
}
