/* SPDX-License-Identifier: MIT
 *
 * mkvectors: writes the shared test vectors of tests/vectors/ from the C
 * definitions in image.h and control.h, deterministically (fixed ids, fixed
 * times, fixed page contents). The Rust crates rrc-image and rrc-control
 * parse these files and compare with vectors.json; `mkvectors --check DIR`
 * regenerates everything and compares byte for byte with DIR, so neither
 * the C structs nor the committed files can drift without a test failing.
 *
 *   mkvectors DIR          (re)write the vectors into DIR
 *   mkvectors --check DIR  exit 1 if DIR differs from what would be written
 *
 * The offsetof assertions below pin the layout the Rust side decodes with
 * explicit offsets (crates/rrc-image/src/sections.rs, rrc-control).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* <arpa/inet.h> would clash with inet_addr() below */
int inet_pton(int af, const char *src, void *dst);

#include "rrc/control.h"
#include "rrc/crc32c.h"
#include "rrc/image.h"
#include "rrc/restore-status.h"

/* ---- layout pins (must match the Rust decoders) ----------------------- */
#define PIN(t, f, off) _Static_assert(offsetof(struct t, f) == (off), #t "." #f)
PIN(rrc_image_header, version, 8);
PIN(rrc_image_header, image_id, 16);
PIN(rrc_image_header, parent_id, 32);
PIN(rrc_image_header, sequence, 48);
PIN(rrc_image_header, header_crc, 64);
PIN(rrc_process, nr_threads, 12);
PIN(rrc_process, start_code, 16);
PIN(rrc_process, env_end, 96);
PIN(rrc_process, auxv, 104);
PIN(rrc_process, auxv_words, 616);
PIN(rrc_process, rlimits, 624);
PIN(rrc_process, restore_area_addr, 880);
PIN(rrc_process, comm, 888);
PIN(rrc_process, exe_path, 904);
PIN(rrc_process, cwd, 5000);
_Static_assert(sizeof(struct rrc_process) == 9096, "rrc_process size");
PIN(rrc_thread, rseq_len, 56);
PIN(rrc_thread, resume, 64);
PIN(rrc_thread, ucontext_addr, 128);
PIN(rrc_thread, gregs, 136);
PIN(rrc_thread, sigmask, 320);
_Static_assert(sizeof(struct rrc_thread) == 328, "rrc_thread size");
PIN(rrc_fd, pos, 16);
PIN(rrc_fd, mode, 32);
PIN(rrc_fd, u, 40);
PIN(rrc_fd, u.timerfd.ticks, 48);
PIN(rrc_fd, u.timerfd.interval_nsec, 80);
PIN(rrc_fd, u.sock.local, 72);
PIN(rrc_fd, u.sock.peer, 192);
PIN(rrc_fd, path_len, 312);
PIN(rrc_fd, data_len, 316);
_Static_assert(sizeof(struct rrc_fd) == 320, "rrc_fd size");
_Static_assert(sizeof(struct rrc_sockaddr) == 120, "rrc_sockaddr size");
PIN(rrc_tcp_stream, state, 2);
PIN(rrc_tcp_stream, flags, 6);
PIN(rrc_tcp_stream, local_port, 8);
PIN(rrc_tcp_stream, snd_mss, 12);
PIN(rrc_tcp_stream, local_addr, 16);
PIN(rrc_tcp_stream, remote_addr, 32);
PIN(rrc_tcp_stream, inode, 48);
PIN(rrc_tcp_stream, cookie, 56);
PIN(rrc_tcp_stream, rqueue, 64);
PIN(rrc_tcp_stream, bytes_acked, 72);
PIN(rrc_tcp_stream, write_seq_rel, 88);
PIN(rrc_tcp_stream, ifindex, 104);
_Static_assert(sizeof(struct rrc_tcp_stream) == 112, "rrc_tcp_stream size");
_Static_assert(sizeof(struct rrc_ctl_header) == 24, "ctl header size");
_Static_assert(sizeof(struct rrc_ctl_pong) == 32, "pong size");
_Static_assert(sizeof(struct rrc_ctl_dump) == 40, "dump size");
_Static_assert(sizeof(struct rrc_ctl_dump_paused) == 96, "dump_paused size");
_Static_assert(offsetof(struct rrc_ctl_dump_paused, copy_ns) == 56, "dump_paused copy_ns");
_Static_assert(offsetof(struct rrc_ctl_dump_paused, precopy_passes) == 88, "dump_paused precopy_passes");
/* the constants rrc-control copies (tests/vectors.rs checks the Rust side) */
_Static_assert(RRC_CTL_VERSION == 2 && RRC_DUMP_F_COPY == 2 && RRC_DUMP_F_TCP_TABLE == 4 && RRC_SNAPSHOT_COPY == 1,
	       "control constants");
_Static_assert(sizeof(struct rrc_ctl_dump_done) == 24, "dump_done size");
_Static_assert(sizeof(struct rrc_ctl_error) == 8, "error size");
_Static_assert(sizeof(struct rrc_ctl_hold) == 8, "hold size");
_Static_assert(sizeof(struct rrc_ctl_held) == 32, "held size");
_Static_assert(offsetof(struct rrc_ctl_held, threads) == 24, "held threads");
_Static_assert(sizeof(struct rrc_ctl_resumed) == 16, "resumed size");
_Static_assert(sizeof(struct rrc_ctl_replay) == 144, "replay state size");
PIN(rrc_restore_status, code, 4);
PIN(rrc_restore_status, sys_errno, 8);
PIN(rrc_restore_status, detail, 12);
PIN(rrc_restore_status, message, 16);

#include "vecout.h"

/* ---- image building ---------------------------------------------------- */
struct image {
	struct buf b;
	uint32_t sections;
	size_t end_off;   /* offset of the END section header */
	size_t pages_off; /* offset of the PAGES payload */
	size_t vmas_off;  /* offset of the VMAS section header */
	uint32_t pages_crc;
};

static void section(struct image *im, uint32_t type, const void *payload, size_t len)
{
	struct rrc_section_header sh;
	memset(&sh, 0, sizeof(sh));
	sh.type = type;
	sh.length = len;
	sh.payload_crc = rrc_crc32c(payload, len);
	sh.header_crc = rrc_crc32c(&sh, offsetof(struct rrc_section_header, header_crc));
	if (type == RRC_SEC_END)
		im->end_off = im->b.len;
	if (type == RRC_SEC_VMAS)
		im->vmas_off = im->b.len;
	put(&im->b, &sh, sizeof(sh));
	if (type == RRC_SEC_PAGES) {
		im->pages_off = im->b.len;
		im->pages_crc = sh.payload_crc;
	}
	put(&im->b, payload, len);
	pad8(&im->b);
	if (type != RRC_SEC_END)
		im->sections++;
}

static void ids(uint8_t id[16], uint8_t base)
{
	for (int i = 0; i < 16; i++)
		id[i] = (uint8_t)(base + i);
}

static void header(struct image *im, uint32_t version, uint32_t flags, uint8_t idbase,
		   uint8_t parentbase, uint64_t seq)
{
	struct rrc_image_header h;
	memset(&h, 0, sizeof(h));
	memcpy(h.magic, RRC_IMAGE_MAGIC, 8);
	h.version = version;
	h.flags = flags;
	ids(h.image_id, idbase);
	if (parentbase)
		ids(h.parent_id, parentbase);
	h.sequence = seq;
	h.created_ns = 1700000000123456789ull + seq * 100000000ull;
	h.header_crc = rrc_crc32c(&h, offsetof(struct rrc_image_header, header_crc));
	put(&im->b, &h, sizeof(h));
}

struct vma_def {
	uint64_t start, end, pgoff;
	uint32_t prot, kind, flags;
	const char *path;
};

struct pme_def {
	uint64_t vaddr;
	uint32_t nr, flags;
};

static const char *kind_name(uint32_t k)
{
	static const char *n[] = { "?", "anon", "file_private", "file_shared_ro", "heap", "stack", "vdso", "vvar", "vsyscall" };
	return k < 9 ? n[k] : "?";
}

/* Page k of the image (in PAGES order) with data tag `tag`: byte j is
 * (tag * 7 + k * 31 + j) mod 251, so every page of every image differs. */
static void page_data(struct buf *pages, unsigned tag, unsigned k)
{
	uint8_t p[RRC_PAGE_SIZE];
	for (unsigned j = 0; j < RRC_PAGE_SIZE; j++)
		p[j] = (uint8_t)((tag * 7 + k * 31 + j) % 251);
	put(pages, p, sizeof(p));
}

static const struct vma_def full_vmas[] = {
	{ 0x400000, 0x402000, 0, 5, RRC_VMA_FILE_PRIVATE, 0, "/usr/bin/vector-test" },
	{ 0x600000, 0x604000, 0, 3, RRC_VMA_HEAP, RRC_VMA_F_TRACKED, "[heap]" },
	{ 0x7f0000000000, 0x7f0000004000, 0, 3, RRC_VMA_ANON, RRC_VMA_F_TRACKED, "" },
	{ 0x7ffd00000000, 0x7ffd00002000, 0, 3, RRC_VMA_STACK, RRC_VMA_F_TRACKED | RRC_VMA_F_GROWSDOWN, "[stack]" },
	{ 0x7ffd10000000, 0x7ffd10002000, 0, 5, RRC_VMA_VDSO, 0, "[vdso]" },
};
static const struct pme_def full_pm[] = {
	{ 0x401000, 1, RRC_PME_IN_IMAGE },
	{ 0x600000, 2, RRC_PME_IN_IMAGE },
	{ 0x7f0000000000, 3, RRC_PME_IN_IMAGE },
	{ 0x7ffd00001000, 1, RRC_PME_IN_IMAGE },
};
static const struct vma_def incr_vmas[] = {
	{ 0x400000, 0x402000, 0, 5, RRC_VMA_FILE_PRIVATE, 0, "/usr/bin/vector-test" },
	{ 0x600000, 0x604000, 0, 3, RRC_VMA_HEAP, RRC_VMA_F_TRACKED, "[heap]" },
	{ 0x7f0000000000, 0x7f0000004000, 0, 3, RRC_VMA_ANON, RRC_VMA_F_TRACKED, "" },
	{ 0x7f0000010000, 0x7f0000011000, 0, 3, RRC_VMA_ANON, 0, "" }, /* new: untracked */
	{ 0x7ffd00000000, 0x7ffd00002000, 0, 3, RRC_VMA_STACK, RRC_VMA_F_TRACKED | RRC_VMA_F_GROWSDOWN, "[stack]" },
	{ 0x7ffd10000000, 0x7ffd10002000, 0, 5, RRC_VMA_VDSO, 0, "[vdso]" },
};
static const struct pme_def incr_pm[] = {
	{ 0x401000, 1, 0 },
	{ 0x600000, 1, RRC_PME_IN_IMAGE },
	{ 0x601000, 1, 0 },
	{ 0x602000, 1, RRC_PME_IN_IMAGE }, /* newly defined heap page */
	{ 0x7f0000000000, 3, 0 },
	{ 0x7f0000010000, 1, RRC_PME_IN_IMAGE },
	{ 0x7ffd00001000, 1, RRC_PME_IN_IMAGE },
};

struct fd_def {
	int32_t fd;
	uint32_t kind, fd_flags, file_flags;
	uint64_t pos, ino;
	uint32_t mode, rdev;
	const char *path;
	const void *data;
	uint32_t data_len;        /* the kind's data */
	const struct rrc_fown *fown; /* with RRC_FD_F_FOWN: ends the data in the image */
};

/* fd 3: signal-driven I/O to the process, SIGRTMIN+1 */
static const struct rrc_fown pipe_fown = { 1 /* F_OWNER_PID */, 1, 35, 0 };

static const struct rrc_epoll_entry epoll_entries[] = {
	{ 3, 0x1 /* EPOLLIN */, 0x1122334455667788ull },
	{ 8, 0x2001 /* EPOLLIN|EPOLLRDHUP */, 8 },
};

#define NR_FDS 11
static const struct fd_def fds[NR_FDS] = {
	{ 0, RRC_FD_CHR, 0, O_RDWR, 0, 5, 020666, 0x103, "/dev/null", NULL, 0 },
	{ 1, RRC_FD_REG, 0, O_WRONLY | O_APPEND, 1234, 777, 0100644, 0, "/var/log/vector.log", NULL, 0 },
	{ 3, RRC_FD_PIPE, FD_CLOEXEC | RRC_FD_F_FOWN, O_RDONLY | O_ASYNC, 0, 4242, 010600, 0, "", "hello pipe", 10,
	  &pipe_fown },
	{ 4, RRC_FD_PIPE, FD_CLOEXEC, O_WRONLY, 0, 4242, 010600, 0, "", NULL, 0 },
	{ 5, RRC_FD_EVENTFD, 0, O_RDWR | O_NONBLOCK, 0, 9, 0600, 0, "anon_inode:[eventfd]", NULL, 0 },
	{ 6, RRC_FD_EPOLL, FD_CLOEXEC, O_RDWR, 0, 9, 0600, 0, "anon_inode:[eventpoll]", epoll_entries, sizeof(epoll_entries) },
	{ 7, RRC_FD_TIMERFD, 0, O_RDWR, 0, 9, 0600, 0, "anon_inode:[timerfd]", NULL, 0 },
	{ 8, RRC_FD_INET_LISTEN, 0, O_RDWR, 0, 31337, 0140777, 0, "", NULL, 0 },
	{ 9, RRC_FD_INET_CONN, 0, O_RDWR | O_NONBLOCK, 0, 31338, 0140777, 0, "", NULL, 0 },
	{ 10, RRC_FD_LIB_CONTROL, FD_CLOEXEC, O_RDWR, 0, 31339, 0140777, 0, "", NULL, 0 },
	{ 11, RRC_FD_LIB_INTERNAL, FD_CLOEXEC, O_RDWR, 0, 9, 0600, 0, "anon_inode:[userfaultfd]", NULL, 0 },
};

static void inet_addr(struct rrc_sockaddr *a, uint8_t a0, uint8_t a3, uint16_t port)
{
	/* sockaddr_in: family (host order), port (network order), addr */
	a->family = 2;
	a->len = 16;
	a->addr[0] = 2;
	a->addr[1] = 0;
	a->addr[2] = (uint8_t)(port >> 8);
	a->addr[3] = (uint8_t)port;
	a->addr[4] = a0;
	a->addr[5] = 0;
	a->addr[6] = 0;
	a->addr[7] = a3;
}

static void fill_fd_union(struct rrc_fd *r, const struct fd_def *d)
{
	switch (d->kind) {
	case RRC_FD_PIPE:
		r->u.pipe.pipe_size = 65536;
		r->u.pipe.has_data = d->data_len ? 1 : 0;
		break;
	case RRC_FD_EVENTFD:
		r->u.eventfd.count = 7;
		r->u.eventfd.semaphore = 1;
		break;
	case RRC_FD_TIMERFD:
		r->u.timerfd.clockid = 1; /* CLOCK_MONOTONIC */
		r->u.timerfd.flags = 0;
		r->u.timerfd.ticks = 3;
		r->u.timerfd.value_sec = 0;
		r->u.timerfd.value_nsec = 250000000;
		r->u.timerfd.interval_sec = 1;
		r->u.timerfd.interval_nsec = 500000000;
		break;
	case RRC_FD_INET_LISTEN:
		r->u.sock.family = 2;
		r->u.sock.type = 1;
		r->u.sock.protocol = 6;
		r->u.sock.backlog = 128;
		r->u.sock.reuseaddr = 1;
		inet_addr(&r->u.sock.local, 127, 1, 8080);
		break;
	case RRC_FD_INET_CONN:
		r->u.sock.family = 2;
		r->u.sock.type = 1;
		r->u.sock.protocol = 6;
		inet_addr(&r->u.sock.local, 127, 1, 8080);
		inet_addr(&r->u.sock.peer, 127, 1, 40000);
		break;
	case RRC_FD_LIB_CONTROL: {
		static const char sp[] = "/run/rrc-container/control.sock";
		r->u.sock.family = 1;
		r->u.sock.type = 1;
		r->u.sock.local.family = 1;
		r->u.sock.local.len = (uint16_t)(2 + sizeof(sp)); /* sun_family + path + NUL */
		r->u.sock.local.addr[0] = 1;
		memcpy(&r->u.sock.local.addr[2], sp, sizeof(sp));
		break;
	}
	}
}

static void put_process(struct image *im, uint32_t nr_threads, uint64_t brk)
{
	struct rrc_process *p = calloc(1, sizeof(*p));
	if (!p)
		exit(2);
	p->pid = 1;
	p->umask = 022;
	p->personality = 0;
	p->nr_threads = nr_threads;
	p->start_code = 0x400000;
	p->end_code = 0x401800;
	p->start_data = 0x600000;
	p->end_data = 0x600100;
	p->start_brk = 0x600000;
	p->brk = brk;
	p->start_stack = 0x7ffd00001ff0;
	p->arg_start = 0x7ffd00001f00;
	p->arg_end = 0x7ffd00001f20;
	p->env_start = 0x7ffd00001f20;
	p->env_end = 0x7ffd00001fe0;
	uint64_t auxv[] = { 6 /* AT_PAGESZ */, 4096, 25 /* AT_RANDOM */, 0x7ffd00001fe0, 33 /* AT_SYSINFO_EHDR */, 0x7ffd10000000, 0, 0 };
	memcpy(p->auxv, auxv, sizeof(auxv));
	p->auxv_words = 8;
	for (int i = 0; i < RRC_RLIMIT_MAX; i++) {
		p->rlimits[i].cur = 1000 + (uint64_t)i;
		p->rlimits[i].max = ~0ull;
	}
	p->restore_area_addr = 0x7f0000002000;
	strcpy(p->comm, "vector-test");
	strcpy(p->exe_path, "/usr/bin/vector-test");
	strcpy(p->cwd, "/srv/vector");
	section(im, RRC_SEC_PROCESS, p, sizeof(*p));
	free(p);
}

static void put_threads(struct image *im, uint32_t n, uint64_t ripbase)
{
	struct rrc_thread t[3];
	memset(t, 0, sizeof(t));
	for (uint32_t i = 0; i < n; i++) {
		t[i].tid = i + 1;
		t[i].flags = i == 0 ? RRC_THR_F_MAIN : (i == n - 1 ? RRC_THR_F_CONTROL : 0);
		t[i].fs_base = 0x7f0000003000 + 0x100 * i;
		t[i].robust_list = t[i].fs_base + 0x9e0;
		t[i].robust_list_len = 24;
		t[i].clear_child_tid = t[i].fs_base + 0x2d0;
		t[i].rseq_addr = t[i].fs_base + 0x8e0;
		t[i].rseq_len = 32;
		t[i].rseq_sig = 0x53053053;
		t[i].resume.rbx = 1 + i;
		t[i].resume.rbp = 0x7ffd00001e00 - 0x10 * i;
		t[i].resume.r12 = 12;
		t[i].resume.r13 = 13;
		t[i].resume.r14 = 14;
		t[i].resume.r15 = 15;
		t[i].resume.rsp = 0x7ffd00001d00 - 0x10 * i;
		t[i].resume.rip = ripbase + 0x40 * i;
		t[i].ucontext_addr = 0x7ffd00001800 - 0x100 * i;
		for (int g = 0; g < 23; g++)
			t[i].gregs[g] = 0x1000 * (i + 1) + (uint64_t)g;
		t[i].sigmask = i == n - 1 ? ~(1ull << 63) : 0;
	}
	section(im, RRC_SEC_THREADS, t, sizeof(t[0]) * n);
}

static void put_fds(struct image *im)
{
	struct buf b = { 0 };
	for (int i = 0; i < NR_FDS; i++) {
		struct rrc_fd r;
		memset(&r, 0, sizeof(r));
		r.fd = fds[i].fd;
		r.kind = fds[i].kind;
		r.fd_flags = fds[i].fd_flags;
		r.file_flags = fds[i].file_flags;
		r.pos = fds[i].pos;
		r.ino = fds[i].ino;
		r.mode = fds[i].mode;
		r.rdev = fds[i].rdev;
		fill_fd_union(&r, &fds[i]);
		r.path_len = (uint32_t)strlen(fds[i].path);
		r.data_len = fds[i].data_len + (fds[i].fown ? (uint32_t)sizeof(struct rrc_fown) : 0);
		put(&b, &r, sizeof(r));
		put(&b, fds[i].path, r.path_len);
		put(&b, fds[i].data, fds[i].data_len);
		if (fds[i].fown)
			put(&b, fds[i].fown, sizeof(struct rrc_fown));
		pad8(&b);
	}
	section(im, RRC_SEC_FDS, b.p, b.len);
	free(b.p);
}

static void put_signals(struct image *im)
{
	struct rrc_sigaction sa[64];
	memset(sa, 0, sizeof(sa));
	sa[13 - 1].handler = 1; /* SIGPIPE: SIG_IGN */
	sa[15 - 1].handler = 0x401234; /* SIGTERM */
	sa[15 - 1].flags = 0x14000000; /* SA_RESTORER | SA_RESTART */
	sa[15 - 1].restorer = 0x401500;
	sa[15 - 1].mask = 1ull << (2 - 1);
	sa[64 - 1].handler = 0x7f0000000800; /* the park signal */
	sa[64 - 1].flags = 0x1c000004; /* SA_SIGINFO | SA_RESTORER | SA_RESTART | SA_ONSTACK */
	sa[64 - 1].restorer = 0x401500;
	sa[64 - 1].mask = ~0ull;
	section(im, RRC_SEC_SIGNALS, sa, sizeof(sa));
}

/* ---- TCP stream table ----------------------------------------------------- */
struct tcp_def {
	uint16_t family;
	uint8_t state;
	uint16_t flags;
	const char *local, *remote;
	uint16_t lport, rport;
	uint64_t inode, cookie;
	uint32_t rqueue, wqueue;
	uint64_t acked, received;
};

/* A listener, a passive connection, an orphan still sending its FIN, an
 * active IPv6 connection (bytes_acked counts its SYN), a TIME_WAIT entry. */
static const struct tcp_def full_tcp[] = {
	{ 2, 10, RRC_TCP_F_INFO, "0.0.0.0", "0.0.0.0", 6379, 0, 31337, 0x1001, 0, 128, 0, 0 },
	{ 2, 1, RRC_TCP_F_INFO | RRC_TCP_F_SEQ, "127.0.0.1", "127.0.0.1", 6379, 40000, 31338, 0x1002, 10, 300, 1000, 510 },
	{ 2, 4, RRC_TCP_F_INFO | RRC_TCP_F_SEQ, "127.0.0.1", "127.0.0.1", 6379, 40002, 0, 0x1003, 0, 4097, 5000, 20 },
	{ 10, 1, RRC_TCP_F_INFO | RRC_TCP_F_SEQ | RRC_TCP_F_ACTIVE, "::1", "::1", 45000, 8080, 31340, 0x1004, 0, 0, 78, 100 },
	{ 2, 6, 0, "127.0.0.1", "127.0.0.1", 6379, 39999, 0, 0x1005, 0, 0, 0, 0 },
};
static const struct tcp_def incr_tcp[] = {
	{ 2, 10, RRC_TCP_F_INFO, "0.0.0.0", "0.0.0.0", 6379, 0, 31337, 0x1001, 0, 128, 0, 0 },
	{ 2, 8, RRC_TCP_F_INFO | RRC_TCP_F_SEQ, "127.0.0.1", "127.0.0.1", 6379, 40000, 31338, 0x1002, 1, 0, 1300, 611 },
};
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
static int g_tcp_bad_record_size; /* the broken variant "bad-tcp-record-size" */

static void tcp_record(struct rrc_tcp_stream *r, const struct tcp_def *d)
{
	memset(r, 0, sizeof(*r));
	r->family = d->family;
	r->state = d->state;
	r->flags = d->flags;
	if (d->flags & RRC_TCP_F_INFO) {
		r->options = 7;
		r->snd_wscale = 7;
		r->rcv_wscale = 7;
		r->snd_mss = 65483;
	}
	r->local_port = d->lport;
	r->remote_port = d->rport;
	if (inet_pton(d->family, d->local, r->local_addr) != 1 || inet_pton(d->family, d->remote, r->remote_addr) != 1) {
		fprintf(stderr, "mkvectors: bad address in tcp_def\n");
		exit(2);
	}
	r->inode = d->inode;
	r->cookie = d->cookie;
	r->rqueue = d->rqueue;
	r->wqueue = d->wqueue;
	r->bytes_acked = d->acked;
	r->bytes_received = d->received;
	if (d->flags & RRC_TCP_F_SEQ) {
		r->write_seq_rel = d->acked + d->wqueue - ((d->flags & RRC_TCP_F_ACTIVE) ? 1 : 0);
		r->read_seq_rel = d->received - d->rqueue;
	}
}

static void put_tcp(struct image *im, const struct tcp_def *d, size_t n)
{
	struct buf b = { 0 };
	struct rrc_tcp_table t = { (uint32_t)n, sizeof(struct rrc_tcp_stream) + (g_tcp_bad_record_size ? 8 : 0) };
	put(&b, &t, sizeof(t));
	for (size_t i = 0; i < n; i++) {
		struct rrc_tcp_stream r;
		tcp_record(&r, &d[i]);
		put(&b, &r, sizeof(r));
	}
	section(im, RRC_SEC_TCP, b.p, b.len);
	free(b.p);
}

static void json_tcp(struct buf *j, const char *name, const struct tcp_def *d, size_t n, int last)
{
	printfb(j, "    \"%s\": [\n", name);
	for (size_t i = 0; i < n; i++) {
		struct rrc_tcp_stream r;
		tcp_record(&r, &d[i]);
		printfb(j, "      {\"family\": %u, \"state\": %u, \"flags\": %u, \"local\": \"%s%s%s:%u\", \"remote\": \"%s%s%s:%u\", "
			   "\"inode\": %llu, \"cookie\": %llu, \"rqueue\": %u, \"wqueue\": %u, \"bytes_acked\": %llu, "
			   "\"bytes_received\": %llu, \"write_seq_rel\": %llu, \"read_seq_rel\": %llu, \"snd_mss\": %u}%s\n",
			r.family, r.state, r.flags, d[i].family == 10 ? "[" : "", d[i].local, d[i].family == 10 ? "]" : "",
			r.local_port, d[i].family == 10 ? "[" : "", d[i].remote, d[i].family == 10 ? "]" : "", r.remote_port,
			(unsigned long long)r.inode, (unsigned long long)r.cookie, r.rqueue, r.wqueue,
			(unsigned long long)r.bytes_acked, (unsigned long long)r.bytes_received,
			(unsigned long long)r.write_seq_rel, (unsigned long long)r.read_seq_rel, r.snd_mss,
			i + 1 < n ? "," : "");
	}
	printfb(j, "    ]%s\n", last ? "" : ",");
}

static void put_vmas(struct image *im, const struct vma_def *v, size_t n)
{
	struct buf b = { 0 };
	for (size_t i = 0; i < n; i++) {
		struct rrc_vma r;
		memset(&r, 0, sizeof(r));
		r.start = v[i].start;
		r.end = v[i].end;
		r.pgoff = v[i].pgoff;
		r.prot = v[i].prot;
		r.kind = v[i].kind;
		r.flags = v[i].flags;
		r.path_len = (uint32_t)strlen(v[i].path);
		put(&b, &r, sizeof(r));
		put(&b, v[i].path, r.path_len);
		pad8(&b);
	}
	section(im, RRC_SEC_VMAS, b.p, b.len);
	free(b.p);
}

/* PAGEMAP + PAGES; returns the number of pages in the image. */
static uint32_t put_pages(struct image *im, const struct pme_def *pm, size_t n, unsigned tag)
{
	struct buf m = { 0 }, pages = { 0 };
	uint32_t k = 0;
	for (size_t i = 0; i < n; i++) {
		struct rrc_pagemap_entry e = { pm[i].vaddr, pm[i].nr, pm[i].flags };
		put(&m, &e, sizeof(e));
		if (pm[i].flags & RRC_PME_IN_IMAGE)
			for (uint32_t j = 0; j < pm[i].nr; j++)
				page_data(&pages, tag, k++);
	}
	section(im, RRC_SEC_PAGEMAP, m.p, m.len);
	section(im, RRC_SEC_PAGES, pages.p, pages.len);
	free(m.p);
	free(pages.p);
	return k;
}

static void put_end(struct image *im)
{
	struct rrc_end e = { im->sections, 0, im->b.len };
	section(im, RRC_SEC_END, &e, sizeof(e));
}

struct built {
	struct image im;
	uint32_t pages;
};

static void build_full(struct built *o, uint32_t version)
{
	memset(o, 0, sizeof(*o));
	header(&o->im, version, RRC_IMG_F_FULL, 0xa0, 0, 0);
	put_process(&o->im, 2, 0x604000);
	put_vmas(&o->im, full_vmas, sizeof(full_vmas) / sizeof(full_vmas[0]));
	o->pages = put_pages(&o->im, full_pm, sizeof(full_pm) / sizeof(full_pm[0]), 1);
	put_threads(&o->im, 2, 0x7f0000000400);
	put_fds(&o->im);
	put_signals(&o->im);
	put_tcp(&o->im, full_tcp, NELEM(full_tcp));
	put_end(&o->im);
}

static void build_incr(struct built *o, uint8_t parentbase)
{
	memset(o, 0, sizeof(*o));
	header(&o->im, RRC_IMAGE_VERSION, 0, 0xb0, parentbase, 1);
	put_process(&o->im, 3, 0x604000);
	put_vmas(&o->im, incr_vmas, sizeof(incr_vmas) / sizeof(incr_vmas[0]));
	o->pages = put_pages(&o->im, incr_pm, sizeof(incr_pm) / sizeof(incr_pm[0]), 2);
	put_threads(&o->im, 3, 0x7f0000000400);
	put_fds(&o->im);
	put_signals(&o->im);
	put_tcp(&o->im, incr_tcp, NELEM(incr_tcp));
	put_end(&o->im);
}

/* ---- json ---------------------------------------------------------------- */
static void json_id(struct buf *j, uint8_t base)
{
	printfb(j, "\"");
	for (int i = 0; i < 16; i++)
		printfb(j, "%02x", (uint8_t)(base + i));
	printfb(j, "\"");
}

static void json_image(struct buf *j, const char *name, const struct built *o, uint8_t idbase,
		       uint8_t parentbase, uint64_t seq, const struct vma_def *v, size_t nv,
		       const struct pme_def *pm, size_t npm, uint32_t nthreads)
{
	printfb(j, "    \"%s\": {\n      \"image_id\": ", name);
	json_id(j, idbase);
	printfb(j, ",\n      \"parent_id\": ");
	if (parentbase)
		json_id(j, parentbase);
	else
		printfb(j, "null");
	printfb(j, ",\n      \"sequence\": %llu,\n      \"full\": %s,\n      \"created_ns\": %llu,\n",
		(unsigned long long)seq, parentbase ? "false" : "true",
		(unsigned long long)(1700000000123456789ull + seq * 100000000ull));
	printfb(j, "      \"file_bytes\": %zu,\n      \"pages_in_image\": %u,\n      \"pages_crc\": %u,\n",
		o->im.b.len, o->pages, o->im.pages_crc);
	printfb(j, "      \"process\": {\"pid\": 1, \"umask\": 18, \"nr_threads\": %u, \"brk\": %llu, "
		   "\"start_stack\": %llu, \"auxv\": [6, 4096, 25, %llu, 33, %llu, 0, 0], "
		   "\"restore_area_addr\": %llu, \"comm\": \"vector-test\", "
		   "\"exe_path\": \"/usr/bin/vector-test\", \"cwd\": \"/srv/vector\", \"rlimit0\": [1000, %llu]},\n",
		nthreads, 0x604000ull, 0x7ffd00001ff0ull, 0x7ffd00001fe0ull, 0x7ffd10000000ull,
		0x7f0000002000ull, (unsigned long long)~0ull);
	printfb(j, "      \"vmas\": [\n");
	for (size_t i = 0; i < nv; i++)
		printfb(j, "        {\"start\": %llu, \"end\": %llu, \"pgoff\": %llu, \"prot\": %u, \"kind\": \"%s\", \"flags\": %u, \"path\": \"%s\"}%s\n",
			(unsigned long long)v[i].start, (unsigned long long)v[i].end,
			(unsigned long long)v[i].pgoff, v[i].prot, kind_name(v[i].kind), v[i].flags,
			v[i].path, i + 1 < nv ? "," : "");
	printfb(j, "      ],\n      \"pagemap\": [\n");
	for (size_t i = 0; i < npm; i++)
		printfb(j, "        {\"vaddr\": %llu, \"nr_pages\": %u, \"flags\": %u}%s\n",
			(unsigned long long)pm[i].vaddr, pm[i].nr, pm[i].flags, i + 1 < npm ? "," : "");
	printfb(j, "      ],\n      \"threads\": [\n");
	for (uint32_t i = 0; i < nthreads; i++)
		printfb(j, "        {\"tid\": %u, \"flags\": %u, \"fs_base\": %llu, \"rseq_sig\": %u, \"rsp\": %llu, \"rip\": %llu, \"gregs0\": %llu, \"sigmask\": %llu}%s\n",
			i + 1, i == 0 ? RRC_THR_F_MAIN : (i == nthreads - 1 ? RRC_THR_F_CONTROL : 0),
			0x7f0000003000ull + 0x100 * i, 0x53053053u, 0x7ffd00001d00ull - 0x10 * i,
			0x7f0000000400ull + 0x40 * i, 0x1000ull * (i + 1),
			(unsigned long long)(i == nthreads - 1 ? ~(1ull << 63) : 0),
			i + 1 < nthreads ? "," : "");
	printfb(j, "      ],\n      \"fds\": [\n");
	for (int i = 0; i < NR_FDS; i++) {
		char fown[96] = "null";
		if (fds[i].fown)
			snprintf(fown, sizeof fown, "{\"owner_type\": %u, \"owner\": %d, \"signal\": %u}",
				 fds[i].fown->owner_type, fds[i].fown->owner, fds[i].fown->signal);
		printfb(j, "        {\"fd\": %d, \"kind\": %u, \"fd_flags\": %u, \"file_flags\": %u, \"pos\": %llu, \"ino\": %llu, \"mode\": %u, \"path\": \"%s\", \"data_len\": %u, \"fown\": %s}%s\n",
			fds[i].fd, fds[i].kind, fds[i].fd_flags, fds[i].file_flags,
			(unsigned long long)fds[i].pos, (unsigned long long)fds[i].ino, fds[i].mode,
			fds[i].path, fds[i].data_len, fown, i + 1 < NR_FDS ? "," : "");
	}
	printfb(j, "      ],\n      \"signals\": {\"13\": [1, 0, 0, 0], \"15\": [%llu, %llu, %llu, %llu], \"64\": [%llu, %llu, %llu, %llu]}\n    }",
		0x401234ull, 0x14000000ull, 0x401500ull, 2ull,
		0x7f0000000800ull, 0x1c000004ull, 0x401500ull, (unsigned long long)~0ull);
}

/* ---- control messages ------------------------------------------------------ */
static void ctl_msg(struct buf *out, uint16_t type, const void *payload, uint32_t len)
{
	struct rrc_ctl_header h;
	memset(&h, 0, sizeof(h));
	h.magic = RRC_CTL_MAGIC;
	h.version = RRC_CTL_VERSION;
	h.type = type;
	h.length = len;
	h.payload_crc = rrc_crc32c(payload, len);
	h.header_crc = rrc_crc32c(&h, offsetof(struct rrc_ctl_header, header_crc));
	put(out, &h, sizeof(h));
	put(out, payload, len);
}

static const char err_msg[] = "fd 7 is an io_uring instance \xe2\x80\x94 it cannot be restored";

static void control_vectors(struct buf *j, size_t incr_bytes)
{
	struct buf b = { 0 };

	ctl_msg(&b, RRC_CTL_PING, NULL, 0);
	emit("control-ping.bin", &b);
	b.len = 0;

	struct rrc_ctl_pong pong;
	memset(&pong, 0, sizeof(pong));
	pong.pid = 1;
	pong.nr_threads = 3;
	pong.restored = 1;
	pong.checkpoints = 2;
	ids(pong.last_image_id, 0xb0);
	ctl_msg(&b, RRC_CTL_PONG, &pong, sizeof(pong));
	emit("control-pong.bin", &b);
	b.len = 0;

	struct rrc_ctl_dump d;
	memset(&d, 0, sizeof(d));
	ids(d.image_id, 0xa0);
	ctl_msg(&b, RRC_CTL_DUMP, &d, sizeof(d));
	emit("control-dump.bin", &b);
	b.len = 0;

	d.flags = RRC_DUMP_F_INCREMENTAL;
	ids(d.image_id, 0xb0);
	ids(d.parent_id, 0xa0);
	ctl_msg(&b, RRC_CTL_DUMP, &d, sizeof(d));
	emit("control-dump-incremental.bin", &b);
	b.len = 0;

	/* Every field nonzero and distinct, so that each offset is checked
	 * (a real copy snapshot reports fork_ns 0). */
	struct rrc_ctl_dump_paused p = { 850000, 120000, 300000, 50000, 250000, 2, 1, 4,
					 70000, 3, 400000, 12, 2, RRC_SNAPSHOT_COPY };
	ctl_msg(&b, RRC_CTL_DUMP_PAUSED, &p, sizeof(p));
	emit("control-dump-paused.bin", &b);
	b.len = 0;

	struct rrc_ctl_dump_done dd = { 4, incr_bytes, 1500000 };
	ctl_msg(&b, RRC_CTL_DUMP_DONE, &dd, sizeof(dd));
	emit("control-dump-done.bin", &b);
	b.len = 0;

	struct buf e = { 0 };
	struct rrc_ctl_error eh = { RRC_ERR_IO_URING, 95 };
	put(&e, &eh, sizeof(eh));
	put(&e, err_msg, strlen(err_msg));
	ctl_msg(&b, RRC_CTL_ERROR, e.p, (uint32_t)e.len);
	emit("control-error.bin", &b);
	free(e.p);

	b.len = 0;
	struct rrc_ctl_hold hold = { 2500, 0 };
	ctl_msg(&b, RRC_CTL_HOLD, &hold, sizeof(hold));
	emit("control-hold.bin", &b);
	b.len = 0;
	struct rrc_ctl_held held = { 180000, 42, 1048576, 5, 2500 };
	ctl_msg(&b, RRC_CTL_HELD, &held, sizeof(held));
	emit("control-held.bin", &b);
	b.len = 0;
	ctl_msg(&b, RRC_CTL_RESUME, NULL, 0);
	emit("control-resume.bin", &b);
	b.len = 0;
	struct rrc_ctl_resumed resumed = { 37000000, 5, 0 };
	ctl_msg(&b, RRC_CTL_RESUMED, &resumed, sizeof(resumed));
	emit("control-resumed.bin", &b);
	b.len = 0;
	ctl_msg(&b, RRC_CTL_REPLAY_STATUS, NULL, 0);
	emit("control-replay-status.bin", &b);
	/* a diverged replay: the struct, then the report */
	static const char report[] = "replay diverged: thread 7 at event #12: expected read obj=0x5 seq=0 result=3; got output on obj 0x5";
	uint8_t rs_buf[sizeof(struct rrc_ctl_replay) + sizeof report - 1];
	struct rrc_ctl_replay rp = { RRC_REPLAY_DIVERGED, 4, 5000, 1234, 7, 300, 45000, 2000000, 9000000, 0, 1100, 350000, 3, 1500, 42000, 0, 9000, 1, 2 };
	memcpy(rs_buf, &rp, sizeof rp);
	memcpy(rs_buf + sizeof rp, report, sizeof report - 1);
	b.len = 0;
	ctl_msg(&b, RRC_CTL_REPLAY_STATE, rs_buf, sizeof rs_buf);
	emit("control-replay-state.bin", &b);
	b.len = 0;
	_Static_assert(sizeof(struct rrc_ctl_record) == 48, "rrc_ctl_record layout");
	struct rrc_ctl_record rec = { 1, RRC_RECORD_F_FRAMED | RRC_RECORD_F_SEALED, 0, { 0 } };
	for (int i = 0; i < 32; i++)
		rec.key[i] = (uint8_t)(0x40 + i);
	ctl_msg(&b, RRC_CTL_RECORD, &rec, sizeof rec);
	emit("control-record.bin", &b);
	b.len = 0;
	ctl_msg(&b, RRC_CTL_RECORDING, NULL, 0);
	emit("control-recording.bin", &b);

	/* The restorer's status record (restore-status.h). */
	struct rrc_restore_status rs;
	memset(&rs, 0, sizeof(rs));
	rs.magic = RRC_RESTORE_STATUS_MAGIC;
	rs.code = RRC_RST_FD;
	rs.sys_errno = 9;
	rs.detail = 7;
	snprintf(rs.message, sizeof(rs.message), "fd 7: cannot recreate the timerfd");
	b.len = 0;
	put(&b, &rs, sizeof(rs));
	emit("restore-status.bin", &b);
	printfb(j, "  \"restore_status\": {\"file\": \"restore-status.bin\", \"code\": %d, \"sys_errno\": 9, \"detail\": 7, \"message\": \"%s\"},\n",
		RRC_RST_FD, rs.message);

	printfb(j, "  \"control\": {\n");
	printfb(j, "    \"ping\": {\"file\": \"control-ping.bin\", \"type\": 1},\n");
	printfb(j, "    \"pong\": {\"file\": \"control-pong.bin\", \"type\": 2, \"pid\": 1, \"nr_threads\": 3, \"restored\": 1, \"checkpoints\": 2, \"last_image_id\": ");
	json_id(j, 0xb0);
	printfb(j, "},\n    \"dump\": {\"file\": \"control-dump.bin\", \"type\": 3, \"flags\": 0, \"image_id\": ");
	json_id(j, 0xa0);
	printfb(j, ", \"parent_id\": \"00000000000000000000000000000000\"},\n");
	printfb(j, "    \"dump_incremental\": {\"file\": \"control-dump-incremental.bin\", \"type\": 3, \"flags\": 1, \"image_id\": ");
	json_id(j, 0xb0);
	printfb(j, ", \"parent_id\": ");
	json_id(j, 0xa0);
	printfb(j, "},\n    \"dump_paused\": {\"file\": \"control-dump-paused.bin\", \"type\": 4, \"pause_ns\": 850000, \"quiesce_ns\": 120000, \"scan_ns\": 300000, \"capture_ns\": 50000, \"fork_ns\": 250000, \"threads\": 2, \"untracked_vmas\": 1, \"written_pages\": 4, "
	       "\"copy_ns\": 70000, \"copied_pages\": 3, \"precopy_ns\": 400000, \"precopy_pages\": 12, \"precopy_passes\": 2, \"snapshot\": 1},\n");
	printfb(j, "    \"dump_done\": {\"file\": \"control-dump-done.bin\", \"type\": 5, \"pages\": 4, \"bytes\": %zu, \"write_ns\": 1500000},\n", incr_bytes);
	printfb(j, "    \"error\": {\"file\": \"control-error.bin\", \"type\": 6, \"code\": %d, \"code_name\": \"IO_URING\", \"sys_errno\": 95, \"message\": \"%s\"},\n",
		RRC_ERR_IO_URING, err_msg);
	printfb(j, "    \"hold\": {\"file\": \"control-hold.bin\", \"type\": %d, \"timeout_ms\": 2500},\n", RRC_CTL_HOLD);
	printfb(j, "    \"held\": {\"file\": \"control-held.bin\", \"type\": %d, \"quiesce_ns\": 180000, \"discarded_ops\": 42, \"discarded_bytes\": 1048576, \"threads\": 5, \"timeout_ms\": 2500},\n", RRC_CTL_HELD);
	printfb(j, "    \"resume\": {\"file\": \"control-resume.bin\", \"type\": %d},\n", RRC_CTL_RESUME);
	printfb(j, "    \"resumed\": {\"file\": \"control-resumed.bin\", \"type\": %d, \"held_ns\": 37000000, \"threads\": 5},\n", RRC_CTL_RESUMED);
	printfb(j, "    \"replay_status\": {\"file\": \"control-replay-status.bin\", \"type\": %d},\n", RRC_CTL_REPLAY_STATUS);
	printfb(j, "    \"replay_state\": {\"file\": \"control-replay-state.bin\", \"type\": %d, \"state\": 3, \"threads\": 4, "
		   "\"events_total\": 5000, \"events_done\": 1234, \"events_dropped\": 7, \"outputs\": 300, \"output_bytes\": 45000, "
		   "\"load_ns\": 2000000, \"replay_ns\": 9000000, \"debts_left\": 0, \"returns_ordered\": 1100, \"paced_ns\": 350000, \"connections\": 3, \"conn_read_bytes\": 1500, \"conn_sent_bytes\": 42000, \"conn_faults\": 0, \"conn_skipped_bytes\": 9000, \"conn_behind\": 1, \"conn_reset\": 2, \"report\": \"replay diverged: thread 7 at event #12: "
		   "expected read obj=0x5 seq=0 result=3; got output on obj 0x5\"},\n", RRC_CTL_REPLAY_STATE);
	printfb(j, "    \"record\": {\"file\": \"control-record.bin\", \"type\": %d, \"first_frame\": 1, \"framed\": true, \"key_first\": 64},\n", RRC_CTL_RECORD);
	printfb(j, "    \"recording\": {\"file\": \"control-recording.bin\", \"type\": %d}\n  }\n", RRC_CTL_RECORDING);
	free(b.p);
}

/* ---- main ---------------------------------------------------------------- */
static void emit_image(const char *dir, const struct buf *b)
{
	char rel[256];
	mkdirs(dir);
	snprintf(rel, sizeof(rel), "%s/" RRC_IMAGE_FILE_NAME, dir);
	emit(rel, b);
}

static void generate(void)
{
	rrlog_vectors();
	struct built full, incr, v2, wrong;
	struct buf j = { 0 };

	build_full(&full, RRC_IMAGE_VERSION);
	build_incr(&incr, 0xa0);
	emit_image("full", &full.im.b);
	emit_image("incr", &incr.im.b);
	emit_link("incr/parent", "../full");

	/* Broken variants. Each one breaks exactly one rule. */
	struct buf b = { 0 };
	put(&b, full.im.b.p, full.im.end_off); /* END section missing */
	emit_image("truncated", &b);
	b.len = 0;
	put(&b, full.im.b.p, full.im.pages_off + 100); /* cut inside PAGES */
	emit_image("truncated-mid", &b);
	b.len = 0;
	put(&b, full.im.b.p, full.im.b.len);
	b.p[full.im.pages_off + 4096 + 17] ^= 0x40; /* one bit of page data */
	emit_image("bad-payload-crc", &b);
	b.len = 0;
	put(&b, full.im.b.p, full.im.b.len);
	b.p[offsetof(struct rrc_image_header, header_crc)] ^= 0x01;
	emit_image("bad-header-crc", &b);
	b.len = 0;
	put(&b, full.im.b.p, full.im.b.len);
	b.p[full.im.vmas_off + offsetof(struct rrc_section_header, header_crc)] ^= 0x80;
	emit_image("bad-section-crc", &b);
	free(b.p);
	build_full(&v2, 2); /* a consistent image that claims version 2 */
	emit_image("version2", &v2.im.b);
	emit_image("missing-parent", &incr.im.b); /* no parent link */
	build_incr(&wrong, 0xc0);                 /* parent link to an image with another id */
	emit_image("wrong-parent", &wrong.im.b);
	emit_link("wrong-parent/parent", "../full");
	struct built badtcp;
	g_tcp_bad_record_size = 1;                /* TCP record_size 120: not this version's */
	build_full(&badtcp, RRC_IMAGE_VERSION);
	g_tcp_bad_record_size = 0;
	emit_image("bad-tcp-record-size", &badtcp.im.b);
	free(badtcp.im.b.p);

	printfb(&j, "{\n  \"comment\": \"written by runtime/tests/vectors/mkvectors.c; do not edit\",\n");
	printfb(&j, "  \"page_pattern\": \"byte j of page k (PAGES order) of an image with tag t: (t*7 + k*31 + j) %% 251; full t=1, incr t=2\",\n");
	printfb(&j, "  \"images\": {\n");
	json_image(&j, "full", &full, 0xa0, 0, 0, full_vmas, sizeof(full_vmas) / sizeof(full_vmas[0]),
		   full_pm, sizeof(full_pm) / sizeof(full_pm[0]), 2);
	printfb(&j, ",\n");
	json_image(&j, "incr", &incr, 0xb0, 0xa0, 1, incr_vmas, sizeof(incr_vmas) / sizeof(incr_vmas[0]),
		   incr_pm, sizeof(incr_pm) / sizeof(incr_pm[0]), 3);
	printfb(&j, "\n  },\n");
	printfb(&j, "  \"tcp\": {\n");
	json_tcp(&j, "full", full_tcp, NELEM(full_tcp), 0);
	json_tcp(&j, "incr", incr_tcp, NELEM(incr_tcp), 1);
	printfb(&j, "  },\n");
	printfb(&j, "  \"chains\": {\"full\": [\"full\"], \"incr\": [\"full\", \"incr\"]},\n");
	printfb(&j, "  \"errors\": {\n"
		    "    \"truncated\": \"truncated\",\n"
		    "    \"truncated-mid\": \"truncated\",\n"
		    "    \"bad-payload-crc\": \"payload_crc\",\n"
		    "    \"bad-header-crc\": \"header_crc\",\n"
		    "    \"bad-section-crc\": \"section_header_crc\",\n"
		    "    \"version2\": \"version_mismatch\",\n"
		    "    \"missing-parent\": \"missing_parent\",\n"
		    "    \"wrong-parent\": \"chain_broken\",\n"
		    "    \"bad-tcp-record-size\": \"malformed\"\n  },\n");
	control_vectors(&j, incr.im.b.len);
	printfb(&j, "}\n");
	emit("vectors.json", &j);

	free(j.p);
	free(full.im.b.p);
	free(incr.im.b.p);
	free(v2.im.b.p);
	free(wrong.im.b.p);
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "--check")) {
		g_check = 1;
		g_dir = argv[2];
	} else if (argc == 2 && argv[1][0] != '-') {
		g_dir = argv[1];
		if (mkdir(g_dir, 0755) && errno != EEXIST) {
			fprintf(stderr, "mkvectors: mkdir %s: %s\n", g_dir, strerror(errno));
			return 2;
		}
	} else {
		fprintf(stderr, "usage: mkvectors DIR | mkvectors --check DIR\n");
		return 2;
	}
	generate();
	if (g_check) {
		if (g_diffs) {
			fprintf(stderr, "mkvectors: %d vector file(s) differ from what image.h/control.h/rrlog.h produce; "
					"regenerate with `make -C runtime vectors-write` and review the diff\n", g_diffs);
			return 1;
		}
		printf("mkvectors: %s matches the C definitions\n", g_dir);
	}
	return 0;
}
