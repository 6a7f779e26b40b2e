"""The backup's store (crates/rrc-store) end to end, without the network.

A real chain (full dump + incrementals, taken by `rrc dump` while the
program mutates its memory, MADV_DONTNEED included) is fed in order into
one store by target/release/rrc-store-merge (a test/diagnostic tool), the
merged state is written as ONE full image, and `rrc restore` must bring
the program back from that image alone: the zdtm program verifies its
whole state (PASS), redis must hold every key written before the last dump.
The writer is also checked against snapshot.c: re-encoding a real full
image with its own header must give its exact bytes.
"""
import json
import sys
from pathlib import Path

import pytest

from conftest import REPO, netns_exec, need, pid_alive, read_text, run, wait_for_file, wait_until, RESULT_TIMEOUT
from test_zdtm import Cycle
from test_servers import KVTOOL, kv, start_redis, wait_serving

MERGE = REPO / "target" / "release" / "rrc-store-merge"


def merge(images, out: Path, *extra) -> list[dict]:
    p = run([need(MERGE), *images, "--out", out, *extra])
    lines = [json.loads(l) for l in p.stdout.strip().splitlines()]
    assert len(lines) == len(images) + 1, p.stdout
    for i, l in enumerate(lines[:-1]):
        assert l["report"]["sequence"] == i, l
    assert (out / "checkpoint.rrc").exists()
    return lines


def restore_merged_and_verify(c: Cycle, merged: Path):
    assert not (c.zdir / "result").exists()
    c.pid = c.rrc.restore(merged, netns=c.netns)
    (c.zdir / "verify").touch()
    wait_for_file(c.zdir / "result", timeout=RESULT_TIMEOUT, pid=c.pid, log=c.log)
    result = (c.zdir / "result").read_text()
    assert result == "PASS\n", f"{c.prog} after restoring the merged image: {result.strip()}\n{c.diag()}"


@pytest.mark.parametrize("prog,args", [("bigmem", []), ("threads", ["4"]), ("procattr", [])])
def test_merged_chain_restores(rrc, tmp_path, netns, prog, args):
    c = Cycle(rrc, tmp_path, netns, prog, args).start()
    c.run_chain(increments=4, interval=0.1)
    lines = merge(c.images, tmp_path / "merged")
    summary = lines[-1]["summary"]
    assert summary["sequence"] == len(c.images) - 1 and summary["images_applied"] == len(c.images)
    assert summary["image_id"] == c.dumps[-1]["image_id"]
    if prog == "bigmem":
        # bigmem drops ranges (MADV_DONTNEED) between dumps: the store drops them too
        assert any(l["report"]["pages_dropped"] > 0 for l in lines[1:-1]), lines
    info = rrc.inspect(tmp_path / "merged")
    assert lines[-1]["image_id"] in json.dumps(info), info
    # nothing but the merged image: no parent link, the chain is gone
    assert not (tmp_path / "merged" / "parent").exists()
    for d in c.images:
        (d / "checkpoint.rrc").unlink()
    restore_merged_and_verify(c, tmp_path / "merged")


def test_reencoded_full_dump_is_byte_identical(rrc, tmp_path, netns):
    """The writer lays an image out exactly as snapshot.c does."""
    c = Cycle(rrc, tmp_path, netns, "bigmem").start()
    c.dump()
    c.dump()  # an incremental too, so the process is still running with state
    merge(c.images[:1], tmp_path / "same", "--keep-header")
    a = (c.images[0] / "checkpoint.rrc").read_bytes()
    b = (tmp_path / "same" / "checkpoint.rrc").read_bytes()
    assert len(a) == len(b), f"re-encoded full image: {len(b)} bytes, snapshot.c wrote {len(a)}"
    if a != b:
        first = next(i for i in range(len(a)) if a[i] != b[i])
        pytest.fail(f"re-encoded full image differs from snapshot.c's at byte {first}")


def test_redis_merged(rrc, tmp_path, netns):
    port, log, pid, cli = start_redis(rrc, tmp_path, netns)
    phases = 4
    images, dumps = [], []

    def dump(leave_running=True):
        d = tmp_path / f"img{len(images)}"
        dumps.append(rrc.dump(pid, d, parent=images[-1] if images else None, leave_running=leave_running))
        images.append(d)

    for phase in range(phases):
        p = netns_exec(netns, ["sh", "-c", f"{sys.executable} {KVTOOL} redis-gen {phase} | "
                               f"redis-cli -p {port} --pipe"], timeout=120)
        assert "errors: 0" in p.stdout, f"redis-cli --pipe: {p.stdout}{p.stderr}"
        dump()
    kv(netns, "redis-model", port, phases)
    kv(netns, "redis-snapshot", port, tmp_path / "snap.json")
    dump(leave_running=False)
    wait_until(lambda: not pid_alive(pid), 20, f"redis pid {pid} to end after the final dump")

    lines = merge(images, tmp_path / "merged")
    assert lines[-1]["summary"]["image_id"] == dumps[-1]["image_id"]
    rpid = rrc.restore(tmp_path / "merged", netns=netns)
    wait_serving(netns, [*cli, "ping"], rpid, log, "redis-server restored from the merged image")
    kv(netns, "redis-model", port, phases)
    kv(netns, "redis-compare", port, tmp_path / "snap.json")
    assert netns_exec(netns, [*cli, "set", "after", "restore"]).stdout.strip() == "OK"
    assert pid_alive(rpid), f"restored redis died\n{read_text(log)}"


def test_merge_refuses_out_of_order(rrc, tmp_path, netns):
    """An incremental fed before its parent, or twice, is refused by name
    and nothing is written."""
    c = Cycle(rrc, tmp_path, netns, "eventfd").start()
    c.run_chain(increments=1)
    out = tmp_path / "merged"
    p = run([need(MERGE), c.images[0], c.images[2], "--out", out], check=False)
    assert p.returncode == 1 and "has parent" in p.stderr, p.stderr
    p = run([need(MERGE), c.images[1], "--out", out], check=False)
    assert p.returncode == 1 and "a full image must come first" in p.stderr, p.stderr
    assert not out.exists()
