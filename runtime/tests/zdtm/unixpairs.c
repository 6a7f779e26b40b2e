/* zdtm: unix socketpairs between parts of the process (issue 16 §4;
 * struct rrc_unix_peer, runtime/lib/sk-unix.c, restore/sk-unix.c):
 *   a, b   stream pair: 5000 bytes written a -> b and not read; 3 bytes
 *          b -> a of which a read 1
 *   q      seqpacket pair, d datagram pair: nothing queued
 *   h      stream pair: h0 wrote "bye" and shut its sending side
 *   o      stream pair: o1 wrote "orphan" and closed: o0 alone
 * Verify: each pair is one connection again (traffic both ways, message
 * boundaries of seqpacket and datagram pairs), the queued bytes are there
 * byte for byte and nothing more, h1 reads "bye" then EOF and can still
 * write to h0, whose writes fail with EPIPE, and o0 reads "orphan" then
 * EOF.
 */
#include <sys/socket.h>
#include "zdtm.h"

#define BIG 5000

static unsigned char pattern(int i) { return (unsigned char)(i * 7 + 3); }

static void pair(int type, int sv[2], const char *what)
{
	zdtm_check(socketpair(AF_UNIX, type, 0, sv) == 0, what);
}

static void put(int fd, const void *p, size_t n, const char *what)
{
	zdtm_check(send(fd, p, n, MSG_NOSIGNAL) == (ssize_t)n, what);
}

/* exactly n bytes equal to want, then nothing queued */
static void take(int fd, const void *want, size_t n, const char *what)
{
	unsigned char buf[BIG + 16];
	size_t got = 0;
	while (got < n) {
		ssize_t r = recv(fd, buf + got, sizeof buf - got, MSG_DONTWAIT);
		if (r <= 0)
			zdtm_fail("%s: %zu of %zu bytes, then %s", what, got, n, r == 0 ? "EOF" : strerror(errno));
		got += (size_t)r;
	}
	if (got != n || memcmp(buf, want, n))
		zdtm_fail("%s: %zu bytes, not the %zu queued", what, got, n);
	if (recv(fd, buf, 1, MSG_DONTWAIT) != -1 || errno != EAGAIN)
		zdtm_fail("%s: more than the queued bytes, or EOF", what);
}

static void message(int from, int to, const char *m, const char *what)
{
	char buf[64];
	put(from, m, strlen(m), what);
	ssize_t r = recv(to, buf, sizeof buf, MSG_DONTWAIT);
	if (r != (ssize_t)strlen(m) || memcmp(buf, m, (size_t)r))
		zdtm_fail("%s: received %zd bytes, not the message \"%s\"", what, r, m);
}

static void eof(int fd, const char *what)
{
	char c;
	ssize_t r = recv(fd, &c, 1, MSG_DONTWAIT);
	if (r != 0)
		zdtm_fail("%s: no EOF (%zd, %s)", what, r, r < 0 ? strerror(errno) : "data");
}

int main(int argc, char **argv)
{
	int s[2], q[2], d[2], h[2], o[2];
	unsigned char big[BIG];
	char c;
	zdtm_init(argc, argv);
	for (int i = 0; i < BIG; i++)
		big[i] = pattern(i);
	pair(SOCK_STREAM, s, "stream pair");
	put(s[0], big, BIG, "a -> b");
	put(s[1], "xyz", 3, "b -> a");
	zdtm_check(recv(s[0], &c, 1, 0) == 1 && c == 'x', "a reads one byte");
	pair(SOCK_SEQPACKET, q, "seqpacket pair");
	pair(SOCK_DGRAM, d, "datagram pair");
	pair(SOCK_STREAM, h, "half-closed pair");
	put(h[0], "bye", 3, "h0 -> h1");
	zdtm_check(shutdown(h[0], SHUT_WR) == 0, "shutdown h0");
	pair(SOCK_STREAM, o, "orphaned pair");
	put(o[1], "orphan", 6, "o1 -> o0");
	close(o[1]);

	zdtm_ready();
	zdtm_wait_verify();

	if (zdtm_corrupt)
		zdtm_check(recv(s[1], &c, 1, 0) == 1, "corrupt");
	take(s[1], big, BIG, "b's queue");
	take(s[0], "yz", 2, "a's queue");
	message(s[0], s[1], "ping", "a -> b after");
	message(s[1], s[0], "pong", "b -> a after");
	message(q[0], q[1], "m1", "seqpacket q0 -> q1");
	message(q[1], q[0], "m22", "seqpacket q1 -> q0");
	put(d[1], "d1", 2, "datagram");
	put(d[1], "d22", 3, "datagram");
	char buf[16];
	if (recv(d[0], buf, sizeof buf, MSG_DONTWAIT) != 2 || recv(d[0], buf, sizeof buf, MSG_DONTWAIT) != 3)
		zdtm_fail("datagram pair: the boundaries of two datagrams were not kept");
	char bye[4] = "";
	if (recv(h[1], bye, 3, MSG_DONTWAIT) != 3 || memcmp(bye, "bye", 3))
		zdtm_fail("h1: not \"bye\"");
	eof(h[1], "h1 after bye");
	message(h[1], h[0], "back", "h1 -> h0 after h0's shutdown");
	if (send(h[0], "x", 1, MSG_NOSIGNAL) != -1 || errno != EPIPE)
		zdtm_fail("h0: a write after SHUT_WR did not fail with EPIPE");
	char orphan[8] = "";
	if (recv(o[0], orphan, 6, MSG_DONTWAIT) != 6 || memcmp(orphan, "orphan", 6))
		zdtm_fail("o0: not \"orphan\"");
	eof(o[0], "o0 after its peer closed");
	zdtm_pass();
}
