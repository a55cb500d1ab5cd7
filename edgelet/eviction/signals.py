"""What the node has left: memory, the root and image filesystems' bytes and inodes, and pids.

Parsing is pure; `HostSignals.observe()` is the thin reader. memory.available
is kubelet's: capacity minus the working set of the root memory cgroup
(usage less inactive file pages), which counts reclaimable page cache as
available; MemAvailable stands in where the cgroup files are missing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from edgelet.eviction.thresholds import IMAGEFS, IMAGEFS_INODES, MEMORY, NODEFS, NODEFS_INODES, PIDS
from edgelet.util.log import get_logger

log = get_logger(__name__)

# Tests replace what the node reports with a JSON file of {"signal": [available, capacity]}: the pressure a
# test needs cannot be made on a shared machine without hurting it.
OVERRIDE_ENV = "EDGELET_TEST_EVICTION_SIGNALS"


@dataclass(frozen=True)
class Observation:
    available: int
    capacity: int


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo in bytes by field."""
    out = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[name.strip()] = int(parts[0]) * (1024 if parts[1:2] == ["kB"] else 1)
    return out


def parse_memory_stat(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if value.strip().isdigit():
            out[name] = int(value)
    return out


def memory_observation(meminfo: Mapping[str, int], usage: int | None, stat: Mapping[str, int]) -> Observation:
    """kubelet's memory.available: MemTotal - (usage - inactive_file) of the root memory cgroup."""
    total = meminfo.get("MemTotal", 0)
    if usage is None:
        return Observation(max(0, meminfo.get("MemAvailable", 0)), total)
    inactive = stat.get("total_inactive_file", stat.get("inactive_file", 0))
    working_set = max(0, usage - inactive)
    return Observation(max(0, total - working_set), total)


def fs_observations(st: os.statvfs_result) -> tuple[Observation, Observation]:
    """(bytes, inodes) available to unprivileged users of a filesystem, as cAdvisor reports them."""
    return (Observation(st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize), Observation(st.f_favail, st.f_files))


def pid_observation(pid_max: int, loadavg: str) -> Observation:
    """pid_max less the tasks that exist now (the 4th field of /proc/loadavg: running/total)."""
    try:
        total = int(loadavg.split()[3].split("/")[1])
    except (IndexError, ValueError):
        total = 0
    return Observation(max(0, pid_max - total), pid_max)


def _read(path: str | Path) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


class HostSignals:
    """Reads every signal of this node; `nodefs` is the root dir's filesystem, `imagefs` the image store's."""

    def __init__(self, root_dir: Path, images_dir: Path, cgroup_mount: Path = Path("/sys/fs/cgroup")) -> None:
        self._root_dir = root_dir
        self._images_dir = images_dir
        self._cgroup = cgroup_mount

    def _memory(self) -> Observation:
        meminfo = parse_meminfo(_read("/proc/meminfo"))
        for usage_file, stat_file in (
            (self._cgroup / "memory" / "memory.usage_in_bytes", self._cgroup / "memory" / "memory.stat"),
        ):
            usage = _read(usage_file).strip()
            if usage.isdigit():
                return memory_observation(meminfo, int(usage), parse_memory_stat(_read(stat_file)))
        return memory_observation(meminfo, None, {})

    def _fs(self, path: Path) -> tuple[Observation, Observation] | None:
        for p in (path, *path.parents):
            try:
                return fs_observations(os.statvfs(p))
            except OSError:
                continue
        return None

    def observe(self) -> dict[str, Observation]:
        out = {MEMORY: self._memory()}
        nodefs = self._fs(self._root_dir)
        if nodefs is not None:
            out[NODEFS], out[NODEFS_INODES] = nodefs
        imagefs = self._fs(self._images_dir)
        if imagefs is not None:
            out[IMAGEFS], out[IMAGEFS_INODES] = imagefs
        pid_max = _read("/proc/sys/kernel/pid_max").strip()
        if pid_max.isdigit():
            out[PIDS] = pid_observation(int(pid_max), _read("/proc/loadavg"))
        override = os.environ.get(OVERRIDE_ENV)
        if override:
            try:
                doc = json.loads(Path(override).read_text())
                out.update({k: Observation(int(v[0]), int(v[1])) for k, v in doc.items()})
            except (OSError, ValueError, TypeError, IndexError) as exc:
                log.warning("Cannot read the test's eviction signals", path=override, err=str(exc))
        return out
