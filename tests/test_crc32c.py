"""CRC32C, the checksum of every rrc format (runtime/common/crc32c.c: three
interleaved crc32 streams joined with carry-less multiplies), against a
bitwise reference: runtime/build/crc32c_check."""
import subprocess

from conftest import RUNTIME_BUILD, need


def test_crc32c_matches_the_bitwise_reference():
    p = subprocess.run([str(need(RUNTIME_BUILD / "crc32c_check"))], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"crc32c_check failed (exit {p.returncode}):\n{p.stdout}\n{p.stderr}"
    assert "crc32c: ok" in p.stdout, p.stdout
