"""Refusals: what rrc must not do, and the message that says why.

  * exec: librrc's wrappers refuse fork()/posix_spawn() (ENOSYS) and
    writable MAP_SHARED mmap/mprotect (EPERM), log it, the service runs on;
  * dump: a process with a child, a writable shared mapping or an io_uring
    made by raw syscalls (no wrapper saw them), a seccomp filter, a
    terminal, an epoll entry whose number no longer holds its file, POSIX
    timers or pending signals past what the library carries is refused,
    naming the cause, and keeps running;
  * restore: a corrupted, truncated or version-mismatched image, a chain
    with a missing parent, an address already taken: refused, naming the
    cause, leaving no process, cgroup or registry entry behind.
The probes are runtime/tests/zdtm/refuse_*.c.
"""
import contextlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import (CGROUP_ROOT, CMD_TIMEOUT, RESULT_TIMEOUT, RUNTIME_BUILD, Rrc, ZDTM_DIR, delete_netns,
                      last_line_int, pid_alive, read_text, run, snapshot_cgroups, wait_for_file, wait_until, zdtm_bin,
                      NETNS_PREFIX, TOOLS)

sys.path.insert(0, str(TOOLS))
from rrlog_edit import crc32c  # noqa: E402  (the tests' one CRC32C)

HEADER_LEN = 72
SECTION_HDR = 24
SEC_PROCESS, SEC_PAGES, SEC_END = 1, 7, 0xFFFF


# ------------------------------------------------------------------ helpers

def sections(img: bytes):
    """(type, header offset, payload offset, length) of each section."""
    off, out = HEADER_LEN, []
    while off + SECTION_HDR <= len(img):
        typ, _flags, length = struct.unpack_from("<IIQ", img, off)
        out.append((typ, off, off + SECTION_HDR, length))
        if typ == SEC_END:
            break
        off += SECTION_HDR + ((length + 7) & ~7)
    return out


def procs_running(paths) -> list[int]:
    """Pids whose executable is one of paths."""
    paths = {str(Path(p).resolve()) for p in paths}
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            exe = os.readlink(d / "exe")
        except OSError:
            continue
        if exe in paths and pid_alive(int(d.name)):
            found.append(int(d.name))
    return found


def registry(rrc) -> str:
    return rrc.run("ps", "--json").stdout


class Probe:
    """Starts a refusal probe under rrc and waits for it."""

    def __init__(self, rrc, tmp_path, netns, prog, *args):
        self.zdir = tmp_path / "zdtm"
        self.zdir.mkdir(exist_ok=True)
        self.log = tmp_path / f"{prog}.log"
        self.pid = rrc.exec([zdtm_bin(prog), *args], netns=netns, log=self.log, env={"ZDTM_DIR": self.zdir})
        wait_for_file(self.zdir / "ready", pid=self.pid, log=self.log)

    def still_works(self):
        """The probe survived the refusal: it still answers verify."""
        assert pid_alive(self.pid), f"process died after the refusal\n{read_text(self.log)}"
        (self.zdir / "verify").touch()
        wait_for_file(self.zdir / "result", timeout=RESULT_TIMEOUT, pid=self.pid, log=self.log)
        assert (self.zdir / "result").read_text() == "PASS\n"


# Accepted spellings of a cause in an error message.
SYNONYMS = {"checksum": ("checksum", "crc")}


def assert_names(msg: str, *words):
    low = msg.lower()
    for w in words:
        alts = SYNONYMS.get(w, (w,))
        assert any(a.lower() in low for a in alts), f"the error message does not name '{w}':\n{msg}"


# ------------------------------------------------------------------ exec-time refusals (wrappers)

def test_fork_refused_by_wrapper(rrc, tmp_path, netns):
    p = Probe(rrc, tmp_path, netns, "refuse_fork", "libc")
    assert (p.zdir / "forkresult").read_text() == "fork=-1 errno=38 posix_spawn=38\n", \
        f"fork/posix_spawn were not refused with ENOSYS: {(p.zdir / 'forkresult').read_text()}"
    log = read_text(p.log)
    assert_names(log, "fork", "refus")
    assert_names(log, "posix_spawn")
    # the service runs on, and can still be checkpointed
    rrc.dump(p.pid, tmp_path / "img", leave_running=True)
    p.still_works()


def test_shared_mapping_refused_by_wrapper(rrc, tmp_path, netns):
    p = Probe(rrc, tmp_path, netns, "refuse_shared", "libc")
    got = (p.zdir / "shmresult").read_text()
    assert got == "anon=-1 errno=1 file=-1 errno=1 ro=1 errno=0 mprotect=-1 errno=1\n", \
        f"writable MAP_SHARED not refused with EPERM (or read-only shared refused): {got}"
    assert_names(read_text(p.log), "MAP_SHARED", "refus")
    rrc.dump(p.pid, tmp_path / "img", leave_running=True)
    p.still_works()


# ------------------------------------------------------------------ dump-time refusals (raw syscalls)

@pytest.mark.parametrize("prog,args,result_file,expect,words", [
    ("refuse_fork", ["raw"], "forkresult", "rawfork=1\n", ["child"]),
    ("refuse_shared", ["raw"], "shmresult", "rawmmap=1\n", ["shared"]),
    ("refuse_shared", ["deleted_shared"], "shmresult", "deleted=1\n", ["shared mapping", "deleted file"]),
    ("refuse_shared", ["deleted_writer"], "shmresult", "deleted=1\n", ["fd 20", "open for writing", "deleted file"]),
    ("refuse_shared", ["deleted_big"], "shmresult", "deleted=1\n", ["deleted files", "256 MiB", "big.dat"]),
    ("refuse_iouring", [], "uringresult", None, ["io_uring"]),
    ("refuse_fds", ["seccomp"], "seccompresult", "seccomp=0\n", ["seccomp", "PROCESS_STATE"]),
])
def test_dump_refused(rrc, tmp_path, netns, prog, args, result_file, expect, words):
    p = Probe(rrc, tmp_path, netns, prog, *args)
    got = (p.zdir / result_file).read_text()
    if expect:
        assert got == expect, f"the probe could not set up its state: {got}"
    else:
        assert int(got.split("=")[1]) >= 0, f"io_uring_setup failed: {got}"
    for leave_running in (True, False):
        img = tmp_path / f"img-{leave_running}"
        args_ = ["dump", "--pid", str(p.pid), "--images", str(img)] + (["--leave-running"] if leave_running else [])
        msg = rrc.fails(*args_)
        assert_names(msg, *words)
        # refused: no usable image, and the process was not killed even
        # without --leave-running
        f = img / "checkpoint.rrc"
        if f.exists():
            bad = rrc.run("inspect", "--images", str(img), check=False)
            assert bad.returncode != 0, "a refused dump left an image that inspects as valid"
        assert pid_alive(p.pid), f"a refused dump killed the process\n{read_text(p.log)}"
    p.still_works()


@pytest.mark.parametrize("mode,words", [
    ("posix", ["70 POSIX timers", "timer_create", "at most 64"]),
    ("pending", ["more than 64 signals pending"]),
])
def test_dump_refuses_state_it_would_lose(rrc, tmp_path, netns, mode, words):
    """More POSIX timers than the 64 the library carries (fewer are: zdtm
    posixtimers), and pending signals past the 64 it carries (fewer are:
    zdtm sigpending): the dump is refused naming it,
    the process runs on, and once the state is gone the same process
    dumps fine (the refusal is about that state). The 70 signals are all
    still pending, in order, after the refused dump (the probe checks):
    what the pause took out of the kernel went back."""
    p = Probe(rrc, tmp_path, netns, "refuse_timers", mode)
    msg = rrc.fails("dump", "--pid", str(p.pid), "--images", str(tmp_path / "img-refused"), "--leave-running")
    assert_names(msg, *words)
    assert not (tmp_path / "img-refused" / "checkpoint.rrc").exists(), "a refused dump left an image"
    (p.zdir / "clear").touch()
    wait_for_file(p.zdir / "cleared", pid=p.pid, log=p.log)
    rrc.dump(p.pid, tmp_path / "img", leave_running=True)
    p.still_works()


def refused_then_restored(rrc, tmp_path, netns, p, snapshot, *words):
    """The probe's dump is refused naming words, leaves no image and the
    probe runs on; once it cleared its state it dumps and restores."""
    msg = rrc.fails("dump", "--pid", str(p.pid), "--images", str(tmp_path / "img-refused"), "--leave-running",
                    "--snapshot", snapshot)
    assert_names(msg, *words)
    assert not (tmp_path / "img-refused" / "checkpoint.rrc").exists(), "a refused dump left an image"
    (p.zdir / "clear").touch()
    wait_for_file(p.zdir / "cleared", pid=p.pid, log=p.log)
    rrc.dump(p.pid, tmp_path / "img", leave_running=False, snapshot=snapshot)
    wait_until(lambda: not pid_alive(p.pid), 15, "the probe to end after its final dump")
    p.pid = rrc.restore(tmp_path / "img", netns=netns)
    p.still_works()


@pytest.mark.parametrize("snapshot", ["fork", "copy"])
@pytest.mark.parametrize("mode,words", [
    ("pty", ["character device", "/dev/ptmx", "fd 3"]),
    ("epoll_closed", ["epoll fd 22", "fd 20", "closed"]),
    ("epoll_collide", ["epoll fd 22", "fd 20", "another file"]),
    ("epoll_socket", ["epoll fd 22", "fd 20", "another file"]),
    ("unix_named_sender", ["unix socket fd 20", "datagrams queued", "named sender"]),
    ("unix_rights", ["unix socket fd 20", "file descriptors", "in flight", "SCM_RIGHTS"]),
    ("ghost_big", ["fd 20", "memfd", "more than 1 MiB"]),
    ("ghost_twice", ["fds 20 and 21", "two open files", "memfd"]),
    ("bpf_filter", ["socket fd 20", "eBPF filter", "SO_ATTACH_BPF"]),
    ("inotify_queued", ["inotify fd 20", "events queued"]),
    ("inotify_moved", ["inotify fd 20", "watch 1", "no longer at the path"]),
    ("fifo_deleted", ["fd 20", "deleted", "special file"]),
    ("mount_tmpfs", ["mounted tmpfs at", "/mnt", "not carried"]),
    ("mqueue_notify", ["fd 20", "POSIX message queue", "mq_notify"]),
    ("mqueue_big", ["fd 20", "POSIX message queue", "msg_max", "CAP_SYS_RESOURCE"]),
    ("sysv_shm", ["SysV shared memory segment", "key 0", "IPC namespace"]),
])
def test_dump_refuses_fds_a_restore_could_not_bring_back(rrc, tmp_path, netns, mode, words, snapshot):
    """A terminal, an epoll entry whose number no longer holds its file, a
    datagram queued from a named sender, an fd in flight, a
    memfd too large to carry or opened twice, an eBPF socket filter, an
    inotify instance with events queued or watching a file since moved:
    before these were refused the dump succeeded and the restore failed
    (or registered the wrong file). Refused naming the fd, the process
    runs on, and once the state is gone the same process dumps and
    restores (refuse_fds.c)."""
    p = Probe(rrc, tmp_path, netns, "refuse_fds", mode)
    refused_then_restored(rrc, tmp_path, netns, p, snapshot, *words)


@pytest.mark.parametrize("snapshot", ["fork", "copy"])
def test_dump_refuses_signal_driven_io_for_another_process(rrc, tmp_path, netns, snapshot):
    """Signal-driven I/O (O_ASYNC) for the process itself, its own process
    group or one of its threads is carried (zdtm fown); for another process
    a restore could not deliver it: refused naming the fd and the owner.
    The owner is a process started in the probe's pid namespace from
    outside (nsenter): any other process of the container would be the
    probe's child (refused first), and one that ended is no owner to the
    kernel any more. Once O_ASYNC is off the same process dumps and
    restores (refuse_fds.c async_owner)."""
    p = Probe(rrc, tmp_path, netns, "refuse_fds", "async_owner")
    other = subprocess.Popen(["nsenter", "--target", str(p.pid), "--pid", "--", "sleep", "600"])
    forked = []

    def nsenter_child():
        try:
            forked[:] = Path(f"/proc/{other.pid}/task/{other.pid}/children").read_text().split()
        except OSError:
            pass
        return forked

    try:
        # nsenter forks into the namespace: its child, by its pid there
        host_pid = wait_until(nsenter_child, 10, "nsenter's child")[0]
        nspid = Path(f"/proc/{host_pid}/status").read_text().split("NSpid:")[1].split("\n")[0].split()[-1]
        (p.zdir / "owner.tmp").write_text(f"{nspid}\n")
        os.replace(p.zdir / "owner.tmp", p.zdir / "owner")
        wait_for_file(p.zdir / "owned", pid=p.pid, log=p.log)
        refused_then_restored(rrc, tmp_path, netns, p, snapshot, "fd 20", "signal-driven I/O",
                              f"for process {nspid} ", "not this process", "F_SETOWN")
    finally:
        for pid in forked:
            with contextlib.suppress(OSError):
                os.kill(int(pid), signal.SIGKILL)
        other.kill()
        other.wait()


@pytest.mark.parametrize("snapshot", ["fork", "copy"])
def test_dump_refuses_threads_with_different_credentials(rrc, tmp_path, netns, snapshot):
    """The image gives every thread the main thread's credentials (a
    server that switched users with glibc's setuid has one set: carried,
    tests/test_servers.py memcached -u memcache, zdtm creds). A raw
    setresuid in one thread changes that thread's alone: refused naming
    it, the process runs on, and with its ids alike again it dumps and
    restores (refuse_creds.c)."""
    p = Probe(rrc, tmp_path, netns, "refuse_creds")
    refused_then_restored(rrc, tmp_path, netns, p, snapshot, "threads", "raw system call", "PROCESS_STATE")


# ------------------------------------------------------------------ restore-time refusals

@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """A real chain (full + 1 incremental) of the eventfd program, dumped
    and killed; shared by the image-corruption tests (copied, never edited)."""
    base = tmp_path_factory.mktemp("chain")
    rrc = Rrc()
    ns = NETNS_PREFIX + os.urandom(4).hex()
    run(["ip", "netns", "add", ns])
    try:
        run(["ip", "-n", ns, "link", "set", "lo", "up"])
        zdir = base / "zdtm"
        zdir.mkdir()
        log = base / "eventfd.log"
        pid = rrc.exec([zdtm_bin("eventfd")], netns=ns, log=log, env={"ZDTM_DIR": zdir})
        wait_for_file(zdir / "ready", pid=pid, log=log)
        full = rrc.dump(pid, base / "img0", leave_running=True)
        time.sleep(0.1)
        inc = rrc.dump(pid, base / "img1", parent=base / "img0")
        wait_until(lambda: not pid_alive(pid), 15, "the chain's process to end")
        yield {"dir": base, "ns": ns, "full": full, "inc": inc, "zdir": zdir}
    finally:
        rrc.cleanup()
        delete_netns(ns)


def copy_chain(chain, dest: Path, which=("img0", "img1")) -> dict:
    """Copies images; each copy's parent link points at the copy of its parent."""
    out = {}
    for name in which:
        src = chain["dir"] / name
        dst = dest / name
        dst.mkdir(parents=True)
        for f in src.iterdir():
            if f.name == "parent":
                continue
            shutil.copy2(f, dst / f.name)
        out[name] = dst
    if "img1" in out:
        link = out["img1"] / "parent"
        target = out.get("img0", dest / "img0")  # img0 may be deliberately absent
        os.symlink(target, link)
    return out


def edit(path: Path, fn):
    data = bytearray(path.read_bytes())
    fn(data)
    path.write_bytes(bytes(data))


class NoLeftovers:
    """Snapshot of what a failed restore must not leave behind."""

    def __init__(self, rrc, extra_exes=()):
        self.rrc = rrc
        self.cgroups = snapshot_cgroups()
        self.exes = [RUNTIME_BUILD / "rrc-restore", *extra_exes]
        self.procs = set(procs_running(self.exes))
        self.ps = registry(rrc)

    def check(self):
        new_cg = snapshot_cgroups() - self.cgroups
        assert not new_cg, f"a failed restore left cgroups: {sorted(CGROUP_ROOT / c for c in new_cg)}"
        new_procs = set(procs_running(self.exes)) - self.procs
        assert not new_procs, f"a failed restore left processes: {sorted(new_procs)}"
        assert registry(self.rrc) == self.ps, "a failed restore left an entry in `rrc ps`"


def restore_fails(rrc, images: Path, netns: str, *words):
    before = NoLeftovers(rrc, [ZDTM_DIR / "eventfd", ZDTM_DIR / "sockets"])
    msg = rrc.fails("restore", "--images", str(images), "--netns", netns)
    assert_names(msg, *words)
    before.check()
    return msg


def inspect_fails(rrc, images: Path, *words):
    p = rrc.run("inspect", "--images", str(images), check=False)
    assert p.returncode == 1, f"rrc inspect exit {p.returncode} on a bad chain (expected 1)\n{p.stdout}{p.stderr}"
    assert_names(p.stderr + p.stdout, *words)


def test_chain_is_valid(rrc, chain, tmp_path, netns):
    """The untouched copy restores: the failures below are the edits' doing."""
    imgs = copy_chain(chain, tmp_path)
    rrc.inspect(imgs["img1"])
    pid = rrc.restore(imgs["img1"], netns=netns)
    assert pid_alive(pid)


@pytest.mark.parametrize("where", ["pages", "process"])
def test_corrupted_section_payload(rrc, chain, tmp_path, netns, where):
    imgs = copy_chain(chain, tmp_path, ["img0"])
    f = imgs["img0"] / "checkpoint.rrc"
    secs = sections(f.read_bytes())
    typ = SEC_PAGES if where == "pages" else SEC_PROCESS
    sec = [s for s in secs if s[0] == typ and s[3] > 0]
    assert sec, f"no non-empty section of type {typ} in the image: {secs}"
    _, _, payload, length = sec[0]
    edit(f, lambda d: d.__setitem__(payload + length // 2, d[payload + length // 2] ^ 0x01))
    inspect_fails(rrc, imgs["img0"], "checksum")
    restore_fails(rrc, imgs["img0"], netns, "checksum")


def test_corrupted_parent_in_chain(rrc, chain, tmp_path, netns):
    """A flipped byte in the full image under an intact incremental one."""
    imgs = copy_chain(chain, tmp_path)
    f = imgs["img0"] / "checkpoint.rrc"
    sec = [s for s in sections(f.read_bytes()) if s[0] == SEC_PAGES and s[3] > 0][0]
    edit(f, lambda d: d.__setitem__(sec[2] + 7, d[sec[2] + 7] ^ 0x80))
    inspect_fails(rrc, imgs["img1"], "checksum")
    restore_fails(rrc, imgs["img1"], netns, "checksum")


@pytest.mark.parametrize("cut", ["half", "end-section"])
def test_truncated_image(rrc, chain, tmp_path, netns, cut):
    imgs = copy_chain(chain, tmp_path, ["img0"])
    f = imgs["img0"] / "checkpoint.rrc"
    data = f.read_bytes()
    end = [s for s in sections(data) if s[0] == SEC_END]
    assert end, "the image has no END section"
    size = len(data) // 2 if cut == "half" else end[0][1]
    os.truncate(f, size)
    inspect_fails(rrc, imgs["img0"], "truncated")
    restore_fails(rrc, imgs["img0"], netns, "truncated")


@pytest.mark.parametrize("fix_crc", [False, True])
def test_version_mismatch(rrc, chain, tmp_path, netns, fix_crc):
    """Version field changed; with fix_crc the header checksum is made
    valid again, so only the version can be blamed."""
    imgs = copy_chain(chain, tmp_path, ["img0"])
    f = imgs["img0"] / "checkpoint.rrc"

    def bump(d):
        assert bytes(d[:6]) == b"RRCIMG", "not an rrc image"
        struct.pack_into("<I", d, 8, struct.unpack_from("<I", d, 8)[0] + 1)
        if fix_crc:
            struct.pack_into("<I", d, 64, crc32c(bytes(d[:64])))

    edit(f, bump)
    inspect_fails(rrc, imgs["img0"], "version")
    restore_fails(rrc, imgs["img0"], netns, "version")


def test_missing_parent(rrc, chain, tmp_path, netns):
    imgs = copy_chain(chain, tmp_path, ["img1"])  # parent link dangles
    inspect_fails(rrc, imgs["img1"], "parent")
    restore_fails(rrc, imgs["img1"], netns, "parent")


def test_wrong_parent(rrc, chain, tmp_path, netns):
    """The parent link names a full image of another chain."""
    imgs = copy_chain(chain, tmp_path, ["img1"])
    other = tmp_path / "img0"
    shutil.copytree(chain["dir"] / "img1", other, symlinks=True)  # an image, but not img1's parent
    (other / "parent").unlink()
    inspect_fails(rrc, imgs["img1"], "parent")
    restore_fails(rrc, imgs["img1"], netns, "parent")


# ------------------------------------------------------------------ an image on a pipe

def restore_stream(rrc, data: bytes, netns: str):
    """`rrc restore --stdin` with data written into its standard input (a pipe)."""
    return subprocess.run([str(rrc.bin), "restore", "--stdin", "--netns", netns], input=data,
                          capture_output=True, timeout=CMD_TIMEOUT)


def test_stream_restores(rrc, chain, tmp_path, netns):
    """A full image read from a pipe (what a failover streams from the
    backup's store) restores like the file it came from."""
    data = (chain["dir"] / "img0" / "checkpoint.rrc").read_bytes()
    p = restore_stream(rrc, data, netns)
    assert p.returncode == 0, f"rrc restore --stdin failed:\n{p.stderr.decode(errors='replace')}"
    pid = last_line_int(p.stdout.decode(), "rrc restore --stdin")
    rrc.pids.append(pid)
    assert pid_alive(pid)


def _flip_in(data: bytearray, typ: int):
    sec = [s for s in sections(bytes(data)) if s[0] == typ and s[3] > 0][0]
    data[sec[2] + sec[3] // 2] ^= 0x01
    return data


@pytest.mark.parametrize("case,words", [
    ("pages-crc", ["PAGES", "checksum"]),      # found by phase 2 as the pages arrive
    ("process-crc", ["PROCESS", "checksum"]),  # found by phase 1 before anything is used
    ("cut-in-pages", ["truncated"]),
    ("cut-before-end", ["truncated"]),
    ("trailing-bytes", ["follow", "END"]),
    ("incremental", ["not a full image"]),
])
def test_stream_refused(rrc, chain, tmp_path, netns, case, words):
    """A corrupt, truncated or over-long stream, or an incremental image
    (whose parent a stream cannot carry), is refused naming the cause, with
    nothing left behind: the process never runs."""
    full = bytearray((chain["dir"] / "img0" / "checkpoint.rrc").read_bytes())
    secs = sections(bytes(full))
    pages = [s for s in secs if s[0] == SEC_PAGES][0]
    end = [s for s in secs if s[0] == SEC_END][0]
    assert pages[3] > 0 and pages[2] + pages[3] <= end[1], f"PAGES must hold data and precede END: {secs}"
    data = {
        "pages-crc": lambda: _flip_in(full, SEC_PAGES),
        "process-crc": lambda: _flip_in(full, SEC_PROCESS),
        "cut-in-pages": lambda: full[:pages[2] + pages[3] // 2],
        "cut-before-end": lambda: full[:end[1]],
        "trailing-bytes": lambda: full + b"\0" * 8,
        "incremental": lambda: (chain["dir"] / "img1" / "checkpoint.rrc").read_bytes(),
    }[case]()
    before = NoLeftovers(rrc, [ZDTM_DIR / "eventfd"])
    p = restore_stream(rrc, bytes(data), netns)
    msg = (p.stderr + p.stdout).decode(errors="replace")
    assert p.returncode != 0, f"rrc restore --stdin accepted a bad stream ({case}):\n{msg}"
    assert_names(msg, *words)
    before.check()


def test_address_in_use(rrc, tmp_path, netns):
    """Restoring a TCP listener into a namespace where its address is taken
    fails naming it, leaves nothing behind; once the address is free, the
    same chain restores."""
    port = 20000 + int.from_bytes(os.urandom(2), "little") % 20000
    zdir = tmp_path / "zdtm"
    zdir.mkdir()
    log = tmp_path / "sockets.log"
    pid = rrc.exec([zdtm_bin("sockets")], netns=netns, log=log, env={"ZDTM_DIR": zdir, "ZDTM_PORT": port})
    wait_for_file(zdir / "ready", pid=pid, log=log)
    rrc.dump(pid, tmp_path / "img0")
    wait_until(lambda: not pid_alive(pid), 15, "the dumped process to end")
    (zdir / "unix.sock").unlink(missing_ok=True)  # only the TCP port may collide

    code = ("import socket,sys,time\n"
            "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            f"s.bind(('127.0.0.1',{port})); s.listen(); print('listening', flush=True)\n"
            "time.sleep(600)\n")
    squatter = subprocess.Popen(["ip", "netns", "exec", netns, sys.executable, "-c", code],
                                stdout=subprocess.PIPE, text=True)
    try:
        assert squatter.stdout.readline().strip() == "listening"
        msg = restore_fails(rrc, tmp_path / "img0", netns, "address already in use")
        assert str(port) in msg, f"the message does not name the port {port}:\n{msg}"
    finally:
        squatter.kill()
        squatter.wait(timeout=10)
    (zdir / "unix.sock").unlink(missing_ok=True)
    rrc.restore(tmp_path / "img0", netns=netns)
    (zdir / "verify").touch()
    wait_for_file(zdir / "result", timeout=RESULT_TIMEOUT, log=log)
    assert (zdir / "result").read_text() == "PASS\n", read_text(log)


def test_a_mapped_file_changed_since_the_checkpoint(rrc, tmp_path, netns):
    """A restore maps a file mapping's file again by its path: a file
    there that is not the one the process mapped (another version: a
    failover onto a host upgraded apart, a restore after an upgrade)
    would put its pages under the process's own written ones. The image
    names each mapped file's size and modification time (FILEIDS): the
    restore fails naming the file, leaves nothing behind, and once the
    file is the one again (its time put back) the same chain restores."""
    zdir = tmp_path / "zdtm"
    zdir.mkdir()
    log = tmp_path / "filemap.log"
    pid = rrc.exec([zdtm_bin("filemap")], netns=netns, log=log, env={"ZDTM_DIR": zdir})
    wait_for_file(zdir / "ready", pid=pid, log=log)
    rrc.dump(pid, tmp_path / "img0")
    wait_until(lambda: not pid_alive(pid), 15, "the dumped process to end")
    data = zdir / "filemap.dat"
    st = data.stat()
    os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    msg = restore_fails(rrc, tmp_path / "img0", netns, "not the one the checkpoint's process mapped")
    assert str(data) in msg, f"the message does not name {data}:\n{msg}"
    os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns))
    rrc.restore(tmp_path / "img0", netns=netns)
    (zdir / "verify").touch()
    wait_for_file(zdir / "result", timeout=RESULT_TIMEOUT, log=log)
    assert (zdir / "result").read_text() == "PASS\n", read_text(log)
