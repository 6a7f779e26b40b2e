"""Recording (issue 13, first part; docs/log-format.md): `rrc exec --record
LOG` logs every recordable event of a multithreaded program, and the log
holds exactly what the program did; unmodified redis, memcached and
lighttpd are recorded under load and checkpoints with a consistent log.

runtime/tests/zdtm/recorded.c counts, per worker thread, each call it made
that the library records (mutex acquisitions, trylock and timedlock
outcomes, condition waits, clocks, randomness); the log must hold exactly
those events for that thread, each mutex's acquisitions numbered 0, 1, 2...
without a gap or a repeat, and one cut per checkpoint taken meanwhile. A
log cut short, damaged or of another version is refused by name.
"""
import collections
import os
import subprocess
import sys

import pytest
import json
import time
from pathlib import Path

from conftest import TOOLS, pid_alive, read_text, wait_for_file, wait_until, zdtm_bin

sys.path.insert(0, str(TOOLS))
from rrlog_edit import crc32c  # noqa: E402
from servers import real_server  # noqa: E402


def events(rrc, log: Path, key: Path | None = None) -> list[dict]:
    p = rrc.run("inspect", "--log", log, "--events", *(["--key-file", key] if key else []))
    return [json.loads(line) for line in p.stdout.splitlines()]


def run_recorded(rrc, tmp_path, netns, dumps=2, key=None):
    zdir = tmp_path / "zdtm"
    zdir.mkdir()
    log, out = tmp_path / "rec.log", tmp_path / "out.log"
    pid = rrc.exec([zdtm_bin("recorded")], netns=netns, log=out, env={"ZDTM_DIR": zdir},
                   extra=["--record", log, *(["--record-key-file", key] if key else [])])
    wait_for_file(zdir / "ready", pid=pid, log=out)
    images = []
    for i in range(dumps):
        time.sleep(0.2)
        d = tmp_path / f"img{i}"
        rrc.dump(pid, d, parent=images[-1] if images else None, leave_running=True)
        images.append(d)
    time.sleep(0.2)
    (zdir / "verify").touch()
    wait_for_file(zdir / "result", pid=pid, log=out)
    assert (zdir / "result").read_text() == "PASS\n", read_text(out)
    wait_until(lambda: not pid_alive(pid), 10, "the recorded program to exit")
    return log, json.loads((zdir / "counts.json").read_text()), images


def check_counts(evs, counts):
    """Each worker's events are exactly the calls it counted."""
    by_tid = collections.defaultdict(collections.Counter)
    for e in evs:
        by_tid[e["tid"]][e["kind"]] += 1

    for c in counts:
        got = by_tid[c["tid"]]
        want_locks = (c["locks_shared"] + c["qlock_locks"] + c["trylock_ok"] + c["trylock_busy"]
                      + c["timed_ok"] + c["timed_out"])
        assert got["mutex_lock"] == want_locks, (c, got)
        assert got["cond_wait"] == c["cond_waits"], (c, got)
        assert got["clock"] == c["clocks"], (c, got)
        assert got["random"] == c["randoms"], (c, got)
        assert got["thread_start"] == 1 and got["thread_exit"] == 1, (c, got)
        assert (got["rwlock_rd"], got["rwlock_wr"], got["spin_lock"]) == (c["rd"], c["wr"], c["spins"]), (c, got)
        assert got["sem_wait"] == c["sem_ok"] + c["sem_busy"], (c, got)
        assert (got["barrier"], got["once"], got["sleep"]) == (c["barriers"], 1, c["sleeps"]), (c, got)
        mine = [e for e in evs if e["tid"] == c["tid"]]
        assert [e["index"] for e in mine] == list(range(len(mine))), "a thread's events are not numbered 0, 1, 2..."
        # failures carry no sequence number, and say why
        fails = [e for e in mine if e["kind"] == "mutex_lock" and e["result"] != 0]
        assert len(fails) == c["trylock_busy"] + c["timed_out"], (c, collections.Counter(e["result"] for e in fails))
        assert {e["result"] for e in fails} <= {-16, -110}, "a failed acquisition is -EBUSY or -ETIMEDOUT"
    return by_tid


def test_the_log_holds_exactly_what_each_thread_did(rrc, tmp_path, netns):
    log, counts, images = run_recorded(rrc, tmp_path, netns)
    summary = json.loads(rrc.run("inspect", "--log", log, "--json").stdout)
    assert summary["ok"] is True
    evs = events(rrc, log)
    by_tid = check_counts(evs, counts)

    # one serial thread per barrier round, one thread ran the once routine
    assert sum(c["serial"] for c in counts) == 3
    assert sum(1 for e in evs if e["kind"] == "barrier" and e["result"] == -1) == 3
    ran = [e["tid"] for e in evs if e["kind"] == "once" and e["result"] == 1]
    assert ran == [c["tid"] for c in counts if c["once_ran"]] and len(ran) == 1, ran
    # the other primitives' acquisitions: numbered 0..n-1 per object
    per_obj = collections.defaultdict(list)
    for e in evs:
        if e["kind"] in ("rwlock_rd", "rwlock_wr", "spin_lock", "sem_wait", "barrier") and e["result"] in (0, -1):
            if e["kind"] == "barrier" or e["result"] == 0:
                per_obj[e["obj"]].append(e["seq"])
    assert len(per_obj) >= 4, per_obj.keys()
    for o, seqs in per_obj.items():
        assert sorted(seqs) == list(range(len(seqs))), f"object {o:#x}: numbers not 0..n-1"

    # Per mutex, the successful acquisitions and the reacquisitions inside
    # condition waits (numbered on their mutex, named in the event's data)
    # are numbered 0..n-1, each number once.
    per_mutex = collections.defaultdict(list)
    for e in evs:
        if e["kind"] == "mutex_lock" and e["result"] == 0:
            per_mutex[e["obj"]].append(e["seq"])
        elif e["kind"] == "cond_wait":
            per_mutex[int.from_bytes(bytes.fromhex(e["data"]), "little")].append(e["seq"])
    for m, seqs in per_mutex.items():
        assert sorted(seqs) == list(range(len(seqs))), f"mutex {m:#x}: numbers {sorted(seqs)[:20]}..."
    shared_n = sum(c["locks_shared"] for c in counts)
    assert max(len(v) for v in per_mutex.values()) >= shared_n, "no mutex with the shared mutex's acquisitions"

    # threads: one creation per worker, paired with its start by number
    creates = sorted(e["seq"] for e in evs if e["kind"] == "thread_create")
    starts = sorted(e["seq"] for e in evs if e["kind"] == "thread_start" and e["obj"] != 0)
    assert creates == starts == list(range(len(counts))), (creates, starts)

    # one cut per dump, naming the image and every live thread
    cuts = summary["cuts"]
    assert len(cuts) == len(images), cuts
    ids = [rrc.inspect(d)["images"][-1]["image_id"] for d in images]
    assert [c["image_id"] for c in cuts] == ids
    totals = {t: sum(k.values()) for t, k in by_tid.items()}
    for c in cuts:
        tids = [t for t, _ in c["threads"]]
        assert all(w["tid"] in tids for w in counts), (c, counts)
        for tid, nxt in c["threads"]:
            assert 0 < nxt <= totals[tid], (tid, nxt, totals[tid])
    first, second = (dict(map(tuple, c["threads"])) for c in cuts)
    assert all(second[t] >= first[t] for t in first if t in second), "a later cut is behind an earlier one"
    # A cut is consistent: for every mutex, the acquisitions before it (in
    # each thread, the events below its next_event) are a prefix of that
    # mutex's order. A cut that counted one event too many or too few for
    # a thread would take an acquisition from after the checkpoint or
    # leave one from before it.
    for c in cuts:
        at = dict(map(tuple, c["threads"]))
        before = collections.defaultdict(list)
        for e in evs:
            if e["tid"] in at and e["index"] < at[e["tid"]]:
                if e["kind"] == "mutex_lock" and e["result"] == 0:
                    before[e["obj"]].append(e["seq"])
                elif e["kind"] == "cond_wait":
                    before[int.from_bytes(bytes.fromhex(e["data"]), "little")].append(e["seq"])
        for m, seqs in before.items():
            assert sorted(seqs) == list(range(len(seqs))), \
                f"cut {c['sequence']}: mutex {m:#x}: the acquisitions before it are not a prefix of its order"


def frames(data: bytes) -> list[bytes]:
    """A sealed log cut into its rrc-wire frames (crates/rrc-wire/src/frame.rs):
    24-byte header (its payload length at 8..12), payload, 32-byte MAC."""
    out, off = [], 0
    while off < len(data):
        n = int.from_bytes(data[off + 8:off + 12], "little")
        out.append(data[off:off + 24 + n + 32])
        off += 24 + n + 32
    return out


def test_a_sealed_log_holds_the_same_events_and_refuses_any_change(rrc, tmp_path, netns):
    """`rrc exec --record LOG --record-key-file KEY`: the log as sealed
    rrc-wire frames (the form in which a protected service's log goes to
    its backup: issue 14 §2), each frame's HMAC-SHA256 computed inside the
    process (runtime/lib/sha256.c, rr-sink.c). Read back with the key it
    holds exactly what each thread counted; read with another key, without
    one, with two frames swapped or one dropped (every frame intact and its
    checksums valid: only the MACs can tell), it is refused by name."""
    key, other = tmp_path / "key", tmp_path / "other.key"
    rrc.run("keygen", key)
    rrc.run("keygen", other)
    log, counts, _ = run_recorded(rrc, tmp_path, netns, dumps=1, key=key)
    data = log.read_bytes()
    assert data[:4] == b"RRCW", data[:8]
    check_counts(events(rrc, log, key), counts)
    summary = json.loads(rrc.run("inspect", "--log", log, "--key-file", key, "--json").stdout)
    assert summary["ok"] and len(summary["cuts"]) == 1, summary

    def refused(data: bytes, name: str, key_args) -> str:
        f = tmp_path / f"{name}.log"
        f.write_bytes(data)
        p = rrc.run("inspect", "--log", f, *key_args, check=False)
        assert p.returncode != 0, f"{name}: accepted"
        return p.stderr

    err = refused(data, "other-key", ["--key-file", other])
    assert "MAC of LogHeader frame number 0 does not match" in err, err
    err = refused(data, "no-key", [])
    assert "a sealed log" in err and "--key-file" in err, err
    fr = frames(data)
    assert b"".join(fr) == data and len(fr) > 4, len(fr)
    swapped = b"".join(fr[:2] + [fr[3], fr[2]] + fr[4:])
    err = refused(swapped, "swapped", ["--key-file", key])
    assert "MAC of LogBatch frame number 2 does not match" in err, err
    dropped = b"".join(fr[:2] + fr[3:])
    err = refused(dropped, "dropped", ["--key-file", key])
    assert "MAC of LogBatch frame number 2 does not match" in err, err
    # a bare log (here: the header the first frame carries) with a key
    err = refused(fr[0][24:24 + 48], "bare", ["--key-file", key])
    assert "not a sealed log" in err, err


def test_broken_logs_are_refused_by_name(rrc, tmp_path, netns):
    log, _, _ = run_recorded(rrc, tmp_path, netns, dumps=0)
    data = log.read_bytes()
    cases = {
        "truncated": data[: len(data) - 5],
        "corrupt": data[:200] + bytes([data[200] ^ 0x20]) + data[201:],
        "version": data[:8] + (7).to_bytes(4, "little") + data[12:],
        "not a log": b"this is not a log at all, just some text padding it out",
    }
    want = {"truncated": "truncated", "corrupt": "CRC mismatch", "version": "format version 7",
            "not a log": "not an rrc record log"}
    for name, bad in cases.items():
        f = tmp_path / f"{name.replace(' ', '-')}.log"
        f.write_bytes(bad)
        p = rrc.run("inspect", "--log", f, check=False)
        assert p.returncode != 0 and want[name] in p.stderr, f"{name}: {p.stderr}"
        p = rrc.run("inspect", "--log", f, "--events", check=False)
        assert p.returncode != 0 and p.stdout == "", f"{name}: events printed from a broken log"


def test_record_refuses_a_log_it_cannot_write(rrc, tmp_path, netns):
    msg = rrc.fails("exec", "--record", tmp_path / "no" / "such" / "dir" / "x.log", "--", zdtm_bin("recorded"))
    assert "creating the record log" in msg, msg


def fnv(h: int, data: bytes) -> int:
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def payload(e: dict) -> bytes:
    """The bytes a READ event says the call returned (after the recv head
    of recvfrom/recvmsg: rrc_log_recv, 16 bytes)."""
    d = bytes.fromhex(e["data"])
    if e["flags"] & 4:
        d = d[16:]
    return d[: max(e["result"], 0)]


def test_every_input_call_and_byte_is_in_the_log(rrc, tmp_path, netns):
    """runtime/tests/zdtm/inputs.c: read, readv, recv, recvmsg, recvfrom,
    accept4, epoll_wait, poll and select in their own threads, under load
    from a producer, with two dumps meanwhile. Per thread, the log holds
    exactly the calls the program counted, and the bytes of its READ events
    hash to what the program hashed of everything it received."""
    zdir = tmp_path / "zdtm"
    zdir.mkdir()
    log, out = tmp_path / "inputs.log", tmp_path / "out.log"
    pid = rrc.exec([zdtm_bin("inputs")], netns=netns, log=out, env={"ZDTM_DIR": zdir}, extra=["--record", log])
    wait_for_file(zdir / "ready", pid=pid, log=out)
    for i in range(2):
        time.sleep(0.3)
        rrc.dump(pid, tmp_path / f"img{i}", parent=tmp_path / "img0" if i else None, leave_running=True)
    time.sleep(0.3)
    (zdir / "verify").touch()
    wait_for_file(zdir / "result", pid=pid, log=out)
    assert (zdir / "result").read_text() == "PASS\n", read_text(out)
    wait_until(lambda: not pid_alive(pid), 10, "the program to exit")
    counts = {c["name"]: c for c in json.loads((zdir / "inputs.json").read_text())}
    p = rrc.run("inspect", "--log", log, "--events", "--data")
    evs = [json.loads(line) for line in p.stdout.splitlines()]
    by_tid = collections.defaultdict(list)
    for e in evs:
        by_tid[e["tid"]].append(e)

    def kinds(name):
        return collections.Counter(e["kind"] for e in by_tid[counts[name]["tid"]])

    calls = {n: c["calls"] for n, c in counts.items()}
    assert kinds("read")["read"] == calls["read"][0] + calls["read"][1], (calls["read"], kinds("read"))
    assert kinds("recv")["read"] == calls["recv"][0] + calls["recv"][1], (calls["recv"], kinds("recv"))
    assert kinds("udp")["read"] == calls["udp"][0], (calls["udp"], kinds("udp"))
    k = kinds("accept")
    assert k["accept"] == calls["accept"][0] and k["read"] == calls["accept"][1], (calls["accept"], k)
    k = kinds("wait")
    assert (k["epoll_wait"], k["poll"], k["select"], k["read"]) == tuple(calls["wait"]), (calls["wait"], k)
    assert all(calls[n][0] > 0 for n in calls), calls

    for name, c in counts.items():
        h, total = 0xCBF29CE484222325, 0
        for e in by_tid[c["tid"]]:
            if e["kind"] == "read":
                d = payload(e)
                assert len(d) == max(e["result"], 0), e
                h, total = fnv(h, d), total + len(d)
        assert total == c["bytes"], f"{name}: the log holds {total} bytes, the program received {c['bytes']}"
        assert f"{h:016x}" == c["hash"], f"{name}: the bytes in the log are not those the program received"

    # recvfrom's events carry the sender's address; accept's the peer's
    udp = [e for e in by_tid[counts["udp"]["tid"]] if e["kind"] == "read" and e["result"] > 0]
    assert all(int.from_bytes(bytes.fromhex(e["data"])[:4], "little") == 16 for e in udp), "recvfrom: no address"
    acc = [e for e in by_tid[counts["accept"]["tid"]] if e["kind"] == "accept" and e["result"] >= 0]
    # (the peer's address also when the call did not ask for it: a
    # failover's replay gives that peer's connection to the call)
    assert acc and all(e["data_len"] == 16 and bytes.fromhex(e["data"])[:2] == b"\x02\x00" for e in acc), \
        ("accept4(fd, NULL, NULL): the peer's address is recorded all the same", acc[:3])
    # epoll_wait: its events, 12 bytes each, naming the eventfd's cookie
    ew = [e for e in by_tid[counts["wait"]["tid"]] if e["kind"] == "epoll_wait" and e["result"] == 1]
    assert ew and all(bytes.fromhex(e["data"])[4:12] == (7).to_bytes(8, "little") for e in ew), ew[:3]




def run_to_end(rrc, tmp_path, netns, prog, dumps=2, pause=0.25):
    zdir = tmp_path / "zdtm"
    zdir.mkdir()
    log, out = tmp_path / f"{prog}.log", tmp_path / "out.log"
    pid = rrc.exec([zdtm_bin(prog)], netns=netns, log=out, env={"ZDTM_DIR": zdir}, extra=["--record", log])
    wait_for_file(zdir / "ready", pid=pid, log=out)
    for i in range(dumps):
        time.sleep(pause)
        rrc.dump(pid, tmp_path / f"img{i}", parent=tmp_path / f"img{i - 1}" if i else None, leave_running=True)
    time.sleep(pause)
    (zdir / "verify").touch()
    wait_for_file(zdir / "result", pid=pid, log=out)
    assert (zdir / "result").read_text() == "PASS\n", read_text(out)
    wait_until(lambda: not pid_alive(pid), 10, "the program to exit")
    p = rrc.run("inspect", "--log", log, "--events")
    return zdir, [json.loads(line) for line in p.stdout.splitlines()]


def test_the_fd_tables_order_gives_every_number_and_outputs_are_named(rrc, tmp_path, netns):
    """runtime/tests/zdtm/fdchurn.c: four threads open, dup, dup2 and close
    fds as fast as they can while checkpoints are taken (whose control
    connections and image fds the library takes too). Replaying the FD and
    ACCEPT events in the order of their numbers from the fds open at the
    start (0, 1, 2), the lowest free number is, every time, the one each
    call got: a replay that keeps that order gets every fd right. And the
    sender's outputs are named by offset, length and CRC32C, contiguous."""
    zdir, evs = run_to_end(rrc, tmp_path, netns, "fdchurn", dumps=3, pause=0.15)
    info = json.loads((zdir / "fdchurn.json").read_text())
    assert min(info["rounds"]) > 50, info

    ordered = sorted((e for e in evs if e["kind"] in ("fd", "accept")), key=lambda e: e["seq"])
    assert [e["seq"] for e in ordered] == list(range(len(ordered))), "the fd table's numbers have a gap or a repeat"
    ops = {1: "open", 2: "close", 3: "dup", 4: "socket", 5: "pipe", 10: "dupfd"}
    open_fds = set(info["initial"])

    def lowest():
        n = 0
        while n in open_fds:
            n += 1
        return n

    for e in ordered:
        a, b = (int.from_bytes(bytes.fromhex(e["data"])[i:i + 4], "little", signed=True) for i in (0, 4))
        op = ops.get(e["obj"], e["obj"])
        where = f"event seq {e['seq']} ({op} in thread {e['tid']}, result {e['result']})"
        if e["result"] < 0:
            continue
        if op == "close":
            assert a in open_fds, f"{where}: closes fd {a}, not open then"
            open_fds.discard(a)
        elif op == "dup" and b >= 0:  # dup2 onto b
            assert e["result"] == b, where
            open_fds.add(b)
        elif op == "dupfd":  # the lowest free at b or above
            want = min(set(range(b, b + len(open_fds) + 2)) - open_fds)
            assert e["result"] == want, f"{where}: got {e['result']}, the lowest free from {b} was {want}"
            open_fds.add(want)
        elif op in ("pipe", "socket") and b >= 0:  # pipe, socketpair: two fds
            first = lowest()
            assert a == first, f"{where}: got {a}, the lowest free was {first}"
            open_fds.add(a)
            second = lowest()
            assert b == second, f"{where}: got {b}, the lowest free was {second}"
            open_fds.add(b)
        else:
            want = lowest()
            assert e["result"] == want, f"{where}: got fd {e['result']}, the lowest free in the log's order was {want}"
            open_fds.add(e["result"])

    outs = [e for e in evs if e["kind"] == "output" and e["tid"] == info["sender_tid"]]
    assert len(outs) == info["messages"], (len(outs), info)
    offset = 0
    for r, e in enumerate(outs, start=1):
        o = bytes.fromhex(e["data"])
        off, length, crc = int.from_bytes(o[0:8], "little"), int.from_bytes(o[8:16], "little"), int.from_bytes(o[16:20], "little")
        n = 1 + (r * 7919) % 3000
        m = bytes((ord("a") + (r + i) % 26) for i in range(n))
        assert e["obj"] == info["fd"] and e["result"] == n == length, (r, e)
        assert off == offset, f"output {r}: offset {off}, the bytes before it were {offset}"
        assert crc == crc32c(m), f"output {r}: the CRC32C does not name the bytes sent"
        offset += length
    assert offset == info["bytes"]
    # the file read back before each sendfile (pread, then readv): READs of
    # a regular file, named by the CRC32C of the bytes (replay reads again)
    file_reads = [e for e in evs if e["tid"] == info["sender_tid"] and e["kind"] == "read"]
    assert file_reads and all(e["flags"] & 8 and e["data_len"] == 4 for e in file_reads), file_reads[:2]
    assert len(file_reads) % 2 == 0, "a pread and a readv per message sent by sendfile"
    for k, e in enumerate(file_reads):
        r = 5 * (k // 2 + 1) - 1
        n = 1 + (r * 7919) % 3000
        m = bytes((ord("a") + (r + i) % 26) for i in range(n))
        assert e["result"] == n and int.from_bytes(bytes.fromhex(e["data"]), "little") == crc32c(m), (r, e)


def exec_recorded_json(rrc, tmp_path, netns, prog):
    """`rrc exec --record --json` of a zdtm program: its report and ZDTM_DIR."""
    zdir = tmp_path / f"zdtm-{prog}"
    zdir.mkdir()
    p = rrc.run("exec", "--netns", netns, "--record", tmp_path / f"{prog}.log", "--json", "--", zdtm_bin(prog),
                env={**os.environ, "ZDTM_DIR": str(zdir)})
    info = json.loads(p.stdout.strip().splitlines()[-1])
    rrc.pids.append(info["pid"])
    return info, zdir, p.stderr


def end(info, zdir):
    (zdir / "verify").touch()
    wait_for_file(zdir / "result", pid=info["pid"])


def test_record_names_what_it_cannot_see_in_the_binary(rrc, tmp_path, netns):
    """runtime/tests/zdtm/unrecordable.c has a Go binary's build-info
    section, a signal handler, an inline rdtsc and a raw syscall: `rrc exec
    --record` names each before the program runs (stderr and --json), and
    says nothing of them for a program without them."""
    info, zdir, stderr = exec_recorded_json(rrc, tmp_path, netns, "unrecordable")
    warns = info["record"]["warnings"]
    text = "\n".join(warns)
    assert "Go binary" in text and "signal handlers (signal)" in text, warns
    assert "1 likely rdtsc/rdtscp instruction" in text, warns
    assert "1 likely raw `syscall` instruction" in text, warns
    assert all(f"warning: {w}" in stderr for w in warns), stderr
    end(info, zdir)
    # the same checks find nothing of these in a program without them
    info, zdir, _ = exec_recorded_json(rrc, tmp_path, netns, "fdchurn")
    warns = info["record"]["warnings"]
    assert not any(w for w in warns if "Go" in w or "signal" in w or "rdtsc" in w or "raw `syscall`" in w), warns
    end(info, zdir)


CHECK_BIN = Path(__file__).resolve().parent.parent / "target" / "release" / "rrc-check"


@pytest.mark.parametrize("name", ["redis", "memcached", "lighttpd"])
def test_a_real_server_recorded_under_load_with_checkpoints(rrc, tmp_path, netns, name):
    """An unmodified server recorded while rrc-check loads it over 8
    connections (4000 ops/s, every reply checked) and three checkpoints are
    taken: the
    clients see no error, the log verifies, every cut is a consistent
    prefix of every object's order, the fd table's order gives every fd
    number from the start of the process, and the outputs of each
    connection are contiguous."""
    argv, port, client = real_server(name, tmp_path)
    log = tmp_path / "rec.log"
    pid = rrc.exec(argv, netns=netns, log=tmp_path / "out.log", extra=["--record", log])
    probe = "import socket,sys\nsocket.create_connection(('127.0.0.1', int(sys.argv[1])), 1).close()"
    wait_until(lambda: subprocess.run(["ip", "netns", "exec", netns, sys.executable, "-c", probe, str(port)],
                                      capture_output=True).returncode == 0, 20, f"{name} to listen")
    load = subprocess.Popen(["ip", "netns", "exec", netns, str(CHECK_BIN), *client, "--threads", "8",
                             "--duration", "3s", "--rate", "4000", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    images = []
    for i in range(3):
        time.sleep(0.6)
        d = tmp_path / f"img{i}"
        rrc.dump(pid, d, parent=images[-1] if images else None, leave_running=True)
        images.append(d)
    out, err = load.communicate(timeout=60)
    rep = json.loads(out)
    assert rep["ok"] and rep["ops"] > 1000, (rep, err)
    time.sleep(0.3)  # the writer's last drain (it runs every 5 ms)
    rrc.run("kill", "--pid", pid)

    summary = json.loads(rrc.run("inspect", "--log", log, "--json").stdout)
    assert summary["ok"] and len(summary["cuts"]) == 3, {k: summary[k] for k in ("events", "by_kind", "cuts")}
    evs = [json.loads(line) for line in rrc.run("inspect", "--log", log, "--events").stdout.splitlines()]
    kinds = collections.Counter(e["kind"] for e in evs)
    assert kinds["read"] > 1000 and kinds["output"] > 1000 and kinds["epoll_wait"] > 100, kinds

    for c in summary["cuts"]:
        at = dict(map(tuple, c["threads"]))
        before = collections.defaultdict(list)
        for e in evs:
            if not (e["tid"] in at and e["index"] < at[e["tid"]]):
                continue
            if e["kind"] in ("mutex_lock", "rwlock_rd", "rwlock_wr", "spin_lock", "sem_wait") and e["result"] == 0:
                before[e["obj"]].append(e["seq"])
            elif e["kind"] == "cond_wait":  # the mutex's reacquisition, numbered on the mutex
                before[int.from_bytes(bytes.fromhex(e["data"]), "little")].append(e["seq"])
        for o, seqs in before.items():
            assert sorted(seqs) == list(range(len(seqs))), f"cut {c['sequence']}: object {o:#x} not a prefix"

    open_fds = {0, 1, 2}
    ordered = sorted((e for e in evs if e["kind"] in ("fd", "accept")), key=lambda e: e["seq"])
    assert [e["seq"] for e in ordered] == list(range(len(ordered)))
    for e in ordered:
        if e["result"] < 0:
            continue
        a, b = (int.from_bytes(bytes.fromhex(e["data"])[i:i + 4], "little", signed=True) for i in (0, 4)) \
            if e["kind"] == "fd" else (e["result"], -1)
        op = e["obj"] if e["kind"] == "fd" else "accept"
        lowest = min(set(range(len(open_fds) + 2)) - open_fds)
        if op == 2:  # close
            open_fds.discard(a)
        elif op == 3 and b >= 0:  # dup2/dup3 onto b
            open_fds.add(b)
        elif op == 10:  # fcntl(F_DUPFD): the lowest free >= b
            assert e["result"] == min(set(range(b, b + len(open_fds) + 2)) - open_fds), (e, sorted(open_fds))
            open_fds.add(e["result"])
        elif op in (4, 5) and b >= 0:  # socketpair, pipe
            assert a == lowest, (e, sorted(open_fds))
            open_fds.add(a)
            assert b == min(set(range(len(open_fds) + 2)) - open_fds), (e, sorted(open_fds))
            open_fds.add(b)
        else:
            assert e["result"] == lowest, f"{e}: the lowest free in the log's order was {lowest}"
            open_fds.add(e["result"])

    sent = collections.defaultdict(int)
    for e in evs:
        if e["kind"] == "output":
            o = bytes.fromhex(e["data"])
            off, length = int.from_bytes(o[0:8], "little"), int.from_bytes(o[8:16], "little")
            if e["result"] >= 0:
                assert off == sent[e["obj"]], (e, sent[e["obj"]])
                sent[e["obj"]] += length

    # Each output names its connection (issue 14: the backup's gate knows
    # the stream by its addresses, the incarnation of a 4-tuple by the
    # fd-table number of the accept that made the fd), and on each
    # connection the outputs are contiguous from its first byte.
    accepts = {e["seq"]: e for e in evs if e["kind"] == "accept" and e["result"] >= 0}
    per_conn = collections.defaultdict(int)
    outputs = [e for e in evs if e["kind"] == "output" and e["result"] > 0]
    for e in outputs:
        o = e["output"]
        assert o["conn"] is not None, f"an output to a client names no connection: {e}"
        assert o["conn"]["local"].endswith(f":{port}") and o["conn"]["peer"].startswith("127.0.0.1:"), e
        made = accepts.get(o["made"])
        assert made is not None and made["result"] == e["obj"], f"{e}: made by {o['made']}, not an accept of fd {e['obj']}"
        key = (o["conn"]["local"], o["conn"]["peer"], o["made"])
        assert o["offset"] == per_conn[key], (e, per_conn[key])
        per_conn[key] += o["length"]
    assert len(per_conn) >= 8, "rrc-check's 8 connections"

    # Release marks (RRC §4.5): every output is covered by one, and what
    # happened before it is in the stream before that mark. Checked here
    # for what the log shows across threads: the accept that made the
    # output's fd (memcached accepts in one thread and answers in others).
    marks = [e for e in evs if e["kind"] == "mark"]
    assert marks and [m["mark"]["number"] for m in marks] == list(range(1, len(marks) + 1))
    for e in outputs:
        m = next((m for m in marks if dict(map(tuple, m["mark"]["threads"])).get(e["tid"], 0) > e["index"]), None)
        assert m is not None, f"no mark covers {e}"
        assert m["batch"] > e["batch"], (e, m)
        acc = accepts[e["output"]["made"]]
        assert acc["batch"] < m["batch"], f"{e} is marked by mark {m['mark']['number']} before the accept of its fd arrives"
