"""Log rotation overhead under a flood: agent CPU seconds per GB a container logs, with rotation at kubelet's
defaults (10Mi x 5, checked every 10 s and sooner for a fast log, gzip) against the same flood with rotation
out of reach (a 100Gi max size: the agent only watches), in the same run; plus conmon's own CPU per GB and the
peak bytes the log held on disk.

Run as root: `.venv/bin/python bench/log_rotation.py [--seconds 20] [--flood yes|seq]`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Bench, machine, pod_manifest

from edgelet.runtime.logrotation import disk_bound

FLOODS = {
    "yes": "exec yes",  # the flood: one short line, again and again
    "seq": "exec seq 1 1000000000",  # numbered lines: less alike, gzip works harder
}
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def written_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    return 0


def conmon_of(b: Bench) -> int:
    for pidfile in b.paths.pods_dir.glob("*/containers/main/0/conmon.pid"):
        return int(pidfile.read_text().strip())
    raise LookupError("no conmon yet")


def log_bytes(b: Bench) -> int:
    seen: dict[int, int] = {}
    for path in (b.paths.log_dir / "pods").glob("*/main/*"):
        try:
            st = path.stat()
        except FileNotFoundError:
            continue
        seen[st.st_ino] = st.st_size
    return sum(seen.values())


def run(flood: str, seconds: float, rotation: tuple[str, ...]) -> dict[str, float]:
    b = Bench("logrot")
    try:
        agent = b.start_agent("--eviction-hard=", *rotation)
        b.put_manifest(
            "flood.yaml", pod_manifest("flood", "while [ ! -f /tmp/go ]; do sleep 0.1; done; " + FLOODS[flood])
        )
        deadline = time.monotonic() + 120
        while True:
            try:
                pid = conmon_of(b)
                break
            except (LookupError, ValueError, OSError):
                if time.monotonic() > deadline:
                    raise TimeoutError("the flood pod did not start") from None
                time.sleep(0.1)
        # Settle: the agent's start-up work is not the rotation's.
        time.sleep(3)
        rootfs = next(b.paths.pods_dir.glob("*/containers/main/0/rootfs"))
        agent_cpu0, conmon_cpu0, written0 = cpu_seconds(agent.pid), cpu_seconds(pid), written_bytes(pid)
        (rootfs / "tmp" / "go").touch()
        peak = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            peak = max(peak, log_bytes(b))
            time.sleep(0.05)
        agent_cpu, conmon_cpu = cpu_seconds(agent.pid) - agent_cpu0, cpu_seconds(pid) - conmon_cpu0
        gb = (written_bytes(pid) - written0) / 1e9
        return {"gb": gb, "agent": agent_cpu / gb, "conmon": conmon_cpu / gb, "peak_mb": peak / 2**20}
    finally:
        b.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="length of each flood")
    ap.add_argument("--flood", choices=sorted(FLOODS), default="yes")
    args = ap.parse_args()
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}")
    print(f"flood: `{FLOODS[args.flood]}` for {args.seconds:g} s per case")
    cases = [
        ("rotation at the defaults (10Mi x 5, gzip)", ()),
        ("rotation out of reach (100Gi): baseline", ("--container-log-max-size", "100Gi")),
    ]
    results = {}
    for label, flags in cases:
        r = run(args.flood, args.seconds, flags)
        results[label] = r
        print(
            f"{label:45s} logged {r['gb']:6.2f} GB   agent {r['agent']:6.2f} CPU s/GB   "
            f"conmon {r['conmon']:6.2f} CPU s/GB   peak on disk {r['peak_mb']:8.1f} MiB"
        )
    on, off = (results[label] for label, _ in cases)
    print(f"disk bound at the defaults (logrotation.disk_bound): {disk_bound(10 * 2**20, 5) / 2**20:.0f} MiB")
    print(f"rotation overhead: {on['agent'] - off['agent']:.2f} agent CPU s per GB logged")


if __name__ == "__main__":
    main()
