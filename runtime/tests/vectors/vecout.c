/* SPDX-License-Identifier: MIT
 *
 * vecout: the output side of mkvectors (vecout.h): byte buffers, and
 * writing each vector file or comparing it with the committed one.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "vecout.h"

/* ---- growable byte buffer --------------------------------------------- */
void put(struct buf *b, const void *d, size_t n)
{
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->len + n)
			cap *= 2;
		b->p = realloc(b->p, cap);
		if (!b->p) {
			perror("realloc");
			exit(2);
		}
		b->cap = cap;
	}
	if (n)
		memcpy(b->p + b->len, d, n);
	b->len += n;
}

void pad8(struct buf *b)
{
	static const uint8_t z[8];
	put(b, z, (8 - (b->len & 7)) & 7);
}

void printfb(struct buf *b, const char *fmt, ...)
{
	char tmp[4096];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(tmp)) {
		fprintf(stderr, "mkvectors: json line too long\n");
		exit(2);
	}
	put(b, tmp, (size_t)n);
}

/* ---- output: write or check ------------------------------------------- */
const char *g_dir;
int g_check;
int g_diffs;

void mkdirs(const char *rel)
{
	char p[4096];
	snprintf(p, sizeof(p), "%s/%s", g_dir, rel);
	if (mkdir(p, 0755) && errno != EEXIST) {
		fprintf(stderr, "mkvectors: mkdir %s: %s\n", p, strerror(errno));
		exit(2);
	}
}

void emit(const char *rel, const struct buf *b)
{
	char p[4096];
	snprintf(p, sizeof(p), "%s/%s", g_dir, rel);
	if (g_check) {
		FILE *f = fopen(p, "rb");
		if (!f) {
			fprintf(stderr, "mkvectors: %s: missing (%s)\n", p, strerror(errno));
			g_diffs++;
			return;
		}
		struct buf old = { 0 };
		uint8_t tmp[65536];
		size_t n;
		while ((n = fread(tmp, 1, sizeof(tmp), f)) > 0)
			put(&old, tmp, n);
		fclose(f);
		if (old.len != b->len || memcmp(old.p, b->p, b->len)) {
			size_t i = 0;
			while (i < old.len && i < b->len && old.p[i] == b->p[i])
				i++;
			fprintf(stderr, "mkvectors: %s: differs (committed %zu bytes, generated %zu bytes, first difference at byte %zu)\n",
				p, old.len, b->len, i);
			g_diffs++;
		}
		free(old.p);
		return;
	}
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || write(fd, b->p, b->len) != (ssize_t)b->len || close(fd)) {
		fprintf(stderr, "mkvectors: writing %s: %s\n", p, strerror(errno));
		exit(2);
	}
}

void emit_link(const char *rel, const char *target)
{
	char p[4096], old[4096];
	snprintf(p, sizeof(p), "%s/%s", g_dir, rel);
	if (g_check) {
		ssize_t n = readlink(p, old, sizeof(old) - 1);
		if (n < 0 || (old[n] = 0, strcmp(old, target))) {
			fprintf(stderr, "mkvectors: %s: expected a symlink to %s\n", p, target);
			g_diffs++;
		}
		return;
	}
	unlink(p);
	if (symlink(target, p)) {
		fprintf(stderr, "mkvectors: symlink %s: %s\n", p, strerror(errno));
		exit(2);
	}
}

