"""File-system state in checkpoints (issue 3 §6): the data directory.

`rrc exec --data-dir HOST:PATH` bind-mounts HOST at PATH in the container
and librrc journals every change the service makes under PATH; each image
carries the changes since its parent (FILEOPS). The backup's copy of the
directory is the initial content (shipped before the start) plus every
committed image's FILEOPS, applied in order by rrc-store
(target/release/rrc-store-merge --data-dir D --data-init SRC here).

Checks:
  * zdtm datadir: a program changing files continuously through write(),
    pwrite(), an O_APPEND fd, stdio + rename, ftruncate, unlink, mkdir/rmdir
    is restored with the replayed directory and verifies its files against
    the model in its memory (restored from the same images);
  * the same program stopped, then dumped: the replayed tree equals the real
    one byte for byte;
  * redis-server --appendonly yes: keys written between dumps, chain
    replayed, restored with the replayed directory: every key is there, the
    AOF passes redis-check-aof, and a plain redis loading that AOF has the
    same keys.
"""
import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest

from conftest import (REPO, RESULT_TIMEOUT, TOOLS, netns_exec, pid_alive, read_text, run, wait_for_file,
                      wait_until, zdtm_bin)

import sys
sys.path.insert(0, str(TOOLS))
import zdtm_standalone  # noqa: E402

MERGE = Path(os.environ.get("RRC_STORE_MERGE", REPO / "target" / "release" / "rrc-store-merge"))
CPATH = "/rrc-data"  # the data directory inside the container


def tree(root: Path) -> dict:
    """relative path -> (kind, mode, content or link target), for comparison."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            st = p.lstat()
            rel = str(p.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", 0, os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode), b"")
            else:
                out[rel] = ("file", stat.S_IMODE(st.st_mode), p.read_bytes())
    return out


def diff(a: dict, b: dict) -> str:
    lines = []
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            sa = a.get(k)
            sb = b.get(k)
            lines.append(f"  {k}: {sa[:2] if sa else None} {len(sa[2]) if sa else ''} != "
                         f"{sb[:2] if sb else None} {len(sb[2]) if sb else ''}")
    return "\n".join(lines[:20])


def merge(images: list[Path], out: Path, data: Path, init: Path) -> list:
    assert MERGE.exists(), f"{MERGE} missing: cargo build --release -p rrc-store"
    p = run([MERGE, *images, "--out", out, "--data-dir", data, "--data-init", init], timeout=300)
    return [line for line in p.stdout.splitlines() if line.strip()]


class DataCycle:
    def __init__(self, rrc, tmp: Path, netns: str, cmd, env=None):
        self.rrc, self.tmp, self.netns = rrc, tmp, netns
        self.host = tmp / "data-primary"
        self.host.mkdir()
        self.init = tmp / "data-init"  # what was shipped before the start
        self.log = tmp / "service.log"
        self.cmd, self.env = cmd, env or {}
        self.images: list[Path] = []
        self.dumps: list[dict] = []

    def start(self, initial: dict | None = None):
        for rel, content in (initial or {}).items():
            (self.host / rel).write_bytes(content)
        shutil.copytree(self.host, self.init)
        args = ["exec", "--netns", self.netns, "--log", str(self.log), "--data-dir", f"{self.host}:{CPATH}"]
        env = dict(os.environ)
        env.update({k: str(v) for k, v in self.env.items()})
        p = self.rrc.run(*args, "--", *[str(c) for c in self.cmd], env=env)
        self.pid = int(p.stdout.strip().splitlines()[-1])
        self.rrc.pids.append(self.pid)
        return self

    def dump(self, leave_running=True) -> dict:
        d = self.tmp / f"img{len(self.images)}"
        out = self.rrc.dump(self.pid, d, parent=self.images[-1] if self.images else None,
                            leave_running=leave_running)
        self.images.append(d)
        self.dumps.append(out)
        return out

    def replay(self, tag: str) -> Path:
        data = self.tmp / f"replayed-{tag}"
        lines = merge(self.images, self.tmp / f"merged-{tag}", data, self.init)
        assert len([ln for ln in lines if '"applied"' in ln]) == len(self.images), "\n".join(lines)
        return data

    def restore(self, data: Path) -> int:
        p = self.rrc.run("restore", "--images", str(self.images[-1]), "--netns", self.netns,
                         "--log", str(self.log), "--data-dir", f"{data}:{CPATH}")
        self.pid = int(p.stdout.strip().splitlines()[-1])
        self.rrc.pids.append(self.pid)
        return self.pid


def fileops_in_chain(rrc, images) -> int:
    info = rrc.inspect(images[-1])
    imgs = info.get("images", [info]) if isinstance(info, dict) else info
    total = 0
    for s in imgs:
        f = s.get("fileops") if isinstance(s, dict) else None
        assert f is not None, f"rrc inspect shows no fileops for an image of a data-dir service: {s}"
        total += f["ops"]
    return total


def test_datadir_selfcheck(tmp_path, monkeypatch):
    """Without rrc: PASS undisturbed, FAIL when its model is damaged."""
    for corrupt in (False, True):
        d = tmp_path / f"data-{corrupt}"
        d.mkdir()
        monkeypatch.setenv("ZDTM_DATA", str(d))
        result, rc, out = zdtm_standalone.run(zdtm_bin("datadir"), [], corrupt=corrupt, run_ms=300)
        if corrupt:
            assert result.startswith("FAIL: ") and rc != 0, f"ZDTM_CORRUPT=1 did not fail: {result}{out}"
        else:
            assert result == "PASS\n" and rc == 0, f"alone: {result}{out}"


def test_datadir_zdtm_restore(rrc, tmp_path, netns):
    """Active program, chain of dumps, last one kills; restore with the
    replayed directory; the program's memory model and its files agree."""
    zdir = tmp_path / "zdtm"
    zdir.mkdir()
    c = DataCycle(rrc, tmp_path, netns, [zdtm_bin("datadir")],
                  env={"ZDTM_DIR": zdir, "ZDTM_DATA": CPATH}).start({"initial": b"initial content\n"})
    wait_for_file(zdir / "ready", pid=c.pid, log=c.log)
    c.dump()
    for _ in range(3):
        time.sleep(0.2)
        c.dump()
    time.sleep(0.2)
    c.dump(leave_running=False)
    wait_until(lambda: not pid_alive(c.pid), 15, "the process to end after the final dump")
    assert fileops_in_chain(rrc, c.images) > 50, "the program changed files hundreds of times"
    data = c.replay("a")
    assert (data / "initial").read_bytes() == b"initial content\n"
    c.restore(data)
    (zdir / "verify").touch()
    wait_for_file(zdir / "result", timeout=RESULT_TIMEOUT, pid=c.pid, log=c.log)
    res = (zdir / "result").read_text()
    assert res == "PASS\n", f"datadir after restore: {res}\n{read_text(c.log)}"


def test_datadir_replay_equals_tree(rrc, tmp_path, netns):
    """Stopped program: the replayed tree equals the primary's byte for byte
    (the journal carries exactly the operations done before the snapshot)."""
    zdir = tmp_path / "zdtm"
    zdir.mkdir()
    c = DataCycle(rrc, tmp_path, netns, [zdtm_bin("datadir")],
                  env={"ZDTM_DIR": zdir, "ZDTM_DATA": CPATH}).start({"initial": b"initial content\n"})
    wait_for_file(zdir / "ready", pid=c.pid, log=c.log)
    c.dump()
    time.sleep(0.3)
    c.dump()
    (zdir / "stop").touch()
    wait_for_file(zdir / "stopped", pid=c.pid, log=c.log)
    c.dump()
    data = c.replay("b")
    want, got = tree(c.host), tree(data)
    assert want == got, f"replayed tree differs from the primary's:\n{diff(want, got)}"
    # and the test can fail: one more change on the primary is not in any image
    (c.host / "log").write_bytes(b"changed behind the journal")
    assert tree(c.host) != got


REDIS_PORT = 6390


def redis_cli(netns, *args, port=REDIS_PORT):
    return netns_exec(netns, ["redis-cli", "-p", port, *args], timeout=30, check=False).stdout


def test_redis_appendonly(rrc, tmp_path, netns):
    if not shutil.which("redis-server") or not shutil.which("redis-check-aof"):
        pytest.skip("redis-server / redis-check-aof not installed")
    c = DataCycle(rrc, tmp_path, netns,
                  ["redis-server", "--port", REDIS_PORT, "--save", "", "--appendonly", "yes",
                   "--appendfsync", "always", "--dir", CPATH]).start()
    wait_until(lambda: "PONG" in redis_cli(netns, "ping"), 20, f"redis to answer\n{read_text(c.log)}")
    n = 0
    c.dump()
    for _ in range(3):
        for _ in range(100):
            assert redis_cli(netns, "set", f"k{n}", f"v{n}-" + "x" * (n % 50)).strip() == "OK"
            n += 1
        c.dump()
    c.dump(leave_running=False)
    wait_until(lambda: not pid_alive(c.pid), 15, "redis to end after the final dump")
    data = c.replay("redis")
    aofdir = data / "appendonlydir"
    assert aofdir.is_dir(), f"no appendonlydir in the replayed data dir: {sorted(tree(data))}"
    manifest = next(aofdir.glob("*.manifest"))
    chk = subprocess.run(["redis-check-aof", str(manifest)], capture_output=True, text=True, timeout=60)
    assert chk.returncode == 0 and "is valid" in chk.stdout, f"redis-check-aof:\n{chk.stdout}{chk.stderr}"

    # a plain redis (no rrc) loading a copy of the replayed AOF has every key
    plain = tmp_path / "plain"
    shutil.copytree(data, plain)
    port2 = REDIS_PORT + 1
    pr = subprocess.Popen(["ip", "netns", "exec", netns, "redis-server", "--port", str(port2), "--save", "",
                           "--appendonly", "yes", "--dir", str(plain)], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: "PONG" in redis_cli(netns, "ping", port=port2), 20, "plain redis")
        assert redis_cli(netns, "dbsize", port=port2).strip() == str(n)
        assert redis_cli(netns, "get", f"k{n - 1}", port=port2).strip() == f"v{n - 1}-" + "x" * ((n - 1) % 50)
    finally:
        pr.kill()
        pr.wait()

    # the restored redis, with the replayed directory, has them too and its
    # AOF keeps growing consistently
    c.restore(data)
    wait_until(lambda: "PONG" in redis_cli(netns, "ping"), 20, f"restored redis\n{read_text(c.log)}")
    assert redis_cli(netns, "dbsize").strip() == str(n)
    for k in range(0, n, 7):
        assert redis_cli(netns, "get", f"k{k}").strip() == f"v{k}-" + "x" * (k % 50), f"k{k}"
    assert redis_cli(netns, "set", "after", "restore").strip() == "OK"
    chk = subprocess.run(["redis-check-aof", str(manifest)], capture_output=True, text=True, timeout=60)
    assert chk.returncode == 0 and "is valid" in chk.stdout, f"redis-check-aof after restore:\n{chk.stdout}{chk.stderr}"
