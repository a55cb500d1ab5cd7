"""Pod cgroups on the unified (v2) hierarchy: subtree_control, cpu.weight, cpu.max, memory.max."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from edgelet.cgroups.errors import CgroupError
from edgelet.cgroups.qos import PodResources, shares_to_weight
from edgelet.cgroups.v1 import read_pids, relative_path, remove_tree, write_value

# Controllers a pod's containers may need; others (rdma, misc) stay off.
WANTED_CONTROLLERS = ("cpuset", "cpu", "io", "memory", "hugetlb", "pids")


class CgroupV2:
    """The pod cgroup as one directory under the unified mount."""

    version = 2

    def __init__(
        self,
        mount: Path = Path("/sys/fs/cgroup"),
        *,
        rmdir: Callable[[Path], None] = os.rmdir,
        sleep: Callable[[float], None] = time.sleep,
        remove_attempts: int = 50,
        remove_interval: float = 0.02,
    ) -> None:
        self.mount = Path(mount)
        self._rmdir = rmdir
        self._sleep = sleep
        self._attempts = remove_attempts
        self._interval = remove_interval

    def available_controllers(self) -> list[str]:
        file = self.mount / "cgroup.controllers"
        try:
            present = file.read_text().split()
        except OSError as exc:
            raise CgroupError(f"cannot read ({exc.strerror})", file) from exc
        return [c for c in WANTED_CONTROLLERS if c in present]

    def create_pod(self, path: str, resources: PodResources) -> None:
        """Create the pod cgroup, delegate controllers down to it and its children, write the pod's totals."""
        rel = relative_path(path)
        target = self.mount / rel
        try:
            target.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CgroupError(f"cannot create ({exc.strerror})", target) from exc
        controllers = self.available_controllers()
        if controllers:
            # A controller is usable in a cgroup only once every ancestor
            # lists it in subtree_control; the pod dir delegates to runc's
            # container cgroups below it.
            enable = " ".join(f"+{c}" for c in controllers)
            current = self.mount
            for part in ["", *rel.split("/")]:
                current = current / part if part else current
                write_value(current / "cgroup.subtree_control", enable)
        # A controller the kernel does not offer has no files here: its limits are left out (the caller
        # decided whether a pod may run without them, see cgroups.controllers).
        if "cpu" in controllers and resources.cpu_shares is not None:
            write_value(target / "cpu.weight", str(shares_to_weight(resources.cpu_shares)))
        if "cpu" in controllers and resources.cpu_quota is not None:
            period = resources.cpu_period or 100000
            quota = str(resources.cpu_quota) if resources.cpu_quota > 0 else "max"
            write_value(target / "cpu.max", f"{quota} {period}")
        if "memory" in controllers and resources.memory_limit:
            write_value(target / "memory.max", str(resources.memory_limit))
        if "pids" in controllers and resources.pids_limit:
            write_value(target / "pids.max", str(resources.pids_limit))

    def add_process(self, path: str, pid: int) -> None:
        """Move `pid` into the cgroup `path` (made when missing; a leaf, as v2 wants processes only in leaves)."""
        target = self.mount / relative_path(path)
        try:
            target.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CgroupError(f"cannot create ({exc.strerror})", target) from exc
        write_value(target / "cgroup.procs", str(pid))

    def remove_pod(self, path: str) -> None:
        """rmdir the pod cgroup and its children; absent is fine."""
        rel = relative_path(path)
        remove_tree(
            self.mount / rel, rmdir=self._rmdir, sleep=self._sleep, attempts=self._attempts, interval=self._interval
        )

    def pids(self, path: str) -> set[int]:
        return read_pids(self.mount / relative_path(path))

    def exists(self, path: str) -> bool:
        return (self.mount / relative_path(path)).is_dir()
