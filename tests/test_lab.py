"""The lab (`rrc lab up|exec|kill|status|down`, docs/lab.md): hosts as
network namespaces on this machine.

Reachability is checked with ICMP echo sent from a raw socket by a small
Python program run on a lab host through `rrc lab exec` (the replies come
from the other host's kernel, so no server is needed and no `ping` binary).

The lab is one per machine. Each test builds its own and removes it; a lab
left by an earlier, killed test run is removed first. A file lock keeps two
test sessions on this machine from using the lab at the same time.
"""
import contextlib
import fcntl
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import (RESULT_TIMEOUT, RRC_BIN, need, pid_alive, read_text, run, self_signed, wait_for_file, wait_until,
                      zdtm_bin)

HOSTS = ["client", "a", "b", "c", "e1", "e2", "e3"]
NETNS = {h: f"rrc-lab-{h}" for h in HOSTS}
SWITCH = "rrc-lab-switch"
FRONT = {"client": "198.18.0.10", "a": "198.18.0.1", "b": "198.18.0.2", "c": "198.18.0.3"}
REPL = {"a": "198.19.0.1", "b": "198.19.0.2", "c": "198.19.0.3", "e1": "198.19.0.11", "e2": "198.19.0.12", "e3": "198.19.0.13"}
CGROUP_ROOT = Path("/sys/fs/cgroup/unified/rrc-lab")
STATE_ROOT = Path("/var/lib/rrc-lab")
RUN_DIR = Path("/run/rrc-lab")
LAB_JSON = RUN_DIR / "lab.json"
LOCK = Path("/run/lock/rrc-lab-tests.lock")

ICMP_ECHO = r"""
import os, socket, struct, sys, time
def csum(b):
    if len(b) % 2: b += b'\0'
    s = sum(struct.unpack('!%dH' % (len(b) // 2), b)); s = (s >> 16) + (s & 0xffff); s += s >> 16
    return ~s & 0xffff
dst, tries = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
ident, payload = os.getpid() & 0xffff, b'rrc-lab-echo'
for seq in range(tries):
    hdr = struct.pack('!BBHHH', 8, 0, 0, ident, seq)
    pkt = struct.pack('!BBHHH', 8, 0, csum(hdr + payload), ident, seq) + payload
    try:
        s.sendto(pkt, (dst, 0))
    except OSError as e:
        print(f'send: {e}'); sys.exit(2)
    end = time.monotonic() + 0.5
    while (left := end - time.monotonic()) > 0:
        s.settimeout(left)
        try:
            d, a = s.recvfrom(2048)
        except socket.timeout:
            break
        ihl = (d[0] & 15) * 4
        t, _, _, i, _ = struct.unpack('!BBHHH', d[ihl:ihl + 8])
        if t == 0 and i == ident and a[0] == dst:
            print('reply'); sys.exit(0)
print('no reply'); sys.exit(1)
"""


# ---------------------------------------------------------------- helpers

def rrc(*args, check=True, timeout=120, env=None):
    return run([need(RRC_BIN), *args], check=check, timeout=timeout, env=env)


def lab_exec(host, *cmd, check=True, timeout=60):
    return rrc("lab", "exec", host, "--", *cmd, check=check, timeout=timeout)


def reaches(src: str, dst_ip: str, tries: int = 3) -> bool:
    """ICMP echo from host src to dst_ip: True on a reply."""
    p = lab_exec(src, sys.executable, "-c", ICMP_ECHO, dst_ip, str(tries), check=False)
    assert p.returncode in (0, 1, 2), f"echo program failed on {src}: {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p.returncode == 0


def ip_json(ns: str, *args):
    out = run(["ip", "-j", "-n", ns, *args], timeout=30).stdout.strip()
    return json.loads(out) if out else []


def root_links() -> list[str]:
    """The root namespace's links, without counters that change by themselves."""
    out = run(["ip", "-o", "link"], timeout=30).stdout
    return sorted(line.split("\\")[0] for line in out.splitlines())


def netns_names() -> list[str]:
    try:
        return sorted(p.name for p in Path("/run/netns").iterdir())
    except FileNotFoundError:
        return []


def lab_pids() -> list[int]:
    """Processes whose network namespace is one of the lab's (by inode)."""
    ids = set()
    for n in netns_names():
        if n.startswith("rrc-lab-"):
            try:
                st = os.stat(f"/run/netns/{n}")
                ids.add((st.st_dev, st.st_ino))
            except OSError:
                pass
    found = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                st = os.stat(f"/proc/{d}/ns/net")
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in ids:
                found.append(int(d))
    return found


def machine_state() -> dict:
    """What the lab may touch, to compare before up and after down."""
    cg = Path("/sys/fs/cgroup/unified")
    return {
        "netns": netns_names(),
        "root_links": root_links(),
        "cgroups": sorted(p.name for p in cg.iterdir() if p.is_dir()),
        "state_dir": STATE_ROOT.exists(),
        "run_dir": RUN_DIR.exists(),
    }


def no_lab_left():
    assert not [n for n in netns_names() if n.startswith("rrc-lab-")], f"namespaces left: {netns_names()}"
    assert not CGROUP_ROOT.exists(), f"{CGROUP_ROOT} left"
    assert not STATE_ROOT.exists(), f"{STATE_ROOT} left"
    assert not RUN_DIR.exists(), f"{RUN_DIR} left"


def background_sleep(host: str) -> int:
    """A sleep started on host, outliving the shell that started it."""
    p = lab_exec(host, "sh", "-c", "sleep 1000 >/dev/null 2>&1 </dev/null & echo $!")
    pid = int(p.stdout.strip())
    assert pid_alive(pid)
    return pid


@contextlib.contextmanager
def lab_locked():
    """The machine's lab, for this session only: waits for the lock, removes a
    lab left by an earlier, killed test run, and removes the lab at the end."""
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK, "w") as f:
        deadline = time.monotonic() + 600
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail(f"another test session holds {LOCK} for 10 minutes")
                time.sleep(0.2)
        rrc("lab", "down")
        try:
            yield
        finally:
            rrc("lab", "down", check=False)


@pytest.fixture
def lab_lock():
    with lab_locked():
        yield


@pytest.fixture
def lab(lab_lock):
    p = rrc("lab", "up", "--json")
    return json.loads(p.stdout)


# ---------------------------------------------------------------- up

def test_up_builds_the_topology(lab_lock):
    before = root_links()
    out = json.loads(rrc("lab", "up", "--json").stdout)
    assert [h["name"] for h in out["hosts"]] == HOSTS
    assert json.loads(LAB_JSON.read_text()) == out, "lab.json differs from what up printed"
    assert out["agents"] is True
    # one agent per server host, answering on its CLI socket, with no service
    for h in ["a", "b", "c"]:
        st = json.loads(rrc("status", "--agent", str(RUN_DIR / h / "agent.sock"), "--json").stdout)
        assert st["services"] == [], st
        assert [(x["host"], x["reachable"]) for x in st["agents"]] == [(h, True)], st

    names = netns_names()
    for ns in [*NETNS.values(), SWITCH]:
        assert ns in names, f"no namespace {ns}: {names}"

    # the switch: two bridges, one port per host and network
    sw = {l["ifname"]: l for l in ip_json(SWITCH, "link", "show")}
    bridges = sorted(l["ifname"] for l in ip_json(SWITCH, "link", "show", "type", "bridge"))
    assert bridges == ["front", "repl"], f"bridges in the switch: {bridges}"
    for h in HOSTS:
        if h in FRONT:
            assert sw[f"{h}-front"].get("master") == "front"
        else:
            assert f"{h}-front" not in sw, f"the etcd host {h} must not be on the client-facing network"
        if h in REPL:
            assert sw[f"{h}-repl"].get("master") == "repl"
    assert "client-repl" not in sw, "the client must not be on the replication network"
    # a switch, not a firewall: frames cross the bridges without netfilter
    # (only where the kernel has br_netfilter, whose sysctls are per namespace)
    for key in ["bridge-nf-call-iptables", "bridge-nf-call-ip6tables", "bridge-nf-call-arptables"]:
        if Path("/proc/sys/net/bridge", key).exists():
            got = subprocess.run(["ip", "netns", "exec", SWITCH, "cat", f"/proc/sys/net/bridge/{key}"],
                                 capture_output=True, text=True, check=True).stdout.strip()
            assert got == "0", f"{key} is {got} in the switch"

    # addresses exactly as designed, lo up, IPv4 only, no default route
    for h in HOSTS:
        addrs = ip_json(NETNS[h], "addr", "show")
        v4 = sorted((a["ifname"], i["local"], i["prefixlen"]) for a in addrs for i in a.get("addr_info", [])
                    if i["family"] == "inet")
        want = sorted([("lo", "127.0.0.1", 8)] + ([("front", FRONT[h], 24)] if h in FRONT else [])
                      + ([("repl", REPL[h], 24)] if h in REPL else []))
        assert v4 == want, f"host {h}: {v4} != {want}"
        v6 = [i for a in addrs for i in a.get("addr_info", []) if i["family"] == "inet6"]
        assert not v6, f"host {h} has IPv6 addresses: {v6}"
        lo = [a for a in addrs if a["ifname"] == "lo"][0]
        assert "UP" in lo["flags"]
        routes = ip_json(NETNS[h], "route", "show", "table", "all")
        default = [r for r in routes if r.get("dst") == "default"]
        assert not default, f"host {h} has a default route: {default}"
        assert Path(f"/var/lib/rrc-lab/{h}").is_dir()
        assert (CGROUP_ROOT / h / "cgroup.procs").exists()

    # reachability
    assert reaches("client", FRONT["a"]), "client cannot reach a on the front network"
    assert reaches("client", FRONT["b"]), "client cannot reach b on the front network"
    assert reaches("a", REPL["b"]), "a cannot reach b on the replication network"
    assert reaches("b", REPL["c"]), "b cannot reach c on the replication network"
    assert not reaches("client", REPL["a"], tries=1), "the client reaches the replication network"
    assert not reaches("client", "198.18.0.99", tries=1), "an address nobody has answers"

    assert root_links() == before, "up changed the root network namespace's links"

    # a second up refuses and leaves the lab alone
    msg = rrc("lab", "up", check=False)
    assert msg.returncode != 0
    assert "a lab is already up; `rrc lab down` first" in msg.stderr, msg.stderr
    assert reaches("client", FRONT["a"]), "a refused up damaged the lab"


def test_up_failure_removes_what_it_made(lab_lock, tmp_path):
    """An `ip` that fails at one step in the middle of up (a wrapper in
    PATH around the real one): up reports the step, the command and its
    stderr, and leaves nothing behind."""
    real_ip = subprocess.run(["sh", "-c", "command -v ip"], capture_output=True, text=True).stdout.strip()
    assert real_ip
    wrapper = tmp_path / "ip"
    wrapper.write_text("#!/bin/sh\n"
                       "case \"$*\" in *'link add b-repl'*) echo 'injected failure' >&2; exit 2;; esac\n"
                       f"exec {real_ip} \"$@\"\n")
    wrapper.chmod(0o755)
    before = machine_state()
    env = dict(os.environ, PATH=f"{tmp_path}:{os.environ.get('PATH', '')}")
    p = rrc("lab", "up", check=False, env=env)
    assert p.returncode != 0, "up succeeded despite the injected failure"
    assert "wiring host b to the replication network" in p.stderr, p.stderr
    assert "link add b-repl" in p.stderr and "injected failure" in p.stderr, p.stderr
    no_lab_left()
    assert machine_state() == before


# ---------------------------------------------------------------- exec

def test_exec(lab):
    assert lab_exec("a", "sh", "-c", "echo $RRC_LAB_HOST").stdout == "a\n"
    assert lab_exec("c", "sh", "-c", "echo $RRC_STATE_DIR").stdout == "/var/lib/rrc-lab/c\n"
    p = lab_exec("b", "sh", "-c", "exit 7", check=False)
    assert p.returncode == 7, f"exit status not passed through: {p.returncode}"
    p = lab_exec("b", "sh", "-c", "kill -TERM $$", check=False)
    assert p.returncode == -signal.SIGTERM, f"death by signal not passed through: {p.returncode}"
    # the host's cgroup and network namespace
    assert lab_exec("a", "cat", "/proc/self/cgroup").stdout.splitlines()[-1] == "0::/rrc-lab/a"
    ns_a = os.stat("/run/netns/rrc-lab-a")
    out = lab_exec("a", "stat", "-L", "-c", "%d %i", "/proc/self/ns/net").stdout.split()
    assert (int(out[0]), int(out[1])) == (ns_a.st_dev, ns_a.st_ino)
    # stdin is the caller's
    p = run([RRC_BIN, "lab", "exec", "client", "--", "cat"], input="through stdin\n", timeout=30)
    assert p.stdout == "through stdin\n"
    # rrc's own failures
    p = lab_exec("z", "true", check=False)
    assert p.returncode == 125 and "unknown host" in p.stderr, p.stderr
    p = lab_exec("a", "no-such-command-rrc", check=False)
    assert p.returncode == 127 and "no-such-command-rrc" in p.stderr, p.stderr


def test_exec_without_lab(lab_lock):
    p = lab_exec("a", "true", check=False)
    assert p.returncode == 125 and "no lab is up" in p.stderr, p.stderr
    st = json.loads(rrc("lab", "status", "--json").stdout)
    assert st == {"up": False}


# ---------------------------------------------------------------- kill

def test_kill_is_a_fail_stop(lab, rrc_fixture_pids):
    sleeper = background_sleep("b")
    other = background_sleep("a")
    # a protected process on b, in b's netns but in a container cgroup of its own
    zdir = Path(f"/var/lib/rrc-lab/b/zdtm-{secrets.token_hex(3)}")
    zdir.mkdir()
    p = rrc("exec", "--netns", NETNS["b"], "--log", zdir / "log", "--", zdtm_bin("pipes"),
            env=dict(os.environ, ZDTM_DIR=str(zdir)))
    protected = int(p.stdout.strip().splitlines()[-1])
    rrc_fixture_pids.append(protected)
    wait_for_file(zdir / "ready", pid=protected, log=zdir / "log")
    assert reaches("a", REPL["b"]) and reaches("client", FRONT["b"])

    out = json.loads(rrc("lab", "kill", "b", "--json").stdout)
    assert out["host"] == "b" and sorted(out["links_cut"]) == ["front", "repl"]
    wait_until(lambda: not pid_alive(sleeper), 5, f"the sleep ({sleeper}) on b to be gone")
    wait_until(lambda: not pid_alive(protected), 5, f"the protected process ({protected}) on b to be gone")
    ps = json.loads(rrc("ps", "--json").stdout)
    assert protected not in [e["pid"] for e in ps], "the killed host's container is still registered"

    assert not reaches("a", REPL["b"], tries=1), "b still answers on the replication network"
    assert not reaches("client", FRONT["b"], tries=1), "b still answers on the front network"
    assert reaches("client", FRONT["a"]), "a no longer reachable from the client"
    assert reaches("a", REPL["c"]), "the replication network broke for the other hosts"
    assert pid_alive(other), "killing b killed a process of a"

    st = json.loads(rrc("lab", "status", "--json").stdout)
    hosts = {h["name"]: h for h in st["hosts"]}
    assert hosts["b"]["state"] == "killed" and hosts["b"]["processes"] == 0
    assert all(l["host_end"] == "absent" and not l["on_bridge"] for l in hosts["b"]["links"]), hosts["b"]
    # a's agent and the sleep
    assert hosts["a"]["state"] == "alive" and hosts["a"]["processes"] == 2
    assert all(l["host_end"] == "UP" and l["on_bridge"] for l in hosts["a"]["links"]), hosts["a"]
    assert "killed" in rrc("lab", "status").stdout

    p = lab_exec("b", "true", check=False)
    assert p.returncode == 125 and "was killed" in p.stderr, p.stderr
    assert "already killed" in rrc("lab", "kill", "b").stdout


@pytest.fixture
def rrc_fixture_pids():
    """Containers a test started with `rrc exec`/`restore`: killed afterwards."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        rrc("kill", "--pid", str(pid), check=False, timeout=60)


# ---------------------------------------------------------------- down

def test_down_leaves_the_machine_as_found(lab_lock):
    before = machine_state()
    rrc("lab", "up")
    sleepers = [background_sleep(h) for h in HOSTS]
    # a process inside a host's namespace but outside the lab's cgroups
    stray = subprocess.Popen(["ip", "netns", "exec", NETNS["c"], "sleep", "1000"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: stray.pid in lab_pids(), 10, "the stray sleep to enter rrc-lab-c")
        rrc("lab", "kill", "a")  # a killed host is removed too
        out = rrc("lab", "down").stdout
        assert "removed network namespace rrc-lab-switch" in out, out
        assert stray.wait(timeout=10) == -signal.SIGKILL
    finally:
        stray.kill()  # only if down did not
    for pid in sleepers:
        wait_until(lambda: not pid_alive(pid), 5, f"sleep {pid} to be gone")
    no_lab_left()
    assert not lab_pids()
    assert machine_state() == before
    # twice: nothing there, exit 0
    p = rrc("lab", "down")
    assert "nothing to remove" in p.stdout
    assert json.loads(rrc("lab", "down", "--json").stdout) == {"removed": []}
    assert machine_state() == before


def test_down_after_a_crash(lab_lock):
    """The lab half gone and its record lost: down finds the rest by name."""
    before = machine_state()
    rrc("lab", "up")
    sleeper = background_sleep("b")
    LAB_JSON.unlink()
    run(["ip", "netns", "del", NETNS["c"]], timeout=30)
    run(["ip", "-n", SWITCH, "link", "del", "front"], timeout=30)
    (CGROUP_ROOT / "b" / "agent").mkdir()  # a nested group, as agents may make
    # a name whose namespace mount a crash never made
    Path("/run/netns/rrc-lab-half").touch()
    p = rrc("lab", "up", check=False)
    assert p.returncode != 0 and "`rrc lab down` first" in p.stderr
    rrc("lab", "down")
    wait_until(lambda: not pid_alive(sleeper), 5, "the sleep on b to be gone")
    no_lab_left()
    assert machine_state() == before


def test_down_after_a_partial_build_by_hand(lab_lock):
    """Only some pieces, made without rrc (as a crash early in up leaves them)."""
    before = machine_state()
    run(["ip", "netns", "add", NETNS["a"]], timeout=30)
    run(["ip", "netns", "add", SWITCH], timeout=30)
    run(["ip", "-n", SWITCH, "link", "add", "front", "type", "bridge"], timeout=30)
    run(["ip", "-n", SWITCH, "link", "add", "a-front", "type", "veth", "peer", "name", "front", "netns", NETNS["a"]],
        timeout=30)
    (CGROUP_ROOT / "a").mkdir(parents=True)
    stray = subprocess.Popen(["sleep", "1000"])
    (CGROUP_ROOT / "a" / "cgroup.procs").write_text(str(stray.pid))
    (STATE_ROOT / "a").mkdir(parents=True)
    try:
        out = rrc("lab", "down").stdout
        assert "rrc-lab-a" in out and "rrc-lab-switch" in out, out
        assert stray.wait(timeout=10) == -signal.SIGKILL
    finally:
        stray.kill()  # only if down did not
    no_lab_left()
    assert machine_state() == before


# ---------------------------------------------------------------- checkpoint/restore across hosts

ECHO_CLIENT = r"""
import socket, sys
s = socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=10)
s.sendall(sys.argv[2].encode() + b'\n')
d = b''
while (b := s.recv(4096)):
    d += b
sys.stdout.write(d.decode())
"""


def test_protected_process_moves_from_a_to_b(lab, tmp_path, rrc_fixture_pids):
    """A zdtm program protected on host a answers there, is dumped, is
    restored on host b and answers there, and verifies its state."""
    zdir = tmp_path / "zdtm"
    zdir.mkdir()
    log = tmp_path / "sockets.log"
    port = 20000 + int.from_bytes(os.urandom(2), "little") % 20000
    env = dict(os.environ, ZDTM_DIR=str(zdir), ZDTM_PORT=str(port))
    p = rrc("exec", "--netns", NETNS["a"], "--log", log, "--", zdtm_bin("sockets"), env=env)
    pid = int(p.stdout.strip().splitlines()[-1])
    rrc_fixture_pids.append(pid)
    wait_for_file(zdir / "ready", pid=pid, log=log)
    assert lab_exec("a", sys.executable, "-c", ECHO_CLIENT, str(port), "on a").stdout == "echo: on a\n"
    # the listener is a's only: b has its own loopback
    assert lab_exec("b", sys.executable, "-c", ECHO_CLIENT, str(port), "x", check=False).returncode != 0

    rrc("dump", "--pid", str(pid), "--images", tmp_path / "ck0", "--leave-running")
    rrc("dump", "--pid", str(pid), "--images", tmp_path / "ck1", "--parent", tmp_path / "ck0")
    wait_until(lambda: not pid_alive(pid), 15, "the process on a to end after the final dump")

    p = rrc("restore", "--images", tmp_path / "ck1", "--netns", NETNS["b"])
    pid_b = int(p.stdout.strip().splitlines()[-1])
    rrc_fixture_pids.append(pid_b)
    ns_b = os.stat("/run/netns/rrc-lab-b")
    st = os.stat(f"/proc/{pid_b}/ns/net")
    assert (st.st_dev, st.st_ino) == (ns_b.st_dev, ns_b.st_ino), "restored process is not in host b's namespace"
    assert lab_exec("b", sys.executable, "-c", ECHO_CLIENT, str(port), "on b").stdout == "echo: on b\n"

    (zdir / "verify").touch()
    wait_for_file(zdir / "result", timeout=RESULT_TIMEOUT, pid=pid_b, log=log)
    result = (zdir / "result").read_text()
    assert result == "PASS\n", f"after restore on b: {result}\n{read_text(log)}"


# ---------------------------------------------------------------- partitions (issue 15)

LAB_PKI = Path("/run/rrc-lab/etcd-pki")
# the agents' identity towards etcd (crates/rrc-lab/src/etcd_pki.rs)
AGENT_TLS = (f"--cacert={LAB_PKI}/ca.crt", f"--cert={LAB_PKI}/rrc-agent.crt", f"--key={LAB_PKI}/rrc-agent.key")


def etcd_answers(host: str, endpoint_ip: str, tls=AGENT_TLS, scheme="https") -> bool:
    """A linearizable read through one member, from host."""
    p = lab_exec(host, "etcdctl", "--endpoints", f"{scheme}://{endpoint_ip}:2379", *tls, "--command-timeout=2s", "get", "/probe",
                 check=False, timeout=30)
    return p.returncode == 0


def test_etcd_answers_only_the_deployments_certificates(lab, tmp_path):
    """The members take TLS clients with a certificate of the lab's CA and
    no one else: not plain http, not TLS without a client certificate, not
    a certificate of another CA (a forged agent)."""
    assert etcd_answers("c", REPL["e1"]), "the agents' certificate"
    assert not etcd_answers("c", REPL["e1"], tls=(), scheme="http"), "plain http"
    assert not etcd_answers("c", REPL["e1"], tls=(f"--cacert={LAB_PKI}/ca.crt",)), "TLS without a client certificate"
    crt, key = self_signed(tmp_path, "rrc-agent", "extendedKeyUsage=clientAuth")
    assert not etcd_answers("c", REPL["e1"], tls=(f"--cacert={LAB_PKI}/ca.crt", f"--cert={crt}", f"--key={key}")), \
        "a certificate of another CA, with the agents' name"
    # the keys are private
    for k in LAB_PKI.glob("*.key"):
        assert k.stat().st_mode & 0o077 == 0, k


def proc_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_etcd_runs_on_its_three_hosts_and_survives_one(lab):
    for h in ("e1", "e2", "e3"):
        assert etcd_answers("a", REPL[h]), f"etcd member of {h}"
    st = json.loads(rrc("lab", "status", "--json").stdout)
    assert {h["name"]: h["processes"] for h in st["hosts"] if h["role"] == "etcd"} == {"e1": 1, "e2": 1, "e3": 1}, st
    rrc("lab", "kill", "e3")
    assert etcd_answers("a", REPL["e1"]), "e1 and e2 keep a quorum without e3"


def test_cut_heal_freeze(lab):
    rrc("lab", "cut", "a", "b")
    assert not reaches("a", REPL["b"], tries=1) and not reaches("a", FRONT["b"], tries=1), "a still hears b"
    assert not reaches("b", REPL["a"], tries=1), "b still hears a"
    assert reaches("a", REPL["c"]) and reaches("b", REPL["c"]) and reaches("client", FRONT["a"]), "a cut cuts only a-b"
    rrc("lab", "heal")
    assert reaches("a", REPL["b"]), "healed"

    rrc("lab", "cut", "a", "etcd")
    assert reaches("a", REPL["b"]), "only etcd is cut"
    assert not any(etcd_answers("a", REPL[e]) for e in ("e1", "e2", "e3")), "a still reaches an etcd member"
    assert etcd_answers("b", REPL["e1"]), "b still reaches etcd"
    rrc("lab", "heal")
    assert etcd_answers("a", REPL["e2"]), "healed"

    rrc("lab", "cut", "b", "all")
    assert not reaches("client", FRONT["b"], tries=1) and not reaches("c", REPL["b"], tries=1)
    rrc("lab", "heal")

    sleeper = background_sleep("e1")
    rrc("lab", "freeze", "e1")
    try:
        assert (CGROUP_ROOT / "e1" / "cgroup.events").read_text().count("frozen 1") == 1
        assert proc_state(sleeper) in ("S", "D"), "a frozen task sleeps in the freezer"
        assert reaches("b", REPL["e1"]), "the kernel of a frozen host still answers: only its processes stop"
        assert not etcd_answers("b", REPL["e1"]), "e1's member answers while frozen"
    finally:
        rrc("lab", "thaw", "e1")
    wait_until(lambda: etcd_answers("b", REPL["e1"]), 20, "e1's member thawed")
