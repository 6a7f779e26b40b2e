/* SPDX-License-Identifier: MIT
 *
 * rrc-restore phase 1: the status record (include/rrc/restore-status.h)
 * and the log. Exactly one record is written; on failure the restorer,
 * pid 1 of the container's namespaces, exits and takes them down.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "rrc/sys.h"
#include "restore.h"

int rst_status_fd = -1;
int rst_log_fd = -1;
uint64_t rst_t0_ns;

static void write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;

	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		p += w;
		n -= (size_t)w;
	}
}

void rst_log(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	int n;

	if (rst_log_fd < 0)
		return;
	n = snprintf(buf, sizeof(buf), "rrc-restore: +%.1fms ", (rrc_mono_ns() - rst_t0_ns) / 1e6);
	va_start(ap, fmt);
	n += vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(buf) - 2)
		n = (int)sizeof(buf) - 2;
	buf[n++] = '\n';
	write_all(rst_log_fd, buf, (size_t)n);
}

void rst_fail(int code, int err, uint32_t detail, const char *fmt, ...)
{
	struct rrc_restore_status st;
	va_list ap;

	memset(&st, 0, sizeof(st));
	st.magic = RRC_RESTORE_STATUS_MAGIC;
	st.code = code;
	st.sys_errno = err;
	st.detail = detail;
	va_start(ap, fmt);
	vsnprintf(st.message, sizeof(st.message), fmt, ap);
	va_end(ap);
	rst_log("error: %s", st.message);
	if (rst_status_fd >= 0)
		write_all(rst_status_fd, &st, sizeof(st));
	else if (rst_log_fd < 0)
		fprintf(stderr, "rrc-restore: %s\n", st.message);
	_exit(code ? code : RRC_RST_INTERNAL);
}

const char *rst_strerror(int err)
{
	static char buf[128];

	snprintf(buf, sizeof(buf), "%s", strerror(err));
	if (buf[0] && isupper((unsigned char)buf[0]) && !(buf[1] && isupper((unsigned char)buf[1])))
		buf[0] = (char)tolower((unsigned char)buf[0]);
	return buf;
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p)
		rst_fail(RRC_RST_INTERNAL, ENOMEM, 0, "out of memory (%zu bytes)", n);
	return p;
}

void *xcalloc(size_t n, size_t m)
{
	void *p = calloc(n ? n : 1, m ? m : 1);

	if (!p)
		rst_fail(RRC_RST_INTERNAL, ENOMEM, 0, "out of memory (%zu x %zu bytes)", n, m);
	return p;
}
