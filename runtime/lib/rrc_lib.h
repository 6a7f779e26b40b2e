/* SPDX-License-Identifier: MIT
 *
 * librrc.so internal definitions: the library's global state and the
 * interfaces between its files (one file per concern, see architecture.md
 * "librrc.so: capture inside the process").
 *
 * Memory of the library, and which of it is in an image:
 *  - `rrc_g` (struct rrc_lib_state, ordinary .bss): thread slots, generation
 *    counter, restore area, last image id. The restored process needs it,
 *    so it is in every image. The VMA(s) holding it and the control
 *    thread's stack are never registered with the userfaultfd and are
 *    dumped whole (their defined pages) in every image: the control thread
 *    keeps writing them between the scan and the fork.
 *  - the scratch arena (mmap'ed once, private anonymous): scan vectors, fd
 *    records, directory buffers. The snapshot child must read it, so it is
 *    NOT MADV_DONTFORK (that would hide it from the child); it is excluded
 *    from the image by address instead (RRC's "skipped VMA" idea).
 */
#ifndef RRC_LIB_H
#define RRC_LIB_H

#include <stdint.h>
#include <stddef.h>
#include <signal.h>
#include "rrc/image.h"
#include "rrc/control.h"
#include "rrc/sys.h"
#include "rrc/uapi.h"
#include "inotify.h"

#define RRC_PARK_SIG      64      /* SIGRTMAX: the park signal */
#define RRC_MAX_THREADS   1024
#define RRC_MAX_FDS       4096    /* fds above this are refused at dump */
#define RRC_MAX_UNIX      4096    /* unix sockets of the namespace a dump can look through */
#define RRC_MAX_LIBPIPES  256
#define RRC_CTL_STACK     (512 * 1024)

#define RRC_HIDDEN __attribute__((visibility("hidden")))

/* One parked thread. Written by the thread itself in the park handler. */
struct rrc_slot {
	struct rrc_thread t;
	uint64_t pending;   /* rt_sigpending() in the park handler (not in the image) */
};

struct rrc_range { uint64_t start, end; };

/* The copy snapshot's page store (precopy.c): page copies in runs. */
#define RRC_MAX_MISSED   4096
/* runs are kept in copy order: a later copy of a page replaces an earlier one */
struct rrc_pstore_run { uint64_t vaddr, npages, slot; };
/* A VMA and its name as read before a copy snapshot's pause (snapshot.c). */
struct rrc_vma_name {
	uint64_t start, end, pgoff, inode;
	uint32_t dev_major, dev_minor;
	uint32_t text_off, text_len;    /* in rrc_helper_box.vname_text, NUL after */
};

struct rrc_pstore {
	uint8_t *map;                   /* the mapping (0: not made yet) */
	uint64_t map_len;
	struct rrc_pstore_run *runs;    /* in copy order */
	uint64_t nr_runs, cap_runs;
	uint8_t *pages;                 /* page copies; slot i at pages + i * 4096 */
	uint64_t used, cap, populated;  /* in pages */
	uint32_t passes;                /* pre-copy passes of this dump */
	/* ranges pre-copy could not read (unmapped meanwhile): retried in the pause */
	struct rrc_range missed[RRC_MAX_MISSED];
	uint32_t nr_missed;
	int      mem_fd;                /* /proc/self/mem, for unreadable pages */
	/* the defined pages of the last copy image (its pagemap's ranges), two
	 * buffers: the writer fills defined[cur ^ 1], the dump's success makes
	 * it current. Valid only after a successful copy snapshot: a fork
	 * snapshot's child cannot hand its pagemap back. */
	struct rrc_range *defined[2];
	uint64_t nr_defined[2], cap_defined;
	uint32_t cur, defined_valid;
	uint64_t precopy_ns, precopy_pages, copy_pages, last_pause_pages;
	/* pages dropped since last armed, found by the pause's scan (rrc_scan) */
	struct page_region *holes;
	uint64_t nr_holes, cap_holes;
	struct rrc_range *wide;         /* where the scan looks for them (precopy.c) */
	uint64_t nr_wide, cap_wide;
	struct rrc_process proc_stable; /* read before the pause (rrc_copy_prefetch) */
};
#define RRC_HELPER_STACK (256 * 1024)

/* A pipe holding a copy of the bytes in flight of an application pipe
 * (pipes.c): the image writer reads them from it. */
struct rrc_libpipe { int rfd, wfd; uint32_t len; int32_t app_fd; };

/* The copy snapshot's pause helper (pause-helper.c): a process with a
 * memory of its own and the application's fd table, which reads the
 * memory map, the fd table and the TCP table on the second CPU while the
 * control thread scans. Its results come back through this mailbox, a
 * MAP_SHARED mapping at the same address in both processes. */
enum { RRC_PH_IDLE = 0, RRC_PH_READY, RRC_PH_GO, RRC_PH_DONE };
struct rrc_ph_vma {
	struct procmap_query q;
	uint32_t name_off, name_len;    /* in names[] */
};
struct rrc_helper_box {
	volatile uint32_t state;        /* shared futex: RRC_PH_* */
	volatile uint32_t map_done;     /* shared futex: the memory map is in */
	volatile uint32_t sleeping;     /* the helper waits on the futex (not spinning) */
	int32_t  app_pid;
	/* listen() backlogs (rrc_g.backlog, mirrored by the wrapper): the
	 * helper's copy of the library's memory is that of its start */
	int32_t  backlog[RRC_MAX_FDS];
	/* setsockopt counts (rrc_g.sockopt_gen, mirrored by the wrapper) */
	uint32_t sockopt_gen[RRC_MAX_FDS];
	/* inotify watches' paths (wrap-inotify.c, mirrored by the wrapper) */
	struct rrc_inotify_ent inotify[RRC_INOTIFY_WATCHES];
	/* the request, written by the control thread before GO */
	int32_t  image_fd, conn_fd, res_rfd, res_wfd;
	/* the record log's sink and the one RECORD handed over (-1: none):
	 * they change after the helper's start (rr-sink.h) */
	int32_t  log_fd, log_handed_fd;
	uint32_t do_tcp;
	int32_t  diag_fd;               /* the control thread's TCP table socket: not the application's */
	/* the results */
	int32_t  map_rc;                /* 0, or -errno of PROCMAP_QUERY */
	int32_t  fds_rc, tcp_rc;        /* 0, or -1 with err_* set */
	uint32_t err_code;
	int32_t  err_errno;
	char     err_msg[512];
	uint64_t go_ns, start_ns, map_ns, fds_ns, done_ns;  /* CLOCK_MONOTONIC */
	uint64_t nr_vmas, names_len;
	uint64_t fdbuf_len;
	uint32_t nr_fds, nr_libpipes;
	struct rrc_libpipe libpipes[RRC_MAX_LIBPIPES];
	uint32_t nr_tcp, tcp_dumps;
	uint32_t tcp_v6;                /* the fd table holds an AF_INET6 TCP socket */
	/* the memory map with the VMAs' names, read before the pause
	 * (rrc_copy_prefetch): the pause asks for a VMA's name only when this
	 * has no VMA with the same bounds, file and offset (0 entries: none);
	 * here so that the helper has it too */
	uint64_t nr_vnames, vname_len;
	struct rrc_vma_name *vnames;
	char    *vname_text;
	/* arrays in the same mapping */
	struct rrc_ph_vma *vmas;
	uint64_t cap_vmas;
	char    *names;
	uint64_t cap_names;
	uint8_t *fdbuf;
	struct rrc_tcp_stream *tcp;
};
struct rrc_pause_helper {
	long     pid;                   /* > 0 while it runs */
	struct rrc_helper_box *box;     /* mapped at the first start */
	uint64_t box_len;
	uint64_t spawn_ns;              /* the pause that started it: its cost */
	uint32_t starts;                /* helpers started by this process */
	uint64_t cpus[16];              /* the CPUs the application may use (1024) */
	int32_t  away_from;             /* the CPU the helper is kept off, -1: none */
	int      in_helper;             /* 1 in the helper process's own copy */
	int      joined;                /* this pause's results are in */
};

/* Persistent state: in .bss, hence in every image (see top of file). */
struct rrc_lib_state {
	struct rrc_restore_area restore_area;
	volatile uint32_t generation;   /* futex: bumped to release parked threads */
	volatile uint32_t parked;       /* futex: threads parked in this pause */
	volatile uint32_t nslots;       /* slots handed out in this pause */
	volatile uint32_t pausing;      /* 1 while a pause is in progress */
	uint8_t  last_image_id[16];     /* valid parent for the next incremental DUMP */
	uint32_t restored;              /* came from rrc-restore */
	uint32_t checkpoints;           /* DUMPs completed */
	/* the image being written by the snapshot child: its copy of these is
	 * what a process restored from that image finds here */
	uint8_t  cur_image_id[16];
	uint64_t cur_sequence;
	uint64_t last_sequence;         /* sequence of last_image_id */
	int      debug;                 /* RRC_DEBUG=1: timings to stderr */
	int      precopy_passes;        /* RRC_PRECOPY_PASSES (precopy.c), default 5 */
	int      test_prepause_ms;      /* RRC_TEST_PREPAUSE_MS, tests only: see control.c */
	int      no_pause_helper;       /* RRC_PAUSE_HELPER=0 (pause-helper.c) */
	uint64_t marker_frame;          /* a uffd-wp marker's pagemap entry (memory.c) */
	int      active;                /* RRC_CONTROL set and set-up succeeded */
	int      ctl_tid;               /* the control thread */
	int      pid;
	int      listen_fd;             /* control socket (RRC_FD_LIB_CONTROL) */
	int      conn_fd;               /* the connection being served, -1 if none */
	int      uffd;                  /* dirty tracking */
	int      pagemap_fd;            /* /proc/self/pagemap, for PAGEMAP_SCAN */
	int      maps_fd;               /* /proc/self/maps, for PROCMAP_QUERY */
	int      image_fd;              /* received with the DUMP request */
	char     control_path[108];
	void    *ctl_stack;             /* control thread stack (in the image) */
	/* the scratch arena (not in the image, see above) */
	void    *scratch;
	size_t   scratch_len;
	struct rrc_slot ctl_slot;       /* the control thread, RRC_THR_F_CONTROL */
	struct rrc_slot slots[RRC_MAX_THREADS];
	int32_t  backlog[RRC_MAX_FDS];  /* listen() backlog per fd, 0 = unknown */
	uint32_t sockopt_gen[RRC_MAX_FDS]; /* setsockopt calls per fd, twice each (sockets.c) */
};

extern struct rrc_lib_state rrc_g RRC_HIDDEN;

/* The scratch arena layout (all inside rrc_g.scratch). */
struct rrc_scratch {
	/* scan results: written page ranges, ascending */
	struct page_region *written;
	uint64_t nr_written, cap_written;
	uint64_t written_pages;
	uint64_t scan_overflow_from;    /* != 0: every page from here is dumped */
	/* untracked VMAs and always-dumped library ranges, ascending (one
	 * range for a run of adjacent application VMAs); room for vma_cap */
	struct rrc_range *untracked;
	uint32_t nr_untracked;
	uint32_t nr_newly_untracked;    /* to register after resume (excl. library ranges) */
	/* library-own ranges excluded from the image (the arena itself) */
	struct rrc_range lib_excluded[4];
	uint32_t nr_lib_excluded;
	/* library ranges always dumped whole and never registered */
	struct rrc_range lib_always[4];
	uint32_t nr_lib_always;
	/* fd records: a byte buffer of rrc_fd + path + data-placeholder */
	uint8_t *fdbuf;
	uint64_t fdbuf_len, fdbuf_cap;
	uint32_t nr_fds;
	/* the last successful capture's records (fds.c swaps the two buffers):
	 * a TCP connection found there is not asked its fixed properties again */
	uint8_t *fdprev;
	uint64_t fdprev_len;            /* 0: nothing to carry */
	/* st_dev of pipefs and sockfs, learnt when the arena is mapped (0:
	 * unknown; every fd is then classified by its /proc link) */
	uint64_t pipefs_dev, sockfs_dev, anonfs_dev;
	struct rrc_procattr procattr;   /* procattr.c, before the pause; the image's PROCATTR */
	/* "/proc/<pid>/task/<control thread>", as /proc names it (util.c) */
	char     proc_dir[48];
	/* pipe contents tee'd into library pipes: child reads them */
	struct rrc_libpipe libpipes[RRC_MAX_LIBPIPES];
	uint32_t nr_libpipes;
	/* quiesce: tids signalled */
	int32_t signalled[RRC_MAX_THREADS];
	uint32_t nr_signalled;
	/* result pipe: the snapshot child writes its rrc_ctl_dump_done */
	int      res_rfd, res_wfd;
	/* the snapshot child's own working memory (inside the arena, so it
	 * never shows up among the VMAs it dumps) */
	uint8_t *child_area;
	uint64_t child_area_len;
	/* how many VMAs a snapshot can list (vm.max_map_count when the arena
	 * was mapped, at least 65536) and room for their names */
	uint64_t vma_cap, vma_names_cap;
	/* the data directory's change journal (files-journal.c) */
	struct rrc_fj *journal;
	uint8_t *sysv;                  /* sysvipc.c: the SYSVIPC section, RRC_SYSV_CAP bytes */
	/* dump request */
	struct rrc_ctl_dump req;
	uint64_t created_ns;
	/* error reporting from the pause path */
	uint32_t err_code;
	int32_t  err_errno;
	char     err_msg[512];
	/* the TCP stream table (sk-diag.c): captured in the pause, emitted by
	 * the snapshot child; two arrays of cap_tcp records for consecutive dumps */
	struct rrc_tcp_stream *tcp, *tcp_prev;
	uint32_t nr_tcp, cap_tcp;
	uint32_t tcp_dumps;             /* NETLINK_SOCK_DIAG dumps the last capture took */
	uint32_t tcp_v6;                /* the fd table holds an AF_INET6 TCP socket (sockets.c) */
	int      diag_fd;               /* the TCP table's netlink socket while the control thread
					 * takes the table in a pause, the helper listing the fds (-1) */
	uint8_t  nlbuf[65536];          /* netlink receive buffer */
	/* the unix sockets of the namespace (sk-unix.c): read at the walk's
	 * first connected unix socket, on a netlink socket of the walk's own */
	int      unix_nl;               /* that socket + 1 while open, 0: none */
	uint32_t nr_unix, unix_read;
	struct rrc_unix_ent { uint64_t ino, peer; uint32_t shutdown, rqueue; } unix_tab[RRC_MAX_UNIX];
	/* general buffers */
	char     dirbuf[32768];
	char     pathbuf[RRC_PATH_MAX + 64];
	struct page_region uvec[512];   /* untracked-VMA scan */
	uint64_t dbg_ns[12];            /* phase timings, logged with RRC_DEBUG=1 */
	uint64_t dbg_quiesce[4];        /* quiesce.c: start, first signals sent, first all parked, end */
	int      walk_fd;               /* the directory fd of the current getdents walk */
	char     textbuf[1 << 22];      /* fdinfo of big epoll sets */
	struct rrc_pstore pstore;       /* the copy snapshot (precopy.c) */
	struct rrc_pause_helper helper;
	/* the pause helper's stack: the scratch is private, so the helper
	 * process has its own copy of it */
	uint8_t  helper_stack[RRC_HELPER_STACK] __attribute__((aligned(64)));
};
extern struct rrc_scratch *rrc_s RRC_HIDDEN;

/* ---- files-journal.c (ASYNC-SIGNAL-SAFE): the data directory's changes ----
 * The journal header and records live in the scratch arena (not in images,
 * fresh after a restore); see files-journal.c. */
#define RRC_FJ_CAP (256ull << 20)   /* record bytes between two checkpoints */
struct rrc_fj {
	volatile uint32_t lock;         /* futex: 0 free, 1 held, 2 contended */
	volatile int32_t owner;         /* tid holding it */
	uint32_t recursion;
	volatile uint32_t broken;       /* sticky: every dump is refused (why) */
	char     why[200];
	uint64_t len, nr_ops, data_bytes;       /* records since the last checkpoint */
	uint64_t cut_len, cut_nr, cut_bytes;    /* the part the current image holds */
	uint64_t cap;
	uint8_t *data;
};
struct iovec;
extern __thread uint32_t rrc_hook_depth __attribute__((tls_model("initial-exec"))) RRC_HIDDEN;
extern __thread uint32_t rrc_park_pending __attribute__((tls_model("initial-exec"))) RRC_HIDDEN;
void rrc_fj_init(void) RRC_HIDDEN;          /* constructor: $RRC_DATA_DIR */
int rrc_fj_enabled(void) RRC_HIDDEN;
const char *rrc_fj_dir(void) RRC_HIDDEN;
void rrc_hook_enter(void) RRC_HIDDEN;       /* the hook guard (parks on leave if asked) */
void rrc_hook_leave(void) RRC_HIDDEN;
void rrc_fj_lock(void) RRC_HIDDEN;
void rrc_fj_unlock(void) RRC_HIDDEN;
void rrc_fj_break(const char *why) RRC_HIDDEN;
int rrc_fj_fd_tracked(int fd) RRC_HIDDEN;
void rrc_fj_fd_set(int fd, int on) RRC_HIDDEN;
long rrc_fj_fd_relpath(int fd, char *out, size_t cap) RRC_HIDDEN;
long rrc_fj_relpath(int dirfd, const char *path, char *out, size_t cap) RRC_HIDDEN;
void rrc_fj_append(uint32_t type, uint32_t mode, const char *rel, uint32_t rel_len,
		   const void *data, uint64_t data_len, uint64_t offset, uint64_t length) RRC_HIDDEN;
void rrc_fj_append_iov(uint32_t type, uint32_t mode, const char *rel, uint32_t rel_len,
		       const struct iovec *iov, int iovcnt, uint64_t data_len,
		       uint64_t offset, uint64_t length) RRC_HIDDEN;
void rrc_fj_import_file(const char *rel, uint32_t rel_len) RRC_HIDDEN;
int rrc_fj_check(void) RRC_HIDDEN;          /* pause: 0 or -1 with the error set */
void rrc_fj_cut(void) RRC_HIDDEN;           /* pause, before the fork */
int rrc_fj_section(struct rrc_fileops_header *hdr, const uint8_t **p, uint64_t *len) RRC_HIDDEN;
void rrc_fj_commit(int ok) RRC_HIDDEN;      /* parent, after the child */
void rrc_fj_discard(uint64_t *ops, uint64_t *bytes) RRC_HIDDEN; /* HOLD, threads parked */

/* ---- util.c (ASYNC-SIGNAL-SAFE) ---- */
/* `len` bytes of private anonymous rw memory between two PROT_NONE guard
 * pages (never merged with an application mapping next to it: images
 * leave the library's memory out by whole VMAs), or -errno. */
long rrc_map_guarded(uint64_t len) RRC_HIDDEN;
size_t rrc_strlen(const char *s) RRC_HIDDEN;
int rrc_strncmp(const char *a, const char *b, size_t n) RRC_HIDDEN;
int rrc_startswith(const char *s, const char *pfx) RRC_HIDDEN;
int rrc_path_deleted(const char *path, size_t len) RRC_HIDDEN;      /* ends in " (deleted)" */
int rrc_path_cut_deleted(char *path, size_t len) RRC_HIDDEN;        /* and cuts it off: 1 if it did */
#define RRC_SYSV_CAP (256u << 10) /* sysvipc.c's buffer in the scratch arena */ /* ends in " (deleted)" */
void rrc_memcpy(void *d, const void *s, size_t n) RRC_HIDDEN;
void rrc_memset(void *d, int c, size_t n) RRC_HIDDEN;
int rrc_memeq(const void *a, const void *b, size_t n) RRC_HIDDEN;
/* The IPv4 address and port (network byte order) of a sockaddr of `len`
 * bytes: AF_INET, or an IPv4-mapped AF_INET6 (a dual-stack listener's
 * connection from an IPv4 client, which the gate knows by its IPv4
 * addresses). 1 if it is one, 0 if not. */
int rrc_sockaddr_v4(const void *sa, uint32_t len, uint32_t *addr, uint16_t *port) RRC_HIDDEN;
/* appends to a bounded buffer; returns new length */
size_t rrc_bput(char *buf, size_t cap, size_t len, const char *s) RRC_HIDDEN;
size_t rrc_bput_u64(char *buf, size_t cap, size_t len, uint64_t v) RRC_HIDDEN;
size_t rrc_bput_hex(char *buf, size_t cap, size_t len, uint64_t v) RRC_HIDDEN;
/* parse an unsigned number (base 10, or 16 with base=16, 8 with base=8); *end after it */
uint64_t rrc_parse_u64(const char *s, int base, const char **end) RRC_HIDDEN;
const char *rrc_skip_ws(const char *s) RRC_HIDDEN;
/* read a whole small file into buf (NUL terminated); returns bytes or -errno */
long rrc_read_file(const char *path, char *buf, size_t cap) RRC_HIDDEN;
/* "<the control thread's /proc dir>/<sub>[/<num>]" (num < 0: none),
 * learnt by rrc_proc_dir_learn in the control thread */
size_t rrc_proc_path(char *buf, size_t cap, const char *sub, long num) RRC_HIDDEN;
void rrc_proc_dir_learn(void) RRC_HIDDEN;
long rrc_read_fd_all(int fd, char *buf, size_t cap) RRC_HIDDEN;
/* write all bytes; returns 0 or -errno */
long rrc_write_all(int fd, const void *buf, size_t n) RRC_HIDDEN;
/* iterate numeric entries of a /proc directory; cb returns nonzero to stop */
long rrc_for_each_num_dirent(const char *dir, char *buf, size_t cap,
			     int (*cb)(long num, void *arg), void *arg) RRC_HIDDEN;
/* a line at a time over a buffer */
const char *rrc_next_line(const char *p, const char *end) RRC_HIDDEN;
/* error recording (pause path) */
void rrc_set_err(uint32_t code, int err, const char *a, long num, const char *b) RRC_HIDDEN;
void rrc_log(const char *msg) RRC_HIDDEN; /* one line to stderr: "rrc: msg\n" */

/* ---- ctx.S ---- */
int rrc_ctx_save(struct rrc_resume_ctx *ctx) __attribute__((returns_twice)) RRC_HIDDEN;
__attribute__((noreturn)) void rrc_call_on_stack(void *stack_top, void (*fn)(void)) RRC_HIDDEN;

/* ---- quiesce.c (ASYNC-SIGNAL-SAFE) ---- */
void rrc_park_handler(int sig, siginfo_t *si, void *uc) RRC_HIDDEN;
int rrc_quiesce(void) RRC_HIDDEN;          /* 0, or -1 with rrc_s->err_* set (threads released) */
void rrc_release(void) RRC_HIDDEN;         /* bump generation, wake everybody */
void rrc_fill_self_slot(struct rrc_slot *s) RRC_HIDDEN;

/* ---- memory.c ---- */
int rrc_uffd_open(void) RRC_HIDDEN;          /* returns fd or -errno */
struct procmap_query;
long rrc_vma_query(int maps_fd, uint64_t addr, uint64_t flags, struct procmap_query *q, char *name,
		   uint32_t cap) RRC_HIDDEN;     /* PROCMAP_QUERY: 0 or -ENOENT past the last VMA */
void rrc_lib_ranges(void) RRC_HIDDEN;        /* fills lib_excluded / lib_always */
uint32_t rrc_lib_excluded_sorted(struct rrc_range out[4]) RRC_HIDDEN;
int rrc_register_all(int wp_arm) RRC_HIDDEN; /* register every private VMA; returns count */
/* the dropped pages a copy snapshot's scan also finds (memory.c, rrc_scan) */
struct rrc_holes {
	const struct rrc_range *wide;   /* ascending, 2 MiB-aligned: where to look */
	uint64_t nr_wide;
	struct page_region *v;          /* out */
	uint64_t nr, cap;
};
int rrc_scan(struct rrc_holes *h) RRC_HIDDEN; /* pause path: written + untracked; -1 on error */
void rrc_marker_learn(void) RRC_HIDDEN;      /* at start and after a restore */
uint64_t rrc_drop_markers(int pm, const struct page_region *v, uint64_t n, struct page_region *out,
			  uint64_t cap, uint64_t *stop) RRC_HIDDEN;
void rrc_register_untracked(void) RRC_HIDDEN;/* after resume */
int rrc_check_maps(void) RRC_HIDDEN;         /* refusals from /proc/self/maps: 0 or -1 */
int rrc_in_ranges(const struct rrc_range *r, uint32_t n, uint64_t a, uint64_t b) RRC_HIDDEN;
int rrc_within_ranges(const struct rrc_range *r, uint32_t n, uint64_t a, uint64_t b) RRC_HIDDEN;

/* ---- fds.c and one file per kind ---- */
int rrc_fds_check(void) RRC_HIDDEN;          /* io_uring and unsupported kinds: 0 or -1 */
int rrc_fds_capture(void) RRC_HIDDEN;        /* pause path: 0 or -1 */
/* procattr.c: the process's attributes into rrc_s->procattr, before the
 * pause; a seccomp filter refuses the dump (0 or -1, the error set) */
int rrc_procattr_capture(void) RRC_HIDDEN;
int rrc_fds_share(void) RRC_HIDDEN;          /* fds-shared.c: later numbers of one open file -> RRC_FD_DUP */
void rrc_fds_cleanup(void) RRC_HIDDEN;       /* parent, after the child: close library pipes */
struct rrc_fd *rrc_fd_append(uint32_t path_len, uint32_t data_len) RRC_HIDDEN;
/* n bytes more of the last record's inline data (epoll entries, file
 * locks); 0, or -1 with the error "<full><fd>" set. The buffer never
 * moves: the record's pointer stays valid; its data_len is the caller's. */
int rrc_fd_data_put(const void *p, uint32_t n, const char *full, int fd) RRC_HIDDEN;
/* the same, for bytes the caller writes in place (a peek, a pread): n
 * bytes padded to 8 with zeros (*padded, if asked), or NULL with the error */
uint8_t *rrc_fd_data_reserve(uint32_t n, uint32_t *padded, const char *full, int fd) RRC_HIDDEN;
int rrc_fd_kind_of_link(const char *link) RRC_HIDDEN;
int rrc_capture_reg(struct rrc_fd *f, const char *link) RRC_HIDDEN;     /* files-reg.c */
int rrc_capture_locks(struct rrc_fd *f, int fd) RRC_HIDDEN;             /* file-locks.c: f's data */
int rrc_capture_ghost(struct rrc_fd *f, int fd) RRC_HIDDEN;             /* files-ghost.c: contents as data */
int rrc_ghosts_check(void) RRC_HIDDEN;      /* files-ghost.c, after the walk: one open file per ghost */
int rrc_capture_pipe(struct rrc_fd *f, int fd) RRC_HIDDEN;              /* pipes.c */
int rrc_capture_eventfd(struct rrc_fd *f, int fd) RRC_HIDDEN;           /* eventfd.c */
int rrc_capture_epoll(int fd, struct rrc_fd *f) RRC_HIDDEN;             /* epoll.c */
int rrc_capture_timerfd(struct rrc_fd *f, int fd) RRC_HIDDEN;           /* timerfd.c */
int rrc_capture_signalfd(struct rrc_fd *f, int fd) RRC_HIDDEN;          /* signalfd.c */
int rrc_capture_inotify(struct rrc_fd *f, int fd) RRC_HIDDEN;           /* inotify.c */
int rrc_capture_fifo(struct rrc_fd *f, int fd, const char *link) RRC_HIDDEN; /* pipes.c */
int rrc_capture_socket(struct rrc_fd *f, int fd, const struct rrc_fd *prev) RRC_HIDDEN; /* sockets.c */
/* Whether a record's data follows it in the scratch fd buffer (epoll
 * entries, a socket's options); pipe data lives in a library pipe. */
static inline int rrc_fd_data_inline(const struct rrc_fd *f)
{
	/* a DUP keeps the place of the record it replaced (fds-shared.c):
	 * any data it has is that record's inline data */
	return f->kind == RRC_FD_EPOLL || f->kind == RRC_FD_DUP || f->kind == RRC_FD_REG || f->kind == RRC_FD_DIR ||
	       f->kind == RRC_FD_GHOST || f->kind == RRC_FD_INOTIFY || f->kind == RRC_FD_MQUEUE ||
	       (f->kind >= RRC_FD_INET_LISTEN && f->kind <= RRC_FD_UNIX_OTHER);
}
/* Where a record's signal-driven I/O (struct rrc_fown, with RRC_FD_F_FOWN)
 * is in the scratch fd buffer: after the inline data, outside data_len
 * (the snapshot appends it to the data in the image). */
static inline uint64_t rrc_fd_fown_off(const struct rrc_fd *f)
{
	return sizeof *f + ((f->path_len + 7ull) & ~7ull) + (rrc_fd_data_inline(f) ? f->data_len : 0);
}
/* size of a record in the scratch fd buffer: struct, path padded to 8,
 * then the inline data (padded to 8 too: every inline datum is a
 * multiple), then its struct rrc_fown if it has one */
static inline uint64_t rrc_fd_rec_size(const struct rrc_fd *f)
{
	return rrc_fd_fown_off(f) + ((f->fd_flags & RRC_FD_F_FOWN) ? sizeof(struct rrc_fown) : 0);
}
/* sockets.c: a socket's options appended after its record (the record is
 * the last in the fd buffer); prev: the last capture's record of the fd */
int rrc_capture_sockopts(struct rrc_fd *f, int fd, const struct rrc_fd *prev) RRC_HIDDEN;
/* sk-unix.c: a connected unix socket's peer, shutdown and queued bytes
 * appended after its options (the record is the last); the walk's end
 * closes what it opened */
int rrc_capture_unix_peer(struct rrc_fd *f, int fd) RRC_HIDDEN;
void rrc_unix_walk_end(void) RRC_HIDDEN;
/* sk-diag.c: one NETLINK_SOCK_DIAG dump (body: the family's request,
 * after the netlink header), each answer to each() (which returns 0, or
 * < 0 to stop with that); 0 at NLMSG_DONE or -errno */
long rrc_diag_dump(int nl, const void *body, size_t body_len, uint32_t seq, uint8_t *buf, size_t buflen,
		   long (*each)(const uint8_t *msg, long len, void *arg), void *arg) RRC_HIDDEN;
/* the setsockopt wrapper, before and after the call (ASYNC-SIGNAL-SAFE) */
void rrc_sockopt_bump(int fd) RRC_HIDDEN;
long rrc_read_fdinfo(int fd, char *buf, size_t cap) RRC_HIDDEN;
const char *rrc_fdinfo_field(const char *buf, const char *key) RRC_HIDDEN;

/* ---- sk-diag.c (ASYNC-SIGNAL-SAFE): the TCP stream table ---- */
/* Dumps every TCP socket of the current netns into out[0..cap) until the
 * sequence values settle (nl_fd: a NETLINK_SOCK_DIAG socket, or -1 for
 * one of its own; spare: a second array of cap records; v6: the AF_INET6
 * sockets too); returns the count, -ENOSPC, -EAGAIN (did not settle) or
 * -errno. */
long rrc_tcp_table_read(int nl_fd, struct rrc_tcp_stream *out, struct rrc_tcp_stream *spare, uint32_t cap,
			uint8_t *buf, size_t buflen, int v6, uint32_t *dumps) RRC_HIDDEN;
/* A NETLINK_SOCK_DIAG socket, or -errno. ASYNC-SIGNAL-SAFE. */
int rrc_tcp_diag_socket(void) RRC_HIDDEN;
/* pause path, on nl_fd or (-1) a socket of its own: 0, or -1 with rrc_s->err_* set */
int rrc_tcp_capture(int nl_fd) RRC_HIDDEN;

/* ---- precopy.c: the snapshot by copy ---- */
int rrc_precopy(int full) RRC_HIDDEN;        /* before the pause: 0 or -1 with the error set */
int rrc_pstore_range(struct rrc_range *r) RRC_HIDDEN;
int rrc_pstore_put(uint64_t a, uint64_t b, int readable) RRC_HIDDEN; /* pause: 0 or -1 */
void rrc_pstore_done(int ok) RRC_HIDDEN;     /* after the writer (ok: the image is complete) */
void rrc_pstore_forget(void) RRC_HIDDEN;     /* a fork snapshot: no defined set to carry */
long rrc_clone_on_stack(unsigned long flags, void *stack_top, void (*fn)(void)) RRC_HIDDEN; /* ctx.S */

/* ---- pause-helper.c: the copy snapshot's second CPU ---- */
int rrc_phelper_spawn(void) RRC_HIDDEN;      /* pause: 1 if the helper runs (started if need be) */
void rrc_phelper_go(int tcp, int diag_fd) RRC_HIDDEN; /* pause: memory map, fd table, TCP table if asked */
int rrc_phelper_wait_map(void) RRC_HIDDEN;   /* pause: 0, or -1 with the error set */
int rrc_phelper_join(void) RRC_HIDDEN;       /* pause: its fd and TCP tables in; 0 or -1 */
void rrc_phelper_settle(void) RRC_HIDDEN;    /* after a failed pause: wait for it to finish */
struct rrc_helper_box *rrc_phelper_box(void) RRC_HIDDEN; /* mapped if need be; NULL if it cannot be */
void rrc_phelper_reap(void) RRC_HIDDEN;      /* before any dump: reap a dead helper */
void rrc_phelper_ready(void) RRC_HIDDEN;     /* before a copy snapshot's pause: have it spin */
int32_t rrc_phelper_backlog(int fd) RRC_HIDDEN; /* listen() backlog of fd, 0 = unknown */

/* ---- snapshot.c (ASYNC-SIGNAL-SAFE, runs in the clone()d child) ---- */
__attribute__((noreturn)) void rrc_snapshot_main(void) RRC_HIDDEN;
/* the copy snapshot: state captured in the pause (0 or -1 with the error
 * set), the lib ranges last (after the control thread's context is
 * saved), then the writer (a CLONE_VM process) */
int rrc_copy_prefetch(void) RRC_HIDDEN;
/* One VMA at or after addr through maps_fd, its name taken from the names
 * read before the pause when they still hold (cursor: 0 at the start of a
 * walk). ASYNC-SIGNAL-SAFE. */
long rrc_vma_query_named(int maps_fd, uint64_t addr, struct procmap_query *q, char *name, uint64_t *cursor) RRC_HIDDEN;
void rrc_copy_begin(int carried) RRC_HIDDEN;
/* the process's fields, signal actions and memory map; with the pause
 * helper's mailbox the map is the one the helper read (it waits for it) */
int rrc_copy_capture(struct rrc_helper_box *from_helper) RRC_HIDDEN;
int rrc_copy_capture_pages(void) RRC_HIDDEN;
int rrc_copy_capture_last(void) RRC_HIDDEN;
__attribute__((noreturn)) void rrc_copy_writer_main(void) RRC_HIDDEN;
/* child exit codes (the parent turns them into messages) */
enum { RRC_SNAP_OK = 0, RRC_SNAP_EIO = 10, RRC_SNAP_ENOMEM, RRC_SNAP_MAPS, RRC_SNAP_SCAN,
       RRC_SNAP_SHARED_WRITE, RRC_SNAP_PIPE, RRC_SNAP_PROC, RRC_SNAP_TOOBIG, RRC_SNAP_LIBMERGE,
       RRC_SNAP_EPIPE, RRC_SNAP_INCOMPLETE, RRC_SNAP_DELETED, RRC_SNAP_VMAS };
const char *rrc_snapshot_strerror(int code) RRC_HIDDEN;
/* The snapshot child's working memory for a process of up to vma_cap
 * VMAs (init.c sizes the arena with it). */
uint64_t rrc_snapshot_area_len(uint64_t vma_cap) RRC_HIDDEN;
uint64_t rrc_vma_names_cap(uint64_t vma_cap) RRC_HIDDEN;

/* ---- control.c / restored.c ---- */
void *rrc_control_main(void *arg) RRC_HIDDEN;
void rrc_post_restore(void) RRC_HIDDEN;

/* ---- init.c ---- */
extern int (*rrc_real_sigaction)(int, const struct sigaction *, struct sigaction *) RRC_HIDDEN;
int rrc_scratch_map(void) RRC_HIDDEN;
/* "prefix what: strerror(err)" to the log (not async-signal-safe: strerror) */
void rrc_log_failure(const char *prefix, const char *what, int err) RRC_HIDDEN;

/* atomics */
#define RRC_ATOMIC_INC(p) __atomic_add_fetch((p), 1, __ATOMIC_SEQ_CST)
#define RRC_LOAD(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)
#define RRC_STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)

#endif /* RRC_LIB_H */
