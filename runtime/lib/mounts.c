/* SPDX-License-Identifier: MIT
 *
 * The mount table's ids at the start (mounts.h): /proc/self/mountinfo's
 * first field, read at the library's start and after a restore, compared
 * with the table before each dump (one read of a few kB, before the pause).
 * A mount that is gone is not the process's doing alone: the kernel
 * detaches a mount in every namespace when its mount point is removed
 * (`ip netns del` on the host takes /run/netns/NAME out of the
 * container's table, measured): only mounts that are new are refused.
 */
#include "rrc_lib.h"
#include "mounts.h"

#define MOUNTS_MAX 1024
#define MOUNTINFO_MAX (1 << 18)

static uint32_t known[MOUNTS_MAX];
static uint32_t nr_known;
static int too_many; /* a table past MOUNTS_MAX: not compared */

static long read_table(char **out)
{
	char *buf = rrc_s->textbuf;
	long n = rrc_read_file("/proc/self/mountinfo", buf, MOUNTINFO_MAX - 1);
	if (n < 0 || n >= MOUNTINFO_MAX - 1)
		return -1;
	buf[n] = 0;
	*out = buf;
	return n;
}

static const char *next_line(const char *p)
{
	while (*p && *p != '\n')
		p++;
	return *p ? p + 1 : p;
}

/* the n-th space-separated field of line (0-based) into out (cap bytes) */
static void field(const char *line, int n, char *out, size_t cap)
{
	const char *p = line;
	for (int i = 0; i < n && *p && *p != '\n'; i++) {
		while (*p && *p != ' ' && *p != '\n')
			p++;
		if (*p == ' ')
			p++;
	}
	size_t l = 0;
	while (p[l] && p[l] != ' ' && p[l] != '\n' && l + 1 < cap)
		l++;
	rrc_memcpy(out, p, l);
	out[l] = 0;
}

static int is_known(uint32_t id)
{
	for (uint32_t i = 0; i < nr_known; i++)
		if (known[i] == id)
			return 1;
	return 0;
}

void rrc_mounts_remember(void)
{
	char *t;
	nr_known = 0;
	too_many = 0;
	if (read_table(&t) < 0) {
		too_many = 1;
		return;
	}
	for (const char *p = t; *p; p = next_line(p)) {
		if (nr_known == MOUNTS_MAX) {
			too_many = 1;
			return;
		}
		known[nr_known++] = (uint32_t)rrc_parse_u64(p, 10, 0);
	}
}

int rrc_mounts_check(void)
{
	char *t;
	if (too_many)
		return 0;
	if (read_table(&t) < 0)
		return 0; /* as when it could not be read at the start */
	for (const char *p = t; *p; p = next_line(p)) {
		uint32_t id = (uint32_t)rrc_parse_u64(p, 10, 0);
		if (is_known(id))
			continue;
		/* fields: id parent major:minor root mount-point options ... - fstype source */
		char where[256], fstype[64] = "?";
		field(p, 4, where, sizeof where);
		const char *dash = p;
		while (*dash && *dash != '\n' && !(dash[0] == ' ' && dash[1] == '-' && dash[2] == ' '))
			dash++;
		if (dash[0] == ' ')
			field(dash + 3, 0, fstype, sizeof fstype);
		rrc_set_err(RRC_ERR_PROCESS_STATE, 0, "the process mounted ", -1, 0);
		size_t l = rrc_strlen(rrc_s->err_msg);
		l = rrc_bput(rrc_s->err_msg, sizeof rrc_s->err_msg, l, fstype);
		l = rrc_bput(rrc_s->err_msg, sizeof rrc_s->err_msg, l, " at ");
		l = rrc_bput(rrc_s->err_msg, sizeof rrc_s->err_msg, l, where);
		rrc_bput(rrc_s->err_msg, sizeof rrc_s->err_msg, l,
			 " since it started: mounts are not carried, a restore would not have it (unmount it)");
		return -1;
	}
	return 0;
}
