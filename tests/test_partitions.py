"""No split brain (issue 15; docs/failover.md "Views and fencing"): with
the lab's etcd cluster (a member on each of e1, e2, e3), a service protected on a
with its backup on b goes through network partitions, a flapping link,
the loss of an etcd member and a frozen primary, and at no time do two
hosts release replies for it.

Checked from the client side: `rrc-check shared` runs several connections
that write and read the SAME keys (unique values) and records every
operation's invocation and completion; the history must be linearizable
(a second host serving would show as a read of a value the other's
writes overwrote, or a write lost), and every connection must carry on
with zero errors. From the agents' side: at the end exactly one host
serves the service, in the view etcd holds, and the other stood down.

Each test builds a fresh lab under the lab lock; `rrc lab down` removes
the cuts, thaws nothing it need not (it kills the frozen processes) and
removes etcd's data.
"""
import json
import random
import subprocess
import time

import pytest

from conftest import REPO, RRC_BIN, need, wait_until
from test_lab import AGENT_TLS, lab_locked
from test_lab import rrc as cli

CHECK_BIN = REPO / "target" / "release" / "rrc-check"
REDIS = ["redis-server", "--save", "", "--appendonly", "no", "--port", "6379", "--protected-mode", "no"]
# Shared keys and connections: few keys so that the connections meet on
# them, a modest rate so that the history stays cheap to check.
THREADS, KEYS, RATE = 4, 8, 400


@pytest.fixture
def lab():
    with lab_locked():
        cli("lab", "up")
        yield


def agent_status(host):
    try:
        p = cli("status", "--agent", f"/run/rrc-lab/{host}/agent.sock", "--json", check=False, timeout=8)
    except subprocess.TimeoutExpired:
        return None
    return json.loads(p.stdout) if p.returncode == 0 else None


FROZEN = set()


def parts(name):
    """{host: (role, view standing, view number)} of every agent that has
    a part in `name` (an unreachable or frozen agent is left out)."""
    out = {}
    for h in ("a", "b", "c"):
        st = None if h in FROZEN else agent_status(h)
        if not st:
            continue
        for s in st.get("services", []):
            if s["name"] != name:
                continue
            for key in ("primary_view", "backup_view"):
                v = s.get(key)
                if v and v["host"] == h:
                    view = v.get("view") or {}
                    out[h] = (v["role"], view.get("standing"), view.get("number"))
    return out


def diagnosis(name, lines=40) -> str:
    from test_failover import lab_diagnosis
    return f"parts: {parts(name)}\n" + lab_diagnosis(lines)


def start_service(name, extra=()):
    out = cli("run", "--name", name, "--primary", "a", "--backup", "b", "--mode", "rr", "--json", *extra, "--", *REDIS).stdout
    ip = json.loads(out)["service_ip"]
    wait_until(lambda: parts(name).get("a", (None, None))[1] == "acting" and parts(name).get("b", (None, None))[1] == "acting",
               30, "both hosts acting in view 1", diag=lambda: diagnosis(name))
    wait_until(lambda: json.loads(cli("status", name, "--json").stdout).get("checkpoints_committed", 0) > 2, 30, "protected")
    return ip


def shared_load(ip, seconds, history):
    return subprocess.Popen(
        [str(need(RRC_BIN)), "lab", "exec", "client", "--", str(need(CHECK_BIN)), "shared", "redis", "--server", f"{ip}:6379",
         "--threads", str(THREADS), "--keys", str(KEYS), "--duration", f"{seconds}s", "--rate", str(RATE),
         "--history", str(history), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def loaded(name, tmp_path, seconds, warmup=3):
    """The service started, `rrc-check shared` on it for `seconds`, after
    `warmup` s of it: (the client process, its history file)."""
    ip = start_service(name)
    hist = tmp_path / "history.jsonl"
    p = shared_load(ip, seconds, hist)
    time.sleep(warmup)
    return p, hist


def judge(p, name, history, timeout=180):
    out, err = p.communicate(timeout=timeout)
    assert out.strip(), f"rrc-check printed nothing (exit {p.returncode}): {err[-2000:]}\n{diagnosis(name)}"
    rep = json.loads(out)
    assert rep.get("linearizable") is True, f"NOT LINEARIZABLE (history kept in {history}): {json.dumps(rep)[:3000]}\n{diagnosis(name)}"
    assert sum(rep["errors"].values()) == 0, f"client errors: {json.dumps(rep['errors'])}\n{diagnosis(name)}"
    assert rep["ops"] > 100, rep
    return rep


def one_serves(name, expect_primary=None, view_at_least=1):
    """Exactly one host has the service as an acting primary, in the view
    etcd holds; returns it."""
    def settled():
        ps = parts(name)
        acting = [h for h, (role, standing, _) in ps.items() if role == "primary" and standing == "acting"]
        return acting[0] if len(acting) == 1 and ps[acting[0]][2] >= view_at_least else None
    h = wait_until(settled, 30, "one acting primary", interval=0.2, diag=lambda: diagnosis(name))
    if expect_primary:
        assert h == expect_primary, diagnosis(name)
    return h


def test_without_etcd_status_says_there_is_no_fencing():
    with lab_locked():
        cli("lab", "up", "--no-etcd")
        cli("run", "--name", "nofence", "--primary", "a", "--backup", "b", "--", *REDIS)
        text = cli("status", "nofence").stdout
        assert "NO FENCING" in text, text


def test_views_in_etcd_and_a_second_run_of_the_service_is_refused(lab):
    name = "kv"
    p = cli("run", "--name", "short", "--primary", "a", "--backup", "b", "--lease", "100ms", "--", *REDIS, check=False)
    assert p.returncode != 0 and "lease of 100 ms" in p.stderr, p.stderr
    start_service(name, extra=("--lease", "1500ms"))
    st = cli("status", name).stdout
    assert "view 1 (primary a, backup b)" in st and "ACTING" in st and "lease 1500 ms" in st, st
    # the view is etcd's: the same service started from c (which holds no
    # part of it) is refused there
    p = cli("run", "--name", name, "--primary", "c", "--backup", "a", "--", *REDIS, check=False)
    assert p.returncode != 0 and "already has a view in etcd" in (p.stdout + p.stderr), p.stdout + p.stderr
    cli("stop", name)
    # stopped: the view is gone, the name is free again
    got = cli("lab", "exec", "a", "--", "etcdctl", "--endpoints", "https://198.19.0.11:2379", *AGENT_TLS, "get", "--prefix", "/rrc/v1/services/", timeout=30).stdout
    assert got.strip() == "", got


def test_a_view_left_behind_is_shown_and_removed_by_its_revision(lab):
    """`rrc stop` while the primary cannot reach etcd leaves the view
    behind; `rrc run` of the name is then refused, naming the way out;
    `rrc view show` gives the revision, and `rrc view remove` removes the
    view only at that revision and only when no agent runs the service."""
    name = "left"
    start_service(name)
    shown = json.loads(cli("view", "show", name, "--json").stdout)
    [v] = shown["views"]
    assert (v["number"], v["primary"], v["backup"]) == (1, "a", "b"), shown
    assert all(e.startswith("https://") for e in shown["etcd"]), shown
    p = cli("view", "remove", name, "--revision", str(v["revision"]), check=False)
    assert p.returncode != 0 and "still runs on" in p.stderr, p.stderr
    assert name in cli("view", "list").stdout
    cli("lab", "cut", "a", "etcd")
    cli("stop", name)
    cli("lab", "heal")
    [left] = json.loads(cli("view", "show", name, "--json").stdout)["views"]
    assert left["revision"] >= v["revision"], left
    p = cli("run", "--name", name, "--primary", "a", "--backup", "b", "--", *REDIS, check=False)
    err = p.stdout + p.stderr
    assert p.returncode != 0 and f"rrc view remove {name} --revision {left['revision']}" in err, err
    p = cli("view", "remove", name, "--revision", str(left["revision"] - 1), check=False)
    assert p.returncode != 0 and f"is at revision {left['revision']}" in p.stderr, p.stderr
    assert "removed" in cli("view", "remove", name, "--revision", str(left["revision"])).stdout
    p = cli("view", "show", name, check=False)
    assert p.returncode != 0 and "has no view" in p.stdout, p.stdout
    start_service(name)
    cli("stop", name)


def test_replication_link_cut_one_host_goes_on_the_other_stands_down(lab, tmp_path):
    name = "kv"
    p, hist = loaded(name, tmp_path, 14)
    cli("lab", "cut", "a", "b")
    winner = one_serves(name, view_at_least=2)
    loser = "b" if winner == "a" else "a"
    # one look at the parts per try: the loser may go between two
    wait_until(lambda: parts(name).get(loser, (None, "gone"))[1] in ("fenced", "stood_down", "gone"), 30,
               f"{loser} fenced or gone", interval=0.2, diag=lambda: diagnosis(name))
    time.sleep(2)
    cli("lab", "heal")
    wait_until(lambda: loser not in parts(name), 30, f"{loser} stood down", interval=0.2, diag=lambda: diagnosis(name))
    judge(p, name, hist)
    assert one_serves(name) == winner


def test_primary_cut_from_etcd_only_hands_over_to_the_backup(lab, tmp_path):
    name = "kv"
    p, hist = loaded(name, tmp_path, 14)
    cli("lab", "cut", "a", "etcd")
    # a's lease runs out, a fences itself and falls silent; b takes over
    one_serves(name, expect_primary="b", view_at_least=2)
    assert parts(name).get("a", (None, "fenced"))[1] in ("fenced", "stood_down"), diagnosis(name)
    time.sleep(2)
    cli("lab", "heal")
    wait_until(lambda: "a" not in parts(name), 30, "a stood down after the heal", interval=0.2, diag=lambda: diagnosis(name))
    judge(p, name, hist)
    # b's failover came after its view change, with no lease to wait out:
    # the service IP was b's all along
    fo = json.loads(cli("status", name, "--json").stdout)["primary_view"]["failovers"]
    vc = fo[-1].get("view_change") if fo else None
    assert vc and vc["view"] >= 2 and vc["lease_wait_ms"] < 1, fo


def test_backup_isolated_the_primary_takes_the_ip_after_its_lease(lab, tmp_path):
    name = "kv"
    p, hist = loaded(name, tmp_path, 14)
    cli("lab", "cut", "b", "all")
    one_serves(name, expect_primary="a", view_at_least=2)
    time.sleep(2)
    cli("lab", "heal")
    wait_until(lambda: "b" not in parts(name), 30, "b stood down after the heal", interval=0.2, diag=lambda: diagnosis(name))
    judge(p, name, hist)
    fo = json.loads(cli("status", name, "--json").stdout)["primary_view"]["failovers"]
    assert fo and fo[-1]["kind"] == "backup failure", fo
    # the timeline shows the view change and the wait for b's lease (1 s,
    # plus the drift bound) before a took the service IP
    vc = fo[-1].get("view_change")
    assert vc and vc["view"] >= 2 and vc["lease_wait_ms"] >= 1000, fo[-1]
    assert f"view {vc['view']} installed in etcd" in cli("status", name).stdout


def test_flapping_replication_link(lab, tmp_path):
    name = "kv"
    p, hist = loaded(name, tmp_path, 16, warmup=2)
    rnd = random.Random()
    end = time.monotonic() + 7
    while time.monotonic() < end:
        cli("lab", "cut", "a", "b")
        time.sleep(rnd.uniform(0.03, 0.4))
        cli("lab", "heal")
        time.sleep(rnd.uniform(0.03, 0.4))
    judge(p, name, hist)
    one_serves(name)


def test_losing_one_etcd_member_changes_nothing(lab, tmp_path):
    name = "kv"
    p, hist = loaded(name, tmp_path, 10, warmup=2)
    # (whichever member leads: the two others elect one within 500 ms)
    cli("lab", "kill", "e1")
    time.sleep(4)
    judge(p, name, hist)
    ps = parts(name)
    assert ps.get("a", (None,))[0] == "primary" and ps.get("b", (None,))[0] == "backup", diagnosis(name)
    assert ps["a"][1:] == ("acting", 1) and ps["b"][1:] == ("acting", 1), diagnosis(name)


def test_frozen_primary_past_its_lease_is_replaced_and_stands_down_when_thawed(lab, tmp_path):
    name = "kv"
    p, hist = loaded(name, tmp_path, 14)
    cli("lab", "freeze", "a")
    FROZEN.add("a")
    try:
        one_serves(name, expect_primary="b", view_at_least=2)
        # `rrc status` asks every agent at once: the frozen one costs its
        # timeout (10 s), is named, and the others are shown
        t = time.monotonic()
        st = json.loads(cli("status", "--json", timeout=40).stdout)
        took = time.monotonic() - t
        down = {h["host"]: h for h in st["agents"] if not h["reachable"]}
        assert set(down) == {"a"} and "did not answer within" in down["a"]["error"], st["agents"]
        assert took < 25, f"rrc status took {took:.1f} s with one agent frozen"
        assert any(s["name"] == name for s in st["services"]), st
        time.sleep(1.5)
    finally:
        FROZEN.discard("a")
        cli("lab", "thaw", "a")
    wait_until(lambda: "a" not in parts(name), 30, "a stood down once thawed", interval=0.2, diag=lambda: diagnosis(name))
    judge(p, name, hist)
