"""`edgelet --runonce` wall time for N pods from a fresh root dir (image in the import dir, nothing unpacked),
as at first boot.

Run as root: `.venv/bin/python bench/runonce.py [--pods 10]`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Bench, compile_bytecode, machine, pod_manifest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pods", type=int, default=10)
    args = ap.parse_args()
    b = Bench("runonce")
    compile_bytecode()
    try:
        for i in range(args.pods):
            b.put_manifest(f"p{i}.yaml", pod_manifest(f"p{i}", "exec sleep 3600"))
        t0 = time.monotonic()
        res = subprocess.run(b.argv("--runonce", "--runonce-timeout", "5m"), capture_output=True, text=True)
        cold = time.monotonic() - t0
        # Second run: everything already runs; runonce adopts and verifies.
        t0 = time.monotonic()
        res2 = subprocess.run(b.argv("--runonce", "--runonce-timeout", "5m"), capture_output=True, text=True)
        warm = time.monotonic() - t0
    finally:
        b.close()
    print(f"machine: {machine()}")
    print(f"--runonce, {args.pods} pods, fresh root (import + unpack + create): {cold:.2f} s  exit {res.returncode}")
    print(f"--runonce again, pods already running (adopt + verify):        {warm:.2f} s  exit {res2.returncode}")
    if res.returncode:
        print(res.stdout, res.stderr)


if __name__ == "__main__":
    main()
