"""What each running pod uses, read for the eviction order: memory working set and pids from its cgroup, disk from its dirs.

Read only under pressure; cgroup v1 (per-controller hierarchies) and v2
(the unified hierarchy) alike.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from edgelet.api.pod import meta, spec, uid
from edgelet.api.qos import container_requests
from edgelet.eviction.decide import PodUsage, pod_priority
from edgelet.eviction.signals import parse_memory_stat

if TYPE_CHECKING:
    from edgelet.api.types import Pod


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def cgroup_memory(mount: Path, cgroup: str) -> int | None:
    """The working set of a cgroup (usage less inactive file pages, as cAdvisor); None when it does not exist."""
    rel = cgroup.strip("/")
    for usage_file, stat_file, inactive in (
        (
            mount / "memory" / rel / "memory.usage_in_bytes",
            mount / "memory" / rel / "memory.stat",
            "total_inactive_file",
        ),
        (mount / rel / "memory.current", mount / rel / "memory.stat", "inactive_file"),
    ):
        usage = _read_int(usage_file)
        if usage is not None:
            try:
                stat = parse_memory_stat(stat_file.read_text())
            except OSError:
                stat = {}
            return max(0, usage - stat.get(inactive, 0))
    return None


def cgroup_pids(mount: Path, cgroup: str) -> int | None:
    rel = cgroup.strip("/")
    for f in (mount / "pids" / rel / "pids.current", mount / rel / "pids.current"):
        n = _read_int(f)
        if n is not None:
            return n
    return None


def dir_bytes(paths: Iterable[Path]) -> int:
    """Bytes allocated under `paths`, not following symlinks nor crossing into other filesystems' mounts."""
    total = 0
    for top in paths:
        try:
            dev = top.lstat().st_dev
        except OSError:
            continue
        stack = [str(top)]
        while stack:
            d = stack.pop()
            try:
                entries = list(os.scandir(d))
            except OSError:
                continue
            for e in entries:
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if st.st_dev != dev:
                    continue  # a mount: an overlay rootfs counts by its upper dir, a hostPath not at all
                total += st.st_blocks * 512
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
    return total


def _requests(pod: Pod, name: str) -> int:
    total = 0
    for c in spec(pod).containers or []:
        q = container_requests(c).get(name)
        total += int(q) if q is not None else 0
    return total


def pod_usages(
    pods: Iterable[Pod],
    cgroup_of: Callable[[str], str],
    dirs_of: Callable[[Pod], list[Path]],
    mount: Path = Path("/sys/fs/cgroup"),
) -> list[PodUsage]:
    """The usage of every pod that has a cgroup (runs); blocking I/O, for a worker thread."""
    out = []
    for pod in pods:
        cg = cgroup_of(uid(pod))
        memory = cgroup_memory(mount, cg)
        if memory is None:
            continue
        out.append(
            PodUsage(
                uid=uid(pod),
                name=f"{meta(pod).namespace}/{meta(pod).name}",
                priority=pod_priority(spec(pod).priority_class_name, spec(pod).priority),
                memory=memory,
                memory_request=_requests(pod, "memory"),
                disk=dir_bytes(dirs_of(pod)),
                disk_request=_requests(pod, "ephemeral-storage"),
                pids=cgroup_pids(mount, cg) or 0,
            )
        )
    return out
