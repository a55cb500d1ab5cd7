"""Validation of a defaulted Pod as the API server's ValidatePodCreate would judge it, with kubectl's messages.

Every problem is a FieldError whose message is what `field.Error.ErrorBody()`
prints (`Invalid value: 70000: must be between 1 and 65535, inclusive`,
`Duplicate value: "app"`, `Unsupported value: "X": supported values: ...`),
and whose path is a JSONPath (`$.spec.containers[0].ports[0].containerPort`).

The pod is expected to be defaulted (apply_defaults): a field still None is
taken as "not set" and left alone, where the API server would first have
defaulted it. API-object references (Secrets, ConfigMaps, ...) are a static
pod rule and live in static.find_api_object_references.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from edgelet.api.errors import FieldError
from edgelet.api.fielderrors import (
    dns1123_label_errors,
    dns1123_subdomain_errors,
    duplicate,
    forbidden,
    invalid,
    is_dns1123_label,
    is_dns1123_subdomain,
    is_env_var_name,
    label_value_errors,
    not_found,
    not_supported,
    port_name_errors,
    port_number_errors,
    qualified_name_errors,
    range_error,
    regex_error,
    required,
    too_long,
    too_many,
)
from edgelet.api.quantity import QuantityError, parse_quantity
from edgelet.api.types import (
    Container,
    ContainerPort,
    HTTPGetAction,
    Lifecycle,
    ObjectMeta,
    Pod,
    PodDNSConfig,
    PodSecurityContext,
    PodSpec,
    Probe,
    ResourceRequirements,
    SecurityContext,
    Volume,
    VolumeMount,
)

__all__ = [
    "FieldError",
    "dns1123_label_errors",
    "dns1123_subdomain_errors",
    "duplicate",
    "forbidden",
    "invalid",
    "is_dns1123_label",
    "is_dns1123_subdomain",
    "not_found",
    "not_supported",
    "port_name_errors",
    "qualified_name_errors",
    "required",
    "too_long",
    "too_many",
    "validate_pod",
]

RESTART_POLICIES = ("Always", "OnFailure", "Never")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
# The order ValidatePodSpec lists them in its message.
DNS_POLICIES = ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None")
PROTOCOLS = ("SCTP", "TCP", "UDP")
TERMINATION_MESSAGE_POLICIES = ("File", "FallbackToLogsOnError")
HTTP_SCHEMES = ("HTTP", "HTTPS")
HOST_PATH_TYPES = ("", "BlockDevice", "CharDevice", "Directory", "DirectoryOrCreate", "File", "FileOrCreate", "Socket")

MAX_DNS_NAMESERVERS = 3
MAX_DNS_SEARCH_PATHS = 32
MAX_ID = 2**31 - 1
TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024

_HTTP_HEADER_NAME = re.compile(r"^[-A-Za-z0-9]+$")
# The regular expression apimachinery's ParseQuantity error quotes.
_QUANTITY_MESSAGE = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"

_ENV_NAME_MSG = "a valid environment variable name must consist only of printable ASCII characters other than '='"
_HTTP_HEADER_MSG = "a valid HTTP header must consist of alphanumeric characters or '-'"
_NEGATIVE = "must be greater than or equal to 0"
_NOT_POSITIVE = "must be greater than zero"
_INIT_FORBIDDEN = "may not be set for init containers without restartPolicy=Always"

# Volume sources in the order ValidateVolumes checks them: with two sources
# set, the error names the later one, as the API server's does.
_VOLUME_SOURCE_ORDER = (
    "emptyDir",
    "hostPath",
    "gitRepo",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "flocker",
    "persistentVolumeClaim",
    "rbd",
    "cinder",
    "cephfs",
    "quobyte",
    "downwardAPI",
    "fc",
    "flexVolume",
    "configMap",
    "azureFile",
    "vsphereVolume",
    "photonPersistentDisk",
    "portworxVolume",
    "azureDisk",
    "storageos",
    "projected",
    "scaleIO",
    "csi",
    "ephemeral",
    "image",
)
_VOLUME_SOURCES = sorted(
    ((attr, json) for attr, json in zip(Volume.__struct_fields__, Volume.__struct_encode_fields__) if attr != "name"),
    key=lambda pair: (_VOLUME_SOURCE_ORDER.index(pair[1]) if pair[1] in _VOLUME_SOURCE_ORDER else 999, pair[1]),
)
_PROBE_ACTIONS = (("exec", "exec"), ("http_get", "httpGet"), ("tcp_socket", "tcpSocket"), ("grpc", "grpc"))
_LIFECYCLE_ACTIONS = (("exec", "exec"), ("http_get", "httpGet"), ("tcp_socket", "tcpSocket"), ("sleep", "sleep"))
_STANDARD_CONTAINER_RESOURCES = ("cpu", "memory", "ephemeral-storage")
# Pod-level resources (PodLevelResources) also take a pids limit: kubernetes/website's pod-level-pid-limit.yaml.
_STANDARD_POD_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pids")
_HUGEPAGES_PREFIX = "hugepages-"


def _backstep_errors(path: str, value: str) -> list[FieldError]:
    if ".." in value.split("/"):
        # One error is enough even for `../../..`, as in validatePathNoBacksteps.
        return [invalid(path, value, "must not contain '..'")]
    return []


def _local_descending_path_errors(path: str, value: str) -> list[FieldError]:
    errors = [invalid(path, value, "must be a relative path")] if value.startswith("/") else []
    return errors + _backstep_errors(path, value)


# ---------------------------------------------------------------------------
# The pod.


def validate_pod(pod: Pod) -> list[FieldError]:
    """Every problem found in a (defaulted) pod, in field order; an empty list means the pod is valid."""
    errors: list[FieldError] = []
    _validate_metadata(pod.metadata or ObjectMeta(), errors)
    spec = pod.spec
    if spec is None:
        errors.append(required("$.spec"))
        return errors
    _validate_spec(spec, errors)
    return errors


def _validate_metadata(meta: ObjectMeta, errors: list[FieldError]) -> None:
    if not meta.name:
        errors.append(required("$.metadata.name", "name or generateName is required"))
    else:
        # For a static pod this is `<name>-<node>`, which kubelet also validates as a whole.
        errors.extend(invalid("$.metadata.name", meta.name, m) for m in dns1123_subdomain_errors(meta.name))
    if meta.namespace:
        errors.extend(invalid("$.metadata.namespace", meta.namespace, m) for m in dns1123_label_errors(meta.namespace))
    # Keys are reported in sorted order, so the output does not depend on the manifest's key order.
    for key, value in sorted((meta.labels or {}).items()):
        errors.extend(invalid("$.metadata.labels", key, m) for m in qualified_name_errors(key))
        errors.extend(invalid("$.metadata.labels", value, m) for m in label_value_errors(value))
    annotations = meta.annotations or {}
    for key in sorted(annotations):
        errors.extend(invalid("$.metadata.annotations", key, m) for m in qualified_name_errors(key.lower()))
    size = sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())
    if size > TOTAL_ANNOTATION_SIZE_LIMIT:
        errors.append(too_long("$.metadata.annotations", TOTAL_ANNOTATION_SIZE_LIMIT))


def _validate_spec(spec: PodSpec, errors: list[FieldError]) -> None:
    volumes = _validate_volumes(spec.volumes or [], errors)
    grace = spec.termination_grace_period_seconds
    host_network = bool(spec.host_network)
    names: set[str] = set()
    if not spec.containers:
        errors.append(required("$.spec.containers"))
    for field, containers in (("initContainers", spec.init_containers or []), ("containers", spec.containers or [])):
        for i, container in enumerate(containers):
            path = f"$.spec.{field}[{i}]"
            sc = container.security_context
            if sc is not None and sc.proc_mount == "Unmasked" and spec.host_users is not False:
                # The API server's rule: an unmasked /proc outside a user namespace is the host's /proc/sys.
                errors.append(
                    invalid(
                        f"{path}.securityContext.procMount", "Unmasked", "`hostUsers` must be false to use `Unmasked`"
                    )
                )
            _validate_container(
                container,
                path,
                init=field == "initContainers",
                names=names,
                volumes=volumes,
                host_network=host_network,
                grace=grace,
                errors=errors,
            )
    _validate_host_port_conflicts(spec.containers or [], errors)

    policy = spec.restart_policy
    if policy is not None:
        if policy == "":
            errors.append(required("$.spec.restartPolicy"))
        elif policy not in RESTART_POLICIES:
            errors.append(not_supported("$.spec.restartPolicy", policy, RESTART_POLICIES))
    dns_policy = spec.dns_policy
    if dns_policy is not None and dns_policy not in DNS_POLICIES:
        errors.append(not_supported("$.spec.dnsPolicy", dns_policy, DNS_POLICIES))
    _validate_dns_config(dns_policy, spec.dns_config, errors)
    for field, value in (("hostname", spec.hostname), ("subdomain", spec.subdomain)):
        if value:
            errors.extend(invalid(f"$.spec.{field}", value, m) for m in dns1123_label_errors(value))
    deadline = spec.active_deadline_seconds
    if deadline is not None and not 1 <= deadline <= MAX_ID:
        errors.append(invalid("$.spec.activeDeadlineSeconds", deadline, range_error(1, MAX_ID)))
    if grace is not None and grace < 0:
        # The API server accepts a negative grace period with a warning and
        # treats it as 1; edgelet deliberately rejects it instead.
        errors.append(invalid("$.spec.terminationGracePeriodSeconds", grace, _NEGATIVE))
    if spec.security_context is not None:
        _validate_pod_security_context(spec.security_context, errors)
    if spec.host_users is False:
        # edgelet's own refusal (kubelet would try): runc 1.1 cannot idmap the rootfs and volumes, so in a
        # user namespace the container's root would own nothing of its own filesystem.
        errors.append(
            forbidden(
                "$.spec.hostUsers",
                "user namespaces (hostUsers: false) are not supported by "
                "edgelet: its runtime (runc 1.1) cannot give the rootfs and volumes idmapped mounts",
            )
        )
    if spec.resources is not None:
        _validate_resources(spec.resources, "$.spec.resources", errors, pod_level=True)
    for name, quantity in sorted((spec.overhead or {}).items()):
        _quantity_value(quantity, f"$.spec.overhead[{name}]", errors)


def _validate_dns_config(policy: str | None, config: PodDNSConfig | None, errors: list[FieldError]) -> None:
    path = "$.spec.dnsConfig"
    if policy == "None":
        if config is None:
            errors.append(required(path, "must provide `dnsConfig` when `dnsPolicy` is None"))
            return
        if not config.nameservers:
            detail = "must provide at least one DNS nameserver when `dnsPolicy` is None"
            errors.append(required(f"{path}.nameservers", detail))
    if config is None:
        return
    nameservers = config.nameservers or []
    if len(nameservers) > MAX_DNS_NAMESERVERS:
        errors.append(too_many(f"{path}.nameservers", len(nameservers), MAX_DNS_NAMESERVERS))
    for i, server in enumerate(nameservers):
        try:
            ipaddress.ip_address(server)
        except ValueError:
            errors.append(invalid(f"{path}.nameservers[{i}]", server, "must be a valid IP address"))
    searches = config.searches or []
    if len(searches) > MAX_DNS_SEARCH_PATHS:
        errors.append(too_many(f"{path}.searches", len(searches), MAX_DNS_SEARCH_PATHS))
    for i, search in enumerate(searches):
        # "." (the root) and a trailing dot are allowed, as in validateDNSSearches.
        if search == ".":
            continue
        name = search.removesuffix(".")
        errors.extend(invalid(f"{path}.searches[{i}]", search, m) for m in dns1123_subdomain_errors(name))
    for i, option in enumerate(config.options or []):
        if not option.name:
            errors.append(required(f"{path}.options[{i}]", "Option.Name must not be empty"))


def _validate_pod_security_context(ctx: PodSecurityContext, errors: list[FieldError]) -> None:
    path = "$.spec.securityContext"
    for field, value in (("runAsUser", ctx.run_as_user), ("runAsGroup", ctx.run_as_group), ("fsGroup", ctx.fs_group)):
        _id_in_range(f"{path}.{field}", value, errors)
    for i, gid in enumerate(ctx.supplemental_groups or []):
        _id_in_range(f"{path}.supplementalGroups[{i}]", gid, errors)
    _validate_profiles(ctx, path, errors)


_PROFILE_TYPES = ("Localhost", "RuntimeDefault", "Unconfined")


def _validate_profiles(ctx: PodSecurityContext | SecurityContext, path: str, errors: list[FieldError]) -> None:
    """seccompProfile and appArmorProfile, as the API server checks them."""
    for field, profile in (("seccompProfile", ctx.seccomp_profile), ("appArmorProfile", ctx.app_armor_profile)):
        if profile is None:
            continue
        where = f"{path}.{field}"
        if not profile.type:
            errors.append(required(f"{where}.type"))
        elif profile.type not in _PROFILE_TYPES:
            errors.append(not_supported(f"{where}.type", profile.type, _PROFILE_TYPES))
        name = profile.localhost_profile
        if profile.type == "Localhost":
            if not name:
                errors.append(required(f"{where}.localhostProfile", "must be set when type is Localhost"))
            elif field == "seccompProfile":
                errors.extend(_local_descending_path_errors(f"{where}.localhostProfile", name))
            elif len(name) > 4095:
                errors.append(too_long(f"{where}.localhostProfile", 4095))
        elif name is not None:
            errors.append(invalid(f"{where}.localhostProfile", name, "can only be set when type is Localhost"))


def _id_in_range(path: str, value: int | None, errors: list[FieldError]) -> None:
    if value is not None and not 0 <= value <= MAX_ID:
        errors.append(invalid(path, value, range_error(0, MAX_ID)))


# ---------------------------------------------------------------------------
# Volumes.


def _validate_volumes(volumes: Sequence[Volume], errors: list[FieldError]) -> set[str]:
    """Check every volume; return the declared names for volumeMounts to refer to.

    The API server only registers volumes without errors, so a mount of an
    invalid volume also reports `Not found`; edgelet deliberately registers
    every named volume so one mistake gives one error.
    """
    names: set[str] = set()
    for i, volume in enumerate(volumes):
        path = f"$.spec.volumes[{i}]"
        _validate_volume_source(volume, path, errors)
        if not volume.name:
            errors.append(required(f"{path}.name"))
        else:
            errors.extend(invalid(f"{path}.name", volume.name, m) for m in dns1123_label_errors(volume.name))
        if volume.name in names:
            errors.append(duplicate(f"{path}.name", volume.name))
        elif volume.name:
            names.add(volume.name)
    return names


def _validate_volume_source(volume: Volume, path: str, errors: list[FieldError]) -> None:
    count = 0
    for attr, json_name in _VOLUME_SOURCES:
        if getattr(volume, attr) is None:
            continue
        if count:
            errors.append(forbidden(f"{path}.{json_name}", "may not specify more than 1 volume type"))
            continue
        count += 1
    if count == 0:
        errors.append(required(path, "must specify a volume type"))
    if volume.host_path is not None:
        hpath = f"{path}.hostPath"
        if not volume.host_path.path:
            errors.append(required(f"{hpath}.path"))
        else:
            errors.extend(_backstep_errors(f"{hpath}.path", volume.host_path.path))
        kind = volume.host_path.type
        if kind is not None and kind not in HOST_PATH_TYPES:
            errors.append(not_supported(f"{hpath}.type", kind, HOST_PATH_TYPES))
    if volume.empty_dir is not None and volume.empty_dir.size_limit is not None:
        _quantity_value(volume.empty_dir.size_limit, f"{path}.emptyDir.sizeLimit", errors)


# ---------------------------------------------------------------------------
# Containers.


def _validate_container(
    container: Container,
    path: str,
    *,
    init: bool,
    names: set[str],
    volumes: set[str],
    host_network: bool,
    grace: int | None,
    errors: list[FieldError],
) -> None:
    if not container.name:
        errors.append(required(f"{path}.name"))
    else:
        errors.extend(invalid(f"{path}.name", container.name, m) for m in dns1123_label_errors(container.name))
    if container.name in names:
        errors.append(duplicate(f"{path}.name", container.name))
    else:
        names.add(container.name)

    image = container.image or ""
    if not image:
        errors.append(required(f"{path}.image"))
    elif image.strip() != image:
        errors.append(invalid(f"{path}.image", image, "must not have leading or trailing whitespace"))
    policy = container.image_pull_policy
    if policy is not None:
        if policy == "":
            errors.append(required(f"{path}.imagePullPolicy"))
        elif policy not in PULL_POLICIES:
            errors.append(not_supported(f"{path}.imagePullPolicy", policy, PULL_POLICIES))
    message_policy = container.termination_message_policy
    if message_policy is not None:
        if message_policy == "":
            errors.append(required(f"{path}.terminationMessagePolicy", "must be 'File' or 'FallbackToLogsOnError'"))
        elif message_policy not in TERMINATION_MESSAGE_POLICIES:
            errors.append(
                not_supported(f"{path}.terminationMessagePolicy", message_policy, TERMINATION_MESSAGE_POLICIES)
            )

    restart = container.restart_policy
    sidecar = init and restart == "Always"
    if restart is not None:
        if not init:
            errors.append(forbidden(f"{path}.restartPolicy", "may not be set for non-init containers"))
        elif restart != "Always":
            errors.append(not_supported(f"{path}.restartPolicy", restart, ("Always",)))

    port_names = _validate_ports(container.ports or [], path, host_network, errors)
    _validate_env(container, path, errors)
    _validate_mounts(container.volume_mounts or [], path, volumes, errors)
    if container.resources is not None:
        _validate_resources(container.resources, f"{path}.resources", errors)
    if container.security_context is not None:
        _validate_security_context(container.security_context, f"{path}.securityContext", errors)

    probes = (
        ("livenessProbe", container.liveness_probe),
        ("readinessProbe", container.readiness_probe),
        ("startupProbe", container.startup_probe),
    )
    if init and not sidecar:
        # Init containers run to completion: probes and hooks make no sense for them.
        if container.lifecycle is not None:
            errors.append(forbidden(f"{path}.lifecycle", _INIT_FORBIDDEN))
        for field, probe in probes:
            if probe is not None:
                errors.append(forbidden(f"{path}.{field}", _INIT_FORBIDDEN))
        return
    if container.lifecycle is not None:
        _validate_lifecycle(container.lifecycle, f"{path}.lifecycle", port_names, grace, errors)
    for field, probe in probes:
        if probe is not None:
            _validate_probe(probe, f"{path}.{field}", field, port_names, errors)


def _validate_ports(
    ports: Sequence[ContainerPort], path: str, host_network: bool, errors: list[FieldError]
) -> set[str]:
    """Check the container's ports; return its valid port names (probes may refer to them)."""
    names: set[str] = set()
    for j, port in enumerate(ports):
        ppath = f"{path}.ports[{j}]"
        if port.name:
            messages = port_name_errors(port.name)
            errors.extend(invalid(f"{ppath}.name", port.name, m) for m in messages)
            if not messages:
                if port.name in names:
                    errors.append(duplicate(f"{ppath}.name", port.name))
                names.add(port.name)
        if port.container_port == 0:
            errors.append(required(f"{ppath}.containerPort"))
        else:
            errors.extend(
                invalid(f"{ppath}.containerPort", port.container_port, m)
                for m in port_number_errors(port.container_port)
            )
        if port.host_port:
            errors.extend(invalid(f"{ppath}.hostPort", port.host_port, m) for m in port_number_errors(port.host_port))
        if port.protocol is not None:
            if port.protocol == "":
                errors.append(required(f"{ppath}.protocol"))
            elif port.protocol not in PROTOCOLS:
                errors.append(not_supported(f"{ppath}.protocol", port.protocol, PROTOCOLS))
        # Defaulting made hostPort = containerPort where it was unset, so any
        # difference left is one the user wrote.
        if host_network and port.host_port and port.host_port != port.container_port:
            errors.append(
                invalid(
                    f"{ppath}.containerPort", port.container_port, "must match `hostPort` when `hostNetwork` is true"
                )
            )
    return names


def _validate_host_port_conflicts(containers: Sequence[Container], errors: list[FieldError]) -> None:
    seen: set[str] = set()
    for i, container in enumerate(containers):
        for j, port in enumerate(container.ports or []):
            if not port.host_port:
                continue
            key = f"{port.host_ip or ''}/{port.protocol or 'TCP'}/{port.host_port}"
            if key in seen:
                errors.append(duplicate(f"$.spec.containers[{i}].ports[{j}].hostPort", key))
            seen.add(key)


def _validate_env(container: Container, path: str, errors: list[FieldError]) -> None:
    for j, env in enumerate(container.env or []):
        epath = f"{path}.env[{j}]"
        if not env.name:
            # The API server adds "Invalid value: "": ... must be non-empty"; one error says it.
            errors.append(required(f"{epath}.name"))
        elif not is_env_var_name(env.name):
            errors.append(invalid(f"{epath}.name", env.name, _ENV_NAME_MSG))
        source = env.value_from
        if source is None:
            continue
        count = sum(
            getattr(source, f) is not None
            for f in ("field_ref", "resource_field_ref", "config_map_key_ref", "secret_key_ref", "file_key_ref")
        )
        vpath = f"{epath}.valueFrom"
        if count == 0:
            errors.append(
                invalid(
                    vpath,
                    "",
                    "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
                )
            )
        elif count > 1:
            errors.append(invalid(vpath, "", "may not have more than one field specified at a time"))
        elif env.value:
            errors.append(invalid(vpath, "", "may not be specified when `value` is not empty"))


def _validate_mounts(mounts: Sequence[VolumeMount], path: str, volumes: set[str], errors: list[FieldError]) -> None:
    seen: set[str] = set()
    for j, mount in enumerate(mounts):
        mpath = f"{path}.volumeMounts[{j}]"
        if not mount.name:
            errors.append(required(f"{mpath}.name"))
        elif mount.name not in volumes:
            errors.append(not_found(f"{mpath}.name", mount.name))
        target = mount.mount_path
        if not target:
            errors.append(required(f"{mpath}.mountPath"))
        elif not target.startswith("/"):
            # The API server does not check this (the runtime fails later);
            # edgelet rejects it up front.
            errors.append(invalid(f"{mpath}.mountPath", target, "must be an absolute path"))
        elif target in seen:
            errors.append(invalid(f"{mpath}.mountPath", target, "must be unique"))
        seen.add(target)
        # The API server names `volumeMounts.subPath` without the index (a bug
        # there); edgelet points at the mount.
        if mount.sub_path:
            errors.extend(_local_descending_path_errors(f"{mpath}.subPath", mount.sub_path))
        if mount.sub_path_expr:
            if mount.sub_path:
                errors.append(
                    invalid(
                        f"{mpath}.subPathExpr", mount.sub_path_expr, "subPathExpr and subPath are mutually exclusive"
                    )
                )
            errors.extend(_local_descending_path_errors(f"{mpath}.subPathExpr", mount.sub_path_expr))


def _validate_security_context(ctx: SecurityContext, path: str, errors: list[FieldError]) -> None:
    for field, value in (("runAsUser", ctx.run_as_user), ("runAsGroup", ctx.run_as_group)):
        _id_in_range(f"{path}.{field}", value, errors)
    if ctx.proc_mount is not None and ctx.proc_mount not in ("Default", "Unmasked"):
        errors.append(not_supported(f"{path}.procMount", ctx.proc_mount, ("Default", "Unmasked")))
    _validate_profiles(ctx, path, errors)
    if ctx.privileged and ctx.allow_privilege_escalation is False:
        errors.append(
            forbidden(
                f"{path}.allowPrivilegeEscalation",
                "cannot set `allowPrivilegeEscalation` to false and `privileged` to true",
            )
        )


# ---------------------------------------------------------------------------
# Resources.


def _quantity_value(quantity: Any, path: str, errors: list[FieldError]) -> Fraction | None:
    """The quantity's value, or None after recording why it is not a valid non-negative quantity."""
    try:
        value = parse_quantity(quantity)
    except QuantityError:
        errors.append(invalid(path, _quantity_text(quantity), _QUANTITY_MESSAGE))
        return None
    if value < 0:
        errors.append(invalid(path, _quantity_text(quantity), _NEGATIVE))
        return None
    return value


def _quantity_text(quantity: Any) -> str:
    return quantity if isinstance(quantity, str) else str(quantity)


def _is_native_resource(name: str) -> bool:
    return "/" not in name or "kubernetes.io/" in name


def _validate_resource_name(name: str, path: str, errors: list[FieldError], *, pod_level: bool = False) -> bool:
    messages = qualified_name_errors(name)
    errors.extend(invalid(path, name, m) for m in messages)
    if messages:
        return False
    standard = _STANDARD_POD_RESOURCES if pod_level else _STANDARD_CONTAINER_RESOURCES
    if "/" not in name and name not in standard and not name.startswith(_HUGEPAGES_PREFIX):
        errors.append(invalid(path, name, f"must be a standard resource for {'pods' if pod_level else 'containers'}"))
        return False
    if name == "pids" and path.endswith("]") and ".requests[" in path:
        errors.append(invalid(path, name, "pids can only be limited, not requested"))
        return False
    return True


def _validate_resources(
    resources: ResourceRequirements, path: str, errors: list[FieldError], *, pod_level: bool = False
) -> None:
    raw_limits = resources.limits or {}
    limits: dict[str, Fraction] = {}
    shown: dict[str, str] = {}
    for name, quantity in sorted(raw_limits.items()):
        qpath = f"{path}.limits[{name}]"
        if not _validate_resource_name(name, qpath, errors, pod_level=pod_level):
            continue
        value = _quantity_value(quantity, qpath, errors)
        if value is not None:
            limits[name] = value
            shown[name] = _quantity_text(quantity)
    for name, quantity in sorted((resources.requests or {}).items()):
        qpath = f"{path}.requests[{name}]"
        if name in raw_limits and name not in limits and quantity == raw_limits[name]:
            # Defaulting copied this bad limit into requests: its error is already reported.
            continue
        if not _validate_resource_name(name, qpath, errors, pod_level=pod_level):
            continue
        value = _quantity_value(quantity, qpath, errors)
        if value is None or name not in limits:
            continue
        overcommit = _is_native_resource(name) and not name.startswith(_HUGEPAGES_PREFIX)
        text = _quantity_text(quantity)
        if not overcommit and value != limits[name]:
            errors.append(invalid(f"{path}.requests", text, f"must be equal to {name} limit of {shown[name]}"))
        elif value > limits[name]:
            errors.append(
                invalid(f"{path}.requests", text, f"must be less than or equal to {name} limit of {shown[name]}")
            )


# ---------------------------------------------------------------------------
# Probes and lifecycle hooks.


def _validate_probe(probe: Probe, path: str, kind: str, port_names: set[str], errors: list[FieldError]) -> None:
    _validate_handler(probe, _PROBE_ACTIONS, path, port_names, None, errors)
    if probe.initial_delay_seconds is not None and probe.initial_delay_seconds < 0:
        errors.append(invalid(f"{path}.initialDelaySeconds", probe.initial_delay_seconds, _NEGATIVE))
    # The API server defaults a zero here (Go's unset value) and only rejects
    # negatives; apply_defaults keeps an explicit 0, which would make a busy
    # probe loop, so edgelet deliberately rejects 0 too.
    for field, value in (
        ("timeoutSeconds", probe.timeout_seconds),
        ("periodSeconds", probe.period_seconds),
        ("successThreshold", probe.success_threshold),
        ("failureThreshold", probe.failure_threshold),
    ):
        if value is not None and value < 1:
            errors.append(invalid(f"{path}.{field}", value, _NEGATIVE if value < 0 else _NOT_POSITIVE))
    success = probe.success_threshold
    if kind in ("livenessProbe", "startupProbe") and success is not None and success > 1:
        errors.append(invalid(f"{path}.successThreshold", success, "must be 1"))
    grace = probe.termination_grace_period_seconds
    if grace is not None:
        if kind == "readinessProbe":
            errors.append(
                invalid(f"{path}.terminationGracePeriodSeconds", grace, "must not be set for readinessProbes")
            )
        elif grace <= 0:
            errors.append(invalid(f"{path}.terminationGracePeriodSeconds", grace, "must be greater than 0"))


def _validate_lifecycle(
    lifecycle: Lifecycle, path: str, port_names: set[str], grace: int | None, errors: list[FieldError]
) -> None:
    for field, handler in (("postStart", lifecycle.post_start), ("preStop", lifecycle.pre_stop)):
        if handler is not None:
            _validate_handler(handler, _LIFECYCLE_ACTIONS, f"{path}.{field}", port_names, grace, errors)


def _validate_handler(
    handler: Any,
    actions: tuple[tuple[str, str], ...],
    path: str,
    port_names: set[str],
    grace: int | None,
    errors: list[FieldError],
) -> None:
    """Exactly one action, and that action valid (validateHandler)."""
    count = 0
    for attr, json_name in actions:
        action = getattr(handler, attr)
        if action is None:
            continue
        apath = f"{path}.{json_name}"
        if count:
            errors.append(forbidden(apath, "may not specify more than 1 handler type"))
            continue
        count += 1
        if attr == "exec":
            if not action.command:
                errors.append(required(f"{apath}.command"))
        elif attr == "http_get":
            _validate_http_get(action, apath, port_names, errors)
        elif attr == "tcp_socket":
            _validate_port_ref(action.port, f"{apath}.port", port_names, errors)
        elif attr == "grpc":
            errors.extend(invalid(f"{apath}.port", action.port, m) for m in port_number_errors(action.port))
        elif attr == "sleep" and grace is not None and grace >= 0 and not 0 <= action.seconds <= grace:
            errors.append(
                invalid(
                    apath,
                    action.seconds,
                    f"must be non-negative and less than terminationGracePeriodSeconds ({grace})",
                )
            )
    if count == 0:
        errors.append(required(path, "must specify a handler type"))


def _validate_http_get(action: HTTPGetAction, path: str, port_names: set[str], errors: list[FieldError]) -> None:
    if action.path is not None and action.path == "":
        errors.append(required(f"{path}.path"))
    _validate_port_ref(action.port, f"{path}.port", port_names, errors)
    if action.scheme is not None and action.scheme not in HTTP_SCHEMES:
        errors.append(not_supported(f"{path}.scheme", action.scheme, HTTP_SCHEMES))
    for header in action.http_headers or []:
        if not _HTTP_HEADER_NAME.match(header.name):
            errors.append(
                invalid(f"{path}.httpHeaders", header.name, regex_error(_HTTP_HEADER_MSG, "[-A-Za-z0-9]+", "X-Header"))
            )


def _validate_port_ref(port: int | str, path: str, port_names: set[str], errors: list[FieldError]) -> None:
    if isinstance(port, int):
        errors.extend(invalid(path, port, m) for m in port_number_errors(port))
        return
    messages = port_name_errors(port)
    errors.extend(invalid(path, port, m) for m in messages)
    if not messages and port not in port_names:
        # The API server accepts any well-formed name and the probe then fails
        # at run time; edgelet reports the typo up front.
        errors.append(invalid(path, port, "must be the name of a port declared in this container's ports"))
