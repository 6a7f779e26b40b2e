/* SPDX-License-Identifier: MIT
 *
 * sk_diag_check: measures which NETLINK_SOCK_DIAG formula gives the exact
 * write_seq/copied_seq of a TCP stream relative to ISN+1, using librrc's
 * own table reader (runtime/lib/sk-diag.c, linked in). In a private network
 * namespace (unshare, lo up; it vanishes with the process, iptables rules
 * included) it builds loopback connections in every state it can produce,
 * IPv4 and IPv6, and compares the table's write_seq_rel / read_seq_rel of
 * both ends with the bytes this program wrote and read (N, and N+1 once a
 * FIN is queued / the EOF was read). Each line printed is evidence:
 *
 *   CASE <name> <end> <field> want W got G | state acked wqueue recv rqueue notsent unacked
 *
 * Exit status: 0 if every comparison holds, 1 otherwise, 2 on set-up failure.
 * Needs CAP_SYS_ADMIN (unshare) and CAP_NET_ADMIN (lo up, iptables).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <linux/tcp.h>
#include <linux/sockios.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rrc_lib.h"

/* librrc's globals, which util.c and sk-diag.c refer to */
struct rrc_lib_state rrc_g;
struct rrc_scratch *rrc_s;

#define CAP 4096
static struct rrc_tcp_stream tab[CAP], spare[CAP];
static uint8_t nlbuf[65536];
static long ntab;
static int failures, checks;
static int fam;                 /* AF_INET or AF_INET6 of the current round */

static void die(const char *m)
{
	perror(m);
	exit(2);
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

static void read_table(void)
{
	uint32_t dumps = 0;
	ntab = rrc_tcp_table_read(-1, tab, spare, CAP, nlbuf, sizeof nlbuf, 1, &dumps);
	if (ntab < 0) {
		fprintf(stderr, "rrc_tcp_table_read: %s\n", strerror((int)-ntab));
		exit(2);
	}
}

static const struct rrc_tcp_stream *find(uint16_t lport, uint16_t rport)
{
	for (long i = 0; i < ntab; i++)
		if (tab[i].family == fam && tab[i].local_port == lport && tab[i].remote_port == rport)
			return &tab[i];
	return NULL;
}

static uint16_t port_of(int fd, int peer)
{
	struct sockaddr_storage a;
	socklen_t l = sizeof a;
	if ((peer ? getpeername(fd, (void *)&a, &l) : getsockname(fd, (void *)&a, &l)) < 0)
		die("getsockname");
	return ntohs(a.ss_family == AF_INET ? ((struct sockaddr_in *)&a)->sin_port
					    : ((struct sockaddr_in6 *)&a)->sin6_port);
}

static void loopback(struct sockaddr_storage *a, socklen_t *l, uint16_t port)
{
	memset(a, 0, sizeof *a);
	if (fam == AF_INET) {
		struct sockaddr_in *s = (void *)a;
		s->sin_family = AF_INET;
		s->sin_port = htons(port);
		s->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		*l = sizeof *s;
	} else {
		struct sockaddr_in6 *s = (void *)a;
		s->sin6_family = AF_INET6;
		s->sin6_port = htons(port);
		s->sin6_addr = in6addr_loopback;
		*l = sizeof *s;
	}
}

struct conn {
	int lfd, cfd, sfd;        /* listener, client end, accepted server end (-1: not accepted) */
	uint16_t lport, cport;
};

static struct conn connect_pair(int do_accept)
{
	struct conn c;
	struct sockaddr_storage a;
	socklen_t l;
	int one = 1;

	c.lfd = socket(fam, SOCK_STREAM, 0);
	setsockopt(c.lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	loopback(&a, &l, 0);
	if (c.lfd < 0 || bind(c.lfd, (void *)&a, l) || listen(c.lfd, 16))
		die("listen");
	c.lport = port_of(c.lfd, 0);
	c.cfd = socket(fam, SOCK_STREAM, 0);
	loopback(&a, &l, c.lport);
	if (c.cfd < 0 || connect(c.cfd, (void *)&a, l))
		die("connect");
	c.cport = port_of(c.cfd, 0);
	c.sfd = do_accept ? accept(c.lfd, NULL, NULL) : -1;
	if (do_accept && c.sfd < 0)
		die("accept");
	return c;
}

static void close_conn(struct conn *c)
{
	if (c->sfd >= 0)
		close(c->sfd);
	close(c->cfd);
	close(c->lfd);
}

static void nonblock(int fd)
{
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* Writes until the socket buffer and the peer's window are full. */
static uint64_t fill_up(int fd)
{
	static char b[65536];
	uint64_t n = 0;
	nonblock(fd);
	for (int quiet = 0; quiet < 20;) {
		ssize_t r = write(fd, b, sizeof b);
		if (r > 0) {
			n += (uint64_t)r;
			quiet = 0;
		} else {
			quiet++;
			sleep_ms(5); /* let the window close, then try again */
		}
	}
	return n;
}

static void write_n(int fd, uint64_t n)
{
	static char b[65536];
	while (n) {
		ssize_t r = write(fd, b, n < sizeof b ? n : sizeof b);
		if (r <= 0)
			die("write");
		n -= (uint64_t)r;
	}
}

/* Reads exactly n bytes (never the FIN behind them). */
static void read_n(int fd, uint64_t n)
{
	static char b[65536];
	while (n) {
		struct pollfd p = { fd, POLLIN, 0 };
		poll(&p, 1, 2000);
		ssize_t r = read(fd, b, n < sizeof b ? n : sizeof b);
		if (r < 0 && errno == EAGAIN)
			continue;
		if (r <= 0)
			die("read");
		n -= (uint64_t)r;
	}
}

/* Waits until everything written on fd is acked (SIOCOUTQ = write_seq - snd_una). */
static void wait_acked(int fd)
{
	for (int i = 0; i < 400; i++) {
		int v = 0;
		if (ioctl(fd, SIOCOUTQ, &v) == 0 && v == 0)
			return;
		sleep_ms(5);
	}
	fprintf(stderr, "warning: fd %d still has unacked data\n", fd);
}

static void tinfo(int fd, struct tcp_info *ti)
{
	socklen_t l = sizeof *ti;
	memset(ti, 0, sizeof *ti);
	if (fd >= 0)
		getsockopt(fd, IPPROTO_TCP, TCP_INFO, ti, &l);
}

/* One comparison; the record's raw fields follow as evidence. */
static void check(const char *cas, const char *end, int fd, uint16_t lport, uint16_t rport,
		  const char *field, uint64_t want)
{
	const struct rrc_tcp_stream *t = find(lport, rport);
	struct tcp_info ti;
	tinfo(fd, &ti);
	checks++;
	if (!t) {
		printf("CASE %s/%s %s %s want %llu got NO RECORD  FAIL\n", fam == AF_INET ? "v4" : "v6",
		       cas, end, field, (unsigned long long)want);
		failures++;
		return;
	}
	uint64_t got = !strcmp(field, "write_seq_rel") ? t->write_seq_rel
		     : !strncmp(field, "read_seq_rel", 12) ? t->read_seq_rel
		     : !strcmp(field, "rqueue") ? t->rqueue : t->wqueue;
	/* "read_seq_rel+fin": the FIN behind the data may already be consumed
	 * (copied_seq past it) when it shared an skb with the last byte read */
	int ok = (got == want || (!strcmp(field, "read_seq_rel+fin") && got == want + 1 && t->rqueue == 0)) &&
		 (t->flags & RRC_TCP_F_SEQ);
	printf("CASE %s/%s %s %s want %llu got %llu | %s state %u acked %llu wqueue %u recv %llu rqueue %u "
	       "notsent %u unacked %u inode %s %s\n",
	       fam == AF_INET ? "v4" : "v6", cas, end, field, (unsigned long long)want, (unsigned long long)got,
	       (t->flags & RRC_TCP_F_ACTIVE) ? "active" : "passive", t->state, (unsigned long long)t->bytes_acked, t->wqueue, (unsigned long long)t->bytes_received,
	       t->rqueue, ti.tcpi_notsent_bytes, ti.tcpi_unacked, t->inode ? "yes" : "0", ok ? "ok" : "FAIL");
	if (!ok)
		failures++;
}

static void iptables(const char *op, const char *match, uint16_t port)
{
	char cmd[256];
	snprintf(cmd, sizeof cmd, "%s -w %s OUTPUT -p tcp %s %u -j DROP", fam == AF_INET ? "iptables" : "ip6tables",
		 op, match, port);
	if (system(cmd) != 0) {
		fprintf(stderr, "failed: %s\n", cmd);
		exit(2);
	}
}

static void round_family(void)
{
	struct conn c;
	uint64_t n;

	/* 1. Both directions, everything read and acked. */
	c = connect_pair(1);
	write_n(c.sfd, 100000);
	write_n(c.cfd, 777);
	read_n(c.cfd, 100000);
	read_n(c.sfd, 777);
	wait_acked(c.sfd);
	wait_acked(c.cfd);
	read_table();
	check("acked-read", "server", c.sfd, c.lport, c.cport, "write_seq_rel", 100000);
	check("acked-read", "server", c.sfd, c.lport, c.cport, "read_seq_rel", 777);
	check("acked-read", "client", c.cfd, c.cport, c.lport, "write_seq_rel", 777);
	check("acked-read", "client", c.cfd, c.cport, c.lport, "read_seq_rel", 100000);

	/* 2. Acked but not read: the data sits in the peer's receive queue. */
	write_n(c.sfd, 1000);
	wait_acked(c.sfd);
	read_table();
	check("acked-unread", "server", c.sfd, c.lport, c.cport, "write_seq_rel", 101000);
	check("acked-unread", "client", c.cfd, c.cport, c.lport, "read_seq_rel", 100000);
	check("acked-unread", "client", c.cfd, c.cport, c.lport, "rqueue", 1000);

	/* 3. FIN acked, EOF not read, then read. */
	shutdown(c.sfd, SHUT_WR);
	wait_acked(c.sfd);
	read_table();
	check("fin-acked", "server", c.sfd, c.lport, c.cport, "write_seq_rel", 101001);
	check("fin-acked", "client", c.cfd, c.cport, c.lport, "read_seq_rel", 100000);
	read_n(c.cfd, 1000);
	read_table();
	check("data-read-eof-not", "client", c.cfd, c.cport, c.lport, "read_seq_rel+fin", 101000);
	char x;
	if (read(c.cfd, &x, 1) != 0)
		die("expected EOF");
	read_table();
	check("eof-read", "client", c.cfd, c.cport, c.lport, "read_seq_rel", 101001);
	close_conn(&c);

	/* 4. Unsent: the peer does not read, its window closes. Then a FIN
	 * queued behind the unsent data, then everything read. */
	c = connect_pair(1);
	n = fill_up(c.sfd);
	read_table();
	check("unsent", "server", c.sfd, c.lport, c.cport, "write_seq_rel", n);
	check("unsent", "client", c.cfd, c.cport, c.lport, "read_seq_rel", 0);
	shutdown(c.sfd, SHUT_WR);
	read_table();
	check("unsent-fin-queued", "server", c.sfd, c.lport, c.cport, "write_seq_rel", n + 1);
	read_n(c.cfd, n);
	if (read(c.cfd, &x, 1) != 0)
		die("expected EOF");
	wait_acked(c.sfd);
	read_table();
	check("unsent-then-read", "server", c.sfd, c.lport, c.cport, "write_seq_rel", n + 1);
	check("unsent-then-read", "client", c.cfd, c.cport, c.lport, "read_seq_rel", n + 1);
	close_conn(&c);

	/* 5. Sent, not acked: everything the client sends is dropped. */
	c = connect_pair(1);
	iptables("-I", "--sport", c.cport);
	write_n(c.sfd, 5000);
	sleep_ms(50);
	read_table();
	check("unacked", "server", c.sfd, c.lport, c.cport, "write_seq_rel", 5000);
	check("unacked", "server", c.sfd, c.lport, c.cport, "wqueue", 5000);
	check("unacked", "client", c.cfd, c.cport, c.lport, "read_seq_rel", 0);
	shutdown(c.sfd, SHUT_WR);
	sleep_ms(20);
	read_table();
	check("unacked-fin", "server", c.sfd, c.lport, c.cport, "write_seq_rel", 5001);
	read_n(c.cfd, 5000);
	read_table();
	check("unacked-read", "client", c.cfd, c.cport, c.lport, "read_seq_rel", 5000);
	iptables("-D", "--sport", c.cport);
	wait_acked(c.sfd);
	read_table();
	check("unacked-then-acked", "server", c.sfd, c.lport, c.cport, "write_seq_rel", 5001);
	close_conn(&c);

	/* 6. Not accepted: the server end is in the accept queue. */
	c = connect_pair(0);
	write_n(c.cfd, 3000);
	wait_acked(c.cfd);
	read_table();
	check("not-accepted", "server", -1, c.lport, c.cport, "read_seq_rel", 0);
	check("not-accepted", "server", -1, c.lport, c.cport, "write_seq_rel", 0);
	check("not-accepted", "server", -1, c.lport, c.cport, "rqueue", 3000);
	check("not-accepted", "client", c.cfd, c.cport, c.lport, "write_seq_rel", 3000);
	close_conn(&c);

	/* 7. Orphan: the server closes with unsent data (FIN_WAIT1, no fd). */
	c = connect_pair(1);
	n = fill_up(c.sfd);
	close(c.sfd);
	c.sfd = -1;
	read_table();
	check("orphan", "server", -1, c.lport, c.cport, "write_seq_rel", n + 1);
	read_n(c.cfd, n);
	wait_acked(c.cfd);
	sleep_ms(20);
	read_table();
	check("orphan-read", "client", c.cfd, c.cport, c.lport, "read_seq_rel+fin", n);
	close_conn(&c);

	/* 8. SYN_SENT and TIME_WAIT: present, without sequence values. */
	c = connect_pair(1);
	close(c.sfd);      /* active close: the server end ends in TIME_WAIT */
	read_n(c.cfd, 0);
	if (read(c.cfd, &x, 1) != 0)
		die("expected EOF");
	close(c.cfd);
	int s = socket(fam, SOCK_STREAM | SOCK_NONBLOCK, 0);
	struct sockaddr_storage a;
	socklen_t l;
	iptables("-I", "--dport", 9);
	loopback(&a, &l, 9);
	connect(s, (void *)&a, l);
	uint16_t sport = port_of(s, 0);
	sleep_ms(50);
	read_table();
	const struct rrc_tcp_stream *tw = find(c.lport, c.cport), *ss = find(sport, 9);
	checks += 2;
	printf("CASE %s/time-wait state %d flags %d  %s\n", fam == AF_INET ? "v4" : "v6", tw ? tw->state : -1,
	       tw ? tw->flags : -1, tw && tw->state == 6 && !(tw->flags & RRC_TCP_F_SEQ) ? "ok" : "FAIL");
	printf("CASE %s/syn-sent state %d flags %d wqueue %d acked %lld  %s\n", fam == AF_INET ? "v4" : "v6",
	       ss ? ss->state : -1, ss ? ss->flags : -1, ss ? (int)ss->wqueue : -1,
	       ss ? (long long)ss->bytes_acked : -1LL,
	       ss && ss->state == 2 && !(ss->flags & RRC_TCP_F_SEQ) ? "ok" : "FAIL");
	failures += !(tw && tw->state == 6 && !(tw->flags & RRC_TCP_F_SEQ));
	failures += !(ss && ss->state == 2 && !(ss->flags & RRC_TCP_F_SEQ));
	close(s);
	iptables("-D", "--dport", 9);
	close(c.lfd);
}

/* The cost the pause pays: one table read (two dumps or more). */
static void time_read(const char *where)
{
	struct timespec t0, t1;
	uint32_t dumps = 0;
	rrc_tcp_table_read(-1, tab, spare, CAP, nlbuf, sizeof nlbuf, 1, &dumps); /* warm */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	long n = rrc_tcp_table_read(-1, tab, spare, CAP, nlbuf, sizeof nlbuf, 1, &dumps);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("table read in %s: %ld sockets, %u dumps, %ld us\n", where, n, dumps,
	       ((t1.tv_sec - t0.tv_sec) * 1000000000L + t1.tv_nsec - t0.tv_nsec) / 1000);
}

int main(void)
{
	static struct rrc_scratch scratch;
	rrc_s = &scratch;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (unshare(CLONE_NEWNET))
		die("unshare(CLONE_NEWNET)");
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	struct ifreq ifr;
	memset(&ifr, 0, sizeof ifr);
	strcpy(ifr.ifr_name, "lo");
	if (fd < 0 || ioctl(fd, SIOCGIFFLAGS, &ifr) < 0)
		die("SIOCGIFFLAGS lo");
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(fd, SIOCSIFFLAGS, &ifr) < 0)
		die("SIOCSIFFLAGS lo");
	close(fd);
	sleep_ms(50); /* ::1 becomes usable once lo is up */

	fam = AF_INET;
	round_family();
	fam = AF_INET6;
	round_family();
	time_read("this netns (the global established hash)");
	/* A netns made with net.ipv4.tcp_child_ehash_entries set in its parent
	 * gets a private, small established hash: each dump walks every bucket
	 * of the hash its sockets live in, which is what a dump costs. */
	int sf = open("/proc/sys/net/ipv4/tcp_child_ehash_entries", O_WRONLY);
	if (sf >= 0 && write(sf, "1024", 4) == 4 && close(sf) == 0 && unshare(CLONE_NEWNET) == 0)
		time_read("a netns with a private 1024-bucket established hash");
	printf("%d of %d checks failed\n", failures, checks);
	return failures ? 1 : 0;
}
