"""Partition campaign (issue 15): the scenarios of tests/test_partitions.py,
repeated at random moments, each checked from the client side.

Each round: a fresh lab (etcd on e1, e2, e3), redis protected on a with its
backup on b in rr mode, `rrc-check shared redis` from the client host (4
connections writing and reading 8 shared keys, unique values, every
operation's interval recorded); at a random moment one scenario:

- cut-ab: a and b deaf to each other for `--hold` s, then healed (`cut a b`
  or `cut b a` at random: the one named first suspects first);
- cut-a-etcd: a cut from every etcd member, then healed;
- isolate-b: b deaf to everyone, then healed;
- flap-ab: the a-b cut made and healed every 30-400 ms for `--hold` s;
- lose-etcd-e1: host e1 (one of the three etcd members) killed;
- freeze-a: every process of a frozen (cgroup freezer) for `--hold` s.

Checked per round: the client's history is linearizable (`rrc-check`'s
checker: no two hosts released replies for the service, no acknowledged
write lost), no client error, and at the end exactly one host is the
service's acting primary while the other has stood down (or, with nothing
removed, both act in view 1). Reported: rounds passed per scenario, the
longest client-visible pause, the final view.

Reproduce: `python3 bench/partition_campaign.py [--rounds 30] [--scenarios
cut-ab,...] [--seed N] [--out bench/results/partition_campaign]` (root;
`make` first; ~35 s a round). Takes the lab lock. Writes OUT.json, OUT.png
and, for a failed round, its history (OUT_failures/).
"""
import argparse
import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchlib import REPO, RRC_BIN as RRC, lab_lock, lab_parts, machine_description, rrc_cli as cli, run_main, write_results
from checkpoint_pause import BenchError, log

CHECK = REPO / "target" / "release" / "rrc-check"
REDIS = ["redis-server", "--save", "", "--appendonly", "no", "--port", "6379", "--protected-mode", "no"]
SCENARIOS = ("cut-ab", "cut-a-etcd", "isolate-b", "flap-ab", "lose-etcd-e1", "freeze-a")


def parts(name, skip=()):
    """{host: (role, standing, view number)} from each reachable agent."""
    return {h: (p["role"], (p.get("view") or {}).get("standing"), (p.get("view") or {}).get("number"))
            for h, p in lab_parts(name, skip=skip).items()}


def settled(name, timeout=40):
    """The parts once one host acts as primary and the other is gone or
    acting as its backup in the same view (None if not within timeout)."""
    deadline = time.monotonic() + timeout
    ps = {}
    while time.monotonic() < deadline:
        ps = parts(name)
        acting = [h for h, p in ps.items() if p[0] == "primary" and p[1] == "acting"]
        if len(acting) == 1:
            others = [h for h in ps if h != acting[0]]
            if not others or (ps[others[0]][0] == "backup" and ps[others[0]][1] == "acting" and ps[others[0]][2] == ps[acting[0]][2]):
                return ps
        time.sleep(0.3)
    return None


def inject(scenario, hold, rnd, frozen):
    if scenario == "cut-ab":
        # the host named first stops hearing the other first (its rules go
        # in first) and so suspects first: both orders, by turns
        cli("lab", "cut", *rnd.choice([("a", "b"), ("b", "a")]))
        time.sleep(hold)
        cli("lab", "heal")
    elif scenario == "cut-a-etcd":
        cli("lab", "cut", "a", "etcd")
        time.sleep(hold)
        cli("lab", "heal")
    elif scenario == "isolate-b":
        cli("lab", "cut", "b", "all")
        time.sleep(hold)
        cli("lab", "heal")
    elif scenario == "flap-ab":
        end = time.monotonic() + hold
        while time.monotonic() < end:
            cli("lab", "cut", "a", "b")
            time.sleep(rnd.uniform(0.03, 0.4))
            cli("lab", "heal")
            time.sleep(rnd.uniform(0.03, 0.4))
    elif scenario == "lose-etcd-e1":
        cli("lab", "kill", "e1")
    elif scenario == "freeze-a":
        cli("lab", "freeze", "a")
        frozen.add("a")
        try:
            time.sleep(hold)
        finally:
            cli("lab", "thaw", "a")
            frozen.discard("a")


def one_round(i, scenario, a, rnd, workdir):
    name = "kv"
    rec = {"round": i, "scenario": scenario}
    cli("lab", "down")
    frozen = set()
    try:
        cli("lab", "up")
        ip = json.loads(cli("run", "--name", name, "--primary", "a", "--backup", "b", "--mode", "rr", "--json", "--", *REDIS))["service_ip"]
        if not settled(name, 30):
            raise BenchError("the service did not settle before the fault")
        hist = workdir / f"history-{i}.jsonl"
        seconds = a.load_s
        p = subprocess.Popen([str(RRC), "lab", "exec", "client", "--", str(CHECK), "shared", "redis", "--server", f"{ip}:6379", "--threads", "4",
                              "--keys", "8", "--duration", f"{seconds}s", "--rate", str(a.rate), "--history", str(hist), "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        at = rnd.uniform(1.5, 4.0)
        time.sleep(at)
        rec["at_s"] = round(at, 2)
        inject(scenario, a.hold, rnd, frozen)
        out, err = p.communicate(timeout=seconds + 120)
        rep = json.loads(out) if out.strip() else {}
        ps = settled(name)
        rec.update({
            "linearizable": rep.get("linearizable"),
            "explanation": rep.get("explanation"),
            "client_errors": sum((rep.get("errors") or {}).values()) if rep else None,
            # by kind, and the first of them: what a failed round's client saw
            "client_error_kinds": rep.get("errors"),
            "client_error_samples": ((rep.get("load") or rep).get("error_samples") or [])[:4],
            "ops": rep.get("history_ops"),
            "max_pause_ms": rep.get("max_pause_ms"),
            "final_parts": ps,
            "one_primary": ps is not None,
        })
        rec["passed"] = rep.get("linearizable") is True and rec["client_errors"] == 0 and ps is not None
        if not rec["passed"]:
            keep = Path(a.out + "_failures")
            keep.mkdir(parents=True, exist_ok=True)
            if hist.exists():
                shutil.copy(hist, keep / f"round-{i}-{scenario}.jsonl")
            for h in ("a", "b"):
                log_ = Path(f"/var/lib/rrc-lab/{h}/agent.log")
                if log_.exists():
                    shutil.copy(log_, keep / f"round-{i}-{scenario}-{h}-agent.log")
            rec["client_stderr"] = err[-2000:]
        return rec
    finally:
        if frozen:
            cli("lab", "thaw", "a", check=False)
        cli("lab", "down", check=False)


def plot(path, data):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = data["rounds"]
    scen = [s for s in SCENARIOS if any(r["scenario"] == s for r in rows)]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    passed = [sum(1 for r in rows if r["scenario"] == s and r["passed"]) for s in scen]
    total = [sum(1 for r in rows if r["scenario"] == s) for s in scen]
    ax1.bar(scen, total, color="0.8", label="rounds")
    ax1.bar(scen, passed, color="tab:green", label="passed")
    ax1.set_title("rounds passed (linearizable, no client error, one primary)", fontsize=9)
    ax1.tick_params(axis="x", rotation=30, labelsize=8)
    ax1.legend(fontsize=8)
    for k, s in enumerate(scen):
        ys = [r["max_pause_ms"] for r in rows if r["scenario"] == s and r.get("max_pause_ms") is not None]
        ax2.scatter([k] * len(ys), ys, s=12)
    ax2.set_xticks(range(len(scen)), scen, rotation=30, fontsize=8)
    ax2.set_ylabel("longest client wait, ms")
    ax2.set_yscale("log")
    fig.suptitle(f"Partition campaign, redis rr, {data['machine']['date_utc']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--hold", type=float, default=3.0, help="how long a cut or a freeze lasts, s")
    ap.add_argument("--load-s", type=int, default=12)
    ap.add_argument("--rate", type=int, default=400)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--lock-wait", type=float, default=600)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "partition_campaign"))
    a = ap.parse_args()
    scen = [s for s in a.scenarios.split(",") if s]
    if any(s not in SCENARIOS for s in scen):
        raise BenchError(f"scenarios are {', '.join(SCENARIOS)}")
    for b in (RRC, CHECK):
        if not b.exists():
            raise BenchError(f"{b} is missing: `make` first")
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    rnd = random.Random(seed)
    machine = machine_description()
    workdir = Path("/tmp") / f"rrc-partition-campaign-{seed}"
    workdir.mkdir(parents=True, exist_ok=True)
    rounds = []
    try:
        with lab_lock(a.lock_wait):
            for i in range(a.rounds):
                s = scen[i % len(scen)]
                r = one_round(i, s, a, rnd, workdir)
                log(f"round {i} {s}: {'passed' if r['passed'] else 'FAILED'}, linearizable {r.get('linearizable')}, "
                    f"errors {r.get('client_errors')}, longest wait {r.get('max_pause_ms')} ms, parts {r.get('final_parts')}")
                rounds.append(r)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    summary = {s: {"rounds": sum(1 for r in rounds if r["scenario"] == s), "passed": sum(1 for r in rounds if r["scenario"] == s and r["passed"]),
                   "max_pause_ms_max": max([r["max_pause_ms"] or 0 for r in rounds if r["scenario"] == s] or [0])} for s in scen}
    data = {"command": " ".join(sys.argv), "seed": seed, "machine": machine,
            "config": {"rounds": a.rounds, "hold_s": a.hold, "load_s": a.load_s, "rate": a.rate, "mode": "rr", "lease_ms": 1000},
            "summary": summary, "rounds": rounds}
    write_results(a.out, data, plot)
    for s, v in summary.items():
        print(f"{s}: {v['passed']}/{v['rounds']} passed, longest client wait {v['max_pause_ms_max']:.0f} ms")


if __name__ == "__main__":
    run_main(main)
