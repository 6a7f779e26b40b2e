/* zdtm: socket options come back (issue 16). A TCP listener, a TCP
 * connection's client end (restored as an unconnected socket: its options
 * must still be there), a UDP socket and a unix socketpair, each with
 * options of its own: TCP_NODELAY, TCP_CORK, SO_KEEPALIVE with
 * TCP_KEEPIDLE/INTVL/CNT, SO_LINGER, SO_PRIORITY, locked SO_SNDBUF and
 * SO_RCVBUF (and an unlocked one that must stay unlocked), SO_BROADCAST,
 * SO_BINDTODEVICE, IP_FREEBIND, IP_TRANSPARENT.
 *
 * Steps, as fdreuse.c's (the harness creates $ZDTM_DIR/next, the program
 * answers with $ZDTM_DIR/step): the options of "phase" k = (step + 1) / 2
 * are set at each odd step, so that steps 2, 4, ... change nothing (a
 * capture may carry the last one's options over) and steps 1, 3, ... do
 * (it must read them again). Verify: every option is the last phase's.
 */
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include "zdtm.h"

#ifndef SO_BUF_LOCK /* Linux 5.14; Debian 12's headers are 6.1's */
#define SO_BUF_LOCK 72
#endif

static int lfd, cfd, afd, ufd, pfd[2];

static void set_int(int fd, int lvl, int name, int v, const char *what)
{
	zdtm_check(setsockopt(fd, lvl, name, &v, sizeof(v)) == 0, what);
}

static int get_int(int fd, int lvl, int name)
{
	int v = -12345;
	socklen_t l = sizeof(v);
	if (getsockopt(fd, lvl, name, &v, &l) != 0)
		return -12345;
	return v;
}

static void expect(int fd, int lvl, int name, int want, const char *what)
{
	int got = get_int(fd, lvl, name);
	if (got != want)
		zdtm_fail("%s: %d, expected %d", what, got, want);
}

/* the options that change with the phase */
static void set_phase(unsigned k)
{
	set_int(cfd, IPPROTO_TCP, TCP_NODELAY, (int)(k & 1), "TCP_NODELAY");
	set_int(cfd, IPPROTO_TCP, TCP_CORK, (int)((k + 1) & 1), "TCP_CORK");
	set_int(cfd, IPPROTO_TCP, TCP_KEEPIDLE, 30 + (int)k, "TCP_KEEPIDLE");
	set_int(cfd, IPPROTO_TCP, TCP_KEEPINTVL, 5 + (int)k, "TCP_KEEPINTVL");
	set_int(cfd, IPPROTO_TCP, TCP_KEEPCNT, 3 + (int)(k % 3), "TCP_KEEPCNT");
	set_int(lfd, SOL_SOCKET, SO_PRIORITY, 1 + (int)(k % 6), "SO_PRIORITY listener");
	set_int(ufd, SOL_SOCKET, SO_PRIORITY, (int)(k % 7), "SO_PRIORITY UDP");
}

static void expect_phase(unsigned k)
{
	expect(cfd, IPPROTO_TCP, TCP_NODELAY, (int)(k & 1), "connection TCP_NODELAY");
	expect(cfd, IPPROTO_TCP, TCP_CORK, (int)((k + 1) & 1), "connection TCP_CORK");
	expect(cfd, IPPROTO_TCP, TCP_KEEPIDLE, 30 + (int)k, "connection TCP_KEEPIDLE");
	expect(cfd, IPPROTO_TCP, TCP_KEEPINTVL, 5 + (int)k, "connection TCP_KEEPINTVL");
	expect(cfd, IPPROTO_TCP, TCP_KEEPCNT, 3 + (int)(k % 3), "connection TCP_KEEPCNT");
	expect(lfd, SOL_SOCKET, SO_PRIORITY, 1 + (int)(k % 6), "listener SO_PRIORITY");
	expect(ufd, SOL_SOCKET, SO_PRIORITY, (int)(k % 7), "UDP SO_PRIORITY");
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	int one = 1;

	/* the listener: bound to lo, with a foreign-address permission */
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	zdtm_check(lfd >= 0, "socket");
	set_int(lfd, SOL_SOCKET, SO_REUSEADDR, 1, "SO_REUSEADDR");
	zdtm_check(setsockopt(lfd, SOL_SOCKET, SO_BINDTODEVICE, "lo", 3) == 0, "SO_BINDTODEVICE");
	set_int(lfd, IPPROTO_IP, IP_FREEBIND, 1, "IP_FREEBIND");
	set_int(lfd, SOL_SOCKET, SO_RCVBUF, 65536, "SO_RCVBUF listener");
	set_int(lfd, SOL_SOCKET, SO_KEEPALIVE, 1, "SO_KEEPALIVE listener");
	struct linger lg = { 1, 3 };
	zdtm_check(setsockopt(lfd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) == 0, "SO_LINGER listener");
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	zdtm_check(bind(lfd, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(lfd, 8) == 0 &&
		   getsockname(lfd, (struct sockaddr *)&a, &al) == 0, "listen");

	/* a connection: its client end keeps the options */
	cfd = socket(AF_INET, SOCK_STREAM, 0);
	zdtm_check(cfd >= 0 && connect(cfd, (struct sockaddr *)&a, sizeof(a)) == 0, "connect");
	afd = accept(lfd, NULL, NULL);
	zdtm_check(afd >= 0, "accept");
	set_int(cfd, SOL_SOCKET, SO_KEEPALIVE, 1, "SO_KEEPALIVE");
	set_int(cfd, SOL_SOCKET, SO_SNDBUF, 32768, "SO_SNDBUF");
	set_int(cfd, SOL_SOCKET, SO_PRIORITY, 4, "SO_PRIORITY connection");
	struct linger lz = { 1, 0 };
	zdtm_check(setsockopt(cfd, SOL_SOCKET, SO_LINGER, &lz, sizeof(lz)) == 0, "SO_LINGER");

	/* UDP: broadcast, transparent, a locked receive buffer */
	ufd = socket(AF_INET, SOCK_DGRAM, 0);
	zdtm_check(ufd >= 0, "udp");
	set_int(ufd, SOL_SOCKET, SO_BROADCAST, 1, "SO_BROADCAST");
	set_int(ufd, IPPROTO_IP, IP_TRANSPARENT, 1, "IP_TRANSPARENT (root)");
	set_int(ufd, SOL_SOCKET, SO_RCVBUF, 50000, "SO_RCVBUF UDP");
	struct sockaddr_in u = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	zdtm_check(bind(ufd, (struct sockaddr *)&u, sizeof(u)) == 0, "bind udp");

	/* a unix pair: one end's send buffer locked, a priority */
	zdtm_check(socketpair(AF_UNIX, SOCK_STREAM, 0, pfd) == 0, "socketpair");
	set_int(pfd[0], SOL_SOCKET, SO_SNDBUF, 40000, "SO_SNDBUF unix");
	set_int(pfd[0], SOL_SOCKET, SO_PRIORITY, 2, "SO_PRIORITY unix");
	(void)one;

	/* what the kernel made of the buffers, to compare after the restore */
	int l_rcv = get_int(lfd, SOL_SOCKET, SO_RCVBUF), c_snd = get_int(cfd, SOL_SOCKET, SO_SNDBUF);
	int u_rcv = get_int(ufd, SOL_SOCKET, SO_RCVBUF), p_snd = get_int(pfd[0], SOL_SOCKET, SO_SNDBUF);
	int locks[4] = { get_int(lfd, SOL_SOCKET, SO_BUF_LOCK), get_int(cfd, SOL_SOCKET, SO_BUF_LOCK),
			 get_int(ufd, SOL_SOCKET, SO_BUF_LOCK), get_int(pfd[1], SOL_SOCKET, SO_BUF_LOCK) };
	zdtm_check(locks[0] == 2 && locks[1] == 1 && locks[2] == 2 && locks[3] == 0, "SO_BUF_LOCK as set");

	unsigned step = 0, k = 0;
	set_phase(0);
	for (;; step++) {
		if (step & 1)
			set_phase(k = (step + 1) / 2);
		if (zdtm_step_done(step))
			goto verify;
	}
verify:
	if (zdtm_corrupt)
		set_int(cfd, IPPROTO_TCP, TCP_NODELAY, (int)!(k & 1), "corrupt");
	expect_phase(k);
	expect(lfd, SOL_SOCKET, SO_KEEPALIVE, 1, "listener SO_KEEPALIVE");
	expect(lfd, IPPROTO_IP, IP_FREEBIND, 1, "listener IP_FREEBIND");
	char dev[IFNAMSIZ] = "";
	socklen_t dl = sizeof(dev);
	if (getsockopt(lfd, SOL_SOCKET, SO_BINDTODEVICE, dev, &dl) != 0 || strcmp(dev, "lo") != 0)
		zdtm_fail("listener SO_BINDTODEVICE: '%s', expected 'lo'", dev);
	struct linger got;
	socklen_t gl = sizeof(got);
	if (getsockopt(lfd, SOL_SOCKET, SO_LINGER, &got, &gl) != 0 || got.l_onoff != 1 || got.l_linger != 3)
		zdtm_fail("listener SO_LINGER: %d %d, expected 1 3", got.l_onoff, got.l_linger);
	gl = sizeof(got);
	if (getsockopt(cfd, SOL_SOCKET, SO_LINGER, &got, &gl) != 0 || got.l_onoff != 1 || got.l_linger != 0)
		zdtm_fail("connection SO_LINGER: %d %d, expected 1 0", got.l_onoff, got.l_linger);
	expect(cfd, SOL_SOCKET, SO_KEEPALIVE, 1, "connection SO_KEEPALIVE");
	expect(cfd, SOL_SOCKET, SO_PRIORITY, 4, "connection SO_PRIORITY");
	expect(ufd, SOL_SOCKET, SO_BROADCAST, 1, "UDP SO_BROADCAST");
	expect(ufd, IPPROTO_IP, IP_TRANSPARENT, 1, "UDP IP_TRANSPARENT");
	expect(pfd[0], SOL_SOCKET, SO_PRIORITY, 2, "unix SO_PRIORITY");
	expect(lfd, SOL_SOCKET, SO_RCVBUF, l_rcv, "listener SO_RCVBUF");
	expect(cfd, SOL_SOCKET, SO_SNDBUF, c_snd, "connection SO_SNDBUF");
	expect(ufd, SOL_SOCKET, SO_RCVBUF, u_rcv, "UDP SO_RCVBUF");
	expect(pfd[0], SOL_SOCKET, SO_SNDBUF, p_snd, "unix SO_SNDBUF");
	expect(lfd, SOL_SOCKET, SO_BUF_LOCK, locks[0], "listener SO_BUF_LOCK");
	expect(cfd, SOL_SOCKET, SO_BUF_LOCK, locks[1], "connection SO_BUF_LOCK");
	expect(ufd, SOL_SOCKET, SO_BUF_LOCK, locks[2], "UDP SO_BUF_LOCK");
	expect(pfd[1], SOL_SOCKET, SO_BUF_LOCK, locks[3], "unix SO_BUF_LOCK (never set: autotuned)");
	printf("sockopts: phase %u after step %u\n", k, step);
	zdtm_pass();
}
