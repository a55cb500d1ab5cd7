"""Probe overhead: CPU seconds per 1,000 exec probes and per 1,000 httpGet probes through edgelet's probers,
against `runc exec` run by hand the same number of times in the same run.

Run as root: `.venv/bin/python bench/probes.py [--n 1000]`. One pod (pause sandbox + a busybox container
running `httpd` on 8080 inside the pod's network namespace) is made with edgelet's RuncRuntime; then:

- raw:  `runc --root R exec ID true` started N times with subprocess.run (the baseline);
- exec: N exec probes `true` through `edgelet.probes.probers.exec_probe` (runc exec with a timeout and a pid file);
- http: N httpGet probes through `http_probe` (socket opened in the pod's netns, HTTP/1.1 GET, 200).

CPU is user+system of this process plus its reaped children (runc and what it runs), from getrusage.
The three kinds run in interleaved rounds of 50 after one uncounted warm-up round each. With --n
below 1000 the figures are scaled to 1,000 and the script says so.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Bench, machine


def cpu() -> tuple[float, float]:
    """(this process, reaped children) CPU seconds, user + system."""
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime, c.ru_utime + c.ru_stime


def measure(fn) -> tuple[float, float, float]:
    """(own CPU, children CPU, wall) seconds spent in `fn()`."""
    s0, c0 = cpu()
    w0 = time.monotonic()
    fn()
    w1 = time.monotonic()
    s1, c1 = cpu()
    return s1 - s0, c1 - c0, w1 - w0


async def setup(b: Bench):
    from edgelet.api.types import Container, ObjectMeta, Pod, PodSpec
    from edgelet.images.store import ImageStore
    from edgelet.runtime.runc_runtime import RuncRuntime

    store = ImageStore(b.base / "store")
    (image,) = store.import_archive(b.archive)
    rt = RuncRuntime(b.paths)
    container = Container(
        name="web",
        image=image.references[0],
        image_pull_policy="IfNotPresent",
        termination_message_path="/dev/termination-log",
        command=["sh", "-c", "mkdir -p /www && echo ok > /www/index.html && exec httpd -f -p 8080 -h /www"],
    )
    pod = Pod(
        api_version="v1",
        kind="Pod",
        metadata=ObjectMeta(name="probe-bench", namespace="default", uid="probe-bench-uid", annotations={}),
        spec=PodSpec(
            containers=[container], restart_policy="Always", termination_grace_period_seconds=1, dns_policy="Default"
        ),
    )
    sandbox = await rt.run_sandbox(pod, 0)
    cid = await rt.create_container(pod, container, sandbox, image, 0)
    await rt.start_container(cid)
    return rt, pod, container, sandbox, cid


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="probes of each kind (default 1000)")
    args = ap.parse_args()
    n = args.n
    b = Bench("probes")
    rows: list = []
    try:
        from edgelet.api.types import HTTPGetAction, TCPSocketAction
        from edgelet.probes.machine import Result
        from edgelet.probes.probers import exec_probe, http_probe, tcp_probe
        from edgelet.probes.target import target_for

        loop = asyncio.new_event_loop()  # the agent's own loop: asyncio's, as in edgelet.app
        rt, pod, container, sandbox, cid = loop.run_until_complete(setup(b))
        target = target_for(cid, container, sandbox.pid, host_network=False)

        async def wait_up() -> None:
            for _ in range(200):
                if (await tcp_probe(TCPSocketAction(port=8080), target, 1.0)).result == Result.SUCCESS:
                    return
                await asyncio.sleep(0.05)
            raise RuntimeError("httpd did not come up in the pod")

        loop.run_until_complete(wait_up())
        runc_argv = rt.runc.argv("exec", cid, "true")

        chunk = min(50, n)

        def raw() -> None:
            for _ in range(chunk):
                subprocess.run(runc_argv, check=True, stdin=subprocess.DEVNULL, capture_output=True)

        async def execs() -> None:
            for _ in range(chunk):
                out = await exec_probe(rt, target, ["true"], 1.0)
                assert out.result == Result.SUCCESS, out

        async def https() -> None:
            action = HTTPGetAction(port=8080, path="/index.html", scheme="HTTP")
            for _ in range(chunk):
                out = await http_probe(action, target, 1.0)
                assert out.result == Result.SUCCESS, out

        kinds = {
            "runc exec by hand (subprocess.run)": raw,
            "edgelet exec probe (runc exec)": lambda: loop.run_until_complete(execs()),
            "edgelet httpGet probe (pod netns)": lambda: loop.run_until_complete(https()),
        }
        for fn in kinds.values():  # warm-up round, not counted: imports, first thread, caches
            fn()
        totals = {label: [0.0, 0.0, 0.0] for label in kinds}
        # Interleaved rounds, so drift on a shared machine touches every kind alike.
        for _ in range(n // chunk):
            for label, fn in kinds.items():
                for i, v in enumerate(measure(fn)):
                    totals[label][i] += v
        done = (n // chunk) * chunk
        scale = 1000 / done
        n = done
        for label, (own, children, wall) in totals.items():
            rows.append((label, own * scale, children * scale, (own + children) * scale, wall / done * 1000))
        loop.close()
    finally:
        b.close()
    print(f"machine: {machine()}")
    if n != 1000:
        print(f"note: {n} probes of each kind were run; CPU figures are scaled x{1000 / n:g} to 1,000")
    print(
        f"{'per 1,000 probes':38} {'edgelet CPU s':>13} {'children CPU s':>14} {'total CPU s':>11} {'wall ms/probe':>13}"
    )
    for label, own, children, total, wall in rows:
        print(f"{label:38} {own:13.2f} {children:14.2f} {total:11.2f} {wall:13.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
