"""The agent's own doors (issue 12), without the lab: it refuses to start
without a key unless told it runs unauthenticated, with a key file others
can read, or with a CLI socket in a directory others can write to, nor with TLS
settings for etcd that cannot work; its
socket is 0600; a CLI client that is not root is refused by its
credentials (SO_PEERCRED) even when the socket's mode lets it connect;
`rrc keygen` makes private keys and never overwrites one."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import RRC_BIN, need, run, self_signed, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parent / "vectors"))
from mkwire import frame  # noqa: E402

NOBODY = 65534


def rrc(*args, check=True):
    return run([str(need(RRC_BIN)), *args], check=check, timeout=60)


def agent_argv(tmp: Path, sock: Path, *extra):
    return [str(need(RRC_BIN)), "agent", "--name", "solo", "--state-dir", str(tmp / "state"), "--log-dir", str(tmp / "logs"),
            "--socket", str(sock), "--listen", "127.0.0.1:0", "--cgroup-root", str(tmp / "cg"), *extra]


def start_refused(tmp: Path, sock: Path, *extra) -> str:
    p = subprocess.run(agent_argv(tmp, sock, *extra), capture_output=True, text=True, timeout=30)
    assert p.returncode != 0, f"the agent started: {p.stdout}{p.stderr}"
    return p.stderr


@pytest.fixture
def private_dir():
    """A directory of root's, mode 0700, below /run (every parent can be
    traversed by other users, as the test of SO_PEERCRED needs)."""
    d = Path(f"/run/rrc-test-agent-{os.getpid()}")
    subprocess.run(["rm", "-rf", str(d)], check=True)
    d.mkdir(mode=0o700)
    d.chmod(0o700)
    yield d
    subprocess.run(["rm", "-rf", str(d)], check=True)


@pytest.fixture
def key(tmp_path):
    k = tmp_path / "agent.key"
    out = rrc("keygen", str(k)).stdout
    assert "fingerprint" in out
    return k


def test_keygen_makes_a_private_key_and_never_overwrites(tmp_path):
    k = tmp_path / "k"
    rrc("keygen", str(k))
    assert k.stat().st_mode & 0o777 == 0o600
    text = k.read_text()
    assert len(text.strip()) == 64 and all(c in "0123456789abcdef" for c in text.strip())
    p = rrc("keygen", str(k), check=False)
    assert p.returncode != 0 and "already exists" in p.stderr
    assert k.read_text() == text


def test_no_key_no_agent(tmp_path, private_dir):
    err = start_refused(tmp_path, private_dir / "a.sock")
    assert "--key-file" in err and "--insecure-no-auth" in err, err


def test_a_key_others_can_read_is_refused(tmp_path, private_dir, key):
    key.chmod(0o644)
    err = start_refused(tmp_path, private_dir / "a.sock", "--key-file", str(key))
    assert "chmod 600" in err and "0644" in err, err
    bad = tmp_path / "bad.key"
    bad.write_text("not a key\n")
    bad.chmod(0o600)
    err = start_refused(tmp_path, private_dir / "a.sock", "--key-file", str(bad))
    assert "does not hold a key" in err, err


def test_etcd_tls_settings_that_cannot_work_are_refused(tmp_path, private_dir, key):
    """TLS to etcd (issue 15): all of CA, certificate and key or none; an
    https endpoint without them; a client key others can read; a CA file
    with no certificate in it. Each refused at start, naming the cause."""
    crt, ckey = self_signed(tmp_path, "client")
    sock = private_dir / "a.sock"
    auth = ("--key-file", str(key))
    err = start_refused(tmp_path, sock, *auth, "--etcd", "https://127.0.0.1:1")
    assert "--etcd-cacert" in err, err
    err = start_refused(tmp_path, sock, *auth, "--etcd", "127.0.0.1:1", "--etcd-cacert", str(crt))
    assert "--etcd-cert" in err and "--etcd-key" in err, err
    tls = ("--etcd-cacert", str(crt), "--etcd-cert", str(crt), "--etcd-key", str(ckey))
    err = start_refused(tmp_path, sock, *auth, "--etcd", "http://127.0.0.1:1", *tls)
    assert "plain http" in err, err
    ckey.chmod(0o644)
    err = start_refused(tmp_path, sock, *auth, "--etcd", "127.0.0.1:1", *tls)
    assert "--etcd-key" in err and "chmod 600" in err, err
    ckey.chmod(0o600)
    empty = tmp_path / "empty.pem"
    empty.write_text("nothing here\n")
    err = start_refused(tmp_path, sock, *auth, "--etcd", "127.0.0.1:1", "--etcd-cacert", str(empty), "--etcd-cert", str(crt), "--etcd-key", str(ckey))
    assert str(empty) in err and "no PEM certificate" in err, err


def test_a_socket_directory_others_can_write_is_refused(tmp_path, key):
    d = tmp_path / "open"
    d.mkdir()
    d.chmod(0o1777)
    err = start_refused(tmp_path, d / "a.sock", "--key-file", str(key))
    assert "can be written by group or others" in err, err
    assert not (d / "a.sock").exists()


def request(sock: Path, op: dict, as_uid=None):
    """One Request frame on the CLI socket, as root or as another user."""
    code = (
        "import os, socket, struct, sys, json\n"
        f"uid = {as_uid!r}\n"
        "if uid is not None:\n"
        "    os.setgroups([]); os.setgid(uid); os.setuid(uid)\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        f"s.connect({str(sock)!r})\n"
        # refused at accept, the agent answers and closes at once: the
        # request may meet a closed socket, the answer is still readable
        "try:\n"
        f"    s.sendall(bytes.fromhex({frame(1, json.dumps(op).encode()).hex()!r}))\n"
        "except (BrokenPipeError, ConnectionResetError):\n"
        "    pass\n"
        "h = b''\n"
        "while len(h) < 24:\n"
        "    b = s.recv(24 - len(h))\n"
        "    if not b: sys.exit('closed')\n"
        "    h += b\n"
        "n = struct.unpack_from('<I', h, 8)[0]\n"
        "p = b''\n"
        "while len(p) < n:\n"
        "    p += s.recv(n - len(p))\n"
        "print(p.decode())\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_the_cli_socket_is_roots_alone(tmp_path, private_dir, key):
    sock = private_dir / "agent.sock"
    logf = open(tmp_path / "agent.log", "w")
    agent = subprocess.Popen(agent_argv(tmp_path, sock, "--key-file", str(key)), stdout=logf, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: sock.exists(), 10, "the agent's socket")
        assert sock.stat().st_mode & 0o777 == 0o600
        r = request(sock, {"op": "status", "name": None})
        assert r["ok"] and r["data"]["security"]["authentication"] == "hmac-sha256", r
        assert r["data"]["security"]["key_file"] == str(key)
        # Loosen the socket's mode: a user other than root now reaches it,
        # and is refused by its credentials.
        sock.chmod(0o666)
        private_dir.chmod(0o755)
        r = request(sock, {"op": "stop", "name": "x"}, as_uid=NOBODY)
        assert not r["ok"] and "serves root only" in r["error"] and str(NOBODY) in r["error"], r
        r = request(sock, {"op": "status", "name": None})
        sec = r["data"]["security"]
        assert sec["rejected"] == {"cli_peer_not_root": 1}, sec
        assert sec["recent"][-1]["from"] == f"uid {NOBODY}"
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=30)
        logf.close()
    assert not sock.exists(), "the agent left its socket"


def test_an_unauthenticated_agent_says_so(tmp_path, private_dir):
    sock = private_dir / "agent.sock"
    agent = subprocess.Popen(agent_argv(tmp_path, sock, "--insecure-no-auth"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: sock.exists(), 10, "the agent's socket")
        st = json.loads(rrc("status", "--agent", str(sock), "--json", check=False).stdout or "{}")
        # no services: `rrc status` still prints the agents
        sec = st["agents"][0]["security"]
        assert sec["authentication"] == "none" and "UNAUTHENTICATED" in sec["warning"], sec
        text = rrc("status", "--agent", str(sock)).stdout
        assert "UNAUTHENTICATED: started with --insecure-no-auth; any host that reaches 127.0.0.1:" in text, text
    finally:
        agent.send_signal(signal.SIGTERM)
        _, err = agent.communicate(timeout=30)
    assert "WITHOUT peer authentication" in err, err
