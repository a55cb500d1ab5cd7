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

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

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
        names = [
            p.name
            for p in mount.iterdir()
            if p.is_dir() and (p / "cgroup.procs").exists() and not (p / "cgroup.controllers").exists()
        ]
    except OSError:
        return frozenset()
    return parse_v1_hierarchies(names)


def needed_controllers(pod: Pod, pids_limit: int | None) -> frozenset[str]:
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


# Where a Raspberry Pi's kernel command line is edited, in order of preference: Debian's raspi images and
# Raspberry Pi OS since bookworm keep it on the FAT partition mounted at /boot/firmware (bookworm leaves a
# /boot/cmdline.txt behind that only says the file moved); older Raspberry Pi OS has it at /boot.
FIRMWARE_CMDLINE = "/boot/firmware/cmdline.txt"
BOOT_CMDLINE = "/boot/cmdline.txt"
CMDLINE_CANDIDATES = (FIRMWARE_CMDLINE, BOOT_CMDLINE)
FIRMWARE_DIR = "/boot/firmware"


def choose_cmdline_file(existing: Collection[str]) -> str | None:
    """The cmdline.txt this device has, from which of CMDLINE_CANDIDATES and FIRMWARE_DIR exist (pure).

    None when neither file nor /boot/firmware exists: not a board booted by the Pi's firmware, so the
    command line lives in the boot loader's configuration.
    """
    for candidate in CMDLINE_CANDIDATES:
        if candidate in existing:
            return candidate
    if FIRMWARE_DIR in existing:  # the FAT partition is there, its file not yet (raspi-firmware writes it)
        return FIRMWARE_CMDLINE
    return None


def probe_cmdline_file(root: Path = Path("/")) -> str | None:
    """choose_cmdline_file for this host (`root` stands in for / in tests); probe once, pass the result on."""
    existing = [p for p in (*CMDLINE_CANDIDATES, FIRMWARE_DIR) if (root / p.lstrip("/")).exists()]
    return choose_cmdline_file(existing)


def kernel_cmdline_fix(cmdline_file: str | None) -> str:
    """The words that turn the memory controller on: the file to edit, or the boot loader when there is none."""
    where = (
        f"the kernel command line ({cmdline_file}, one line)"
        if cmdline_file is not None
        else "the kernel command line (the boot loader's, e.g. GRUB_CMDLINE_LINUX in /etc/default/grub)"
    )
    return f"add `cgroup_enable=memory cgroup_memory=1` to {where} and reboot"


def fix_for(missing: Iterable[str], *, v2: bool, cmdline_file: str | None = FIRMWARE_CMDLINE) -> str:
    """How to turn the missing controllers on (the memory one is what Raspberry Pi kernels leave off)."""
    names = sorted(missing)
    if names == ["memory"] or "memory" in names:
        kernel = kernel_cmdline_fix(cmdline_file)
        others = [n for n in names if n != "memory"]
        if not others:
            return kernel
        return kernel + f"; enable {', '.join(others)} in the kernel"
    if v2:
        return f"enable {', '.join(names)} in the unified hierarchy (cgroup.subtree_control of its parents)"
    return f"mount the {', '.join(names)} cgroup controller(s) under /sys/fs/cgroup"


def admit(
    needed: frozenset[str],
    available: frozenset[str],
    *,
    allow_missing: bool,
    v2: bool,
    cmdline_file: str | None = FIRMWARE_CMDLINE,
) -> Admission | None:
    """None when every needed controller is there; else a refusal carrying the fix, or (allowed) a warning."""
    missing = tuple(sorted(c for c in needed if c in LIMIT_CONTROLLERS and c not in available))
    if not missing:
        return None
    fix = fix_for(missing, v2=v2, cmdline_file=cmdline_file)
    which = ", ".join(missing)
    if allow_missing:
        return Admission(
            False,
            missing,
            REASON,
            f"running without {which} limits: this kernel has no {which} cgroup controller "
            f"(--allow-missing-cgroup-controllers); to enforce them, {fix}",
        )
    return Admission(
        True,
        missing,
        REASON,
        f"the pod's limits need the {which} cgroup controller(s), which this kernel does not offer: "
        f"{fix}, or start edgelet with --allow-missing-cgroup-controllers to run pods without "
        f"those limits",
    )
