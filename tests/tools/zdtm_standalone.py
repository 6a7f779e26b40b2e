#!/usr/bin/env python3
"""Runs zdtm programs without rrc: ready -> (wait) -> verify -> result.

Checks the programs themselves: each must PASS when left alone and FAIL
when ZDTM_CORRUPT=1 makes it damage its own state before verifying.
Usage: zdtm_standalone.py [--corrupt] [--run-ms N] BINARY [ARGS...]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time


def run(binary, args, corrupt=False, run_ms=500, timeout=60.0):
    with tempfile.TemporaryDirectory(prefix="zdtm-") as d:
        env = dict(os.environ, ZDTM_DIR=d)
        env.pop("ZDTM_CORRUPT", None)
        if corrupt:
            env["ZDTM_CORRUPT"] = "1"
        p = subprocess.Popen([os.path.abspath(binary), *args], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, cwd=d)
        try:
            deadline = time.monotonic() + timeout
            while not os.path.exists(os.path.join(d, "ready")):
                if p.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"no ready file (exit {p.poll()}): {p.stdout.read().decode()}")
                time.sleep(0.005)
            time.sleep(run_ms / 1000)
            open(os.path.join(d, "verify"), "w").close()
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            res = os.path.join(d, "result")
            result = open(res).read() if os.path.exists(res) else f"NO RESULT (exit {p.returncode})\n"
            return result, p.returncode, out.decode(errors="replace")
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--corrupt", action="store_true")
    ap.add_argument("--run-ms", type=int, default=500)
    ap.add_argument("binary")
    ap.add_argument("args", nargs="*")
    a = ap.parse_args()
    result, rc, out = run(a.binary, a.args, a.corrupt, a.run_ms)
    sys.stdout.write(out)
    sys.stdout.write(f"result: {result}")
    sys.exit(0 if result.startswith("PASS") else 1)
