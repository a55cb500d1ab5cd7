"""Pod cgroups: pick the v1 or v2 writer for this host; QoS and resource policy live in `qos`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgelet.cgroups.errors import CgroupBusyError, CgroupError
from edgelet.cgroups.qos import PodResources, pod_cgroup_path, pod_resources
from edgelet.cgroups.v1 import CgroupV1
from edgelet.cgroups.v2 import CgroupV2

__all__ = [
    "CgroupBusyError",
    "CgroupError",
    "CgroupV1",
    "CgroupV2",
    "PodResources",
    "detect",
    "pod_cgroup_path",
    "pod_resources",
]


def detect(mount: Path = Path("/sys/fs/cgroup"), **options: Any) -> CgroupV1 | CgroupV2:
    """v2 when `mount` itself is a unified hierarchy, v1 when any v1 hierarchy is mounted under it (a kernel
    without the memory controller still has the others).

    `options` go to the writer (remove_attempts, remove_interval, ...).
    """
    mount = Path(mount)
    if (mount / "cgroup.controllers").exists():
        return CgroupV2(mount, **options)
    v1 = CgroupV1(mount, **options)
    if v1.hierarchies():
        return v1
    raise CgroupError("no cgroup v2 mount and no v1 hierarchy", mount)
