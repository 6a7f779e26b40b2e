/* SPDX-License-Identifier: MIT
 *
 * The control thread: serves rrc's requests on the control socket
 * (framing in rrc/control.h, one request per connection) and runs the
 * checkpoint (RRC §4.6: quiesce, scan, capture, "container fork", resume).
 *
 * Outside the pause this thread may use libc. Between rrc_quiesce() and
 * rrc_release() it may not (a parked thread can hold malloc's or stdio's
 * lock): that stretch calls only ASYNC-SIGNAL-SAFE functions.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include "rrc/crc32c.h"
#include "rrc_lib.h"
#include "mounts.h"
#include "maps-deleted.h"
#include "sysvipc.h"
#include "posix-timers.h"
#include "creds.h"
#include "sigpending.h"
#include "lib-fds.h"
#include "accept-queue.h"
#include "rr-replay.h"
#include "rr-log.h"
#include "rr-sink.h"
#include "rr-fds.h"


/* MSG_NOSIGNAL: a caller that went away must not leave a SIGPIPE pending
 * on this thread (it blocks every signal). ASYNC-SIGNAL-SAFE. */
static int send_all(int c, const void *buf, size_t n)
{
	const char *p = buf;
	while (n) {
		long r = rrc_sys_sendto(c, p, n, MSG_NOSIGNAL, 0, 0);
		if (r == -EINTR)
			continue;
		if (r <= 0)
			return -1;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

static int send_msg(int c, uint16_t type, const void *payload, uint32_t len)
{
	struct rrc_ctl_header h = { .magic = RRC_CTL_MAGIC, .version = RRC_CTL_VERSION,
				    .type = type, .length = len };
	h.payload_crc = rrc_crc32c(payload, len);
	h.header_crc = rrc_crc32c(&h, 16);
	if (send_all(c, &h, sizeof h) < 0)
		return -1;
	if (len && send_all(c, payload, len) < 0)
		return -1;
	return 0;
}

static void send_error(int c, uint32_t code, int err, const char *msg)
{
	struct { struct rrc_ctl_error e; char m[1024]; } p;
	size_t l = strlen(msg);
	if (l > sizeof p.m)
		l = sizeof p.m;
	p.e.code = code;
	p.e.sys_errno = err;
	memcpy(p.m, msg, l);
	send_msg(c, RRC_CTL_ERROR, &p, (uint32_t)(sizeof p.e + l));
}

/* A hold is in effect (do_hold): every application thread is parked,
 * maybe one of them inside an fd-table call, holding the table's lock. */
static int holding;

/* Receives exactly n bytes, collecting an SCM_RIGHTS fd if one comes. */
static int recv_all(int c, void *buf, size_t n, int *fdp)
{
	char *p = buf;
	while (n) {
		union { struct cmsghdr h; char b[CMSG_SPACE(sizeof(int) * 4)]; } cb;
		struct iovec iov = { p, n };
		struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1,
				    .msg_control = cb.b, .msg_controllen = sizeof cb.b };
		struct pollfd pf = { .fd = c, .events = POLLIN };
		if (poll(&pf, 1, -1) < 0 && errno != EINTR)
			return -1;
		/* A passed fd arrives at the lowest free number: while recording
		 * it is moved high under the fd table's lock (rr-fds.c), so that
		 * the application never sees a number taken by the library.
		 * Not during a hold: no application thread runs to race for a
		 * number, and a parked one may hold the lock (the RESUME would
		 * never be read; a backup failure's re-protection in rr mode
		 * hung so). */
		if (!holding)
			rrc_fdt_lib_begin();
		ssize_t r = recvmsg(c, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
		int e = errno;
		for (struct cmsghdr *h = r > 0 ? CMSG_FIRSTHDR(&m) : 0; h; h = CMSG_NXTHDR(&m, h)) {
			if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
				continue;
			int nfds = (int)((h->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			int fds[4];
			memcpy(fds, CMSG_DATA(h), sizeof(int) * (size_t)(nfds > 4 ? 4 : nfds));
			for (int i = 0; i < nfds && i < 4; i++) {
				if (*fdp < 0)
					*fdp = rrc_fd_high(fds[i]);
				else
					rrc_libfd_close(fds[i]);
			}
		}
		if (!holding)
			rrc_fdt_lib_end();
		if (r < 0 && (e == EINTR || e == EAGAIN))
			continue;
		if (r <= 0)
			return -1;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

struct tid_count { int n; };
static int count_tid(long tid, void *arg)
{
	if (tid != rrc_g.ctl_tid)
		((struct tid_count *)arg)->n++;
	return 0;
}

static void do_ping(int c)
{
	struct rrc_ctl_pong p = { 0 };
	struct tid_count tc = { 0 };
	rrc_for_each_num_dirent("/proc/self/task", rrc_s->dirbuf, sizeof rrc_s->dirbuf, count_tid, &tc);
	p.pid = (uint32_t)getpid();
	p.nr_threads = (uint32_t)tc.n;
	p.restored = rrc_g.restored;
	p.checkpoints = rrc_g.checkpoints;
	memcpy(p.last_image_id, rrc_g.last_image_id, 16);
	send_msg(c, RRC_CTL_PONG, &p, sizeof p);
}

/* ---- refusals checked before pausing ---- */

struct children { char *msg; size_t cap, len; int found; };
static int task_children(long tid, void *arg)
{
	struct children *ch = arg;
	char path[64], buf[512];
	size_t l = rrc_bput(path, sizeof path, 0, "/proc/self/task/");
	l = rrc_bput_u64(path, sizeof path, l, (uint64_t)tid);
	rrc_bput(path, sizeof path, l, "/children");
	long n = rrc_read_file(path, buf, sizeof buf);
	for (long i = 0; i < n; i++)
		if (buf[i] != ' ' && buf[i] != '\n') {
			/* the list is "pid pid ..." */
			const char *e;
			uint64_t pid = rrc_parse_u64(buf + i, 10, &e);
			i = e - buf;
			if (rrc_s->helper.pid > 0 && pid == (uint64_t)rrc_s->helper.pid)
				continue; /* the library's pause helper (pause-helper.c) */
			ch->found = 1;
			ch->len = rrc_bput(ch->msg, ch->cap, ch->len, " ");
			ch->len = rrc_bput_u64(ch->msg, ch->cap, ch->len, pid);
		}
	return 0;
}

static int check_children(void)
{
	char msg[400];
	struct children ch = { msg, sizeof msg, 0, 0 };
	ch.len = rrc_bput(msg, sizeof msg, 0, "the process has child processes (pids");
	rrc_for_each_num_dirent("/proc/self/task", rrc_s->dirbuf, sizeof rrc_s->dirbuf, task_children, &ch);
	if (!ch.found)
		return 0;
	ch.len = rrc_bput(msg, sizeof msg, ch.len,
			  "): a protected process must remain a single process");
	rrc_set_err(RRC_ERR_CHILDREN, 0, msg, -1, 0);
	return -1;
}

static int zero_id(const uint8_t *id)
{
	for (int i = 0; i < 16; i++)
		if (id[i])
			return 0;
	return 1;
}

/* The snapshot failed or an arming scan may have lost information: the
 * next dump must be full. */
static void forget_parent(void)
{
	memset(rrc_g.last_image_id, 0, 16);
}

enum { DUMP_SERVED = 0, DUMP_RESTORED = 1 };

/* A step of the pause failed once the scan may have re-armed pages that
 * no image holds: the next dump must be full, and the threads run again.
 * Returns 1, the new value of do_dump's "failed". */
static int fail_pause(void)
{
	forget_parent();
	rrc_release();
	return 1;
}

/* After a dump, written or not: the copy snapshot's page store keeps the
 * image's defined pages for the next one if it is complete; a fork
 * snapshot re-armed pages whose defined state only its child saw. */
static void store_after_dump(int copy, int image_ok)
{
	if (copy)
		rrc_pstore_done(image_ok);
	else
		rrc_pstore_forget();
}

/* The fork snapshot: the child (a copy of this process) writes the image
 * and exits; the parent gets its pid. */
static __attribute__((noinline)) long spawn_snapshot(void)
{
	long pid = rrc_sys_clone_snapshot();
	if (pid == 0)
		rrc_snapshot_main(); /* never returns */
	return pid;
}

/* The copy snapshot's image writer: returns once it has exited (its pid,
 * to reap) or failed to start. A function of its own, out of do_dump's
 * frame: the child runs on this stack until it switches to its own. */
static __attribute__((noinline)) long spawn_writer(void)
{
	long pid = rrc_sys_clone_writer();
	if (pid == 0)
		rrc_copy_writer_main(); /* never returns */
	return pid;
}

/* "label" and a duration in microseconds, appended to an RRC_DEBUG line
 * of DEBUG_LINE bytes. */
#define DEBUG_LINE 256
static size_t put_us(char *m, size_t l, const char *label, uint64_t ns)
{
	l = rrc_bput(m, DEBUG_LINE, l, label);
	return rrc_bput_u64(m, DEBUG_LINE, l, ns / 1000);
}

/* While recording, the fd table's lock is the library's from the dump's
 * first check to the end of the pause (rr-fds.c): the checks and the pause
 * make fds at low numbers for a moment, which no application thread may
 * take meanwhile; and no application thread is parked in the middle of an
 * fd call at the cut. Released as soon as the threads run again. */
static int fdt_held;
static void fdt_release(void)
{
	if (fdt_held) {
		fdt_held = 0;
		rrc_fdt_lib_end();
	}
}

static int do_dump(int c, const struct rrc_ctl_dump *req, int imgfd)
{
	struct rrc_scratch *s = rrc_s;
	rrc_fdt_lib_begin();
	fdt_held = 1;
	struct rrc_ctl_dump_paused paused = { 0 };
	int incremental = (req->flags & RRC_DUMP_F_INCREMENTAL) != 0;
	int copy = (req->flags & RRC_DUMP_F_COPY) != 0;
	int tcp = (req->flags & RRC_DUMP_F_TCP_TABLE) != 0;

	if (incremental && (zero_id(rrc_g.last_image_id) ||
			    memcmp(req->parent_id, rrc_g.last_image_id, 16))) {
		send_error(c, RRC_ERR_BAD_PARENT, 0, zero_id(rrc_g.last_image_id)
			   ? "no valid parent: this process has no complete checkpoint to build on (take a full dump)"
			   : "parent_id is not the last checkpoint of this process (take a full dump)");
		goto refused;
	}
	/* set before the checks, which must not take the image file for one
	 * of the application's fds */
	rrc_g.image_fd = imgfd;
	s->err_code = 0;
	s->err_msg[0] = 0;
	rrc_phelper_reap();
	rrc_lib_ranges();
	if (check_children() < 0 || rrc_mounts_check() < 0 || rrc_sysvipc_check() < 0 || rrc_timers_capture() < 0 || rrc_check_maps() < 0 || rrc_deleted_maps_check() < 0 ||
	    rrc_fds_check() < 0 || rrc_aq_check() < 0 || rrc_procattr_capture() < 0 || rrc_sigs_settle() < 0) {
		send_error(c, s->err_code, s->err_errno, s->err_msg);
		goto refused;
	}
	/* the copy snapshot's passes, before the pause (precopy.c) */
	if (copy && (rrc_precopy(!incremental) < 0 || rrc_copy_prefetch() < 0)) {
		forget_parent(); /* pages were re-armed that are in no image */
		rrc_pstore_done(0);
		send_error(c, s->err_code, s->err_errno, s->err_msg);
		goto refused;
	}
	if (copy && rrc_g.test_prepause_ms)
		usleep((useconds_t)rrc_g.test_prepause_ms * 1000);
	if (copy)
		rrc_phelper_ready();
	int rp[2];
	if (pipe2(rp, O_CLOEXEC) < 0) {
		send_error(c, RRC_ERR_SNAPSHOT, errno, "cannot create the result pipe");
		goto refused;
	}
	s->res_rfd = rrc_fd_high(rp[0]);
	s->res_wfd = rrc_fd_high(rp[1]);
	s->req = *req;
	if (!incremental)
		s->req.flags &= ~RRC_DUMP_F_INCREMENTAL;

	/* ---------------- the pause: ASYNC-SIGNAL-SAFE from here ---------------- */
	uint64_t t0 = rrc_mono_ns();
	int failed = rrc_quiesce();
	/* signals pending at the park were taken into the image's memory
	 * (sigpending.c); what could not be is refused */
	if (!failed && rrc_sigs_check() < 0) {
		failed = 1;
		rrc_release(); /* nothing was scanned: dirty tracking is intact */
	}
	/* the credentials captured before the pause are still the process's */
	if (!failed && rrc_creds_check() < 0) {
		failed = 1;
		rrc_release();
	}
	if (!failed && rrc_fj_check() < 0) {
		failed = 1;
		rrc_release(); /* the data directory's journal is unusable (sticky) */
	}
	/* private mappings of deleted files become anonymous copies before
	 * anything reads the memory map (maps-deleted.c) */
	if (!failed && rrc_deleted_maps_convert() < 0) {
		failed = 1;
		rrc_release();
	}
	/* the SysV objects of the process's IPC namespace (sysvipc.c) */
	if (!failed && rrc_sysvipc_capture() < 0) {
		failed = 1;
		rrc_release();
	}
	uint64_t t1 = rrc_mono_ns();
	/* a copy snapshot carrying the last image's defined set over: the
	 * scan also finds the pages dropped since (snapshot.c, carry_presence) */
	struct rrc_pstore *ps = &s->pstore;
	int carried = copy && incremental && ps->defined_valid;
	struct rrc_holes holes = { ps->wide, ps->nr_wide, ps->holes, 0, ps->cap_holes };
	/* A copy snapshot's pause runs on two CPUs: the pause helper, a
	 * process with a memory of its own (pause-helper.c), reads the memory
	 * map and the fd table while this thread scans, copies and takes the
	 * TCP table if asked (below); then this thread takes the rest
	 * (snapshot.c). */
	int helper = 0;
	s->nr_tcp = 0;
	if (!failed && copy) {
		s->dbg_ns[9] = rrc_mono_ns();
		helper = rrc_phelper_spawn();
		if (helper && tcp) {
			int nl = rrc_tcp_diag_socket();
			s->diag_fd = nl >= 0 ? rrc_fd_high(nl) : -1; /* else the helper takes the table */
		}
		if (helper)
			rrc_phelper_go(tcp && s->diag_fd < 0, s->diag_fd);
		s->dbg_ns[10] = rrc_mono_ns();
	}
	if (!failed && rrc_scan(carried ? &holes : NULL) < 0)
		failed = fail_pause(); /* pages may have been re-armed without being recorded */
	if (!failed && copy) {
		ps->nr_holes = holes.nr;
		rrc_copy_begin(carried);
	}
	uint64_t t2 = rrc_mono_ns();
	if (!failed && !helper && rrc_fds_capture() < 0)
		failed = fail_pause();
	s->dbg_ns[3] = rrc_mono_ns();
	/* the TCP stream table: write_seq/copied_seq cannot move while every
	 * application thread is parked (sk-diag.c) */
	if (!failed && tcp && !helper && rrc_tcp_capture(-1) < 0)
		failed = fail_pause();
	/* copy snapshot: what the image describes, and the last pages */
	if (!failed && copy && rrc_copy_capture(helper ? s->helper.box : NULL) < 0)
		failed = fail_pause();
	if (!failed && copy && rrc_copy_capture_pages() < 0)
		failed = fail_pause();
	/* the TCP table here while the helper lists the fds (pause-helper.c) */
	uint32_t v6_dumped = s->tcp_v6;
	if (!failed && s->diag_fd >= 0 && rrc_tcp_capture(s->diag_fd) < 0)
		failed = fail_pause();
	if (!failed && helper && rrc_phelper_join() < 0)
		failed = fail_pause();
	/* an IPv6 TCP socket the check before the pause did not see */
	if (!failed && s->diag_fd >= 0 && s->tcp_v6 && !v6_dumped && rrc_tcp_capture(s->diag_fd) < 0)
		failed = fail_pause();
	if (s->diag_fd >= 0) {
		/* closed before the context is saved: no image holds it. After
		 * a failure, not before the helper is done with the fd table:
		 * a pipe of its walk could take the number. */
		if (failed)
			rrc_phelper_settle();
		rrc_libfd_close(s->diag_fd);
		s->diag_fd = -1;
	}
	uint64_t t3 = rrc_mono_ns();
	long pid = -1;
	if (!failed) {
		struct { long sec, nsec; } rt;
		rrc_sys_clock_gettime(0 /* CLOCK_REALTIME */, &rt);
		s->created_ns = (uint64_t)rt.sec * 1000000000ull + (uint64_t)rt.nsec;
		memcpy(rrc_g.cur_image_id, req->image_id, 16);
		rrc_g.cur_sequence = incremental ? rrc_g.last_sequence + 1 : 0;
		rrc_fill_self_slot(&rrc_g.ctl_slot);
		if (rrc_ctx_save(&rrc_g.ctl_slot.t.resume) != 0) {
			/* We are a process rebuilt by rrc-restore from the image
			 * written below. c and imgfd are not open here. */
			fdt_held = 0; /* the fd table's lock is reset by the restore (rr-fds.c) */
			rrc_post_restore();
			return DUMP_RESTORED;
		}
		rrc_fj_cut(); /* the image's FILEOPS: the journal up to now */
		rrc_rr_cut(rrc_g.cur_image_id, rrc_g.cur_sequence); /* each thread's place in the record log */
		if (!copy)
			pid = spawn_snapshot();
		else if (rrc_copy_capture_last() < 0)
			failed = fail_pause();
	}
	uint64_t t4 = rrc_mono_ns();
	/* the pause ends when the release starts: once the futex wake is
	 * issued the application threads run, possibly before this one */
	uint64_t t5 = rrc_mono_ns();
	if (!failed)
		rrc_release();
	/* ---------------- end of the pause ---------------- */
	fdt_release();
	if (helper)
		rrc_phelper_settle(); /* a failed pause may not have waited for it */

	paused.pause_ns = t5 - t0;
	paused.quiesce_ns = t1 - t0;
	paused.scan_ns = t2 - t1;
	paused.capture_ns = t3 - t2;
	paused.threads = rrc_g.nslots;
	paused.untracked_vmas = s->nr_newly_untracked;
	paused.written_pages = s->written_pages;
	if (copy) {
		paused.snapshot = RRC_SNAPSHOT_COPY;
		paused.copy_ns = t4 - t3;
		paused.copied_pages = ps->copy_pages;
		paused.precopy_ns = ps->precopy_ns;
		paused.precopy_pages = ps->precopy_pages;
		paused.precopy_passes = ps->passes;
	} else {
		paused.snapshot = RRC_SNAPSHOT_FORK;
		paused.fork_ns = t4 - t3;
	}
	if (!failed && copy) {
		/* the writer holds this thread until it exits (CLONE_VFORK): the
		 * caller hears of the pause first */
		send_msg(c, RRC_CTL_DUMP_PAUSED, &paused, sizeof paused);
		rrc_register_untracked();
		pid = spawn_writer();
	}

	rrc_g.image_fd = -1;
	rrc_libfd_close(s->res_wfd);
	s->res_wfd = -1;
	if (failed || pid < 0) {
		if (!failed) {
			forget_parent();
			rrc_set_err(RRC_ERR_SNAPSHOT, (int)-pid, copy ? "clone() of the image writer failed"
						: "clone() of the snapshot failed", -1, 0);
		}
		store_after_dump(copy, 0);
		rrc_fds_cleanup();
		rrc_fj_commit(0);
		rrc_libfd_close(s->res_rfd);
		s->res_rfd = -1;
		rrc_libfd_close(imgfd);
		send_error(c, s->err_code, s->err_errno, s->err_msg);
		return DUMP_SERVED;
	}
	if (!copy)
		send_msg(c, RRC_CTL_DUMP_PAUSED, &paused, sizeof paused);
	if (rrc_g.debug) {
		char m[DEBUG_LINE];
		size_t l = put_us(m, 0, "debug: quiesce: signals sent ", s->dbg_quiesce[1] - s->dbg_quiesce[0]);
		l = put_us(m, l, " us, all parked ", s->dbg_quiesce[2] - s->dbg_quiesce[1]);
		l = put_us(m, l, " us, checked for new threads ", s->dbg_quiesce[3] - s->dbg_quiesce[2]);
		l = rrc_bput(m, sizeof m, l, " us, threads ");
		l = rrc_bput_u64(m, sizeof m, l, s->nr_signalled);
		rrc_log(m);
		l = put_us(m, 0, "debug: rrc_lib_ranges ", s->dbg_ns[0] - t1);
		l = put_us(m, l, " us, written scan ", s->dbg_ns[1] - s->dbg_ns[0]);
		l = put_us(m, l, " us, untracked scan ", s->dbg_ns[2] - s->dbg_ns[1]);
		l = rrc_bput(m, sizeof m, l, " us (");
		l = rrc_bput_u64(m, sizeof m, l, s->nr_untracked);
		rrc_bput(m, sizeof m, l, " VMAs)");
		rrc_log(m);
		if (copy && helper) {
			const struct rrc_helper_box *b = s->helper.box;
			l = put_us(m, 0, "debug: pause helper: wake ", b->start_ns - b->go_ns);
			l = put_us(m, l, " us, memory map ", b->map_ns - b->start_ns);
			l = put_us(m, l, " us, fd table ", b->fds_ns - b->map_ns);
			l = put_us(m, l, " us, TCP table ", b->done_ns - b->fds_ns);
			l = rrc_bput(m, sizeof m, l, " us in ");
			l = rrc_bput_u64(m, sizeof m, l, b->tcp_dumps);
			l = rrc_bput(m, sizeof m, l, " dumps (helper ");
			l = rrc_bput_u64(m, sizeof m, l, (uint64_t)s->helper.pid);
			l = rrc_bput(m, sizeof m, l, ", ");
			l = rrc_bput_u64(m, sizeof m, l, s->helper.starts);
			l = put_us(m, l, " started so far); this thread: start and go ", s->dbg_ns[10] - s->dbg_ns[9]);
			l = put_us(m, l, " us, waited for its map ", s->dbg_ns[11] - s->dbg_ns[4]);
		} else if (copy) {
			l = put_us(m, 0, "debug: no pause helper: fd table on this thread ", s->dbg_ns[3] - t2);
		} else {
			l = put_us(m, 0, "debug: capture: fds ", s->dbg_ns[3] - t2);
			l = put_us(m, l, " us, TCP table ", t3 - s->dbg_ns[3]);
		}
		rrc_bput(m, sizeof m, l, " us");
		rrc_log(m);
		if (copy) {
			l = put_us(m, 0, "debug: copy capture: process and signals ", s->dbg_ns[4] - s->dbg_ns[3]);
			l = put_us(m, l, " us, memory map ", s->dbg_ns[5] - s->dbg_ns[4]);
			l = put_us(m, l, " us, untracked presence ", s->dbg_ns[7] - s->dbg_ns[6]);
			l = put_us(m, l, " us, copies ", s->dbg_ns[8] - s->dbg_ns[7]);
			l = put_us(m, l, " us, helper wait ", t3 - s->dbg_ns[8]);
			rrc_bput(m, sizeof m, l, " us");
			rrc_log(m);
		}
	}

	if (!copy)
		rrc_register_untracked();

	int status = 0;
	long w;
	do
		w = rrc_sys_wait4((int)pid, &status, __WALL);
	while (w == -EINTR);
	struct rrc_ctl_dump_done done = { 0 };
	long n = rrc_read_fd_all(s->res_rfd, (char *)&done, sizeof done + 1);
	int image_ok = w >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 && n == (long)sizeof done;
	store_after_dump(copy, image_ok);
	rrc_fds_cleanup();
	rrc_libfd_close(s->res_rfd);
	s->res_rfd = -1;
	rrc_libfd_close(imgfd);
	if (!image_ok) {
		char m[300];
		size_t l = rrc_bput(m, sizeof m, 0, "the snapshot child failed: ");
		if (w < 0)
			l = rrc_bput(m, sizeof m, l, "cannot wait for it");
		else if (WIFSIGNALED(status)) {
			l = rrc_bput(m, sizeof m, l, "killed by signal ");
			l = rrc_bput_u64(m, sizeof m, l, (uint64_t)WTERMSIG(status));
		} else if (WEXITSTATUS(status))
			l = rrc_bput(m, sizeof m, l, rrc_snapshot_strerror(WEXITSTATUS(status)));
		else
			l = rrc_bput(m, sizeof m, l, "no result reported");
		forget_parent();
		rrc_fj_commit(0); /* the records stay for the next image */
		send_error(c, RRC_ERR_SNAPSHOT, 0, m);
		return DUMP_SERVED;
	}
	rrc_fj_commit(1);
	memcpy(rrc_g.last_image_id, req->image_id, 16);
	rrc_g.last_sequence = rrc_g.cur_sequence;
	rrc_g.checkpoints++;
	send_msg(c, RRC_CTL_DUMP_DONE, &done, sizeof done);
	return DUMP_SERVED;

refused: /* nothing was paused or changed; the image fd is ours to close */
	fdt_release();
	rrc_g.image_fd = -1;
	rrc_libfd_close(imgfd);
	return DUMP_SERVED;
}

static uint8_t payload[RRC_CTL_MAX_PAYLOAD];

/* Reads one request into h and payload[] (an fd that comes with it into
 * *fdp). 0: a well-formed request; -1: the connection failed or closed;
 * -2: malformed (answered with ERROR PROTOCOL). ASYNC-SIGNAL-SAFE (a hold
 * reads its RESUME with it). */
static int recv_request(int c, struct rrc_ctl_header *h, int *fdp)
{
	if (recv_all(c, h, sizeof *h, fdp) < 0)
		return -1;
	if (h->magic != RRC_CTL_MAGIC || h->header_crc != rrc_crc32c(h, 16)) {
		send_error(c, RRC_ERR_PROTOCOL, 0, "bad request header (magic or header CRC)");
		return -2;
	}
	if (h->version != RRC_CTL_VERSION) {
		send_error(c, RRC_ERR_PROTOCOL, 0, "unsupported control protocol version");
		return -2;
	}
	if (h->length > RRC_CTL_MAX_PAYLOAD) {
		send_error(c, RRC_ERR_PROTOCOL, 0, "request payload longer than RRC_CTL_MAX_PAYLOAD");
		return -2;
	}
	if (h->length && recv_all(c, payload, h->length, fdp) < 0)
		return -1;
	if (h->payload_crc != rrc_crc32c(payload, h->length)) {
		send_error(c, RRC_ERR_PROTOCOL, 0, "bad request payload CRC");
		return -2;
	}
	return 0;
}

/* ---- HOLD: the threads parked while the caller copies the data directory ---- */

static void set_rcvtimeo(int c, long sec, long usec)
{
	struct { long sec, usec; } tv = { sec, usec };
	rrc_sys_setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

/* A connection that arrives during a hold: its request is read (bounded)
 * and refused. ASYNC-SIGNAL-SAFE. */
static void refuse_while_held(void)
{
	long c = rrc_sys_accept4(rrc_g.listen_fd, 0, 0, SOCK_CLOEXEC);
	if (c < 0)
		return;
	struct rrc_ctl_header h;
	int fd = -1;
	set_rcvtimeo((int)c, 0, 200000);
	if (recv_request((int)c, &h, &fd) == 0)
		send_error((int)c, RRC_ERR_HELD, 0, h.type == RRC_CTL_RESUME
			   ? "RESUME on another connection than the HOLD's: a hold is resumed on its own connection"
			   : "the process is held (HOLD on another control connection, for a copy of its data "
			     "directory): retry when it is resumed");
	if (fd >= 0)
		rrc_libfd_close(fd);
	rrc_libfd_close((int)c);
}

static void do_hold(int c, const struct rrc_ctl_hold *req)
{
	struct rrc_scratch *s = rrc_s;
	uint32_t timeout_ms = req->timeout_ms ? req->timeout_ms : RRC_HOLD_MAX_MS;

	if (timeout_ms > RRC_HOLD_MAX_MS || req->reserved) {
		send_error(c, RRC_ERR_PROTOCOL, 0, req->reserved ? "HOLD: reserved field is not zero"
					      : "HOLD: timeout_ms above RRC_HOLD_MAX_MS (10000)");
		return;
	}
	s->err_code = 0;
	s->err_msg[0] = 0;
	/* the copy could not be brought forward: refuse before pausing */
	if (rrc_fj_check() < 0) {
		send_error(c, s->err_code, s->err_errno, s->err_msg);
		return;
	}

	/* ---------------- the hold: ASYNC-SIGNAL-SAFE from here ---------------- */
	uint64_t t0 = rrc_mono_ns();
	if (rrc_quiesce() < 0) { /* released already */
		send_error(c, s->err_code, s->err_errno, s->err_msg);
		return;
	}
	uint64_t t1 = rrc_mono_ns();
	if (rrc_fj_check() < 0) { /* broke between the check and the park */
		rrc_release();
		send_error(c, s->err_code, s->err_errno, s->err_msg);
		return;
	}
	holding = 1; /* until this function returns: every path out releases */
	struct rrc_ctl_held held = { .quiesce_ns = t1 - t0, .threads = rrc_g.nslots, .timeout_ms = timeout_ms };
	rrc_fj_discard(&held.discarded_ops, &held.discarded_bytes);
	/* the last image's successor would lack the discarded changes */
	forget_parent();
	if (send_msg(c, RRC_CTL_HELD, &held, sizeof held) < 0) {
		rrc_release();
		rrc_log("HOLD: the caller went away before HELD: threads resumed");
		return;
	}
	uint64_t deadline = rrc_mono_ns() + (uint64_t)timeout_ms * 1000000ull;
	set_rcvtimeo(c, 1, 0); /* a RESUME arrives whole: never wait long inside the hold */
	for (;;) {
		uint64_t now = rrc_mono_ns();
		if (now >= deadline) {
			rrc_release();
			char m[200];
			size_t l = rrc_bput(m, sizeof m, 0, "no RESUME within the hold's ");
			l = rrc_bput_u64(m, sizeof m, l, timeout_ms);
			rrc_bput(m, sizeof m, l, " ms: the threads were resumed; a copy taken during the hold "
				 "may not be consistent");
			rrc_log(m);
			send_error(c, RRC_ERR_HOLD_EXPIRED, 0, m);
			return;
		}
		struct pollfd pf[2] = { { .fd = c, .events = POLLIN }, { .fd = rrc_g.listen_fd, .events = POLLIN } };
		struct rrc_ts ts = { (long)((deadline - now) / 1000000000ull), (long)((deadline - now) % 1000000000ull) };
		long r = rrc_sys_ppoll(pf, 2, &ts);
		if (r == -EINTR || r == 0)
			continue;
		if (r < 0) {
			rrc_release();
			send_error(c, RRC_ERR_HELD, (int)-r, "HOLD: ppoll failed: the threads were resumed");
			return;
		}
		if (pf[1].revents & POLLIN)
			refuse_while_held();
		if (!pf[0].revents)
			continue;
		struct rrc_ctl_header h;
		int fd = -1;
		int got = recv_request(c, &h, &fd);
		if (fd >= 0)
			rrc_libfd_close(fd);
		if (got == -1) {
			rrc_release();
			rrc_log("HOLD: the control connection closed without RESUME: threads resumed");
			return;
		}
		if (got == -2)
			continue; /* answered; still held */
		if (h.type == RRC_CTL_RESUME && h.length == 0) {
			uint64_t t2 = rrc_mono_ns();
			rrc_release();
			/* ---------------- end of the hold ---------------- */
			struct rrc_ctl_resumed res = { .held_ns = t2 - t0, .threads = held.threads };
			send_msg(c, RRC_CTL_RESUMED, &res, sizeof res);
			return;
		}
		send_error(c, RRC_ERR_HELD, 0, h.type == RRC_CTL_RESUME
			   ? "RESUME payload must be empty; still held"
			   : h.type == RRC_CTL_HOLD ? "a second HOLD: the threads are already held on this connection; send RESUME"
						    : "the threads are held on this connection: only RESUME is served");
	}
}

/* One request. Returns DUMP_RESTORED if this thread just came back from a
 * restore (the connection does not exist in this process). */
static int serve(int c)
{
	struct rrc_ctl_header h;
	int fd = -1;

	struct timeval tv = { 10, 0 };
	setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	if (recv_request(c, &h, &fd) < 0)
		goto out;
	switch (h.type) {
	/* Every request but DUMP (which holds it itself, to the end of its
	 * pause) runs under the fd table's lock: the /proc directories they
	 * read open fds at low numbers (rr-fds.c). */
	case RRC_CTL_PING:
		rrc_fdt_lib_begin();
		do_ping(c);
		rrc_fdt_lib_end();
		break;
	case RRC_CTL_DUMP: {
		struct rrc_ctl_dump req;
		if (h.length != sizeof req) {
			send_error(c, RRC_ERR_PROTOCOL, 0, "DUMP payload has the wrong size");
			break;
		}
		if (fd < 0) {
			send_error(c, RRC_ERR_PROTOCOL, 0, "DUMP without an image file descriptor (SCM_RIGHTS)");
			break;
		}
		memcpy(&req, payload, sizeof req);
		if (rrc_rr_mode == RRC_RR_REPLAY || (rrc_rp_log_fd() >= 0 && !rrc_rp_live())) {
			send_error(c, RRC_ERR_REPLAYING, 0,
				   "the process is replaying its record log: a checkpoint waits until every thread is live");
			break;
		}
		/* above the application's fds, like every library fd */
		int imgfd = rrc_fd_high(fd);
		fd = -1;
		/* a process that switched users is dumpable while it is
		 * dumped, and only then (creds.c) */
		if (rrc_creds_dump_begin() < 0) {
			rrc_libfd_close(imgfd);
			send_error(c, rrc_s->err_code, rrc_s->err_errno, rrc_s->err_msg);
			break;
		}
		if (do_dump(c, &req, imgfd) == DUMP_RESTORED)
			return DUMP_RESTORED;
		rrc_creds_dump_end();
		break;
	}
	case RRC_CTL_HOLD: {
		struct rrc_ctl_hold req;
		if (h.length != sizeof req) {
			send_error(c, RRC_ERR_PROTOCOL, 0, "HOLD payload has the wrong size");
			break;
		}
		memcpy(&req, payload, sizeof req);
		rrc_fdt_lib_begin(); /* before the threads park: none of them holds it then */
		do_hold(c, &req);
		holding = 0;
		rrc_fdt_lib_end();
		break;
	}
	case RRC_CTL_RESUME:
		send_error(c, RRC_ERR_NOT_HELD, 0, "RESUME without a HOLD on this connection: nothing is held");
		break;
	case RRC_CTL_RECORD: {
		struct rrc_ctl_record req;
		if (h.length != sizeof req) {
			send_error(c, RRC_ERR_PROTOCOL, 0, "RECORD payload has the wrong size");
			break;
		}
		memcpy(&req, payload, sizeof req);
		if (fd < 0 || (req.flags & ~(RRC_RECORD_F_FRAMED | RRC_RECORD_F_SEALED)) || req.reserved) {
			send_error(c, RRC_ERR_PROTOCOL, 0, "RECORD without a sink (SCM_RIGHTS), or with unknown flags");
			break;
		}
		int sinkfd = rrc_fd_high(fd);
		fd = -1;
		int sealed = req.flags & RRC_RECORD_F_SEALED;
		if (rrc_rr_sink_hand(sinkfd, sealed ? req.key : 0, req.first_frame, req.flags & RRC_RECORD_F_FRAMED) < 0) {
			rrc_libfd_close(sinkfd);
			send_error(c, RRC_ERR_NO_RECORDING, 0,
				   "no recording waits for a sink (the process was not restored to record again "
				   "after its replay nor launched with a replaceable sink, or has its sink already)");
			break;
		}
		/* the key stays nowhere but in the sink's state */
		memset(req.key, 0, sizeof req.key);
		memset(payload, 0, sizeof req);
		rrc_rr_wake_writer();
		send_msg(c, RRC_CTL_RECORDING, 0, 0);
		break;
	}
	case RRC_CTL_REPLAY_STATUS: {
		/* the state and the report, one message (rr-replay.c) */
		uint8_t out[sizeof(struct rrc_ctl_replay) + 768];
		struct rrc_ctl_replay st;
		uint32_t n = 0;
		rrc_rp_status(&st, (char *)out + sizeof st, 768, &n);
		memcpy(out, &st, sizeof st);
		send_msg(c, RRC_CTL_REPLAY_STATE, out, sizeof st + n);
		break;
	}
	default:
		send_error(c, RRC_ERR_PROTOCOL, 0, "unknown request type");
	}
out:
	if (fd >= 0)
		rrc_libfd_close(fd);
	return DUMP_SERVED;
}

void *rrc_control_main(void *arg)
{
	rrc_rr_library_thread();
	/* its own name: ps, top and perf tell it from the application's
	 * (bench/replication.py charges each thread's CPU by name) */
	rrc_sys_prctl(15 /* PR_SET_NAME */, (unsigned long)"rrc-control", 0, 0, 0);
	rrc_g.ctl_tid = (int)rrc_sys_gettid();
	rrc_proc_dir_learn();
	for (;;) {
		/* wait outside the fd table's lock, accept and move the new fd
		 * high under it (rr-fds.c); the listener is nonblocking */
		struct pollfd pf = { .fd = rrc_g.listen_fd, .events = POLLIN };
		poll(&pf, 1, -1);
		rrc_fdt_lib_begin();
		int c = accept4(rrc_g.listen_fd, 0, 0, SOCK_CLOEXEC);
		int e = errno;
		if (c >= 0)
			c = rrc_fd_high(c);
		rrc_fdt_lib_end();
		if (c < 0) {
			if (e != EINTR && e != ECONNABORTED && e != EAGAIN)
				usleep(100000);
			continue;
		}
		rrc_g.conn_fd = c;
		if (serve(c) == DUMP_RESTORED) {
			rrc_g.conn_fd = -1; /* not open in the restored process */
			continue;
		}
		rrc_g.conn_fd = -1;
		rrc_libfd_close(c);
	}
	return 0;
}
