"""Reading and rewriting record logs (docs/log-format.md) for tests that
tamper with them: CRC32C, the batches, their events, and writing a log back
with every checksum recomputed (so that what is tested is the replay's
check, not the CRC's).

Also the one CRC32C of the Python tests.
"""
import struct

HEADER_SIZE, BATCH_SIZE, EVENT_SIZE = 48, 40, 48
BATCH_MAGIC = 0x424C5252
MARK_KIND = 91

_TABLE = []
for _n in range(256):
    _c = _n
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _TABLE.append(_c)


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), reflected, as rrc's runtime/common/crc32c.c."""
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


class Event:
    def __init__(self, kind, flags, obj, seq, result, data, ret=0, ret_ns=0):
        self.kind, self.flags, self.obj, self.seq, self.result, self.data = kind, flags, obj, seq, result, data
        self.ret, self.ret_ns = ret, ret_ns  # a system call's place in the order of returns, and when

    def encode(self) -> bytes:
        pad = (-len(self.data)) % 8
        return struct.pack("<HHIQQqQQ", self.kind, self.flags, len(self.data), self.obj, self.seq,
                           self.result, self.ret, self.ret_ns) + self.data + b"\0" * pad


class Batch:
    def __init__(self, tid, seq, first, events, raw_payload=None):
        self.tid, self.seq, self.first, self.events = tid, seq, first, events
        self.raw_payload = raw_payload

    def encode(self) -> bytes:
        payload = b"".join(e.encode() for e in self.events)
        h = struct.pack("<IIQQII", BATCH_MAGIC, self.tid, self.seq, self.first, len(self.events), len(payload))
        h += struct.pack("<I", crc32c(payload))
        return h + struct.pack("<I", crc32c(h)) + payload


def read(path):
    """(header bytes, [Batch]) of a well-formed log."""
    b = open(path, "rb").read()
    header, off, batches = b[:HEADER_SIZE], HEADER_SIZE, []
    while off + BATCH_SIZE <= len(b):
        magic, tid, seq, first, n, plen, _pcrc, _hcrc = struct.unpack_from("<IIQQIIII", b, off)
        assert magic == BATCH_MAGIC, f"batch at {off}"
        p, o, evs = b[off + BATCH_SIZE:off + BATCH_SIZE + plen], 0, []
        for _ in range(n):
            kind, flags, dlen, obj, s, res, ret, ret_ns = struct.unpack_from("<HHIQQqQQ", p, o)
            evs.append(Event(kind, flags, obj, s, res, p[o + EVENT_SIZE:o + EVENT_SIZE + dlen], ret, ret_ns))
            o += EVENT_SIZE + dlen + (-dlen) % 8
        batches.append(Batch(tid, seq, first, evs))
        off += BATCH_SIZE + plen
    return header, batches


def write(path, header, batches):
    with open(path, "wb") as f:
        f.write(header)
        for b in batches:
            f.write(b.encode())


def thread_events(batches, tid):
    """[(batch, index in batch, the thread's event number)] of one thread."""
    out = []
    for b in batches:
        if b.tid == tid:
            for i in range(len(b.events)):
                out.append((b, i, b.first + i))
    return out


def remove_event(batches, tid, number):
    """Removes a thread's event number `number` and renumbers the thread's
    later batches (a log whose format is intact, one event short)."""
    for b in batches:
        if b.tid != tid:
            continue
        if b.first <= number < b.first + len(b.events):
            del b.events[number - b.first]
        elif b.first > number:
            b.first -= 1
    # the release marks that counted it count one fewer (their positions
    # stay where the thread's events are)
    for b in batches:
        for e in b.events if b.tid == 0 else ():
            if e.kind != MARK_KIND:
                continue
            number_, n = struct.unpack_from("<QI", e.data)
            threads = [struct.unpack_from("<IIQ", e.data, 16 + 16 * i) for i in range(n)]
            threads = [(t, r, nx - 1 if t == tid and nx > number else nx) for t, r, nx in threads]
            e.data = struct.pack("<QII", number_, n, 0) + b"".join(struct.pack("<IIQ", *t) for t in threads)
