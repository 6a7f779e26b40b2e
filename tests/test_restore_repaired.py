"""Restoring with established TCP connections handed in, rebuilt with
TCP_REPAIR (issue 4 §2): `rrc restore --repaired-fd N=M` -> crates/rrc-launch
-> rrc-restore --repaired-fds 4 (runtime/restore/sk-repaired.c).

The server is mtkv (runtime/tests/zdtm/mtkv.c: epoll thread + workers). A
client in the test's network namespace holds a connection to it. The test
takes the server's end of that connection out of the running server
(pidfd_getfd), freezes it in repair mode (nothing more goes out of it, and
closing it later sends neither FIN nor RST), reads its sequence numbers,
window, options and timestamp, kills the server, and rebuilds the socket
from those values with TCP_REPAIR, as the backup does on failover. After the
restore the restored server must answer on that connection (its fd number
in the process is the image's) and the client must see the replies: the
same connection, not a new one. Then the refusals: a socket whose addresses
are not the record's, and sockets for fd numbers that are not connections.
"""
import ctypes
import json
import os
import socket
import struct
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import CMD_TIMEOUT, last_line_int, pid_alive, read_text, wait_until, zdtm_bin
from test_servers import KVTOOL, wait_serving

PORT = 7000
OTHER_PORT = 7100
REGISTRY = Path("/run/rrc/containers")

# linux/tcp.h
TCP_REPAIR = 19
TCP_REPAIR_QUEUE = 20
TCP_QUEUE_SEQ = 21
TCP_REPAIR_OPTIONS = 22
TCP_TIMESTAMP = 24
TCP_REPAIR_WINDOW = 29
TCP_RECV_QUEUE, TCP_SEND_QUEUE = 1, 2
TCPOPT_MAXSEG, TCPOPT_WINDOW, TCPOPT_SACK_PERM, TCPOPT_TIMESTAMP = 2, 3, 4, 8
TCPI_OPT_TIMESTAMPS, TCPI_OPT_SACK, TCPI_OPT_WSCALE = 1, 2, 4
SYS_PIDFD_GETFD = 438
CLONE_NEWNET = 0x40000000

libc = ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str):
    if rc < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")
    return rc


@contextmanager
def in_netns(name: str):
    """Runs the body in /run/netns/NAME (this thread only); sockets made
    there stay in that namespace."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        _check(libc.setns(target, CLONE_NEWNET), f"setns {name}")
        try:
            yield
        finally:
            _check(libc.setns(own, CLONE_NEWNET), "setns back")
    finally:
        os.close(own)
        os.close(target)


KEPT_OPTIONS = ((socket.IPPROTO_TCP, socket.TCP_NODELAY, 1), (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1),
                (socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 42), (socket.SOL_SOCKET, socket.SO_PRIORITY, 3))


def steal_fd(pid: int, fd: int) -> int:
    """A duplicate of fd `fd` of process `pid` (pidfd_getfd)."""
    pidfd = os.pidfd_open(pid)
    try:
        return _check(libc.syscall(SYS_PIDFD_GETFD, pidfd, fd, 0), f"pidfd_getfd({pid}, {fd})")
    finally:
        os.close(pidfd)


def server_sockets(pid: int) -> dict[int, socket.socket]:
    """Every socket of the process by fd number, duplicated here."""
    out = {}
    for name in os.listdir(f"/proc/{pid}/fd"):
        fd = int(name)
        try:
            if not os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                continue
        except FileNotFoundError:
            continue
        out[fd] = socket.socket(fileno=steal_fd(pid, fd))
    return out


def armed_in_epoll(pid: int, conn_fd: int) -> bool:
    """mtkv re-arms a connection (EPOLLONESHOT) after serving it; the
    image must hold it armed, or the restored server never reads it."""
    for name in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            text = Path(f"/proc/{pid}/fdinfo/{name}").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            w = line.split()
            if len(w) >= 4 and w[0] == "tfd:" and int(w[1]) == conn_fd and w[2] == "events:":
                return int(w[3], 16) & 0x1 != 0  # EPOLLIN
    return False


def freeze(s: socket.socket) -> dict:
    """Puts an established socket in repair mode and reads what is needed
    to rebuild it (CRIU's dump_tcp_conn_state does the same)."""
    s.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR, 1)
    st = {"local": s.getsockname(), "peer": s.getpeername()}
    for q, key in ((TCP_SEND_QUEUE, "snd_seq"), (TCP_RECV_QUEUE, "rcv_seq")):
        s.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR_QUEUE, q)
        st[key] = s.getsockopt(socket.IPPROTO_TCP, TCP_QUEUE_SEQ) & 0xffffffff
    info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    st["options"], wscale = info[5], info[6]
    st["snd_wscale"], st["rcv_wscale"] = wscale & 0xf, wscale >> 4
    st["mss"] = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)  # mss_clamp in repair mode
    st["window"] = s.getsockopt(socket.IPPROTO_TCP, TCP_REPAIR_WINDOW, 20)
    st["ts"] = s.getsockopt(socket.IPPROTO_TCP, TCP_TIMESTAMP) & 0xffffffff
    return st


def rebuild(st: dict, leave_repair: bool) -> socket.socket:
    """A socket continuing the frozen connection (CRIU's restore_tcp_conn_state)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR, 1)
    for q, key in ((TCP_SEND_QUEUE, "snd_seq"), (TCP_RECV_QUEUE, "rcv_seq")):
        s.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR_QUEUE, q)
        s.setsockopt(socket.IPPROTO_TCP, TCP_QUEUE_SEQ, struct.pack("I", st[key]))
    # the peer checks our timestamps against the last it saw (PAWS)
    s.setsockopt(socket.IPPROTO_TCP, TCP_TIMESTAMP, struct.pack("I", st["ts"]))
    s.bind(st["local"])
    s.connect(st["peer"])
    opts = [(TCPOPT_MAXSEG, st["mss"])]
    if st["options"] & TCPI_OPT_WSCALE:
        opts.append((TCPOPT_WINDOW, st["snd_wscale"] | st["rcv_wscale"] << 16))
    if st["options"] & TCPI_OPT_SACK:
        opts.append((TCPOPT_SACK_PERM, 0))
    if st["options"] & TCPI_OPT_TIMESTAMPS:
        opts.append((TCPOPT_TIMESTAMP, 0))
    s.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR_OPTIONS, b"".join(struct.pack("II", c, v) for c, v in opts))
    s.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR_WINDOW, st["window"])
    if leave_repair:
        s.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR, 0)
    return s


def request(c: socket.socket, line: str) -> str:
    c.sendall(line.encode() + b"\n")
    buf = b""
    while not buf.endswith(b"\n"):
        b = c.recv(4096)
        assert b, f"connection closed while waiting for the reply to {line!r} (got {buf!r})"
        buf += b
    return buf.decode().strip()


class Served:
    """mtkv in the test's netns with one client connection that has been
    used, dumped with the server still running."""

    def __init__(self, rrc, tmp_path: Path, netns: str):
        self.rrc, self.netns = rrc, netns
        self.log = tmp_path / "mtkv.log"
        self.pid = rrc.exec([zdtm_bin("mtkv"), PORT, 2], netns=netns, log=self.log)
        wait_serving(netns, [sys.executable, KVTOOL, "mtkv-digest", PORT], self.pid, self.log, "mtkv")
        with in_netns(netns):
            self.client = socket.create_connection(("127.0.0.1", PORT), timeout=10)
        assert request(self.client, "SET before dump") == "OK"
        socks = server_sockets(self.pid)
        me = self.client.getsockname()
        conns = [fd for fd, s in socks.items() if s.type == socket.SOCK_STREAM and self._peer(s) == me]
        assert len(conns) == 1, f"mtkv's end of the connection not found among its sockets {sorted(socks)}"
        self.conn_fd = conns[0]
        self.listen_fd = next(fd for fd, s in socks.items()
                              if s.family == socket.AF_INET and s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN))
        self.server_end = socks.pop(self.conn_fd)
        for s in socks.values():
            s.close()
        # options on mtkv's end (the same socket): the image carries them,
        # the restorer sets them on the socket rebuilt for it
        for level, name, value in KEPT_OPTIONS:
            self.server_end.setsockopt(level, name, value)
        wait_until(lambda: armed_in_epoll(self.pid, self.conn_fd), 10, "mtkv to re-arm the connection")
        self.images = tmp_path / "img"
        rrc.dump(self.pid, self.images, leave_running=True)

    @staticmethod
    def _peer(s: socket.socket):
        try:
            return s.getpeername()
        except OSError:
            return None

    def kill(self):
        self.rrc.kill(self.pid)
        wait_until(lambda: not pid_alive(self.pid), 10, f"mtkv (pid {self.pid}) to end")

    def restore(self, handed: list[tuple[int, socket.socket]], check=True):
        """rrc restore with the sockets handed in; returns (pid or None, output)."""
        args = [self.rrc.bin, "restore", "--images", self.images, "--netns", self.netns, "--log", self.log]
        for target, s in handed:
            args += ["--repaired-fd", f"{target}={s.fileno()}"]
        p = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=CMD_TIMEOUT,
                           stdin=subprocess.DEVNULL, pass_fds=[s.fileno() for _, s in handed])
        out = p.stdout + p.stderr
        if p.returncode != 0:
            assert not check, f"rrc restore failed:\n{out}\n{read_text(self.log)}"
            return None, out
        pid = last_line_int(p.stdout, "rrc restore")
        self.rrc.pids.append(pid)
        assert check, f"rrc restore succeeded but must fail:\n{out}"
        return pid, out

    @contextmanager
    def unrelated_connection(self):
        """Kills the server; yields a connection of the netns that is not
        the image's."""
        self.kill()
        with in_netns(self.netns):
            lsn = socket.create_server(("127.0.0.1", OTHER_PORT))
            conn = socket.create_connection(("127.0.0.1", OTHER_PORT), timeout=10)
        with lsn, conn:
            yield conn

    def restored_containers(self) -> list:
        """Registry entries of containers restored from our images."""
        out = []
        for f in REGISTRY.glob("*.json"):
            try:
                rec = json.loads(f.read_text())
            except (OSError, ValueError):
                continue
            if rec.get("restored_from") == str(self.images.resolve()):
                out.append(rec)
        return out

    def close(self):
        for s in (self.client, self.server_end):
            try:
                s.close()
            except OSError:
                pass


@pytest.fixture
def served(rrc, tmp_path, netns):
    s = Served(rrc, tmp_path, netns)
    try:
        yield s
    finally:
        s.close()


@pytest.mark.parametrize("leave_repair", [True, False], ids=["out-of-repair-mode", "in-repair-mode"])
def test_connection_continues_after_restore(served, leave_repair):
    """The restored mtkv serves the client's connection at its old fd
    number; its listener (same port) accepts new clients too."""
    st = freeze(served.server_end)  # from here the old end sends nothing
    served.kill()
    served.server_end.close()       # in repair mode: no FIN, no RST
    with in_netns(served.netns):
        fresh = rebuild(st, leave_repair)
    try:
        rpid, _ = served.restore([(served.conn_fd, fresh)])
    finally:
        fresh.close()  # the restored process holds its own descriptor
    log = read_text(served.log)
    assert f"fd {served.conn_fd}: TCP connection 127.0.0.1:{PORT} <-> 127.0.0.1:{st['peer'][1]}: " \
           f"repaired socket placed" in log, log
    # the same connection, both directions, through the restored server
    assert request(served.client, "GET before") == "VALUE dump", read_text(served.log)
    assert request(served.client, "SET after restore") == "OK"
    assert request(served.client, "GET after") == "VALUE restore"
    assert served.restored_containers(), "the restored container is not registered"
    # the restored process has the connection at the image's number, with
    # the options it had (the rebuilt socket had none of them)
    assert os.readlink(f"/proc/{rpid}/fd/{served.conn_fd}").startswith("socket:")
    with socket.socket(fileno=steal_fd(rpid, served.conn_fd)) as s:
        got = [(lvl, name, s.getsockopt(lvl, name)) for lvl, name, _ in KEPT_OPTIONS]
    assert got == list(KEPT_OPTIONS), f"options of the repaired connection after the restore: {got}"
    # and its listener shares the port with it
    with in_netns(served.netns):
        other = socket.create_connection(("127.0.0.1", PORT), timeout=10)
    with other:
        assert request(other, "GET after") == "VALUE restore"
    assert pid_alive(rpid)


def test_address_mismatch_is_refused(served):
    """A socket whose addresses are not the record's: the restore fails
    naming the fd and both address pairs, and leaves nothing running."""
    with served.unrelated_connection() as wrong:
        _, out = served.restore([(served.conn_fd, wrong)], check=False)
        mine = wrong.getsockname()
    peer = served.client.getsockname()
    want = (f"fd {served.conn_fd}: repaired socket is 127.0.0.1:{mine[1]} <-> 127.0.0.1:{OTHER_PORT}, "
            f"the image has 127.0.0.1:{PORT} <-> 127.0.0.1:{peer[1]}")
    assert want in out, out
    assert "code 3 FD" in out and "removed" in out, out
    assert not served.restored_containers(), out


def test_socket_for_a_non_connection_is_refused(served):
    """Sockets for the listener's fd number, for a number the image does
    not have, and one that is not TCP are refused before anything is
    placed."""
    with served.unrelated_connection() as conn:
        _, out = served.restore([(served.listen_fd, conn)], check=False)
        assert (f"repaired socket for fd {served.listen_fd}: the image's fd {served.listen_fd} is "
                f"INET_LISTEN (TCP 127.0.0.1:{PORT}), not a TCP connection") in out, out
        _, out = served.restore([(77, conn)], check=False)
        assert "repaired socket for fd 77: the image has no fd 77" in out, out
    a, b = socket.socketpair()
    with a, b:
        _, out = served.restore([(served.conn_fd, a)], check=False)
        assert f"repaired socket for fd {served.conn_fd}: not a TCP socket" in out, out
    assert not served.restored_containers(), out
