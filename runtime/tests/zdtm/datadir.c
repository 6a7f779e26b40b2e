/* SPDX-License-Identifier: MIT
 *
 * zdtm datadir: files in the data directory ($ZDTM_DATA, `rrc exec
 * --data-dir`) changed continuously between dumps through every path
 * librrc journals: write() at the file offset, pwrite(), an O_APPEND fd kept
 * open across dumps and restores, stdio (fopen/fwrite/fflush/
 * fsync(fileno)/fclose + rename, as Redis SAVE does), ftruncate, unlink,
 * mkdir/rmdir.
 *
 * The program keeps a model of the tree in its memory, updated right after
 * each real operation. After a restore from images whose FILEOPS were
 * replayed onto the initial content, the model (memory) and the files
 * (journal) must agree byte for byte: that is what "the committed state
 * includes a consistent file system" means. A thread parked between an
 * operation and its model update resumes after the operation, so the two
 * still agree.
 *
 * $ZDTM_DIR/stop: the program stops changing files and creates
 * $ZDTM_DIR/stopped (the harness then dumps a quiet process and compares
 * the replayed tree with the real one).
 * ZDTM_CORRUPT=1: one model byte is changed before verifying (must FAIL).
 */
#include <dirent.h>
#include "zdtm.h"

#define NF      8
#define FMAX    8192
#define LOGMAX  (64 * 1024)
#define NDIRS   3

static const char *data;
static struct { int exists; size_t len; unsigned char b[FMAX]; } model[NF];
static unsigned char logm[LOGMAX];
static size_t loglen;
static int dirs[NDIRS];
static int logfd = -1;
static unsigned long step;

static void dpath(char *buf, size_t n, const char *rel)
{
	snprintf(buf, n, "%s/%s", data, rel);
}

static void fname(char *buf, size_t n, int k)
{
	char rel[32];
	snprintf(rel, sizeof rel, "d/f%d", k);
	dpath(buf, n, rel);
}

static void pattern(unsigned char *b, size_t n, unsigned long seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (unsigned char)(seed * 131 + i * 7 + (seed >> 3));
}

static void do_step(void)
{
	unsigned long i = step;
	int k = (int)(i % NF);
	char p[PATH_MAX];
	unsigned char buf[256];
	fname(p, sizeof p, k);

	switch (i % 7) {
	case 0: { /* write() at the file offset after lseek */
		size_t off = (i * 37) % 4096, n = 64;
		pattern(buf, n, i);
		int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
		zdtm_check(fd >= 0, "open for write");
		zdtm_check(lseek(fd, (off_t)off, SEEK_SET) == (off_t)off, "lseek");
		zdtm_check(write(fd, buf, n) == (ssize_t)n, "write");
		close(fd);
		if (!model[k].exists) {
			model[k].exists = 1;
			model[k].len = 0;
		}
		if (off > model[k].len)
			memset(model[k].b + model[k].len, 0, off - model[k].len);
		memcpy(model[k].b + off, buf, n);
		if (off + n > model[k].len)
			model[k].len = off + n;
		break;
	}
	case 1: { /* pwrite() */
		size_t off = (i * 53) % 4000, n = 100;
		pattern(buf, n, i + 1);
		int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		zdtm_check(fd >= 0, "open for pwrite");
		zdtm_check(pwrite(fd, buf, n, (off_t)off) == (ssize_t)n, "pwrite");
		close(fd);
		if (!model[k].exists) {
			model[k].exists = 1;
			model[k].len = 0;
		}
		if (off > model[k].len)
			memset(model[k].b + model[k].len, 0, off - model[k].len);
		memcpy(model[k].b + off, buf, n);
		if (off + n > model[k].len)
			model[k].len = off + n;
		break;
	}
	case 2: { /* the O_APPEND log, open for the whole run */
		char line[64];
		int n = snprintf(line, sizeof line, "step %lu\n", i);
		if (loglen + (size_t)n > LOGMAX) {
			zdtm_check(ftruncate(logfd, 0) == 0, "ftruncate log");
			loglen = 0;
		}
		zdtm_check(write(logfd, line, (size_t)n) == n, "append");
		memcpy(logm + loglen, line, (size_t)n);
		loglen += (size_t)n;
		break;
	}
	case 3: { /* stdio, then rename over f<k> (Redis SAVE) */
		char tmp[PATH_MAX];
		dpath(tmp, sizeof tmp, "tmp-save");
		size_t n = 200 + i % 50;
		unsigned char big[300];
		pattern(big, n, i + 2);
		FILE *f = fopen(tmp, "w");
		zdtm_check(f != NULL, "fopen");
		zdtm_check(fwrite(big, 1, n, f) == n, "fwrite");
		zdtm_check(fprintf(f, "#%lu", i) > 0, "fprintf");
		zdtm_check(fflush(f) == 0, "fflush");
		zdtm_check(fsync(fileno(f)) == 0, "fsync(fileno)");
		zdtm_check(fclose(f) == 0, "fclose");
		zdtm_check(rename(tmp, p) == 0, "rename");
		char tail[32];
		int tl = snprintf(tail, sizeof tail, "#%lu", i);
		model[k].exists = 1;
		memcpy(model[k].b, big, n);
		memcpy(model[k].b + n, tail, (size_t)tl);
		model[k].len = n + (size_t)tl;
		break;
	}
	case 4: /* unlink */
		if (model[k].exists) {
			zdtm_check(unlink(p) == 0, "unlink");
			model[k].exists = 0;
			model[k].len = 0;
		}
		break;
	case 5: /* ftruncate */
		if (model[k].exists) {
			size_t len = i % 100;
			int fd = open(p, O_WRONLY | O_CLOEXEC);
			zdtm_check(fd >= 0, "open for ftruncate");
			zdtm_check(ftruncate(fd, (off_t)len) == 0, "ftruncate");
			close(fd);
			if (len > model[k].len)
				memset(model[k].b + model[k].len, 0, len - model[k].len);
			model[k].len = len;
		}
		break;
	case 6: { /* mkdir / rmdir */
		int d = (int)(i % NDIRS);
		char rel[32];
		snprintf(rel, sizeof rel, "sub%d", d);
		dpath(p, sizeof p, rel);
		if (dirs[d]) {
			zdtm_check(rmdir(p) == 0, "rmdir");
			dirs[d] = 0;
		} else {
			zdtm_check(mkdir(p, 0750) == 0, "mkdir");
			dirs[d] = 1;
		}
		break;
	}
	}
	step++;
}

static void verify_file(const char *rel, const unsigned char *want, size_t len)
{
	char p[PATH_MAX];
	static unsigned char got[LOGMAX + 1];
	dpath(p, sizeof p, rel);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		zdtm_fail("%s: missing (%s) after %lu steps", rel, strerror(errno), step);
	ssize_t n = read(fd, got, sizeof got);
	close(fd);
	if (n != (ssize_t)len)
		zdtm_fail("%s: %zd bytes, the model has %zu (after %lu steps)", rel, n, len, step);
	for (size_t i = 0; i < len; i++)
		if (got[i] != want[i])
			zdtm_fail("%s: byte %zu is %#x, the model has %#x (after %lu steps)", rel, i, got[i],
				  want[i], step);
}

static void verify(void)
{
	if (zdtm_corrupt) {
		int k = 0;
		while (k < NF && !(model[k].exists && model[k].len))
			k++;
		if (k < NF)
			model[k].b[0] ^= 0xff;
		else
			logm[0] ^= 0xff;
	}
	char rel[32];
	for (int k = 0; k < NF; k++) {
		snprintf(rel, sizeof rel, "d/f%d", k);
		if (model[k].exists) {
			verify_file(rel, model[k].b, model[k].len);
		} else {
			char p[PATH_MAX];
			dpath(p, sizeof p, rel);
			if (access(p, F_OK) == 0)
				zdtm_fail("%s exists, the model says it was unlinked (after %lu steps)", rel, step);
		}
	}
	verify_file("log", logm, loglen);
	/* the O_APPEND fd still appends where the model expects */
	off_t end = lseek(logfd, 0, SEEK_END);
	if (end != (off_t)loglen)
		zdtm_fail("log fd: end at %lld, the model has %zu", (long long)end, loglen);
	for (int d = 0; d < NDIRS; d++) {
		char p[PATH_MAX];
		snprintf(rel, sizeof rel, "sub%d", d);
		dpath(p, sizeof p, rel);
		struct stat st;
		int there = stat(p, &st) == 0 && S_ISDIR(st.st_mode);
		if (there != dirs[d])
			zdtm_fail("%s: %s, the model says %s", rel, there ? "present" : "absent",
				  dirs[d] ? "present" : "absent");
	}
	char p[PATH_MAX];
	dpath(p, sizeof p, "tmp-save");
	if (access(p, F_OK) == 0)
		zdtm_fail("tmp-save exists: a rename was lost");
	zdtm_pass();
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	data = getenv("ZDTM_DATA");
	if (!data || !*data) {
		fprintf(stderr, "datadir: ZDTM_DATA (the data directory) is not set\n");
		return 2;
	}
	char p[PATH_MAX];
	dpath(p, sizeof p, "d");
	zdtm_check(mkdir(p, 0755) == 0 || errno == EEXIST, "mkdir d");
	dpath(p, sizeof p, "log");
	logfd = open(p, O_WRONLY | O_CREAT | O_APPEND | O_TRUNC | O_CLOEXEC, 0644);
	zdtm_check(logfd >= 0, "open log");
	/* the initial content (shipped before the start) must be untouched */
	dpath(p, sizeof p, "initial");
	if (access(p, F_OK) == 0) {
		static const char want[] = "initial content\n";
		verify_file("initial", (const unsigned char *)want, sizeof want - 1);
	}
	zdtm_ready();
	int stopped = 0;
	for (;;) {
		if (zdtm_file_exists("verify"))
			verify();
		if (!stopped && zdtm_file_exists("stop")) {
			stopped = 1;
			char msg[64];
			snprintf(msg, sizeof msg, "%lu\n", step);
			zdtm_write_file("stopped", msg);
		}
		if (!stopped)
			do_step();
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
}
