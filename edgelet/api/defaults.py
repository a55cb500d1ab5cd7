"""core/v1 defaulting of a decoded Pod (what the API server's SetDefaults_* would fill in)."""

from __future__ import annotations

import msgspec

from edgelet.api.types import (
    Container,
    EmptyDirVolumeSource,
    HTTPGetAction,
    Pod,
    PodSecurityContext,
    Probe,
    Volume,
)

__all__ = ["apply_defaults", "copy_pod", "default_image_pull_policy", "image_tag"]

DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS = 30
DEFAULT_SCHEDULER_NAME = "default-scheduler"
DEFAULT_TERMINATION_MESSAGE_PATH = "/dev/termination-log"

_VOLUME_SOURCES = tuple(f for f in Volume.__struct_fields__ if f != "name")


def copy_pod(pod: Pod) -> Pod:
    """A deep copy; Structs are mutable and callers' pods must stay untouched."""
    return msgspec.json.decode(msgspec.json.encode(pod), type=Pod)


def image_tag(image: str) -> tuple[str | None, str | None]:
    """(tag, digest) of an image reference; a `:` before the last `/` is a registry port."""
    name, _, digest = image.partition("@")
    last = name.rsplit("/", 1)[-1]
    tag = last.rsplit(":", 1)[1] if ":" in last else None
    return tag, digest or None


def default_image_pull_policy(image: str) -> str:
    """Always for `:latest` or a bare name, else IfNotPresent (a digest counts as a tag)."""
    tag, digest = image_tag(image)
    if tag == "latest" or (tag is None and digest is None):
        return "Always"
    return "IfNotPresent"


def apply_defaults(pod: Pod) -> Pod:
    """Return a copy of `pod` with core/v1 defaults set; explicit values are kept."""
    pod = copy_pod(pod)
    spec = pod.spec
    if spec is None:
        return pod
    if spec.restart_policy is None:
        spec.restart_policy = "Always"
    if spec.dns_policy is None:
        spec.dns_policy = "ClusterFirst"
    if spec.termination_grace_period_seconds is None:
        spec.termination_grace_period_seconds = DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS
    if spec.scheduler_name is None:
        spec.scheduler_name = DEFAULT_SCHEDULER_NAME
    if spec.enable_service_links is None:
        spec.enable_service_links = True
    if spec.security_context is None:
        spec.security_context = PodSecurityContext()
    for container in (spec.init_containers or []) + (spec.containers or []):
        _default_container(container, host_network=bool(spec.host_network))
    for volume in spec.volumes or []:
        if all(getattr(volume, f) is None for f in _VOLUME_SOURCES):
            volume.empty_dir = EmptyDirVolumeSource()
    return pod


def _default_container(container: Container, *, host_network: bool) -> None:
    if container.image_pull_policy is None:
        container.image_pull_policy = default_image_pull_policy(container.image or "")
    if container.termination_message_path is None:
        container.termination_message_path = DEFAULT_TERMINATION_MESSAGE_PATH
    if container.termination_message_policy is None:
        container.termination_message_policy = "File"
    for port in container.ports or []:
        if port.protocol is None:
            port.protocol = "TCP"
        # SetDefaults_PodSpec: with hostNetwork the container port is the host port.
        if host_network and not port.host_port:
            port.host_port = port.container_port
    for env in container.env or []:
        field_ref = env.value_from.field_ref if env.value_from is not None else None
        if field_ref is not None and field_ref.api_version is None:
            field_ref.api_version = "v1"
    # Requests default to limits (SetDefaults_Pod), which QoS and cgroup sizing rely on.
    resources = container.resources
    if resources is not None and resources.limits:
        requests = dict(resources.requests or {})
        for name, quantity in resources.limits.items():
            requests.setdefault(name, quantity)
        resources.requests = requests
    for probe in (container.liveness_probe, container.readiness_probe, container.startup_probe):
        if probe is not None:
            _default_probe(probe)
    if container.lifecycle is not None:
        for handler in (container.lifecycle.post_start, container.lifecycle.pre_stop):
            if handler is not None and handler.http_get is not None:
                _default_http_get(handler.http_get)


def _default_probe(probe: Probe) -> None:
    if probe.timeout_seconds is None:
        probe.timeout_seconds = 1
    if probe.period_seconds is None:
        probe.period_seconds = 10
    if probe.success_threshold is None:
        probe.success_threshold = 1
    if probe.failure_threshold is None:
        probe.failure_threshold = 3
    if probe.http_get is not None:
        _default_http_get(probe.http_get)


def _default_http_get(action: HTTPGetAction) -> None:
    if not action.path:
        action.path = "/"
    if action.scheme is None:
        action.scheme = "HTTP"
