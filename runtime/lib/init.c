/* SPDX-License-Identifier: MIT
 *
 * The constructor. Passive unless $RRC_CONTROL names the control socket.
 * Otherwise: userfaultfd dirty tracking on every private VMA, the park
 * signal handler, the control socket, the control thread (architecture.md
 * "librrc.so: capture inside the process").
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include "rrc_lib.h"
#include "mounts.h"
#include "sysvipc.h"
#include "lib-fds.h"
#include "accept-queue.h"
#include "waits.h"
#include "rr-log.h"
#include "rr-io.h"
#include "rr-fds.h"

struct rrc_lib_state rrc_g = {
	.listen_fd = -1, .conn_fd = -1, .uffd = -1, .pagemap_fd = -1, .maps_fd = -1, .image_fd = -1,
};
struct rrc_scratch *rrc_s;

void rrc_guards_resolve(void) RRC_HIDDEN;
void rrc_wrap_files_resolve(void) RRC_HIDDEN;

#define WRITTEN_CAP   (1u << 20)          /* page_region entries (24 MB virtual) */
#define FDBUF_CAP     (8u << 20)
#define TCP_CAP       (1u << 16)          /* TCP stream table records (2 x 7 MB virtual) */

/* The devices of pipefs and sockfs on this kernel (they are numbered at
 * boot, so a restored process learns them again with its fresh arena):
 * an fd whose fstat shows one of them is a pipe or a socket without
 * reading its /proc link, which costs the pause ~5 us per fd (fds.c).
 * ASYNC-SIGNAL-SAFE. */
static void learn_fs_devs(void)
{
	struct stat st;
	int p[2];
	if (rrc_sys_pipe2(p, O_CLOEXEC) == 0) {
		if (rrc_sys_fstat(p[0], &st) == 0 && S_ISFIFO(st.st_mode))
			rrc_s->pipefs_dev = st.st_dev;
		rrc_libfd_close(p[0]);
		rrc_libfd_close(p[1]);
	}
	long ev = rrc_sys_eventfd2(0, O_CLOEXEC); /* every anonymous inode is on one file system */
	if (ev >= 0) {
		if (rrc_sys_fstat((int)ev, &st) == 0)
			rrc_s->anonfs_dev = st.st_dev;
		rrc_libfd_close((int)ev);
	}
	long sk = rrc_sys_socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (sk >= 0) {
		if (rrc_sys_fstat((int)sk, &st) == 0 && S_ISSOCK(st.st_mode))
			rrc_s->sockfs_dev = st.st_dev;
		rrc_libfd_close((int)sk);
	}
}

/* How many VMAs the process can have: the kernel refuses a mapping past
 * vm.max_map_count (plus a few it lists beyond the count, [vsyscall]),
 * and never fewer than 65536 are planned for. A limit raised later than
 * this is read makes a snapshot of more VMAs fail with its own message
 * (RRC_SNAP_VMAS). ASYNC-SIGNAL-SAFE. */
static uint64_t vma_capacity(void)
{
	char buf[32];
	long n = rrc_read_file("/proc/sys/vm/max_map_count", buf, sizeof buf - 1);
	uint64_t v = 0;
	if (n > 0) {
		buf[n] = 0;
		v = rrc_parse_u64(buf, 10, NULL) + 16;
	}
	return v < 65536 ? 65536 : v;
}

/* The arena is private anonymous and NORESERVE: only touched pages cost
 * memory. ASYNC-SIGNAL-SAFE (used again after a restore). */
int rrc_scratch_map(void)
{
	uint64_t vma_cap = vma_capacity();
	size_t child_area = rrc_snapshot_area_len(vma_cap);
	size_t head = (sizeof(struct rrc_scratch) + 4095) & ~(size_t)4095;
	size_t wlen = (size_t)WRITTEN_CAP * sizeof(struct page_region);
	size_t tlen = (size_t)TCP_CAP * sizeof(struct rrc_tcp_stream);
	size_t ulen = ((size_t)vma_cap * sizeof(struct rrc_range) + 4095) & ~(size_t)4095;
	size_t len = head + wlen + 2 * FDBUF_CAP + 2 * tlen + ulen + child_area;
	/* the data directory's change journal (files-journal.c) at the end */
	size_t jlen = (sizeof(struct rrc_fj) + 4095) & ~(size_t)4095;
	size_t joff = len;
	len += jlen + RRC_FJ_CAP;
	size_t soff = len; /* SysV IPC objects (sysvipc.c) */
	len += RRC_SYSV_CAP;
	long r = rrc_map_guarded(len);
	if (r < 0 && r > -4096)
		return (int)r;
	uint8_t *p = (uint8_t *)r;
	rrc_g.scratch = p;
	rrc_g.scratch_len = len;
	rrc_s = (struct rrc_scratch *)p;
	rrc_s->written = (struct page_region *)(p + head);
	rrc_s->cap_written = WRITTEN_CAP;
	rrc_s->fdbuf = p + head + wlen;
	rrc_s->fdbuf_cap = FDBUF_CAP;
	rrc_s->fdprev = p + head + wlen + FDBUF_CAP;
	uint8_t *q = p + head + wlen + 2 * FDBUF_CAP;
	rrc_s->tcp = (struct rrc_tcp_stream *)q;
	rrc_s->tcp_prev = (struct rrc_tcp_stream *)(q + tlen);
	rrc_s->cap_tcp = TCP_CAP;
	rrc_s->untracked = (struct rrc_range *)(q + 2 * tlen);
	rrc_s->child_area = q + 2 * tlen + ulen;
	rrc_s->child_area_len = child_area;
	rrc_s->vma_cap = vma_cap;
	rrc_s->vma_names_cap = rrc_vma_names_cap(vma_cap);
	rrc_s->journal = (struct rrc_fj *)(p + joff);
	rrc_s->journal->data = (uint8_t *)rrc_s->journal + jlen;
	rrc_s->journal->cap = RRC_FJ_CAP;
	rrc_s->sysv = p + soff;
	rrc_s->walk_fd = -1;
	rrc_s->diag_fd = -1;
	rrc_s->res_rfd = rrc_s->res_wfd = -1;
	learn_fs_devs();
	return 0;
}

void rrc_sync_resolve(void) RRC_HIDDEN;  /* rr-sync.c */
void rrc_time_resolve(void) RRC_HIDDEN;  /* rr-time.c */

void rrc_log_failure(const char *prefix, const char *what, int err)
{
	char m[300];
	size_t l = rrc_bput(m, sizeof m, 0, prefix);
	l = rrc_bput(m, sizeof m, l, what);
	if (err) {
		l = rrc_bput(m, sizeof m, l, ": ");
		rrc_bput(m, sizeof m, l, strerror(err));
	}
	rrc_log(m);
}

static void fail(const char *what, int err)
{
	rrc_log_failure("disabled: ", what, err);
}

__attribute__((constructor)) static void rrc_init(void)
{
	rrc_guards_resolve();
	rrc_wrap_files_resolve();
	rrc_aq_resolve();
	rrc_waits_resolve();
	rrc_sync_resolve();
	rrc_time_resolve();
	rrc_io_resolve();
	rrc_fds_resolve();
	/* bind memcpy/memset through the PLT now: a lazy binding later, in
	 * the pause, could wait on the dynamic linker's lock */
	{
		volatile char a[16] = { 0 }, b[16];
		memcpy((char *)b, (char *)a, sizeof b);
		memset((char *)b, 0, sizeof b);
		(void)memmove((char *)b, (char *)a, 8);
	}
	const char *dbg = getenv("RRC_DEBUG");
	rrc_g.debug = dbg && *dbg == '1';
	/* the copy snapshot's pre-copy passes of an incremental dump at most
	 * (0..9, default 5; precopy.c): 0 copies every written page in the
	 * pause (tests use it to exercise that path) */
	const char *passes = getenv("RRC_PRECOPY_PASSES");
	rrc_g.precopy_passes = passes && *passes >= '0' && *passes <= '9' && !passes[1] ? *passes - '0' : 5;
	/* tests: a delay (0..9 ms) between a copy snapshot's last reads before
	 * the pause and the pause, so that a test program's changes land in
	 * between (what happens there on its own only now and then) */
	const char *prepause = getenv("RRC_TEST_PREPAUSE_MS");
	rrc_g.test_prepause_ms = prepause && *prepause >= '0' && *prepause <= '9' && !prepause[1] ? *prepause - '0' : 0;
	/* RRC_PAUSE_HELPER=0: a copy snapshot's pause without the helper
	 * process (pause-helper.c), all of it on the control thread */
	const char *ph = getenv("RRC_PAUSE_HELPER");
	rrc_g.no_pause_helper = ph && !strcmp(ph, "0");
	const char *path = getenv("RRC_CONTROL");
	if (!path || !*path)
		return;
	if (strlen(path) >= sizeof rrc_g.control_path) {
		fail("RRC_CONTROL path longer than a unix socket path (107 bytes)", 0);
		return;
	}
	strcpy(rrc_g.control_path, path);
	rrc_g.pid = getpid();
	rrc_fj_init();

	int r = rrc_scratch_map();
	if (r < 0)
		return fail("cannot map the scratch arena", -r);
	long fd = rrc_sys_openat(AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return fail("cannot open /proc/self/maps", (int)-fd);
	rrc_g.maps_fd = rrc_fd_high((int)fd);
	fd = rrc_sys_openat(AT_FDCWD, "/proc/self/pagemap", O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return fail("cannot open /proc/self/pagemap", (int)-fd);
	rrc_g.pagemap_fd = rrc_fd_high((int)fd);
	r = rrc_uffd_open();
	if (r < 0)
		return fail("userfaultfd with UFFD_FEATURE_WP_ASYNC unavailable (Linux >= 6.7 and "
			    "vm.unprivileged_userfaultfd or CAP_SYS_PTRACE needed)", -r);
	rrc_g.uffd = rrc_fd_high(r);
	rrc_marker_learn();

	/* the control thread's stack (with its TLS at the top, glibc puts it
	 * there for a user-supplied stack): part of every image */
	/* between two PROT_NONE guard pages, so that the kernel never merges
	 * it with an adjacent application mapping (that one would then be
	 * treated as library memory: never tracked, always dumped) */
	long st = rrc_sys_mmap(0, RRC_CTL_STACK + 2 * 4096, PROT_NONE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (st < 0 && st > -4096)
		return fail("cannot map the control thread's stack", (int)-st);
	if (rrc_sys_mprotect((void *)(st + 4096), RRC_CTL_STACK, PROT_READ | PROT_WRITE) < 0)
		return fail("cannot map the control thread's stack", errno);
	rrc_g.ctl_stack = (void *)(st + 4096);

	rrc_register_all(0);

	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = rrc_park_handler;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigfillset(&sa.sa_mask);
	if (rrc_real_sigaction(RRC_PARK_SIG, &sa, 0) < 0)
		return fail("cannot install the park signal handler", errno);

	/* nonblocking: the control thread polls, then accepts (control.c) */
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s < 0)
		return fail("cannot create the control socket", errno);
	s = rrc_fd_high(s);
	struct sockaddr_un un = { .sun_family = AF_UNIX };
	strcpy(un.sun_path, path);
	unlink(path); /* a stale socket file of an earlier run */
	if (bind(s, (struct sockaddr *)&un, sizeof un) < 0) {
		int e = errno;
		rrc_libfd_close(s);
		return fail("cannot bind the control socket $RRC_CONTROL", e);
	}
	if (listen(s, 16) < 0) {
		int e = errno;
		rrc_libfd_close(s);
		return fail("cannot listen on the control socket", e);
	}
	rrc_g.listen_fd = s;
	rrc_g.active = 1;
	rrc_mounts_remember(); /* the container's table: the one a restore gets */
	rrc_sysvipc_remember(); /* the IPC namespace's limits then */

	pthread_attr_t at;
	pthread_t th;
	uint64_t all = ~0ull, old = 0;
	pthread_attr_init(&at);
	pthread_attr_setstack(&at, rrc_g.ctl_stack, RRC_CTL_STACK);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	/* inherited by the control thread: it blocks everything, the park
	 * signal included (the raw call: our own wrapper would strip it) */
	rrc_sys_rt_sigprocmask(SIG_SETMASK, &all, &old);
	r = pthread_create(&th, &at, rrc_control_main, 0);
	rrc_sys_rt_sigprocmask(SIG_SETMASK, &old, 0);
	pthread_attr_destroy(&at);
	if (r) {
		rrc_g.active = 0;
		return fail("cannot start the control thread", r);
	}
	/* recording (`rrc exec --record`): after the control thread, which
	 * must not be a recorded thread; the main thread's ring first */
	if (rrc_rr_init() == 0)
		rrc_rr_start();
}
