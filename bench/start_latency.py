"""Manifest-to-running latency: from a manifest's atomic rename into the directory to the
container's process running, against raw `runc create`+`start` of the same two bundles.

A second baseline runs the same bundles through conmon by hand, as edgelet
does (one conmon per container, like CRI-O): the floor of any conmon-based agent.
Where crun is installed (and can run here: see docs/runtime-handlers.md), the
same run measures edgelet with crun as its default handler and raw crun (pause +
container, and the container alone), and prints edgelet-on-crun's ratios to raw
runc and raw crun (targets: at most 0.6x and 1.1x).

Run as root: `.venv/bin/python bench/start_latency.py [--pods 20] [--no-crun]`. Prints median and p90.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Bench, RawRunc, machine, memory_mb, percentile, pod_manifest, wait_file


def edgelet_latencies(b: Bench, n: int, out_dir: Path, *extra: str, prefix: str = "p") -> list[float]:
    b.start_agent(*extra)
    # Warm-up pod: the image import and the first sandbox build are one-time costs, not per-pod latency.
    warm = f"{prefix}warmup"
    t0 = b.put_manifest(
        f"{warm}.yaml", pod_manifest(warm, f"touch /out/{warm}; exec sleep 3600", host_dir=str(out_dir))
    )
    wait_file(out_dir / warm, timeout=60)
    lat = []
    for i in range(n):
        name = f"{prefix}{i}"
        t0 = b.put_manifest(
            f"{name}.yaml", pod_manifest(name, f"touch /out/{name}; exec sleep 3600", host_dir=str(out_dir))
        )
        t1 = wait_file(out_dir / name)
        lat.append(t1 - t0)
        time.sleep(0.2)  # let the agent settle so pods are measured one at a time
    return lat


def baseline(
    b: Bench,
    n: int,
    out_dir: Path,
    *,
    conmon: bool,
    prepared: list[float] | None = None,
    alone: bool = False,
    runtime: str = "runc",
) -> list[float]:
    """Re-run edgelet's own bundles (pause sandbox + container) by hand, n times: `runc create` + `start`,
    or with `conmon` running `runc create` as edgelet does (the floor any conmon-based agent has).
    The bundles are written and the overlay rootfs mounted before the clock starts; how long that took
    goes to `prepared` (edgelet's own latency includes it)."""
    tag = ("alone" if alone else "conmon" if conmon else "runc") + ("" if runtime == "runc" else runtime)
    raw = RawRunc(b, tag, conmon=conmon, alone=alone, runtime=runtime)
    lat = []
    try:
        for i in range(n):
            t = time.monotonic()
            raw.prepare(i, f"touch /out/{tag}{i}; exec sleep 3600")
            t0 = time.monotonic()
            if prepared is not None:
                prepared.append(t0 - t)
            raw.start(i)
            t1 = wait_file(out_dir / f"{tag}{i}")
            lat.append(t1 - t0)
    finally:
        raw.close()
    return lat


def run_chain(conf: Path, command: str, cid: str, netns: Path) -> None:
    """The conflist's plugins run by hand, as the CNI spec says a runtime runs them: in order for ADD (each
    given the previous result), in reverse for DEL."""
    doc = json.loads(next(conf.glob("*.conflist")).read_text())
    plugins = doc["plugins"] if command == "ADD" else list(reversed(doc["plugins"]))
    env = {
        "PATH": os.environ.get("PATH", ""),
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": cid,
        "CNI_NETNS": str(netns),
        "CNI_IFNAME": "eth0",
        "CNI_PATH": "/usr/lib/cni",
    }
    prev = None
    for plugin in plugins:
        stdin = {"cniVersion": doc["cniVersion"], "name": doc["name"], **plugin}
        if prev is not None:
            stdin["prevResult"] = prev
        done = subprocess.run(
            [f"/usr/lib/cni/{plugin['type']}"],
            input=json.dumps(stdin).encode(),
            env=env,
            capture_output=True,
            check=command == "ADD",
        )
        if command == "ADD":
            prev = json.loads(done.stdout)


def baseline_cni(b: Bench, n: int, out_dir: Path, conf: Path) -> list[float]:
    """raw runc of the container alone, in a network namespace made and attached by the same plugin chain run
    by hand just before (the clock runs from the namespace's creation to the container running)."""
    from edgelet.network import netns as netns_mod

    raw = RawRunc(b, "cni", alone=True)
    lat = []
    attached: list[tuple[str, Path]] = []
    try:
        for i in range(n):
            raw.prepare(i, f"touch /out/cni{i}; exec sleep 3600")
            path = b.base / "baseline-netns" / f"cni{i}"
            t0 = time.monotonic()
            netns_mod.create(path)
            attached.append((f"cni{i}", path))
            run_chain(conf, "ADD", f"cni{i}", path)
            raw.netns[i] = path
            raw.start(i)
            t1 = wait_file(out_dir / f"cni{i}")
            lat.append(t1 - t0)
    finally:
        raw.close()
        for cid, path in attached:
            run_chain(conf, "DEL", cid, path)
            netns_mod.remove(path)
    return lat


def cni_conf(base: Path) -> tuple[Path, str]:
    """A bridge network of the bench's own (its bridge name is returned for removal)."""
    import secrets

    bridge = f"edb{secrets.token_hex(4)}"
    conf = base / "cni"
    conf.mkdir()
    (conf / "10-bench.conflist").write_text(
        json.dumps(
            {
                "cniVersion": "1.0.0",
                "name": f"bench-{bridge}",
                "plugins": [
                    {
                        "type": "bridge",
                        "bridge": bridge,
                        "isGateway": True,
                        "ipMasq": True,
                        "ipam": {
                            "type": "host-local",
                            "dataDir": str(base / "ipam"),
                            "ranges": [[{"subnet": "10.231.77.0/24"}]],
                        },
                    },
                    {"type": "portmap", "capabilities": {"portMappings": True}},
                    {"type": "loopback"},
                ],
            }
        )
    )
    return conf, bridge


def crun_usable() -> bool:
    """crun is installed and this machine's cgroups let it run (a hybrid layout's cgroup2 mount holds nothing)."""
    import shutil

    from edgelet.cgroups.hybrid import problem

    return shutil.which("crun") is not None and problem() is None


def clear_pods(b: Bench, timeout: float = 300) -> None:
    """Remove every manifest and wait for the agent to remove the pods (their dirs gone)."""
    for manifest in b.manifests.iterdir():
        manifest.unlink()
    deadline = time.monotonic() + timeout
    pods = b.paths.root_dir / "pods"
    while any(pods.iterdir()) if pods.is_dir() else False:
        if time.monotonic() > deadline:
            raise SystemExit(f"the agent did not remove the pods within {timeout:g}s")
        time.sleep(0.2)


def stop_agent(b: Bench) -> None:
    if b.proc is not None:
        b.proc.terminate()
        b.proc.wait(timeout=60)
        b.proc = None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pods", type=int, default=20)
    ap.add_argument("--no-cni", action="store_true", help="skip the CNI bridge-networking pass")
    ap.add_argument("--no-crun", action="store_true", help="skip the crun passes (edgelet on crun, raw crun)")
    args = ap.parse_args()
    b = Bench("latency")
    cni: list[float] = []
    cni_raw: list[float] = []
    on_crun: list[float] = []
    rss = {}
    crun = not args.no_crun and crun_usable()
    bridge = None
    try:
        out_dir = b.base / "out"
        out_dir.mkdir()
        os.chmod(out_dir, 0o777)
        ed = edgelet_latencies(b, args.pods, out_dir)
        rss["loopback"] = memory_mb(b.proc.pid)[0]
        if not args.no_cni and Path("/usr/lib/cni/bridge").exists():
            stop_agent(b)
            conf, bridge = cni_conf(b.base)
            cni = edgelet_latencies(
                b, args.pods, out_dir, f"--cni-conf-dir={conf}", "--cni-bin-dir=/usr/lib/cni", prefix="n"
            )
            rss["cni"] = memory_mb(b.proc.pid)[0]
        if crun:
            # The same agent with crun as the default handler, on a node emptied first (as the runc pass
            # started): new pods run on crun.
            clear_pods(b)
            stop_agent(b)
            on_crun = edgelet_latencies(b, args.pods, out_dir, "--runtime-handler", "crun", prefix="c")
        prep: list[float] = []
        base = baseline(b, args.pods, out_dir, conmon=False, prepared=prep)
        floor = baseline(b, args.pods, out_dir, conmon=True)
        alone = baseline(b, args.pods, out_dir, conmon=False, alone=True)
        if crun:
            raw_crun = baseline(b, args.pods, out_dir, conmon=False, runtime="crun")
            crun_alone = baseline(b, args.pods, out_dir, conmon=False, alone=True, runtime="crun")
        if cni:
            cni_raw = baseline_cni(b, args.pods, out_dir, conf)
    finally:
        b.close()
        if bridge:
            import asyncio

            from edgelet.network.iptables import remove_tagged

            asyncio.run(remove_tagged(f"bench-{bridge}", key="name"))  # the pods' masquerade rules
            subprocess.run(["ip", "link", "del", bridge], capture_output=True)
    print(f"machine: {machine()}")
    print(
        f"pods: {args.pods} (1 busybox container each, image present; edgelet's default sandbox, the raw "
        f"baselines with a pause process except 'alone')"
    )
    rows = [("edgelet  rename->running", ed)]
    if cni:
        rows.append(("edgelet with CNI bridge ", cni))
    rows += [
        ("raw runc create+start x2", base),
        ("conmon+runc by hand x2  ", floor),
        ("raw runc, container alone in a fresh netns", alone),
    ]
    if cni_raw:
        rows.append(("raw runc, container alone + the CNI chain by hand", cni_raw))
    if on_crun:
        rows += [
            ("edgelet on crun rename->running", on_crun),
            ("raw crun create+start x2", raw_crun),
            ("raw crun, container alone in a fresh netns", crun_alone),
        ]
    for label, v in rows:
        print(f"{label}: median {statistics.median(v) * 1000:.1f} ms  p90 {percentile(v, 0.9) * 1000:.1f} ms")
    print(
        f"ratio to raw runc (median): {statistics.median(ed) / statistics.median(base):.2f}x"
        f"  (p90): {percentile(ed, 0.9) / percentile(base, 0.9):.2f}x"
    )
    print(f"ratio to conmon+runc by hand (median): {statistics.median(ed) / statistics.median(floor):.2f}x")
    print(
        f"ratio to raw runc of the container alone in a fresh netns (median): "
        f"{statistics.median(ed) / statistics.median(alone):.2f}x  (p90): {percentile(ed, 0.9) / percentile(alone, 0.9):.2f}x"
    )
    print(
        f"not in the raw baselines' time: writing the two bundles and mounting the overlay rootfs, median"
        f" {statistics.median(prep) * 1000:.1f} ms (edgelet does it between rename and running)"
    )
    if on_crun:
        for label, v, target in (
            ("raw runc create+start x2", base, 0.6),
            ("raw crun create+start x2", raw_crun, 1.1),
            ("raw crun, container alone", crun_alone, None),
        ):
            goal = f"  (target <= {target}x)" if target else ""
            print(
                f"edgelet on crun, ratio to {label} (median): {statistics.median(on_crun) / statistics.median(v):.2f}x"
                f"  (p90): {percentile(on_crun, 0.9) / percentile(v, 0.9):.2f}x{goal}"
            )
        print(
            f"edgelet on crun, ratio to edgelet on runc (median): {statistics.median(on_crun) / statistics.median(ed):.2f}x;"
            f" raw crun to raw runc (median): {statistics.median(raw_crun) / statistics.median(base):.2f}x"
        )
    elif not args.no_crun:
        print("crun: not measured (not installed, or it refuses this machine's cgroups: edgelet check says why)")
    if cni:
        print(
            f"CNI bridge networking, ratio to raw runc (median): {statistics.median(cni) / statistics.median(base):.2f}x;"
            f" added per pod (median): {(statistics.median(cni) - statistics.median(ed)) * 1000:.1f} ms"
        )
        if cni_raw:
            print(
                f"CNI bridge networking, ratio to raw runc of the container alone + the same plugin chain by hand"
                f" (median): {statistics.median(cni) / statistics.median(cni_raw):.2f}x"
                f"  (p90): {percentile(cni, 0.9) / percentile(cni_raw, 0.9):.2f}x"
            )
        print(
            f"agent RSS after {args.pods} pods: {rss['loopback']:.1f} MB loopback only; after {args.pods} more "
            f"with CNI: {rss['cni']:.1f} MB (a fresh agent that adopted the first {args.pods})"
        )


if __name__ == "__main__":
    main()
