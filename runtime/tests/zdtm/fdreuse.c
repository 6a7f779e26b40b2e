/* zdtm: fd numbers reused for other objects between dumps.
 *
 * The fd capture carries a TCP connection's record over from the last
 * dump when the same fd still holds the same socket (runtime/lib/fds.c,
 * sockets.c), and tells pipes and sockets apart by fstat alone. This
 * program gives one fd number, SLOT, a different object at each step the
 * harness asks for (it creates $ZDTM_DIR/next; the program answers with
 * $ZDTM_DIR/step, the step number), so that consecutive dumps see SLOT
 * change kind, or stay a TCP connection with another peer:
 *
 *   step % 4 == 0: a TCP connection to listener A (the accepted end kept);
 *   step % 4 == 1: a TCP connection to listener B;
 *   step % 4 == 2: a pipe's read end, one byte (the step) in flight;
 *   step % 4 == 3: a UDP socket bound to an ephemeral port.
 * KEEP is one TCP connection to listener A held from the start. LATE is a
 * TCP listener with backlog LATE_BACKLOG made at step 1, after the first
 * dump (a copy snapshot's pause helper, started by that dump, has its own
 * copy of the library's listen() records: this one came later).
 * $ZDTM_DIR/ports says "A B": the harness checks each image's records.
 * Verify (after a restore): SLOT is the object of the last step (a TCP
 * connection comes back closed: an unconnected TCP socket; the pipe with
 * its byte; the UDP socket bound to its port), KEEP is a TCP socket.
 */
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include "zdtm.h"

#define SLOT 40
#define KEEP 41
#define PEER 42 /* the accepted end of SLOT's connection */
#define LATE 43
#define LATE_BACKLOG 33

static struct sockaddr_in listener(int *fd)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	*fd = socket(AF_INET, SOCK_STREAM, 0);
	zdtm_check(*fd >= 0, "socket");
	/* as servers do: the restore binds again while the killed process's
	 * accepted connections linger on the port */
	int one = 1;
	zdtm_check(setsockopt(*fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0, "SO_REUSEADDR");
	zdtm_check(bind(*fd, (struct sockaddr *)&a, sizeof(a)) == 0, "bind");
	zdtm_check(listen(*fd, 8) == 0, "listen");
	zdtm_check(getsockname(*fd, (struct sockaddr *)&a, &l) == 0, "getsockname");
	return a;
}

/* A connection to a, its client end at fd at, its accepted end at peer (-1: closed). */
static void connect_at(const struct sockaddr_in *a, int lfd, int at, int peer)
{
	int c = socket(AF_INET, SOCK_STREAM, 0);
	zdtm_check(c >= 0, "socket");
	zdtm_check(connect(c, (const struct sockaddr *)a, sizeof(*a)) == 0, "connect");
	int s = accept(lfd, NULL, NULL);
	zdtm_check(s >= 0, "accept");
	zdtm_check(dup2(c, at) == at, "dup2");
	close(c);
	if (peer >= 0)
		zdtm_check(dup2(s, peer) == peer, "dup2 peer");
	close(s);
}

static int sock_int(int fd, int opt)
{
	int v = -1;
	socklen_t l = sizeof(v);
	return getsockopt(fd, SOL_SOCKET, opt, &v, &l) == 0 ? v : -1;
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	int la, lb;
	struct sockaddr_in a = listener(&la), b = listener(&lb);
	char text[64];
	snprintf(text, sizeof(text), "%u %u\n", ntohs(a.sin_port), ntohs(b.sin_port));
	zdtm_write_file("ports", text);
	connect_at(&a, la, KEEP, -1);

	unsigned step = 0, udp_port = 0;
	for (;; step++) {
		close(PEER);
		switch (step % 4) {
		case 0: connect_at(&a, la, SLOT, PEER); break;
		case 1: connect_at(&b, lb, SLOT, PEER); break;
		case 2: {
			int p[2];
			uint8_t byte = (uint8_t)step;
			zdtm_check(pipe(p) == 0 && write(p[1], &byte, 1) == 1, "pipe");
			zdtm_check(dup2(p[0], SLOT) == SLOT, "dup2 pipe");
			close(p[0]);
			close(p[1]);
			break;
		}
		case 3: {
			struct sockaddr_in u = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
			socklen_t l = sizeof(u);
			int s = socket(AF_INET, SOCK_DGRAM, 0);
			zdtm_check(s >= 0 && bind(s, (struct sockaddr *)&u, sizeof(u)) == 0, "udp");
			zdtm_check(getsockname(s, (struct sockaddr *)&u, &l) == 0, "udp getsockname");
			udp_port = ntohs(u.sin_port);
			zdtm_check(dup2(s, SLOT) == SLOT, "dup2 udp");
			close(s);
			break;
		}
		}
		if (step == 1) {
			struct sockaddr_in l = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
			int s = socket(AF_INET, SOCK_STREAM, 0);
			/* listen() on its final number: the library knows a
			 * backlog by fd number (a dup'd listener's is unknown) */
			zdtm_check(s >= 0 && bind(s, (struct sockaddr *)&l, sizeof(l)) == 0 && dup2(s, LATE) == LATE &&
				   listen(LATE, LATE_BACKLOG) == 0, "late listener");
			close(s);
		}
		/* the next step when asked, the verify when asked */
		if (zdtm_step_done(step))
			goto verify;
	}
verify:
	if (zdtm_corrupt) { /* the slot's object replaced by /dev/null */
		int n = open("/dev/null", O_RDONLY);
		dup2(n, SLOT);
	}
	struct stat st;
	zdtm_check(fstat(SLOT, &st) == 0, "fstat slot");
	switch (step % 4) {
	case 0:
	case 1:
		if (!S_ISSOCK(st.st_mode) || sock_int(SLOT, SO_TYPE) != SOCK_STREAM || sock_int(SLOT, SO_ACCEPTCONN) != 0)
			zdtm_fail("step %u: fd %d is not a TCP connection (mode %o)", step, SLOT, st.st_mode);
		break;
	case 2: {
		int avail = -1;
		uint8_t byte = 0;
		if (!S_ISFIFO(st.st_mode) || ioctl(SLOT, FIONREAD, &avail) != 0 || avail != 1 ||
		    read(SLOT, &byte, 1) != 1 || byte != (uint8_t)step)
			zdtm_fail("step %u: fd %d is not the pipe with byte %u (mode %o, %d bytes, byte %u)", step,
				  SLOT, step & 0xff, st.st_mode, avail, byte);
		break;
	}
	case 3: {
		struct sockaddr_in u;
		socklen_t l = sizeof(u);
		if (!S_ISSOCK(st.st_mode) || sock_int(SLOT, SO_TYPE) != SOCK_DGRAM ||
		    getsockname(SLOT, (struct sockaddr *)&u, &l) != 0 || ntohs(u.sin_port) != udp_port)
			zdtm_fail("step %u: fd %d is not the UDP socket bound to port %u", step, SLOT, udp_port);
		break;
	}
	}
	if (fstat(KEEP, &st) != 0 || !S_ISSOCK(st.st_mode) || sock_int(KEEP, SO_TYPE) != SOCK_STREAM)
		zdtm_fail("fd %d is not a TCP socket", KEEP);
	if (step >= 1 && sock_int(LATE, SO_ACCEPTCONN) != 1)
		zdtm_fail("fd %d is not the listener made at step 1", LATE);
	zdtm_pass();
}
