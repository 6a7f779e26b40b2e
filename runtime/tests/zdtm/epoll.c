/* zdtm: epoll interest lists.
 *
 * EP1 watches eight eventfds (eventfd i holds count i, so all but the first
 * are readable and all are writable). Set-up adds each with its own events
 * (EPOLLIN, EPOLLET for odd i, EPOLLOUT when i % 3 == 0) and 64-bit data.
 * Round r changes entry i = r % 8: removed when r % 5 == 0, added back
 * when absent, otherwise modified (events and data derived from r).
 * EP2 watches the read end of a pipe with EPOLLIN | EPOLLRDHUP.
 *
 * Verify: the exact interest lists (fd, events, data) from
 * /proc/self/fdinfo, recomputed by replaying the rounds, and what
 * epoll_wait reports: every ready entry once, with its data.
 */
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include "zdtm.h"

#define N 8
struct entry { int present; uint32_t events; uint64_t data; };
static struct entry want[N];
static int efd[N], ep1, ep2, pfd[2];

static uint32_t events_for(long r, int i)
{
	uint32_t e = EPOLLIN;
	if (r == 0) {
		if (i % 2) e |= EPOLLET;
		if (i % 3 == 0) e |= EPOLLOUT;
	} else {
		if (r & 1) e |= EPOLLOUT;
		if (r & 2) e |= EPOLLET;
		if (r & 4) e |= EPOLLPRI;
	}
	return e;
}

/* One round on the model; with apply, also on the kernel's epoll. */
static void step(long r, int apply)
{
	int i = (int)(r % N);
	struct epoll_event ev = { .events = events_for(r, i), .data.u64 = zdtm_pattern(0xe9, (uint64_t)r, (uint64_t)i) };
	int op;
	if (r == 0 || !want[i].present)
		op = EPOLL_CTL_ADD;
	else if (r % 5 == 0)
		op = EPOLL_CTL_DEL;
	else
		op = EPOLL_CTL_MOD;
	if (apply)
		zdtm_check(epoll_ctl(ep1, op, efd[i], &ev) == 0, "epoll_ctl");
	want[i].present = op != EPOLL_CTL_DEL;
	want[i].events = ev.events | EPOLLERR | EPOLLHUP; /* the kernel always adds these */
	want[i].data = ev.data.u64;
}

static void check_fdinfo(int ep, int n, const int *fds, const struct entry *w, const char *what)
{
	char path[64], line[512];
	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", ep);
	FILE *f = fopen(path, "r");
	zdtm_check(f != NULL, "open fdinfo");
	int seen = 0, expected = 0;
	for (int i = 0; i < n; i++)
		expected += w[i].present;
	while (fgets(line, sizeof(line), f)) {
		int tfd;
		unsigned ev;
		unsigned long long data;
		if (sscanf(line, "tfd: %d events: %x data: %llx", &tfd, &ev, &data) != 3)
			continue;
		int i;
		for (i = 0; i < n && fds[i] != tfd; i++)
			;
		if (i == n || !w[i].present)
			zdtm_fail("%s: unexpected entry for fd %d (events %#x data %#llx)", what, tfd, ev, data);
		if (ev != w[i].events || data != w[i].data)
			zdtm_fail("%s: fd %d has events %#x data %#llx, expected events %#x data %#llx", what, tfd, ev,
				  data, w[i].events, (unsigned long long)w[i].data);
		seen++;
	}
	fclose(f);
	if (seen != expected)
		zdtm_fail("%s: %d entries in the interest list, expected %d", what, seen, expected);
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	for (int i = 0; i < N; i++) {
		efd[i] = eventfd((unsigned)i, EFD_NONBLOCK);
		zdtm_check(efd[i] >= 0, "eventfd");
	}
	ep1 = epoll_create1(0);
	ep2 = epoll_create1(EPOLL_CLOEXEC);
	zdtm_check(ep1 >= 0 && ep2 >= 0 && pipe(pfd) == 0, "epoll_create1/pipe");
	struct epoll_event pev = { .events = EPOLLIN | EPOLLRDHUP, .data.u64 = 0x1234567890abcdefull };
	zdtm_check(epoll_ctl(ep2, EPOLL_CTL_ADD, pfd[0], &pev) == 0, "epoll_ctl ep2");
	step(0, 1); /* round 0 adds entry 0 */
	for (int i = 1; i < N; i++) {
		struct epoll_event ev = { .events = events_for(0, i), .data.u64 = zdtm_pattern(0xe9, 0, (uint64_t)i) };
		zdtm_check(epoll_ctl(ep1, EPOLL_CTL_ADD, efd[i], &ev) == 0, "epoll_ctl add");
		want[i] = (struct entry){ 1, ev.events | EPOLLERR | EPOLLHUP, ev.data.u64 };
	}
	zdtm_ready();
	long r = 1;
	while (!zdtm_should_verify()) {
		step(r++, 1);
		zdtm_sleep_ms(2);
	}
	if (zdtm_corrupt) {
		int i = want[3].present ? 3 : 4;
		struct epoll_event ev = { .events = want[i].events & ~(EPOLLERR | EPOLLHUP), .data.u64 = want[i].data ^ 1 };
		zdtm_check(epoll_ctl(ep1, EPOLL_CTL_MOD, efd[i], &ev) == 0, "corrupt");
	}
	check_fdinfo(ep1, N, efd, want, "epoll 1");
	struct entry w2 = { 1, EPOLLIN | EPOLLRDHUP | EPOLLERR | EPOLLHUP, 0x1234567890abcdefull };
	check_fdinfo(ep2, 1, &pfd[0], &w2, "epoll 2");
	if (fcntl(ep2, F_GETFD) != FD_CLOEXEC || fcntl(ep1, F_GETFD) != 0)
		zdtm_fail("epoll fds' FD_CLOEXEC changed");

	/* What epoll_wait reports: each present entry whose fd is ready. */
	struct epoll_event evs[N + 1];
	int k = epoll_wait(ep1, evs, N + 1, 0), expect = 0;
	for (int i = 0; i < N; i++)
		if (want[i].present && ((i > 0 && (want[i].events & EPOLLIN)) || (want[i].events & EPOLLOUT)))
			expect++;
	if (k != expect)
		zdtm_fail("epoll_wait on epoll 1 reported %d ready entries, expected %d", k, expect);
	for (int j = 0; j < k; j++) {
		int i;
		for (i = 0; i < N && !(want[i].present && want[i].data == evs[j].data.u64); i++)
			;
		if (i == N)
			zdtm_fail("epoll_wait reported data %#llx that no entry has", (unsigned long long)evs[j].data.u64);
	}
	if (epoll_wait(ep2, evs, 1, 0) != 0)
		zdtm_fail("epoll 2 reported an empty pipe as ready");
	zdtm_check(write(pfd[1], "x", 1) == 1, "write pipe");
	if (epoll_wait(ep2, evs, 1, 100) != 1 || evs[0].data.u64 != 0x1234567890abcdefull)
		zdtm_fail("epoll 2 did not report the pipe after a write");
	printf("epoll: %ld rounds of epoll_ctl\n", r - 1);
	zdtm_pass();
}
