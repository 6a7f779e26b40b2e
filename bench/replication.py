#!/usr/bin/env python3
"""Replication benchmark (issues 3, 14): redis-server, memcached -t 4 and
lighttpd (a static file) protected by `rrc run` in checkpoint mode and in rr
mode (primary a, backup b, the lab of docs/lab.md), against the same server
unprotected (the same binary and argv, another port, started on host a with
`rrc lab exec`, the client talking to it directly).

In one run, per server and per configuration (a mode and an epoch length,
`--configs checkpoint:30ms,rr:100ms` by default): throughput at saturation (closed
loop, the same fixed number of connections for both), average and p99 latency
at about half load (half of each configuration's own saturation throughput,
and both at the same absolute rate: the lower half), checkpoint pause,
checkpoint size, and the CPU used by the agents. Checkpoint mode is the
NiLiCon row of the compass (latencies of the order of the epoch); rr mode is
RRC's (a reply waits for its log at the backup: RRC Table 4's added mean and
p99 latency at half load, Table 3's CPU, Table 5's pause).

The lab lock (/run/lock/rrc-lab-tests.lock, the one the test suite takes) is
held for the whole run. Everything the script creates (services, unprotected
servers, the lab if it brought it up, the temporary directory) is removed on
success, failure and Ctrl-C. See bench/README.md.
"""
import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import cpu_breakdown
from benchlib import lab_lock, machine_description
from checkpoint_pause import BenchError, Cleanup, Interrupted, kill_popen, log, pct, run

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_RRC = REPO / "target" / "release" / "rrc"
DEFAULT_CHECK = REPO / "target" / "release" / "rrc-check"
CGROUP_ROOT = Path("/sys/fs/cgroup/unified")
CLIENT = "client"
PRIMARY, BACKUP = "a", "b"
UNPROTECTED_IP = "198.18.0.1"  # host a's front address (docs/lab.md)
AGENT_SOCK = "/run/rrc-lab/{host}/agent.sock"
SERVER_ORDER = ("redis", "memcached", "lighttpd")


# ---------------------------------------------------------------- servers

def server_specs(workdir, http_file_size):
    """What each server runs as: argv for the protected (port_p) and the
    unprotected (port_u) instance, which differ only in the port (lighttpd:
    in the port line of its configuration file)."""
    www = workdir / "www"
    www.mkdir()
    # Deterministic content: the same bytes every run (rrc-check compares
    # every body with this file).
    blob = bytes((i * 131 + (i >> 8) * 7) & 0xFF for i in range(http_file_size))
    (www / "file.bin").write_bytes(blob)
    os.chmod(workdir, 0o755)

    def lighttpd_conf(port):
        conf = workdir / f"lighttpd-{port}.conf"
        # keep-alive for the whole run: rrc-check never reconnects.
        conf.write_text(f'server.document-root = "{www}"\nserver.port = {port}\nserver.bind = "0.0.0.0"\n'
                        'server.max-keep-alive-requests = 65535\nserver.max-keep-alive-idle = 300\n'
                        'server.max-connections = 1024\nmimetype.assign = (".bin" => "application/octet-stream")\n')
        return conf

    def redis(port):
        return ["redis-server", "--save", "", "--appendonly", "no", "--port", str(port), "--protected-mode", "no"]

    def memcached(port):
        return ["memcached", "-t", "4", "-p", str(port), "-U", "0", "-u", "root", "-m", "64"]

    def lighttpd(port):
        return ["lighttpd", "-D", "-f", str(lighttpd_conf(port))]

    return {
        "redis": {"argv": redis, "port_p": 6379, "port_u": 6380, "check": "redis"},
        "memcached": {"argv": memcached, "port_p": 11211, "port_u": 11212, "check": "memcached"},
        "lighttpd": {"argv": lighttpd, "port_p": 80, "port_u": 8080, "check": "http",
                     "file": www / "file.bin", "file_bytes": http_file_size},
    }


# ---------------------------------------------------------------- rrc and the lab

class Lab:
    def __init__(self, rrc, check):
        self.rrc = str(rrc)
        self.check = str(check)

    def cli(self, *args, timeout=60, check=True):
        return run([self.rrc, *map(str, args)], timeout, check=check)

    def cli_json(self, *args, timeout=60):
        """args must include --json (before any `--` of a command line)."""
        out = self.cli(*args, timeout=timeout)
        try:
            return json.loads(out)
        except json.JSONDecodeError as e:
            raise BenchError(f"`rrc {shlex.join(map(str, args))} --json` printed no JSON ({e}): {out[:300]!r}")

    def exec_popen(self, host, argv, log_path):
        """Starts argv on host in the background. `rrc lab exec` execs the
        command in place, so the Popen's pid is the command's."""
        with open(log_path, "wb") as f:
            return subprocess.Popen([self.rrc, "lab", "exec", host, "--", *map(str, argv)],
                                    stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT)

    def wait_listening(self, ip, port, timeout=20, alive=None):
        """Until a TCP connect from the client host to ip:port succeeds."""
        probe = ("import socket,sys\ntry:\n socket.create_connection((sys.argv[1], int(sys.argv[2])), 1).close()\n"
                 "except OSError as e:\n print(e); sys.exit(1)\n")
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if alive is not None and not alive():
                raise BenchError(f"the server for {ip}:{port} exited before it listened")
            p = subprocess.run([self.rrc, "lab", "exec", CLIENT, "--", sys.executable, "-c", probe, ip, str(port)],
                               capture_output=True, text=True, timeout=15)
            if p.returncode == 0:
                return
            last = (p.stdout + p.stderr).strip()
            time.sleep(0.2)
        raise BenchError(f"{ip}:{port} not reachable from the client host within {timeout} s: {last}")

    def status_all(self):
        return self.cli_json("status", "--json", timeout=30)

    def status_primary(self, name):
        """The primary's view only: one agent asked, the cheapest probe."""
        return self.cli_json("status", name, "--agent", AGENT_SOCK.format(host=PRIMARY), "--json", timeout=30)


# ---------------------------------------------------------------- CPU accounting

# --pinned: the papers' primary, backup and clients each had machines of
# their own; here they share 2 CPUs. Pinned runs give the server (its
# container, snapshot children included) and the primary's agent one CPU,
# the client, the backup's agent and its gate the other.
SERVER_CPU, OTHER_CPU = 0, 1


def pin(pid, cpu):
    """Every thread of pid onto `cpu` (threads made later inherit it)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), {cpu})
        except (ProcessLookupError, OSError):
            pass  # a thread that just ended


def pin_agents(lab):
    for a in lab.status_all().get("agents", []):
        pin(a["agent_pid"], SERVER_CPU if a["host"] == PRIMARY else OTHER_CPU)


def proc_cpu_ms(pid):
    """utime + stime (+ waited-for children) of pid, in ms."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) * 1000.0 / ticks


def cgroup_of(pid):
    try:
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return CGROUP_ROOT / line[3:].lstrip("/")
    except OSError:
        pass
    return None


def cgroup_cpu_ms(cg):
    try:
        for line in (cg / "cpu.stat").read_text().splitlines():
            if line.startswith("usage_usec "):
                return int(line.split()[1]) / 1000.0
    except OSError:
        pass
    return None


class ServerCpu:
    """CPU of a server: the unprotected one from /proc/PID/stat (it is alone
    with the agent in host a's cgroup); the protected one from its
    container's cgroup, which also holds the snapshot children that write
    each checkpoint image (copy-on-write faults are charged to the server)."""

    def __init__(self, pid, protected):
        self.pid = pid
        self.cg = cgroup_of(pid) if protected else None
        if protected and (self.cg is None or "/services/" not in str(self.cg)):
            log(f"pid {pid}: container cgroup not found ({self.cg}); server CPU from /proc/{pid}/stat")
            self.cg = None
        self.source = f"cgroup {self.cg}" if self.cg else f"/proc/{pid}/stat"

    def ms(self):
        return cgroup_cpu_ms(self.cg) if self.cg else proc_cpu_ms(self.pid)

    def pids(self):
        """The server's processes: every one in the container's cgroup (the
        pause helper included), or the unprotected server alone."""
        if self.cg:
            try:
                return [int(x) for x in (self.cg / "cgroup.procs").read_text().split()]
            except OSError:
                pass
        return [self.pid]


# ---------------------------------------------------------------- one measured window

class StatusSampler(threading.Thread):
    """`rrc status NAME --agent <a's socket> --json` every interval: the
    primary's last_pause_us, last_checkpoint_bytes, replication_lag_ms and
    last_epoch. The agent keeps no per-checkpoint history, so these samples
    (deduplicated by epoch) are the distribution within a window."""

    def __init__(self, lab, name, interval_s):
        super().__init__(daemon=True)
        self.lab, self.name, self.interval_s = lab, name, interval_s
        self.stop_event = threading.Event()
        self.samples = []
        self.errors = []

    def run(self):
        while not self.stop_event.is_set():
            t = time.monotonic()
            try:
                st = self.lab.status_primary(self.name)["primary_view"]["stats"]
                self.samples.append({"t": t, **{k: st.get(k) for k in (
                    "last_epoch", "last_pause_us", "last_pause", "last_checkpoint_bytes", "replication_lag_ms",
                    "checkpoints_committed", "state")}})
            except Exception as e:  # keep sampling; reported in the result
                self.errors.append(str(e)[:300])
            self.stop_event.wait(max(0.0, self.interval_s - (time.monotonic() - t)))

    def finish(self):
        self.stop_event.set()
        self.join(timeout=30)
        by_epoch = {}
        for s in self.samples:
            if s["last_epoch"]:
                by_epoch.setdefault(s["last_epoch"], s)
        return list(by_epoch.values())


def service_of(status_all, name):
    for s in status_all.get("services", []):
        if s.get("name") == name:
            return s
    return None


def agents_cpu(status_all):
    return {h["host"]: h.get("agent_cpu_ms") for h in status_all.get("agents", []) if h.get("reachable")}


def agent_pids(status_all):
    """cpu_breakdown's roles: the primary's and the backup's agent."""
    pid = {h["host"]: h.get("agent_pid") for h in status_all.get("agents", []) if h.get("reachable")}
    return {"primary agent": pid.get(PRIMARY), "backup agent": pid.get(BACKUP)}


def client_load(lab, spec, target, args, duration_s, rate):
    """One rrc-check run on the client host; its JSON report. rrc-check
    checks every reply (a read returns the last acknowledged write, every
    body equals the file): a run with errors fails the benchmark."""
    argv = [lab.check, spec["check"]]
    if spec["check"] == "http":
        argv += ["--url", f"http://{target}/file.bin", "--file", str(spec["file"])]
    else:
        argv += ["--server", target, "--value-size", args.value_size, "--keys-per-thread", args.keys_per_thread]
    argv += ["--threads", args.connections, "--duration", f"{duration_s}s", "--json"]
    if rate:
        argv += ["--rate", f"{rate:.1f}"]
    if args.pinned:
        argv = ["taskset", "-c", str(OTHER_CPU), *argv]
    out = lab.cli("lab", "exec", CLIENT, "--", *argv, timeout=duration_s + 120, check=False)
    try:
        rep = json.loads(out)
    except json.JSONDecodeError:
        raise BenchError(f"rrc-check printed no JSON: {shlex.join(map(str, argv))}: {out[:500]!r}")
    if not rep.get("ok"):
        raise BenchError(f"rrc-check found errors against {target}: {rep.get('errors')} "
                         f"{rep.get('error_samples', [])[:3]}")
    return rep


def measure(lab, spec, target, args, duration_s, rate, server_cpu, service=None, tag=""):
    """One measured window: the load, and around it the agents' CPU (and the
    server's), plus for a protected service its checkpoints."""
    sampler = None
    before = lab.status_all()
    srv0 = server_cpu.ms()
    threads0 = cpu_breakdown.take(server_cpu.pids(), agent_pids(before))
    if service:
        sampler = StatusSampler(lab, service, args.sample_ms / 1000)
        sampler.start()
    t0 = time.monotonic()
    try:
        rep = client_load(lab, spec, target, args, duration_s, rate)
    finally:
        wall_s = time.monotonic() - t0
        sampled = sampler.finish() if sampler else None
    srv1 = server_cpu.ms()
    threads1 = cpu_breakdown.take(server_cpu.pids(), agent_pids(before))
    after = lab.status_all()
    c0, c1 = agents_cpu(before), agents_cpu(after)
    lat = rep["latency_us"]
    res = {
        "rate_requested_ops_s": rate or None,
        "wall_s": wall_s,
        "throughput_ops_s": rep["throughput_ops_s"],
        "latency_us": {k: lat.get(k) for k in ("mean", "p50", "p90", "p99", "max")},
        "rate_reached": (rep["throughput_ops_s"] >= 0.9 * rate) if rate else None,
        "agents_cpu_pct": {h: 100.0 * (c1[h] - c0[h]) / (wall_s * 1000) for h in sorted(c0)
                           if h in c1 and c0[h] is not None and c1[h] is not None},
        "server_cpu_pct": (100.0 * (srv1 - srv0) / (wall_s * 1000)) if srv0 is not None and srv1 is not None
        else None,
        "client": {k: v for k, v in rep.items() if k != "error_samples"},
        "cpu_us_per_op": cpu_breakdown.per_op(threads0, threads1, rep.get("ops"),
                                              (srv1 - srv0) if server_cpu.cg and srv0 is not None and srv1 is not None
                                              else None),
    }
    res["host_cpu_pct"] = cpu_breakdown.host_cpu_pct(res["cpu_us_per_op"], rep["throughput_ops_s"])
    if service:
        s0, s1 = service_of(before, service), service_of(after, service)
        p0, p1 = s0["primary_view"]["stats"], s1["primary_view"]["stats"]
        b0, b1 = s0["backup_view"]["stats"], s1["backup_view"]["stats"]
        g0, g1 = s0["backup_view"]["gate"], s1["backup_view"]["gate"]
        n_ckpt = p1["checkpoints_committed"] - p0["checkpoints_committed"]
        n_recv = b1["checkpoints_committed"] - b0["checkpoints_committed"]
        recv_bytes = b1["received_bytes"] - b0["received_bytes"]
        res["checkpoint"] = {
            "committed": n_ckpt,
            "per_s": n_ckpt / wall_s,
            "full": p1["full_checkpoints"] - p0["full_checkpoints"],
            "rejected": p1["checkpoints_rejected"] - p0["checkpoints_rejected"],
            # backup_view.stats.received_bytes is cumulative: the exact mean
            "bytes_mean": recv_bytes / n_recv if n_recv > 0 else None,
            "replication_MBps": recv_bytes / wall_s / 1e6,
            "bytes_sampled": pct([s["last_checkpoint_bytes"] for s in sampled]),
            "pause_us_sampled": pct([s["last_pause_us"] for s in sampled]),
            # the pause's phases (PausePhases; the library's DUMP reply), sampled the same way
            "pause_phases_us_sampled": {
                ph: pct([s["last_pause"][ph] for s in sampled if s.get("last_pause")])
                for ph in ("quiesce_us", "scan_us", "capture_us", "fork_us", "copy_us", "copied_pages",
                           "precopy_us", "precopy_pages", "threads")},
            "replication_lag_ms_sampled": pct([s["replication_lag_ms"] for s in sampled]),
            "samples": len(sampled),
            "sampler_errors": sampler.errors[:5],
            "gate_released_packets": g1["packets_released"] - g0["packets_released"],
            "gate_held_packets_total": g1["packets_held_total"] - g0["packets_held_total"],
            "gate_netlink_enobufs": g1["netlink_enobufs"] - g0["netlink_enobufs"],
            "backup_store_bytes_end": b1.get("store_bytes"),
        }
        res["_raw_samples"] = sampled
    r = res
    lat_s = (f"mean {r['latency_us']['mean'] / 1e3:.2f} ms p99 {r['latency_us']['p99'] / 1e3:.2f} ms"
             if r["latency_us"]["mean"] is not None else f"p50 {r['latency_us']['p50'] / 1e3:.2f} ms")
    extra = ""
    if service:
        ck = res["checkpoint"]
        pz = ck["pause_us_sampled"] or {}
        extra = (f"; {ck['committed']} ckpts, {(ck['bytes_mean'] or 0) / 1e3:.0f} kB each, pause p50 "
                 f"{pz.get('p50', 0) / 1e3:.2f} ms")
    cpu = " ".join(f"{h} {v:.1f}%" for h, v in res["agents_cpu_pct"].items())
    log(f"  {tag}: {r['throughput_ops_s']:.0f} ops/s"
        f"{f' (asked {rate:.0f})' if rate else ''}, {lat_s}; agents {cpu}{extra}")
    return res


# ---------------------------------------------------------------- one server

def config_key(mode, ep):
    """The name of a configuration in the results: "rr-100ms"."""
    return f"{mode}-{ep}ms"


def run_server(lab, name, spec, args, workdir, cleanup, configs):
    """Unprotected first (saturation, half of its own), then per configuration the
    protected service (saturation, half of its own), then each side at the
    other's half when that is the lower one. The unprotected server stays up,
    idle, while the protected one is measured."""
    out = {"unprotected": {}, "protected": {}}
    log(f"{name}: unprotected on {PRIMARY} ({UNPROTECTED_IP}:{spec['port_u']})")
    argv_u = spec["argv"](spec["port_u"])
    up = lab.exec_popen(PRIMARY, argv_u, workdir / f"{name}-unprotected.log")
    uidx = cleanup.push(f"stop unprotected {name}", lambda: kill_popen(up, f"unprotected {name}"))
    lab.wait_listening(UNPROTECTED_IP, spec["port_u"], alive=lambda: up.poll() is None)
    if args.pinned:
        pin(up.pid, SERVER_CPU)
    target_u = f"{UNPROTECTED_IP}:{spec['port_u']}"
    cpu_u = ServerCpu(up.pid, protected=False)
    out["unprotected"]["argv"] = argv_u
    out["unprotected"]["server_cpu_source"] = cpu_u.source
    if args.warmup > 0:
        client_load(lab, spec, target_u, args, args.warmup, 0)
    u = out["unprotected"]
    u["saturation"] = measure(lab, spec, target_u, args, args.duration, 0, cpu_u, tag="unprotected saturation")
    half_u = u["saturation"]["throughput_ops_s"] / 2
    u["half_own"] = measure(lab, spec, target_u, args, args.duration, half_u, cpu_u,
                            tag="unprotected at half its own")
    u["at_common"] = {}

    for mode, ep in configs:
        key = config_key(mode, ep)
        svc = f"bench-{name}-{key}"
        argv_p = spec["argv"](spec["port_p"])
        log(f"{name}: protected, {mode} mode, epoch {ep} ms (rrc run --name {svc})")
        info = lab.cli_json("run", "--name", svc, "--primary", PRIMARY, "--backup", BACKUP, "--mode", mode,
                            "--epoch", f"{ep}ms", "--json", "--", *argv_p, timeout=60)
        pidx = cleanup.push(f"rrc stop {svc}", lambda svc=svc: lab.cli("stop", svc, timeout=60))
        ip = info["service_ip"]
        target_p = f"{ip}:{spec['port_p']}"
        deadline = time.monotonic() + 30
        while True:
            st = lab.cli_json("status", svc, "--json")
            if st.get("protected") and st.get("checkpoints_committed", 0) > 0:
                break
            if time.monotonic() > deadline:
                raise BenchError(f"{svc}: no checkpoint committed within 30 s: {json.dumps(st)[:1500]}")
            time.sleep(0.1)
        lab.wait_listening(ip, spec["port_p"])
        if args.pinned:
            pin(info["pid"], SERVER_CPU)
        cpu_p = ServerCpu(info["pid"], protected=True)
        p = {"service": svc, "service_ip": ip, "argv": argv_p, "mode": mode, "epoch_ms": ep,
             "server_cpu_source": cpu_p.source}
        out["protected"][key] = p
        if args.warmup > 0:
            client_load(lab, spec, target_p, args, args.warmup, 0)
        p["saturation"] = measure(lab, spec, target_p, args, args.duration, 0, cpu_p, service=svc,
                                  tag=f"protected {key} saturation")
        half_p = p["saturation"]["throughput_ops_s"] / 2
        p["half_own"] = measure(lab, spec, target_p, args, args.duration, half_p, cpu_p, service=svc,
                                tag=f"protected {key} at half its own")
        common = min(half_u, half_p)
        # The side whose own half is the common rate reuses that window.
        if half_u < half_p * 0.99:
            p["at_common"] = measure(lab, spec, target_p, args, args.duration, common, cpu_p, service=svc,
                                     tag=f"protected {key} at the unprotected half")
        else:
            p["at_common"] = {"same_as": "half_own"}
        end = lab.cli_json("status", svc, "--json")
        pst = end["primary_view"]["stats"]
        p["over_the_service_run"] = {
            "checkpoints_committed": pst["checkpoints_committed"],
            "full_checkpoints": pst["full_checkpoints"],
            "checkpoints_rejected": pst["checkpoints_rejected"],
            "pause_us_p50": pst["pause_us_p50"],
            "pause_us_p99": pst["pause_us_p99"],
            "what": "the primary agent's p50/p99 over the service's life (its last <= 4096 checkpoints), "
                    "idle epochs before the first load included",
        }
        p["backup_gate_end"] = end["backup_view"]["gate"]
        cleanup.run_one(pidx)
        if half_p < half_u * 0.99:
            u["at_common"][key] = measure(lab, spec, target_u, args, args.duration, common, cpu_u,
                                          tag=f"unprotected at the protected {key} half")
        else:
            u["at_common"][key] = {"same_as": "half_own"}
        out.setdefault("ratios", {})[key] = ratios(u, p, key)
    cleanup.run_one(uidx)
    return out


def resolve_common(side, key=None):
    w = side["at_common"][key] if key is not None else side["at_common"]
    return side["half_own"] if w.get("same_as") == "half_own" else w


def ratios(u, p, key):
    def r(a, b):
        return a / b if a is not None and b else None
    uc, pc = resolve_common(u, key), resolve_common(p)
    return {
        "throughput_saturation": r(p["saturation"]["throughput_ops_s"], u["saturation"]["throughput_ops_s"]),
        "latency_mean_half_own": r(p["half_own"]["latency_us"]["mean"], u["half_own"]["latency_us"]["mean"]),
        "latency_p99_half_own": r(p["half_own"]["latency_us"]["p99"], u["half_own"]["latency_us"]["p99"]),
        "latency_mean_common_rate": r(pc["latency_us"]["mean"], uc["latency_us"]["mean"]),
        "latency_p99_common_rate": r(pc["latency_us"]["p99"], uc["latency_us"]["p99"]),
        "common_rate_ops_s": pc["rate_requested_ops_s"],
    }


# ---------------------------------------------------------------- summary, plot

def table_rows(results, configs):
    rows = []
    for name in results:
        u = results[name]["unprotected"]
        for mode, ep in configs:
            key = config_key(mode, ep)
            p = results[name]["protected"][key]
            uc, pc = resolve_common(u, key), resolve_common(p)
            ck_s, ck_h = p["saturation"]["checkpoint"], p["half_own"]["checkpoint"]
            rows.append({
                "server": name, "mode": mode, "epoch_ms": ep,
                "throughput_u": u["saturation"]["throughput_ops_s"],
                "throughput_p": p["saturation"]["throughput_ops_s"],
                "half_u": {k: u["half_own"]["latency_us"][k] for k in ("mean", "p99")},
                "half_p": {k: p["half_own"]["latency_us"][k] for k in ("mean", "p99")},
                "common_rate": pc["rate_requested_ops_s"],
                "common_u": {k: uc["latency_us"][k] for k in ("mean", "p99")},
                "common_p": {k: pc["latency_us"][k] for k in ("mean", "p99")},
                "pause_run_us": {"p50": p["over_the_service_run"]["pause_us_p50"],
                                 "p99": p["over_the_service_run"]["pause_us_p99"],
                                 "n": p["over_the_service_run"]["checkpoints_committed"]},
                "pause_sat_sampled_us": ck_s["pause_us_sampled"],
                "pause_phases_sat_p50_us": {ph: (v or {}).get("p50")
                                            for ph, v in (ck_s.get("pause_phases_us_sampled") or {}).items()},
                "ckpt_bytes_mean_sat": ck_s["bytes_mean"],
                "ckpt_bytes_mean_half": ck_h["bytes_mean"],
                "ckpt_bytes_p50_sat": (ck_s["bytes_sampled"] or {}).get("p50"),
                "ckpt_per_s_sat": ck_s["per_s"],
                "agents_cpu_sat": {h: p["saturation"]["agents_cpu_pct"].get(h) for h in (PRIMARY, BACKUP)},
                "agents_cpu_half": {h: p["half_own"]["agents_cpu_pct"].get(h) for h in (PRIMARY, BACKUP)},
                "agents_cpu_unprotected_sat": {h: u["saturation"]["agents_cpu_pct"].get(h) for h in (PRIMARY, BACKUP)},
                "server_cpu_sat_u": u["saturation"]["server_cpu_pct"],
                "server_cpu_sat_p": p["saturation"]["server_cpu_pct"],
                "cpu_us_per_op_sat_u": u["saturation"]["cpu_us_per_op"],
                "cpu_us_per_op_sat_p": p["saturation"]["cpu_us_per_op"],
                "host_cpu_pct_sat_p": p["saturation"]["host_cpu_pct"],
                "host_cpu_pct_half_p": p["half_own"]["host_cpu_pct"],
                "ratios": results[name]["ratios"][key],
            })
    return rows


def print_table(rows):
    def ms(us):
        return "n/a" if us is None else f"{us / 1e3:.2f}"
    print("server     mode        epoch  sat ops/s U / P (ratio)      half-own mean|p99 ms U / P        "
          "common-rate mean|p99 ms U / P   pause p50|p99 ms  ckpt kB  agents a+b %CPU sat|half")
    for r in rows:
        cpu_s = sum(v or 0 for v in r["agents_cpu_sat"].values())
        cpu_h = sum(v or 0 for v in r["agents_cpu_half"].values())
        print(f"{r['server']:<10} {r['mode']:<10} {r['epoch_ms']:>4}ms  {r['throughput_u']:>8.0f} / {r['throughput_p']:>6.0f} "
              f"({r['ratios']['throughput_saturation']:.3f})   "
              f"{ms(r['half_u']['mean'])}|{ms(r['half_u']['p99'])} / {ms(r['half_p']['mean'])}|{ms(r['half_p']['p99'])}"
              f"   @{r['common_rate']:.0f}/s {ms(r['common_u']['mean'])}|{ms(r['common_u']['p99'])} / "
              f"{ms(r['common_p']['mean'])}|{ms(r['common_p']['p99'])}   "
              f"{ms(r['pause_run_us']['p50'])}|{ms(r['pause_run_us']['p99'])}  "
              f"{(r['ckpt_bytes_mean_sat'] or 0) / 1e3:>7.0f}  {cpu_s:.1f}|{cpu_h:.1f}")


def plot(path, res, configs):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    results = res["results"]
    names = list(results)
    x = np.arange(len(names))
    keys = [config_key(m, e) for m, e in configs]
    nb = 1 + len(keys)
    w = 0.8 / nb
    blues = plt.cm.Blues(np.linspace(0.55, 0.9, len(keys)))
    fig, ax = plt.subplots(3, 3, figsize=(17, 14))
    fig.suptitle(f"rrc protecting (primary a, backup b; {', '.join(keys)}) vs the same server unprotected, "
                 f"{res['config']['connections']} connections; {res['machine']['date_utc']}, "
                 f"{res['machine']['nproc']} CPUs (shared: see the noise caveat)", fontsize=11)

    def bars(a, get, label_u="unprotected", log=True, unit_scale=1.0, fmt="{:.0f}"):
        """Grouped bars per server: unprotected, then one per epoch."""
        vals_u = [get(results[n]["unprotected"], None) for n in names]
        every = [v / unit_scale for v in vals_u if v]
        b = a.bar(x - 0.4 + w / 2, [v / unit_scale if v is not None else 0 for v in vals_u], w,
                  color="0.6", label=label_u)
        a.bar_label(b, labels=[fmt.format(v / unit_scale) if v is not None else "" for v in vals_u], fontsize=7)
        for i, k in enumerate(keys):
            vals = [get(results[n]["protected"][k], k) for n in names]
            b = a.bar(x - 0.4 + w / 2 + (i + 1) * w, [v / unit_scale if v is not None else 0 for v in vals], w,
                      color=blues[i], label=f"protected, {k}")
            a.bar_label(b, labels=[fmt.format(v / unit_scale) if v is not None else "" for v in vals], fontsize=7)
            every += [v / unit_scale for v in vals if v]
        a.set_xticks(x, names)
        if log and every:
            a.set_yscale("log")
            # bars on a log axis start at its bottom: put it well below the smallest
            a.set_ylim(bottom=min(every) / 4, top=max(every) * 6)
        a.legend(fontsize=8)

    a = ax[0][0]
    bars(a, lambda s, k: s["saturation"]["throughput_ops_s"])
    a.set_title("throughput at saturation (closed loop)")
    a.set_ylabel("ops/s (log)")

    def lat(win, stat):
        def get(side, k):
            if win == "half_own":
                return side["half_own"]["latency_us"][stat]
            if k is None:  # unprotected at the common rate of the first epoch
                return resolve_common(side, keys[0])["latency_us"][stat]
            return resolve_common(side)["latency_us"][stat]
        return get

    a = ax[0][1]
    bars(a, lat("half_own", "mean"), unit_scale=1e3, fmt="{:.2f}")
    # p99 as black ticks over the mean bars
    for n_i, n in enumerate(names):
        vals = [results[n]["unprotected"]["half_own"]["latency_us"]["p99"]] + \
               [results[n]["protected"][k]["half_own"]["latency_us"]["p99"] for k in keys]
        for j, v in enumerate(vals):
            a.plot([x[n_i] - 0.4 + w / 2 + j * w], [v / 1e3], "k_", ms=14, mew=2)
        a.set_ylim(top=max(a.get_ylim()[1], max(vals) / 1e3 * 2))
    a.set_title("latency at half of its own saturation throughput\nbars: mean, black tick: p99")
    a.set_ylabel("ms (log)")

    a = ax[0][2]
    bars(a, lat("common", "mean"), unit_scale=1e3, fmt="{:.2f}",
         label_u=f"unprotected (at the {keys[0]} rate)")
    for n_i, n in enumerate(names):
        vals = [resolve_common(results[n]["unprotected"], keys[0])["latency_us"]["p99"]] + \
               [resolve_common(results[n]["protected"][k])["latency_us"]["p99"] for k in keys]
        for j, v in enumerate(vals):
            a.plot([x[n_i] - 0.4 + w / 2 + j * w], [v / 1e3], "k_", ms=14, mew=2)
        a.set_ylim(top=max(a.get_ylim()[1], max(vals) / 1e3 * 2))
    a.set_title("latency at the same absolute rate (the lower half)\nbars: mean, black tick: p99")
    a.set_ylabel("ms (log)")

    a = ax[1][0]
    for i, k in enumerate(keys):
        p50 = [results[n]["protected"][k]["over_the_service_run"]["pause_us_p50"] / 1e3 for n in names]
        p99 = [results[n]["protected"][k]["over_the_service_run"]["pause_us_p99"] / 1e3 for n in names]
        xs = x + (i - (len(keys) - 1) / 2) * w  # no unprotected bar here: centred
        b = a.bar(xs, p50, w, color=blues[i], label=f"p50, {k}")
        a.bar_label(b, labels=[f"{v:.2f}" for v in p50], fontsize=7)
        a.plot(xs, p99, "k_", ms=14, mew=2, label="p99" if i == 0 else None)
    a.set_xticks(x, names)
    a.set_title("checkpoint pause over each service's run")
    a.set_ylabel("ms")
    a.legend(fontsize=8)

    a = ax[1][1]
    for i, k in enumerate(keys):
        for j, (win, hatch) in enumerate((("saturation", None), ("half_own", "//"))):
            vals = [(results[n]["protected"][k][win]["checkpoint"]["bytes_mean"] or 0) / 1e3 for n in names]
            xs = x + (i - (len(keys) - 1) / 2) * w + (j - 0.5) * w / 2
            b = a.bar(xs, vals, w / 2, color=blues[i], hatch=hatch, edgecolor="k", lw=0.3,
                      label=f"{k}, {'saturation' if win == 'saturation' else 'half load'}")
            a.bar_label(b, labels=[f"{v:.0f}" for v in vals], fontsize=6)
    a.set_xticks(x, names)
    a.set_title("checkpoint size (mean; from the backup's received bytes)")
    a.set_ylabel("kB per checkpoint")
    a.legend(fontsize=8)

    a = ax[1][2]
    for i, k in enumerate(keys):
        for j, (win, hatch) in enumerate((("saturation", None), ("half_own", "//"))):
            ca = [results[n]["protected"][k][win]["agents_cpu_pct"].get(PRIMARY, 0) for n in names]
            cb = [results[n]["protected"][k][win]["agents_cpu_pct"].get(BACKUP, 0) for n in names]
            xs = x - 0.4 + w / 2 + (i + 1) * w + (j - 0.5) * w / 2
            a.bar(xs, ca, w / 2, color=blues[i], hatch=hatch, edgecolor="k", lw=0.3,
                  label=f"agent a (primary), {k}" if j == 0 else None)
            b = a.bar(xs, cb, w / 2, bottom=ca, color="tab:orange", hatch=hatch, edgecolor="k", lw=0.3,
                      label=f"agent b (backup + gate)" if (i == 0 and j == 0) else None)
            a.bar_label(b, labels=[f"{p + q:.0f}" for p, q in zip(ca, cb)], fontsize=6)
    cu = [sum(results[n]["unprotected"]["saturation"]["agents_cpu_pct"].get(h, 0) for h in (PRIMARY, BACKUP))
          for n in names]
    b = a.bar(x - 0.4 + w / 2, cu, w, color="0.6", label="agents a+b, unprotected run (idle)")
    a.bar_label(b, labels=[f"{v:.1f}" for v in cu], fontsize=6)
    a.set_xticks(x, names)
    a.set_title("CPU of the agents (plain: saturation, hatched: half load)")
    a.set_ylabel("% of one CPU")
    a.legend(fontsize=7)

    # where the CPU goes, per operation (RRC Figure 3's question; cpu_breakdown.py)
    cpu_breakdown.plot_panel(ax[2][0], results, names, keys, "saturation",
                             "CPU per operation at saturation, by thread\n(fixed work: the same per op at any run length)")
    cpu_breakdown.plot_panel(ax[2][1], results, names, keys, "half_own", "CPU per operation at half of its own saturation")
    a = ax[2][2]
    for i, k in enumerate(keys):
        for j, (win, hatch) in enumerate((("saturation", None), ("half_own", "//"))):
            hc = [results[n]["protected"][k][win].get("host_cpu_pct") or {} for n in names]
            pa, pb = [h.get("primary", 0) for h in hc], [h.get("backup", 0) for h in hc]
            xs = x + (i - (len(keys) - 1) / 2) * w + (j - 0.5) * w / 2
            a.bar(xs, pa, w / 2, color=blues[i], hatch=hatch, edgecolor="k", lw=0.3,
                  label=f"primary (server + agent a), {k}" if j == 0 else None)
            b = a.bar(xs, pb, w / 2, bottom=pa, color="tab:orange", hatch=hatch, edgecolor="k", lw=0.3,
                      label="backup (agent b)" if (i == 0 and j == 0) else None)
            a.bar_label(b, labels=[f"{p:.0f}+{q:.0f}" for p, q in zip(pa, pb)], fontsize=6)
    a.set_xticks(x, names)
    a.set_title("CPU on the primary and on the backup (RRC Table 3)\nplain: saturation, hatched: half load")
    a.set_ylabel("% of one CPU")
    a.legend(fontsize=7)

    fig.tight_layout(rect=(0, 0, 1, 0.96))
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---------------------------------------------------------------- main

def parse_configs(text):
    """"checkpoint:30ms,rr:100ms" -> [("checkpoint", 30), ("rr", 100)]."""
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        mode, _, dur = part.partition(":")
        if mode not in ("checkpoint", "rr") or not dur:
            raise argparse.ArgumentTypeError(f"{part!r}: expected MODE:EPOCH, MODE checkpoint or rr, e.g. rr:100ms")
        try:
            if dur.endswith("ms"):
                v = float(dur[:-2])
            elif dur.endswith("s"):
                v = float(dur[:-1]) * 1000
            else:
                v = float(dur)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r}: expected an epoch like 30ms or 0.1s")
        if not (1 <= v <= 10000) or v != int(v):
            raise argparse.ArgumentTypeError(f"{part!r}: an epoch is a whole number of ms in 1..10000")
        out.append((mode, int(v)))
    if not out or len(set(out)) != len(out):
        raise argparse.ArgumentTypeError(f"{text!r}: expected distinct configurations, e.g. checkpoint:30ms,rr:100ms")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--configs", type=parse_configs, default=parse_configs("checkpoint:30ms,rr:100ms"),
                    help="the protected runs, MODE:EPOCH comma-separated (MODE checkpoint or rr; e.g. "
                         "checkpoint:30ms,checkpoint:100ms,rr:100ms); the default is each mode's default epoch")
    ap.add_argument("--servers", default=",".join(SERVER_ORDER),
                    help="comma-separated subset of " + ",".join(SERVER_ORDER))
    ap.add_argument("--connections", type=int, default=64,
                    help="client connections (rrc-check threads, one connection each), the same for every "
                         "run: in checkpoint mode each reply waits ~1 epoch, so saturation throughput "
                         "scales with this")
    ap.add_argument("--duration", type=float, default=None,
                    help="seconds per measured window (default 10; 3 with --quick)")
    ap.add_argument("--warmup", type=float, default=None,
                    help="seconds of unmeasured saturation load before each configuration's first window "
                         "(default 2; 1 with --quick)")
    ap.add_argument("--quick", action="store_true", help="short windows: a ~1-minute smoke run")
    ap.add_argument("--pinned", action="store_true",
                    help=f"the server (and the primary's agent) on CPU {SERVER_CPU}, the client and the backup's "
                         f"agent (with its gate) on CPU {OTHER_CPU}; results name + _pinned")
    ap.add_argument("--value-size", type=int, default=64, help="redis/memcached value size (bytes)")
    ap.add_argument("--keys-per-thread", type=int, default=100, help="redis/memcached keys per connection")
    ap.add_argument("--http-file-size", type=int, default=4096, help="size of lighttpd's static file (bytes)")
    ap.add_argument("--sample-ms", type=int, default=200, help="interval of the checkpoint status sampler")
    ap.add_argument("--reuse-lab", action="store_true",
                    help="use a lab that is already up (and leave it up); default: refuse")
    ap.add_argument("--lock-wait", type=float, default=1200, help="seconds to wait for the lab lock")
    ap.add_argument("--rrc", type=Path, default=DEFAULT_RRC, help="the rrc binary")
    ap.add_argument("--rrc-check", type=Path, default=DEFAULT_CHECK, help="the rrc-check binary")
    ap.add_argument("--out", type=Path, default=None,
                    help="output prefix (.json, .png); default bench/results/replication "
                         "(bench/results/replication_quick with --quick)")
    ap.add_argument("--no-plot", action="store_true", help="skip the PNG (no matplotlib needed)")
    args = ap.parse_args()
    if args.duration is None:
        args.duration = 3.0 if args.quick else 10.0
    if args.warmup is None:
        args.warmup = 1.0 if args.quick else 2.0
    servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    if not servers or any(s not in SERVER_ORDER for s in servers) or len(set(servers)) != len(servers):
        ap.error(f"--servers: a subset of {','.join(SERVER_ORDER)}")
    if not (1 <= args.connections <= 512 and 1 <= args.duration <= 600 and 0 <= args.warmup <= 60
            and 32 <= args.value_size <= 1 << 20 and 1 <= args.keys_per_thread <= 100000
            and 1 <= args.http_file_size <= 64 << 20 and 50 <= args.sample_ms <= 5000):
        ap.error("argument out of range")
    if args.out is None:
        args.out = HERE / "results" / (("replication_quick" if args.quick else "replication")
                                       + ("_pinned" if args.pinned else ""))
    if os.geteuid() != 0:
        sys.exit("replication.py: needs root (the lab)")
    for b in (args.rrc, args.rrc_check):
        if not (b.is_file() and os.access(b, os.X_OK)):
            sys.exit(f"replication.py: {b} not found or not executable (run `make` first)")
    need = {"redis": "redis-server", "memcached": "memcached", "lighttpd": "lighttpd"}
    for s in servers:
        if not shutil.which(need[s]):
            sys.exit(f"replication.py: {need[s]} not found (scripts/setup.sh installs it)")
    try:
        import numpy  # noqa: F401
        if not args.no_plot:
            import matplotlib  # noqa: F401
    except ImportError as e:
        sys.exit(f"replication.py: {e} (pip install matplotlib; or pass --no-plot, numpy is still needed)")

    def on_signal(signum, frame):
        raise Interrupted(f"signal {signum}")
    # SIGINT too: a shell starts background jobs with SIGINT ignored.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)

    lab = Lab(args.rrc.resolve(), args.rrc_check.resolve())
    cleanup = Cleanup()
    rc = 1
    t_start = time.monotonic()
    try:
        with lab_lock(args.lock_wait):
            try:
                workdir = Path(tempfile.mkdtemp(prefix="rrc-bench-repl-"))
                cleanup.push(f"remove {workdir}", lambda: shutil.rmtree(workdir))
                machine = machine_description()
                st = lab.cli_json("lab", "status", "--json", timeout=30)
                if st.get("up"):
                    if not args.reuse_lab:
                        raise BenchError("a lab is already up (someone else's?): `rrc lab down` first, "
                                         "or pass --reuse-lab to use it as it is")
                    if not st.get("agents"):
                        raise BenchError("the lab that is up has no agents")
                    log("reusing the lab that is up (it stays up)")
                    lab_owned = False
                else:
                    log("rrc lab up")
                    cleanup.push("rrc lab down", lambda: lab.cli("lab", "down", timeout=120))
                    lab.cli("lab", "up", timeout=120)
                    lab_owned = True
                if args.pinned:
                    pin_agents(lab)
                specs = server_specs(workdir, args.http_file_size)
                results = {}
                for s in servers:
                    results[s] = run_server(lab, s, specs[s], args, workdir, cleanup, args.configs)
                machine["loadavg_at_end"] = Path("/proc/loadavg").read_text().strip()
                # the raw sampler points are large and only the plot's business
                for s in results.values():
                    for p in s["protected"].values():
                        for win in ("saturation", "half_own", "at_common"):
                            p[win].pop("_raw_samples", None)
                res = {
                    "benchmark": "replication",
                    "issue": 3,
                    "command": shlex.join([sys.executable] + sys.argv),
                    "machine": machine,
                    "config": {
                        "servers": servers,
                        "configs": [{"mode": m, "epoch_ms": e, "key": config_key(m, e)} for m, e in args.configs],
                        "connections": args.connections,
                        "duration_s": args.duration,
                        "warmup_s": args.warmup,
                        "quick": args.quick,
                        "pinned": (f"server and agent {PRIMARY} on CPU {SERVER_CPU}; client, agent {BACKUP} "
                                   f"and its gate on CPU {OTHER_CPU}") if args.pinned else "no (the scheduler's choice)",
                        "client": "rrc-check on the lab's client host, one connection per thread; redis/"
                                  "memcached: SET new versions of the thread's own keys and GET them back "
                                  f"(values {args.value_size} B, {args.keys_per_thread} keys per connection); "
                                  f"lighttpd: GET of one {args.http_file_size}-byte static file over keep-alive",
                        "saturation": "closed loop, no rate limit",
                        "half_load": "--rate = half the configuration's own saturation throughput, paced "
                                     "evenly per connection (missed slots dropped); latency from the send",
                        "common_rate": "both sides at the lower of the two halves (usually the protected one)",
                        "unprotected": f"same binary and argv but the port, started on host {PRIMARY} "
                                       f"with `rrc lab exec`, reached at {UNPROTECTED_IP} directly",
                        "protected": f"`rrc run --primary {PRIMARY} --backup {BACKUP} --mode M --epoch E`, reached at "
                                     "its service IP through the backup's gate",
                        "order": "per server: unprotected saturation, unprotected half; per configuration: protected "
                                 "saturation, half, (at the unprotected half), stop, (unprotected at the "
                                 "protected half); the unprotected server stays up idle meanwhile",
                        "cpu_us_per_op": "bench/cpu_breakdown.py: every thread of the server's processes and of both agents, "
                                         "utime+stime from /proc over the window, by component (thread name), per completed op",
                        "host_cpu_pct": "from cpu_us_per_op: % of one CPU on the primary's side (server, library, agent a) and on the backup's (agent b)",
                        "agents_cpu": "delta of agent_cpu_ms (getrusage of the agent process) over the "
                                      "window's wall time, % of one CPU",
                        "server_cpu": "unprotected: /proc/PID/stat; protected: the container's cgroup "
                                      "(server + snapshot children)",
                        "checkpoint_size": "bytes_mean = delta of the backup's received_bytes / checkpoints "
                                           "committed in the window (exact); bytes_sampled/pause_us_sampled "
                                           f"= the primary's last_* sampled every {args.sample_ms} ms",
                        "lab": "brought up by the benchmark" if lab_owned else "reused (--reuse-lab)",
                        "rrc": str(args.rrc), "rrc_check": str(args.rrc_check),
                    },
                    "results": results,
                    "summary": table_rows(results, args.configs),
                    "run_seconds": time.monotonic() - t_start,
                }
                args.out.parent.mkdir(parents=True, exist_ok=True)
                jpath = args.out.with_suffix(".json")
                jpath.write_text(json.dumps(res, indent=1) + "\n")
                log(f"wrote {jpath}")
                if not args.no_plot:
                    ppath = args.out.with_suffix(".png")
                    plot(ppath, res, args.configs)
                    log(f"wrote {ppath}")
                print_table(res["summary"])
                rc = 0
            except BenchError:
                for f in sorted(workdir.glob("*.log")) if "workdir" in locals() else []:
                    tail = f.read_text(errors="replace").splitlines()[-6:]
                    if tail:
                        log(f"last lines of {f.name}:\n  " + "\n  ".join(tail))
                raise
            finally:
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # let the cleanup finish
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                cleanup.run_all()  # under the lock: the lab goes down before another session gets it
    except BenchError as e:
        log(f"FAILED: {e}")
    except (KeyboardInterrupt, Interrupted) as e:
        log(f"interrupted ({e or 'Ctrl-C'}), cleaned up")
        rc = 130
    log(f"took {time.monotonic() - t_start:.0f} s")
    return rc


if __name__ == "__main__":
    sys.exit(main())
