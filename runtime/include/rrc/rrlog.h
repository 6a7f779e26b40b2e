/* SPDX-License-Identifier: MIT
 *
 * The rrc record log, version 5 (issues 13, 14; RRC §4.1, §4.5, §4.7,
 * HyCoR §4.1).
 *
 * Version 5 against 4: an output names its connection (addresses, and the
 * fd-table number of the call that made its fd), and the writer marks how
 * far each thread's outputs may be released (RRC §4.5's PBSN/BBSN): the
 * backup releases a reply once the log that reproduces it is in.
 *
 * Version 4 against 3: a mutex's or spinlock's release is no event of its
 * own any more, the next acquisition carries where it happened
 * (`released_at`); a clock reading carries its time in seq and result, with
 * no data. Both halve what the commonest events cost (memcached's locks,
 * redis's clocks: bench/results/record.json).
 *
 * This header is the single definition of the format. The Rust module
 * rrc_image::rrlog mirrors it; tests/vectors/rrlog-* are written from it
 * by mkvectors and read by the Rust tests; docs/log-format.md explains it
 * in prose.
 *
 * A log is one byte stream (a file for `rrc exec --record`):
 *
 *   rrc_log_header
 *   batch*              (rrc_log_batch + its events)
 *
 * A batch holds consecutive events of one thread (tid != 0), in the order
 * that thread produced them, or process-wide records (tid == 0: cuts, marks, a failover's released offsets).
 * Batches are numbered in stream order (batch_seq 0, 1, 2, ...), so a
 * missing, repeated or reordered batch is seen; per thread, first_event
 * continues where the thread's previous batch ended. Each batch carries a
 * CRC32C of its header and of its payload. A stream ends after any whole
 * batch: a reader reports a batch cut short as truncated.
 *
 * An event is rrc_log_event followed by data_len bytes, padded to 8. The
 * order between threads is not the stream's: it is carried by the events
 * themselves (RRC's per-lock sequence numbers in `seq` for synchronization;
 * one process-wide sequence in `seq` for calls that change the fd table),
 * and for every system call by `ret`, the process-wide order in which the
 * calls returned, with `ret_ns`, when; every lock acquisition takes its
 * place in that same order too (`ord`, version 6: a thread that reads
 * unlocked what another wrote between two of its acquisitions replays
 * after the same acquisitions of the others) (RRC §4.7: a replay may enforce that
 * order and those gaps to make data races play out as they did).
 *
 * Everything is little-endian, fields fixed-width, padding explicit.
 */
#ifndef RRC_RRLOG_H
#define RRC_RRLOG_H

#include <stdint.h>

#define RRC_LOG_MAGIC         "RRCLOG\0\0" /* 8 bytes */
#define RRC_LOG_VERSION       6u
#define RRC_LOG_BATCH_MAGIC   0x424c5252u  /* "RRLB" little-endian */
/* A batch's payload is at most this long: a reader refuses a longer one
 * before reading it (one thread's batch is flushed well before). */
#define RRC_LOG_MAX_PAYLOAD   (4u << 20)
/* One event's data is at most this long: a wrapper splits a call that
 * would return more (getrandom of 1 MiB) into several calls and events. */
#define RRC_LOG_MAX_DATA      (64u << 10)

/* rrc_log_header.flags */
#define RRC_LOG_F_CONTINUES 1u /* the recording began in a process that ran before (live
				* at the end of a failover's replay, recorded again for
				* its new backup): a thread's first batch may begin at any
				* event; the events before it were never sent */

struct rrc_log_header {
	char     magic[8];        /* RRC_LOG_MAGIC */
	uint32_t version;         /* RRC_LOG_VERSION */
	uint32_t flags;           /* RRC_LOG_F_* */
	uint8_t  log_id[16];      /* random, unique per recording */
	uint64_t created_ns;      /* CLOCK_REALTIME when recording began */
	uint32_t pid;             /* the recorded process, as it sees itself */
	uint32_t header_crc;      /* CRC32C of the 44 bytes before this field */
};                                /* 48 bytes */

struct rrc_log_batch {
	uint32_t magic;           /* RRC_LOG_BATCH_MAGIC */
	uint32_t tid;             /* the thread; 0: process-wide records */
	uint64_t batch_seq;       /* 0, 1, 2, ... in stream order */
	uint64_t first_event;     /* the thread's index of the first event here */
	uint32_t nr_events;
	uint32_t payload_len;     /* bytes of events after this header, multiple of 8 */
	uint32_t payload_crc;     /* CRC32C of the payload */
	uint32_t header_crc;      /* CRC32C of the 36 bytes before this field */
};                                /* 40 bytes */

/* rrc_log_event.kind. The meaning of obj / seq / result / data per kind is
 * in docs/log-format.md; "result" is the call's return value, -errno when
 * it failed (pthread calls: minus the error number they return). */
enum rrc_log_kind {
	/* threads */
	RRC_EV_THREAD_START  = 1,   /* first event of a thread: obj = creator's tid (0: main) */
	RRC_EV_THREAD_CREATE = 2,   /* obj = the new thread's tid, result = pthread_create's */
	RRC_EV_THREAD_EXIT   = 3,
	RRC_EV_THREAD_JOIN   = 4,   /* obj = the joined tid */
	/* synchronization: obj = the object's address, seq = its per-object
	 * order (the n-th successful operation on that object) */
	RRC_EV_MUTEX_LOCK    = 10,  /* flags: RRC_EVF_TRY / RRC_EVF_TIMED; a failure has no seq.
				     * A success carries released_at (below) */
	/* 11: a mutex's release, an event of its own until version 3 */
	RRC_EV_COND_WAIT     = 12,  /* the mutex reacquired: seq on the mutex (data: u64 mutex),
				     * released_at as MUTEX_LOCK's */
	RRC_EV_COND_SIGNAL   = 13,
	RRC_EV_COND_BROADCAST = 14,
	RRC_EV_RWLOCK_RD     = 15,
	RRC_EV_RWLOCK_WR     = 16,
	RRC_EV_RWLOCK_UNLOCK = 17,  /* a release (readers hold an rwlock together, so the next
				     * acquisition cannot say which release it waited for): seq =
				     * the number of the object's last acquisition, so that
				     * acquisition seq + 1 comes after it (RRC_SEQ_NONE: none numbered) */
	RRC_EV_SPIN_LOCK     = 18,  /* released_at as MUTEX_LOCK's */
	/* 19: a spinlock's release, an event of its own until version 3 */
	RRC_EV_SEM_WAIT      = 20,
	RRC_EV_SEM_POST      = 21,
	RRC_EV_ONCE          = 22,
	RRC_EV_BARRIER       = 23,
	/* nondeterministic results: obj = fd (or clock id), data = the bytes
	 * the call returned to the application */
	RRC_EV_READ          = 40,  /* read readv pread recv recvfrom recvmsg; obj = fd, seq = 0 */
	RRC_EV_ACCEPT        = 41,  /* result = the new fd; seq = fd-table order; data = peer address */
	RRC_EV_EPOLL_WAIT    = 42,  /* seq = the epoll instance's order (RRC_EPOLL_KEY); data = the
				     * epoll_event array, then each event's fd (i32, -1: unknown) */
	RRC_EV_POLL          = 43,  /* data = the pollfd array after the call */
	RRC_EV_SELECT        = 44,  /* data = the three fd_sets after the call */
	RRC_EV_CLOCK         = 45,  /* obj = clock id (RRC_CLOCK_* below for time()/gettimeofday()),
				     * no data: seq = the seconds, result = the nanoseconds
				     * (gettimeofday: microseconds; time(), clock(): the value
				     * returned, seq 0), or -errno */
	RRC_EV_RANDOM        = 46,  /* getrandom, arc4random*, /dev/urandom reads: data = the bytes */
	RRC_EV_SLEEP         = 47,  /* nanosleep family: result, data = remaining timespec if interrupted */
	RRC_EV_SOCKNAME      = 48,  /* getsockname (seq 0) / getpeername (seq 1): obj = fd, result = the
				     * address's length or -errno, data = its first bytes (at most 128);
				     * the kernel picks ephemeral ports */
	RRC_EV_IOCTL         = 49,  /* ioctl FIONREAD / TIOCOUTQ: obj = fd, seq = the request,
				     * result, data = the int it wrote (4 bytes) */
	RRC_EV_SOCKOPT       = 50,  /* shutdown (seq 1), setsockopt (2), getsockopt (3), connect (4):
				     * obj = fd, result; getsockopt's data = optlen (u32) + the value
				     * (at most 128 bytes). Made again in a replay, this outcome returned */
	RRC_EV_EPOLL_CTL     = 51,  /* obj = the epoll fd, seq = the instance's order, result,
				     * data = struct rrc_log_epoll_ctl */
	/* the fd table: seq = the process-wide order of fd-table changes */
	RRC_EV_FD            = 60,  /* obj = call (RRC_FDOP_*), result = the fd (or -errno) */
	/* outputs to clients: obj = fd, data = struct rrc_log_output */
	RRC_EV_OUTPUT        = 70,
	/* process-wide (tid 0) records */
	RRC_EV_CUT           = 90,  /* data = struct rrc_log_cut + rrc_log_cut_thread[] */
	RRC_EV_MARK          = 91,  /* a release mark: data = struct rrc_log_mark + rrc_log_cut_thread[] */
	RRC_EV_RELEASED      = 92,  /* what the clients were sent (a failover's log only): data =
				     * struct rrc_log_released + rrc_log_released_conn[] */
};

/* A release's seq when no acquisition of the object was numbered */
#define RRC_SEQ_NONE (~0ull)

/* rrc_log_event.flags */
#define RRC_EVF_TRY    (1u << 0)  /* trylock-like: may fail at once */
#define RRC_EVF_TIMED  (1u << 1)  /* timed: may time out */
#define RRC_EVF_MSG    (1u << 2)  /* READ: data starts with struct rrc_log_recv */
#define RRC_EVF_FILE   (1u << 3)  /* READ of a regular file: data is the CRC32C (u32)
				   * of the bytes, which a replay reads again */
#define RRC_EVF_FIN    (1u << 4)  /* OUTPUT: the program ended its sending on the connection
				   * (shutdown SHUT_WR or SHUT_RDWR, close): length 0, result 0,
				   * the server's FIN at `offset`; right after the call's own event */

/* The head of a READ event's data for the calls that return more than
 * bytes (recvfrom, recvmsg): then the payload bytes, the address
 * (name_len bytes), the control data (control_len bytes). */
struct rrc_log_recv {
	uint32_t name_len;
	uint32_t control_len;
	uint32_t msg_flags;       /* recvmsg's msg_flags after the call */
	uint32_t reserved;
};

/* EPOLL_CTL's data */
struct rrc_log_epoll_ctl {
	uint32_t op;              /* EPOLL_CTL_ADD / MOD / DEL */
	int32_t  fd;
	uint32_t events;
	uint32_t reserved;
};

/* The order of an epoll instance's calls (epoll_ctl, and the returns of
 * epoll_wait) is numbered on this key, per epoll fd: a wait that returned
 * an fd another thread re-armed comes after that re-arming in a replay. */
#define RRC_EPOLL_KEY(epfd) (0x1000ull + 8ull * (uint64_t)(epfd))

/* obj of RRC_EV_CLOCK for the calls that name no clock */
#define RRC_CLOCK_TIME          0x10000u  /* time() */
#define RRC_CLOCK_GETTIMEOFDAY  0x10001u  /* gettimeofday(): data = struct timeval */

/* obj of RRC_EV_FD */
enum rrc_fdop {
	RRC_FDOP_OPEN = 1, RRC_FDOP_CLOSE, RRC_FDOP_DUP, RRC_FDOP_SOCKET, RRC_FDOP_PIPE,
	RRC_FDOP_EVENTFD, RRC_FDOP_TIMERFD, RRC_FDOP_EPOLL, RRC_FDOP_OTHER,
	RRC_FDOP_DUPFD,   /* fcntl(F_DUPFD*): the second fd is the minimum asked for */
	RRC_FDOP_CLOSE_RANGE, /* close_range, closefrom: the fds are first and last (as int32) */
};

struct rrc_log_event {
	uint16_t kind;            /* enum rrc_log_kind */
	uint16_t flags;           /* RRC_EVF_* */
	uint32_t data_len;        /* bytes after this header (then padding to 8) */
	uint64_t obj;
	uint64_t seq;
	int64_t  result;
	union {
		uint64_t ret;     /* a system call's (RRC_EV_IS_CALL): its place in the process-wide
				   * order of returns, 1, 2, 3... */
		uint64_t released_at; /* a MUTEX_LOCK or SPIN_LOCK that succeeded, a COND_WAIT (which
				   * takes its mutex again even when it times out), numbered n > 0:
				   * where the holder of number n - 1 released the object, as
				   * its count of events then (the release came after its event
				   * released_at - 1); 0 if no release came between the two
				   * (a recursive mutex taken again) or none was seen */
	};                        /* 0 for every other kind */
	union {
		uint64_t ret_ns;  /* a system call's: CLOCK_MONOTONIC at that return */
		uint64_t ord;     /* an acquisition's (RRC_EV_ORDERED_SYNC, from version 6): its
				   * place in the order of returns, taken holding the object (or
				   * after failing to), so that it agrees with `seq`; 0: none */
	};                        /* 0 for every other kind */
};                                /* 48 bytes */

/* The kinds that carry released_at */
#define RRC_EV_CARRIES_RELEASE(kind) \
	((kind) == RRC_EV_MUTEX_LOCK || (kind) == RRC_EV_SPIN_LOCK || (kind) == RRC_EV_COND_WAIT)

/* The acquisitions numbered in the process-wide order of returns: `ord` */
#define RRC_EV_ORDERED_SYNC(kind)                                                            \
	((kind) == RRC_EV_MUTEX_LOCK || (kind) == RRC_EV_SPIN_LOCK || (kind) == RRC_EV_COND_WAIT || \
	 (kind) == RRC_EV_RWLOCK_RD || (kind) == RRC_EV_RWLOCK_WR)

/* The kinds that are system calls: they carry `ret` and `ret_ns`. */
#define RRC_EV_IS_CALL(kind) ((kind) >= RRC_EV_READ && (kind) <= RRC_EV_OUTPUT)

/* An event's place in the process-wide order of returns: a system call's
 * `ret`, an acquisition's `ord`; 0: none. */
static inline uint64_t rrc_ev_order(const struct rrc_log_event *e)
{
	if (RRC_EV_IS_CALL(e->kind))
		return e->ret;
	return RRC_EV_ORDERED_SYNC(e->kind) ? e->ord : 0;
}

struct rrc_log_output {
	uint64_t offset;          /* bytes this fd had sent before */
	uint64_t length;
	uint32_t crc;             /* CRC32C of the bytes */
	/* The connection, as its socket names itself (learnt once per fd):
	 * family RRC_OUT_INET for an IPv4 TCP connection, 0 when it is none
	 * or unknown (its outputs wait for a checkpoint). Addresses and ports
	 * in network byte order, as in a sockaddr_in. */
	uint16_t family;
	uint16_t reserved;
	uint32_t local_addr;
	uint32_t peer_addr;
	uint16_t local_port;
	uint16_t peer_port;
	uint32_t reserved2;
	uint64_t made;            /* the fd-table number (seq) of the call that made the fd, 0
				   * if made outside the order: which connection of a 4-tuple */
};                                /* 48 bytes */
#define RRC_OUT_INET 2u

/* A cut: where each thread's log stood when checkpoint image_id was taken.
 * "Image N plus each thread's events from next_event on" is what a replay
 * from image N needs (issue 13 §2). */
struct rrc_log_cut {
	uint8_t  image_id[16];
	uint64_t sequence;        /* the image's sequence */
	uint32_t nr_threads;
	uint32_t reserved;
};
struct rrc_log_cut_thread {
	uint32_t tid;
	uint32_t reserved;
	uint64_t next_event;      /* the first event after the cut */
};

/* A release mark (tid-0 batch; RRC §4.5's BBSN): for each listed thread,
 * every event that happened before one of its events below next_event is
 * in the stream before this mark. So an output among those events may be
 * released: the log that reproduces it is complete. The writer collects
 * every ring's count of events before it drains them all, and writes the
 * mark after (rr-log.c). Listed: the threads whose count moved since the
 * previous mark; ascending by tid. */
struct rrc_log_mark {
	uint64_t number;          /* 1, 2, 3... in stream order */
	uint32_t nr_threads;
	uint32_t reserved;
};                                /* 16 bytes, then rrc_log_cut_thread[nr_threads] */

/* What the clients were sent (tid-0 batch; written by the backup's agent,
 * never by a recording): the log a failover hands its replay ends with
 * one. For each connection of the service's gate, the stream offset (bytes
 * after the server's ISN + 1, the count an output's `offset` uses) up to
 * which the gate released the server's bytes. The replay runs up to the
 * least consistent cut that reproduces all of them and no further (RRC
 * §4.4: up to the last released output), and does not send a connection's
 * bytes below its offset again: the repaired socket already stands there
 * (runtime/lib/rr-conns.c, docs/failover.md). */
struct rrc_log_released {
	uint32_t nr_conns;
	uint32_t reserved;
};                                /* 8 bytes, then rrc_log_released_conn[nr_conns] */
struct rrc_log_released_conn {
	uint32_t local_addr;      /* network byte order, as in rrc_log_output */
	uint32_t peer_addr;
	uint16_t local_port;
	uint16_t peer_port;
	uint32_t flags;           /* RRC_RELEASED_FIN */
	uint64_t released;        /* the offset released up to (bytes) */
};                                /* 24 bytes */
#define RRC_RELEASED_FIN 1u       /* the server's FIN went out too, after those bytes */

#endif /* RRC_RRLOG_H */
