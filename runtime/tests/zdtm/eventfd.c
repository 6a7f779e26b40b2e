/* zdtm: eventfd counters and flags.
 *
 *   E1: eventfd(5, 0), round r adds r: after R rounds it holds 5 + R(R+1)/2;
 *   E2: eventfd(3, EFD_SEMAPHORE | EFD_NONBLOCK): three reads of 1, then EAGAIN;
 *   E3: eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC): empty, read gives EAGAIN.
 * Verify: /proc/self/fdinfo's eventfd-count, then the reads themselves.
 */
#include <sys/eventfd.h>
#include "zdtm.h"

static uint64_t fdinfo_count(int fd)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	FILE *f = fopen(path, "r");
	zdtm_check(f != NULL, "open fdinfo");
	uint64_t v = UINT64_MAX;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "eventfd-count: %lx", &v) == 1)
			break;
	fclose(f);
	return v;
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	int e1 = eventfd(5, 0), e2 = eventfd(3, EFD_SEMAPHORE | EFD_NONBLOCK), e3 = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	zdtm_check(e1 >= 0 && e2 >= 0 && e3 >= 0, "eventfd");
	zdtm_ready();
	uint64_t r = 1, R = 0;
	while (!zdtm_should_verify()) {
		zdtm_check(write(e1, &r, 8) == 8, "write eventfd");
		R = r++;
		zdtm_sleep_ms(1);
	}
	if (zdtm_corrupt) {
		uint64_t one = 1;
		zdtm_check(write(e1, &one, 8) == 8, "corrupt");
	}
	uint64_t want = 5 + R * (R + 1) / 2, v = 0;
	if (fdinfo_count(e1) != want)
		zdtm_fail("E1 fdinfo eventfd-count %#lx, expected %#lx after %lu rounds",
			  (unsigned long)fdinfo_count(e1), (unsigned long)want, (unsigned long)R);
	if (fdinfo_count(e2) != 3 || fdinfo_count(e3) != 0)
		zdtm_fail("E2/E3 counts %lu/%lu, expected 3/0", (unsigned long)fdinfo_count(e2),
			  (unsigned long)fdinfo_count(e3));
	if ((fcntl(e1, F_GETFL) & O_NONBLOCK) || !(fcntl(e2, F_GETFL) & O_NONBLOCK) ||
	    !(fcntl(e3, F_GETFL) & O_NONBLOCK) || fcntl(e3, F_GETFD) != FD_CLOEXEC || fcntl(e1, F_GETFD) != 0)
		zdtm_fail("eventfd flags changed: E1 %#x E2 %#x E3 %#x/%d", fcntl(e1, F_GETFL), fcntl(e2, F_GETFL),
			  fcntl(e3, F_GETFL), fcntl(e3, F_GETFD));
	if (read(e1, &v, 8) != 8 || v != want)
		zdtm_fail("E1 read %lu, expected %lu", (unsigned long)v, (unsigned long)want);
	for (int i = 0; i < 3; i++)
		if (read(e2, &v, 8) != 8 || v != 1)
			zdtm_fail("E2 (semaphore) read %d gave %lu, expected 1", i, (unsigned long)v);
	if (read(e2, &v, 8) != -1 || errno != EAGAIN)
		zdtm_fail("E2 (semaphore) a fourth read did not give EAGAIN");
	if (read(e3, &v, 8) != -1 || errno != EAGAIN)
		zdtm_fail("E3 read did not give EAGAIN");
	zdtm_pass();
}
