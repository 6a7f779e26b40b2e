/* The kernel's floor for a fork()-based snapshot: the time fork() takes
 * for a process with BYTES of anonymous memory resident in 4 KiB pages
 * (the page tables fork copies are what costs). checkpoint_pause.py runs
 * it with redis' used_memory_rss so that the measured checkpoint pause can
 * be read against what fork() alone costs on the same machine, same run.
 *
 * usage: forkfloor BYTES ROUNDS  -> one line per round: fork_us=N
 * Between rounds every page is written again (as a write load does), so
 * each fork copies the page tables of a fully dirty heap. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/wait.h>

static double now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: forkfloor BYTES ROUNDS\n");
		return 2;
	}
	size_t bytes = strtoull(argv[1], NULL, 10);
	int rounds = atoi(argv[2]);
	if (bytes < 4096 || rounds < 1 || rounds > 1000) {
		fprintf(stderr, "forkfloor: bad arguments\n");
		return 2;
	}
	char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		perror("forkfloor: mmap");
		return 1;
	}
	/* 4 KiB pages, as redis has them (it does not use huge pages) */
	madvise(p, bytes, MADV_NOHUGEPAGE);
	for (int r = 0; r < rounds; r++) {
		memset(p, r + 1, bytes);
		double t0 = now_us();
		pid_t c = fork();
		if (c == 0)
			_exit(0);
		double t1 = now_us();
		if (c < 0) {
			perror("forkfloor: fork");
			return 1;
		}
		waitpid(c, NULL, 0);
		printf("fork_us=%.1f\n", t1 - t0);
	}
	return 0;
}
