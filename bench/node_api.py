"""Node API cost: agent RSS added by the TCP API with TLS (idle, and after serving stats), and /stats/summary latency
over TLS with 20 running pods (fresh collections, the cache defeated, and cached ones).

Run as root: `.venv/bin/python bench/node_api.py [--runs 3] [--pods 20] [--settle 5]`.
"""

from __future__ import annotations

import argparse
import re
import ssl
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import httpx
from _harness import Bench, machine, percentile, pod_manifest

TOKEN = "bench-token"


def vmrss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def wait_log(b: Bench, pattern: str, timeout: float = 60.0) -> re.Match:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = re.search(pattern, (b.base / "agent.log").read_text(errors="replace"))
        if m:
            return m
        time.sleep(0.05)
    raise TimeoutError(pattern)


def client(b: Bench, port: int) -> httpx.Client:
    ctx = ssl.create_default_context(cafile=str(b.paths.root_dir / "pki" / "edgelet.crt"))
    return httpx.Client(
        base_url=f"https://127.0.0.1:{port}", verify=ctx, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
    )


def api_flags(b: Bench) -> list[str]:
    tokens = b.base / "tokens.csv"
    tokens.write_text(f'{TOKEN},bench,"system:masters"\n')
    return ["--address", "127.0.0.1", "--port", "0", "--api-token-file", str(tokens)]


def rss_run(settle: float) -> tuple[float, float, float]:
    """(RSS without the node API, with it idle, with it after serving /stats/summary and /metrics/resource)."""
    b = Bench("nodeapi-rss")
    try:
        b.start_agent()
        wait_log(b, r"edgelet started")
        time.sleep(settle)
        base = vmrss_mb(b.proc.pid)
        b.proc.terminate()
        b.proc.wait(timeout=30)
        b.start_agent(*api_flags(b))
        port = int(wait_log(b, r"Node API listening.*?port=(\d+)")[1])
        time.sleep(settle)
        idle = vmrss_mb(b.proc.pid)
        with client(b, port) as c:
            for path in ("/stats/summary", "/metrics/resource", "/metrics/cadvisor", "/pods", "/metrics"):
                c.get(path).raise_for_status()
        time.sleep(settle)
        served = vmrss_mb(b.proc.pid)
        return base, idle, served
    finally:
        b.close()


def latency_run(pods: int, samples: int) -> tuple[list[float], list[float], int]:
    b = Bench("nodeapi-lat")
    try:
        b.start_agent(*api_flags(b))
        port = int(wait_log(b, r"Node API listening.*?port=(\d+)")[1])
        for i in range(pods):
            b.put_manifest(f"p{i}.yaml", pod_manifest(f"p{i}", "sleep 3600"))
        with client(b, port) as c:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                body = c.get("/stats/summary").json()
                if len(body["pods"]) == pods and all(p.get("containers") for p in body["pods"]):
                    break
                time.sleep(1)
            else:
                raise TimeoutError("pods did not all run")
            fresh, cached = [], []
            for _ in range(samples):
                time.sleep(0.7)  # past the 0.5 s cache: a full collection each time
                t = time.perf_counter()
                c.get("/stats/summary").raise_for_status()
                fresh.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                r = c.get("/stats/summary")
                cached.append((time.perf_counter() - t) * 1000)
            return fresh, cached, len(r.content)
    finally:
        b.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--pods", type=int, default=20)
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--settle", type=float, default=5.0)
    args = ap.parse_args()
    print(f"machine: {machine()}")
    rows = [rss_run(args.settle) for _ in range(args.runs)]
    base, idle, served = (statistics.median(r[i] for r in rows) for i in range(3))
    print(
        f"agent RSS, 0 pods, median of {args.runs}: without node API {base:.1f} MB; with it (TLS, idle) "
        f"{idle:.1f} MB (+{idle - base:.1f}); after serving stats and metrics {served:.1f} MB (+{served - base:.1f})"
    )
    fresh, cached, size = latency_run(args.pods, args.samples)
    print(
        f"/stats/summary over TLS (keep-alive) with {args.pods} pods, {args.samples} samples, body {size} bytes: "
        f"fresh collection p50 {percentile(fresh, 0.5):.1f} ms, p90 {percentile(fresh, 0.9):.1f} ms; "
        f"cached p50 {percentile(cached, 0.5):.1f} ms"
    )


if __name__ == "__main__":
    main()
