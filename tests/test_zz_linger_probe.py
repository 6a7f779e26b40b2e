"""TEMPORARY probe (not committed): lighttpd's open fds over time under
--close clients, rr mode against checkpoint mode."""
import random, subprocess, time, os
from pathlib import Path
import pytest
from test_failover import lab, run_service, status, cli, lighttpd_site, need, RRC_BIN, CHECK_BIN  # noqa


@pytest.mark.parametrize("mode", ["rr", "checkpoint"])
def test_linger_probe(lab, tmp_path, mode):
    argv, root = lighttpd_site(tmp_path, {"blob.bin": random.randbytes(20_000)})
    ip = run_service("www", argv, epoch="1s" if mode == "rr" else "30ms", extra=("--mode", mode))
    pids = subprocess.run(["pgrep", "-x", "lighttpd"], capture_output=True, text=True).stdout.split()
    p = subprocess.Popen(
        [str(need(RRC_BIN)), "lab", "exec", "client", "--", str(need(CHECK_BIN)), "http", "--close", "--url", f"http://{ip}/blob.bin",
         "--file", str(root / "blob.bin"), "--ranges", "--threads", "4", "--duration", "6s", "--rate", "200", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    samples = []
    t0 = time.time()
    while time.time() - t0 < 5.5:
        n = []
        for pid in pids:
            try:
                n.append(sum(1 for f in os.listdir(f"/proc/{pid}/fd") if os.readlink(f"/proc/{pid}/fd/{f}").startswith("socket:")))
            except OSError:
                pass
        samples.append(max(n) if n else -1)
        time.sleep(0.1)
    out, err = p.communicate(timeout=60)
    print(f"\nMODE {mode} pids {pids} socket fds over time: {samples}")
    print(out[-400:])
