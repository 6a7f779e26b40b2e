#!/usr/bin/env python3
"""Opens an rr-mode log session (docs/protocol.md, "The log session") to an
agent's peer port as HOST, with the deployment's key: the real handshake
(tests/vectors/mkwire.py's encoder, independent of the Rust one), then a
sealed LogStream frame for SERVICE, then, if --header, a sealed LogHeader
frame of garbage. Prints what came back (JSON): how a peer that holds the
key but is not the service's primary is refused (tests/test_rr_mode.py).
"""
import argparse
import hashlib
import json
import os
import socket
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "vectors"))
from mkwire import FLAG_MAC, frame, header, hello, hkdf, mac  # noqa: E402

HELLO, AUTH, LOG_HEADER, LOG_STREAM = 20, 21, 30, 32


def read_frame(s: socket.socket) -> tuple[int, bytes]:
    def exactly(n):
        b = b""
        while len(b) < n:
            c = s.recv(n - len(b))
            if not c:
                raise EOFError("closed")
            b += c
        return b
    h = exactly(24)
    kind, n, flags = struct.unpack_from("<H", h, 6)[0], struct.unpack_from("<I", h, 8)[0], struct.unpack_from("<I", h, 16)[0]
    payload = exactly(n)
    if flags & FLAG_MAC:
        exactly(32)
    return kind, payload


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True, help="IP:PORT of the agent's peer port")
    ap.add_argument("--key-file", required=True)
    ap.add_argument("--host", required=True, help="the host name this side claims (proved by the key)")
    ap.add_argument("--service", required=True)
    ap.add_argument("--header", action="store_true")
    a = ap.parse_args()
    key = bytes.fromhex(Path(a.key_file).read_text().strip())
    ip, port = a.target.rsplit(":", 1)
    s = socket.create_connection((ip, int(port)), timeout=5)
    hello_c = hello(a.host, os.urandom(32))
    s.sendall(frame(HELLO, hello_c))
    kind, hello_s = read_frame(s)
    assert kind == HELLO, kind
    t = hashlib.sha256(b"rrc-peer v2 handshake" + struct.pack("<I", len(hello_c)) + hello_c
                       + struct.pack("<I", len(hello_s)) + hello_s).digest()
    s.sendall(frame(AUTH, mac(key, b"rrc-peer v2 client proof", t)))
    kind, _ = read_frame(s)
    assert kind == AUTH, kind
    c2s = hkdf(t, key, b"rrc-peer v2 frames client to server")
    seq = 0
    frames = [(LOG_STREAM, json.dumps({"service": a.service}).encode())]
    if a.header:
        frames.append((LOG_HEADER, b"not a log header"))
    for kind, payload in frames:
        h = header(kind, payload, FLAG_MAC)
        s.sendall(h + payload + mac(c2s, struct.pack("<Q", seq), h, payload))
        seq += 1
    # the agent refuses by closing (or, for a refused frame kind, an error Response)
    got = []
    try:
        while True:
            got.append(read_frame(s)[0])
    except (EOFError, ConnectionResetError, socket.timeout):
        pass
    print(json.dumps({"handshake": "ok", "frames_back": got}))


if __name__ == "__main__":
    main()
