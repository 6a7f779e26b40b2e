"""What the lab benchmarks (replication.py, failover_campaign.py) share: the
lab lock of the test suite and the description of the machine a result was
measured on."""
import contextlib
import datetime
import fcntl
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path

from checkpoint_pause import BenchError, log, run

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
LAB_LOCK = Path("/run/lock/rrc-lab-tests.lock")  # tests/test_lab.py's LOCK


@contextlib.contextmanager
def lab_lock(wait_s):
    """The lab lock of the test suite (tests/test_lab.py lab_locked()): held
    for the whole run, so a benchmark never shares the lab with a test run."""
    LAB_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(LAB_LOCK, "w") as f:
        deadline = time.monotonic() + wait_s
        said = 0.0
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                now = time.monotonic()
                if now > deadline:
                    raise BenchError(f"{LAB_LOCK} held by someone else for {wait_s:.0f} s (a test run?)")
                if now - said > 30:
                    log(f"waiting for {LAB_LOCK} (held by another session)")
                    said = now
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def machine_description():
    cpu, mem_kb = "unknown", None
    with contextlib.suppress(OSError):
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError):
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])

    def version(argv):
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=10)
            return (p.stdout + p.stderr).strip().splitlines()[0]
        except (OSError, subprocess.TimeoutExpired, IndexError):
            return None
    commit = run(["git", "-C", str(REPO), "rev-parse", "HEAD"], 10, check=False).strip()
    status = run(["git", "-C", str(REPO), "status", "--porcelain"], 10, check=False).splitlines()
    return {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "kernel": platform.release(),
        "cpu_model": cpu,
        "nproc": os.cpu_count(),
        "mem_total_kib": mem_kb,
        "redis_version": version(["redis-server", "--version"]),
        "memcached_version": version(["memcached", "--version"]),
        "lighttpd_version": version(["lighttpd", "-v"]),
        "python": platform.python_version(),
        "git_commit": commit or None,
        "git_tracked_files_modified": sum(1 for l in status if not l.startswith("??")),
        "git_untracked_files": sum(1 for l in status if l.startswith("??")),
        "loadavg_at_start": Path("/proc/loadavg").read_text().strip(),
    }


def spread(v):
    """min / median / max of repeated measurements, and how many."""
    return {"min": min(v), "median": statistics.median(v), "max": max(v), "n": len(v)}


def netns_up(cleanup, name):
    """A network namespace with lo up, deleted by cleanup (record.py,
    replay.py: client and server on its loopback)."""
    run(["ip", "netns", "add", name], 10)
    cleanup.push("netns", lambda: run(["ip", "netns", "del", name], 10, check=False))
    run(["ip", "-n", name, "link", "set", "lo", "up"], 10)


def wait_port(ns, port, pid, timeout=20):
    """Until something listens on 127.0.0.1:port in ns (the server of pid)."""
    import sys
    probe = "import socket,sys\nsocket.create_connection(('127.0.0.1', int(sys.argv[1])), 1).close()"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", probe, str(port)],
                          capture_output=True).returncode == 0:
            return
        if not Path(f"/proc/{pid}").exists():
            raise BenchError(f"the server (pid {pid}) exited before it listened on {port}")
        time.sleep(0.1)
    raise BenchError(f"nothing listened on {port} within {timeout} s")


def write_results(out, data, plot, compact=False):
    """out.json and out.png (drawn by plot(path, data)); compact: no
    indentation (thousands of runs)."""
    import json
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, separators=(",", ":")) if compact else json.dumps(data, indent=1)
    Path(out + ".json").write_text(text + "\n")
    plot(out + ".png", data)
    log(f"wrote {out}.json and .png")


def exited(pid):
    """Exited (a zombie has closed its fds, its listener with them)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, IndexError, ProcessLookupError):
        return True


def kill_container(rrc, pid, timeout=10):
    """`rrc kill`, then until its process has exited (the next server can
    take its port)."""
    run([str(rrc), "kill", "--pid", str(pid)], 30, check=False)
    deadline = time.monotonic() + timeout
    while not exited(pid) and time.monotonic() < deadline:
        time.sleep(0.01)


def run_main(main):
    """A benchmark's entry: its error (or an interruption) logged, exit 1."""
    import sys
    from checkpoint_pause import Interrupted
    try:
        main()
    except (BenchError, Interrupted) as e:
        log(f"error: {e}")
        sys.exit(1)


RRC_BIN = REPO / "target" / "release" / "rrc"


def rrc_cli(*args, timeout=120, check=True):
    """`rrc ARGS...`: its stdout (BenchError naming the command on failure)."""
    p = subprocess.run([str(RRC_BIN), *map(str, args)], capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise BenchError(f"rrc {' '.join(map(str, args))}: {p.stderr.strip()[-2000:]}")
    return p.stdout


def lab_parts(name, hosts=("a", "b"), skip=()):
    """{host: that host's part of service `name`} (its status object, with
    `role` and `view`), asked of each lab agent in turn; an agent that does
    not answer within 8 s (frozen, cut) is left out, as are `skip`."""
    import json
    out = {}
    for h in hosts:
        if h in skip:
            continue
        try:
            st = json.loads(rrc_cli("status", "--agent", f"/run/rrc-lab/{h}/agent.sock", "--json", timeout=8, check=False) or "{}")
        except (json.JSONDecodeError, subprocess.TimeoutExpired):
            continue
        for s in st.get("services", []):
            for part in (s.get("primary_view"), s.get("backup_view")):
                if s["name"] == name and part and part["host"] == h:
                    out[h] = part
    return out
