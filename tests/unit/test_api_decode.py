"""Tests of parse_manifests: formats, document kinds and error messages."""

from __future__ import annotations

import json
import textwrap

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from edgelet.api.decode import parse_manifests
from edgelet.api.errors import ApiError, ManifestDecodeError
from edgelet.api.types import Pod


def y(text: str) -> bytes:
    return textwrap.dedent(text).lstrip("\n").encode()


POD = y(
    """
    apiVersion: v1
    kind: Pod
    metadata:
      name: web
      creationTimestamp: 2024-01-02T03:04:05Z
      labels: {app: web}
    spec:
      containers:
      - name: app
        image: nginx:1.25
        ports:
        - containerPort: 80
        resources:
          limits: {cpu: 1, memory: 64Mi}
        livenessProbe:
          httpGet: {port: 80}
    """
)


def names(pods: list[Pod]) -> list[str]:
    return [p.metadata.name for p in pods if p.metadata is not None and p.metadata.name]


def test_single_yaml_pod() -> None:
    [pod] = parse_manifests(POD, "web.yaml")
    assert pod.metadata is not None and pod.spec is not None
    assert pod.metadata.name == "web"
    # Timestamps stay strings, as Kubernetes' decoder keeps them.
    assert pod.metadata.creation_timestamp == "2024-01-02T03:04:05Z"
    container = pod.spec.containers[0]
    assert container.resources is not None and container.resources.limits == {"cpu": 1, "memory": "64Mi"}
    assert container.liveness_probe is not None and container.liveness_probe.http_get is not None
    assert container.liveness_probe.http_get.port == 80


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param(b"", [], id="empty-file"),
        pytest.param(b"# only a comment\n", [], id="comment-only"),
        pytest.param(b"---\n---\n", [], id="empty-documents"),
        pytest.param(POD, ["web"], id="yaml"),
        pytest.param(
            b"---\n" + POD + b"---\n\n---\n" + POD.replace(b"name: web", b"name: two"),
            ["web", "two"],
            id="multi-document",
        ),
        pytest.param(
            b"{apiVersion: v1, kind: Pod, metadata: {name: flow}, spec: {containers: [{name: c, image: x}]}}",
            ["flow"],
            id="flow-style",
        ),
        pytest.param(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "j"},
                    "spec": {"containers": [{"name": "c", "image": "x"}]},
                }
            ).encode(),
            ["j"],
            id="json",
        ),
        pytest.param(
            b"\xef\xbb\xbf"
            + json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "bom"},
                    "spec": {"containers": [{"name": "c"}]},
                }
            ).encode(),
            ["bom"],
            id="json-with-bom",
        ),
        pytest.param(
            y("""
            apiVersion: v1
            kind: PodList
            items:
            - metadata: {name: a}
              spec: {containers: [{name: c, image: x}]}
            - {apiVersion: v1, kind: Pod, metadata: {name: b}, spec: {containers: [{name: c, image: x}]}}
            """),
            ["a", "b"],
            id="podlist",
        ),
        pytest.param(
            y("""
            apiVersion: v1
            kind: List
            items:
            - {apiVersion: v1, kind: Pod, metadata: {name: a}, spec: {containers: [{name: c, image: x}]}}
            """),
            ["a"],
            id="v1-list",
        ),
        pytest.param(b"apiVersion: v1\nkind: List\nitems: []\n", [], id="empty-list"),
        pytest.param(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: web, labels: {ключ: 値}}\n"
            "spec: {containers: [{name: c, image: x, env: [{name: E, value: 'héllo ✓'}]}]}\n".encode(),
            ["web"],
            id="unicode",
        ),
    ],
)
def test_accepted_inputs(data: bytes, expected: list[str]) -> None:
    assert names(parse_manifests(data, "m.yaml")) == expected


def bad_port(value: str) -> bytes:
    return POD.replace(b"containerPort: 80", b"containerPort: " + value.encode())


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param(
            bad_port("'80'"),
            "$.spec.containers[0].ports[0].containerPort: expected int, got str",
            id="wrong-type",
        ),
        pytest.param(
            bad_port("99999999999999999999999"),
            "$.spec.containers[0].ports[0].containerPort: integer 99999999999999999999999 out of range",
            id="huge-int",
        ),
        pytest.param(
            POD.replace(b"- name: app\n    image", b"- image"),
            "$.spec.containers[0]: missing required field name",
            id="missing-required",
        ),
        pytest.param(
            POD.replace(b"labels: {app: web}", b"labels: {1: web}"),
            "$.metadata.labels: keys must be strings, got int 1",
            id="non-string-key",
        ),
        pytest.param(
            POD.replace(b"labels: {app: web}", b"labels: {app: 1}"),
            "$.metadata.labels[...]: expected str, got int",
            id="int-label-value",
        ),
        pytest.param(
            POD.replace(b"kind: Pod", b"kind: Service"),
            "$.kind: unsupported kind Service (expected Pod, ConfigMap, Secret, PodList or List)",
            id="other-kind",
        ),
        pytest.param(
            POD.replace(b"kind: Pod\n", b""),
            "$: missing required field kind",
            id="no-kind",
        ),
        pytest.param(
            POD.replace(b"apiVersion: v1", b"apiVersion: apps/v1"),
            "$.apiVersion: expected v1 for kind Pod, got apps/v1",
            id="wrong-api-version",
        ),
        pytest.param(b"- a\n- b\n", "$: expected object, got list", id="not-an-object"),
        pytest.param(b"[1, 2]", "$: expected object, got list", id="json-array"),
        pytest.param(
            POD + b"---\n" + bad_port("x"),
            "document 1: $.spec.containers[0].ports[0].containerPort: expected int, got str",
            id="multi-document-second-bad",
        ),
        pytest.param(
            y("""
            apiVersion: v1
            kind: List
            items:
            - {apiVersion: v1, kind: Pod, metadata: {name: a}, spec: {containers: [{name: c}]}}
            - {apiVersion: v1, kind: Pod, metadata: {name: b}, spec: {containers: [{name: c, ports: [{containerPort: x}]}]}}
            - {apiVersion: v1, kind: Pod, metadata: {name: d}, spec: {containers: [{name: c}]}}
            """),
            "$.items[1].spec.containers[0].ports[0].containerPort: expected int, got str",
            id="list-with-one-bad-item",
        ),
        pytest.param(
            b"apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Service}\n",
            "$.items[0].kind: expected Pod, got Service",
            id="list-with-service",
        ),
        pytest.param(
            b"apiVersion: v1\nkind: List\nitems:\n- {metadata: {name: a}}\n",
            "$.items[0]: missing required field kind",
            id="list-item-without-kind",
        ),
        pytest.param(
            b"apiVersion: v1\nkind: PodList\nitems: {}\n", "$.items: expected array, got dict", id="items-not-array"
        ),
        pytest.param(
            b'{"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": 5}]}}',
            "$.spec.containers[0].name: expected str, got int",
            id="json-wrong-type",
        ),
    ],
)
def test_rejected_inputs(data: bytes, message: str) -> None:
    with pytest.raises(ManifestDecodeError) as info:
        parse_manifests(data, "m.yaml")
    assert str(info.value) == message
    assert info.value.origin == "m.yaml"


@pytest.mark.parametrize(
    ("data", "line", "fragment"),
    [
        pytest.param(
            b"apiVersion: v1\nkind: Pod\nmetadata:\n\tname: a\n",
            4,
            "YAML does not allow tabs for indentation",
            id="tab",
        ),
        pytest.param(b"apiVersion: v1\nkind: Pod\nmetadata: {name: [\n", 4, "", id="unclosed-flow"),
        pytest.param(b"a: b\n c: d\n", 2, "mapping values are not allowed", id="bad-indent"),
        pytest.param(b"a: !!python/object:os.system x\n", 1, "could not determine a constructor", id="unsafe-tag"),
    ],
)
def test_yaml_syntax_errors_name_line_and_column(data: bytes, line: int, fragment: str) -> None:
    with pytest.raises(ManifestDecodeError) as info:
        parse_manifests(data, "m.yaml")
    assert info.value.line == line
    assert str(info.value).startswith(f"line {line}, column ")
    assert fragment in str(info.value)


def test_explicit_timestamp_tag_stays_a_string() -> None:
    data = POD.replace(b"creationTimestamp: 2024-01-02T03:04:05Z", b"creationTimestamp: !!timestamp 2024-01-02")
    [pod] = parse_manifests(data, "m.yaml")
    assert pod.metadata is not None and pod.metadata.creation_timestamp == "2024-01-02"


def test_alias_bomb_is_rejected_quickly() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):
        prev = f"*a{i - 1}"
        lines.append(f"a{i}: &a{i} [{', '.join([prev] * 10)}]")
    data = ("\n".join(lines) + "\nkind: Pod\napiVersion: v1\n").encode()
    with pytest.raises(ManifestDecodeError, match="more than 100000 values"):
        parse_manifests(data, "bomb.yaml")


@pytest.mark.parametrize(
    "data",
    [
        b"a: " + b"[" * 500 + b"]" * 500,  # flow style, under libyaml's own limit of 1000
        b"- " * 30000 + b"x\n",  # block sequences on one line
        b"a:\n" + b"".join(b"  " * i + b"b:\n" for i in range(1, 150)),
    ],
)
def test_nesting_is_bounded_before_anything_is_composed(data: bytes) -> None:
    with pytest.raises(ManifestDecodeError, match="nested more than 100 levels deep"):
        parse_manifests(data, "deep.yaml")


def test_merge_key_bomb_is_refused_while_parsing() -> None:
    import tracemalloc

    data = b"a0: &a0 {k0: v, k1: v, k2: v, k3: v, k4: v, k5: v, k6: v, k7: v}\n" + b"".join(
        f"a{i}: &a{i} {{<<: [*a{i - 1}, *a{i - 1}], x{i}: {{<<: *a{i - 1}}}}}\n".encode() for i in range(1, 12)
    )
    tracemalloc.start()
    try:
        with pytest.raises(ManifestDecodeError, match=r"more than 100000 values \(aliases and merge keys expanded\)"):
            parse_manifests(data, "merge.yaml")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 5 << 20  # nothing was built: the bomb took the agent from 43 MB to 426 MB before


def test_a_merge_within_the_limit_still_works() -> None:
    data = b"""apiVersion: v1
kind: Pod
metadata: {name: merged}
x-env: &env {name: A, value: "1"}
spec:
  containers:
  - name: app
    image: busybox
    env:
    - <<: *env
"""
    (pod,) = parse_manifests(data, "ok.yaml")
    assert pod.spec.containers[0].env[0].value == "1"


def test_deep_nesting_is_an_api_error() -> None:
    data = b"[" * 5000 + b"]" * 5000
    with pytest.raises(ApiError):
        parse_manifests(data, "deep.yaml")


def test_decode_errors_are_value_errors() -> None:
    assert issubclass(ManifestDecodeError, ApiError)
    assert issubclass(ApiError, ValueError)


YAMLISH = st.text(
    alphabet=st.sampled_from(list("abkindPo:v1-[]{},'\"\t\n #&*!|>?%@`0123456789.\\é")) | st.characters(),
    max_size=200,
)


@settings(max_examples=300, deadline=None)
@given(text=YAMLISH)
def test_arbitrary_text_raises_only_api_errors(text: str) -> None:
    try:
        parse_manifests(text.encode("utf-8", "surrogatepass"), "fuzz.yaml")
    except ApiError:
        pass


@st.composite
def pod_like(draw: st.DrawFn) -> bytes:
    scalar = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=5))
    value = st.recursive(
        scalar, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3), max_leaves=10
    )
    doc = {"apiVersion": "v1", "kind": draw(st.sampled_from(["Pod", "PodList", "List"]))}
    doc.update(draw(st.dictionaries(st.sampled_from(["metadata", "spec", "items", "status"]), value)))
    return json.dumps(doc).encode()


@settings(max_examples=200, deadline=None)
@given(data=pod_like())
def test_arbitrary_pod_like_json_raises_only_api_errors(data: bytes) -> None:
    try:
        parse_manifests(data, "fuzz.json")
    except ApiError:
        pass
