#!/usr/bin/env python3
"""Replay of real epochs (issue 13): how long a replay of one epoch of log
takes, and how often a replay diverges.

Per server: `rrc exec --record` under rrc-check's load at a fixed rate
(8 connections, every reply checked), a checkpoint every --epoch-ms (an
incremental chain), then the server is killed. Each epoch i is then
replayed from checkpoint i up to checkpoint i+1's cut (`rrc restore
--replay LOG --replay-to DIR`: the process goes live in checkpoint i+1's
state), --repeats times, in a second network namespace. Per replay: the
library's own replay time (first event to live), the events and outputs
replayed, and whether it diverged (the report is kept). Replay time is
reported per 100 ms of log (the epoch's real length, measured between the
two checkpoints' cuts, scales it).

redis and memcached are run twice: as shipped, and without the threads
that read, without a lock, what the others write (data races, and
jemalloc's lock-free atomics): redis with `--jemalloc-bg-thread no`
(jemalloc's background purging thread decides from atomic counters whether
to sleep), memcached with `-o no_lru_maintainer,no_lru_crawler`. As
shipped, each epoch is replayed with each data-race mitigation of RRC §4.7
in turn (`--replay-races off|order|pace`, --races), in alternation within
every pass so that the machine's noise falls on all alike: the divergence
rate and the replay time with and without it.

Writes JSON and PNG to bench/results/replay.{json,png}. See bench/README.md.
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
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
NS_REC, NS_REP = "rrc-bench-replay-a", "rrc-bench-replay-b"


def servers(workdir):
    www = workdir / "www"
    www.mkdir()
    (www / "file.bin").write_bytes(bytes((i * 131 + (i >> 8) * 7) & 0xFF for i in range(4096)))
    conf = workdir / "lighttpd.conf"
    conf.write_text(f'server.document-root = "{www}"\nserver.port = 8080\nserver.bind = "127.0.0.1"\n'
                    'server.max-keep-alive-requests = 65535\nserver.max-keep-alive-idle = 300\n'
                    'mimetype.assign = (".bin" => "application/octet-stream")\n')
    os.chmod(workdir, 0o755)
    mc = ["memcached", "-t", "4", "-p", "11211", "-U", "0", "-u", "root", "-l", "127.0.0.1", "-m", "64"]
    return {
        "redis": {"argv": ["redis-server", "--save", "", "--appendonly", "no", "--port", "6379", "--bind", "127.0.0.1"],
                  "port": 6379, "client": ["redis", "--server", "127.0.0.1:6379"]},
        "redis-no-bg-thread": {"argv": ["redis-server", "--save", "", "--appendonly", "no", "--port", "6379", "--bind",
                                        "127.0.0.1", "--jemalloc-bg-thread", "no"],
                               "port": 6379, "client": ["redis", "--server", "127.0.0.1:6379"]},
        "memcached": {"argv": mc, "port": 11211, "client": ["memcached", "--server", "127.0.0.1:11211"]},
        "memcached-no-maintainer": {"argv": [*mc, "-o", "no_lru_maintainer,no_lru_crawler"], "port": 11211,
                                    "client": ["memcached", "--server", "127.0.0.1:11211"]},
        "lighttpd": {"argv": ["lighttpd", "-D", "-f", str(conf)], "port": 8080,
                     "client": ["http", "--url", "http://127.0.0.1:8080/file.bin", "--file", str(www / "file.bin")]},
    }


def in_ns(ns, argv):
    return ["ip", "netns", "exec", ns, *map(str, argv)]


def record(spec, workdir, args, tag):
    """The recorded run: load, a checkpoint every epoch, kill. Returns the
    log, the image directories and the epochs' lengths (between cuts)."""
    rec = workdir / f"{tag}.rec"
    out = run([str(RRC), "exec", "--netns", NS_REC, "--log", str(workdir / f"{tag}.out"), "--record", str(rec),
               "--", *spec["argv"]], 60)
    pid = int(out.strip().splitlines()[-1])
    images, stamps = [], []
    try:
        wait_port(NS_REC, spec["port"], pid)
        secs = (args.epochs + 2) * args.epoch_ms / 1000 + 2
        load = subprocess.Popen(in_ns(NS_REC, [CHECK, *spec["client"], "--threads", 8, "--json", "--duration",
                                               f"{secs:.1f}s", "--rate", args.rate]),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)
        nxt = time.monotonic()
        for i in range(args.epochs + 1):
            d = workdir / f"{tag}-img{i}"
            cmd = [str(RRC), "dump", "--pid", str(pid), "--images", str(d), "--leave-running", "--json"]
            if images:
                cmd += ["--parent", str(images[-1])]
            stamps.append(time.monotonic())
            run(cmd, 120)
            images.append(d)
            nxt += args.epoch_ms / 1000
            time.sleep(max(0.0, nxt - time.monotonic()))
        o, e = load.communicate(timeout=secs + 120)
        rep = json.loads(o or "{}")
        if not rep.get("ok"):
            raise BenchError(f"the load during the recording failed: {rep.get('errors')} {e[-300:]}")
        time.sleep(0.3)  # the writer's last drain
    finally:
        kill_container(RRC, pid)
    epochs_ms = [(b - a) * 1000 for a, b in zip(stamps, stamps[1:])]
    return rec, images, epochs_ms


def replay_one(images, i, rec, workdir, timeout, races):
    """One replay, in a network namespace of its own (a killed replay's
    sockets may hold the server's port for a while)."""
    run(["ip", "netns", "add", NS_REP], 10)
    try:
        run(["ip", "-n", NS_REP, "link", "set", "lo", "up"], 10)
        return replay_in_ns(images, i, rec, workdir, timeout, races)
    finally:
        run(["ip", "netns", "del", NS_REP], 10, check=False)


def replay_in_ns(images, i, rec, workdir, timeout, races):
    p = subprocess.run([str(RRC), "restore", "--images", str(images[i]), "--replay", str(rec), "--replay-to",
                        str(images[i + 1]), "--netns", NS_REP, "--log", str(workdir / "replay.out"), "--json",
                        "--replay-timeout", timeout, "--replay-races", races], capture_output=True, text=True,
                       timeout=300)
    if p.returncode == 0:
        info = json.loads(p.stdout.strip().splitlines()[-1])
        kill_container(RRC, info["pid"])
        r = info["replay"]
        return {"diverged": False, "replay_ms": r["replay_ns"] / 1e6, "load_ms": r["load_ns"] / 1e6,
                "events": r["events_done"], "dropped": r["events_dropped"], "outputs": r["outputs"],
                "returns_ordered": r["returns_ordered"], "paced_ms": r["paced_ns"] / 1e6}
    err = p.stderr.strip()
    if "replay diverged" not in err:
        raise BenchError(f"replay of epoch {i} failed otherwise than by diverging: {err[:600]}")
    return {"diverged": True, "report": err[-600:]}


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else None


def configs(res):
    """[(label, the results of one server with one mitigation)]"""
    return [(n if m == "off" and len(s["races"]) == 1 else f"{n}\n{m}", r)
            for n, s in res["servers"].items() for m, r in s["races"].items()]


def plot(path, res):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cs = configs(res)
    names = [c for c, _ in cs]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(14, 4.5))
    for i, (_, s) in enumerate(cs):
        xs = s["replay_ms_per_100ms"]
        if xs:
            a1.boxplot([xs], positions=[i], widths=0.5)
        a2.bar(i, 100 * s["divergence_rate"])
    a1.axhline(50, color="red", lw=0.8, ls="--")
    a1.set_title("replay time per 100 ms of log (ms); target 50", fontsize=10)
    a2.set_title("replays that diverged (%)", fontsize=10)
    for a in (a1, a2):
        a.set_xticks(range(len(names)))
        a.set_xticklabels(names, fontsize=7)
    fig.suptitle(f"rrc restore --replay of real epochs ({res['date']})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", default="redis,redis-no-bg-thread,memcached,memcached-no-maintainer,lighttpd")
    ap.add_argument("--epochs", type=int, default=50, help="at most 59: a chain holds 60 images")
    ap.add_argument("--repeats", type=int, default=20, help="replays of each epoch")
    ap.add_argument("--epoch-ms", type=int, default=100)
    ap.add_argument("--rate", type=int, default=4000, help="the load's ops/s while recording")
    ap.add_argument("--timeout", default="3s", help="the replay's no-progress timeout")
    ap.add_argument("--races", default="off,order,pace", help="the mitigations to compare (RRC §4.7)")
    ap.add_argument("--race-servers", default="redis,memcached",
                    help="the servers replayed with each of --races (the others: off only)")
    ap.add_argument("--out", default=str(HERE / "results" / "replay"))
    args = ap.parse_args()
    for b in (RRC, CHECK):
        if not b.exists():
            raise BenchError(f"{b} is missing: make all")
    cleanup = Cleanup()
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(Interrupted()))
    try:
        netns_up(cleanup, NS_REC)
        cleanup.push("netns", lambda: run(["ip", "netns", "del", NS_REP], 10, check=False))
        workdir = Path(tempfile.mkdtemp(prefix="rrc-bench-replay-"))
        cleanup.push("workdir", lambda: shutil.rmtree(workdir, ignore_errors=True))
        specs = servers(workdir)
        out = {"bench": "replay", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "machine": machine_description(), "command": "python3 bench/replay.py " + " ".join(sys.argv[1:]),
               "epochs": args.epochs, "repeats": args.repeats, "epoch_ms": args.epoch_ms, "rate": args.rate,
               "races": args.races.split(","), "race_servers": args.race_servers.split(","), "servers": {}}
        for name in args.servers.split(","):
            rec, images, lens = record(specs[name], workdir, args, name)
            log(f"{name}: recorded {len(lens)} epochs (mean {statistics.mean(lens):.0f} ms), "
                f"log {rec.stat().st_size / 1e6:.1f} MB")
            modes = args.races.split(",") if name in args.race_servers.split(",") else ["off"]
            runs = {m: [] for m in modes}
            for k in range(args.repeats):
                for i in range(len(lens)):
                    for m in modes:  # in alternation: the noise falls on every mode alike
                        r = replay_one(images, i, rec, workdir, args.timeout, m)
                        r.update(epoch=i, epoch_ms=lens[i])
                        if r["diverged"]:
                            log(f"{name} ({m}) epoch {i}: {r['report'][:400]}")
                        runs[m].append(r)
                log(f"{name} pass {k + 1}/{args.repeats}: " + ", ".join(
                    f"{m} {sum(r['diverged'] for r in rs)} of {len(rs)} diverged" for m, rs in runs.items()))
            out["servers"][name] = {"epoch_ms_mean": statistics.mean(lens), "races": {}}
            for m, rs in runs.items():
                ok = [r for r in rs if not r["diverged"]]
                per100 = [r["replay_ms"] * 100 / r["epoch_ms"] for r in ok]
                out["servers"][name]["races"][m] = {
                    "replays": len(rs), "divergences": len(rs) - len(ok),
                    "divergence_rate": (len(rs) - len(ok)) / len(rs),
                    "replay_ms_per_100ms": per100,
                    "summary": {"replay_ms_per_100ms_p50": pct(per100, 0.5), "p90": pct(per100, 0.9),
                                "max": max(per100) if per100 else None,
                                "events_per_epoch_p50": pct([r["events"] for r in ok], 0.5),
                                "outputs_per_epoch_p50": pct([r["outputs"] for r in ok], 0.5),
                                "returns_ordered_per_epoch_p50": pct([r["returns_ordered"] for r in ok], 0.5),
                                "paced_ms_per_epoch_p50": pct([r["paced_ms"] for r in ok], 0.5),
                                "load_ms_p50": pct([r["load_ms"] for r in ok], 0.5)},
                    "divergence_samples": [r["report"] for r in rs if r["diverged"]][:5],
                    "runs": rs,
                }
                s = out["servers"][name]["races"][m]["summary"]
                log(f"{name} ({m}): {len(rs)} replays, {len(rs) - len(ok)} diverged; replay per 100 ms of log "
                    f"p50 {s['replay_ms_per_100ms_p50']} ms, p90 {s['p90']} ms")
            for d in images:
                shutil.rmtree(d, ignore_errors=True)
            rec.unlink()
        write_results(args.out, out, plot, compact=True)
    finally:
        cleanup.run_all()


if __name__ == "__main__":
    run_main(main)
