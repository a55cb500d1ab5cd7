"""Usage read back from a cgroup (CPU time, memory, pids) on v1 or v2: pure parsers of the files, thin readers under a root.

The figures are cAdvisor's, which kubelet's Summary API serves: the
working set is usage minus inactive file pages (what the kernel cannot
reclaim cheaply, and what the OOM killer and kubelet's eviction look at),
RSS is anonymous memory (v1 `total_rss`, v2 `anon`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CGROUP_MOUNT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class CgroupUsage:
    """One sample of a cgroup; None where the controller is absent or the file unreadable."""

    cpu_ns: int | None = None  # cumulative CPU time, nanoseconds
    memory_usage: int | None = None  # bytes charged, page cache included
    memory_working_set: int | None = None
    memory_rss: int | None = None
    page_faults: int | None = None
    major_page_faults: int | None = None
    pids: int | None = None


def parse_flat_keyed(text: str) -> dict[str, int]:
    """`key value` lines (memory.stat, cpu.stat) as a dict; lines that are not `name integer` are skipped."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = int(parts[1])
            except ValueError:
                continue
    return out


def parse_int(text: str | None) -> int | None:
    """A single-integer file (cpuacct.usage, memory.current, pids.current); None when empty or not a number."""
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


def working_set(usage: int | None, inactive_file: int | None) -> int | None:
    """cAdvisor's working set: usage minus inactive file pages, never below zero."""
    if usage is None:
        return None
    return max(0, usage - (inactive_file or 0))


def usage_v1(
    cpuacct_usage: str | None, memory_usage: str | None, memory_stat: str | None, pids_current: str | None
) -> CgroupUsage:
    """A v1 sample from the text of cpuacct.usage, memory.usage_in_bytes, memory.stat and pids.current."""
    stat = parse_flat_keyed(memory_stat) if memory_stat is not None else {}
    usage = parse_int(memory_usage)
    # The total_ keys count the whole subtree (a pod cgroup's containers); a leaf has both, equal.
    inactive = stat.get("total_inactive_file", stat.get("inactive_file"))
    return CgroupUsage(
        cpu_ns=parse_int(cpuacct_usage),
        memory_usage=usage,
        memory_working_set=working_set(usage, inactive),
        memory_rss=stat.get("total_rss", stat.get("rss")) if memory_stat is not None else None,
        page_faults=stat.get("total_pgfault", stat.get("pgfault")) if memory_stat is not None else None,
        major_page_faults=stat.get("total_pgmajfault", stat.get("pgmajfault")) if memory_stat is not None else None,
        pids=parse_int(pids_current),
    )


def usage_v2(
    cpu_stat: str | None, memory_current: str | None, memory_stat: str | None, pids_current: str | None
) -> CgroupUsage:
    """A v2 sample from the text of cpu.stat, memory.current, memory.stat and pids.current."""
    cpu = parse_flat_keyed(cpu_stat) if cpu_stat is not None else {}
    stat = parse_flat_keyed(memory_stat) if memory_stat is not None else {}
    usage = parse_int(memory_current)
    usec = cpu.get("usage_usec")
    return CgroupUsage(
        cpu_ns=usec * 1000 if usec is not None else None,
        memory_usage=usage,
        memory_working_set=working_set(usage, stat.get("inactive_file")),
        memory_rss=stat.get("anon") if memory_stat is not None else None,
        page_faults=stat.get("pgfault") if memory_stat is not None else None,
        major_page_faults=stat.get("pgmajfault") if memory_stat is not None else None,
        pids=parse_int(pids_current),
    )


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _v1_hierarchy(mount: Path, controller: str) -> Path:
    # cpuacct is often co-mounted as cpu,cpuacct with cpuacct as a symlink to it; either name works.
    for name in (controller, f"cpu,{controller}", f"{controller},cpu"):
        if (mount / name).is_dir():
            return mount / name
    return mount / controller


def is_v2(mount: Path = CGROUP_MOUNT) -> bool:
    return (mount / "cgroup.controllers").exists()


def parse_oom_kills(text: str | None) -> int | None:
    """The `oom_kill` count of v1 memory.oom_control or v2 memory.events; None when the file or the line is absent
    (v1 kernels before 4.13 have no counter)."""
    if text is None:
        return None
    return parse_flat_keyed(text).get("oom_kill")


def read_oom_kills(path: str, mount: Path = CGROUP_MOUNT) -> int | None:
    """How many processes the kernel's OOM killer took from cgroup `path`; None when the cgroup or counter is gone.

    The counter is the victim's own cgroup's (v1 counts only there; v2's memory.events also counts those of
    descendants), so a container's own cgroup tells whether one of its processes was killed, whichever
    limit (the container's or the pod's) ran out.
    """
    rel = path.strip("/")
    if is_v2(mount):
        return parse_oom_kills(_read(mount / rel / "memory.events"))
    return parse_oom_kills(_read(_v1_hierarchy(mount, "memory") / rel / "memory.oom_control"))


def read_usage(path: str, mount: Path = CGROUP_MOUNT) -> CgroupUsage | None:
    """The usage of cgroup `path` (absolute within each hierarchy, e.g. /kubepods/pod<uid>); None when it does not exist."""
    rel = path.strip("/")
    if is_v2(mount):
        d = mount / rel
        if not d.is_dir():
            return None
        return usage_v2(
            _read(d / "cpu.stat"), _read(d / "memory.current"), _read(d / "memory.stat"), _read(d / "pids.current")
        )
    mem = _v1_hierarchy(mount, "memory") / rel
    cpu = _v1_hierarchy(mount, "cpuacct") / rel
    if not mem.is_dir() and not cpu.is_dir():
        return None
    return usage_v1(
        _read(cpu / "cpuacct.usage"),
        _read(mem / "memory.usage_in_bytes"),
        _read(mem / "memory.stat"),
        _read(_v1_hierarchy(mount, "pids") / rel / "pids.current"),
    )
