"""Facts about this node the spec builder needs (OOM score floor, memory, rro support, bounding set, arch,
AppArmor, host devices), and passwd/group parsing.

Most are probed once at start; AppArmor's loaded profiles and /dev are read
when a container needs them, since both change while the agent runs. The
parsers are pure so an image's /etc/passwd is read without trusting it.
"""

from __future__ import annotations

import os
import platform
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from edgelet.ocispec.defaults import ALL_CAPABILITIES
from edgelet.runtime import bundle as bl

CGROUP_MOUNT = Path("/sys/fs/cgroup")


def parse_passwd(text: str) -> dict[str, tuple[int, int]]:
    users: dict[str, tuple[int, int]] = {}
    for line in text.splitlines():
        parts = line.split(":")
        if len(parts) >= 4 and parts[2].isdigit() and parts[3].isdigit():
            users.setdefault(parts[0], (int(parts[2]), int(parts[3])))
    return users


def parse_group(text: str) -> dict[str, int]:
    groups: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split(":")
        if len(parts) >= 3 and parts[2].isdigit():
            groups.setdefault(parts[0], int(parts[2]))
    return groups


def parse_group_members(text: str) -> dict[str, tuple[str, ...]]:
    members: dict[str, tuple[str, ...]] = {}
    for line in text.splitlines():
        parts = line.split(":")
        if len(parts) >= 4 and parts[3].strip():
            members.setdefault(parts[0], tuple(m for m in parts[3].strip().split(",") if m))
    return members


CAP_SYS_RESOURCE = 24


def compute_min_oom_score_adj(cap_eff: int, own: int) -> int | None:
    """The lowest oomScoreAdj runc will be allowed to set, None when unrestricted.

    Without CAP_SYS_RESOURCE nothing below the agent's own value can be set;
    conmon first raises runc's value to 0 (so runc is killable), which an
    unprivileged process may do but not undo, hence never below 0 either.
    """
    if cap_eff & (1 << CAP_SYS_RESOURCE):
        return None
    return max(own, 0)


def parse_cap_mask(mask: int) -> tuple[str, ...]:
    """A CapBnd/CapEff bit mask as capability names, in number order (bits beyond the known ones ignored)."""
    return tuple(name for bit, name in enumerate(ALL_CAPABILITIES) if mask & (1 << bit))


def parse_kernel_version(release: str) -> tuple[int, ...] | None:
    """`uname -r` ("6.1.0-18-arm64") as (6, 1, 0); None when it does not start with numbers."""
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", release)
    if m is None:
        return None
    return tuple(int(g) for g in m.groups() if g is not None)


@dataclass(frozen=True)
class HostFacts:
    """Facts about this node the spec builder needs, probed once."""

    min_oom_score_adj: int | None = None
    memory_capacity: int = 0
    swap_controller: bool = False
    recursive_read_only: bool = False  # runc's `rro` works here (mount_setattr, Linux >= 5.12)
    # The agent's own bounding set: what privileged means here (None: unknown, every capability).
    bounding_capabilities: tuple[str, ...] | None = None
    machine: str = ""  # uname -m
    kernel_version: tuple[int, ...] | None = None
    apparmor_enabled: bool = False


APPARMOR_ENABLED = Path("/sys/module/apparmor/parameters/enabled")
APPARMOR_PROFILES = Path("/sys/kernel/security/apparmor/profiles")


def is_apparmor_enabled(path: Path = APPARMOR_ENABLED) -> bool:
    try:
        return path.read_text().strip().upper().startswith("Y")
    except OSError:
        return False


def parse_apparmor_profiles(text: str) -> frozenset[str]:
    """/sys/kernel/security/apparmor/profiles lines ("name (enforce)") as the set of names."""
    names = set()
    for line in text.splitlines():
        name, sep, _mode = line.rstrip().rpartition(" (")
        names.add(name if sep else line.strip())
    return frozenset(n for n in names if n)


def loaded_apparmor_profiles(path: Path = APPARMOR_PROFILES) -> frozenset[str]:
    """The loaded profiles now (a profile may be loaded while the agent runs); empty when unreadable."""
    try:
        return parse_apparmor_profiles(path.read_text())
    except OSError:
        return frozenset()


# Under /dev but not the host's devices to hand on: runc mounts its own of these (containerd's HostDevices).
_SKIPPED_DEV_DIRS = frozenset({"pts", "shm", "fd", "mqueue", ".lxc", ".lxd-mounts", ".udev"})


def host_devices(root: Path = Path("/dev")) -> tuple[dict, ...]:
    """Every character and block device under /dev as OCI linux.devices entries, for privileged containers.

    Read when such a container is created, since devices come and go (USB).
    Symlinks are skipped, and /dev/console, which runc sets up itself.
    """
    found: list[dict] = []

    def walk(d: Path) -> None:
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError:
            return
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                if e.name not in _SKIPPED_DEV_DIRS:
                    walk(Path(e.path))
                continue
            if e.name == "console" and d == root:
                continue
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISCHR(st.st_mode):
                kind = "c"
            elif stat.S_ISBLK(st.st_mode):
                kind = "b"
            else:
                continue
            found.append(
                {
                    "path": "/dev/" + str(Path(e.path).relative_to(root)),
                    "type": kind,
                    "major": os.major(st.st_rdev),
                    "minor": os.minor(st.st_rdev),
                    "fileMode": stat.S_IMODE(st.st_mode),
                    "uid": st.st_uid,
                    "gid": st.st_gid,
                }
            )

    walk(root)
    return tuple(found)


def probe_host_facts(cgroup_mount: Path = CGROUP_MOUNT) -> HostFacts:
    cap_eff, cap_bnd, own, mem = -1, -1, 0, 0
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                cap_eff = int(line.split()[1], 16)
            elif line.startswith("CapBnd:"):
                cap_bnd = int(line.split()[1], 16)
        own = int(Path("/proc/self/oom_score_adj").read_text().strip())
    except (OSError, ValueError):
        pass
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return HostFacts(
        min_oom_score_adj=compute_min_oom_score_adj(cap_eff, own),
        memory_capacity=mem,
        swap_controller=(cgroup_mount / "memory" / "memory.memsw.limit_in_bytes").exists(),
        recursive_read_only=bl.probe_recursive_read_only(),
        bounding_capabilities=None if cap_bnd < 0 else parse_cap_mask(cap_bnd),
        machine=platform.machine(),
        kernel_version=parse_kernel_version(platform.release()),
        apparmor_enabled=is_apparmor_enabled(),
    )
