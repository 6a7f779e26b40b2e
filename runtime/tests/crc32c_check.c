/* SPDX-License-Identifier: MIT
 *
 * runtime/build/crc32c_check: common/crc32c.c (three interleaved streams
 * joined with carry-less multiplies) against the textbook table CRC32C,
 * for every length near the first four 3-stripe block boundaries (and the
 * small blocks' in between) at every
 * alignment class, for random lengths and split points
 * (rrc_crc32c_extend chains), and on the standard check value. Exit 0 when all agree; prints the throughput of
 * both for information. Run by tests/test_crc32c.py.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "rrc/crc32c.h"

/* The textbook byte-table CRC32C, its table made bit by bit. */
static uint32_t table[256];

static void make_table(void)
{
	for (uint32_t b = 0; b < 256; b++) {
		uint32_t c = b;

		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0x82F63B78u & -(c & 1));
		table[b] = c;
	}
}

static uint32_t reference(uint32_t crc, const unsigned char *p, size_t n)
{
	crc = ~crc;
	while (n--)
		crc = (crc >> 8) ^ table[(crc ^ *p++) & 0xff];
	return ~crc;
}

/* every length near a multiple of the 3-stripe block (12 KiB) or of the
 * small one (768 bytes) */
static int near_block(size_t len)
{
	size_t r = len % (3 * 4096), s = len % (3 * 256);

	return len < 512 || r < 64 || r > 3 * 4096 - 64 || s < 24 || s > 3 * 256 - 24;
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(void)
{
	size_t cap = 1 << 20;
	unsigned char *buf = malloc(cap + 8);
	int bad = 0;

	if (!buf)
		return 2;
	make_table();
	srand(12345);
	for (size_t i = 0; i < cap + 8; i++)
		buf[i] = (unsigned char)rand();
	if (rrc_crc32c("123456789", 9) != 0xE3069283u) {
		fprintf(stderr, "check value: got %08x, want e3069283\n", rrc_crc32c("123456789", 9));
		bad++;
	}
	for (size_t len = 0; len <= 4 * 3 * 4096 + 64 && bad < 10; len++)
		for (size_t off = 0; off < 8 && near_block(len); off++) {
			uint32_t got = rrc_crc32c(buf + off, len), want = reference(0, buf + off, len);

			if (got != want) {
				fprintf(stderr, "len %zu off %zu: got %08x want %08x\n", len, off, got, want);
				bad++;
			}
		}
	for (int i = 0; i < 500 && bad < 10; i++) {
		size_t len = (size_t)rand() % cap, off = (size_t)rand() % 8, cut = len ? (size_t)rand() % len : 0;
		uint32_t want = reference(0, buf + off, len);
		uint32_t whole = rrc_crc32c(buf + off, len);
		uint32_t split = rrc_crc32c_extend(rrc_crc32c(buf + off, cut), buf + off + cut, len - cut);

		if (whole != want || split != want) {
			fprintf(stderr, "len %zu off %zu cut %zu: whole %08x split %08x want %08x\n", len, off, cut,
				whole, split, want);
			bad++;
		}
	}
	double t0 = now();
	uint32_t sink = 0;
	for (int r = 0; r < 64; r++)
		sink ^= rrc_crc32c(buf, cap);
	double fast = 64.0 * (double)cap / (now() - t0) / 1e6;
	t0 = now();
	sink ^= reference(0, buf, cap);
	double slow = (double)cap / (now() - t0) / 1e6;
	printf("crc32c: %s; %.0f MB/s (table reference %.0f MB/s) [%08x]\n", bad ? "MISMATCH" : "ok", fast, slow, sink);
	return bad ? 1 : 0;
}
