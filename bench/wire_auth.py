#!/usr/bin/env python3
"""What peer authentication costs (issue 12): agents that seal every frame
with HMAC-SHA256 against agents run with --insecure-no-auth, in alternating
rounds on this machine.

Two parts:

1. In process (`crates/rrc-wire/examples/seal_speed.rs`): 1 MiB checkpoint
   frames written and read back through memory, sealed and opened with a
   session's keys, against plain frames (CRC32C only). MiB/s per side.
2. In the lab: a redis of ~100 MB protected on a (backup b), epoch 30 ms.
   Per round and mode: `rrc lab up` (with or without `--insecure-no-auth`),
   `rrc run`, fill, then
   - a full checkpoint of the ~100 MB (forced by `rrc fault
     corrupt-next-checkpoint`, which makes the backup reject one and the
     primary send a full one): its replication lag (snapshot to the
     backup's ack, `replication_lag_ms`) and size;
   - 10 s of rrc-check at a fixed rate (8 connections, 130 requests/s):
     client latency p50/p99, and the CPU the two agents used per second.
   The modes alternate (order swapped every round); `rrc lab down` between.

Writes bench/results/wire_auth.json and .png. The lab lock of the test
suite is held for the whole run.

    python3 bench/wire_auth.py [--rounds 3] [--seal-rounds 5] [--fill-mb 100]
"""
import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from benchlib import lab_lock, machine_description, spread
from checkpoint_pause import BenchError, log, run

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RRC = REPO / "target" / "release" / "rrc"
CHECK = REPO / "target" / "release" / "rrc-check"
REDIS = ["redis-server", "--save", "", "--appendonly", "no", "--port", "6379", "--protected-mode", "no", "--enable-debug-command", "yes"]
MODES = ("hmac-sha256", "none")


def rrc(*args, timeout=120, check=True):
    return run([str(RRC), *args], timeout=timeout, check=check)  # stdout


def status(name):
    return json.loads(rrc("status", name, "--json"))


def agents():
    return {h["host"]: h for h in json.loads(rrc("status", "--json"))["agents"]}


def wait(pred, seconds, what):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise BenchError(f"timed out after {seconds} s waiting for {what}")


def seal_part(rounds):
    run(["cargo", "build", "--release", "--locked", "-p", "rrc-wire", "--example", "seal_speed"], timeout=900)
    out = run([str(REPO / "target" / "release" / "examples" / "seal_speed"), str(rounds), "256"], timeout=600)
    rows = [json.loads(l) for l in out.splitlines() if l.strip()]
    res = {}
    for m in MODES:
        r = [x for x in rows if x["auth"] == m]
        res[m] = {k: spread([x[k] for x in r]) for k in ("write_mib_s", "read_mib_s")}
    return {"rows": rows, "summary": res}



def lab_round(mode, fill_mb, window_s):
    rrc("lab", "down")
    rrc("lab", "up", *(["--insecure-no-auth"] if mode == "none" else []))
    try:
        info = json.loads(rrc("run", "--name", "kv", "--primary", "a", "--backup", "b", "--json", "--", *REDIS))
        ip = info["service_ip"]
        wait(lambda: status("kv").get("checkpoints_committed", 0) > 2, 30, "protected")
        got = agents()
        assert got["b"]["security"]["authentication"] == mode, got["b"]["security"]
        n = fill_mb * 1000  # DEBUG POPULATE: values of 1000 bytes
        out = rrc("lab", "exec", "client", "--", "redis-cli", "-h", ip, "DEBUG", "POPULATE", str(n), "k", "1000", timeout=300)
        if out.strip() != "OK":
            raise BenchError(f"DEBUG POPULATE: {out!r}")
        time.sleep(1)
        # A full checkpoint of everything: the backup rejects a damaged one,
        # the primary sends a full one next.
        full_before = status("kv")["primary_view"]["stats"]["full_checkpoints"]
        rrc("fault", "kv", "corrupt-next-checkpoint")
        st = wait(lambda: (s := status("kv"))["primary_view"]["stats"]["full_checkpoints"] > full_before and s, 120, "a full checkpoint")
        full = {"replication_lag_ms": st["primary_view"]["stats"]["last_full_lag_ms"], "bytes": st["primary_view"]["stats"]["last_full_bytes"]}
        time.sleep(1)
        a0 = agents()
        t0 = time.monotonic()
        p = subprocess.run([str(RRC), "lab", "exec", "client", "--", str(CHECK), "redis", "--server", f"{ip}:6379", "--threads", "8",
                            "--duration", f"{window_s}s", "--rate", "130", "--json"], capture_output=True, text=True, timeout=window_s + 120)
        elapsed = time.monotonic() - t0
        a1 = agents()
        if p.returncode != 0 or not p.stdout.strip():
            raise BenchError(f"rrc-check: {p.stdout}\n{p.stderr}")
        rep = json.loads(p.stdout)
        if not rep["ok"]:
            raise BenchError(f"rrc-check saw errors: {p.stdout[:2000]}")
        cpu = {h: (a1[h]["agent_cpu_ms"] - a0[h]["agent_cpu_ms"]) / elapsed for h in ("a", "b")}
        lat = rep["latency_us"]
        return {"mode": mode, "full_checkpoint": full, "latency_us": {"p50": lat["p50"], "p99": lat["p99"]}, "ops": rep["ops"],
                "agent_cpu_ms_per_s": cpu, "rejected": {h: a1[h]["security"]["rejected_total"] for h in ("a", "b")}}
    finally:
        rrc("lab", "down", check=False)


def summarize(rows):
    out = {}
    for m in MODES:
        r = [x for x in rows if x["mode"] == m]
        out[m] = {
            "full_checkpoint_lag_ms": spread([x["full_checkpoint"]["replication_lag_ms"] for x in r]),
            "full_checkpoint_bytes": spread([x["full_checkpoint"]["bytes"] for x in r]),
            "latency_p50_us": spread([x["latency_us"]["p50"] for x in r]),
            "latency_p99_us": spread([x["latency_us"]["p99"] for x in r]),
            "primary_agent_cpu_ms_per_s": spread([x["agent_cpu_ms_per_s"]["a"] for x in r]),
            "backup_agent_cpu_ms_per_s": spread([x["agent_cpu_ms_per_s"]["b"] for x in r]),
        }
    out["ratio_auth_over_none"] = {k: round(out["hmac-sha256"][k]["median"] / out["none"][k]["median"], 3)
                                   for k in out["none"] if out["none"][k]["median"]}
    return out


def plot(path, res):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    s = res["seal"]["summary"]
    ax = axes[0]
    for i, m in enumerate(MODES):
        for j, k in enumerate(("write_mib_s", "read_mib_s")):
            v = s[m][k]
            ax.bar(j * 3 + i, v["median"], yerr=[[v["median"] - v["min"]], [v["max"] - v["median"]]], capsize=4,
                   color="tab:red" if m != "none" else "tab:gray", label=m if j == 0 else None)
    ax.set_xticks([0.5, 3.5], ["seal (write)", "open (read)"])
    ax.set_ylabel("MiB/s of 1 MiB frames, one core")
    ax.set_title("in process")
    ax.legend()
    ax = axes[1]
    lab = res["lab"]["summary"]
    keys = ["full_checkpoint_lag_ms", "latency_p50_us", "latency_p99_us", "primary_agent_cpu_ms_per_s", "backup_agent_cpu_ms_per_s"]
    for j, k in enumerate(keys):
        for i, m in enumerate(MODES):
            v = lab[m][k]
            base = lab["none"][k]["median"] or 1
            ax.bar(j * 3 + i, v["median"] / base, yerr=[[(v["median"] - v["min"]) / base], [(v["max"] - v["median"]) / base]], capsize=4,
                   color="tab:red" if m != "none" else "tab:gray")
    ax.axhline(1, color="k", lw=0.5)
    ax.set_xticks([j * 3 + 0.5 for j in range(len(keys))], ["full ckpt lag", "lat p50", "lat p99", "CPU primary", "CPU backup"], fontsize=8)
    ax.set_ylabel("relative to --insecure-no-auth (median = 1)")
    ax.set_title("redis in the lab, 100 MB, epoch 30 ms")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="lab rounds per mode (alternating)")
    ap.add_argument("--seal-rounds", type=int, default=5)
    ap.add_argument("--fill-mb", type=int, default=100)
    ap.add_argument("--window", type=int, default=10, help="seconds of rrc-check per round")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "wire_auth.json")
    ap.add_argument("--no-plot", action="store_true")
    a = ap.parse_args()
    res = {"benchmark": "wire_auth", "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), "machine": machine_description(),
           "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    log("in-process sealing")
    res["seal"] = seal_part(a.seal_rounds)
    rows = []
    with lab_lock(1200):
        for r in range(a.rounds):
            order = MODES if r % 2 == 0 else MODES[::-1]
            for m in order:
                log(f"round {r + 1}/{a.rounds}: {m}")
                rows.append({"round": r, **lab_round(m, a.fill_mb, a.window)})
    res["lab"] = {"rows": rows, "summary": summarize(rows)}
    res["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=1) + "\n")
    if not a.no_plot:
        plot(a.out.with_suffix(".png"), res)
    print(json.dumps({"seal": res["seal"]["summary"], "lab": res["lab"]["summary"]}, indent=1))


if __name__ == "__main__":
    try:
        main()
    except BenchError as e:
        print(f"wire_auth: error: {e}", file=sys.stderr)
        sys.exit(1)
