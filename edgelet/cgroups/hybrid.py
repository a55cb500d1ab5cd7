"""The hybrid cgroup layout crun refuses: v1 hierarchies beside a cgroup2 mount that still holds controllers.

systemd's hybrid mode mounts an empty cgroup2 tree at /sys/fs/cgroup/unified. A controller no v1 hierarchy
mounts (`hugetlb`, typically) stays attached to it, and crun 1.8 then fails every container with "cgroups in
hybrid mode not supported, drop all controllers from cgroupv2". Mounting that controller as a v1 hierarchy
moves it out of the cgroup2 tree; runc does not care either way. A pure v2 system has no such mount.
"""

from __future__ import annotations

from pathlib import Path

CGROUP_MOUNT = Path("/sys/fs/cgroup")
UNIFIED = "unified"  # where systemd mounts cgroup2 in hybrid mode


def unified_controllers(mount: Path = CGROUP_MOUNT) -> list[str]:
    """The controllers the hybrid layout's cgroup2 mount holds ([] on pure v1 or v2, or when it holds none)."""
    if (mount / "cgroup.controllers").exists():
        return []  # pure v2: the root is the cgroup2 mount
    try:
        return (mount / UNIFIED / "cgroup.controllers").read_text().split()
    except OSError:
        return []


def fix_commands(controllers: list[str], mount: Path = CGROUP_MOUNT) -> list[str]:
    """The shell commands that move `controllers` to v1 hierarchies of their own (as root, once per boot)."""
    return [f"mkdir -p {mount / name} && mount -t cgroup -o {name} cgroup {mount / name}" for name in controllers]


def problem(mount: Path = CGROUP_MOUNT) -> str | None:
    """What blocks crun here, with the fix; None when nothing does."""
    held = unified_controllers(mount)
    if not held:
        return None
    return (
        f"hybrid cgroups: the cgroup2 mount {mount / UNIFIED} holds {', '.join(held)}, so crun refuses every "
        f'container ("cgroups in hybrid mode not supported"); fix (as root, at every boot): '
        + "; ".join(fix_commands(held, mount))
    )
