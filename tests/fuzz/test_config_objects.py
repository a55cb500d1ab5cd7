"""Fuzzing the ConfigMap and Secret path: decode -> validation -> env resolution and volume payloads.

Inputs are object-shaped documents with generated names, keys and values (valid and not), and byte-level
mutations of a real ConfigMap-and-Secret manifest. The properties: only edgelet's own errors come out (an
`ApiError` naming the field), never a crash; an error never quotes a Secret's value; and every accepted object
gives payloads whose paths stay inside the volume and env values that are its own bytes.
"""

from __future__ import annotations

import base64
import os
from typing import Any

import hypothesis.strategies as st
import msgspec
import yaml
from hypothesis import HealthCheck, given, settings

from edgelet.api.configobjects import ConfigObjects, MissingObject, volume_payload
from edgelet.api.decode import parse_documents
from edgelet.api.errors import ApiError
from edgelet.api.types import Container, Pod, Volume
from edgelet.ocispec.env import container_env
from edgelet.ocispec.errors import EnvError

EXAMPLES = int(os.environ.get("EDGELET_FUZZ_EXAMPLES", "150"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
MARK = "FUZZ-SECRET-VALUE-9f3"
SEED = b"""apiVersion: v1
kind: ConfigMap
metadata: {name: app, namespace: default}
data: {app.conf: "x=1", other: y}
binaryData: {blob: AAEC}
---
apiVersion: v1
kind: Secret
metadata: {name: creds}
type: Opaque
data: {PASS: RlVaWi1TRUNSRVQtVkFMVUUtOWYz}
stringData: {user: admin}
immutable: true
"""

keys = st.one_of(
    st.sampled_from(["a", "app.conf", ".", "..", "..x", "a/b", "", "k" * 300, "ok_key-1.2"]),
    st.text(min_size=0, max_size=12),
)
values = st.one_of(st.text(max_size=40), st.integers(), st.none(), st.booleans(), st.lists(st.text(), max_size=2))


@st.composite
def documents(draw: Any) -> dict[str, Any]:
    kind = draw(st.sampled_from(["ConfigMap", "Secret"]))
    doc: dict[str, Any] = {"apiVersion": draw(st.sampled_from(["v1", "v2", 1])), "kind": kind}
    if draw(st.booleans()):
        doc["metadata"] = draw(
            st.one_of(
                st.fixed_dictionaries(
                    {"name": st.one_of(st.sampled_from(["app", "Bad_", "a" * 300, ""]), st.text(max_size=10))},
                    optional={"namespace": st.sampled_from(["default", "Bad", "prod"]), "labels": values},
                ),
                values,
            )
        )
    for field in ("data", "binaryData", "stringData"):
        if draw(st.booleans()):
            doc[field] = draw(
                st.one_of(
                    st.dictionaries(
                        keys, st.one_of(values, st.just(MARK), st.just(base64.b64encode(MARK.encode()).decode()))
                    ),
                    values,
                )
            )
    for field, strategy in (("immutable", values), ("type", st.sampled_from(["Opaque", "kubernetes.io/tls", 3]))):
        if draw(st.booleans()):
            doc[field] = draw(strategy)
    return doc


def _use(data: bytes) -> None:
    """Decode, then use every accepted object the way the runtime does; raise anything unexpected."""
    try:
        pods, objects, _ = parse_documents(data, "fuzz.yaml")
    except ApiError as exc:
        assert MARK not in str(exc)
        return
    store = ConfigObjects({o.key: o for o in objects})
    for obj in objects:
        assert MARK not in repr(obj)
        if obj.kind == "ConfigMap":
            vol = msgspec.convert({"name": "v", "configMap": {"name": obj.name}}, Volume)
        else:
            vol = msgspec.convert({"name": "v", "secret": {"secretName": obj.name}}, Volume)
        try:
            payload = volume_payload(vol, obj.namespace, store)
        except MissingObject:
            continue
        for path, proj in payload.items():
            assert path and not path.startswith("/") and ".." not in path.split("/")
            assert proj.data == obj.data[path]
        ref = "secretRef" if obj.kind == "Secret" else "configMapRef"
        container = msgspec.convert({"name": "c", "envFrom": [{ref: {"name": obj.name}}]}, Container)
        pod = msgspec.convert({"metadata": {"name": "p", "namespace": obj.namespace}}, Pod)
        try:
            env = container_env(pod, container, objects=store)
        except EnvError:
            continue
        assert {k for k, _ in env} <= set(obj.text_keys)


@FUZZ
@given(documents())
def test_generated_objects_give_only_edgelet_errors(doc: dict[str, Any]) -> None:
    _use(msgspec.json.encode(doc))
    _use(yaml.safe_dump(doc).encode())


@FUZZ
@given(st.data())
def test_mutated_manifests_give_only_edgelet_errors(data: Any) -> None:
    raw = bytearray(SEED)
    for _ in range(data.draw(st.integers(1, 6))):
        i = data.draw(st.integers(0, len(raw) - 1))
        op = data.draw(st.sampled_from(["flip", "delete", "insert"]))
        if op == "flip":
            raw[i] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "delete":
            del raw[i]
        else:
            raw.insert(i, data.draw(st.sampled_from(b":-{}[]&*!|>'\"\t\n #")))
    _use(bytes(raw))
