"""Idle flash writes: bytes edgelet (the agent and its pods' conmons) writes to storage per hour with 20 idle pods.

`/proc/<pid>/io` write_bytes (what reached the block layer on behalf of the
process) of the agent and of every conmon of its pods, sampled over a window
after the pods settled, extrapolated to an hour; also wchar (every write
call, tmpfs and pipes included) and the agent's own log output (which
journald would store). Then the audit: every file under the root, run and
log dirs modified during the window, so a periodic rewrite of unchanged
state is named, not only counted.

The pods run `sleep`, so they log nothing: what is measured is edgelet's own.
The window opens after the first image GC round (five minutes after start), whose first sweep creates
a lock file once. Run as root: `.venv/bin/python bench/flash_writes.py [--pods 20] [--window 300]`. The temp dirs are on
disk (not tmpfs), as /var/lib/edgelet is on a device.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Bench, machine, pod_manifest, running_pods

from edgelet.testing.cleanup import conmon_processes


def io(pid: int) -> dict[str, int]:
    out = {}
    try:
        for line in Path(f"/proc/{pid}/io").read_text().splitlines():
            key, _, value = line.partition(":")
            out[key] = int(value)
    except (OSError, ValueError):
        pass
    return out


def conmons(base: Path) -> list[int]:
    """conmon processes of this bench's pods (their command lines name the bench's dirs)."""
    return [pid for pid, argv in conmon_processes() if any(str(base) in a for a in argv)]


def changed_files(dirs: list[Path], since: float) -> list[tuple[str, int]]:
    """(path, size) of every regular file under `dirs` modified after `since` (epoch seconds)."""
    out = []
    for d in dirs:
        for root, _, files in os.walk(d):
            for name in files:
                p = Path(root) / name
                try:
                    st = p.lstat()
                except OSError:
                    continue
                if st.st_mtime > since and not p.is_symlink():
                    out.append((str(p), st.st_size))
    return sorted(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pods", type=int, default=20)
    ap.add_argument("--window", type=float, default=300.0, help="seconds measured after the pods settled")
    ap.add_argument("--settle", type=float, default=30.0)
    ap.add_argument(
        "--first-gc",
        type=float,
        default=330.0,
        help="seconds to wait for the first image GC round before the window opens (0: do not wait)",
    )
    args = ap.parse_args()
    import tempfile

    tempfile.tempdir = "/var/tmp"  # on disk: write_bytes counts only what reaches a block device
    # The frozen build (what a device runs) never writes bytecode; a source checkout would, for modules the
    # agent imports late, and that is not edgelet's state.
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    b = Bench("flash")
    try:
        proc = b.start_agent()
        for i in range(args.pods):
            b.put_manifest(f"p{i}.yaml", pod_manifest(f"p{i}", "exec sleep 3600"))
        deadline = time.monotonic() + 180
        while running_pods(b) < args.pods and time.monotonic() < deadline:
            time.sleep(0.5)
        n = running_pods(b)
        time.sleep(args.settle)
        # Steady state starts after the first image GC round (5 min after start), whose first sweep creates
        # the store's pull lock once: a one-off, not a periodic write.
        lock = b.paths.root_dir / "images" / ".pull.lock"
        deadline = time.monotonic() + args.first_gc
        while not lock.exists() and time.monotonic() < deadline:
            time.sleep(1)
        time.sleep(2)
        os.sync()  # what the start dirtied is flushed before the window opens
        pids = [proc.pid, *conmons(b.base)]
        log = b.base / "agent.log"
        before = {pid: io(pid) for pid in pids}
        log0 = log.stat().st_size
        t0 = time.time()
        time.sleep(args.window)
        os.sync()
        after = {pid: io(pid) for pid in pids}
        log1 = log.stat().st_size
        changed = changed_files([b.paths.root_dir, b.paths.run_dir, b.paths.log_dir], t0)
        if proc.poll() is not None or n < args.pods:
            raise SystemExit(
                f"the agent exited ({proc.poll()}) or ran {n} of {args.pods} pods; its log ends:\n"
                + "\n".join(log.read_text(errors="replace").splitlines()[-30:])
            )
    finally:
        b.close()

    def delta(key: str, which: list[int]) -> int:
        return sum(after[p].get(key, 0) - before[p].get(key, 0) for p in which if p in after and after[p])

    per_hour = 3600.0 / args.window
    agent, cm = [pids[0]], pids[1:]
    print(f"machine: {machine()}")
    print(f"{n} idle pods, {len(cm)} conmons, window {args.window:.0f} s, extrapolated to one hour")
    for label, which in (("agent", agent), ("conmons", cm), ("total", pids)):
        wb, wc = delta("write_bytes", which), delta("wchar", which)
        print(f"  {label:8} write_bytes {wb * per_hour / 1024:9.1f} KiB/h   wchar {wc * per_hour / 1024:9.1f} KiB/h")
    print(f"  agent log output (journald's to store, -v 0): {(log1 - log0) * per_hour / 1024:.1f} KiB/h")
    print(f"files under the root, run and log dirs modified during the window: {len(changed)}")
    for path, size in changed:
        print(f"  {path.replace(str(b.base) + '/', '')} ({size} bytes)")


if __name__ == "__main__":
    main()
