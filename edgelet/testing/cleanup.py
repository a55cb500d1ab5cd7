"""Removes what a test or benchmark run created: runc containers, conmon processes, mounts, cgroups.

Only ever touches things under the given directories and cgroup parent, so it
never reaches containers or mounts that the test did not create.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

CGROUP_MOUNT = Path("/sys/fs/cgroup")


def runc_containers(runc_root: Path, runtime: str = "runc") -> list[str]:
    if not runc_root.exists():
        return []
    out = subprocess.run([runtime, "--root", str(runc_root), "list", "-q"], capture_output=True, text=True)
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def processes() -> Iterator[tuple[int, list[str]]]:
    """(pid, argv) of every process whose command line can still be read."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        yield int(entry.name), cmdline.decode(errors="replace").split("\0")


def conmon_processes() -> list[tuple[int, list[str]]]:
    """(pid, argv) of every conmon on the host; callers pick theirs by an argument naming their dirs."""
    return [(pid, argv) for pid, argv in processes() if argv[0].endswith("conmon")]


def kill_processes_mentioning(text: str) -> None:
    """SIGKILL every process whose command line contains `text` (a unique temp path)."""
    me = os.getpid()
    for pid, argv in processes():
        if pid != me and text in " ".join(argv):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def unmount_under(prefix: Path) -> None:
    """Lazily unmount every mount point below `prefix`, deepest first."""
    prefix_s = str(prefix.resolve())
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mp = line.split()[4].replace("\\040", " ")
        if mp == prefix_s or mp.startswith(prefix_s + "/"):
            points.append(mp)
    for mp in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", mp], capture_output=True)


def remove_cgroups(cgroup_parent: str) -> None:
    """rmdir the cgroup parent and everything below it in every hierarchy."""
    rel = cgroup_parent.strip("/")
    if not rel:
        return
    for hierarchy in CGROUP_MOUNT.iterdir():
        top = hierarchy / rel
        if not top.is_dir():
            continue
        dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
        for d in [*dirs, top]:
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    # Still has tasks that are dying: kill them and retry.
                    try:
                        for pid in (d / "cgroup.procs").read_text().split():
                            os.kill(int(pid), signal.SIGKILL)
                    except (OSError, ValueError):
                        pass
                    time.sleep(0.02)


def cleanup_all(base: Path, runc_root: Path, cgroup_parent: str | None, runtime: str = "runc") -> None:
    """Tear down everything a test created under `base` (its temp dir), under runc's root and every other
    runtime handler's (`<run dir>/runtimes/<name>`, driven by the binary of that name)."""
    roots = [(runtime, runc_root)]
    others = runc_root.parent / "runtimes"
    if others.is_dir():
        roots += [(d.name, d) for d in sorted(others.iterdir()) if d.is_dir() and shutil.which(d.name)]
    for binary, root in roots:
        for cid in runc_containers(root, binary):
            subprocess.run([binary, "--root", str(root), "kill", cid, "KILL"], capture_output=True)
    kill_processes_mentioning(str(base))
    for binary, root in roots:
        for cid in runc_containers(root, binary):
            subprocess.run([binary, "--root", str(root), "delete", "-f", cid], capture_output=True)
    unmount_under(base)
    if cgroup_parent:
        remove_cgroups(cgroup_parent)
    shutil.rmtree(base, ignore_errors=True)
