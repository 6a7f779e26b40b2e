/* SPDX-License-Identifier: MIT
 *
 * Small helpers for the pause path, the park handler and the snapshot
 * child: strings, numbers, whole-file reads, directory walks with
 * getdents64 (opendir would call malloc).
 * ASYNC-SIGNAL-SAFE: every function in this file (raw syscalls only, no
 * libc, no locks, no allocation).
 */
#include <fcntl.h>
#include <errno.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include "rrc_lib.h"

size_t rrc_strlen(const char *s)
{
	size_t n = 0;
	while (s[n])
		n++;
	return n;
}

int rrc_strncmp(const char *a, const char *b, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (a[i] != b[i])
			return (unsigned char)a[i] - (unsigned char)b[i];
		if (!a[i])
			return 0;
	}
	return 0;
}

int rrc_startswith(const char *s, const char *pfx)
{
	return rrc_strncmp(s, pfx, rrc_strlen(pfx)) == 0;
}

/* Does a path of len bytes as the kernel prints it (d_path) end in
 * " (deleted)": a file unlinked since it was opened or mapped? */
int rrc_path_deleted(const char *path, size_t len)
{
	static const char del[] = " (deleted)";
	return len > sizeof del - 1 && !rrc_strncmp(path + len - (sizeof del - 1), del, sizeof del - 1);
}

/* The same, and the suffix cut off (a NUL in its place) if it was there. */
int rrc_path_cut_deleted(char *path, size_t len)
{
	if (!rrc_path_deleted(path, len))
		return 0;
	path[len - (sizeof " (deleted)" - 1)] = 0;
	return 1;
}

/* volatile stores keep gcc from turning these loops back into libc calls */
void rrc_memcpy(void *d, const void *s, size_t n)
{
	volatile unsigned char *dp = d;
	const unsigned char *sp = s;
	while (n >= 8) {
		uint64_t w;
		__builtin_memcpy(&w, sp, 8);
		*(volatile uint64_t *)dp = w;
		dp += 8; sp += 8; n -= 8;
	}
	while (n--)
		*dp++ = *sp++;
}

void rrc_memset(void *d, int c, size_t n)
{
	volatile unsigned char *dp = d;
	while (n--)
		*dp++ = (unsigned char)c;
}

int rrc_memeq(const void *a, const void *b, size_t n)
{
	const unsigned char *x = a, *y = b;
	for (size_t i = 0; i < n; i++)
		if (x[i] != y[i])
			return 0;
	return 1;
}

int rrc_sockaddr_v4(const void *sa, uint32_t len, uint32_t *addr, uint16_t *port)
{
	static const uint8_t mapped[12] = { [10] = 0xff, [11] = 0xff };
	const uint8_t *b = sa;
	uint16_t family;
	if (len < 2)
		return 0;
	rrc_memcpy(&family, b, 2);
	if (family == AF_INET && len >= 8) {
		rrc_memcpy(port, b + 2, 2);
		rrc_memcpy(addr, b + 4, 4);
		return 1;
	}
	/* sockaddr_in6: port at 2, flowinfo at 4, address at 8 */
	if (family == AF_INET6 && len >= 24 && rrc_memeq(b + 8, mapped, 12)) {
		rrc_memcpy(port, b + 2, 2);
		rrc_memcpy(addr, b + 20, 4);
		return 1;
	}
	return 0;
}

size_t rrc_bput(char *buf, size_t cap, size_t len, const char *s)
{
	while (*s && len + 1 < cap)
		buf[len++] = *s++;
	if (cap)
		buf[len < cap ? len : cap - 1] = 0;
	return len;
}

size_t rrc_bput_u64(char *buf, size_t cap, size_t len, uint64_t v)
{
	char tmp[24];
	int i = 23;
	tmp[i] = 0;
	do {
		tmp[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	return rrc_bput(buf, cap, len, tmp + i);
}

size_t rrc_bput_hex(char *buf, size_t cap, size_t len, uint64_t v)
{
	char tmp[24];
	int i = 23;
	tmp[i] = 0;
	do {
		tmp[--i] = "0123456789abcdef"[v & 15];
		v >>= 4;
	} while (v);
	tmp[--i] = 'x';
	tmp[--i] = '0';
	return rrc_bput(buf, cap, len, tmp + i);
}

uint64_t rrc_parse_u64(const char *s, int base, const char **end)
{
	uint64_t v = 0;
	for (;;) {
		int d;
		char c = *s;
		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (base == 16 && c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else if (base == 16 && c >= 'A' && c <= 'F')
			d = c - 'A' + 10;
		else
			break;
		if (d >= base)
			break;
		v = v * (uint64_t)base + (uint64_t)d;
		s++;
	}
	if (end)
		*end = s;
	return v;
}

const char *rrc_skip_ws(const char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	return s;
}

long rrc_read_fd_all(int fd, char *buf, size_t cap)
{
	size_t len = 0;
	while (len + 1 < cap) {
		long r = rrc_sys_read(fd, buf + len, cap - 1 - len);
		if (r == -EINTR)
			continue;
		if (r < 0)
			return r;
		if (r == 0)
			break;
		len += (size_t)r;
	}
	buf[len] = 0;
	return (long)len;
}

long rrc_read_file(const char *path, char *buf, size_t cap)
{
	long fd = rrc_sys_openat(AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return fd;
	long r = rrc_read_fd_all((int)fd, buf, cap);
	rrc_sys_close((int)fd);
	return r;
}

long rrc_write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;
	while (n) {
		long r = rrc_sys_write(fd, p, n);
		if (r == -EINTR)
			continue;
		if (r < 0)
			return r;
		if (r == 0)
			return -EIO;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

struct linux_dirent64 {
	uint64_t d_ino;
	int64_t  d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

long rrc_for_each_num_dirent(const char *dir, char *buf, size_t cap,
			     int (*cb)(long num, void *arg), void *arg)
{
	long fd = rrc_sys_openat(AT_FDCWD, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
	if (fd < 0)
		return fd;
	rrc_s->walk_fd = (int)fd;
	long ret = 0;
	for (;;) {
		long n = rrc_sys_getdents64((int)fd, buf, cap);
		if (n < 0) {
			ret = n;
			break;
		}
		if (n == 0)
			break;
		for (long off = 0; off < n;) {
			struct linux_dirent64 *d = (struct linux_dirent64 *)(buf + off);
			off += d->d_reclen;
			if (d->d_name[0] < '0' || d->d_name[0] > '9')
				continue;
			if (cb(( long)rrc_parse_u64(d->d_name, 10, 0), arg)) {
				rrc_sys_close((int)fd);
				rrc_s->walk_fd = -1;
				return 1;
			}
		}
	}
	rrc_sys_close((int)fd);
	rrc_s->walk_fd = -1;
	return ret;
}

/* Paths under the control thread's /proc directory rather than
 * /proc/self: the pause helper (pause-helper.c) is a process of its own,
 * whose /proc/self is not the application's (its fd entries are, through
 * the shared fd table, but its maps, stat and the rest are its own). The
 * thread, not the process: the fd entries of an exited main thread are
 * empty. */
void rrc_proc_dir_learn(void)
{
	char self[32];
	long n = rrc_sys_readlinkat(AT_FDCWD, "/proc/thread-self", self, sizeof self - 1);
	rrc_s->proc_dir[0] = 0;
	if (n <= 0 || n >= (long)sizeof self - 1)
		return;
	self[n] = 0;
	size_t l = rrc_bput(rrc_s->proc_dir, sizeof rrc_s->proc_dir, 0, "/proc/");
	rrc_bput(rrc_s->proc_dir, sizeof rrc_s->proc_dir, l, self);
}

size_t rrc_proc_path(char *buf, size_t cap, const char *sub, long num)
{
	size_t l = rrc_bput(buf, cap, 0, rrc_s->proc_dir[0] ? rrc_s->proc_dir : "/proc/self");
	l = rrc_bput(buf, cap, l, "/");
	l = rrc_bput(buf, cap, l, sub);
	if (num >= 0) {
		l = rrc_bput(buf, cap, l, "/");
		l = rrc_bput_u64(buf, cap, l, (uint64_t)num);
	}
	return l;
}

const char *rrc_next_line(const char *p, const char *end)
{
	while (p < end && *p != '\n')
		p++;
	return p < end ? p + 1 : end;
}

void rrc_set_err(uint32_t code, int err, const char *a, long num, const char *b)
{
	struct rrc_scratch *s = rrc_s;
	size_t l = 0;
	s->err_code = code;
	s->err_errno = err;
	s->err_msg[0] = 0;
	if (a)
		l = rrc_bput(s->err_msg, sizeof s->err_msg, l, a);
	if (num >= 0)
		l = rrc_bput_u64(s->err_msg, sizeof s->err_msg, l, (uint64_t)num);
	if (b)
		l = rrc_bput(s->err_msg, sizeof s->err_msg, l, b);
}

void rrc_log(const char *msg)
{
	char line[600];
	size_t l = rrc_bput(line, sizeof line, 0, "rrc: ");
	l = rrc_bput(line, sizeof line, l, msg);
	l = rrc_bput(line, sizeof line, l, "\n");
	rrc_write_all(2, line, l);
}

long rrc_map_guarded(uint64_t len)
{
	/* A guard page on each side: an anonymous rw mapping the application
	 * makes next to it (jemalloc does) would otherwise merge with it into
	 * one VMA, and the snapshot, which leaves the library's memory out of
	 * the image, would lose the application's part too (it refuses such a
	 * VMA: RRC_SNAP_LIBMERGE). Anonymous VMA names, which also prevent
	 * merging, are not built into every kernel. */
	long r = rrc_sys_mmap(0, len + 2 * 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (r < 0 && r > -4096)
		return r;
	uint8_t *p = (uint8_t *)r + 4096;
	long pr = rrc_sys_mprotect(p, len, PROT_READ | PROT_WRITE);
	if (pr < 0) {
		rrc_sys_munmap((void *)r, len + 2 * 4096);
		return pr;
	}
	return (long)p;
}
