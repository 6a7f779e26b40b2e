#!/usr/bin/env python3
"""Writes tests/vectors/wire-heartbeat.bin: one rrc-wire frame (docs/protocol.md)
made by an encoder independent of crates/rrc-wire, which must produce and
accept exactly these bytes (crates/rrc-wire/src/frame.rs, matches_the_shared_vector)."""
import struct
import sys
from pathlib import Path


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def frame(kind: int, payload: bytes) -> bytes:
    h = b"RRCW" + struct.pack("<HHIII", 1, kind, len(payload), crc32c(payload), 0)
    return h + struct.pack("<I", crc32c(h)) + payload


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("wire-heartbeat.bin")
    out.write_bytes(frame(14, b'{"seq":7,"arrival":42}'))
