#!/usr/bin/env python3
"""Deterministic data for the server tests, run inside the test's network
namespace (`ip netns exec NS python3 kvtool.py ...`) by tests/test_servers.py.

Redis
  redis-gen PHASE              RESP commands of PHASE on stdout (for redis-cli --pipe)
  redis-model PORT PHASES      every key the phases 0..PHASES-1 left must hold its exact value
  redis-snapshot PORT FILE     every key (SCAN): type, DUMP payload, TTL -> FILE (json)
  redis-compare PORT FILE      the server holds exactly the snapshot's keys and payloads
memcached
  mc-load PORT PHASE           PHASE's sets and deletes through pymemcache
  mc-model PORT PHASES         every key the phases left must hold its exact value and flags
  mc-snapshot PORT FILE        every key (lru_crawler metadump) with value and flags -> FILE
  mc-compare PORT FILE         the server holds exactly the snapshot's items
mtkv (runtime/tests/zdtm/mtkv.c, the project's own multithreaded server)
  mtkv-load PORT PHASE [CONNS] PHASE's SETs and DELs, pipelined over CONNS connections
  mtkv-model PORT PHASES       every key the phases left must hold its exact value
  mtkv-digest PORT             prints "COUNT DIGEST" (compare before/after)
  mtkv-seq PORT N              SETs seq:0 .. seq:N-1 in order on one connection
  mtkv-seq-prefix PORT K N     seq:0 .. seq:K-1 hold their values, seq:K .. seq:N-1 none

Phase 0 loads a base data set; each later phase overwrites a window of it,
adds new keys and deletes some, so increments differ from the full image.
Exit status 1 with a line naming the first differences on a mismatch.
"""
import hashlib
import json
import socket
import sys
import urllib.parse

N_BASE = 20000


def value(tag: str, phase: int, i: int) -> bytes:
    size = (i * 37 + phase * 11) % 3000 + 1
    seed = hashlib.sha256(f"{tag}:{phase}:{i}".encode()).digest()
    return (seed * (size // 32 + 1))[:size]


def model(phases: int, tag: str) -> dict:
    """key -> (value, flags) after phases 0..phases-1."""
    m = {}
    for i in range(N_BASE):
        m[f"{tag}:{i}".encode()] = (value(tag, 0, i), i % 65536)
    for p in range(1, phases):
        start = (p * 1500) % N_BASE
        for i in range(start, min(start + 1000, N_BASE)):
            m[f"{tag}:{i}".encode()] = (value(tag, p, i), (i + p) % 65536)
        for i in range(500):
            m[f"{tag}n:{p}:{i}".encode()] = (value(tag + "n", p, i), p)
        for i in range(p % 97, N_BASE, 97):
            m.pop(f"{tag}:{i}".encode(), None)
    return m


def changes(phase: int, tag: str):
    """(sets {key: (value, flags)}, deletes [key]) of one phase."""
    sets, dels = {}, []
    if phase == 0:
        for i in range(N_BASE):
            sets[f"{tag}:{i}".encode()] = (value(tag, 0, i), i % 65536)
        return sets, dels
    start = (phase * 1500) % N_BASE
    for i in range(start, min(start + 1000, N_BASE)):
        sets[f"{tag}:{i}".encode()] = (value(tag, phase, i), (i + phase) % 65536)
    for i in range(500):
        sets[f"{tag}n:{phase}:{i}".encode()] = (value(tag + "n", phase, i), phase)
    dels = [f"{tag}:{i}".encode() for i in range(phase % 97, N_BASE, 97)]
    return sets, dels


def fail(msg):
    print(f"MISMATCH: {msg}")
    sys.exit(1)


# ---------------------------------------------------------------- redis

def resp(*args: bytes) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def redis_gen(phase: int):
    sets, dels = changes(phase, "k")
    w = sys.stdout.buffer
    for k, (v, _) in sets.items():
        w.write(resp(b"SET", k, v))
    for k in dels:
        w.write(resp(b"DEL", k))
    # a few other types, rewritten each phase
    for j in range(100):
        w.write(resp(b"HSET", b"h:%d" % j, b"f%d" % phase, value("h", phase, j)))
        w.write(resp(b"RPUSH", b"l:%d" % j, value("l", phase, j)[:64]))
        w.write(resp(b"SADD", b"s:%d" % j, b"m%d:%d" % (phase, j)))
    w.flush()


def redis_client(port):
    import redis
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=30)


def redis_model(port: int, phases: int):
    r = redis_client(port)
    m = model(phases, "k")
    keys = list(m)
    for off in range(0, len(keys), 1000):
        chunk = keys[off:off + 1000]
        got = r.mget(chunk)
        for k, g in zip(chunk, got):
            if g != m[k][0]:
                fail(f"redis key {k!r}: {'missing' if g is None else f'{len(g)} bytes differ'} "
                     f"(expected {len(m[k][0])} bytes)")
    for p in range(phases):
        for i in range(p % 97, N_BASE, 97):
            k = f"k:{i}".encode()
            if k not in m and r.exists(k):
                fail(f"redis key {k!r} deleted in phase {p} is back")
    for j in range(100):
        h = r.hgetall(b"h:%d" % j)
        want = {b"f%d" % p: value("h", p, j) for p in range(phases)}
        if h != want:
            fail(f"redis hash h:{j} has {len(h)} fields, differs from the {len(want)} written")
        if r.lrange(b"l:%d" % j, 0, -1) != [value("l", p, j)[:64] for p in range(phases)]:
            fail(f"redis list l:{j} differs")
        if r.smembers(b"s:%d" % j) != {b"m%d:%d" % (p, j) for p in range(phases)}:
            fail(f"redis set s:{j} differs")
    print(f"redis model: {len(m)} strings + 300 aggregates verified after {phases} phases")


def redis_snapshot(port: int, path: str):
    r = redis_client(port)
    snap = {}
    for k in r.scan_iter(count=1000):
        snap[k.hex()] = [r.type(k).decode(), r.dump(k).hex(), r.pttl(k) >= 0]
    json.dump(snap, open(path, "w"))
    print(f"redis snapshot: {len(snap)} keys")


def redis_compare(port: int, path: str):
    r = redis_client(port)
    snap = json.load(open(path))
    have = {k.hex() for k in r.scan_iter(count=1000)}
    missing, extra = set(snap) - have, have - set(snap)
    if missing or extra:
        fail(f"redis holds {len(have)} keys, snapshot {len(snap)}: {len(missing)} missing "
             f"(e.g. {[bytes.fromhex(k) for k in list(missing)[:3]]}), {len(extra)} extra")
    for kh, (typ, dump, _) in snap.items():
        k = bytes.fromhex(kh)
        if r.dump(k).hex() != dump:
            fail(f"redis key {k!r} ({typ}) differs from the snapshot taken before the final dump")
    print(f"redis compare: {len(snap)} keys identical")


# ---------------------------------------------------------------- memcached

def mc_client(port):
    from pymemcache.client.base import Client
    return Client(("127.0.0.1", port), timeout=30, connect_timeout=10)


def mc_load(port: int, phase: int):
    c = mc_client(port)
    sets, dels = changes(phase, "mk")
    by_flags = {}
    for k, (v, fl) in sets.items():
        by_flags.setdefault(fl, {})[k] = v
    for fl, items in by_flags.items():
        failed = c.set_many(items, flags=fl, noreply=False)
        if failed:
            fail(f"memcached refused {len(failed)} sets")
    for k in dels:
        c.delete(k, noreply=False)
    print(f"memcached phase {phase}: {len(sets)} sets, {len(dels)} deletes")


def mc_raw_get(port: int, keys):
    """key -> (flags, value) straight from the protocol (flags included)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    f = s.makefile("rb")
    out = {}
    for off in range(0, len(keys), 200):
        chunk = keys[off:off + 200]
        s.sendall(b"get " + b" ".join(chunk) + b"\r\n")
        while True:
            line = f.readline()
            if line == b"END\r\n":
                break
            parts = line.split()
            if parts[:1] != [b"VALUE"]:
                fail(f"memcached answered {line!r}")
            data = f.read(int(parts[3]) + 2)[:-2]
            out[parts[1]] = (int(parts[2]), data)
    s.close()
    return out


def mc_model(port: int, phases: int):
    m = model(phases, "mk")
    got = mc_raw_get(port, list(m))
    for k, (v, fl) in m.items():
        g = got.get(k)
        if g is None:
            fail(f"memcached key {k!r} missing")
        if g != (fl, v):
            fail(f"memcached key {k!r}: flags {g[0]} / {len(g[1])} bytes, expected flags {fl} / {len(v)} bytes")
    print(f"memcached model: {len(m)} items verified after {phases} phases")


def mc_keys(port: int):
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.sendall(b"lru_crawler metadump all\r\n")
    buf = b""
    while not (buf.endswith(b"END\r\n") or buf.startswith(b"BUSY") or buf.startswith(b"ERROR")):
        d = s.recv(1 << 16)
        if not d:
            break
        buf += d
    s.close()
    if not buf.endswith(b"END\r\n"):
        fail(f"lru_crawler metadump failed: {buf[:100]!r}")
    keys = []
    for line in buf.split(b"\n"):  # metadump lines end in \n, END in \r\n
        if line.startswith(b"key="):
            keys.append(urllib.parse.unquote_to_bytes(line.split()[0][4:]))
    return keys


def mc_snapshot(port: int, path: str):
    keys = mc_keys(port)
    got = mc_raw_get(port, keys)
    json.dump({k.hex(): [fl, v.hex()] for k, (fl, v) in got.items()}, open(path, "w"))
    print(f"memcached snapshot: {len(got)} items")


def mc_compare(port: int, path: str):
    snap = json.load(open(path))
    keys = [bytes.fromhex(k) for k in snap]
    got = mc_raw_get(port, keys)
    for kh, (fl, vh) in snap.items():
        g = got.get(bytes.fromhex(kh))
        if g is None or g != (fl, bytes.fromhex(vh)):
            fail(f"memcached key {bytes.fromhex(kh)!r} {'missing' if g is None else 'differs'} after restore")
    now = set(mc_keys(port))
    extra = now - set(keys)
    if extra:
        fail(f"memcached holds {len(extra)} items the snapshot had not, e.g. {list(extra)[:3]}")
    print(f"memcached compare: {len(snap)} items identical")


# ---------------------------------------------------------------- mtkv

def mtkv_pipeline(port: int, lines: list) -> list:
    """Sends request lines, returns the reply lines (one per request)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    f = s.makefile("rb")
    out = []
    for off in range(0, len(lines), 500):
        chunk = lines[off:off + 500]
        s.sendall(b"".join(l + b"\n" for l in chunk))
        for _ in chunk:
            r = f.readline()
            if not r.endswith(b"\n"):
                fail(f"mtkv closed the connection after {len(out)} replies")
            out.append(r[:-1])
    s.close()
    return out


def mtkv_load(port: int, phase: int, conns: int = 4):
    import threading
    sets, dels = changes(phase, "t")
    errors = []

    def part(lines):
        try:
            for r in mtkv_pipeline(port, lines):
                if r not in (b"OK", b"1", b"0"):
                    errors.append(r)
        except SystemExit as e:
            errors.append(str(e))

    # SETs on parallel connections, then DELs (the model deletes last)
    for lines in ([b"SET %s %s" % (k, v.hex().encode()) for k, (v, _) in sets.items()],
                  [b"DEL %s" % k for k in dels]):
        ts = [threading.Thread(target=part, args=(lines[i::conns],)) for i in range(conns)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    if errors:
        fail(f"mtkv load phase {phase}: {len(errors)} bad replies, e.g. {errors[:3]}")
    print(f"mtkv phase {phase}: {len(sets)} sets, {len(dels)} deletes over {conns} connections")


def mtkv_model(port: int, phases: int):
    m = model(phases, "t")
    keys = list(m)
    replies = mtkv_pipeline(port, [b"GET " + k for k in keys])
    for k, r in zip(keys, replies):
        want = b"VALUE " + m[k][0].hex().encode()
        if r != want:
            fail(f"mtkv key {k!r}: {r[:40]!r}..., expected {want[:40]!r}...")
    count = int(mtkv_pipeline(port, [b"COUNT"])[0])
    if count != len(m):
        fail(f"mtkv holds {count} keys, the model {len(m)}")
    print(f"mtkv model: {len(m)} keys verified after {phases} phases")


def seq_value(i: int) -> bytes:
    return b"v%d" % (i * 7919)


def mtkv_seq(port: int, n: int):
    replies = mtkv_pipeline(port, [b"SET seq:%d %s" % (i, seq_value(i)) for i in range(n)])
    bad = [r for r in replies if r != b"OK"]
    if bad:
        fail(f"mtkv seq: {len(bad)} bad replies, e.g. {bad[:3]}")
    print(f"mtkv seq: {n} sets in order on one connection")


def mtkv_seq_prefix(port: int, k: int, n: int):
    replies = mtkv_pipeline(port, [b"GET seq:%d" % i for i in range(n)])
    for i, r in enumerate(replies):
        want = b"VALUE " + seq_value(i) if i < k else b"NIL"
        if r != want:
            fail(f"mtkv seq:{i}: {r!r}, expected {want!r} (the first {k} of {n} sets applied)")
    print(f"mtkv seq: exactly the first {k} of {n} sets applied")


def mtkv_digest(port: int):
    c, d = mtkv_pipeline(port, [b"COUNT", b"DIGEST"])
    print(f"{c.decode()} {d.decode()}")


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "redis-gen":
        redis_gen(int(args[0]))
    elif cmd == "redis-model":
        redis_model(int(args[0]), int(args[1]))
    elif cmd == "redis-snapshot":
        redis_snapshot(int(args[0]), args[1])
    elif cmd == "redis-compare":
        redis_compare(int(args[0]), args[1])
    elif cmd == "mc-load":
        mc_load(int(args[0]), int(args[1]))
    elif cmd == "mc-model":
        mc_model(int(args[0]), int(args[1]))
    elif cmd == "mc-snapshot":
        mc_snapshot(int(args[0]), args[1])
    elif cmd == "mc-compare":
        mc_compare(int(args[0]), args[1])
    elif cmd == "mtkv-load":
        mtkv_load(int(args[0]), int(args[1]), int(args[2]) if len(args) > 2 else 4)
    elif cmd == "mtkv-model":
        mtkv_model(int(args[0]), int(args[1]))
    elif cmd == "mtkv-digest":
        mtkv_digest(int(args[0]))
    elif cmd == "mtkv-seq":
        mtkv_seq(int(args[0]), int(args[1]))
    elif cmd == "mtkv-seq-prefix":
        mtkv_seq_prefix(int(args[0]), int(args[1]), int(args[2]))
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
