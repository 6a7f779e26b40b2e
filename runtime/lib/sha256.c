/* SPDX-License-Identifier: MIT
 * SHA-256 and HMAC-SHA256 (rrc/sha256.h). ASYNC-SIGNAL-SAFE, no libc.
 *
 * Two block functions: the SHA extensions' (sha256rnds2 does two rounds,
 * sha256msg1/msg2 the message schedule, four words at a time; state kept
 * as ABEF/CDGH, Intel's layout) when cpuid says the CPU has them, else the
 * plain 64 rounds. At the log's rate (tens of MB/s) the difference is a
 * few percent of a CPU.
 */
#include "rrc/sha256.h"
#include <cpuid.h>
#include <immintrin.h>

static const uint32_t K[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static inline uint32_t ror(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static inline uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void blocks_portable(uint32_t h[8], const uint8_t *p, size_t n)
{
	for (; n; n--, p += 64) {
		uint32_t w[64];
		for (int t = 0; t < 16; t++)
			w[t] = be32(p + 4 * t);
		for (int t = 16; t < 64; t++) {
			uint32_t s0 = ror(w[t - 15], 7) ^ ror(w[t - 15], 18) ^ (w[t - 15] >> 3);
			uint32_t s1 = ror(w[t - 2], 17) ^ ror(w[t - 2], 19) ^ (w[t - 2] >> 10);
			w[t] = w[t - 16] + s0 + w[t - 7] + s1;
		}
		uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
		for (int t = 0; t < 64; t++) {
			uint32_t t1 = k + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + K[t] + w[t];
			uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
			k = g;
			g = f;
			f = e;
			e = d + t1;
			d = c;
			c = b;
			b = a;
			a = t1 + t2;
		}
		h[0] += a; h[1] += b; h[2] += c; h[3] += d;
		h[4] += e; h[5] += f; h[6] += g; h[7] += k;
	}
}

__attribute__((target("sha,sse4.1,ssse3")))
static void blocks_hw(uint32_t h[8], const uint8_t *p, size_t n)
{
	const __m128i swap = _mm_set_epi64x(0x0c0d0e0f08090a0bll, 0x0405060700010203ll);
	__m128i dcba = _mm_loadu_si128((const __m128i *)&h[0]);
	__m128i hgfe = _mm_loadu_si128((const __m128i *)&h[4]);
	__m128i cdab = _mm_shuffle_epi32(dcba, 0xb1);
	__m128i efgh = _mm_shuffle_epi32(hgfe, 0x1b);
	__m128i abef = _mm_alignr_epi8(cdab, efgh, 8);
	__m128i cdgh = _mm_blend_epi16(efgh, cdab, 0xf0);
	for (; n; n--, p += 64) {
		__m128i abef0 = abef, cdgh0 = cdgh, x[4];
		for (int j = 0; j < 16; j++) {
			__m128i *w = &x[j & 3];
			if (j < 4)
				*w = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * j)), swap);
			else /* W[4j..4j+3] from the four words groups before */
				*w = _mm_sha256msg2_epu32(
					_mm_add_epi32(_mm_sha256msg1_epu32(*w, x[(j + 1) & 3]),
						      _mm_alignr_epi8(x[(j + 3) & 3], x[(j + 2) & 3], 4)),
					x[(j + 3) & 3]);
			__m128i wk = _mm_add_epi32(*w, _mm_loadu_si128((const __m128i *)&K[4 * j]));
			cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk);
			abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(wk, 0x0e));
		}
		abef = _mm_add_epi32(abef, abef0);
		cdgh = _mm_add_epi32(cdgh, cdgh0);
	}
	__m128i feba = _mm_shuffle_epi32(abef, 0x1b);
	__m128i dchg = _mm_shuffle_epi32(cdgh, 0xb1);
	_mm_storeu_si128((__m128i *)&h[0], _mm_blend_epi16(feba, dchg, 0xf0));
	_mm_storeu_si128((__m128i *)&h[4], _mm_alignr_epi8(dchg, feba, 8));
}

static int hw = -1, portable_forced;

int rrc_sha256_uses_hw(void)
{
	if (hw < 0) {
		unsigned a = 0, b = 0, c = 0, d = 0;
		unsigned have = 0;
		if (__get_cpuid_count(7, 0, &a, &b, &c, &d))
			have = (b >> 29) & 1; /* SHA */
		if (have && __get_cpuid(1, &a, &b, &c, &d))
			have = (c >> 19) & (c >> 9) & 1; /* SSE4.1, SSSE3 */
		hw = (int)have;
	}
	return hw && !portable_forced;
}

void rrc_sha256_force_portable(int on)
{
	portable_forced = on;
}

static void blocks(uint32_t h[8], const uint8_t *p, size_t n)
{
	if (rrc_sha256_uses_hw())
		blocks_hw(h, p, n);
	else
		blocks_portable(h, p, n);
}

void rrc_sha256_init(struct rrc_sha256 *s)
{
	static const uint32_t iv[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
					0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };
	for (int i = 0; i < 8; i++)
		s->h[i] = iv[i];
	s->bytes = 0;
	s->used = 0;
}

void rrc_sha256_update(struct rrc_sha256 *s, const void *data, size_t len)
{
	const uint8_t *p = data;
	s->bytes += len;
	if (s->used) {
		while (len && s->used < 64) {
			s->buf[s->used++] = *p++;
			len--;
		}
		if (s->used < 64)
			return;
		blocks(s->h, s->buf, 1);
		s->used = 0;
	}
	if (len >= 64) {
		blocks(s->h, p, len / 64);
		p += len & ~(size_t)63;
		len &= 63;
	}
	while (len--)
		s->buf[s->used++] = *p++;
}

void rrc_sha256_final(struct rrc_sha256 *s, uint8_t out[RRC_SHA256_LEN])
{
	uint64_t bits = s->bytes * 8;
	uint8_t pad = 0x80;
	rrc_sha256_update(s, &pad, 1);
	pad = 0;
	while (s->used != 56)
		rrc_sha256_update(s, &pad, 1);
	uint8_t len[8];
	for (int i = 0; i < 8; i++)
		len[i] = (uint8_t)(bits >> (56 - 8 * i));
	rrc_sha256_update(s, len, 8);
	for (int i = 0; i < 8; i++) {
		out[4 * i] = (uint8_t)(s->h[i] >> 24);
		out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
		out[4 * i + 2] = (uint8_t)(s->h[i] >> 8);
		out[4 * i + 3] = (uint8_t)s->h[i];
	}
}

void rrc_hmac_init(struct rrc_hmac *m, const uint8_t *key, size_t key_len)
{
	uint8_t ipad[64], opad[64];
	for (size_t i = 0; i < 64; i++) {
		uint8_t k = i < key_len ? key[i] : 0;
		ipad[i] = k ^ 0x36;
		opad[i] = k ^ 0x5c;
	}
	rrc_sha256_init(&m->inner);
	rrc_sha256_update(&m->inner, ipad, 64);
	rrc_sha256_init(&m->outer);
	rrc_sha256_update(&m->outer, opad, 64);
}

void rrc_hmac_update(struct rrc_hmac *m, const void *data, size_t len)
{
	rrc_sha256_update(&m->inner, data, len);
}

void rrc_hmac_final(struct rrc_hmac *m, uint8_t out[RRC_SHA256_LEN])
{
	uint8_t inner[RRC_SHA256_LEN];
	rrc_sha256_final(&m->inner, inner);
	rrc_sha256_update(&m->outer, inner, sizeof inner);
	rrc_sha256_final(&m->outer, out);
}
