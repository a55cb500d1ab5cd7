"""Pure translation of a pod's container (or its sandbox) into an OCI runtime config.json.

No I/O: every host fact (rootfs path, namespace paths, the image's users,
memory capacity) arrives in the context. The result follows what kubelet
asks of containerd's CRI plugin and what that plugin then writes for runc.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from edgelet.api.quantity import QuantityError
from edgelet.cgroups import qos
from edgelet.ocispec import defaults
from edgelet.ocispec.apparmor import compute_apparmor
from edgelet.ocispec.env import container_env, expand, merge_env, process_args
from edgelet.ocispec.errors import EnvError, SecurityError, SpecError
from edgelet.ocispec.seccomp import compute_seccomp, resolve_seccomp
from edgelet.ocispec.security import compute_capabilities, resolve_user

if TYPE_CHECKING:
    from edgelet.api.configobjects import ConfigObjects
    from edgelet.api.types import Container, Pod
    from edgelet.images.types import ImageConfig


@dataclass(frozen=True)
class Mount:
    destination: str
    source: str
    type: str = "bind"
    options: tuple[str, ...] = ("rbind", "rw")


@dataclass(frozen=True)
class SeccompHost:
    """What seccomp decisions need from the host and the settings."""

    default_on: bool = True  # --seccomp-default: RuntimeDefault when a pod names no profile
    arch: str = "amd64"  # Go's name of this host's architecture (seccomp.goarch(uname -m))
    kernel_version: tuple[int, ...] | None = None  # for profiles' minKernel; None: assume new enough
    profile_dir: str = ""  # <root-dir>/seccomp, for messages
    # Localhost profile name -> its text, read by the caller for the names the pod uses; absent = missing.
    localhost_profiles: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SandboxContext:
    """Facts the caller gathered for a pod's pause sandbox."""

    rootfs: str  # absolute path of the pause rootfs
    args: tuple[str, ...]  # e.g. ("/catatonit", "-P")
    cgroups_path: str  # e.g. "/kubepods/pod<uid>/<sandbox id>"
    hostname: str
    annotations: Mapping[str, str] = field(default_factory=dict)
    extra_mounts: tuple[Mount, ...] = ()
    # --- added compatibly (defaulted) ---
    min_oom_score_adj: int | None = None  # see ContainerContext.min_oom_score_adj
    seccomp: SeccompHost = field(default_factory=SeccompHost)
    netns_path: str | None = None  # a network namespace CNI set up, joined instead of a new one
    allowed_unsafe_sysctls: tuple[str, ...] = ()  # --allowed-unsafe-sysctls


@dataclass(frozen=True)
class ContainerContext:
    """Facts the caller gathered for one container: paths, namespaces, users."""

    rootfs: str  # absolute path of the mounted rootfs
    cgroups_path: str  # e.g. "/kubepods/pod<uid>/<container id>"
    # namespace type ("network", "ipc", "uts", "pid") -> path to join, e.g. /proc/<pause pid>/ns/net
    namespace_paths: Mapping[str, str]
    hostname: str
    annotations: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()  # volumes, /etc/hosts, /etc/resolv.conf, termination log
    # name -> (uid, gid) from the image's /etc/passwd, name -> gid from /etc/group
    passwd: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    groups: Mapping[str, int] = field(default_factory=dict)
    # --- added compatibly (all defaulted) ---
    # group name -> member user names, from the 4th field of the image's /etc/group
    group_members: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    memory_capacity: int = 0  # node memory in bytes, for the Burstable oomScoreAdj formula
    swap_controller: bool = False  # memory.memsw.* exists: set swap = limit so containers do not swap
    all_capabilities: tuple[str, ...] = defaults.ALL_CAPABILITIES  # what "ALL" and privileged mean
    # OCI linux.devices entries for the host's devices, given to privileged containers
    host_devices: tuple[Mapping[str, object], ...] = ()
    pod_ips: tuple[str, ...] = ()  # for fieldRef status.podIP(s)
    host_ips: tuple[str, ...] = ()  # for fieldRef status.hostIP(s)
    node_allocatable: Mapping[str, str | int | float] = field(default_factory=dict)  # for resourceFieldRef limits
    cgroup_mount: bool = True  # mount /sys/fs/cgroup (read-only) in the container
    # Lowest oomScoreAdj the agent may set: without CAP_SYS_RESOURCE the kernel
    # refuses values below the agent's own (runc then fails with "failed to
    # update /proc/self/oom_score_adj"), so pass /proc/self/oom_score_adj
    # there; None = no clamp. containerd's restrict_oom_score_adj does the same.
    min_oom_score_adj: int | None = None
    seccomp: SeccompHost = field(default_factory=SeccompHost)
    # The agent's own bounding set (CapBnd): privileged and "ALL" mean these; None = every capability.
    bounding_capabilities: tuple[str, ...] | None = None
    apparmor_enabled: bool = False  # /sys/module/apparmor/parameters/enabled is Y
    apparmor_loaded: frozenset[str] = frozenset()  # names in /sys/kernel/security/apparmor/profiles
    pids_limit: int | None = None  # the pod's pids limit, also on each container (a fork bomb stops at either)
    allowed_unsafe_sysctls: tuple[str, ...] = ()  # --allowed-unsafe-sysctls
    # Controllers the host lacks whose limits are left out (--allow-missing-cgroup-controllers): runc
    # would refuse the whole container over a limit it cannot write.
    without_controllers: frozenset[str] = frozenset()
    # The accepted ConfigMaps and Secrets, for env valueFrom and envFrom; None: none.
    config_objects: ConfigObjects | None = None


def _mount_dict(m: Mount) -> dict[str, Any]:
    return {"destination": m.destination, "type": m.type, "source": m.source, "options": list(m.options)}


def _merge_mounts(base: list[dict[str, Any]], extra: tuple[Mount, ...]) -> list[dict[str, Any]]:
    """containerd's WithMounts: a given mount replaces the default at its destination; a given /dev drops /dev/*."""
    wanted = {m.destination.rstrip("/") or "/" for m in extra}
    kept = []
    for m in base:
        dest = m["destination"]
        if dest in wanted:
            continue
        if "/dev" in wanted and dest.startswith("/dev/"):
            continue
        kept.append(m)
    # Parents before children, so a volume at /data does not hide /data/x.
    ordered = sorted(extra, key=lambda m: len([p for p in m.destination.split("/") if p]))
    return kept + [_mount_dict(m) for m in ordered]


# kubelet's namespaced sysctls (pkg/kubelet/sysctl/namespace.go).
_IPC_SYSCTLS = {
    "kernel.sem",
    "kernel.shmall",
    "kernel.shmmax",
    "kernel.shmmni",
    "kernel.shm_rmid_forced",
    "kernel.msgmax",
    "kernel.msgmnb",
    "kernel.msgmni",
}


def _normalize_sysctl(name: str) -> str:
    # kubelet's NormalizeName: "a/b.c/d" uses "/" as separator, so swap.
    first = re.search(r"[./]", name)
    if first and first.group(0) == "/":
        return name.translate(str.maketrans("./", "/."))
    return name


def _sysctl_namespace(name: str) -> str | None:
    if name.startswith("net."):
        return "network"
    if name in _IPC_SYSCTLS or name.startswith("fs.mqueue."):
        return "ipc"
    return None


# kubelet's SafeSysctlAllowlist: namespaced and unable to hurt other pods or the node.
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
        "net.ipv4.tcp_rmem",
        "net.ipv4.tcp_wmem",
    }
)


def sysctl_allowed(name: str, allowed_unsafe: tuple[str, ...]) -> bool:
    """Safe, or matched by --allowed-unsafe-sysctls (a name, or a prefix ending in `*`)."""
    if name in SAFE_SYSCTLS:
        return True
    return any(name == p or (p.endswith("*") and name.startswith(p[:-1])) for p in allowed_unsafe)


def build_sysctls(pod: Pod, allowed_unsafe: tuple[str, ...] = ()) -> dict[str, str]:
    """Pod securityContext.sysctls, refusing those that would change the host's namespaces, and unsafe ones
    not allowed by --allowed-unsafe-sysctls (kubelet's SysctlForbidden)."""
    spec = pod.spec
    psc = spec.security_context if spec is not None else None
    out: dict[str, str] = {}
    host_network = bool(spec is not None and spec.host_network)
    host_ipc = bool(spec is not None and spec.host_ipc)
    for s in (psc.sysctls if psc is not None else None) or []:
        name = _normalize_sysctl(s.name)
        ns = _sysctl_namespace(name)
        if ns is None:
            raise SpecError(f"sysctl {s.name!r} is not namespaced: setting it would change the host")
        if ns == "network" and host_network:
            raise SpecError(f"sysctl {s.name!r} is not allowed with hostNetwork")
        if ns == "ipc" and host_ipc:
            raise SpecError(f"sysctl {s.name!r} is not allowed with hostIPC")
        if not sysctl_allowed(name, allowed_unsafe):
            raise SpecError(f"forbidden sysctl {s.name!r}: not in the safe set; allow it with --allowed-unsafe-sysctls")
        out[name] = s.value
    return out


def _host_flags(pod: Pod) -> dict[str, bool]:
    spec = pod.spec
    return {
        "network": bool(spec and spec.host_network),
        "ipc": bool(spec and spec.host_ipc),
        # kubelet: a hostNetwork pod also shares the host's UTS namespace.
        "uts": bool(spec and spec.host_network),
        "pid": bool(spec and spec.host_pid),
    }


def _clamp_oom(adj: int, minimum: int | None) -> int:
    return adj if minimum is None else max(adj, minimum)


def _pod_label(pod: Pod, container: Container | None = None) -> str:
    meta = pod.metadata
    label = f"pod {meta.namespace}/{meta.name}" if meta else "pod ?"
    return f"{label} container {container.name}" if container is not None else label


def _seccomp(pod: Pod, container: Container | None, host: SeccompHost, caps: Sequence[str]) -> dict[str, Any] | None:
    choice = compute_seccomp(pod, container, default_on=host.default_on)
    return resolve_seccomp(
        choice,
        localhost_profiles=host.localhost_profiles,
        profile_dir=host.profile_dir,
        arch=host.arch,
        caps=list(caps),
        kernel=host.kernel_version,
    )


def seccomp_profile_names(pod: Pod) -> set[str]:
    """The Localhost seccomp profiles a pod names (pod and containers), for the caller to read."""
    spec = pod.spec
    names: set[str] = set()
    if spec is None:
        return names
    contexts = [spec.security_context] + [c.security_context for c in [*(spec.init_containers or []), *spec.containers]]
    for sc in contexts:
        profile = sc.seccomp_profile if sc is not None else None
        if profile is not None and profile.type == "Localhost" and profile.localhost_profile:
            names.add(profile.localhost_profile)
    return names


def _is_unmasked(pod: Pod, container: Container) -> bool:
    """procMount: Unmasked, which kubelet allows only in a user namespace (hostUsers: false).

    Without one, an unmasked /proc gives the container the host's writable
    /proc/sys (core_pattern is the classic escape), so it is refused here
    too, whatever validation let through.
    """
    sc = container.security_context
    if sc is None or sc.proc_mount in (None, "", "Default"):
        return False
    if sc.proc_mount != "Unmasked":
        raise SecurityError(f"securityContext.procMount {sc.proc_mount!r} is not Default or Unmasked")
    host_users = pod.spec.host_users if pod.spec is not None else None
    if host_users is not False:
        raise SecurityError("securityContext.procMount: Unmasked needs a user namespace (spec.hostUsers: false)")
    raise SecurityError(
        "spec.hostUsers: false: user namespaces are not supported by edgelet (see docs/kubelet-differences.md)"
    )


def build_container_spec(pod: Pod, container: Container, image: ImageConfig, ctx: ContainerContext) -> dict[str, Any]:
    """config.json for one container of `pod`, joining the sandbox's namespaces given in ctx."""
    where = _pod_label(pod, container)
    sc = container.security_context
    privileged = bool(sc and sc.privileged)
    try:
        env_pairs = container_env(
            pod,
            container,
            pod_ips=ctx.pod_ips,
            host_ips=ctx.host_ips,
            node_allocatable=ctx.node_allocatable,
            objects=ctx.config_objects,
        )
        lookup = dict(env_pairs).get
        command = [expand(a, lookup) for a in container.command or []]
        args = [expand(a, lookup) for a in container.args or []]
        argv = process_args(command, args, image.entrypoint, image.cmd)
        user = resolve_user(pod, container, image.user, ctx.passwd, ctx.groups, ctx.group_members)
        caps = compute_capabilities(
            container, defaults.DEFAULT_CAPABILITIES, ctx.all_capabilities, ctx.bounding_capabilities
        )
        resources = qos.container_resources(container)
        oom = qos.oom_score_adj(pod, container, ctx.memory_capacity)
        seccomp = _seccomp(pod, container, ctx.seccomp, caps)
        apparmor = compute_apparmor(pod, container, enabled=ctx.apparmor_enabled, loaded=ctx.apparmor_loaded)
        unmasked = _is_unmasked(pod, container)
    except (EnvError, SecurityError, QuantityError) as exc:
        raise SpecError(f"{where}: {exc}") from exc

    # Env order as containerd builds it: default PATH, HOSTNAME, image env,
    # then the container's, each replacing an earlier key in place.
    env = merge_env([defaults.DEFAULT_PATH, f"HOSTNAME={ctx.hostname}"], image.env)
    env = merge_env(env, [f"{k}={v}" for k, v in env_pairs])

    # kubelet sets NoNewPrivs only when allowPrivilegeEscalation is false;
    # containerd's CRI plugin starts from WithNewPrivileges (false) and sets
    # it only on that request, so unset means privilege escalation allowed.
    no_new_privs = sc is not None and sc.allow_privilege_escalation is False

    process: dict[str, Any] = {
        "terminal": bool(container.tty),
        "user": {"uid": user.uid, "gid": user.gid, "additionalGids": list(user.additional_gids)},
        "args": argv,
        "env": env,
        "cwd": container.working_dir or image.working_dir or "/",
        "capabilities": {
            "bounding": list(caps),
            "effective": list(caps),
            "permitted": list(caps),
            "inheritable": [],
            "ambient": [],
        },
        "noNewPrivileges": no_new_privs,
        "oomScoreAdj": _clamp_oom(oom, ctx.min_oom_score_adj),
    }
    if apparmor.profile:
        process["apparmorProfile"] = apparmor.profile

    namespaces = _container_namespaces(pod, ctx)
    has_uts = any(n["type"] == "uts" for n in namespaces)
    unmasked = privileged or unmasked
    linux: dict[str, Any] = {
        "namespaces": namespaces,
        "cgroupsPath": ctx.cgroups_path,
        "resources": _linux_resources(resources, privileged, ctx),
        "maskedPaths": [] if unmasked else list(defaults.MASKED_PATHS),
        "readonlyPaths": [] if unmasked else list(defaults.READONLY_PATHS),
    }
    sysctls = build_sysctls(pod, ctx.allowed_unsafe_sysctls)
    if sysctls:
        linux["sysctl"] = sysctls
    if privileged and ctx.host_devices:
        linux["devices"] = [dict(d) for d in ctx.host_devices]
    if seccomp is not None:
        linux["seccomp"] = seccomp

    spec: dict[str, Any] = {
        "ociVersion": defaults.OCI_VERSION,
        "process": process,
        "root": {"path": ctx.rootfs, "readonly": bool(sc and sc.read_only_root_filesystem)},
        "mounts": _merge_mounts(
            defaults.default_mounts(privileged=privileged, cgroup_mount=ctx.cgroup_mount), ctx.mounts
        ),
        "annotations": dict(ctx.annotations),
        "linux": linux,
    }
    # runc refuses a hostname without a UTS namespace of the container's own.
    if has_uts and ctx.hostname:
        spec["hostname"] = ctx.hostname
    return spec


def _container_namespaces(pod: Pod, ctx: ContainerContext) -> list[dict[str, str]]:
    """The sandbox's namespaces the container joins, and new ones for those the pod does not share with the host."""
    namespaces = [{"type": "mount"}]
    host = _host_flags(pod)
    for ns in ("pid", "network", "ipc", "uts"):
        if ns in ctx.namespace_paths:
            namespaces.append({"type": ns, "path": ctx.namespace_paths[ns]})
        elif not host[ns]:
            namespaces.append({"type": ns})
    return namespaces


def _linux_resources(resources: qos.ContainerResources, privileged: bool, ctx: ContainerContext) -> dict[str, Any]:
    """linux.resources: device rules, then cpu, memory and pids limits on the controllers the host has."""
    cpu: dict[str, Any] = {"shares": resources.cpu_shares, "period": resources.cpu_period}
    if resources.cpu_quota:
        cpu["quota"] = resources.cpu_quota
    linux_resources: dict[str, Any] = {
        "devices": defaults.privileged_device_rules() if privileged else defaults.default_device_rules(),
    }
    if "cpu" not in ctx.without_controllers:
        linux_resources["cpu"] = cpu
    if resources.memory_limit and "memory" not in ctx.without_controllers:
        memory = {"limit": resources.memory_limit}
        if ctx.swap_controller:
            # As containerd: swap limit = memory limit, so the container never swaps.
            memory["swap"] = resources.memory_limit
        linux_resources["memory"] = memory
    if ctx.pids_limit and "pids" not in ctx.without_controllers:
        linux_resources["pids"] = {"limit": ctx.pids_limit}
    return linux_resources


def build_sandbox_spec(pod: Pod, ctx: SandboxContext) -> dict[str, Any]:
    """config.json for the pod's pause process, which creates and holds the pod's namespaces."""
    host = _host_flags(pod)
    namespaces: list[dict[str, str]] = [{"type": "mount"}]
    for ns in ("network", "ipc", "uts"):
        if not host[ns]:
            if ns == "network" and ctx.netns_path:
                namespaces.append({"type": ns, "path": ctx.netns_path})
            else:
                namespaces.append({"type": ns})
    if not host["pid"]:
        namespaces.append({"type": "pid"})
    has_uts = not host["uts"]
    if not ctx.args:
        raise SpecError(f"{_pod_label(pod)}: no pause command given for the sandbox")
    try:
        # The pause process runs under the pod-level profile, as containerd's sandbox does.
        seccomp = _seccomp(pod, None, ctx.seccomp, ())
    except SecurityError as exc:
        raise SpecError(f"{_pod_label(pod)}: {exc}") from exc

    linux: dict[str, Any] = {
        "namespaces": namespaces,
        "cgroupsPath": ctx.cgroups_path,
        "resources": {"devices": defaults.default_device_rules()},
        "maskedPaths": list(defaults.MASKED_PATHS),
        "readonlyPaths": list(defaults.READONLY_PATHS),
    }
    sysctls = build_sysctls(pod, ctx.allowed_unsafe_sysctls)
    if sysctls:
        linux["sysctl"] = sysctls
    if seccomp is not None:
        linux["seccomp"] = seccomp

    spec: dict[str, Any] = {
        "ociVersion": defaults.OCI_VERSION,
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": list(ctx.args),
            "env": [defaults.DEFAULT_PATH],
            "cwd": "/",
            # The pause process only waits and reaps children: it needs no
            # capabilities at all.
            "capabilities": {"bounding": [], "effective": [], "permitted": [], "inheritable": [], "ambient": []},
            "noNewPrivileges": True,
            "oomScoreAdj": _clamp_oom(qos.POD_INFRA_OOM_SCORE_ADJ, ctx.min_oom_score_adj),
        },
        "root": {"path": ctx.rootfs, "readonly": True},
        "mounts": _merge_mounts(defaults.default_mounts(cgroup_mount=False), ctx.extra_mounts),
        "annotations": dict(ctx.annotations),
        "linux": linux,
    }
    if has_uts and ctx.hostname:
        spec["hostname"] = ctx.hostname
    return spec
