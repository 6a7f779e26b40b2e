"""The floor under rr mode's throughput on this machine (issue 14's
targets): what the packet path of a protected service costs by itself,
before any recording, logging or checkpointing, measured on the stock
server in the same run as rr mode.

rr mode routes every packet of the service through the backup, whose
NFQUEUE gate sees both directions (docs/gate.md). Each configuration
below adds one piece of that path to the *unprotected* server (the same
binary on lab host a, outside any container), so the steps between them
are the price of each piece on these 2 shared CPUs:

- direct: client -> a (the stock setup of bench/replication.py);
- routed: client -> b -> a and back through b (a test address on a's
  loopback, routed via b's replication link both ways, policy-routed on a
  like a protected service's replies): the extra hop;
- routed + NFQUEUE out: the same, with b's FORWARD chain queueing the
  server's packets to a pass-through reader (rrc-gate's NfQueue, batched
  recvmmsg and verdicts as the gate does, accepting each at once:
  crates/rrc-gate/examples/nfq_passthrough.rs);
- routed + NFQUEUE both: both directions queued (what the gate does);
- routed + AF_XDP out (only if asked: `--configs ...,routed_xdp_out`):
  XDP on b's link from a sends the server's packets to an AF_XDP socket,
  and bench/probes/xdp_gate.c copies each into a second UMEM and
  transmits it on b's link to the client (the way to hold packets in user
  space other than NFQUEUE on this kernel). It needs clang, libbpf and
  libxdp (`apt-get install clang libbpf-dev libxdp-dev ethtool`; not
  installed by `make`), and a veth hands XDP packets without checksums,
  so for the whole run a's link to b computes them in software (`ethtool
  -K repl tx off`, every configuration alike);
- routed + the gate's AF_XDP out (`routed_gate_xdp_out`): the same with
  rrc-gate's own output path (its XDP program, AF_XDP sockets in and out,
  the gate's copy and checksum work: crates/rrc-gate/examples/
  xdp_passthrough.rs), every packet sent on at once; needs nothing beyond
  `make`;
- rr: the server protected by `rrc run --mode rr` (primary a, backup b,
  100 ms epochs): the whole of rr mode.

Configurations alternate within every round (noisy shared machine), each
measured by `rrc-check` at saturation (closed loop, `--connections`
connections, `--duration` s); the ratios are to the same round's direct
run. Reproduce (root; `make` first; builds the pass-through example):

    python3 bench/path_costs.py [--rounds 4] [--server redis|memcached] [--out bench/results/path_costs]

Takes the lab lock; refuses if a lab is up. Writes OUT.json and OUT.png.
"""
import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import REPO, RRC_BIN as RRC, lab_lock, machine_description, rrc_cli as cli, run_main, spread, write_results
from checkpoint_pause import BenchError, log, run

CHECK = REPO / "target" / "release" / "rrc-check"
PASSTHROUGH = REPO / "target" / "release" / "examples" / "nfq_passthrough"
TEST_IP = "10.77.0.1"  # on a's loopback, reached through b
QUEUE = 200
A_FRONT, A_REPL, B_FRONT, B_REPL = "198.18.0.1", "198.19.0.1", "198.18.0.2", "198.19.0.2"
CONFIGS = ("direct", "routed", "routed_nfq_out", "routed_nfq_both", "routed_gate_xdp_out", "rr")
XDP_PASSTHROUGH = REPO / "target" / "release" / "examples" / "xdp_passthrough"
XDP = "routed_xdp_out"  # only when asked for (builds with clang, libbpf, libxdp)
KNOWN = CONFIGS[:4] + (XDP,) + CONFIGS[4:]  # in plotting order
PROBES = REPO / "bench" / "probes"
SERVERS = {
    "redis": (["redis-server", "--save", "", "--appendonly", "no", "--protected-mode", "no"], "--port", 6390, 6379),
    "memcached": (["memcached", "-t", "4", "-U", "0", "-u", "root", "-m", "64"], "-p", 11290, 11211),
}


def lab(host, *argv, check=True):
    return cli("lab", "exec", host, "--", *argv, check=check)


def route_through_b():
    """TEST_IP on a's loopback, reached from the client via b both ways."""
    lab("a", "ip", "addr", "add", f"{TEST_IP}/32", "dev", "lo")
    lab("a", "ip", "rule", "add", "from", TEST_IP, "table", "177")
    lab("a", "ip", "route", "add", "default", "via", B_REPL, "dev", "repl", "table", "177")
    lab("client", "ip", "route", "add", f"{TEST_IP}/32", "via", B_FRONT)
    lab("b", "ip", "route", "add", f"{TEST_IP}/32", "via", A_REPL, "dev", "repl")
    for h in ("a", "b"):
        lab(h, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0",
            "net.ipv4.conf.repl.rp_filter=0", "net.ipv4.conf.front.rp_filter=0")
    # all of it lives in the lab's namespaces: gone with `rrc lab down`


@contextlib.contextmanager
def queued(directions):
    """b's FORWARD chain queues TEST_IP's packets (`out`: from it; `both`)
    to a pass-through reader, for the duration."""
    rules = [["-s", TEST_IP]] + ([["-d", TEST_IP]] if directions == "both" else [])
    reader = subprocess.Popen([str(RRC), "lab", "exec", "b", "--", str(PASSTHROUGH), str(QUEUE)], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.3)  # bound before the rules send anything its way (not fail-open: drops otherwise)
        for r in rules:
            lab("b", "iptables", "-I", "FORWARD", *r, "-j", "NFQUEUE", "--queue-num", str(QUEUE))
        yield
    finally:
        for r in rules:
            lab("b", "iptables", "-D", "FORWARD", *r, "-j", "NFQUEUE", "--queue-num", str(QUEUE), check=False)
        reader.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            reader.wait(5)
        # `rrc lab exec` forwards the signal; the reader itself, if it lingered
        run(["pkill", "-f", str(PASSTHROUGH)], 10, check=False)


def build_xdp_gate(cleanup_dir):
    """bench/probes' XDP program and forwarder, built into cleanup_dir:
    (the forwarder, the BPF object)."""
    for tool in ("clang", "gcc", "ethtool"):
        if not shutil.which(tool):
            raise BenchError(f"{XDP} needs {tool}: apt-get install clang libbpf-dev libxdp-dev ethtool")
    # -g: libbpf needs the BTF of the map definitions
    obj, gate = Path(cleanup_dir) / "redirect.bpf.o", Path(cleanup_dir) / "xdp_gate"
    run(["clang", "-O2", "-g", "-target", "bpf", "-I/usr/include/x86_64-linux-gnu", "-c", str(PROBES / "xdp_redirect.bpf.c"),
         "-o", str(obj)], 120)
    run(["gcc", "-O2", "-Wall", "-o", str(gate), str(PROBES / "xdp_gate.c"), "-lxdp", "-lbpf"], 120)
    return gate, obj


@contextlib.contextmanager
def forwarding_on_b(argv, what):
    """`argv` run on b for the duration (an XDP forwarder: its program
    attached and its socket bound within half a second, or the bench
    stops), then stopped; its BPF link goes with it."""
    fwd = subprocess.Popen([str(RRC), "lab", "exec", "b", "--", *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        if fwd.poll() is not None:
            raise BenchError(f"{what} exited at once (status {fwd.returncode})")
        yield
    finally:
        fwd.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            fwd.wait(5)
        run(["pkill", "-f", argv[0]], 10, check=False)
        # the C probe attaches with libxdp, not a link
        lab("b", "ip", "link", "set", "dev", "repl", "xdp", "off", check=False)


def xdp_forwarded(gate, obj, client_mac):
    """The server's packets taken off b's link from a by XDP and sent on to
    the client by the AF_XDP forwarder (bench/probes), for the duration."""
    return forwarding_on_b([str(gate), "repl", "front", client_mac, str(obj)], "the AF_XDP forwarder")


def gate_xdp_forwarded(client_mac):
    """The server's packets through rrc-gate's AF_XDP output path on b."""
    return forwarding_on_b([str(XDP_PASSTHROUGH), "repl", "front", TEST_IP, client_mac], "xdp_passthrough")


def load(a, ip, port):
    cpu0 = cpu_busy_s()
    out = lab("client", str(CHECK), a.server, "--server", f"{ip}:{port}", "--threads", str(a.connections),
              "--duration", f"{a.duration}s", "--json")
    busy = cpu_busy_s() - cpu0
    d = json.loads(out)
    if not d.get("ok"):
        raise BenchError(f"rrc-check reported errors against {ip}:{port}: {json.dumps(d)[:500]}")
    ops = d["throughput_ops_s"] * a.duration
    # the whole machine's busy CPU over the window (rrc-check's start and end included: a slight overestimate)
    return {"throughput_ops_s": d["throughput_ops_s"], "latency_us": d["latency_us"], "cpu_us_per_op": busy * 1e6 / ops}


def one(config, a, stock_port, xdp=None):
    argv, _, _, rr_port = SERVERS[a.server]
    if config == "direct":
        return load(a, A_FRONT, stock_port)
    if config == "routed":
        return load(a, TEST_IP, stock_port)
    if config in ("routed_nfq_out", "routed_nfq_both"):
        with queued("out" if config == "routed_nfq_out" else "both"):
            return load(a, TEST_IP, stock_port)
    if config == XDP:
        with xdp_forwarded(*xdp):
            return load(a, TEST_IP, stock_port)
    if config == "routed_gate_xdp_out":
        with gate_xdp_forwarded(lab("client", "ip", "-br", "link", "show", "front").split()[2]):
            return load(a, TEST_IP, stock_port)
    # rr: the real thing, a fresh service per round
    port_flag = SERVERS[a.server][1]
    st = json.loads(cli("run", "--name", "paths", "--primary", "a", "--backup", "b", "--mode", "rr", "--epoch", "100ms", "--json",
                        "--", *argv, port_flag, str(rr_port)))
    try:
        time.sleep(3)  # the first commit, the log session open
        return load(a, st["service_ip"], rr_port)
    finally:
        cli("stop", "paths", check=False)


def plot(path, data):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    s = data["summary"]
    names = [c for c in KNOWN if c in s]
    med = [s[c]["ratio_to_direct"]["median"] for c in names]
    lo = [m - s[c]["ratio_to_direct"]["min"] for m, c in zip(med, names)]
    hi = [s[c]["ratio_to_direct"]["max"] - m for m, c in zip(med, names)]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    colours = {"direct": "0.6", "routed": "0.5", "routed_nfq_out": "tab:orange", "routed_nfq_both": "tab:red", XDP: "tab:green", "routed_gate_xdp_out": "tab:olive",
               "rr": "tab:blue"}
    ax.bar(names, med, yerr=[lo, hi], color=[colours[c] for c in names], capsize=4)
    ax.axhline(0.8, color="k", ls="--", lw=0.8)
    ax.text(len(names) - 0.5, 0.81, "issue 14's target (<= 25 % overhead)", ha="right", fontsize=7)
    for x, m in enumerate(med):
        ax.text(x, m + 0.02, f"{m:.2f}", ha="center", fontsize=8)
    ax.set_ylabel("throughput / same round's direct (min-median-max)")
    ax.set_ylim(0, 1.15)
    ax.tick_params(axis="x", labelsize=7)
    ax2.bar(names, [s[c]["cpu_us_per_op"]["median"] for c in names], color="0.5")
    ax2.set_ylabel("µs of the 2 CPUs per operation (median)")
    ax2.tick_params(axis="x", labelsize=7)
    fig.suptitle(f"{data['config']['server']} at saturation, {data['config']['connections']} connections, "
                 f"{data['config']['rounds']} rounds in alternation; {data['machine']['date_utc']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--server", choices=sorted(SERVERS), default="redis")
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--duration", type=float, default=6.0, help="seconds per window")
    ap.add_argument("--configs", default=",".join(CONFIGS), help=f"of {', '.join(KNOWN)}")
    ap.add_argument("--lock-wait", type=float, default=600)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "path_costs"))
    a = ap.parse_args()
    configs = [c for c in a.configs.split(",") if c]
    if bad := [c for c in configs if c not in KNOWN]:
        raise BenchError(f"unknown configurations {bad} (known: {', '.join(KNOWN)})")
    for b in (RRC, CHECK):
        if not b.exists():
            raise BenchError(f"{b} is missing: `make` first")
    run(["cargo", "build", "--release", "--locked", "-q", "--example", "nfq_passthrough", "--example", "xdp_passthrough", "-p", "rrc-gate"], 600)
    machine = machine_description()
    argv, port_flag, stock_port, _ = SERVERS[a.server]
    rounds = []
    with tempfile.TemporaryDirectory(prefix="rrc-paths-") as tmp, lab_lock(a.lock_wait):
        xdp = build_xdp_gate(tmp) if XDP in configs else None
        if json.loads(cli("lab", "status", "--json")).get("up"):
            raise BenchError("a lab is up already: `rrc lab down` first")
        try:
            cli("lab", "up")
            route_through_b()
            if xdp:
                lab("a", "ethtool", "-K", "repl", "tx", "off")
                client_mac = lab("client", "ip", "-br", "link", "show", "front").split()[2]
                xdp = (*xdp, client_mac)
            stock = subprocess.Popen([str(RRC), "lab", "exec", "a", "--", *argv, port_flag, str(stock_port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1)
            for r in range(a.rounds):
                row = {}
                for c in configs:
                    row[c] = one(c, a, stock_port, xdp)
                    log(f"round {r + 1} {c}: {row[c]['throughput_ops_s']:.0f} ops/s, mean {row[c]['latency_us']['mean']:.0f} µs")
                rounds.append(row)
        finally:
            with contextlib.suppress(Exception):
                stock.terminate()
                stock.wait(5)
            cli("stop", "paths", check=False)
            cli("lab", "down", check=False)
    summary = {}
    for c in configs:
        summary[c] = {
            "throughput_ops_s": spread([r[c]["throughput_ops_s"] for r in rounds]),
            "mean_latency_us": spread([r[c]["latency_us"]["mean"] for r in rounds]),
            "cpu_us_per_op": spread([r[c]["cpu_us_per_op"] for r in rounds]),
        }
        if "direct" in configs:
            summary[c]["ratio_to_direct"] = spread([r[c]["throughput_ops_s"] / r["direct"]["throughput_ops_s"] for r in rounds])
    data = {"command": " ".join(sys.argv), "machine": machine,
            "config": {"server": a.server, "rounds": a.rounds, "connections": a.connections, "duration_s": a.duration,
                       "configs": configs, "rr_epoch_ms": 100,
                       "tx_checksums_in_software_on_a": XDP in configs},
            "rounds": rounds, "summary": summary}
    write_results(a.out, data, plot)
    for c in configs:
        s = summary[c]
        log(f"{c:16} {s['throughput_ops_s']['median']:8.0f} ops/s  ratio {s.get('ratio_to_direct', {}).get('median', 0):.2f} "
            f"({s.get('ratio_to_direct', {}).get('min', 0):.2f}-{s.get('ratio_to_direct', {}).get('max', 0):.2f})  "
            f"{s['cpu_us_per_op']['median']:.1f} µs CPU/op")


def cpu_busy_s():
    """Busy CPU seconds of the whole machine so far (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    run_main(main)
