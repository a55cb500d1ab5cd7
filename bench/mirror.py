"""The apiserver link's cost: requests per minute in steady state with N pods, time to resync after an outage,
and the RSS `--kubeconfig` adds.

Run as root: `.venv/bin/python bench/mirror.py [--pods 20] [--window 60] [--outage 20]`. Runs a real
kube-apiserver and etcd on loopback (tools/kube-apiserver.sh builds them once). Requests are counted by
edgelet's client (every request it sends, watches included), as `edgelet node -o json` reports them.
Default intervals: lease renewal 10 s, node status check 10 s (patched only when changed), report 5 min.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _harness import Bench, machine, pod_manifest
from footprint import memory, running_pods

from edgelet.testing.apiserver import ApiServer, kube_bin_dir

NODE = "bench"


def node_state(b: Bench) -> dict:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "edgelet",
            "node",
            "-o",
            "json",
            "--run-dir",
            str(b.paths.run_dir),
            "--root-dir",
            str(b.paths.root_dir),
            "--config",
            "/dev/null",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return json.loads(out.stdout) if out.stdout.startswith("{") else {}


def wait(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            v = pred()
        except (OSError, ValueError, KeyError):
            v = None
        if v:
            return v
        time.sleep(0.2)
    raise SystemExit(f"timed out waiting for {what}")


def synced_mirrors(api: ApiServer, n: int) -> bool:
    items = api.get(f"/api/v1/pods?fieldSelector=spec.nodeName={NODE}")["items"]
    return sum(1 for p in items if (p.get("status") or {}).get("phase") == "Running") >= n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pods", type=int, default=20)
    ap.add_argument("--window", type=float, default=60.0)
    ap.add_argument("--outage", type=float, default=20.0)
    ap.add_argument("--settle", type=float, default=5.0)
    args = ap.parse_args()
    b = Bench("mirror")
    api = ApiServer(b.base / "apiserver", kube_bin_dir())
    try:
        (b.base / "apiserver").mkdir()
        api.node_token(NODE)
        api.start()
        kubeconfig = api.kubeconfig(b.base / "kubeconfig", token=api.node_token(NODE))
        for i in range(args.pods):
            b.put_manifest(f"p{i}.yaml", pod_manifest(f"p{i}", "exec sleep 3600"))
        # 1. RSS without the apiserver link, then the same agent (adopting the same pods) with it.
        proc = b.start_agent()
        wait(lambda: running_pods(b) >= args.pods, 180, "pods running")
        time.sleep(args.settle)
        rss_plain, pss_plain = memory(proc.pid)
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        proc = b.start_agent("--kubeconfig", str(kubeconfig))
        wait(lambda: synced_mirrors(api, args.pods), 180, "mirrors Running")
        wait(lambda: node_state(b).get("queue_depth") == 0, 120, "the queue drained")
        time.sleep(args.settle)
        rss_kc, pss_kc = memory(proc.pid)
        # 2. Steady state: requests over the window.
        r0 = node_state(b)["requests"]
        time.sleep(args.window)
        r1 = node_state(b)["requests"]
        per_min = (r1 - r0) * 60.0 / args.window
        # 3. An outage with a change inside it, then time until the cluster is current again.
        resyncs = node_state(b)["resyncs"]
        api.stop()
        time.sleep(args.outage)
        api.start()
        t0 = time.monotonic()
        wait(
            lambda: (s := node_state(b)) and s["link"] == "up" and s["resyncs"] > resyncs and s["queue_depth"] == 0,
            300,
            "the resync",
        )
        resync = time.monotonic() - t0
    finally:
        b.close()
        api.stop()
    print(f"machine: {machine()}")
    print(
        f"requests to the apiserver, steady state with {args.pods} pods: {per_min:.1f}/min "
        f"(lease renewals alone: 6/min)"
    )
    print(f"time from the apiserver back (after a {args.outage:.0f} s outage) to a full resync done: {resync:.1f} s")
    print(
        f"agent RSS with {args.pods} pods: {rss_plain:.1f} MB standalone, {rss_kc:.1f} MB with --kubeconfig "
        f"(+{rss_kc - rss_plain:.1f} MB; PSS {pss_plain:.1f} -> {pss_kc:.1f} MB)"
    )


if __name__ == "__main__":
    main()
