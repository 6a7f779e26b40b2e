/* Refusal probe: fds whose state a restore could not bring back, which
 * `rrc dump` must refuse (naming them) rather than write an image that
 * will not restore (issue 16 §1):
 *   pty          a pseudo-terminal pair (/dev/ptmx and /dev/pts/N): a
 *                character device other than null/zero/full/random/urandom
 *   epoll_closed an eventfd added to an epoll set as fd A, then dup2'd to
 *                B and A closed: the set watches a file no number A holds
 *   epoll_collide the same, then a new eventfd made at A and added too:
 *                two entries "tfd: A", the first no longer A's file
 *   epoll_socket a UDP socket added as A, dup2'd to B, A closed and a new
 *                socket made at A (not added): the entry's file is not A's
 *   unix_named_sender a datagram socket at A bound to a name, with a
 *                datagram queued from B, bound to another: a restore could
 *                not send it from B's name again (datagrams from unnamed
 *                senders are carried: zdtm unixdgram)
 *   unix_rights  a stream pair (A, B) with an fd in flight to A (SCM_RIGHTS)
 *   ghost_big    a memfd of 2 MiB at fd A: ghost contents over 1 MiB
 *   ghost_twice  a memfd at A and the same memfd opened again at B (through
 *                /proc/self/fd): two open files of one ghost
 *   bpf_filter   a UDP socket at A with an eBPF socket filter (SO_ATTACH_BPF;
 *                the program's fd closed): SO_GET_FILTER cannot give its
 *                program back (classic filters are carried: zdtm sockfilter)
 *   inotify_queued an inotify instance at A with an event queued and not
 *                read: an image does not carry events (watches it does:
 *                zdtm inotify)
 *   inotify_moved an inotify instance at A watching a file since renamed:
 *                its path names no file, a restore would watch another
 *   fifo_deleted a FIFO open at A, its path since removed: a restore opens a
 *                FIFO at its path (those are carried: zdtm fifo)
 *   mount_tmpfs  a tmpfs mounted at $ZDTM_DIR/mnt and a file open on it:
 *                mounts are not carried (the restore would find neither)
 *   mqueue_notify a POSIX message queue at A with a notification registered
 *                (mq_notify, a signal): its process and signal are not
 *                carried (the queue itself is: zdtm mqueue)
 *   mqueue_big   a POSIX message queue at A of 8 messages, then the
 *                namespace's fs.mqueue.msg_max lowered to 4: a queue only
 *                CAP_SYS_RESOURCE could make now, which a restore has not
 *   sysv_shm     a SysV shared memory segment, not attached: not carried
 *                (semaphore sets and message queues are: zdtm sysvipc)
 *   async_owner  a pipe's read end at A with O_ASYNC and another process
 *                as its owner (F_SETOWN): signal-driven I/O a restore could
 *                not deliver (for the process itself, its own group or one
 *                of its threads it is carried: zdtm fown). The owner is a
 *                process the test starts in the probe's pid namespace from
 *                outside (nsenter), its pid in $ZDTM_DIR/owner after ready;
 *                "owned" once set. Another process of the container would
 *                be the probe's child (pid 1 adopts every orphan), refused
 *                before the fds are looked at; one that ended is no owner
 *                to the kernel any more (F_GETOWN_EX gives 0)
 *   seccomp      a seccomp filter (allow everything): its BPF program cannot
 *                be read back from inside the process (no clear: a filter
 *                stays for good; the probe just waits for verify)
 * Once "$ZDTM_DIR/clear" appears the probe removes that state (closes the
 * terminal; deletes the stale entry by closing its last fd) and writes
 * "cleared", so the test can show that the same process then dumps fine.
 */
#include <linux/bpf.h>
#include <mqueue.h>
#include <signal.h>
#include <linux/filter.h>
#include <sys/syscall.h>
#include <linux/seccomp.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <stddef.h>
#include <netinet/in.h>
#include "zdtm.h"

#define A 20
#define B 21
#define EP 22

static int sysv_id = -1;

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	if (argc != 2)
		zdtm_fail("usage: refuse_fds pty|epoll_closed|epoll_collide|epoll_socket|unix_named_sender|unix_rights|ghost_big|ghost_twice|bpf_filter|inotify_queued|inotify_moved|fifo_deleted|mount_tmpfs|mqueue_notify|mqueue_big|sysv_shm|async_owner|seccomp");
	const char *mode = argv[1];
	int m = -1, s = -1;
	if (!strcmp(mode, "pty")) {
		m = posix_openpt(O_RDWR | O_NOCTTY);
		zdtm_check(m >= 0 && grantpt(m) == 0 && unlockpt(m) == 0, "posix_openpt");
		s = open(ptsname(m), O_RDWR | O_NOCTTY);
		zdtm_check(s >= 0, "open the pty's slave");
	} else if (!strncmp(mode, "epoll_", 6)) {
		int sock = !strcmp(mode, "epoll_socket");
		int e = sock ? socket(AF_INET, SOCK_DGRAM, 0) : eventfd(0, 0);
		zdtm_check(e >= 0 && dup2(e, A) == A, "eventfd at A");
		close(e);
		int ep = epoll_create1(0);
		zdtm_check(ep >= 0 && dup2(ep, EP) == EP, "epoll at EP");
		close(ep);
		struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 1 };
		zdtm_check(epoll_ctl(EP, EPOLL_CTL_ADD, A, &ev) == 0, "add A");
		zdtm_check(dup2(A, B) == B, "dup2 A to B");
		zdtm_check(close(A) == 0, "close A");
		if (sock) {
			e = socket(AF_INET, SOCK_DGRAM, 0);
			zdtm_check(e >= 0 && dup2(e, A) == A, "another socket at A");
			close(e);
		}
		if (!strcmp(mode, "epoll_collide")) {
			e = eventfd(0, 0);
			zdtm_check(e >= 0 && dup2(e, A) == A, "a new eventfd at A");
			close(e);
			ev.data.u64 = 2;
			zdtm_check(epoll_ctl(EP, EPOLL_CTL_ADD, A, &ev) == 0, "add the new A");
		}
	} else if (!strncmp(mode, "unix_", 5)) {
		int sv[2];
		int dgram = !strcmp(mode, "unix_named_sender");
		if (dgram) {
			sv[0] = socket(AF_UNIX, SOCK_DGRAM, 0);
			sv[1] = socket(AF_UNIX, SOCK_DGRAM, 0);
		} else {
			zdtm_check(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
		}
		zdtm_check(sv[0] >= 0 && sv[1] >= 0 && dup2(sv[0], A) == A && dup2(sv[1], B) == B, "sockets at A and B");
		close(sv[0]);
		close(sv[1]);
		if (dgram) {
			struct sockaddr_un a = { .sun_family = AF_UNIX }, b = { .sun_family = AF_UNIX };
			int la = snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "rrc-refuse-a-%d", getpid());
			int lb = snprintf(b.sun_path + 1, sizeof b.sun_path - 1, "rrc-refuse-b-%d", getpid());
			socklen_t al = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + la);
			zdtm_check(bind(A, (struct sockaddr *)&a, al) == 0, "bind A");
			zdtm_check(bind(B, (struct sockaddr *)&b, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + lb)) == 0,
				   "bind B");
			zdtm_check(sendto(B, "dgram", 5, 0, (struct sockaddr *)&a, al) == 5, "a datagram to A from B");
		} else {
			char cbuf[CMSG_SPACE(sizeof(int))] = { 0 }, one = '1';
			struct iovec iov = { &one, 1 };
			struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf };
			struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
			cm->cmsg_level = SOL_SOCKET;
			cm->cmsg_type = SCM_RIGHTS;
			cm->cmsg_len = CMSG_LEN(sizeof(int));
			int passed = 0;
			memcpy(CMSG_DATA(cm), &passed, sizeof passed);
			zdtm_check(sendmsg(B, &mh, 0) == 1, "an fd in flight to A");
		}
	} else if (!strncmp(mode, "ghost_", 6)) {
		int big = !strcmp(mode, "ghost_big");
		int mfd = memfd_create("refuse", 0);
		zdtm_check(mfd >= 0 && dup2(mfd, A) == A, "a memfd at A");
		close(mfd);
		zdtm_check(ftruncate(A, big ? 2 << 20 : 4096) == 0, "its size");
		if (!big) {
			char self[64];
			snprintf(self, sizeof self, "/proc/self/fd/%d", A);
			int again = open(self, O_RDONLY);
			zdtm_check(again >= 0 && dup2(again, B) == B, "the memfd opened again at B");
			close(again);
		}
	} else if (!strcmp(mode, "bpf_filter")) {
		struct bpf_insn accept[] = {
			{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0xffff },
			{ .code = BPF_JMP | BPF_EXIT },
		};
		union bpf_attr at = { .prog_type = BPF_PROG_TYPE_SOCKET_FILTER, .insns = (uintptr_t)accept,
				      .insn_cnt = 2, .license = (uintptr_t)"GPL" };
		int prog = (int)syscall(SYS_bpf, BPF_PROG_LOAD, &at, sizeof at);
		zdtm_check(prog >= 0, "BPF_PROG_LOAD of a socket filter");
		int u = socket(AF_INET, SOCK_DGRAM, 0);
		zdtm_check(u >= 0 && dup2(u, A) == A, "a UDP socket at A");
		close(u);
		zdtm_check(setsockopt(A, SOL_SOCKET, SO_ATTACH_BPF, &prog, sizeof prog) == 0, "SO_ATTACH_BPF");
		close(prog);
	} else if (!strncmp(mode, "inotify_", 8)) {
		char watched[PATH_MAX];
		zdtm_path(watched, sizeof watched, "watched");
		zdtm_check(zdtm_write_file("watched", "x\n") == 0, "a file to watch");
		int in = inotify_init1(IN_NONBLOCK);
		zdtm_check(in >= 0 && dup2(in, A) == A, "an inotify instance at A");
		close(in);
		zdtm_check(inotify_add_watch(A, watched, IN_MODIFY) == 1, "watch 1");
		if (!strcmp(mode, "inotify_queued")) {
			int f = open(watched, O_WRONLY | O_APPEND);
			zdtm_check(f >= 0 && write(f, "y\n", 2) == 2, "an event queued");
			close(f);
		} else {
			char away[PATH_MAX];
			zdtm_path(away, sizeof away, "moved-away");
			zdtm_check(rename(watched, away) == 0, "the watched file moved");
		}
	} else if (!strcmp(mode, "async_owner")) {
		int pp[2];
		zdtm_check(pipe(pp) == 0 && dup2(pp[0], A) == A && dup2(pp[1], B) == B, "a pipe at A and B");
		close(pp[0]);
		close(pp[1]);
	} else if (!strcmp(mode, "sysv_shm")) {
		sysv_id = shmget(IPC_PRIVATE, 4096, 0600);
		zdtm_check(sysv_id >= 0, "a SysV shared memory segment");
	} else if (!strcmp(mode, "mqueue_notify")) {
		char name[64];
		snprintf(name, sizeof name, "/rrc-refuse-%d", getpid());
		mqd_t q = mq_open(name, O_RDWR | O_CREAT, 0600, NULL);
		zdtm_check(q >= 0 && dup2((int)q, A) == A, "a message queue at A");
		close((int)q);
		struct sigevent ev = { .sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGUSR2 };
		zdtm_check(mq_notify(A, &ev) == 0, "mq_notify");
	} else if (!strcmp(mode, "mqueue_big")) {
		char name[64];
		snprintf(name, sizeof name, "/rrc-refuse-%d", getpid());
		struct mq_attr at = { .mq_maxmsg = 8, .mq_msgsize = 64 };
		mqd_t q = mq_open(name, O_RDWR | O_CREAT, 0600, &at);
		zdtm_check(q >= 0 && dup2((int)q, A) == A, "a message queue at A");
		close((int)q);
		int s = open("/proc/sys/fs/mqueue/msg_max", O_WRONLY);
		zdtm_check(s >= 0 && write(s, "4", 1) == 1, "fs.mqueue.msg_max lowered (the container's IPC namespace)");
		close(s);
	} else if (!strcmp(mode, "mount_tmpfs")) {
		char mnt[PATH_MAX], file[PATH_MAX + 16];
		zdtm_path(mnt, sizeof mnt, "mnt");
		zdtm_check(mkdir(mnt, 0755) == 0 && mount("rrc-refuse", mnt, "tmpfs", 0, "size=1m") == 0,
			   "mount a tmpfs (root in the container's mount namespace)");
		snprintf(file, sizeof file, "%s/on-tmpfs", mnt);
		int t = open(file, O_RDWR | O_CREAT, 0600);
		zdtm_check(t >= 0 && dup2(t, A) == A, "a file on it at A");
		close(t);
	} else if (!strcmp(mode, "fifo_deleted")) {
		char path[PATH_MAX];
		zdtm_path(path, sizeof path, "fifo");
		zdtm_check(mkfifo(path, 0600) == 0, "mkfifo");
		int ff = open(path, O_RDWR);
		zdtm_check(ff >= 0 && dup2(ff, A) == A, "the FIFO at A");
		close(ff);
		zdtm_check(unlink(path) == 0, "its path removed");
	} else if (!strcmp(mode, "seccomp")) {
		struct sock_filter allow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
		struct sock_fprog prog = { 1, &allow };
		int r = prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0);
		char say[32];
		snprintf(say, sizeof say, "seccomp=%d\n", r);
		zdtm_write_file("seccompresult", say);
		zdtm_ready();
		zdtm_wait_verify();
		zdtm_pass();
	} else {
		zdtm_fail("unknown mode %s", mode);
	}
	zdtm_ready();
	if (!strcmp(mode, "async_owner")) {
		char path[PATH_MAX];
		int owner = 0;
		zdtm_path(path, sizeof path, "owner");
		while (owner <= 0) {
			FILE *f = fopen(path, "r");
			if (!f || fscanf(f, "%d", &owner) != 1)
				owner = 0;
			if (f)
				fclose(f);
			zdtm_sleep_ms(5);
		}
		zdtm_check(fcntl(A, F_SETOWN, owner) == 0 && fcntl(A, F_SETFL, O_ASYNC) == 0,
			   "O_ASYNC, F_SETOWN to the other process");
		zdtm_check(zdtm_write_file("owned", "1\n") == 0, "write owned");
	}
	while (!zdtm_file_exists("clear"))
		zdtm_sleep_ms(5);
	if (m >= 0) {
		close(s);
		close(m);
	} else if (!strncmp(mode, "ghost_", 6)) {
		close(A);
		close(B);
	} else if (!strcmp(mode, "fifo_deleted")) {
		zdtm_check(close(A) == 0, "close the FIFO");
	} else if (!strcmp(mode, "async_owner")) {
		zdtm_check(fcntl(A, F_SETFL, 0) == 0, "O_ASYNC off");
	} else if (!strcmp(mode, "sysv_shm")) {
		zdtm_check(shmctl(sysv_id, IPC_RMID, NULL) == 0, "remove the segment");
	} else if (!strcmp(mode, "mqueue_notify")) {
		zdtm_check(mq_notify(A, NULL) == 0, "the notification removed");
	} else if (!strcmp(mode, "mqueue_big")) {
		int s = open("/proc/sys/fs/mqueue/msg_max", O_WRONLY);
		zdtm_check(s >= 0 && write(s, "10", 2) == 2, "fs.mqueue.msg_max back to 10");
		close(s);
	} else if (!strcmp(mode, "mount_tmpfs")) {
		char mnt[PATH_MAX];
		zdtm_path(mnt, sizeof mnt, "mnt");
		zdtm_check(close(A) == 0 && umount(mnt) == 0, "close the file, unmount the tmpfs");
	} else if (!strcmp(mode, "inotify_queued")) {
		char ev[4096];
		zdtm_check(read(A, ev, sizeof ev) > 0, "read the event");
	} else if (!strcmp(mode, "inotify_moved")) {
		char watched[PATH_MAX], away[PATH_MAX];
		zdtm_path(watched, sizeof watched, "watched");
		zdtm_path(away, sizeof away, "moved-away");
		zdtm_check(rename(away, watched) == 0, "the watched file back");
	} else if (!strcmp(mode, "bpf_filter")) {
		int one = 1;
		zdtm_check(setsockopt(A, SOL_SOCKET, SO_DETACH_BPF, &one, sizeof one) == 0, "SO_DETACH_BPF");
	} else if (!strncmp(mode, "unix_", 5)) {
		char buf[8], cbuf[CMSG_SPACE(sizeof(int))];
		struct iovec iov = { buf, sizeof buf };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf };
		zdtm_check(recvmsg(A, &mh, 0) > 0, "take what was queued at A");
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		if (cm && cm->cmsg_type == SCM_RIGHTS) {
			int got;
			memcpy(&got, CMSG_DATA(cm), sizeof got);
			close(got);
		}
	} else {
		zdtm_check(close(B) == 0, "close B: the first eventfd's last fd, its entry goes");
	}
	zdtm_check(zdtm_write_file("cleared", "1\n") == 0, "write cleared");
	zdtm_wait_verify();
	zdtm_pass();
}
