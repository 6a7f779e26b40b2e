#!/usr/bin/env python3
"""Checkpoint pause benchmark (issue 2): redis-server holding ~100 MB under a
steady SET load, checkpointed every 100 ms with `rrc dump --leave-running`.

Measures, per checkpoint: the pause (and its breakdown), the image size
against the bytes actually dirtied (written_pages * 4096, and the logical
bytes the load acknowledged in the interval), and the time until the image is
complete. In the same run, the same load against an unprotected redis-server
(same network namespace, same argv) gives the baseline; checkpointing cost is
reported as the ratio protected / unprotected.

Everything it creates (network namespace, processes, the container's cgroup,
the temporary directory with the images) is removed on success, failure and
Ctrl-C. See bench/README.md.
"""
import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_RRC = REPO / "target" / "release" / "rrc"
CGROUP_ROOT = Path("/sys/fs/cgroup/unified")
PAGE = 4096
KEY_FMT = "key:%012d"  # the layout of redis-benchmark's __rand_int__ and of loadgen.c
TARGET_P50_US = 1000
TARGET_P99_US = 3000
# TCP established-hash buckets of the bench's netns, as the lab's containers
# have (crates/rrc-agent/src/net.rs): the checkpoint's TCP table dump walks
# the namespace's hash, and the machine-wide one it shares by default is big.
NETNS_EHASH_BUCKETS = 1024
# The pause's parts as `rrc dump --json` reports them (fork_us is 0 for a
# copy snapshot, copy_us for a fork snapshot).
PAUSE_PARTS = ("quiesce_us", "scan_us", "capture_us", "fork_us", "copy_us")


class BenchError(Exception):
    """A failure with a message that names its cause."""


class Interrupted(BaseException):
    pass


def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run(argv, timeout, check=True, input=None):
    """Run a command to completion (bounded by timeout); return stdout."""
    try:
        p = subprocess.run(argv, input=input, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError(f"timed out after {timeout}s: {shlex.join(map(str, argv))}")
    if check and p.returncode != 0:
        raise BenchError(f"exit {p.returncode}: {shlex.join(map(str, argv))}\n"
                         f"{p.stderr.decode(errors='replace').strip()}")
    return p.stdout.decode(errors="replace")


class Cleanup:
    """Undo actions run in reverse order; each one is guarded so that one
    failure does not leave the others undone."""

    def __init__(self):
        self.actions = []

    def push(self, what, fn):
        self.actions.append((what, fn))
        return len(self.actions) - 1

    def run_one(self, idx):
        what, fn = self.actions[idx]
        self.actions[idx] = (what, None)
        if fn is None:
            return
        try:
            fn()
        except Exception as e:  # keep going: the rest must be undone too
            log(f"cleanup: {what}: {e}")

    def run_all(self):
        for idx in reversed(range(len(self.actions))):
            self.run_one(idx)


def kill_popen(p, name):
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)
    log(f"stopped {name} (pid {p.pid})")


# ---------------------------------------------------------------- machine

def machine_description(workdir):
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kb = None
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    except OSError:
        pass
    fstype = run(["findmnt", "-n", "-o", "FSTYPE", "-T", str(workdir)], 10, check=False).strip()
    commit = run(["git", "-C", str(REPO), "rev-parse", "HEAD"], 10, check=False).strip()
    status = run(["git", "-C", str(REPO), "status", "--porcelain"], 10, check=False).splitlines()
    try:  # the host namespace's TCP established-hash (the bench's netns has its own)
        ehash = int(Path("/proc/sys/net/ipv4/tcp_ehash_entries").read_text())
    except (OSError, ValueError):
        ehash = None
    return {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "kernel": platform.release(),
        "cpu_model": cpu,
        "nproc": os.cpu_count(),
        "mem_total_kib": mem_kb,
        "redis_version": run([shutil.which("redis-server"), "--version"], 10).strip(),
        "python": platform.python_version(),
        "image_dir_fstype": fstype,
        "git_commit": commit or None,
        "git_tracked_files_modified": sum(1 for l in status if not l.startswith("??")),
        "git_untracked_files": sum(1 for l in status if l.startswith("??")),
        "loadavg_at_start": Path("/proc/loadavg").read_text().strip(),
        "tcp_ehash_entries": ehash,
    }


# ---------------------------------------------------------------- netns

def create_netns(ns, cleanup):
    """Creates network namespace NS (/run/netns/NS) with a private TCP
    established-hash of NETNS_EHASH_BUCKETS buckets, without touching the
    host's sysctls: tcp_child_ehash_entries is read from the namespace of
    the process that creates a new one, so NS is created from inside a
    helper namespace that has it set (and the helper is removed again; NS
    lives on through its bind mount). The bind mount is made in the host's
    mount namespace (nsenter enters only the helper's network namespace),
    so `ip netns` sees NS like any other."""
    helper = f"{ns}-ehash"
    for name in (ns, helper):
        if Path(f"/run/netns/{name}").exists():
            raise BenchError(f"network namespace {name} already exists")
    run(["ip", "netns", "add", helper], 10)
    hidx = cleanup.push(f"ip netns del {helper}", lambda: run(["ip", "netns", "del", helper], 10))
    sysctl = f"net.ipv4.tcp_child_ehash_entries={NETNS_EHASH_BUCKETS}"
    try:
        run(ns_argv(helper, ["sysctl", "-q", "-w", sysctl]), 10)
    except BenchError as e:
        raise BenchError(f"cannot set {sysctl} in the helper namespace {helper} (needs Linux 6.1): {e}")
    # unshare --net=FILE bind-mounts the new namespace onto FILE, which must
    # exist; `ip netns del` also removes a FILE that never got mounted.
    path = Path(f"/run/netns/{ns}")
    cleanup.push(f"ip netns del {ns}", lambda: path.exists() and run(["ip", "netns", "del", ns], 10))
    path.touch(exist_ok=False)
    run(["nsenter", f"--net=/run/netns/{helper}", "unshare", f"--net=/run/netns/{ns}", "true"], 10)
    cleanup.run_one(hidx)
    # Positive in a child namespace: its own hash; negative: the shared one.
    ehash = run(ns_argv(ns, ["sysctl", "-n", "net.ipv4.tcp_ehash_entries"]), 10).strip()
    if ehash != str(NETNS_EHASH_BUCKETS):
        raise BenchError(f"network namespace {ns}: net.ipv4.tcp_ehash_entries is {ehash!r}, "
                         f"expected a private hash of {NETNS_EHASH_BUCKETS}")
    run(ns_argv(ns, ["ip", "link", "set", "lo", "up"]), 10)
    log(f"network namespace {ns}: loopback, private TCP established-hash of {ehash} buckets")
    return int(ehash)


# ---------------------------------------------------------------- redis

def ns_argv(ns, argv):
    return ["ip", "netns", "exec", ns] + [str(a) for a in argv]


def redis_cli(ns, port, *args, timeout=10):
    return run(ns_argv(ns, ["redis-cli", "-h", "127.0.0.1", "-p", port] + list(args)), timeout)


def wait_ready(ns, port, seconds=10.0):
    deadline = time.monotonic() + seconds
    last = ""
    for _ in range(int(seconds / 0.05) + 1):
        p = subprocess.run(ns_argv(ns, ["redis-cli", "-h", "127.0.0.1", "-p", port, "ping"]),
                           capture_output=True, timeout=5)
        last = (p.stdout + p.stderr).decode(errors="replace").strip()
        if p.returncode == 0 and last == "PONG":
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    raise BenchError(f"redis-server on port {port} in netns {ns} not ready after {seconds}s: {last}")


def info(ns, port, section):
    out = {}
    for line in redis_cli(ns, port, "info", section).splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.strip().split(":", 1)
            out[k] = v
    return out


def pipe_fill(ns, port, first, count, value_size):
    """SET key:first .. key:first+count-1 with deterministic values through
    redis-cli --pipe; checks that every reply came back without error."""
    proc = subprocess.Popen(ns_argv(ns, ["redis-cli", "-h", "127.0.0.1", "-p", port, "--pipe"]),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        chunk = []
        for i in range(first, first + count):
            key = (KEY_FMT % i).encode()
            pat = b"%012d|" % i
            val = (pat * (value_size // len(pat) + 1))[:value_size]
            chunk.append(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(key), key, len(val), val))
            if len(chunk) == 1000:
                proc.stdin.write(b"".join(chunk))
                chunk = []
        proc.stdin.write(b"".join(chunk))
        out, err = proc.communicate(timeout=120)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    text = (out + err).decode(errors="replace")
    ok = f"errors: 0, replies: {count}" in text
    if proc.returncode != 0 or not ok:
        raise BenchError(f"redis-cli --pipe fill failed (exit {proc.returncode}): {text.strip()}")


def fill_to_target(ns, port, target_bytes, value_size, nkeys=None):
    """Fill deterministically. Without nkeys: add keys until used_memory
    reaches target_bytes (first batch measures the per-key cost); with nkeys:
    exactly those keys (so both runs hold the same data)."""
    t0 = time.monotonic()
    if nkeys is None:
        base = int(info(ns, port, "memory")["used_memory"])
        n = 0
        batch = 10000
        for _ in range(8):  # bounded: converges in 2-3 rounds
            pipe_fill(ns, port, n, batch, value_size)
            n += batch
            used = int(info(ns, port, "memory")["used_memory"])
            if used >= target_bytes:
                break
            per_key = max(1.0, (used - base) / n)
            batch = max(1, int((target_bytes - used) / per_key) + 1)
        nkeys = n
    else:
        pipe_fill(ns, port, 0, nkeys, value_size)
    dbsize = int(redis_cli(ns, port, "dbsize").strip())
    if dbsize != nkeys:
        raise BenchError(f"after the fill DBSIZE is {dbsize}, expected {nkeys}")
    mem = info(ns, port, "memory")
    log(f"filled {nkeys} keys of {value_size} B in {time.monotonic() - t0:.1f}s: "
        f"used_memory {int(mem['used_memory']) / 1e6:.1f} MB, rss {int(mem['used_memory_rss']) / 1e6:.1f} MB")
    return nkeys, {"keys": nkeys, "value_size": value_size,
                   "used_memory": int(mem["used_memory"]),
                   "used_memory_rss": int(mem["used_memory_rss"])}


def redis_argv(port, workdir):
    return [shutil.which("redis-server"), "--port", str(port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--dir", str(workdir), "--daemonize", "no",
            "--protected-mode", "no"]


# ---------------------------------------------------------------- load

def build_c(workdir, name):
    """Compiles bench/NAME.c into the work directory."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise BenchError(f"no C compiler (cc/gcc) to build bench/{name}.c")
    out = workdir / name
    run([cc, "-O2", "-Wall", "-o", str(out), str(HERE / f"{name}.c")], 60)
    return out


def measure_fork_floor(binary, rss_bytes, rounds=20):
    """fork() time of a process with the server's resident size in 4 KiB
    pages: the floor of a fork()-based snapshot on this machine."""
    out = run([binary, str(rss_bytes), str(rounds)], 120)
    vals = [float(l.split("=", 1)[1]) for l in out.splitlines() if l.startswith("fork_us=")]
    if len(vals) != rounds:
        raise BenchError(f"forkfloor printed {len(vals)} of {rounds} results: {out!r}")
    return vals


def start_loadgen(args, ns, port, binary, keyspace, duration_ms, out_path):
    argv = [binary, "--port", port, "--keyspace", keyspace, "--value-size", args.value_size,
            "--clients", args.clients, "--pipeline", args.pipeline, "--rate", args.rate,
            "--seed", args.seed, "--duration-ms", duration_ms, "--out", out_path]
    errf = open(str(out_path) + ".stderr", "wb")
    p = subprocess.Popen(ns_argv(ns, argv), stdout=subprocess.DEVNULL, stderr=errf)
    errf.close()
    return p


def stop_loadgen(p, out_path, grace_s=10):
    import numpy as np
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
    try:
        rc = p.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        raise BenchError("loadgen did not stop within 10 s of SIGTERM")
    err = Path(str(out_path) + ".stderr").read_text(errors="replace").strip()
    if rc != 0:
        raise BenchError(f"loadgen failed (exit {rc}): {err}")
    log(err)
    raw = Path(out_path).read_bytes()
    if raw[:8] != b"RRCLG001":
        raise BenchError(f"{out_path}: not a loadgen result file")
    t_start, t_end, count, errors, value_size, key_len = struct.unpack_from("<6Q", raw, 8)
    recs = np.frombuffer(raw, dtype=np.uint64, offset=8 + 48, count=2 * count).reshape(count, 2)
    return {"t_start": t_start, "t_end": t_end, "errors": errors, "value_size": value_size,
            "key_len": key_len, "done_ns": recs[:, 0], "lat_ns": recs[:, 1]}


def pct(values, ps=(50, 90, 99)):
    import numpy as np
    a = np.asarray(values, dtype=float)
    if a.size == 0:
        return None
    out = {f"p{p}": float(np.percentile(a, p)) for p in ps}
    out.update({"min": float(a.min()), "max": float(a.max()), "mean": float(a.mean()), "n": int(a.size)})
    return out


def load_summary(segments):
    """Throughput and latency of the SETs acknowledged in the windows
    [w0, w1) of the given (loadgen result, (w0, w1)) segments, pooled."""
    import numpy as np
    lats, n, secs, errors, kb = [], 0, 0.0, 0, 0
    for lg, (w0, w1) in segments:
        m = (lg["done_ns"] >= w0) & (lg["done_ns"] < w1)
        n += int(m.sum())
        secs += (w1 - w0) / 1e9
        lats.append(lg["lat_ns"][m] / 1e3)
        errors += int(lg["errors"])
        kb = lg["value_size"] + lg["key_len"]
    lat_us = np.concatenate(lats) if lats else np.array([])
    return {"window_s": secs, "acknowledged_sets": n, "errors_whole_run": errors,
            "throughput_ops": n / secs if secs > 0 else None,
            "throughput_logical_MBps": n * kb / secs / 1e6 if secs > 0 else None,
            "latency_us": pct(lat_us, (50, 90, 99, 99.9)) if n else None}


def throughput_series(lg, w0, bin_ns):
    """ops/s in consecutive bins from w0 (for the plot), x in seconds from w0."""
    import numpy as np
    d = lg["done_ns"].astype(np.int64) - int(w0)
    d = d[d >= 0]
    if d.size == 0:
        return [], []
    counts = np.bincount(d // bin_ns)
    return [(i * bin_ns) / 1e9 for i in range(len(counts))], (counts * (1e9 / bin_ns)).tolist()


# ---------------------------------------------------------------- runs

def start_unprotected(args, ns, workdir, cleanup, port):
    """Plain redis-server (same argv but the port) in the same netns, filled
    to the target; it stays up, idle, while the protected run is measured, so
    that its load can be measured before and after (drift on a shared VM)."""
    log(f"unprotected redis-server on port {port}")
    logf = open(workdir / "redis-unprotected.log", "wb")
    p = subprocess.Popen(ns_argv(ns, redis_argv(port, workdir)), stdout=logf, stderr=subprocess.STDOUT)
    logf.close()
    idx = cleanup.push("unprotected redis-server", lambda: kill_popen(p, "unprotected redis-server"))
    wait_ready(ns, port)
    nkeys, data = fill_to_target(ns, port, args.fill_mb * 1_000_000, args.value_size)
    return nkeys, data, idx


def measure_unprotected(args, ns, port, workdir, loadgen, cleanup, nkeys, duration_ms, tag):
    log(f"unprotected load ({tag}): {duration_ms} ms after {args.warmup_ms} ms warm-up")
    out = workdir / f"load-unprotected-{tag}.bin"
    lgp = start_loadgen(args, ns, port, loadgen, nkeys, args.warmup_ms + duration_ms + 60_000, out)
    lidx = cleanup.push(f"loadgen (unprotected {tag})", lambda: kill_popen(lgp, "loadgen"))
    time.sleep(args.warmup_ms / 1000)
    w0 = time.monotonic_ns()
    time.sleep(duration_ms / 1000)
    w1 = time.monotonic_ns()
    lg = stop_loadgen(lgp, out)
    cleanup.run_one(lidx)
    return lg, (w0, w1)


def container_cgroup(pid):
    try:
        for line in open(f"/proc/{pid}/cgroup"):
            if line.startswith("0::"):
                return CGROUP_ROOT / line.strip()[3:].lstrip("/")
    except OSError:
        pass
    return None


def kill_container(rrc, pid, cg):
    """`rrc kill`; if that fails or leaves the cgroup, cgroup.kill + rmdir."""
    r = subprocess.run([rrc, "kill", "--pid", str(pid)], capture_output=True, timeout=30)
    if r.returncode != 0:
        log(f"rrc kill --pid {pid} failed: {r.stderr.decode(errors='replace').strip()}")
    if cg and cg.exists() and cg != CGROUP_ROOT:
        (cg / "cgroup.kill").write_text("1")
        for _ in range(100):  # bounded: 5 s
            try:
                cg.rmdir()
                break
            except OSError:
                time.sleep(0.05)
        log(f"removed leftover cgroup {cg}")
    log(f"stopped protected redis-server (pid {pid})")


def file_id(path):
    """sha256 and mtime of a binary, to name the build that was measured
    (the commit alone does not when the tree has uncommitted work)."""
    import hashlib
    try:
        data = Path(path).read_bytes()
        st = os.stat(path)
    except OSError as e:
        return {"path": str(path), "error": str(e)}
    return {"path": str(path), "sha256": hashlib.sha256(data).hexdigest(),
            "mtime_utc": datetime.datetime.fromtimestamp(st.st_mtime, datetime.timezone.utc)
            .isoformat(timespec="seconds")}


def mapped_librrc(pid):
    """The librrc.so the protected process really maps (from its maps)."""
    try:
        for line in open(f"/proc/{pid}/maps"):
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].strip().endswith("/librrc.so"):
                path = parts[5].strip()
                info = file_id(f"/proc/{pid}/root{path}")
                info["path"] = path
                return info
    except OSError as e:
        return {"error": str(e)}
    raise BenchError(f"pid {pid} does not map librrc.so: it is not protected")


def sweep_containers(rrc, workdir):
    out = run([rrc, "ps"], 30, check=False)
    for line in out.splitlines()[1:]:
        f = line.split()
        if len(f) >= 2 and f[1].isdigit() and f"--dir {workdir} " in line + " ":
            pid = int(f[1])
            if Path(f"/proc/{pid}").exists():
                kill_container(rrc, pid, container_cgroup(pid))


def dir_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def run_protected(args, ns, workdir, loadgen, cleanup, nkeys):
    rrc = str(args.rrc)
    log(f"protected run: {rrc} exec --netns {ns} -- redis-server; rrc dump --snapshot {args.snapshot}")
    # If `rrc exec` is interrupted after starting the container but before
    # printing its pid, find the container by our unique --dir in `rrc ps`.
    cleanup.push("sweep rrc ps for containers of this run", lambda: sweep_containers(rrc, workdir))
    out = run([rrc, "exec", "--netns", ns, "--log", str(workdir / "redis-protected.log"), "--"]
              + redis_argv(args.port, workdir), 60)
    lines = [l for l in out.strip().splitlines() if l.strip()]
    if not lines or not lines[-1].strip().isdigit():
        raise BenchError(f"rrc exec did not print a pid on its last line: {out!r}")
    pid = int(lines[-1].strip())
    cg = container_cgroup(pid)
    idx = cleanup.push(f"protected redis-server pid {pid}", lambda: kill_container(rrc, pid, cg))
    wait_ready(ns, args.port)
    _, data = fill_to_target(ns, args.port, args.fill_mb * 1_000_000, args.value_size, nkeys=nkeys)
    threads = len(os.listdir(f"/proc/{pid}/task"))
    build = {"rrc": file_id(rrc), "librrc.so": mapped_librrc(pid)}
    log(f"container cgroup {cg}, {threads} threads, librrc.so {build['librrc.so'].get('path')}")

    images = workdir / "images"
    images.mkdir()
    out_lg = workdir / "load-protected.bin"
    budget_s = args.max_seconds
    lgp = start_loadgen(args, ns, args.port, loadgen, nkeys, args.warmup_ms + int(budget_s * 1000) + 60_000, out_lg)
    lidx = cleanup.push("loadgen (protected)", lambda: kill_popen(lgp, "loadgen"))
    time.sleep(args.warmup_ms / 1000)

    samples = []
    interval_ns = args.interval_ms * 1_000_000
    t0 = time.monotonic_ns()
    deadline = t0 + int(budget_s * 1e9)
    prev = None
    for k in range(args.checkpoints):  # bounded in count ...
        # Every interval from the previous start, or right after the previous
        # dump if it took longer: no catching up with back-to-back dumps.
        grid = samples[-1]["_s0"] + interval_ns if samples else t0
        due = max(grid, samples[-1]["_s1"]) if samples else t0
        now = time.monotonic_ns()
        if now > deadline:  # ... and in time
            raise BenchError(f"time budget of {budget_s}s exhausted after {k} checkpoints "
                             f"(raise --max-seconds)")
        if due > now:
            time.sleep((due - now) / 1e9)
        d = images / f"ck-{k:05d}"
        argv = [rrc, "dump", "--pid", str(pid), "--images", str(d), "--leave-running",
                "--snapshot", args.snapshot, "--json"]
        if prev is not None:
            argv += ["--parent", str(prev)]
        s0 = time.monotonic_ns()
        try:
            p = subprocess.run(argv, capture_output=True, timeout=60)
        except subprocess.TimeoutExpired:
            raise BenchError(f"checkpoint {k}: rrc dump did not finish in 60 s")
        s1 = time.monotonic_ns()
        if p.returncode != 0:
            raise BenchError(f"checkpoint {k}: {shlex.join(argv)} exited {p.returncode}: "
                             f"{p.stderr.decode(errors='replace').strip()}")
        try:
            j = json.loads(p.stdout.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise BenchError(f"checkpoint {k}: rrc dump --json printed no JSON object: {p.stdout!r}")
        for key in ("pause_us", "pages", "bytes", "total_us", "snapshot") + PAUSE_PARTS:
            if key not in j:
                raise BenchError(f"checkpoint {k}: rrc dump JSON lacks {key!r}: {j}")
        if j["snapshot"] != args.snapshot:
            raise BenchError(f"checkpoint {k}: asked for a {args.snapshot} snapshot, rrc dump reports {j['snapshot']}")
        samples.append({"index": k, "scheduled_ns": due - t0, "start_ns": s0 - t0,
                        "wall_us": (s1 - s0) / 1e3, "late_us": max(0, s0 - grid) / 1e3,
                        "bytes_on_disk": dir_bytes(d), "rrc": j,
                        "_s0": s0, "_s1": s1})
        if k % 10 == 9 or k == args.checkpoints - 1:
            snap = (f"fork {j['fork_us']} us" if args.snapshot == "fork" else
                    f"copy {j['copy_us']} us of {j['copied_pages']} pages, before the pause "
                    f"{j['precopy_us']} us / {j['precopy_pages']} pages in {j['precopy_passes']} passes")
            log(f"checkpoint {k}: pause {j['pause_us']} us ({snap}), {j['pages']} pages, "
                f"write {j.get('write_us')} us, total {j['total_us']} us, rrc dump wall {(s1 - s0) / 1e6:.1f} ms")
        # Every image stays until the end: `rrc dump` verifies the whole chain
        # (headers and page indexes) that ends at the new image.
        free = shutil.disk_usage(images).free
        if free < args.min_free_mb * 1_000_000:
            raise BenchError(f"only {free / 1e6:.0f} MB free under {images} after checkpoint {k} "
                             f"(--min-free-mb {args.min_free_mb}); use --workdir elsewhere or fewer --checkpoints")
        prev = d
    t_last = time.monotonic_ns()
    lg = stop_loadgen(lgp, out_lg)
    cleanup.run_one(lidx)
    alive = Path(f"/proc/{pid}").exists()
    cleanup.run_one(idx)
    if not alive:
        raise BenchError(f"protected redis-server (pid {pid}) died during the run")
    return data, samples, lg, (samples[0]["_s0"], t_last), threads, build


# ---------------------------------------------------------------- report

def summarize(args, samples, lg_p, win_p, useg):
    out = {}
    key_bytes = None
    if samples:
        rr = [s["rrc"] for s in samples]
        g = lambda name, xs=rr: [x.get(name) for x in xs if x.get(name) is not None]
        inc = [x for x in rr if not x.get("full", False)]
        out["pause_us"] = pct(g("pause_us"))
        out["pause_us_incremental_only"] = pct(g("pause_us", inc))
        out["pause_breakdown_us"] = {n: pct(g(n)) for n in PAUSE_PARTS if g(n)}
        # Copy snapshot: what was copied in the pause, and before it (the
        # process running, so not part of the pause). Zero for a fork.
        out["snapshot_copy"] = {n: pct(g(n)) for n in ("copied_pages", "precopy_us", "precopy_pages",
                                                      "precopy_passes") if g(n)}
        out["completion_us"] = {n: pct(g(n)) for n in ("write_us", "total_us") if g(n)}
        out["completion_us"]["rrc_dump_wall_us"] = pct([s["wall_us"] for s in samples])
        # Per-interval logical bytes: SETs the load generator saw
        # acknowledged between the starts of consecutive dumps.
        kb = lg_p["value_size"] + lg_p["key_len"]
        done = lg_p["done_ns"]
        import numpy as np
        for i, s in enumerate(samples):
            if i == 0:
                s["interval_sets_acked"] = None
                s["interval_logical_bytes"] = None
            else:
                a, b = samples[i - 1]["_s0"], s["_s0"]
                n = int(np.count_nonzero((done >= a) & (done < b)))
                s["interval_sets_acked"] = n
                s["interval_logical_bytes"] = n * kb
            # A fork snapshot's pause scan finds every page written since the
            # parent. A copy snapshot's pause scan only finds those written
            # after its last pre-copy pass (the passes found the rest, some
            # pages more than once): no separate count of the pages dirtied,
            # and its image holds exactly the pages its scans found.
            wp = s["rrc"].get("written_pages") if s["rrc"].get("snapshot", "fork") == "fork" else None
            s["dirtied_bytes"] = wp * PAGE if wp is not None else None
        incs = [s for s in samples[1:]]
        img = sum(s["rrc"]["bytes"] for s in incs)
        measured = [s["dirtied_bytes"] for s in incs if s["dirtied_bytes"] is not None]
        dirt = sum(measured) if measured else None
        logical = sum(s["interval_logical_bytes"] or 0 for s in incs)
        out["image_vs_dirtied"] = {
            "note": "incremental checkpoints only (index >= 1); first (full) image separately; "
                    "dirtied is not measured for copy snapshots (their scans run before and in the pause)",
            "full_image_bytes": samples[0]["rrc"]["bytes"],
            "incremental_image_bytes": pct([s["rrc"]["bytes"] for s in incs]),
            "incremental_pages": pct([s["rrc"]["pages"] for s in incs]),
            "dirtied_bytes": pct([s["dirtied_bytes"] for s in incs if s["dirtied_bytes"] is not None]),
            "logical_bytes_written": pct([s["interval_logical_bytes"] for s in incs]),
            "sum_image_bytes": img, "sum_dirtied_bytes": dirt, "sum_logical_bytes": logical,
            "image_over_dirtied": img / dirt if dirt else None,
            "image_over_logical": img / logical if logical else None,
        }
        out["schedule"] = {
            "interval_ms": args.interval_ms,
            "actual_interval_ms": pct([(samples[i]["_s0"] - samples[i - 1]["_s0"]) / 1e6
                                       for i in range(1, len(samples))]),
            "late_starts": sum(1 for s in samples[1:] if s["late_us"] > 1000),
            "policy": "next dump starts interval_ms after the previous start, or when the previous "
                      "dump returns if it took longer (late_us > 0); missed slots are not caught up",
        }
        p50, p99 = out["pause_us"]["p50"], out["pause_us"]["p99"]
        out["targets"] = {
            "pause_p50_us": {"target_le": TARGET_P50_US, "measured": p50, "pass": p50 <= TARGET_P50_US},
            "pause_p99_us": {"target_le": TARGET_P99_US, "measured": p99, "pass": p99 <= TARGET_P99_US},
            "evaluated_over": "all checkpoints, the first (full) one included",
        }
    out["load_unprotected"] = load_summary(useg)
    out["load_unprotected_before"] = load_summary(useg[:1])
    out["load_unprotected_after"] = load_summary(useg[1:])
    if lg_p is not None:
        out["load_protected"] = load_summary([(lg_p, win_p)])
        up, pp = out["load_unprotected"], out["load_protected"]
        ratio = {"throughput": pp["throughput_ops"] / up["throughput_ops"] if up["throughput_ops"] else None}
        if up["latency_us"] and pp["latency_us"]:
            for q in ("p50", "p90", "p99", "p99.9", "max", "mean"):
                ratio[f"latency_{q}"] = pp["latency_us"][q] / up["latency_us"][q]
        out["ratio_protected_over_unprotected"] = ratio
    return out


def plot(path, res, samples, lg_p, win_p, useg, interval_ms):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig = plt.figure(figsize=(14, 13))
    gs = fig.add_gridspec(3, 2)
    ax = [[fig.add_subplot(gs[0, 0]), fig.add_subplot(gs[0, 1])],
          [fig.add_subplot(gs[1, 0]), fig.add_subplot(gs[1, 1])],
          [fig.add_subplot(gs[2, :])]]
    m = res["machine"]
    ld = res["config"]["load"]
    fig.suptitle(f"rrc dump --leave-running --snapshot {res['config']['snapshot']} of redis-server "
                 f"({res['config']['keys']} keys, "
                 f"~{res['config']['fill_mb']} MB) every {interval_ms} ms under a SET load "
                 f"({ld['kind']}, {ld['clients']} clients)\n"
                 f"{m['cpu_model']}, {m['nproc']} CPUs, Linux {m['kernel']}, {m['date_utc']}, "
                 f"commit {(m['git_commit'] or '?')[:10]}"
                 f"{' + uncommitted changes' if m['git_tracked_files_modified'] or m['git_untracked_files'] else ''}",
                 fontsize=10)
    a = ax[0][0]
    if samples:
        idx = [s["index"] for s in samples]
        bottom = np.zeros(len(samples))
        for name, color in zip(PAUSE_PARTS, ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple")):
            vals = np.array([s["rrc"].get(name) or 0 for s in samples], dtype=float) / 1e3
            if vals.any():
                a.bar(idx, vals, bottom=bottom, color=color, width=0.8, label=name[:-3], alpha=0.7)
                bottom += vals
        a.plot(idx, [s["rrc"]["pause_us"] / 1e3 for s in samples], "k.-", lw=0.8, label="pause (total)")
        a.axhline(TARGET_P50_US / 1e3, color="gray", ls="--", lw=0.8, label="p50 target 1 ms")
        a.axhline(TARGET_P99_US / 1e3, color="gray", ls=":", lw=0.8, label="p99 target 3 ms")
        ff = (res.get("summary") or {}).get("fork_floor_us")
        if ff:
            a.axhline(ff["p50"] / 1e3, color="tab:red", ls="-.", lw=0.9,
                      label=f"fork() alone, p50 {ff['p50'] / 1e3:.1f} ms")
        a.set_xlabel("checkpoint (0 = full)")
        a.set_ylabel("pause [ms]")
        a.set_ylim(0, max(TARGET_P99_US / 1e3, max(s["rrc"]["pause_us"] for s in samples) / 1e3) * 1.35)
        a.legend(fontsize=7, ncol=4, loc="upper left")
    else:
        a.text(0.5, 0.5, "no protected run", ha="center", transform=a.transAxes)
    a.set_title("pause per checkpoint (bars: breakdown)")

    a = ax[0][1]
    if samples:
        v = np.sort([s["rrc"]["pause_us"] / 1e3 for s in samples])
        a.step(v, np.arange(1, len(v) + 1) / len(v), where="post", color="k")
        a.axvline(TARGET_P50_US / 1e3, color="gray", ls="--", lw=0.8)
        a.axvline(TARGET_P99_US / 1e3, color="gray", ls=":", lw=0.8)
        p = res["summary"]["pause_us"]
        a.set_title(f"pause CDF: p50 {p['p50'] / 1e3:.2f} ms, p90 {p['p90'] / 1e3:.2f} ms, "
                    f"p99 {p['p99'] / 1e3:.2f} ms (n={p['n']})")
        a.set_xlabel("pause [ms]")
        a.set_ylabel("fraction of checkpoints")
        a.grid(alpha=0.3)
    else:
        a.set_title("pause CDF")

    a = ax[1][0]
    if samples:
        idx = [s["index"] for s in samples]
        a.plot(idx, [s["rrc"]["bytes"] / 1e6 for s in samples], "o-", color="tab:blue", mfc="none", ms=5,
               lw=0.8, label="image size (bytes)")
        a.plot(idx, [s["dirtied_bytes"] / 1e6 if s["dirtied_bytes"] is not None and s["index"] > 0 else np.nan
                     for s in samples], "x--", color="tab:red", ms=4, lw=0.8, label="dirtied: written_pages × 4096")
        a.plot(idx, [s["interval_logical_bytes"] / 1e6 if s["interval_logical_bytes"] is not None else np.nan
                     for s in samples], "g.-", lw=0.8, label="logical bytes SET in the interval")
        a.set_yscale("log")
        a.set_xlabel("checkpoint (0 = full)")
        a.set_ylabel("MB (log)")
        a.legend(fontsize=8)
    a.set_title("image size vs bytes dirtied")

    a = ax[1][1]
    if samples:
        idx = [s["index"] for s in samples]
        a.plot(idx, [s["rrc"]["total_us"] / 1e3 for s in samples], ".-", color="tab:purple", lw=0.8,
               label="total_us (request .. image written and verified)")
        if any(s["rrc"].get("write_us") is not None for s in samples):
            a.plot(idx, [s["rrc"].get("write_us", np.nan) / 1e3 for s in samples], ".-", color="tab:brown",
                   lw=0.8, label="write_us (snapshot child writing the image)")
        a.plot(idx[1:], [(samples[i]["start_ns"] - samples[i - 1]["start_ns"]) / 1e6
                         for i in range(1, len(samples))], "-", color="tab:gray", lw=0.8,
               label="actual interval between dump starts")
        a.axhline(interval_ms, color="gray", ls="--", lw=0.8, label=f"interval {interval_ms} ms")
        a.set_yscale("log")
        a.set_xlabel("checkpoint (0 = full)")
        a.set_ylabel("ms (log)")
        a.legend(fontsize=8)
    a.set_title("time until the image is complete")

    a = ax[2][0]
    bin_ns = interval_ms * 1_000_000
    for (lg_u, win_u), name, color in zip(useg, ("before", "after"), ("tab:gray", "tab:olive")):
        xu, yu = throughput_series(lg_u, win_u[0], bin_ns)
        n_u = int((win_u[1] - win_u[0]) // bin_ns)
        a.plot(xu[:n_u], np.array(yu[:n_u]) / 1e3, color=color, lw=0.8, label=f"unprotected ({name})")
    if lg_p is not None:
        xp, yp = throughput_series(lg_p, win_p[0], bin_ns)
        n_p = int((win_p[1] - win_p[0]) // bin_ns)
        a.plot(xp[:n_p], np.array(yp[:n_p]) / 1e3, color="tab:blue", lw=0.8, label="protected (checkpointed)")
        r = res["summary"].get("ratio_protected_over_unprotected", {})
        if r.get("throughput") is not None:
            a.set_title(f"load throughput per {interval_ms} ms bin\nprotected/unprotected: throughput "
                        f"× {r['throughput']:.3f}, p99 latency × {r.get('latency_p99', float('nan')):.2f}",
                        fontsize=10)
    else:
        a.set_title(f"load throughput per {interval_ms} ms bin")
    a.set_xlabel("seconds into the measured window")
    a.set_ylabel("kSET/s")
    a.set_ylim(bottom=0)
    a.legend(fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--checkpoints", type=int, default=100, help="number of checkpoints (first one full)")
    ap.add_argument("--interval-ms", type=int, default=100, help="checkpoint interval")
    ap.add_argument("--fill-mb", type=int, default=100, help="fill redis until used_memory reaches this (MB)")
    ap.add_argument("--value-size", type=int, default=1024, help="value size of fill and load (bytes)")
    ap.add_argument("--clients", type=int, default=8, help="load connections, each closed-loop")
    ap.add_argument("--pipeline", type=int, default=1, help="requests outstanding per connection")
    ap.add_argument("--rate", type=int, default=0, help="cap on total SET/s (0: none, closed loop)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the load's key sequence")
    ap.add_argument("--warmup-ms", type=int, default=1000, help="load before measuring")
    ap.add_argument("--port", type=int, default=6379,
                    help="port of the protected redis inside the private netns (unprotected: port+1)")
    ap.add_argument("--rrc", type=Path, default=DEFAULT_RRC, help="the rrc binary")
    ap.add_argument("--snapshot", choices=("fork", "copy"), default="fork",
                    help="rrc dump --snapshot: fork = clone of the parked process, copy-on-write; "
                         "copy = written pages copied before and during the pause, no fork")
    ap.add_argument("--out", type=Path, default=None,
                    help="output prefix (.json, .png); default bench/results/checkpoint_pause "
                         "(checkpoint_pause_copy with --snapshot copy, baseline_only with --baseline-only)")
    ap.add_argument("--workdir", type=Path, default=None, help="parent of the temporary directory")
    ap.add_argument("--min-free-mb", type=int, default=2000,
                    help="abort when the image file system has less free space (every image is kept)")
    ap.add_argument("--max-seconds", type=float, default=None,
                    help="time budget of the checkpoint loop (default: 20 x checkpoints x interval, >= 60 s)")
    ap.add_argument("--keep-workdir", action="store_true",
                    help="keep the temporary directory (images, logs, load records) for inspection")
    ap.add_argument("--baseline-only", action="store_true",
                    help="only the unprotected run (no rrc needed); for debugging the harness")
    ap.add_argument("--no-plot", action="store_true", help="skip the PNG (no matplotlib needed)")
    args = ap.parse_args()
    if not (1 <= args.checkpoints <= 100000 and 1 <= args.interval_ms <= 60000 and 1 <= args.fill_mb <= 100000
            and 1 <= args.value_size <= 1 << 20 and 1 <= args.clients <= 256 and 1 <= args.pipeline <= 64
            and args.rate >= 0 and 0 <= args.warmup_ms <= 600000 and 1 <= args.port <= 65534
            and args.min_free_mb >= 0):
        ap.error("argument out of range")
    if args.max_seconds is None:
        args.max_seconds = max(60.0, 20 * args.checkpoints * args.interval_ms / 1000)
    if args.out is None:
        args.out = HERE / "results" / ("baseline_only" if args.baseline_only
                                       else "checkpoint_pause" if args.snapshot == "fork"
                                       else "checkpoint_pause_copy")
    if os.geteuid() != 0:
        sys.exit("checkpoint_pause.py: needs root (network namespace, rrc exec)")
    for tool in ("ip", "redis-server", "redis-cli", "findmnt", "nsenter", "unshare", "sysctl"):
        if not shutil.which(tool):
            sys.exit(f"checkpoint_pause.py: {tool} not found "
                     f"(apt: iproute2, redis-server, redis-tools, util-linux, procps)")
    try:
        import numpy  # noqa: F401
        if not args.no_plot:
            import matplotlib  # noqa: F401
    except ImportError as e:
        sys.exit(f"checkpoint_pause.py: {e} (pip install matplotlib; or pass --no-plot, numpy is still needed)")
    if not args.baseline_only:
        if not (args.rrc.is_file() and os.access(args.rrc, os.X_OK)):
            sys.exit(f"checkpoint_pause.py: rrc binary {args.rrc} not found or not executable "
                     f"(run `make` first, or pass --rrc, or --baseline-only)")

    def on_signal(signum, frame):
        raise Interrupted(f"signal {signum}")
    # SIGINT too: a shell starts background jobs with SIGINT ignored, and
    # Python then installs no KeyboardInterrupt handler of its own.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)

    cleanup = Cleanup()
    ns = f"rrcbench-{os.getpid()}"
    rc = 1
    try:
        workdir = Path(tempfile.mkdtemp(prefix="rrc-bench-", dir=args.workdir))
        cleanup.push(f"remove {workdir}", lambda: log(f"kept {workdir}") if args.keep_workdir
                     else shutil.rmtree(workdir))
        machine = machine_description(workdir)
        loadgen = build_c(workdir, "loadgen")
        forkfloor = build_c(workdir, "forkfloor")

        netns_ehash = create_netns(ns, cleanup)

        window_ms = args.checkpoints * args.interval_ms
        uport = args.port + 1
        nkeys, data_u, uidx = start_unprotected(args, ns, workdir, cleanup, uport)
        useg = [measure_unprotected(args, ns, uport, workdir, loadgen, cleanup, nkeys, window_ms, "before")]
        samples, lg_p, win_p, data_p, threads, build = [], None, None, None, None, None
        if not args.baseline_only:
            data_p, samples, lg_p, win_p, threads, build = run_protected(args, ns, workdir, loadgen, cleanup, nkeys)
        useg.append(measure_unprotected(args, ns, uport, workdir, loadgen, cleanup, nkeys, window_ms, "after"))
        cleanup.run_one(uidx)

        fork_floor = measure_fork_floor(forkfloor, data_u["used_memory_rss"])
        log(f"fork() of {data_u['used_memory_rss'] / 1e6:.0f} MB resident: "
            f"p50 {statistics.median(fork_floor) / 1e3:.2f} ms")
        machine["loadavg_at_end"] = Path("/proc/loadavg").read_text().strip()
        summary = summarize(args, samples, lg_p, win_p, useg)
        summary["fork_floor_us"] = pct(fork_floor)
        summary["fork_floor_us"]["rss_bytes"] = data_u["used_memory_rss"]
        summary["fork_floor_us"]["what"] = ("fork() of a process with redis' used_memory_rss resident in "
                                            "4 KiB pages (bench/forkfloor.c), same run: the kernel's floor "
                                            "for a fork()-based snapshot")
        for s in samples:
            s.pop("_s0")
            s.pop("_s1")
        res = {
            "benchmark": "checkpoint_pause",
            "issue": 2,
            "command": shlex.join([sys.executable] + sys.argv),
            "machine": machine,
            "config": {
                "checkpoints": args.checkpoints, "interval_ms": args.interval_ms, "fill_mb": args.fill_mb,
                "value_size": args.value_size, "key_len": 16, "keys": nkeys,
                "load": {"kind": "closed loop, fixed client count" if not args.rate
                         else "rate-limited (latency from scheduled send time)",
                         "clients": args.clients, "pipeline": args.pipeline, "rate_ops": args.rate or None,
                         "command": "SET key:%012d <value_size bytes>, key uniform over the filled keys",
                         "seed": args.seed, "warmup_ms": args.warmup_ms},
                "redis_argv": redis_argv(args.port, "<tmpdir>"),
                "unprotected_port": args.port + 1,
                "order": "unprotected (before), protected, unprotected (after); the unprotected "
                         "server stays up idle in between; ratios use before+after pooled",
                "rrc": str(args.rrc) if not args.baseline_only else None,
                "snapshot": args.snapshot,
                "netns": {"tcp_ehash": "private", "tcp_ehash_entries": netns_ehash,
                          "host_tcp_ehash_entries": machine["tcp_ehash_entries"],
                          "why": "as the lab's containers: the checkpoint's TCP table dump (sock_diag) "
                                 "walks the namespace's established-hash; a shared one is machine-wide"},
                "build": build,
                "images": "all kept until the end of the run (an incremental image needs its ancestors)",
                "protected_threads_at_start": threads,
            },
            "data": {"unprotected": data_u, "protected": data_p},
            "targets": summary.get("targets"),
            "summary": summary,
            "samples": samples,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        jpath = args.out.with_suffix(".json")
        jpath.write_text(json.dumps(res, indent=1) + "\n")
        log(f"wrote {jpath}")
        if not args.no_plot:
            ppath = args.out.with_suffix(".png")
            plot(ppath, res, samples, lg_p, win_p, useg, args.interval_ms)
            log(f"wrote {ppath}")
        print_summary(summary)
        rc = 0
    except BenchError as e:
        log(f"FAILED: {e}")
        for name in ("redis-protected.log", "redis-unprotected.log"):
            try:
                tail = (workdir / name).read_text(errors="replace").splitlines()[-8:]
                log(f"last lines of {name}:\n  " + "\n  ".join(tail))
            except (OSError, NameError):
                pass
    except (KeyboardInterrupt, Interrupted) as e:
        log(f"interrupted ({e or 'Ctrl-C'}), cleaning up")
        rc = 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # let the cleanup finish
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        cleanup.run_all()
    return rc


def print_summary(s):
    def f(x, scale=1.0, unit=""):
        return "n/a" if x is None else f"{x / scale:.3f}{unit}"
    if "pause_us" in s:
        p = s["pause_us"]
        print("pause breakdown p50: " + ", ".join(f"{k[:-3]} {f(v['p50'], 1e3, ' ms')}"
                                                   for k, v in s["pause_breakdown_us"].items()))
        if any(v["max"] for v in s.get("snapshot_copy", {}).values()):
            print("copy snapshot p50: " + ", ".join(f"{k} {f(v['p50'])}" for k, v in s["snapshot_copy"].items()))
        print(f"pause: p50 {f(p['p50'], 1e3, ' ms')}  p90 {f(p['p90'], 1e3, ' ms')}  "
              f"p99 {f(p['p99'], 1e3, ' ms')}  max {f(p['max'], 1e3, ' ms')}  (n={p['n']})")
        for name, t in s["targets"].items():
            if isinstance(t, dict):
                print(f"target {name} <= {t['target_le']} us: measured {t['measured']:.0f} us -> "
                      f"{'PASS' if t['pass'] else 'FAIL'}")
        if "fork_floor_us" in s:
            ff = s["fork_floor_us"]
            print(f"fork() alone, same resident size: p50 {f(ff['p50'], 1e3, ' ms')}  p99 {f(ff['p99'], 1e3, ' ms')}"
                  f"  (pause p50 / fork p50 = {f(p['p50'] / ff['p50'])})")
        iv = s["image_vs_dirtied"]
        print(f"incremental images: sum {iv['sum_image_bytes'] / 1e6:.1f} MB, dirtied "
              f"{f(iv['sum_dirtied_bytes'] and iv['sum_dirtied_bytes'] / 1e6)} MB, "
              f"logical {iv['sum_logical_bytes'] / 1e6:.1f} MB "
              f"(image/dirtied {f(iv['image_over_dirtied'])}, image/logical {f(iv['image_over_logical'])})")
        for name, c in s["completion_us"].items():
            print(f"{name}: p50 {f(c['p50'], 1e3, ' ms')}  p99 {f(c['p99'], 1e3, ' ms')}")
    for run_name in ("load_unprotected_before", "load_unprotected_after", "load_unprotected", "load_protected"):
        if run_name in s:
            l = s[run_name]
            lat = l["latency_us"] or {}
            print(f"{run_name}: {l['throughput_ops']:.0f} SET/s, latency p50 {f(lat.get('p50'), 1, ' us')} "
                  f"p99 {f(lat.get('p99'), 1, ' us')} max {f(lat.get('max'), 1, ' us')}")
    if "ratio_protected_over_unprotected" in s:
        r = s["ratio_protected_over_unprotected"]
        print("protected/unprotected: " + ", ".join(f"{k} {f(v)}" for k, v in r.items()))


if __name__ == "__main__":
    sys.exit(main())
