#!/usr/bin/env python3
"""A hostile host on the replication network (issue 12; tests/test_hostile_peer.py).

  sniff       on a switch port (run in the lab's switch namespace): records the
              client side of the first TCP connection from SRC to DST:PORT and
              the UDP datagrams between SRC and DST, as JSON.
  attack      against an agent's peer port: each kind of frame a network
              attacker can send without the key, one connection each; prints
              what came back, as JSON.
  heartbeats  to an agent's heartbeat port: recorded datagrams replayed and
              forged ones sent with the real peer's source address (raw IP),
              and a few from this host's own address.

Frames are built with tests/vectors/mkwire.py's encoder (docs/protocol.md),
which is independent of the Rust one.
"""
import argparse
import json
import os
import random
import selectors
import socket
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "vectors"))
from mkwire import crc32c, frame, header  # noqa: E402

REQUEST, RESPONSE, REPLICATE, HELLO, AUTH = 1, 2, 3, 20, 21
HEADER = 24
MAX_PAYLOAD = 16 << 20


# ---------------------------------------------------------------- sniff

def sniff(args):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
    s.bind((args.iface, 0))
    s.settimeout(0.2)
    src, dst = socket.inet_aton(args.src), socket.inet_aton(args.dst)
    segs, isn, sport, udp = {}, None, None, []
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        try:
            pkt = s.recv(65536)
        except socket.timeout:
            continue
        if len(pkt) < 34 or pkt[12:14] != b"\x08\x00":
            continue
        ip = pkt[14:]
        ihl = (ip[0] & 15) * 4
        total = struct.unpack("!H", ip[2:4])[0]
        proto, a, b = ip[9], ip[12:16], ip[16:20]
        body = ip[ihl:total]
        if proto == 6 and a == src and b == dst:
            sp, dp, seq = struct.unpack("!HHI", body[:8])
            flags, off = body[13], (body[12] >> 4) * 4
            if dp != args.port:
                continue
            if flags & 0x02 and isn is None:  # SYN of the first connection
                isn, sport = seq, sp
            elif sp == sport and len(body) > off:
                segs.setdefault((seq - isn - 1) & 0xFFFFFFFF, body[off:])
        elif proto == 17 and {a, b} == {src, dst}:
            sp, dp = struct.unpack("!HH", body[:4])
            udp.append({"from": socket.inet_ntoa(a), "to": socket.inet_ntoa(b), "dport": dp, "data": body[8:].hex()})
    stream = bytearray()
    for off in sorted(segs):
        if off == len(stream):
            stream += segs[off]
        elif off < len(stream) < off + len(segs[off]):
            stream += segs[off][len(stream) - off:]
        if len(stream) > args.limit:
            break
    Path(args.out).write_text(json.dumps({"tcp": bytes(stream[:args.limit]).hex(), "udp": udp}))


# ---------------------------------------------------------------- frames

def split_frames(b: bytes):
    """The frames of a recorded stream (a MAC trailer when flagged)."""
    out, i = [], 0
    while i + HEADER <= len(b):
        kind, n, flags = struct.unpack_from("<H", b, i + 6)[0], struct.unpack_from("<I", b, i + 8)[0], struct.unpack_from("<I", b, i + 16)[0]
        size = HEADER + n + (32 if flags & 1 else 0)
        if i + size > len(b):
            break
        out.append((kind, b[i:i + size]))
        i += size
    return out


def hello(host: str, auth: str) -> bytes:
    msg = {"proto": "rrc-peer", "host": host, "auth": auth, "nonce": os.urandom(32).hex()}
    return frame(HELLO, json.dumps(msg, separators=(",", ":")).encode())


def request(op: dict, version: int = 2) -> bytes:
    payload = json.dumps(op).encode()
    h = b"RRCW" + struct.pack("<HHIII", version, REQUEST, len(payload), crc32c(payload), 0)
    return h + struct.pack("<I", crc32c(h)) + payload


def header_only(kind: int, length: int) -> bytes:
    h = b"RRCW" + struct.pack("<HHIII", 2, kind, length, 0, 0)
    return h + struct.pack("<I", crc32c(h))


def read_frames(data: bytes):
    """What the agent answered: kinds and the error texts of Responses."""
    got = []
    for kind, f in split_frames(data):
        item = {"kind": kind}
        if kind == RESPONSE:
            try:
                item["error"] = json.loads(f[HEADER:])["error"]
            except (ValueError, KeyError):
                pass
        got.append(item)
    return got


def attacks(name: str, token: str, capture: bytes):
    spec = {"name": "hostile", "service_ip": "198.18.0.199", "primary": "b", "backup": "a", "mode": "checkpoint", "epoch_ms": 30,
            "argv": ["sh", "-c", f"touch /tmp/rrc-hostile-{token}"]}
    frames = split_frames(capture)
    sealed_replicate = header(REPLICATE, b"{}", 1) + b"{}" + os.urandom(32)
    out = [
        ("cli_stop", "cli_request", request({"op": "stop", "name": name})),
        ("cli_run", "cli_request", request({"op": "run", "spec": spec})),
        ("cli_export", "cli_request", request({"op": "export", "name": name, "dir": f"/tmp/rrc-hostile-{token}-export"})),
        ("cli_fault", "cli_request", request({"op": "fault", "name": name, "fault": "stall-commits"})),
        ("cli_stop_v1", "malformed", request({"op": "stop", "name": name}, version=1)),
        ("garbage", "malformed", b"\x00" + os.urandom(300)),
        ("http", "malformed", b"GET / HTTP/1.0\r\nHost: agent\r\n\r\n"),
        ("truncated", "truncated", header_only(HELLO, 200) + b"{" * 50),
        ("oversized_hello", "oversized", header_only(HELLO, 1 << 20) + b"x" * 1000),
        ("oversized_frame", "oversized", header_only(REPLICATE, MAX_PAYLOAD + 1)),
        ("unauthenticated_hello", "auth_mismatch", hello("a", "none")),
        ("forged_proof", "bad_proof", hello("a", "hmac-sha256") + frame(AUTH, os.urandom(32)) + sealed_replicate),
    ]
    if len(frames) >= 2:
        # the real primary's opening, recorded on the wire, replayed as is
        out.append(("replayed", "replay", capture))
        # and reordered: its proof before its Hello
        out.append(("reordered", "unexpected_frame", frames[1][1] + frames[0][1] + b"".join(f for _, f in frames[2:])))
    return out


def exchange(target, data: bytes, wait: float):
    """Sends data on a new connection; returns what came back until the agent
    closed it (True) or `wait` passed (False)."""
    s = socket.create_connection(target, timeout=5)
    try:
        s.sendall(data)
        # Nothing more comes: a frame cut short is truncated, not late.
        s.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    got, closed = b"", False
    s.settimeout(wait)
    try:
        while True:
            b = s.recv(65536)
            if not b:
                closed = True
                break
            got += b
    except socket.timeout:
        pass
    except OSError:
        closed = True
    s.close()
    return got, closed


def attack(args):
    host, port = args.target.rsplit(":", 1)
    target = (host, int(port))
    capture = bytes.fromhex(json.loads(Path(args.capture).read_text())["tcp"]) if args.capture else b""
    report = []
    for what, expect, data in attacks(args.service, args.token, capture):
        got, closed = exchange(target, data, wait=10)
        report.append({"attack": what, "expect": expect, "closed": closed, "answer": read_frames(got)})
    # Idle connections: each times out at the agent; past the per-address
    # limit they are refused at once.
    idle = [socket.create_connection(target, timeout=5) for _ in range(args.idle)]
    t0 = time.monotonic()
    closed_after = []
    sel = selectors.DefaultSelector()
    for s in idle:
        sel.register(s, selectors.EVENT_READ)
    while sel.get_map() and time.monotonic() - t0 < 15:
        for key, _ in sel.select(timeout=0.5):
            try:
                more = key.fileobj.recv(1)
            except OSError:
                more = b""
            if not more:
                closed_after.append(round(time.monotonic() - t0, 2))
                sel.unregister(key.fileobj)
                key.fileobj.close()
    report.append({"attack": "idle", "count": args.idle, "closed_after_s": closed_after})
    print(json.dumps(report))


# ---------------------------------------------------------------- heartbeats

def udp_packet(src: str, dst: str, sport: int, dport: int, data: bytes) -> bytes:
    udp = struct.pack("!HHHH", sport, dport, 8 + len(data), 0) + data
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), random.randrange(65536), 0, 64, 17, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))
    return ip + udp


def heartbeats(args):
    recorded = [bytes.fromhex(d["data"]) for d in json.loads(Path(args.capture).read_text())["udp"]
                if d["from"] == args.spoof_src and d["to"] == args.dst and d["dport"] == args.port]
    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    sent = {"replayed": 0, "forged": 0, "own_address": 0}
    for d in recorded[:args.replays]:
        raw.sendto(udp_packet(args.spoof_src, args.dst, 40000, args.port, d), (args.dst, 0))
        sent["replayed"] += 1
    for i in range(args.forged):
        d = b"RRCHB\x00\x00\x02" + struct.pack("<Q", (1 << 40) + i) + os.urandom(32)
        raw.sendto(udp_packet(args.spoof_src, args.dst, 40000, args.port, d), (args.dst, 0))
        sent["forged"] += 1
    own = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for d in recorded[:args.own]:
        own.sendto(d, (args.dst, args.port))
        sent["own_address"] += 1
    sent["recorded"] = len(recorded)
    print(json.dumps(sent))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("sniff")
    p.add_argument("--iface", required=True)
    p.add_argument("--src", required=True)
    p.add_argument("--dst", required=True)
    p.add_argument("--port", type=int, default=7400)
    p.add_argument("--seconds", type=float, default=5)
    p.add_argument("--limit", type=int, default=64 << 10)
    p.add_argument("--out", required=True)
    p = sub.add_parser("attack")
    p.add_argument("--target", required=True)
    p.add_argument("--service", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--capture")
    p.add_argument("--idle", type=int, default=10)
    p = sub.add_parser("heartbeats")
    p.add_argument("--capture", required=True)
    p.add_argument("--dst", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--spoof-src", required=True)
    p.add_argument("--replays", type=int, default=5)
    p.add_argument("--forged", type=int, default=3)
    p.add_argument("--own", type=int, default=2)
    a = ap.parse_args()
    {"sniff": sniff, "attack": attack, "heartbeats": heartbeats}[a.cmd](a)


if __name__ == "__main__":
    main()
