"""End-to-end: unmodified Debian servers under rrc.

For redis-server, memcached -t 4 and lighttpd -D: start under `rrc exec` in
a test network namespace, load data with real clients (run there with
`ip netns exec`), full dump, then ten rounds of "write more, incremental
dump", stop writing, snapshot every key / file as the server serves it,
final dump (kills), restore, and check that every byte is back (the
deterministic model of what was written and the snapshot) and that the
restored server answers new clients.
"""
import hashlib
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import TOOLS, netns_exec, pid_alive, read_text, wait_until

KVTOOL = TOOLS / "kvtool.py"
INCREMENTS = 10


def server_bin(name: str) -> str:
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")
    if not path:
        pytest.fail(f"{name} is not installed: run scripts/setup.sh")
    return path


def wait_serving(ns: str, check_cmd, pid: int, log: Path, what: str):
    def ok():
        if not pid_alive(pid):
            raise AssertionError(f"{what} (pid {pid}) died\n{read_text(log)}")
        return netns_exec(ns, check_cmd, check=False, timeout=30).returncode == 0
    wait_until(ok, 30, f"{what} to answer", interval=0.05, diag=lambda: read_text(log))


def kv(ns: str, *args, **kw):
    return netns_exec(ns, [sys.executable, KVTOOL, *map(str, args)], timeout=300, **kw)


class Chain:
    def __init__(self, rrc, tmp: Path):
        self.rrc, self.tmp, self.images, self.dumps = rrc, tmp, [], []

    def dump(self, pid: int, leave_running=True) -> dict:
        d = self.tmp / f"img{len(self.images)}"
        out = self.rrc.dump(pid, d, parent=self.images[-1] if self.images else None, leave_running=leave_running)
        assert out["sequence"] == len(self.images)
        self.images.append(d)
        self.dumps.append(out)
        return out

    def final(self, pid: int):
        self.dump(pid, leave_running=False)
        wait_until(lambda: not pid_alive(pid), 20, f"pid {pid} to end after the final dump")
        self.rrc.inspect(self.images[-1])

    def report(self) -> str:
        return ", ".join(f"#{d['sequence']}: {d['pages']} pages pause {d['pause_us']} us" for d in self.dumps)


# ------------------------------------------------------------------ redis

def start_redis(rrc, tmp_path, netns, port=6379, extra=()):
    """redis-server (no persistence) under `rrc exec` in netns, serving."""
    log = tmp_path / "redis.log"
    pid = rrc.exec([server_bin("redis-server"), "--save", "", "--appendonly", "no", "--port", port,
                    "--bind", "127.0.0.1", "--daemonize", "no", "--dir", tmp_path, *extra], netns=netns, log=log)
    cli = ["redis-cli", "-p", str(port)]
    wait_serving(netns, [*cli, "ping"], pid, log, "redis-server")
    return port, log, pid, cli


def test_redis(rrc, tmp_path, netns):
    port, log, pid, cli = start_redis(rrc, tmp_path, netns)

    def load(phase: int):
        # binary RESP from the generator straight into redis-cli --pipe
        p = netns_exec(netns, ["sh", "-c", f"{sys.executable} {KVTOOL} redis-gen {phase} | "
                               f"redis-cli -p {port} --pipe"], timeout=120)
        assert "errors: 0" in p.stdout, f"redis-cli --pipe: {p.stdout}{p.stderr}"
        # plus a burst of real client traffic on keys outside the model
        netns_exec(netns, ["redis-benchmark", "-p", port, "-n", 5000, "-r", 2000, "-d", 200,
                           "-t", "set,incr,lpush,hset", "-q"], timeout=120)

    chain = Chain(rrc, tmp_path)
    load(0)
    chain.dump(pid)
    for phase in range(1, INCREMENTS + 1):
        load(phase)
        chain.dump(pid)
    kv(netns, "redis-model", port, INCREMENTS + 1)
    kv(netns, "redis-snapshot", port, tmp_path / "snap.json")
    chain.final(pid)

    rpid = rrc.restore(chain.images[-1], netns=netns)
    wait_serving(netns, [*cli, "ping"], rpid, log, "restored redis-server")
    kv(netns, "redis-model", port, INCREMENTS + 1)
    kv(netns, "redis-compare", port, tmp_path / "snap.json")
    # new clients, new writes
    assert netns_exec(netns, [*cli, "set", "after", "restore"]).stdout.strip() == "OK"
    assert netns_exec(netns, [*cli, "get", "after"]).stdout.strip() == "restore"
    b = netns_exec(netns, ["redis-benchmark", "-p", port, "-n", 2000, "-c", 10, "-t", "set,get", "-q"], timeout=120)
    assert "requests per second" in b.stdout, b.stdout + b.stderr
    assert pid_alive(rpid), f"restored redis died\n{read_text(log)}"
    print(chain.report())


def test_redis_sleep_is_not_cut_short_by_dumps(rrc, tmp_path, netns):
    """`DEBUG SLEEP 1` is a nanosleep(1 s) in redis's main thread. Each
    dump's park signal interrupts it; the kernel does not restart a
    nanosleep after a handler, and before librrc's waits.c the sleep
    returned after the first dump (0.3 s with one dump 0.3 s in). Four
    dumps fall inside it now, and it still lasts its second."""
    port, log, pid, cli = start_redis(rrc, tmp_path, netns, extra=("--enable-debug-command", "local"))
    chain = Chain(rrc, tmp_path)
    chain.dump(pid)
    sleeper = subprocess.Popen(["ip", "netns", "exec", netns, "sh", "-c",
                                f"s=$(date +%s%N); redis-cli -p {port} debug sleep 1; e=$(date +%s%N); echo $(( (e - s) / 1000000 ))"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.15)
    for _ in range(4):
        chain.dump(pid)
        time.sleep(0.1)
    out, err = sleeper.communicate(timeout=30)
    lines = out.split()
    assert lines[:1] == ["OK"], f"redis-cli: {out}{err}"
    took_ms = int(lines[-1])
    assert took_ms >= 1000, f"DEBUG SLEEP 1 returned after {took_ms} ms with dumps in it ({chain.report()})"
    assert all(d["pause_us"] > 0 for d in chain.dumps)
    assert pid_alive(pid), read_text(log)


def test_redis_upgraded_under_it(rrc, tmp_path, netns):
    """An upgrade replaces the server's binary and two of its libraries
    while it runs (a new file renamed over each path, as dpkg does: the
    running process keeps the old ones, deleted). Before, every dump from
    then on was refused and the server ran unprotected until restarted;
    now the dump that first finds them turns their mappings into anonymous
    memory and carries every page (runtime/lib/maps-deleted.c), the chain
    goes on, and the restored redis serves every key, with the new binary
    at the path as its /proc/PID/exe and no deleted file among its
    mappings."""
    root = tmp_path / "pkg"
    (root / "bin").mkdir(parents=True)
    (root / "lib").mkdir()
    binary = root / "bin" / "redis-server"
    libs = [root / "lib" / n for n in ("libjemalloc.so.2", "liblzf.so.1")]
    originals = {binary: Path(os.path.realpath(server_bin("redis-server")))}
    originals.update({lib: Path("/lib/x86_64-linux-gnu") / lib.name for lib in libs})
    for path, orig in originals.items():
        shutil.copy2(orig, path)
    log = tmp_path / "redis.log"
    port = 6379
    pid = rrc.exec([binary, "--save", "", "--appendonly", "no", "--port", port, "--bind", "127.0.0.1",
                    "--daemonize", "no", "--dir", tmp_path], netns=netns, log=log,
                   env={"LD_LIBRARY_PATH": root / "lib"})
    cli = ["redis-cli", "-p", str(port)]
    wait_serving(netns, [*cli, "ping"], pid, log, "redis-server")
    maps = Path(f"/proc/{pid}/maps").read_text()
    missing = [str(p) for p in originals if str(p) not in maps]
    assert not missing, f"redis does not map {missing}"

    def load(phase: int):
        p = netns_exec(netns, ["sh", "-c", f"{sys.executable} {KVTOOL} redis-gen {phase} | redis-cli -p {port} --pipe"],
                       timeout=120)
        assert "errors: 0" in p.stdout, f"redis-cli --pipe: {p.stdout}{p.stderr}"

    chain = Chain(rrc, tmp_path)
    load(0)
    chain.dump(pid)
    for path, orig in originals.items():  # the upgrade
        shutil.copy2(orig, path.with_name(path.name + ".new"))
        os.rename(path.with_name(path.name + ".new"), path)
    maps = Path(f"/proc/{pid}/maps").read_text()
    assert f"{binary} (deleted)" in maps and f"{libs[0]} (deleted)" in maps, maps
    for phase in (1, 2):
        load(phase)
        chain.dump(pid)
    maps = Path(f"/proc/{pid}/maps").read_text()
    assert "(deleted)" not in maps, f"deleted files still mapped after the dumps:\n{maps}"
    load(3)
    kv(netns, "redis-model", port, 4)
    kv(netns, "redis-snapshot", port, tmp_path / "snap.json")
    chain.final(pid)

    rpid = rrc.restore(chain.images[-1], netns=netns)
    wait_serving(netns, [*cli, "ping"], rpid, log, "restored redis-server")
    kv(netns, "redis-model", port, 4)
    kv(netns, "redis-compare", port, tmp_path / "snap.json")
    assert netns_exec(netns, [*cli, "set", "after", "upgrade"]).stdout.strip() == "OK"
    assert os.readlink(f"/proc/{rpid}/exe") == str(binary)
    assert "(deleted)" not in Path(f"/proc/{rpid}/maps").read_text()
    assert pid_alive(rpid), read_text(log)


# ------------------------------------------------------------------ memcached

def proc_creds(pid: int) -> dict:
    """Every thread's Uid, Gid, Groups and capability lines, and whether
    the process is dumpable (one that is not has root's /proc files; for
    a process of root's, None: its files are root's either way)."""
    out = {}
    for task in sorted(Path(f"/proc/{pid}/task").iterdir()):
        st = dict(line.split(":", 1) for line in read_text(task / "status").splitlines() if ":" in line)
        out[task.name] = tuple(" ".join(st[k].split()) for k in ("Uid", "Gid", "Groups", "CapPrm", "CapEff", "CapBnd"))
    euid = int(next(iter(out.values()))[0].split()[1])
    return {"threads": out, "dumpable": os.stat(f"/proc/{pid}/pagemap").st_uid != 0 if euid else None}


@pytest.mark.parametrize("user", ["root", "memcache"])
def test_memcached(rrc, tmp_path, netns, user):
    """memcached -t 4 through a chain of dumps and a restore. As `-u
    memcache` (Debian's own configuration) it switches users after its
    start, which leaves it not dumpable: every dump makes it dumpable for
    its duration only, and the restore gives every thread the credentials
    it had (ids, groups, capabilities) and leaves it not dumpable again."""
    port = 11211
    log = tmp_path / "memcached.log"
    pid = rrc.exec([server_bin("memcached"), "-t", 4, "-p", port, "-l", "127.0.0.1", "-U", 0, "-m", 1024,
                    "-u", user], netns=netns, log=log)
    wait_serving(netns, ["memcstat", f"--servers=127.0.0.1:{port}"], pid, log, "memcached")
    creds = proc_creds(pid)
    if user != "root":
        uid = str(pwd.getpwnam(user).pw_uid)
        assert all(c[0] == " ".join([uid] * 4) for c in creds["threads"].values()), creds
        assert not creds["dumpable"], f"memcached -u {user} is dumpable before any dump: {creds}"
    chain = Chain(rrc, tmp_path)
    kv(netns, "mc-load", port, 0)
    chain.dump(pid)
    for phase in range(1, INCREMENTS + 1):
        kv(netns, "mc-load", port, phase)
        chain.dump(pid)
    assert proc_creds(pid) == creds, "the dumps changed memcached's credentials or left it dumpable"
    kv(netns, "mc-model", port, INCREMENTS + 1)
    kv(netns, "mc-snapshot", port, tmp_path / "snap.json")
    chain.final(pid)
    shown = rrc.inspect(chain.images[-1])["images"][-1]["creds"]
    assert shown["uids"] == [int(c) for c in next(iter(creds["threads"].values()))[0].split()], shown
    assert shown["dumpable"] == (creds["dumpable"] if user != "root" else True), shown

    rpid = rrc.restore(chain.images[-1], netns=netns)
    wait_serving(netns, ["memcstat", f"--servers=127.0.0.1:{port}"], rpid, log, "restored memcached")
    restored = proc_creds(rpid)
    assert sorted(restored["threads"].values()) == sorted(creds["threads"].values()) and \
        restored["dumpable"] == creds["dumpable"], f"credentials before the dumps: {creds}\nafter the restore: {restored}"
    # the restored process goes on being checkpointed (an incremental on
    # the image it came from), and keeps its credentials through it
    chain.dump(rpid)
    after = proc_creds(rpid)
    assert sorted(after["threads"].values()) == sorted(creds["threads"].values()) and \
        after["dumpable"] == creds["dumpable"], f"a dump of the restored memcached changed its credentials: {after}"
    kv(netns, "mc-model", port, INCREMENTS + 1)
    kv(netns, "mc-compare", port, tmp_path / "snap.json")
    # new clients: the libmemcached tools store and read back a file
    f = tmp_path / "newfile"
    content = "".join(f"line {i} from a new client\n" for i in range(300))
    f.write_text(content)
    netns_exec(netns, ["memccp", f"--servers=127.0.0.1:{port}", f], cwd=tmp_path)
    got = netns_exec(netns, ["memccat", f"--servers=127.0.0.1:{port}", "newfile"], timeout=30)
    # memccat prints the value followed by a newline of its own
    assert got.stdout == content + "\n", f"memccat after restore returned {len(got.stdout)} bytes: {got.stderr}"
    kv(netns, "mc-load", port, INCREMENTS + 1)  # hundreds of writes from a new client
    kv(netns, "mc-model", port, INCREMENTS + 2)
    assert pid_alive(rpid)
    print(chain.report())


# ------------------------------------------------------------------ lighttpd

def make_files(root: Path, tag: str, n: int, max_size: int) -> dict:
    root.mkdir(parents=True, exist_ok=True)
    out = {}
    for i in range(n):
        size = (i * 7919 + len(tag) * 31) % max_size + 1
        data = hashlib.sha256(f"{tag}{i}".encode()).digest() * (size // 32 + 1)
        name = f"{tag}-{i}.bin"
        (root / name).write_bytes(data[:size])
        out[name] = hashlib.sha256(data[:size]).hexdigest()
    return out


def fetch_all(ns: str, port: int, names, dest: Path) -> dict:
    """Fetches every file in one curl run; returns name -> sha256."""
    dest.mkdir(parents=True, exist_ok=True)
    cfg = dest / "curl.cfg"
    with open(cfg, "w") as f:
        for n in names:
            f.write(f'url = "http://127.0.0.1:{port}/{n}"\noutput = "{dest / n}"\n')
    netns_exec(ns, ["curl", "-sS", "--fail", "-K", cfg], timeout=300)
    return {n: hashlib.sha256((dest / n).read_bytes()).hexdigest() for n in names}


def lighttpd_conf(conf: Path, www: Path, port: int, errorlog: Path, extra: str) -> Path:
    """A single-process lighttpd serving www on 127.0.0.1:port, with
    extra lines (a user to switch to, the stat cache)."""
    conf.write_text(f'''
server.document-root = "{www}"
server.bind = "127.0.0.1"
server.port = {port}
server.errorlog = "{errorlog}"
server.max-worker = 0
{extra}
index-file.names = ("index.html")
mimetype.assign = (".html" => "text/html", "" => "application/octet-stream")
''')
    return conf


def test_lighttpd(rrc, tmp_path, netns):
    port = 8080
    www = tmp_path / "www"
    files = make_files(www, "base", 300, 200_000)
    files.update(make_files(www, "big", 2, 20_000_000))
    (www / "index.html").write_text("<html>rrc</html>\n")
    conf = lighttpd_conf(tmp_path / "lighttpd.conf", www, port, tmp_path / "lighttpd-error.log",
                         'server.stat-cache-engine = "simple"')
    log = tmp_path / "lighttpd.log"
    pid = rrc.exec([server_bin("lighttpd"), "-D", "-f", conf], netns=netns, log=log)
    wait_serving(netns, ["curl", "-sf", "-o", "/dev/null", f"http://127.0.0.1:{port}/index.html"], pid, log,
                 "lighttpd")
    chain = Chain(rrc, tmp_path)
    got = fetch_all(netns, port, list(files), tmp_path / "fetch0")
    assert got == files, "lighttpd served different bytes before any dump"
    netns_exec(netns, ["ab", "-q", "-n", 2000, "-c", 8, f"http://127.0.0.1:{port}/base-1.bin"], timeout=120)
    chain.dump(pid)
    for phase in range(1, INCREMENTS + 1):
        new = make_files(www, f"phase{phase}", 20, 100_000)
        files.update(new)
        assert fetch_all(netns, port, list(new), tmp_path / f"fetch{phase}") == new
        netns_exec(netns, ["ab", "-q", "-n", 500, "-c", 4, f"http://127.0.0.1:{port}/phase{phase}-3.bin"], timeout=120)
        chain.dump(pid)
    chain.final(pid)

    rpid = rrc.restore(chain.images[-1], netns=netns)
    wait_serving(netns, ["curl", "-sf", "-o", "/dev/null", f"http://127.0.0.1:{port}/index.html"], rpid, log,
                 "restored lighttpd")
    got = fetch_all(netns, port, list(files), tmp_path / "fetch-restored")
    bad = [n for n in files if got.get(n) != files[n]]
    assert not bad, f"{len(bad)} files differ after restore, e.g. {bad[:5]}"
    ab = netns_exec(netns, ["ab", "-n", 1000, "-c", 8, f"http://127.0.0.1:{port}/big-0.bin"], timeout=300)
    assert re.search(r"^Complete requests:\s+1000$", ab.stdout, re.M) and \
        re.search(r"^Failed requests:\s+0$", ab.stdout, re.M), ab.stdout
    assert pid_alive(rpid), f"restored lighttpd died\n{read_text(log)}"
    print(chain.report())


def test_lighttpd_that_switches_users(rrc, tmp_path, netns):
    """lighttpd with `server.username` (Debian's configuration runs it as
    www-data): it binds as root, then switches users. Dumped in a chain,
    restored, and the restored server serves the same bytes, in every
    thread as www-data and not dumpable, as before the dumps."""
    port = 8081
    # www-data must reach the site: not under pytest's root-only tmp_path
    base = Path(tempfile.mkdtemp(prefix="rrc-www-"))
    www, logs = base / "www", base / "logs"
    www_data = pwd.getpwnam("www-data")
    try:
        os.chmod(base, 0o755)
        logs.mkdir()
        os.chown(logs, www_data.pw_uid, www_data.pw_gid)  # lighttpd opens its log as www-data
        files = make_files(www, "u", 40, 50_000)
        os.chmod(www, 0o755)
        (www / "index.html").write_text("<html>rrc</html>\n")
        for f in www.iterdir():
            os.chmod(f, 0o644)
        conf = lighttpd_conf(tmp_path / "lighttpd.conf", www, port, logs / "error.log",
                             'server.username = "www-data"\nserver.groupname = "www-data"')
        log = tmp_path / "lighttpd.log"
        pid = rrc.exec([server_bin("lighttpd"), "-D", "-f", conf], netns=netns, log=log)
        index = ["curl", "-sf", "-o", "/dev/null", f"http://127.0.0.1:{port}/index.html"]
        wait_serving(netns, index, pid, log, "lighttpd")
        creds = proc_creds(pid)
        assert {c[0] for c in creds["threads"].values()} == {" ".join([str(www_data.pw_uid)] * 4)}, creds
        assert creds["dumpable"] is False, creds
        chain = Chain(rrc, tmp_path)
        chain.dump(pid)
        assert fetch_all(netns, port, list(files), tmp_path / "fetch0") == files
        chain.dump(pid)
        assert proc_creds(pid) == creds, "the dumps changed lighttpd's credentials or left it dumpable"
        chain.final(pid)
        rpid = rrc.restore(chain.images[-1], netns=netns)
        wait_serving(netns, index, rpid, log, "restored lighttpd")
        got = fetch_all(netns, port, list(files), tmp_path / "fetch-restored")
        assert got == files, "the restored lighttpd serves other bytes"
        restored = proc_creds(rpid)
        assert sorted(restored["threads"].values()) == sorted(creds["threads"].values()) and \
            restored["dumpable"] is False, f"before: {creds}\nrestored: {restored}"
    finally:
        shutil.rmtree(base, ignore_errors=True)


# ------------------------------------------------------------------ mtkv (the project's own server)

def test_mtkv(rrc, tmp_path, netns):
    """runtime/tests/zdtm/mtkv: epoll thread + worker pool (mutex, condvar)
    + striped hash table. Every incremental dump is taken while a phase's
    requests are in flight on four connections."""
    from conftest import zdtm_bin
    import subprocess
    port = 7000
    log = tmp_path / "mtkv.log"
    pid = rrc.exec([zdtm_bin("mtkv"), port, 4], netns=netns, log=log)
    wait_serving(netns, [sys.executable, KVTOOL, "mtkv-digest", port], pid, log, "mtkv")
    chain = Chain(rrc, tmp_path)
    kv(netns, "mtkv-load", port, 0)
    chain.dump(pid)
    for phase in range(1, INCREMENTS + 1):
        load = subprocess.Popen(["ip", "netns", "exec", netns, sys.executable, KVTOOL, "mtkv-load", str(port),
                                 str(phase), "4"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            time.sleep(0.05)
            chain.dump(pid)  # while requests are being served
            out, _ = load.communicate(timeout=120)
        finally:
            if load.poll() is None:
                load.kill()
                load.wait()
        assert load.returncode == 0, f"mtkv load phase {phase} failed during a dump: {out}"
    kv(netns, "mtkv-model", port, INCREMENTS + 1)
    digest = kv(netns, "mtkv-digest", port).stdout.strip()
    chain.final(pid)

    rpid = rrc.restore(chain.images[-1], netns=netns)
    wait_serving(netns, [sys.executable, KVTOOL, "mtkv-digest", port], rpid, log, "restored mtkv")
    assert kv(netns, "mtkv-digest", port).stdout.strip() == digest, "mtkv's data differs after restore"
    kv(netns, "mtkv-model", port, INCREMENTS + 1)
    kv(netns, "mtkv-load", port, INCREMENTS + 1)  # new clients, four connections at once
    kv(netns, "mtkv-model", port, INCREMENTS + 2)
    assert pid_alive(rpid), f"restored mtkv died\n{read_text(log)}"
    print(chain.report())
