"""`edgelet exec POD -- true` wall time against `runc exec ID true` by hand, in the same run.

Run as root: `.venv/bin/python bench/exec.py [--n 30]`. One pod (busybox, `sleep`) under a real agent;
then N interleaved rounds of:

- edgelet: `python -m edgelet exec POD -- true` (the CLI starts, resolves the pod over the socket, upgrades
  the connection, passes its stdio; the agent starts `runc exec --process` with the container's spec);
- raw:     `runc --root R exec ID true` started by hand (the baseline);
- cli:     `python -m edgelet exec POD` without a command (a usage error before any request): what the
           interpreter and the CLI's imports alone cost.

Each is one subprocess.run from start to exit; medians and p90 are printed, with the difference.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import REPO, Bench, machine, percentile, pod_manifest


def wall(argv: list[str], expect: int = 0) -> float:
    t = time.perf_counter()
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, cwd=REPO)
    elapsed = (time.perf_counter() - t) * 1000
    if done.returncode != expect:
        raise RuntimeError(f"{argv[:4]}...: exit {done.returncode}: {done.stderr.decode()[-300:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=30)
    args = parser.parse_args()
    b = Bench("exec")
    try:
        b.start_agent()
        b.put_manifest("sh.yaml", pod_manifest("sh", "exec sleep 3600"))
        deadline = time.monotonic() + 120
        cid = None
        while cid is None and time.monotonic() < deadline:
            out = subprocess.run(
                ["runc", "--root", str(b.paths.runc_root), "list", "--format", "json"], capture_output=True, text=True
            ).stdout
            for c in json.loads(out or "null") or []:
                ann = c.get("annotations") or {}
                if ann.get("io.kubernetes.container.name") == "main" and c["status"] == "running":
                    cid = c["id"]
            time.sleep(0.2)
        if cid is None:
            raise TimeoutError("the pod's container did not run")
        edgelet = [
            sys.executable,
            "-m",
            "edgelet",
            "exec",
            "--root-dir",
            str(b.paths.root_dir),
            "--run-dir",
            str(b.paths.run_dir),
            "--config",
            "/dev/null",
            "sh",
            "--",
            "true",
        ]
        raw = ["runc", "--root", str(b.paths.runc_root), "exec", cid, "true"]
        for _ in range(60):  # the pod may show in the API a moment after runc runs it
            if subprocess.run(edgelet, capture_output=True, stdin=subprocess.DEVNULL, cwd=REPO).returncode == 0:
                break
            time.sleep(0.5)
        wall(edgelet), wall(raw)  # warm-up, not counted
        cli = edgelet[:-2]
        ours, base, alone = [], [], []
        for _ in range(args.n):
            ours.append(wall(edgelet))
            base.append(wall(raw))
            alone.append(wall(cli, expect=2))
    finally:
        b.close()
    print(machine())
    med_o, med_b = percentile(ours, 0.5), percentile(base, 0.5)
    print(f"`edgelet exec POD -- true`, {args.n} runs: median {med_o:.1f} ms, p90 {percentile(ours, 0.9):.1f} ms")
    print(f"`runc exec ID true` by hand, same run: median {med_b:.1f} ms, p90 {percentile(base, 0.9):.1f} ms")
    print(
        f"difference: +{med_o - med_b:.1f} ms median ({med_o / med_b:.2f}x); of it, the CLI's interpreter "
        f"and imports alone (no request): median {percentile(alone, 0.5):.1f} ms"
    )
    with open("/proc/loadavg") as f:
        print(f"load average at the end: {f.read().split()[0]}")


if __name__ == "__main__":
    main()
