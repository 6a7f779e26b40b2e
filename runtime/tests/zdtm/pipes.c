/* zdtm: pipes with data in flight, both ends held by the process.
 *
 *   A: a stream: round r writes chunk r (1..500 bytes, content derived from
 *      r) and reads back chunk r-3, so three chunks are always in flight
 *      and what is in flight changes between dumps;
 *   B: pipe buffer raised to 256 KiB with F_SETPIPE_SZ, 200 000 bytes in it;
 *   C: empty, both ends O_NONBLOCK|O_CLOEXEC (pipe2);
 *   D: full to its 64 KiB capacity, write end O_NONBLOCK (writes EAGAIN).
 *
 * Verify: FIONREAD and F_GETPIPE_SZ of each, every byte in flight in
 * order, the flags of both ends, and that each pair still forms one pipe
 * (a byte written at one end comes out of the other).
 */
#include <sys/ioctl.h>
#include "zdtm.h"

static int A[2], B[2], C[2], D[2];

static size_t chunk_len(long r) { return (size_t)((r * 37) % 500) + 1; }
static uint8_t chunk_byte(long r, size_t i) { return (uint8_t)zdtm_pattern(0xc4, (uint64_t)r, i); }
static uint8_t b_byte(size_t i) { return (uint8_t)zdtm_pattern(0xb, 0, i); }

static void write_chunk(long r)
{
	uint8_t buf[512];
	size_t n = chunk_len(r);
	for (size_t i = 0; i < n; i++)
		buf[i] = chunk_byte(r, i);
	zdtm_check(write(A[1], buf, n) == (ssize_t)n, "write pipe A");
}

static void read_chunk(long r, const char *when)
{
	uint8_t buf[512];
	size_t n = chunk_len(r), got = 0;
	while (got < n) {
		ssize_t k = read(A[0], buf + got, n - got);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			zdtm_fail("%s: pipe A read of chunk %ld returned %zd (%s)", when, r, k, strerror(errno));
		got += (size_t)k;
	}
	for (size_t i = 0; i < n; i++)
		if (buf[i] != chunk_byte(r, i))
			zdtm_fail("%s: pipe A chunk %ld byte %zu is %u, expected %u", when, r, i, buf[i],
				  chunk_byte(r, i));
}

static int inflight(int fd)
{
	int n = -1;
	zdtm_check(ioctl(fd, FIONREAD, &n) == 0, "FIONREAD");
	return n;
}

static void expect_fl(int fd, int want, const char *what)
{
	int fl = fcntl(fd, F_GETFL), fdf = fcntl(fd, F_GETFD);
	if (fl < 0)
		zdtm_fail("%s (fd %d) is not open: %s", what, fd, strerror(errno));
	if ((fl & (O_ACCMODE | O_NONBLOCK)) != (want & (O_ACCMODE | O_NONBLOCK)) ||
	    (fdf & FD_CLOEXEC) != ((want & O_CLOEXEC) ? FD_CLOEXEC : 0))
		zdtm_fail("%s (fd %d): flags %#o cloexec %d, expected %#o cloexec %d", what, fd,
			  fl & (O_ACCMODE | O_NONBLOCK), fdf & FD_CLOEXEC, want & (O_ACCMODE | O_NONBLOCK),
			  !!(want & O_CLOEXEC));
}

static void same_pipe(int *p, const char *what)
{
	int n0 = inflight(p[0]);
	char c = 'x';
	zdtm_check(write(p[1], &c, 1) == 1 || errno == EAGAIN, "write");
	if (inflight(p[0]) != n0 + 1)
		zdtm_fail("%s: a byte written to fd %d did not arrive at fd %d", what, p[1], p[0]);
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	zdtm_check(pipe(A) == 0 && pipe(B) == 0 && pipe2(C, O_NONBLOCK | O_CLOEXEC) == 0 && pipe(D) == 0, "pipe");
	zdtm_check(fcntl(B[1], F_SETPIPE_SZ, 256 << 10) >= (256 << 10), "F_SETPIPE_SZ 256 KiB");
	for (size_t i = 0; i < 200000;) {
		uint8_t buf[4000];
		for (size_t j = 0; j < sizeof(buf); j++)
			buf[j] = b_byte(i + j);
		zdtm_check(write(B[1], buf, sizeof(buf)) == (ssize_t)sizeof(buf), "fill pipe B");
		i += sizeof(buf);
	}
	zdtm_check(fcntl(D[1], F_SETFL, O_NONBLOCK) == 0, "O_NONBLOCK");
	int dcap = fcntl(D[1], F_GETPIPE_SZ);
	for (int i = 0; i < dcap; i++) {
		uint8_t b = (uint8_t)(i * 13);
		zdtm_check(write(D[1], &b, 1) == 1, "fill pipe D");
	}
	uint8_t extra = 0;
	zdtm_check(write(D[1], &extra, 1) < 0 && errno == EAGAIN, "pipe D full");

	long r = 0;
	for (; r < 3; r++)
		write_chunk(r);
	zdtm_ready();
	while (!zdtm_should_verify()) {
		write_chunk(r);
		read_chunk(r - 3, "before the dump");
		r++;
		zdtm_sleep_ms(1);
	}
	long R = r - 1; /* chunks R-2..R in flight */
	if (zdtm_corrupt) {
		uint8_t b;
		zdtm_check(read(B[0], &b, 1) == 1, "corrupt B");
	}

	size_t want_a = chunk_len(R - 2) + chunk_len(R - 1) + chunk_len(R);
	if (inflight(A[0]) != (int)want_a)
		zdtm_fail("pipe A holds %d bytes, expected %zu (chunks %ld..%ld)", inflight(A[0]), want_a, R - 2, R);
	for (long c = R - 2; c <= R; c++)
		read_chunk(c, "after restore");
	if (inflight(B[0]) != 200000)
		zdtm_fail("pipe B holds %d bytes, expected 200000", inflight(B[0]));
	if (fcntl(B[0], F_GETPIPE_SZ) != (256 << 10))
		zdtm_fail("pipe B size %d, expected %d", fcntl(B[0], F_GETPIPE_SZ), 256 << 10);
	for (size_t i = 0; i < 200000;) {
		uint8_t buf[8192];
		ssize_t k = read(B[0], buf, sizeof(buf));
		if (k <= 0)
			zdtm_fail("pipe B read returned %zd at byte %zu", k, i);
		for (ssize_t j = 0; j < k; j++)
			if (buf[j] != b_byte(i + (size_t)j))
				zdtm_fail("pipe B byte %zu is %u, expected %u", i + (size_t)j, buf[j], b_byte(i + (size_t)j));
		i += (size_t)k;
	}
	if (inflight(C[0]) != 0)
		zdtm_fail("pipe C holds %d bytes, expected none", inflight(C[0]));
	char c;
	if (read(C[0], &c, 1) != -1 || errno != EAGAIN)
		zdtm_fail("pipe C: read of an empty O_NONBLOCK pipe did not give EAGAIN");
	if (inflight(D[0]) != dcap || fcntl(D[0], F_GETPIPE_SZ) != dcap)
		zdtm_fail("pipe D holds %d bytes of %d, expected full (%d)", inflight(D[0]),
			  fcntl(D[0], F_GETPIPE_SZ), dcap);
	if (write(D[1], &extra, 1) != -1 || errno != EAGAIN)
		zdtm_fail("pipe D: a write to the full O_NONBLOCK pipe did not give EAGAIN");
	for (int i = 0; i < dcap; i++) {
		uint8_t b;
		if (read(D[0], &b, 1) != 1 || b != (uint8_t)(i * 13))
			zdtm_fail("pipe D byte %d wrong", i);
	}

	expect_fl(A[0], O_RDONLY, "pipe A read end");
	expect_fl(A[1], O_WRONLY, "pipe A write end");
	expect_fl(B[0], O_RDONLY, "pipe B read end");
	expect_fl(C[0], O_RDONLY | O_NONBLOCK | O_CLOEXEC, "pipe C read end");
	expect_fl(C[1], O_WRONLY | O_NONBLOCK | O_CLOEXEC, "pipe C write end");
	expect_fl(D[1], O_WRONLY | O_NONBLOCK, "pipe D write end");
	same_pipe(A, "pipe A");
	same_pipe(B, "pipe B");
	same_pipe(C, "pipe C");
	same_pipe(D, "pipe D");
	printf("pipes: %ld chunks streamed\n", R + 1);
	zdtm_pass();
}
