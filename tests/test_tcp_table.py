"""The TCP stream table (image section TCP, runtime/lib/sk-diag.c).

1. runtime/build/sk_diag_check: librrc's own table reader against byte
   counts the program produces itself, in every TCP state it can make
   (acked, unacked, unsent, FIN queued/acked, not accepted, orphaned,
   SYN_SENT, TIME_WAIT; IPv4 and IPv6). Its output is the evidence for the
   formula stated in sk-diag.c.
2. A real server (redis) under `rrc exec` with a client that pipelines big
   replies and stops reading: the table of a full and of an incremental
   dump (`rrc inspect --json`) must say that the server wrote exactly what
   the client has read plus what is still in flight (the client's receive
   queue, measured by the client with SIOCINQ, plus the server's unacked
   and unsent bytes), and read exactly what the client sent.
"""
import json
import subprocess
import sys
import time

from conftest import RUNTIME_BUILD, need, netns_exec, run, wait_for_file, wait_until, zdtm_bin
from test_servers import start_redis

VALUE = 1 << 20           # bytes of the big value
GETS = 16                 # pipelined GETs of it: far more than the socket buffers hold
REPLY = len(f"${VALUE}\r\n") + VALUE + 2


def test_sk_diag_formula():
    prog = need(RUNTIME_BUILD / "sk_diag_check")
    p = run([prog], timeout=120, check=False)
    assert p.returncode == 0, f"sk_diag_check failed (exit {p.returncode}):\n{p.stdout}\n{p.stderr}"
    assert "0 of " in p.stdout.splitlines()[-1], p.stdout
    cases = [l for l in p.stdout.splitlines() if l.startswith("CASE ")]
    assert len(cases) >= 50 and all(l.endswith("ok") for l in cases), p.stdout


# The client: one connection, driven line by line over stdin/stdout.
CLIENT = r"""
import fcntl, socket, struct, sys, termios
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
sent = read = 0
def send(b):
    global sent
    s.sendall(b); sent += len(b)
def cmd(*a):
    return b"*%d\r\n" % len(a) + b"".join(b"$%d\r\n%s\r\n" % (len(x), x) for x in a)
for line in sys.stdin:
    w = line.split()
    if w[0] == "set":
        send(cmd(b"SET", b"big", b"x" * int(w[1])))
        r = s.recv(5)
        assert r == b"+OK\r\n", r
        read += len(r)
    elif w[0] == "gets":
        send(cmd(b"GET", b"big") * int(w[1]))
    elif w[0] == "read":
        n = int(w[1])
        while n:
            b = s.recv(min(n, 65536))
            assert b
            n -= len(b); read += len(b)
    elif w[0] == "state":
        inq = struct.unpack("i", fcntl.ioctl(s.fileno(), termios.FIONREAD, b"\0" * 4))[0]
        print("%d %d %d %d" % (sent, read, inq, s.getsockname()[1]), flush=True)
    elif w[0] == "exit":
        break
"""


class Client:
    def __init__(self, netns, port):
        self.p = subprocess.Popen(["ip", "netns", "exec", netns, sys.executable, "-u", "-c", CLIENT, str(port)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def do(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()

    def state(self):
        self.do("state")
        line = self.p.stdout.readline()
        assert line, "the client died"
        sent, read, inq, port = map(int, line.split())
        return {"sent": sent, "read": read, "inq": inq, "port": port}

    def settled(self):
        """Waits until nothing moves any more (the client's window is closed)."""
        last = [None]

        def same():
            time.sleep(0.1)
            s = self.state()
            ok = s == last[0]
            last[0] = s
            return ok
        return wait_until(same, 30, "the connection to settle") and last[0]

    def close(self):
        if self.p.poll() is None:
            try:
                self.do("exit")
                self.p.wait(timeout=10)
            except Exception:
                self.p.kill()
                self.p.wait()


def stream(table, lport, rport):
    found = [t for t in table if t["local"].endswith(f":{lport}") and t["remote"].endswith(f":{rport}")]
    assert len(found) == 1, f"no single record {lport} -> {rport} in {json.dumps(table, indent=1)}"
    return found[0]


def check_table(image, server_port, c):
    table = image["tcp"]
    listen = [t for t in table if t["state_name"] == "LISTEN" and t["local"].endswith(f":{server_port}")]
    assert listen and not listen[0]["flags"] & 2, table
    srv = stream(table, server_port, c["port"])   # the server's end (redis holds its fd)
    cli = stream(table, c["port"], server_port)   # the client's end, same namespace
    assert srv["state_name"] == cli["state_name"] == "ESTABLISHED"
    assert srv["inode"] != 0 and not srv["flags"] & 4, srv            # passive: no SYN correction
    assert cli["flags"] & 4, cli                                     # active open
    # redis read every request byte the client sent; the client's counters likewise
    assert srv["read_seq_rel"] == c["sent"], (srv, c)
    assert cli["write_seq_rel"] == c["sent"], (cli, c)
    assert cli["read_seq_rel"] == c["read"], (cli, c)
    assert cli["rqueue"] == c["inq"], (cli, c)
    # what redis wrote: at least what the client read and has queued, at
    # most that and the server's write queue (unsent and unacknowledged
    # bytes), all of it when the client's ACK of what it holds has reached
    # the server; bytes the client holds before its delayed ACK does are in
    # both queues (seen once in CI: 48 bytes)
    assert srv["wqueue"] > 0, f"nothing in flight: the test does not exercise unsent data {srv}"
    has = c["read"] + c["inq"]
    assert has <= srv["write_seq_rel"] <= has + srv["wqueue"], (srv, c)
    assert srv["write_seq_rel"] <= 5 + GETS * REPLY, srv
    return srv


def busy_connection(rrc, tmp_path, netns):
    """redis and a client connection with bytes in flight both ways:
    (port, redis pid, client, the client's settled state)."""
    port, log, pid, cli = start_redis(rrc, tmp_path, netns)
    c = Client(netns, port)
    c.do(f"set {VALUE}")
    c.do(f"gets {GETS}")
    c.do("read 100000")
    return port, pid, c, c.settled()


def test_tcp_table_of_a_server(rrc, tmp_path, netns):
    port, pid, c, s0 = busy_connection(rrc, tmp_path, netns)
    try:
        full = tmp_path / "img0"
        rrc.dump(pid, full, leave_running=True, tcp_table=True)
        assert c.state() == s0, "the connection moved while it was settled"
        chain = rrc.inspect(full)
        check_table(chain["images"][-1], port, s0)

        # read more: redis writes more; an incremental image has its own table
        c.do(f"read {3 * VALUE}")
        s1 = c.settled()
        incr = tmp_path / "img1"
        rrc.dump(pid, incr, parent=full, leave_running=True, tcp_table=True)
        chain = rrc.inspect(incr)
        assert [i["full"] for i in chain["images"]] == [True, False]
        srv0 = check_table(chain["images"][0], port, s0)
        srv1 = check_table(chain["images"][1], port, s1)
        # the client read 3 VALUE more, all of which redis wrote after
        # what the first table counted, less what that count already held
        # beyond the client's bytes (its queue, and the server's write
        # queue: CI once saw 48 bytes fewer than 3 VALUE)
        assert srv1["write_seq_rel"] >= srv0["write_seq_rel"] + 3 * VALUE - s0["inq"] - srv0["wqueue"], (srv0, srv1)
        assert srv1["write_seq_rel"] > srv0["write_seq_rel"], (srv0, srv1)
        text = rrc.run("inspect", "--images", incr).stdout
        assert f"ESTABLISHED 127.0.0.1:{port} -> 127.0.0.1:{s1['port']}" in text, text
        assert f"written {srv1['write_seq_rel']} read {s1['sent']}" in text, text
    finally:
        c.close()


def test_tcp_table_in_copy_snapshots_and_only_when_asked(rrc, tmp_path, netns):
    """A copy snapshot takes the table on its pause helper (a second CPU):
    the same records as the fork snapshot's. Without --tcp-table a dump
    leaves the TCP section empty (a restore does not use it; replication
    epochs always ask for it)."""
    port, pid, c, s0 = busy_connection(rrc, tmp_path, netns)
    try:
        full = tmp_path / "img0"
        rrc.dump(pid, full, leave_running=True, snapshot="copy", tcp_table=True)
        check_table(rrc.inspect(full)["images"][-1], port, s0)
        incr = tmp_path / "img1"
        rrc.dump(pid, incr, parent=full, leave_running=True, snapshot="copy", tcp_table=True)
        check_table(rrc.inspect(incr)["images"][-1], port, s0)
        plain = tmp_path / "img2"
        rrc.dump(pid, plain, parent=incr, leave_running=True, snapshot="copy")
        assert rrc.inspect(plain)["images"][-1]["tcp"] == [], "a dump without --tcp-table has a TCP table"
        forked = tmp_path / "img3"
        rrc.dump(pid, forked, parent=plain, leave_running=True)
        assert rrc.inspect(forked)["images"][-1]["tcp"] == [], "a dump without --tcp-table has a TCP table"
    finally:
        c.close()


# Accepts on [::1], prints its port, holds each connection until its peer closes.
LISTENER6 = r"""
import socket, sys, threading
s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
s.bind(("::1", 0))
s.listen(256)
print(s.getsockname()[1], flush=True)
def hold(c):
    c.recv(1)
    c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=hold, args=(c,), daemon=True).start()
"""


def test_copy_snapshot_takes_ipv6_connections_the_check_did_not_see(rrc, tmp_path, netns):
    """A copy snapshot's control thread takes the TCP table while its
    helper lists the fds (runtime/lib/control.c), with AF_INET6 only if the
    fd check before the pause saw an IPv6 TCP socket. v6toggle holds an
    IPv6 connection for ~2 ms every ~4 ms, and RRC_TEST_PREPAUSE_MS puts
    3 ms between that check and the pause: some pauses find a connection
    the check had not seen. In every image, the connections among the fds
    must be in the table (the control thread takes it again with AF_INET6
    when the helper's walk found one)."""
    lst = subprocess.Popen(["ip", "netns", "exec", netns, sys.executable, "-u", "-c", LISTENER6],
                           stdout=subprocess.PIPE, text=True)
    try:
        port = int(lst.stdout.readline())
        zdir = tmp_path / "zdtm"
        zdir.mkdir()
        log = tmp_path / "v6toggle.log"
        pid = rrc.exec([zdtm_bin("v6toggle")], netns=netns, log=log,
                       env={"ZDTM_DIR": zdir, "ZDTM_PORT": port, "RRC_TEST_PREPAUSE_MS": 3})
        wait_for_file(zdir / "ready", pid=pid, log=log)
        held = []
        for i in range(30):
            d = tmp_path / f"img{i}"
            rrc.dump(pid, d, leave_running=True, snapshot="copy", tcp_table=True)
            im = rrc.inspect(d)["images"][-1]
            conns = im["fds_by_kind"].get("inet_conn", 0)
            mine = [t for t in im["tcp"] if t["remote"].endswith(f":{port}") and t["inode"] != 0]
            assert len(mine) == conns, (f"dump {i}: {conns} TCP connection(s) among the fds, "
                                        f"{len(mine)} in the TCP table: {json.dumps(im['tcp'], indent=1)}")
            held.append(conns)
        assert any(held), f"no dump found v6toggle's connection open: {held}"
    finally:
        lst.kill()
        lst.wait()
