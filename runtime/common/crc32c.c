/* SPDX-License-Identifier: MIT
 * CRC32C with the SSE4.2 crc32 instruction (every x86-64 CPU rrc targets
 * has it, and PCLMULQDQ; checked at build time by -msse4.2 -mpclmul).
 * ASYNC-SIGNAL-SAFE, no libc, no data: also linked into the restorer blob.
 *
 * One crc32 instruction depends on the previous one's result (3 cycles of
 * latency, one issued per cycle), so a single stream runs at a third of
 * what the unit can do. Blocks of 3 × STRIPE bytes are therefore done as
 * three independent streams, whose registers are then joined (and what is
 * left, or a buffer under 12 KiB such as a 4 KiB page or a reply, in
 * blocks of 3 × SMALL bytes the same way): the
 * register after A‖B is the one after A moved past |B| zero bytes, xor the
 * one of B alone; moving a register past n zero bytes is a multiplication
 * by x^(8n) mod P, done as one carry-less multiply by the constant
 * x^(8n−33) mod P and one crc32 of the 64-bit product (Intel, "Fast CRC
 * Computation for iSCSI Polynomial Using CRC32 Instruction", 2011).
 * runtime/tests/crc32c_check.c compares the result with a bitwise
 * reference for every length and alignment class. */
#include "rrc/crc32c.h"
#include <nmmintrin.h>
#include <wmmintrin.h>

#define STRIPE 4096
#define SMALL  256
/* x^(8·n−33) mod P for n = STRIPE, SMALL, bit-reflected (derived once,
 * checked by the test) */
#define SHIFT_STRIPE 0x82f89c77u
#define SHIFT_SMALL  0xb9e02b86u

/* the register moved past the zero bytes `shift` stands for */
static inline uint64_t past(uint64_t c, uint32_t shift)
{
	__m128i p = _mm_clmulepi64_si128(_mm_cvtsi64_si128((long long)(uint32_t)c),
					 _mm_cvtsi64_si128(shift), 0);

	return _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(p));
}

static inline uint64_t load64(const unsigned char *p)
{
	uint64_t w;

	__builtin_memcpy(&w, p, 8);
	return w;
}

/* register c moved past 3 × stripe bytes at p, as three streams joined
 * (inlined with constant arguments: one loop per size) */
static inline uint64_t three_stripes(uint64_t c, const unsigned char *p, size_t stripe, uint32_t shift)
{
	uint64_t c1 = 0, c2 = 0;

	for (size_t i = 0; i < stripe; i += 8) {
		c = _mm_crc32_u64(c, load64(p + i));
		c1 = _mm_crc32_u64(c1, load64(p + stripe + i));
		c2 = _mm_crc32_u64(c2, load64(p + 2 * stripe + i));
	}
	c = past(c, shift) ^ c1;
	return past(c, shift) ^ c2;
}

uint32_t rrc_crc32c_extend(uint32_t crc, const void *data, size_t len)
{
	const unsigned char *p = data;
	uint64_t c = ~crc;

	while (len && ((uintptr_t)p & 7)) {
		c = _mm_crc32_u8((uint32_t)c, *p++);
		len--;
	}
	while (len >= 3 * STRIPE) {
		c = three_stripes(c, p, STRIPE, SHIFT_STRIPE);
		p += 3 * STRIPE;
		len -= 3 * STRIPE;
	}
	while (len >= 3 * SMALL) {
		c = three_stripes(c, p, SMALL, SHIFT_SMALL);
		p += 3 * SMALL;
		len -= 3 * SMALL;
	}
	while (len >= 8) {
		c = _mm_crc32_u64(c, load64(p));
		p += 8;
		len -= 8;
	}
	while (len--)
		c = _mm_crc32_u8((uint32_t)c, *p++);
	return ~(uint32_t)c;
}
