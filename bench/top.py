"""`edgelet top pods` latency with 20 running pods: the first call (the agent has no CPU sample to rate
against yet, so the command samples twice) and later ones, against `edgelet pods` (the same CLI start and
socket round trip without stats) in the same run.

Run as root: `.venv/bin/python bench/top.py [--pods 20] [--runs 15]`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Bench, machine, percentile, pod_manifest, running_pods


def timed(b: Bench, *args: str) -> tuple[float, str]:
    argv = [
        sys.executable,
        "-m",
        "edgelet",
        *args,
        "--root-dir",
        str(b.paths.root_dir),
        "--run-dir",
        str(b.paths.run_dir),
        "--config",
        "/dev/null",
    ]
    t = time.monotonic()
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    took = time.monotonic() - t
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed: {out.stderr}")
    return took * 1000, out.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pods", type=int, default=20)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--gap", type=float, default=2.0, help="seconds between calls (the agent's CPU base ages)")
    args = ap.parse_args()
    b = Bench("top")
    try:
        b.start_agent()
        for i in range(args.pods):
            b.put_manifest(f"p{i}.yaml", pod_manifest(f"p{i}", "exec sleep 3600"))
        deadline = time.monotonic() + 180
        while running_pods(b) < args.pods and time.monotonic() < deadline:
            time.sleep(0.5)
        n = running_pods(b)
        time.sleep(5)
        first, out = timed(b, "top", "pods")
        rows = len(out.strip().splitlines()) - 1
        top, pods = [], []
        for _ in range(args.runs):
            time.sleep(args.gap)
            top.append(timed(b, "top", "pods")[0])
            pods.append(timed(b, "pods")[0])
    finally:
        b.close()
    print(f"machine: {machine()}")
    print(f"{n} running pods, `edgelet top pods` listed {rows}")
    print(f"edgelet top pods, first call (samples twice, {1.2:g} s apart): {first:.0f} ms")
    print(
        f"edgelet top pods, later calls: median {percentile(top, 0.5):.0f} ms, p90 {percentile(top, 0.9):.0f} ms"
        f"  (of {len(top)})"
    )
    print(f"baseline edgelet pods:          median {percentile(pods, 0.5):.0f} ms, p90 {percentile(pods, 0.9):.0f} ms")


if __name__ == "__main__":
    main()
