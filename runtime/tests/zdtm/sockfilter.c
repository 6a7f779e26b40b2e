/* zdtm: socket filters come back (issue 16 §4). A classic BPF program
 * attached with SO_ATTACH_FILTER decides what a socket receives; a restore
 * that lost it would deliver what the application meant to drop. Three
 * sockets:
 *   - a unix datagram pair whose receiving end accepts only datagrams that
 *     start with the phase's letter ('a' + k): checked by behaviour, a
 *     datagram of another letter is dropped, one of the letter arrives;
 *   - a UDP socket whose filter grows with the phase (k no-op loads, then
 *     accept): checked instruction by instruction (SO_GET_FILTER);
 *   - a TCP connection's client end (restored unconnected by a plain
 *     restore) with a filter locked by SO_LOCK_FILTER: still locked after
 *     (a detach fails with EPERM).
 *
 * Steps, as sockopts.c's: the filters of phase k = (step + 1) / 2 are
 * attached at each odd step, so that a capture carries the even steps'
 * over (no setsockopt since) and reads the odd steps' again. Verify: every
 * socket has its last phase's filter.
 */
#include <linux/filter.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include "zdtm.h"

#define MAX_PROG 16

static int pfd[2], ufd, lfd, cfd, afd;

/* accept a datagram whose first byte is letter, drop the others */
static unsigned letter_prog(struct sock_filter *p, unsigned char letter)
{
	p[0] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 0);
	p[1] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, letter, 0, 1);
	p[2] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, 0xffff);
	p[3] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, 0);
	return 4;
}

/* k loads of the length, then accept everything: k + 1 instructions */
static unsigned long_prog(struct sock_filter *p, unsigned k)
{
	unsigned n = 0;
	while (n < k && n < MAX_PROG - 1) {
		p[n] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_LEN, 0);
		n++;
	}
	p[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, 0x40000 + k);
	return n;
}

static void attach(int fd, struct sock_filter *p, unsigned n, const char *what)
{
	struct sock_fprog fp = { .len = (unsigned short)n, .filter = p };
	zdtm_check(setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &fp, sizeof fp) == 0, what);
}

static void expect_prog(int fd, const struct sock_filter *want, unsigned n, const char *what)
{
	struct sock_filter got[MAX_PROG];
	socklen_t len = 0;
	if (getsockopt(fd, SOL_SOCKET, SO_GET_FILTER, NULL, &len) != 0 || len != n)
		zdtm_fail("%s: a filter of %u instructions, expected %u", what, (unsigned)len, n);
	len = MAX_PROG;
	zdtm_check(getsockopt(fd, SOL_SOCKET, SO_GET_FILTER, got, &len) == 0 && len == n, "SO_GET_FILTER");
	for (unsigned i = 0; i < n; i++)
		if (memcmp(&got[i], &want[i], sizeof got[i]))
			zdtm_fail("%s: instruction %u is {0x%x %u %u 0x%x}, expected {0x%x %u %u 0x%x}", what, i,
				  got[i].code, got[i].jt, got[i].jf, got[i].k, want[i].code, want[i].jt, want[i].jf,
				  want[i].k);
}

static void set_phase(unsigned k)
{
	struct sock_filter p[MAX_PROG];
	attach(pfd[1], p, letter_prog(p, (unsigned char)('a' + k)), "SO_ATTACH_FILTER unix");
	attach(ufd, p, long_prog(p, k), "SO_ATTACH_FILTER udp");
}

static int locked(int fd)
{
	int v = -1;
	socklen_t l = sizeof v;
	zdtm_check(getsockopt(fd, SOL_SOCKET, SO_LOCK_FILTER, &v, &l) == 0, "SO_LOCK_FILTER");
	return v;
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	zdtm_check(socketpair(AF_UNIX, SOCK_DGRAM, 0, pfd) == 0, "socketpair");
	ufd = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof a;
	zdtm_check(ufd >= 0 && bind(ufd, (struct sockaddr *)&a, sizeof a) == 0, "udp");
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	int one = 1; /* as servers do: the killed connection's TIME_WAIT holds the port at the restore */
	zdtm_check(lfd >= 0 && setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0, "SO_REUSEADDR");
	zdtm_check(bind(lfd, (struct sockaddr *)&a, sizeof a) == 0 && listen(lfd, 4) == 0 &&
			   getsockname(lfd, (struct sockaddr *)&a, &al) == 0, "listener");
	cfd = socket(AF_INET, SOCK_STREAM, 0);
	zdtm_check(cfd >= 0 && connect(cfd, (struct sockaddr *)&a, sizeof a) == 0, "connect");
	afd = accept(lfd, NULL, NULL);
	zdtm_check(afd >= 0, "accept");
	struct sock_filter fixed[MAX_PROG];
	unsigned nfixed = long_prog(fixed, 2);
	attach(cfd, fixed, nfixed, "SO_ATTACH_FILTER tcp");
	zdtm_check(setsockopt(cfd, SOL_SOCKET, SO_LOCK_FILTER, &one, sizeof one) == 0, "SO_LOCK_FILTER");

	unsigned step = 0, k = 0;
	set_phase(0);
	for (;; step++) {
		if (step & 1)
			set_phase(k = (step + 1) / 2);
		if (zdtm_step_done(step))
			break;
	}
	if (zdtm_corrupt)
		zdtm_check(setsockopt(pfd[1], SOL_SOCKET, SO_DETACH_FILTER, &one, sizeof one) == 0, "corrupt");

	/* the unix filter by behaviour: another letter dropped, the phase's through */
	char other = (char)('a' + k + 1), mine = (char)('a' + k), got[4];
	zdtm_check(send(pfd[0], &other, 1, 0) == 1 && send(pfd[0], &mine, 1, 0) == 1, "send unix");
	ssize_t n = recv(pfd[1], got, sizeof got, MSG_DONTWAIT);
	if (n != 1 || got[0] != mine)
		zdtm_fail("unix: the first datagram received is %zd bytes '%c', expected '%c' (the filter of phase %u "
			  "drops '%c')", n, n > 0 ? got[0] : '?', mine, k, other);
	if (recv(pfd[1], got, sizeof got, MSG_DONTWAIT) != -1 || errno != EAGAIN)
		zdtm_fail("unix: a second datagram arrived");
	struct sock_filter p[MAX_PROG];
	expect_prog(pfd[1], p, letter_prog(p, (unsigned char)mine), "unix filter");
	expect_prog(ufd, p, long_prog(p, k), "udp filter");
	expect_prog(cfd, fixed, nfixed, "tcp filter");
	if (locked(cfd) != 1 || locked(ufd) != 0 || locked(pfd[1]) != 0)
		zdtm_fail("SO_LOCK_FILTER: tcp %d udp %d unix %d, expected 1 0 0", locked(cfd), locked(ufd),
			  locked(pfd[1]));
	if (setsockopt(cfd, SOL_SOCKET, SO_DETACH_FILTER, &one, sizeof one) != -1 || errno != EPERM)
		zdtm_fail("tcp: the locked filter could be detached");
	printf("sockfilter: phase %u after step %u\n", k, step);
	zdtm_pass();
}
