"""zdtm-style checkpoint/restore cycles (runtime/tests/zdtm/*.c).

Each program sets up one kind of state and verifies it byte for byte when
told to (protocol in runtime/tests/zdtm/zdtm.h). A cycle is:

  rrc exec -> ready -> full dump (--leave-running) -> incremental dumps
  (--parent), the program mutating its state in between -> final dump
  (kills the process) -> rrc inspect the chain -> rrc restore -> verify ->
  the program's result must be PASS.

test_selfcheck runs every program without rrc: it must PASS when left
alone and FAIL when told to damage its own state (ZDTM_CORRUPT=1), so
that a PASS after a restore means something.
"""
import json
import os
import socket
import sys
import time
from pathlib import Path

import pytest

from conftest import (NETNS_PREFIX, RESULT_TIMEOUT, TOOLS, netns_exec, pid_alive, read_text, run,
                      wait_for_file, wait_until, zdtm_bin)

sys.path.insert(0, str(TOOLS))
import zdtm_standalone  # noqa: E402

# program -> arguments
PROGRAMS = {
    "locks": [],
    "blocking": [],
    "bigmem": [],
    "filemap": [],
    "mapdeleted": [],
    "tcpended": [],
    "sysvipc": [],
    "mqueue": [],
    "threadcaps": [],
    "growth": [],
    "fpu": [],
    "fdstate": [],
    "fdreuse": [],
    "libfds": [],
    "ofdshare": [],
    "unixrel": [],
    "pipes": [],
    "eventfd": [],
    "epoll": [],
    "timerfd": [],
    "signals": [],
    "sigpending": [],
    "signalfd": [],
    "procstate": [],
    "procattr": [],
    "creds": [],
    "filelocks": [],
    "lease": [],
    "fown": [],
    "unixpairs": [],
    "unixdgram": [],
    "ghosts": [],
    "inotify": [],
    "fifo": [],
    "uts": [],
    "membarrier": [],
    "itimers": [],
    "posixtimers": [],
    "opath": [],
    "recorded": [],
    "sockets": [],
    "sockopts": [],
    "sockfilter": [],
    "threads": ["4"],
    "vmachurn": [],
    "waits": [],
}


class Cycle:
    """One exec/dump.../restore/verify run of a zdtm program."""

    def __init__(self, rrc, tmp_path: Path, netns: str, prog: str, args=(), env=None, snapshot=None):
        self.rrc, self.tmp, self.netns = rrc, tmp_path, netns
        # None: rrc's default; "fork"/"copy"; a list: one mode per dump, in turn
        self.snapshot = snapshot
        self.zdir = tmp_path / "zdtm"
        self.zdir.mkdir()
        self.log = tmp_path / f"{prog}.log"
        self.prog, self.args = prog, list(args)
        self.env = {"ZDTM_DIR": self.zdir, **(env or {})}
        self.images: list[Path] = []
        self.dumps: list[dict] = []
        self.pid = None

    def diag(self) -> str:
        return f"log {self.log}:\n{read_text(self.log)}"

    def start(self):
        self.pid = self.rrc.exec([zdtm_bin(self.prog), *self.args], netns=self.netns, log=self.log, env=self.env)
        wait_for_file(self.zdir / "ready", pid=self.pid, log=self.log)
        return self

    def dump(self, leave_running=True) -> dict:
        d = self.tmp / f"img{len(self.images)}"
        parent = self.images[-1] if self.images else None
        seq = len(self.images)
        mode = self.snapshot[seq % len(self.snapshot)] if isinstance(self.snapshot, list) else self.snapshot
        out = self.rrc.dump(self.pid, d, parent=parent, leave_running=leave_running, snapshot=mode)
        assert out["sequence"] == seq, f"dump {seq}: sequence {out['sequence']}"
        assert out["full"] == (parent is None), f"dump {seq}: full={out['full']}"
        if self.dumps:
            assert out["parent_id"] == self.dumps[-1]["image_id"], "incremental dump names another parent"
        assert out["bytes"] > 0 and out["pause_us"] >= 0 and out["total_us"] >= out["pause_us"]
        assert (d / "checkpoint.rrc").exists(), f"no {d}/checkpoint.rrc"
        if leave_running:
            assert pid_alive(self.pid), f"process died during dump {seq} with --leave-running\n{self.diag()}"
            assert not (self.zdir / "result").exists(), f"program finished early: {read_text(self.zdir / 'result')}"
        self.images.append(d)
        self.dumps.append(out)
        return out

    def run_chain(self, increments: int, interval: float = 0.15):
        self.dump()
        for _ in range(increments):
            time.sleep(interval)  # the program mutates its state meanwhile
            self.dump()
        time.sleep(interval)
        final = self.dump(leave_running=False)
        wait_until(lambda: not pid_alive(self.pid), 15, f"pid {self.pid} to end after the final dump")
        return final

    def run_steps(self, steps: int):
        """A dump after each step of a stepped program (fdreuse.c,
        sockopts.c: $ZDTM_DIR/next asks for the next, $ZDTM_DIR/step
        answers), the last one ending it."""
        for step in range(steps):
            if step:
                (self.zdir / "next").touch()
                wait_until(lambda: read_text(self.zdir / "step").strip() == str(step), 10, f"{self.prog} step {step}")
            self.dump(leave_running=step < steps - 1)
        wait_until(lambda: not pid_alive(self.pid), 15, f"pid {self.pid} to end after the final dump")

    def inspect(self):
        info = self.rrc.inspect(self.images[-1])
        text = str(info)
        assert self.dumps[-1]["image_id"] in text, f"rrc inspect does not show the image id: {info}"
        return info

    def restore_and_verify(self, before_verify=None):
        assert not (self.zdir / "result").exists()
        self.pid = self.rrc.restore(self.images[-1], netns=self.netns)
        if before_verify:
            before_verify(self)
        (self.zdir / "verify").touch()
        wait_for_file(self.zdir / "result", timeout=RESULT_TIMEOUT, pid=self.pid, log=self.log)
        result = (self.zdir / "result").read_text()
        assert result == "PASS\n", f"{self.prog} after restore: {result.strip()}\n{self.diag()}"


def full_cycle(rrc, tmp_path, netns, prog, args=(), increments=3, env=None, before_verify=None, snapshot=None):
    c = Cycle(rrc, tmp_path, netns, prog, args, env, snapshot).start()
    c.run_chain(increments)
    c.inspect()
    c.restore_and_verify(before_verify)
    return c


# ------------------------------------------------------------------ the programs alone

@pytest.mark.parametrize("prog", sorted(PROGRAMS))
def test_selfcheck(prog):
    """Without rrc: PASS when undisturbed, FAIL when the state is damaged."""
    binary = zdtm_bin(prog)
    result, rc, out = zdtm_standalone.run(binary, PROGRAMS[prog], corrupt=False, run_ms=300)
    assert result == "PASS\n" and rc == 0, f"{prog} alone: {result}{out}"
    result, rc, out = zdtm_standalone.run(binary, PROGRAMS[prog], corrupt=True, run_ms=300)
    assert result.startswith("FAIL: ") and rc != 0, f"{prog} with ZDTM_CORRUPT=1 did not fail: {result}{out}"


# ------------------------------------------------------------------ cycles

@pytest.mark.parametrize("prog", [p for p in sorted(PROGRAMS) if p not in ("threads", "sockets", "bigmem")])
def test_cycle(rrc, tmp_path, netns, prog):
    full_cycle(rrc, tmp_path, netns, prog, PROGRAMS[prog])


# The snapshot by copy (rrc dump --snapshot copy, runtime/lib/precopy.c):
# the same programs, every dump of the chain a copy snapshot; with the
# default pre-copy passes, and with none (RRC_PRECOPY_PASSES=0: an
# incremental dump copies every written page in the pause, the path that
# otherwise only sees the last few).
@pytest.mark.parametrize("passes", [5, 0])
@pytest.mark.parametrize("prog", [p for p in sorted(PROGRAMS) if p not in ("threads", "sockets")])
def test_cycle_copy(rrc, tmp_path, netns, prog, passes):
    c = full_cycle(rrc, tmp_path, netns, prog, PROGRAMS[prog], snapshot="copy",
                   env={"RRC_PRECOPY_PASSES": passes})
    assert all(d["fork_us"] == 0 for d in c.dumps), f"copy snapshots that forked: {c.dumps}"
    assert c.dumps[0]["precopy_passes"] >= 1, "a full copy snapshot without its first pass"
    assert all(d["precopy_passes"] == 0 for d in c.dumps[1:]) == (passes == 0), \
        f"RRC_PRECOPY_PASSES={passes}: {[d['precopy_passes'] for d in c.dumps]}"


def test_copy_snapshot_vma_names_read_before_the_pause(rrc, tmp_path, netns):
    """A copy snapshot reads the VMAs' names just before its pause and, in
    the pause, keeps a name only for a VMA with the same bounds, file and
    offset (runtime/lib/snapshot.c, name_known). vmachurn's thread maps
    another file at the same place every ~0.1 ms; RRC_TEST_PREPAUSE_MS
    makes sure it does between those reads and the pause. A name taken for
    the wrong file restores the wrong file's page there."""
    full_cycle(rrc, tmp_path, netns, "vmachurn", snapshot="copy", increments=4,
               env={"RRC_TEST_PREPAUSE_MS": 3})


@pytest.fixture
def many_vmas_allowed():
    """vm.max_map_count raised for vmamany.c's 70000 VMAs, put back after."""
    knob = Path("/proc/sys/vm/max_map_count")
    old = knob.read_text().strip()
    knob.write_text("140000\n")
    try:
        yield knob
    finally:
        knob.write_text(old + "\n")


def test_vmamany_selfcheck(many_vmas_allowed):
    binary = zdtm_bin("vmamany")
    result, rc, out = zdtm_standalone.run(binary, ["70000"], corrupt=False, run_ms=300)
    assert result == "PASS\n" and rc == 0, f"vmamany alone: {result}{out}"
    result, rc, out = zdtm_standalone.run(binary, ["70000"], corrupt=True, run_ms=300)
    assert result.startswith("FAIL: ") and rc != 0, f"vmamany with ZDTM_CORRUPT=1 did not fail: {result}{out}"


@pytest.mark.parametrize("snapshot", ["fork", "copy", "copy-no-helper"])
def test_more_vmas_than_65536(rrc, tmp_path, netns, many_vmas_allowed, snapshot):
    """No fixed limit on the number of VMAs (issue 16): the snapshot's lists,
    and the pause helper's, are sized from vm.max_map_count when the library
    starts (runtime/lib/init.c), not for 65536. 70000 VMAs, a full image and
    incrementals, restored with every VMA and page. copy-no-helper: the
    control thread reads the map itself (RRC_PAUSE_HELPER=0)."""
    env = {"RRC_PAUSE_HELPER": "0"} if snapshot == "copy-no-helper" else None
    full_cycle(rrc, tmp_path, netns, "vmamany", ["70000"], increments=2, env=env,
               snapshot=snapshot.removesuffix("-no-helper"))


@pytest.mark.parametrize("snapshot", ["fork", "copy"])
def test_vmas_past_the_limit_the_library_started_with_are_refused(rrc, tmp_path, netns, many_vmas_allowed, snapshot):
    """vm.max_map_count raised after the library sized its lists: a dump of
    more VMAs than they hold is refused, naming the cause, and the process
    runs on."""
    many_vmas_allowed.write_text("65530\n")
    c = Cycle(rrc, tmp_path, netns, "vmamany", ["70000"], env={"ZDTM_VMAMANY_WAIT": "1"}, snapshot=snapshot)
    c.pid = rrc.exec([zdtm_bin("vmamany"), "70000"], netns=netns, log=c.log, env=c.env)
    time.sleep(0.3)  # the library has started: its lists are sized
    many_vmas_allowed.write_text("140000\n")
    (c.zdir / "go").touch()
    wait_for_file(c.zdir / "ready", pid=c.pid, log=c.log)
    msg = rrc.fails("dump", "--pid", str(c.pid), "--images", str(tmp_path / "img"), "--leave-running", "--snapshot", snapshot)
    assert "vm.max_map_count" in msg and "VMAs" in msg, msg
    assert pid_alive(c.pid), f"a refused dump killed the process\n{c.diag()}"


def test_threads_64_copy(rrc, tmp_path, netns):
    full_cycle(rrc, tmp_path, netns, "threads", ["64"], snapshot="copy")


def test_chain_alternating_fork_and_copy(rrc, tmp_path, netns):
    """Both snapshot kinds keep the same write-protect invariant (what an
    image holds is re-armed), so one chain can mix them: fork, copy, fork,
    copy... over bigmem, which rewrites and drops ranges between dumps."""
    c = Cycle(rrc, tmp_path, netns, "bigmem", snapshot=["fork", "copy"]).start()
    c.run_chain(increments=6, interval=0.1)
    assert [d["snapshot"] for d in c.dumps] == ["fork", "copy"] * 4
    c.restore_and_verify()


@pytest.mark.parametrize("prog", ["vmachurn", "bigmem"])
def test_copy_snapshot_after_fork_with_armed_holes(rrc, tmp_path, netns, prog):
    """A copy snapshot that carries the defined set over arms the holes it
    scans (uffd-wp markers); the kernel reports a marker as a swapped page.
    After a fork snapshot the next copy snapshot asks the kernel for every
    present page again, and must not take those holes for pages (which no
    image holds: the chain would not verify, a full image would not be
    written). copy, copy, fork, copy... over programs that drop pages."""
    c = Cycle(rrc, tmp_path, netns, prog, snapshot=["copy", "copy", "fork", "copy"]).start()
    c.run_chain(increments=6, interval=0.1)
    assert [d["snapshot"] for d in c.dumps] == ["copy", "copy", "fork", "copy"] * 2
    c.inspect()
    c.restore_and_verify()


def test_dump_after_restore_copy(rrc, tmp_path, netns):
    """A restored process (its library state fresh: no page store, no
    previous copy) takes copy snapshots on top of the image it came from."""
    c = Cycle(rrc, tmp_path, netns, "bigmem", snapshot="copy").start()
    c.run_chain(increments=1)
    c.pid = rrc.restore(c.images[-1], netns=netns)
    time.sleep(0.2)
    c.dump()
    time.sleep(0.2)
    c.dump(leave_running=False)
    wait_until(lambda: not pid_alive(c.pid), 15, "restored process to end after its final dump")
    c.restore_and_verify()


def _sin_port(sockaddr: dict) -> int:
    """The port of a record's sockaddr_in (family, then the port big-endian)."""
    assert sockaddr["family"] == socket.AF_INET, f"not an AF_INET address: {sockaddr}"
    return int.from_bytes(bytes(sockaddr["addr"][2:4]), "big")


@pytest.mark.parametrize("snapshot", ["fork", "copy", "copy-no-helper"])
def test_fd_numbers_reused_between_dumps(rrc, tmp_path, netns, snapshot):
    """One fd number holds a TCP connection to A, one to B, a pipe, a UDP
    socket, a connection to A again... a new object at each dump (fdreuse.c),
    beside a connection kept open throughout. Each image's record of that
    fd is the object of its step: the capture carries a connection's record
    over from the last dump only for the same socket between the same
    addresses (runtime/lib/sockets.c), and tells pipes and sockets apart by
    fstat. The restored process finds the last step's object there. A
    listener made after the first dump is recorded with its backlog (a copy
    snapshot's pause helper, started by that dump, learns of it from the
    listen() wrapper). copy-no-helper: RRC_PAUSE_HELPER=0, the control
    thread lists the fds itself."""
    slot, keep, late = 40, 41, 43
    env = {"RRC_PAUSE_HELPER": "0"} if snapshot == "copy-no-helper" else None
    c = Cycle(rrc, tmp_path, netns, "fdreuse", env=env, snapshot=snapshot.removesuffix("-no-helper")).start()
    port_a, port_b = map(int, (c.zdir / "ports").read_text().split())
    c.run_steps(7)
    for step, image in enumerate(c.images):
        records = {r["fd"]: r for r in rrc.inspect(image)["images"][-1]["fd_records"]}
        rec, kept = records.get(slot), records.get(keep)
        where = f"image of step {step} ({image}): fd {slot} record {rec}"
        assert rec is not None, where
        if step % 4 in (0, 1):
            assert rec["kind"] == "inet_conn", where
            want = port_a if step % 4 == 0 else port_b
            assert _sin_port(rec["detail"]["socket"]["peer"]) == want, f"{where}: peer port is not {want}"
        elif step % 4 == 2:
            assert rec["kind"] == "pipe", where
            assert rec["detail"]["pipe"]["has_data"] == 1, f"{where}: the byte in flight is missing"
        else:
            assert rec["kind"] == "inet_dgram", where
        assert kept is not None and kept["kind"] == "inet_conn", f"image of step {step}: fd {keep} {kept}"
        assert _sin_port(kept["detail"]["socket"]["peer"]) == port_a, f"image of step {step}: fd {keep} {kept}"
        lrec = records.get(late)
        if step >= 1:
            assert lrec and lrec["kind"] == "inet_listen" and lrec["detail"]["socket"]["backlog"] == 33, \
                f"image of step {step}: fd {late} is not the listener of backlog 33 made at step 1: {lrec}"
        else:
            assert lrec is None, f"image of step 0: fd {late} {lrec}"
    c.restore_and_verify()


@pytest.mark.parametrize("snapshot", ["fork", "copy", "copy-no-helper"])
def test_socket_options_changed_between_dumps(rrc, tmp_path, netns, snapshot):
    """Socket options come back (sockopts.c), read again at a dump after a
    setsockopt and carried over from the last dump when none was made: the
    program changes its options at odd steps only, a dump follows every
    step, and each image's records show the options of its step; the
    restored process finds the last step's. copy-no-helper: the control
    thread lists the fds itself."""
    env = {"RRC_PAUSE_HELPER": "0"} if snapshot == "copy-no-helper" else None
    c = Cycle(rrc, tmp_path, netns, "sockopts", env=env, snapshot=snapshot.removesuffix("-no-helper")).start()
    c.run_steps(5)
    for step, image in enumerate(c.images):
        k = (step + 1) // 2
        conns = [r for r in rrc.inspect(image)["images"][-1]["fd_records"] if r["kind"] == "inet_conn"]
        opts = [r["detail"]["socket"]["options"] for r in conns]
        # the client end has the phase's keepidle; its accepted peer the default
        assert any(o and o["keepidle"] == 30 + k and o["nodelay"] == k % 2 for o in opts), \
            f"image of step {step} ({image}): no connection with phase {k}'s options: {opts}"
    c.restore_and_verify()


@pytest.mark.parametrize("snapshot", ["fork", "copy", "copy-no-helper"])
def test_files_deleted_under_their_mappings_between_dumps(rrc, tmp_path, netns, snapshot):
    """A mapped file and a dlopen'd library deleted between two dumps of a
    chain, as an upgrade does under a running server (mapdeleted.c,
    runtime/lib/maps-deleted.c): the dump that first finds them gone turns
    them into anonymous memory and carries every page (the earlier images
    hold only the pages written), the next ones only what was written; the
    restored process reads the file's bytes and runs the library's code.
    Before, every dump from the deletion on was refused. The image of step
    0 names the file among its mappings, the images after it do not."""
    env = {"RRC_PAUSE_HELPER": "0"} if snapshot == "copy-no-helper" else None
    c = Cycle(rrc, tmp_path, netns, "mapdeleted", env=env, snapshot=snapshot.removesuffix("-no-helper")).start()
    c.run_steps(4)
    named = [mapped_paths(rrc, image) for image in c.images]
    data = str(c.zdir / "mapdeleted.dat")
    assert data in named[0], f"image of step 0 does not map {data}: {named[0]}"
    for step in (1, 2, 3):
        assert not any(p.startswith(data) for p in named[step]), f"image of step {step} still maps {data}: {named[step]}"
    c.restore_and_verify()


def mapped_paths(rrc, image) -> set:
    """The paths of the file mappings of an image's newest checkpoint
    (`rrc inspect --vmas --json`)."""
    out = rrc.run("inspect", "--images", str(image), "--vmas", "--json")
    return {v["path"] for v in json.loads(out.stdout) if v["path"]}


@pytest.mark.parametrize("snapshot", ["fork", "copy", "copy-no-helper"])
def test_socket_filters_changed_between_dumps(rrc, tmp_path, netns, snapshot):
    """Classic BPF socket filters come back (sockfilter.c): the program
    attaches new ones at odd steps only, a dump follows every step, and
    each image's UDP record carries the filter of its step (k + 1
    instructions), read again or carried over; the restored process drops
    and receives as its last filters say, and a locked filter stays locked."""
    env = {"RRC_PAUSE_HELPER": "0"} if snapshot == "copy-no-helper" else None
    c = Cycle(rrc, tmp_path, netns, "sockfilter", env=env, snapshot=snapshot.removesuffix("-no-helper")).start()
    c.run_steps(5)
    for step, image in enumerate(c.images):
        k = (step + 1) // 2
        udp = [r["detail"]["socket"]["options"] for r in rrc.inspect(image)["images"][-1]["fd_records"]
               if r["kind"] == "inet_dgram"]
        assert [(o["filter_len"], o["filter_lock"]) for o in udp] == [(k + 1, False)], \
            f"image of step {step} ({image}): the UDP socket's filter is not phase {k}'s: {udp}"
    c.restore_and_verify()


@pytest.mark.parametrize("snapshot", ["fork", "copy", "copy-no-helper"])
def test_unix_datagrams_queued_between_dumps(rrc, tmp_path, netns, snapshot):
    """Unix datagram and seqpacket queues come back message by message, and
    datagram sockets with their names (unixdgram.c): each step queues one
    more datagram (step s: s * 37 bytes, an empty one first), a dump
    follows every step, and each image holds every datagram queued by then
    (with its 4-byte length: the empty one, peeked by the dump before,
    included); the restored process reads them in order."""
    env = {"RRC_PAUSE_HELPER": "0"} if snapshot == "copy-no-helper" else None
    c = Cycle(rrc, tmp_path, netns, "unixdgram", env=env, snapshot=snapshot.removesuffix("-no-helper")).start()
    c.run_steps(5)
    for step, image in enumerate(c.images):
        want = sum(4 + s * 37 for s in range(step + 1))
        pair1 = [r["detail"]["socket"]["unix_peer"] for r in rrc.inspect(image)["images"][-1]["fd_records"]
                 if r["fd"] == 4]
        assert pair1 and pair1[0]["queued"] == want, \
            f"image of step {step} ({image}): pair[1] (fd 4) holds {pair1}, not {want} bytes of messages"
    c.restore_and_verify()


def test_a_mount_gone_by_the_host_is_no_refusal(rrc, tmp_path, netns):
    """A mount the process made since it started is refused (mounts.c;
    test_refusals.py mount_tmpfs), one that is gone is not: the kernel
    detaches a mount in every namespace when its mount point is removed,
    and `ip netns del` on the host removes /run/netns/NAME, which the
    container's private copy of the table had. Found as false refusals
    while other tests deleted their namespaces."""
    other = NETNS_PREFIX + "gone-" + os.urandom(3).hex()
    run(["ip", "netns", "add", other])
    try:
        c = Cycle(rrc, tmp_path, netns, "eventfd").start()
        assert f"/run/netns/{other}" in read_text(Path(f"/proc/{c.pid}/mountinfo")), \
            "the container's mount table lacks the namespace made before it"
    finally:
        run(["ip", "netns", "del", other])
    assert f"/run/netns/{other}" not in read_text(Path(f"/proc/{c.pid}/mountinfo"))
    c.run_chain(1)
    c.restore_and_verify()


@pytest.mark.parametrize("snapshot", ["fork", "copy"])
def test_library_fds_survive_the_application(rrc, tmp_path, netns, snapshot):
    """The library's own fds survive an application that closes what it
    did not open (libfds.c: every fd /proc/self/fd lists, close_range,
    closefrom, dup2 and dup3 onto them), with a dump after every such
    step, and every number the library used and gave up during those
    dumps is the application's again (its closes of them succeed). After
    the restore, one more step and a dump: the restored library's fds
    (remade, some at other numbers) survive it too."""
    c = Cycle(rrc, tmp_path, netns, "libfds", snapshot=snapshot).start()
    c.run_steps(4)
    c.inspect()

    def one_more_step(c):
        (c.zdir / "next").touch()
        wait_until(lambda: read_text(c.zdir / "step").strip() == "4", 10, "libfds step 4 after the restore")
        c.dump()

    c.restore_and_verify(before_verify=one_more_step)
    assert int(read_text(c.zdir / "libfds")) >= 1
    assert "the fd is the library's own" in read_text(c.log), c.diag()


@pytest.mark.parametrize("nthreads", [1, 4, 64])
def test_threads(rrc, tmp_path, netns, nthreads):
    c = full_cycle(rrc, tmp_path, netns, "threads", [str(nthreads)])
    assert all(d["threads"] >= nthreads for d in c.dumps if "threads" in d), \
        f"dumps report fewer threads than {nthreads}: {[d.get('threads') for d in c.dumps]}"


def test_bigmem_incremental(rrc, tmp_path, netns):
    """1 GiB sparse mapping: the full image holds what was written (>= 64 MiB),
    increments only what changed since their parent."""
    c = full_cycle(rrc, tmp_path, netns, "bigmem")
    full, incs = c.dumps[0], c.dumps[1:]
    assert full["pages"] >= 16384, f"full image holds {full['pages']} pages, the program wrote 16384+"
    assert full["pages"] < 262144 // 2, f"full image holds {full['pages']} pages of a sparse 1 GiB mapping"
    for d in incs:
        assert 0 < d["pages"] < full["pages"], f"incremental image {d['sequence']}: {d['pages']} pages (full: {full['pages']})"


def test_chain_of_10(rrc, tmp_path, netns):
    """Ten incrementals on top of a full image; every page resolved through
    the whole chain (bigmem rewrites 256 KiB every 20 ms, drops ranges)."""
    c = Cycle(rrc, tmp_path, netns, "bigmem").start()
    c.run_chain(increments=10, interval=0.1)
    assert [d["sequence"] for d in c.dumps] == list(range(12))
    c.inspect()
    c.restore_and_verify()


def _connect_echo(ns: str, port: int, line: str) -> str:
    code = ("import socket,sys\n"
            f"s=socket.create_connection(('127.0.0.1',{port}),timeout=10)\n"
            f"s.sendall({(line + chr(10)).encode()!r})\n"
            "d=b''\n"
            "while True:\n"
            "    b=s.recv(4096)\n"
            "    if not b: break\n"
            "    d+=b\n"
            "sys.stdout.write(d.decode())\n")
    return netns_exec(ns, [sys.executable, "-c", code], timeout=30).stdout


def test_sockets(rrc, tmp_path, netns):
    """Listening sockets come back bound; the TCP listener accepts a new
    connection from outside the process after the restore."""
    port = 20000 + int.from_bytes(os.urandom(2), "little") % 20000
    c = Cycle(rrc, tmp_path, netns, "sockets", env={"ZDTM_PORT": port}).start()
    assert int((c.zdir / "port").read_text()) == port
    assert _connect_echo(netns, port, "before") == "echo: before\n"
    c.run_chain(increments=2)
    c.inspect()

    def outside(cyc):
        assert _connect_echo(netns, port, "after restore") == "echo: after restore\n"

    c.restore_and_verify(before_verify=outside)


def test_restore_twice_same_chain(rrc, tmp_path, netns):
    """A chain is not consumed by a restore: restoring it again gives the
    same process state (eventfd counters, here)."""
    c = full_cycle(rrc, tmp_path, netns, "eventfd", increments=1)
    (c.zdir / "result").unlink()
    (c.zdir / "verify").unlink()
    c.restore_and_verify()


def test_dump_after_restore(rrc, tmp_path, netns):
    """A restored process can be dumped again, incrementally on top of the
    image it came from, and restored from that longer chain."""
    c = Cycle(rrc, tmp_path, netns, "pipes").start()
    c.run_chain(increments=1)
    c.pid = rrc.restore(c.images[-1], netns=netns)
    time.sleep(0.2)
    c.dump()  # incremental, parent = the image restored from
    time.sleep(0.2)
    c.dump(leave_running=False)
    wait_until(lambda: not pid_alive(c.pid), 15, "restored process to end after its final dump")
    c.inspect()
    c.restore_and_verify()
