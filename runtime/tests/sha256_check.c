/* SPDX-License-Identifier: MIT
 *
 * SHA-256 and HMAC-SHA256 of the library (lib/sha256.c, rrc/sha256.h):
 *
 *   sha256_check                 known digests (FIPS 180-4's examples,
 *                                RFC 4231's HMAC cases), and the SHA
 *                                extensions' digest equal to the portable
 *                                loop's for every length 0..1100 and every
 *                                way of splitting the input; exit 0 when all pass
 *   sha256_check hmac KEY DATA   prints HMAC-SHA256(KEY, DATA) (hex in,
 *                                hex out): tests/test_sha256.py holds it to
 *                                Python's hmac on random inputs
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rrc/sha256.h"

static int failures;
#define CHECK(cond, what) do { if (!(cond)) { fprintf(stderr, "failed: %s\n", what); failures++; } } while (0)

static void hex(const uint8_t *p, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", p[i]);
}

static size_t unhex(const char *s, uint8_t *out, size_t cap)
{
	size_t n = strlen(s) / 2;
	if (n > cap)
		n = cap;
	for (size_t i = 0; i < n; i++)
		sscanf(s + 2 * i, "%2hhx", &out[i]);
	return n;
}

static void digest(const void *p, size_t n, uint8_t out[32])
{
	struct rrc_sha256 s;
	rrc_sha256_init(&s);
	rrc_sha256_update(&s, p, n);
	rrc_sha256_final(&s, out);
}

static void known(const char *msg, size_t len, const char *want)
{
	uint8_t d[32];
	char got[65];
	digest(msg, len, d);
	hex(d, 32, got);
	CHECK(strcmp(got, want) == 0, want);
}

static void hmac_known(const uint8_t *key, size_t kl, const char *msg, const char *want)
{
	struct rrc_hmac m;
	uint8_t d[32];
	char got[65];
	rrc_hmac_init(&m, key, kl);
	rrc_hmac_update(&m, msg, strlen(msg));
	rrc_hmac_final(&m, d);
	hex(d, 32, got);
	CHECK(strcmp(got, want) == 0, want);
}

static void vectors(void)
{
	known("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	known("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	known("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56,
	      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
	char *a = malloc(1000000);
	memset(a, 'a', 1000000);
	known(a, 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
	free(a);
	uint8_t k1[20];
	memset(k1, 0x0b, sizeof k1);
	hmac_known(k1, sizeof k1, "Hi There", "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
	hmac_known((const uint8_t *)"Jefe", 4, "what do ya want for nothing?",
		   "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

/* the hardware path and the portable one agree, whole and split */
static void paths_agree(void)
{
	if (!rrc_sha256_uses_hw()) {
		printf("sha256_check: this CPU has no SHA extensions: the portable loop only\n");
		return;
	}
	uint8_t buf[1100];
	for (size_t i = 0; i < sizeof buf; i++)
		buf[i] = (uint8_t)(i * 131 + (i >> 7));
	for (size_t n = 0; n <= sizeof buf; n++) {
		uint8_t hw[32], sw[32];
		digest(buf, n, hw);
		rrc_sha256_force_portable(1);
		digest(buf, n, sw);
		rrc_sha256_force_portable(0);
		CHECK(memcmp(hw, sw, 32) == 0, "SHA extensions and portable loop differ");
		/* split in two at every 37th byte: the same digest */
		for (size_t cut = 0; cut <= n; cut += 37) {
			struct rrc_sha256 s;
			uint8_t d[32];
			rrc_sha256_init(&s);
			rrc_sha256_update(&s, buf, cut);
			rrc_sha256_update(&s, buf + cut, n - cut);
			rrc_sha256_final(&s, d);
			CHECK(memcmp(d, hw, 32) == 0, "a split input hashes differently");
		}
	}
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "hmac") == 0) {
		static uint8_t key[64], data[1 << 20];
		size_t kl = unhex(argv[2], key, sizeof key), dl = unhex(argv[3], data, sizeof data);
		struct rrc_hmac m;
		uint8_t d[32];
		char out[65];
		rrc_hmac_init(&m, key, kl);
		rrc_hmac_update(&m, data, dl);
		rrc_hmac_final(&m, d);
		hex(d, 32, out);
		printf("%s\n", out);
		return 0;
	}
	vectors();
	paths_agree();
	if (failures) {
		fprintf(stderr, "sha256_check: %d checks failed\n", failures);
		return 1;
	}
	printf("sha256_check: all checks passed (%s)\n", rrc_sha256_uses_hw() ? "SHA extensions and portable" : "portable");
	return 0;
}
