"""Local API cost: agent RSS with and without the server (idle, 0 pods), import cost of h11 and prometheus-client,
and the time from process start to the first /healthz 200.

Run as root: `.venv/bin/python bench/server.py [--runs 5] [--settle 3]`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import httpx
from _harness import Bench, machine


def vmrss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def import_cost(modules: str) -> tuple[float, float]:
    """(ms, MB of RSS) that importing `modules` adds over asyncio alone, in a fresh interpreter."""
    code = (
        "import time, asyncio\n"
        "def rss():\n"
        "    return int([l for l in open('/proc/self/status') if l.startswith('VmRSS')][0].split()[1]) / 1024\n"
        "r0 = rss(); t = time.perf_counter()\n"
        f"for m in {modules!r}.split(','): __import__(m)\n"
        "print((time.perf_counter() - t) * 1000, rss() - r0)\n"
    )
    samples = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
        for _ in range(5)
    ]
    return statistics.median(float(s[0]) for s in samples), statistics.median(float(s[1]) for s in samples)


def time_to_healthz(b: Bench, port: int, timeout: float = 30.0) -> float:
    """Seconds from spawning the agent to its first /healthz 200 (polled every 5 ms)."""
    t0 = time.monotonic()
    proc = b.start_agent("--healthz-port", str(port))
    deadline = t0 + timeout
    with httpx.Client(timeout=1) as c:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"agent exited with {proc.returncode}; see {b.base / 'agent.log'}")
            try:
                if c.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                    return time.monotonic() - t0
            except httpx.TransportError:
                pass
            time.sleep(0.005)
    raise TimeoutError("no /healthz 200")


def stop(b: Bench) -> None:
    assert b.proc is not None
    b.proc.terminate()
    b.proc.wait(timeout=30)
    b.proc = None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--settle", type=float, default=3.0)
    args = ap.parse_args()
    b = Bench("server")
    with_server: list[float] = []
    without: list[float] = []
    healthz: list[float] = []
    try:
        for _ in range(args.runs):
            healthz.append(time_to_healthz(b, free_port()))
            time.sleep(args.settle)
            with httpx.Client(transport=httpx.HTTPTransport(uds=str(b.paths.run_dir / "edgelet.sock"))) as c:
                c.get("http://edgelet/metrics")  # a scraped agent: the metrics rendered once
            with_server.append(vmrss_mb(b.proc.pid))
            stop(b)
            os.environ["EDGELET_ENABLE_SERVER"] = "false"
            try:
                b.start_agent()
            finally:
                del os.environ["EDGELET_ENABLE_SERVER"]
            time.sleep(args.settle)
            without.append(vmrss_mb(b.proc.pid))
            stop(b)
    finally:
        b.close()
    h11_ms, h11_mb = import_cost("h11")
    prom_ms, prom_mb = import_cost("prometheus_client")
    print(f"machine: {machine()}")
    print(
        f"agent idle, 0 pods, median of {args.runs}: VmRSS {statistics.median(without):.1f} MB without the server, "
        f"{statistics.median(with_server):.1f} MB with it (+{statistics.median(with_server) - statistics.median(without):.1f} MB)"
    )
    print(
        f"import over asyncio: h11 {h11_ms:.0f} ms / {h11_mb:.1f} MB (at start); prometheus_client "
        f"{prom_ms:.0f} ms / {prom_mb:.1f} MB (only at the first /metrics scrape)"
    )
    print(
        f"process start -> first /healthz 200: median {statistics.median(healthz) * 1000:.0f} ms, "
        f"min {min(healthz) * 1000:.0f} ms, max {max(healthz) * 1000:.0f} ms ({args.runs} runs)"
    )


if __name__ == "__main__":
    main()
