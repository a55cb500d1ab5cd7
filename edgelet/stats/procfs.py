"""Host and network figures from /proc and the filesystem: pure parsers of /proc/net/dev, /proc/stat and
/proc/meminfo, and the one disk-usage walk (writable layers, logs, emptyDir volumes)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class InterfaceStats:
    name: str
    rx_bytes: int
    rx_errors: int
    tx_bytes: int
    tx_errors: int


def parse_net_dev(text: str) -> list[InterfaceStats]:
    """/proc/<pid>/net/dev: every interface but loopback, in file order (kubelet leaves `lo` out too)."""
    out = []
    for line in text.splitlines()[2:]:
        name, sep, rest = line.partition(":")
        fields = rest.split()
        if not sep or len(fields) < 16 or name.strip() == "lo":
            continue
        try:
            nums = [int(f) for f in fields[:16]]
        except ValueError:
            continue
        out.append(
            InterfaceStats(name.strip(), rx_bytes=nums[0], rx_errors=nums[2], tx_bytes=nums[8], tx_errors=nums[10])
        )
    return out


def parse_proc_stat_cpu(text: str, clock_ticks: int = 100) -> int | None:
    """Cumulative busy CPU time of the whole machine in ns, from the `cpu` line of /proc/stat.

    Busy is user + nice + system + irq + softirq + steal (idle and iowait are
    not; guest time is already counted in user).
    """
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            try:
                nums = [int(x) for x in parts[1:9]]
            except ValueError:
                return None
            nums += [0] * (8 - len(nums))
            user, nice, system, _idle, _iowait, irq, softirq, steal = nums
            return (user + nice + system + irq + softirq + steal) * 1_000_000_000 // clock_ticks
    return None


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo in bytes, keyed as in the file (MemTotal, MemAvailable, Inactive(file), ...)."""
    out = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        parts = rest.split()
        if not sep or not parts:
            continue
        try:
            value = int(parts[0])
        except ValueError:
            continue
        out[key.strip()] = value * 1024 if len(parts) > 1 and parts[1] == "kB" else value
    return out


@dataclass(frozen=True)
class NodeMemory:
    total: int
    available: int
    usage: int
    working_set: int
    rss: int


def node_memory(meminfo: dict[str, int]) -> NodeMemory | None:
    """The node's memory as kubelet reports it: usage is total minus free, the working set excludes
    inactive file pages (as for a cgroup), available is MemAvailable."""
    total = meminfo.get("MemTotal")
    if total is None:
        return None
    free = meminfo.get("MemFree", 0)
    usage = max(0, total - free)
    return NodeMemory(
        total=total,
        available=meminfo.get("MemAvailable", free),
        usage=usage,
        working_set=max(0, usage - meminfo.get("Inactive(file)", 0)),
        rss=meminfo.get("AnonPages", 0),
    )


@dataclass(frozen=True)
class DiskUsage:
    bytes: int
    inodes: int


def disk_usage(path: Path) -> DiskUsage:
    """Bytes allocated (st_blocks) and inodes under `path`, without following symlinks or crossing into other
    filesystems (a tmpfs emptyDir is memory, not disk); a missing path is zero."""
    total = inodes = 0
    try:
        root_dev = os.lstat(path).st_dev
    except OSError:
        return DiskUsage(0, 0)
    stack = [str(path)]
    seen: set[tuple[int, int]] = set()
    while stack:
        d = stack.pop()
        try:
            it = os.scandir(d)
        except OSError:
            continue  # removed while walking, or unreadable: count what can be read
        with it:
            for entry in it:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if st.st_dev != root_dev:
                    continue
                key = (st.st_dev, st.st_ino)
                if key in seen:
                    continue  # a hard link counts once
                if st.st_nlink > 1:
                    seen.add(key)
                inodes += 1
                total += st.st_blocks * 512
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
    return DiskUsage(total, inodes)


@dataclass(frozen=True)
class FsInfo:
    capacity: int
    available: int
    used: int
    inodes: int
    inodes_free: int


def fs_info(path: Path) -> FsInfo | None:
    """statvfs of the filesystem holding `path`, as Summary's FsStats wants it."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    capacity = st.f_blocks * st.f_frsize
    return FsInfo(
        capacity=capacity,
        available=st.f_bavail * st.f_frsize,
        used=(st.f_blocks - st.f_bfree) * st.f_frsize,
        inodes=st.f_files,
        inodes_free=st.f_ffree,
    )
