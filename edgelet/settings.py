"""The agent's configuration: one frozen Settings built from defaults < TOML file < EDGELET_* env < flags.

Keys are the kubelet flag names in snake_case (`--pod-manifest-path` is
`pod_manifest_path` in the TOML file and `EDGELET_POD_MANIFEST_PATH` in the
environment). Every key is declared once, as a field of `Settings` carrying
its parser (from `edgelet.settingsparse`) and help text; the TOML reader, the
environment reader and the CLI's flags are all derived from those fields, so
adding a key is one line.

Durations accept Go's forms as the kubelet does (`20s`, `1m30s`, `500ms`,
`1h`, `0`) and, in TOML only, plain numbers of seconds.
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgelet.cardpolicy import split_card_keys
from edgelet.errors import EdgeletError
from edgelet.settingsparse import (
    Parser,
    _bool,
    _cgroup_parent,
    _duration,
    _enforce,
    _headers,
    _int,
    _ip,
    _ip_list,
    _items,
    _labels,
    _one_of,
    _path,
    _percent,
    _port,
    _registries,
    _reserved,
    _rollout_strategy,
    _runtime_handlers,
    _size,
    _str,
    _sysctl_patterns,
    _taints,
    _url,
    refused_node_labels,
)

# parse_duration is re-exported: importers read durations the way the settings do.
from edgelet.util.duration import format_duration, parse_duration  # noqa: F401

if TYPE_CHECKING:
    from edgelet.runtime.handlers import HandlerConfig
    from edgelet.runtime.layout import RuntimePaths

DEFAULT_CONFIG = Path("/etc/edgelet/config.toml")
# kubelet's DefaultEvictionHard on Linux.
EVICTION_HARD_DEFAULT = "memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%,imagefs.available<15%"
ENV_PREFIX = "EDGELET_"
CONFIG_ENV = "EDGELET_CONFIG"


class SettingsError(EdgeletError):
    """A configuration value that cannot be used; names the key and where it came from."""

    def __init__(self, message: str, *, key: str | None = None, source: str | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.source = source


def _opt(default: Any, parse: Parser, help: str, *, flags: tuple[str, ...] = (), metavar: str = "") -> Any:
    """Declare one key: its default, its parser, its help text and (rarely) extra flag spellings."""
    return field(default=default, metadata={"parse": parse, "help": help, "flags": flags, "metavar": metavar})


@dataclass(frozen=True)
class Settings:
    """Everything configurable about a running edgelet. Build it with `load_settings`."""

    pod_manifest_path: Path = _opt(
        Path("/etc/kubernetes/manifests"), _path(), "directory (or single file) of static pod manifests", metavar="DIR"
    )
    file_check_frequency: float = _opt(
        20.0, _duration(positive=True), "full rescan period of the manifest directory", metavar="DURATION"
    )
    manifest_url: str | None = _opt(None, _url, "URL of pod manifests to poll (default: no URL source)", metavar="URL")
    manifest_url_header: tuple[tuple[str, str], ...] = _opt(
        (), _headers, "HTTP headers for --manifest-url, comma-separated (TOML: a table or a list)", metavar="NAME:VALUE"
    )
    manifest_url_header_file: Path | None = _opt(
        None,
        _path(optional=True),
        "file of `Name: value` lines sent as headers with --manifest-url, read at each "
        "fetch (keeps tokens out of `ps`, which shows every flag to every local user)",
        metavar="FILE",
    )
    http_check_frequency: float = _opt(
        20.0, _duration(positive=True), "poll period of --manifest-url", metavar="DURATION"
    )
    manifest_url_ca: Path | None = _opt(
        None, _path(optional=True), "CA bundle to verify --manifest-url (default: the system's)", metavar="FILE"
    )
    # Trusted delivery (docs/trusted-delivery.md).
    trusted_keys: Path | None = _opt(
        None,
        _path(optional=True),
        "file or directory of trusted minisign/signify public keys and SSH allowed_signers: "
        "every manifest (and import-dir archive) then needs a valid detached signature",
        metavar="PATH",
    )
    manifest_url_signature: str | None = _opt(
        None, _url, "URL of --manifest-url's signature (default: the URL + .minisig, then + .sig)", metavar="URL"
    )
    runonce: bool = _opt(False, _bool, "run the pods once, report, and exit")
    runonce_timeout: float = _opt(300.0, _duration(positive=True), "time limit of --runonce", metavar="DURATION")
    root_dir: Path = _opt(Path("/var/lib/edgelet"), _path(), "state directory (images, pods)", metavar="DIR")
    run_dir: Path = _opt(Path("/run/edgelet"), _path(), "runtime state (runc root, exit files)", metavar="DIR")
    log_dir: Path = _opt(Path("/var/log"), _path(), "parent of pods/ and containers/ log dirs", metavar="DIR")
    hostname_override: str | None = _opt(
        None, _str(optional=True), "node name (default: this machine's hostname)", metavar="NAME"
    )
    pod_infra_container_image: str | None = _opt(
        None, _str(optional=True), "sandbox image (default: built-in catatonit pause)", metavar="IMAGE"
    )
    pod_infra_container: bool = _opt(
        False,
        _bool,
        "run a pause process in every pod, as kubelet does (default: "
        "only pods with shareProcessNamespace get one; the others' namespaces are "
        "pinned as files under --run-dir)",
    )
    cgroup_root: str = _opt("/kubepods", _cgroup_parent, "cgroup parent of every pod", metavar="CGROUP")
    runtime: str = _opt("runc", _str(), "OCI runtime binary", metavar="PATH")
    runtime_handlers: tuple[tuple[str, HandlerConfig], ...] = _opt(
        (),
        _runtime_handlers,
        "OCI runtimes a pod picks with runtimeClassName, beside runc (the runtime binary) and crun where found "
        "on PATH (TOML: a table of name = path, or name = {path, root}; env or flag: name=path,...)",
        metavar="NAME=PATH",
    )
    runtime_handler: str = _opt(
        "runc", _str(), "the runtime handler of a pod without runtimeClassName (runc, crun, ...)", metavar="NAME"
    )
    conmon: str = _opt("conmon", _str(), "conmon binary", metavar="PATH")
    seccomp_default: bool = _opt(
        True,
        _bool,
        "kubelet's --seccomp-default, on by default: a container without "
        "seccompProfile runs under the RuntimeDefault profile (--seccomp-default=false turns it off)",
    )
    image_import_dir: Path | None = _opt(
        None,
        _path(optional=True),
        "image archives dropped here are imported (default: ROOT_DIR/images/import)",
        metavar="DIR",
    )
    card_dir: Path | None = _opt(
        None,
        _path(optional=True),
        "a second place a person drops pods, e.g. the edgelet/ folder of an SD card's FAT "
        "partition: its manifests/ are static pods beside --pod-manifest-path, its images/ are imported, its "
        "config.toml overrides the config file (an invalid one is reported and ignored)",
        metavar="DIR",
    )
    update_current: Path = _opt(
        Path("/usr/lib/edgelet/current"),
        _path(),
        "the symlink to the running release, which the unit's launcher starts; self-update swaps it "
        "(releases are staged under ROOT_DIR/releases; off without --trusted-keys)",
        metavar="PATH",
    )
    update_url: str | None = _opt(
        None,
        _url,
        "URL of edgelet release archives to poll, every --http-check-frequency (its signature at URL.minisig or "
        "URL.sig; needs --trusted-keys and the releases layout)",
        metavar="URL",
    )
    # Its own, not --manifest-url's: the release server may be another host, which must not get the manifest
    # server's token.
    update_url_header: tuple[tuple[str, str], ...] = _opt(
        (), _headers, "HTTP headers for --update-url, comma-separated (TOML: a table or a list)", metavar="NAME:VALUE"
    )
    update_url_header_file: Path | None = _opt(
        None,
        _path(optional=True),
        "file of `Name: value` lines sent as headers with --update-url, read at each poll (keeps tokens out of `ps`)",
        metavar="FILE",
    )
    update_url_ca: Path | None = _opt(
        None, _path(optional=True), "CA bundle to verify --update-url (default: the system's)", metavar="FILE"
    )
    update_max_attempts: int = _opt(
        3, _int(minimum=1), "starts of a release on trial without a commit before the previous one runs", metavar="N"
    )
    update_trial_deadline: float = _opt(
        120.0, _duration(positive=True), "time a release on trial has to prove healthy", metavar="DURATION"
    )
    image_credential_file: Path | None = _opt(
        None,
        _path(optional=True),
        "docker config.json with registry credentials "
        "(default: /etc/edgelet/auth.json, then /root/.docker/config.json)",
        metavar="FILE",
    )
    signature_policy: Path | None = _opt(
        None,
        _path(optional=True),
        "containers-policy.json(5) that registry pulls must satisfy (cosign "
        "sigstoreSigned keys, reject, insecureAcceptAnything per registry/repository; conventionally "
        "/etc/containers/policy.json; default: none, every pull accepted)",
        metavar="FILE",
    )
    image_gc_high_threshold: int = _opt(
        85, _percent, "disk usage percent of the root dir's filesystem that starts image GC", metavar="PERCENT"
    )
    image_gc_low_threshold: int = _opt(80, _percent, "disk usage percent image GC frees down to", metavar="PERCENT")
    image_minimum_gc_age: float = _opt(
        120.0, _duration(), "minimum age of an unused image before GC may remove it", metavar="DURATION"
    )
    container_log_max_size: int = _opt(
        10 * 1024 * 1024,
        _size,
        "a container's log is rotated once it reaches "
        "this size (conmon cuts it at twice this size if rotation falls behind)",
        metavar="SIZE",
    )
    container_log_max_files: int = _opt(
        5,
        _int(minimum=2),
        "log files kept per container instance, the current one included (all but the two newest gzipped)",
        metavar="N",
    )
    container_log_monitor_interval: float = _opt(
        10.0,
        _duration(positive=True),
        "how often container logs are checked for rotation (a fast-growing log sooner)",
        metavar="DURATION",
    )
    eviction_hard: str | None = _opt(
        EVICTION_HARD_DEFAULT,
        _str(optional=True),
        "hard eviction thresholds, SIGNAL<QUANTITY or SIGNAL<PERCENT%, "
        "comma-separated (signals: memory.available, nodefs.available, nodefs.inodesFree, imagefs.available, "
        "imagefs.inodesFree, pid.available; empty: no hard eviction)",
        metavar="THRESHOLDS",
    )
    eviction_soft: str | None = _opt(
        None,
        _str(optional=True),
        "soft eviction thresholds, as --eviction-hard; each needs a grace period",
        metavar="THRESHOLDS",
    )
    eviction_soft_grace_period: str | None = _opt(
        None,
        _str(optional=True),
        "how long each soft threshold must be met before it evicts, SIGNAL=DURATION, comma-separated",
        metavar="GRACES",
    )
    eviction_minimum_reclaim: str | None = _opt(
        None,
        _str(optional=True),
        "how far below a met threshold a signal must recover, SIGNAL=QUANTITY, comma-separated",
        metavar="RECLAIMS",
    )
    eviction_max_pod_grace_period: int = _opt(
        0, _int(minimum=-1), "seconds of grace a soft eviction allows a pod (-1: the pod's own)", metavar="SECONDS"
    )
    eviction_pressure_transition_period: float = _opt(
        300.0,
        _duration(),
        "how long a pressure condition stays after its signal recovered; evicted pods start again after it",
        metavar="DURATION",
    )
    cni_conf_dir: Path = _opt(
        Path("/etc/cni/net.d"),
        _path(),
        "CNI network configs; the first in lexical order "
        "is the pods' network (none: pods without hostNetwork get loopback only)",
        metavar="DIR",
    )
    cni_bin_dir: str = _opt(
        "/opt/cni/bin:/usr/lib/cni", _str(), "where CNI plugins are searched, colon-separated", metavar="DIRS"
    )
    cni_check_period: float = _opt(
        60.0,
        _duration(),
        "the housekeeping period of pod networks: a pod whose links or addresses changed is verified "
        "(CNI CHECK) at the next period, each pod once every 60 periods; a failed check gives a new sandbox (0: never)",
        metavar="DURATION",
    )
    cluster_dns: tuple[str, ...] = _opt(
        (),
        _ip_list,
        "DNS server IPs for pods with dnsPolicy ClusterFirst "
        "(none: those pods use the node's resolv.conf, with a MissingClusterDNS "
        "event)",
        metavar="IPS",
    )
    cluster_domain: str | None = _opt(
        None,
        _str(optional=True),
        "the cluster's DNS domain, searched by ClusterFirst pods and used by setHostnameAsFQDN",
        metavar="DOMAIN",
    )
    allowed_unsafe_sysctls: tuple[str, ...] = _opt(
        (),
        _sysctl_patterns,
        "namespaced sysctls beyond kubelet's safe set that pods may set (names, or prefixes ending in *)",
        metavar="PATTERNS",
    )
    pod_max_pids: int = _opt(
        1024,
        _int(minimum=-1),
        "most processes a pod may run, on its cgroup and each container (kubelet's "
        "default is unlimited; -1: unlimited): a fork bomb stays in its pod",
        metavar="N",
    )
    system_reserved: tuple[tuple[str, str], ...] = _opt(
        (),
        _reserved,
        "resources kept for the OS, name=quantity comma-separated (cpu, memory, pid, "
        "ephemeral-storage): taken off the node's allocatable",
        metavar="RESOURCES",
    )
    kube_reserved: tuple[tuple[str, str], ...] = _opt(
        (), _reserved, "resources kept for edgelet, runc and conmon, as --system-reserved", metavar="RESOURCES"
    )
    enforce_node_allocatable: tuple[str, ...] = _opt(
        ("pods",),
        _enforce,
        "pods: cap the whole pod tree (the cgroup root) at the node's allocatable cpu shares, "
        "memory and pids; none: only report allocatable",
        metavar="LEVELS",
    )
    allow_missing_cgroup_controllers: bool = _opt(
        False,
        _bool,
        "run pods whose limits need a cgroup controller the kernel lacks (the memory one on "
        "Raspberry Pi OS without cgroup_enable=memory) without those limits, with a warning event; without it "
        "such pods fail at once with the fix in their reason",
    )
    shutdown_grace_period: float = _opt(
        30.0,
        _duration(),
        "how long a node shutdown waits for pods to stop (logind's delay lock; 0: no graceful node shutdown)",
        metavar="DURATION",
    )
    shutdown_grace_period_critical_pods: float = _opt(
        10.0,
        _duration(),
        "the part of --shutdown-grace-period kept for critical pods, which stop last",
        metavar="DURATION",
    )
    eviction_monitoring_interval: float = _opt(
        10.0,
        _duration(positive=True),
        "how often the eviction manager observes the node (edgelet's; kubelet's is fixed at 10s)",
        metavar="DURATION",
    )
    registries: tuple[tuple[str, Any], ...] = _opt(
        (),
        _registries,
        'per-registry mirrors and insecure (TOML: [registries."docker.io"] mirrors = [...]; '
        "as a flag: that table as JSON)",
        metavar="JSON",
    )
    enable_server: bool = _opt(
        True, _bool, "serve the local API on RUN_DIR/edgelet.sock (TOML/env: false turns it off, and /healthz with it)"
    )
    healthz_port: int = _opt(10248, _port, "port of the /healthz listener (0 disables it)", metavar="PORT")
    healthz_bind_address: str = _opt("127.0.0.1", _str(), "address of the /healthz listener", metavar="ADDRESS")
    port: int | None = _opt(
        None,
        _port,
        "port of the node API (TLS, authenticated; kubelet's 10250): setting it "
        "or --address turns the API on, --kubeconfig does too (default: off)",
        metavar="PORT",
    )
    address: str | None = _opt(
        None,
        _str(optional=True),
        "address the node API listens on (default: 0.0.0.0 when the API is on); the tunnel's own "
        "address listens there only, from when the tunnel is up",
        metavar="ADDRESS",
        flags=("--address", "--node-api-address"),
    )
    tls_cert_file: Path | None = _opt(
        None,
        _path(optional=True),
        "the node API's serving certificate (default: a self-signed one made once under ROOT_DIR/pki)",
        metavar="FILE",
    )
    tls_private_key_file: Path | None = _opt(None, _path(optional=True), "the key of --tls-cert-file", metavar="FILE")
    client_ca_file: Path | None = _opt(
        None,
        _path(optional=True),
        "CA bundle the node API verifies client certificates against (CN is the user, O the groups)",
        metavar="FILE",
    )
    api_token_file: Path | None = _opt(
        None,
        _path(optional=True),
        'static bearer tokens of the node API, CSV: token,user,"group1,group2"',
        metavar="FILE",
    )
    node_api_grants: tuple[str, ...] = _opt(
        (),
        lambda raw, from_toml: tuple(_items(raw, from_toml, "grants")),
        "who may read what on the node API besides the group system:masters (everything): "
        "user:NAME=SUB/SUB or group:NAME=SUB/SUB, SUB one of proxy, pods, log, stats, metrics, healthz or *",
        metavar="GRANTS",
    )
    streaming_connection_idle_timeout: float = _opt(
        4 * 3600.0,
        _duration(positive=True),
        "an exec, attach or port-forward session of the node API with no "
        "traffic this long is closed (kubelet's flag and default)",
        metavar="DURATION",
    )
    kubeconfig: Path | None = _opt(
        None,
        _path(optional=True),
        "kubeconfig of this node's apiserver identity: "
        "register the Node, renew its Lease and mirror the static pods (default: "
        "standalone, no apiserver)",
        metavar="FILE",
    )
    register_node: bool = _opt(True, _bool, "with --kubeconfig, create the Node when it does not exist")
    wireguard_config: Path | None = _opt(
        None,
        _path(optional=True),
        "wg-quick file of the WireGuard tunnel the device dials out on, so the hub reaches "
        "it behind NAT (no PrivateKey: one is generated under --root-dir); root-only, 0600",
        metavar="FILE",
    )
    wireguard_backend: str = _opt(
        "auto",
        _one_of("auto", "kernel", "wireguard-go"),
        "which WireGuard makes a new tunnel interface: auto (the kernel's where it has the module, else "
        "wireguard-go), kernel or wireguard-go; a running one is adopted as it is",
        metavar="BACKEND",
    )
    node_labels: tuple[tuple[str, str], ...] = _opt(
        (),
        _labels,
        "labels of the Node, key=value comma-separated (only those NodeRestriction lets a node set)",
        metavar="KEY=VALUE",
    )
    register_with_taints: tuple[tuple[str, str, str], ...] = _opt(
        (), _taints, "taints the Node is registered with, key=value:Effect comma-separated", metavar="TAINTS"
    )
    node_ip: str | None = _opt(
        None, _ip, "the Node's InternalIP (default: the source address of the default route)", metavar="ADDRESS"
    )
    node_status_update_frequency: float = _opt(
        10.0,
        _duration(positive=True),
        "how often the Node's status is computed (and patched when it changed)",
        metavar="DURATION",
    )
    node_status_report_frequency: float = _opt(
        300.0,
        _duration(positive=True),
        "the Node's status is patched at least this often, changed or not",
        metavar="DURATION",
    )
    node_lease_duration_seconds: int = _opt(40, _int(minimum=1), "duration of the node Lease", metavar="SECONDS")
    node_lease_renew_interval: float = _opt(
        10.0, _duration(positive=True), "how often the node Lease is renewed", metavar="DURATION"
    )
    verbosity: int = _opt(0, _int(minimum=0), "log level (kubelet's --v)", flags=("-v", "--v"), metavar="N")
    # Health-gated rollout of changed static pods (edgelet.rollout).
    rollout: bool = _opt(
        True,
        _bool,
        "a changed static pod's images are pulled before the old version stops, the new "
        "version must pass the health gate, and a failed one is rolled back to the last good "
        "version (--rollout=false: kubelet's kill-and-start; per pod: annotation "
        'edgelet.io/rollout: "off")',
    )
    rollout_deadline: float = _opt(
        300.0,
        _duration(positive=True),
        "time a new version has to become healthy before it is rolled back (per pod: edgelet.io/rollout-deadline)",
        metavar="DURATION",
    )
    rollout_stability_window: float = _opt(
        30.0,
        _duration(),
        "a new version is good once Ready this long without "
        "a container restart (per pod: edgelet.io/rollout-stability-window)",
        metavar="DURATION",
    )
    rollout_strategy: str = _opt(
        "Replace",
        _rollout_strategy,
        "Replace: stop the old version, then start "
        "the new; Surge: start the new beside the old and stop the old once the new is good "
        "(refused where they would clash, e.g. the same hostPort; per pod: "
        "edgelet.io/rollout-strategy)",
        metavar="STRATEGY",
    )
    # Not a key: what was wrong with the card's config.toml, which was then ignored (load_settings).
    card_config_error: str | None = field(default=None, compare=False, metadata={"key": False})

    def __post_init__(self) -> None:
        # Accept plain strings for paths when Settings is built directly (tests, the app).
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, str) and f.type in ("Path", "Path | None"):
                object.__setattr__(self, f.name, Path(value))

    @property
    def node_name(self) -> str:
        """kubelet's GetHostname: the override or the machine's hostname, trimmed and lowercased."""
        return (self.hostname_override or socket.gethostname()).strip().lower()

    @property
    def node_api_enabled(self) -> bool:
        """kubelet serves its port whenever it runs; edgelet only when asked, or when it joins a cluster."""
        return self.port is not None or self.address is not None or self.kubeconfig is not None

    @property
    def images_dir(self) -> Path:
        """The image store: blobs, unpacked layers, index."""
        return self.root_dir / "images"

    @property
    def import_dir(self) -> Path:
        return self.image_import_dir if self.image_import_dir is not None else self.images_dir / "import"

    @property
    def card_manifest_path(self) -> Path | None:
        """The card's static pods, a second manifest directory."""
        return None if self.card_dir is None else self.card_dir / "manifests"

    @property
    def card_import_dir(self) -> Path | None:
        """The card's image archives, a second import directory."""
        return None if self.card_dir is None else self.card_dir / "images"

    def runtime_paths(self) -> RuntimePaths:
        from edgelet.runtime.layout import RuntimePaths

        return RuntimePaths(
            root_dir=self.root_dir, run_dir=self.run_dir, log_dir=self.log_dir, cgroup_root=self.cgroup_root
        )


@dataclass(frozen=True)
class KeySpec:
    """One configuration key as the readers and the CLI see it."""

    name: str
    parse: Parser
    help: str
    flags: tuple[str, ...]
    metavar: str
    default: Any

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def is_bool(self) -> bool:
        return self.parse is _bool


KEYS: dict[str, KeySpec] = {
    f.name: KeySpec(
        f.name,
        f.metadata["parse"],
        f.metadata["help"],
        f.metadata["flags"] or ("--" + f.name.replace("_", "-"),),
        f.metadata["metavar"],
        f.default,
    )
    for f in dataclasses.fields(Settings)
    if f.metadata.get("key", True)
}

CARD_CONFIG = "config.toml"  # in card_dir
MAX_CARD_CONFIG_BYTES = 1 << 20  # a config is a few hundred bytes; a card's must not fill the agent's memory
# Node names end up in pod names (`<pod>-<node>`), which must be DNS-1123 subdomains.
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _parse_key(key: str, raw: Any, source: str, *, from_toml: bool, label: str) -> Any:
    """Parse one raw value; `label` prefixes the error (`FILE: key`, `ENV_VAR`, `--flag`)."""
    try:
        return KEYS[key].parse(raw, from_toml)
    except ValueError as exc:
        raise SettingsError(f"{label}: {exc}", key=key, source=source) from exc


def read_config_file(path: Path, *, regular_only: bool = False) -> dict[str, Any]:
    """Parse one TOML file into typed values; unknown keys and bad values are SettingsErrors.

    `regular_only` (the card's file): a named pipe, a device or a symlink there (a FAT card holds none) is
    refused, never read or waited on, and so is a file past MAX_CARD_CONFIG_BYTES.
    """
    from edgelet.util.files import read_regular

    try:
        if regular_only:
            raw = read_regular(path, MAX_CARD_CONFIG_BYTES, follow_symlinks=False)
            if len(raw) > MAX_CARD_CONFIG_BYTES:
                raise SettingsError(f"{path}: larger than {MAX_CARD_CONFIG_BYTES} bytes", source=str(path))
            data = tomllib.loads(raw.decode("utf-8"))
        else:
            with open(path, "rb") as f:
                data = tomllib.load(f)
    except FileNotFoundError as exc:
        raise SettingsError(f"config file {path} does not exist", source=str(path)) from exc
    except OSError as exc:
        raise SettingsError(f"cannot read config file {path}: {exc.strerror or exc}", source=str(path)) from exc
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"{path}: invalid TOML: {exc}", source=str(path)) from exc
    except UnicodeDecodeError as exc:  # a card written by a laptop may hold anything
        raise SettingsError(
            f"{path}: invalid TOML: not UTF-8 ({exc.reason} at byte {exc.start})", source=str(path)
        ) from exc
    values: dict[str, Any] = {}
    for key, raw in data.items():
        if key not in KEYS:
            import difflib  # only for a typo's hint: not kept by every agent

            hint = difflib.get_close_matches(key.replace("-", "_"), KEYS, n=1)
            suffix = f" (did you mean {hint[0]}?)" if hint else ""
            raise SettingsError(f"{path}: unknown key {key!r}{suffix}", key=key, source=str(path))
        values[key] = _parse_key(key, raw, str(path), from_toml=True, label=f"{path}: {key}")
    return values


def read_env(env: Mapping[str, str]) -> dict[str, Any]:
    """EDGELET_<KEY> variables; other EDGELET_* variables are ignored (tests and tools use some)."""
    values: dict[str, Any] = {}
    for key, spec in KEYS.items():
        if spec.env in env:
            values[key] = _parse_key(key, env[spec.env], spec.env, from_toml=False, label=spec.env)
    return values


def load_settings(
    flags: Mapping[str, Any] | None = None,
    *,
    config: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    default_config: Path = DEFAULT_CONFIG,
) -> Settings:
    """Build Settings: defaults < TOML file < EDGELET_* environment < `flags`.

    `flags` maps key names to raw values as given on the command line
    (strings, or True for a boolean flag). `config` is an explicit config
    file (`--config`), else `$EDGELET_CONFIG`, else `default_config`, which
    may be missing. An explicitly named file must exist.
    """
    env = os.environ if env is None else env
    flags = flags or {}
    if config is None and env.get(CONFIG_ENV):
        config = env[CONFIG_ENV]
    file_values: dict[str, Any] = {}
    if config is not None:
        file_values.update(read_config_file(Path(config)))
    elif default_config.exists():
        file_values.update(read_config_file(default_config))
    overrides = read_env(env)
    for key, raw in flags.items():
        if key not in KEYS:
            raise SettingsError(f"unknown setting {key!r}", key=key)
        spec = KEYS[key]
        overrides[key] = _parse_key(key, raw, spec.flags[-1], from_toml=False, label=spec.flags[-1])
    settings = _checked(
        {**file_values, **overrides}
    )  # without the card: what runs when the card's config cannot be used
    if settings.card_dir is None:
        return settings
    # The card sits between the config file and the environment: a person configures the device from a
    # laptop, an administrator's environment and flags still win. A bad card config never stops the agent.
    where = str(Path(settings.card_dir) / CARD_CONFIG)
    try:
        card = read_card_config(settings.card_dir)
        # The node's URL headers (a token) would go to whatever host the card's URL names.
        allowed, refused = split_card_keys(
            card,
            trusted=settings.trusted_keys is not None
            and not (settings.manifest_url_header or settings.manifest_url_header_file),
        )
        if not card:
            return settings
        # NodeRestriction would refuse the Node with such a label, and the agent stops at start over its own
        # --node-labels: from the card, the label is a person's mistake that must not stop the device.
        if refused_labels := refused_node_labels(dict(allowed.get("node_labels", ()))):
            raise SettingsError(
                f"{where}: node_labels: {', '.join(refused_labels)}: a node may not set these on itself "
                "(NodeRestriction); let an admin set them with kubectl label",
                key="node_labels",
            )
        merged = _checked({**file_values, **allowed, **overrides})
    except SettingsError as exc:
        message = str(exc) if where in str(exc) else f"{where}: {exc}"
        return dataclasses.replace(settings, card_config_error=f"{message} (the card's settings are ignored)")
    if refused:
        return dataclasses.replace(
            merged,
            card_config_error=(
                f"{where}: {', '.join(refused)} cannot be set on the card (only in {DEFAULT_CONFIG}, the environment "
                "or a flag): ignored; the card's other settings apply"
            ),
        )
    return merged


def read_card_config(card_dir: Path) -> dict[str, Any]:
    """The card's config.toml as typed values ({} when there is none); SettingsError names the file and key."""
    path = Path(card_dir) / CARD_CONFIG
    if not os.path.lexists(path):
        return {}
    return read_config_file(path, regular_only=True)


def _checked(values: dict[str, Any]) -> Settings:
    """Settings from parsed values after the checks that span several keys."""
    override = values.get("hostname_override")
    if override is not None and not _DNS_SUBDOMAIN.fullmatch(override.lower()):
        raise SettingsError(
            f"hostname_override: {override!r} is not a valid node name (DNS-1123 subdomain)", key="hostname_override"
        )
    total, critical = values.get("shutdown_grace_period", 30.0), values.get("shutdown_grace_period_critical_pods", 10.0)
    if critical > total:
        raise SettingsError(
            f"shutdown_grace_period_critical_pods ({format_duration(critical)}) must not exceed "
            f"shutdown_grace_period ({format_duration(total)})",
            key="shutdown_grace_period_critical_pods",
        )
    high, low = values.get("image_gc_high_threshold", 85), values.get("image_gc_low_threshold", 80)
    if low > high:
        raise SettingsError(
            f"image_gc_low_threshold ({low}) must not exceed image_gc_high_threshold ({high})",
            key="image_gc_low_threshold",
        )
    return Settings(**values)
