"""`edgelet --runonce` wall time for N pods from a fresh root dir (image in the import dir, nothing unpacked),
as at first boot, under each runtime handler asked for (runc by default; `--runtime-handler crun` too).

Run as root: `.venv/bin/python bench/runonce.py [--pods 10] [--runtime-handler runc --runtime-handler crun]`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Bench, compile_bytecode, machine, pod_manifest


def run(pods: int, handler: str) -> tuple[float, float, subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """Cold then warm --runonce of `pods` pods on a fresh bench whose default handler is `handler`."""
    b = Bench(f"runonce-{handler}")
    try:
        for i in range(pods):
            b.put_manifest(f"p{i}.yaml", pod_manifest(f"p{i}", "exec sleep 3600"))
        argv = b.argv("--runonce", "--runonce-timeout", "5m", "--runtime-handler", handler)
        t0 = time.monotonic()
        res = subprocess.run(argv, capture_output=True, text=True)
        cold = time.monotonic() - t0
        # Second run: everything already runs; runonce adopts and verifies.
        t0 = time.monotonic()
        res2 = subprocess.run(argv, capture_output=True, text=True)
        warm = time.monotonic() - t0
    finally:
        b.close()
    return cold, warm, res, res2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pods", type=int, default=10)
    ap.add_argument("--runtime-handler", action="append", help="runc (default), crun; repeat for both in one run")
    args = ap.parse_args()
    compile_bytecode()
    results = {handler: run(args.pods, handler) for handler in args.runtime_handler or ["runc"]}
    print(f"machine: {machine()}")
    for handler, (cold, warm, res, res2) in results.items():
        print(
            f"[{handler}] --runonce, {args.pods} pods, fresh root (import + unpack + create): {cold:.2f} s"
            f"  exit {res.returncode}"
        )
        print(
            f"[{handler}] --runonce again, pods already running (adopt + verify):        {warm:.2f} s  exit {res2.returncode}"
        )
        if res.returncode:
            print(res.stdout, res.stderr)
    if {"runc", "crun"} <= set(results):
        print(f"cold, crun to runc: {results['crun'][0] / results['runc'][0]:.2f}x")


if __name__ == "__main__":
    main()
