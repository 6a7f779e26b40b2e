"""rr mode, as far as it is built (issue 14 §2–3): `rrc run --mode rr` runs
the service recorded, and its library sends the record log straight to the
backup on a session of its own (sealed frames, the MAC computed inside the
process: no agent on the way); the backup verifies every frame and batch
and keeps the log since the last committed checkpoint's cut, trimming it
at every commit. The log writer's release marks say which outputs the log
covers; the backup hands those to its gate, which verifies each against
the server's packets and releases them then, not at the next checkpoint
(a reply's round trip is well under the epoch). A failover replays the
log (test_failover.py's test_primary_failure_in_rr_mode).

For redis and memcached -t 4 under rrc-check load through the gate, on
the lab of test_replication.py: the backup's log session is receiving,
every committed checkpoint's cut has arrived and trimmed the log (the log
kept stays a small part of what was received), every reply was covered by
a mark and verified by the gate with no mismatch, nothing broke, and the
clients' replies all checked out."""
import json
import os
import re
import signal
import sys
from pathlib import Path

import pytest

from conftest import TOOLS, need, wait_until
from test_failover import AOF_REDIS
from test_lab import REPL, lab_exec
from test_lab import rrc as cli
from test_replication import CHECK_BIN, REDIS, client, client_bg, replab, service, why_unprotected  # noqa: F401

LOG_SESSION = TOOLS / "log_session.py"
sys.path.insert(0, str(TOOLS))
from servers import lighttpd_site  # noqa: E402

MEMCACHED = ["memcached", "-t", "4", "-p", "11211", "-U", "0", "-u", "root", "-m", "64"]


@pytest.mark.parametrize("name", ["redis", "memcached"])
def test_the_backup_receives_and_trims_the_record_log(service, name):
    cmd, port = (REDIS, 6379) if name == "redis" else (MEMCACHED, 11211)
    s = service(f"rr{name[:4]}", cmd, epoch="100ms", extra=["--mode", "rr"])
    st = s.wait_committed(more_than=1)
    assert st["mode"] == "rr", st
    chk = client(str(need(CHECK_BIN)), name, "--server", f"{s.ip}:{port}", "--threads", "4",
                 "--duration", "3s", "--json", timeout=120)
    rep = json.loads(chk.stdout)
    assert rep["ok"] and rep["ops"] > 0, rep
    before = st["checkpoints_committed"]
    st = s.wait_committed(more_than=before + 2)
    assert st["protected"], why_unprotected(st)
    log = st["backup_view"]["stats"]["log"]
    assert log["state"] == "receiving" and log["last_error"] is None, log
    assert log["received_batches"] > 0 and log["received_events"] > rep["ops"], (log, rep["ops"])
    # a cut per checkpoint taken; the committed ones trimmed the log
    assert log["cuts"] >= st["checkpoints_committed"], (log, st["checkpoints_committed"])
    assert log["last_cut_committed"] is not None and log["trimmed_batches"] > 0, log
    assert log["kept_bytes"] < log["received_bytes"] / 2, log
    # the primary's side: the same service, recorded (the library's log fd
    # is not the application's: its fds and connections are as before)
    assert st["primary_view"]["stats"]["last_error"] is None, st["primary_view"]["stats"]
    # release marks covered the replies, and the gate found each covered
    # output's bytes, at its offset on its connection, in the server's own
    # packets (CRC32C): the log names exactly what the clients received.
    # and released them on it.
    assert log["outputs_marked"] >= rep["ops"] and log["outputs_dropped"] == 0, (log, rep["ops"])
    cover = st["backup_view"]["gate"]["log"]
    assert cover["outputs"] == log["outputs_marked"], (cover, log)
    assert cover["output_bytes"] >= rep["ops"] * 3, (cover, rep["ops"])  # "+OK\r\n", "STORED\r\n"...
    assert (cover["mismatched"], cover["foreign"], cover["unknown_stream"], cover["unverifiable"]) == (0, 0, 0, 0), cover
    # every byte of every covered output verified, or covered by a commit
    # before its log came (a thread parked by a checkpoint between a reply
    # and the wait that sends its log): the load is over, no output waits
    # for its packets any more; most went out on the log
    assert cover["verified_bytes"] + cover["committed_first_bytes"] == cover["output_bytes"], cover
    assert cover["verified_bytes"] > cover["output_bytes"] / 2, cover
    assert st["backup_view"]["gate"]["log_release"] and cover["released_packets"] > 0, cover


def test_replies_leave_before_the_next_checkpoint(service):
    """RRC's point (§3): in rr mode a reply waits for its log at the
    backup, not for a checkpoint. With 1 s epochs, every reply of a
    checking client comes back well within the epoch (checkpoint mode
    holds each one until the commit of its epoch's checkpoint: hundreds of
    ms); the latencies themselves are measured in bench/, not here."""
    s = service("rrlat", REDIS, epoch="1s", extra=["--mode", "rr"])
    s.wait_committed(more_than=0)
    chk = client(str(need(CHECK_BIN)), "redis", "--server", f"{s.ip}:6379", "--threads", "1", "--rate", "50",
                 "--duration", "3s", "--json", timeout=120)
    rep = json.loads(chk.stdout)
    assert rep["ok"] and rep["ops"] >= 100, rep
    # a reply held for a commit would take up to the epoch (1000 ms)
    assert rep["latency_us"]["max"] < 250_000, rep["latency_us"]
    st = s.status()
    assert st["backup_view"]["gate"]["log"]["released_packets"] >= rep["ops"], st["backup_view"]["gate"]["log"]


def test_a_dual_stack_server_s_replies_leave_before_the_next_checkpoint(service, tmp_path):
    """A server listening on [::] with IPv4-mapped addresses (lighttpd's
    server.v4mapped) sees its IPv4 clients as ::ffff:a.b.c.d: the library
    gives its outputs their IPv4 connection all the same, which is what
    the gate knows them by, so they are released on their log too (were
    they not, each would wait for the next commit: up to the 1 s epoch)."""
    argv, root = lighttpd_site(tmp_path, {"f.bin": os.urandom(3000)}, bind="[::]", extra='server.v4mapped = "enable"')
    s = service("rr6", argv, epoch="1s", extra=["--mode", "rr"])
    s.wait_committed(more_than=0)
    chk = client(str(need(CHECK_BIN)), "http", "--url", f"http://{s.ip}/f.bin", "--file", str(root / "f.bin"),
                 "--threads", "1", "--rate", "50", "--duration", "3s", "--json", timeout=120)
    rep = json.loads(chk.stdout)
    assert rep["ok"] and rep["ops"] >= 100, rep
    assert rep["latency_us"]["max"] < 250_000, rep["latency_us"]
    log = s.status()["backup_view"]["gate"]["log"]
    assert log["released_packets"] >= rep["ops"] and log["unknown_stream"] == 0, log


def test_a_server_that_closes_its_connections_is_not_held_to_the_epoch(service, tmp_path):
    """A server that closes each connection after its response (ab without
    -k, HTTP/1.0 clients, Connection: close): the client reads until the
    server's FIN. The library logs the program's shutdown or close as a FIN
    output, so the gate releases the FIN on the log with the bytes before
    it (without, each FIN waits for the next commit: up to the 1 s epoch,
    ab's time per request ~0.5-1 s). ab, the real client, and rrc-check
    --close, which checks each body, reads to the end of the stream and
    counts a reset as an error."""
    argv, root = lighttpd_site(tmp_path, {"f.bin": os.urandom(3000)})
    s = service("rrfin", argv, epoch="1s", extra=["--mode", "rr"])
    s.wait_committed(more_than=0)
    ab = client("ab", "-n", "40", "-c", "1", f"http://{s.ip}/f.bin", timeout=120)
    m = re.search(r"Time per request:\s+([\d.]+) \[ms\] \(mean\)", ab.stdout)
    failed = re.search(r"Failed requests:\s+(\d+)", ab.stdout)
    assert m and failed and failed.group(1) == "0", ab.stdout
    assert float(m.group(1)) < 100, ab.stdout
    chk = client(str(need(CHECK_BIN)), "http", "--close", "--url", f"http://{s.ip}/f.bin", "--file", str(root / "f.bin"),
                 "--threads", "2", "--rate", "50", "--duration", "3s", "--json", timeout=120)
    rep = json.loads(chk.stdout)
    assert rep["ok"] and rep["ops"] >= 100, rep
    assert rep["latency_us"]["max"] < 250_000, rep["latency_us"]
    log = s.status()["backup_view"]["gate"]["log"]
    assert log["verified_fins"] >= 40 + rep["ops"] and log["mismatched"] == 0, log


def shadow_stats(s) -> dict:
    """The backup's shadow-replay counters ({} until it reports them)."""
    return (s.status().get("backup_view") or {}).get("stats", {}).get("shadow") or {}


def test_shadow_replay_verifies_epochs_and_reports_a_divergence(service):
    """Shadow replay (issue 14 §6, `rrc run --verify-replay`): the backup
    restores committed checkpoints in a sandbox of its own (a network
    namespace nothing is routed to) and replays the log to the next
    checkpoint's cut, every output compared with the log. Under a checking
    client, with 1 s epochs (a capture per commit, each replay while the
    next image is captured), epochs are verified. (redis's jemalloc
    background thread races with the workers on atomic counters, which no
    recording sees: an epoch may diverge on its own now and then, which is
    what the shadow is there to measure; a CI run saw one.) Then an output
    altered on its way into the backup's log (as a bug of the recording
    would leave it): a shadow replay diverges on that output's CRC32C and
    `rrc status` says where, while the service and its clients carry on
    untouched (their replies were released, the primary never replays)."""
    s = service("rrsh", REDIS, epoch="1s", extra=["--mode", "rr", "--verify-replay"])
    s.wait_committed(more_than=0)

    p = client_bg(str(need(CHECK_BIN)), "redis", "--server", f"{s.ip}:6379", "--threads", "4", "--rate", "200",
                  "--duration", "14s", "--json")
    try:
        wait_until(lambda: shadow_stats(s).get("verified", 0) >= 2, 30, "two epochs verified", interval=0.2, diag=lambda: json.dumps(shadow_stats(s)))
        sh = shadow_stats(s)
        assert sh["last_events"] > 0 and sh["verified"] >= 2, sh
        before = sh["diverged"]
        cli("fault", "rrsh", "alter-next-logged-output")
        wait_until(lambda: shadow_stats(s).get("diverged", 0) > before, 30, "the altered epoch's shadow replay diverged",
                   interval=0.2, diag=lambda: json.dumps(shadow_stats(s)))
        sh = shadow_stats(s)
        assert "CRC32C" in (sh["last_divergence"] or ""), sh
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    rep = json.loads(out)
    assert rep["ok"] and rep["ops"] > 1000, (rep, err[-2000:])
    st = s.status()
    assert st["protected"], why_unprotected(st)
    # the sandbox's namespace is gone between replays, and no shadow
    # container outlives its replay (at most the one running)
    assert len([n for n in os.listdir("/run/netns") if n.endswith("-shadow")]) <= 1


def test_shadow_replay_with_a_data_directory(service):
    """Shadow replay of a service whose files live in its data directory
    (redis with its append-only file there, every write fsynced): each
    capture copies the backup's committed copy of the directory beside the
    image and the sandbox replays on that copy. Epochs are verified while
    clients write (without the copy the restored redis cannot reopen its
    AOF files: the restore fails and nothing is verified)."""
    s = service("rrshd", AOF_REDIS, epoch="1s", extra=["--mode", "rr", "--verify-replay", "--data-dir", "/data"])
    s.wait_committed(more_than=0)

    p = client_bg(str(need(CHECK_BIN)), "redis", "--server", f"{s.ip}:6379", "--threads", "4", "--rate", "200",
                  "--duration", "8s", "--json")
    try:
        wait_until(lambda: shadow_stats(s).get("verified", 0) >= 2, 30, "two epochs verified with the data directory",
                   interval=0.2, diag=lambda: json.dumps(shadow_stats(s)))
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    sh = shadow_stats(s)
    assert sh["failed"] == 0 and sh["last_error"] is None, sh
    assert sh["last_events"] > 0, sh
    rep = json.loads(out)
    assert rep["ok"] and rep["ops"] > 500, (rep, err[-2000:])
    st = s.status()
    assert st["protected"], why_unprotected(st)


def rejected(host: str) -> tuple[dict, list]:
    st = json.loads(cli("status", "--json").stdout)
    sec = next(a for a in st["agents"] if a["host"] == host)["security"]
    return sec["rejected"], sec["recent"]


def test_a_log_session_from_a_host_that_is_not_the_primary_is_refused(service):
    """Host c holds the deployment's key (its handshake passes) but is not
    the service's primary: the log session it opens for the service is
    refused, counted as an unexpected frame with the reason (the primary's
    name) and changes nothing of the log the backup keeps from a."""
    s = service("rrsec", REDIS, epoch="100ms", extra=["--mode", "rr"])
    s.wait_committed(more_than=1)
    before = rejected("b")[0].get("unexpected_frame", 0)
    out = lab_exec("c", sys.executable, str(LOG_SESSION), "--target", f"{REPL['b']}:7400",
                   "--key-file", "/run/rrc-lab/agent.key", "--host", "c", "--service", s.name, "--header")
    assert json.loads(out.stdout)["handshake"] == "ok", out.stdout
    wait_until(lambda: rejected("b")[0].get("unexpected_frame", 0) == before + 1, 10,
               "b to count the refused log session", diag=lambda: json.dumps(rejected("b")))
    recent = [r for r in rejected("b")[1] if "log session" in json.dumps(r)]
    assert recent and "whose primary is a" in json.dumps(recent[-1]), recent
    committed = s.status()["checkpoints_committed"]
    st = s.wait_committed(more_than=committed)
    log = st["backup_view"]["stats"]["log"]
    assert log["state"] == "receiving" and log["last_error"] is None and log["received_batches"] > 0, log


def peer_threads(host: str) -> list[str]:
    """The agent of `host`'s threads serving peer sessions: each is named
    by what it carries once its first frame says (replication, log)."""
    st = json.loads(cli("status", "--json").stdout)
    pid = next(a for a in st["agents"] if a["host"] == host)["agent_pid"]
    names = []
    for t in Path(f"/proc/{pid}/task").iterdir():
        try:
            names.append((t / "comm").read_text().strip())
        except OSError:
            pass  # a thread that ended meanwhile
    return sorted(n for n in names if n in ("peer-conn", "repl-in", "log-in"))


def test_stopping_the_backup_ends_its_log_session_even_if_the_primary_never_closes_it(replab):  # noqa: F811
    """The backup's reader of a log session waits for the next batch with
    no timeout; stopping the backup (as a failover does) shuts its socket
    down, so that no thread of its agent is left waiting on a primary that
    never closes the connection (here: its process frozen with SIGSTOP, as
    good as a host that died without a word)."""
    # the session threads of the services of earlier tests end soon after
    # their stop (a CI run found one still there at once)
    wait_until(lambda: peer_threads("b") == [], 10, "no session threads on b", diag=lambda: str(peer_threads("b")))
    cli("run", "--name", "rrstop", "--primary", "a", "--backup", "b", "--mode", "rr", "--epoch", "100ms",
        "--failure-timeout", "60s", "--", *REDIS)
    st = {}

    def receiving():
        nonlocal st
        st = json.loads(cli("status", "rrstop", "--json").stdout)
        return (st.get("backup_view") or {}).get("stats", {}).get("log", {}).get("state") == "receiving"
    wait_until(receiving, 30, "the log session", diag=lambda: json.dumps(st)[:2000])
    assert peer_threads("b") == ["log-in", "repl-in"], peer_threads("b")  # the replication and the log session
    pid = st["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        cli("stop", "rrstop", "--agent", "/run/rrc-lab/b/agent.sock")
        wait_until(lambda: peer_threads("b") == [], 10, "the backup's session threads to end",
                   diag=lambda: str(peer_threads("b")))
    finally:
        os.kill(pid, signal.SIGCONT)
        cli("stop", "rrstop", check=False)
