#!/usr/bin/env python3
"""A server that closes every connection after its response (issue 14):
lighttpd under ab without -k (HTTP/1.0, one connection per request, the
client reads until the server's FIN), unprotected against rr mode and
checkpoint mode, in alternating rounds on this machine.

The client waits for the server's FIN. In checkpoint mode the backup's gate
releases it with the next commit; in rr mode the library logs the
program's shutdown or close as a FIN output and the gate releases the FIN
as soon as the log holding it is in (docs/gate.md, "The log's cover").

Per round, in the lab (lighttpd serving a 1000-byte file; the unprotected
one on host c, the protected ones with primary a and backup b, rr epoch
100 ms, checkpoint epoch 30 ms), in turn against each target:
  ab -n N -c 1 (time per request: the latency of a whole connection)
  ab -n N -c 8 (requests per second)
The order of the targets rotates every round. A round whose ab reports a
failed or non-2xx request fails the benchmark.

Writes bench/results/closing_connections.json and .png. Holds the lab
lock of the test suite for the whole run; refuses to run if a lab is up.

    python3 bench/closing_connections.py [--rounds 3] [--requests 2000]
"""
import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

from benchlib import lab_lock, machine_description, spread, run_main, write_results
from checkpoint_pause import BenchError, Cleanup, log, run

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RRC = REPO / "target" / "release" / "rrc"
TARGETS = ("unprotected", "rr", "checkpoint")
EPOCH_MS = {"rr": 100, "checkpoint": 30}
UNPROTECTED = "198.18.0.3"  # host c's front address (docs/lab.md)


def rrc(*args, timeout=120, check=True):
    return run([str(RRC), *args], timeout=timeout, check=check)


def ab(url, n, c):
    """ab's report of n requests at concurrency c, without keep-alive."""
    out = rrc("lab", "exec", "client", "--", "ab", "-n", str(n), "-c", str(c), url, timeout=600, check=False)

    def num(pattern):
        m = re.search(pattern, out)
        if not m:
            raise BenchError(f"ab printed no {pattern!r}:\n{out[-2000:]}")
        return float(m.group(1))
    failed, complete = num(r"Failed requests:\s+(\d+)"), num(r"Complete requests:\s+(\d+)")
    non2xx = re.search(r"Non-2xx responses:\s+(\d+)", out)
    if failed or complete != n or non2xx:
        raise BenchError(f"ab against {url}: {complete:.0f} of {n} complete, {failed:.0f} failed, non-2xx {non2xx and non2xx.group(1)}")
    pct = {int(p): float(v) for p, v in re.findall(r"^\s+(\d+)%\s+(\d+)", out, re.M)}
    return {"requests_per_s": num(r"Requests per second:\s+([\d.]+)"), "ms_per_request": num(r"Time per request:\s+([\d.]+) \[ms\] \(mean\)"),
            "p50_ms": pct.get(50), "p99_ms": pct.get(99)}



def bring_up(cleanup, www):
    """The lab, the unprotected lighttpd on c and the two protected ones;
    their URLs by target."""
    if json.loads(rrc("lab", "status", "--json")).get("up"):
        raise BenchError("a lab is up already (rrc lab down first)")
    rrc("lab", "up")
    cleanup.push("rrc lab down", lambda: rrc("lab", "down", check=False))
    conf = www / "lighttpd.conf"
    conf.write_text(f'server.document-root = "{www}"\nserver.port = 80\nserver.bind = "0.0.0.0"\n')
    rrc("lab", "exec", "c", "--", "lighttpd", "-f", str(conf))  # daemonizes; ends with the lab
    urls = {"unprotected": f"http://{UNPROTECTED}/f.bin"}
    for mode, ep in EPOCH_MS.items():
        info = json.loads(rrc("run", "--name", f"close-{mode}", "--primary", "a", "--backup", "b", "--mode", mode,
                              "--epoch", f"{ep}ms", "--json", "--", "lighttpd", "-D", "-f", str(conf), timeout=60))
        cleanup.push(f"rrc stop close-{mode}", lambda mode=mode: rrc("stop", f"close-{mode}", check=False))
        deadline = time.monotonic() + 30
        while json.loads(rrc("status", f"close-{mode}", "--json")).get("checkpoints_committed", 0) < 1:
            if time.monotonic() > deadline:
                raise BenchError(f"close-{mode}: no checkpoint committed within 30 s")
            time.sleep(0.1)
        urls[mode] = f"http://{info['service_ip']}/f.bin"
    return urls


def plot(path, res):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    s = res["summary"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    colors = {"unprotected": "tab:gray", "rr": "tab:blue", "checkpoint": "tab:orange"}
    for ax, (key, what, log_scale) in zip(axes, (("c1_ms_per_request", "ms per request, ab -c 1 (log)", True),
                                                 ("c8_requests_per_s", "requests/s, ab -c 8", False))):
        for i, t in enumerate(TARGETS):
            v = s[t][key]
            ax.bar(i, v["median"], yerr=[[v["median"] - v["min"]], [v["max"] - v["median"]]], capsize=5, color=colors[t])
            ax.text(i, v["median"], f"{v['median']:.3g}", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(TARGETS)), [f"{t}" + (f"\nepoch {EPOCH_MS[t]} ms" if t in EPOCH_MS else "") for t in TARGETS])
        ax.set_ylabel(what)
        if log_scale:
            ax.set_yscale("log")
    fig.suptitle(f"lighttpd, a connection per request (ab without -k), {res['config']['rounds']} rounds, "
                 f"{res['config']['requests']} requests each; {res['machine']['date_utc']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=2000, help="requests per ab run (checkpoint mode: a tenth, it is slow)")
    ap.add_argument("--out", default=str(HERE / "results" / "closing_connections"))
    ap.add_argument("--lock-wait", type=float, default=1800)
    a = ap.parse_args()
    if not (1 <= a.rounds <= 20 and 10 <= a.requests <= 100000):
        raise BenchError("--rounds 1..20, --requests 10..100000")
    res = {"benchmark": "closing_connections", "command": " ".join(["python3", "bench/closing_connections.py", *sys.argv[1:]]),
           "machine": machine_description(), "config": {"rounds": a.rounds, "requests": a.requests, "epoch_ms": EPOCH_MS}}
    rows = []
    with lab_lock(a.lock_wait), tempfile.TemporaryDirectory(prefix="rrc-bench-close-") as tmp:
        cleanup = Cleanup()
        try:
            www = Path(tmp)
            www.chmod(0o755)  # the service runs as another user
            (www / "f.bin").write_bytes(bytes(range(256)) * 3 + bytes(232))
            urls = bring_up(cleanup, www)
            for r in range(a.rounds):
                order = TARGETS[r % 3:] + TARGETS[:r % 3]
                for t in order:
                    n = a.requests // 10 if t == "checkpoint" else a.requests
                    log(f"round {r + 1}/{a.rounds}: {t}")
                    rows.append({"round": r, "target": t, "requests": n, "c1": ab(urls[t], n, 1), "c8": ab(urls[t], n, 8)})
        finally:
            cleanup.run_all()
    summary = {t: {"c1_ms_per_request": spread([x["c1"]["ms_per_request"] for x in rows if x["target"] == t]),
                   "c1_p99_ms": spread([x["c1"]["p99_ms"] for x in rows if x["target"] == t]),
                   "c8_requests_per_s": spread([x["c8"]["requests_per_s"] for x in rows if x["target"] == t])}
               for t in TARGETS}
    u = summary["unprotected"]
    summary["ratios_over_unprotected"] = {t: {"c1_ms_per_request": round(summary[t]["c1_ms_per_request"]["median"] / u["c1_ms_per_request"]["median"], 2),
                                              "c8_requests_per_s": round(summary[t]["c8_requests_per_s"]["median"] / u["c8_requests_per_s"]["median"], 3)}
                                          for t in ("rr", "checkpoint")}
    res["rows"], res["summary"] = rows, summary
    write_results(a.out, res, plot)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    run_main(main)
