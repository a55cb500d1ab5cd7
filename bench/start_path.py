"""The runtime's own start path, step by step: a pod's sandbox and container created and started through
`RuncRuntime` (no agent, no file watch), and the same with the bundle files written without their fsync, the
most that leaving the fsyncs for later could save. The two are interleaved, so a noisy machine's drift falls
on both alike. Also the cost of one bundle file written each way.

With `--cni` (issue 25), the same for a pod on a CNI bridge of the bench's own (bridge, host-local, portmap,
loopback): the sandbox's two halves (its namespaces, then ADD), the first container's create serial after ADD
(the code before) and beside it (the sync's order now), interleaved, and each step's own time.

Run as root: `.venv/bin/python bench/start_path.py [--pods 20] [--cni]`. Prints medians.
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
from _harness import IMAGE, Bench, machine, percentile

from edgelet.api.types import Container, ObjectMeta, Pod, PodSpec
from edgelet.runtime import bundle as bl
from edgelet.runtime.runc_runtime import RuncRuntime

SYNCED, UNSYNCED = "fsync on the path (as edgelet does)", "no fsync at all"
STEPS = ("run_sandbox", "create_container", "start_container")


def _pod(name: str) -> Pod:
    return Pod(
        api_version="v1",
        kind="Pod",
        metadata=ObjectMeta(name=name, namespace="default", uid=str(uuid.uuid4()), annotations={}),
        spec=PodSpec(
            containers=[
                Container(name="main", image=IMAGE, command=["sleep", "3600"], image_pull_policy="IfNotPresent")
            ],
            restart_policy="Always",
            termination_grace_period_seconds=1,
            dns_policy="Default",
        ),
    )


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


SERIAL, BESIDE = "create after ADD (serial)", "create beside ADD"
CNI_STEPS = ("create_sandbox", "ADD (start_sandbox)", "create_container", "ADD | create", "start_container")


async def run_cni(b: Bench, pods: int, conf: Path) -> dict[str, dict[str, list[float]]]:
    """The CNI start path, serial and overlapped, interleaved: steps in ms per variant."""
    from edgelet.images.store import ImageStore
    from edgelet.network.manager import PodNetwork

    (image,) = ImageStore(b.base / "store").import_archive(b.archive)
    net = PodNetwork(conf, ["/usr/lib/cni"], b.paths.run_dir / "netns", b.paths.root_dir / "cni")
    rt = RuncRuntime(b.paths, network=net)
    times: dict[str, dict[str, list[float]]] = {v: {s: [] for s in (*CNI_STEPS, "total")} for v in (SERIAL, BESIDE)}

    async def timed(aw):
        t = time.perf_counter()
        out = await aw
        return out, (time.perf_counter() - t) * 1000

    for i in range(pods * 2):
        variant = BESIDE if i % 2 else SERIAL
        pod = _pod(f"c{i}")
        container = pod.spec.containers[0]
        t0 = time.perf_counter()
        sandbox = await rt.create_sandbox(pod, 0)
        t1 = time.perf_counter()
        if variant == SERIAL:
            sandbox, add = await timed(rt.start_sandbox(pod, sandbox))
            cid, create = await timed(rt.create_container(pod, container, sandbox, image, 0))
            both = add + create
        else:
            (sandbox, add), (cid, create) = await asyncio.gather(
                timed(rt.start_sandbox(pod, sandbox)), timed(rt.create_container(pod, container, sandbox, image, 0))
            )
            both = (time.perf_counter() - t1) * 1000
        t2 = time.perf_counter()
        await rt.start_container(cid)
        t3 = time.perf_counter()
        for step, took in zip(
            (*CNI_STEPS, "total"), ((t1 - t0) * 1000, add, create, both, (t3 - t2) * 1000, (t3 - t0) * 1000)
        ):
            times[variant][step].append(took)
        await rt.stop_container(cid, 0)
        await rt.stop_sandbox(sandbox.id)
        await rt.remove_pod(pod.metadata.uid)
    return times


def main_cni(pods: int) -> None:
    import subprocess

    from start_latency import cni_conf  # the bench's own bridge network, as start_latency.py uses

    b = Bench("start-path-cni")
    bridge = None
    try:
        conf, bridge = cni_conf(b.base)
        times = asyncio.run(run_cni(b, pods, conf))
    finally:
        if bridge:
            from edgelet.network.iptables import remove_tagged

            asyncio.run(remove_tagged(f"bench-{bridge}", key="name"))
            subprocess.run(["ip", "link", "del", bridge], capture_output=True)
        b.close()
    print(f"machine: {machine()}")
    for variant, steps in times.items():
        parts = ", ".join(f"{s} {statistics.median(steps[s]):.1f}" for s in CNI_STEPS)
        print(
            f"{variant}: CNI start path median {statistics.median(steps['total']):.1f} ms, p90"
            f" {percentile(steps['total'], 0.9):.1f} ms ({parts} ms; {len(steps['total'])} pods, interleaved)"
        )
    gain = statistics.median(times[SERIAL]["total"]) - statistics.median(times[BESIDE]["total"])
    print(f"creating the container beside ADD saves {gain:.1f} ms a pod start (difference of the medians)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pods", type=int, default=20, help="pods per variant")
    ap.add_argument("--cni", action="store_true", help="the CNI start path, serial and beside ADD (see above)")
    args = ap.parse_args()
    if args.cni:
        main_cni(args.pods)
        return
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
        print(
            f"{variant}: start path median {statistics.median(steps['total']):.1f} ms, p90"
            f" {percentile(steps['total'], 0.9):.1f} ms ({parts} ms; {len(steps['total'])} pods, interleaved)"
        )
    gain = statistics.median(times[SYNCED]["total"]) - statistics.median(times[UNSYNCED]["total"])
    print(f"the most leaving the fsyncs for later could save: {gain:.1f} ms a pod start (difference of the medians)")


if __name__ == "__main__":
    main()
