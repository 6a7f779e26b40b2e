#!/usr/bin/env python3
"""Writes the rrc-wire shared vectors (docs/protocol.md), made by encoders
independent of crates/rrc-wire, which must produce and accept exactly these
bytes:

  wire-heartbeat.bin  one frame (crates/rrc-wire/src/frame.rs, matches_the_shared_vector)
  wire-auth.json      a peer handshake with a fixed key and nonces, the session
                      keys it derives, a sealed frame and a sealed heartbeat
                      datagram (crates/rrc-wire/src/auth/tests.rs,
                      matches_the_shared_vectors); HMAC-SHA256 and HKDF
                      (RFC 5869) from Python's hmac and hashlib.
"""
import hashlib
import hmac
import json
import struct
import sys
from pathlib import Path

VERSION = 2
FLAG_MAC = 1


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def header(kind: int, payload: bytes, flags: int = 0) -> bytes:
    h = b"RRCW" + struct.pack("<HHIII", VERSION, kind, len(payload), crc32c(payload), flags)
    return h + struct.pack("<I", crc32c(h))


def frame(kind: int, payload: bytes) -> bytes:
    return header(kind, payload) + payload


def mac(key: bytes, *parts: bytes) -> bytes:
    return hmac.new(key, b"".join(parts), hashlib.sha256).digest()


def hkdf(salt: bytes, ikm: bytes, info: bytes) -> bytes:
    prk = hmac.new(salt, ikm, hashlib.sha256).digest()
    return hmac.new(prk, info + b"\x01", hashlib.sha256).digest()  # 32 bytes: one block


def hello(host: str, nonce: bytes) -> bytes:
    msg = {"proto": "rrc-peer", "host": host, "auth": "hmac-sha256", "nonce": nonce.hex()}
    return json.dumps(msg, separators=(",", ":")).encode()


def auth_vectors() -> dict:
    key = bytes(range(32))
    hello_c, hello_s = hello("a", b"\x11" * 32), hello("b", b"\x22" * 32)
    t = hashlib.sha256(b"rrc-peer v2 handshake" + struct.pack("<I", len(hello_c)) + hello_c + struct.pack("<I", len(hello_s)) + hello_s).digest()
    keys = {name: hkdf(t, key, b"rrc-peer v2 " + label) for name, label in [
        ("frames_c2s", b"frames client to server"), ("frames_s2c", b"frames server to client"),
        ("heartbeats_c2s", b"heartbeats client to server"), ("heartbeats_s2c", b"heartbeats server to client")]}
    # The client's first session frame (sequence 0): a Stop.
    payload = b'{"reason":"vector"}'
    h = header(16, payload, FLAG_MAC)
    sealed = h + payload + mac(keys["frames_c2s"], struct.pack("<Q", 0), h, payload)
    hb = b"RRCHB\x00\x00\x02" + struct.pack("<Q", 1)
    return {
        "key": key.hex(),
        "hello_client": hello_c.decode(),
        "hello_server": hello_s.decode(),
        "transcript": t.hex(),
        "client_proof": mac(key, b"rrc-peer v2 client proof", t).hex(),
        "server_proof": mac(key, b"rrc-peer v2 server proof", t).hex(),
        **{k: v.hex() for k, v in keys.items()},
        "handshake_client_bytes": (frame(20, hello_c) + frame(21, mac(key, b"rrc-peer v2 client proof", t))).hex(),
        "handshake_server_bytes": (frame(20, hello_s) + frame(21, mac(key, b"rrc-peer v2 server proof", t))).hex(),
        "sealed_frame_c2s_0": sealed.hex(),
        "heartbeat_c2s_1": (hb + mac(keys["heartbeats_c2s"], hb)).hex(),
    }


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent
    (out / "wire-heartbeat.bin").write_bytes(frame(14, b'{"seq":7,"arrival":42}'))
    (out / "wire-auth.json").write_text(json.dumps(auth_vectors(), indent=1) + "\n")
