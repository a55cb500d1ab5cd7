"""Which cgroup controllers the host offers and which a pod's limits need: detection read once, decisions pure.

Raspberry Pi kernels boot with the memory controller disabled unless the
command line says `cgroup_enable=memory`; runc then fails every `create` of
a container with a memory limit, and a retry loop hides the fix behind runc's
raw error for as long as it runs. Knowing the controllers at start lets each
affected pod fail at once with the fix in its reason, or (with
`--allow-missing-cgroup-controllers`) run without the limits that cannot be
applied.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from edgelet.api.qos import container_limits, container_requests

if TYPE_CHECKING:
    from edgelet.api.types import Pod

# The controllers edgelet sets limits through; the others (cpuset, io, hugetlb) it leaves at their defaults.
LIMIT_CONTROLLERS = ("cpu", "memory", "pids")

REASON = "CgroupControllersMissing"  # the pod's status reason and the event's


@dataclass(frozen=True)
class Admission:
    """The verdict on a pod whose limits need controllers the host lacks: refused, or run without them."""

    refused: bool
    missing: tuple[str, ...]
    reason: str
    message: str


def parse_v1_hierarchies(names: Iterable[str]) -> frozenset[str]:
    """Controllers of the v1 hierarchy directories under the mount (`cpu,cpuacct` gives both)."""
    return frozenset(c for name in names for c in name.split(","))


def available_controllers(mount: Path = Path("/sys/fs/cgroup")) -> frozenset[str]:
    """The controllers a pod cgroup can use here: cgroup.controllers on v2, the mounted hierarchies on v1."""
    try:
        return frozenset((mount / "cgroup.controllers").read_text().split())
    except FileNotFoundError:
        pass
    except OSError:
        return frozenset()
    try:
        names = [p.name for p in mount.iterdir()
                 if p.is_dir() and (p / "cgroup.procs").exists() and not (p / "cgroup.controllers").exists()]
    except OSError:
        return frozenset()
    return parse_v1_hierarchies(names)


def needed_controllers(pod: "Pod", pids_limit: int | None) -> frozenset[str]:
    """The controllers the pod's resources ask for: cpu for cpu requests or limits, memory for memory limits,
    pids for a pids limit (the node's --pod-max-pids or the pod's own)."""
    spec = pod.spec
    containers = [*(spec.containers or []), *(spec.init_containers or [])] if spec is not None else []
    needed = set()
    for c in containers:
        if container_requests(c).get("cpu") or container_limits(c).get("cpu"):
            needed.add("cpu")
        if container_limits(c).get("memory"):
            needed.add("memory")
    if pids_limit:
        needed.add("pids")
    return frozenset(needed)


def fix_for(missing: Iterable[str], *, v2: bool, cmdline_file: str = "/boot/firmware/cmdline.txt") -> str:
    """How to turn the missing controllers on (the memory one is what Raspberry Pi kernels leave off)."""
    names = sorted(missing)
    if names == ["memory"] or "memory" in names:
        kernel = f"add `cgroup_enable=memory cgroup_memory=1` to the kernel command line ({cmdline_file}) and reboot"
        others = [n for n in names if n != "memory"]
        if not others:
            return kernel
        return kernel + f"; enable {', '.join(others)} in the kernel"
    if v2:
        return f"enable {', '.join(names)} in the unified hierarchy (cgroup.subtree_control of its parents)"
    return f"mount the {', '.join(names)} cgroup controller(s) under /sys/fs/cgroup"


def admit(needed: frozenset[str], available: frozenset[str], *, allow_missing: bool, v2: bool,
          cmdline_file: str = "/boot/firmware/cmdline.txt") -> Admission | None:
    """None when every needed controller is there; else a refusal carrying the fix, or (allowed) a warning."""
    missing = tuple(sorted(c for c in needed if c in LIMIT_CONTROLLERS and c not in available))
    if not missing:
        return None
    fix = fix_for(missing, v2=v2, cmdline_file=cmdline_file)
    which = ", ".join(missing)
    if allow_missing:
        return Admission(False, missing, REASON,
                         f"running without {which} limits: this kernel has no {which} cgroup controller "
                         f"(--allow-missing-cgroup-controllers); to enforce them, {fix}")
    return Admission(True, missing, REASON,
                     f"the pod's limits need the {which} cgroup controller(s), which this kernel does not offer: "
                     f"{fix}, or start edgelet with --allow-missing-cgroup-controllers to run pods without "
                     f"those limits")
