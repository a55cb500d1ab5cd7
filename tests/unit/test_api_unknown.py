"""Tests of the unknown-field walker and of parse_manifests_with_warnings."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgelet.api.decode import parse_manifests, parse_manifests_with_warnings
from edgelet.api.types import Container, PodList, Probe
from edgelet.api.unknown import find_unknown_fields, unknown_field_warning


@pytest.mark.parametrize(
    ("raw", "paths"),
    [
        pytest.param({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}}, [], id="all-known"),
        pytest.param(
            {"kind": "Pod", "extra": 1, "metadata": {"nmae": "x"}},
            ["extra", "metadata.nmae"],
            id="top-level-and-nested",
        ),
        pytest.param(
            {"spec": {"containers": [{"name": "a"}, {"name": "b", "imagePullPolcy": "Always"}]}},
            ["spec.containers[1].imagePullPolcy"],
            id="list-of-structs",
        ),
        pytest.param(
            {"spec": {"containers": [{"name": "a", "ports": [{"containerPort": 1}, {"hostPrt": 2}]}]}},
            ["spec.containers[0].ports[1].hostPrt"],
            id="list-in-list",
        ),
        pytest.param(
            {"spec": {"volumes": [{"name": "v", "hostPath": {"path": "/x", "tpye": "File"}}]}},
            ["spec.volumes[0].hostPath.tpye"],
            id="struct-in-list",
        ),
        pytest.param(
            {"spec": {"containers": [{"livenessProbe": {"httpGet": {"port": 80, "pth": "/"}}}]}},
            ["spec.containers[0].livenessProbe.httpGet.pth"],
            id="deep",
        ),
        pytest.param(
            {"metadata": {"labels": {"anything": "goes", "a/b": "c"}, "annotations": {"x": "y"}}},
            [],
            id="free-maps-have-no-unknown-keys",
        ),
        pytest.param(
            {"metadata": {"managedFields": [{"fieldsV1": {"f:spec": {"f:whatever": {}}}}]}},
            [],
            id="any-typed-values-are-not-walked",
        ),
        pytest.param(
            {"spec": {"containers": [{"resources": {"limits": {"cpu": 1, "x/y": "2"}, "limts": {}}}]}},
            ["spec.containers[0].resources.limts"],
            id="quantity-map",
        ),
        pytest.param(
            {"spec": {"containers": [{"env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPth": "x"}}}]}]}},
            ["spec.containers[0].env[0].valueFrom.fieldRef.fieldPth"],
            id="env-value-from",
        ),
        pytest.param(
            {
                "spec": {
                    "tolerations": [{"operator": "Exists", "effct": "NoExecute"}],
                    "securityContext": {"sysctls": [{"name": "a", "value": "b", "vaule": "c"}]},
                }
            },
            ["spec.tolerations[0].effct", "spec.securityContext.sysctls[0].vaule"],
            id="several",
        ),
    ],
)
def test_unknown_fields(raw: dict[str, Any], paths: list[str]) -> None:
    assert find_unknown_fields(raw) == paths


@pytest.mark.parametrize(
    "raw",
    [
        None,
        1,
        "x",
        [],
        [{"a": 1}],
        {"spec": "nope"},
        {"spec": {"containers": {"name": "a"}}},
        {"spec": {"containers": [1, None, "x", [{"bad": 1}]]}},
        {1: {"x": 2}},
        {"metadata": {"labels": [1, 2]}},
    ],
)
def test_wrong_shapes_are_skipped(raw: Any) -> None:
    # Type mismatches are decode errors, reported by conversion; the walker only names unknown keys.
    expected = ["1"] if isinstance(raw, dict) and 1 in raw else []
    assert find_unknown_fields(raw) == expected


def test_other_root_types() -> None:
    assert find_unknown_fields({"name": "a", "imag": "x"}, Container) == ["imag"]
    assert find_unknown_fields({"exec": {"comand": []}, "sleep": {}}, Probe) == ["exec.comand", "sleep"]
    raw = {"apiVersion": "v1", "kind": "PodList", "items": [{"spec": {"nodeNmae": "n"}}], "metadta": {}}
    assert find_unknown_fields(raw, PodList) == ["items[0].spec.nodeNmae", "metadta"]


def test_warning_text_is_kubectls() -> None:
    assert unknown_field_warning("spec.containers[0].imagePullPolcy") == (
        'unknown field "spec.containers[0].imagePullPolcy"'
    )


POD_YAML = b"""
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  containers:
  - name: app
    image: busybox
    imagePullPolcy: Always
    ports: [{containerPort: 80, protcol: TCP}]
"""


def test_parse_with_warnings_single_document() -> None:
    pods, warnings = parse_manifests_with_warnings(POD_YAML, "web.yaml")
    assert [p.metadata.name for p in pods if p.metadata] == ["web"]
    assert warnings == [
        'unknown field "spec.containers[0].imagePullPolcy"',
        'unknown field "spec.containers[0].ports[0].protcol"',
    ]
    # The unknown fields are dropped, and parse_manifests is unchanged.
    assert parse_manifests(POD_YAML, "web.yaml") == pods


def test_parse_with_warnings_names_documents_and_list_items() -> None:
    data = (
        POD_YAML
        + b"---\n"
        + b"""
apiVersion: v1
kind: PodList
items:
- metadata: {name: a, lables: {}}
  spec: {containers: [{name: c, image: x}]}
"""
    )
    pods, warnings = parse_manifests_with_warnings(data, "many.yaml")
    assert len(pods) == 2
    assert warnings == [
        'document 0: unknown field "spec.containers[0].imagePullPolcy"',
        'document 0: unknown field "spec.containers[0].ports[0].protcol"',
        'document 1: unknown field "items[0].metadata.lables"',
    ]


def test_clean_manifest_has_no_warnings() -> None:
    data = (
        b'{"apiVersion": "v1", "kind": "List", "items": [{"apiVersion": "v1", "kind": "Pod", '
        b'"metadata": {"name": "a"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}]}'
    )
    assert parse_manifests_with_warnings(data, "list.json")[1] == []


_KEYS = st.sampled_from(["spec", "containers", "name", "ports", "metadata", "labels", "x", "items", "env"])
_NESTED = st.recursive(
    st.none() | st.integers() | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS | st.text(max_size=3), inner, max_size=3),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(raw=_NESTED)
def test_walker_never_raises_and_paths_start_at_the_root(raw: Any) -> None:
    paths = find_unknown_fields(raw)
    assert len(paths) == len(set(paths))
    keys = raw.keys() if isinstance(raw, dict) else ()
    assert all(any(p == str(k) or p.startswith(f"{k}.") or p.startswith(f"{k}[") for k in keys) for p in paths)
