#!/usr/bin/env python3
"""Fault-injection campaign (issue 4; docs/failover.md): many fail-stop
injections per server, each in a fresh lab, under a checking client and a
perturbing CPU load on the primary (RRC §5), reporting the recovery rate and
the client-observed interruption with its breakdown (detection, block,
repair, restore, routing) as JSON and PNG.

One injection: `rrc lab up`; `rrc run` the server (primary a, backup b);
for redis optionally ~N MB of data (DEBUG POPULATE); the perturb program on
the primary; rrc-check on the client host (8 connections, about half of
their saturation rate, checking every reply); `rrc lab kill a` (or b with
`--kill backup`) at a random time; the client runs on; then the failover's
timeline from `rrc status`, a fresh request to the service, `rrc-check
verify` of every acknowledged write; `rrc lab down`. A killed host stays
dead, so every injection builds its own lab (its cost is measured and kept).

RRC ran 50 injections per benchmark (§6.3); so does the default here.

The lab lock (/run/lock/rrc-lab-tests.lock, the one the test suite takes) is
held for the whole run; the script refuses to start if a lab is up.
Everything it creates (the labs, the client and perturb processes, the
temporary directory) is removed on success, failure, Ctrl-C and SIGTERM.
See bench/README.md.
"""
import argparse
import contextlib
import datetime
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import lab_lock, machine_description
from checkpoint_pause import BenchError, Cleanup, Interrupted, log, pct, run

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_RRC = REPO / "target" / "release" / "rrc"
DEFAULT_CHECK = REPO / "target" / "release" / "rrc-check"
LAB_STATE = Path("/var/lib/rrc-lab")  # per host: agent.log (docs/lab.md)
CLIENT, PRIMARY, BACKUP = "client", "a", "b"
SERVER_ORDER = ("redis", "memcached", "lighttpd")
PORTS = {"redis": 6379, "memcached": 11211, "lighttpd": 80}
TARGET_P50_MS = 300.0  # issue 4: interruption p50 < 300 ms, the 90 ms detection included
DETECTION_MS = 90  # `rrc run --failure-timeout` default (docs/failover.md)

# The breakdown of a primary failure: the steps of docs/failover.md, each
# timed by the backup's agent from the moment the failure was declared.
# Component = time from the previous step's end to this step's end.
PRIMARY_STEPS = (  # (component, prefix of the step's name in `rrc status`)
    ("block", "input held"),  # client input held at the gate, replication halted
    ("repair", "connections repaired"),  # route to the prepared container netns + TCP_REPAIR of every connection
    ("restore", "restored"),  # container + rrc-restore reading the streamed image, until the library answers
    ("replay", "replayed"),  # rr mode only: the log replayed up to the last released output
    ("routing", "live"),  # held input delivered: traffic to the local container
)
OPTIONAL_STEPS = ("replay",)
BACKUP_STEPS = (
    ("reroute", "replies routed out of this host"),
    ("advertise", "service IP advertised here"),  # ARP + gratuitous ARP
)

# RRC §5: "The perturb program busy loops for a random time between 20 to
# 80 ms and sleeps for a random time between 20 to 120 ms", one instance
# pinned to each core, on the primary.
PERTURB_RRC = r"""
import os, random, sys, time
cpu, seed = int(sys.argv[1]), int(sys.argv[2])
try:
    os.sched_setaffinity(0, {cpu})
except OSError:
    pass
r = random.Random(seed)
while True:
    end = time.monotonic() + r.uniform(0.020, 0.080)
    while time.monotonic() < end:
        pass
    time.sleep(r.uniform(0.020, 0.120))
"""
PERTURB_SPIN = "import sys\nwhile True:\n    pass\n"

# A request on a fresh connection from the client host: the service answers
# after the failover (not only on the connections that were repaired).
PROBE = r"""
import socket, sys
ip, port, kind, path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
req, want = {
    "redis": (b"PING\r\n", b"+PONG"),
    "memcached": (b"version\r\n", b"VERSION"),
    "lighttpd": (("GET /%s HTTP/1.0\r\n\r\n" % path).encode(), b"HTTP/1.0 200"),
}[kind]
s = socket.create_connection((ip, port), 5)
s.settimeout(5)
s.sendall(req)
got = b""
while len(got) < len(want):
    d = s.recv(4096)
    if not d:
        break
    got += d
print(got[:80])
sys.exit(0 if got.startswith(want) else 1)
"""


# ---------------------------------------------------------------- the lab

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
            raise BenchError(f"`rrc {shlex.join(map(str, args))}` printed no JSON ({e}): {out[:300]!r}")

    def on(self, host, *argv, timeout=60, check=True):
        return self.cli("lab", "exec", host, "--", *argv, timeout=timeout, check=check)

    def popen(self, host, argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL):
        """argv on host in the background. `rrc lab exec` execs the command in
        place, so the Popen's pid is the command's."""
        return subprocess.Popen([self.rrc, "lab", "exec", host, "--", *map(str, argv)],
                                stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, text=True)

    def status(self, name):
        """`rrc status NAME --json`, or None while no agent knows it."""
        try:
            p = subprocess.run([self.rrc, "status", name, "--json"], capture_output=True, text=True, timeout=30)
        except subprocess.TimeoutExpired:
            return None
        if p.returncode != 0:
            return None
        try:
            return json.loads(p.stdout)
        except json.JSONDecodeError:
            return None

    def probe(self, ip, port, kind, path=""):
        """(answered, what) for one request on a fresh connection from the client."""
        try:
            p = subprocess.run([self.rrc, "lab", "exec", CLIENT, "--", sys.executable, "-c", PROBE, ip, str(port),
                                kind, path], capture_output=True, text=True, timeout=30)
        except subprocess.TimeoutExpired:
            return False, "no answer within 30 s"
        return p.returncode == 0, (p.stdout + p.stderr).strip()[-300:]

    @staticmethod
    def created_at():
        """The lab's identity: its lab.json's creation time (None: no lab)."""
        try:
            return json.loads((Path("/run/rrc-lab") / "lab.json").read_text()).get("created_at")
        except (OSError, ValueError):
            return None

    def wait_no_lab(self, timeout):
        """Between injections, a lab that is not ours was made by someone who
        does not take the lab lock (by hand, a script): it is theirs, wait."""
        if self.created_at() is None and not self.cli_json("lab", "status", "--json", timeout=30).get("up"):
            return
        log(f"a lab made by someone else (without the lab lock) is up: waiting up to {timeout:.0f} s for it to go")
        wait_for("someone else's lab to go down", lambda: self.created_at() is None and not
                 self.cli_json("lab", "status", "--json", timeout=30).get("up"), timeout, 1.0)

    def refuse_if_up(self):
        st = self.cli_json("lab", "status", "--json", timeout=30)
        if st.get("up"):
            raise BenchError("a lab is already up (someone else's?): refusing to touch it; "
                             "`rrc lab down` first if it is a leftover")


def wait_for(what, fn, timeout, every=0.1):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(every)
    raise BenchError(f"{what}: not within {timeout} s")


def stop_popen(p, timeout=5):
    """Ends a Popen this script started (its own pid only) and reaps it."""
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=timeout)


# ---------------------------------------------------------------- servers

def server_specs(workdir, args):
    """argv of each server under `rrc run`, and how the client loads it."""
    www = workdir / "www"
    www.mkdir()
    blob = www / "file.bin"
    blob.write_bytes(os.urandom(args.http_file_size))
    conf = workdir / "lighttpd.conf"
    # keep-alive for the whole run: rrc-check never reconnects (tests/test_replication.py)
    conf.write_text(f'server.document-root = "{www}"\nserver.port = {PORTS["lighttpd"]}\n'
                    'server.bind = "0.0.0.0"\nserver.max-keep-alive-requests = 65535\n'
                    'server.max-keep-alive-idle = 300\n')
    os.chmod(workdir, 0o755)  # the lab's servers run as root, but lighttpd may drop privileges
    redis = ["redis-server", "--save", "", "--appendonly", "no", "--port", str(PORTS["redis"]),
             "--protected-mode", "no"]
    if args.redis_mb > 0:
        redis += ["--enable-debug-command", "yes"]  # DEBUG POPULATE from the client host
    return {
        "redis": {"argv": redis, "check": "redis", "kv": True},
        "memcached": {"argv": ["memcached", "-t", "4", "-p", str(PORTS["memcached"]), "-U", "0", "-u", "root",
                               "-m", "64"], "check": "memcached", "kv": True},
        "lighttpd": {"argv": ["lighttpd", "-D", "-f", str(conf)], "check": "http", "kv": False,
                     "file": blob, "close": args.http_close},
    }


def client_argv(lab, spec, ip, port, duration_s, rate, threads, timeout_s, state=None):
    argv = [lab.check, spec["check"]]
    if spec["kv"]:
        argv += ["--server", f"{ip}:{port}"]
        if state is not None:
            argv += ["--state", state]
    else:
        # random byte ranges: no two replies alike, so one sent twice is seen
        argv += ["--url", f"http://{ip}:{port}/{spec['file'].name}", "--file", spec["file"], "--ranges"]
        if spec.get("close"):
            argv += ["--close"]  # a connection per GET, closed by the server
    return argv + ["--threads", threads, "--duration", f"{duration_s}s", "--rate", f"{rate:.1f}",
                   "--timeout", f"{timeout_s}s", "--json"]


def client_report(p, timeout):
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_popen(p)
        raise BenchError(f"rrc-check did not finish within {timeout} s")
    try:
        return json.loads(out), err
    except json.JSONDecodeError:
        return None, f"rrc-check printed no JSON (exit {p.returncode}): {out[-500:]} {err[-1500:]}"


# ---------------------------------------------------------------- one injection

class Injection:
    """One lab, one service, one fault. Every step's wall time is kept."""

    def __init__(self, lab, ctx, server, index, delay_s):
        self.lab, self.ctx, self.server, self.index, self.delay_s = lab, ctx, server, index, delay_s
        self.name = f"{server[:2]}{index}"
        self.timings = {}
        self.procs = []
        self.lab_id = None
        self.killed = False

    def timed(self, what, fn, *a, **kw):
        t = time.monotonic()
        try:
            return fn(*a, **kw)
        finally:
            self.timings[what] = round(time.monotonic() - t, 3)

    def start_service(self):
        spec = self.ctx["specs"][self.server]
        info = json.loads(self.lab.cli("run", "--name", self.name, "--primary", PRIMARY, "--backup", BACKUP,
                                       "--epoch", f"{self.ctx['args'].epoch_ms}ms", "--mode", self.ctx["args"].mode, "--json", "--",
                                       *spec["argv"], timeout=60))
        self.ip = info["service_ip"]
        wait_for(f"{self.name}: protected with 2 checkpoints committed",
                 lambda: (self.lab.status(self.name) or {}).get("checkpoints_committed", 0) > 2, 30)
        path = spec["file"].name if "file" in spec else ""
        wait_for(f"{self.name}: answering at {self.ip}:{PORTS[self.server]} from the client host",
                 lambda: self.lab.probe(self.ip, PORTS[self.server], self.server, path)[0], 20, every=0.2)

    def preload(self, mb):
        """~mb MB of redis data: DEBUG POPULATE keys of 1000-byte values from
        the client host. Its reply passes the gate, so it is back once the
        checkpoint holding the data is committed at the backup."""
        keys = mb * 1000
        out = self.lab.on(CLIENT, "redis-cli", "-h", self.ip, "-p", PORTS["redis"], "DEBUG", "POPULATE", keys,
                          "preload", 1000, timeout=300).strip()
        if out != "OK":
            raise BenchError(f"DEBUG POPULATE {keys} preload 1000: {out!r}")
        info = self.lab.on(CLIENT, "redis-cli", "-h", self.ip, "-p", PORTS["redis"], "INFO", "memory", timeout=60)
        mem = {k: v for k, _, v in (l.strip().partition(":") for l in info.splitlines()) if v}
        before = (self.lab.status(self.name) or {}).get("checkpoints_committed", 0)
        wait_for(f"{self.name}: a checkpoint committed after the preload",
                 lambda: (self.lab.status(self.name) or {}).get("checkpoints_committed", 0) > before + 1, 120)
        return {"keys": keys, "value_size": 1000, "used_memory": int(mem.get("used_memory", 0)),
                "used_memory_rss": int(mem.get("used_memory_rss", 0))}

    def saturation(self, seconds):
        """Closed-loop throughput of the client's connections (no perturb, no
        fault): the client then runs at half of it, as RRC §5 drove servers
        at about half load."""
        a = self.ctx["args"]
        argv = client_argv(self.lab, self.ctx["specs"][self.server], self.ip, PORTS[self.server], seconds, 0,
                           a.threads, 10)
        rep = json.loads(self.lab.on(CLIENT, *argv, timeout=seconds + 60))
        if not rep["ok"]:
            raise BenchError(f"saturation run against {self.server} found errors before any fault: {rep}")
        return rep["throughput_ops_s"]

    def start_perturb(self, host):
        a = self.ctx["args"]
        if a.perturb == "none":
            return
        n = a.perturb_instances or (os.cpu_count() or 1)
        for i in range(n):
            code = PERTURB_RRC if a.perturb == "rrc" else PERTURB_SPIN
            seed = self.ctx["rng"].randrange(1 << 30)
            self.procs.append(self.lab.popen(host, [sys.executable, "-c", code, i % (os.cpu_count() or 1), seed]))

    def run(self):
        a, lab = self.ctx["args"], self.lab
        spec = self.ctx["specs"][self.server]
        port = PORTS[self.server]
        victim, survivor = (PRIMARY, BACKUP) if a.kill == "primary" else (BACKUP, PRIMARY)
        rec = {"server": self.server, "index": self.index, "kill": a.kill, "killed_host": victim,
               "delay_s": round(self.delay_s, 3), "timings_s": self.timings}
        t_all = time.monotonic()
        rec["rrc_mtime"] = os.stat(lab.rrc).st_mtime  # a rebuild during the campaign shows here
        lab.wait_no_lab(a.foreign_lab_wait)
        self.timed("lab_up", lab.cli, "lab", "up", timeout=120)
        self.lab_id = lab.created_at()
        self.timed("rrc_run", self.start_service)
        if self.server == "redis" and a.redis_mb > 0:
            rec["preload"] = self.timed("preload", self.preload, a.redis_mb)
        if self.server not in self.ctx["rate"]:
            sat = self.timed("saturation", self.saturation, a.saturation_s)
            self.ctx["saturation"][self.server] = sat
            self.ctx["rate"][self.server] = max(1.0, sat / 2)
            log(f"{self.server}: {a.threads} connections saturate at {sat:.0f} ops/s: "
                f"the client runs at {sat / 2:.0f} ops/s")
        rate = self.ctx["rate"][self.server]
        rec["rate_ops_s"] = rate
        self.start_perturb(PRIMARY)
        state = self.ctx["workdir"] / f"state-{self.name}"
        duration = a.delay_max + a.after_s
        argv = client_argv(lab, spec, self.ip, port, duration, rate, a.threads, a.client_timeout,
                           state if spec["kv"] else None)
        t_client = time.monotonic()
        client = lab.popen(CLIENT, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.procs.append(client)
        time.sleep(max(0.0, t_client + self.delay_s - time.monotonic()))
        t_kill = time.monotonic()
        rec["kill_at_s"] = round(t_kill - t_client, 3)
        self.killed = True
        self.timed("kill", lab.cli, "lab", "kill", victim, timeout=60)
        rep, err = client_report(client, duration + a.client_timeout + 60)
        self.timings["client"] = round(time.monotonic() - t_client, 3)
        rec["client"] = rep
        if rep is None:
            rec["client_failure"] = err
        # the timeline: the survivor's agent wrote it when the failover ended
        kind = "primary failure" if a.kill == "primary" else "backup failure"

        def timeline():
            st = lab.status(self.name)
            fo = ((st or {}).get("primary_view") or {}).get("failovers") or []
            return st if any(f.get("kind") == kind for f in fo) else None
        try:
            st = self.timed("status", wait_for, "the failover's timeline in `rrc status`", timeline, 15, 0.2)
        except BenchError as e:
            st = lab.status(self.name)
            rec["status_failure"] = str(e)
        rec["status"] = slim_status(st)
        fo = next((f for f in ((st or {}).get("primary_view") or {}).get("failovers") or []
                   if f.get("kind") == kind), None)
        rec["failover"] = fo
        answered, what = self.timed("probe", lab.probe, self.ip, port, self.server,
                                    spec["file"].name if "file" in spec else "")
        rec["answered"], rec["answer"] = answered, what
        if spec["kv"] and rep is not None:
            rec["verify"] = self.timed("verify", self.verify, state)
            rec["verify_ok"] = bool(rec["verify"].get("ok"))
        else:
            rec["verify_ok"] = None  # http: every body was compared with the file while running
        self.check_lab_is_ours()
        rec.update(judge(rec, a.kill, survivor))
        rec["timings_s"]["until_judged"] = round(time.monotonic() - t_all, 3)
        if not rec["recovered"]:
            rec["logs"] = self.keep_logs(rec)
        return rec

    def check_lab_is_ours(self):
        now = self.lab.created_at()
        if self.lab_id is not None and now != self.lab_id:
            raise BenchError(f"interference: the lab made at {self.lab_id} was replaced (now: {now}) by someone "
                             "not holding the lab lock during the injection")

    def aborted(self, err):
        rec = {"server": self.server, "index": self.index, "kill": self.ctx["args"].kill, "aborted": str(err),
               "fault_injected": self.killed,
               "delay_s": round(self.delay_s, 3), "timings_s": self.timings, "recovered": False,
               "why_not": [f"aborted: {err}"], "interruption_ms": None, "client_errors": None,
               "client_ok": False, "status": slim_status(self.lab.status(self.name))}
        rec["logs"] = self.keep_logs(rec)
        return rec

    def verify(self, state):
        """`rrc-check verify`: every key holds its last acknowledged write (or
        the one in flight), read on a new connection after the failover."""
        spec = self.ctx["specs"][self.server]
        p = subprocess.run([self.lab.rrc, "lab", "exec", CLIENT, "--", self.lab.check, "verify", spec["check"],
                            "--server", f"{self.ip}:{PORTS[self.server]}", "--state", str(state), "--json",
                            "--timeout", "10s"], capture_output=True, text=True, timeout=120)
        try:
            v = json.loads(p.stdout)
        except json.JSONDecodeError:
            v = {"ok": False, "output": (p.stdout + p.stderr)[-1500:]}
        out = {k: v.get(k) for k in ("ok", "ops", "errors", "error_samples", "output") if k in v}
        out["ok"] = p.returncode == 0 and bool(v.get("ok"))
        return out

    def keep_logs(self, rec):
        """The agents' logs (gone with `lab down`) next to the results."""
        d = self.ctx["logdir"] / f"{self.server}-{self.index:03d}"
        d.mkdir(parents=True, exist_ok=True)
        for h in (PRIMARY, BACKUP):  # agent.log and the services' logs, as the paths were
            for src in sorted((LAB_STATE / h).rglob("*.log")):
                with contextlib.suppress(OSError):
                    if src.stat().st_size < 8 << 20:
                        shutil.copy(src, d / f"{h}-{str(src.relative_to(LAB_STATE / h)).replace('/', '_')}")
        (d / "record.json").write_text(json.dumps(rec, indent=1, default=str) + "\n")
        return str(d)

    def finish(self):
        t = time.monotonic()
        try:
            now = self.lab.created_at()
            if now is None or now == self.lab_id:  # never someone else's lab
                self.lab.cli("lab", "down", timeout=120)
        finally:
            for p in self.procs:  # dead with their hosts by now; reaped here
                stop_popen(p)
            self.timings["lab_down"] = round(time.monotonic() - t, 3)


def slim_status(st):
    if not st:
        return None
    keep = {k: st.get(k) for k in ("primary", "backup", "protected", "checkpoints_committed", "state",
                                   "last_error", "service_ip")}
    return keep


def judge(rec, kill, survivor):
    """recovered = the service answers a new request + the client saw no error
    + every acknowledged write is there + (primary failure) every client
    connection was repaired; and the breakdown of the interruption."""
    out = {"why_not": []}
    rep, fo = rec.get("client"), rec.get("failover")
    errs = sum((rep or {}).get("errors", {}).values()) if rep else None
    out["client_errors"] = errs
    out["client_ok"] = bool(rep and rep.get("ok"))
    out["interruption_ms"] = rep["max_pause_ms"] if rep else None
    if rep and rep.get("max_pause_ms") is not None:
        start, length = rep["max_pause_at_s"], rep["max_pause_ms"] / 1000
        # the longest wait began before the kill and ended after it (lab exec
        # start-up makes the client's clock start a few ms late: 0.3 s slack)
        out["pause_spans_kill"] = start - 0.3 <= rec["kill_at_s"] <= start + length + 0.3
    if not out["client_ok"]:
        out["why_not"].append(f"client: {errs} errors {(rep or {}).get('errors')} "
                              f"{(rep or {}).get('error_samples', [])[:3]} {rec.get('client_failure', '')}")
    if not rec.get("answered"):
        out["why_not"].append(f"no answer on a new connection: {rec.get('answer')}")
    if rec.get("verify_ok") is False:
        out["why_not"].append(f"verify: {rec.get('verify')}")
    st = rec.get("status") or {}
    if fo is None:
        out["why_not"].append(f"no failover timeline in `rrc status`: {st} {rec.get('status_failure', '')}")
    elif st.get("primary") != survivor:
        out["why_not"].append(f"status: primary {st.get('primary')}, expected {survivor}")
    bd = None
    if fo is not None:
        steps = fo.get("steps") or []
        at = lambda prefix: next((s["at_ms"] for s in steps if s["step"].startswith(prefix)), None)
        bd = {"detection": fo.get("detection_ms")}
        prev = 0.0
        for comp, prefix in (PRIMARY_STEPS if kill == "primary" else BACKUP_STEPS):
            t = at(prefix)
            if t is None and comp in OPTIONAL_STEPS:
                bd[comp] = 0.0  # not a step of this failover (checkpoint mode, or a replay that fell back)
                continue
            bd[comp] = None if t is None or prev is None else t - prev
            prev = t
        bd["total"] = fo.get("total_ms")
        if out["interruption_ms"] is not None and bd["total"] is not None:
            # what the client waited beyond the failover: the request's age at
            # the failure, the client's retransmission after the service is live
            bd["client_beyond_failover"] = out["interruption_ms"] - bd["total"]
        if kill == "primary":
            conns = fo.get("connections") or []
            out["connections"] = len(conns)
            out["connections_repaired"] = sum(1 for c in conns if c.get("repaired"))
            if not conns or out["connections_repaired"] != len(conns):
                out["why_not"].append("connections not repaired: " + json.dumps(
                    [c for c in conns if not c.get("repaired")])[:800] if conns else "no connection in the checkpoint")
            if bd["routing"] is None:
                out["why_not"].append(f"failover did not reach `live`: {steps} {st.get('last_error')}")
            # rr mode: a replay that diverged was survived (the checkpoint
            # without replay) but is a failed recovery (RRC Tables 7-8)
            rp = fo.get("replay") or {}
            if rp.get("diverged"):
                out["why_not"].append(f"the replay diverged: {rp['diverged']}")
            if rp.get("faults") or rp.get("behind") or rp.get("reset"):
                out["why_not"].append(f"the replay left connections out of step: {rp.get('faults')} bytes, "
                                      f"{rp.get('behind')} behind, {rp.get('reset')} reset")
        elif fo.get("error"):
            out["why_not"].append(f"backup failure handling: {fo['error']}")
    out["breakdown_ms"] = bd
    out["recovered"] = not out["why_not"]
    return out


# ---------------------------------------------------------------- report

def summarize(records, kill):
    comps = ["detection"] + [c for c, _ in (PRIMARY_STEPS if kill == "primary" else BACKUP_STEPS)] + \
            ["total", "client_beyond_failover"]
    out = {}
    for server in dict.fromkeys(r["server"] for r in records):
        # aborted before the fault (the service never got protected): not an
        # injection, listed on their own (the campaign ran another one instead);
        # aborted after the fault: an injection that did not recover
        ab = [r for r in records if r["server"] == server and r.get("aborted") and not r.get("fault_injected")]
        rs = [r for r in records if r["server"] == server and not (r.get("aborted") and not r.get("fault_injected"))]
        med = lambda xs: float(sorted(xs)[len(xs) // 2]) if len(xs) % 2 else \
            (float(sorted(xs)[len(xs) // 2 - 1] + sorted(xs)[len(xs) // 2]) / 2 if xs else None)
        bds = [r["breakdown_ms"] for r in rs if r.get("breakdown_ms")]
        tim = {}
        for k in ("lab_up", "rrc_run", "preload", "saturation", "client", "status", "probe", "lab_down",
                  "injection"):
            xs = [r["timings_s"][k] for r in rs if r["timings_s"].get(k) is not None]
            if xs:
                tim[k] = pct(xs)
        intr = [r["interruption_ms"] for r in rs if r.get("interruption_ms") is not None]
        ok = [r for r in rs if r["recovered"]]
        out[server] = {
            "injections": len(rs),
            "recovered": len(ok),
            "recovery_rate": len(ok) / len(rs) if rs else None,
            "aborted_before_fault": [{"attempt": r["index"], "why": r["aborted"], "status": r.get("status"),
                                      "logs": r.get("logs")} for r in ab],
            "client_errors": sum(r["client_errors"] or 0 for r in rs),
            "client_runs_failed": sum(1 for r in rs if not r["client_ok"]),
            "interruption_ms": pct(intr, (50, 90, 99)),
            "interruption_ms_recovered_only": pct([r["interruption_ms"] for r in ok
                                                   if r.get("interruption_ms") is not None]),
            "breakdown_ms_median": {c: med([b[c] for b in bds if b.get(c) is not None]) for c in comps},
            "breakdown_ms": {c: pct([b[c] for b in bds if b.get(c) is not None]) for c in comps},
            "pause_spans_kill": sum(1 for r in rs if r.get("pause_spans_kill")),
            # rr mode: failovers whose first replay diverged and that replayed
            # again with paced returns (recovery.rs), and of those, recovered
            "replays_retried_paced": sum(1 for r in rs if ((r.get("failover") or {}).get("replay") or {}).get("retried")),
            "replays_retried_paced_recovered": sum(1 for r in ok if ((r.get("failover") or {}).get("replay") or {}).get("retried")),
            "connections_repaired": [sum(r.get("connections_repaired") or 0 for r in rs),
                                     sum(r.get("connections") or 0 for r in rs)] if kill == "primary" else None,
            "timings_s": tim,
            "not_recovered": [{"attempt": r["index"], "why": r["why_not"], "logs": r.get("logs")}
                              for r in rs if not r["recovered"]],
        }
        p50 = out[server]["interruption_ms"]["p50"] if intr else None
        out[server]["targets"] = {
            "recovery_100pct": len(ok) == len(rs),
            "zero_client_errors": out[server]["client_errors"] == 0 and out[server]["client_runs_failed"] == 0,
            "interruption_p50_lt_300ms": (p50 is not None and p50 < TARGET_P50_MS) if kill == "primary" else None,
        }
    return out


def print_table(summary, kill):
    comps = [c for c, _ in (PRIMARY_STEPS if kill == "primary" else BACKUP_STEPS)]
    print(f"\n| server | recovered | client errors | interruption p50 / p90 / p99 / max ms | "
          f"median breakdown ms: detection / {' / '.join(comps)} / client beyond | per injection s (lab up) |")
    print("|---|---|---|---|---|---|")
    for s, x in summary.items():
        i, b = x["interruption_ms"], x["breakdown_ms_median"]
        f = lambda v: "-" if v is None else f"{v:.0f}"
        il = " / ".join(f(i[k]) for k in ("p50", "p90", "p99", "max")) if i else "-"
        bl = " / ".join(f(b.get(c)) for c in ["detection"] + comps + ["client_beyond_failover"])
        t = x["timings_s"]
        tl = f"{t['injection']['p50']:.1f} ({t['lab_up']['p50']:.2f})" if "injection" in t else "-"
        ab = f" (+{len(x['aborted_before_fault'])} aborted before the fault)" if x["aborted_before_fault"] else ""
        print(f"| {s} | {x['recovered']}/{x['injections']}{ab} | {x['client_errors']} | {il} | {bl} | {tl} |")


def plot(path, res):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    kill = res["config"]["kill"]
    comps = ["detection"] + [c for c, _ in (PRIMARY_STEPS if kill == "primary" else BACKUP_STEPS)]
    colors = {"detection": "tab:gray", "block": "tab:blue", "repair": "tab:orange",
              "restore": "tab:green", "replay": "tab:olive", "routing": "tab:red", "reroute": "tab:blue", "advertise": "tab:orange",
              "client_beyond_failover": "tab:purple"}
    summ = res["summary"]
    servers = list(summ)
    recs = res["injections"]
    fig = plt.figure(figsize=(15, 10))
    gs = fig.add_gridspec(2, 2)
    ax_cdf, ax_bar, ax_all = fig.add_subplot(gs[0, 0]), fig.add_subplot(gs[0, 1]), fig.add_subplot(gs[1, :])
    m, c = res["machine"], res["config"]
    fig.suptitle(f"{kill} failure injected {c['injections']}× per server under rrc-check ({c['threads']} conns, "
                 f"half load) and the perturb program on the primary; {c.get('mode', 'checkpoint')} mode, epoch {c['epoch_ms']} ms, redis "
                 f"~{c['redis_mb']} MB\n{m['cpu_model']}, {m['nproc']} CPUs, Linux {m['kernel']}, {m['date_utc']}, "
                 f"commit {(m['git_commit'] or '?')[:10]}"
                 f"{' + uncommitted changes' if m['git_tracked_files_modified'] or m['git_untracked_files'] else ''}",
                 fontsize=10)
    for s in servers:
        v = np.sort([r["interruption_ms"] for r in recs if r["server"] == s and r["interruption_ms"] is not None])
        if v.size:
            x = summ[s]
            ax_cdf.step(np.r_[0, v], np.r_[0, np.arange(1, v.size + 1) / v.size], where="post",
                        label=f"{s}: p50 {x['interruption_ms']['p50']:.0f} ms, recovered "
                              f"{x['recovered']}/{x['injections']}")
    if kill == "primary":
        ax_cdf.axvline(TARGET_P50_MS, color="k", ls="--", lw=0.8, label="target p50 < 300 ms")
    ax_cdf.axvline(DETECTION_MS, color="gray", ls=":", lw=0.8, label="failure timeout 90 ms")
    ax_cdf.set_xlabel("client-observed interruption: longest wait for one reply [ms]")
    ax_cdf.set_ylabel("fraction of injections")
    ax_cdf.set_title("interruption CDF")
    ax_cdf.set_xlim(left=0)
    ax_cdf.set_ylim(0, 1.02)
    ax_cdf.grid(alpha=0.3)
    ax_cdf.legend(fontsize=8, loc="upper left")

    x = np.arange(len(servers))
    bottom = np.zeros(len(servers))
    for comp in comps:
        vals = np.array([summ[s]["breakdown_ms_median"].get(comp) or 0 for s in servers], dtype=float)
        ax_bar.bar(x, vals, bottom=bottom, color=colors[comp], width=0.5, label=comp)
        bottom += vals
    p50 = [summ[s]["interruption_ms"]["p50"] if summ[s]["interruption_ms"] else np.nan for s in servers]
    ax_bar.plot(x, p50, "kD", label="client interruption p50")
    if kill == "primary":
        ax_bar.axhline(TARGET_P50_MS, color="k", ls="--", lw=0.8)
    ax_bar.set_xticks(x, servers)
    ax_bar.set_ylabel("ms")
    ax_bar.set_title("median breakdown (agent's timeline) vs client interruption p50")
    ax_bar.set_ylim(0, max([*bottom, *[v for v in p50 if v == v], TARGET_P50_MS]) * 1.45)
    ax_bar.legend(fontsize=8, loc="upper left", ncol=3)

    order = [r for s in servers for r in recs if r["server"] == s and not (r.get("aborted") and not r.get("fault_injected"))]
    xi = np.arange(len(order))
    bottom = np.zeros(len(order))
    for comp in comps:
        vals = np.array([((r.get("breakdown_ms") or {}).get(comp) or 0) for r in order], dtype=float)
        ax_all.bar(xi, vals, bottom=bottom, color=colors[comp], width=0.85, label=None)
        bottom += vals
    ax_all.plot(xi, [r["interruption_ms"] if r["interruption_ms"] is not None else np.nan for r in order],
                "k.", ms=5, label="client interruption")
    bad = [i for i, r in enumerate(order) if not r["recovered"]]
    if bad:
        ax_all.plot(bad, [0] * len(bad), "rx", ms=9, label="not recovered")
    edge = 0
    for s in servers:
        n = sum(1 for r in order if r["server"] == s)
        ax_all.axvline(edge - 0.5, color="gray", lw=0.6)
        ax_all.text(edge + n / 2 - 0.5, 1.01, s, transform=ax_all.get_xaxis_transform(), ha="center", fontsize=9)
        edge += n
    ax_all.set_xlabel("injection")
    ax_all.set_ylabel("ms")
    ax_all.set_title("every injection: breakdown (bars, colors as above) and client interruption (dots)", pad=16)
    ax_all.legend(fontsize=8, loc="upper right")
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--servers", default=",".join(SERVER_ORDER),
                    help="comma-separated subset of " + ",".join(SERVER_ORDER))
    ap.add_argument("--injections", type=int, default=None, help="injections per server (default 50; 3 with --quick)")
    ap.add_argument("--kill", choices=("primary", "backup"), default="primary",
                    help="the host killed: primary (a) or backup (b)")
    ap.add_argument("--quick", action="store_true",
                    help="3 injections per server, 10 MB of redis data, shorter client runs")
    ap.add_argument("--redis-mb", type=int, default=None,
                    help="redis data preloaded before the client starts (DEBUG POPULATE of 1000-byte values), "
                         "MB; 0 = none (default 100; 10 with --quick)")
    ap.add_argument("--threads", type=int, default=8, help="client connections (rrc-check threads)")
    ap.add_argument("--rate", type=float, default=None,
                    help="client ops/s (all connections); default: half of the closed-loop throughput of "
                         "the same connections, measured on the first injection of each server")
    ap.add_argument("--saturation-s", type=float, default=None,
                    help="seconds of the closed-loop measurement behind the default --rate (3; 2 with --quick)")
    ap.add_argument("--delay-min", type=float, default=None,
                    help="the fault comes uniformly between --delay-min and --delay-max s after the client "
                         "started (default 2..6; 1..2.5 with --quick)")
    ap.add_argument("--delay-max", type=float, default=None)
    ap.add_argument("--after-s", type=float, default=None,
                    help="the client runs this long past --delay-max (default 3; 2 with --quick)")
    ap.add_argument("--client-timeout", type=float, default=10,
                    help="rrc-check --timeout: a reply longer than this is an error (a failed failover)")
    ap.add_argument("--perturb", choices=("rrc", "spin", "none"), default="rrc",
                    help="CPU load on the primary: rrc = RRC §5's perturb program (busy 20-80 ms, sleep "
                         "20-120 ms), spin = a busy loop")
    ap.add_argument("--perturb-instances", type=int, default=None,
                    help="perturb processes, pinned round-robin to the CPUs (default: one per CPU, as RRC §5)")
    ap.add_argument("--epoch-ms", type=int, default=30, help="rrc run --epoch")
    ap.add_argument("--mode", choices=("checkpoint", "rr"), default="checkpoint",
                    help="rrc run --mode (rr: replies released on the log, failover by replay; a replay that "
                         "diverged counts as a failed recovery)")
    ap.add_argument("--http-file-size", type=int, default=4096, help="size of lighttpd's static file (bytes)")
    ap.add_argument("--http-close", action="store_true",
                    help="lighttpd's clients open a connection per GET, which the server closes (rrc-check http --close)")
    ap.add_argument("--seed", type=int, default=None, help="seed of the fault times (default: random, recorded)")
    ap.add_argument("--foreign-lab-wait", type=float, default=600,
                    help="seconds to wait, between injections, for a lab someone made without the lab lock")
    ap.add_argument("--lock-wait", type=float, default=1200, help="seconds to wait for the lab lock")
    ap.add_argument("--rrc", type=Path, default=DEFAULT_RRC, help="the rrc binary")
    ap.add_argument("--rrc-check", type=Path, default=DEFAULT_CHECK, help="the rrc-check binary")
    ap.add_argument("--out", type=Path, default=HERE / "results",
                    help="directory of NAME.json, NAME.png and NAME_failures/ (the logs of injections "
                         "that did not recover)")
    ap.add_argument("--name", default=None,
                    help="results name (default failover_campaign, + _backup with --kill backup, "
                         "+ _quick with --quick)")
    ap.add_argument("--no-plot", action="store_true", help="skip the PNG (no matplotlib needed)")
    args = ap.parse_args()
    q = args.quick
    dflt = lambda v, full, quick: (quick if q else full) if v is None else v
    args.injections = dflt(args.injections, 50, 3)
    args.redis_mb = dflt(args.redis_mb, 100, 10)
    args.saturation_s = dflt(args.saturation_s, 3.0, 2.0)
    args.delay_min = dflt(args.delay_min, 2.0, 1.0)
    args.delay_max = dflt(args.delay_max, 6.0, 2.5)
    args.after_s = dflt(args.after_s, 3.0, 2.0)
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1 << 31)
    servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    if not servers or any(s not in SERVER_ORDER for s in servers) or len(set(servers)) != len(servers):
        ap.error(f"--servers: a subset of {','.join(SERVER_ORDER)}")
    if not (1 <= args.injections <= 10000 and 0 <= args.redis_mb <= 4096 and 1 <= args.threads <= 256
            and 0.2 <= args.delay_min <= args.delay_max <= 600 and 0.5 <= args.after_s <= 600
            and 1 <= args.client_timeout <= 600 and 1 <= args.epoch_ms <= 10000 and 0.5 <= args.saturation_s <= 60
            and (args.rate is None or args.rate > 0) and 1 <= args.http_file_size <= 64 << 20):
        ap.error("argument out of range")
    if args.name is None:
        args.name = "failover_campaign" + ("_backup" if args.kill == "backup" else "") + ("_quick" if q else "")
    if os.geteuid() != 0:
        sys.exit("failover_campaign.py: needs root (the lab)")
    for b in (args.rrc, args.rrc_check):
        if not (b.is_file() and os.access(b, os.X_OK)):
            sys.exit(f"failover_campaign.py: {b} not found or not executable (run `make` first)")
    need = {"redis": ["redis-server", "redis-cli"], "memcached": ["memcached"], "lighttpd": ["lighttpd"]}
    for s in servers:
        for b in need[s]:
            if not shutil.which(b):
                sys.exit(f"failover_campaign.py: {b} not found (scripts/setup.sh installs it)")
    try:
        import numpy  # noqa: F401
        if not args.no_plot:
            import matplotlib  # noqa: F401
    except ImportError as e:
        sys.exit(f"failover_campaign.py: {e} (pip install matplotlib; or pass --no-plot, numpy is still needed)")

    def on_signal(signum, frame):
        raise Interrupted(f"signal {signum}")
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)

    lab = Lab(args.rrc.resolve(), args.rrc_check.resolve())
    cleanup = Cleanup()
    rc = 1
    t_start = time.monotonic()
    records = []
    try:
        with lab_lock(args.lock_wait):
            try:
                lab.refuse_if_up()
                workdir = Path(tempfile.mkdtemp(prefix="rrc-bench-failover-"))
                cleanup.push(f"remove {workdir}", lambda: shutil.rmtree(workdir))
                machine = machine_description()
                args.out.mkdir(parents=True, exist_ok=True)
                logdir = args.out / f"{args.name}_failures"
                shutil.rmtree(logdir, ignore_errors=True)  # of an earlier run of the same name
                ctx = {"args": args, "workdir": workdir, "specs": server_specs(workdir, args), "logdir": logdir,
                       "rng": random.Random(args.seed), "rate": {}, "saturation": {}}
                if args.rate is not None:
                    ctx["rate"] = {s: args.rate for s in servers}
                log(f"{args.injections} {args.kill} failures per server for {','.join(servers)}, seed {args.seed}")
                for s in servers:
                    done = setup_failures = 0
                    i = 0  # attempt number: an attempt aborted before its fault is replaced by another
                    while done < args.injections:
                        if setup_failures > max(3, args.injections // 5):
                            raise BenchError(f"{s}: {setup_failures} attempts failed before their fault; "
                                             f"see {logdir}")
                        delay = ctx["rng"].uniform(args.delay_min, args.delay_max)
                        inj = Injection(lab, ctx, s, i, delay)
                        i += 1
                        idx = cleanup.push(f"lab down (injection {s} #{inj.index})", inj.finish)
                        t0 = time.monotonic()
                        try:
                            rec = inj.run()
                        except BenchError as e:
                            # kept as such, with the agents' logs; the campaign goes on
                            rec = inj.aborted(e)
                            log(f"{s} #{inj.index}: ABORTED {'after' if inj.killed else 'before'} the fault: {e} "
                                f"(logs: {rec['logs']})")
                        finally:
                            cleanup.run_one(idx)
                        rec["timings_s"]["injection"] = round(time.monotonic() - t0, 3)
                        if rec.get("aborted") and not rec.get("fault_injected"):
                            setup_failures += 1
                        else:
                            done += 1
                        records.append(rec)
                        b = rec.get("breakdown_ms") or {}
                        if not rec.get("aborted"):
                            log(f"{s} #{inj.index}: {'recovered' if rec['recovered'] else 'NOT RECOVERED'}, kill at "
                                f"{rec['kill_at_s']:.2f} s, interruption {rec['interruption_ms']} ms, failover "
                                f"total {b.get('total')} ms, {rec['timings_s']['injection']:.1f} s "
                                f"(lab up {rec['timings_s']['lab_up']:.2f} s, down {rec['timings_s']['lab_down']:.2f} s)"
                                + ("" if rec["recovered"] else f": {rec['why_not']} (logs: {rec.get('logs')})"))
                machine["loadavg_at_end"] = Path("/proc/loadavg").read_text().strip()
                summary = summarize(records, args.kill)
                res = {
                    "benchmark": "failover_campaign",
                    "issue": 4,
                    "command": shlex.join([sys.executable] + sys.argv),
                    "machine": machine,
                    "config": {
                        "servers": servers, "injections": args.injections, "kill": args.kill,
                        "killed_host": PRIMARY if args.kill == "primary" else BACKUP,
                        "quick": q, "seed": args.seed, "epoch_ms": args.epoch_ms, "mode": args.mode,
                        "heartbeat": "rrc run defaults: heartbeat 30 ms, failure timeout 90 ms",
                        "redis_mb": args.redis_mb,
                        "redis_preload": "DEBUG POPULATE mb*1000 keys of 1000-byte values, from the client host"
                                         " through the gate (redis runs with --enable-debug-command yes)"
                                         if args.redis_mb else "none",
                        "servers_argv": {s: ctx["specs"][s]["argv"] for s in servers},
                        "threads": args.threads,
                        "client": "rrc-check on the lab's client host, one long-lived connection per thread "
                                  f"{'(lighttpd: a connection per GET, --close) ' if args.http_close else ''}"
                                  "every reply checked (kv: read = last acknowledged write; http: body = the byte range asked of the file); "
                                  f"--timeout {args.client_timeout}s; afterwards `rrc-check verify` (kv)",
                        "rate_ops_s": ctx["rate"],
                        "rate_choice": "given (--rate)" if args.rate is not None else
                                       f"half of the closed-loop throughput of the same {args.threads} connections "
                                       f"({args.saturation_s} s, first injection of each server, no perturb)",
                        "saturation_ops_s": ctx["saturation"],
                        "fault_time": f"uniform in [{args.delay_min}, {args.delay_max}] s after the client "
                                      f"started; the client runs {args.delay_max + args.after_s} s",
                        "fault": f"`rrc lab kill {PRIMARY if args.kill == 'primary' else BACKUP}` (links cut, "
                                 "then every process of the host killed)",
                        "perturb": {"kind": args.perturb,
                                    "instances": 0 if args.perturb == "none" else
                                    (args.perturb_instances or os.cpu_count()),
                                    "where": f"host {PRIMARY}, started after the preload, before the client",
                                    "rrc": "RRC §5: busy 20-80 ms, sleep 20-120 ms, pinned per CPU"},
                        "recovered": "a new request answered + client ok (no error) + verify ok (kv) + the "
                                     "failover timeline in `rrc status` with the survivor as primary + (primary "
                                     "failure) every client connection repaired and the `live` step reached",
                        "interruption": "rrc-check max_pause_ms: the longest wait for one reply of any "
                                        "connection (from the send)",
                        "breakdown": "from the survivor's `rrc status` failovers[]: detection = detection_ms; "
                                     "then the difference between consecutive steps' at_ms: "
                                     + ", ".join(f"{c} (until '{p}...')" for c, p in
                                                 (PRIMARY_STEPS if args.kill == "primary" else BACKUP_STEPS))
                                     + "; client_beyond_failover = interruption - total_ms",
                        "lab": "a fresh `rrc lab up` per injection (a killed host stays dead); timings_s "
                               "keeps the wall time of every phase",
                        "rrc": str(args.rrc), "rrc_check": str(args.rrc_check),
                    },
                    "summary": summary,
                    # the rrc binary's mtime at each injection: more than one = rebuilt during the run
                    "rrc_builds_seen": sorted({datetime.datetime.fromtimestamp(r["rrc_mtime"], datetime.timezone.utc)
                                              .isoformat(timespec="seconds") for r in records if r.get("rrc_mtime")}),
                    "injections": records,
                    "run_seconds": time.monotonic() - t_start,
                }
                jpath = args.out / f"{args.name}.json"
                jpath.write_text(json.dumps(res, indent=1, default=str) + "\n")
                log(f"wrote {jpath}")
                if not args.no_plot:
                    ppath = args.out / f"{args.name}.png"
                    plot(ppath, res)
                    log(f"wrote {ppath}")
                print_table(summary, args.kill)
                rc = 0
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
