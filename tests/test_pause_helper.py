"""The copy snapshot's pause helper (runtime/lib/pause-helper.c).

A copy snapshot's pause runs on two CPUs: a helper process with a memory of
its own and the application's fd table reads the memory map, the fd table
and the TCP table while the control thread scans. It is started in the
first copy snapshot's pause and lives as long as the application. These
tests check what it must be for the application and for rrc: a quiet child
(exit signal 0, every signal blocked, in the application's cgroup), not a
reason to refuse a dump, replaced when killed, and a source of records as
good as the control thread's (a listen() after its start included); and
that RRC_PAUSE_HELPER=0 does without it.
"""
import os
import signal
import socket
from pathlib import Path

from conftest import netns_exec, pid_alive, wait_until
from test_servers import server_bin, wait_serving

HELPER_COMM = "rrc-pause"


def children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            pass
    return out


def stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat after the comm: fields 3 (state) onwards."""
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2:].split()


def helper_of(pid: int) -> int | None:
    """The application's pause helper, checked for what it must be."""
    kids = children(pid)
    helpers = [c for c in kids if Path(f"/proc/{c}/comm").read_text().strip() == HELPER_COMM]
    assert helpers == kids, f"pid {pid} has children other than its pause helper: {kids}"
    if not helpers:
        return None
    assert len(helpers) == 1, f"more than one pause helper: {helpers}"
    h = helpers[0]
    f = stat_fields(h)
    assert int(f[38 - 3]) == 0, f"pause helper {h}: exit signal {f[38 - 3]}, not 0 (the application would get SIGCHLD)"
    status = Path(f"/proc/{h}/status").read_text()
    blocked = next(line.split()[1] for line in status.splitlines() if line.startswith("SigBlk:"))
    assert int(blocked, 16) & ((1 << 63) - 1) == (1 << 63) - 1 & ~((1 << 8) | (1 << 18)), \
        f"pause helper {h}: not every signal blocked (SigBlk {blocked})"
    assert Path(f"/proc/{h}/cgroup").read_text() == Path(f"/proc/{pid}/cgroup").read_text(), \
        "the pause helper is not in the application's cgroup"
    return h


def listener_backlog(rrc, images: Path, port: int) -> int:
    records = rrc.inspect(images)["images"][-1]["fd_records"]
    for r in records:
        if r["kind"] != "inet_listen":
            continue
        local = r["detail"]["socket"]["local"]
        if local["family"] == socket.AF_INET and int.from_bytes(bytes(local["addr"][2:4]), "big") == port:
            return r["detail"]["socket"]["backlog"]
    raise AssertionError(f"no listener on port {port} in {images}: {[r['kind'] for r in records]}")


def start_redis(rrc, tmp_path, netns, port, *extra, env=None):
    log = tmp_path / "redis.log"
    pid = rrc.exec([server_bin("redis-server"), "--save", "", "--appendonly", "no", "--port", port, *extra],
                   netns=netns, log=log, env=env)
    cli = ["redis-cli", "-p", str(port)]
    wait_serving(netns, [*cli, "ping"], pid, log, "redis-server")
    return pid, cli, log


def restore_and_check(rrc, netns, images: Path, cli, log: Path, keys: int) -> int:
    """Restores the chain; every key k<n> must read value-<n>."""
    rpid = rrc.restore(images, netns=netns)
    wait_serving(netns, [*cli, "ping"], rpid, log, "restored redis-server")
    for n in range(keys):
        got = netns_exec(netns, [*cli, "get", f"k{n}"]).stdout.strip()
        assert got == f"value-{n}", f"k{n} after restore: {got!r}"
    return rpid


def test_pause_helper_lifecycle(rrc, tmp_path, netns):
    """redis-server: no helper before the first copy snapshot; one after it,
    a quiet child; the listeners redis opens after its start (CONFIG SET
    port) are in the next image with their backlog; a fork snapshot is not
    refused for it; killed, it is replaced by the next copy snapshot; the
    chain restores with every key. (redis reopens its listeners at the same
    fd numbers: test_fd_numbers_reused_between_dumps has a listener on a
    number that had none when the helper started.)"""
    port, port2 = 6391, 6392
    pid, cli, log = start_redis(rrc, tmp_path, netns, port, "--tcp-backlog", 77)
    images = []

    def dump(snapshot, leave_running=True):
        d = tmp_path / f"img{len(images)}"
        rrc.dump(pid, d, parent=images[-1] if images else None, leave_running=leave_running, snapshot=snapshot)
        images.append(d)
        return d

    def put(n):
        netns_exec(netns, [*cli, "set", f"k{n}", f"value-{n}"])

    put(0)
    dump("fork")
    assert helper_of(pid) is None, "a fork snapshot started a pause helper"
    put(1)
    dump("copy")
    first = helper_of(pid)
    assert first, "no pause helper after a copy snapshot"
    assert listener_backlog(rrc, images[-1], port) == 77

    # listeners made after the helper's start: its own copy of the
    # library's memory predates them
    netns_exec(netns, [*cli, "config", "set", "port", str(port2)])
    cli = ["redis-cli", "-p", str(port2)]
    wait_serving(netns, [*cli, "ping"], pid, log, "redis-server on its new port")
    put(2)
    d = dump("copy")
    assert helper_of(pid) == first, "the pause helper changed without a reason"
    assert listener_backlog(rrc, d, port2) == 77, "the listen() backlog made after the helper's start"

    put(3)
    dump("fork")  # the children refusal skips the helper
    os.kill(first, signal.SIGKILL)
    wait_until(lambda: stat_fields(first)[0] == "Z", 10, "the killed pause helper to exit")
    assert pid_alive(pid), "redis-server died with its pause helper"
    put(4)
    dump("copy")  # reaps it, starts another
    assert first not in children(pid), "the killed pause helper was not reaped by the next dump"
    second = helper_of(pid)
    assert second and second != first, f"no new pause helper after the first was killed ({first}, {second})"
    put(5)
    dump("copy", leave_running=False)
    wait_until(lambda: not pid_alive(pid), 15, "redis-server to end after the final dump")
    wait_until(lambda: not pid_alive(second), 10, "the pause helper to end with redis-server")

    rpid = restore_and_check(rrc, netns, images[-1], cli, log, 6)
    assert helper_of(rpid) is None, "a restored process has a pause helper before its first copy snapshot"


def test_copy_snapshot_without_pause_helper(rrc, tmp_path, netns):
    """RRC_PAUSE_HELPER=0: copy snapshots start no helper, the control
    thread does its work, and the chain restores every key."""
    pid, cli, log = start_redis(rrc, tmp_path, netns, 6393, env={"RRC_PAUSE_HELPER": "0"})
    images = []
    for n in range(3):
        netns_exec(netns, [*cli, "set", f"k{n}", f"value-{n}"])
        d = tmp_path / f"img{n}"
        rrc.dump(pid, d, parent=images[-1] if images else None, leave_running=n < 2, snapshot="copy")
        images.append(d)
        if n < 2:
            assert helper_of(pid) is None, "RRC_PAUSE_HELPER=0, yet a pause helper runs"
    wait_until(lambda: not pid_alive(pid), 15, "redis-server to end after the final dump")
    restore_and_check(rrc, netns, images[-1], cli, log, 3)
