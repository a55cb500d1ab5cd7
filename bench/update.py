"""Self-update (issue 31): time from a release appearing on the card to the new agent committed, and to a broken
one rolled back (one that exits at start; one that hangs before READY=1, killed by the loop's short start timeout
three times, with what the unit's TimeoutStartSec= makes of it); the workload's downtime across a good update (the same process before and
after: its pid and its start time in /proc); bytes written per update; and, given a frozen one-dir
(--onedir, e.g. dist/onedir/edgelet), the time and bytes of staging a real-size release.

The agent runs from this tree under packaging/launch and a loop playing systemd (edgelet/testing/serviceloop.py),
with real runc pods and real minisign signatures, as tests/e2e/test_self_update.py does.

Run as root: `.venv/bin/python bench/update.py [--onedir dist/onedir/edgelet]`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import REPO, machine

sys.path.insert(0, str(REPO))
from edgelet.runtime.layout import RuntimePaths
from edgelet.testing.cleanup import cleanup_all
from edgelet.testing.images import build_busybox_image
from edgelet.testing.signing import MinisignKey, trusted_dir
from edgelet.trust.keys import load_trusted_keys
from edgelet.update.release import own_arch, pack_release
from edgelet.update.stage import stage_release
from tests.e2e.conftest import IMAGE, AgentProc
from tests.e2e.test_self_update import START_TIMEOUT, boot


def proc_start(pid: int) -> str:
    """A process's start time in clock ticks since boot (field 22 of /proc/PID/stat): the same process keeps it."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]


def settle(device, version: int, timeout: float = 300.0) -> tuple[dict, float]:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        done = device.outcome(version)
        if done is not None:
            return done, time.monotonic() - start
        time.sleep(0.02)
    raise SystemExit(f"release {version} did not settle within {timeout}s")


def run_device(base: Path, archive: Path, kind: str) -> dict:
    paths = RuntimePaths(
        root_dir=base / "root",
        run_dir=base / "run",
        log_dir=base / "log",
        cgroup_root=f"/edgelet-bench-{uuid.uuid4().hex[:8]}",
    )
    for d in (paths.root_dir, paths.run_dir, paths.log_dir):
        d.mkdir(parents=True)
    agent = AgentProc(paths, base / "manifests", archive)
    device = boot(agent, base)
    try:
        cid, pid = device.sleeper()
        started = proc_start(pid)
        t0 = time.monotonic()
        device.publish(1001, kind)
        publish = time.monotonic() - t0
        done, seconds = settle(device, 1001)
        out = {"outcome": done["outcome"], "seconds": round(seconds + publish, 2), "reason": done.get("reason", "")}
        out["starts"] = len(device.loop.starts)
        if kind == "good":
            cid2, pid2 = device.sleeper()
            out["same_process"] = (cid2, pid2, proc_start(pid2)) == (cid, pid, started)
            started_entry = next(e for e in device.history() if e["outcome"] == "started")
            records = sum(p.stat().st_size for p in device.update_dir.iterdir() if p.is_file())
            out["payload_bytes"], out["record_bytes"] = started_entry.get("bytes", 0), records
        return out
    finally:
        device.loop.stop()
        cleanup_all(base, paths.runc_root, paths.cgroup_root)


def stage_onedir(onedir: Path, base: Path) -> dict:
    key = MinisignKey.generate(base / "k")
    trusted = trusted_dir(base / "k" / "trusted", key)
    archive = base / "edgelet-bench.tar.xz"
    t0 = time.monotonic()
    pack_release(onedir, archive, version=1001, arch=own_arch(), label="bench")
    pack = time.monotonic() - t0
    key.sign(archive, version=1001)
    t0 = time.monotonic()
    with open(archive, "rb") as f:
        staged = stage_release(
            f,
            Path(str(archive) + ".minisig").read_bytes(),
            name=str(archive),
            signature_name="sig",
            keys=load_trusted_keys(trusted),
            releases_dir=base / "releases",
            judge=lambda info, signed: None,
            now=time.time(),
        )
    return {
        "archive_bytes": archive.stat().st_size,
        "files": len(staged.info.files),
        "bytes_written": staged.bytes_written,
        "pack_seconds": round(pack, 1),
        "stage_seconds": round(time.monotonic() - t0, 2),
    }


def unit_start_timing() -> tuple[float, float]:
    """TimeoutStartSec= and RestartSec= of packaging/edgelet.service, in seconds (`90s`, `10min`)."""
    units = {"s": 1, "min": 60}
    found = {}
    for line in (REPO / "packaging" / "edgelet.service").read_text().splitlines():
        key, _, value = line.partition("=")
        if key in ("TimeoutStartSec", "RestartSec"):
            number = value.rstrip("smin")
            found[key] = float(number) * units[value[len(number) :] or "s"]
    return found["TimeoutStartSec"], found["RestartSec"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--onedir", type=Path, help="a frozen one-dir build to stage as a real-size release")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: the agent runs real runc pods")
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory(prefix="edgelet-bench-update-") as tmp:
        archive = build_busybox_image(Path(tmp) / "busybox.oci.tar", name=IMAGE, fmt="oci-archive")
        results = {}
        for kind in ("good", "exits", "hangs"):
            base = Path(tmp) / kind
            base.mkdir()
            results[kind] = run_device(base, archive, kind)
        if args.onedir:
            base = Path(tmp) / "onedir"
            base.mkdir()
            results["onedir"] = stage_onedir(args.onedir, base)
    good, bad = results["good"], results["exits"]
    print(
        f"good release, appeared -> committed:        {good['seconds']:.2f} s ({good['outcome']}, {good['starts']} starts)"
    )
    print(
        f"broken release (exits), appeared -> rolled back: {bad['seconds']:.2f} s ({bad['outcome']}: {bad['reason']})"
    )
    print(
        f"workload downtime across the good update:   {'0 s (same process: container id, pid, start time)' if good['same_process'] else 'RESTARTED'}"
    )
    print(
        f"bytes written per update: the release's files (here a {good['payload_bytes']}-byte entry script; "
        f"a real one-dir below) + {good['record_bytes']} bytes of records (trial, snapshot, history)"
    )
    hung, unit = results["hangs"], unit_start_timing()
    print(
        f"broken release (hangs), appeared -> rolled back: {hung['seconds']:.2f} s ({hung['outcome']}: "
        f"{hung['reason']}; start timeout {START_TIMEOUT:g} s here)"
    )
    print(
        f"  under the unit (TimeoutStartSec={unit[0]:g} s, RestartSec={unit[1]:g} s): "
        f"{hung['seconds'] + 3 * (unit[0] + unit[1] - START_TIMEOUT):.0f} s (three starts at the unit's timeout)"
    )
    if "onedir" in results:
        o = results["onedir"]
        print(
            f"real one-dir release: {o['files']} files, archive {o['archive_bytes'] / 1e6:.1f} MB, "
            f"staged {o['bytes_written'] / 1e6:.1f} MB written in {o['stage_seconds']} s (pack {o['pack_seconds']} s)"
        )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
