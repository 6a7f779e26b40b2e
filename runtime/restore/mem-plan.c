/* SPDX-License-Identifier: MIT
 *
 * rrc-restore phase 1: the memory plan. Checks the image's VMAs (order,
 * files present, vDSO layout equal to this kernel's), finds a hole that
 * overlaps no image VMA and no mapping of the restorer, maps there the
 * restorer blob (runtime/restore/pie, embedded as build/pie/blob.o), its
 * argument area and one stack per thread, and jumps to the blob on its own
 * stack (CRIU's restorer and DMTCP's mtcp_restart do the same: the code
 * that replaces the address space must live where the new one has nothing).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/rseq.h>
#include <sys/stat.h>
#include <unistd.h>
#include "restore.h"
#include "pie/blob.h"

extern const char _binary_blob_bin_start[], _binary_blob_bin_end[];

#define PAGE       4096ull
#define PAGE_UP(x) (((x) + PAGE - 1) & ~(PAGE - 1))
#define MAIN_STACK  (256ull << 10)
#define THREAD_STACK (64ull << 10)
#define TASK_TOP    0x7ffffffff000ull
#define LOW_LIMIT   0x10000ull
#define MAX_UNMAP   1024

struct mapping {
	uint64_t start, end;
	char name[64];
};

/* the restorer's own mappings, from /proc/self/maps */
static size_t own_maps(struct mapping *out, size_t cap)
{
	static char buf[1 << 20];
	size_t len = 0, n = 0;
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	char *line, *save = NULL;

	if (fd < 0)
		rst_fail(RRC_RST_INTERNAL, errno, 0, "cannot open /proc/self/maps: %s", rst_strerror(errno));
	for (;;) {
		ssize_t r = read(fd, buf + len, sizeof(buf) - 1 - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		len += (size_t)r;
	}
	close(fd);
	buf[len] = 0;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		unsigned long long s, e;
		int pos = 0;
		char *name;

		if (sscanf(line, "%llx-%llx %*s %*s %*s %*s%n", &s, &e, &pos) < 2)
			continue;
		if (n == cap)
			rst_fail(RRC_RST_INTERNAL, 0, 0, "the restorer has more than %zu mappings", cap);
		name = line + pos;
		while (*name == ' ')
			name++;
		out[n].start = s;
		out[n].end = e;
		snprintf(out[n].name, sizeof(out[n].name), "%s", name);
		n++;
	}
	return n;
}

static int is_special(uint32_t kind)
{
	return kind == RRC_VMA_VDSO || kind == RRC_VMA_VVAR || kind == RRC_VMA_VSYSCALL;
}

static const struct rvma *vma_at(struct chain *c, uint64_t addr)
{
	size_t lo = 0, hi = c->nr_vmas;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (c->vmas[mid].v->end <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < c->nr_vmas && c->vmas[lo].v->start <= addr)
		return &c->vmas[lo];
	return NULL;
}

/* FILEIDS (image.h): the record of path, or NULL (an image from before
 * it). The section is checked whole here: records inside it, paths
 * without a NUL. */
static const struct rrc_file_id *file_id(const struct chain *c, const char *path)
{
	const struct img *nw = c->newest;
	if (!nw->have[RRC_SEC_FILEIDS])
		return NULL;
	const uint8_t *p = nw->sec[RRC_SEC_FILEIDS], *end = p + nw->sec_len[RRC_SEC_FILEIDS];
	struct rrc_file_ids h;
	if (end - p < (long)sizeof h)
		rst_fail(RRC_RST_IMAGE, 0, 0, "section FILEIDS: %ld bytes, shorter than its header", (long)(end - p));
	memcpy(&h, p, sizeof h);
	p += sizeof h;
	size_t pl = strlen(path);
	const struct rrc_file_id *found = NULL;
	for (uint32_t i = 0; i < h.count; i++) {
		const struct rrc_file_id *id = (const struct rrc_file_id *)p;
		if (end - p < (long)sizeof *id || (uint64_t)(end - p) < ((sizeof *id + id->path_len + 7) & ~7ull) ||
		    memchr(id + 1, 0, id->path_len))
			rst_fail(RRC_RST_IMAGE, 0, 0, "section FILEIDS: record %u runs past the section or holds a NUL", i);
		if (!found && id->path_len == pl && !memcmp(id + 1, path, pl))
			found = id;
		p += (sizeof *id + id->path_len + 7) & ~7ull;
	}
	if (p != end)
		rst_fail(RRC_RST_IMAGE, 0, 0, "section FILEIDS: %ld bytes after its %u records", (long)(end - p), h.count);
	return found;
}

/* The file at path is the one the checkpoint's process mapped (its size
 * and modification time), or the restore fails naming it: mapped, another
 * version's pages would stand under the process's own written ones. */
static void check_file_id(const struct chain *c, const struct rrc_vma *v, const char *path, const struct stat *st)
{
	const struct rrc_file_id *id = file_id(c, path);
	if (!id)
		return;
	if (id->flags & RRC_FILEID_REPLACED)
		rst_fail(RRC_RST_MEMORY, 0, (uint32_t)(v->start >> 12),
			 "VMA 0x%llx maps %s, which another file replaced while the checkpoint was written (an upgrade "
			 "then): the next checkpoint carries the mapping itself", (unsigned long long)v->start, path);
	if ((uint64_t)st->st_size != id->size || st->st_mtim.tv_sec != id->mtime_sec ||
	    (uint32_t)st->st_mtim.tv_nsec != id->mtime_nsec)
		rst_fail(RRC_RST_MEMORY, 0, (uint32_t)(v->start >> 12),
			 "VMA 0x%llx maps %s, but the file here is not the one the checkpoint's process mapped "
			 "(%llu bytes, modified %lld.%09u; here %llu bytes, modified %lld.%09ld): another version of "
			 "it (restore where it is the same)", (unsigned long long)v->start, path,
			 (unsigned long long)id->size, (long long)id->mtime_sec, id->mtime_nsec,
			 (unsigned long long)st->st_size, (long long)st->st_mtim.tv_sec, st->st_mtim.tv_nsec);
}

void mem_check_vmas(struct chain *c)
{
	uint64_t prev_end = 0;
	const struct rvma *ra;

	for (size_t i = 0; i < c->nr_vmas; i++) {
		const struct rrc_vma *v = c->vmas[i].v;
		const char *path = c->vmas[i].path;

		if (v->start % PAGE || v->end % PAGE || v->start >= v->end || v->start < prev_end)
			rst_fail(RRC_RST_IMAGE, 0, (uint32_t)c->n,
				 "image %d (%s): VMA %zu [0x%llx, 0x%llx) is malformed or out of order", c->n,
				 c->newest->path, i, (unsigned long long)v->start, (unsigned long long)v->end);
		prev_end = v->end;
		if (v->kind < RRC_VMA_ANON || v->kind > RRC_VMA_VSYSCALL)
			rst_fail(RRC_RST_IMAGE, 0, (uint32_t)c->n, "image %d (%s): VMA 0x%llx has unknown kind %u",
				 c->n, c->newest->path, (unsigned long long)v->start, v->kind);
		if (v->kind != RRC_VMA_VSYSCALL && v->end > TASK_TOP)
			rst_fail(RRC_RST_IMAGE, 0, (uint32_t)c->n, "image %d (%s): VMA 0x%llx above user space",
				 c->n, c->newest->path, (unsigned long long)v->start);
		if (v->kind == RRC_VMA_FILE_PRIVATE || v->kind == RRC_VMA_FILE_SHARED_RO) {
			struct stat st;
			size_t pl = path ? strlen(path) : 0;

			if (!pl || path[0] != '/')
				rst_fail(RRC_RST_MEMORY, 0, (uint32_t)(v->start >> 12),
					 "VMA 0x%llx: file mapping without an absolute path", (unsigned long long)v->start);
			if (path_is_deleted(path))
				rst_fail(RRC_RST_MEMORY, ENOENT, (uint32_t)(v->start >> 12),
					 "VMA 0x%llx maps %s, deleted before the checkpoint", (unsigned long long)v->start, path);
			if (stat(path, &st) < 0 || access(path, R_OK) < 0)
				rst_fail(RRC_RST_MEMORY, errno, (uint32_t)(v->start >> 12),
					 "VMA 0x%llx maps %s: %s", (unsigned long long)v->start, path, rst_strerror(errno));
			if (v->kind == RRC_VMA_FILE_PRIVATE)
				check_file_id(c, v, path, &st);
		}
	}
	/* every page to fill must be in a VMA that phase 2 maps writable */
	for (size_t i = 0; i < c->nr_fills; i++) {
		const struct fill *f = &c->fills[i];

		for (uint64_t a = f->vaddr; a < f->vaddr + f->len;) {
			ra = vma_at(c, a);
			if (!ra || is_special(ra->v->kind) || ra->v->kind == RRC_VMA_FILE_SHARED_RO)
				rst_fail(RRC_RST_IMAGE, 0, (uint32_t)c->n,
					 "image %d (%s): page 0x%llx has data but no private VMA", c->n,
					 c->newest->path, (unsigned long long)a);
			a = ra->v->end;
		}
	}
	if (c->proc->restore_area_addr) {
		ra = vma_at(c, c->proc->restore_area_addr);
		if (!ra || !(ra->v->prot & PROT_WRITE) ||
		    ra->v->end < c->proc->restore_area_addr + sizeof(struct rrc_restore_area))
			rst_fail(RRC_RST_IMAGE, 0, (uint32_t)c->n,
				 "image %d (%s): the library's restore area 0x%llx is not in a writable VMA",
				 c->n, c->newest->path, (unsigned long long)c->proc->restore_area_addr);
	} else {
		rst_log("warning: the image has no librrc restore area");
	}
}

/* The vDSO pieces ([vvar], [vvar_vclock], [vdso]) of this kernel must have
 * the sizes and relative offsets of the image's: glibc in the image keeps
 * pointers into the vDSO text, and the vvar data is found from the text by
 * a fixed offset. */
struct vpiece { uint64_t off, len; int text; };

static int image_vdso(struct chain *c, struct vpiece *p, uint64_t *base)
{
	int n = 0;

	*base = 0;
	for (size_t i = 0; i < c->nr_vmas && n < 8; i++) {
		const struct rrc_vma *v = c->vmas[i].v;

		if (v->kind != RRC_VMA_VDSO && v->kind != RRC_VMA_VVAR)
			continue;
		if (!n)
			*base = v->start;
		p[n].off = v->start - *base;
		p[n].len = v->end - v->start;
		p[n].text = v->kind == RRC_VMA_VDSO;
		n++;
	}
	return n;
}

static int own_vdso(struct vpiece *p, uint64_t *base)
{
	struct mapping m[512];
	size_t nm = own_maps(m, ARRAY_SIZE(m));
	int n = 0;

	*base = 0;
	for (size_t i = 0; i < nm && n < 8; i++) {
		int text = !strcmp(m[i].name, "[vdso]");

		if (!text && strncmp(m[i].name, "[vvar", 5))
			continue;
		if (!n)
			*base = m[i].start;
		p[n].off = m[i].start - *base;
		p[n].len = m[i].end - m[i].start;
		p[n].text = text;
		n++;
	}
	return n;
}

static void describe(char *b, size_t sz, const struct vpiece *p, int n)
{
	size_t o = 0;

	b[0] = 0;
	for (int i = 0; i < n && o < sz; i++)
		o += (size_t)snprintf(b + o, sz - o, "%s%s %lluK@+0x%llx", i ? ", " : "",
				      p[i].text ? "text" : "data", (unsigned long long)(p[i].len >> 10),
				      (unsigned long long)p[i].off);
}

static uint64_t g_vdso_base, g_vdso_text, g_vdso_text_len;

void mem_check_vdso(struct chain *c)
{
	struct vpiece ip[8], op[8];
	uint64_t ib, ob;
	int ni = image_vdso(c, ip, &ib), no = own_vdso(op, &ob);
	char a[200], b[200];

	if (!ni) {
		rst_log("the image has no vDSO");
		return;
	}
	describe(a, sizeof(a), ip, ni);
	describe(b, sizeof(b), op, no);
	int same = ni == no;

	for (int i = 0; same && i < ni; i++)
		same = ip[i].off == op[i].off && ip[i].len == op[i].len && ip[i].text == op[i].text;
	if (!same)
		rst_fail(RRC_RST_VDSO, 0, 0,
			 "vDSO size differs from the image's: image from another kernel? (image: %s; here: %s)", a, b);
	g_vdso_base = ib;
	for (int i = 0; i < ni; i++)
		if (ip[i].text) {
			g_vdso_text = ib + ip[i].off;
			g_vdso_text_len = ip[i].len;
		}
	rst_log("vDSO layout matches (%s); image's at 0x%llx", a, (unsigned long long)ib);
}

static int cmp_range(const void *a, const void *b)
{
	const struct blob_range *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

/* Highest free gap of `size` bytes (with a 1 MiB margin each side) that
 * overlaps no image VMA and no mapping of ours. */
static uint64_t find_hole(struct chain *c, uint64_t size)
{
	struct mapping m[512];
	size_t nm = own_maps(m, ARRAY_SIZE(m)), n = 0, k = 0;
	struct blob_range *r = xcalloc(nm + c->nr_vmas + 1, sizeof(*r));
	const uint64_t margin = 1ull << 20;

	for (size_t i = 0; i < nm; i++)
		if (m[i].start < TASK_TOP)
			r[n++] = (struct blob_range){ m[i].start, m[i].end };
	for (size_t i = 0; i < c->nr_vmas; i++)
		if (c->vmas[i].v->kind != RRC_VMA_VSYSCALL)
			r[n++] = (struct blob_range){ c->vmas[i].v->start, c->vmas[i].v->end };
	qsort(r, n, sizeof(*r), cmp_range);
	/* merge overlapping ranges (ours and the image's overlap freely) */
	for (size_t i = 0; i < n; i++) {
		if (k && r[i].start <= r[k - 1].end) {
			if (r[i].end > r[k - 1].end)
				r[k - 1].end = r[i].end;
		} else {
			r[k++] = r[i];
		}
	}
	/* gaps from the top down: [r[i-1].end, r[i].start) */
	for (size_t i = k + 1; i-- > 0;) {
		uint64_t lo = i ? r[i - 1].end : LOW_LIMIT;
		uint64_t hi = i < k ? r[i].start : TASK_TOP;

		if (hi > lo && hi - lo >= size + 2 * margin) {
			free(r);
			return (hi - margin - size) & ~(PAGE - 1);
		}
	}
	free(r);
	rst_fail(RRC_RST_MEMORY, ENOMEM, 0, "no hole of %llu bytes left for the restorer blob",
		 (unsigned long long)size);
}

/* bump allocator inside the argument area */
struct arena {
	char *p, *end;
};

static void *arena_get(struct arena *a, size_t n)
{
	char *r = (char *)(((uintptr_t)a->p + 15) & ~(uintptr_t)15);

	if (r + n > a->end)
		rst_fail(RRC_RST_INTERNAL, 0, 0, "restorer argument area too small");
	a->p = r + n;
	return r;
}

static __attribute__((noreturn)) void jump(void *entry, void *args, void *stack_top)
{
	__asm__ volatile("movq %0, %%rsp\n\t"
			 "xorl %%ebp, %%ebp\n\t"
			 "callq *%1\n\t"
			 "ud2"
			 :
			 : "r"(stack_top), "r"(entry), "D"(args)
			 : "memory");
	__builtin_unreachable();
}

void mem_jump_to_blob(struct blob_plan_in *in)
{
	struct chain *c = in->c;
	uint64_t blob_size = (uint64_t)(_binary_blob_bin_end - _binary_blob_bin_start);
	uint64_t code_len = PAGE_UP(blob_size);
	uint64_t strings = 0, args_len, stacks_len, total, base;
	struct blob_args *a;
	struct arena ar;
	struct mapping m[MAX_UNMAP];
	size_t nm;
	char *p;
	int ncl = 0;

	for (size_t i = 0; i < c->nr_vmas; i++)
		strings += c->vmas[i].path ? strlen(c->vmas[i].path) + 1 : 0;
	args_len = PAGE_UP(sizeof(*a) + 16 * 8 + c->nr_vmas * sizeof(struct blob_vma) +
			   c->nr_fills * sizeof(struct blob_fill) + MAX_UNMAP * sizeof(struct blob_range) +
			   c->nr_threads * sizeof(struct blob_thread) + in->nr_fowns * sizeof(struct blob_fown) +
			   strings +
			   /* arena_get aligns every allocation to 16 bytes */
			   16 * (c->nr_vmas + 8));
	/* each stack has a PROT_NONE guard page below it */
	stacks_len = (PAGE + MAIN_STACK) + c->nr_threads * (PAGE + THREAD_STACK);
	total = code_len + args_len + stacks_len;
	base = find_hole(c, total);

	p = mmap((void *)base, total, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (p == MAP_FAILED || (uint64_t)p != base)
		rst_fail(RRC_RST_MEMORY, errno, 0, "cannot map the restorer blob at 0x%llx: %s",
			 (unsigned long long)base, rst_strerror(errno));
	memcpy(p, _binary_blob_bin_start, blob_size);

	ar.p = p + code_len;
	ar.end = p + code_len + args_len;
	a = arena_get(&ar, sizeof(*a));
	memset(a, 0, sizeof(*a));
	a->magic = BLOB_ARGS_MAGIC;
	a->t0_ns = rst_t0_ns;
	a->region_start = base;
	a->region_len = total;
	a->status_fd = rst_status_fd;
	a->log_fd = rst_log_fd;
	a->exe_fd = in->exe_fd;
	for (int i = 0; i < c->n; i++)
		a->close_fds[ncl++] = in->image_fds[i];
	if (in->exe_fd >= 0)
		a->close_fds[ncl++] = in->exe_fd;
	if (rst_status_fd >= 0)
		a->close_fds[ncl++] = rst_status_fd;
	if (rst_log_fd >= 0)
		a->close_fds[ncl++] = rst_log_fd;
	a->nr_close_fds = (uint32_t)ncl;

	/* glibc registered an rseq area for our main thread in its TLS, which
	 * phase 2 unmaps (glibc 2.36 registers 32 bytes) */
	if (__rseq_size) {
		a->self_rseq_addr = (uint64_t)((char *)__builtin_thread_pointer() + __rseq_offset);
		a->self_rseq_len = __rseq_size < 32 ? 32 : __rseq_size;
		a->self_rseq_sig = RSEQ_SIG;
	}
	a->vdso_area_start = g_vdso_base;
	a->vdso_text_start = g_vdso_text;
	a->vdso_text_len = g_vdso_text_len;

	a->vmas = arena_get(&ar, c->nr_vmas * sizeof(*a->vmas));
	for (size_t i = 0; i < c->nr_vmas; i++) {
		const struct rrc_vma *v = c->vmas[i].v;
		struct blob_vma *bv = &a->vmas[a->nr_vmas++];

		bv->start = v->start;
		bv->end = v->end;
		bv->pgoff = v->pgoff;
		bv->prot = v->prot;
		bv->kind = v->kind;
		bv->flags = v->flags;
		if (c->vmas[i].path) {
			size_t l = strlen(c->vmas[i].path) + 1;
			char *s = arena_get(&ar, l);
			memcpy(s, c->vmas[i].path, l);
			bv->path = s;
		}
	}
	a->fills = arena_get(&ar, c->nr_fills * sizeof(*a->fills));
	for (size_t i = 0; i < c->nr_fills; i++) {
		a->fills[i].vaddr = c->fills[i].vaddr;
		a->fills[i].len = c->fills[i].len;
		a->fills[i].off = c->fills[i].off;
		a->fills[i].fd = in->image_fds[c->fills[i].image];
		a->fills[i].image = (uint32_t)c->fills[i].image;
	}
	a->nr_fills = (uint32_t)c->nr_fills;
	a->stream_fd = -1;
	if (c->imgs[0].stream) {
		a->stream_fd = in->image_fds[0];
		a->stream_pages_crc = c->imgs[0].pages_crc;
		a->stream_pos = c->imgs[0].pages_off;
		a->stream_tail_len = c->imgs[0].stream_tail_len;
		memcpy(a->stream_tail, c->imgs[0].stream_tail, sizeof(a->stream_tail));
	}

	a->mm = (struct blob_mm_map){
		.start_code = c->proc->start_code, .end_code = c->proc->end_code,
		.start_data = c->proc->start_data, .end_data = c->proc->end_data,
		.start_brk = c->proc->start_brk, .brk = c->proc->brk,
		.start_stack = c->proc->start_stack,
		.arg_start = c->proc->arg_start, .arg_end = c->proc->arg_end,
		.env_start = c->proc->env_start, .env_end = c->proc->env_end,
		.auxv_size = c->proc->auxv_words * 8,
		.exe_fd = (uint32_t)in->exe_fd,
	};
	memcpy(a->auxv, c->proc->auxv, c->proc->auxv_words * 8);
	memcpy(a->sigs, c->sigs, sizeof(a->sigs));
	a->restore_area_addr = c->proc->restore_area_addr;
	if (c->creds) {
		a->has_creds = 1;
		a->creds = *c->creds;
	}
	memcpy(a->image_id, c->newest->hdr.image_id, 16);
	a->replay = in->replay;
	a->fowns = arena_get(&ar, in->nr_fowns * sizeof(*a->fowns));
	for (size_t i = 0; i < c->nr_fds && a->nr_fowns < in->nr_fowns; i++) {
		const struct rfd *r = &c->fds[i];

		if (r->has_fown)
			a->fowns[a->nr_fowns++] = (struct blob_fown){ r->f->fd, r->fown.owner_type, r->fown.owner,
								      r->fown.signal };
	}

	{
		char *stk = p + code_len + args_len;
		uint32_t found_main = 0;

		a->threads = arena_get(&ar, c->nr_threads * sizeof(*a->threads));
		a->nr_threads = (uint32_t)c->nr_threads;
		for (size_t i = 0; i < c->nr_threads; i++) {
			struct blob_thread *bt = &a->threads[i];
			uint64_t sz = (c->threads[i].tid == c->proc->pid) ? MAIN_STACK : THREAD_STACK;

			bt->t = c->threads[i];
			bt->args = a;
			bt->own_caps = 0;
			for (size_t k = 0; k < c->nr_thread_caps; k++)
				if (c->thread_caps[k].tid == bt->t.tid) {
					bt->own_caps = 1;
					bt->caps = c->thread_caps[k];
				}
			if (mprotect(stk, PAGE, PROT_NONE) < 0)
				rst_fail(RRC_RST_INTERNAL, errno, 0, "mprotect of a guard page failed: %s",
					 rst_strerror(errno));
			bt->stack_lo = (uint64_t)(stk + PAGE);
			bt->stack_size = sz;
			stk += PAGE + sz;
			if (bt->t.tid == c->proc->pid) {
				a->main_index = (uint32_t)i;
				found_main = 1;
			}
		}
		if (!found_main)
			rst_fail(RRC_RST_IMAGE, 0, (uint32_t)c->n, "image %d (%s): no thread has TID %u (the main thread)",
				 c->n, c->newest->path, c->proc->pid);
	}
	a->ok.magic = RRC_RESTORE_STATUS_MAGIC;
	a->ok.code = RRC_RST_OK;
	strcpy(a->ok.message, "ok");

	if (mprotect(p, code_len, PROT_READ | PROT_EXEC) < 0)
		rst_fail(RRC_RST_INTERNAL, errno, 0, "mprotect of the restorer blob failed: %s",
			 rst_strerror(errno));

	/* Last: our own mappings, as they are now (nothing maps after this) */
	a->unmap = arena_get(&ar, MAX_UNMAP * sizeof(*a->unmap));
	rst_log("blob at 0x%llx (%llu bytes: code %llu, args %llu, stacks %llu); %zu VMAs, %zu page runs, %zu threads",
		(unsigned long long)base, (unsigned long long)total, (unsigned long long)code_len,
		(unsigned long long)args_len, (unsigned long long)stacks_len, c->nr_vmas, c->nr_fills,
		c->nr_threads);
	nm = own_maps(m, ARRAY_SIZE(m));
	for (size_t i = 0; i < nm; i++) {
		if (m[i].start >= TASK_TOP)
			continue; /* [vsyscall] */
		if (m[i].start >= base && m[i].end <= base + total)
			continue;
		a->unmap[a->nr_unmap++] = (struct blob_range){ m[i].start, m[i].end };
	}
	jump(p, a, (char *)(a->threads[a->main_index].stack_lo + a->threads[a->main_index].stack_size));
}
