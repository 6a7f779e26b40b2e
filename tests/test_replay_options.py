"""Replay options (issue 13 §4-5): where a replay goes live, and the
data-race mitigation.

- `--replay-until FD:BYTES` (RRC §4.4: replay up to the last released
  output): every thread stops at the least consistent cut that holds that
  output and the events it depends on (lock orders, the releases before
  them, the fd table, epoll, creations), then all go live. Checked on mtkv
  (the project's multithreaded server) fed SETs in order on one
  connection: going live right after the reply that acknowledged the k-th
  SET, the server holds exactly the first k keys, not one more.
- The plan's decisions, apart from any process: runtime/build/rp_plan_check.
- `--replay-races order|pace` (RRC §4.7): system calls return in the order
  they returned in the recording, and (pace) no sooner after the previous
  return than they did. Checked on a zdtm program (the same digest; every
  call of the replay ordered, counted by the library) and on a real server
  under load (every output checked, then live and verified).
"""
import subprocess
import sys
import time

import pytest

from conftest import RUNTIME_BUILD, need, pid_alive, read_text, wait_for_file, zdtm_bin
from test_replay import KVTOOL, PROGRAMS, Recorded, RecordedServer, after_cut, kv, live_state, replay, \
    replay_fails, wait_port

sys.path.insert(0, str(KVTOOL.parent))
import rrlog_edit  # noqa: E402

OUTPUT, CALLS = 70, range(40, 71)


def test_the_replay_plan_passes_its_unit_checks():
    """runtime/build/rp_plan_check: the decisions of lib/rr-replay-plan.c
    (numbered events, the consistent end of a crash's log, the cut for an
    output, how far returns can be ordered) on logs built in memory."""
    p = subprocess.run([str(need(RUNTIME_BUILD / "rp_plan_check"))], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "all checks passed" in p.stdout, f"{p.stdout}\n{p.stderr}"


def test_a_replay_goes_live_right_after_a_given_output(rrc, tmp_path, netns, other_netns):
    n, port = 3000, 7000
    log, out = tmp_path / "rec.log", tmp_path / "out.log"
    pid = rrc.exec([zdtm_bin("mtkv"), port, 4], netns=netns, log=out, extra=["--record", log])
    wait_port(netns, port, pid, out, "mtkv")
    images = tmp_path / "img0"
    rrc.dump(pid, images, leave_running=True)
    kv(netns, "mtkv-seq", port, n)
    time.sleep(0.3)  # the writer's last drain
    rrc.kill(pid)

    # the replies on the one connection: each "OK\n" acknowledges one SET,
    # in order; the output closest to the middle
    _, batches = rrlog_edit.read(log)
    outs = [(e.obj, int.from_bytes(e.data[0:8], "little") + int.from_bytes(e.data[8:16], "little"))
            for b in batches for e in b.events if e.kind == OUTPUT and e.result > 0]
    fds = {fd for fd, _ in outs}
    assert len(fds) == 1 and len(outs) >= 3, outs
    fd, end = min(outs, key=lambda o: abs(o[1] - 3 * n // 2))
    assert end % 3 == 0 and 0 < end < 3 * n, (fd, end)
    k = end // 3

    rpid, info = replay(rrc, images, log, other_netns, tmp_path / "replay.log",
                        extra=["--replay-until", f"{fd}:{end}"])
    r = live_state(info)
    assert r["live_at"] == {"output": {"fd": fd, "bytes": end}}, r
    wait_port(other_netns, port, rpid, tmp_path / "replay.log", "mtkv, live after the output")
    kv(other_netns, "mtkv-seq-prefix", port, k, n)
    assert pid_alive(rpid)
    rrc.kill(rpid)
    # the whole log replays more: the cut held only what that output needed
    rpid, full = replay(rrc, images, log, other_netns, tmp_path / "full.log")
    assert live_state(full)["events_done"] > r["events_done"], (full["replay"], r)
    wait_port(other_netns, port, rpid, tmp_path / "full.log", "mtkv, live at the end")
    kv(other_netns, "mtkv-seq-prefix", port, n, n)
    rrc.kill(rpid)
    # an output position the log does not hold, named
    err = replay_fails(rrc, images, log, other_netns, tmp_path / "none.out", extra=["--replay-until", f"{fd}:{end + 1}"])
    assert "no output after the image's cut ends at that byte" in err, err


# the acquisitions that take a place in the order of returns (log format
# 6: `ord` in the ret_ns field): mutex, cond_wait, rwlock rd/wr, spin
ORDERED_SYNC = {10, 12, 15, 16, 18}


def ordered_after_cut(log) -> tuple[int, int]:
    """(calls, acquisitions) after the cut with a place in the order of
    returns: every call, every acquisition (its `ord`)."""
    _, batches = rrlog_edit.read(log)
    cut = after_cut(batches)
    calls = acquisitions = 0
    for b in batches:
        if b.tid == 0:
            continue
        for i, e in enumerate(b.events):
            if b.first + i < cut.get(b.tid, 0):
                continue
            if e.kind in CALLS:
                calls += 1
            elif e.kind in ORDERED_SYNC:
                assert e.ret_ns > 0, f"an acquisition without its place in the order: kind {e.kind}"
                acquisitions += 1
    return calls, acquisitions


@pytest.mark.parametrize("races", ["order", "pace"])
def test_a_replay_orders_the_returns_of_system_calls(rrc, tmp_path, netns, other_netns, races):
    rec = Recorded(rrc, tmp_path, netns, "recorded")
    assert rec.recorded.get("result") == b"PASS\n", read_text(rec.out)[-2000:]
    pid, info = replay(rrc, rec.images, rec.log, other_netns, tmp_path / "replay.log",
                       extra=["--replay-races", races, "--replay-pace-max", "2ms"])
    r = live_state(info)
    assert r["races"] == races, r
    # every call after the cut returned, every acquisition completed, in
    # its recorded place (but those of a tail the kill left inconsistent,
    # dropped)
    calls, acquisitions = ordered_after_cut(rec.log)
    ordered = calls + acquisitions
    assert calls > 20 and acquisitions > 20, (calls, acquisitions)
    assert ordered - r["events_dropped"] <= r["returns_ordered"] <= ordered, (calls, acquisitions, r)
    if r["events_dropped"] == 0:
        assert r["returns_ordered"] == ordered, (calls, acquisitions, r)
    if races == "pace":
        assert r["paced_ns"] > 0, r
    else:
        assert r["paced_ns"] == 0, r
    wait_for_file(rec.zdir / "result", pid=pid, log=tmp_path / "replay.log", timeout=10)
    for name, data in rec.recorded.items():
        assert (rec.zdir / name).read_bytes() == data, f"{name} after the replay differs"
    rrc.kill(pid)
    # off: nothing ordered beyond what the recording numbered
    for f in ["result", *PROGRAMS["recorded"]]:
        (rec.zdir / f).unlink()
    pid, info = replay(rrc, rec.images, rec.log, other_netns, tmp_path / "off.log", extra=["--replay-races", "off"])
    assert live_state(info)["returns_ordered"] == 0 and info["replay"]["races"] == "off", info["replay"]


@pytest.mark.parametrize("name", ["memcached", "mtkv"])
def test_a_real_server_replays_with_paced_returns(rrc, tmp_path, netns, other_netns, name):
    """memcached -t 4 and mtkv under concurrent load across a checkpoint,
    replayed with `--replay-races pace`: every output checked, live, then
    what the clients were told is served."""
    rec = RecordedServer(rrc, name, tmp_path, netns, mtkv_phases=1)
    rpid, info = replay(rrc, rec.images, rec.log, other_netns, tmp_path / "replay.log",
                        extra=["--replay-races", "pace"])
    r = live_state(info)
    assert r["outputs"] > 100 and r["returns_ordered"] > 100, r
    rec.serves_what_its_clients_were_told(other_netns, rpid, tmp_path / "replay.log")
