/* SPDX-License-Identifier: MIT
 *
 * Private mappings of deleted files become anonymous memory with their
 * bytes (maps-deleted.h says why). CRIU keeps such a mapping file-backed
 * by carrying the whole file in the image as a ghost (its files-reg.c
 * "remap" files) and reads it through /proc/PID/map_files, which needs
 * CAP_CHECKPOINT_RESTORE in the dumped process: a server that dropped
 * its privileges has none, and the library reads from inside it. Here
 * the bytes are read through the mapping itself, in the pause:
 *
 *   1. a fresh anonymous mapping of the VMA's length, anywhere;
 *   2. the VMA's bytes copied into it with process_vm_readv on ourselves
 *      (a page beyond the file's end, which raises SIGBUS when touched,
 *      ends the copy with a short count instead: the rest stays zero);
 *      a VMA without read permission (the PROT_NONE gaps the dynamic
 *      loader leaves between a library's segments) is made readable
 *      first, which a private mapping of a file opened for reading allows;
 *   3. mremap(MREMAP_FIXED) moves the copy over the VMA, which the kernel
 *      unmaps in the same call: no thread can see the range unmapped (all
 *      are parked anyway, most inside code of this very VMA: the bytes at
 *      their return addresses are the same);
 *   4. the original protection again.
 *
 * What differs afterwards, in the running process as in a restored one:
 * /proc/PID/maps names no file for the range; its pages are the
 * process's own (no longer shared with other processes mapping the same
 * library, no longer dropped and re-read from the page cache); pages past
 * the file's end read zeros instead of raising SIGBUS; madvise flags set
 * on the VMA (MADV_DONTFORK, MADV_HUGEPAGE...) and mlock are not kept.
 */
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include "rrc_lib.h"
#include "maps-deleted.h"

/* An upgrade replaces a handful of files; each mapped library is 4 or 5
 * VMAs. More is refused by name, not converted in part. So is more than
 * GONE_BYTES in all: the pause copies every byte (a 2 MiB libc takes
 * ~0.5 ms here), and a large data file mapped and deleted would hold the
 * process for seconds and double its memory. */
#define GONE_MAX 256
#define GONE_BYTES (256ull << 20)

struct gone {
	uint64_t start, end, inode;
	uint32_t dev_major, dev_minor;
	int prot;
};
static struct gone gone[GONE_MAX];
static uint32_t nr_gone;

static int prot_of(const struct procmap_query *q)
{
	return ((q->vma_flags & PROCMAP_QUERY_VMA_READABLE) ? PROT_READ : 0) |
	       ((q->vma_flags & PROCMAP_QUERY_VMA_WRITABLE) ? PROT_WRITE : 0) |
	       ((q->vma_flags & PROCMAP_QUERY_VMA_EXECUTABLE) ? PROT_EXEC : 0);
}

static int refuse(const char *what, const struct procmap_query *q, const char *name, const char *why)
{
	char *m = rrc_s->err_msg;
	size_t cap = sizeof rrc_s->err_msg;
	rrc_set_err(RRC_ERR_UNSUPPORTED_MAPPING, 0, what, -1, 0);
	size_t l = rrc_strlen(m);
	l = rrc_bput_hex(m, cap, l, q->vma_start);
	l = rrc_bput(m, cap, l, "-");
	l = rrc_bput_hex(m, cap, l, q->vma_end);
	l = rrc_bput(m, cap, l, " ");
	l = rrc_bput(m, cap, l, name);
	rrc_bput(m, cap, l, why);
	return -1;
}

/* An fd of the process open for writing on a file of the list: its
 * writes show through the mapping's pages the process never wrote, which
 * a copy would no longer follow. */
static int writer_fd(long fd, void *arg)
{
	(void)arg;
	struct stat st;
	if (fd == rrc_s->walk_fd || rrc_sys_fstat((int)fd, &st) < 0)
		return 0;
	long fl = rrc_sys_fcntl((int)fd, F_GETFL, 0);
	if (fl < 0 || (fl & O_ACCMODE) == O_RDONLY || (fl & O_PATH))
		return 0;
	for (uint32_t i = 0; i < nr_gone; i++)
		if (gone[i].inode == st.st_ino && gone[i].dev_major == major(st.st_dev) &&
		    gone[i].dev_minor == minor(st.st_dev)) {
			rrc_set_err(RRC_ERR_UNSUPPORTED_MAPPING, 0, "fd ", fd,
				    " is open for writing on a deleted file the process also maps privately: "
				    "the mapping's pages follow the file's writes until written to, which a "
				    "copy of them would not (not carried)");
			return 1;
		}
	return 0;
}

/* The executable, if it was deleted since the start: the restore makes
 * the file now at its path the process's /proc/PID/exe (PR_SET_MM_MAP
 * takes an open file), so there must be one (snapshot.c strips the
 * kernel's " (deleted)" and flags it, RRC_PROC_EXE_REPLACED). */
static int check_exe(void)
{
	char path[RRC_PATH_MAX];
	long n = rrc_sys_readlinkat(AT_FDCWD, "/proc/self/exe", path, sizeof path - 1);
	if (n < 0)
		return 0;
	path[n] = 0;
	if (!rrc_path_cut_deleted(path, (size_t)n))
		return 0;
	struct stat st;
	if (rrc_sys_fstatat(AT_FDCWD, path, &st, 0) == 0 && S_ISREG(st.st_mode))
		return 0;
	char *m = rrc_s->err_msg;
	rrc_set_err(RRC_ERR_UNSUPPORTED_MAPPING, 0, "the executable ", -1, 0);
	size_t l = rrc_bput(m, sizeof rrc_s->err_msg, rrc_strlen(m), path);
	rrc_bput(m, sizeof rrc_s->err_msg, l,
		 " was deleted and no file is at its path now: a restored process needs one as its "
		 "/proc/PID/exe (an upgrade puts the new version there)");
	return -1;
}

/* Before the pause: the private mappings of deleted files, listed for the
 * pause; a shared one refused; the executable checked. 0, or -1 with the
 * error set. Only file-backed VMAs are walked (the kernel skips the
 * others). */
int rrc_deleted_maps_check(void)
{
	struct rrc_scratch *s = rrc_s;
	struct procmap_query q;
	char name[RRC_PATH_MAX];
	uint64_t addr = 0, bytes = 0;
	nr_gone = 0;
	if (check_exe() < 0)
		return -1;
	while (rrc_vma_query(rrc_g.maps_fd, addr, PROCMAP_QUERY_FILE_BACKED_VMA, &q, name, sizeof name) == 0) {
		addr = q.vma_end;
		if (!rrc_path_deleted(name, rrc_strlen(name)))
			continue;
		/* the library's own: never in an image (snapshot.c, add_vma) */
		if (rrc_in_ranges(s->lib_excluded, s->nr_lib_excluded, q.vma_start, q.vma_end) ||
		    rrc_in_ranges(s->lib_always, s->nr_lib_always, q.vma_start, q.vma_end))
			continue;
		if (q.vma_flags & PROCMAP_QUERY_VMA_SHARED)
			return refuse("shared mapping ", &q, name,
				      " of a deleted file: its pages are the file's, which the image cannot "
				      "carry (a private mapping of one is carried)");
		if (nr_gone == GONE_MAX)
			return refuse("more than 256 mappings of deleted files, up to ", &q, name, "");
		bytes += q.vma_end - q.vma_start;
		if (bytes > GONE_BYTES)
			return refuse("mappings of deleted files of more than 256 MiB in all, up to ", &q, name,
				      ", which a dump would copy in its pause (not carried)");
		gone[nr_gone++] = (struct gone){ q.vma_start, q.vma_end, q.inode, q.dev_major, q.dev_minor, prot_of(&q) };
	}
	if (nr_gone) {
		long r = rrc_for_each_num_dirent("/proc/self/fd", s->dirbuf, sizeof s->dirbuf, writer_fd, 0);
		if (r > 0)
			return -1;
		if (r < 0) {
			rrc_set_err(RRC_ERR_UNSUPPORTED_FD, (int)-r, "cannot read /proc/self/fd", -1, 0);
			return -1;
		}
	}
	return 0;
}

/* One VMA of the list, if it is still the one the check saw. */
static int convert(const struct gone *g)
{
	struct procmap_query q;
	char name[RRC_PATH_MAX];
	if (rrc_vma_query(rrc_g.maps_fd, g->start, 0, &q, name, sizeof name) < 0 || q.vma_start != g->start ||
	    q.vma_end != g->end || q.inode != g->inode || !rrc_path_deleted(name, rrc_strlen(name)))
		return 0; /* changed since: the snapshot refuses one that is still there (RRC_SNAP_DELETED) */
	uint64_t len = g->end - g->start;
	long copy = rrc_sys_mmap(0, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (copy < 0)
		return refuse("no memory for a copy of the mapping ", &q, name, " of a deleted file");
	if (!(g->prot & PROT_READ))
		rrc_sys_mprotect((void *)g->start, len, PROT_READ | (g->prot & PROT_EXEC));
	struct { void *base; size_t len; } to = { (void *)copy, len }, from = { (void *)g->start, len };
	/* short (or EFAULT at the first page) past the file's end: zeros there */
	rrc_sys_process_vm_readv(rrc_g.pid, &to, 1, &from, 1);
	long r = rrc_sys_mremap((void *)copy, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)g->start);
	if (r != (long)g->start) {
		rrc_sys_munmap((void *)copy, len);
		if (!(g->prot & PROT_READ))
			rrc_sys_mprotect((void *)g->start, len, g->prot);
		return refuse("cannot put anonymous memory in place of the mapping ", &q, name, " of a deleted file");
	}
	rrc_sys_mprotect((void *)g->start, len, g->prot);
	return 0;
}

/* In the pause (every application thread parked). ASYNC-SIGNAL-SAFE.
 * 0, or -1 with the error set; the VMAs converted before a failure stay
 * converted (the process runs on the same bytes). */
int rrc_deleted_maps_convert(void)
{
	for (uint32_t i = 0; i < nr_gone; i++)
		if (convert(&gone[i]) < 0)
			return -1;
	nr_gone = 0;
	return 0;
}
