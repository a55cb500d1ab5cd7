"""ConfigMaps: time from an edit of a ConfigMap in the manifest directory to the new file seen inside a running
container (kubelet's atomic writer, no restart), and the agent's RSS with 50 ConfigMaps of 10 KiB.

Run as root: `.venv/bin/python bench/configmaps.py [--edits 10] [--objects 50] [--size 10240]`. The container
copies the mounted file to a hostPath every 10 ms, so a figure includes up to 10 ms of that poll; the RSS is read
in the same run before and after the objects are added (the machine is shared: compare within a run).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import IMAGE, Bench, machine, percentile, running_pods
from _harness import memory_mb as memory


def manifest(value: str, out: Path) -> str:
    return f"""apiVersion: v1
kind: ConfigMap
metadata: {{name: bench-config}}
data:
  v: "{value}"
---
apiVersion: v1
kind: Pod
metadata: {{name: reader}}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - {{name: conf, configMap: {{name: bench-config}}}}
  - {{name: out, hostPath: {{path: {out}, type: Directory}}}}
  containers:
  - name: main
    image: {IMAGE}
    command: ["sh", "-c", "while true; do cat /conf/v > /out/.seen && mv /out/.seen /out/seen; sleep 0.01; done"]
    volumeMounts:
    - {{name: conf, mountPath: /conf}}
    - {{name: out, mountPath: /out}}
"""


def objects(count: int, size: int) -> str:
    value = "x" * size
    return "\n---\n".join(
        f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: filler-{i}}}\ndata:\n  data: {value}\n"
        for i in range(count)
    )


def seen(out: Path) -> str:
    try:
        return (out / "seen").read_text()
    except OSError:
        return ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--edits", type=int, default=10)
    ap.add_argument("--objects", type=int, default=50)
    ap.add_argument("--size", type=int, default=10240)
    ap.add_argument("--settle", type=float, default=5.0)
    args = ap.parse_args()
    b = Bench("configmaps")
    out = b.base / "out"
    out.mkdir()
    try:
        proc = b.start_agent()
        time.sleep(args.settle)
        rss0, _ = memory(proc.pid)
        b.put_manifest("reader.yaml", manifest("v0", out))
        deadline = time.monotonic() + 120
        while seen(out) != "v0":
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit("the reader pod did not start; see " + str(b.base / "agent.log"))
            time.sleep(0.01)
        latencies = []
        for i in range(1, args.edits + 1):
            value = f"v{i}"
            t0 = b.put_manifest("reader.yaml", manifest(value, out))
            while seen(out) != value:
                if time.monotonic() - t0 > 60:
                    raise SystemExit(f"edit {i} not seen within 60 s")
                time.sleep(0.001)
            latencies.append(time.monotonic() - t0)
            time.sleep(0.5)
        time.sleep(args.settle)  # both RSS figures after the same quiet time
        rss1, _ = memory(proc.pid)
        b.put_manifest("objects.yaml", objects(args.objects, args.size))
        time.sleep(args.settle)
        rss2, _ = memory(proc.pid)
        running = running_pods(b)
        print(f"machine: {machine()}")
        print(f"ConfigMap edit -> new file in the running container, {args.edits} edits (no restart):")
        print(
            f"  median {percentile(latencies, 0.5) * 1000:.0f} ms, p90 {percentile(latencies, 0.9) * 1000:.0f} ms,"
            f" max {max(latencies) * 1000:.0f} ms"
        )
        print(f"agent RSS: idle {rss0:.1f} MB, with the reader pod {rss1:.1f} MB,")
        print(
            f"  plus {args.objects} ConfigMaps of {args.size // 1024} KiB {rss2:.1f} MB"
            f" ({rss2 - rss1:+.1f} MB for {args.objects * args.size / 1024 / 1024:.2f} MB of data); pods running {running}"
        )
    finally:
        if b.proc is not None:
            b.proc.terminate()
            try:
                b.proc.wait(30)
            except Exception:
                b.proc.kill()
            b.proc = None  # stopped on purpose: close() need not show its log
        b.close()


if __name__ == "__main__":
    main()
