/* SPDX-License-Identifier: MIT
 *
 * The rrc checkpoint image format, version 1.
 *
 * This header is the single definition of the format. The Rust crate
 * rrc-image mirrors it field for field; tests/vectors/ holds images written
 * by the C side that the Rust side must parse (and the reverse), so the two
 * cannot drift apart silently. docs/image-format.md explains it in prose.
 *
 * One checkpoint is one file, DIR/checkpoint.rrc:
 *
 *   rrc_image_header
 *   section*            (rrc_section_header + payload, payload padded to 8)
 *   END section         (payload: rrc_end; its absence means "truncated")
 *
 * Everything is little-endian with the natural x86-64 alignment of the
 * structs below (all fields are fixed-width, padding is explicit).
 * Every section carries a CRC32C of its payload and of its own header; the
 * image header carries a CRC32C of itself. A reader must verify all of them
 * before using anything.
 *
 * Incremental images: an image with a parent (parent_id != 0) holds only
 * the pages written since the parent. Its VMA list, page map, threads,
 * fds and process state are complete (not deltas): only page *data* is
 * looked up in ancestors. DIR/parent is a symlink to the parent's DIR.
 */
#ifndef RRC_IMAGE_H
#define RRC_IMAGE_H

#include <stdint.h>

#define RRC_IMAGE_MAGIC      "RRCIMG\0\0" /* 8 bytes */
#define RRC_IMAGE_VERSION    1u
#define RRC_IMAGE_FILE_NAME  "checkpoint.rrc"
#define RRC_IMAGE_PARENT_LINK "parent"
#define RRC_PAGE_SIZE        4096u

/* rrc_image_header.flags */
#define RRC_IMG_F_FULL       (1u << 0) /* no parent: every defined page is here */

struct rrc_image_header {
	char     magic[8];        /* RRC_IMAGE_MAGIC */
	uint32_t version;         /* RRC_IMAGE_VERSION */
	uint32_t flags;           /* RRC_IMG_F_* */
	uint8_t  image_id[16];    /* random, unique per checkpoint */
	uint8_t  parent_id[16];   /* image_id of the parent, zero when full */
	uint64_t sequence;        /* 0 for a full image, parent's + 1 otherwise */
	uint64_t created_ns;      /* CLOCK_REALTIME when the snapshot was taken */
	uint32_t header_crc;      /* CRC32C of the bytes before this field */
	uint32_t reserved;        /* zero */
};                                /* 72 bytes */

enum rrc_section_type {
	RRC_SEC_PROCESS = 1,      /* struct rrc_process + strings */
	RRC_SEC_VMAS    = 2,      /* rrc_vma records */
	RRC_SEC_PAGEMAP = 3,      /* rrc_pagemap_entry array */
	RRC_SEC_THREADS = 4,      /* rrc_thread array */
	RRC_SEC_FDS     = 5,      /* rrc_fd records */
	RRC_SEC_SIGNALS = 6,      /* rrc_sigaction[64] */
	RRC_SEC_PAGES   = 7,      /* raw page data, in pagemap order */
	RRC_SEC_TCP     = 8,      /* rrc_tcp_table + rrc_tcp_stream records */
	RRC_SEC_FILEOPS = 9,      /* rrc_fileops_header + rrc_fileop records (optional) */
	RRC_SEC_PROCATTR = 10,    /* struct rrc_procattr (optional: older images have none) */
	RRC_SEC_CREDS   = 11,     /* struct rrc_creds (optional: older images have none) */
	RRC_SEC_SYSVIPC = 12,     /* struct rrc_sysvipc + objects (optional: only when there is something) */
	RRC_SEC_FILEIDS = 13,     /* struct rrc_file_ids + records (optional: older images have none) */
	RRC_SEC_END     = 0xffff, /* struct rrc_end; always last */
};

struct rrc_section_header {
	uint32_t type;            /* enum rrc_section_type */
	uint32_t flags;           /* zero in version 1 */
	uint64_t length;          /* payload bytes, excluding padding */
	uint32_t payload_crc;     /* CRC32C of the payload */
	uint32_t header_crc;      /* CRC32C of the 20 bytes before this field */
};                                /* 24 bytes; payload follows, padded to 8 */

struct rrc_end {
	uint32_t sections;        /* number of sections before END */
	uint32_t reserved;
	uint64_t image_bytes;     /* file offset of the END section header */
};

/* ---- PROCESS ---------------------------------------------------------- */

#define RRC_AUXV_MAX   64     /* uint64_t words */
#define RRC_RLIMIT_MAX 16
#define RRC_PATH_MAX   4096

struct rrc_rlimit { uint64_t cur, max; };

/* The executable was deleted since the process started (an upgrade put
 * another file at its path): exe_path is that path, without the kernel's
 * " (deleted)", and the restored process's /proc/PID/exe is the file
 * there then (runtime/lib/maps-deleted.c). */
#define RRC_PROC_EXE_REPLACED (1u << 0)
struct rrc_process {
	uint32_t pid;             /* pid inside its pid namespace (always 1 under rrc exec) */
	uint32_t umask;
	uint32_t personality;
	uint32_t nr_threads;      /* entries in the THREADS section */
	/* mm fields, as in /proc/PID/stat and struct prctl_mm_map */
	uint64_t start_code, end_code, start_data, end_data;
	uint64_t start_brk, brk, start_stack;
	uint64_t arg_start, arg_end, env_start, env_end;
	uint64_t auxv[RRC_AUXV_MAX];
	uint32_t auxv_words;      /* valid words in auxv (pairs, ending with AT_NULL) */
	uint32_t flags;           /* RRC_PROC_* (0 in images before them) */
	struct rrc_rlimit rlimits[RRC_RLIMIT_MAX];
	/* librrc.so's restore handshake area (struct rrc_restore_area) in the
	 * process's memory: the restorer fills it before resuming the threads. */
	uint64_t restore_area_addr;
	char     comm[16];
	char     exe_path[RRC_PATH_MAX];
	char     cwd[RRC_PATH_MAX];
};

/* ---- PROCATTR --------------------------------------------------------- */

/* Process attributes beyond struct rrc_process, read just before the pause
 * (control.c) and set again by the restorer (main.c). A reader takes the
 * fields it knows of a larger size (a later version), refuses a smaller. */
#define RRC_PA_OOM_SCORE_ADJ  (1u << 0)   /* oom_score_adj was read */
#define RRC_PA_ITIMERS        (1u << 1)   /* itimers were read */
#define RRC_PA_UTS            (1u << 2)   /* nodename and domainname were read */
#define RRC_PA_MEMBARRIER     (1u << 3)   /* membarrier was read */
struct rrc_itimer {               /* struct itimerval, 64-bit */
	int64_t interval_sec, interval_usec;
	int64_t value_sec, value_usec;   /* remaining (0: disarmed) */
};
struct rrc_procattr {
	uint32_t size;            /* sizeof(struct rrc_procattr) of the writer */
	uint32_t valid;           /* RRC_PA_* */
	int32_t  oom_score_adj;   /* /proc/self/oom_score_adj */
	uint32_t no_new_privs;    /* the main thread's NoNewPrivs */
	uint32_t child_subreaper; /* PR_GET_CHILD_SUBREAPER */
	uint32_t thp_disable;     /* PR_GET_THP_DISABLE */
	uint64_t reserved[2];
	/* ITIMER_REAL, ITIMER_VIRTUAL, ITIMER_PROF (getitimer just before the
	 * pause): set again with the time that was left */
	struct rrc_itimer itimers[3];
	/* The host and domain names of the process's UTS namespace (uname),
	 * the container's own: set again in the restored one's (after
	 * RRC_PROCATTR_SIZE_V1: an image of before has none) */
	char     nodename[65];
	char     domainname[65];
	uint8_t  pad[2];
	/* The private expedited membarrier commands the process registered
	 * for (MEMBARRIER_CMD_PRIVATE_EXPEDITED, _SYNC_CORE, _RSEQ: their
	 * command bits), registered again by the restorer, whose mm the
	 * restored process keeps */
	uint32_t membarrier;
};                                /* 272 bytes */
#define RRC_PROCATTR_SIZE_V1 136u /* the first version's size, the least a reader takes */

/* ---- CREDS ------------------------------------------------------------ */

/* The process's credentials (runtime/lib/creds.c): the main thread's, read
 * from /proc/self/status and prctl just before the pause, which every
 * thread has (glibc's setuid and its kin change all threads at once; the
 * pause refuses a control thread whose ids differ). The restorer gives
 * them to every thread (restore/pie/restorer.c, common/creds.c) once
 * nothing it still has to do needs root; the library's control thread
 * takes them last (restored.c). `dumpable` is the application's
 * PR_GET_DUMPABLE, not the one the dump ran with: a dump makes the process
 * dumpable for its duration (a setuid cleared it, and the kernel then
 * denies the process its own /proc/self/pagemap and mem). */
#define RRC_CREDS_GROUPS_MAX 64
struct rrc_creds {
	uint32_t uid, euid, suid, fsuid;
	uint32_t gid, egid, sgid, fsgid;
	uint64_t cap_inh, cap_prm, cap_eff, cap_bnd, cap_amb; /* bit n: capability n */
	uint32_t secbits;         /* PR_GET_SECUREBITS */
	uint32_t dumpable;        /* the application's PR_GET_DUMPABLE: 0 or 1 */
	uint32_t nr_groups;       /* valid entries of groups */
	uint32_t reserved;
	uint32_t groups[RRC_CREDS_GROUPS_MAX]; /* supplementary groups */
};                                /* 344 bytes; the section ends here, or: */

/* Threads whose capability sets differ from the main thread's (capset is
 * a thread's own): after struct rrc_creds, a count and its reserved word,
 * then that many of these; a section without differing threads stops at
 * the struct (344 bytes, as before them). */
#define RRC_THREAD_CAPS_MAX 64
struct rrc_thread_caps {
	uint32_t tid, reserved;
	uint64_t cap_inh, cap_prm, cap_eff, cap_amb; /* bit n: capability n */
};                                /* 40 bytes */

/* ---- SYSVIPC (optional) ------------------------------------------------ */

/* What the process owns in its IPC namespace (rrc starts every process in
 * one of its own): the namespace's SysV IPC limits (sysctls), when they
 * differ from the ones it started (or was restored) with, and its SysV
 * semaphore sets and
 * message queues with their ids, keys, owners, modes, values and
 * messages (runtime/lib/sysvipc.c, in the pause; restore/sysvipc.c makes
 * them again with the same ids through kernel/sem_next_id and
 * msg_next_id). Shared memory segments are refused at dump.
 *
 * Payload: struct rrc_sysvipc, then nr_sems records (struct
 * rrc_sysv_sem, then nsems u16 values, padded to 8), then nr_msqs records
 * (struct rrc_sysv_msq, then nr_msgs messages: struct rrc_sysv_msg and
 * len bytes, padded to 8). */
#define RRC_SYSVIPC_VERSION 1u
enum rrc_ipc_sysctl {             /* rrc_sysvipc.sysctl[]: /proc/sys/kernel/... */
	RRC_IPC_SEM_MSL, RRC_IPC_SEM_MNS, RRC_IPC_SEM_OPM, RRC_IPC_SEM_MNI, /* sem */
	RRC_IPC_MSGMAX, RRC_IPC_MSGMNB, RRC_IPC_MSGMNI,
	RRC_IPC_SHMMAX, RRC_IPC_SHMALL, RRC_IPC_SHMMNI,
	RRC_IPC_SYSCTLS           /* 10 used of the 16 slots */
};
struct rrc_sysvipc {
	uint32_t version;         /* RRC_SYSVIPC_VERSION */
	uint32_t nr_sems, nr_msqs;
	uint32_t sysctls_valid;   /* bit i: sysctl[i] is set (the others: the new namespace's) */
	uint64_t sysctl[16];      /* enum rrc_ipc_sysctl */
};                                /* 144 bytes */
struct rrc_sysv_perm {
	int32_t  key, id;
	uint32_t uid, gid, cuid, cgid, mode, reserved;
};                                /* 32 bytes */
struct rrc_sysv_sem {
	struct rrc_sysv_perm perm;
	uint32_t nsems, reserved;
};                                /* 40 bytes, then nsems u16 values, padded to 8 */
struct rrc_sysv_msq {
	struct rrc_sysv_perm perm;
	uint64_t qbytes;          /* msg_qbytes: the queue's limit */
	uint32_t nr_msgs, reserved;
};                                /* 48 bytes, then the messages, oldest first */
struct rrc_sysv_msg {
	int64_t  mtype;
	uint32_t len, reserved;
};                                /* 16 bytes, then len bytes, padded to 8 */

/* ---- FILEIDS (optional) ------------------------------------------------ */

/* Which file each file mapping maps: a restore maps it again by its path,
 * and a host with another version of it there (a failover onto a backup
 * upgraded apart, a restore after an upgrade) would give the process
 * another file's pages under its own written ones. Each distinct path of
 * the VMAS section's file mappings, with its size and modification time
 * as the image writer found them (dpkg keeps a package's mtimes, so one
 * version has one on every host); rrc-restore refuses a file that is not
 * that one (restore/mem-plan.c). Payload: struct rrc_file_ids, then count
 * records (struct rrc_file_id, then path_len bytes of path, padded to 8),
 * in the order of the VMAs. */
#define RRC_FILEID_REPLACED (1u << 0) /* the path named another file than the
				       * mapping's by the time the image was written */
struct rrc_file_ids {
	uint32_t count, reserved;
};
struct rrc_file_id {
	uint64_t size;
	int64_t  mtime_sec;
	uint32_t mtime_nsec;
	uint32_t flags;           /* RRC_FILEID_* */
	uint32_t path_len, reserved;
};                                /* 32 bytes, then the path */

/* ---- VMAS ------------------------------------------------------------- */

/* rrc_vma.kind */
enum rrc_vma_kind {
	RRC_VMA_ANON        = 1,  /* private anonymous (incl. thread stacks, [anon:...]) */
	RRC_VMA_FILE_PRIVATE = 2, /* MAP_PRIVATE of a file: path + pgoff */
	RRC_VMA_FILE_SHARED_RO = 3, /* MAP_SHARED of a file, never writable */
	RRC_VMA_HEAP        = 4,  /* [heap]: anonymous, between start_brk and brk */
	RRC_VMA_STACK       = 5,  /* [stack]: anonymous, MAP_GROWSDOWN */
	RRC_VMA_VDSO        = 6,  /* [vdso]: remapped by the restorer, no data */
	RRC_VMA_VVAR        = 7,  /* [vvar], [vvar_vclock]: come with the vDSO */
	RRC_VMA_VSYSCALL    = 8,  /* [vsyscall]: fixed by the kernel, skipped */
};

/* rrc_vma.flags */
#define RRC_VMA_F_TRACKED   (1u << 0) /* dirty-tracked since the parent image */
#define RRC_VMA_F_GROWSDOWN (1u << 1)

struct rrc_vma {
	uint64_t start, end;      /* [start, end), page aligned */
	uint64_t pgoff;           /* file offset in bytes (file kinds) */
	uint32_t prot;            /* PROT_READ | PROT_WRITE | PROT_EXEC */
	uint32_t kind;            /* enum rrc_vma_kind */
	uint32_t flags;           /* RRC_VMA_F_* */
	uint32_t path_len;        /* bytes of path following the record (no NUL) */
	/* path bytes follow, then padding to 8 */
};

/* ---- PAGEMAP ---------------------------------------------------------- */

/* Every *defined* page of every VMA is covered by exactly one entry, in
 * address order. Entries with RRC_PME_IN_IMAGE have their data in this
 * image's PAGES section, consecutively, in entry order. Entries without it
 * are found in the nearest ancestor that has the page (a reader that cannot
 * find one reports a broken chain). Pages of a VMA with no entry are zero
 * (anonymous kinds) or come from the file (file kinds). */
#define RRC_PME_IN_IMAGE (1u << 0)

struct rrc_pagemap_entry {
	uint64_t vaddr;           /* page aligned */
	uint32_t nr_pages;
	uint32_t flags;           /* RRC_PME_* */
};

/* ---- THREADS ---------------------------------------------------------- */

/* The resume context saved by rrc_ctx_save() (runtime/lib/ctx.S): the
 * thread continues after that call with return value 1. */
struct rrc_resume_ctx {
	uint64_t rbx, rbp, r12, r13, r14, r15, rsp, rip;
};

/* rrc_thread.flags */
#define RRC_THR_F_CONTROL (1u << 0) /* librrc's control thread */
#define RRC_THR_F_MAIN    (1u << 1) /* tid == pid */

struct rrc_thread {
	uint32_t tid;             /* in the process's pid namespace */
	uint32_t flags;           /* RRC_THR_F_* */
	uint64_t fs_base, gs_base;
	uint64_t robust_list, robust_list_len;
	uint64_t clear_child_tid; /* PR_GET_TID_ADDRESS */
	uint64_t rseq_addr;       /* 0 if none */
	uint32_t rseq_len, rseq_sig;
	struct rrc_resume_ctx resume;
	/* The interrupted user context (the signal frame's ucontext): where
	 * it lives, and a copy of its general registers (mcontext gregs order)
	 * for diagnostics and for replay. Restore does not use the copy: the
	 * frame in memory is authoritative. */
	uint64_t ucontext_addr;
	uint64_t gregs[23];
	uint64_t sigmask;         /* blocked signals when interrupted */
};

/* ---- FDS -------------------------------------------------------------- */

enum rrc_fd_kind {
	RRC_FD_REG        = 1,  /* regular file: path, flags, pos; data: its rrc_file_locks */
	RRC_FD_DIR        = 2,  /* directory: path, flags, pos; data: its rrc_file_locks */
	RRC_FD_CHR        = 3,  /* character device node: path, flags */
	RRC_FD_PIPE       = 4,  /* pipe end; data with the first end of each pipe */
	RRC_FD_EVENTFD    = 5,
	RRC_FD_EPOLL      = 6,  /* interest list in data: rrc_epoll_entry[] */
	RRC_FD_TIMERFD    = 7,
	RRC_FD_INET_LISTEN = 8, /* TCP listening socket; sockets (8-12): data = rrc_sockopts, or none */
	RRC_FD_INET_DGRAM = 9,  /* UDP socket, bound */
	RRC_FD_INET_CONN  = 10, /* TCP connection: restored closed, or as the repaired socket handed in */
	RRC_FD_UNIX_LISTEN = 11,
	RRC_FD_UNIX_OTHER = 12, /* other unix socket: with its peer, shutdown and queued bytes (rrc_unix_peer) */
	RRC_FD_DUP        = 13, /* the same open file description as the earlier fd u.dup.of
	                         * (dup, dup2, fcntl F_DUPFD): restored by dup3, so that the
	                         * offset and the status flags stay shared */
	RRC_FD_SIGNALFD   = 14, /* signalfd: the set of signals it reads (u.signalfd.sigmask) */
	RRC_FD_GHOST      = 15, /* a regular file deleted while open, or a memfd ("ghost file"):
	                         * path as its link read (" (deleted)" included), u.ghost,
	                         * data: its contents (u.ghost.size bytes, padded to 8) */
	RRC_FD_FIFO       = 17, /* a named pipe opened by its path: path, u.pipe and data as a
	                         * PIPE's (the bytes in flight with the first fd of each FIFO) */
	RRC_FD_INOTIFY    = 16, /* inotify instance: u.inotify, data: its watches (rrc_inotify_watch,
	                         * each followed by its path, padded to 8) */
	RRC_FD_MQUEUE     = 18, /* a POSIX message queue (mq_open): path "/name" as its link
	                         * reads (" (deleted)" once unlinked), u.mqueue; data with the
	                         * first fd of each queue: its messages, in the order a receive
	                         * takes them (struct rrc_mq_msg and its bytes, padded to 8) */
	RRC_FD_LIB_CONTROL = 100, /* librrc's control socket: bound again at RRC_CONTROL */
	RRC_FD_LIB_INTERNAL = 101, /* other librrc fd: not restored, the library remakes it */
};

#define RRC_SOCK_FILE_MODE 0x80000000u /* file_mode is valid */
#define RRC_GHOST_MAX (1u << 20)          /* a ghost file's contents beyond this are refused */

struct rrc_sockaddr {             /* big enough for sockaddr_in6 and short unix paths */
	uint16_t family;
	uint16_t len;             /* valid bytes in addr[] as returned by getsockname */
	uint32_t reserved;
	uint8_t  addr[112];
};

/* A socket's options: the data of every socket record (kinds 8-12), so
 * that the restorer sets them again on the socket it makes or places
 * (repaired connections included). `size` is this struct's size as the
 * writer knew it (a later version grows at the end; a reader takes the
 * fields it knows); `valid` has a bit per field the capture could read
 * (RRC_SO_*): a field without its bit is left as the new socket has it.
 * Values are getsockopt's: SO_RCVBUF/SO_SNDBUF as the kernel reports
 * them (twice what was asked), set again only for a buffer the
 * application locked (buf_lock: SOCK_SNDBUF_LOCK 1, SOCK_RCVBUF_LOCK 2),
 * since setting one turns the kernel's autotuning off. */
#define RRC_SOCKOPTS_SIZE 96u

enum rrc_sockopt_bit {
	RRC_SO_NODELAY    = 1u << 0,  /* TCP_NODELAY */
	RRC_SO_CORK       = 1u << 1,  /* TCP_CORK */
	RRC_SO_KEEPALIVE  = 1u << 2,  /* SO_KEEPALIVE */
	RRC_SO_KEEPIDLE   = 1u << 3,  /* TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT */
	RRC_SO_LINGER     = 1u << 4,  /* SO_LINGER */
	RRC_SO_PRIORITY   = 1u << 5,  /* SO_PRIORITY */
	RRC_SO_BUFS       = 1u << 6,  /* SO_RCVBUF, SO_SNDBUF, SO_BUF_LOCK */
	RRC_SO_BROADCAST  = 1u << 7,  /* SO_BROADCAST */
	RRC_SO_FREEBIND   = 1u << 8,  /* IP_FREEBIND / IPV6_FREEBIND */
	RRC_SO_TRANSPARENT = 1u << 9, /* IP_TRANSPARENT / IPV6_TRANSPARENT */
	RRC_SO_BINDTODEVICE = 1u << 10, /* SO_BINDTODEVICE (empty: none) */
	RRC_SO_FILTER     = 1u << 11, /* SO_ATTACH_FILTER (a classic BPF program), SO_LOCK_FILTER */
};
/* A socket filter's program is the last filter_len * 8 bytes of the
 * options' size (struct sock_filter's, as SO_GET_FILTER gives them back:
 * the program the application attached); none when filter_len is 0. An
 * eBPF filter (SO_ATTACH_BPF) cannot be read back that way: refused. */
#define RRC_SOCK_FILTER_MAX 4096u /* BPF_MAXINSNS */

struct rrc_sockopts {
	uint32_t size;            /* RRC_SOCKOPTS_SIZE when written, plus the filter (8 * filter_len) */
	uint32_t valid;           /* RRC_SO_* */
	int32_t  nodelay, cork, keepalive;
	int32_t  keepidle, keepintvl, keepcnt;
	int32_t  linger_onoff, linger_secs;
	int32_t  priority, rcvbuf, sndbuf, buf_lock;
	int32_t  broadcast, freebind, transparent;
	uint32_t gen;             /* the library's count of setsockopt calls on the fd
				     when captured (not restored: tells the next capture
				     whether the options can have changed) */
	char     bindtodevice[16]; /* IFNAMSIZ, NUL-padded */
	uint16_t filter_len;      /* RRC_SO_FILTER: instructions of the socket filter (0: none) */
	uint16_t filter_lock;     /* RRC_SO_FILTER: SO_LOCK_FILTER */
	uint32_t conn_flags;      /* RRC_SK_*, read at every capture (0 in older images) */
};                                /* 96 bytes, then the filter's program */

/* A TCP socket with no peer address (CLOSE) whose reads were at their end
 * (poll's POLLRDHUP: both FINs done, or a reset) at the capture: it had a
 * connection, which a restore without a repaired socket gives back ended
 * (reads EOF, writes EPIPE), as one with a peer address; a socket never
 * connected comes back unconnected (restore/sk-inet.c). */
#define RRC_SK_RDHUP (1u << 0)

/* The data of a REG or DIR record: the file locks its open file holds
 * (runtime/lib/file-locks.c, from the fdinfo's "lock:" lines; restored by
 * restore/file-locks.c once every fd is in place). A POSIX lock is the
 * process's and is shown, and recorded, on the fd it was taken through;
 * flock and OFD locks belong to the open file description (a DUP of the
 * record shares them). */
enum rrc_lock_kind {
	RRC_LOCK_FLOCK = 1,       /* flock(2) */
	RRC_LOCK_POSIX = 2,       /* fcntl F_SETLK, lockf */
	RRC_LOCK_OFD   = 3,       /* fcntl F_OFD_SETLK */
	RRC_LOCK_LEASE = 4,       /* fcntl F_SETLEASE (type: F_RDLCK 0, F_WRLCK 1; no range) */
};
#define RRC_LOCKS_PER_FD 64
struct rrc_file_lock {
	uint32_t kind;            /* enum rrc_lock_kind */
	uint32_t type;            /* F_RDLCK 0, F_WRLCK 1 */
	int64_t  start;           /* POSIX, OFD: the first byte */
	int64_t  len;             /* POSIX, OFD: bytes; 0: to the end of the file, however long */
};                                /* 24 bytes */

/* A connected unix socket's record (UNIX_OTHER) has, after its
 * rrc_sockopts (at the offset of their size), its peer, its shutdown
 * state and the bytes queued to be read from it (runtime/lib/sk-unix.c,
 * from NETLINK_SOCK_DIAG and a MSG_PEEK; restore/sk-unix.c). Two records
 * naming each other's inodes are the two ends of one socketpair, rebuilt
 * connected. */
struct rrc_unix_peer {
	uint64_t peer_ino;        /* the peer's inode (0: none: unconnected, or its peer closed) */
	uint32_t shutdown;        /* the socket's: 1 receive side, 2 send side (SHUT_RD/WR, its own or its peer's) */
	uint32_t queued;          /* bytes queued for reading, which follow, padded to 8: a stream
	                           * socket's as they are; a datagram or seqpacket socket's as
	                           * messages, each an rrc_unix_msg and its bytes */
};                                /* 16 bytes */
struct rrc_unix_msg {
	uint32_t len;             /* the message's bytes, which follow (unaligned) */
};
#define RRC_UNIX_QUEUE_MAX (1u << 20) /* a receive queue beyond this is refused */

/* One message of a POSIX message queue (RRC_FD_MQUEUE's data). */
struct rrc_mq_msg {
	uint32_t prio, len;       /* then len bytes, padded to 8 */
};
#define RRC_MQ_BYTES_MAX (1u << 20) /* a queue's messages beyond this are refused */

/* One watch of an inotify instance (RRC_FD_INOTIFY's data): its number,
 * mask, the watched file (from the fdinfo) and the path it was added by,
 * which the library's inotify_add_watch wrapper keeps (the kernel keeps
 * none) and the dump checks still names that file. The restorer adds each
 * watch by its path, in the order of their numbers, until the kernel
 * gives it its number. */
struct rrc_inotify_watch {
	int32_t  wd;
	uint32_t mask;            /* as the fdinfo shows it (IN_* events and flags) */
	uint64_t ino;             /* the watched file's inode and device (major << 20 | minor) */
	uint32_t sdev;
	uint32_t path_len;        /* bytes of the absolute path that follows, with its NUL; then padding to 8 */
};                                /* 24 bytes */
#define RRC_INOTIFY_PATH_MAX 256u /* a watch's path, NUL included; a longer one is refused */
#define RRC_INOTIFY_WATCHES 1024u /* watches the library can name, over all instances */

struct rrc_epoll_entry {
	int32_t  fd;
	uint32_t events;
	uint64_t data;
};

/* Signal-driven I/O (O_ASYNC): whom the open file description signals
 * when it becomes ready, and with what (F_GETOWN_EX, F_GETSIG; the
 * kernel's struct file f_owner, shared by every fd of the description).
 * An fd with O_ASYNC has RRC_FD_F_FOWN in its fd_flags and this struct as
 * the last 16 bytes of its data (data_len counts them; the kind's own
 * data is what comes before), except a DUP, whose is its object's (set
 * once, through that fd). Captured in the pause (runtime/lib/fds.c): an
 * owner the restore can mean only, the process itself (its pid, or its
 * process group when that is its own) or one of its threads (whose tids
 * the restore gives back); another is refused. Restored by the blob once
 * every thread exists (restore/pie/restorer.c): F_SETSIG, F_SETOWN_EX,
 * then O_ASYNC by F_SETFL through the fd, which arms the delivery (and
 * makes that number the signal's si_fd). Older images have none: their
 * fds come back without O_ASYNC (a lease's comes with the lease), as
 * before. */
#define RRC_FD_F_FOWN (1u << 31)  /* rrc_fd.fd_flags: the data ends with a struct rrc_fown */
struct rrc_fown {
	uint32_t owner_type;      /* F_OWNER_TID 0, F_OWNER_PID 1, F_OWNER_PGRP 2 */
	int32_t  owner;           /* the tid, pid or process group (0: no owner) */
	uint32_t signal;          /* F_GETSIG: 0 SIGIO (without siginfo), else the signal (1-64) */
	uint32_t reserved;        /* zero */
};                                /* 16 bytes */

struct rrc_fd {
	int32_t  fd;
	uint32_t kind;            /* enum rrc_fd_kind */
	uint32_t fd_flags;        /* FD_CLOEXEC; RRC_FD_F_FOWN */
	uint32_t file_flags;      /* F_GETFL: O_ACCMODE, O_NONBLOCK, O_APPEND, ... */
	uint64_t pos;             /* lseek(fd, 0, SEEK_CUR) for REG/DIR */
	uint64_t ino;             /* st_ino: pipe identity, file identity check */
	uint32_t mode;            /* st_mode */
	uint32_t rdev;            /* st_rdev for CHR */
	union {
		struct { uint32_t pipe_size; uint32_t has_data; } pipe; /* data = bytes in flight */
		struct { uint64_t count; uint32_t semaphore; uint32_t reserved; } eventfd;
		struct { int32_t of; uint32_t reserved; } dup;
		struct { uint64_t sigmask; } signalfd;  /* bit n-1: signal n */
		struct { uint64_t size; uint32_t seals; uint32_t memfd; } ghost; /* seals: F_GET_SEALS */
		struct { uint32_t nr_watches; uint32_t reserved; } inotify;
		struct { int64_t maxmsg, msgsize; /* mq_attr */
			 uint32_t nr_msgs;       /* messages in data (0 but for the first fd) */
			 uint32_t first; } mqueue; /* 1: the first fd of its queue (it makes it) */
		struct { int32_t clockid; uint32_t flags; uint64_t ticks;
			 int64_t value_sec, value_nsec, interval_sec, interval_nsec; } timerfd;
		struct { int32_t family, type, protocol, backlog;
			 uint32_t reuseaddr, reuseport, v6only;
			 uint32_t file_mode; /* a unix socket bound to a path: its file's
			                      * permission bits | RRC_SOCK_FILE_MODE (else 0) */
			 struct rrc_sockaddr local, peer; } sock;
		uint8_t raw[256];
	} u;
	uint32_t path_len;        /* bytes of path following the record (no NUL) */
	uint32_t data_len;        /* bytes of data following the path (padded to 8 after both) */
};

/* ---- SIGNALS ---------------------------------------------------------- */

struct rrc_sigaction {            /* the kernel's struct sigaction layout */
	uint64_t handler;
	uint64_t flags;
	uint64_t restorer;
	uint64_t mask;
};                                /* RRC_SEC_SIGNALS holds 64 of these, signal n at n-1 */

/* ---- FILEOPS (optional) ----------------------------------------------- */

/* The changes the application made under its data directory ($RRC_DATA_DIR,
 * `rrc exec --data-dir`) since the previous checkpoint, in the order they
 * completed, exactly up to the snapshot instant: replaying the FILEOPS of
 * every image of a chain, oldest first, onto the data directory's initial
 * content gives the file tree that matches this image's memory. Absent when
 * the library tracks no data directory.
 *
 * Payload: rrc_fileops_header, then nr_ops records, each an rrc_fileop,
 * path_len bytes of path, data_len bytes of data, zero padding to 8 after
 * both. Paths are relative to the data directory ("" = the directory
 * itself is not allowed), no NUL, never absolute, no "." or ".." component. */
#define RRC_FILEOPS_VERSION 1u

enum rrc_fileop_type {
	RRC_FOP_CREATE   = 1, /* regular file path, if missing, with mode (existing: unchanged) */
	RRC_FOP_TRUNCATE = 2, /* set the size of path to offset (shrink or extend with zeros) */
	RRC_FOP_WRITE    = 3, /* data_len bytes of data at offset (extends the file) */
	RRC_FOP_RENAME   = 4, /* path -> data (the new path), replacing like rename(2) */
	RRC_FOP_UNLINK   = 5, /* remove the non-directory path */
	RRC_FOP_MKDIR    = 6, /* directory path with mode */
	RRC_FOP_RMDIR    = 7, /* remove the empty directory path */
	RRC_FOP_LINK     = 8, /* hard link: existing path, new name in data */
	RRC_FOP_SYMLINK  = 9, /* symlink at path whose target is data (stored verbatim) */
	RRC_FOP_ZERO     = 10, /* zero [offset, offset+length) (hole punch, zero range) */
};

struct rrc_fileops_header {
	uint32_t version;         /* RRC_FILEOPS_VERSION */
	uint32_t nr_ops;          /* records following */
	uint64_t data_bytes;      /* sum of the records' data_len (for readers' budgets) */
};                                /* 16 bytes */

struct rrc_fileop {
	uint32_t type;            /* enum rrc_fileop_type */
	uint32_t mode;            /* CREATE, MKDIR: permission bits (07777) */
	uint32_t path_len;        /* bytes of path following the record, > 0 */
	uint32_t data_len;        /* bytes of data following the path */
	uint64_t offset;          /* WRITE, ZERO: file offset; TRUNCATE: new size */
	uint64_t length;          /* ZERO: bytes; WRITE: = data_len; else 0 */
};                                /* 32 bytes */

/* ---- TCP -------------------------------------------------------------- */

/* The TCP stream table: every TCP socket of the process's network
 * namespace at the snapshot instant (all application threads parked),
 * from NETLINK_SOCK_DIAG (runtime/lib/sk-diag.c): connections with an fd,
 * connections not yet accept()ed, orphaned (closed, still sending) ones,
 * listeners, request socks (SYN_RECV) and TIME_WAIT entries. Written in
 * every image, full or incremental: it describes this snapshot and is not
 * merged with a parent's. The replication gate releases a server->client
 * segment once a committed checkpoint has write_seq_rel >= its end
 * (relative to the stream's ISN+1); failover uses it for TCP_REPAIR.
 *
 * Payload: rrc_tcp_table, then count records of record_size bytes. */

/* rrc_tcp_stream.flags */
#define RRC_TCP_F_INFO (1u << 0) /* tcp_info was reported: bytes_*, wscales, options, snd_mss valid */
#define RRC_TCP_F_SEQ  (1u << 1) /* write_seq_rel and read_seq_rel are valid (a synchronized
				  * full socket: not LISTEN, SYN_SENT, a request sock or TIME_WAIT) */
#define RRC_TCP_F_ACTIVE (1u << 2) /* active open: no listener of this table has its local
				  * address and port; bytes_acked counts the SYN (write_seq_rel
				  * = bytes_acked + wqueue - 1, else + 0) */

struct rrc_tcp_table {
	uint32_t count;           /* records following */
	uint32_t record_size;     /* sizeof(struct rrc_tcp_stream) */
};                                /* 8 bytes */

struct rrc_tcp_stream {
	uint16_t family;          /* AF_INET 2, AF_INET6 10 */
	uint8_t  state;           /* kernel TCP state: 1 ESTABLISHED .. 11 CLOSING (TIME_WAIT: its substate) */
	uint8_t  options;         /* tcpi_options (TCPI_OPT_TIMESTAMPS 1, SACK 2, WSCALE 4, ECN 8, ...) */
	uint8_t  snd_wscale;      /* tcpi_snd_wscale */
	uint8_t  rcv_wscale;      /* tcpi_rcv_wscale */
	uint16_t flags;           /* RRC_TCP_F_* */
	uint16_t local_port;      /* host byte order */
	uint16_t remote_port;
	uint32_t snd_mss;         /* tcpi_snd_mss */
	uint8_t  local_addr[16];  /* network byte order; AF_INET: first 4 bytes, rest zero */
	uint8_t  remote_addr[16];
	uint64_t inode;           /* socket inode (rrc_fd.ino of its fd, if the process holds one); 0 for TIME_WAIT and request socks */
	uint64_t cookie;          /* the kernel's socket cookie (idiag_cookie) */
	uint32_t rqueue;          /* idiag_rqueue: rcv_nxt - copied_seq (LISTEN: accept queue length) */
	uint32_t wqueue;          /* idiag_wqueue: write_seq - snd_una (LISTEN: backlog) */
	uint64_t bytes_acked;     /* tcpi_bytes_acked: snd_una - (ISN + 1), active open: snd_una - ISN */
	uint64_t bytes_received;  /* tcpi_bytes_received: rcv_nxt - (peer ISN + 1) */
	uint64_t write_seq_rel;   /* write_seq - (ISN + 1): bytes the application wrote, + 1 once a FIN is queued */
	uint64_t read_seq_rel;    /* copied_seq - (peer ISN + 1): bytes the application read, + 1 once
				   * the kernel consumed a received FIN (when read() returned 0, or
				   * already with the last data byte if the FIN shares its skb) */
	uint32_t ifindex;         /* idiag_if (bound device / IPv6 scope), 0 if none */
	uint32_t reserved;        /* zero */
};                                /* 112 bytes */

/* ---- librrc.so <-> rrc-restore handshake ------------------------------ */

#define RRC_RESTORE_AREA_MAGIC 0x52524352455354ull /* "RRCREST" */

/* `rrc restore --replay`: what the restored library is asked to replay
 * and how (lib/rr-replay.h). */
enum rrc_races {
	RRC_RACES_OFF   = 0,      /* turns only where the recording numbered (locks, fds, epoll) */
	RRC_RACES_ORDER = 1,      /* and system calls return in their recorded order (RRC §4.7) */
	RRC_RACES_PACE  = 2,      /* and no sooner after the previous return than they did */
};
/* rrc_replay_request.flags */
#define RRC_REPLAY_END         1u /* go live at the cut of image `to` */
#define RRC_REPLAY_CONNECTIONS 2u /* the TCP connections are the clients' own (a failover):
				   * replayed reads take their bytes from them, replayed
				   * outputs go out on them (lib/rr-conns.h) */
#define RRC_REPLAY_RECORD      4u /* record again from go-live on (a failover with a spare
				   * to re-protect onto): the log waits for its sink, which
				   * RECORD hands over (control.h; lib/rr-log.c) */
struct rrc_replay_request {
	int32_t  fd;              /* the record log (an fd of the restored process),
				   * replayed from the image's cut; -1: none */
	uint32_t timeout_ms;      /* no progress this long is a divergence (0: 5000) */
	uint32_t races;           /* enum rrc_races */
	uint32_t pace_max_us;     /* RRC_RACES_PACE: the longest wait before one return (0: 10 ms) */
	uint32_t flags;           /* RRC_REPLAY_* */
	int32_t  until_fd;        /* >= 0: go live right after the output that brings this fd's */
	uint64_t until_bytes;     /* stream to until_bytes (and what it depends on) */
	uint8_t  to[16];
};                                /* 48 bytes */

/* Lives in librrc.so's memory at rrc_process.restore_area_addr. The
 * restorer writes it before resuming any thread; the control thread's
 * post-restore path reads it. */
struct rrc_restore_area {
	uint64_t magic;           /* RRC_RESTORE_AREA_MAGIC once filled */
	uint64_t blob_start, blob_len; /* the restorer's mapping to unmap */
	uint8_t  image_id[16];    /* the image restored (next dump may use it as parent) */
	uint32_t nr_threads;      /* threads resumed, control thread included */
	volatile uint32_t threads_back; /* incremented by each thread in the library */
	uint32_t reserved;
	struct rrc_replay_request replay;
};

#ifdef __cplusplus
#define RRC_STATIC_ASSERT static_assert
#else
#define RRC_STATIC_ASSERT _Static_assert
#endif
RRC_STATIC_ASSERT(sizeof(struct rrc_image_header) == 72, "image header layout");
RRC_STATIC_ASSERT(sizeof(struct rrc_procattr) == 272 && __builtin_offsetof(struct rrc_procattr, nodename) == RRC_PROCATTR_SIZE_V1, "procattr layout");
RRC_STATIC_ASSERT(sizeof(struct rrc_replay_request) == 48, "replay request layout");
RRC_STATIC_ASSERT(sizeof(struct rrc_section_header) == 24, "section header layout");
RRC_STATIC_ASSERT(sizeof(struct rrc_end) == 16, "end layout");
RRC_STATIC_ASSERT(sizeof(struct rrc_vma) == 40, "vma layout");
RRC_STATIC_ASSERT(sizeof(struct rrc_pagemap_entry) == 16, "pagemap layout");
RRC_STATIC_ASSERT(sizeof(struct rrc_sigaction) == 32, "sigaction layout");
RRC_STATIC_ASSERT(sizeof(struct rrc_epoll_entry) == 16, "epoll entry layout");
RRC_STATIC_ASSERT(sizeof(struct rrc_file_lock) == 24, "file lock layout");
RRC_STATIC_ASSERT(sizeof(struct rrc_unix_peer) == 16, "unix peer layout");
RRC_STATIC_ASSERT(sizeof(struct rrc_inotify_watch) == 24, "inotify watch layout");
RRC_STATIC_ASSERT(sizeof(struct rrc_fown) == 16, "fown layout");
RRC_STATIC_ASSERT(sizeof(struct rrc_fd) == 320, "fd record layout");
RRC_STATIC_ASSERT(sizeof(struct rrc_sockopts) == RRC_SOCKOPTS_SIZE, "sockopts layout");
RRC_STATIC_ASSERT(sizeof(struct rrc_tcp_table) == 8, "tcp table header layout");
RRC_STATIC_ASSERT(sizeof(struct rrc_tcp_stream) == 112, "tcp stream layout");
RRC_STATIC_ASSERT(sizeof(struct rrc_fileops_header) == 16, "fileops header layout");
RRC_STATIC_ASSERT(sizeof(struct rrc_fileop) == 32, "fileop layout");
/* rrc-image's parse_creds reads these offsets */
RRC_STATIC_ASSERT(sizeof(struct rrc_creds) == 344, "creds layout");
RRC_STATIC_ASSERT(__builtin_offsetof(struct rrc_creds, cap_inh) == 32 &&
		  __builtin_offsetof(struct rrc_creds, secbits) == 72 &&
		  __builtin_offsetof(struct rrc_creds, dumpable) == 76 &&
		  __builtin_offsetof(struct rrc_creds, nr_groups) == 80 &&
		  __builtin_offsetof(struct rrc_creds, groups) == 88, "creds field offsets");

#endif /* RRC_IMAGE_H */
