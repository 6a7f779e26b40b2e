/* SPDX-License-Identifier: MIT
 *
 * rrc-restore phase 1: read and verify one checkpoint image
 * (include/rrc/image.h, docs/image-format.md). Nothing of an image is used
 * before its header CRC, every section header and payload CRC and its END
 * section have been checked; the PAGES payload is not kept in memory but
 * its CRC is computed by streaming it, so that phase 2 can pread page data
 * that is known to be intact.
 *
 * An image can also arrive on a pipe (image_read_stream, `rrc-restore
 * --image-stream FD`: the failover restores the backup's store without
 * writing it out first, docs/restore.md). The same checks run on the bytes
 * as they come, in order, up to the PAGES section header; the page data
 * and the END section that follows are read by phase 2 straight into the
 * process's memory, which verifies the PAGES CRC and the END section that
 * phase 1 predicts here (restore/pie/restorer.c, fill_pages_stream).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "rrc/crc32c.h"
#include "restore.h"

#define FAIL_IMG(im, err, fmt, ...)                                                   \
	rst_fail(RRC_RST_IMAGE, err, (uint32_t)(im)->index + 1, "image %d (%s): " fmt, \
		 (im)->index + 1, (im)->path, ##__VA_ARGS__)

const char *section_name(uint32_t type)
{
	switch (type) {
	case RRC_SEC_PROCESS: return "PROCESS";
	case RRC_SEC_VMAS:    return "VMAS";
	case RRC_SEC_PAGEMAP: return "PAGEMAP";
	case RRC_SEC_THREADS: return "THREADS";
	case RRC_SEC_FDS:     return "FDS";
	case RRC_SEC_SIGNALS: return "SIGNALS";
	case RRC_SEC_PAGES:   return "PAGES";
	case RRC_SEC_TCP:     return "TCP";
	case RRC_SEC_FILEOPS: return "FILEOPS";
	case RRC_SEC_PROCATTR: return "PROCATTR";
	case RRC_SEC_CREDS:   return "CREDS";
	case RRC_SEC_END:     return "END";
	}
	return "unknown";
}

/* Sections of a streamed image other than PAGES are held in memory: a
 * bound on what a corrupt length can make phase 1 allocate. */
#define STREAM_SECTION_MAX (1ull << 30)

static char scratch[1 << 20];

/* Exactly n bytes at offset off: pread for a file; for a stream the next
 * bytes, after skipping up to off (padding). 0 on success, 1 on EOF,
 * -errno on error. */
static int read_at(struct img *im, void *buf, size_t n, uint64_t off)
{
	char *p = buf;

	if (im->stream) {
		if (off < im->stream_pos)
			return -ESPIPE;
		while (im->stream_pos < off) {
			uint64_t skip = off - im->stream_pos;
			int r = read_at(im, scratch, skip < sizeof(scratch) ? (size_t)skip : sizeof(scratch),
					im->stream_pos);
			if (r)
				return r;
		}
	}
	while (n) {
		ssize_t r = im->stream ? read(im->fd, p, n) : pread(im->fd, p, n, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return 1;
		p += r;
		n -= (size_t)r;
		off += (uint64_t)r;
		if (im->stream)
			im->stream_pos += (uint64_t)r;
	}
	return 0;
}

static uint32_t stream_crc(struct img *im, uint64_t off, uint64_t len)
{
	uint32_t crc = 0;

	while (len) {
		size_t n = len < sizeof(scratch) ? (size_t)len : sizeof(scratch);
		int r = read_at(im, scratch, n, off);

		if (r > 0)
			FAIL_IMG(im, 0, "truncated inside section PAGES (offset %llu)",
				 (unsigned long long)off);
		if (r < 0)
			FAIL_IMG(im, -r, "cannot read: %s", rst_strerror(-r));
		crc = rrc_crc32c_extend(crc, scratch, n);
		off += n;
		len -= n;
	}
	return crc;
}

/* The pages this image holds, with their file offsets: the PAGEMAP entries
 * flagged RRC_PME_IN_IMAGE, whose data follow each other in PAGES. */
static void index_pages(struct img *im)
{
	const struct rrc_pagemap_entry *pm = im->sec[RRC_SEC_PAGEMAP];
	size_t n = im->sec_len[RRC_SEC_PAGEMAP] / sizeof(*pm);
	uint64_t off = im->pages_off, prev_end = 0;

	if (im->sec_len[RRC_SEC_PAGEMAP] % sizeof(*pm))
		FAIL_IMG(im, 0, "section PAGEMAP has a partial entry (%llu bytes)",
			 (unsigned long long)im->sec_len[RRC_SEC_PAGEMAP]);
	im->ranges = xcalloc(n, sizeof(*im->ranges));
	for (size_t i = 0; i < n; i++) {
		if (pm[i].vaddr % RRC_PAGE_SIZE || !pm[i].nr_pages)
			FAIL_IMG(im, 0, "PAGEMAP entry %zu (0x%llx, %u pages) is malformed", i,
				 (unsigned long long)pm[i].vaddr, pm[i].nr_pages);
		if (pm[i].vaddr < prev_end)
			FAIL_IMG(im, 0, "PAGEMAP entry %zu (0x%llx) is out of address order", i,
				 (unsigned long long)pm[i].vaddr);
		prev_end = pm[i].vaddr + (uint64_t)pm[i].nr_pages * RRC_PAGE_SIZE;
		if (!(pm[i].flags & RRC_PME_IN_IMAGE))
			continue;
		im->ranges[im->nr_ranges].vaddr = pm[i].vaddr;
		im->ranges[im->nr_ranges].npages = pm[i].nr_pages;
		im->ranges[im->nr_ranges].file_off = off;
		im->nr_ranges++;
		off += (uint64_t)pm[i].nr_pages * RRC_PAGE_SIZE;
	}
	if (off - im->pages_off != im->pages_len)
		FAIL_IMG(im, 0, "PAGEMAP announces %llu bytes of pages, section PAGES holds %llu",
			 (unsigned long long)(off - im->pages_off), (unsigned long long)im->pages_len);
}

/* The END section a stream must end with, after PAGES (the nsec-th
 * section) ending at image_bytes: phase 2 compares it byte for byte. */
static void predict_end(struct img *im, uint32_t nsec, uint64_t image_bytes)
{
	struct rrc_section_header sh = { .type = RRC_SEC_END, .length = sizeof(struct rrc_end) };
	struct rrc_end end = { .sections = nsec, .image_bytes = image_bytes };

	sh.payload_crc = rrc_crc32c(&end, sizeof(end));
	sh.header_crc = rrc_crc32c(&sh, offsetof(struct rrc_section_header, header_crc));
	memcpy(im->stream_tail, &sh, sizeof(sh));
	memcpy(im->stream_tail + sizeof(sh), &end, sizeof(end));
	im->stream_tail_len = sizeof(sh) + sizeof(end);
}

/* Header, sections, END of the image on im->fd; size = the file's size
 * (UINT64_MAX for a stream). */
static void parse(struct img *im, uint64_t size)
{
	uint64_t off;
	uint32_t nsec = 0;
	int r;

	r = read_at(im, &im->hdr, sizeof(im->hdr), 0);
	if (r < 0)
		FAIL_IMG(im, -r, "cannot read: %s", rst_strerror(-r));
	if (r > 0)
		FAIL_IMG(im, 0, "truncated: shorter than the image header (%llu bytes)",
			 (unsigned long long)(im->stream ? im->stream_pos : size));
	if (memcmp(im->hdr.magic, RRC_IMAGE_MAGIC, 8))
		FAIL_IMG(im, 0, "not an rrc checkpoint image (bad magic)");
	if (im->hdr.version != RRC_IMAGE_VERSION)
		FAIL_IMG(im, 0, "image format version %u, this rrc-restore reads version %u",
			 im->hdr.version, RRC_IMAGE_VERSION);
	if (rrc_crc32c(&im->hdr, offsetof(struct rrc_image_header, header_crc)) != im->hdr.header_crc)
		FAIL_IMG(im, 0, "image header checksum mismatch");

	off = sizeof(im->hdr);
	for (;;) {
		struct rrc_section_header sh;
		uint64_t payload = off + sizeof(sh);

		r = read_at(im, &sh, sizeof(sh), off);
		if (r < 0)
			FAIL_IMG(im, -r, "cannot read: %s", rst_strerror(-r));
		if (r > 0)
			FAIL_IMG(im, 0, "truncated: no END section after %u sections (%s ends at %llu)",
				 nsec, im->stream ? "stream" : "file",
				 (unsigned long long)(im->stream ? im->stream_pos : size));
		if (rrc_crc32c(&sh, offsetof(struct rrc_section_header, header_crc)) != sh.header_crc)
			FAIL_IMG(im, 0, "section header at offset %llu checksum mismatch (truncated or corrupt)",
				 (unsigned long long)off);
		if (im->stream && sh.type != RRC_SEC_PAGES && sh.length > STREAM_SECTION_MAX)
			FAIL_IMG(im, 0, "section %s announces %llu bytes, more than a stream may hold in memory",
				 section_name(sh.type), (unsigned long long)sh.length);
		if (!im->stream && (sh.length > size || payload + sh.length > size))
			FAIL_IMG(im, 0, "truncated inside section %s (needs %llu bytes at offset %llu, file has %llu)",
				 section_name(sh.type), (unsigned long long)sh.length,
				 (unsigned long long)payload, (unsigned long long)size);
		if (sh.type == RRC_SEC_END) {
			struct rrc_end end;

			if (sh.length != sizeof(end))
				FAIL_IMG(im, 0, "section END has %llu bytes, expected %zu",
					 (unsigned long long)sh.length, sizeof(end));
			r = read_at(im, &end, sizeof(end), payload);
			if (r)
				FAIL_IMG(im, r < 0 ? -r : 0, "cannot read section END");
			if (rrc_crc32c(&end, sizeof(end)) != sh.payload_crc)
				FAIL_IMG(im, 0, "section END checksum mismatch");
			if (end.sections != nsec || end.image_bytes != off)
				FAIL_IMG(im, 0, "section END says %u sections ending at %llu, found %u ending at %llu",
					 end.sections, (unsigned long long)end.image_bytes, nsec,
					 (unsigned long long)off);
			break;
		}
		if (sh.type == 0 || sh.type >= RRC_SEC_MAX)
			FAIL_IMG(im, 0, "unknown section type %u at offset %llu", sh.type,
				 (unsigned long long)off);
		if (im->have[sh.type])
			FAIL_IMG(im, 0, "section %s appears twice", section_name(sh.type));
		im->have[sh.type] = 1;
		im->sec_len[sh.type] = sh.length;
		if (sh.type == RRC_SEC_FILEOPS) {
			/* the data directory's changes: applied by rrc-store before the
			 * restore, never read here; checked, not loaded (it may be big) */
			if (stream_crc(im, payload, sh.length) != sh.payload_crc)
				FAIL_IMG(im, 0, "section FILEOPS checksum mismatch");
		} else if (sh.type == RRC_SEC_PAGES && im->stream) {
			/* the rest is phase 2's: the page data, then END */
			im->pages_off = payload;
			im->pages_len = sh.length;
			im->pages_crc = sh.payload_crc;
			predict_end(im, nsec + 1, payload + ((sh.length + 7) & ~7ull));
			break;
		} else if (sh.type == RRC_SEC_PAGES) {
			im->pages_off = payload;
			im->pages_len = sh.length;
			if (stream_crc(im, payload, sh.length) != sh.payload_crc)
				FAIL_IMG(im, 0, "section PAGES checksum mismatch");
		} else {
			im->sec[sh.type] = xmalloc(sh.length);
			r = read_at(im, im->sec[sh.type], sh.length, payload);
			if (r)
				FAIL_IMG(im, r < 0 ? -r : 0, "cannot read section %s", section_name(sh.type));
			if (rrc_crc32c(im->sec[sh.type], sh.length) != sh.payload_crc)
				FAIL_IMG(im, 0, "section %s checksum mismatch", section_name(sh.type));
		}
		nsec++;
		off = payload + ((sh.length + 7) & ~7ull);
	}

	for (uint32_t t = RRC_SEC_PROCESS; t <= RRC_SEC_SIGNALS; t++)
		if (!im->have[t])
			FAIL_IMG(im, 0, "section %s is missing", section_name(t));
	index_pages(im);
}

void image_read(struct img *im, int index, const char *path)
{
	struct stat st;

	memset(im, 0, sizeof(*im));
	im->index = index;
	im->path = path;
	im->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (im->fd < 0)
		FAIL_IMG(im, errno, "cannot open: %s", rst_strerror(errno));
	if (fstat(im->fd, &st) < 0)
		FAIL_IMG(im, errno, "cannot stat: %s", rst_strerror(errno));
	if (!S_ISREG(st.st_mode))
		FAIL_IMG(im, 0, "not a regular file");
	parse(im, (uint64_t)st.st_size);
}

void image_read_stream(struct img *im, int fd, const char *what)
{
	memset(im, 0, sizeof(*im));
	im->path = what;
	im->fd = fd;
	im->stream = 1;
	parse(im, UINT64_MAX);
}
