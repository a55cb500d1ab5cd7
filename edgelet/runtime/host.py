"""Facts about this node the spec builder needs (OOM score floor, memory, rro support), and passwd/group parsing.

Probed once at start; the parsers are pure so an image's /etc/passwd is read
without trusting it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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


@dataclass(frozen=True)
class HostFacts:
    """Facts about this node the spec builder needs, probed once."""

    min_oom_score_adj: int | None = None
    memory_capacity: int = 0
    swap_controller: bool = False
    recursive_read_only: bool = False  # runc's `rro` works here (mount_setattr, Linux >= 5.12)


def probe_host_facts(cgroup_mount: Path = CGROUP_MOUNT) -> HostFacts:
    cap_eff, own, mem = -1, 0, 0
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                cap_eff = int(line.split()[1], 16)
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
    )
