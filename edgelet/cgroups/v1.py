"""Pod cgroups on cgroup v1: one directory per hierarchy; cpu and memory limits through cgroupspy's controllers.

cgroupspy's `Tree` walks the whole hierarchy when built, which on a board
with many cgroups costs more than the pod cgroup itself: the node chain of
the one cgroup is built directly instead, and its controllers (CpuController,
MemoryController) write the files. cgroupspy has no pids controller, so
pids.max (and the cpuset copy-down) are plain writes. The mount is a
parameter, so a temp dir stands in for /sys/fs/cgroup in tests.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from edgelet.cgroups.errors import CgroupBusyError, CgroupError
from edgelet.cgroups.qos import PodResources

if TYPE_CHECKING:  # cgroupspy is imported where a v1 cgroup is written: a v2 host never loads it
    from cgroupspy.controllers import CpuController, MemoryController
    from cgroupspy.nodes import Node


def relative_path(path: str) -> str:
    rel = path.strip("/")
    if not rel:
        raise CgroupError("refusing to operate on the cgroup root", path or "/")
    return rel


def write_value(file: Path, text: str) -> None:
    try:
        file.write_text(text)
    except OSError as exc:
        raise CgroupError(f"cannot write {text!r} ({exc.strerror})", file) from exc


def cgroup_node(hierarchy: Path, rel: str) -> Node:
    """cgroupspy's node for cgroup `rel` of one hierarchy, without walking the hierarchy (see the module doc)."""
    from cgroupspy.nodes import Node

    node = Node(str(hierarchy))
    for part in rel.split("/"):
        node = Node(part, parent=node)
    return node


def set_value(controller: CpuController | MemoryController, name: str, value: int) -> None:
    """Set one of cgroupspy's controller files, the failure carrying the file's path."""
    try:
        setattr(controller, name, value)
    except OSError as exc:
        interface = controller.get_interface(name)
        raise CgroupError(
            f"cannot write {value!r} ({exc.strerror})", controller.filepath(interface.filename).decode()
        ) from exc


def read_pids(directory: Path) -> set[int]:
    """Every pid in cgroup.procs of `directory` and all its descendants; empty if absent."""
    found: set[int] = set()
    if not directory.is_dir():
        return found
    for procs in [directory / "cgroup.procs", *directory.rglob("*/cgroup.procs")]:
        try:
            text = procs.read_text()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise CgroupError(f"cannot read ({exc.strerror})", procs) from exc
        found.update(int(tok) for tok in text.split())
    return found


def remove_tree(
    top: Path,
    *,
    rmdir: Callable[[Path], None],
    sleep: Callable[[float], None],
    attempts: int,
    interval: float,
) -> None:
    """rmdir `top` and every directory below it, deepest first, retrying EBUSY while tasks exit."""
    if not top.is_dir():
        return
    dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
    for d in [*dirs, top]:
        for attempt in range(attempts):
            try:
                rmdir(d)
                break
            except FileNotFoundError:
                break
            except OSError as exc:
                if exc.errno != errno.EBUSY:
                    raise CgroupError(f"cannot remove ({exc.strerror})", d) from exc
                if attempt == attempts - 1:
                    raise CgroupBusyError("cgroup still has tasks after retries", d) from exc
                sleep(interval)


class CgroupV1:
    """The pod cgroup in every v1 hierarchy under `mount` (cpu, memory, pids, ..., name=systemd)."""

    version = 1

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

    def hierarchies(self) -> list[Path]:
        """Mounted v1 hierarchies; symlinks (cpu,cpuacct aliases) and the cgroup2 `unified` dir are skipped."""
        try:
            entries = sorted(self.mount.iterdir())
        except OSError as exc:
            raise CgroupError(f"cannot list hierarchies ({exc.strerror})", self.mount) from exc
        return [
            p
            for p in entries
            if p.is_dir()
            and not p.is_symlink()
            and (p / "cgroup.procs").exists()
            and not (p / "cgroup.controllers").exists()
        ]

    def hierarchy(self, controller: str) -> Path | None:
        for h in self.hierarchies():
            if controller in h.name.split(","):
                return h
        return None

    def create_pod(self, path: str, resources: PodResources) -> None:
        """Create the pod cgroup (and its parents) in every hierarchy and write the pod's totals.

        Idempotent: an existing cgroup gets its values rewritten.
        """
        rel = relative_path(path)
        for h in self.hierarchies():
            target = h / rel
            try:
                target.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise CgroupError(f"cannot create ({exc.strerror})", target) from exc
        cpuset = self.hierarchy("cpuset")
        if cpuset is not None:
            self._fill_cpuset(cpuset, rel)
        from cgroupspy.controllers import CpuController, MemoryController

        cpu = self.hierarchy("cpu")
        if cpu is not None:
            ctl = CpuController(cgroup_node(cpu, rel))
            if resources.cpu_shares is not None:
                set_value(ctl, "shares", resources.cpu_shares)
            if resources.cpu_quota is not None:
                # The period goes first: the kernel checks quota against it.
                if resources.cpu_period is not None:
                    set_value(ctl, "cfs_period_us", resources.cpu_period)
                set_value(ctl, "cfs_quota_us", resources.cpu_quota if resources.cpu_quota > 0 else -1)
        memory = self.hierarchy("memory")
        if memory is not None and resources.memory_limit:
            set_value(MemoryController(cgroup_node(memory, rel)), "limit_in_bytes", resources.memory_limit)
        pids = self.hierarchy("pids")
        if pids is not None and resources.pids_limit:
            write_value(pids / rel / "pids.max", str(resources.pids_limit))

    def _fill_cpuset(self, hierarchy: Path, rel: str) -> None:
        # A new cpuset cgroup starts with empty cpus/mems and then refuses
        # tasks; copy them down from the nearest parent, as runc does.
        current = hierarchy
        for part in rel.split("/"):
            parent, current = current, current / part
            for name in ("cpuset.cpus", "cpuset.mems"):
                own = current / name
                try:
                    if own.exists() and own.read_text().strip():
                        continue
                    inherited = (parent / name).read_text().strip() if (parent / name).exists() else ""
                except OSError as exc:
                    raise CgroupError(f"cannot read ({exc.strerror})", own) from exc
                if inherited:
                    write_value(own, inherited)

    def add_process(self, path: str, pid: int) -> None:
        """Move `pid` into the cgroup `path` (made when missing) in every hierarchy, and in the cgroup2
        `unified` mount of a hybrid host, where systemd tracks its units' processes."""
        rel = relative_path(path)
        targets = list(self.hierarchies())
        unified = self.mount / "unified"
        if (unified / "cgroup.controllers").exists():
            targets.append(unified)
        for h in targets:
            try:
                (h / rel).mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise CgroupError(f"cannot create ({exc.strerror})", h / rel) from exc
            if "cpuset" in h.name.split(","):
                self._fill_cpuset(h, rel)
            write_value(h / rel / "cgroup.procs", str(pid))

    def remove_pod(self, path: str) -> None:
        """rmdir the pod cgroup and whatever runc left below it, in every hierarchy; absent is fine.

        On a hybrid host runc also creates the pod's dir in the cgroup2 `unified` mount, so
        that one goes too. Every hierarchy is tried before the first busy one is raised.
        """
        rel = relative_path(path)
        unified = self.mount / "unified"
        tops = [h / rel for h in self.hierarchies()]
        if (unified / "cgroup.controllers").exists():
            tops.append(unified / rel)
        busy: list[CgroupError] = []
        for top in tops:
            try:
                remove_tree(top, rmdir=self._rmdir, sleep=self._sleep, attempts=self._attempts, interval=self._interval)
            except CgroupBusyError as exc:
                busy.append(exc)
        if busy:
            raise busy[0]

    def pids(self, path: str) -> set[int]:
        """Processes anywhere in the pod's cgroup subtree, across hierarchies."""
        rel = relative_path(path)
        found: set[int] = set()
        for h in self.hierarchies():
            found |= read_pids(h / rel)
        return found

    def exists(self, path: str) -> bool:
        rel = relative_path(path)
        return any((h / rel).is_dir() for h in self.hierarchies())
