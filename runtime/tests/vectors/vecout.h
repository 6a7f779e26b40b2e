/* SPDX-License-Identifier: MIT
 *
 * vecout.h: what mkvectors' generators share (vecout.c): a growable byte
 * buffer, and emit(), which writes a vector file under g_dir or, with
 * --check, compares it byte for byte with the committed one (g_diffs).
 */
#ifndef RRC_VECOUT_H
#define RRC_VECOUT_H

#include <stddef.h>
#include <stdint.h>

struct buf {
	uint8_t *p;
	size_t len, cap;
};

extern const char *g_dir;
extern int g_check;
extern int g_diffs;

void put(struct buf *b, const void *d, size_t n);
void pad8(struct buf *b);
void printfb(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void mkdirs(const char *rel);
void emit(const char *rel, const struct buf *b);
void emit_link(const char *rel, const char *target);

/* rrlog-vectors.c: the record log's vectors (rrlog-*.bin) */
void rrlog_vectors(void);

#endif
