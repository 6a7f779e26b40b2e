"""False suspicions (issue 15 §3): how often a live peer is taken for a
failed one, with views in etcd, on this shared 2-CPU machine.

Nothing is ever killed here: every suspicion is false. For each condition,
a fresh lab (etcd on e1, e2, e3), redis protected on a with its backup on
b in rr mode (100 ms epochs), `rrc-check redis` from the client host at a
fixed rate, for `--minutes` minutes; then each agent's view counters from
`rrc status --json`: suspicions (silences of the peer that started a view
change), false suspicions (those cancelled because the peer was heard
again before the change applied), view changes (needless ones: the peer
was alive), fences (a lease came within its guard of its end) and failed
renewals. Conditions:

- quiet: the load alone;
- perturb: RRC §5's perturb program on the primary (busy 20-80 ms, sleep
  20-120 ms, one per CPU; bench/failover_campaign.py's);
- hog: two processes spinning at ordinary priority outside the lab,
  hogging both CPUs (agents, etcd, server and client compete with them);
- big: redis holding ~100 MB (DEBUG POPULATE 100000 keys of 1000 bytes
  before the load), so that every epoch's copy snapshot and the first
  full checkpoint to the backup are large (what starved the heartbeats
  before they ran at a real-time priority).

Reproduce: `python3 bench/false_suspicions.py [--minutes 2] [--conditions
quiet,perturb,hog,big] [--rate 2000] [--out bench/results/false_suspicions]`
(root; builds nothing: `make` first). Takes the lab lock for the run.
Writes OUT.json and OUT.png.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchlib import REPO, RRC_BIN as RRC, lab_lock, lab_parts, machine_description, rrc_cli as cli, run_main, write_results
from checkpoint_pause import BenchError, log
from failover_campaign import PERTURB_RRC, PERTURB_SPIN

CHECK = REPO / "target" / "release" / "rrc-check"
REDIS = ["redis-server", "--save", "", "--appendonly", "no", "--port", "6379", "--protected-mode", "no"]
BIG_KEYS, BIG_VALUE = 100_000, 1000
CONDITIONS = ("quiet", "perturb", "hog", "big")
COUNTERS = ("suspicions", "false_suspicions", "view_changes", "fences", "failed_renewals", "renewals")


def views(name):
    """{host: view counters} from each agent."""
    return {h: {k: p["view"][k] for k in COUNTERS} | {"role": p["role"], "view": p["view"]["number"]}
            for h, p in lab_parts(name).items() if p.get("view")}


def one_condition(cond, a):
    procs = []
    cli("lab", "down")
    try:
        cli("lab", "up")
        name = "fs"
        server = REDIS + (["--enable-debug-command", "yes"] if cond == "big" else [])
        ip = json.loads(cli("run", "--name", name, "--primary", "a", "--backup", "b", "--mode", "rr", "--json", "--", *server))["service_ip"]
        deadline = time.monotonic() + 30
        while json.loads(cli("status", name, "--json")).get("checkpoints_committed", 0) < 3:
            if time.monotonic() > deadline:
                raise BenchError("the service was not protected within 30 s")
            time.sleep(0.2)
        ncpu = os.cpu_count() or 1
        if cond == "big":
            cli("lab", "exec", "client", "--", "redis-cli", "-h", ip, "DEBUG", "POPULATE", str(BIG_KEYS), "fill", str(BIG_VALUE), timeout=300)
            used = cli("lab", "exec", "client", "--", "redis-cli", "-h", ip, "INFO", "memory")
            log("big: " + next((ln for ln in used.splitlines() if ln.startswith("used_memory_human")), "?").strip())
        if cond == "perturb":
            for i in range(ncpu):
                procs.append(subprocess.Popen([str(RRC), "lab", "exec", "a", "--", sys.executable, "-c", PERTURB_RRC, str(i), str(1000 + i)]))
        elif cond == "hog":
            for _ in range(ncpu):
                procs.append(subprocess.Popen([sys.executable, "-c", PERTURB_SPIN]))
        seconds = int(a.minutes * 60)
        load = subprocess.run([str(RRC), "lab", "exec", "client", "--", str(CHECK), "redis", "--server", f"{ip}:6379", "--threads", "8",
                               "--duration", f"{seconds}s", "--rate", str(a.rate), "--json"],
                              capture_output=True, text=True, timeout=seconds + 120)
        rep = json.loads(load.stdout) if load.stdout.strip() else {"error": load.stderr[-2000:]}
        counts = views(name)
        log(f"{cond}: {counts}; client ops {rep.get('ops')}, errors {sum((rep.get('errors') or {}).values())}")
        return {"condition": cond, "seconds": seconds, "views": counts,
                "client": {k: rep.get(k) for k in ("ops", "throughput_ops_s", "errors", "max_pause_ms", "ok")}}
    finally:
        for p in procs:
            p.kill()
            p.wait()
        cli("lab", "down", check=False)


def plot(path, data):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = data["results"]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    keys = ("suspicions", "false_suspicions", "view_changes", "fences")
    w = 0.2
    top = 1.0
    for i, k in enumerate(keys):
        counts = [sum(h.get(k, 0) for h in r["views"].values()) for r in rows]
        rates = [c / (r["seconds"] / 3600) for c, r in zip(counts, rows)]
        top = max(top, *rates)
        xs = [x + i * w for x in range(len(rows))]
        ax.bar(xs, rates, w, label=k.replace("_", " "))
        for x, c, v in zip(xs, counts, rates):
            ax.text(x, v, str(c), ha="center", va="bottom", fontsize=7)
    ax.set_ylim(0, top * 1.2)
    ax.set_xticks([x + 1.5 * w for x in range(len(rows))], [f"{r['condition']}\n{r['seconds'] / 60:.0f} min" for r in rows])
    ax.set_ylabel("per hour, both hosts (labels: counts)")
    ax.legend(fontsize=8)
    ax2.bar([r["condition"] for r in rows], [r["client"].get("max_pause_ms") or 0 for r in rows], color="0.5")
    ax2.set_ylabel("client's longest wait for a reply, ms")
    fig.suptitle(f"False suspicions, views in etcd, redis rr at {data['config']['rate']} ops/s, nothing killed; {data['machine']['date_utc']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=2.0, help="per condition")
    ap.add_argument("--conditions", default=",".join(CONDITIONS))
    ap.add_argument("--rate", type=int, default=2000, help="rrc-check ops/s (8 connections)")
    ap.add_argument("--lock-wait", type=float, default=600)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "false_suspicions"))
    a = ap.parse_args()
    for b in (RRC, CHECK):
        if not Path(b).exists():
            raise BenchError(f"{b} is missing: `make` first")
    conds = [c for c in a.conditions.split(",") if c]
    bad = [c for c in conds if c not in CONDITIONS]
    if bad:
        raise BenchError(f"unknown conditions {bad}")
    machine = machine_description()
    results = []
    with lab_lock(a.lock_wait):
        for c in conds:
            results.append(one_condition(c, a))
    data = {"command": " ".join(sys.argv), "machine": machine,
            "config": {"minutes": a.minutes, "rate": a.rate, "mode": "rr", "epoch_ms": 100, "heartbeat_ms": 30, "failure_ms": 90,
                       "lease_ms": 1000},
            "results": results}
    write_results(a.out, data, plot)


if __name__ == "__main__":
    run_main(main)
