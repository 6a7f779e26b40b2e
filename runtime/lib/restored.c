/* SPDX-License-Identifier: MIT
 *
 * The control thread's path after rrc-restore resumed it (its saved resume
 * context returned 1 in do_dump). Every application thread is back in the
 * park handler, waiting for the generation to change; they may hold libc
 * locks, so until rrc_release() this is ASYNC-SIGNAL-SAFE code.
 *
 * Order: wait for every thread to report back, unmap the restorer blob,
 * reopen the library's /proc fds, make a new userfaultfd and write-protect
 * every private VMA (so that a next dump may be incremental against the
 * restored image), then release the threads.
 */
#include <errno.h>
#include <fcntl.h>
#include "rrc_lib.h"
#include "mounts.h"
#include "sysvipc.h"
#include "posix-timers.h"
#include "creds.h"
#include "lib-fds.h"
#include "accept-queue.h"
#include "rr-log.h"
#include "rr-fds.h"
#include "rr-replay.h"


#define BACK_TIMEOUT_NS 5000000000ull

void rrc_post_restore(void)
{
	struct rrc_restore_area *ra = &rrc_g.restore_area;
	char m[200];

	rrc_g.pid = (int)rrc_sys_getpid();
	rrc_g.ctl_tid = (int)rrc_sys_gettid();
	rrc_rr_restored(); /* before any thread runs: the rings are not in the image */
	rrc_fdt_restored();
	rrc_g.conn_fd = -1;
	rrc_g.image_fd = -1;
	/* the image's owned numbers were the old process's; the library
	 * remakes its fds below (the control socket came back where it was).
	 * Before the memory is registered, so the next incremental image may
	 * keep the old bits: harmless, every restore starts here again. */
	rrc_libfd_reset();
	rrc_libfd_own(rrc_g.listen_fd);
	if (RRC_LOAD(&ra->magic) != RRC_RESTORE_AREA_MAGIC)
		rrc_log("restored without a filled restore area (magic missing): continuing");

	uint32_t want = ra->nr_threads ? ra->nr_threads - 1 : 0;
	uint64_t deadline = rrc_mono_ns() + BACK_TIMEOUT_NS;
	for (;;) {
		uint32_t back = RRC_LOAD(&ra->threads_back);
		if (back >= want)
			break;
		if (rrc_mono_ns() > deadline) {
			size_t l = rrc_bput(m, sizeof m, 0, "after restore only ");
			l = rrc_bput_u64(m, sizeof m, l, back);
			l = rrc_bput(m, sizeof m, l, " of ");
			l = rrc_bput_u64(m, sizeof m, l, want);
			rrc_bput(m, sizeof m, l, " threads came back within 5 s: continuing");
			rrc_log(m);
			break;
		}
		struct rrc_ts ts = { 0, 10000000 };
		rrc_sys_futex(&ra->threads_back, RRC_FUTEX_WAIT, back, &ts);
	}
	if (ra->blob_start && ra->blob_len)
		rrc_sys_munmap((void *)ra->blob_start, ra->blob_len);

	/* the scratch arena was not in the image */
	if (rrc_scratch_map() < 0)
		rrc_log("after restore: cannot map the scratch arena");
	else
		rrc_proc_dir_learn();
	long fd = rrc_sys_openat(-100 /* AT_FDCWD */, "/proc/self/maps", O_RDONLY | O_CLOEXEC, 0);
	rrc_g.maps_fd = fd < 0 ? -1 : rrc_fd_high((int)fd);
	fd = rrc_sys_openat(-100, "/proc/self/pagemap", O_RDONLY | O_CLOEXEC, 0);
	rrc_g.pagemap_fd = fd < 0 ? -1 : rrc_fd_high((int)fd);
	int u = rrc_uffd_open();
	rrc_g.uffd = u < 0 ? -1 : rrc_fd_high(u);
	if (u < 0 || rrc_g.pagemap_fd < 0 || rrc_g.maps_fd < 0) {
		rrc_log("after restore: cannot set up dirty tracking; only full dumps will be accepted");
		rrc_memset(rrc_g.last_image_id, 0, 16);
	} else {
		rrc_marker_learn();
		rrc_register_all(1);
		/* the image we came from is a valid parent: same memory, and
		 * everything is write-protected from here on */
		rrc_memcpy(rrc_g.last_image_id, ra->image_id, 16);
		rrc_g.last_sequence = rrc_g.cur_sequence;
		/* expected after a failover: the backup restores a merged image
		 * of its own (the store's committed state, with a fresh id) */
		if (!rrc_memeq(ra->image_id, rrc_g.cur_image_id, 16))
			rrc_log("after restore: restored from an image this process did not write "
				"(a merged one, such as a backup's committed state); the next "
				"incremental dump takes it as its parent");
	}
	/* connections the primary's kernel had completed but the application
	 * had not accepted, and (a failover) those opened since the
	 * checkpoint: queued behind dummies before anything runs, or, for a
	 * replay on the clients' connections, parked for the replayed accepts */
	struct rrc_replay_request replay = ra->replay;
	int park = replay.fd >= 0 && (replay.flags & RRC_REPLAY_CONNECTIONS);
	rrc_aq_restore(park);
	/* POSIX timers, with their ids (posix-timers.c) */
	rrc_timers_restored();
	/* last of what may need root: this thread's own credentials, which
	 * the restorer gave every application thread (creds.c) */
	rrc_creds_restored();
	rrc_mounts_remember(); /* the restored container's table */
	rrc_sysvipc_remember(); /* the IPC namespace's limits then */
	rrc_g.restored = 1;
	/* `rrc restore --replay`: the log indexed and replay on before any
	 * thread runs. A log that cannot be replayed leaves the threads parked
	 * (nothing runs live that should have replayed); REPLAY_STATUS says why. */
	ra->magic = 0;
	if (replay.fd >= 0) {
		if (rrc_rp_load(ra->image_id, &replay) < 0)
			return; /* threads stay parked: REPLAY_STATUS reports the refusal */
	}
	rrc_release();
}
