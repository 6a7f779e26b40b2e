/* SPDX-License-Identifier: MIT
 *
 * inotify_add_watch and inotify_rm_watch, which remember the path of each
 * watch (inotify.h: the kernel keeps none, a restore needs one). The path
 * is made absolute against the cwd of the moment, and stored with the
 * watched file's device and inode, which the capture compares with the
 * fdinfo's (a watch is named by its number and its file: two instances
 * may both have a watch 1, on different files) and with the path's file
 * at the dump (a watched file moved since is refused).
 *
 * What a watch cannot be named by (a path longer than RRC_INOTIFY_PATH_MAX,
 * more than RRC_INOTIFY_WATCHES, a raw system call) has no entry: the
 * dump refuses it, naming the watch. inotify_rm_watch forgets the entries
 * of that number: another instance's watch of the same number loses its
 * path too and is refused at the next dump (an application with several
 * instances that removes watches; rare, and never silent).
 *
 * Not async-signal-safe (a spin lock between the application's threads);
 * rrc_inotify_find, which the pause uses, takes no lock: an entry being
 * written is not used until complete.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include "rrc_lib.h"
#include "inotify.h"

/* Mapped at the first watch (in the library's .bss it would make the
 * pause helper leave the .bss out: pause-helper.c, PH_INHERIT_MAX) */
static struct rrc_inotify_ent *table;
static int table_lock;

static void lock(void)
{
	while (__atomic_test_and_set(&table_lock, __ATOMIC_ACQUIRE))
		rrc_sys_sched_yield();
}

static void unlock(void)
{
	__atomic_clear(&table_lock, __ATOMIC_RELEASE);
}

/* the helper's copy, if it runs: what the wrapper writes goes there too */
static struct rrc_inotify_ent *mirror(size_t i)
{
	struct rrc_helper_box *b = rrc_s ? rrc_s->helper.box : 0;
	return b ? &b->inotify[i] : 0;
}

static void put(size_t i, const struct rrc_inotify_ent *v)
{
	struct rrc_inotify_ent *to[2] = { &table[i], mirror(i) };
	for (int k = 0; k < 2; k++) {
		if (!to[k])
			continue;
		__atomic_store_n(&to[k]->used, 0, __ATOMIC_RELEASE);
		to[k]->dev = v->dev;
		to[k]->ino = v->ino;
		to[k]->wd = v->wd;
		rrc_memcpy(to[k]->path, v->path, sizeof v->path);
		__atomic_store_n(&to[k]->used, v->used, __ATOMIC_RELEASE);
	}
}

/* path, absolute, into out; 0 if it does not fit */
static int absolute(const char *path, char *out)
{
	size_t n = rrc_strlen(path), l = 0;
	if (path[0] != '/') {
		if (rrc_sys_getcwd(out, RRC_INOTIFY_PATH_MAX) <= 0)
			return 0;
		l = rrc_strlen(out);
		if (l && out[l - 1] != '/')
			out[l++] = '/';
	}
	if (l + n + 1 > RRC_INOTIFY_PATH_MAX)
		return 0;
	rrc_memcpy(out + l, path, n + 1);
	return 1;
}

static void remember(int wd, const char *path, uint32_t mask)
{
	struct rrc_inotify_ent v;
	struct stat st;
	rrc_memset(&v, 0, sizeof v);
	if (!absolute(path, v.path) ||
	    rrc_sys_fstatat(AT_FDCWD, v.path, &st, (mask & IN_DONT_FOLLOW) ? AT_SYMLINK_NOFOLLOW : 0) < 0)
		return; /* unnamed: the dump refuses the watch */
	v.dev = st.st_dev;
	v.ino = st.st_ino;
	v.wd = wd;
	v.used = 1;
	lock();
	if (!table) {
		void *m = (void *)rrc_sys_mmap(0, RRC_INOTIFY_WATCHES * sizeof *table, PROT_READ | PROT_WRITE,
					       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if ((long)m < 0 && (long)m > -4096) {
			unlock();
			return; /* unnamed: the dump refuses the watch */
		}
		table = m;
	}
	size_t at = RRC_INOTIFY_WATCHES;
	for (size_t i = 0; i < RRC_INOTIFY_WATCHES; i++) {
		if (table[i].used && table[i].wd == wd && table[i].dev == v.dev && table[i].ino == v.ino) {
			at = i; /* the same watch again (its mask changed): the latest path */
			break;
		}
		if (!table[i].used && at == RRC_INOTIFY_WATCHES)
			at = i;
	}
	if (at < RRC_INOTIFY_WATCHES)
		put(at, &v);
	unlock();
}

int inotify_add_watch(int fd, const char *path, uint32_t mask)
{
	static int (*real)(int, const char *, uint32_t);
	if (!real)
		real = (int (*)(int, const char *, uint32_t))dlsym(RTLD_NEXT, "inotify_add_watch");
	int wd = real(fd, path, mask);
	if (wd >= 0 && path) {
		int e = errno;
		remember(wd, path, mask);
		errno = e;
	}
	return wd;
}

int inotify_rm_watch(int fd, int wd)
{
	static int (*real)(int, int);
	if (!real)
		real = (int (*)(int, int))dlsym(RTLD_NEXT, "inotify_rm_watch");
	int r = real(fd, wd);
	if (r == 0 && table) {
		struct rrc_inotify_ent none;
		rrc_memset(&none, 0, sizeof none);
		lock();
		for (size_t i = 0; i < RRC_INOTIFY_WATCHES; i++)
			if (table[i].used && table[i].wd == wd)
				put(i, &none);
		unlock();
	}
	return r;
}

/* ---- for the pause: ASYNC-SIGNAL-SAFE ---- */

const struct rrc_inotify_ent *rrc_inotify_find(int32_t wd, uint64_t dev, uint64_t ino)
{
	const struct rrc_inotify_ent *t = rrc_s->helper.in_helper ? rrc_s->helper.box->inotify : table;
	for (size_t i = 0; t && i < RRC_INOTIFY_WATCHES; i++)
		if (__atomic_load_n(&t[i].used, __ATOMIC_ACQUIRE) && t[i].wd == wd && t[i].dev == dev && t[i].ino == ino)
			return &t[i];
	return 0;
}

void rrc_inotify_to_box(struct rrc_inotify_ent *box)
{
	for (size_t i = 0; table && i < RRC_INOTIFY_WATCHES; i++)
		if (table[i].used)
			box[i] = table[i];
}
