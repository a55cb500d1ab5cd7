"""Direct tests of validate_pod and the DNS name predicates."""

from __future__ import annotations

import pytest

from edgelet.api.errors import FieldError
from edgelet.api.types import Container, ContainerPort, ObjectMeta, Pod, PodSpec, Volume, VolumeMount
from edgelet.api.validation import is_dns1123_label, is_dns1123_subdomain, validate_pod


def pod(**spec: object) -> Pod:
    fields: dict[str, object] = {"containers": [Container(name="app", image="busybox")]}
    fields.update(spec)
    return Pod(metadata=ObjectMeta(name="web-node", namespace="default"), spec=PodSpec(**fields))  # type: ignore[arg-type]


def test_valid_pod_has_no_errors() -> None:
    assert validate_pod(pod()) == []
    assert validate_pod(pod(
        host_network=True,
        volumes=[Volume(name="data")],
        containers=[Container(
            name="app", image="busybox",
            ports=[ContainerPort(container_port=80, host_port=80, name="http")],
            volume_mounts=[VolumeMount(name="data", mount_path="/data")],
        )],
    )) == []


@pytest.mark.parametrize(
    ("target", "errors"),
    [
        (pod(host_network=True, containers=[Container(name="a", image="x", ports=[
            ContainerPort(container_port=80, host_port=81)])]),
         [FieldError("$.spec.containers[0].ports[0].hostPort", "must match containerPort when hostNetwork is true")]),
        (pod(containers=[Container(name="a", image="x", ports=[
            ContainerPort(container_port=80, name="web"), ContainerPort(container_port=81, name="web")])]),
         [FieldError("$.spec.containers[0].ports[1].name", "duplicate port name 'web'")]),
        (pod(volumes=[Volume(name="Data")]),
         [FieldError("$.spec.volumes[0].name", "'Data' is not a DNS-1123 label")]),
        (pod(termination_grace_period_seconds=-1),
         [FieldError("$.spec.terminationGracePeriodSeconds", "must be >= 0")]),
        (Pod(metadata=ObjectMeta(name="Bad_Name"), spec=PodSpec(containers=[Container(name="a", image="x")])),
         [FieldError("$.metadata.name", "'Bad_Name' is not a DNS-1123 subdomain")]),
    ],
)
def test_errors(target: Pod, errors: list[FieldError]) -> None:
    assert validate_pod(target) == errors


@pytest.mark.parametrize(
    ("value", "label", "subdomain"),
    [("web", True, True), ("web-1.edge", False, True), ("-web", False, False), ("a" * 64, False, True),
     ("Web", False, False), ("", False, False)],
)
def test_dns_names(value: str, label: bool, subdomain: bool) -> None:
    assert is_dns1123_label(value) is label
    assert is_dns1123_subdomain(value) is subdomain
