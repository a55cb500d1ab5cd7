"""Manifest-to-running latency: from a manifest's atomic rename into the directory to the
container's process running, against raw `runc create`+`start` of the same two bundles.

Run as root: `.venv/bin/python bench/start_latency.py [--pods 20]`. Prints median and p90.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Bench, machine, percentile, pod_manifest, wait_file  # noqa: E402


def edgelet_latencies(b: Bench, n: int, out_dir: Path) -> list[float]:
    b.start_agent()
    # Warm-up pod: the image import and the first sandbox build are one-time costs, not per-pod latency.
    t0 = b.put_manifest("warmup.yaml", pod_manifest("warmup", "touch /out/warmup; exec sleep 3600", host_dir=str(out_dir)))
    wait_file(out_dir / "warmup", timeout=60)
    lat = []
    for i in range(n):
        name = f"p{i}"
        t0 = b.put_manifest(f"{name}.yaml", pod_manifest(name, f"touch /out/{name}; exec sleep 3600", host_dir=str(out_dir)))
        t1 = wait_file(out_dir / name)
        lat.append(t1 - t0)
        time.sleep(0.2)  # let the agent settle so pods are measured one at a time
    return lat


NS_FILE = {"network": "net", "mount": "mnt"}


def runc_baseline(b: Bench, n: int, out_dir: Path) -> list[float]:
    """Re-run edgelet's own bundles (pause sandbox + container) with runc by hand, n times."""
    # A file, not a pipe: the container's process inherits runc's stdio and would hold a pipe open forever.
    errors = open(b.base / "baseline-runc.err", "wb")
    from edgelet.runtime.rootfs import mount_rootfs, unmount_rootfs

    pod_dirs = [p for p in (b.paths.root_dir / "pods").iterdir() if (p / "sandbox" / "config.json").exists()]
    pod_dir = pod_dirs[0]
    sandbox_cfg = json.loads((pod_dir / "sandbox" / "config.json").read_text())
    cont_cfgs = sorted(pod_dir.glob("containers/*/*/config.json"))
    cont_cfg = json.loads(cont_cfgs[0].read_text())
    from edgelet.images.store import ImageStore

    image = ImageStore(b.paths.root_dir / "images").get("edgelet.local/busybox:1.36")
    root = b.base / "baseline-runc"
    runc = ["runc", "--root", str(root)]
    lat = []
    for i in range(n):
        work = b.base / "baseline" / str(i)
        sb = work / "sandbox"
        ct = work / "ctr"
        sb.mkdir(parents=True)
        ct.mkdir(parents=True)
        scfg = json.loads(json.dumps(sandbox_cfg))
        scfg["linux"]["cgroupsPath"] = f"{b.paths.cgroup_root}/baseline{i}/sandbox"
        scfg["annotations"] = {}
        (sb / "config.json").write_text(json.dumps(scfg))
        rootfs = mount_rootfs(image.layers, ct)
        ccfg = json.loads(json.dumps(cont_cfg))
        ccfg["root"]["path"] = str(rootfs)
        ccfg["linux"]["cgroupsPath"] = f"{b.paths.cgroup_root}/baseline{i}/ctr"
        ccfg["process"]["args"] = ["sh", "-c", f"touch /out/base{i}; exec sleep 3600"]
        ccfg["process"]["terminal"] = False
        ccfg["annotations"] = {}
        t0 = time.monotonic()
        subprocess.run([*runc, "create", "--bundle", str(sb), f"bs{i}"], check=True,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errors)
        subprocess.run([*runc, "start", f"bs{i}"], check=True)
        pid = json.loads(subprocess.run([*runc, "state", f"bs{i}"], capture_output=True, check=True).stdout)["pid"]
        for ns in ccfg["linux"]["namespaces"]:
            if "path" in ns:
                ns["path"] = f"/proc/{pid}/ns/{NS_FILE.get(ns['type'], ns['type'])}"
        (ct / "config.json").write_text(json.dumps(ccfg))
        subprocess.run([*runc, "create", "--bundle", str(ct), f"bc{i}"], check=True,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errors)
        subprocess.run([*runc, "start", f"bc{i}"], check=True)
        t1 = wait_file(out_dir / f"base{i}")
        lat.append(t1 - t0)
    for i in range(n):
        for cid in (f"bc{i}", f"bs{i}"):
            subprocess.run([*runc, "delete", "--force", cid], capture_output=True)
        unmount_rootfs(b.base / "baseline" / str(i) / "ctr")
    shutil.rmtree(root, ignore_errors=True)
    return lat


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pods", type=int, default=20)
    args = ap.parse_args()
    b = Bench("latency")
    try:
        out_dir = b.base / "out"
        out_dir.mkdir()
        os.chmod(out_dir, 0o777)
        ed = edgelet_latencies(b, args.pods, out_dir)
        base = runc_baseline(b, args.pods, out_dir)
    finally:
        b.close()
    print(f"machine: {machine()}")
    print(f"pods: {args.pods} (pause sandbox + 1 busybox container each, image present)")
    for label, v in (("edgelet  rename->running", ed), ("raw runc create+start x2", base)):
        print(f"{label}: median {statistics.median(v)*1000:.1f} ms  p90 {percentile(v, 0.9)*1000:.1f} ms")
    print(f"ratio (median): {statistics.median(ed)/statistics.median(base):.2f}x"
          f"  (p90): {percentile(ed, 0.9)/percentile(base, 0.9):.2f}x")


if __name__ == "__main__":
    main()
