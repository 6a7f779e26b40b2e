/* SPDX-License-Identifier: MIT
 * SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104): the MAC of the agents'
 * peer frames (crates/rrc-wire/src/session.rs), computed inside the
 * process when the library's log writer sends its log straight to the
 * backup (issue 14 §2, RRC §4.5). Async-signal-safe and freestanding: no
 * libc, no allocation. The SHA extensions are used when the CPU has them
 * (checked once with cpuid), a portable loop otherwise; both are held to
 * the same digests by runtime/tests/sha256_check.c. */
#ifndef RRC_SHA256_H
#define RRC_SHA256_H
#include <stddef.h>
#include <stdint.h>

#define RRC_SHA256_LEN 32

struct rrc_sha256 {
	uint32_t h[8];
	uint64_t bytes;        /* hashed so far */
	uint8_t buf[64];       /* a block being filled */
	uint32_t used;
};

void rrc_sha256_init(struct rrc_sha256 *s);
void rrc_sha256_update(struct rrc_sha256 *s, const void *data, size_t len);
void rrc_sha256_final(struct rrc_sha256 *s, uint8_t out[RRC_SHA256_LEN]);

/* HMAC-SHA256 with a key of at most 64 bytes (the agents' keys are 32). */
struct rrc_hmac {
	struct rrc_sha256 inner, outer;
};

void rrc_hmac_init(struct rrc_hmac *m, const uint8_t *key, size_t key_len);
void rrc_hmac_update(struct rrc_hmac *m, const void *data, size_t len);
void rrc_hmac_final(struct rrc_hmac *m, uint8_t out[RRC_SHA256_LEN]);

/* 1 if the SHA extensions do the work on this CPU; rrc_sha256_force_portable
 * makes the portable loop do it (the check compares the two). */
int rrc_sha256_uses_hw(void);
void rrc_sha256_force_portable(int on);

#endif
