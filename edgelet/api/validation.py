"""Basic validation of a (defaulted) Pod: the subset of ValidatePodCreate edgelet relies on."""

from __future__ import annotations

import re

from edgelet.api.errors import FieldError
from edgelet.api.types import Container, Pod, Volume

__all__ = ["FieldError", "validate_pod", "is_dns1123_label", "is_dns1123_subdomain"]

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_IANA_SVC_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
_VOLUME_SOURCES = tuple(f for f in Volume.__struct_fields__ if f != "name")

RESTART_POLICIES = ("Always", "OnFailure", "Never")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
DNS_POLICIES = ("ClusterFirst", "ClusterFirstWithHostNet", "Default", "None")
PROTOCOLS = ("TCP", "UDP", "SCTP")


def is_dns1123_label(value: str) -> bool:
    return len(value) <= 63 and _DNS1123_LABEL.match(value) is not None


def is_dns1123_subdomain(value: str) -> bool:
    return len(value) <= 253 and _DNS1123_SUBDOMAIN.match(value) is not None


def validate_pod(pod: Pod) -> list[FieldError]:
    """Every problem found, in field order; an empty list means the pod is valid."""
    errors: list[FieldError] = []
    meta = pod.metadata
    name = meta.name if meta is not None else None
    if not name:
        errors.append(FieldError("$.metadata.name", "name is needed for the pod"))
    elif not is_dns1123_subdomain(name):
        errors.append(FieldError("$.metadata.name", f"{name!r} is not a DNS-1123 subdomain"))
    namespace = meta.namespace if meta is not None else None
    if namespace and not is_dns1123_label(namespace):
        errors.append(FieldError("$.metadata.namespace", f"{namespace!r} is not a DNS-1123 label"))

    spec = pod.spec
    if spec is None:
        errors.append(FieldError("$.spec", "required"))
        return errors
    if spec.restart_policy is not None and spec.restart_policy not in RESTART_POLICIES:
        errors.append(_not_in("$.spec.restartPolicy", spec.restart_policy, RESTART_POLICIES))
    if spec.dns_policy is not None and spec.dns_policy not in DNS_POLICIES:
        errors.append(_not_in("$.spec.dnsPolicy", spec.dns_policy, DNS_POLICIES))
    grace = spec.termination_grace_period_seconds
    if grace is not None and grace < 0:
        errors.append(FieldError("$.spec.terminationGracePeriodSeconds", "must be >= 0"))

    volumes = _validate_volumes(spec.volumes or [], errors)
    if not spec.containers:
        errors.append(FieldError("$.spec.containers", "must have at least one container"))
    names: set[str] = set()
    groups = (("initContainers", spec.init_containers or []), ("containers", spec.containers or []))
    for field, containers in groups:
        for i, container in enumerate(containers):
            path = f"$.spec.{field}[{i}]"
            if container.name in names:
                errors.append(FieldError(f"{path}.name", f"duplicate container name {container.name!r}"))
            names.add(container.name)
            _validate_container(
                container,
                path,
                init=field == "initContainers",
                host_network=bool(spec.host_network),
                volumes=volumes,
                errors=errors,
            )
    return errors


def _validate_volumes(volumes: list[Volume], errors: list[FieldError]) -> set[str]:
    names: set[str] = set()
    for i, volume in enumerate(volumes):
        path = f"$.spec.volumes[{i}]"
        if not is_dns1123_label(volume.name):
            errors.append(FieldError(f"{path}.name", f"{volume.name!r} is not a DNS-1123 label"))
        elif volume.name in names:
            errors.append(FieldError(f"{path}.name", f"duplicate volume name {volume.name!r}"))
        names.add(volume.name)
        sources = [f for f in _VOLUME_SOURCES if getattr(volume, f) is not None]
        if len(sources) > 1:
            errors.append(FieldError(path, "may not specify more than 1 volume type"))
    return names


def _validate_container(
    container: Container,
    path: str,
    *,
    init: bool,
    host_network: bool,
    volumes: set[str],
    errors: list[FieldError],
) -> None:
    if not is_dns1123_label(container.name):
        errors.append(FieldError(f"{path}.name", f"{container.name!r} is not a DNS-1123 label"))
    if not (container.image or "").strip():
        errors.append(FieldError(f"{path}.image", "required"))
    policy = container.image_pull_policy
    if policy is not None and policy not in PULL_POLICIES:
        errors.append(_not_in(f"{path}.imagePullPolicy", policy, PULL_POLICIES))
    restart = container.restart_policy
    # Only sidecars (init containers with restartPolicy Always) may set it.
    if restart is not None and not (init and restart == "Always"):
        allowed = "only Always, and only for init containers" if init else "not allowed for regular containers"
        errors.append(FieldError(f"{path}.restartPolicy", f"{restart!r}: {allowed}"))

    port_names: set[str] = set()
    for j, port in enumerate(container.ports or []):
        ppath = f"{path}.ports[{j}]"
        if not 1 <= port.container_port <= 65535:
            errors.append(FieldError(f"{ppath}.containerPort", f"{port.container_port} is not in 1-65535"))
        if port.host_port is not None and not 0 <= port.host_port <= 65535:
            errors.append(FieldError(f"{ppath}.hostPort", f"{port.host_port} is not in 1-65535"))
        elif host_network and port.host_port and port.host_port != port.container_port:
            errors.append(FieldError(f"{ppath}.hostPort", "must match containerPort when hostNetwork is true"))
        if port.protocol is not None and port.protocol not in PROTOCOLS:
            errors.append(_not_in(f"{ppath}.protocol", port.protocol, PROTOCOLS))
        if port.name is not None:
            if len(port.name) > 15 or not _IANA_SVC_NAME.match(port.name) or "--" in port.name:
                errors.append(FieldError(f"{ppath}.name", f"{port.name!r} is not a valid port name"))
            elif port.name in port_names:
                errors.append(FieldError(f"{ppath}.name", f"duplicate port name {port.name!r}"))
            port_names.add(port.name)

    for j, env in enumerate(container.env or []):
        if not env.name:
            errors.append(FieldError(f"{path}.env[{j}].name", "required"))

    mount_paths: set[str] = set()
    for j, mount in enumerate(container.volume_mounts or []):
        mpath = f"{path}.volumeMounts[{j}]"
        if mount.name not in volumes:
            errors.append(FieldError(f"{mpath}.name", f"volume {mount.name!r} is not declared in spec.volumes"))
        if not mount.mount_path.startswith("/"):
            errors.append(FieldError(f"{mpath}.mountPath", f"{mount.mount_path!r} must be an absolute path"))
        elif mount.mount_path in mount_paths:
            errors.append(FieldError(f"{mpath}.mountPath", f"{mount.mount_path!r} is already mounted"))
        mount_paths.add(mount.mount_path)


def _not_in(path: str, value: str, allowed: tuple[str, ...]) -> FieldError:
    return FieldError(path, f"unsupported value {value!r}, expected one of {', '.join(allowed)}")
