"""The on-disk layout of a pod (bundles, volumes, hosts/resolv/hostname files) and the volume mounts of its containers.

Layout under `RuntimePaths.pod_dir(uid)`::

    sandbox/                       the pause sandbox's bundle (config.json, pidfile, conmon.pid, id)
    containers/<name>/<attempt>/   one bundle per container instance
        config.json pidfile conmon.pid id started exit oom termination-log
        rootfs/ (overlay mount point), upper/ work/ (owned by runtime.rootfs)
    volumes/<name>/                emptyDir volumes (a tmpfs mount for medium Memory), configMap/secret/projected
                                   volumes (runtime.configvolumes; a tmpfs when they hold Secrets)
    volume-subpaths/<volume>/<container>/<index>   safe subPath bind mounts (edgelet.runtime.subpath)
    etc-hosts resolv.conf hostname files bind-mounted into every container

Pure builders come first (file contents, mount plans, subPath checks, mount options); the
side-effecting helpers at the end write files and mount or unmount tmpfs and binds (safe
subPath mounts live in edgelet.runtime.subpath).
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Literal

from edgelet.api.defaults import DEFAULT_TERMINATION_MESSAGE_PATH
from edgelet.api.pod import meta
from edgelet.api.pod import spec as pod_spec
from edgelet.container.errors import VolumeError
from edgelet.ocispec.build import Mount
from edgelet.util import linux
from edgelet.util.libc import libc

if TYPE_CHECKING:
    from edgelet.api.types import Container, Pod, VolumeMount

# Files of a bundle directory.
CONFIG = "config.json"
ID_FILE = "id"  # the runc container id, so a bundle can be matched to its id without runc state
STARTED_FILE = "started"  # wall time of `runc start`, written by edgelet
EXIT_FILE = "exit"  # conmon's persist-dir exit code
OOM_FILE = "oom"  # conmon's persist-dir OOM marker
TERMINATION_LOG = "termination-log"

HOST_RESOLV_CONF = Path("/etc/resolv.conf")
HOST_HOSTS = Path("/etc/hosts")


@dataclass(frozen=True)
class PodLayout:
    """Where a pod's things live; pure path arithmetic."""

    dir: Path

    @property
    def sandbox_dir(self) -> Path:
        return self.dir / "sandbox"

    @property
    def containers_dir(self) -> Path:
        return self.dir / "containers"

    def container_dir(self, name: str, attempt: int) -> Path:
        return self.containers_dir / name / str(attempt)

    @property
    def volumes_dir(self) -> Path:
        return self.dir / "volumes"

    def volume_dir(self, name: str) -> Path:
        return self.volumes_dir / name

    @property
    def hosts(self) -> Path:
        return self.dir / "etc-hosts"

    @property
    def resolv_conf(self) -> Path:
        return self.dir / "resolv.conf"

    @property
    def hostname(self) -> Path:
        return self.dir / "hostname"

    def bundles(self) -> list[Path]:
        """Every bundle directory present on disk (sandbox first)."""
        found = [self.sandbox_dir] if (self.sandbox_dir / ID_FILE).exists() else []
        if self.containers_dir.is_dir():
            for name_dir in sorted(self.containers_dir.iterdir()):
                if name_dir.is_dir():
                    found.extend(sorted(d for d in name_dir.iterdir() if (d / ID_FILE).exists()))
        return found


# ---------------------------------------------------------------- pure builders


def pod_hostname(pod: Pod, node_hostname: str, cluster_domain: str = "") -> str:
    """The hostname a pod's containers see: the node's with hostNetwork, else spec.hostname or the pod name;
    with setHostnameAsFQDN, a subdomain and a cluster domain, the pod's FQDN (at most 64 characters)."""
    spec = pod.spec
    if spec is not None and spec.host_network:
        return node_hostname
    name = (spec.hostname if spec is not None and spec.hostname else None) or (meta(pod).name or "")
    # kubelet GeneratePodHostNameAndDomain: truncated to 63 chars, no trailing '-' or '.'.
    name = name[:63].rstrip("-.")
    fqdn = pod_fqdn(pod, name, cluster_domain)
    if fqdn and spec is not None and spec.set_hostname_as_fqdn:
        return fqdn[:64]
    return name


def pod_fqdn(pod: Pod, hostname: str, cluster_domain: str) -> str:
    """`<hostname>.<subdomain>.<namespace>.svc.<domain>` when the pod has a subdomain and the node a domain."""
    spec = pod.spec
    if spec is None or not spec.subdomain or not cluster_domain:
        return ""
    ns = (meta(pod).namespace if pod.metadata else None) or "default"
    return f"{hostname.split('.')[0]}.{spec.subdomain}.{ns}.svc.{cluster_domain}"


def build_hosts_file(
    hostname: str,
    *,
    pod_ips: Sequence[str] = (),
    host_aliases: Iterable[tuple[str, Sequence[str]]] = (),
    host_network: bool = False,
    host_hosts: str = "",
    fqdn: str = "",
) -> str:
    """The pod's /etc/hosts (kubelet managedHostsFileContent); with a subdomain, `<ip> <fqdn> <hostname>`."""
    if host_network:
        # kubelet: with hostNetwork the node's own /etc/hosts, plus the aliases.
        out = host_hosts if host_hosts.endswith("\n") or not host_hosts else host_hosts + "\n"
    else:
        lines = [
            "# Kubernetes-managed hosts file.",
            "127.0.0.1\tlocalhost",
            "::1\tlocalhost ip6-localhost ip6-loopback",
            "fe00::0\tip6-localnet",
            "fe00::0\tip6-mcastprefix",
            "fe00::1\tip6-allnodes",
            "fe00::2\tip6-allrouters",
        ]
        if pod_ips:
            short = hostname.split(".")[0]
            lines += [f"{ip}\t{fqdn}\t{short}" if fqdn else f"{ip}\t{hostname}" for ip in pod_ips]
        elif hostname:
            # edgelet: without a CNI-assigned IP, the hostname resolves to loopback (Debian's 127.0.1.1 convention).
            lines.append(f"127.0.1.1\t{hostname}")
        out = "\n".join(lines) + "\n"
    aliases = [(ip, names) for ip, names in host_aliases if names]
    if aliases:
        out += "\n# Entries added by HostAliases.\n" + "".join(f"{ip}\t{chr(9).join(names)}\n" for ip, names in aliases)
    return out


def parse_resolv_conf(text: str) -> tuple[list[str], list[str], list[str]]:
    """(nameservers, searches, options) of a resolv.conf."""
    ns: list[str] = []
    search: list[str] = []
    opts: list[str] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].split(";", 1)[0].strip()
        if not line:
            continue
        key, *vals = line.split()
        if key == "nameserver" and vals:
            ns.append(vals[0])
        elif key in ("search", "domain"):
            search = list(vals)
        elif key == "options":
            opts.extend(vals)
    return ns, search, opts


def build_resolv_conf(
    dns_policy: str | None,
    host_network: bool,
    host_resolv: str,
    *,
    nameservers: Sequence[str] = (),
    searches: Sequence[str] = (),
    options: Sequence[tuple[str, str | None]] = (),
    cluster_dns: Sequence[str] = (),
    cluster_domain: str = "",
    namespace: str = "default",
) -> tuple[str, list[str]]:
    """(resolv.conf content, warnings) for a pod, after kubelet's dns.go GetPodDNS.

    ClusterFirst (and ClusterFirstWithHostNet with hostNetwork) uses `cluster_dns`
    and searches the cluster domain; without `cluster_dns` it falls back to the
    node's resolv.conf with a warning, as kubelet does (its MissingClusterDNS event).
    """
    warnings: list[str] = []
    policy = dns_policy or "ClusterFirst"
    host_ns, host_search, host_opts = parse_resolv_conf(host_resolv)
    cluster_first = (policy == "ClusterFirst" and not host_network) or policy == "ClusterFirstWithHostNet"
    if policy == "None":
        ns, search, opts = [], [], []
    elif cluster_first and cluster_dns:
        ns = list(cluster_dns)
        domains = (
            [f"{namespace}.svc.{cluster_domain}", f"svc.{cluster_domain}", cluster_domain] if cluster_domain else []
        )
        search = domains + [s for s in host_search if s not in domains]
        opts = ["ndots:5"]
    else:
        if cluster_first:
            warnings.append(f"dnsPolicy {policy} without --cluster-dns: using the node's resolv.conf (Default)")
        ns, search, opts = list(host_ns), list(host_search), list(host_opts)
    # dnsConfig is merged on top (kubelet appendDNSConfig): nameservers and searches added, options overridden by name.
    for n in nameservers:
        if n not in ns:
            ns.append(n)
    for s in searches:
        if s not in search:
            search.append(s)
    opt_map: dict[str, str | None] = {}
    for o in opts:
        k, _, v = o.partition(":")
        opt_map[k] = v or None
    for name, value in options:
        opt_map[name] = value
    lines = [f"nameserver {n}" for n in ns[:3]]
    if len(ns) > 3:
        warnings.append(f"more than 3 nameservers, kept {', '.join(ns[:3])}")
    if search:
        lines.append("search " + " ".join(search[:32]))
    if opt_map:
        lines.append("options " + " ".join(k if v is None else f"{k}:{v}" for k, v in opt_map.items()))
    return "\n".join(lines) + "\n", warnings


def pod_resolv_conf(
    pod: Pod, host_resolv: str, cluster_dns: Sequence[str] = (), cluster_domain: str = ""
) -> tuple[str, list[str]]:
    spec = pod.spec
    cfg = spec.dns_config if spec is not None else None
    return build_resolv_conf(
        spec.dns_policy if spec is not None else None,
        bool(spec is not None and spec.host_network),
        host_resolv,
        nameservers=tuple((cfg.nameservers or []) if cfg else ()),
        searches=tuple((cfg.searches or []) if cfg else ()),
        options=tuple((o.name or "", o.value) for o in ((cfg.options or []) if cfg else ()) if o.name),
        cluster_dns=cluster_dns,
        cluster_domain=cluster_domain,
        namespace=(meta(pod).namespace if pod.metadata else None) or "default",
    )


def check_sub_path(sub_path: str) -> PurePosixPath:
    """kubelet validation of volumeMount.subPath: relative, no '..' component."""
    p = PurePosixPath(sub_path)
    if p.is_absolute():
        raise VolumeError(f"subPath {sub_path!r} must be a relative path")
    if ".." in p.parts:
        raise VolumeError(f"subPath {sub_path!r} must not contain '..'")
    return p


def volume_mount_options(vm: VolumeMount, rro_supported: bool) -> tuple[str, ...]:
    """runc options of a volumeMount's bind mount.

    A read-only mount is made recursively read-only (runc's `rro`, mount_setattr
    on kernels >= 5.12) wherever the kernel can, so a submount inside a read-only
    hostPath is read-only too; kubelet does that only when recursiveReadOnly asks.
    An explicit `recursiveReadOnly: Disabled` keeps plain `ro`; `Enabled` fails
    where the kernel cannot.
    """
    rro = vm.recursive_read_only
    if rro not in (None, "Disabled", "IfPossible", "Enabled"):
        raise VolumeError(f"volumeMount {vm.name!r}: unknown recursiveReadOnly {rro!r}")
    if not vm.read_only:
        if rro not in (None, "Disabled"):
            raise VolumeError(f"volumeMount {vm.name!r}: recursiveReadOnly {rro} needs readOnly: true")
        return ("rbind", "rprivate", "rw")
    if rro == "Enabled":
        if vm.mount_propagation not in (None, "None"):
            raise VolumeError(f"volumeMount {vm.name!r}: recursiveReadOnly Enabled needs mountPropagation None")
        if not rro_supported:
            raise VolumeError(
                f"volumeMount {vm.name!r}: recursiveReadOnly Enabled, but this kernel cannot make "
                "mounts recursively read-only (needs mount_setattr, Linux 5.12)"
            )
    if rro != "Disabled" and rro_supported:
        return ("rbind", "rprivate", "ro", "rro")
    return ("rbind", "rprivate", "ro")


VolumeKind = Literal["emptyDir", "hostPath", "config"]  # config: configMap, secret, projected


@dataclass(frozen=True)
class VolumePlan:
    """What a pod volume is on this node."""

    name: str
    kind: VolumeKind
    path: Path  # where it lives on the host
    medium: str = ""  # emptyDir: "" or "Memory"
    size_limit: str | int | float | None = None
    host_path_type: str = ""  # hostPath: "", Directory, DirectoryOrCreate, File, FileOrCreate, Socket, ...


def plan_volumes(pod: Pod, layout: PodLayout) -> dict[str, VolumePlan]:
    """The volumes of a pod that edgelet can provide; raises VolumeError for any other kind."""
    plans: dict[str, VolumePlan] = {}
    for vol in (pod_spec(pod).volumes if pod.spec is not None else None) or []:
        if vol.host_path is not None:
            plans[vol.name] = VolumePlan(
                vol.name, "hostPath", Path(vol.host_path.path), host_path_type=vol.host_path.type or ""
            )
        elif vol.empty_dir is not None:
            plans[vol.name] = VolumePlan(
                vol.name,
                "emptyDir",
                layout.volume_dir(vol.name),
                medium=vol.empty_dir.medium or "",
                size_limit=vol.empty_dir.size_limit,
            )
        elif vol.config_map is not None or vol.secret is not None or vol.projected is not None:
            # Written by edgelet.runtime.configvolumes from the accepted ConfigMaps and Secrets.
            plans[vol.name] = VolumePlan(vol.name, "config", layout.volume_dir(vol.name))
        else:
            # A volume without source is defaulted to emptyDir upstream; anything else is an API object.
            raise VolumeError(
                f"volume {vol.name!r}: only emptyDir, hostPath, configMap, secret and projected volumes are supported"
            )
    return plans


def tmpfs_options(size_limit: str | int | float | None) -> list[str]:
    """tmpfs mount data (the nosuid/nodev flags are passed as mount flags)."""
    opts = ["mode=0777"]
    if size_limit is not None:
        opts.append(f"size={quantity_bytes(size_limit)}")
    return opts


_SUFFIXES = {
    "Ki": 1024,
    "Mi": 1024**2,
    "Gi": 1024**3,
    "Ti": 1024**4,
    "Pi": 1024**5,
    "Ei": 1024**6,
    "k": 1000,
    "M": 1000**2,
    "G": 1000**3,
    "T": 1000**4,
    "P": 1000**5,
    "E": 1000**6,
    "m": 0.001,
}


def quantity_bytes(q: str | int | float) -> int:
    """A Kubernetes memory quantity in bytes (rounded up)."""
    if isinstance(q, (int, float)):
        return int(-(-q // 1))
    text = q.strip()
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if text.endswith(suffix):
            return int(-(-(float(text[: -len(suffix)]) * _SUFFIXES[suffix]) // 1))
    return int(-(-float(text) // 1))


# ---------------------------------------------------------------- side effects


def rewrite_in_place(path: Path, content: str) -> None:
    """Write `content` over the file at `path`, keeping its inode (not fsynced).

    For a file a created container has already bind-mounted (the pod's /etc/hosts, written again with the pod
    IPs once the network is attached): a rename would leave the container's mount on the old inode. The
    bytes go in before the length is cut, so a reader never sees the file empty; nothing runs in the pod yet."""
    data = content.encode()
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def write_file(path: Path, content: str, mode: int = 0o600, *, durable: bool = True) -> None:
    """Write via a temp file, fsync and rename, so a reader (or a running container) never sees half a file,
    nor a power cut an empty one.

    `durable=False` skips the fsync (a few ms each on a busy SD card, on the pod start path) for files every
    new sandbox writes again and nothing reads after a power cut: the pod's hosts, resolv.conf and hostname,
    and a pinned sandbox's start time (a power cut takes its namespaces, so it is replaced either way)."""
    if durable:
        from edgelet.state import write_atomic

        write_atomic(path, content.encode(), mode, sync_dir=False)
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(content.encode())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _kind_of(path: Path) -> str:
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return ""
    for check, kind in (
        (stat.S_ISDIR, "Directory"),
        (stat.S_ISREG, "File"),
        (stat.S_ISSOCK, "Socket"),
        (stat.S_ISCHR, "CharDevice"),
        (stat.S_ISBLK, "BlockDevice"),
    ):
        if check(mode):
            return kind
    return "other"


def prepare_host_path(plan: VolumePlan) -> None:
    """kubelet hostPath type checks; the *OrCreate types create what is missing."""
    t, path = plan.host_path_type, plan.path
    kind = _kind_of(path)
    if t == "":
        return
    if t == "DirectoryOrCreate" and not kind:
        path.mkdir(mode=0o755, parents=True, exist_ok=True)
        kind = "Directory"
    elif t == "FileOrCreate" and not kind:
        if not path.parent.is_dir():
            raise VolumeError(f"hostPath volume {plan.name!r}: parent of {path} does not exist (FileOrCreate)")
        path.touch(mode=0o644, exist_ok=True)
        kind = "File"
    want = t.removesuffix("OrCreate")
    if want not in ("Directory", "File", "Socket", "CharDevice", "BlockDevice"):
        raise VolumeError(f"hostPath volume {plan.name!r}: unknown type {t!r}")
    if kind != want:
        found = "nothing" if not kind else f"a {kind}"
        raise VolumeError(f"hostPath volume {plan.name!r}: {path} is {found}, expected a {want}")


def is_mountpoint(path: Path) -> bool:
    target = str(path.resolve()) if path.exists() else str(path)
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        if _unescape(line.split()[4]) == target:
            return True
    return False


def mounts_under(prefix: Path) -> list[str]:
    """Mount points at or below `prefix`, deepest first."""
    root = str(prefix.resolve()) if prefix.exists() else str(prefix)
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mp = _unescape(line.split()[4])
        if mp == root or mp.startswith(root + "/"):
            points.append(mp)
    return sorted(points, key=len, reverse=True)


def _unescape(s: str) -> str:
    return s.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def mount_bind(source: str, target: Path) -> None:
    """A recursive bind mount by mount(2); `source` may be a `/proc/self/fd/N` magic link (safe subPaths)."""
    flags = ctypes.c_ulong(linux.MS_BIND | linux.MS_REC)
    if libc().mount(source.encode(), str(target).encode(), None, flags, None) != 0:
        err = ctypes.get_errno()
        raise VolumeError(f"bind mount {source} at {target}: {os.strerror(err)}")


SYS_MOUNT_SETATTR = 442  # the same number on every architecture (syscalls added after 5.1 are unified)


def probe_recursive_read_only() -> bool:
    """Whether this kernel has mount_setattr(2) (Linux 5.12), which runc's `rro` option needs.

    A call with a bad descriptor fails with EBADF/ENOENT/EINVAL where the syscall
    exists, ENOSYS where it does not; EPERM (a seccomp filter around edgelet)
    would stop runc too, so it counts as unsupported.
    """
    c = libc()
    c.syscall.restype = ctypes.c_long
    ret = c.syscall(ctypes.c_long(SYS_MOUNT_SETATTR), ctypes.c_int(-1), b"", ctypes.c_uint(0), None, ctypes.c_size_t(0))
    return ret == 0 or ctypes.get_errno() not in (errno.ENOSYS, errno.EPERM)


def mount_tmpfs(target: Path, options: Sequence[str]) -> None:
    """mount(2) a tmpfs directly: a syscall, not a subprocess."""
    data = ",".join(options).encode()
    flags = ctypes.c_ulong(linux.MS_NOSUID | linux.MS_NODEV)
    if libc().mount(b"tmpfs", str(target).encode(), b"tmpfs", flags, data) != 0:
        err = ctypes.get_errno()
        raise VolumeError(f"mount tmpfs at {target} ({','.join(options)}): {os.strerror(err)}")


def umount(target: str, *, lazy: bool = False) -> None:
    if libc().umount2(target.encode(), linux.MNT_DETACH if lazy else 0) != 0:
        err = ctypes.get_errno()
        if err == errno.EINVAL:  # not a mount point (any more): nothing to do
            return
        raise VolumeError(f"umount {target}: {os.strerror(err)}")


def prepare_volumes(plans: Mapping[str, VolumePlan]) -> None:
    """Make every volume exist on the host (emptyDir dirs, Memory tmpfs, hostPath checks). Idempotent."""
    for plan in plans.values():
        if plan.kind == "hostPath":
            prepare_host_path(plan)
            continue
        if plan.kind == "config":
            continue  # configvolumes writes it, from the objects
        plan.path.mkdir(mode=0o777, parents=True, exist_ok=True)
        plan.path.chmod(0o777)  # kubelet: emptyDir is world-writable so any container user can use it
        if plan.medium == "Memory" and not is_mountpoint(plan.path):
            mount_tmpfs(plan.path, tmpfs_options(plan.size_limit))
        elif plan.medium not in ("", "Memory"):
            raise VolumeError(f"emptyDir volume {plan.name!r}: unsupported medium {plan.medium!r}")


def unmount_all_under(prefix: Path) -> None:
    """Unmount every mount at or below `prefix` (tmpfs volumes, leftover rootfs), deepest first."""
    for mp in mounts_under(prefix):
        try:
            umount(mp)
        except VolumeError:
            # Busy (a dying container still holds it): detach it so the pod dir can go.
            umount(mp, lazy=True)


def container_mounts(
    pod: Pod,
    container: Container,
    layout: PodLayout,
    plans: Mapping[str, VolumePlan],
    bundle: Path,
    *,
    rro_supported: bool = False,
) -> tuple[Mount, ...]:
    """Bind mounts of one container: volumeMounts, then /etc/hosts, /etc/hostname, /etc/resolv.conf and the
    termination-message file (unless the container mounts something at the same path itself).

    A subPath is bind-mounted safely under the pod dir first (edgelet.runtime.subpath) and runc gets
    that mount point, never a path inside the volume a container could swap.
    """
    from edgelet.runtime import subpath

    mounts: list[Mount] = []
    taken: set[str] = set()
    for index, vm in enumerate(container.volume_mounts or []):
        plan = plans.get(vm.name)
        if plan is None:
            raise VolumeError(f"container {container.name!r}: volumeMount {vm.name!r} names no volume of the pod")
        if vm.sub_path_expr:
            raise VolumeError(f"container {container.name!r}: subPathExpr is not supported")
        options = volume_mount_options(vm, rro_supported)
        if plan.kind == "config" and "rw" in options:
            # kubelet mounts configMap, secret and projected volumes read-only whatever the volumeMount says.
            options = tuple("ro" if o == "rw" else o for o in options)
        source = plan.path
        if vm.sub_path:
            source = subpath.mount_sub_path(
                layout.dir,
                plan.path,
                pod=_pod_label(pod),
                volume=vm.name,
                container=container.name,
                index=index,
                sub_path=vm.sub_path,
            )
        mounts.append(Mount(destination=vm.mount_path, source=str(source), options=options))
        taken.add(vm.mount_path.rstrip("/"))
    files = [("/etc/hosts", layout.hosts), ("/etc/hostname", layout.hostname), ("/etc/resolv.conf", layout.resolv_conf)]
    for dest, src in files:
        if dest not in taken:
            mounts.append(Mount(destination=dest, source=str(src), options=("rbind", "rprivate", "rw")))
    tpath = termination_log_path(container)
    if tpath is not None:
        mounts.append(
            Mount(destination=tpath, source=str(bundle / TERMINATION_LOG), options=("rbind", "rprivate", "rw"))
        )
    return tuple(mounts)


def termination_log_path(container: Container) -> str | None:
    """Where the bundle's termination-log file is mounted in the container: its terminationMessagePath,
    None when a volume is mounted there (the volume wins; nothing is then read from the file)."""
    tpath = container.termination_message_path or DEFAULT_TERMINATION_MESSAGE_PATH
    taken = {vm.mount_path.rstrip("/") for vm in container.volume_mounts or []}
    return None if tpath.rstrip("/") in taken else tpath


def _pod_label(pod: Pod) -> str:
    meta = pod.metadata
    return f"{meta.namespace or 'default'}/{meta.name or ''}" if meta is not None else ""


def remove_tree(path: Path) -> None:
    """rm -rf that refuses to cross into a still-mounted directory (never delete a volume's contents by accident)."""
    if not os.path.lexists(path):
        return
    left = mounts_under(path)
    if left:
        raise VolumeError(f"cannot remove {path}: still mounted: {', '.join(left[:3])}")
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise VolumeError(f"cannot remove {path}: {exc}") from exc


def read_id(bundle: Path) -> str | None:
    """The id of the container (or sandbox) whose bundle this is (None: none recorded)."""
    try:
        return (bundle / ID_FILE).read_text().strip() or None
    except FileNotFoundError:
        return None


def read_annotations(bundle: Path | None) -> dict[str, str]:
    """The annotations a bundle's config.json holds ({} without a bundle, or when unreadable)."""
    if bundle is None:
        return {}
    try:
        return json.loads((bundle / CONFIG).read_text()).get("annotations") or {}
    except (OSError, ValueError):
        return {}
