"""Replication in checkpoint-only mode (issue 3; docs/protocol.md, docs/gate.md):
services run by `rrc run` on host a with their backup on b, clients on the
lab's `client` host reaching them through b's gate.

What is checked, for redis-server, memcached -t 4 and lighttpd:
  * real clients (redis-benchmark, memcslap, ab, and rrc-check, which verifies
    every value it reads back) work normally through the gate;
  * `rrc status --json` reports the service protected, with checkpoints committed;
  * the backup's committed state, exported as an image and restored in a fresh
    namespace, holds exactly what clients had been told was written;
  * replies are held while the backup does not commit, and flow again when it does;
  * a corrupt checkpoint is rejected by the backup, which keeps its state, and
    the service stays up and protected again;
  * `rrc lab down` leaves the machine as it found it (tests/test_lab.py checks
    the rest of that promise).
"""
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, RRC_BIN, TOOLS, delete_netns, need, run, wait_until, NETNS_PREFIX
from test_lab import lab_exec, lab_locked, machine_state, no_lab_left
from test_lab import rrc as cli

sys.path.insert(0, str(TOOLS))
from servers import lighttpd_site  # noqa: E402

CHECK_BIN = REPO / "target" / "release" / "rrc-check"
CLIENT = "client"


@pytest.fixture(scope="module")
def replab():
    """One lab for the module (building it costs seconds), under the lab lock;
    yields the machine's state from before the lab, for the last test."""
    with lab_locked():
        before = machine_state()
        cli("lab", "up")
        yield before


class Service:
    """A service started with `rrc run`; stopped (on every host) by the test's finalizer.

    Its agents declare each other failed after 1 s of silence, not the
    default 90 ms: this module tests replication, not failure detection
    (tests/test_failover.py does), and a CI machine's two CPUs stalled for
    90 ms once made the backup fail over in the middle of a test here (two
    primaries: no fencing yet, issue 15)."""

    def __init__(self, name: str, cmd: list[str], epoch: str = "30ms", extra: list[str] | None = None):
        out = cli("run", "--name", name, "--primary", "a", "--backup", "b", "--epoch", epoch, "--json",
                  "--failure-timeout", "1s", *(extra or []), "--", *cmd).stdout
        self.name = name
        self.info = json.loads(out)
        self.ip = self.info["service_ip"]

    def status(self) -> dict:
        return json.loads(cli("status", self.name, "--json").stdout)

    def wait_committed(self, more_than: int = 0, timeout: float = 30) -> dict:
        st = {}

        def ok():
            nonlocal st
            st = self.status()
            return st["protected"] and st["checkpoints_committed"] > more_than

        wait_until(ok, timeout, f"{self.name}: a checkpoint committed after #{more_than}",
                   diag=lambda: json.dumps(st, indent=1)[:3000])
        return st

    def stop(self):
        cli("stop", self.name, check=False)


def why_unprotected(st: dict) -> str:
    """What a status says about losing protection: each part's state and
    last error, and the failovers (a truncated status says none of it)."""
    parts = {k: {"state": (v or {}).get("stats", {}).get("state"), "last_error": (v or {}).get("stats", {}).get("last_error")}
             for k, v in (("primary", st.get("primary_view")), ("backup", st.get("backup_view")))}
    failovers = (st.get("primary_view") or {}).get("failovers")
    return json.dumps({"parts": parts, "failovers": failovers}, indent=1)[:4000]


@pytest.fixture
def service(replab):
    made = []

    def start(*a, **kw):
        s = Service(*a, **kw)
        made.append(s)
        return s

    yield start
    for s in made:
        s.stop()
    # nothing of the services is left on the hosts
    for h in ["a", "b"]:
        st = json.loads(cli("status", "--agent", f"/run/rrc-lab/{h}/agent.sock", "--json").stdout)
        assert st["services"] == [], f"host {h} still has services after stop: {st['services']}"
    left = [n for n in os.listdir("/run/netns") if n.startswith("rrc-lab-a-") or n.startswith("rrc-lab-b-")]
    assert not left, f"service namespaces left after stop: {left}"


def client(*cmd, timeout=120, check=True):
    return lab_exec(CLIENT, *cmd, timeout=timeout, check=check)


def client_bg(*cmd) -> subprocess.Popen:
    return subprocess.Popen([str(need(RRC_BIN)), "lab", "exec", CLIENT, "--", *cmd],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def redis_cmd(ip: str, *args, timeout=30, check=True):
    return client("redis-cli", "-h", ip, "--raw", *args, timeout=timeout, check=check)


def restored_elsewhere(rrc_fixture, images: Path, ns: str) -> int:
    """Restores an exported image in a fresh namespace with only lo."""
    run(["ip", "netns", "add", ns])
    run(["ip", "-n", ns, "link", "set", "lo", "up"])
    return rrc_fixture.restore(images, netns=ns)


# ---------------------------------------------------------------- redis

REDIS = ["redis-server", "--save", "", "--appendonly", "no", "--port", "6379", "--protected-mode", "no"]


def test_redis_clients_work_through_the_gate(service):
    s = service("kv", REDIS)
    st = s.wait_committed()
    for k in ["service_ip", "primary", "backup", "mode", "checkpoints_committed", "protected",
              "last_pause_us", "last_checkpoint_bytes", "replication_lag_ms", "epoch_ms"]:
        assert k in st, f"status lacks {k}: {st}"
    assert (st["primary"], st["backup"], st["mode"], st["epoch_ms"]) == ("a", "b", "checkpoint", 30)
    out = client("redis-benchmark", "-h", s.ip, "-n", "3000", "-c", "4", "-t", "set,get", "-q", "--csv").stdout
    assert '"SET"' in out and '"GET"' in out, out
    chk = client(str(need(CHECK_BIN)), "redis", "--server", f"{s.ip}:6379", "--threads", "4",
                 "--duration", "3s", "--json", timeout=120)
    rep = json.loads(chk.stdout)
    assert rep["ok"] and rep["ops"] > 0, rep
    st = s.status()
    gate = st["backup_view"]["gate"]
    assert gate["packets_released"] > 0, gate
    # the service's output came by the AF_XDP path (the agents' default)
    # and left by it, nothing lost on the way
    x = gate["xdp"]
    assert x and x["sent"] > 0 and x["next_hops"] >= 1, gate
    assert (x["kernel_dropped"], x["send_dropped"], x["send_refused"]) == (0, 0, 0), x
    # what clients sent came through the NFQUEUE (the default input path;
    # the observed one: test_failover.py)
    assert gate["observed_input"] is None, gate
    assert st["protected"], why_unprotected(st)


def test_a_second_gate_on_the_same_link_falls_back_to_nfqueue(service):
    """One XDP program per interface: the gate of a second service backed
    up on the same host cannot attach its own, takes the service's output
    from the NFQUEUE instead (docs/gate.md "The output path"), and both
    services serve through their gates."""
    first = service("xa", REDIS)
    first.wait_committed()
    second = service("xb", REDIS)
    second.wait_committed()
    for s in (first, second):
        assert redis_cmd(s.ip, "SET", "who", s.name).stdout.strip() == "OK"
        assert redis_cmd(s.ip, "GET", "who").stdout.strip() == s.name
    g1, g2 = first.status()["backup_view"]["gate"], second.status()["backup_view"]["gate"]
    assert g1["xdp"] and g1["xdp"]["sent"] > 0, g1
    assert g2["xdp"] is None and g2["packets_released"] > 0, g2


def test_replies_wait_for_the_commit(service):
    s = service("held", REDIS)
    s.wait_committed()
    assert redis_cmd(s.ip, "SET", "before", "1").stdout.strip() == "OK"
    cli("fault", s.name, "stall-commits")
    try:
        p = client_bg("redis-cli", "-h", s.ip, "--raw", "SET", "during", "2")
        time.sleep(1.5)
        assert p.poll() is None, f"a reply reached the client while commits were stalled: {p.communicate()}"
        # the backup received checkpoints it did not commit
        st = s.status()
        assert st["backup_view"]["stats"]["stalled"] is True
    finally:
        cli("fault", s.name, "resume-commits")
    out, err = p.communicate(timeout=20)
    assert p.returncode == 0 and out.strip() == "OK", (out, err)
    assert redis_cmd(s.ip, "GET", "during").stdout.strip() == "2"


def test_backup_state_is_what_clients_were_told(service, rrc, tmp_path):
    s = service("state", REDIS)
    s.wait_committed()
    # acknowledged writes
    acked = {f"acked:{i}": hashlib.sha256(str(i).encode()).hexdigest() for i in range(200)}
    script = "".join(f"SET {k} {v}\n" for k, v in acked.items())
    out = client("sh", "-c", f"printf '%s' '{script}' | redis-cli -h {s.ip}").stdout
    assert out.split().count("OK") == len(acked), out[:500]
    committed = s.wait_committed(s.status()["checkpoints_committed"])["checkpoints_committed"]
    # writes that are never acknowledged: commits stall before they are sent
    cli("fault", s.name, "stall-commits")
    try:
        p = client_bg("redis-cli", "-h", s.ip, "SET", "unacked", "x")
        time.sleep(0.5)
        assert p.poll() is None, "the unacknowledged write got its reply"
        images = tmp_path / "export"
        exp = json.loads(cli("export", s.name, "--images", str(images), "--json").stdout)
        assert exp["epoch"] >= committed - 1
    finally:
        cli("fault", s.name, "resume-commits")
    p.communicate(timeout=20)
    ns = f"{NETNS_PREFIX}exp"
    try:
        pid = restored_elsewhere(rrc, images, ns)
        keys = run(["ip", "netns", "exec", ns, "redis-cli", "--raw", "KEYS", "*"]).stdout.split()
        assert sorted(keys) == sorted(acked), f"restored keys differ: extra {set(keys) - set(acked)}, missing {set(acked) - set(keys)}"
        vals = run(["ip", "netns", "exec", ns, "redis-cli", "--raw", "MGET", *acked]).stdout.split()
        assert vals == list(acked.values())
        rrc.kill(pid)
    finally:
        delete_netns(ns)


def test_corrupt_checkpoint_is_rejected_and_service_stays_up(service):
    s = service("corrupt", REDIS)
    st = s.wait_committed()
    before = st["checkpoints_committed"]
    cli("fault", s.name, "corrupt-next-checkpoint")
    wait_until(lambda: s.status()["backup_view"]["stats"]["checkpoints_rejected"] >= 1, 20, "the backup rejected the damaged checkpoint")
    st = s.status()
    err = st["backup_view"]["stats"]["last_error"]
    assert "checksum" in err or "CRC" in err or "crc" in err, err
    # the service stays up and protected: a full checkpoint starts the chain again
    assert redis_cmd(s.ip, "SET", "after", "ok").stdout.strip() == "OK"
    st = s.wait_committed(before + 1)
    assert st["primary_view"]["stats"]["full_checkpoints"] >= 2, st["primary_view"]["stats"]
    assert redis_cmd(s.ip, "GET", "after").stdout.strip() == "ok"


# ---------------------------------------------------------------- memcached

def test_memcached_through_the_gate(service, rrc, tmp_path):
    s = service("mc", ["memcached", "-t", "4", "-p", "11211", "-U", "0", "-u", "root", "-m", "64"])
    s.wait_committed()
    client("memcslap", f"--servers={s.ip}:11211", "--concurrency=4", "--execute-number=2000", timeout=180)
    chk = client(str(need(CHECK_BIN)), "memcached", "--server", f"{s.ip}:11211", "--threads", "4",
                 "--duration", "3s", "--json", "--state", str(tmp_path / "mc.state"), timeout=120)
    rep = json.loads(chk.stdout)
    assert rep["ok"] and rep["ops"] > 0, rep
    # the backup's committed state holds every acknowledged write
    s.wait_committed(s.status()["checkpoints_committed"])
    images = tmp_path / "export"
    cli("export", s.name, "--images", str(images))
    ns = f"{NETNS_PREFIX}mcx"
    try:
        pid = restored_elsewhere(rrc, images, ns)
        v = run(["ip", "netns", "exec", ns, str(need(CHECK_BIN)), "verify", "memcached", "--server", "127.0.0.1:11211",
                 "--state", str(tmp_path / "mc.state")], check=False)
        assert v.returncode == 0, v.stdout + v.stderr
        rrc.kill(pid)
    finally:
        delete_netns(ns)


# ---------------------------------------------------------------- lighttpd

def test_lighttpd_static_files_through_the_gate(service, tmp_path):
    blob = os.urandom(300_000)
    argv, root = lighttpd_site(tmp_path, {"blob.bin": blob, "index.html": b"<h1>rrc</h1>\n"}, extra='mimetype.assign = (".html" => "text/html")')
    s = service("www", argv)
    s.wait_committed()
    out = client("ab", "-n", "300", "-c", "4", "-k", f"http://{s.ip}/index.html", timeout=180).stdout
    assert "Failed requests:        0" in out and "Complete requests:      300" in out, out
    got = client("sh", "-c", f"curl -sf --max-time 30 http://{s.ip}/blob.bin | sha256sum").stdout.split()[0]
    assert got == hashlib.sha256(blob).hexdigest()
    chk = client(str(need(CHECK_BIN)), "http", "--url", f"http://{s.ip}/blob.bin", "--file", str(root / "blob.bin"),
                 "--threads", "4", "--duration", "3s", "--json", timeout=120)
    rep = json.loads(chk.stdout)
    assert rep["ok"] and rep["ops"] > 0, rep
    assert s.status()["protected"]


# ---------------------------------------------------------------- cleanup

def test_lab_down_leaves_the_machine_as_found(replab):
    s = Service("last", REDIS)
    s.wait_committed()
    # down with a service running: everything goes, agents included
    cli("lab", "down")
    no_lab_left()
    assert machine_state() == replab
    cli("lab", "up")  # the module fixture's finalizer takes it down again


# ---------------------------------------------------------------- data directory

def test_data_directory_travels_with_the_checkpoints(service, rrc, tmp_path):
    """redis with an append-only file in its data directory: the backup's copy of
    the directory, exported with the committed state, holds an AOF that agrees
    with the committed memory: both have every acknowledged write."""
    s = service("aof", ["redis-server", "--save", "", "--appendonly", "yes", "--appendfsync", "always",
                        "--dir", "/data", "--port", "6379", "--protected-mode", "no"], extra=["--data-dir", "/data"])
    s.wait_committed()
    keys = {f"aof:{i}": f"v{i}" for i in range(300)}
    script = "".join(f"SET {k} {v}\n" for k, v in keys.items())
    out = client("sh", "-c", f"printf '%s' '{script}' | redis-cli -h {s.ip}").stdout
    assert out.split().count("OK") == len(keys), out[:300]
    s.wait_committed(s.status()["checkpoints_committed"])
    images = tmp_path / "export"
    exp = json.loads(cli("export", s.name, "--images", str(images), "--json").stdout)
    data = Path(exp["data_dir"])
    aofs = sorted(p for p in data.rglob("*") if p.is_file() and "aof" in p.name)
    assert aofs, f"no AOF in the exported data directory: {sorted(data.rglob('*'))}"
    # the AOF alone is sound and holds every key (a plain redis loads it)
    ns = f"{NETNS_PREFIX}aofck"
    run(["ip", "netns", "add", ns])
    try:
        run(["ip", "-n", ns, "link", "set", "lo", "up"])
        copy = tmp_path / "aofcopy"
        run(["cp", "-a", str(data), str(copy)])
        srv = subprocess.Popen(["ip", "netns", "exec", ns, "redis-server", "--port", "6390", "--save", "",
                                "--appendonly", "yes", "--dir", str(copy)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        try:
            wait_until(lambda: run(["ip", "netns", "exec", ns, "redis-cli", "-p", "6390", "ping"], check=False)
                       .stdout.strip() == "PONG", 20, "plain redis on the exported AOF")
            vals = run(["ip", "netns", "exec", ns, "redis-cli", "-p", "6390", "--raw", "MGET", *keys]).stdout.split()
            assert vals == list(keys.values()), "the exported AOF lacks acknowledged writes"
        finally:
            srv.kill()
            srv.wait()
        # and the committed memory restores with its data directory and agrees
        pid = rrc.restore_with_data(images, data, "/data", ns)
        vals = run(["ip", "netns", "exec", ns, "redis-cli", "--raw", "MGET", *keys]).stdout.split()
        assert vals == list(keys.values())
        rrc.kill(pid)
    finally:
        delete_netns(ns)
