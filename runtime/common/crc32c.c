/* SPDX-License-Identifier: MIT
 * CRC32C with the SSE4.2 crc32 instruction (every x86-64 CPU rrc targets
 * has it; checked at build time by -msse4.2). ASYNC-SIGNAL-SAFE, no libc. */
#include "rrc/crc32c.h"
#include <nmmintrin.h>

uint32_t rrc_crc32c_extend(uint32_t crc, const void *data, size_t len)
{
	const unsigned char *p = data;
	uint64_t c = ~crc;

	while (len && ((uintptr_t)p & 7)) {
		c = _mm_crc32_u8((uint32_t)c, *p++);
		len--;
	}
	while (len >= 8) {
		uint64_t w;
		__builtin_memcpy(&w, p, 8);
		c = _mm_crc32_u64(c, w);
		p += 8;
		len -= 8;
	}
	while (len--)
		c = _mm_crc32_u8((uint32_t)c, *p++);
	return ~(uint32_t)c;
}
