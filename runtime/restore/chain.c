/* SPDX-License-Identifier: MIT
 *
 * rrc-restore phase 1: the checkpoint chain. The newest image holds the
 * complete state (VMAs, page map, threads, fds, process, signals); only
 * page *data* of pages not written since an ancestor lives in that
 * ancestor (NiLiCon §3 keeps the committed state as a page index the same
 * way). This file checks the chain's links and resolves, for every defined
 * page of the newest image, the newest image holding its data and the file
 * offset: the page-fill list phase 2 preads.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "restore.h"

static const char *hex_id(const uint8_t id[16])
{
	static char buf[2][33];
	static int which;
	char *b = buf[which ^= 1];

	for (int i = 0; i < 16; i++)
		sprintf(b + 2 * i, "%02x", id[i]);
	return b;
}

static int id_zero(const uint8_t id[16])
{
	for (int i = 0; i < 16; i++)
		if (id[i])
			return 0;
	return 1;
}

#define FAIL_NEWEST(c, fmt, ...)                                                         \
	rst_fail(RRC_RST_IMAGE, 0, (uint32_t)(c)->n, "image %d (%s): " fmt, (c)->n,       \
		 (c)->newest->path, ##__VA_ARGS__)

static char *dup_str(const char *p, size_t n)
{
	char *s = xmalloc(n + 1);

	memcpy(s, p, n);
	s[n] = 0;
	return s;
}

static void parse_vmas(struct chain *c)
{
	const uint8_t *p = c->newest->sec[RRC_SEC_VMAS];
	uint64_t len = c->newest->sec_len[RRC_SEC_VMAS], off = 0;
	size_t cap = 64;

	c->vmas = xcalloc(cap, sizeof(*c->vmas));
	while (off < len) {
		const struct rrc_vma *v = (const void *)(p + off);
		uint64_t rec;

		if (len - off < sizeof(*v))
			FAIL_NEWEST(c, "section VMAS: partial record at offset %llu", (unsigned long long)off);
		rec = (sizeof(*v) + v->path_len + 7) & ~7ull;
		if (v->path_len > RRC_PATH_MAX || rec > len - off)
			FAIL_NEWEST(c, "section VMAS: record at offset %llu overruns the section",
				    (unsigned long long)off);
		if (c->nr_vmas == cap)
			c->vmas = realloc(c->vmas, (cap *= 2) * sizeof(*c->vmas));
		if (!c->vmas)
			rst_fail(RRC_RST_INTERNAL, ENOMEM, 0, "out of memory");
		c->vmas[c->nr_vmas].v = v;
		c->vmas[c->nr_vmas].path = v->path_len ? dup_str((const char *)(v + 1), v->path_len) : NULL;
		c->nr_vmas++;
		off += rec;
	}
}

static void parse_fds(struct chain *c)
{
	const uint8_t *p = c->newest->sec[RRC_SEC_FDS];
	uint64_t len = c->newest->sec_len[RRC_SEC_FDS], off = 0;
	size_t cap = 64;

	c->fds = xcalloc(cap, sizeof(*c->fds));
	while (off < len) {
		const struct rrc_fd *f = (const void *)(p + off);
		uint64_t rec;

		if (len - off < sizeof(*f))
			FAIL_NEWEST(c, "section FDS: partial record at offset %llu", (unsigned long long)off);
		rec = (sizeof(*f) + (uint64_t)f->path_len + f->data_len + 7) & ~7ull;
		if (f->path_len > RRC_PATH_MAX || rec > len - off)
			FAIL_NEWEST(c, "section FDS: record of fd %d overruns the section", f->fd);
		if (f->fd < 0)
			FAIL_NEWEST(c, "section FDS: negative fd number %d", f->fd);
		for (size_t i = 0; i < c->nr_fds; i++)
			if (c->fds[i].f->fd == f->fd)
				FAIL_NEWEST(c, "section FDS: fd %d appears twice", f->fd);
		if (c->nr_fds == cap)
			c->fds = realloc(c->fds, (cap *= 2) * sizeof(*c->fds));
		if (!c->fds)
			rst_fail(RRC_RST_INTERNAL, ENOMEM, 0, "out of memory");
		memset(&c->fds[c->nr_fds], 0, sizeof(c->fds[0]));
		c->fds[c->nr_fds].f = f;
		c->fds[c->nr_fds].path = dup_str((const char *)(f + 1), f->path_len);
		c->fds[c->nr_fds].data = (const uint8_t *)(f + 1) + f->path_len;
		c->fds[c->nr_fds].data_len = f->data_len;
		if (f->fd_flags & RRC_FD_F_FOWN) { /* the data's last 16 bytes, unaligned */
			struct rfd *r = &c->fds[c->nr_fds];

			if (r->data_len < sizeof(r->fown))
				FAIL_NEWEST(c, "section FDS: fd %d has signal-driven I/O in %u bytes of data", f->fd,
					    f->data_len);
			r->data_len -= (uint32_t)sizeof(r->fown);
			memcpy(&r->fown, r->data + r->data_len, sizeof(r->fown));
			r->has_fown = 1;
		}
		c->nr_fds++;
		off += rec;
	}
}

static void check_full(const struct img *im)
{
	if (!id_zero(im->hdr.parent_id) || !(im->hdr.flags & RRC_IMG_F_FULL))
		rst_fail(RRC_RST_IMAGE, 0, 1,
			 "image 1 (%s): not a full image (parent %s): the chain must start with the full image",
			 im->path, hex_id(im->hdr.parent_id));
}

static void chain_check_newest(struct chain *c);

void chain_load(struct chain *c, int n, char **paths)
{
	memset(c, 0, sizeof(*c));
	c->n = n;
	c->imgs = xcalloc((size_t)n, sizeof(*c->imgs));
	for (int i = 0; i < n; i++) {
		struct img *im = &c->imgs[i];

		image_read(im, i, paths[i]);
		if (i == 0) {
			check_full(im);
			continue;
		}
		if (memcmp(im->hdr.parent_id, c->imgs[i - 1].hdr.image_id, 16))
			rst_fail(RRC_RST_IMAGE, 0, (uint32_t)i + 1,
				 "chain broken: image %d (%s) has parent %s, but image %d (%s) is %s",
				 i + 1, im->path, hex_id(im->hdr.parent_id), i, c->imgs[i - 1].path,
				 hex_id(c->imgs[i - 1].hdr.image_id));
		if (im->hdr.sequence != c->imgs[i - 1].hdr.sequence + 1)
			rst_fail(RRC_RST_IMAGE, 0, (uint32_t)i + 1,
				 "chain broken: image %d (%s) has sequence %llu after %llu",
				 i + 1, im->path, (unsigned long long)im->hdr.sequence,
				 (unsigned long long)c->imgs[i - 1].hdr.sequence);
	}
	chain_check_newest(c);
}

void chain_load_stream(struct chain *c, int fd)
{
	memset(c, 0, sizeof(*c));
	c->n = 1;
	c->imgs = xcalloc(1, sizeof(*c->imgs));
	image_read_stream(&c->imgs[0], fd, "image stream");
	check_full(&c->imgs[0]);
	chain_check_newest(c);
}

/* The newest image's PROCESS, SIGNALS, THREADS, VMAS and FDS. */
static void chain_check_newest(struct chain *c)
{
	struct img *nw = c->newest = &c->imgs[c->n - 1];
	int n = c->n;

	if (nw->sec_len[RRC_SEC_PROCESS] < sizeof(struct rrc_process))
		FAIL_NEWEST(c, "section PROCESS too short (%llu bytes)",
			    (unsigned long long)nw->sec_len[RRC_SEC_PROCESS]);
	c->proc = nw->sec[RRC_SEC_PROCESS];
	if (!memchr(c->proc->exe_path, 0, sizeof(c->proc->exe_path)) ||
	    !memchr(c->proc->cwd, 0, sizeof(c->proc->cwd)) ||
	    !memchr(c->proc->comm, 0, sizeof(c->proc->comm)))
		FAIL_NEWEST(c, "section PROCESS: unterminated string");
	if (c->proc->auxv_words > RRC_AUXV_MAX || c->proc->auxv_words % 2)
		FAIL_NEWEST(c, "section PROCESS: bad auxv size %u words", c->proc->auxv_words);

	if (nw->sec_len[RRC_SEC_SIGNALS] != 64 * sizeof(struct rrc_sigaction))
		FAIL_NEWEST(c, "section SIGNALS has %llu bytes, expected %zu",
			    (unsigned long long)nw->sec_len[RRC_SEC_SIGNALS], 64 * sizeof(struct rrc_sigaction));
	c->sigs = nw->sec[RRC_SEC_SIGNALS];

	c->attrs = 0;
	if (nw->have[RRC_SEC_PROCATTR]) {
		/* an image of before the UTS names is read too (it has none:
		 * its valid bits say so); the fields it lacks stay 0 */
		static struct rrc_procattr attrs;
		const struct rrc_procattr *a = nw->sec[RRC_SEC_PROCATTR];
		if (nw->sec_len[RRC_SEC_PROCATTR] < RRC_PROCATTR_SIZE_V1 || a->size < RRC_PROCATTR_SIZE_V1 ||
		    a->size > nw->sec_len[RRC_SEC_PROCATTR])
			FAIL_NEWEST(c, "section PROCATTR: %llu bytes saying %u, this restorer reads %u or more",
				    (unsigned long long)nw->sec_len[RRC_SEC_PROCATTR],
				    nw->sec_len[RRC_SEC_PROCATTR] >= 4 ? a->size : 0, RRC_PROCATTR_SIZE_V1);
		memset(&attrs, 0, sizeof attrs);
		memcpy(&attrs, a, a->size < sizeof attrs ? a->size : sizeof attrs);
		if (attrs.size < sizeof attrs)
			attrs.valid &= RRC_PA_OOM_SCORE_ADJ | RRC_PA_ITIMERS; /* the first version's */
		attrs.nodename[sizeof attrs.nodename - 1] = attrs.domainname[sizeof attrs.domainname - 1] = 0;
		c->attrs = &attrs;
	}

	c->creds = 0;
	c->thread_caps = 0;
	c->nr_thread_caps = 0;
	if (nw->have[RRC_SEC_CREDS]) {
		const struct rrc_creds *cr = nw->sec[RRC_SEC_CREDS];
		uint64_t len = nw->sec_len[RRC_SEC_CREDS];
		/* the struct, then maybe the threads with sets of their own */
		if (len > sizeof *cr) {
			const uint32_t *n = (const uint32_t *)(cr + 1);
			if (len < sizeof *cr + 8 || *n == 0 || *n > RRC_THREAD_CAPS_MAX ||
			    len != sizeof *cr + 8 + (uint64_t)*n * sizeof(struct rrc_thread_caps))
				FAIL_NEWEST(c, "section CREDS has %llu bytes: not %zu, nor that and a list of at most "
					    "%d threads' capability sets", (unsigned long long)len, sizeof *cr,
					    RRC_THREAD_CAPS_MAX);
			c->thread_caps = (const struct rrc_thread_caps *)(n + 2);
			c->nr_thread_caps = *n;
			for (size_t k = 0; k < c->nr_thread_caps; k++) {
				const struct rrc_thread_caps *t = &c->thread_caps[k];
				if ((t->cap_eff & ~t->cap_prm) || (t->cap_amb & ~(t->cap_prm & t->cap_inh)))
					FAIL_NEWEST(c, "section CREDS: thread %u's effective or ambient capabilities "
						    "exceed its permitted ones", t->tid);
			}
		} else if (len != sizeof *cr) {
			FAIL_NEWEST(c, "section CREDS has %llu bytes, expected %zu",
				    (unsigned long long)len, sizeof *cr);
		}
		if (cr->nr_groups > RRC_CREDS_GROUPS_MAX || cr->dumpable > 1)
			FAIL_NEWEST(c, "section CREDS: %u groups (at most %d), dumpable %u (0 or 1)",
				    cr->nr_groups, RRC_CREDS_GROUPS_MAX, cr->dumpable);
		if ((cr->cap_eff & ~cr->cap_prm) || (cr->cap_amb & ~(cr->cap_prm & cr->cap_inh)))
			FAIL_NEWEST(c, "section CREDS: effective capabilities %#llx not within the permitted %#llx, "
				    "or ambient %#llx not within permitted and inheritable",
				    (unsigned long long)cr->cap_eff, (unsigned long long)cr->cap_prm,
				    (unsigned long long)cr->cap_amb);
		c->creds = cr;
	}

	if (nw->sec_len[RRC_SEC_THREADS] % sizeof(struct rrc_thread))
		FAIL_NEWEST(c, "section THREADS has a partial record");
	c->threads = nw->sec[RRC_SEC_THREADS];
	c->nr_threads = nw->sec_len[RRC_SEC_THREADS] / sizeof(struct rrc_thread);
	if (c->nr_threads != c->proc->nr_threads || !c->nr_threads)
		FAIL_NEWEST(c, "section THREADS holds %zu threads, PROCESS says %u",
			    c->nr_threads, c->proc->nr_threads);

	parse_vmas(c);
	parse_fds(c);
	rst_log("chain of %d image(s) verified; newest %s: %zu VMAs, %zu threads, %zu fds",
		n, nw->path, c->nr_vmas, c->nr_threads, c->nr_fds);
}

static void add_fill(struct chain *c, uint64_t vaddr, uint64_t npages, int image, uint64_t off)
{
	uint64_t len = npages * RRC_PAGE_SIZE;
	struct fill *last = c->nr_fills ? &c->fills[c->nr_fills - 1] : NULL;

	c->nr_pages += npages;
	/* merge with the previous fill when both are contiguous */
	if (last && last->image == image && last->vaddr + last->len == vaddr && last->off + last->len == off) {
		last->len += len;
		return;
	}
	if (c->nr_fills == c->cap_fills) {
		c->cap_fills = c->cap_fills ? c->cap_fills * 2 : 256;
		c->fills = realloc(c->fills, c->cap_fills * sizeof(*c->fills));
		if (!c->fills)
			rst_fail(RRC_RST_INTERNAL, ENOMEM, 0, "out of memory");
	}
	c->fills[c->nr_fills++] = (struct fill){ vaddr, len, off, image };
}

/* Pages [v, v + np) are not in image k+1: find each one in image k, or
 * further back. */
static void resolve(struct chain *c, uint64_t v, uint64_t np, int k)
{
	struct img *im;
	size_t lo, hi;

	if (k < 0)
		rst_fail(RRC_RST_IMAGE, 0, (uint32_t)c->n,
			 "chain broken: page 0x%llx of image %d (%s) is in no image of the chain",
			 (unsigned long long)v, c->n, c->newest->path);
	im = &c->imgs[k];
	/* first range ending after v */
	lo = 0;
	hi = im->nr_ranges;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		const struct pm_range *r = &im->ranges[mid];

		if (r->vaddr + r->npages * RRC_PAGE_SIZE <= v)
			lo = mid + 1;
		else
			hi = mid;
	}
	while (np) {
		const struct pm_range *r = lo < im->nr_ranges ? &im->ranges[lo] : NULL;
		uint64_t end = v + np * RRC_PAGE_SIZE, take;

		if (!r || r->vaddr >= end) {
			resolve(c, v, np, k - 1);
			return;
		}
		if (r->vaddr > v) {
			take = (r->vaddr - v) / RRC_PAGE_SIZE;
			resolve(c, v, take, k - 1);
			v += take * RRC_PAGE_SIZE;
			np -= take;
		}
		{
			uint64_t rend = r->vaddr + r->npages * RRC_PAGE_SIZE;
			uint64_t stop = rend < end ? rend : end;

			take = (stop - v) / RRC_PAGE_SIZE;
			add_fill(c, v, take, k, r->file_off + (v - r->vaddr));
			v += take * RRC_PAGE_SIZE;
			np -= take;
		}
		lo++;
	}
}

void chain_resolve_pages(struct chain *c)
{
	const struct rrc_pagemap_entry *pm = c->newest->sec[RRC_SEC_PAGEMAP];
	size_t n = c->newest->sec_len[RRC_SEC_PAGEMAP] / sizeof(*pm);
	uint64_t off = c->newest->pages_off;
	int last = c->n - 1;
	uint64_t per_image_pages[64] = { 0 };

	for (size_t i = 0; i < n; i++) {
		if (pm[i].flags & RRC_PME_IN_IMAGE) {
			add_fill(c, pm[i].vaddr, pm[i].nr_pages, last, off);
			off += (uint64_t)pm[i].nr_pages * RRC_PAGE_SIZE;
		} else {
			resolve(c, pm[i].vaddr, pm[i].nr_pages, last - 1);
		}
	}
	for (size_t i = 0; i < c->nr_fills; i++)
		per_image_pages[c->fills[i].image < 64 ? c->fills[i].image : 63] +=
			c->fills[i].len / RRC_PAGE_SIZE;
	rst_log("%llu pages to fill in %zu runs", (unsigned long long)c->nr_pages, c->nr_fills);
	for (int i = 0; i < c->n && i < 64; i++)
		rst_log("  image %d: %llu pages", i + 1, (unsigned long long)per_image_pages[i]);
}
