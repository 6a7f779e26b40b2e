/* zdtm: signalfds come back reading the signals they read, with their
 * flags and sharing, and find the signals that were pending for them.
 *
 * SIGUSR1, SIGUSR2 and SIGRTMIN+4 are blocked. Fd A reads SIGUSR1 and
 * SIGRTMIN+4 (non-blocking), fd B = dup(A), fd C reads SIGUSR2
 * (blocking), an epoll set watches A. Pending before ready: SIGUSR1
 * (raise) and SIGRTMIN+4 with value 5 (sigqueue).
 * Verify: the signal sets in /proc/self/fdinfo, O_NONBLOCK on A and not on
 * C, B the same open file as A (O_NONBLOCK cleared on B shows on A);
 * epoll reports A readable; A reads SIGUSR1 then SIGRTMIN+4 with its
 * value, then nothing; C reads nothing until SIGUSR2 is sent, then it.
 * ZDTM_CORRUPT=1: one signal is read from A first.
 */
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include "zdtm.h"

static uint64_t mask_of(int fd)
{
	char path[64], line[256];
	snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
	FILE *f = fopen(path, "r");
	zdtm_check(f != NULL, "open fdinfo");
	unsigned long long v = ~0ull;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "sigmask: %llx", &v) == 1)
			break;
	fclose(f);
	return v;
}

static uint64_t bit(int sig)
{
	return 1ull << (sig - 1);
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	sigset_t blk, sa, sc;
	sigemptyset(&blk);
	sigaddset(&blk, SIGUSR1);
	sigaddset(&blk, SIGUSR2);
	sigaddset(&blk, SIGRTMIN + 4);
	zdtm_check(sigprocmask(SIG_BLOCK, &blk, NULL) == 0, "block");
	sigemptyset(&sa);
	sigaddset(&sa, SIGUSR1);
	sigaddset(&sa, SIGRTMIN + 4);
	sigemptyset(&sc);
	sigaddset(&sc, SIGUSR2);
	int a = signalfd(-1, &sa, SFD_NONBLOCK | SFD_CLOEXEC);
	int c = signalfd(-1, &sc, 0);
	zdtm_check(a >= 0 && c >= 0, "signalfd");
	int b = dup(a);
	int ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 0xa };
	zdtm_check(b >= 0 && ep >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, a, &ev) == 0, "dup, epoll");
	zdtm_check(raise(SIGUSR1) == 0, "raise");
	zdtm_check(sigqueue(getpid(), SIGRTMIN + 4, (union sigval){ .sival_int = 5 }) == 0, "sigqueue");

	zdtm_ready();
	zdtm_wait_verify();

	struct signalfd_siginfo si;
	if (zdtm_corrupt)
		zdtm_check(read(a, &si, sizeof si) == sizeof si, "corrupt");
	if (mask_of(a) != (bit(SIGUSR1) | bit(SIGRTMIN + 4)) || mask_of(b) != mask_of(a) || mask_of(c) != bit(SIGUSR2))
		zdtm_fail("signal sets %llx %llx %llx", (unsigned long long)mask_of(a), (unsigned long long)mask_of(b),
			  (unsigned long long)mask_of(c));
	if (!(fcntl(a, F_GETFL) & O_NONBLOCK) || (fcntl(c, F_GETFL) & O_NONBLOCK) || !(fcntl(a, F_GETFD) & FD_CLOEXEC))
		zdtm_fail("flags: A %x (fd %x), C %x", fcntl(a, F_GETFL), fcntl(a, F_GETFD), fcntl(c, F_GETFL));
	zdtm_check(fcntl(b, F_SETFL, fcntl(b, F_GETFL) & ~O_NONBLOCK) == 0, "F_SETFL on B");
	if (fcntl(a, F_GETFL) & O_NONBLOCK)
		zdtm_fail("B is not the same open file as A");
	zdtm_check(fcntl(b, F_SETFL, fcntl(b, F_GETFL) | O_NONBLOCK) == 0, "F_SETFL on B");
	struct epoll_event got;
	if (epoll_wait(ep, &got, 1, 0) != 1 || got.data.u64 != 0xa)
		zdtm_fail("epoll does not report A readable");
	if (read(a, &si, sizeof si) != sizeof si || si.ssi_signo != SIGUSR1)
		zdtm_fail("A: first read is not SIGUSR1");
	if (read(a, &si, sizeof si) != sizeof si || si.ssi_signo != (uint32_t)SIGRTMIN + 4 || si.ssi_int != 5 ||
	    si.ssi_code != SI_QUEUE)
		zdtm_fail("A: second read is not SIGRTMIN+4 with 5 (signo %u int %d code %d)", si.ssi_signo, si.ssi_int,
			  si.ssi_code);
	if (read(a, &si, sizeof si) != -1 || errno != EAGAIN)
		zdtm_fail("A: a third signal");
	struct pollfd p = { .fd = c, .events = POLLIN };
	if (poll(&p, 1, 0) != 0)
		zdtm_fail("C readable before SIGUSR2");
	zdtm_check(kill(getpid(), SIGUSR2) == 0, "kill SIGUSR2");
	if (read(c, &si, sizeof si) != sizeof si || si.ssi_signo != SIGUSR2)
		zdtm_fail("C does not read SIGUSR2");
	zdtm_pass();
}
