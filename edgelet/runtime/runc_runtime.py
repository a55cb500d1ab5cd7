"""RuncRuntime: the `Runtime` protocol over runc and conmon, with state rebuilt from runc, annotations and exit files.

Every sandbox and container is a runc container under a private root, created
by a daemonised conmon (which outlives edgelet, holds stdio, writes the CRI
log and the exit file). Nothing is kept only in memory: `list_pods` rebuilds
the whole actual state from `runc list` (with annotations), the exit
directory and the bundles on disk, so a fresh instance adopts what an
earlier edgelet started.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import secrets
import shutil
import signal
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from edgelet.api.pod import uid as pod_uid
from edgelet.api.pod import meta
from edgelet.api.pod import spec as pod_spec
from edgelet.api.qos import qos_class
from edgelet.cgroups import CgroupError, detect
from edgelet.cgroups import qos as cg_qos
from edgelet.cgroups.allocatable import BESTEFFORT_TIER, BURSTABLE_TIER
from edgelet.cgroups.controllers import LIMIT_CONTROLLERS, Admission, available_controllers, needed_controllers
from edgelet.cgroups.controllers import probe_cmdline_file
from edgelet.cgroups.controllers import admit as admit_controllers
from edgelet.cgroups.qos import PodResources
from edgelet.cgroups.stats import is_v2, read_oom_kills
from edgelet.logs import ensure_log_dir
from edgelet.ocispec import build as ocispec
from edgelet.ocispec import defaults as oci_defaults
from edgelet.runtime import bundle as bl
from edgelet.runtime import _exec, conmon, pinns, rootfs, subpath
from edgelet.runtime.logrotation import remove_logs
from edgelet.container.errors import (
    CreateContainerConfigError,
    CreateContainerError,
    ExecError,
    ExecTimeout,
    RuntimeError_,
    SandboxError,
    StartContainerError,
    StopContainerError,
)
from edgelet.ocispec.apparmor import compute_apparmor
from edgelet.ocispec.errors import SecurityError
from edgelet.ocispec.seccomp import goarch
from edgelet.runtime.host import (
    CGROUP_MOUNT,
    HostFacts,
    host_devices,
    loaded_apparmor_profiles,
    parse_group,
    parse_group_members,
    parse_passwd,
    probe_host_facts,
)
from edgelet.network.errors import NetworkError
from edgelet.ocispec.errors import SpecError
from edgelet.runtime.runc import Runc
from edgelet.runtime.state import (
    ExitInfo,
    Observed,
    build_pod_statuses,
    build_record,
    format_namespaces,
    judge_state,
    parse_namespaces,
)
from edgelet.runtime.sandbox import PauseSpec, needs_infra, pause_spec, pinned_kinds, sandbox_namespace_paths
from edgelet.util.crashpoint import crash_point
from edgelet.container.types import ContainerRecord, PodRuntimeStatus, PreparedContainer, SandboxRecord
from edgelet.runtime.termination import termination_annotations, termination_message
from edgelet.runtime.layout import (
    ANN_ATTEMPT,
    ANN_CONTAINER_NAME,
    ANN_CONTAINER_TYPE,
    ANN_CREATED,
    ANN_HASH,
    ANN_IMAGE,
    ANN_IMAGE_ID,
    ANN_KIND,
    ANN_LOG_PATH,
    ANN_POD_NAME,
    ANN_POD_NAMESPACE,
    ANN_POD_UID,
    ANN_GRACE,
    ANN_HOST_NETWORK,
    ANN_INFRA,
    ANN_NAMESPACES,
    ANN_NETNS,
    ANN_POD_IPS,
    ANN_SANDBOX_ID,
    KIND_CONTAINER,
    KIND_SANDBOX,
    RuntimePaths,
)
from edgelet.state import ensure_dir
from edgelet.util.clock import Clock, RealClock
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.api.types import Container, Pod
    from edgelet.runtime.execsession import ExecSession
    from edgelet.network.manager import Attached, Pending, PodNetwork
    from edgelet.images.types import ImageRecord

log = get_logger("edgelet.runtime")
MONITOR_CGROUP = "conmon"  # the leaf under each pod cgroup holding the pod's conmons

MIN_STOP_GRACE = 2.0  # kubelet: at least 2 s between the stop signal and SIGKILL
KILL_WAIT = 10.0  # how long SIGKILL may take to show up as an exit file
POLL = 0.05


# ---------------------------------------------------------------- side effects


def _read_exit(path: Path, now: float) -> ExitInfo | None:
    try:
        st = path.stat()
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    except OSError:
        return ExitInfo(None, now)
    try:
        return ExitInfo(int(text), st.st_mtime)
    except ValueError:
        return ExitInfo(None, st.st_mtime)


def _read_float(path: Path) -> float | None:
    try:
        return float(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _read_rootfs_file(rootfs_dir: Path, rel: str) -> str:
    """A file of the image, refusing symlinks (a hostile image must not make edgelet read host files)."""
    path = rootfs_dir
    for part in rel.split("/"):
        path = path / part
        if path.is_symlink():
            return ""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return ""
    with os.fdopen(fd, "r", errors="replace") as f:
        return f.read(1 << 20)


def _new_id() -> str:
    return secrets.token_hex(32)


@dataclasses.dataclass(frozen=True)
class _Prepared:
    """The runtime's part of a PreparedContainer: what create_container finishes from."""

    bundle: Path
    log_path: Path
    link: Path
    rootfs_dir: Path
    passwd: dict[str, tuple[int, int]]
    groups: dict[str, int]
    members: dict[str, tuple[str, ...]]
    facts: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class _PendingSandbox:
    """A created sandbox's part start_sandbox needs: the attachment to make, its sysctls, the namespace files
    ({"ipc"|"uts"|...: path}) and the annotations its record is written again with."""

    pending: "Pending"
    sysctls: Mapping[str, str]
    pinned: Mapping[str, str]
    annotations: dict[str, str]


class RuncRuntime:
    """Implements `edgelet.runtime.Runtime` with runc and conmon; a pod's sandbox is its namespaces pinned as
    files (a catatonit pause process only where the pod shares its PID namespace, or with `infra_container`)."""

    def __init__(
        self,
        paths: RuntimePaths,
        *,
        runtime_bin: str = "runc",
        conmon_bin: str = "conmon",
        catatonit_bin: str = "catatonit",
        pause_image: "ImageRecord | None" = None,
        clock: Clock | None = None,
        node_hostname: str | None = None,
        host_facts: HostFacts | None = None,
        runner: _exec.Runner = _exec.run,
        pod_max_pids: int = 0,
        node_cgroup: PodResources | None = None,
        allow_missing_controllers: bool = False,
        cgroup_controllers: frozenset[str] | None = None,
        network: "PodNetwork | None" = None,
        cluster_dns: Sequence[str] = (),
        cluster_domain: str = "",
        allowed_unsafe_sysctls: tuple[str, ...] = (),
        seccomp_default: bool = True,
        on_warning: "Callable[[Pod, str | None, str, str], None] | None" = None,
        log_size_max: int | None = None,
        infra_container: bool = False,
    ) -> None:
        """`seccomp_default` is kubelet's --seccomp-default; `on_warning(pod, container, reason, message)`
        hears what a container runs without although asked (an AppArmor default that is not loaded)."""
        # Every runc and conmon invocation goes through `runner`: unit tests script it.
        # True: every new sandbox runs a pause process, as before (--pod-infra-container); False: only the pods
        # that share their PID namespace get one.
        self.infra_container = infra_container
        self._exec = runner
        # conmon's own cut (--log-size-max), the backstop when rotation falls behind or edgelet is down.
        self.log_size_max = log_size_max
        self.pod_max_pids = pod_max_pids
        self.network = network  # CNI; None: pods without hostNetwork get loopback only
        self.cluster_dns = tuple(cluster_dns)
        self.cluster_domain = cluster_domain
        self.allowed_unsafe_sysctls = allowed_unsafe_sysctls
        self._cgroup_writer: Any = None
        # The root pods cgroup's limits (node allocatable, --enforce-node-allocatable=pods); None: none written.
        self.node_cgroup = node_cgroup
        self._node_cgroup_ready = False
        self.allow_missing_controllers = allow_missing_controllers
        self._controllers = cgroup_controllers  # None: read from the host at first use
        self._cmdline_file: str | None | bool = False  # False: not probed yet
        self._oom_checked: set[str] = set()  # exited containers whose OOM counter was read
        self.paths = paths
        self.seccomp_default = seccomp_default
        self.on_warning = on_warning
        # conmon execs the runtime by path, without a PATH search.
        self.runtime_path = shutil.which(runtime_bin) or runtime_bin
        self.conmon_bin = shutil.which(conmon_bin) or conmon_bin
        self.catatonit_bin = catatonit_bin
        self.pause_image = pause_image
        self.clock: Clock = clock or RealClock()
        self.node_hostname = node_hostname or socket.gethostname()
        self.runc = Runc(self.runtime_path, paths.runc_root, runner=runner)
        self.host = host_facts or probe_host_facts()
        self._pause: PauseSpec | None = None
        self._bundles: dict[str, Path] = {}  # container id -> bundle dir, refreshed by every observation
        self._released: set[str] = set()  # exited containers whose runc state and rootfs mount are gone
        # Termination messages of exited containers by id: read once conmon recorded the exit, since an exited
        # container's files no longer change; an entry goes with its container (remove_container, or a relist
        # that misses it).
        self._messages: dict[str, str] = {}
        # Names this agent's exec scratch files, so the start sweep tells an earlier agent's apart.
        self._exec_prefix = secrets.token_hex(4)
        # Sandboxes created and not yet started (their CNI ADD to run), with what start_sandbox finishes from.
        self._pending: dict[str, _PendingSandbox] = {}
        # Sandboxes whose network failed a CNI CHECK: reported not ready, so their pod gets a new one.
        self._network_broken: set[str] = set()
        # The exit dir must exist before anything watches it (PLEG's inotify).
        self._ensure_dirs()

    # ------------------------------------------------------------ paths

    def layout(self, uid: str) -> bl.PodLayout:
        return bl.PodLayout(self.paths.pod_dir(uid))

    def pod_cgroups(self, uid: str) -> list[str]:
        """Every place kubelet's cgroupfs layout may put the pod: `<root>/pod<uid>` (Guaranteed), then the
        `burstable/` and `besteffort/` tiers."""
        return [cg_qos.pod_cgroup_path(self.paths.cgroup_root, q, uid)  # type: ignore[arg-type]
                for q in ("Guaranteed", "Burstable", "BestEffort")]

    def pod_cgroup(self, uid: str, pod: "Pod | None" = None) -> str:
        """The pod's cgroup: from its QoS class when the pod is known, else the one that exists."""
        if pod is not None:
            return cg_qos.pod_cgroup_path(self.paths.cgroup_root, qos_class(pod), uid)
        candidates = self.pod_cgroups(uid)
        try:
            cgroups = self._cgroups()
        except CgroupError:
            return candidates[0]
        return next((c for c in candidates if cgroups.exists(c)), candidates[0])

    def _cgroups(self) -> Any:
        if self._cgroup_writer is None:
            self._cgroup_writer = detect(CGROUP_MOUNT)
        return self._cgroup_writer

    def cgroup_controllers(self) -> frozenset[str]:
        """The controllers pod cgroups can use here, read once (the kernel's set does not change while it runs)."""
        if self._controllers is None:
            self._controllers = available_controllers(CGROUP_MOUNT)
        return self._controllers

    def admit(self, pod: "Pod") -> Admission | None:
        """Whether the pod's limits can be applied here: None, a refusal with the fix, or a warning that it runs
        without some (--allow-missing-cgroup-controllers)."""
        return admit_controllers(
            needed_controllers(pod, cg_qos.pod_pids_limit(pod, self.pod_max_pids)), self.cgroup_controllers(),
            allow_missing=self.allow_missing_controllers, v2=is_v2(CGROUP_MOUNT), cmdline_file=self.cmdline_file())

    def cmdline_file(self) -> str | None:
        """The device's cmdline.txt (None: not one the Pi firmware boots), probed once like the controllers."""
        if self._cmdline_file is False:
            self._cmdline_file = probe_cmdline_file()
        return self._cmdline_file if isinstance(self._cmdline_file, str) else None

    def _without_controllers(self) -> frozenset[str]:
        return frozenset(LIMIT_CONTROLLERS) - self.cgroup_controllers()

    def _make_node_cgroups(self) -> None:
        """The root pods cgroup with the node allocatable caps, and the burstable/besteffort tiers, once per run."""
        root = self.paths.cgroup_root
        if self._node_cgroup_ready or not root.strip("/"):
            return
        writer = self._cgroups()
        writer.create_pod(root, self.node_cgroup or PodResources())
        for qos, tier in (("Burstable", BURSTABLE_TIER), ("BestEffort", BESTEFFORT_TIER)):
            writer.create_pod(cg_qos.qos_cgroup_path(root, qos), tier)  # type: ignore[arg-type]
        self._node_cgroup_ready = True

    def _make_pod_cgroup(self, pod: "Pod", uid: str) -> None:
        """kubelet's pod cgroup with the pod's totals (cpu, memory, pids) before anything runs in it."""
        path = self.pod_cgroup(uid, pod)
        try:
            self._make_node_cgroups()
            self._cgroups().create_pod(path, cg_qos.pod_resources(pod, self.pod_max_pids))
        except CgroupError as exc:
            raise SandboxError(f"pod {_full(pod)}: cannot set up its cgroup {path}: {exc}") from exc

    def monitor_cgroup(self, uid: str, pod: "Pod | None" = None) -> str:
        """Where the pod's conmons live: a leaf `conmon` under the pod's cgroup (CRI-O's conmon_cgroup="pod").

        Started by edgelet, a conmon would stay in the cgroup of the systemd
        unit that ran edgelet: `edgelet-runonce.service` would keep the
        conmons of the boot's pods ("remains running after unit stopped"),
        `edgelet.service` those of every pod it started. In the pod's cgroup
        they belong to no unit, are charged to their pod, and go with it.
        """
        return self.pod_cgroup(uid, pod) + "/" + MONITOR_CGROUP

    def _move_monitor(self, bundle: Path, cgroup: str) -> None:
        pid = conmon.conmon_pid(bundle)
        if pid is None:
            return
        try:
            self._cgroups().add_process(cgroup, pid)
        except CgroupError as exc:
            # The container runs either way; only where its monitor is accounted differs.
            log.warning("Cannot move conmon into the pod's cgroup", cgroup=cgroup, pid=pid, err=str(exc))

    def _ensure_dirs(self) -> None:
        # Private: bundles and checkpoints hold pod specs with their env values.
        for d in (self.paths.root_dir, self.paths.run_dir):
            ensure_dir(d, tighten_from=d)
        for d in (self.paths.runc_root, self.paths.exit_dir, self.paths.socket_dir, self.paths.pods_dir,
                  self.paths.ns_dir):
            ensure_dir(d, tighten_from=d)

    # ------------------------------------------------------------ observation

    def _observe_bundle(self, cid: str, ann: Mapping[str, str], entry: Mapping[str, Any] | None, bundle: Path | None) -> Observed:
        exit_info = _read_exit(self.paths.exit_dir / cid, self.clock.now())
        if exit_info is None and bundle is not None:
            exit_info = _read_exit(bundle / bl.EXIT_FILE, self.clock.now())
        started = _read_float(bundle / bl.STARTED_FILE) if bundle is not None else None
        oom = bundle is not None and (bundle / bl.OOM_FILE).exists()
        if exit_info is not None and bundle is not None and not oom and cid not in self._oom_checked:
            oom = self._record_oom_kills(cid, ann, bundle)
        alive = False
        pinned_live = False
        # Created too: one whose conmon is gone (an agent killed while conmon ran `runc create`) must not be
        # started, since nobody would record its exit (plan.actions resumable).
        status = entry.get("status") if entry is not None else None
        if ann.get(ANN_INFRA) == "false":
            # No pause process: it runs from its start until its namespace files go (a stop, a reboot).
            files = [p for _, p in parse_namespaces(ann.get(ANN_NAMESPACES, ""))]
            if ann.get(ANN_NETNS):
                files.append(ann[ANN_NETNS])
            pinned_live = started is not None and exit_info is None and all(pinns.is_pinned(f) for f in files)
        elif bundle is not None and exit_info is None and (entry is None or status in ("stopped", "created")):
            alive = conmon.is_alive(conmon.conmon_pid(bundle))
        return self._with_message(Observed(cid, dict(ann), entry, exit_info, started, oom, alive,
                                           pinned_live=pinned_live), bundle)

    def _with_message(self, o: Observed, bundle: Path | None) -> Observed:
        """`o` with its termination message once it exited (blocking I/O: kubelet's runtime reads it in
        getContainerStatus), from the cache when it was read after a recorded exit."""
        message = self._messages.get(o.id)
        if message is None:
            # Judged first, so that a relist builds no second record of every running container.
            if o.annotations.get(ANN_KIND) != KIND_CONTAINER or judge_state(o)[0] != "exited":
                return o
            rec = build_record(o)
            if not isinstance(rec, ContainerRecord):
                return o
            if bundle is None:
                bundle = self.layout(rec.pod_uid).container_dir(rec.name, rec.attempt)
            message = termination_message(bundle, o.annotations, rec)
            if o.exit is not None and o.exit.code is not None:
                # Only an exit conmon recorded is final (it writes the exit file once the log is drained). An
                # exit judged unknown may be a container created after `runc list` began, still running.
                self._messages[o.id] = message
        return dataclasses.replace(o, termination_message=message)

    def _record_oom_kills(self, cid: str, ann: Mapping[str, str], bundle: Path) -> bool:
        """Whether the kernel OOM-killed a process of the exited container, from its cgroup's counter.

        Read once per exit, while runc still keeps the container's cgroup; a kill is recorded as the
        bundle's `oom` marker (the file conmon writes when it catches the event itself), so the reason
        outlives the cgroup and an agent restart, and nothing is written when there was none.
        """
        self._oom_checked.add(cid)
        uid = ann.get(ANN_POD_UID, "")
        if not uid:
            return False
        kills = None
        for pod_cgroup in self.pod_cgroups(uid):
            kills = read_oom_kills(f"{pod_cgroup}/{cid}", CGROUP_MOUNT)
            if kills is not None:
                break
        if not kills:
            return False
        try:
            (bundle / bl.OOM_FILE).touch()
        except OSError as exc:
            log.warning("cannot record the OOM kill", container=cid, error=str(exc))
        return True

    def _scan_disk(self, entries: Mapping[str, Mapping[str, Any]], uid: str | None) -> list[Observed]:
        """Observe every runc container plus the bundles on disk runc no longer knows (blocking I/O)."""
        observed: list[Observed] = []
        for cid, entry in entries.items():
            ann = entry.get("annotations") or {}
            if ANN_KIND not in ann or (uid is not None and ann.get(ANN_POD_UID) != uid):
                continue
            bundle = Path(entry["bundle"]) if entry.get("bundle") else None
            if bundle is not None:
                self._bundles[cid] = bundle
            observed.append(self._observe_bundle(cid, ann, entry, bundle))
        pods_dir = self.paths.pods_dir
        uid_dirs = [pods_dir / uid] if uid is not None else (sorted(pods_dir.iterdir()) if pods_dir.is_dir() else [])
        for uid_dir in uid_dirs:
            try:
                bundles = bl.PodLayout(uid_dir).bundles()
            except FileNotFoundError:
                continue
            for b in bundles:
                try:
                    cid = (b / bl.ID_FILE).read_text().strip()
                    if not cid or cid in entries:
                        continue
                    config = json.loads((b / bl.CONFIG).read_text())
                except (OSError, ValueError):
                    # A bundle being created or removed right now; the next relist sees it settled.
                    continue
                ann = config.get("annotations") or {}
                if ANN_KIND not in ann:
                    continue
                self._bundles[cid] = b
                observed.append(self._observe_bundle(cid, ann, None, b))
        if uid is None:
            # A container gone without remove_container (its bundle removed by hand) takes its message and its
            # OOM check along: over a year of restarts, what is kept per container id must not only grow.
            seen = {o.id for o in observed}
            for cid in [c for c in list(self._messages) if c not in seen]:
                self._messages.pop(cid, None)
            for cid in [c for c in list(self._oom_checked) if c not in seen]:
                self._oom_checked.discard(cid)
        return observed

    async def _observe(self, uid: str | None = None) -> list[Observed]:
        entries = {e["id"]: e for e in await self.runc.list() if e.get("id")}
        return await asyncio.to_thread(self._scan_disk, entries, uid)

    async def list_pods(self) -> dict[str, PodRuntimeStatus]:
        observed = await self._observe()
        return self._mark_networks(build_pod_statuses(observed, await asyncio.to_thread(self._pod_dir_uids)))

    def _mark_networks(self, statuses: dict[str, PodRuntimeStatus]) -> dict[str, PodRuntimeStatus]:
        if not self._network_broken:
            return statuses
        out = {}
        for uid, st in statuses.items():
            if any(s.id in self._network_broken for s in st.sandboxes):
                st = dataclasses.replace(st, sandboxes=tuple(
                    dataclasses.replace(s, network_ready=s.id not in self._network_broken) for s in st.sandboxes))
            out[uid] = st
        return out

    def _pod_dir_uids(self) -> list[str]:
        try:
            return [d.name for d in self.paths.pods_dir.iterdir() if d.is_dir()]
        except FileNotFoundError:
            return []

    async def pod_status(self, uid: str) -> PodRuntimeStatus:
        # Every sandbox and container of a pod has its bundle under the pod's dir: without
        # that dir there is nothing to ask runc about (a new pod's first sync skips `runc list`).
        # A copy: observation threads add to the map while this runs on the loop (list() copies under the GIL).
        known = any(uid in bundle.parts for bundle in list(self._bundles.values()))  # seen by an earlier relist
        if not known and not await asyncio.to_thread(self.paths.pod_dir(uid).is_dir):
            return PodRuntimeStatus(uid=uid)
        return self._mark_networks(build_pod_statuses(await self._observe(uid))).get(uid, PodRuntimeStatus(uid=uid))

    async def _bundle_of(self, cid: str) -> Path | None:
        known = self._bundles.get(cid)
        if known is not None and known.exists():
            return known
        await self._observe()
        return self._bundles.get(cid)

    # ------------------------------------------------------------ sandbox

    def _pause_spec(self) -> PauseSpec:
        if self._pause is None:
            self._pause = pause_spec(self.paths.root_dir, self.catatonit_bin, self.pause_image)
        return self._pause

    def _hosts_text(self, pod: "Pod", hostname: str, pod_ips: Sequence[str]) -> str:
        """The pod's /etc/hosts (blocking: with hostNetwork it starts from the node's)."""
        spec = pod.spec
        host_network = bool(spec is not None and spec.host_network)
        host_hosts = ""
        if host_network:
            try:
                host_hosts = bl.HOST_HOSTS.read_text()
            except OSError:
                host_hosts = ""
        aliases = [(a.ip, tuple(a.hostnames or ())) for a in ((spec.host_aliases if spec else None) or [])]
        return bl.build_hosts_file(hostname, pod_ips=pod_ips, host_aliases=aliases, host_network=host_network,
                                   host_hosts=host_hosts, fqdn=bl.pod_fqdn(pod, hostname, self.cluster_domain))

    def _write_pod_files(self, pod: "Pod", layout: bl.PodLayout, hostname: str, pod_ips: Sequence[str] = ()) -> None:
        try:
            host_resolv = bl.HOST_RESOLV_CONF.read_text()
        except OSError:
            host_resolv = ""
        resolv, warnings = bl.pod_resolv_conf(pod, host_resolv, self.cluster_dns, self.cluster_domain)
        for w in warnings:
            log.warning("DNS configuration", pod=_full(pod), detail=w)
            if "--cluster-dns" in w and self.on_warning is not None:
                self.on_warning(pod, None, "MissingClusterDNS", w)
        hosts = self._hosts_text(pod, hostname, pod_ips)
        # Bind-mounted into the containers, whose users (any uid) read them.
        # Not fsynced: every new sandbox writes them again, and a power cut leaves no sandbox to use them.
        bl.write_file(layout.hosts, hosts, 0o644, durable=False)
        bl.write_file(layout.resolv_conf, resolv, 0o644, durable=False)
        bl.write_file(layout.hostname, hostname + "\n", 0o644, durable=False)

    async def run_sandbox(self, pod: "Pod", attempt: int) -> SandboxRecord:
        if self.infra_container or needs_infra(pod):
            return await self._run_infra_sandbox(pod, attempt)
        sandbox = await self._create_pinned_sandbox(pod, attempt)
        if sandbox.state == "running":
            return sandbox
        try:
            return await self.start_sandbox(pod, sandbox)
        except BaseException:
            # Whatever failed (or a cancellation), nothing half-made stays behind.
            await asyncio.shield(self._undo_pinned(sandbox.id, self.layout(sandbox.pod_uid).sandbox_dir))
            raise

    async def create_sandbox(self, pod: "Pod", attempt: int) -> SandboxRecord:
        """run_sandbox's first half where the pod has a CNI network: everything but the plugin chain's ADD."""
        if self.infra_container or needs_infra(pod):
            return await self._run_infra_sandbox(pod, attempt)
        return await self._create_pinned_sandbox(pod, attempt)

    async def start_sandbox(self, pod: "Pod", sandbox: SandboxRecord) -> SandboxRecord:
        """The second half: ADD in the namespace made, then /etc/hosts with the pod IPs (rewritten in place:
        a container created meanwhile has it bind-mounted), the sysctls and the start time, the mark of a
        started sandbox. On failure (or a cancellation) the sandbox is left created, never started, for the
        caller to remove once what it created in it is gone."""
        if sandbox.state == "running":
            return sandbox
        held = self._pending.pop(sandbox.id, None)
        if held is None:
            raise SandboxError(f"pod {_full(pod)}: sandbox {sandbox.id[:12]} was not created by this agent")
        uid = pod_uid(pod)
        layout = self.layout(uid)
        hostname = bl.pod_hostname(pod, self.node_hostname, self.cluster_domain)
        try:
            assert self.network is not None
            network = self.network
            attached = await network.attach(held.pending, record=False)

            def finish() -> None:
                # One trip to a worker thread after ADD: its result cached, then the sandbox finished.
                network.record(held.pending, attached)
                if attached.ips:
                    bl.rewrite_in_place(layout.hosts, self._hosts_text(pod, hostname, attached.ips))
                held.annotations[ANN_POD_IPS] = ",".join(attached.ips)
                self._write_pinned_config(layout.sandbox_dir, held.annotations)
                self._finish_pinned(layout.sandbox_dir, held.sysctls, held.pinned, attached.netns)

            await asyncio.to_thread(finish)
        except (RuntimeError_, OSError, SpecError, NetworkError) as exc:
            raise SandboxError(f"pod {_full(pod)}: cannot create the sandbox: {exc}") from exc
        log.info("Sandbox started", pod=_full(pod), sandbox=sandbox.id[:12], ips=",".join(attached.ips) or None)
        return dataclasses.replace(sandbox, state="running", ips=attached.ips)

    async def _run_infra_sandbox(self, pod: "Pod", attempt: int) -> SandboxRecord:
        """A sandbox with a pause process (shareProcessNamespace, or --pod-infra-container)."""
        uid = pod_uid(pod)
        layout = self.layout(uid)
        self._ensure_dirs()
        # A sandbox left in the bundle dir is replaced: a new sandbox means the old one is done.
        old = await asyncio.to_thread(_bundle_id, layout.sandbox_dir)
        if old:
            await self.remove_container(old)
        sid = _new_id()
        bundle = layout.sandbox_dir
        host_network = bool(pod.spec is not None and pod_spec(pod).host_network)
        hostname = bl.pod_hostname(pod, self.node_hostname, self.cluster_domain)
        created = self.clock.now()
        log_path = self.paths.pod_log_dir(meta(pod).namespace or "default", meta(pod).name or "", uid) / "sandbox.log"
        done = False
        try:
            pause = self._pause_spec()
            await asyncio.to_thread(self._prepare_sandbox_dirs, pod, layout, hostname, bundle, sid, log_path)
            rootfs_dir = pause.rootfs
            if rootfs_dir is None:
                assert pause.image is not None
                rootfs_dir = await asyncio.to_thread(rootfs.mount_rootfs, pause.image.layers, bundle)
            attached = None
            if not host_network:
                attached = await self._attach_network(pod, sid)
                if attached is not None and attached.ips:
                    await asyncio.to_thread(self._write_pod_files, pod, layout, hostname, attached.ips)
            annotations = {
                ANN_KIND: KIND_SANDBOX,
                ANN_POD_UID: uid,
                ANN_POD_NAME: meta(pod).name or "",
                ANN_POD_NAMESPACE: meta(pod).namespace or "",
                ANN_ATTEMPT: str(attempt),
                ANN_CREATED: repr(created),
                ANN_LOG_PATH: str(log_path),
                ANN_HOST_NETWORK: "true" if host_network else "false",
            }
            if attached is not None:
                annotations[ANN_NETNS] = attached.netns
                annotations[ANN_POD_IPS] = ",".join(attached.ips)
            if pause.image is not None:
                annotations[ANN_IMAGE_ID] = pause.image.id
            ctx = ocispec.SandboxContext(
                rootfs=str(rootfs_dir),
                args=pause.args,
                cgroups_path=f"{self.pod_cgroup(uid, pod)}/{sid}",
                hostname=hostname,
                annotations=annotations,
                min_oom_score_adj=self.host.min_oom_score_adj,
                seccomp=await asyncio.to_thread(self._seccomp_host, pod),
                netns_path=attached.netns if attached is not None else None,
                allowed_unsafe_sysctls=self.allowed_unsafe_sysctls,
            )
            config = ocispec.build_sandbox_spec(pod, ctx)
            await asyncio.to_thread(bl.write_file, bundle / bl.CONFIG, json.dumps(config, indent=1))
            await asyncio.to_thread(self._make_pod_cgroup, pod, uid)
            pid = await conmon.create(self._conmon_args(sid, f"k8s_POD_{meta(pod).name}_{meta(pod).namespace}_{uid}_{attempt}",
                                                        bundle, log_path), runner=self._exec)
            await asyncio.to_thread(self._move_monitor, bundle, self.monitor_cgroup(uid, pod))
            crash_point("sandbox.create")
            await self.runc.start(sid)
            await asyncio.to_thread(bl.write_file, bundle / bl.STARTED_FILE, repr(self.clock.now()))
            done = True
        except (RuntimeError_, OSError, SpecError, NetworkError) as exc:
            raise SandboxError(f"pod {_full(pod)}: cannot create the sandbox: {exc}") from exc
        finally:
            if not done:
                # Whatever failed (or a cancellation), nothing half-made stays behind.
                await asyncio.shield(self._undo(sid, bundle))
                await asyncio.shield(self._detach_network(sid))
        self._bundles[sid] = bundle
        log.info("Sandbox started", pod=_full(pod), sandbox=sid[:12], pid=pid)
        return SandboxRecord(
            id=sid, pod_uid=uid, pod_name=meta(pod).name or "", pod_namespace=meta(pod).namespace or "",
            attempt=attempt, state="running", pid=pid, created_at=created, host_network=host_network,
            ips=attached.ips if attached is not None else (), netns=attached.netns if attached is not None else "",
        )

    async def _create_pinned_sandbox(self, pod: "Pod", attempt: int) -> SandboxRecord:
        """A sandbox without an infra container: its bundle (the record, written before anything it holds), the
        pod cgroup, the CNI network's namespace, then the other namespaces pinned as files under the run dir.

        Without a CNI network it is started here ("running"); with one it is "created": its namespaces exist
        and containers may be created in them, but nothing may start before `start_sandbox` attached it."""
        uid = pod_uid(pod)
        layout = self.layout(uid)
        self._ensure_dirs()
        old = await asyncio.to_thread(_bundle_id, layout.sandbox_dir)
        if old:
            await self.remove_container(old)
        sid = _new_id()
        bundle = layout.sandbox_dir
        host_network = bool(pod.spec is not None and pod_spec(pod).host_network)
        hostname = bl.pod_hostname(pod, self.node_hostname, self.cluster_domain)
        created = self.clock.now()
        log_path = self.paths.pod_log_dir(meta(pod).namespace or "default", meta(pod).name or "", uid) / "sandbox.log"
        ns_dir = self.paths.ns_dir / sid
        annotations = {
            ANN_KIND: KIND_SANDBOX,
            ANN_POD_UID: uid,
            ANN_POD_NAME: meta(pod).name or "",
            ANN_POD_NAMESPACE: meta(pod).namespace or "",
            ANN_ATTEMPT: str(attempt),
            ANN_CREATED: repr(created),
            ANN_HOST_NETWORK: "true" if host_network else "false",
            ANN_INFRA: "false",
        }
        pending = None
        pinned: dict[str, str] = {}  # {OCI type: file}
        files: dict[str, str] = {}  # the same, {pinns kind: file}
        done = False
        try:
            sysctls = ocispec.build_sysctls(pod, self.allowed_unsafe_sysctls)
            if not host_network:
                pending = await self._begin_network(pod, sid)

            def make() -> None:
                self._prepare_sandbox_dirs(pod, layout, hostname, bundle, sid, log_path)
                # The record first: a kill from here on leaves a sandbox every relist finds (judged exited) and
                # the next sync removes, with whatever it pinned.
                self._write_pinned_config(bundle, annotations)
                self._make_pod_cgroup(pod, uid)
                if pending is not None:
                    assert self.network is not None
                    self.network.make(pending)
                    annotations[ANN_NETNS] = pending.entry.netns
                    pinns.loopback_up(pending.entry.netns)
                files.update(pinns.pin(ns_dir, pinned_kinds(pod, own_netns=pending is None), hostname))
                pinned.update({pinns.OCI_TYPES[k]: p for k, p in files.items()})
                annotations[ANN_NAMESPACES] = format_namespaces(pinned)
                self._write_pinned_config(bundle, annotations)
                if pending is None:
                    self._finish_pinned(bundle, sysctls, files, None)

            # One trip to a worker thread (the plugins' STATUS, if any, before it): on a busy machine each trip
            # waits for a core.
            await asyncio.to_thread(make)
            done = True
        except (RuntimeError_, OSError, SpecError, NetworkError) as exc:
            raise SandboxError(f"pod {_full(pod)}: cannot create the sandbox: {exc}") from exc
        finally:
            if not done:
                # Whatever failed (or a cancellation), nothing half-made stays behind.
                await asyncio.shield(self._undo_pinned(sid, bundle))
        self._bundles[sid] = bundle
        if pending is not None:
            self._pending[sid] = _PendingSandbox(pending, sysctls, files, annotations)
        log.info("Sandbox started" if pending is None else "Sandbox created, its network to attach", pod=_full(pod),
                 sandbox=sid[:12], namespaces=",".join(sorted(pinned)) or None)
        return SandboxRecord(
            id=sid, pod_uid=uid, pod_name=meta(pod).name or "", pod_namespace=meta(pod).namespace or "",
            attempt=attempt, state="running" if pending is None else "created", pid=None, created_at=created,
            host_network=host_network, ips=(), netns=pending.entry.netns if pending is not None else "",
            infra=False, namespaces=tuple(sorted(pinned.items())),
        )

    def _finish_pinned(self, bundle: Path, sysctls: Mapping[str, str], files: Mapping[str, str],
                       netns: str | None) -> None:
        """The pinned sandbox's last step (blocking): its sysctls inside its namespaces, then its start time,
        which makes it started (running while its namespace files stay)."""
        if sysctls:
            joined: dict[str, str] = {k: files[k] for k in ("net", "ipc") if k in files}
            if netns is not None:
                joined["net"] = netns
            pinns.apply_sysctls(sysctls, joined)
        crash_point("sandbox.create")
        bl.write_file(bundle / bl.STARTED_FILE, repr(self.clock.now()), durable=False)

    async def _begin_network(self, pod: "Pod", sid: str) -> "Pending | None":
        if self.network is None:
            return None
        pending = await self.network.begin(pod, sid)
        if pending is None:
            self._warn_loopback_only(pod)
        return pending

    @staticmethod
    def _write_pinned_config(bundle: Path, annotations: Mapping[str, str]) -> None:
        # No process: the bundle's config.json is the record, holding only what a relist rebuilds it from.
        bl.write_file(bundle / bl.CONFIG, json.dumps({"ociVersion": oci_defaults.OCI_VERSION,
                                                      "annotations": dict(annotations)}, indent=1))

    async def _undo_pinned(self, sid: str, bundle: Path) -> None:
        """Remove a half-made sandbox without an infra container: namespaces, network, bundle."""
        self._pending.pop(sid, None)
        try:
            await asyncio.to_thread(pinns.unpin, self.paths.ns_dir / sid)
            await self._detach_network(sid)
            await asyncio.to_thread(self._remove_files, sid, bundle)
        except (RuntimeError_, OSError) as exc:
            log.error("Cleanup after a failed sandbox left things behind", exc, sandbox=sid[:12], bundle=str(bundle))

    async def _attach_network(self, pod: "Pod", sid: str) -> "Attached | None":
        if self.network is None:
            return None
        attached = await self.network.setup(pod, sid)
        if attached is None:
            self._warn_loopback_only(pod)
        return attached

    def _warn_loopback_only(self, pod: "Pod") -> None:
        """A pod that wanted a network and got none (no CNI config yet): NetworkNotReady, and why."""
        if self.network is not None and self.on_warning is not None:
            _, why = self.network.readiness()
            self.on_warning(pod, None, "NetworkNotReady", f"{why}; the pod has loopback only")

    async def _detach_network(self, sid: str) -> None:
        if self.network is None:
            return
        try:
            await self.network.teardown(sid, broken=sid in self._network_broken)
            self._network_broken.discard(sid)
        except (NetworkError, OSError) as exc:
            log.warning("Pod network teardown failed; the next start retries", sandbox=sid[:12], err=str(exc))

    async def check_networks(self, pods: Mapping[str, PodRuntimeStatus] | None = None) -> dict[str, str]:
        """Housekeeping: CNI CHECK of every running sandbox's network; {pod uid: why} for the pods whose
        sandbox network is broken. Those sandboxes are reported not ready from now on (their pods get a new
        sandbox with a new network at their next sync).

        `pods` is what the runtime held at PLEG's last relist (the agent passes it): an idle agent then runs
        no `runc list` of its own for the check (issue 25: one a minute was half the idle CPU of its children).
        A sandbox started since is checked next time; one gone since fails its CHECK as it would anyway."""
        if self.network is None:
            return {}
        if pods is None:
            pods = await self.list_pods()
        running = {s.id: uid for uid, p in pods.items() for s in p.sandboxes if s.state == "running"}
        if not running:
            self._network_broken = set()
            return {}
        failed = await self.network.check(set(running) - self._network_broken)
        self._network_broken = {sid for sid in self._network_broken if sid in running} | set(failed)
        return {running[sid]: why for sid, why in failed.items()}

    def network_host_links(self, pods: Mapping[str, PodRuntimeStatus]) -> set[str]:
        """Names of the host-side links of the running sandboxes' networks (blocking; empty without CNI)."""
        if self.network is None:
            return set()
        return self.network.host_links({s.id for p in pods.values() for s in p.sandboxes if s.state == "running"})

    async def cleanup_networks(self) -> int:
        """At start: release the network of every sandbox that no longer runs (a crash, a power cut)."""
        if self.network is None:
            return 0
        live = {s.id for p in (await self.list_pods()).values() for s in p.sandboxes if s.state == "running"}
        return await self.network.cleanup(live)

    def _prepare_sandbox_dirs(self, pod: "Pod", layout: bl.PodLayout, hostname: str, bundle: Path, sid: str,
                              log_path: Path) -> None:
        ensure_dir(layout.dir)
        self._write_pod_files(pod, layout, hostname)
        # kubelet mounts volumes before it creates the sandbox.
        bl.prepare_volumes(bl.plan_volumes(pod, layout))
        ensure_dir(bundle)
        bl.write_file(bundle / bl.ID_FILE, sid)
        ensure_log_dir(self.paths.log_dir, log_path.parent)

    def _seccomp_host(self, pod: "Pod") -> ocispec.SeccompHost:
        """The settings and host facts seccomp needs, with the text of every Localhost profile the pod names."""
        profiles: dict[str, str] = {}
        base = self.paths.seccomp_dir
        for name in ocispec.seccomp_profile_names(pod):
            path = base / name
            # Names with '..' or a leading '/' are refused by the builder; never read outside the dir.
            if name.startswith("/") or ".." in name.split("/"):
                continue
            try:
                profiles[name] = path.read_text()
            except FileNotFoundError:
                continue  # the builder says it is missing, naming it
            except (OSError, UnicodeDecodeError) as exc:
                raise SpecError(f"pod {_full(pod)}: cannot read seccomp profile {str(path)!r}: {exc}") from exc
        return ocispec.SeccompHost(
            default_on=self.seccomp_default,
            arch=goarch(self.host.machine) if self.host.machine else "amd64",
            kernel_version=self.host.kernel_version,
            profile_dir=str(base),
            localhost_profiles=profiles,
        )

    def _security_facts(self, pod: "Pod", container: "Container") -> dict[str, Any]:
        """ContainerContext fields read from the host now: seccomp profiles, AppArmor, /dev for privileged."""
        sc = container.security_context
        privileged = bool(sc is not None and sc.privileged)
        facts: dict[str, Any] = {
            "seccomp": self._seccomp_host(pod),
            "bounding_capabilities": self.host.bounding_capabilities,
            "apparmor_enabled": self.host.apparmor_enabled,
        }
        if self.host.apparmor_enabled:
            facts["apparmor_loaded"] = loaded_apparmor_profiles()
        if privileged:
            facts["host_devices"] = host_devices()
        return facts

    def _warn_apparmor(self, pod: "Pod", container: "Container", ctx: ocispec.ContainerContext) -> None:
        try:
            decision = compute_apparmor(pod, container, enabled=ctx.apparmor_enabled, loaded=ctx.apparmor_loaded)
        except SecurityError:
            return  # the builder has already refused it
        if decision.warning:
            log.warning("AppArmor", pod=_full(pod), container=container.name, detail=decision.warning)
            if self.on_warning is not None:
                self.on_warning(pod, container.name, "AppArmorProfileNotApplied", decision.warning)

    async def stop_sandbox(self, sandbox_id: str) -> None:
        bundle = await self._bundle_of(sandbox_id)
        ann = await asyncio.to_thread(_bundle_annotations, bundle)
        if ann.get(ANN_INFRA) == "false":
            assert bundle is not None
            # Network first (DEL needs the namespace), then the other namespaces; the exit file makes it stopped
            # even where it pinned nothing (hostNetwork and hostIPC).
            await self._detach_network(sandbox_id)
            await asyncio.to_thread(pinns.unpin, self.paths.ns_dir / sandbox_id)
            if not (bundle / bl.EXIT_FILE).exists():
                await asyncio.to_thread(bl.write_file, bundle / bl.EXIT_FILE, "0")
            return
        # The pause process holds nothing worth a grace period.
        await self._kill_and_wait(sandbox_id, bundle)
        await self._detach_network(sandbox_id)

    # ------------------------------------------------------------ containers

    def _conmon_args(self, cid: str, name: str, bundle: Path, log_path: Path, *, stdin: bool = False,
                     stdin_once: bool = False, terminal: bool = False) -> conmon.ConmonArgs:
        return conmon.ConmonArgs(
            conmon=self.conmon_bin, runtime=self.runtime_path, runtime_root=self.paths.runc_root, container_id=cid,
            name=name, bundle=bundle, log_path=log_path, exit_dir=self.paths.exit_dir, socket_dir=self.paths.socket_dir,
            log_size_max=self.log_size_max, stdin=stdin, stdin_once=stdin_once, terminal=terminal,
        )

    async def create_container(
        self,
        pod: "Pod",
        container: "Container",
        sandbox: SandboxRecord,
        image: "ImageRecord",
        attempt: int,
        container_type: str = "regular",
        prepared: PreparedContainer | None = None,
    ) -> str:
        from edgelet.api.hash import container_hash

        uid = pod_uid(pod)
        ns, pod_name = meta(pod).namespace or "", meta(pod).name or ""
        try:
            if sandbox.infra and (sandbox.pid is None or not conmon.is_alive(sandbox.pid)):
                raise SandboxError(f"pod {_full(pod)}: sandbox {sandbox.id[:12]} is not running")
            if not sandbox.infra and not all(pinns.is_pinned(p) for _, p in sandbox.namespaces):
                raise SandboxError(
                    f"pod {_full(pod)}: sandbox {sandbox.id[:12]} is not running (its namespaces are gone)")
        except SandboxError:
            if prepared is not None:
                await self.discard_prepared(prepared)
            raise
        if prepared is None:
            prepared = await self.prepare_container(pod, container, image, attempt, container_type)
        elif (prepared.pod_uid, prepared.name, prepared.attempt, prepared.image_id) != (
                uid, container.name, attempt, image.id):
            await self.discard_prepared(prepared)
            raise CreateContainerError(f"pod {_full(pod)} container {container.name}: prepared for another instance"
                                       f" ({prepared.name} attempt {prepared.attempt})")
        p: _Prepared = prepared.data
        cid, bundle, layout = prepared.id, p.bundle, self.layout(uid)
        done = False
        try:
            annotations = {
                ANN_KIND: KIND_CONTAINER,
                ANN_POD_UID: uid,
                ANN_POD_NAME: pod_name,
                ANN_POD_NAMESPACE: ns,
                ANN_CONTAINER_NAME: container.name,
                ANN_CONTAINER_TYPE: "init" if container_type == "init" else "regular",
                ANN_ATTEMPT: str(attempt),
                ANN_HASH: container_hash(container),
                ANN_SANDBOX_ID: sandbox.id,
                ANN_IMAGE: container.image or "",
                ANN_IMAGE_ID: image.id,
                ANN_LOG_PATH: str(p.log_path),
                ANN_CREATED: repr(self.clock.now()),
                ANN_GRACE: str(_pod_grace(pod)),
                # kubelet reads the message by what the container's annotations say, not by today's spec.
                **termination_annotations(container),
            }
            ctx_args = dict(
                rootfs=str(p.rootfs_dir),
                cgroups_path=f"{self.pod_cgroup(uid, pod)}/{cid}",
                pids_limit=cg_qos.pod_pids_limit(pod, self.pod_max_pids),
                without_controllers=self._without_controllers(),
                allowed_unsafe_sysctls=self.allowed_unsafe_sysctls,
                namespace_paths=sandbox_namespace_paths(pod, sandbox.pid, sandbox.netns,
                                                        None if sandbox.infra else dict(sandbox.namespaces)),
                hostname=bl.pod_hostname(pod, self.node_hostname, self.cluster_domain),
                annotations=annotations,
                passwd=p.passwd,
                groups=p.groups,
                group_members=p.members,
                memory_capacity=self.host.memory_capacity,
                swap_controller=self.host.swap_controller,
                min_oom_score_adj=self.host.min_oom_score_adj,
                **p.facts,
            )

            def write_config() -> ocispec.ContainerContext:
                # Mounts, spec and config.json in one trip to a worker thread.
                ctx = ocispec.ContainerContext(mounts=self._container_mounts(pod, container, layout, bundle),
                                               **ctx_args)  # type: ignore[arg-type]
                config = ocispec.build_container_spec(pod, container, image.config, ctx)
                bl.write_file(bundle / bl.CONFIG, json.dumps(config, indent=1))
                return ctx

            # conmon starts up meanwhile and waits on its start pipe for the config (conmon.create's `start`).
            configured = asyncio.ensure_future(asyncio.to_thread(write_config))
            await conmon.create(self._conmon_args(cid, f"k8s_{container.name}_{pod_name}_{ns}_{uid}_{attempt}",
                                                  bundle, p.log_path, stdin=bool(container.stdin),
                                                  stdin_once=bool(container.stdin_once),
                                                  terminal=bool(container.tty)), runner=self._exec,
                                start=configured)
            self._warn_apparmor(pod, container, configured.result())
            # Before `runc start`, not beside it: a process moved into a cgroup is not held to its pids.max, so
            # a conmon joining a pod whose container already forked up to the pod's limit would exceed it.
            await asyncio.to_thread(self._move_monitor, bundle, self.monitor_cgroup(uid, pod))
            crash_point("container.create")
            done = True
        except CreateContainerError:
            raise
        except (SpecError, RuntimeError_, OSError) as exc:
            raise _create_error(pod, container, exc) from exc
        finally:
            if not done:
                # Whatever failed (or a cancellation), nothing half-made stays behind.
                await asyncio.shield(self._undo(cid, bundle, p.link))
        self._bundles[cid] = bundle
        log.info("Container created", pod=_full(pod), container=container.name, id=cid[:12], attempt=attempt)
        return cid

    async def prepare_container(
        self,
        pod: "Pod",
        container: "Container",
        image: "ImageRecord",
        attempt: int,
        container_type: str = "regular",
    ) -> PreparedContainer:
        uid = pod_uid(pod)
        ns, pod_name = meta(pod).namespace or "", meta(pod).name or ""
        layout = self.layout(uid)
        self._ensure_dirs()
        bundle = layout.container_dir(container.name, attempt)
        cid = _new_id()
        log_path = self.paths.container_log_path(ns, pod_name, uid, container.name, attempt)
        link = self.paths.container_log_link(ns, pod_name, container.name, cid)
        done = False
        def make() -> tuple[str | None, Any]:
            # A leftover of the same instance (a crash between create and record) is replaced.
            old = _bundle_id(bundle)
            if old:
                return old, None
            if bundle.exists():
                # One without an id (a power cut before its directory entries reached storage) names no
                # container to remove, but its writable layer must not become the new instance's.
                _remove_stale_bundle(bundle)
            return None, (self._prepare_container_dirs(container, image, bundle, cid, log_path, link),
                          self._security_facts(pod, container))

        try:
            # One trip to a worker thread in the usual case: on a busy machine each trip waits for a core.
            old, made = await asyncio.to_thread(make)
            if old:
                await self.remove_container(old)
                old, made = await asyncio.to_thread(make)
                if old:
                    raise CreateContainerError(f"pod {_full(pod)} container {container.name}: the previous"
                                               f" instance {old[:12]} in {bundle} was not removed")
            (rootfs_dir, passwd, groups, members), facts = made
            done = True
        except CreateContainerError:
            raise
        except (SpecError, RuntimeError_, OSError) as exc:
            raise _create_error(pod, container, exc) from exc
        finally:
            if not done:
                await asyncio.shield(self._undo_prepared(cid, bundle, link))
        return PreparedContainer(
            id=cid, pod_uid=uid, name=container.name, attempt=attempt, image_id=image.id,
            data=_Prepared(bundle=bundle, log_path=log_path, link=link, rootfs_dir=rootfs_dir, passwd=passwd,
                           groups=groups, members=members, facts=facts))

    async def discard_prepared(self, prepared: PreparedContainer) -> None:
        p: _Prepared = prepared.data
        await asyncio.shield(self._undo_prepared(prepared.id, p.bundle, p.link))

    async def _undo_prepared(self, cid: str, bundle: Path, link: Path) -> None:
        """Remove what prepare_container made: no conmon and no runc state exist yet, only files and the mount."""
        def undo() -> None:
            if os.path.lexists(link):
                link.unlink()
            self._remove_files(cid, bundle)

        try:
            await asyncio.to_thread(undo)
        except (RuntimeError_, OSError) as exc:
            log.error("Cleanup after a failed create left things behind", exc, container=cid[:12], bundle=str(bundle))

    def _container_mounts(self, pod: "Pod", container: "Container", layout: bl.PodLayout,
                          bundle: Path) -> tuple[ocispec.Mount, ...]:
        # After the sandbox, which made the volumes: never two preparations of one tmpfs at once.
        plans = bl.plan_volumes(pod, layout)
        bl.prepare_volumes(plans)
        return bl.container_mounts(pod, container, layout, plans, bundle, rro_supported=self.host.recursive_read_only)

    def _prepare_container_dirs(
        self, container: "Container", image: "ImageRecord", bundle: Path, cid: str, log_path: Path, link: Path,
    ) -> tuple[Path, dict[str, tuple[int, int]], dict[str, int], dict[str, tuple[str, ...]]]:
        ensure_dir(bundle)
        bl.write_file(bundle / bl.ID_FILE, cid)
        (bundle / bl.TERMINATION_LOG).touch(mode=0o666)
        rootfs_dir = rootfs.mount_rootfs(image.layers, bundle)
        passwd = parse_passwd(_read_rootfs_file(rootfs_dir, "etc/passwd"))
        group_text = _read_rootfs_file(rootfs_dir, "etc/group")
        groups = parse_group(group_text)
        members = parse_group_members(group_text)
        ensure_log_dir(self.paths.log_dir, log_path.parent)
        ensure_log_dir(self.paths.log_dir, link.parent)
        if os.path.lexists(link):
            link.unlink()
        link.symlink_to(log_path)
        return rootfs_dir, passwd, groups, members

    async def start_container(self, container_id: str) -> None:
        bundle = await self._bundle_of(container_id)
        try:
            await self.runc.start(container_id)
        except RuntimeError_ as exc:
            raise StartContainerError(f"container {container_id[:12]}: {exc}") from exc
        if bundle is not None:
            await asyncio.to_thread(bl.write_file, bundle / bl.STARTED_FILE, repr(self.clock.now()))

    async def stop_container(self, container_id: str, grace: float, signal: str = "SIGTERM") -> None:
        bundle = await self._bundle_of(container_id)
        if await self._has_exited(container_id, bundle):
            return
        try:
            await self.runc.kill(container_id, signal)
        except ExecError:
            if await self._has_exited(container_id, bundle):
                return
            log.warning("Stop signal failed, killing", container=container_id[:12], signal=signal)
        else:
            crash_point("container.stop")
            if await self._wait_exit(container_id, bundle, max(grace, MIN_STOP_GRACE)):
                return
            log.info("Grace period over, killing", container=container_id[:12], grace=grace)
        await self._kill_and_wait(container_id, bundle)

    async def exec_sync(self, container_id: str, argv: Sequence[str], timeout: float | None) -> _exec.Completed:
        """`runc exec` `argv` in the container and wait for it (probes, hooks); never raises on a non-zero exit.

        Raises ExecTimeout when `timeout` passes. Killing `runc exec` alone would
        leave the command running in the container, so on a timeout (or a
        cancellation) the command itself is SIGKILLed through runc's pid file, as
        containerd's ExecSync does.
        """
        exec_dir = self.paths.exec_dir
        exec_dir.mkdir(parents=True, exist_ok=True)
        pid_file = exec_dir / f"{self._exec_prefix}-{container_id[:12]}-{secrets.token_hex(6)}.pid"
        cmd = self.runc.argv("exec", "--pid-file", str(pid_file), container_id, *argv)
        try:
            return await self._exec(cmd, timeout=timeout, check=False)
        except (ExecTimeout, asyncio.CancelledError):
            _kill_pid_file(pid_file)
            raise
        finally:
            pid_file.unlink(missing_ok=True)

    async def start_exec(self, container_id: str, argv: Sequence[str], *, tty: bool, stdin: int, stdout: int,
                         stderr: int) -> ExecSession:
        """Start `argv` in the running container with its own process spec (`edgelet exec`), on the given
        descriptors; the caller waits for, signals or kills the returned session. ExecSessionError when the
        container is not running or has no bundle."""
        # Only `edgelet exec` and the node API's exec need it (with termios): not an idle agent.
        from edgelet.runtime.execsession import ExecSession, ExecSessionError, build_exec_process, terminal_size

        state = await self.runc.state(container_id)
        status = (state or {}).get("status", "unknown to runc")
        if status != "running":
            raise ExecSessionError(f"container {container_id[:12]} is not running ({status})")
        bundle = await self._bundle_of(container_id)
        if bundle is None:
            raise ExecSessionError(f"container {container_id[:12]} has no bundle")
        try:
            config = json.loads((bundle / "config.json").read_bytes())
            # With a terminal, its size goes into the spec (runc's own first resize comes after the command starts).
            spec = build_exec_process(config["process"], argv, tty=tty, size=terminal_size(stdin) if tty else None)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ExecSessionError(f"cannot read the process spec of container {container_id[:12]} in "
                                   f"{bundle}: {exc}") from exc
        exec_dir = self.paths.exec_dir
        exec_dir.mkdir(parents=True, exist_ok=True)
        name = f"{self._exec_prefix}-{container_id[:12]}-{secrets.token_hex(6)}"
        pid_file, process_file = exec_dir / f"{name}.pid", exec_dir / f"{name}.process.json"
        # 0600 from the start: the spec holds the container's environment.
        fd = os.open(process_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(spec, f)
        cmd = self.runc.argv("exec", "--process", str(process_file), "--pid-file", str(pid_file), container_id)
        try:
            process = await _exec.start(cmd, stdin=stdin, stdout=stdout, stderr=stderr)
        except ExecError:
            process_file.unlink(missing_ok=True)
            raise
        return ExecSession(process, pid_file, process_file)

    async def _kill_and_wait(self, cid: str, bundle: Path | None) -> None:
        if await self._has_exited(cid, bundle):
            return
        try:
            # --all: every process in the container's cgroup, so processes survive neither in a pid namespace
            # shared with the sandbox (where the container's init is not pid 1) nor as re-parented orphans.
            await self.runc.kill(cid, "SIGKILL", all=True)
        except ExecError:
            if await self._has_exited(cid, bundle):
                return
            raise
        if not await self._wait_exit(cid, bundle, KILL_WAIT):
            raise StopContainerError(f"container {cid[:12]} did not exit {KILL_WAIT:g}s after SIGKILL")

    async def _has_exited(self, cid: str, bundle: Path | None) -> bool:
        if (self.paths.exit_dir / cid).exists():
            return True
        state = await self.runc.state(cid)
        if state is None:
            return True
        if state.get("status") != "stopped":
            return False
        # Stopped: done once conmon has recorded it, or when there is no conmon left to record it.
        return bundle is None or not conmon.is_alive(conmon.conmon_pid(bundle))

    async def _wait_exit(self, cid: str, bundle: Path | None, timeout: float) -> bool:
        deadline = self.clock.monotonic() + timeout
        exit_file = self.paths.exit_dir / cid
        checks = 0
        while True:
            if exit_file.exists():
                return True
            checks += 1
            # The exit file is the fast path; ask runc now and then in case conmon is gone.
            if checks % 10 == 0 and await self._has_exited(cid, bundle):
                return True
            if self.clock.monotonic() >= deadline:
                return await self._has_exited(cid, bundle)
            await self.clock.sleep(POLL)

    async def remove_container(self, container_id: str) -> None:
        bundle = await self._bundle_of(container_id)
        try:
            await self.runc.delete(container_id, force=True)
        except ExecError:
            # A container runc cannot delete while processes linger: kill everything, then retry once.
            await self._kill_and_wait(container_id, bundle)
            await self.runc.delete(container_id, force=True)
        crash_point("container.remove")
        if bundle is not None:
            # Let conmon record the exit of a force-deleted process before its exit file is removed.
            await self._wait_monitor_gone(bundle)
        ann = await asyncio.to_thread(_bundle_annotations, bundle)
        if ann.get(ANN_KIND) == KIND_SANDBOX:
            # A sandbox that died without stop_sandbox (a kill between its death and the DEL, a pause process
            # killed from outside) still holds its network: its bundle is the last thing that remembers it.
            await self._detach_network(container_id)
            await asyncio.to_thread(pinns.unpin, self.paths.ns_dir / container_id)
        log_path = _container_log_path(ann)
        await asyncio.to_thread(self._remove_files, container_id, bundle, ann)
        if log_path is not None:
            # Container GC: a removed instance's log goes with it, rotated files too (kubelet removes
            # the log with the container). A sandbox's log is shared by its successors and stays.
            await asyncio.to_thread(remove_logs, log_path)
        self._released.discard(container_id)
        self._oom_checked.discard(container_id)
        self._pending.pop(container_id, None)
        self._bundles.pop(container_id, None)
        self._messages.pop(container_id, None)

    async def release_container(self, container_id: str) -> None:
        """Free what an exited container no longer needs: its runc state and cgroup (`runc delete`) and
        its overlay mount, as containerd's shim does when a task exits. The bundle (its record: exit code,
        annotations, termination message), the writable layer and the log stay until it is removed."""
        if container_id in self._released:
            return
        bundle = await self._bundle_of(container_id)
        if bundle is None or not await self._has_exited(container_id, bundle):
            return
        if conmon.is_alive(conmon.conmon_pid(bundle)):
            return  # conmon still drains the last output; the next sync releases it
        try:
            if await self.runc.state(container_id) is not None:
                await self.runc.delete(container_id, force=True)
            await asyncio.to_thread(rootfs.release_rootfs, bundle)
            # conmon is gone, so its socket entry serves nothing; the exit file stays: it is the record.
            await asyncio.to_thread((self.paths.socket_dir / container_id).unlink, missing_ok=True)
        except (RuntimeError_, OSError) as exc:
            raise RuntimeError_(f"container {container_id[:12]}: cannot release its resources: {exc}") from exc
        self._released.add(container_id)

    async def _wait_monitor_gone(self, bundle: Path, timeout: float = 5.0) -> None:
        deadline = self.clock.monotonic() + timeout
        pid = conmon.conmon_pid(bundle)
        while pid and conmon.is_alive(pid) and self.clock.monotonic() < deadline:
            await self.clock.sleep(POLL)
        if pid and conmon.is_alive(pid):
            conmon.kill_conmon(bundle)

    def _remove_files(self, cid: str, bundle: Path | None, ann: Mapping[str, str] | None = None) -> None:
        """`ann`: the bundle's annotations, when the caller has read them already."""
        # Exit file and socket first: a kill in between then leaves a bundle, which every relist finds and
        # the next sync removes, never an exit file nothing refers to.
        for path in (self.paths.exit_dir / cid, self.paths.socket_dir / cid):
            if os.path.lexists(path):
                path.unlink()
        if bundle is not None and bundle.exists():
            if ann is None:
                ann = _bundle_annotations(bundle)
            if ann.get(ANN_KIND) == KIND_CONTAINER:
                link = self.paths.container_log_link(ann.get(ANN_POD_NAMESPACE, ""), ann.get(ANN_POD_NAME, ""),
                                                     ann.get(ANN_CONTAINER_NAME, ""), cid)
                if os.path.lexists(link):
                    link.unlink()
            _unmount_bundle(bundle)
            bl.remove_tree(bundle)
            # Drop the now empty containers/<name>/ dir, and with the container's last bundle its subPath mounts.
            if bundle.parent.parent.name == "containers":
                try:
                    bundle.parent.rmdir()
                except OSError:
                    pass
                else:
                    subpath.remove_container_sub_paths(bundle.parent.parent.parent, bundle.parent.name)

    async def remove_stray_files(self) -> int:
        """At start: exit files and conmon sockets of containers that neither runc nor any bundle knows
        (left by a kill in the middle of a removal by an older edgelet), and the exec scratch of an agent
        killed during an exec (its process spec holds the container's environment)."""
        observed = await self._observe()
        known = {o.id for o in observed}

        def sweep() -> int:
            removed = 0
            for d in (self.paths.exit_dir, self.paths.socket_dir):
                for entry in (list(d.iterdir()) if d.is_dir() else []):
                    if entry.name not in known and not entry.name.startswith("."):
                        if entry.is_dir() and not entry.is_symlink():
                            continue
                        entry.unlink(missing_ok=True)
                        removed += 1
            d = self.paths.ns_dir
            for entry in (list(d.iterdir()) if d.is_dir() else []):
                # Namespaces pinned for a sandbox whose bundle is gone (a kill while it was made or removed).
                if entry.name not in known and not entry.name.startswith("."):
                    pinns.unpin(entry)
                    removed += 1
            d = self.paths.exec_dir
            for entry in (list(d.iterdir()) if d.is_dir() else []):
                # This agent's own sessions (the API serves before this sweep) carry its prefix.
                if not entry.name.startswith(f"{self._exec_prefix}-") and entry.is_file():
                    entry.unlink(missing_ok=True)
                    removed += 1
            return removed

        return await asyncio.to_thread(sweep)

    async def _undo(self, cid: str, bundle: Path, link: Path | None = None) -> None:
        """Remove a half-made container: its conmon, runc state, mounts, bundle, log link (logs stay)."""
        try:
            conmon.kill_conmon(bundle)
            await self.runc.delete(cid, force=True)
            await self._wait_monitor_gone(bundle, timeout=2.0)
            if link is not None and os.path.lexists(link):
                link.unlink()
            await asyncio.to_thread(self._remove_files, cid, bundle)
        except (RuntimeError_, OSError) as exc:
            # The original error matters more; what is left shows in list_pods and is cleaned by the next sync.
            log.error("Cleanup after a failed create left things behind", exc, container=cid[:12], bundle=str(bundle))

    # ------------------------------------------------------------ pods

    async def remove_pod(self, uid: str) -> None:
        observed = await self._observe(uid)
        # Containers before sandboxes: a container may share the sandbox's pid namespace.
        order = sorted(observed, key=lambda o: o.annotations.get(ANN_KIND) == KIND_SANDBOX)
        errors: list[str] = []
        for o in order:
            try:
                await self.remove_container(o.id)
            except (RuntimeError_, OSError) as exc:
                errors.append(f"{o.id[:12]}: {exc}")
        if errors:
            # The bundles are the only record of what is left (exit files, sockets, runc state): the pod dir
            # goes only once every container is gone, and the termination's retry finds them again.
            raise RuntimeError_(f"pod {uid}: removal incomplete: {'; '.join(errors)}")
        # The pod dir goes last: it is what makes a pod whose removal a kill interrupted an orphan for the next
        # agent, which finishes the removal; gone first, it would leave the logs and cgroups to nobody.
        try:
            # kubelet removes a removed pod's logs: its log dir and the links under containers/.
            await asyncio.to_thread(remove_pod_logs, self.paths.log_dir, uid)
        except OSError as exc:
            errors.append(f"logs: {exc}")
        try:
            for path in self.pod_cgroups(uid):
                await asyncio.to_thread(remove_pod_cgroups, path)
        except CgroupError as exc:
            errors.append(str(exc))
        crash_point("pod.remove")
        if not errors:
            layout = self.layout(uid)
            try:
                await asyncio.to_thread(self._remove_pod_dir, layout)
            except (RuntimeError_, OSError) as exc:
                errors.append(f"{layout.dir}: {exc}")
        if errors:
            raise RuntimeError_(f"pod {uid}: removal incomplete: {'; '.join(errors)}")
        log.info("Pod removed from the runtime", uid=uid)

    def _remove_pod_dir(self, layout: bl.PodLayout) -> None:
        if not layout.dir.exists():
            return
        sid = _bundle_id(layout.sandbox_dir)
        if sid:
            pinns.unpin(self.paths.ns_dir / sid)
        for b in layout.bundles():
            _unmount_bundle(b)
        subpath.remove_pod_sub_paths(layout.dir)
        bl.unmount_all_under(layout.dir)
        bl.remove_tree(layout.dir)


def _kill_pid_file(pid_file: Path) -> None:
    """SIGKILL the process whose pid runc wrote to `pid_file`, if it was written and the process lives."""
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _bundle_annotations(bundle: Path | None) -> dict[str, str]:
    """The annotations a bundle's config.json holds ({} without a bundle, or when unreadable)."""
    if bundle is None:
        return {}
    try:
        return json.loads((bundle / bl.CONFIG).read_text()).get("annotations") or {}
    except (OSError, ValueError):
        return {}


def _container_log_path(ann: Mapping[str, str]) -> Path | None:
    """The log path a container's bundle annotations name (None for a sandbox's)."""
    path = ann.get(ANN_LOG_PATH)
    return Path(path) if ann.get(ANN_KIND) == KIND_CONTAINER and path else None


def remove_pod_logs(log_dir: Path, uid: str) -> None:
    """Remove the log dirs of pod `uid` (`pods/<ns>_<name>_<uid>`) and every link under `containers/` into
    them, dangling ones included."""
    pods = log_dir / "pods"
    dirs = [d for d in (pods.glob(f"*_{uid}") if pods.is_dir() else []) if d.name.rsplit("_", 1)[-1] == uid]
    links = log_dir / "containers"
    for entry in (list(links.iterdir()) if links.is_dir() else []):
        # A link points at pods/<ns>_<name>_<uid>/<container>/<n>.log.
        if entry.is_symlink() and Path(os.readlink(entry)).parent.parent.name.rsplit("_", 1)[-1] == uid:
            entry.unlink(missing_ok=True)
    for d in dirs:
        shutil.rmtree(d)


def _bundle_id(bundle: Path) -> str | None:
    try:
        return (bundle / bl.ID_FILE).read_text().strip() or None
    except FileNotFoundError:
        return None


def _remove_stale_bundle(bundle: Path) -> None:
    _unmount_bundle(bundle)
    bl.remove_tree(bundle)


def _unmount_bundle(bundle: Path) -> None:
    if (bundle / "rootfs").exists() or bl.mounts_under(bundle):
        try:
            rootfs.unmount_rootfs(bundle)
        except NotImplementedError:
            pass
        bl.unmount_all_under(bundle)


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


def _pod_grace(pod: "Pod") -> int:
    g = pod_spec(pod).termination_grace_period_seconds if pod.spec is not None else None
    return 30 if g is None else int(g)


def _create_error(pod: "Pod", container: "Container", exc: Exception) -> CreateContainerError:
    """What a failed create (or its preparation) reports: a spec the pod asks for that cannot be expressed is
    kubelet's CreateContainerConfigError with the message unchanged; anything else names pod and container."""
    if isinstance(exc, SpecError):
        return CreateContainerConfigError(str(exc))
    return CreateContainerError(f"pod {_full(pod)} container {container.name}: {exc}")


def _full(pod: "Pod | None") -> str:
    if pod is None or pod.metadata is None:
        return ""
    return f"{meta(pod).namespace}/{meta(pod).name}"
