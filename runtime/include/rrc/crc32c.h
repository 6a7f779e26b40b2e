/* SPDX-License-Identifier: MIT
 * CRC32C (Castagnoli), the checksum of every rrc format. Async-signal-safe
 * and freestanding: usable from the snapshot child and the restorer blob.
 * Conventions match the Rust crate `crc32c`: initial 0, standard reflected
 * CRC-32C with final inversion; rrc_crc32c_extend(prev, ...) continues. */
#ifndef RRC_CRC32C_H
#define RRC_CRC32C_H
#include <stddef.h>
#include <stdint.h>
uint32_t rrc_crc32c_extend(uint32_t crc, const void *data, size_t len);
static inline uint32_t rrc_crc32c(const void *data, size_t len)
{
	return rrc_crc32c_extend(0, data, len);
}
#endif
