/* SPDX-License-Identifier: MIT
 *
 * The one record rrc-restore writes on its status fd (--status-fd N).
 *
 * Exactly one record is written: code 0 and message "ok" right before the
 * restored threads are resumed, or a non-zero code with a message naming
 * the cause, after which rrc-restore (pid 1 of the container's pid
 * namespace) exits non-zero and the namespaces go away with it. EOF on the
 * status fd without a record means the restorer died without reporting
 * (e.g. killed by a signal). The Rust side (crates/rrc) mirrors this
 * header byte for byte.
 */
#ifndef RRC_RESTORE_STATUS_H
#define RRC_RESTORE_STATUS_H

#include <stdint.h>

#define RRC_RESTORE_STATUS_MAGIC 0x53435252u /* "RRCS" little-endian */

/* rrc_restore_status.code; also rrc-restore's exit status on failure. */
enum rrc_restore_code {
	RRC_RST_OK       = 0,
	RRC_RST_USAGE    = 1, /* bad command line or environment (not pid 1, ...) */
	RRC_RST_IMAGE    = 2, /* unreadable, corrupt, truncated image or broken chain; detail = image index */
	RRC_RST_FD       = 3, /* an fd could not be recreated; detail = fd number */
	RRC_RST_MEMORY   = 4, /* a VMA could not be mapped or filled; detail = low 32 bits of the address >> 12 */
	RRC_RST_VDSO     = 5, /* the vDSO cannot be put where the image had it */
	RRC_RST_PROCESS  = 6, /* mm fields, exe, signal actions, cwd, ... */
	RRC_RST_THREAD   = 7, /* a thread could not be recreated; detail = tid */
	RRC_RST_INTERNAL = 8, /* out of memory or a bug in the restorer */
};

struct rrc_restore_status {
	uint32_t magic;           /* RRC_RESTORE_STATUS_MAGIC */
	int32_t  code;            /* enum rrc_restore_code, 0 = ok */
	int32_t  sys_errno;       /* errno of the failing call, 0 if none */
	uint32_t detail;          /* code-specific, see enum rrc_restore_code */
	char     message[240];    /* UTF-8, NUL-terminated ("ok" on success) */
};                                /* 256 bytes */

#ifdef __cplusplus
static_assert(sizeof(struct rrc_restore_status) == 256, "restore status layout");
#else
_Static_assert(sizeof(struct rrc_restore_status) == 256, "restore status layout");
#endif

#endif /* RRC_RESTORE_STATUS_H */
