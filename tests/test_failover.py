"""Failover (issue 4; docs/failover.md): a service protected on a with its
backup on b, loaded by rrc-check from the lab's client host over long-lived
connections, survives a fail-stop of either host (`rrc lab kill`) with zero
client errors: no reset connection, no value that differs from the last
acknowledged write, no lost acknowledged write (checked while running and
again afterwards with `rrc-check verify`).

Each test builds a fresh lab (a killed host stays dead) under the lab lock.
"""
import json
import random
import subprocess
import time
from pathlib import Path

import pytest

from conftest import REPO, RRC_BIN, need, wait_until
from test_lab import lab_locked
from test_lab import rrc as cli

CHECK_BIN = REPO / "target" / "release" / "rrc-check"
REDIS = ["redis-server", "--save", "", "--appendonly", "no", "--port", "6379", "--protected-mode", "no"]
MEMCACHED = ["memcached", "-t", "4", "-p", "11211", "-U", "0", "-u", "root", "-m", "64"]


@pytest.fixture
def lab():
    with lab_locked():
        cli("lab", "up")
        yield


def run_service(name, cmd, epoch="30ms", extra=()):
    out = cli("run", "--name", name, "--primary", "a", "--backup", "b", "--epoch", epoch, "--json", *extra, "--", *cmd).stdout
    info = json.loads(out)
    wait_until(lambda: status(name).get("checkpoints_committed", 0) > 2, 30, f"{name} protected")
    return info["service_ip"]


def status(name):
    p = cli("status", name, "--json", check=False)
    return json.loads(p.stdout) if p.returncode == 0 else {}


def checker(kind, server, seconds, state, extra=()):
    """rrc-check on the client host, in the background."""
    return subprocess.Popen(
        [str(need(RRC_BIN)), "lab", "exec", "client", "--", str(need(CHECK_BIN)), kind, "--server", server,
         "--threads", "8", "--duration", f"{seconds}s", "--rate", "400", "--json", "--state", str(state), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(p, timeout=120) -> dict:
    out, err = p.communicate(timeout=timeout)
    assert out.strip(), f"rrc-check printed nothing (exit {p.returncode}): {err[-2000:]}"
    return json.loads(out)


def verify(kind, server, state, on_host="client"):
    p = cli("lab", "exec", on_host, "--", str(need(CHECK_BIN)), "verify", kind, "--server", server, "--state", str(state),
            check=False, timeout=120)
    assert p.returncode == 0, f"verify after failover: {p.stdout}\n{p.stderr}"


def fail_primary_under_load(kind, cmd, port, tmp_path, name, extra=()):
    ip = run_service(name, cmd, extra=extra)
    state = tmp_path / "state"
    p = checker(kind, f"{ip}:{port}", 8, state)
    time.sleep(random.uniform(1.5, 3.5))
    cli("lab", "kill", "a")
    rep = finish(p)
    st = status(name)
    assert rep["ok"], json.dumps(rep, indent=1) + "\n" + json.dumps(st, indent=1)[:3000]
    assert rep["ops"] > 0
    assert st["primary"] == "b" and st["protected"] is False, st
    fo = st["primary_view"]["failovers"]
    assert len(fo) == 1 and fo[0]["kind"] == "primary failure", fo
    assert all(c["repaired"] for c in fo[0]["connections"]), fo[0]["connections"]
    verify(kind, f"{ip}:{port}", state)
    return rep, fo[0]


def test_primary_failure_redis(lab, tmp_path):
    rep, fo = fail_primary_under_load("redis", REDIS, 6379, tmp_path, "kv")
    # the timeline names every step
    steps = [s["step"] for s in fo["steps"]]
    assert steps[0].startswith("traffic blocked") and steps[-1].startswith("live"), steps
    assert fo["detection_ms"] >= 90


def test_primary_failure_redis_with_its_append_only_file(lab, tmp_path):
    """The restored redis writes on into the backup's copy of its data
    directory: memory and AOF agree (a plain redis loading that AOF has every
    acknowledged write)."""
    cmd = ["redis-server", "--save", "", "--appendonly", "yes", "--appendfsync", "always", "--dir", "/data",
           "--port", "6379", "--protected-mode", "no"]
    fail_primary_under_load("redis", cmd, 6379, tmp_path, "aofkv", extra=("--data-dir", "/data"))
    # a plain redis started on a copy of the live AOF holds what the live one holds
    live = Path("/var/lib/rrc-lab/b/services/aofkv/data")
    copy = tmp_path / "aof"
    subprocess.run(["cp", "-a", str(live), str(copy)], check=True)
    ns = "rrc-lab-b"
    srv = subprocess.Popen(["ip", "netns", "exec", ns, "redis-server", "--port", "6391", "--bind", "127.0.0.1", "--save", "",
                            "--appendonly", "yes", "--dir", str(copy)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: subprocess.run(["ip", "netns", "exec", ns, "redis-cli", "-p", "6391", "ping"],
                                          capture_output=True, text=True).stdout.strip() == "PONG", 20, "redis on the AOF copy")
        verify("redis", "127.0.0.1:6391", tmp_path / "state", on_host="b")
    finally:
        srv.kill()
        srv.wait()


def test_primary_failure_memcached(lab, tmp_path):
    fail_primary_under_load("memcached", MEMCACHED, 11211, tmp_path, "mc")


def test_backup_failure_redis(lab, tmp_path):
    ip = run_service("kvb", REDIS)
    state = tmp_path / "state"
    p = checker("redis", f"{ip}:6379", 6, state)
    time.sleep(random.uniform(1.0, 3.0))
    cli("lab", "kill", "b")
    rep = finish(p)
    st = status("kvb")
    assert rep["ok"], json.dumps(rep, indent=1) + "\n" + json.dumps(st, indent=1)[:3000]
    assert st["primary"] == "a" and st["protected"] is False, st
    assert st["primary_view"]["failovers"][0]["kind"] == "backup failure"
    verify("redis", f"{ip}:6379", state)


def test_primary_failure_lighttpd(lab, tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    (root / "blob.bin").write_bytes(random.randbytes(200_000))
    conf = tmp_path / "lighttpd.conf"
    conf.write_text(f'server.document-root = "{root}"\nserver.port = 80\nserver.bind = "0.0.0.0"\n'
                    'server.max-keep-alive-requests = 1000000\nserver.max-keep-alive-idle = 300\n')
    tmp_path.chmod(0o755)
    ip = run_service("www", ["lighttpd", "-D", "-f", str(conf)])
    p = subprocess.Popen(
        [str(need(RRC_BIN)), "lab", "exec", "client", "--", str(need(CHECK_BIN)), "http", "--url", f"http://{ip}/blob.bin",
         "--file", str(root / "blob.bin"), "--threads", "4", "--duration", "8s", "--rate", "100", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(random.uniform(1.5, 3.5))
    cli("lab", "kill", "a")
    rep = finish(p)
    st = status("www")
    assert rep["ok"] and rep["ops"] > 0, json.dumps(rep, indent=1) + "\n" + json.dumps(st, indent=1)[:3000]
    fo = st["primary_view"]["failovers"]
    assert st["primary"] == "b" and fo[0]["kind"] == "primary failure", st


def test_failure_while_a_checkpoint_is_in_flight(lab, tmp_path):
    """A damaged checkpoint makes the primary send a full one next (about 50 MB
    here); the primary dies while it is on its way: the backup restores the
    last checkpoint it had committed, and the client loses nothing."""
    ip = run_service("big", REDIS + ["--enable-debug-command", "yes"])
    assert cli("lab", "exec", "client", "--", "redis-cli", "-h", ip, "DEBUG", "POPULATE", "50000", "big", "1000").stdout.strip() == "OK"
    state = tmp_path / "state"
    p = checker("redis", f"{ip}:6379", 8, state)
    time.sleep(1.5)
    before = status("big")["backup_view"]["stats"]["checkpoints_rejected"]
    cli("fault", "big", "corrupt-next-checkpoint")
    wait_until(lambda: status("big")["backup_view"]["stats"]["checkpoints_rejected"] > before, 20, "the damaged checkpoint rejected")
    # the full checkpoint that follows is now being taken and sent
    time.sleep(0.05)
    cli("lab", "kill", "a")
    rep = finish(p)
    st = status("big")
    assert rep["ok"], json.dumps(rep, indent=1) + "\n" + json.dumps(st, indent=1)[:3000]
    assert st["primary"] == "b", st
    verify("redis", f"{ip}:6379", state)
