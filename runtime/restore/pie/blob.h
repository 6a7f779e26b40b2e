/* SPDX-License-Identifier: MIT
 *
 * The argument area handed from rrc-restore's phase 1 (ordinary C) to the
 * restorer blob (phase 2, freestanding). Phase 1 builds it inside the
 * blob's own region, which is the only memory of the restorer that
 * survives phase 2; every pointer in it points into that region, so it
 * stays valid after the blob unmapped the rest of the restorer.
 * Layout: [blob code][args + arrays + strings][thread stacks].
 */
#ifndef RRC_RESTORE_BLOB_H
#define RRC_RESTORE_BLOB_H

#include <stdint.h>
#include "rrc/image.h"
#include "rrc/restore-status.h"

#define BLOB_ARGS_MAGIC 0x4152474253455252ull /* "RRESBGRA" */

struct blob_vma {
	uint64_t start, end, pgoff;
	uint32_t prot, kind, flags, reserved;
	const char *path;         /* NUL-terminated, file kinds only */
};

/* Page data to pread: [vaddr, vaddr + len) from fd at off. */
struct blob_fill {
	uint64_t vaddr, len, off;
	int32_t  fd;
	uint32_t image;           /* index in the chain, for error messages */
};

struct blob_range {
	uint64_t start, end;
};

/* Signal-driven I/O the blob arms once every thread exists (a record's
 * struct rrc_fown; restore/fds.c fown_check). */
struct blob_fown {
	int32_t  fd;
	uint32_t owner_type;      /* F_OWNER_TID 0, F_OWNER_PID 1, F_OWNER_PGRP 2 */
	int32_t  owner;           /* 0: no owner */
	uint32_t signal;          /* F_SETSIG's (0: SIGIO) */
};

struct blob_args;

struct blob_thread {
	struct rrc_thread t;      /* copied from the newest image's THREADS */
	uint32_t own_caps, reserved; /* 1: caps below are this thread's (CREDS' thread list) */
	struct rrc_thread_caps caps;
	uint64_t stack_lo, stack_size; /* this thread's blob stack */
	struct blob_args *args;
};

/* mirror of the kernel's struct prctl_mm_map (linux/prctl.h) */
struct blob_mm_map {
	uint64_t start_code, end_code, start_data, end_data;
	uint64_t start_brk, brk, start_stack;
	uint64_t arg_start, arg_end, env_start, env_end;
	uint64_t auxv;            /* pointer to the auxv words */
	uint32_t auxv_size;       /* bytes */
	uint32_t exe_fd;
};

struct blob_args {
	uint64_t magic;
	uint64_t t0_ns;                        /* rrc-restore start (CLOCK_MONOTONIC), for the log */
	uint64_t region_start, region_len;     /* the whole blob region */

	int32_t  status_fd, log_fd, exe_fd, reserved0;
	uint32_t nr_close_fds;
	int32_t  close_fds[64];               /* ours, closed right before resuming */

	/* the restorer's own mappings (everything but the region and [vsyscall]) */
	uint32_t nr_unmap;
	struct blob_range *unmap;

	/* the restorer's own main thread rseq registration, to undo */
	uint64_t self_rseq_addr;
	uint32_t self_rseq_len, self_rseq_sig;

	/* vDSO: where the image had [vvar] (start of the whole vDSO area,
	 * which is what ARCH_MAP_VDSO_64 takes on this kernel) and [vdso] */
	uint64_t vdso_area_start, vdso_text_start, vdso_text_len;

	uint32_t nr_vmas, nr_fills;
	struct blob_vma *vmas;
	struct blob_fill *fills;

	/* an image arriving on a pipe (rrc-restore --image-stream): the fills
	 * are read in order from stream_fd, which is at stream_pos (the PAGES
	 * payload's offset); then the PAGES CRC must be pages_crc and the next
	 * bytes the END section phase 1 predicted, then end of stream */
	int32_t  stream_fd;                    /* -1: fills are pread */
	uint32_t stream_pages_crc;
	uint64_t stream_pos;
	uint32_t stream_tail_len;
	uint8_t  stream_tail[40];

	struct blob_mm_map mm;
	uint64_t auxv[RRC_AUXV_MAX];
	struct rrc_sigaction sigs[64];

	uint64_t restore_area_addr;
	uint8_t  image_id[16];
	/* the image's credentials, which each application thread takes last
	 * (has_creds 0: an image from before CREDS, threads keep root's) */
	uint32_t has_creds, reserved1;
	struct rrc_creds creds;
	struct rrc_replay_request replay; /* fd -1: no replay */

	uint32_t nr_fowns;
	uint32_t reserved2;
	struct blob_fown *fowns;

	uint32_t nr_threads;                   /* including the main thread */
	uint32_t main_index;
	struct blob_thread *threads;

	/* thread start-up handshake (futex words) */
	volatile uint32_t ready;               /* children set up */
	volatile uint32_t go;                  /* 1: resume */
	volatile uint32_t failed;              /* a child failed: see fail_* */
	uint32_t fail_tid;
	int32_t  fail_errno;
	const char *fail_what;

	struct rrc_restore_status ok;          /* prebuilt "ok" record */
};

/* entry.S */
void blob_entry(struct blob_args *a) __attribute__((noreturn));
long blob_clone3(void *clone_args, unsigned long size, void (*fn)(void *), void *arg);
void blob_resume(const struct rrc_resume_ctx *ctx) __attribute__((noreturn));

#endif /* RRC_RESTORE_BLOB_H */
