/* SPDX-License-Identifier: MIT
 * ASYNC-SIGNAL-SAFE, freestanding helpers of the restorer blob (util.c). */
#ifndef RRC_PIE_UTIL_H
#define RRC_PIE_UTIL_H
#include <stddef.h>
#include <stdint.h>

#define PIE_HIDDEN __attribute__((visibility("hidden")))

PIE_HIDDEN void *memcpy(void *d, const void *s, size_t n);
PIE_HIDDEN void *memset(void *d, int c, size_t n);
PIE_HIDDEN int memcmp(const void *a, const void *b, size_t n);
PIE_HIDDEN size_t pie_strlen(const char *s);

/* a bounded message being built, for the status record and the log */
struct msg {
	size_t len;
	char buf[240];
};
PIE_HIDDEN void msg_str(struct msg *m, const char *s);
PIE_HIDDEN void msg_dec(struct msg *m, int64_t v);
PIE_HIDDEN void msg_hex(struct msg *m, uint64_t v);
PIE_HIDDEN void msg_errno(struct msg *m, long err);

#endif
