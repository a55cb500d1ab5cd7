"""Fuzzing the manifest path: decode -> static-pod admission (defaults, validation) -> build_oci_spec.

Inputs are pods generated from the Kubernetes OpenAPI schema (a valid
skeleton with schema-generated parts laid over it) and byte-level mutations
of real manifests. The properties: only edgelet's own errors come out (an
`ApiError` naming the field, or a `SpecError` for what a spec cannot
express), never a crash; and every accepted pod's config.json validates
against the OCI runtime-spec schema. The suite runs a bounded number of
examples; `make fuzz` runs EDGELET_FUZZ_EXAMPLES (10,000) of each.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import yaml
from hypothesis import HealthCheck, given, settings

from edgelet.api.decode import parse_manifests
from edgelet.api.errors import ApiError
from edgelet.api.static import make_static_pod
from edgelet.images.types import ImageConfig
from edgelet.ocispec.build import ContainerContext, SandboxContext, build_container_spec, build_sandbox_spec
from edgelet.ocispec.errors import SpecError
from edgelet.testing.ocischema import runtime_schema_dir, validate_runtime_config

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = int(os.environ.get("EDGELET_FUZZ_EXAMPLES", "150"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
SEEDS = sorted((REPO / "manifests.d").glob("*.yaml"))
IMAGE = ImageConfig(entrypoint=("/bin/app",), cmd=("--serve",), env=("PATH=/bin",), working_dir="/srv")
CTX = ContainerContext(
    rootfs="/r/rootfs",
    cgroups_path="/kubepods/pod1/c1",
    namespace_paths={
        "network": "/proc/1/ns/net",
        "ipc": "/proc/1/ns/ipc",
        "uts": "/proc/1/ns/uts",
        "pid": "/proc/1/ns/pid",
    },
    hostname="web",
    passwd={"root": (0, 0), "app": (1000, 1000)},
    groups={"root": 0, "app": 1000},
    memory_capacity=1 << 30,
)
SANDBOX = SandboxContext(rootfs="/pause", args=("/catatonit", "-P"), cgroups_path="/kubepods/pod1/s1", hostname="web")


def run_pipeline(data: bytes) -> int:
    """The agent's path for one manifest file; the number of pods accepted. Raises anything unexpected."""
    try:
        pods = parse_manifests(data, "fuzz.yaml")
    except ApiError:
        return 0
    accepted = 0
    for pod in pods:
        try:
            static = make_static_pod(pod, node_name="node1", source="file", origin="fuzz.yaml")
        except ApiError:
            continue
        try:
            validate_runtime_config(build_sandbox_spec(static, SANDBOX))
            for c in [*(static.spec.init_containers or []), *(static.spec.containers or [])]:
                validate_runtime_config(build_container_spec(static, c, IMAGE, CTX))
        except SpecError:
            continue  # CreateContainerConfigError at run time: a clear error, not a crash
        accepted += 1
    return accepted


# --- pods from the OpenAPI schema ---------------------------------------------------------------


@lru_cache(maxsize=1)
def _schemas() -> dict[str, Any]:
    spec = runtime_schema_dir().parent / "kubernetes" / "api__v1_openapi.json"
    return json.loads(spec.read_text())["components"]["schemas"]


QUANTITIES = st.sampled_from(["1", "100m", "0.5", "64Mi", "1Gi", "2", "0", "-1", "1e3", "abc", "1.5Gi", "7Ki"])
NAMES = st.from_regex(r"[a-z]([-a-z0-9]{0,8}[a-z0-9])?", fullmatch=True)


def _from_schema(name: str, depth: int) -> st.SearchStrategy[Any]:
    schema = _schemas()[name]
    return _from(schema, depth)


def _from(schema: dict[str, Any], depth: int) -> st.SearchStrategy[Any]:
    if "allOf" in schema:
        return _from(schema["allOf"][0], depth)
    ref = schema.get("$ref")
    if ref:
        target = ref.rsplit("/", 1)[-1]
        if target.endswith("resource.Quantity"):
            return QUANTITIES
        if target.endswith("util.intstr.IntOrString"):
            return st.one_of(st.integers(-2, 70000), st.sampled_from(["http", "80", "x", "25%"]))
        if depth <= 0:
            return st.just({})  # deep enough: an empty object
        return st.deferred(lambda: _from_schema(target, depth - 1))
    kind = schema.get("type")
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if kind == "string":
        return st.one_of(NAMES, st.text(max_size=12), st.sampled_from(["", "/", "..", "/tmp/x", "Always", "TCP"]))
    if kind == "integer":
        return st.integers(-(2**33), 2**33)
    if kind == "number":
        return st.floats(allow_nan=False, allow_infinity=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "array":
        return st.lists(_from(schema.get("items", {}), depth), max_size=2)
    if kind == "object" and "additionalProperties" in schema:
        return st.dictionaries(NAMES, _from(schema["additionalProperties"], depth), max_size=2)
    props = schema.get("properties")
    if props:
        chosen = {k: v for k, v in props.items() if k not in ("status", "managedFields", "ownerReferences")}
        return st.fixed_dictionaries({}, optional={k: _from(v, depth) for k, v in chosen.items()})
    return st.just({})


CONTAINER = "io.k8s.api.core.v1.Container"
SPEC_PARTS = [
    "securityContext",
    "volumes",
    "hostNetwork",
    "dnsPolicy",
    "restartPolicy",
    "hostAliases",
    "terminationGracePeriodSeconds",
    "priorityClassName",
    "resources",
    "initContainers",
]


@st.composite
def generated_pods(draw: st.DrawFn) -> dict[str, Any]:
    """A valid skeleton with a few schema-generated parts laid over it, so some are accepted."""
    container = {"name": draw(NAMES), "image": "busybox:1.36"}
    extra = draw(_from_schema(CONTAINER, 2))
    for key in draw(st.lists(st.sampled_from(sorted(extra) or ["name"]), max_size=3, unique=True)):
        if key in extra:
            container[key] = extra[key]
    spec: dict[str, Any] = {"containers": [container]}
    spec_schema = _schemas()["io.k8s.api.core.v1.PodSpec"]["properties"]
    for key in draw(st.lists(st.sampled_from(SPEC_PARTS), max_size=2, unique=True)):
        spec[key] = draw(_from(spec_schema[key], 2))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": draw(NAMES)}, "spec": spec}


@FUZZ
@given(generated_pods())
def test_generated_pods_give_only_edgelet_errors_and_valid_specs(pod: dict[str, Any]) -> None:
    run_pipeline(yaml.safe_dump(pod).encode())


# --- byte-level mutations of real manifests -------------------------------------------------------


@st.composite
def mutated_manifests(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)).read_bytes())
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["flip", "insert", "delete", "dup"]))
        if op == "flip" and at < len(data):
            data[at] = draw(st.integers(0, 255))
        elif op == "insert":
            data[at:at] = draw(
                st.sampled_from(
                    [
                        b"[",
                        b"{",
                        b"&a ",
                        b"*a",
                        b"<<: ",
                        b"- ",
                        b": ",
                        b"\n  ",
                        b"\t",
                        b"\x00",
                        b"'",
                        b'"',
                        b"!!python/object ",
                        b"---\n",
                        b"~",
                    ]
                )
            )
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 8))]
        elif op == "dup":
            data[at:at] = data[at : at + draw(st.integers(1, 40))]
    return bytes(data)


@FUZZ
@given(mutated_manifests())
def test_mutated_manifests_give_only_edgelet_errors_and_valid_specs(data: bytes) -> None:
    run_pipeline(data)


def test_the_seeds_themselves_are_accepted() -> None:
    assert SEEDS and all(run_pipeline(p.read_bytes()) > 0 for p in SEEDS)
