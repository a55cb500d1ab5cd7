"""Manifest-to-running latency measured round by round, so that every ratio compares starts made under the same
load: each round starts one pod on edgelet (its default handler crun unless --handler says otherwise), one on
another checkout's edgelet beside it (--before DIR: the code before a change), and raw runc and raw crun's pause
+ container by hand, in an order that rotates from round to round.

bench/start_latency.py measures pass after pass (all of edgelet's pods, then each baseline's): on a machine
shared with other work, whose load moves 2x within a minute, its ratios compare different minutes.

Run as root: `.venv/bin/python bench/start_paired.py [--rounds 12] [--before /path/to/other/checkout]`. Prints
each series' median and p90, and the median of the per-round ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Bench, RawRunc, machine, percentile, pod_manifest, wait_file


def agent(name: str, handler: str, source: Path | None) -> tuple[Bench, Path]:
    """A bench with its agent running (from `source`, else this checkout) and its warm-up pod started."""
    b = Bench(name)
    out = b.base / "out"
    out.mkdir()
    os.chmod(out, 0o777)
    b.start_agent("--runtime-handler", handler, **({"source": source} if source else {}))
    b.put_manifest("warm.yaml", pod_manifest("warm", "touch /out/warm; exec sleep 3600", host_dir=str(out)))
    wait_file(out / "warm", timeout=120)
    return b, out


def edgelet_start(b: Bench, out: Path, name: str) -> Callable[[], float]:
    def run() -> float:
        t0 = b.put_manifest(
            f"{name}.yaml", pod_manifest(name, f"touch /out/{name}; exec sleep 3600", host_dir=str(out))
        )
        return wait_file(out / name, timeout=60) - t0

    return run


def raw_start(raw: RawRunc, out: Path, i: int) -> Callable[[], float]:
    def run() -> float:
        raw.prepare(i, f"touch /out/{raw.tag}{i}; exec sleep 3600")
        t0 = time.monotonic()
        raw.start(i)
        return wait_file(out / f"{raw.tag}{i}") - t0

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--handler", default="crun", help="edgelet's default runtime handler (crun)")
    ap.add_argument("--before", type=Path, help="another checkout whose agent runs beside this one's")
    args = ap.parse_args()
    benches: list[Bench] = []
    raws: list[RawRunc] = []
    series: dict[str, list[float]] = {}
    try:
        after, out = agent("paired", args.handler, None)
        benches.append(after)
        starts: dict[str, Callable[[int], Callable[[], float]]] = {
            f"edgelet on {args.handler}": lambda i: edgelet_start(after, out, f"a{i}")
        }
        if args.before is not None:
            before, before_out = agent("paired-before", args.handler, args.before.resolve())
            benches.append(before)
            starts[f"edgelet on {args.handler}, before"] = lambda i: edgelet_start(before, before_out, f"b{i}")
        # Raw baselines re-run this agent's own bundles (RawRunc copies them), their output in its out dir.
        for runtime in ("runc", "crun"):
            raw = RawRunc(after, f"raw{runtime}", runtime=runtime)
            raws.append(raw)
            starts[f"raw {runtime} pause + container"] = lambda i, raw=raw: raw_start(raw, out, i)
        series = {label: [] for label in starts}
        labels = list(starts)
        for i in range(args.rounds):
            for label in labels[i % len(labels) :] + labels[: i % len(labels)]:
                series[label].append(starts[label](i)())
                time.sleep(0.2)  # each start measured alone
    finally:
        for raw in raws:
            raw.close()
        for b in benches:
            b.close()
    print(f"machine: {machine()}")
    print(f"rounds: {args.rounds}, one start of each series per round, the order rotating")
    for label, values in series.items():
        print(f"{label}: median {statistics.median(values) * 1000:.1f} ms  p90 {percentile(values, 0.9) * 1000:.1f} ms")
    edgelet = series[f"edgelet on {args.handler}"]
    for label, values in series.items():
        if label == f"edgelet on {args.handler}":
            continue
        ratios = [a / b for a, b in zip(edgelet, values)]
        print(
            f"edgelet on {args.handler} / {label}: median of the per-round ratios {statistics.median(ratios):.2f}x"
            f" (medians {statistics.median(edgelet) / statistics.median(values):.2f}x)"
        )


if __name__ == "__main__":
    main()
