"""Replay after a restore (issue 13 §4; RRC §4.2, HyCoR §4.1): `rrc restore
--replay LOG` restores a checkpoint taken while recording and replays the
log from the checkpoint's cut: lock acquisitions in the recorded order,
recorded results for nondeterministic calls, outputs suppressed and checked
(offset, CRC32C); at the end of the log every thread goes live together.

Each zdtm program runs for a fixed time by its recorded clock
($ZDTM_RUN_MS, zdtm.h), then writes its result and a digest of its state
(counters per thread, byte hashes, rounds) and idles. The test takes a
checkpoint while it runs, lets it finish, kills it, deletes what it wrote,
replays the log from the checkpoint and compares: the replay writes the
same files byte for byte. Real servers (redis, memcached -t 4, lighttpd,
mtkv) are recorded under rrc-check's load across a checkpoint, killed after
the load, replayed (every output checked), and must then serve, live, what
their clients were told. A log damaged, tampered with, of another version
or without the image's cut is refused or its divergence reported, by name,
and the container removed.

The restores go into a second network namespace: the killed process's
connections keep its ports in FIN_WAIT in the first.
"""
import json
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import TOOLS, netns_exec, pid_alive, read_text, wait_for_file, wait_until, zdtm_bin

sys.path.insert(0, str(TOOLS))
import rrlog_edit  # noqa: E402
from servers import real_server  # noqa: E402

CHECK_BIN = Path(__file__).resolve().parent.parent / "target" / "release" / "rrc-check"
KVTOOL = TOOLS / "kvtool.py"

# program -> the files besides `result` holding its digest
PROGRAMS = {
    "recorded": ["counts.json"],   # mutexes, condvars, trylock/timedlock, rwlocks, spin, semaphores, once,
                                   # barriers, clocks, randomness, sleeps: counts per thread
    "fdchurn": ["fdchurn.json"],   # fd churn across threads, outputs (write/send/writev/sendmsg/sendfile)
    "inputs": ["inputs.json"],     # read/readv/recv/recvmsg/recvfrom/accept/epoll/poll/select: byte hashes
    "waits": ["rounds.txt"],       # a thread in every kind of sleep and readiness wait at the checkpoint
    "blocking": [],                # threads blocked in read, accept, epoll_wait, recvfrom at the checkpoint
    "epoll": [],
    "eventfd": [],
    "timerfd": [],
    "pipes": [],
}


def replay(rrc, images: Path, log: Path, netns: str, out: Path, extra=()) -> tuple[int, dict]:
    """rrc restore --replay: (pid, its JSON). Fails the test if it fails."""
    p = rrc.run("restore", "--images", images, "--replay", log, "--netns", netns, "--log", out, "--json", *extra,
                check=False, timeout=180)
    assert p.returncode == 0, f"rrc restore --replay failed:\n{p.stderr}\n{read_text(out)[-3000:]}"
    info = json.loads(p.stdout.strip().splitlines()[-1])
    rrc.pids.append(info["pid"])
    return info["pid"], info


def replay_fails(rrc, images: Path, log: Path, netns: str, out: Path, extra=()) -> str:
    """rrc restore --replay that must fail: its message; no container left."""
    p = rrc.run("restore", "--images", images, "--replay", log, "--netns", netns, "--log", out, "--json",
                "--replay-timeout", "2s", *extra, check=False, timeout=180)
    assert p.returncode != 0, f"rrc restore --replay of a bad log ({log}) succeeded:\n{p.stdout}"
    left = [c for c in json.loads(rrc.run("ps", "--json").stdout)
            if c["running"] and c.get("restored_from") == str(images)]
    assert not left, f"a failed replay left its container running: {left}"
    return p.stderr


class Recorded:
    """A zdtm program recorded across one checkpoint, run to its end by its
    recorded clock, killed; what it wrote is kept apart and deleted."""

    def __init__(self, rrc, tmp: Path, netns: str, prog: str, run_ms=300):
        written = ["result", *PROGRAMS.get(prog, [])]  # after the checkpoint: the replay writes them again
        self.zdir, self.log, self.out = tmp / "zdtm", tmp / "rec.log", tmp / "out.log"
        self.zdir.mkdir()
        self.images = tmp / "img0"
        pid = rrc.exec([zdtm_bin(prog)], netns=netns, log=self.out, extra=["--record", self.log],
                       env={"ZDTM_DIR": self.zdir, "ZDTM_RUN_MS": run_ms})
        wait_for_file(self.zdir / "ready", pid=pid, log=self.out)
        rrc.dump(pid, self.images, leave_running=True)
        wait_for_file(self.zdir / "result", pid=pid, log=self.out, timeout=30)
        time.sleep(0.2)  # idle rounds after the result, and the writer's last drain
        rrc.kill(pid)
        self.recorded = {n: (self.zdir / n).read_bytes() for n in written if (self.zdir / n).exists()}
        for n in self.recorded:
            (self.zdir / n).unlink()


def live_state(info: dict) -> dict:
    r = info["replay"]
    assert r["phase"] == "live" and r["report"] == "", r
    assert r["events_total"] > 0 and r["events_done"] == r["events_total"], r
    return r


@pytest.mark.parametrize("prog", sorted(PROGRAMS))
def test_a_replay_reproduces_the_recorded_run(rrc, tmp_path, netns, other_netns, prog):
    """The replayed program writes the same result and digest as the
    recorded one, and goes live."""
    rec = Recorded(rrc, tmp_path, netns, prog)
    assert rec.recorded.get("result") == b"PASS\n", (rec.recorded, read_text(rec.out)[-2000:])
    for f in PROGRAMS[prog]:
        assert f in rec.recorded, f"{prog} wrote no {f}"
    pid, info = replay(rrc, rec.images, rec.log, other_netns, tmp_path / "replay.log")
    r = live_state(info)
    assert info["replay"]["races"] == "order", info["replay"]  # the default mitigation (RRC §4.7)
    wait_for_file(rec.zdir / "result", pid=pid, log=tmp_path / "replay.log", timeout=10)
    for name, data in rec.recorded.items():
        got = (rec.zdir / name).read_bytes() if (rec.zdir / name).exists() else None
        assert got == data, f"{prog}: {name} after replay differs:\nrecorded {data[:300]!r}\nreplayed {got and got[:300]!r}"
    assert pid_alive(pid), f"{prog} died after going live\n{read_text(tmp_path / 'replay.log')[-2000:]}"
    if prog == "fdchurn":
        assert r["outputs"] > 10 and r["output_bytes"] > 1000, r


def test_a_replay_to_a_later_checkpoint_goes_live_in_its_state(rrc, tmp_path, netns, other_netns):
    """recorded across three checkpoints; replayed from the first up to the
    second's cut (`--replay-to`): every thread stops where the second
    checkpoint found it (exactly the events between the two cuts are
    replayed), then all go live. Replaying to an earlier checkpoint is
    refused."""
    zdir, log, out = tmp_path / "zdtm", tmp_path / "rec.log", tmp_path / "out.log"
    zdir.mkdir()
    pid = rrc.exec([zdtm_bin("recorded")], netns=netns, log=out, extra=["--record", log],
                   env={"ZDTM_DIR": zdir, "ZDTM_RUN_MS": 500})
    wait_for_file(zdir / "ready", pid=pid, log=out)
    images = []
    for i in range(3):
        d = tmp_path / f"img{i}"
        rrc.dump(pid, d, parent=images[-1] if images else None, leave_running=True)
        images.append(d)
        time.sleep(0.1)
    wait_for_file(zdir / "result", pid=pid, log=out, timeout=30)
    time.sleep(0.2)
    rrc.kill(pid)
    _, batches = rrlog_edit.read(log)
    cuts = []
    for b in batches:
        for e in b.events:
            if b.tid == 0 and e.kind == 90:
                n = int.from_bytes(e.data[24:28], "little")
                cuts.append({int.from_bytes(e.data[32 + 16 * i:36 + 16 * i], "little"):
                             int.from_bytes(e.data[40 + 16 * i:48 + 16 * i], "little") for i in range(n)})
    assert len(cuts) == 3
    between = sum(n - cuts[0].get(t, 0) for t, n in cuts[1].items())
    rpid, info = replay(rrc, images[0], log, other_netns, tmp_path / "replay.log", extra=["--replay-to", images[1]])
    r = live_state(info)
    assert r["events_done"] == between and r["events_dropped"] == 0, (r, between)
    assert pid_alive(rpid)
    rrc.kill(rpid)
    err = replay_fails(rrc, images[1], log, other_netns, tmp_path / "back.out", extra=["--replay-to", images[0]])
    assert "is not after the restored image" in err, err


def tamper(log: Path, out: Path, edit):
    header, batches = rrlog_edit.read(log)
    edit(batches)
    rrlog_edit.write(out, header, batches)


def after_cut(batches):
    """{tid: first event after the cut} of the log's only cut."""
    cuts = [e for b in batches if b.tid == 0 for e in b.events if e.kind == 90]
    assert len(cuts) == 1
    d = cuts[0].data
    n = int.from_bytes(d[24:28], "little")
    return {int.from_bytes(d[32 + 16 * i:36 + 16 * i], "little"): int.from_bytes(d[40 + 16 * i:48 + 16 * i], "little")
            for i in range(n)}


def test_a_tampered_log_is_detected_not_replayed(rrc, tmp_path, netns, other_netns):
    """fdchurn's log, its checksums kept valid: an fd number changed, an
    output's CRC32C changed, an output removed (the thread's later events
    renumbered): each is reported as a divergence naming the thread, the
    event and what differs, and the container is removed. A byte flipped
    without fixing the checksum is refused before anything runs."""
    rec = Recorded(rrc, tmp_path, netns, "fdchurn")
    header, batches = rrlog_edit.read(rec.log)
    cut = after_cut(batches)

    def first_after_cut(batches, kind, pred=lambda e: True):
        for b in batches:
            if b.tid and b.tid in cut:
                for i, e in enumerate(b.events):
                    if b.first + i >= cut[b.tid] and e.kind == kind and pred(e):
                        return b, i, b.first + i
        raise AssertionError(f"no event of kind {kind} after the cut")

    def fd_number(batches):
        b, i, _ = first_after_cut(batches, 60, lambda e: e.result >= 0 and e.obj == 1)  # an open
        b.events[i].result += 1

    def output_crc(batches):
        b, i, _ = first_after_cut(batches, 70, lambda e: e.result > 0)
        d = bytearray(b.events[i].data)
        d[16] ^= 0x40
        b.events[i].data = bytes(d)

    def removed(batches):  # an output: the sender's next one is then at another offset
        b, i, n = first_after_cut(batches, 70)
        rrlog_edit.remove_event(batches, b.tid, n)

    cases = {"fd": (fd_number, "the call gave fd"), "output": (output_crc, "CRC32C"),
             "removed": (removed, "replay diverged")}
    for name, (edit, what) in cases.items():
        bad = tmp_path / f"{name}.log"
        tamper(rec.log, bad, edit)
        err = replay_fails(rrc, rec.images, bad, other_netns, tmp_path / f"{name}.out")
        assert "replay diverged" in err and what in err and "thread " in err and "event #" in err, (name, err)
        assert "expected" in err and "container" in err and "removed" in err, (name, err)

    raw = bytearray(rec.log.read_bytes())
    raw[len(raw) // 2] ^= 0x10
    flipped = tmp_path / "flipped.log"
    flipped.write_bytes(bytes(raw))
    err = replay_fails(rrc, rec.images, flipped, other_netns, tmp_path / "flipped.out")
    assert "CRC" in err or "crc" in err, err


def test_a_turn_that_never_comes_is_reported_in_bounded_time(rrc, tmp_path, netns, other_netns):
    """recorded's log with the numbers of four acquisitions swapped
    (checksums valid, every number still once in the log) so that two
    workers wait for each other: worker A's acquisition of the shared mutex
    now comes after worker B's, which B makes only after a queue-lock
    acquisition that now comes after A's next one. Neither turn ever comes;
    within the replay timeout the watchdog reports who waits for what."""
    rec = Recorded(rrc, tmp_path, netns, "recorded")
    header, batches = rrlog_edit.read(rec.log)
    cut = after_cut(batches)
    acq = {}  # tid -> [(event, obj)] of its acquisitions after the cut, in order
    for b in batches:
        if b.tid in cut:
            for i, e in enumerate(b.events):
                if e.kind == 10 and e.result == 0 and b.first + i >= cut[b.tid]:
                    acq.setdefault(b.tid, []).append(e)
    def find():
        """a1 (A, X) ... a2 (A, Y) and b1 (B, Y) ... b2 (B, X), with the
        numbers a1 < b2 on X and b1 < a2 on Y: swapped, each waits for the
        other. a2 is A's next acquisition of another object after a1; B is
        scanned once per a1 with, per position, the highest number of
        each object acquired after it (a search over every pair of
        objects took minutes on some logs)."""
        for b_tid, B in acq.items():
            later = [dict() for _ in range(len(B) + 1)]  # later[i]: obj -> highest seq in B[i:]
            for i in range(len(B) - 1, -1, -1):
                later[i] = dict(later[i + 1])
                later[i][B[i].obj] = max(later[i].get(B[i].obj, -1), B[i].seq)
            for a_tid, A in acq.items():
                if a_tid == b_tid:
                    continue
                for ia, a1 in enumerate(A):
                    a2 = next((e for e in A[ia + 1:] if e.obj != a1.obj), None)
                    if not a2:
                        break
                    for ib, b1 in enumerate(B):
                        if b1.obj == a2.obj and b1.seq < a2.seq and later[ib + 1].get(a1.obj, -1) > a1.seq:
                            b2 = next(e for e in B[ib + 1:] if e.obj == a1.obj and e.seq > a1.seq)
                            return a1, a2, b1, b2
        raise AssertionError("no crossing pair of acquisitions")

    a1, a2, b1, b2 = find()
    a1.seq, b2.seq = b2.seq, a1.seq
    a2.seq, b1.seq = b1.seq, a2.seq
    # where each acquisition of X and Y found the release before it
    # (released_at, log format 4) no longer fits the swapped numbers: made
    # "unknown", which the format allows, so that what is tested is the
    # watchdog, not the plan's check of released_at (rr-replay-plan.c). Every
    # kind that carries released_at: a condition wait reacquires its mutex
    # (the mutex in its data), and missing those made this test fail now
    # and then on the plan's refusal instead of the watchdog
    swapped = (a1.obj, a2.obj)
    for b in batches:
        for e in b.events:
            mutex = struct.unpack_from("<Q", e.data)[0] if e.kind == 12 and len(e.data) >= 8 else e.obj
            if e.kind in (10, 12, 18) and mutex in swapped:
                e.ret = 0
    bad = tmp_path / "turn.log"
    rrlog_edit.write(bad, header, batches)
    t0 = time.monotonic()
    err = replay_fails(rrc, rec.images, bad, other_netns, tmp_path / "turn.out")
    took = time.monotonic() - t0
    assert "replay diverged: no progress" in err and "waits for its turn" in err, err
    assert took < 60, f"the divergence took {took:.0f} s to be reported"


def test_broken_logs_are_refused_before_anything_runs(rrc, tmp_path, netns, other_netns):
    """Of another version, a batch's payload damaged, not a log, or
    recorded across another checkpoint: refused by name before anything
    runs. Cut short inside its last batch (a recorder that died while
    writing): named, and what precedes it replayed."""
    rec = Recorded(rrc, tmp_path, netns, "eventfd", run_ms=150)
    raw = rec.log.read_bytes()
    cases = {
        "version": (raw[:8] + (1).to_bytes(4, "little") + raw[12:], "version"),
        "payload": (raw[:96] + bytes([raw[96] ^ 1]) + raw[97:], "CRC"),  # inside the first batch's payload
        "magic": (b"NOTALOG!" + raw[8:], "not an rrc record log"),
    }
    for name, (data, what) in cases.items():
        bad = tmp_path / f"{name}.log"
        bad.write_bytes(data)
        err = replay_fails(rrc, rec.images, bad, other_netns, tmp_path / f"{name}.out")
        assert what in err, (name, err)
    # cut short inside its last batch (the recorder died writing it): the
    # complete batches before are replayed, and the cut is named
    short = tmp_path / "short.log"
    short.write_bytes(raw[:len(raw) - 7])
    p = rrc.run("restore", "--images", rec.images, "--replay", short, "--netns", other_netns, "--log",
                tmp_path / "short.out", "--json", check=False, timeout=180)
    assert p.returncode == 0 and "ends inside its last batch" in p.stderr and "truncated" in p.stderr, p.stderr
    info = json.loads(p.stdout.strip().splitlines()[-1])
    rrc.pids.append(info["pid"])
    assert info["replay"]["phase"] == "live" and info["replay"]["live_at"] == "end of the log", info["replay"]
    rrc.kill(info["pid"])
    # a log without this image's cut: recorded by another run
    (tmp_path / "b").mkdir()
    other = Recorded(rrc, tmp_path / "b", netns, "eventfd", run_ms=150)
    err = replay_fails(rrc, rec.images, other.log, other_netns, tmp_path / "nocut.out")
    assert "no cut for image" in err, err


# ------------------------------------------------------------------ real servers

def wait_port(netns, port, pid, log, what):
    probe = "import socket,sys\nsocket.create_connection(('127.0.0.1', int(sys.argv[1])), 1).close()"
    wait_until(lambda: subprocess.run(["ip", "netns", "exec", netns, sys.executable, "-c", probe, str(port)],
                                      capture_output=True).returncode == 0, 20, f"{what} to listen",
               diag=lambda: read_text(log)[-2000:] if pid_alive(pid) else f"{what} died:\n{read_text(log)[-2000:]}")


def server(name, tmp: Path):
    """argv, port, the rrc-check load, the check after the replay (None: mtkv's own)."""
    if name == "mtkv":
        return [zdtm_bin("mtkv"), 7000, 4], 7000, None, None
    # memcached's LRU maintainer and crawler read counters the workers write
    # without a lock, jemalloc's background thread in redis decides from
    # atomic counters whether to sleep (data races and lock-free atomics:
    # README, bench/replay.py measures both ways); without them they replay
    argv, port, client = real_server(name, tmp, memcached_opts=["-o", "no_lru_maintainer,no_lru_crawler"],
                                     redis_opts=["--jemalloc-bg-thread", "no"])
    if name == "lighttpd":
        return argv, port, client, [*client, "--duration", "1s"]
    state = ["--state", tmp / "state"]
    return argv, port, [*client, *state], ["verify", *client, *state]


def kv(ns, *a):
    return netns_exec(ns, [sys.executable, KVTOOL, *map(str, a)], timeout=120)


class RecordedServer:
    """A real server recorded under concurrent load (8 connections, every
    reply checked; mtkv: its own phases of SETs and DELs) across one
    checkpoint, killed after the load."""

    def __init__(self, rrc, name, tmp, netns, mtkv_phases=2):
        if name != "mtkv" and not shutil.which(name if name != "redis" else "redis-server"):
            pytest.fail(f"{name} is not installed (scripts/setup.sh installs it)")
        self.name, self.phases = name, mtkv_phases
        argv, self.port, load, self.check = server(name, tmp)
        self.log, out = tmp / "rec.log", tmp / "out.log"
        pid = rrc.exec(argv, netns=netns, log=out, extra=["--record", self.log])
        wait_port(netns, self.port, pid, out, name)
        self.images = tmp / "img0"
        if name == "mtkv":
            kv(netns, "mtkv-load", self.port, 0)
            rrc.dump(pid, self.images, leave_running=True)
            for phase in range(1, mtkv_phases + 1):
                kv(netns, "mtkv-load", self.port, phase)
            self.digest = kv(netns, "mtkv-digest", self.port).stdout.strip()
        else:
            p = subprocess.Popen(["ip", "netns", "exec", netns, str(CHECK_BIN), *map(str, load), "--threads", "8",
                                  "--duration", "2s", "--rate", "4000", "--json"], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
            time.sleep(0.5)
            rrc.dump(pid, self.images, leave_running=True)
            o, e = p.communicate(timeout=60)
            rep = json.loads(o)
            assert rep["ok"] and rep["ops"] > 1000, (rep, e)
        time.sleep(0.3)  # the writer's last drain
        rrc.kill(pid)

    def serves_what_its_clients_were_told(self, ns, rpid, log):
        wait_port(ns, self.port, rpid, log, f"replayed {self.name}")
        if self.name == "mtkv":
            kv(ns, "mtkv-model", self.port, self.phases + 1)
            assert kv(ns, "mtkv-digest", self.port).stdout.strip() == self.digest
        else:
            p = netns_exec(ns, [CHECK_BIN, *map(str, self.check), "--json"], check=False, timeout=120)
            rep = json.loads(p.stdout)
            assert p.returncode == 0 and rep["ok"], rep
            if self.name != "lighttpd":
                assert rep["checked"] > 100, rep


@pytest.mark.parametrize("name", ["redis", "memcached", "lighttpd", "mtkv"])
def test_a_real_server_replays_under_load_and_goes_live(rrc, tmp_path, netns, other_netns, name):
    """Recorded under concurrent load across a checkpoint, killed after
    the load; replayed from the checkpoint: every output checked against
    the log, every thread live together, then the server serves what its
    clients were told."""
    rec = RecordedServer(rrc, name, tmp_path, netns)
    rpid, info = replay(rrc, rec.images, rec.log, other_netns, tmp_path / "replay.log")
    r = live_state(info)
    assert r["outputs"] > 100, r
    rec.serves_what_its_clients_were_told(other_netns, rpid, tmp_path / "replay.log")
