/* zdtm: unix datagram and seqpacket sockets come back with their queues
 * and their names (issue 16 §4). Before, a datagram queued at the snapshot
 * was refused, and a datagram socket bound to a name came back unnamed (a
 * socketpair's end), silently.
 *   pair    a datagram socketpair: each step queues one more datagram at
 *           pair[1] (step s: s * 37 bytes, 0 at step 0: an empty datagram
 *           is a datagram too), and one waits at pair[0];
 *   seq     a seqpacket socketpair with three messages queued at seq[1];
 *   seq2    another, two messages queued at seq2[1] and seq2[0] closed:
 *           they are read, then EOF (0);
 *   srv     a datagram socket bound to $ZDTM_DIR/dgram.sock, mode 0620,
 *           with two datagrams queued from an unnamed sender, and cli, an
 *           unnamed socket connected to it;
 *   abs     the same with an abstract name, and cli2 connected to it;
 *   ext     connected to $ZDTM_DIR/gone.sock, whose socket closed and file
 *           went: its next send fails with ECONNREFUSED, then ENOTCONN.
 * Verify: every queue in order, message by message (lengths and bytes),
 * then empty; the names and the file's mode; cli and cli2 reach srv and
 * abs; ext's peer is gone.
 */
#include <stddef.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include "zdtm.h"

static int pair[2], seq[2], seq2[2], srv, cli, abs_, cli2, ext;
static struct sockaddr_un srv_addr, abs_addr, srv_name, abs_name;
static socklen_t abs_len, srv_name_len = sizeof srv_name, abs_name_len = sizeof abs_name;

static void fill(char *b, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (char)(seed * 31 + i * 7);
}

static void send_msg(int fd, size_t n, unsigned seed, const char *what)
{
	static char b[65536];
	fill(b, n, seed);
	zdtm_check(send(fd, b, n, 0) == (ssize_t)n, what);
}

/* the next message at fd is n bytes of seed's pattern, from an unnamed sender */
static void expect_msg(int fd, size_t n, unsigned seed, const char *what)
{
	static char b[65536], want[65536];
	struct sockaddr_un from;
	socklen_t fl = sizeof from;
	ssize_t got = recvfrom(fd, b, sizeof b, MSG_DONTWAIT, (struct sockaddr *)&from, &fl);
	if (got < 0)
		zdtm_fail("%s: no message of %zu bytes (errno %d)", what, n, errno);
	if ((size_t)got != n)
		zdtm_fail("%s: a message of %zd bytes, expected %zu", what, got, n);
	fill(want, n, seed);
	if (memcmp(b, want, n))
		zdtm_fail("%s: the message's bytes differ", what);
	if (fl > sizeof(sa_family_t))
		zdtm_fail("%s: from a named sender (%u bytes of address)", what, (unsigned)fl);
}

static void expect_empty(int fd, const char *what)
{
	char b[8];
	errno = 0;
	ssize_t n = recv(fd, b, sizeof b, MSG_DONTWAIT);
	if (n != -1 || errno != EAGAIN)
		zdtm_fail("%s: one more message (%zd, errno %d)", what, n, errno);
}

static void expect_name(int fd, const struct sockaddr_un *a, socklen_t len, const char *what)
{
	struct sockaddr_un got;
	socklen_t gl = sizeof got;
	zdtm_check(getsockname(fd, (struct sockaddr *)&got, &gl) == 0, "getsockname");
	if (gl != len || memcmp(&got, a, len))
		zdtm_fail("%s: its name is not the one it was bound to (%u bytes, expected %u)", what, (unsigned)gl,
			  (unsigned)len);
}

static int dgram(void)
{
	int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
	zdtm_check(fd >= 0, "socket");
	return fd;
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	zdtm_check(socketpair(AF_UNIX, SOCK_DGRAM, 0, pair) == 0, "socketpair dgram");
	zdtm_check(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, seq) == 0, "socketpair seqpacket");
	for (unsigned i = 0; i < 3; i++)
		send_msg(seq[0], 100 + i, 500 + i, "seqpacket send");
	send_msg(pair[1], 5, 900, "dgram to pair[0]");
	zdtm_check(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, seq2) == 0, "socketpair seqpacket 2");
	send_msg(seq2[0], 40, 600, "seqpacket 2 send");
	send_msg(seq2[0], 41, 601, "seqpacket 2 send");
	close(seq2[0]);

	srv = dgram();
	srv_addr.sun_family = AF_UNIX;
	zdtm_path(srv_addr.sun_path, sizeof srv_addr.sun_path, "dgram.sock");
	unlink(srv_addr.sun_path);
	zdtm_check(bind(srv, (struct sockaddr *)&srv_addr, sizeof srv_addr) == 0, "bind srv");
	zdtm_check(chmod(srv_addr.sun_path, 0620) == 0, "chmod srv");
	zdtm_check(getsockname(srv, (struct sockaddr *)&srv_name, &srv_name_len) == 0, "srv's name");
	cli = dgram();
	zdtm_check(connect(cli, (struct sockaddr *)&srv_addr, sizeof srv_addr) == 0, "connect cli");
	send_msg(cli, 300, 1, "cli to srv");
	send_msg(cli, 7, 2, "cli to srv");

	abs_ = dgram();
	abs_addr.sun_family = AF_UNIX;
	int l = snprintf(abs_addr.sun_path + 1, sizeof abs_addr.sun_path - 1, "rrc-zdtm-unixdgram-%d", getpid());
	abs_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + l);
	zdtm_check(bind(abs_, (struct sockaddr *)&abs_addr, abs_len) == 0, "bind abstract");
	zdtm_check(getsockname(abs_, (struct sockaddr *)&abs_name, &abs_name_len) == 0, "abs's name");
	cli2 = dgram();
	zdtm_check(connect(cli2, (struct sockaddr *)&abs_addr, abs_len) == 0, "connect cli2");
	send_msg(cli2, 1000, 3, "cli2 to abs");

	struct sockaddr_un gone = { .sun_family = AF_UNIX };
	zdtm_path(gone.sun_path, sizeof gone.sun_path, "gone.sock");
	unlink(gone.sun_path);
	int g = dgram();
	zdtm_check(bind(g, (struct sockaddr *)&gone, sizeof gone) == 0, "bind gone");
	ext = dgram();
	zdtm_check(connect(ext, (struct sockaddr *)&gone, sizeof gone) == 0, "connect ext");
	close(g);
	unlink(gone.sun_path);

	unsigned step = 0;
	for (;; step++) {
		send_msg(pair[0], step * 37, 100 + step, "dgram to pair[1]");
		if (zdtm_step_done(step))
			break;
	}
	if (zdtm_corrupt) {
		char b[65536];
		zdtm_check(recv(pair[1], b, sizeof b, 0) >= 0, "corrupt");
	}

	for (unsigned s = 0; s <= step; s++)
		expect_msg(pair[1], s * 37, 100 + s, "pair[1]");
	expect_empty(pair[1], "pair[1]");
	expect_msg(pair[0], 5, 900, "pair[0]");
	expect_empty(pair[0], "pair[0]");
	for (unsigned i = 0; i < 3; i++)
		expect_msg(seq[1], 100 + i, 500 + i, "seqpacket");
	expect_empty(seq[1], "seqpacket");
	expect_msg(seq2[1], 40, 600, "seqpacket 2");
	expect_msg(seq2[1], 41, 601, "seqpacket 2");
	char eofb[8];
	ssize_t e = recv(seq2[1], eofb, sizeof eofb, MSG_DONTWAIT);
	if (e != 0)
		zdtm_fail("seqpacket 2: after its messages a read gave %zd (errno %d), not EOF", e, errno);
	expect_msg(srv, 300, 1, "srv");
	expect_msg(srv, 7, 2, "srv");
	expect_empty(srv, "srv");
	expect_msg(abs_, 1000, 3, "abs");
	expect_empty(abs_, "abs");

	expect_name(srv, &srv_name, srv_name_len, "srv");
	expect_name(abs_, &abs_name, abs_name_len, "abs");
	struct stat st;
	zdtm_check(stat(srv_addr.sun_path, &st) == 0, "stat srv's file");
	if (!S_ISSOCK(st.st_mode) || (st.st_mode & 07777) != 0620)
		zdtm_fail("srv's socket file has mode %o, expected socket 0620", st.st_mode);
	send_msg(cli, 11, 4, "cli to srv after");
	expect_msg(srv, 11, 4, "srv after");
	send_msg(cli2, 12, 5, "cli2 to abs after");
	expect_msg(abs_, 12, 5, "abs after");
	errno = 0;
	if (send(ext, "x", 1, 0) != -1 || errno != ECONNREFUSED)
		zdtm_fail("ext: a send to its gone peer gave errno %d, not ECONNREFUSED", errno);
	errno = 0;
	if (send(ext, "x", 1, 0) != -1 || errno != ENOTCONN)
		zdtm_fail("ext: a second send gave errno %d, not ENOTCONN", errno);
	printf("unixdgram: %u steps\n", step);
	zdtm_pass();
}
