"""The agent's event loop measured: asyncio's own loop against uvloop in the same run (issue 25.5).

For each loop, in turn (the order alternates between rounds), on fresh dirs: start latency (a manifest's
atomic rename to its container running, pods one at a time, after a warm-up pod), the agent's RSS and PSS
with those pods running, then `--scale` pods written at once to a fresh agent, timed to every container
running, with the agent's CPU (itself and its runc children) and RSS at the end.

uvloop is a bench-only dependency (`pip install -e '.[bench]'`); the agent never imports it. The bench runs
the agent under uvloop through a shim that sets uvloop's policy before edgelet's own CLI (Python 3.11's
pidfd child watcher is asyncio's; uvloop waits for its children itself), and checks in the agent's
memory map that uvloop is loaded.

Run as root: `.venv/bin/python bench/loop.py [--pods 20] [--scale 100] [--rounds 1]`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Bench, cpu_split, machine, memory_mb, percentile, pod_manifest, wait_files
from start_latency import edgelet_latencies

SHIM = (
    "import asyncio, sys, uvloop\n"
    "asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())\n"
    "asyncio.set_child_watcher = lambda watcher: None  # uvloop's policy has none; it waits itself\n"
    "from edgelet.cli import main\n"
    "sys.exit(main())\n"
)


class LoopBench(Bench):
    """A Bench whose agent runs on `loop` ("asyncio" or "uvloop")."""

    def __init__(self, name: str, loop: str) -> None:
        super().__init__(f"{name}-{loop}")
        self.loop = loop

    def argv(self, *extra: str) -> list[str]:
        argv = super().argv(*extra)
        if self.loop == "uvloop":
            assert argv[1:3] == ["-m", "edgelet"], argv
            argv[1:3] = ["-c", SHIM]
        return argv


def loaded_uvloop(pid: int) -> bool:
    return "uvloop" in Path(f"/proc/{pid}/maps").read_text()


def latency_phase(loop: str, pods: int) -> dict[str, float]:
    b = LoopBench("loop-lat", loop)
    try:
        out = b.base / "out"
        out.mkdir()
        out.chmod(0o777)
        lat = edgelet_latencies(b, pods, out)
        assert b.proc is not None
        if loaded_uvloop(b.proc.pid) != (loop == "uvloop"):
            raise SystemExit(f"the agent meant to run on {loop} did not (uvloop mapped: {loaded_uvloop(b.proc.pid)})")
        time.sleep(3)  # settled, as footprint.py measures
        rss, pss = memory_mb(b.proc.pid)
    finally:
        b.close()
    return {"p50": statistics.median(lat) * 1000, "p90": percentile(lat, 0.9) * 1000, "rss": rss, "pss": pss}


def scale_phase(loop: str, n: int) -> dict[str, float]:
    b = LoopBench("loop-scale", loop)
    try:
        out = b.base / "out"
        out.mkdir()
        out.chmod(0o777)
        proc = b.start_agent()
        # Warm-up: the image import and the first sandbox are one-time costs, as in start_latency.py.
        b.put_manifest("warm.yaml", pod_manifest("warm", "touch /out/warm; exec sleep 3600", host_dir=str(out)))
        wait_files(out, {"warm"}, timeout=120, agent=proc)
        a0, k0 = cpu_split(proc.pid)
        names = [f"s{i}" for i in range(n)]
        t0 = time.monotonic()
        for name in names:
            b.put_manifest(f"{name}.yaml", pod_manifest(name, f"touch /out/{name}; exec sleep 3600", host_dir=str(out)))
        seen = wait_files(out, set(names), timeout=900, agent=proc)
        took = max(seen.values()) - t0
        a1, k1 = cpu_split(proc.pid)
        time.sleep(3)
        rss, pss = memory_mb(proc.pid)
    finally:
        b.close()
    return {"took": took, "agent_cpu": a1 - a0, "children_cpu": k1 - k0, "rss": rss, "pss": pss}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pods", type=int, default=20, help="pods of the start-latency phase")
    ap.add_argument("--scale", type=int, default=100, help="pods written at once in the scale phase")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--loops", default="asyncio,uvloop", help="the loops to run (asyncio alone: no uvloop needed)")
    args = ap.parse_args()
    loops = [x for x in ("asyncio", "uvloop") if x in args.loops.split(",")]
    version = "not used"
    if "uvloop" in loops:
        try:
            import uvloop
        except ImportError:
            raise SystemExit("uvloop is not installed: pip install -e '.[bench]'") from None
        version = uvloop.__version__
    print(f"machine: {machine()}; uvloop {version}")
    lat: dict[str, list[dict[str, float]]] = {"asyncio": [], "uvloop": []}
    scale: dict[str, list[dict[str, float]]] = {"asyncio": [], "uvloop": []}
    for r in range(args.rounds):
        order = loops if r % 2 == 0 else loops[::-1]
        for loop in order:
            lat[loop].append(latency_phase(loop, args.pods))
        for loop in order:
            scale[loop].append(scale_phase(loop, args.scale))

    def med(rows: list[dict[str, float]], key: str) -> float:
        return statistics.median(row[key] for row in rows)

    for loop in loops:
        print(
            f"{loop:8} start latency, {args.pods} pods one at a time: median {med(lat[loop], 'p50'):.1f} ms,"
            f" p90 {med(lat[loop], 'p90'):.1f} ms; agent with {args.pods + 1} pods VmRSS"
            f" {med(lat[loop], 'rss'):.1f} MB, PSS {med(lat[loop], 'pss'):.1f} MB"
        )
    for loop in loops:
        print(
            f"{loop:8} {args.scale} pods at once to every container running: {med(scale[loop], 'took'):.2f} s;"
            f" agent CPU {med(scale[loop], 'agent_cpu'):.2f} s, runc/conmon children"
            f" {med(scale[loop], 'children_cpu'):.2f} s; VmRSS after {med(scale[loop], 'rss'):.1f} MB,"
            f" PSS {med(scale[loop], 'pss'):.1f} MB"
        )
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    if len(loops) < 2:
        return
    a, u = lat["asyncio"], lat["uvloop"]
    print(
        f"uvloop / asyncio: start latency median {med(u, 'p50') / med(a, 'p50'):.2f}x,"
        f" {args.scale}-pod scale {med(scale['uvloop'], 'took') / med(scale['asyncio'], 'took'):.2f}x,"
        f" RSS {med(u, 'rss') - med(a, 'rss'):+.1f} MB  (rounds: {args.rounds})"
    )


if __name__ == "__main__":
    main()
