"""Tests of the generated Kubernetes types and their generator."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import msgspec
import pytest

from edgelet.api import types

REPO = Path(__file__).resolve().parents[2]


def _load_generator():
    spec = importlib.util.spec_from_file_location("gen_k8s_types", REPO / "tools" / "gen_k8s_types.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _load_generator()


@pytest.fixture
def spec_paths(specs_dir: Path) -> tuple[Path, Path]:
    core = specs_dir / "kubernetes" / "api__v1_openapi.json"
    coord = specs_dir / "kubernetes" / "apis__coordination.k8s.io__v1_openapi.json"
    if not core.is_file() or not coord.is_file():
        pytest.skip(f"Kubernetes OpenAPI documents not found under {specs_dir}")
    return core, coord


def test_regenerating_gives_identical_output(spec_paths: tuple[Path, Path]) -> None:
    generated = gen.generate(*spec_paths)
    committed = (REPO / "edgelet" / "api" / "types.py").read_text(encoding="utf-8")
    assert generated == committed, "edgelet/api/types.py is stale: run python tools/gen_k8s_types.py"


@pytest.mark.parametrize(
    ("json_name", "attr"),
    [
        ("hostIP", "host_ip"),
        ("hostIPs", "host_ips"),
        ("podIPs", "pod_ips"),
        ("podCIDRs", "pod_cidrs"),
        ("hostPID", "host_pid"),
        ("hostIPC", "host_ipc"),
        ("apiVersion", "api_version"),
        ("imagePullPolicy", "image_pull_policy"),
        ("terminationGracePeriodSeconds", "termination_grace_period_seconds"),
        ("runAsUser", "run_as_user"),
        ("containerID", "container_id"),
        ("systemUUID", "system_uuid"),
        ("setHostnameAsFQDN", "set_hostname_as_fqdn"),
        ("seLinuxOptions", "se_linux_options"),
        ("fieldsV1", "fields_v1"),
        ("targetWWNs", "target_wwns"),
        ("diskURI", "disk_uri"),
        ("name", "name"),
        ("continue", "continue_"),
        ("type", "type"),
        ("int", "int_"),
    ],
)
def test_snake_case(json_name: str, attr: str) -> None:
    assert gen.snake_case(json_name) == attr


def test_class_name_collisions_are_resolved_deterministically() -> None:
    names = ["io.k8s.api.coordination.v1.Thing", "io.k8s.api.core.v1.Thing", "io.k8s.api.core.v1.Pod"]
    assert gen.class_names(names) == {
        "io.k8s.api.core.v1.Thing": "Thing",
        "io.k8s.api.coordination.v1.Thing": "CoordinationV1Thing",
        "io.k8s.api.core.v1.Pod": "Pod",
    }
    assert gen.class_names(reversed(names)) == gen.class_names(names)


def test_structs_encode_exactly_the_openapi_property_names(spec_paths: tuple[Path, Path]) -> None:
    schemas = gen.load_schemas(spec_paths)
    g = gen.Generator(schemas, gen.ROOTS)
    assert {"Pod", "PodList", "Node", "Lease", "Container", "ObjectMeta"} <= set(g.classes.values())
    for full, cls_name in g.classes.items():
        cls = getattr(types, cls_name)
        assert set(cls.__struct_encode_fields__) == set(schemas[full]["properties"]), cls_name
        required = set(schemas[full].get("required", ()))
        fields = msgspec.structs.fields(cls)
        assert {f.encode_name for f in fields if f.required} == required, cls_name


def test_contract_attribute_names() -> None:
    pod = types.Pod(
        api_version="v1",
        kind="Pod",
        metadata=types.ObjectMeta(name="p", namespace="default", uid="u"),
        spec=types.PodSpec(
            host_network=True,
            host_pid=False,
            termination_grace_period_seconds=5,
            security_context=types.PodSecurityContext(run_as_user=1000),
            containers=[
                types.Container(
                    name="c",
                    image="busybox",
                    image_pull_policy="IfNotPresent",
                    ports=[types.ContainerPort(container_port=80, host_ip="0.0.0.0")],
                    env=[types.EnvVar(name="A", value="1")],
                    resources=types.ResourceRequirements(limits={"cpu": 1, "memory": "64Mi"}),
                )
            ],
        ),
        status=types.PodStatus(pod_ips=[types.PodIP(ip="10.0.0.1")], host_ip="192.0.2.1"),
    )
    encoded = json.loads(msgspec.json.encode(pod))
    assert encoded["spec"]["hostNetwork"] is True
    assert encoded["spec"]["securityContext"] == {"runAsUser": 1000}
    assert encoded["spec"]["containers"][0]["ports"] == [{"containerPort": 80, "hostIP": "0.0.0.0"}]
    assert encoded["status"] == {"hostIP": "192.0.2.1", "podIPs": [{"ip": "10.0.0.1"}]}


def test_decoded_pod_round_trips_its_json_names() -> None:
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web",
            "labels": {"app": "web"},
            "annotations": {"a": "b"},
            "creationTimestamp": "2024-01-01T00:00:00Z",
        },
        "spec": {
            "hostNetwork": True,
            "hostPID": True,
            "hostIPC": False,
            "dnsPolicy": "ClusterFirstWithHostNet",
            "terminationGracePeriodSeconds": 10,
            "initContainers": [{"name": "init", "image": "busybox", "restartPolicy": "Always"}],
            "containers": [
                {
                    "name": "app",
                    "image": "busybox:1.36",
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c"],
                    "args": ["sleep 1"],
                    "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                    "ports": [{"containerPort": 8080, "hostPort": 8080, "protocol": "UDP", "name": "p"}],
                    "resources": {"limits": {"cpu": "500m", "memory": 1048576}, "requests": {"cpu": 0.1}},
                    "livenessProbe": {"httpGet": {"port": "http", "path": "/h"}, "periodSeconds": 3},
                    "securityContext": {
                        "runAsUser": 0,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"add": ["NET_ADMIN"]},
                    },
                    "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}],
                }
            ],
            "volumes": [{"name": "data", "hostPath": {"path": "/srv", "type": "DirectoryOrCreate"}}],
        },
        "status": {"phase": "Running", "podIPs": [{"ip": "10.1.1.1"}], "hostIP": "10.0.0.1"},
    }
    raw = json.dumps(manifest).encode()
    pod = msgspec.json.decode(raw, type=types.Pod)
    assert json.loads(msgspec.json.encode(pod)) == manifest


def test_unknown_fields_are_ignored() -> None:
    pod = msgspec.json.decode(b'{"metadata": {"name": "x", "futureField": 1}, "extra": true}', type=types.Pod)
    assert pod.metadata == types.ObjectMeta(name="x")


@pytest.mark.parametrize(
    ("value", "ok"),
    [(1, True), ("100m", True), (0.5, True), (True, False), (None, False)],
)
def test_quantities_accept_numbers(value: object, ok: bool) -> None:
    doc = {"limits": {"cpu": value}}
    if ok:
        assert msgspec.convert(doc, types.ResourceRequirements).limits == {"cpu": value}
    else:
        with pytest.raises(msgspec.ValidationError):
            msgspec.convert(doc, types.ResourceRequirements)


def test_null_creation_timestamp_is_accepted() -> None:
    meta = msgspec.json.decode(b'{"name": "x", "creationTimestamp": null}', type=types.ObjectMeta)
    assert meta.creation_timestamp is None
