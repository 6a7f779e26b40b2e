#!/usr/bin/env python3
"""Record overhead (issue 13): redis-server, memcached -t 4 and lighttpd
under `rrc exec`, recorded (`--record LOG`) against not recorded, in the
same run, in alternation (A B, B A, A B...: the machine is shared and
noisy).

Per server and round: throughput at saturation for a fixed amount of work
(rrc-check, closed loop, 8 connections, every reply checked), then latency
at half load (open loop, the same absolute rate for both: half of an
unrecorded calibration run's saturation); the server's CPU time per
operation during the saturation run (every thread of it, the library's
writer too: less sensitive than throughput to the client and the other
tenants sharing the two CPUs); for the recorded one also the log's bytes
per second and events per 100 ms over the whole run of the server
(`rrc inspect --log`). --log-dir puts the logs elsewhere (a tmpfs: the
recording without this machine's disk). Replay time and divergences:
bench/replay.py.

Everything runs in one network namespace of its own (client and server on
its loopback): what is measured is the library's recording, not a network.
Writes JSON and PNG to bench/results/record.{json,png}. See bench/README.md.
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchlib import kill_container, machine_description, netns_up, run_main, wait_port, write_results
from checkpoint_pause import BenchError, Cleanup, Interrupted, log, run

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RRC = REPO / "target" / "release" / "rrc"
CHECK = REPO / "target" / "release" / "rrc-check"
NS = "rrc-bench-record"
CONFIGS = ("plain", "recorded")  # both under `rrc exec`; "recorded" with --record


def servers(workdir, file_size):
    www = workdir / "www"
    www.mkdir()
    (www / "file.bin").write_bytes(bytes((i * 131 + (i >> 8) * 7) & 0xFF for i in range(file_size)))
    conf = workdir / "lighttpd.conf"
    conf.write_text(f'server.document-root = "{www}"\nserver.port = 8080\nserver.bind = "127.0.0.1"\n'
                    'server.max-keep-alive-requests = 65535\nserver.max-keep-alive-idle = 300\n'
                    'mimetype.assign = (".bin" => "application/octet-stream")\n')
    os.chmod(workdir, 0o755)
    return {
        "redis": {"argv": ["redis-server", "--save", "", "--appendonly", "no", "--port", "6379", "--bind", "127.0.0.1"],
                  "port": 6379, "client": ["redis", "--server", "127.0.0.1:6379"]},
        "memcached": {"argv": ["memcached", "-t", "4", "-p", "11211", "-U", "0", "-u", "root", "-l", "127.0.0.1", "-m", "64"],
                      "port": 11211, "client": ["memcached", "--server", "127.0.0.1:11211"]},
        "lighttpd": {"argv": ["lighttpd", "-D", "-f", str(conf)], "port": 8080,
                     "client": ["http", "--url", "http://127.0.0.1:8080/file.bin", "--file", str(www / "file.bin")]},
    }


def ns(argv):
    return ["ip", "netns", "exec", NS, *map(str, argv)]


def check(client, extra, timeout):
    out = run(ns([CHECK, *client, "--threads", 8, "--json", *map(str, extra)]), timeout, check=False)
    try:
        rep = json.loads(out)
    except json.JSONDecodeError:
        raise BenchError(f"rrc-check printed no JSON: {out[:300]!r}")
    if not rep.get("ok"):
        raise BenchError(f"rrc-check found errors: {rep.get('errors')} {rep.get('error_samples', [])[:3]}")
    return rep


def cpu_seconds(pid):
    """The process's CPU time so far, every live thread (the library's
    writer too), in nanoseconds: the first field of each
    /proc/PID/task/TID/schedstat (utime + stime of /proc/PID/stat count
    in 10 ms ticks: too coarse for a 3 s run)."""
    total = 0
    for t in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((t / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            pass  # a thread that ended meanwhile
    return total / 1e9


def one(spec, config, workdir, args, rate, tag):
    """Start, saturate, half load, stop: one configuration's round."""
    logf = workdir / f"{tag}.log"
    rec = (Path(args.log_dir) if args.log_dir else workdir) / f"{tag}.rec"
    extra = ["--record", rec] if config == "recorded" else []
    out = run([str(RRC), "exec", "--netns", NS, "--log", str(workdir / f"{tag}.out"), *map(str, extra), "--", *spec["argv"]], 60)
    pid = int(out.strip().splitlines()[-1])
    t0 = time.monotonic()
    try:
        wait_port(NS, spec["port"], pid)
        if args.warmup_ops:
            # the same warm-up for both configurations: the first
            # requests of a fresh server (allocator arenas, caches, the
            # log file's first pages) are not what is measured
            check(spec["client"], ["--ops", args.warmup_ops], 600)
        cpu0 = cpu_seconds(pid)
        sat = check(spec["client"], ["--ops", args.ops], 600)
        sat_cpu = cpu_seconds(pid) - cpu0
        half = check(spec["client"], ["--duration", f"{args.half_s}s", "--rate", f"{rate:.1f}"], args.half_s + 120)
        lived = time.monotonic() - t0
    finally:
        kill_container(RRC, pid)
    res = {"saturation_ops_s": sat["throughput_ops_s"], "ops": sat.get("ops"),
           "cpu_us_per_op": sat_cpu * 1e6 / max(1, sat.get("ops") or args.ops),
           "half_rate_ops_s": half["throughput_ops_s"],
           "half_latency_us": {k: half["latency_us"].get(k) for k in ("mean", "p50", "p99")}}
    if config == "recorded":
        # the log of the whole life of the server: start, saturation, half load
        summ = json.loads(run([str(RRC), "inspect", "--log", str(rec), "--json"], 300, check=False) or "{}")
        if not summ.get("ok"):
            raise BenchError(f"{rec}: the log does not verify: {summ}")
        res["log"] = {"bytes": summ["bytes"], "events": summ["events"], "seconds": lived,
                      "bytes_per_s": summ["bytes"] / lived, "events_per_100ms": summ["events"] / lived / 10,
                      "by_kind": summ["by_kind"]}
        rec.unlink()
    return res


def plot(path, res):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(res["servers"])
    fig, (a1, a3, a2) = plt.subplots(1, 3, figsize=(15, 4))
    for i, n in enumerate(names):
        r = res["servers"][n]["ratios"]
        a1.boxplot([r["throughput"]], positions=[i], widths=0.5)
        a3.boxplot([r["cpu_per_op"]], positions=[i], widths=0.5)
        a2.boxplot([r["half_load_latency_mean"]], positions=[i], widths=0.5)
    for a, t in ((a1, "saturation throughput, recorded / not"), (a3, "server CPU per operation, recorded / not"),
                 (a2, "mean latency at half load, recorded / not")):
        a.set_xticks(range(len(names)))
        a.set_xticklabels(names)
        a.axhline(1.0, color="grey", lw=0.8)
        a.set_title(t, fontsize=10)
    fig.suptitle(f"rrc exec --record overhead, {res['rounds']} alternating rounds ({res['date']})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ops", type=int, default=200000, help="operations of the saturation run")
    ap.add_argument("--warmup-ops", type=int, default=50000,
                    help="operations run before the measured saturation run, in both configurations (0: none)")
    ap.add_argument("--half-s", type=int, default=5, help="seconds of the half-load run")
    ap.add_argument("--servers", default="redis,memcached,lighttpd")
    ap.add_argument("--file-size", type=int, default=4096, help="lighttpd's file")
    ap.add_argument("--log-dir", default=None,
                    help="where the recorded logs go (default: the work directory, on /tmp's disk)")
    ap.add_argument("--out", default=str(HERE / "results" / "record"))
    args = ap.parse_args()
    for b in (RRC, CHECK):
        if not b.exists():
            raise BenchError(f"{b} is missing: make all")
    cleanup = Cleanup()
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(Interrupted()))
    try:
        netns_up(cleanup, NS)
        workdir = Path(tempfile.mkdtemp(prefix="rrc-bench-record-"))
        cleanup.push("workdir", lambda: shutil.rmtree(workdir, ignore_errors=True))
        specs = servers(workdir, args.file_size)
        started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        out = {"bench": "record", "date": started, "rounds": args.rounds, "machine": machine_description(),
               "command": "python3 bench/record.py " + " ".join(sys.argv[1:]), "servers": {}}
        for name in args.servers.split(","):
            spec = specs[name]
            runs = {c: [] for c in CONFIGS}
            # the half-load rate: half of a calibration run's unrecorded
            # saturation, the same absolute rate for both configurations
            cal = one(spec, "plain", workdir, args, 1.0, f"{name}-calibration")
            half_rate = cal["saturation_ops_s"] / 2
            for r in range(args.rounds):
                for c in (CONFIGS if r % 2 == 0 else CONFIGS[::-1]):
                    runs[c].append(one(spec, c, workdir, args, half_rate, f"{name}-{r}-{c}"))
                got = {c: runs[c][-1] for c in CONFIGS}
                log(f"{name} round {r + 1}: plain {got['plain']['saturation_ops_s']:.0f} ops/s "
                    f"({got['plain']['cpu_us_per_op']:.1f} µs CPU/op), "
                    f"recorded {got['recorded']['saturation_ops_s']:.0f} ops/s "
                    f"({got['recorded']['cpu_us_per_op']:.1f} µs CPU/op), "
                    f"log {got['recorded']['log']['bytes_per_s'] / 1e6:.1f} MB/s, "
                    f"{got['recorded']['log']['events_per_100ms']:.0f} events/100 ms")
            out["servers"][name] = {"half_load_rate_ops_s": half_rate}
            tp = [b["saturation_ops_s"] / a["saturation_ops_s"] for a, b in zip(runs["plain"], runs["recorded"])]
            lat = [b["half_latency_us"]["mean"] / a["half_latency_us"]["mean"]
                   for a, b in zip(runs["plain"], runs["recorded"])]
            cpu = [b["cpu_us_per_op"] / a["cpu_us_per_op"] for a, b in zip(runs["plain"], runs["recorded"])]
            out["servers"][name].update({
                "runs": runs,
                "ratios": {"throughput": tp, "half_load_latency_mean": lat, "cpu_per_op": cpu},
                "summary": {
                    "throughput_ratio_median": statistics.median(tp), "throughput_ratio_min": min(tp),
                    "throughput_ratio_max": max(tp), "latency_ratio_median": statistics.median(lat),
                    "cpu_per_op_ratio_median": statistics.median(cpu), "cpu_per_op_ratio_min": min(cpu),
                    "cpu_per_op_ratio_max": max(cpu),
                    "log_bytes_per_s_median": statistics.median(x["log"]["bytes_per_s"] for x in runs["recorded"]),
                    "events_per_100ms_median": statistics.median(x["log"]["events_per_100ms"] for x in runs["recorded"]),
                },
            })
            log(f"{name}: throughput recorded/plain median {statistics.median(tp):.3f} "
                f"[{min(tp):.3f}, {max(tp):.3f}], server CPU per operation recorded/plain median "
                f"{statistics.median(cpu):.3f} [{min(cpu):.3f}, {max(cpu):.3f}], "
                f"half-load latency ratio median {statistics.median(lat):.3f}")
        write_results(args.out, out, plot)
    finally:
        cleanup.run_all()


if __name__ == "__main__":
    run_main(main)
