"""Tests of container_hash and pod_full_name."""

from __future__ import annotations

import pytest

from edgelet.api.hash import container_hash, fnv32a, pod_full_name
from edgelet.api.types import Container, ContainerPort, EnvVar, ObjectMeta, Pod


@pytest.mark.parametrize(
    ("data", "expected"),
    [(b"", 0x811C9DC5), (b"a", 0xE40C292C), (b"foobar", 0xBF9CF968)],
)
def test_fnv32a_reference_vectors(data: bytes, expected: int) -> None:
    assert fnv32a(data) == expected


def test_container_hash_is_stable_and_short() -> None:
    a = Container(name="app", image="nginx", env=[EnvVar(name="A", value="1")])
    b = Container(image="nginx", env=[EnvVar(value="1", name="A")], name="app")
    assert container_hash(a) == container_hash(b)
    assert len(container_hash(a)) == 8
    int(container_hash(a), 16)


@pytest.mark.parametrize(
    "other",
    [
        Container(name="app", image="nginx:1"),
        Container(name="app", image="nginx", command=["sh"]),
        Container(name="app", image="nginx", ports=[ContainerPort(container_port=80)]),
        Container(name="other", image="nginx"),
    ],
)
def test_container_hash_changes_with_the_spec(other: Container) -> None:
    assert container_hash(Container(name="app", image="nginx")) != container_hash(other)


@pytest.mark.parametrize(
    ("meta", "expected"),
    [
        (ObjectMeta(name="web-edge", namespace="kube-system"), "kube-system/web-edge"),
        (ObjectMeta(name="web"), "default/web"),
        (None, "default/"),
    ],
)
def test_pod_full_name(meta: ObjectMeta | None, expected: str) -> None:
    assert pod_full_name(Pod(metadata=meta)) == expected
