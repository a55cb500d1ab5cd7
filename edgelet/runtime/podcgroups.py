"""The pods' cgroups as kubelet's cgroupfs layout puts them: the node's pods root and QoS tiers, each pod's
cgroup with its totals, the leaf its conmons live in, and their removal."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgelet.api.qos import qos_class
from edgelet.cgroups import CgroupError, detect
from edgelet.cgroups import qos as cg_qos
from edgelet.cgroups.allocatable import BESTEFFORT_TIER, BURSTABLE_TIER
from edgelet.cgroups.controllers import (
    LIMIT_CONTROLLERS,
    Admission,
    available_controllers,
    needed_controllers,
    probe_cmdline_file,
)
from edgelet.cgroups.controllers import admit as admit_controllers
from edgelet.cgroups.qos import PodResources
from edgelet.cgroups.stats import is_v2
from edgelet.container.errors import SandboxError
from edgelet.runtime import conmon
from edgelet.runtime.host import CGROUP_MOUNT
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.api.types import Pod

log = get_logger("edgelet.runtime")
MONITOR_CGROUP = "conmon"  # the leaf under each pod cgroup holding the pod's conmons


class PodCgroups:
    """The cgroups of the pods under `cgroup_root`; the writer and the host's controllers are read at first use."""

    def __init__(
        self,
        cgroup_root: str,
        *,
        pod_max_pids: int = 0,
        node_cgroup: PodResources | None = None,
        allow_missing_controllers: bool = False,
        controllers: frozenset[str] | None = None,
    ) -> None:
        self.cgroup_root = cgroup_root
        self.pod_max_pids = pod_max_pids
        # The root pods cgroup's limits (node allocatable, --enforce-node-allocatable=pods); None: none written.
        self.node_cgroup = node_cgroup
        self.allow_missing_controllers = allow_missing_controllers
        self._writer: Any = None
        self._node_cgroup_ready = False
        self._controllers = controllers  # None: read from the host at first use
        self._cmdline_file: str | None | bool = False  # False: not probed yet

    def writer(self) -> Any:
        if self._writer is None:
            self._writer = detect(CGROUP_MOUNT)
        return self._writer

    def candidates(self, uid: str) -> list[str]:
        """Every place kubelet's cgroupfs layout may put the pod: `<root>/pod<uid>` (Guaranteed), then the
        `burstable/` and `besteffort/` tiers."""
        return [
            cg_qos.pod_cgroup_path(self.cgroup_root, qos, uid)  # type: ignore[arg-type]
            for qos in ("Guaranteed", "Burstable", "BestEffort")
        ]

    def of(self, uid: str, pod: Pod | None = None) -> str:
        """The pod's cgroup: from its QoS class when the pod is known, else the one that exists."""
        if pod is not None:
            return cg_qos.pod_cgroup_path(self.cgroup_root, qos_class(pod), uid)
        candidates = self.candidates(uid)
        try:
            writer = self.writer()
        except CgroupError:
            return candidates[0]
        return next((path for path in candidates if writer.exists(path)), candidates[0])

    def controllers(self) -> frozenset[str]:
        """The controllers pod cgroups can use here, read once (the kernel's set does not change while it runs)."""
        if self._controllers is None:
            self._controllers = available_controllers(CGROUP_MOUNT)
        return self._controllers

    def admit(self, pod: Pod) -> Admission | None:
        """Whether the pod's limits can be applied here: None, a refusal with the fix, or a warning that it runs
        without some (--allow-missing-cgroup-controllers)."""
        return admit_controllers(
            needed_controllers(pod, cg_qos.pod_pids_limit(pod, self.pod_max_pids)),
            self.controllers(),
            allow_missing=self.allow_missing_controllers,
            v2=is_v2(CGROUP_MOUNT),
            cmdline_file=self.cmdline_file(),
        )

    def cmdline_file(self) -> str | None:
        """The device's cmdline.txt (None: not one the Pi firmware boots), probed once like the controllers."""
        if self._cmdline_file is False:
            self._cmdline_file = probe_cmdline_file()
        return self._cmdline_file if isinstance(self._cmdline_file, str) else None

    def missing_controllers(self) -> frozenset[str]:
        return frozenset(LIMIT_CONTROLLERS) - self.controllers()

    def _make_node_cgroups(self) -> None:
        """The root pods cgroup with the node allocatable caps, and the burstable/besteffort tiers, once per run."""
        root = self.cgroup_root
        if self._node_cgroup_ready or not root.strip("/"):
            return
        writer = self.writer()
        writer.create_pod(root, self.node_cgroup or PodResources())
        for qos, tier in (("Burstable", BURSTABLE_TIER), ("BestEffort", BESTEFFORT_TIER)):
            writer.create_pod(cg_qos.qos_cgroup_path(root, qos), tier)  # type: ignore[arg-type]
        self._node_cgroup_ready = True

    def make(self, pod: Pod, uid: str, pod_name: str) -> None:
        """kubelet's pod cgroup with the pod's totals (cpu, memory, pids) before anything runs in it."""
        path = self.of(uid, pod)
        try:
            self._make_node_cgroups()
            self.writer().create_pod(path, cg_qos.pod_resources(pod, self.pod_max_pids))
        except CgroupError as exc:
            raise SandboxError(f"pod {pod_name}: cannot set up its cgroup {path}: {exc}") from exc

    def monitor(self, uid: str, pod: Pod | None = None) -> str:
        """Where the pod's conmons live: a leaf `conmon` under the pod's cgroup (CRI-O's conmon_cgroup="pod").

        Started by edgelet, a conmon would stay in the cgroup of the systemd
        unit that ran edgelet: `edgelet-runonce.service` would keep the
        conmons of the boot's pods ("remains running after unit stopped"),
        `edgelet.service` those of every pod it started. In the pod's cgroup
        they belong to no unit, are charged to their pod, and go with it.
        """
        return self.of(uid, pod) + "/" + MONITOR_CGROUP

    def move_monitor(self, bundle: Path, cgroup: str) -> None:
        """Move the conmon of `bundle` (by its pidfile) into `cgroup`; see move_conmon."""
        pid = conmon.conmon_pid(bundle)
        if pid is not None:
            self.move_conmon(pid, cgroup)

    def move_conmon(self, pid: int, cgroup: str) -> None:
        """Move conmon `pid` into the pod's monitor cgroup `cgroup` (a warning when it cannot)."""
        try:
            self.writer().add_process(cgroup, pid)
        except CgroupError as exc:
            # The container runs either way; only where its monitor is accounted differs.
            log.warning("Cannot move conmon into the pod's cgroup", cgroup=cgroup, pid=pid, err=str(exc))


def remove_pod_cgroups(pod_cgroup: str, mount: Path = CGROUP_MOUNT) -> None:
    """rmdir the pod's cgroup (and what runc left below it) wherever this host mounts cgroups.

    runc deletes each container's own cgroup; only the pod level and leftovers of killed
    containers remain. A host without cgroups has nothing to remove.
    """
    try:
        # A killed task leaves its cgroup within moments: retry briefly, not for the writer's full second.
        cgroups = detect(mount, remove_attempts=20, remove_interval=0.01)
    except CgroupError:
        return
    cgroups.remove_pod(pod_cgroup)
