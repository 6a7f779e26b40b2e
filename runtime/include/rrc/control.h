/* SPDX-License-Identifier: MIT
 *
 * The control protocol between the `rrc` command and librrc.so, version 1.
 *
 * Transport: a SOCK_STREAM unix socket; the library listens on the path in
 * $RRC_CONTROL (under rrc exec: /run/rrc-container/control.sock inside the
 * container, reached from outside as /proc/PID/root/run/rrc-container/...).
 * One request per connection (a HOLD's RESUME excepted), served one at a
 * time: a request sent while another is served waits for it. The Rust
 * crate rrc-control mirrors this header; tests/vectors/control-*.bin pin
 * the bytes.
 *
 * Every message: rrc_ctl_header, then `length` payload bytes.
 *
 *   PING                      -> PONG
 * The image fd of a DUMP may be a file, a pipe or a socket: the snapshot
 * child writes the image as one forward stream (no seek). It must be in
 * blocking mode; if its reader goes away the dump fails (EPIPE).
 *
 *   DUMP (+ image fd, SCM_RIGHTS) -> ERROR                 (refused, nothing changed)
 *                             -> DUMP_PAUSED, DUMP_DONE    (success)
 *                             -> DUMP_PAUSED, ERROR        (the snapshot child failed)
 *
 * HOLD parks every application thread exactly as a DUMP's pause does (same
 * quiesce, same hook guard: no thread is inside a journalled data-directory
 * operation), DISCARDS the data directory's journal (every change in it is
 * already in the files) and keeps the threads parked, so that the caller
 * can copy the data directory as the state at this instant; the journal
 * from then on holds exactly the changes since the copy. The next DUMP
 * must be full (last_image_id is cleared). Added to version 1 as types
 * 7..10 and codes 14..16: a library that predates them answers HOLD with
 * ERROR PROTOCOL "unknown request type".
 *
 *   HOLD                      -> ERROR                     (refused, nothing changed)
 *                             -> HELD                      (parked), then on the same connection:
 *     RESUME                  -> RESUMED                   (released; the copy is consistent)
 *     any other request       -> ERROR HELD                (still held)
 *     (timeout_ms passed)     -> ERROR HOLD_EXPIRED        (the library released the threads)
 *     (connection closed)        released
 *   any request on another connection during a hold -> ERROR HELD
 *   RESUME without a hold on its connection         -> ERROR NOT_HELD
 */
#ifndef RRC_CONTROL_H
#define RRC_CONTROL_H

#include <stdint.h>

#define RRC_CTL_MAGIC   0x43435252u /* "RRCC" little-endian */
#define RRC_CTL_VERSION 2u
#define RRC_CTL_DEFAULT_PATH "/run/rrc-container/control.sock"
#define RRC_CTL_MAX_PAYLOAD 65536u

enum rrc_ctl_type {
	RRC_CTL_PING        = 1,
	RRC_CTL_PONG        = 2,
	RRC_CTL_DUMP        = 3,
	RRC_CTL_DUMP_PAUSED = 4,
	RRC_CTL_DUMP_DONE   = 5,
	RRC_CTL_ERROR       = 6,
	RRC_CTL_HOLD        = 7,
	RRC_CTL_HELD        = 8,
	RRC_CTL_RESUME      = 9, /* no payload */
	RRC_CTL_RESUMED     = 10,
	RRC_CTL_REPLAY_STATUS = 11, /* no payload */
	RRC_CTL_REPLAY_STATE  = 12,
	RRC_CTL_RECORD        = 13, /* + the sink's fd (SCM_RIGHTS) */
	RRC_CTL_RECORDING     = 14, /* no payload */
};

struct rrc_ctl_header {
	uint32_t magic;           /* RRC_CTL_MAGIC */
	uint16_t version;         /* RRC_CTL_VERSION */
	uint16_t type;            /* enum rrc_ctl_type */
	uint32_t length;          /* payload bytes, <= RRC_CTL_MAX_PAYLOAD */
	uint32_t payload_crc;     /* CRC32C of the payload */
	uint32_t header_crc;      /* CRC32C of the 16 bytes before this field */
	uint32_t reserved;        /* zero */
};                                /* 24 bytes */

struct rrc_ctl_pong {
	uint32_t pid;             /* getpid() inside the container */
	uint32_t nr_threads;      /* application threads (control thread excluded) */
	uint32_t restored;        /* 1 if this process came from rrc-restore */
	uint32_t checkpoints;     /* DUMPs completed by this process */
	uint8_t  last_image_id[16]; /* valid parent for an incremental DUMP, zero if none */
};

/* rrc_ctl_dump.flags */
#define RRC_DUMP_F_INCREMENTAL (1u << 0) /* parent_id must equal last_image_id */
#define RRC_DUMP_F_COPY        (1u << 1) /* snapshot by copy (precopy.c) instead of fork */
#define RRC_DUMP_F_TCP_TABLE   (1u << 2) /* capture the TCP stream table (image section TCP):
					    what the replication gate and the failover need */

struct rrc_ctl_dump {
	uint32_t flags;
	uint32_t reserved;
	uint8_t  image_id[16];    /* chosen by the caller, written into the image */
	uint8_t  parent_id[16];   /* with RRC_DUMP_F_INCREMENTAL */
};

struct rrc_ctl_dump_paused {
	uint64_t pause_ns;        /* first park signal sent .. threads released */
	uint64_t quiesce_ns;      /* .. all threads parked */
	uint64_t scan_ns;         /* PAGEMAP_SCAN */
	uint64_t capture_ns;      /* fd state */
	uint64_t fork_ns;         /* clone() of the snapshot */
	uint32_t threads;         /* application threads parked */
	uint32_t untracked_vmas;  /* VMAs dumped whole (new since the parent) */
	uint64_t written_pages;   /* pages the scan reported written */
	/* snapshot by copy (RRC_DUMP_F_COPY); zero for a fork snapshot */
	uint64_t copy_ns;         /* pages copied in the pause */
	uint64_t copied_pages;    /* .. how many */
	uint64_t precopy_ns;      /* copy passes before the pause (not paused) */
	uint64_t precopy_pages;   /* .. pages they copied */
	uint32_t precopy_passes;
	uint32_t snapshot;        /* RRC_SNAPSHOT_FORK or RRC_SNAPSHOT_COPY */
};
#define RRC_SNAPSHOT_FORK 0u
#define RRC_SNAPSHOT_COPY 1u

struct rrc_ctl_dump_done {
	uint64_t pages;           /* pages written into the image */
	uint64_t bytes;           /* image file size */
	uint64_t write_ns;        /* snapshot child: start .. image complete */
};

/* The longest a HOLD keeps the threads parked without RESUME. */
#define RRC_HOLD_MAX_MS 10000u

/* RECORD: a process restored with RRC_REPLAY_RECORD records again from
 * the end of its replay, discarding the log until it has a sink; one
 * launched with RRC_RECORD_REPLACEABLE (a spare waits) keeps recording
 * when its log's connection fails, discarding likewise: this hands it one
 * (a log session to its new backup, opened by the agent), replacing the
 * old sink if the writer has not seen it fail yet. The writer sends the
 * log's header (RRC_LOG_F_CONTINUES) and every batch from its next pass
 * on. Answered RECORDING, or ERROR NO_RECORDING when the process records
 * nothing or has its sink already.
 *
 *   RECORD (+ sink fd, SCM_RIGHTS) -> RECORDING | ERROR */
#define RRC_RECORD_F_FRAMED 1u /* rrc-wire frames (crates/rrc-wire), not the bare stream */
#define RRC_RECORD_F_SEALED 2u /* each frame sealed with `key` (implies FRAMED) */
struct rrc_ctl_record {
	uint64_t first_frame;     /* the number of the first frame (those the agent sent before) */
	uint32_t flags;           /* RRC_RECORD_F_* */
	uint32_t reserved;        /* zero */
	uint8_t  key[32];         /* the session's key, with SEALED */
};                                /* 48 bytes */

struct rrc_ctl_hold {
	uint32_t timeout_ms;      /* 1..RRC_HOLD_MAX_MS; 0 = RRC_HOLD_MAX_MS */
	uint32_t reserved;        /* zero */
};

struct rrc_ctl_held {
	uint64_t quiesce_ns;      /* first park signal .. all threads parked */
	uint64_t discarded_ops;   /* journal records dropped (already in the files) */
	uint64_t discarded_bytes; /* their data bytes */
	uint32_t threads;         /* application threads parked */
	uint32_t timeout_ms;      /* the hold ends by itself this long after HELD */
};

struct rrc_ctl_resumed {
	uint64_t held_ns;         /* first park signal .. threads released: the pause */
	uint32_t threads;
	uint32_t reserved;
};

/* rrc_ctl_replay.state */
#define RRC_REPLAY_NONE     0u  /* this process replays nothing */
#define RRC_REPLAY_RUNNING  1u
#define RRC_REPLAY_LIVE     2u  /* every thread went live together */
#define RRC_REPLAY_DIVERGED 3u  /* stopped; the report follows the struct */

struct rrc_ctl_replay {
	uint32_t state;           /* RRC_REPLAY_* */
	uint32_t threads;         /* thread incarnations replayed */
	uint64_t events_total;    /* events to replay (the log's consistent part) */
	uint64_t events_done;
	uint64_t events_dropped;  /* after the consistent part (a crash's tail) */
	uint64_t outputs;         /* outputs suppressed and checked */
	uint64_t output_bytes;
	uint64_t load_ns;         /* mapping and indexing the log */
	uint64_t replay_ns;       /* first event .. live (or now) */
	uint64_t debts_left;      /* bytes read in the log that pipes/eventfds no longer held at go-live */
	uint64_t returns_ordered; /* system calls that returned in their recorded order (RRC §4.7) */
	uint64_t paced_ns;        /* time returns waited to keep their recorded gaps */
	/* with RRC_REPLAY_CONNECTIONS (a failover; lib/rr-conns.h): */
	uint64_t connections;     /* client connections the replay read or wrote */
	uint64_t conn_read_bytes; /* bytes replayed reads took off them */
	uint64_t conn_sent_bytes; /* bytes replayed outputs sent on them */
	uint64_t conn_faults;     /* bytes that were not there, differed or could not be sent */
	uint64_t conn_skipped_bytes; /* replayed output bytes their clients had already (released) */
	uint64_t conn_behind;     /* connections the replay left short of what their client was sent */
	uint64_t conn_reset;      /* connections reset at go-live (out of step, or behind) */
};                                /* 144 bytes */

/* rrc_ctl_error.code */
enum rrc_ctl_error_code {
	RRC_ERR_PROTOCOL     = 1, /* malformed request */
	RRC_ERR_BAD_PARENT   = 2, /* parent_id is not the last checkpoint */
	RRC_ERR_CHILDREN     = 3, /* the process has child processes */
	RRC_ERR_SHARED_WRITE = 4, /* writable shared mapping */
	RRC_ERR_IO_URING     = 5,
	RRC_ERR_UNSUPPORTED_FD = 6,
	RRC_ERR_QUIESCE      = 7, /* a thread did not park in time */
	RRC_ERR_SNAPSHOT     = 8, /* fork or image writing failed */
	RRC_ERR_UNSUPPORTED_MAPPING = 9,
	RRC_ERR_TIMERS       = 10, /* interval or POSIX timers armed (not in the image) */
	RRC_ERR_PENDING_SIGNAL = 11, /* a signal was pending at the snapshot (it would be lost) */
	RRC_ERR_TCP_TABLE    = 12, /* the TCP stream table (NETLINK_SOCK_DIAG) could not be captured */
	RRC_ERR_FILE_JOURNAL = 13, /* the data directory's change journal overflowed or saw an
				    * operation it cannot describe (sticky) */
	RRC_ERR_HELD         = 14, /* the threads are held (HOLD): only RESUME on the holding connection */
	RRC_ERR_HOLD_EXPIRED = 15, /* no RESUME within the hold's timeout: the library released the threads */
	RRC_ERR_NOT_HELD     = 16, /* RESUME without a HOLD on this connection */
	RRC_ERR_REPLAYING    = 17, /* DUMP while the process replays its log (or failed to) */
	RRC_ERR_NO_RECORDING = 18, /* RECORD: no recording waits for a sink */
	RRC_ERR_PROCESS_STATE = 19, /* process state the image cannot carry (seccomp filters) */
};

struct rrc_ctl_error {
	uint32_t code;            /* enum rrc_ctl_error_code */
	int32_t  sys_errno;       /* errno of the failing call, 0 if none */
	char     message[];       /* UTF-8, length = payload length - 8, no NUL */
};

#endif /* RRC_CONTROL_H */
