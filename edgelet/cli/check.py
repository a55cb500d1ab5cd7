"""`edgelet check`: whether this machine can run edgelet, one verdict per check with a fix hint.

`gather_facts` is the only part that looks at the machine; every check is a
pure function of `HostFacts`, so each verdict is table-tested.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TextIO

from edgelet.cardpolicy import CARD_SECRETS
from edgelet.cli.common import EXIT_FAILURE, EXIT_OK, clock
from edgelet.settings import DEFAULT_CONFIG, Settings
from edgelet.update.stage import off_reason
from edgelet.util.proc import runtime_features, version_line

Verdict = Literal["OK", "WARN", "FAIL"]
MIN_FREE_BYTES = 1 << 30  # images and logs of a handful of pods
# What every pod needs (memory limits, cpu shares, pids, freezer to stop; devices for the default allow-list).
REQUIRED_CONTROLLERS = ("cpu", "cpuacct", "memory", "pids", "devices", "freezer")
CNI_DIRS = ("/opt/cni/bin", "/usr/lib/cni")


@dataclass(frozen=True)
class HostFacts:
    """What the checks need to know about the machine (gathered once, or written by hand in tests)."""

    euid: int
    runtime: str  # the configured binary name or path
    runtime_path: str | None  # resolved, None when not found
    runtime_version: str  # first line of `--version`, "" when unknown
    conmon_path: str | None
    conmon_version: str
    pause_path: str | None  # catatonit (or an explicit pause image is configured)
    pause_image: str | None
    cgroup_v1_controllers: frozenset[str]  # mounted v1 hierarchies (by controller)
    cgroup_v2_controllers: frozenset[str]  # enabled in the unified hierarchy (cgroup.controllers)
    cgroup_enabled: dict[str, bool]  # /proc/cgroups: controller -> enabled
    filesystems: frozenset[str]  # /proc/filesystems
    cni_plugins: tuple[str, ...]  # plugin binaries found
    root_dir: str
    root_free_bytes: int | None  # None when the root dir and its parents cannot be statted
    is_raspberry_pi: bool = False
    recursive_read_only: bool = True  # mount_setattr(2) exists (Linux >= 5.12): runc's `rro` works
    overlay_error: str | None = "not tried"  # None: a trial overlay mount worked; else why it failed
    # The pods' network: (verdict, detail) from the CNI config and its plugins; None when not looked at.
    cni_network: tuple[str, str] | None = None
    cmdline_file: str | None = "/boot/firmware/cmdline.txt"  # None: not booted by the Pi firmware
    # The card folder (card_dir; None: none configured): whether it exists, what was wrong with its
    # config.toml, and the secrets still lying on it.
    card_dir: str | None = None
    card_present: bool = False
    card_config_error: str | None = None
    card_secrets: tuple[str, ...] = ()
    # The agent's bounding set as capability names; None when unknown. Privileged containers get exactly this.
    bounding_capabilities: tuple[str, ...] | None = None
    # Trusted delivery: (verdict, detail) of reading --trusted-keys and --signature-policy as the agent will at
    # start; None when not configured.
    trusted_keys: tuple[str, str] | None = None
    signature_policy: tuple[str, str] | None = None
    # The apiserver link: (verdict, detail) of loading --kubeconfig as the agent will at start; None: standalone.
    kubeconfig: tuple[str, str] | None = None
    # Secrets edgelet-card-setup took off the card but set aside as unusable: (path, why).
    card_rejected: tuple[tuple[str, str], ...] = ()
    # The WireGuard tunnel: (verdict, detail) of reading --wireguard-config as the agent will; None: no tunnel.
    tunnel: tuple[str, str] | None = None
    # Self-update: why it is off ("" when on), from the trusted keys and the `current` symlink.
    self_update_off: str = "not looked at"
    # Runtime handlers: (name, resolved path or None, first line of --version, what `features` says), and the
    # default's name; the hybrid cgroup layout crun refuses (the problem and its fix), None when not the case.
    handlers: tuple[tuple[str, str | None, str, str], ...] = ()
    default_handler: str = "runc"
    hybrid_cgroups: str | None = None
    # The running interface as it answers now: (ready, what it says); None: no tunnel, or its config is bad.
    tunnel_link: tuple[bool, str] | None = None


@dataclass(frozen=True)
class CheckResult:
    name: str
    verdict: Verdict
    detail: str
    hint: str = ""


def check_root(f: HostFacts) -> CheckResult:
    if f.euid == 0:
        return CheckResult("root privileges", "OK", "running as root")
    return CheckResult(
        "root privileges",
        "FAIL",
        f"running as uid {f.euid}",
        "run edgelet as root (it creates namespaces, cgroups and mounts; user namespaces are not used)",
    )


_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def check_runtime(f: HostFacts) -> CheckResult:
    name = f"runtime ({f.runtime})"
    if f.runtime_path is None:
        return CheckResult(
            name, "FAIL", "not found", "apt-get install runc (or set runtime = the path of runc or crun)"
        )
    m = _VERSION.search(f.runtime_version)
    if m is None:
        return CheckResult(
            name,
            "FAIL",
            f"{f.runtime_path}: cannot read its version ({f.runtime_version or 'no output'})",
            f"check that `{f.runtime_path} --version` works",
        )
    version = tuple(int(x or 0) for x in m.groups())
    if Path(f.runtime_path).name == "runc" and version < (1, 1, 0):
        return CheckResult(
            name,
            "FAIL",
            f"{f.runtime_path} {m.group(0)} is older than 1.1",
            "install runc 1.1 or newer (Debian 12: apt-get install runc)",
        )
    return CheckResult(name, "OK", f"{f.runtime_path} {m.group(0)}")


def check_handlers(f: HostFacts) -> CheckResult:
    """Each runtime handler's binary, version and features; FAIL when the default's is missing, WARN for
    another's (its pods are refused until it is installed)."""
    name = "runtime handlers"
    if not f.handlers:
        return CheckResult(name, "OK", "runc only")
    parts, verdict, hint = [], "OK", ""
    for handler, path, version, features in f.handlers:
        label = f"{handler}{' (default)' if handler == f.default_handler else ''}"
        if path is None:
            parts.append(f"{label}: not found")
            verdict = "FAIL" if handler == f.default_handler else ("WARN" if verdict == "OK" else verdict)
            hint = f"install {handler} (apt-get install {handler}) or fix its path in [runtime_handlers]"
            continue
        m = _VERSION.search(version)
        parts.append(f"{label}: {path} {m.group(0) if m else '(version unknown)'}, {features}")
    if f.default_handler not in {h[0] for h in f.handlers}:
        verdict, hint = "FAIL", f"runtime_handler {f.default_handler!r} is none of them: name one of them"
    return CheckResult(name, verdict, "; ".join(parts), hint)  # type: ignore[arg-type]


def check_crun_cgroups(f: HostFacts) -> CheckResult:
    """crun refuses the hybrid cgroup layout whose cgroup2 mount still holds a controller (see cgroups.hybrid)."""
    name = "cgroups for crun"
    crun = [h for h, path, _, _ in f.handlers if path is not None and Path(path).name == "crun"]
    if not crun:
        return CheckResult(name, "OK", "no crun handler")
    if f.hybrid_cgroups is None:
        return CheckResult(name, "OK", "crun can run containers here")
    problem, _, fix = f.hybrid_cgroups.partition("; fix (as root, at every boot): ")
    verdict = "FAIL" if f.default_handler in crun else "WARN"
    return CheckResult(name, verdict, f"{problem} (pods of {', '.join(crun)} fail)", fix)  # type: ignore[arg-type]


def check_conmon(f: HostFacts) -> CheckResult:
    if f.conmon_path is None:
        return CheckResult("conmon", "FAIL", "not found", "apt-get install conmon")
    m = _VERSION.search(f.conmon_version)
    return CheckResult(
        "conmon", "OK", f"{f.conmon_path} {m.group(0) if m else f.conmon_version or '(version unknown)'}"
    )


def check_pause(f: HostFacts) -> CheckResult:
    if f.pause_image:
        return CheckResult("pause", "OK", f"sandbox image {f.pause_image}")
    if f.pause_path is None:
        return CheckResult(
            "pause",
            "FAIL",
            "catatonit not found (the built-in pause sandbox runs it)",
            "apt-get install catatonit, or set pod_infra_container_image",
        )
    return CheckResult("pause", "OK", f"{f.pause_path}")


def check_cgroups(f: HostFacts) -> CheckResult:
    mounted = f.cgroup_v1_controllers | f.cgroup_v2_controllers
    if not mounted:
        return CheckResult(
            "cgroups",
            "FAIL",
            "no cgroup controller is mounted",
            "mount cgroup2 on /sys/fs/cgroup (systemd does this at boot)",
        )
    missing = [
        c
        for c in REQUIRED_CONTROLLERS
        if c not in mounted
        and not (c == "cpuacct" and f.cgroup_v2_controllers)  # v2 has no cpuacct: cpu accounts
        and not (c == "devices" and f.cgroup_v2_controllers)  # v2 devices are eBPF, not a controller
        and not (c == "freezer" and f.cgroup_v2_controllers)
    ]  # v2 freezer is cgroup.freeze
    layout = "v2" if f.cgroup_v2_controllers and not f.cgroup_v1_controllers else "v1"
    if missing:
        return CheckResult(
            "cgroups",
            "FAIL",
            f"cgroup {layout}: {', '.join(missing)} not mounted",
            "mount the missing controllers under /sys/fs/cgroup",
        )
    return CheckResult(
        "cgroups", "OK", f"cgroup {layout}: {', '.join(c for c in REQUIRED_CONTROLLERS if c in mounted)}"
    )


def check_memory_controller(f: HostFacts) -> CheckResult:
    enabled = f.cgroup_enabled.get("memory")
    mounted = "memory" in f.cgroup_v1_controllers or "memory" in f.cgroup_v2_controllers
    if enabled and mounted:
        return CheckResult("memory cgroup", "OK", "enabled")
    # Raspberry Pi OS boots with the memory controller off; the kernel command line turns it on.
    from edgelet.cgroups.controllers import kernel_cmdline_fix

    hint = (
        kernel_cmdline_fix(f.cmdline_file)
        if f.is_raspberry_pi or enabled is False
        else "enable the memory cgroup controller (kernel command line `cgroup_enable=memory cgroup_memory=1`)"
    )
    # Until then pods with memory limits are refused with this fix; the flag runs them without the limits.
    hint += " (or start edgelet with --allow-missing-cgroup-controllers to run pods without memory limits)"
    return CheckResult("memory cgroup", "FAIL", "disabled" if enabled is False else "not mounted", hint)


def check_overlay(f: HostFacts) -> CheckResult:
    # By trying: the module loads on the first mount, so /proc/filesystems lacks it on a fresh boot.
    if f.overlay_error is None:
        return CheckResult("overlayfs", "OK", "a trial mount worked")
    if f.overlay_error != "not tried":
        return CheckResult(
            "overlayfs",
            "WARN",
            f"a trial mount failed: {f.overlay_error} (containers get a copied rootfs: slower, larger)",
            "modprobe overlay (and add `overlay` to /etc/modules)",
        )
    if "overlay" in f.filesystems:
        return CheckResult("overlayfs", "OK", "available")
    return CheckResult(
        "overlayfs",
        "WARN",
        "not in /proc/filesystems (containers get a copied rootfs: slower, larger)",
        "modprobe overlay (and add `overlay` to /etc/modules)",
    )


def check_read_only_mounts(f: HostFacts) -> CheckResult:
    name = "recursive read-only mounts"
    if f.recursive_read_only:
        return CheckResult(name, "OK", "read-only volume mounts are read-only in their submounts too (rro)")
    return CheckResult(
        name,
        "WARN",
        "no mount_setattr(2): a read-only hostPath leaves its submounts writable",
        "a Linux 5.12 or later kernel",
    )


def check_capabilities(f: HostFacts) -> CheckResult:
    """A reduced bounding set (a container runtime's default, a systemd CapabilityBoundingSet) limits privileged pods."""
    from edgelet.ocispec.defaults import ALL_CAPABILITIES

    name = "capabilities"
    if f.bounding_capabilities is None:
        return CheckResult(name, "WARN", "cannot read CapBnd from /proc/self/status")
    missing = [c for c in ALL_CAPABILITIES if c not in f.bounding_capabilities]
    if not missing:
        return CheckResult(name, "OK", "full bounding set")
    return CheckResult(
        name,
        "WARN",
        f"reduced bounding set, without {', '.join(missing)}: privileged containers "
        "run without these, and adding them to a container fails it",
        "run edgelet with every capability (not inside a container, or a systemd unit without "
        "CapabilityBoundingSet) if a pod needs them",
    )


def check_cni(f: HostFacts) -> CheckResult:
    if f.cni_network is not None:
        verdict, detail = f.cni_network
        hint = (
            ""
            if verdict == "OK"
            else (
                "apt-get install containernetworking-plugins, then install "
                "/usr/share/edgelet/10-edgelet.conflist in the CNI conf dir"
            )
        )
        return CheckResult("CNI network", verdict, detail, hint)  # type: ignore[arg-type]
    if f.cni_plugins:
        return CheckResult("CNI plugins", "OK", f"{len(f.cni_plugins)} plugins ({', '.join(f.cni_plugins[:4])}...)")
    return CheckResult(
        "CNI plugins",
        "WARN",
        f"none in {' or '.join(CNI_DIRS)}: pods without hostNetwork get loopback only",
        "apt-get install containernetworking-plugins",
    )


def check_disk(f: HostFacts) -> CheckResult:
    name = f"free space ({f.root_dir})"
    if f.root_free_bytes is None:
        return CheckResult(name, "FAIL", "cannot stat the root dir or any parent", "create the root dir")
    free_mb = f.root_free_bytes // (1 << 20)
    if f.root_free_bytes < MIN_FREE_BYTES:
        return CheckResult(
            name,
            "FAIL",
            f"{free_mb} MiB free, want at least {MIN_FREE_BYTES >> 20} MiB",
            "free space or point root_dir at a larger filesystem",
        )
    return CheckResult(name, "OK", f"{free_mb} MiB free")


def _configured_file(name: str, status: tuple[str, str] | None, off: str, hint: str) -> CheckResult:
    """The verdict of a file the agent reads at start and refuses to start with if it cannot use it."""
    if status is None:
        return CheckResult(name, "OK", f"not configured: {off}")
    verdict, detail = status
    return CheckResult(name, verdict, detail, "" if verdict == "OK" else hint)  # type: ignore[arg-type]


def check_trusted_keys(f: HostFacts) -> CheckResult:
    return _configured_file(
        "trusted keys",
        f.trusted_keys,
        "manifests and image archives are accepted unsigned",
        "fix the file named (the agent refuses to start with it), or drop --trusted-keys",
    )


def check_signature_policy(f: HostFacts) -> CheckResult:
    return _configured_file(
        "signature policy",
        f.signature_policy,
        "every registry pull is accepted unsigned",
        "fix the field named (the agent refuses to start with it); see containers-policy.json(5) "
        "and docs/trusted-delivery.md",
    )


def check_kubeconfig(f: HostFacts) -> CheckResult:
    return _configured_file(
        "kubeconfig",
        f.kubeconfig,
        "standalone, no apiserver",
        "fix the file named (the agent refuses to start with it), or drop --kubeconfig",
    )


def check_tunnel(f: HostFacts) -> CheckResult:
    return _configured_file(
        "tunnel",
        f.tunnel,
        "no WireGuard tunnel (the apiserver must reach the device directly)",
        "fix what is named (the agent refuses to start with it), or drop --wireguard-config",
    )


def check_tunnel_link(f: HostFacts) -> CheckResult:
    if f.tunnel_link is None:
        return CheckResult("tunnel link", "OK", "no tunnel to ask")
    ready, detail = f.tunnel_link
    if ready:
        return CheckResult("tunnel link", "OK", detail)
    return CheckResult(
        "tunnel link",
        "WARN",
        detail,
        "the running agent brings the interface up and keeps it (expected before its first start); without a "
        "recent handshake, check that the hub is up, reachable on its Endpoint, and has this device's [Peer]",
    )


def check_card(f: HostFacts) -> CheckResult:
    """The card folder: its config.toml (ignored when invalid, so a WARN) and secrets left on its FAT partition."""
    name = "card folder"
    if f.card_dir is None:
        return CheckResult(name, "OK", "none configured (card_dir)")
    if f.card_config_error is not None:
        return CheckResult(
            name,
            "WARN",
            f.card_config_error,
            f"fix {f.card_dir}/config.toml (edgelet runs with the other settings until then)",
        )
    if f.card_rejected:
        why = "; ".join(reason for _, reason in f.card_rejected)
        return CheckResult(
            name,
            "WARN",
            f"set aside by edgelet-card-setup, not used: {why}",
            "write a corrected file onto the card's edgelet/ folder and reboot "
            f"(then remove {', '.join(p for p, _ in f.card_rejected)})",
        )
    if f.card_secrets:
        files = ", ".join(f"{f.card_dir}/{n}" for n in f.card_secrets)
        return CheckResult(
            name,
            "WARN",
            f"secrets readable by every local user on the FAT partition: {files}",
            "run edgelet-card-setup (the image runs it at boot) to move them to /etc/edgelet",
        )
    if not f.card_present:
        return CheckResult(name, "OK", f"{f.card_dir} does not exist (no card pods)")
    return CheckResult(name, "OK", f"{f.card_dir}: manifests/, images/ and config.toml are read")


def check_self_update(f: HostFacts) -> CheckResult:
    """Off is a choice (no trusted keys, or a plain install), said so rather than warned about."""
    if f.self_update_off:
        return CheckResult("self-update", "OK", f"off: {f.self_update_off}")
    return CheckResult("self-update", "OK", "on: signed releases are staged, tried, then committed or rolled back")


CHECKS: tuple[Callable[[HostFacts], CheckResult], ...] = (
    check_root,
    check_runtime,
    check_conmon,
    check_pause,
    check_cgroups,
    check_memory_controller,
    check_overlay,
    check_read_only_mounts,
    check_capabilities,
    check_cni,
    check_disk,
    check_trusted_keys,
    check_signature_policy,
    check_card,
    check_kubeconfig,
    check_tunnel,
    check_self_update,
    check_handlers,
    check_crun_cgroups,
    check_tunnel_link,
)


def run_checks(facts: HostFacts) -> list[CheckResult]:
    return [check(facts) for check in CHECKS]


def format_results(results: list[CheckResult]) -> str:
    lines = []
    for r in results:
        line = f"{r.verdict:<4}  {r.name}: {r.detail}"
        if r.hint and r.verdict != "OK":
            line += f"  -> {r.hint}"
        lines.append(line)
    return "\n".join(lines)


def failed(results: list[CheckResult]) -> bool:
    return any(r.verdict == "FAIL" for r in results)


# --- the thin side of it -------------------------------------------------------


def parse_proc_cgroups(text: str) -> dict[str, bool]:
    """/proc/cgroups: `#subsys_name hierarchy num_cgroups enabled` lines."""
    out: dict[str, bool] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 4 and not line.startswith("#"):
            out[parts[0]] = parts[3] == "1"
    return out


def parse_mounts_cgroup_v1(text: str) -> frozenset[str]:
    """Controllers of the cgroup (v1) mounts in /proc/self/mounts."""
    found: set[str] = set()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[2] == "cgroup":
            found.update(o for o in parts[3].split(",") if o in parse_known_controllers())
    return frozenset(found)


def parse_known_controllers() -> frozenset[str]:
    return frozenset(
        {
            "cpu",
            "cpuacct",
            "cpuset",
            "memory",
            "pids",
            "devices",
            "freezer",
            "blkio",
            "net_cls",
            "net_prio",
            "perf_event",
            "hugetlb",
            "rdma",
            "misc",
        }
    )


def parse_filesystems(text: str) -> frozenset[str]:
    return frozenset(line.split()[-1] for line in text.splitlines() if line.strip())


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _version(path: str | None) -> str:
    line = version_line(path) if path else None
    return "" if line is None or line.startswith("error: ") else line


def _free_bytes(path: Path) -> int | None:
    for p in (path, *path.parents):
        try:
            return shutil.disk_usage(p).free
        except OSError:
            continue
    return None


def cni_network(conf_dir: Path, bin_dirs: list[str]) -> tuple[str, str]:
    """(verdict, detail) of the pods' network: the conflist edgelet would use and whether its plugins exist."""
    from edgelet.network import conf
    from edgelet.network.errors import ConfigError

    try:
        cfg = conf.load(conf_dir)
    except ConfigError as exc:
        return "FAIL", str(exc)
    if cfg is None:
        return "WARN", f"no CNI config in {conf_dir}: pods without hostNetwork get loopback only"
    missing = [t for t in cfg.plugin_types() if conf.find_plugin(t, bin_dirs) is None]
    if missing:
        return "FAIL", f"{cfg.path}: plugins not found in {':'.join(bin_dirs)}: {', '.join(missing)}"
    return "OK", f"network {cfg.name} from {cfg.path}: {', '.join(cfg.plugin_types())}"


def trusted_keys_status(path: Path) -> tuple[str, str]:
    """(verdict, detail) of reading `--trusted-keys` as the agent does at start (file and line of a bad key)."""
    from edgelet.trust.errors import KeyFileError
    from edgelet.trust.keys import load_trusted_keys

    try:
        keys = load_trusted_keys(path)
    except KeyFileError as exc:
        return "FAIL", str(exc)
    return "OK", f"{path}: {len(keys.ed25519)} minisign/signify and {len(keys.ssh)} SSH keys"


def signature_policy_status(path: Path) -> tuple[str, str]:
    """(verdict, detail) of reading `--signature-policy` as the agent does at start (file and field of an error)."""
    from edgelet.trust.errors import PolicyError
    from edgelet.trust.policy import load_policy

    try:
        policy = load_policy(path)
    except PolicyError as exc:
        return "FAIL", str(exc)
    default = ", ".join(req.type for req in policy.default)
    return "OK", f"{path}: {len(policy.docker)} docker scopes, default {default}"


def kubeconfig_status(path: Path) -> tuple[str, str]:
    """Load the kubeconfig as the agent does at start (the file and the fields it names)."""
    from edgelet.mirror.errors import KubeconfigError
    from edgelet.mirror.kubeconfig import load_kubeconfig, ssl_context

    try:
        cfg = load_kubeconfig(path)
    except KubeconfigError as exc:
        return "FAIL", " ".join(str(exc).split())  # one line: a YAML error spans several
    if cfg.server.startswith("https://"):
        try:
            ssl_context(cfg)  # what the client builds at start: certificate files named, inline data decoded
        except KubeconfigError as exc:
            return "FAIL", " ".join(f"{path}: {exc}".split())
    return "OK", f"{path}: server {cfg.server}"


def tunnel_status(path: Path, root_dir: Path) -> tuple[str, str]:
    """Read the tunnel's config as the agent does at start (permissions, every line) and name the device's key."""
    from edgelet.tunnel import keys
    from edgelet.tunnel.config import encode_key
    from edgelet.tunnel.device import interface_name
    from edgelet.tunnel.errors import TunnelError

    try:
        interface = interface_name(str(path))
        loaded = keys.load(path, root_dir, create=False)
    except TunnelError as exc:
        return "FAIL", str(exc)
    if loaded is None:
        return "OK", (
            f"{path}: no PrivateKey; the agent generates one at first start under {root_dir} "
            "(`edgelet tunnel peer-line` does it now and prints the hub's [Peer] block)"
        )
    hubs = ", ".join(str(p.endpoint) for p in loaded.config.peers)
    address = ", ".join(str(a) for a in loaded.config.addresses)
    return "OK", (
        f"{path}: interface {interface}, address {address}, hub {hubs}, public key {encode_key(loaded.public_key)}"
    )


def tunnel_link(path: Path) -> tuple[bool, str] | None:
    """What the tunnel's interface answers now over UAPI; None when the file does not name one."""
    from edgelet.tunnel.device import interface_name
    from edgelet.tunnel.errors import TunnelError
    from edgelet.tunnel.show import describe, read_state

    try:
        interface = interface_name(str(path))
    except TunnelError:
        return None
    return describe(interface, *read_state(interface), clock.now())


def rejected_card_secrets(etc_dir: Path) -> tuple[tuple[str, str], ...]:
    """What edgelet-card-setup set aside in etc_dir as NAME.rejected, and why (a kubeconfig or wireguard.conf: the
    loader's error)."""
    found = []
    for name in CARD_SECRETS:
        path = etc_dir / f"{name}.rejected"
        if not path.exists():
            continue
        # A usable file was set aside only because the device held one already: a card never replaces a secret.
        replaced = f"{path}: the device holds {etc_dir / name} already (a card never replaces a secret)"
        if name == "kubeconfig":
            level, why = kubeconfig_status(path)
            found.append((str(path), why if level == "FAIL" else replaced))
        elif name == "wireguard.conf":
            found.append((str(path), _wireguard_problem(path) or replaced))
        else:
            found.append((str(path), replaced))
    return tuple(found)


def _wireguard_problem(path: Path) -> str | None:
    """Why the agent would refuse this WireGuard config (its permissions and every line), or None."""
    from edgelet.tunnel import keys
    from edgelet.tunnel.errors import TunnelError

    try:
        keys.read_config(path)
    except TunnelError as exc:
        return str(exc)
    return None


def gather_facts(
    *,
    runtime: str,
    conmon: str,
    pause_image: str | None,
    root_dir: Path,
    cni_conf_dir: Path | None = None,
    cni_bin_dirs: list[str] | None = None,
    trusted_keys: Path | None = None,
    signature_policy: Path | None = None,
    card_dir: Path | None = None,
    card_config_error: str | None = None,
    kubeconfig: Path | None = None,
    wireguard_config: Path | None = None,
    update_current: Path | None = None,
    handlers: dict[str, str] | None = None,
    default_handler: str = "runc",
) -> HostFacts:
    """Look at this machine once; `handlers` maps each runtime handler's name to its binary."""
    from edgelet.cgroups.controllers import probe_cmdline_file
    from edgelet.cgroups.hybrid import problem as hybrid_problem
    from edgelet.runtime.bundle import probe_recursive_read_only
    from edgelet.runtime.handlers import features_summary, parse_features
    from edgelet.runtime.host import parse_cap_mask
    from edgelet.runtime.rootfs import probe_overlay

    runtime_path = shutil.which(runtime)
    conmon_path = shutil.which(conmon)
    v2 = frozenset(_read("/sys/fs/cgroup/cgroup.controllers").split()) or frozenset(
        _read("/sys/fs/cgroup/unified/cgroup.controllers").split()
    )
    cni: list[str] = []
    for d in CNI_DIRS:
        try:
            cni += sorted(n for n in os.listdir(d) if os.access(os.path.join(d, n), os.X_OK))
        except OSError:
            continue
    model = _read("/proc/device-tree/model") or _read("/sys/firmware/devicetree/base/model")
    bounding = None
    for line in _read("/proc/self/status").splitlines():
        if line.startswith("CapBnd:"):
            bounding = parse_cap_mask(int(line.split()[1], 16))
    return HostFacts(
        euid=os.geteuid(),
        runtime=runtime,
        runtime_path=runtime_path,
        runtime_version=_version(runtime_path),
        conmon_path=conmon_path,
        conmon_version=_version(conmon_path),
        pause_path=shutil.which("catatonit")
        or next(
            (p for p in ("/usr/libexec/catatonit/catatonit", "/usr/libexec/podman/catatonit") if os.access(p, os.X_OK)),
            None,
        ),
        pause_image=pause_image,
        cgroup_v1_controllers=parse_mounts_cgroup_v1(_read("/proc/self/mounts")),
        cgroup_v2_controllers=v2,
        cgroup_enabled=parse_proc_cgroups(_read("/proc/cgroups")),
        filesystems=parse_filesystems(_read("/proc/filesystems")),
        cni_plugins=tuple(dict.fromkeys(cni)),
        cni_network=cni_network(cni_conf_dir, cni_bin_dirs or list(CNI_DIRS)) if cni_conf_dir is not None else None,
        root_dir=str(root_dir),
        root_free_bytes=_free_bytes(root_dir),
        is_raspberry_pi="Raspberry Pi" in model,
        cmdline_file=probe_cmdline_file(),
        card_dir=None if card_dir is None else str(card_dir),
        card_present=card_dir is not None and card_dir.is_dir(),
        card_config_error=card_config_error,
        card_secrets=() if card_dir is None else tuple(n for n in CARD_SECRETS if (card_dir / n).exists()),
        recursive_read_only=probe_recursive_read_only(),
        overlay_error=probe_overlay() if os.geteuid() == 0 else "not tried",
        bounding_capabilities=bounding,
        trusted_keys=trusted_keys_status(trusted_keys) if trusted_keys is not None else None,
        signature_policy=signature_policy_status(signature_policy) if signature_policy is not None else None,
        kubeconfig=kubeconfig_status(kubeconfig) if kubeconfig is not None else None,
        card_rejected=() if card_dir is None else rejected_card_secrets(DEFAULT_CONFIG.parent),
        tunnel=tunnel_status(wireguard_config, root_dir) if wireguard_config is not None else None,
        self_update_off=off_reason(trusted_keys is not None, update_current) if update_current else "not looked at",
        handlers=tuple(
            (
                name,
                shutil.which(binary),
                _version(shutil.which(binary)),
                features_summary(parse_features(runtime_features(binary))),
            )
            for name, binary in sorted((handlers or {}).items())
        ),
        default_handler=default_handler,
        hybrid_cgroups=hybrid_problem(),
        tunnel_link=tunnel_link(wireguard_config) if wireguard_config is not None else None,
    )


def cmd_check(settings: Settings, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from edgelet.runtime.handlers import resolve_handlers

    facts = gather_facts(
        runtime=settings.runtime,
        conmon=settings.conmon,
        pause_image=settings.pod_infra_container_image,
        root_dir=settings.root_dir,
        cni_conf_dir=settings.cni_conf_dir,
        cni_bin_dirs=[d for d in settings.cni_bin_dir.split(":") if d],
        trusted_keys=settings.trusted_keys,
        signature_policy=settings.signature_policy,
        card_dir=settings.card_dir,
        card_config_error=settings.card_config_error,
        kubeconfig=settings.kubeconfig,
        wireguard_config=settings.wireguard_config,
        update_current=settings.update_current,
        handlers={
            name: cfg.path for name, cfg in resolve_handlers(settings.runtime_handlers, settings.runtime).items()
        },
        default_handler=settings.runtime_handler,
    )
    results = run_checks(facts)
    print(format_results(results), file=out)
    return EXIT_FAILURE if failed(results) else EXIT_OK
