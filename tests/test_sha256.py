"""SHA-256 and HMAC-SHA256 of the library (runtime/lib/sha256.c), which
seals the record log's frames inside the process (issue 14 §2): known
digests, the SHA extensions against the portable loop
(runtime/build/sha256_check), and HMAC-SHA256 against Python's hmac on
random keys and data of every length around the block sizes."""
import hashlib
import hmac
import random
import subprocess

from conftest import RUNTIME_BUILD, need


def test_sha256_passes_its_checks():
    p = subprocess.run([str(need(RUNTIME_BUILD / "sha256_check"))], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"sha256_check failed (exit {p.returncode}):\n{p.stdout}\n{p.stderr}"
    assert "all checks passed" in p.stdout, p.stdout


def test_hmac_matches_pythons():
    rng = random.Random(14)
    check = str(need(RUNTIME_BUILD / "sha256_check"))
    lengths = list(range(0, 140)) + [183, 184, 247, 248, 1000, 4096, 60000]
    for n in lengths:
        key = bytes(rng.randrange(256) for _ in range(rng.choice([1, 20, 32, 64])))
        data = bytes(rng.randrange(256) for _ in range(n))
        p = subprocess.run([check, "hmac", key.hex(), data.hex()], capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        assert p.stdout.strip() == hmac.new(key, data, hashlib.sha256).hexdigest(), (n, key.hex())
