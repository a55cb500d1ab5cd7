"""The runtime's own start path, step by step: a pod's sandbox and container created and started through
`RuncRuntime` (no agent, no file watch), and the same with the bundle files written without their fsync, the
most that leaving the fsyncs for later could save. The two are interleaved, so a noisy machine's drift falls
on both alike. Also the cost of one bundle file written each way.

Run as root: `.venv/bin/python bench/start_path.py [--pods 20]`. Prints medians.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import IMAGE, Bench, machine, percentile  # noqa: E402

from edgelet.api.types import Container, ObjectMeta, Pod, PodSpec  # noqa: E402
from edgelet.runtime import bundle as bl  # noqa: E402
from edgelet.runtime.runc_runtime import RuncRuntime  # noqa: E402

SYNCED, UNSYNCED = "fsync on the path (as edgelet does)", "no fsync at all"
STEPS = ("run_sandbox", "create_container", "start_container")


def _pod(name: str) -> Pod:
    return Pod(api_version="v1", kind="Pod",
               metadata=ObjectMeta(name=name, namespace="default", uid=str(uuid.uuid4()), annotations={}),
               spec=PodSpec(containers=[Container(name="main", image=IMAGE, command=["sleep", "3600"],
                                                  image_pull_policy="IfNotPresent")],
                            restart_policy="Always", termination_grace_period_seconds=1, dns_policy="Default"))


def write_unsynced(path: Path, content: str, mode: int = 0o600, *, durable: bool = True) -> None:
    """bundle.write_file without the fsync: temp file and rename only."""
    tmp = path.with_name(f".{path.name}.bench")
    tmp.write_text(content)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def file_cost(directory: Path, n: int = 50) -> tuple[float, float]:
    """Median ms of writing one 2 kB bundle file, with its fsync and without."""
    out = []
    for write in (bl.write_file, write_unsynced):
        times = []
        for i in range(n):
            t = time.perf_counter()
            write(directory / f"f{i}", "x" * 2000)
            times.append((time.perf_counter() - t) * 1000)
        out.append(statistics.median(times))
    return out[0], out[1]


async def run(b: Bench, pods: int) -> dict[str, dict[str, list[float]]]:
    from edgelet.images.store import ImageStore

    (image,) = ImageStore(b.base / "store").import_archive(b.archive)
    rt = RuncRuntime(b.paths)
    real = bl.write_file
    times: dict[str, dict[str, list[float]]] = {v: {s: [] for s in (*STEPS, "total")} for v in (SYNCED, UNSYNCED)}
    for i in range(pods * 2):
        variant = UNSYNCED if i % 2 else SYNCED
        if variant == UNSYNCED:
            bl.write_file = write_unsynced  # type: ignore[assignment]
        pod = _pod(f"p{i}")
        try:
            t0 = time.perf_counter()
            sandbox = await rt.run_sandbox(pod, 0)
            t1 = time.perf_counter()
            cid = await rt.create_container(pod, pod.spec.containers[0], sandbox, image, 0)
            t2 = time.perf_counter()
            await rt.start_container(cid)
            t3 = time.perf_counter()
        finally:
            bl.write_file = real  # type: ignore[assignment]
        for step, took in zip((*STEPS, "total"), (t1 - t0, t2 - t1, t3 - t2, t3 - t0)):
            times[variant][step].append(took * 1000)
        await rt.stop_container(cid, 0)
        await rt.stop_sandbox(sandbox.id)
        await rt.remove_pod(pod.metadata.uid)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pods", type=int, default=20, help="pods per variant")
    args = ap.parse_args()
    b = Bench("start-path")
    try:
        times = asyncio.run(run(b, args.pods))
        with tempfile.TemporaryDirectory(dir=b.paths.root_dir) as d:
            synced, unsynced = file_cost(Path(d))
    finally:
        b.close()
    print(f"machine: {machine()}")
    print(f"one bundle file (2 kB): with its fsync {synced:.2f} ms, without {unsynced:.2f} ms (median of 50)")
    for variant, steps in times.items():
        parts = ", ".join(f"{s} {statistics.median(steps[s]):.1f}" for s in STEPS)
        print(f"{variant}: start path median {statistics.median(steps['total']):.1f} ms, p90"
              f" {percentile(steps['total'], 0.9):.1f} ms ({parts} ms; {len(steps['total'])} pods, interleaved)")
    gain = statistics.median(times[SYNCED]["total"]) - statistics.median(times[UNSYNCED]["total"])
    print(f"the most leaving the fsyncs for later could save: {gain:.1f} ms a pod start (difference of the medians)")


if __name__ == "__main__":
    main()
