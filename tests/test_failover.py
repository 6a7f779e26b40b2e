"""Failover (issue 4; docs/failover.md): a service protected on a with its
backup on b, loaded by rrc-check from the lab's client host over long-lived
connections, survives a fail-stop of either host (`rrc lab kill`) with zero
client errors: no reset connection, no value that differs from the last
acknowledged write, no lost acknowledged write (checked while running and
again afterwards with `rrc-check verify`).

Each test builds a fresh lab (a killed host stays dead) under the lab lock.
"""
import contextlib
import json
import os
import pwd
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, RRC_BIN, TOOLS, need, wait_until
from test_lab import lab_locked
from test_lab import rrc as cli

sys.path.insert(0, str(TOOLS))
from servers import lighttpd_site  # noqa: E402

CHECK_BIN = REPO / "target" / "release" / "rrc-check"
REDIS = ["redis-server", "--save", "", "--appendonly", "no", "--port", "6379", "--protected-mode", "no"]
AOF_REDIS = ["redis-server", "--save", "", "--appendonly", "yes", "--appendfsync", "always", "--dir", "/data",
             "--port", "6379", "--protected-mode", "no"]
MEMCACHED = ["memcached", "-t", "4", "-p", "11211", "-U", "0", "-u", "root", "-m", "64"]
# About half of what 8 connections get from a protected server at a 30 ms
# epoch (each request waits for its epoch's commit: ~265 ops/s measured by
# bench/failover_campaign.py, which runs at the same rate).
HALF_LOAD = 130


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
         "--threads", "8", "--duration", f"{seconds}s", "--rate", str(HALF_LOAD), "--json", "--state", str(state), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(p, timeout=120) -> dict:
    out, err = p.communicate(timeout=timeout)
    assert out.strip(), f"rrc-check printed nothing (exit {p.returncode}): {err[-2000:]}"
    return json.loads(out)


def lab_diagnosis(lines=30) -> str:
    """What the agents say and the last lines of every agent's and
    service's log, for a failure's message."""
    out = [cli("status", "--json", check=False).stdout[:6000]]
    root = Path("/var/lib/rrc-lab")
    logs = sorted(root.glob("*/agent.log")) + sorted((root / "logs").glob("*"))
    for log in logs:
        if log.is_file():
            text = log.read_text(errors="replace").splitlines()
            out.append(f"--- {log}, last lines:\n" + "\n".join(text[-lines:]))
    return "\n".join(out)


def verify(kind, server, state, on_host="client"):
    p = cli("lab", "exec", on_host, "--", str(need(CHECK_BIN)), "verify", kind, "--server", server, "--state", str(state),
            check=False, timeout=120)
    assert p.returncode == 0, f"verify after failover: {p.stdout}\n{p.stderr}\n{lab_diagnosis()}"


@contextlib.contextmanager
def lab_client(*argv, stdin=False):
    """A process on the client host (text pipes), killed on the way out."""
    p = subprocess.Popen([str(need(RRC_BIN)), "lab", "exec", "client", "--", *argv], stdin=subprocess.PIPE if stdin else None,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield p
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def fail_over_to_b(name) -> dict:
    """Kills host a and waits until b serves `name`: b's failover timeline."""
    cli("lab", "kill", "a")
    wait_until(lambda: status(name).get("primary") == "b", 30, "failover to b", diag=lambda: lab_diagnosis(60))
    return status(name)["primary_view"]["failovers"][0]


def fail_primary_under_load(kind, cmd, port, tmp_path, name, extra=()):
    ip = run_service(name, cmd, extra=extra)
    return fail_primary_under_load_on(name, ip, kind, port, tmp_path)


def fail_primary_under_load_on(name, ip, kind, port, tmp_path):
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
    assert steps[0].startswith("input held") and steps[-1].startswith("live"), steps
    assert fo["detection_ms"] >= 90


def test_primary_failure_redis_with_its_append_only_file(lab, tmp_path):
    """The restored redis writes on into the backup's copy of its data
    directory: memory and AOF agree (a plain redis loading that AOF has every
    acknowledged write)."""
    fail_primary_under_load("redis", AOF_REDIS, 6379, tmp_path, "aofkv", extra=("--data-dir", "/data"))
    check_aof_copy(Path("/var/lib/rrc-lab/b/services/aofkv/data"), "b", tmp_path / "state", tmp_path)


def check_aof_copy(live: Path, host: str, state: Path, tmp_path: Path):
    """A plain redis started on a copy of the live AOF holds every acknowledged write."""
    copy = tmp_path / "aof"
    subprocess.run(["cp", "-a", str(live), str(copy)], check=True)
    ns = f"rrc-lab-{host}"
    srv = subprocess.Popen(["ip", "netns", "exec", ns, "redis-server", "--port", "6391", "--bind", "127.0.0.1", "--save", "",
                            "--appendonly", "yes", "--dir", str(copy)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: subprocess.run(["ip", "netns", "exec", ns, "redis-cli", "-p", "6391", "ping"],
                                          capture_output=True, text=True).stdout.strip() == "PONG", 20, "redis on the AOF copy")
        verify("redis", "127.0.0.1:6391", state, on_host=host)
    finally:
        srv.kill()
        srv.wait()


def test_primary_failure_memcached(lab, tmp_path):
    fail_primary_under_load("memcached", MEMCACHED, 11211, tmp_path, "mc")


def thread_ids(pid: int) -> set:
    """The Uid and Gid lines of every thread of pid (as /proc shows them)."""
    out = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        st = dict(line.split(":", 1) for line in (task / "status").read_text().splitlines() if ":" in line)
        out.add((" ".join(st["Uid"].split()), " ".join(st["Gid"].split()), " ".join(st["CapEff"].split())))
    return out


@pytest.mark.parametrize("mode", ["checkpoint", "rr"])
def test_primary_failure_of_a_server_that_dropped_privileges(lab, tmp_path, mode):
    """memcached as Debian runs it (`-u memcache`: it starts as root and
    switches users, which leaves it not dumpable): protected in both
    modes, checkpointed every epoch, failed over under load with zero
    errors and every acknowledged write there, and the process b restored
    runs as memcache in every thread, as the primary's did."""
    cmd = [c if c != "root" else "memcache" for c in MEMCACHED]
    name = f"mcu{mode[0]}"
    ip = run_service(name, cmd, extra=("--mode", mode))
    before = thread_ids(status(name)["primary_view"]["pid"])
    memcache = pwd.getpwnam("memcache")
    assert before == {(" ".join([str(memcache.pw_uid)] * 4), " ".join([str(memcache.pw_gid)] * 4), "0000000000000000")}, before
    fail_primary_under_load_on(name, ip, "memcached", 11211, tmp_path)
    after = thread_ids(status(name)["primary_view"]["pid"])
    assert after == before, f"the restored memcached's threads have {after}, the primary's had {before}"


def test_primary_failure_in_rr_mode(lab, tmp_path):
    """rr mode (issue 14; RRC §4.4): replies leave the gate as soon as the
    log that reproduces them is at the backup, so a failover must replay
    that log: it restores the last committed checkpoint, replays the log
    kept since on the clients' own connections (reads take the clients'
    bytes off them, outputs go out again, the clients drop what they had)
    and goes live at its end. The same connections carry on with no error
    and every acknowledged write is there (memcached -t 4, 8 connections)."""
    ip = run_service("rrmc", MEMCACHED, extra=("--mode", "rr"))
    st = status("rrmc")
    log = st["backup_view"]["stats"]["log"]
    assert log["state"] == "receiving" and log["received_batches"] > 0, log
    assert st["backup_view"]["gate"]["log_release"], st["backup_view"]["gate"]
    assert st["backup_view"]["gate"]["xdp"], "the gate takes the output by AF_XDP (the default)"
    rep, fo = fail_primary_under_load_on("rrmc", ip, "memcached", 11211, tmp_path)
    r = fo["replay"]
    # (no events when the primary died right after a checkpoint's cut)
    assert r["connections"] <= 8 and r["faults"] == 0 and r["log_bytes"] > 0, r
    assert any(s["step"].startswith("replayed up to the last released output") for s in fo["steps"]), fo["steps"]


@pytest.fixture
def lab_observed():
    """The lab with its gates on the observed input path."""
    with lab_locked():
        cli("lab", "up", env=dict(os.environ, RRC_GATE_INPUT="observe"))
        yield


def test_primary_failure_in_rr_mode_on_the_observed_input_path(lab_observed, tmp_path):
    """The gate's other input path (`--gate-input observe`, docs/gate.md "The
    input path"): clients' packets are recorded from a ring a tc program
    fills while the kernel forwards them, none through the NFQUEUE; the
    failover detaches the program and reads the ring to its end before it
    holds what clients send. The same connections carry on with no error,
    every acknowledged write there (memcached -t 4, rr mode)."""
    ip = run_service("rrob", MEMCACHED, extra=("--mode", "rr"))
    finish(checker("memcached", f"{ip}:11211", 1, tmp_path / "warm"))
    g = status("rrob")["backup_view"]["gate"]
    o = g["observed_input"]
    assert o and o["attached"] and o["frames"] > 0 and o["malformed"] == 0, g
    assert o["queued"] == 0, o
    rep, fo = fail_primary_under_load_on("rrob", ip, "memcached", 11211, tmp_path)
    assert fo["replay"]["faults"] == 0, fo["replay"]
    assert fo["steps"][0]["step"].startswith("input held"), fo["steps"]


@pytest.mark.parametrize("kind,cmd,port,mode", [("redis", REDIS, 6379, "checkpoint"), ("memcached", MEMCACHED, 11211, "checkpoint"),
                                               ("redis", REDIS, 6379, "rr"), ("memcached", MEMCACHED, 11211, "rr")])
def test_backup_failure(lab, tmp_path, kind, cmd, port, mode):
    """The backup fails under load: the primary carries on unprotected, the
    clients over the same connections with no error, every acknowledged
    write there. In rr mode the library's log connection to the dead
    backup breaks too: recording stops, the service does not."""
    ip = run_service("kvb", cmd, extra=("--mode", mode))
    state = tmp_path / "state"
    p = checker(kind, f"{ip}:{port}", 6, state)
    time.sleep(random.uniform(1.0, 3.0))
    cli("lab", "kill", "b")
    rep = finish(p)
    st = status("kvb")
    assert rep["ok"], json.dumps(rep, indent=1) + "\n" + json.dumps(st, indent=1)[:3000]
    assert st["primary"] == "a" and st["protected"] is False, st
    assert st["primary_view"]["failovers"][0]["kind"] == "backup failure"
    verify(kind, f"{ip}:{port}", state)


def loaded_rr_redis(name, tmp_path, epoch="30ms", seconds=5):
    """redis in rr mode under the checking client on the client host for
    `seconds`, 1.5 s into its run: (service IP, client state, client)."""
    ip = run_service(name, REDIS, epoch=epoch, extra=("--mode", "rr"))
    state = tmp_path / "state"
    p = checker("redis", f"{ip}:6379", seconds, state)
    time.sleep(1.5)
    return ip, state, p


def test_a_backup_declared_failed_while_alive_is_told_and_never_fails_over(lab, tmp_path):
    """A backup alive but not heard for a while (its heartbeat thread
    starved on a loaded host; here `rrc fault NAME mute-heartbeats`, a
    second of silence) is declared failed by the primary, which then serves
    alone, and tells it so (Stop): the backup drops the service. Told
    nothing, it kept its older state and watched the primary's heartbeats,
    and when the primary failed later it took the service over from that
    state, undoing what the primary had served meanwhile (a campaign saw
    it: memcached #133, bench/README.md). rr mode, under load: the clients
    see no error; once the primary is killed the old backup stays out."""
    name = "told"
    ip, state, p = loaded_rr_redis(name, tmp_path)
    cli("fault", name, "mute-heartbeats")
    rep = finish(p)
    st = status(name)
    assert rep["ok"], json.dumps(rep, indent=1) + "\n" + json.dumps(st, indent=1)[:3000]
    assert st["primary"] == "a" and st["protected"] is False, st
    assert st["primary_view"]["failovers"][0]["kind"] == "backup failure", st
    verify("redis", f"{ip}:6379", state)
    wait_until(lambda: status(name).get("backup_view") is None, 10, "b dropping its part of the service", interval=0.2,
               diag=lambda: lab_diagnosis(40))
    cli("lab", "kill", "a")
    # b's heartbeat monitor would have declared a silent within 90 ms
    time.sleep(3)
    st = status(name)
    assert st.get("primary") != "b", (st, lab_diagnosis(40))
    b_log = Path("/var/lib/rrc-lab/b/agent.log").read_text(errors="replace")
    # told by the primary (Stop), or, with the lab's etcd, finding the view
    # that dropped it first (tests/test_partitions.py has the rest)
    told = "declared this backup failed" in b_log or "replaced the one this host acted in: standing down" in b_log
    assert told and "failing over" not in b_log, b_log[-3000:]


@pytest.mark.parametrize("mode", ["checkpoint", "rr"])
def test_primary_failure_lighttpd(lab, tmp_path, mode):
    """lighttpd serving random byte ranges of a 200 kB file over keep-alive
    connections (every body checked; no two alike, so a reply sent twice
    is seen): the primary fails, the clients carry on. In rr mode the
    clients had acknowledged far more than a window of the replies the
    replay reproduces: each repaired socket stands where its client does
    and the replay sends none of those bytes again (a socket left at the
    checkpoint's write point drops every ACK past it and the connection
    stalls)."""
    argv, root = lighttpd_site(tmp_path, {"blob.bin": random.randbytes(200_000)})
    # rr: epochs of 1 s and the primary killed mid-epoch, 0.4 s after a
    # commit: the replay always has replies to reproduce that the clients
    # hold (~40 of them; random moments are the campaign's)
    ip = run_service("www", argv, epoch="1s" if mode == "rr" else "30ms", extra=("--mode", mode))
    p = subprocess.Popen(
        [str(need(RRC_BIN)), "lab", "exec", "client", "--", str(need(CHECK_BIN)), "http", "--url", f"http://{ip}/blob.bin",
         "--file", str(root / "blob.bin"), "--ranges", "--threads", "4", "--duration", "8s", "--rate", "100", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(random.uniform(1.5, 3.5))
    if mode == "rr":
        c = status("www").get("checkpoints_committed", 0)
        wait_until(lambda: status("www").get("checkpoints_committed", 0) > c, 10, "a checkpoint")
        time.sleep(0.4)
    cli("lab", "kill", "a")
    rep = finish(p)
    st = status("www")
    assert rep["ok"] and rep["ops"] > 0, json.dumps(rep, indent=1) + "\n" + json.dumps(st, indent=1)[:3000]
    fo = st["primary_view"]["failovers"]
    assert st["primary"] == "b" and fo[0]["kind"] == "primary failure", st
    if mode == "rr":
        r = fo[0]["replay"]
        assert r and not r["diverged"] and r["faults"] == 0 and r["behind"] == 0 and r["reset"] == 0, (r, lab_diagnosis())
        assert r["events"] > 0 and r["skipped_bytes"] > 0, r


def test_primary_failure_with_connections_the_server_closes(lab, tmp_path):
    """rr mode, lighttpd closing every connection after its response
    (rrc-check http --close: a connection per GET of a random byte range,
    read to the server's FIN, a reset or failed connect counted as an
    error). The FINs went out on the log (docs/gate.md), so the clients
    had seen connections end that the last checkpoint holds open: the
    replay makes those closes again on repaired sockets standing before
    the FIN (the client's own FIN ends the receive queue), and the gate
    kept every finished connection whose release no commit covered yet,
    so that the replay reproduces its reply. Connections the checkpoint
    found half-closed or closed are rebuilt with their FINs. Killed
    mid-epoch, 0.4 s after a commit: zero client errors, nothing out of
    step, no connection reset."""
    argv, root = lighttpd_site(tmp_path, {"blob.bin": random.randbytes(20_000)})
    ip = run_service("www", argv, epoch="1s", extra=("--mode", "rr"))
    p = subprocess.Popen(
        [str(need(RRC_BIN)), "lab", "exec", "client", "--", str(need(CHECK_BIN)), "http", "--close", "--url", f"http://{ip}/blob.bin",
         "--file", str(root / "blob.bin"), "--ranges", "--threads", "4", "--duration", "8s", "--rate", "200", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(random.uniform(1.5, 3.5))
    c = status("www").get("checkpoints_committed", 0)
    wait_until(lambda: status("www").get("checkpoints_committed", 0) > c, 10, "a checkpoint")
    time.sleep(0.4)
    fins = status("www")["backup_view"]["gate"]["log"]["verified_fins"]
    cli("lab", "kill", "a")
    rep = finish(p)
    st = status("www")
    assert rep["ok"] and rep["ops"] > 0, json.dumps(rep, indent=1) + "\n" + json.dumps(st, indent=1)[:3000]
    assert fins > 0, "the FINs went out on the log"
    fo = st["primary_view"]["failovers"]
    assert st["primary"] == "b" and fo[0]["kind"] == "primary failure", st
    r = fo[0]["replay"]
    assert r and not r["diverged"] and r["faults"] == 0 and r["behind"] == 0 and r["reset"] == 0, (r, lab_diagnosis())
    assert r["events"] > 0, r
    # every connection is rebuilt, half-closed and closing ones with their
    # FINs (FIN_WAIT at the checkpoint, lighttpd's lingering close; both
    # ends closed with the fd still open: docs/tcp-repair.md "FINs"),
    # except one the gate had forgotten (both FINs acknowledged, a commit
    # after them), whose client is long done
    conns = fo[0]["connections"]
    assert any(c["repaired"] for c in conns), conns
    unrepaired = [c for c in conns if not c["repaired"] and not (c["reason"] or "").startswith("in neither the checkpoint's TCP table nor the gate's record")]
    assert not unrepaired, (unrepaired, [c for c in conns if c["repaired"]][:5])


@pytest.mark.parametrize("mode", ["checkpoint", "rr"])
def test_failure_while_a_checkpoint_is_in_flight(lab, tmp_path, mode):
    """A damaged checkpoint makes the primary send a full one next (about 50 MB
    here); the primary dies while it is on its way: the backup restores the
    last checkpoint it had committed, and the client loses nothing. In rr
    mode the replies went out on the log meanwhile: the replay of the log
    kept since that checkpoint brings the service to where they were."""
    ip = run_service("big", REDIS + ["--enable-debug-command", "yes"], extra=("--mode", mode))
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
    if mode == "rr":
        r = st["primary_view"]["failovers"][0]["replay"]
        assert r and not r["diverged"] and r["faults"] == 0 and r["events"] > 0, (r, lab_diagnosis())
    verify("redis", f"{ip}:6379", state)


@pytest.mark.parametrize("with_aof,mode", [(False, "checkpoint"), (True, "checkpoint"), (False, "rr"), (True, "rr")],
                         ids=["memory", "append-only-file", "memory-rr", "append-only-file-rr"])
def test_reprotection_then_a_second_failure(lab, tmp_path, with_aof, mode):
    """Primary a fails: b goes live and re-protects onto the spare c (a full
    checkpoint, c's gate joining the established connections, and with a
    data directory its content as restored plus every change since); then b
    fails too: c goes live. The same client connections carry on through
    both, and with an AOF, the AOF on c agrees with what clients were told.
    In rr mode b's process, live at the end of its replay, is recorded
    again and its log goes to c (a log session handed to it by RECORD):
    c releases replies on the log and its failover replays it."""
    cmd, extra = (AOF_REDIS, ["--data-dir", "/data"]) if with_aof else (REDIS, [])
    out = cli("run", "--name", "twice", "--primary", "a", "--backup", "b", "--spare", "c", "--mode", mode, "--epoch", "30ms", "--json",
              *extra, "--", *cmd).stdout
    ip = json.loads(out)["service_ip"]
    wait_until(lambda: status("twice").get("checkpoints_committed", 0) > 2, 30, "protected")
    state = tmp_path / "state"
    p = checker("redis", f"{ip}:6379", 14, state)
    time.sleep(random.uniform(1.5, 3.0))
    cli("lab", "kill", "a")
    st = wait_reprotected("twice", "b", "c")
    fo = st["primary_view"]["failovers"]
    assert fo[0]["kind"] == "primary failure" and fo[0]["reprotected"]["new_backup"] == "c", fo
    if mode == "rr":
        assert fo[0]["replay"] and not fo[0]["replay"]["diverged"], fo[0]
        # the log of b's process reaches c, which releases on it
        wait_until(lambda: (status("twice").get("backup_view") or {}).get("stats", {}).get("log", {}).get("received_batches", 0) > 2,
                   20, "b's log at c", diag=lambda: lab_diagnosis(40))
        assert status("twice")["backup_view"]["gate"]["log_release"]
    time.sleep(random.uniform(1.0, 2.5))
    cli("lab", "kill", "b")
    finish_live_on(p, "twice", "c", "redis", f"{ip}:6379", state)
    if mode == "rr":
        last = status("twice")["primary_view"]["failovers"][-1]
        r = last["replay"]
        assert r and not r["diverged"] and r["faults"] == 0 and r["behind"] == 0, (r, lab_diagnosis())
    if with_aof:
        # c had no spare left: in checkpoint mode its service writes into
        # its committed copy, in rr mode into a copy of it (a replay that
        # diverged would start again from the committed one)
        data = "data" if mode == "checkpoint" else "data-live"
        check_aof_copy(Path(f"/var/lib/rrc-lab/c/services/twice/{data}"), "c", state, tmp_path)


def finish_live_on(p, name, host, kind, server, state):
    """After a second failure: the checker `p` ran without error, `name`
    is live and unprotected on `host`, every connection of its last
    failover was repaired, and every acknowledged write reads back."""
    rep = finish(p)
    st = status(name)
    assert rep["ok"], json.dumps(rep, indent=1) + "\n" + json.dumps(st, indent=1)[:4000]
    assert rep["ops"] > 0
    assert st["primary"] == host and st["protected"] is False, st
    conns = st["primary_view"]["failovers"][-1]["connections"]
    assert conns and all(c["repaired"] for c in conns), [c for c in conns if not c["repaired"]]
    verify(kind, server, state)


def wait_reprotected(name, primary, backup):
    """Waits until `name` runs on `primary`, protected by `backup` with
    checkpoints committed again; returns its status."""
    st = {}

    def reprotected():
        nonlocal st
        st = status(name)
        return st.get("primary") == primary and st.get("backup") == backup and st.get("protected") and st.get("checkpoints_committed", 0) > 2

    wait_until(reprotected, 30, f"{primary} primary, {backup} backup, protected again", diag=lambda: json.dumps(st, indent=1)[:3000])
    return st


def test_primary_failure_after_the_prepared_restorer_died(lab, tmp_path):
    """The backup starts rrc-restore in its container in advance
    (failover::Standby). Killed here before the failure, as an OOM kill
    would: the failover sees it gone, starts one itself and the service
    carries on over the same connections with zero errors."""
    name = "prep"
    registry = Path("/var/lib/rrc-lab/b/containers")
    ip = run_service(name, REDIS)
    waiting = []
    for f in registry.glob("*.json"):
        r = json.loads(f.read_text())
        if "restorer started in advance" in str(r.get("restored_from")):
            waiting.append(r["pid"])
    assert len(waiting) == 1, f"expected one restorer waiting on b: {[f.read_text() for f in registry.glob('*.json')]}"
    subprocess.run(["kill", "-KILL", str(waiting[0])], check=True)
    fail_primary_under_load_on(name, ip, "redis", 6379, tmp_path)
    log = Path("/var/lib/rrc-lab/b/agent.log").read_text()
    assert "the restorer started in advance has ended" in log, log[-3000:]


@pytest.mark.parametrize("mode", ["checkpoint", "rr"])
def test_backup_failure_with_a_data_directory_then_a_second_failure(lab, tmp_path, mode):
    """Backup b fails under load: a serves directly, holds redis for as long
    as a copy of its data directory (the AOF) takes, and re-protects onto the
    spare c with that copy plus every change journalled since the hold (the
    first full checkpoint's FILEOPS); then a fails too: c goes live over the
    same client connections, and the AOF on c agrees with what clients were
    told. In rr mode a's process keeps recording when its log's connection
    to b breaks (a spare waits: RRC_RECORD_REPLACEABLE), its log waiting
    for the sink the re-protection hands over (RECORD): c releases replies
    on it and its failover replays it."""
    name = "bkdata"
    out = cli("run", "--name", name, "--primary", "a", "--backup", "b", "--spare", "c", "--mode", mode, "--json",
              "--data-dir", "/data", "--", *AOF_REDIS).stdout
    ip = json.loads(out)["service_ip"]
    wait_until(lambda: status(name).get("checkpoints_committed", 0) > 2, 30, "protected")
    state = tmp_path / "state"
    p = checker("redis", f"{ip}:6379", 14, state)
    time.sleep(random.uniform(1.5, 3.0))
    cli("lab", "kill", "b")
    st = wait_reprotected(name, "a", "c")
    fo = st["primary_view"]["failovers"]
    assert fo[0]["kind"] == "backup failure", fo
    r = fo[0]["reprotected"]
    assert r["new_backup"] == "c", r
    # the service was held for the copy, and only for it
    assert 0 < r["data_copy_pause_ms"] < 10_000 and r["data_copy_bytes"] > 0 and r["data_copy_files"] >= 1, r
    assert r["data_copy_ms"] <= r["data_copy_pause_ms"], r
    print(f"data directory copy: {r['data_copy_bytes']} bytes in {r['data_copy_files']} file(s), "
          f"service paused {r['data_copy_pause_ms']:.1f} ms (cp {r['data_copy_ms']:.1f} ms)")
    copies = list(Path("/var/lib/rrc-lab/a/services", name).glob("data-copy-*"))
    assert len(copies) == 1, copies
    if mode == "rr":
        # a's log reaches c, which releases on it
        wait_until(lambda: (status(name).get("backup_view") or {}).get("stats", {}).get("log", {}).get("received_batches", 0) > 2,
                   20, "a's log at c", diag=lambda: lab_diagnosis(40))
        assert status(name)["backup_view"]["gate"]["log_release"]
        # the recording never stopped: either the log's connection to b
        # failed first (b's kernel reset it) and the library waited for the
        # next sink, or the hand-over replaced it before it failed (b's
        # links were cut before its reset went out: a CI run saw that)
        service_log = Path(f"/var/lib/rrc-lab/logs/{name}.log").read_text(errors="replace")
        assert "recording stopped" not in service_log, lab_diagnosis(40)
        waited = "recording goes on, the log waits for the next backup's" in service_log
        print(f"a's log connection to b {'failed before' if waited else 'was replaced before it failed by'} the hand-over to c")
    time.sleep(random.uniform(1.0, 2.5))
    cli("lab", "kill", "a")
    finish_live_on(p, name, "c", "redis", f"{ip}:6379", state)
    if mode == "rr":
        r = status(name)["primary_view"]["failovers"][-1]["replay"]
        assert r and not r["diverged"] and r["faults"] == 0 and r["reset"] == 0, (r, lab_diagnosis())
    data = "data" if mode == "checkpoint" else "data-live"
    check_aof_copy(Path(f"/var/lib/rrc-lab/c/services/{name}/{data}"), "c", state, tmp_path)


ACCEPT_CLIENT = r'''
import json, socket, sys
ip, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
socks = []
for i in range(n):
    s = socket.create_connection((ip, port), timeout=10)
    s.sendall(b"HELLO %d\n" % i)
    socks.append(s)
print(json.dumps(["%s:%d" % s.getsockname() for s in socks]), flush=True)
out = []
for i, s in enumerate(socks):
    s.settimeout(90)
    buf = b""
    try:
        while not buf.endswith(b"\n"):
            d = s.recv(4096)
            if not d:
                raise ConnectionError("EOF before the reply")
            buf += d
        out.append({"reply": buf.decode().strip()})
    except Exception as e:
        out.append({"error": repr(e)})
print(json.dumps(out), flush=True)
'''


@pytest.mark.parametrize("mode,connect", [("checkpoint", "before"), ("checkpoint", "after"), ("rr", "before"), ("rr", "after")])
def test_failure_between_connect_and_accept(lab, tmp_path, mode, connect):
    """Clients whose handshakes the primary's kernel completed, with their
    requests sent, but that the server had not accept()ed yet: after the
    primary's failure each is rebuilt at the backup and handed to the
    restored server's next accept() (runtime/lib/accept-queue.c), which
    answers on the client's original connection. Connected `before` the
    last checkpoint they are in its TCP table (the listener's accept
    queue); connected `after` it only the gate knows them: rebuilt at 0/0
    (crates/rrc-agent/src/repair_plan.rs). In rr mode the replay's
    accepts take none of them (the server accepted nothing), so they wait
    for the live ones."""
    gate = tmp_path / "gate"  # acceptgate accepts nothing until it exists
    name = f"acq{mode[0]}{connect[0]}"
    # `after`: an epoch long enough to connect and kill between two checkpoints
    epoch = "3s" if connect == "after" else "30ms"
    ip = run_service(name, [str(need(REPO / "runtime" / "build" / "zdtm" / "acceptgate")), "7100", str(gate)],
                     epoch=epoch, extra=("--mode", mode))
    n = 4
    if connect == "after":
        c0 = status(name).get("checkpoints_committed", 0)
        wait_until(lambda: status(name).get("checkpoints_committed", 0) > c0, 20, "a checkpoint")
    with lab_client("python3", "-c", ACCEPT_CLIENT, ip, "7100", str(n)) as p:
        line = p.stdout.readline()
        assert line, f"the client could not connect: {p.stderr.read()[-2000:]}"
        clients = json.loads(line)
        if connect == "before":
            # checkpoints taken while the connections wait in the accept queue
            c0 = status(name).get("checkpoints_committed", 0)
            wait_until(lambda: status(name).get("checkpoints_committed", 0) >= c0 + 3, 20, "3 more checkpoints")
        fo = fail_over_to_b(name)
        gate.touch()
        out, err = p.communicate(timeout=120)
    queued = [c for c in fo["connections"] if c["accept_queue"]]
    assert sorted(c["client"] for c in queued) == sorted(clients), fo["connections"]
    assert all(c["repaired"] and c["after_checkpoint"] == (connect == "after") for c in queued), (queued, fo["steps"])
    replies = json.loads(out.strip().splitlines()[-1])
    for i, (addr, r) in enumerate(zip(clients, replies)):
        # the reply on the original connection; accept() gave the client's
        # address and the flags it was asked for (accept4 and accept alternate)
        assert r.get("reply") == f"REPLY {i} peer={addr} match=1 flags=ok", (i, r, err[-2000:])
    # the listener works for new clients afterwards (no dummy left behind)
    new = cli("lab", "exec", "client", "--", "python3", "-c",
              "import socket,sys; s=socket.create_connection((sys.argv[1], 7100), timeout=10); s.sendall(b'HELLO new\\n');"
              " s.settimeout(10); print(s.recv(4096).decode().strip(), s.getsockname()[1])", ip).stdout.split()
    assert new[:2] == ["REPLY", "new"] and new[2] == f"peer=198.18.0.10:{new[-1]}" and new[3:5] == ["match=1", "flags=ok"], new


# Connections opened after the last checkpoint and used before the
# primary fails, then used again after the failover, on the same
# connections. Not idempotent: the value is made by an add and appends, so
# a request executed twice (say, replayed on a stand-in and then accepted
# again live) shows as a doubled piece. Prints the clients' addresses and
# the values before, waits for a line on stdin, prints the values after.
AFTER_CLIENT = r'''
import json, socket, sys
ip, port, kind, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
def request(s, cmd, *args):
    if kind == "redis":
        s.sendall(b"*%d\r\n" % (1 + len(args)) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in (cmd, *args)))
        end = b"\r\n"
    elif cmd == b"GET":
        s.sendall(b"get %s\r\n" % args[0])
        end = b"END\r\n"
    else:
        verb = {b"SETNX": b"add", b"APPEND": b"append"}[cmd]
        s.sendall(b"%s %s 0 0 %d\r\n%s\r\n" % (verb, args[0], len(args[1]), args[1]))
        end = b"\r\n"
    buf = b""
    while not buf.endswith(end) or (kind == "redis" and buf.startswith(b"$") and buf.count(b"\r\n") < 2):
        d = s.recv(4096)
        if not d:
            raise ConnectionError("EOF: %r" % buf)
        buf += d
    return buf
def value(s, key):
    r = request(s, b"GET", key)
    return r.split(b"\r\n")[1].decode() if r.count(b"\r\n") >= 2 else r.decode()
socks = [socket.create_connection((ip, port), timeout=30) for _ in range(n)]
before = []
for i, s in enumerate(socks):
    k = b"after%d" % i
    request(s, b"SETNX", k, b"a%d-" % i)
    request(s, b"APPEND", k, b"b")
    before.append(value(s, k))
print(json.dumps({"clients": ["%s:%d" % s.getsockname() for s in socks], "before": before}), flush=True)
sys.stdin.readline()
after = []
for i, s in enumerate(socks):
    try:
        k = b"after%d" % i
        v = value(s, k)
        request(s, b"APPEND", k, b"c")
        after.append([v, value(s, k)])
    except Exception as e:
        after.append(["error: " + repr(e)])
print(json.dumps(after), flush=True)
'''


@pytest.mark.parametrize("kind,cmd,port", [("redis", REDIS, 6379), ("memcached", MEMCACHED, 11211)])
def test_connections_opened_after_the_checkpoint_in_rr_mode(lab, tmp_path, kind, cmd, port):
    """rr mode (issue 14 §4; RRC §4.4): clients that connect after the last
    checkpoint and get replies (released on the log) before the primary
    fails: the failover rebuilds their connections at 0/0 from the gate's
    record, the replayed accept takes each at the fd number the primary
    gave it, the replay takes their requests off them and reproduces the
    replies, sending none of their bytes again (each socket stands past
    what its client was sent). Each client carries on over its
    connection: the value it wrote is there, a new write works."""
    name = f"aft{kind[0]}"
    ip = run_service(name, cmd, epoch="3s", extra=("--mode", "rr"))
    n = 4
    c0 = status(name).get("checkpoints_committed", 0)
    wait_until(lambda: status(name).get("checkpoints_committed", 0) > c0, 20, "a checkpoint")
    with lab_client("python3", "-c", AFTER_CLIENT, ip, str(port), kind, str(n), stdin=True) as p:
        line = p.stdout.readline()
        assert line, f"the client failed: {p.stderr.read()[-2000:]}"
        before = json.loads(line)
        fo = fail_over_to_b(name)
        out, err = p.communicate("go\n", timeout=120)
    since = {c["client"]: c for c in fo["connections"] if c["after_checkpoint"]}
    assert sorted(since) == sorted(before["clients"]), (fo["connections"], fo["steps"])
    assert all(c["repaired"] for c in since.values()), fo["connections"]
    r = fo["replay"]
    assert r is not None and r["connections"] >= n and r["faults"] == 0 and r["reset"] == 0, (r, lab_diagnosis())
    # every reply the clients had was reproduced, none sent again
    assert r["skipped_bytes"] >= n and r["sent_bytes"] == 0, (r, lab_diagnosis())
    after = json.loads(out.strip().splitlines()[-1])
    assert before["before"] == [f"a{i}-b" for i in range(n)], before
    # nothing executed twice, nothing lost, the connections carry on
    assert after == [[f"a{i}-b", f"a{i}-bc"] for i in range(n)], (after, err[-2000:], lab_diagnosis())


# One connection made before the last checkpoint (B) and one after it (A),
# driven from stdin: "A" opens A and writes on it, "after" checks both.
DIVERGE_CLIENT = r"""
import json, socket, sys
ip, port = sys.argv[1], int(sys.argv[2])
def call(s, *args):
    s.sendall(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args))
    buf = b""
    while not buf.endswith(b"\r\n") or (buf.startswith(b"$") and buf.count(b"\r\n") < 2 and buf != b"$-1\r\n"):
        d = s.recv(4096)
        if not d:
            raise ConnectionError("EOF: %r" % buf)
        buf += d
    return buf.decode()
b = socket.create_connection((ip, port), timeout=30)
print(json.dumps({"B": "%s:%d" % b.getsockname(), "set": call(b, b"SET", b"pre", b"1")}), flush=True)
sys.stdin.readline()
a = socket.create_connection((ip, port), timeout=30)
print(json.dumps({"A": "%s:%d" % a.getsockname(), "set": call(a, b"SET", b"post", b"1")}), flush=True)
sys.stdin.readline()
out = {}
a.settimeout(10)
try:
    out["A"] = "read " + repr(a.recv(4096))
except ConnectionResetError:
    out["A"] = "reset"
except Exception as e:
    out["A"] = repr(e)
try:
    out["B"] = call(b, b"GET", b"pre")
except Exception as e:
    out["B"] = repr(e)
print(json.dumps(out), flush=True)
"""


def test_a_replay_that_diverges_falls_back_to_the_checkpoint(lab, tmp_path):
    """rr mode (issue 14 §4): a replay that diverges still ends with a live
    service. The backup is made to alter an output kept in its log (after
    the gate released it: as a recording bug would leave it). At the
    failover the replay diverges there; the failover silences the replay's
    sockets (in repair mode their close sends nothing), removes it,
    restores the checkpoint without replay and rebuilds the connections it
    can match: B, idle since before the checkpoint, carries on; A, whose
    reply went out after the checkpoint, is reset at once (not left
    hanging). `rrc status` reports the divergence and the failed recovery."""
    name = "diverge"
    ip = run_service(name, REDIS, epoch="3s", extra=("--mode", "rr"))
    with lab_client("python3", "-c", DIVERGE_CLIENT, ip, "6379", stdin=True) as p:
        first = json.loads(p.stdout.readline() or "{}")
        assert first.get("set") == "+OK\r\n", (first, p.stderr.read()[-2000:] if not first else "")
        c0 = status(name).get("checkpoints_committed", 0)
        wait_until(lambda: status(name).get("checkpoints_committed", 0) > c0, 20, "a checkpoint after B's write")
        cli("fault", name, "alter-next-logged-output")
        p.stdin.write("A\n")
        p.stdin.flush()
        second = json.loads(p.stdout.readline() or "{}")
        assert second.get("set") == "+OK\r\n", second
        fo = fail_over_to_b(name)
        out, err = p.communicate("after\n", timeout=60)
    r = fo["replay"]
    assert r and r["diverged"] and "output whose CRC32C differs" in r["diverged"], (r, lab_diagnosis())
    # the altered entry is in the log itself: the paced replays after the
    # ordered one diverge there too (recovery.rs), then the checkpoint alone
    steps = [s["step"] for s in fo["steps"]]
    assert "the replay diverged: replaying again, paced" in steps, steps
    assert "the paced replay diverged too: replaying paced once more" in steps, steps
    assert any(s.startswith("the paced replay diverged again") for s in steps), steps
    assert r.get("retried") and "CRC32C differs" in r["retried"], r
    conns = {c["client"]: c for c in fo["connections"]}
    assert conns[first["B"]]["repaired"], conns
    a = conns[second["A"]]
    assert not a["repaired"] and a["reset"] and a["after_checkpoint"], conns
    got = json.loads(out.strip().splitlines()[-1])
    assert got == {"A": "reset", "B": "$1\r\n1\r\n"}, (got, err[-2000:], lab_diagnosis())
    text = cli("status", name).stdout
    assert "RECOVERY FAILED" in text and "restored the checkpoint without replay" in text, text
    # live and serving new clients
    new = cli("lab", "exec", "client", "--", "redis-cli", "-h", ip, "GET", "pre").stdout.strip()
    assert new == "1", new


def test_a_replay_that_diverges_is_tried_again_paced(lab, tmp_path):
    """rr mode (recovery.rs): the failover's first replay returns system
    calls in their recorded order; if it diverges (memcached's LRU
    maintainer racing its workers does, now and then: bench/README.md),
    the failover replays once more with the returns paced by their
    recorded gaps too, before it would fall back to the checkpoint alone.
    Here the first replay is made to diverge (`rrc fault NAME
    alter-first-replay`: it gets the log with an output's CRC32C altered;
    the second gets the log as kept): the second replays to the last
    released output and goes live, every connection carries on, zero
    client errors, every acknowledged write there."""
    name = "paced"
    ip, state, p = loaded_rr_redis(name, tmp_path, epoch="2s", seconds=6)
    c = status(name).get("checkpoints_committed", 0)
    wait_until(lambda: status(name).get("checkpoints_committed", 0) > c, 10, "a checkpoint", interval=0.05)
    time.sleep(0.5)
    cli("fault", name, "alter-first-replay")
    fo = fail_over_to_b(name)
    rep = finish(p)
    assert rep["ok"], json.dumps(rep, indent=1) + "\n" + lab_diagnosis()
    r = fo["replay"]
    assert r and r.get("retried") and "output whose CRC32C differs" in r["retried"], (r, lab_diagnosis())
    assert not r["diverged"] and r["events"] > 0 and r["faults"] == 0 and r["reset"] == 0, (r, lab_diagnosis())
    steps = [s["step"] for s in fo["steps"]]
    assert "the replay diverged: replaying again, paced" in steps and steps[-1].startswith("live"), steps
    assert all(c["repaired"] for c in fo["connections"]), fo["connections"]
    verify("redis", f"{ip}:6379", state)
    assert "replayed again, paced" in cli("status", name).stdout


def test_a_restore_that_fails_is_tried_again(lab, tmp_path):
    """rr mode (recovery.rs): a failover whose first restore fails before
    the restored library answers (here `rrc fault NAME
    damage-first-restore`: one byte of the image streamed to it flipped,
    which rrc-restore refuses; a campaign saw a restored memcached crash
    there, bench/README.md) ran nothing of its replay, so it restores
    again, to replay paced, instead of leaving the service down: every
    connection carries on, zero client errors."""
    name = "again"
    ip, state, p = loaded_rr_redis(name, tmp_path, epoch="1s")
    cli("fault", name, "damage-first-restore")
    fo = fail_over_to_b(name)
    rep = finish(p)
    assert rep["ok"], json.dumps(rep, indent=1) + "\n" + lab_diagnosis()
    r = fo["replay"]
    assert r and r.get("retried") and r["retried"].startswith("the restore failed"), (r, lab_diagnosis())
    assert not r["diverged"] and r["faults"] == 0 and r["reset"] == 0, r
    steps = [s["step"] for s in fo["steps"]]
    assert "the restore failed: restoring again to replay paced" in steps and steps[-1].startswith("live"), steps
    assert all(c["repaired"] for c in fo["connections"]), fo["connections"]
    verify("redis", f"{ip}:6379", state)


def test_short_campaign(tmp_path):
    """The short version of the fault-injection campaign (bench/failover_campaign.py,
    issue 4): two primary failures of a redis holding 10 MB, each in a fresh
    lab, under the checking client and the perturb program on the primary;
    every one recovers with zero client errors. The script takes the lab lock
    itself (so this test does not hold it) and removes every lab it made."""
    need(CHECK_BIN)
    script = REPO / "bench" / "failover_campaign.py"
    p = subprocess.run([sys.executable, str(script), "--quick", "--injections", "2", "--servers", "redis",
                        "--out", str(tmp_path), "--rrc", str(need(RRC_BIN)), "--rrc-check", str(CHECK_BIN),
                        "--lock-wait", "900"], capture_output=True, text=True, timeout=1500)
    assert p.returncode == 0, p.stderr[-4000:]
    res = json.loads((tmp_path / "failover_campaign_quick.json").read_text())
    assert (tmp_path / "failover_campaign_quick.png").stat().st_size > 0
    s = res["summary"]["redis"]
    # attempts that failed before their fault (the service never got protected) are replaced by the
    # script and listed in aborted_before_fault: not failovers, not judged here
    assert s["injections"] == 2, json.dumps(s, indent=1)
    assert s["recovered"] == 2 and s["recovery_rate"] == 1.0, json.dumps(s["not_recovered"], indent=1)
    assert s["client_errors"] == 0 and s["client_runs_failed"] == 0, json.dumps(s, indent=1)
    for r in (r for r in res["injections"] if not r.get("aborted")):
        assert r["client"]["ops"] > 0 and r["verify_ok"] and r["answered"], r
        assert r["connections"] == 8 and r["connections_repaired"] == 8, r["failover"]["connections"]
        b = r["breakdown_ms"]
        assert b["detection"] >= 90 and all(b[k] is not None and b[k] >= 0 for k in ("block", "repair", "restore", "routing")), b
        # the client saw the failure: no reply reached it between the
        # failure's declaration and the service going live (the failover's
        # steps after detection; 5 ms for the two clocks). Not the
        # detection itself: the agent times it from the last heartbeat it
        # heard, which a starved sender may have sent well before the kill
        # while replies still flowed (CI saw gaps of 89.5 and 82.8 ms
        # against detections of 90 ms and more)
        assert r["interruption_ms"] >= b["total"] - b["detection"] - 5, (r["interruption_ms"], b)
    assert json.loads(cli("lab", "status", "--json").stdout) == {"up": False}
