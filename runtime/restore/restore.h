/* SPDX-License-Identifier: MIT
 *
 * rrc-restore, phase 1 (ordinary C with libc): shared declarations.
 * docs/restore.md describes the whole sequence.
 */
#ifndef RRC_RESTORE_H
#define RRC_RESTORE_H

#include <stddef.h>
#include <stdint.h>
#include "rrc/image.h"
#include "rrc/restore-status.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* ---- status.c: the status record and the log ---- */
extern int rst_status_fd;  /* -1 once the record is written */
extern int rst_log_fd;     /* -1: no log */
extern uint64_t rst_t0_ns; /* CLOCK_MONOTONIC at start, for the log */
void rst_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Write the error record, exit with `code`. err = errno of the cause or 0. */
void rst_fail(int code, int err, uint32_t detail, const char *fmt, ...)
	__attribute__((noreturn, format(printf, 4, 5)));
/* strerror, lower-cased first letter ("address already in use") */
const char *rst_strerror(int err);
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t m);

/* ---- image-read.c: one image file, verified ---- */
#define RRC_SEC_MAX 14 /* section types 1..13 (8 TCP, 9 FILEOPS, 10 PROCATTR, 11 CREDS, 12 SYSVIPC, 13 FILEIDS) */

struct pm_range {          /* pages of this image's PAGES section */
	uint64_t vaddr, npages;
	uint64_t file_off;
};

struct img {
	int index;                 /* 0 = the full image, oldest first */
	const char *path;
	int fd;
	struct rrc_image_header hdr;
	void *sec[RRC_SEC_MAX];    /* payloads (PAGES excluded) */
	uint64_t sec_len[RRC_SEC_MAX];
	int have[RRC_SEC_MAX];
	uint64_t pages_off, pages_len; /* PAGES payload in the file */
	struct pm_range *ranges;   /* sorted by vaddr */
	size_t nr_ranges;
	/* an image read from a pipe (image_read_stream): the position reached,
	 * and what phase 2 must find after the pages: their CRC, then END */
	int stream;
	uint64_t stream_pos;
	uint32_t pages_crc;
	uint32_t stream_tail_len;  /* 0: END already read (no PAGES section) */
	uint8_t stream_tail[40];
};

/* Reads and verifies header, every section CRC (PAGES included, streamed)
 * and END; fails with a message naming image and section otherwise. */
void image_read(struct img *im, int index, const char *path);
/* The same for one image arriving on fd (a pipe), read in order up to the
 * PAGES section header; `what` names it in messages. */
void image_read_stream(struct img *im, int fd, const char *what);
const char *section_name(uint32_t type);

/* ---- chain.c: the chain and the page resolution ---- */
struct rvma {
	const struct rrc_vma *v;
	char *path;                /* NUL-terminated copy, NULL if none */
};
struct rfd {
	const struct rrc_fd *f;
	char *path;                /* NUL-terminated copy ("" if none) */
	const uint8_t *data;
	uint32_t data_len;         /* the kind's data (a struct rrc_fown after it excluded) */
	int done;                  /* recreated (pipes do a whole pipe at once) */
	int has_fown;              /* RRC_FD_F_FOWN: signal-driven I/O, armed by the blob */
	struct rrc_fown fown;
};
struct fill {                   /* page data to pread in phase 2 */
	uint64_t vaddr, len, off;
	int image;                 /* index in the chain */
};

struct chain {
	int n;
	struct img *imgs;
	struct img *newest;
	const struct rrc_process *proc;
	struct rvma *vmas;
	size_t nr_vmas;
	struct rfd *fds;
	size_t nr_fds;
	const struct rrc_thread *threads;
	size_t nr_threads;
	const struct rrc_sigaction *sigs;
	const struct rrc_procattr *attrs; /* NULL: an image from before PROCATTR */
	const struct rrc_creds *creds;    /* NULL: an image from before CREDS */
	const struct rrc_thread_caps *thread_caps; /* CREDS' threads with sets of their own */
	size_t nr_thread_caps;
	struct fill *fills;
	size_t nr_fills, cap_fills;
	uint64_t nr_pages;         /* pages to fill */
};

void chain_load(struct chain *c, int n, char **paths);
/* A chain of one full image arriving on fd (a pipe): image_read_stream. */
void chain_load_stream(struct chain *c, int fd);
void chain_resolve_pages(struct chain *c);

/* ---- fds.c and one file per kind ---- */
struct repaired {               /* a TCP connection handed in (sk-repaired.c) */
	int target;                /* its fd number in the image */
	int fd;                    /* where it is until placed */
};
struct pending_accept {          /* a connection for accept() (sk-repaired.c) */
	int listener;              /* its listener's fd number in the image */
	int fd;                    /* where it is (above the image's numbers) */
};
struct fd_ctx {
	struct chain *c;
	int max_target;            /* highest fd number of the image */
	const char *control_path;  /* $RRC_CONTROL */
	struct repaired *rep;      /* --repaired-fds: sockets received */
	size_t nr_rep;
	struct pending_accept *pend; /* --repaired-fds: not yet accepted, in queue order */
	size_t nr_pend;
};
void fds_prepare(struct fd_ctx *x, int *own, int nr_own);
void fds_restore(struct fd_ctx *x);
int  fd_high(struct fd_ctx *x, int fd);             /* move above the image's fds */
void fd_place(struct fd_ctx *x, int tmp, const struct rfd *r); /* dup3 to its number */
struct rfd *fd_find(struct fd_ctx *x, int fd);
const char *fd_kind_name(uint32_t kind);

void restore_reg(struct fd_ctx *x, struct rfd *r);      /* files-reg.c: REG, DIR, CHR */
void restore_pipe(struct fd_ctx *x, struct rfd *r);     /* pipes.c */
void restore_eventfd(struct fd_ctx *x, struct rfd *r);  /* eventfd.c */
void locks_check(const struct chain *c);               /* file-locks.c: before any change */
void locks_restore(const struct chain *c);             /* file-locks.c: after every fd */
size_t fown_check(const struct chain *c);              /* fds.c: signal-driven I/O, before any change */
void restore_epoll(struct fd_ctx *x, struct rfd *r);    /* epoll.c: create */
void restore_epoll_entries(struct fd_ctx *x, struct rfd *r); /* epoll.c: after all others */
void restore_timerfd(struct fd_ctx *x, struct rfd *r);  /* timerfd.c */
void restore_signalfd(struct fd_ctx *x, struct rfd *r); /* signalfd.c */
void restore_inotify(struct fd_ctx *x, struct rfd *r);  /* inotify.c */
void restore_fifo(struct fd_ctx *x, struct rfd *first);  /* pipes.c: every fd of first's FIFO */
void restore_ghost(struct fd_ctx *x, struct rfd *r);    /* files-ghost.c */
void restore_mqueue(struct fd_ctx *x, struct rfd *r);   /* mqueue.c */
/* fds.c: does a path as the kernel prints it (d_path) end in " (deleted)";
 * and the same with the suffix cut off (1 if it was there) */
int path_is_deleted(const char *path);
int path_cut_deleted(char *path);
void restore_inet(struct fd_ctx *x, struct rfd *r);     /* sk-inet.c */
void restore_unix(struct fd_ctx *x, struct rfd *r);     /* sk-unix.c: UNIX_*, LIB_CONTROL */
void unix_dgram_connect_all(struct fd_ctx *x);          /* sk-unix.c: once every name is bound */
/* sk-repaired.c: connections rebuilt with TCP_REPAIR, handed in */
void repaired_receive(struct fd_ctx *x, int chan);   /* all of them, until EOF */
void repaired_check(struct fd_ctx *x);               /* before any fd is placed */
struct repaired *repaired_for(struct fd_ctx *x, int target);
void repaired_leave_repair(struct fd_ctx *x);        /* after every fd is placed */
void repaired_write_accept_queue(struct fd_ctx *x);  /* then: the library's table */

/* ---- mem-plan.c: the blob, its arguments, the jump ---- */
struct blob_plan_in {
	struct chain *c;
	size_t nr_fowns;           /* records with signal-driven I/O (fown_check) */
	int status_fd, log_fd, exe_fd;
	int *image_fds;
	struct rrc_replay_request replay; /* fd: the record log, moved high; -1: none */
};
void sysvipc_check(const struct chain *c);   /* sysvipc.c: before any change */
void sysvipc_restore(const struct chain *c); /* sysvipc.c: the IPC namespace's objects */
void mem_check_vmas(struct chain *c);
void mem_check_vdso(struct chain *c);
void mem_jump_to_blob(struct blob_plan_in *in) __attribute__((noreturn));

#endif /* RRC_RESTORE_H */
