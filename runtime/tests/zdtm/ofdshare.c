/* zdtm: fds that share one open file description come back sharing it
 * (issue 16 §3; runtime/lib/fds-shared.c, restore/fds.c).
 *
 * Set up, each pair made by dup, dup2 or fcntl(F_DUPFD):
 *   FILE_A/FILE_B  a regular file, 5 bytes written through A (the offset
 *                  is shared: B is at 5 too), O_APPEND clear;
 *   FILE_C         the same file opened again: its own open file
 *                  description, at offset 2 (must stay its own);
 *   PIPE_R/PIPE_R2 a pipe's read end twice, PIPE_W its write end, 3 bytes
 *                  in flight (the first end of a pipe carries them);
 *   EVT_A/EVT_B    one eventfd;
 *   LSN_A/LSN_B    one TCP listener on loopback;
 *   EP_A/EP_B      one epoll set, EVT_B registered through EP_A.
 * Verify (after the restore):
 *   - A and B report the same offset (5), C its own (2); a write through
 *     B moves A's offset, not C's;
 *   - O_NONBLOCK set through PIPE_R shows through PIPE_R2;
 *   - 7 written to EVT_A is read back through EVT_B;
 *   - a connection to the listener's port is accepted through LSN_B (and
 *     the port is bound once: the listener was not made twice);
 *   - EP_B sees the interest EP_A registered (EVT_B readable);
 *   - FD_CLOEXEC stays per number: set on FILE_B only.
 */
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include "zdtm.h"

#define FILE_A 10
#define FILE_B 11
#define FILE_C 12
#define PIPE_R 13
#define PIPE_R2 14
#define PIPE_W 15
#define EVT_A 16
#define EVT_B 17
#define LSN_A 18
#define LSN_B 19
#define EP_A 20
#define EP_B 21

static void place(int fd, int at)
{
	zdtm_check(fd >= 0, "making an fd");
	if (fd != at) {
		zdtm_check(dup2(fd, at) == at, "dup2 into place");
		close(fd);
	}
}

static off_t where(int fd)
{
	return lseek(fd, 0, SEEK_CUR);
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	char path[PATH_MAX];
	zdtm_path(path, sizeof path, "shared-file");
	place(open(path, O_RDWR | O_CREAT | O_TRUNC, 0600), FILE_A);
	zdtm_check(dup2(FILE_A, FILE_B) == FILE_B, "dup2 file");
	zdtm_check(fcntl(FILE_B, F_SETFD, FD_CLOEXEC) == 0, "cloexec on B");
	zdtm_check(write(FILE_A, "hello", 5) == 5, "write A");
	place(open(path, O_RDWR), FILE_C);
	zdtm_check(lseek(FILE_C, 2, SEEK_SET) == 2, "seek C");

	int p[2];
	zdtm_check(pipe(p) == 0, "pipe");
	place(p[0], PIPE_R);
	place(p[1], PIPE_W);
	zdtm_check(fcntl(PIPE_R, F_DUPFD, PIPE_R2) == PIPE_R2, "F_DUPFD pipe");
	zdtm_check(write(PIPE_W, "abc", 3) == 3, "pipe bytes in flight");

	place(eventfd(0, 0), EVT_A);
	place(dup(EVT_A), EVT_B);

	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof a;
	place(socket(AF_INET, SOCK_STREAM, 0), LSN_A);
	zdtm_check(bind(LSN_A, (struct sockaddr *)&a, sizeof a) == 0, "bind");
	zdtm_check(listen(LSN_A, 4) == 0, "listen");
	zdtm_check(getsockname(LSN_A, (struct sockaddr *)&a, &al) == 0, "getsockname");
	zdtm_check(dup2(LSN_A, LSN_B) == LSN_B, "dup2 listener");

	place(epoll_create1(0), EP_A);
	zdtm_check(dup2(EP_A, EP_B) == EP_B, "dup2 epoll");
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 77 };
	zdtm_check(epoll_ctl(EP_A, EPOLL_CTL_ADD, EVT_B, &ev) == 0, "epoll_ctl");

	zdtm_ready();
	zdtm_wait_verify();

	if (zdtm_corrupt) /* B on an open file of its own: offsets no longer shared */
		place(open(path, O_RDWR), FILE_B);
	if (where(FILE_A) != 5 || where(FILE_B) != 5 || where(FILE_C) != 2)
		zdtm_fail("offsets A %ld B %ld C %ld, not 5 5 2", (long)where(FILE_A), (long)where(FILE_B),
			  (long)where(FILE_C));
	zdtm_check(write(FILE_B, "!!", 2) == 2, "write B");
	if (where(FILE_A) != 7 || where(FILE_C) != 2)
		zdtm_fail("after a write through B: A at %ld (not 7), C at %ld (not 2)", (long)where(FILE_A),
			  (long)where(FILE_C));
	if ((fcntl(FILE_A, F_GETFD) & FD_CLOEXEC) || !(fcntl(FILE_B, F_GETFD) & FD_CLOEXEC))
		zdtm_fail("FD_CLOEXEC: A %d B %d, not 0 1", fcntl(FILE_A, F_GETFD), fcntl(FILE_B, F_GETFD));

	zdtm_check(fcntl(PIPE_R, F_SETFL, O_NONBLOCK) == 0, "O_NONBLOCK on R");
	if (!(fcntl(PIPE_R2, F_GETFL) & O_NONBLOCK))
		zdtm_fail("O_NONBLOCK set through fd %d does not show through fd %d", PIPE_R, PIPE_R2);
	char abc[8] = "";
	if (read(PIPE_R2, abc, sizeof abc) != 3 || memcmp(abc, "abc", 3))
		zdtm_fail("the pipe's bytes in flight, read through fd %d: \"%s\"", PIPE_R2, abc);

	uint64_t v = 7, got = 0;
	zdtm_check(write(EVT_A, &v, sizeof v) == sizeof v, "eventfd write");
	struct epoll_event out;
	int n = epoll_wait(EP_B, &out, 1, 1000);
	if (n != 1 || out.data.u64 != 77)
		zdtm_fail("epoll set through fd %d: %d events (data %llu), not the eventfd's", EP_B, n,
			  n == 1 ? (unsigned long long)out.data.u64 : 0ull);
	zdtm_check(read(EVT_B, &got, sizeof got) == sizeof got, "eventfd read through B");
	if (got != 7)
		zdtm_fail("eventfd read %llu through fd %d, not 7", (unsigned long long)got, EVT_B);

	int c = socket(AF_INET, SOCK_STREAM, 0);
	zdtm_check(c >= 0, "socket");
	zdtm_check(connect(c, (struct sockaddr *)&a, sizeof a) == 0, "connect to the listener");
	int s = accept(LSN_B, NULL, NULL);
	if (s < 0)
		zdtm_fail("accept through fd %d: errno %d", LSN_B, errno);
	zdtm_pass();
}
