/* SPDX-License-Identifier: MIT
 *
 * ASYNC-SIGNAL-SAFE, freestanding: memory and message helpers of the
 * restorer blob. No libc exists in the blob; the compiler may still emit
 * calls to memcpy/memset/memcmp for struct copies, so they are defined
 * here (hidden, reached rip-relative). Loop-to-libcall conversion is
 * disabled for them so that they do not call themselves.
 */
#include "pie-util.h"

#define NO_LIBCALL __attribute__((optimize("no-tree-loop-distribute-patterns")))

NO_LIBCALL void *memcpy(void *d, const void *s, size_t n)
{
	unsigned char *dp = d;
	const unsigned char *sp = s;
	while (n--)
		*dp++ = *sp++;
	return d;
}

NO_LIBCALL void *memset(void *d, int c, size_t n)
{
	unsigned char *dp = d;
	while (n--)
		*dp++ = (unsigned char)c;
	return d;
}

NO_LIBCALL int memcmp(const void *a, const void *b, size_t n)
{
	const unsigned char *x = a, *y = b;
	for (; n; n--, x++, y++)
		if (*x != *y)
			return *x < *y ? -1 : 1;
	return 0;
}

NO_LIBCALL size_t pie_strlen(const char *s)
{
	size_t n = 0;
	while (s[n])
		n++;
	return n;
}

void msg_str(struct msg *m, const char *s)
{
	while (*s && m->len + 1 < sizeof(m->buf))
		m->buf[m->len++] = *s++;
	m->buf[m->len] = 0;
}

void msg_dec(struct msg *m, int64_t v)
{
	char tmp[24];
	int i = 0;
	uint64_t u = v < 0 ? -(uint64_t)v : (uint64_t)v;

	if (v < 0)
		msg_str(m, "-");
	do {
		tmp[i++] = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	while (i) {
		char c[2] = { tmp[--i], 0 };
		msg_str(m, c);
	}
}

void msg_hex(struct msg *m, uint64_t v)
{
	char tmp[17];
	int i = 0;

	msg_str(m, "0x");
	do {
		tmp[i++] = "0123456789abcdef"[v & 15];
		v >>= 4;
	} while (v);
	while (i) {
		char c[2] = { tmp[--i], 0 };
		msg_str(m, c);
	}
}

/* errno names for the failures the blob can meet; the number otherwise */
void msg_errno(struct msg *m, long err)
{
	static const struct { short n; char s[14]; } names[] = {
		{ 1, "EPERM" }, { 2, "ENOENT" }, { 9, "EBADF" }, { 12, "ENOMEM" },
		{ 13, "EACCES" }, { 14, "EFAULT" }, { 16, "EBUSY" }, { 17, "EEXIST" },
		{ 22, "EINVAL" }, { 24, "EMFILE" }, { 28, "ENOSPC" }, { 38, "ENOSYS" },
		{ 19, "ENODEV" }, { 26, "ETXTBSY" }, { 11, "EAGAIN" }, { 5, "EIO" },
	};
	/* names[] is in .rodata and reached rip-relative: no relocation */
	msg_str(m, "errno ");
	msg_dec(m, err);
	for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (names[i].n == err) {
			msg_str(m, " (");
			msg_str(m, names[i].s);
			msg_str(m, ")");
		}
}
