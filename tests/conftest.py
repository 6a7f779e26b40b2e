"""Shared fixtures for rrc's end-to-end tests (run as root by `make test`).

Everything here drives the real binaries: target/release/rrc, librrc.so and
rrc-restore from runtime/build, the zdtm programs from runtime/build/zdtm.
A missing binary is a test failure (never a skip): run `make` first.

Cleanup is layered so that a crashed or failing test leaves nothing behind:
  * the `rrc` fixture kills (`rrc kill --pid`) every container its test
    started or restored;
  * the `netns` fixture deletes the network namespace it made;
  * at session end, cgroups under /sys/fs/cgroup/unified/rrc/ that appeared
    during the session and are empty, and this session's /run/netns/rrc-t-<pid>-*,
    are removed (namespaces of dead sessions at the start).
Every wait is bounded.
"""
import contextlib
import json
import os
import secrets
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# $RRC_TEST_BIN: another build of rrc (e.g. a private CARGO_TARGET_DIR).
RRC_BIN = Path(os.environ["RRC_TEST_BIN"]) if os.environ.get("RRC_TEST_BIN") else REPO / "target" / "release" / "rrc"
RUNTIME_BUILD = REPO / "runtime" / "build"
ZDTM_DIR = RUNTIME_BUILD / "zdtm"
TOOLS = Path(__file__).resolve().parent / "tools"
CGROUP_ROOT = Path("/sys/fs/cgroup/unified/rrc")
NETNS_DIR = Path("/run/netns")
NETNS_BASE = "rrc-t-"
# This session's namespaces carry its pid, so that a sweep never touches the
# namespaces of another pytest session running at the same time.
NETNS_PREFIX = f"{NETNS_BASE}{os.getpid():x}-"

# Default bounds (seconds).
CMD_TIMEOUT = 180
READY_TIMEOUT = 30
RESULT_TIMEOUT = 90


def need(path: Path) -> Path:
    """A binary the test needs; its absence is a failure, not a skip."""
    if not path.exists():
        pytest.fail(f"{path} does not exist: build it first (`make` at the top of the repository)")
    return path


def zdtm_bin(name: str) -> Path:
    return need(ZDTM_DIR / name)


# ---------------------------------------------------------------- processes

def pid_alive(pid: int) -> bool:
    """True while pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def wait_until(pred, timeout: float, what: str, interval: float = 0.01, diag=None):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            extra = f"\n{diag()}" if diag else ""
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{extra}")
        time.sleep(interval)


def read_text(path: Path, limit: int = 4000) -> str:
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        return f"<{path}: {e}>"
    text = data.decode(errors="replace")
    return text if len(text) <= limit else "..." + text[-limit:]


def wait_for_file(path: Path, timeout: float = READY_TIMEOUT, pid: int | None = None, log: Path | None = None):
    """Waits for path to exist; fails early if pid dies, showing the log."""
    path = Path(path)

    def diag():
        parts = []
        if pid is not None:
            parts.append(f"pid {pid} alive: {pid_alive(pid)}")
        if log is not None:
            parts.append(f"log {log}:\n{read_text(log)}")
        return "\n".join(parts)

    deadline = time.monotonic() + timeout
    while not path.exists():
        if pid is not None and not pid_alive(pid):
            # the file may have been written just before the exit
            if path.exists():
                break
            raise AssertionError(f"process {pid} died before {path} appeared\n{diag()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {path}\n{diag()}")
        time.sleep(0.005)
    return path


def run(cmd, timeout: float = CMD_TIMEOUT, check: bool = True, env=None, input=None, cwd=None):
    """Runs a command, capturing text output; failures show both streams."""
    cmd = [str(c) for c in cmd]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                           input=input, cwd=cwd, stdin=None if input is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"timed out after {timeout} s: {shlex.join(cmd)}\n"
                             f"stdout: {e.stdout}\nstderr: {e.stderr}") from None
    if check and p.returncode != 0:
        raise AssertionError(f"exit status {p.returncode}: {shlex.join(cmd)}\n"
                             f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


def self_signed(tmp: Path, name: str, *addext: str) -> tuple[Path, Path]:
    """A self-signed P-256 certificate with CN `name` and its key (0600)
    in tmp, made by openssl (`-addext` each of addext): a CA of its own,
    as a forged peer would have."""
    crt, key = tmp / f"{name}.crt", tmp / f"{name}.key"
    ext = [a for x in addext for a in ("-addext", x)]
    subprocess.run(["openssl", "req", "-x509", "-new", "-nodes", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-days", "1", "-subj", f"/CN={name}", *ext, "-keyout", str(key), "-out", str(crt)],
                   check=True, capture_output=True, timeout=30)
    key.chmod(0o600)
    return crt, key


def last_line_int(text: str, what: str) -> int:
    lines = [l for l in text.strip().splitlines() if l.strip()]
    assert lines, f"{what}: no output"
    try:
        return int(lines[-1].strip())
    except ValueError:
        raise AssertionError(f"{what}: last line of stdout is not a pid: {lines[-1]!r}") from None


# ---------------------------------------------------------------- rrc

class Rrc:
    """Drives target/release/rrc; remembers every container to kill it."""

    def __init__(self):
        self.bin = need(RRC_BIN)
        need(RUNTIME_BUILD / "librrc.so")
        need(RUNTIME_BUILD / "rrc-restore")
        self.pids: list[int] = []

    def run(self, *args, check=True, timeout=CMD_TIMEOUT, env=None):
        return run([self.bin, *args], timeout=timeout, check=check, env=env)

    def exec(self, cmd, netns: str | None = None, log: Path | None = None, env: dict | None = None,
             extra=()) -> int:
        args = ["exec", *[str(a) for a in extra]]
        if netns:
            args += ["--netns", netns]
        if log:
            args += ["--log", str(log)]
        full_env = dict(os.environ)
        full_env.update({k: str(v) for k, v in (env or {}).items()})
        p = self.run(*args, "--", *[str(c) for c in cmd], env=full_env)
        pid = last_line_int(p.stdout, "rrc exec")
        self.pids.append(pid)
        assert pid_alive(pid), f"rrc exec printed pid {pid}, which is not running\n{read_text(log) if log else ''}"
        return pid

    def dump(self, pid: int, images: Path, parent: Path | None = None, leave_running=False,
             snapshot: str | None = None, tcp_table=False) -> dict:
        args = ["dump", "--pid", str(pid), "--images", str(images), "--json"]
        if snapshot:
            args += ["--snapshot", snapshot]
        if tcp_table:
            args.append("--tcp-table")
        if parent:
            args += ["--parent", str(parent)]
        if leave_running:
            args.append("--leave-running")
        p = self.run(*args)
        try:
            out = json.loads(p.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise AssertionError(f"rrc dump --json printed no JSON object on its last line:\n{p.stdout}\n{p.stderr}")
        for key in ("pid", "image_id", "parent_id", "sequence", "full", "pause_us", "total_us", "pages", "bytes"):
            assert key in out, f"rrc dump --json lacks '{key}': {out}"
        if snapshot:
            assert out.get("snapshot") == snapshot, f"asked for a {snapshot} snapshot, got {out.get('snapshot')}"
        return out

    def restore(self, images: Path, netns: str | None = None) -> int:
        args = ["restore", "--images", str(images)]
        if netns:
            args += ["--netns", netns]
        p = self.run(*args)
        pid = last_line_int(p.stdout, "rrc restore")
        self.pids.append(pid)
        return pid

    def restore_with_data(self, images: Path, host_dir: Path, path: str, netns: str) -> int:
        """Restores with HOST_DIR bind-mounted at PATH (the data directory)."""
        p = self.run("restore", "--images", str(images), "--netns", netns, "--data-dir", f"{host_dir}:{path}")
        pid = last_line_int(p.stdout, "rrc restore")
        self.pids.append(pid)
        return pid

    def inspect(self, images: Path) -> dict:
        p = self.run("inspect", "--images", str(images), "--json")
        try:
            return json.loads(p.stdout)
        except ValueError:
            raise AssertionError(f"rrc inspect --json did not print JSON:\n{p.stdout}") from None

    def fails(self, *args, timeout=CMD_TIMEOUT, env=None) -> str:
        """Runs rrc expecting failure; returns stderr (+stdout) for checks."""
        p = self.run(*args, check=False, timeout=timeout, env=env)
        assert p.returncode != 0, (f"rrc {' '.join(map(str, args))} succeeded but must fail\n"
                                   f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}")
        return p.stderr + p.stdout

    def kill(self, pid: int, check=True):
        self.run("kill", "--pid", str(pid), check=check, timeout=60)

    def cleanup(self):
        # also for containers whose program already exited by itself: `rrc
        # kill` then removes what is left of them (cgroup, registry entry)
        for pid in self.pids:
            self.run("kill", "--pid", str(pid), check=False, timeout=60)
        for pid in self.pids:
            try:
                wait_until(lambda: not pid_alive(pid), 10, f"container pid {pid} to end")
            except AssertionError:
                try:  # last resort: the pid itself (its cgroup is swept at session end)
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


@pytest.fixture
def rrc():
    r = Rrc()
    try:
        yield r
    finally:
        r.cleanup()


# ---------------------------------------------------------------- netns

def netns_exec(ns: str, cmd, **kw):
    return run(["ip", "netns", "exec", ns, *[str(c) for c in cmd]], **kw)


def delete_netns(name: str):
    subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)


@contextlib.contextmanager
def fresh_netns():
    """A fresh network namespace rrc-t-<random> with lo up; deleted afterwards."""
    name = NETNS_PREFIX + secrets.token_hex(4)
    run(["ip", "netns", "add", name], timeout=30)
    try:
        run(["ip", "-n", name, "link", "set", "lo", "up"], timeout=30)
        yield name
    finally:
        delete_netns(name)


@pytest.fixture
def netns():
    with fresh_netns() as name:
        yield name


@pytest.fixture
def other_netns():
    """A second one (a restore where the first still holds the dead
    process's ports in FIN_WAIT)."""
    with fresh_netns() as name:
        yield name


# ---------------------------------------------------------------- session sweep

def _cgroups() -> set[str]:
    try:
        return {p.name for p in CGROUP_ROOT.iterdir() if p.is_dir()}
    except FileNotFoundError:
        return set()


def cgroup_empty(d: Path) -> bool:
    try:
        return not (d / "cgroup.procs").read_text().strip() and all(
            cgroup_empty(p) for p in d.iterdir() if p.is_dir())
    except OSError:
        return True


def remove_cgroup(d: Path):
    """cgroup.kill, wait until empty (bounded), rmdir depth-first."""
    for sub in [p for p in d.iterdir() if p.is_dir()]:
        remove_cgroup(sub)
    try:
        (d / "cgroup.kill").write_text("1")
    except OSError:
        pass
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if not (d / "cgroup.procs").read_text().strip():
                break
        except OSError:
            break
        time.sleep(0.02)
    for _ in range(100):
        try:
            d.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.05)
    print(f"conftest: could not remove cgroup {d}", file=sys.stderr)


def rmdir_cgroup(d: Path):
    """Removes an empty cgroup tree, depth-first; a part that is not empty
    (any more) stays."""
    try:
        for sub in [p for p in d.iterdir() if p.is_dir()]:
            rmdir_cgroup(sub)
        d.rmdir()
    except OSError:
        pass


def leftover_netns(own_only: bool) -> list[str]:
    """Test namespaces of this session (own_only), or of sessions that are
    no longer running (names rrc-t-<pid hex>-..., or older names)."""
    try:
        names = sorted(p.name for p in NETNS_DIR.iterdir() if p.name.startswith(NETNS_BASE))
    except FileNotFoundError:
        return []
    if own_only:
        return [n for n in names if n.startswith(NETNS_PREFIX)]

    def session_alive(name: str) -> bool:
        tag = name[len(NETNS_BASE):].split("-", 1)[0]
        try:
            return len(name[len(NETNS_BASE):].split("-")) > 1 and pid_alive(int(tag, 16))
        except ValueError:
            return False
    return [n for n in names if not session_alive(n)]


@pytest.fixture(scope="session", autouse=True)
def session_sweep():
    if os.geteuid() != 0:
        pytest.exit("rrc's tests need root (namespaces, cgroups): run `make test` as root", returncode=1)
    for ns in leftover_netns(own_only=False):  # left by an earlier crashed run
        delete_netns(ns)
    before = _cgroups()
    yield
    # Every test kills the containers it started (the `rrc` fixture); what
    # remains here are empty cgroups of containers that ended by themselves.
    # A cgroup that has processes may belong to another pytest session or a
    # benchmark running concurrently: it is left alone, and an empty one is
    # only removed (rmdir), never killed: a process that joined it since it
    # was seen empty (another run's container starting) makes the removal
    # fail instead of dying (a benchmark's restore once did).
    for name in sorted(_cgroups() - before):
        if cgroup_empty(CGROUP_ROOT / name):
            rmdir_cgroup(CGROUP_ROOT / name)
    for ns in leftover_netns(own_only=True):
        delete_netns(ns)


def new_cgroups_since(before: set[str]) -> set[str]:
    return _cgroups() - before


def snapshot_cgroups() -> set[str]:
    return _cgroups()
