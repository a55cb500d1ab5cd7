"""ConfigMaps and Secrets: decoding and validation (tables), podconfig's merge of them, volume payloads, env
resolution, and kubelet's atomic writer on a real directory."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import msgspec
import pytest

from edgelet.api.configobjects import (
    MAX_TOTAL_BYTES,
    ConfigObject,
    ConfigObjects,
    FileProjection,
    MissingObject,
    decode_config_object,
    pod_references,
    volume_payload,
)
from edgelet.api.decode import parse_documents
from edgelet.api.errors import ManifestDecodeError
from edgelet.api.types import Container, Pod, Volume
from edgelet.ocispec.env import container_env, env_from_values
from edgelet.ocispec.errors import EnvError
from edgelet.podconfig import ConfigState, merge
from edgelet.podconfig.merge import merge_objects
from edgelet.runtime.configvolumes import DATA_LINK, write_payload
from edgelet.sources import SourceSnapshot

SECRET_VALUE = b"s3cr3t-Pa55w0rd"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def cm(name: str = "app", data: dict | None = None, **extra: object) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data or {}, **extra}


def secret(name: str = "creds", data: dict | None = None, **extra: object) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": data or {}, **extra}


# --- decoding and validation ---------------------------------------------------------


def test_a_config_map_and_a_secret_decode() -> None:
    obj, warnings = decode_config_object(cm(data={"a.txt": "hi"}, binaryData={"b.bin": _b64(b"\x00\xff")}))
    assert (obj.kind, obj.namespace, obj.name) == ("ConfigMap", "default", "app")
    assert obj.data == {"a.txt": b"hi", "b.bin": b"\x00\xff"} and obj.text_keys == {"a.txt"}
    assert warnings == []
    sec, _ = decode_config_object(
        secret(data={"password": _b64(SECRET_VALUE)}, stringData={"user": "admin", "password": "over"})
    )
    # stringData wins over data, as the apiserver merges it.
    assert sec.data == {"password": b"over", "user": b"admin"} and sec.type == "Opaque"
    assert sec.text_keys == {"password", "user"}


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        pytest.param(cm("Bad_Name"), '$.metadata.name: Invalid value: "Bad_Name"', id="name"),
        pytest.param({"apiVersion": "v1", "kind": "ConfigMap"}, "$.metadata.name: Required value", id="no-name"),
        pytest.param(
            cm(data={"a/b": "x"}), "$.data['a/b']: Invalid value: \"a/b\": a valid config key", id="key-slash"
        ),
        pytest.param(cm(data={".": "x"}), "$.data['.']: Invalid value: \".\": must not be '.'", id="key-dot"),
        pytest.param(cm(data={"..": "x"}), "must not be '..'", id="key-dotdot"),
        pytest.param(cm(data={"..a": "x"}), "must not start with '..'", id="key-dotdot-prefix"),
        pytest.param(cm(data={"a": 1}), "$.data['a']: expected str, got int", id="value-type"),
        pytest.param(
            cm(data={"a": "x"}, binaryData={"a": _b64(b"y")}),
            "$.binaryData['a']: Invalid value: \"a\": duplicate of key present in data",
            id="duplicate-key",
        ),
        pytest.param(cm(binaryData={"a": "!!"}), "$.binaryData['a']: illegal base64 data", id="binary-b64"),
        pytest.param(secret(data={"a": "not base64!"}), "$.data['a']: illegal base64 data", id="secret-b64"),
        pytest.param(
            cm(data={"a": "x" * (MAX_TOTAL_BYTES + 1)}),
            "$.data: Too long: must have at most 1048576 bytes",
            id="too-big",
        ),
        pytest.param(cm(immutable="yes"), "$.immutable: expected bool, got str", id="immutable-type"),
        pytest.param(
            secret(type="kubernetes.io/tls", data={"tls.crt": _b64(b"c")}), "$.data[tls.key]: Required value", id="tls"
        ),
        pytest.param(
            secret(type="kubernetes.io/service-account-token"), "$.type: Forbidden: a service account", id="sa-token"
        ),
        pytest.param(cm(metadata={"name": "a", "namespace": "Bad"}), "$.metadata.namespace: Invalid", id="namespace"),
    ],
)
def test_refused_objects_name_the_field(doc: dict, message: str) -> None:
    with pytest.raises(ManifestDecodeError) as info:
        parse_documents(msgspec.json.encode(doc), "cfg.yaml")
    assert message in str(info.value)


def test_an_error_never_shows_a_secret_value() -> None:
    doc = secret(data={"ok": _b64(SECRET_VALUE), "bad": SECRET_VALUE.decode() + "!"}, stringData={"n": 5})
    with pytest.raises(ManifestDecodeError) as info:
        parse_documents(msgspec.json.encode(doc), "cfg.yaml")
    assert SECRET_VALUE.decode() not in str(info.value)
    obj, _ = decode_config_object(secret(data={"k": _b64(SECRET_VALUE)}))
    assert SECRET_VALUE.decode() not in repr(obj) and obj.sizes() == {"k": len(SECRET_VALUE)}


def test_objects_beside_pods_in_a_stream_and_a_list() -> None:
    text = b"""
apiVersion: v1
kind: Pod
metadata: {name: web}
spec: {containers: [{name: a, image: busybox}]}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: conf, namespace: prod}
data: {k: v}
typo: 1
---
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Secret, metadata: {name: s}, stringData: {k: v}}
"""
    pods, objects, warnings = parse_documents(text, "m.yaml")
    assert [p.metadata.name for p in pods] == ["web"]
    assert [(o.kind, o.full_name) for o in objects] == [("ConfigMap", "prod/conf"), ("Secret", "default/s")]
    assert warnings == ['document 1: unknown field "typo"']


def test_one_bad_object_refuses_the_whole_file() -> None:
    text = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n---\napiVersion: v1\nkind: Secret\nmetadata: {}\n"
    with pytest.raises(ManifestDecodeError, match=r"document 1: \$.metadata.name: Required value"):
        parse_documents(text, "m.yaml")


# --- podconfig -----------------------------------------------------------------------


def obj(name: str, origin: str, data: bytes = b"v", *, kind: str = "ConfigMap", immutable: bool = False, source="file"):
    return ConfigObject(
        kind=kind,  # type: ignore[arg-type]
        namespace="default",
        name=name,
        data={"k": data},
        text_keys=frozenset({"k"}),
        immutable=immutable,
        origin=origin,
        source=source,
    )


def test_two_files_defining_one_object_is_an_error_naming_both() -> None:
    state, _ = merge(
        ConfigState(), SourceSnapshot("file", (), objects=(obj("a", "/m/1.yaml"), obj("a", "/m/2.yaml"))), 0
    )
    assert state.objects[("ConfigMap", "default", "a")].origin == "/m/1.yaml"
    [rejected] = state.rejected_objects
    assert "/m/2.yaml is ignored" in rejected.message and "from /m/1.yaml" in rejected.message
    # Across sources the file wins over the URL; a Secret of the same name is another object.
    state, _ = merge(
        state,
        SourceSnapshot("http", (), objects=(obj("a", "http://x", source="http"), obj("a", "u", kind="Secret"))),
        0,
    )
    assert len(state.objects) == 2 and len(state.rejected_objects) == 2


def test_an_immutable_object_keeps_its_content() -> None:
    first = obj("a", "/m/1.yaml", b"one", immutable=True)
    objects, rejected = merge_objects({}, {"file": (first,)})
    changed = obj("a", "/m/1.yaml", b"two", immutable=True)
    objects, rejected = merge_objects(objects, {"file": (changed,)})
    assert objects[first.key].data == {"k": b"one"}
    [r] = rejected
    assert "is immutable" in r.message and "/m/1.yaml" in r.message
    # Deleted, it may come back with other content.
    objects, _ = merge_objects(merge_objects(objects, {"file": ()})[0], {"file": (changed,)})
    assert objects[first.key].data == {"k": b"two"}


def test_the_store_reports_what_changed() -> None:
    store = ConfigObjects()
    a, b = obj("a", "f"), obj("b", "f")
    assert store.replace({a.key: a, b.key: b}) == {a.key, b.key}
    assert store.replace({a.key: a, b.key: obj("b", "f")}) == set()
    assert store.replace({a.key: obj("a", "f", b"new")}) == {a.key, b.key}


# --- volume payloads and env ---------------------------------------------------------


def store_of(*objects: ConfigObject) -> ConfigObjects:
    return ConfigObjects({o.key: o for o in objects})


def volume(doc: dict) -> Volume:
    return msgspec.convert({"name": "v", **doc}, Volume)


def test_volume_payloads() -> None:
    store = store_of(
        ConfigObject("ConfigMap", "default", "c", {"a": b"1", "b": b"2"}, frozenset({"a", "b"})),
        ConfigObject("Secret", "default", "s", {"p": SECRET_VALUE}, frozenset({"p"})),
    )
    assert volume_payload(volume({"configMap": {"name": "c"}}), "default", store) == {
        "a": FileProjection(b"1", 0o644),
        "b": FileProjection(b"2", 0o644),
    }
    items = {"configMap": {"name": "c", "defaultMode": 0o400, "items": [{"key": "b", "path": "d/x", "mode": 0o600}]}}
    assert volume_payload(volume(items), "default", store) == {"d/x": FileProjection(b"2", 0o600)}
    projected = {
        "projected": {"defaultMode": 0o440, "sources": [{"configMap": {"name": "c"}}, {"secret": {"name": "s"}}]}
    }
    assert set(volume_payload(volume(projected), "default", store)) == {"a", "b", "p"}
    assert volume_payload(volume({"secret": {"secretName": "gone", "optional": True}}), "default", store) == {}
    with pytest.raises(MissingObject, match='configmap "gone" not found'):
        volume_payload(volume({"configMap": {"name": "gone"}}), "default", store)
    with pytest.raises(MissingObject, match="non-existent config key: z"):
        volume_payload(volume({"configMap": {"name": "c", "items": [{"key": "z", "path": "z"}]}}), "default", store)
    with pytest.raises(MissingObject, match="projected source downwardAPI"):
        volume_payload(volume({"projected": {"sources": [{"downwardAPI": {"items": []}}]}}), "default", store)
    # Another namespace's object is not this pod's.
    with pytest.raises(MissingObject):
        volume_payload(volume({"configMap": {"name": "c"}}), "prod", store)


def pod_with(container: dict, volumes: list | None = None) -> Pod:
    return msgspec.convert(
        {
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "a", "image": "x", **container}], "volumes": volumes or []},
        },
        Pod,
    )


ENV_STORE = store_of(
    ConfigObject("ConfigMap", "default", "c", {"A": b"1", "bad=name": b"2", "bin": b"3"}, frozenset({"A", "bad=name"})),
    ConfigObject("Secret", "default", "s", {"PASS": SECRET_VALUE}, frozenset({"PASS"})),
)


@pytest.mark.parametrize(
    ("container", "expected"),
    [
        pytest.param(
            {"env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "A"}}}]},
            [("X", "1")],
            id="cm-key",
        ),
        pytest.param(
            {"env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "s", "key": "PASS"}}}]},
            [("P", SECRET_VALUE.decode())],
            id="secret-key",
        ),
        pytest.param(
            {"envFrom": [{"configMapRef": {"name": "c"}, "prefix": "C_"}], "env": [{"name": "C_A", "value": "mine"}]},
            [("C_A", "mine")],
            id="env-from-then-env-over-it",
        ),
        pytest.param(
            {"env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "A", "optional": True}}}]},
            [],
            id="optional-absent-object",
        ),
        pytest.param(
            {"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "nope", "optional": True}}}]},
            [],
            id="optional-absent-key",
        ),
        pytest.param({"envFrom": [{"secretRef": {"name": "gone", "optional": True}}]}, [], id="optional-env-from"),
        pytest.param(
            {
                "env": [
                    {"name": "Y", "value": "$(X)!"},
                    {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "A"}}},
                ]
            },
            [("Y", "$(X)!"), ("X", "1")],
            id="expansion-order",
        ),
    ],
)
def test_env_resolution(container: dict, expected: list) -> None:
    assert container_env(pod_with(container), pod_with(container).spec.containers[0], objects=ENV_STORE) == expected


@pytest.mark.parametrize(
    ("container", "message"),
    [
        (
            {"env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "A"}}}]},
            'configmap "gone" not found',
        ),
        (
            {"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "nope"}}}]},
            "couldn't find key nope in Secret default/s",
        ),
        # binaryData is for volumes: env sees only data, as kubelet.
        (
            {"env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "bin"}}}]},
            "couldn't find key bin in ConfigMap default/c",
        ),
        ({"envFrom": [{"secretRef": {"name": "gone"}}]}, 'secret "gone" not found'),
    ],
)
def test_a_missing_reference_is_an_env_error_naming_it(container: dict, message: str) -> None:
    pod = pod_with(container)
    with pytest.raises(EnvError, match=message):
        container_env(pod, pod.spec.containers[0], objects=ENV_STORE)


def test_invalid_names_from_env_from_are_skipped_and_said() -> None:
    container = msgspec.convert({"name": "a", "envFrom": [{"configMapRef": {"name": "c"}}]}, Container)
    values, skipped = env_from_values(container, "default", ENV_STORE)
    assert values == [("A", "1")]
    assert skipped == [
        "Keys [bad=name] from the EnvFrom configmap default/c were skipped since they are invalid environment "
        "variable names."
    ]


def test_pod_references_say_how_each_object_is_used() -> None:
    pod = pod_with(
        {
            "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
            "volumeMounts": [{"name": "sub", "mountPath": "/x", "subPath": "k"}, {"name": "vol", "mountPath": "/y"}],
        },
        [{"name": "sub", "configMap": {"name": "c1"}}, {"name": "vol", "configMap": {"name": "c2"}}],
    )
    assert pod_references(pod) == {
        ("Secret", "default", "s"): {"env"},
        ("ConfigMap", "default", "c1"): {"subPath"},
        ("ConfigMap", "default", "c2"): {"volume"},
    }


# --- the atomic writer ---------------------------------------------------------------


def listing(target: Path) -> dict[str, str]:
    return {name: os.readlink(target / name) for name in os.listdir(target) if (target / name).is_symlink()}


def test_the_atomic_writer_swaps_data_through_a_timestamped_directory(tmp_path: Path) -> None:
    target = tmp_path / "vol"
    assert write_payload(target, {"a": FileProjection(b"1", 0o644), "d/b": FileProjection(b"2", 0o400)}, 0)
    first = os.readlink(target / DATA_LINK)
    assert first.startswith("..1970_01_01_00_00_00.")
    assert listing(target) == {DATA_LINK: first, "a": "..data/a", "d": "..data/d"}
    assert (target / "a").read_bytes() == b"1" and (target / "d" / "b").read_bytes() == b"2"
    assert (target / "d" / "b").stat().st_mode & 0o777 == 0o400
    # The same payload again writes nothing.
    assert not write_payload(target, {"a": FileProjection(b"1", 0o644), "d/b": FileProjection(b"2", 0o400)}, 5)
    # A change: a new directory, one rename, the old directory and the stale name gone.
    assert write_payload(target, {"a": FileProjection(b"new", 0o644)}, 86400)
    second = os.readlink(target / DATA_LINK)
    assert second != first and second.startswith("..1970_01_02_")
    assert sorted(os.listdir(target)) == sorted([DATA_LINK, second, "a"])
    assert (target / "a").read_bytes() == b"new"


@pytest.mark.parametrize("path", ["../x", "/abs", "..data", "a/../../b"])
def test_the_atomic_writer_refuses_paths_out_of_the_volume(tmp_path: Path, path: str) -> None:
    from edgelet.container.errors import VolumeError

    with pytest.raises(VolumeError):
        write_payload(tmp_path / "vol", {path: FileProjection(b"x", 0o644)}, 0)


def test_reports_show_keys_sizes_and_users_never_values() -> None:
    from edgelet.api.configobjects import object_reports
    from edgelet.cli.objects import objects_table
    from edgelet.server.routes import match_route

    pod = pod_with(
        {"env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "s", "key": "PASS"}}}]},
        [{"name": "v", "configMap": {"name": "gone"}}],
    )
    secret_obj = ConfigObject("Secret", "default", "s", {"PASS": SECRET_VALUE}, frozenset({"PASS"}), origin="/m/a.yaml")
    reports = object_reports([secret_obj], [pod])
    assert [(r.kind, r.name, r.keys, r.used_by, r.missing) for r in reports] == [
        ("ConfigMap", "gone", {}, ["default/p (volume)"], True),
        ("Secret", "s", {"PASS": len(SECRET_VALUE)}, ["default/p (env)"], False),
    ]
    table = objects_table(reports)
    assert "PASS(15)" in table and "/m/a.yaml" in table and "<missing>" in table
    assert SECRET_VALUE.decode() not in table + msgspec.json.encode(reports).decode()
    assert match_route("GET", "/secrets").params == {"kind": "Secret"}
    assert match_route("GET", "/configmaps").params == {"kind": "ConfigMap"}


# --- a pod version covers the config it needs a restart to see -----------------------


def pinned_pod(uses_env: bool) -> Pod:
    container: dict = {"volumeMounts": [{"name": "v", "mountPath": "/v"}]}
    if uses_env:
        container["env"] = [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]
    pod = pod_with(container, [{"name": "v", "configMap": {"name": "vol"}}])
    pod.metadata.uid = "src-uid"
    pod.metadata.annotations = {"kubernetes.io/config.hash": "src-uid"}
    return pod


def test_a_change_of_an_env_object_is_a_new_version_and_a_volume_one_is_not() -> None:
    from edgelet.api.configobjects import PINS_ANNOTATION

    def uids(data: bytes, vol: bytes, pod: Pod) -> str:
        objects = (
            ConfigObject("ConfigMap", "default", "c", {"k": data}, frozenset({"k"}), origin="f"),
            ConfigObject("ConfigMap", "default", "vol", {"k": vol}, frozenset({"k"}), origin="f"),
        )
        state, _ = merge(ConfigState(pin_key=b"node"), SourceSnapshot("file", (pod,), objects=objects), 0)
        [accepted] = state.all_pods()
        return accepted.metadata.uid

    env_pod = pinned_pod(uses_env=True)
    first = uids(b"1", b"a", env_pod)
    assert first != "src-uid" and uids(b"1", b"b", env_pod) == first  # the volume is updated in place
    assert uids(b"2", b"a", env_pod) != first  # the env's object changed: a new version
    vol_pod = pinned_pod(uses_env=False)
    assert uids(b"1", b"a", vol_pod) == uids(b"2", b"b", vol_pod) == "src-uid"
    state, _ = merge(
        ConfigState(pin_key=b"node"),
        SourceSnapshot("file", (env_pod,), objects=(obj("c", "f", SECRET_VALUE, kind="Secret"),)),
        0,
    )
    [accepted] = state.all_pods()
    annotations = accepted.metadata.annotations
    assert annotations["kubernetes.io/config.hash"] == accepted.metadata.uid
    assert annotations[PINS_ANNOTATION].startswith("ConfigMap/default/c=absent")  # the Secret "c" is not the ConfigMap


def test_a_pinned_version_sees_the_content_it_was_made_with() -> None:
    from edgelet.api.configobjects import pin_digest, pin_pod

    store = ConfigObjects(key=b"node")
    old = ConfigObject("ConfigMap", "default", "c", {"k": b"old"}, frozenset({"k"}))
    new = ConfigObject("ConfigMap", "default", "c", {"k": b"new"}, frozenset({"k"}))
    store.replace({old.key: old})
    old_version = pin_pod(pinned_pod(uses_env=True), {old.key: old}, b"node")
    store.replace({new.key: new})
    new_version = pin_pod(pinned_pod(uses_env=True), {new.key: new}, b"node")
    env = container_env(old_version, old_version.spec.containers[0], objects=store.for_pod(old_version))
    assert env == [("X", "old")]  # a rollback to the last good version gets its config back
    env = container_env(new_version, new_version.spec.containers[0], objects=store.for_pod(new_version))
    assert env == [("X", "new")]
    # The digest is keyed: it names a content without revealing it.
    secret_obj = ConfigObject("Secret", "default", "s", {"p": SECRET_VALUE}, frozenset({"p"}))
    assert pin_digest(secret_obj, b"node") != pin_digest(secret_obj, b"other")


# --- the sync loop feeds the store and syncs the users of a changed object -----------


class _Workers:
    def __init__(self) -> None:
        self.synced: list[str] = []

    def sync(self, pod: Pod) -> None:
        self.synced.append(pod.metadata.name)

    def terminate(self, uid: str, pod: Pod | None) -> None:
        pass

    def is_terminating(self, uid: str) -> bool:
        return False


class _Publisher:
    def set_config(self, config: object) -> None:
        pass


def test_the_loop_hands_objects_to_the_runtime_and_syncs_their_users() -> None:
    from edgelet.events import EventRecorder
    from edgelet.sync.loop import SyncLoop
    from edgelet.util.clock import FakeClock

    clock = FakeClock()
    workers, events, store = _Workers(), EventRecorder(clock), ConfigObjects()
    loop = SyncLoop(
        workers=workers,  # type: ignore[arg-type]
        publisher=_Publisher(),  # type: ignore[arg-type]
        clock=clock,
        expected_sources={"file"},
        events=events,
        objects=store,
    )
    user = pod_with({"volumeMounts": [{"name": "v", "mountPath": "/v"}]}, [{"name": "v", "configMap": {"name": "c"}}])
    user.metadata.uid = "u1"
    other = pod_with({})
    other.metadata.name, other.metadata.uid = "other", "u2"

    def apply(data: bytes, *extra: ConfigObject) -> None:
        objects = (ConfigObject("ConfigMap", "default", "c", {"k": data}, frozenset({"k"}), origin="/m/a.yaml"), *extra)
        loop.apply_snapshot(SourceSnapshot("file", (user, other), objects=objects))

    apply(b"1")
    assert store.get("ConfigMap", "default", "c").data == {"k": b"1"}
    assert sorted(workers.synced) == ["other", "p"]
    workers.synced.clear()
    apply(b"2")  # the pods are the same: only the user of the changed ConfigMap is synced (its volume follows)
    assert workers.synced == ["p"] and store.get("ConfigMap", "default", "c").data == {"k": b"2"}
    workers.synced.clear()
    apply(b"2", ConfigObject("ConfigMap", "default", "c", {"k": b"x"}, frozenset({"k"}), origin="/m/b.yaml"))
    assert workers.synced == [] and store.get("ConfigMap", "default", "c").data == {"k": b"2"}
    [event] = [e for e in events.snapshot().events if e.reason == "FailedValidation"]
    assert (event.object.kind, event.object.namespace, event.object.name) == ("ConfigMap", "default", "c")
    assert "/m/b.yaml is ignored" in event.message and "/m/a.yaml" in event.message


def test_a_refused_object_is_in_the_pods_table(tmp_path: Path) -> None:
    from edgelet.status.publisher import StatusPublisher
    from edgelet.util.clock import FakeClock

    state, _ = merge(
        ConfigState(), SourceSnapshot("file", (), objects=(obj("a", "/m/1.yaml"), obj("a", "/m/2.yaml"))), 0
    )
    publisher = StatusPublisher(tmp_path, "node", FakeClock(), host_ip="10.0.0.1")
    publisher.set_config(state)
    [row] = publisher.snapshot().rejected
    assert row.origin == "/m/2.yaml" and row.pod == "" and 'duplicate ConfigMap "default/a"' in row.message


@pytest.mark.parametrize(
    ("node_default", "annotation", "pinned"),
    [(True, None, True), (True, "off", False), (False, None, False), (False, "on", True), (False, "bogus", False)],
)
def test_without_a_rollout_nothing_is_pinned(node_default: bool, annotation: str | None, pinned: bool) -> None:
    """kubelet's semantics when the pod's rollout is off: a running container keeps the env it started with."""
    from edgelet.api.configobjects import PINS_ANNOTATION, pin_pod

    pod = pinned_pod(uses_env=True)
    if annotation is not None:
        pod.metadata.annotations["edgelet.io/rollout"] = annotation
    out = pin_pod(pod, {}, b"k", default=node_default)
    assert (PINS_ANNOTATION in out.metadata.annotations) is pinned
    assert (out.metadata.uid != "src-uid") is pinned


def test_a_pod_pinned_to_an_absent_object_waits_for_every_source() -> None:
    """The object may be the URL's: pinned to "absent" while only the files have spoken, the pod would get a
    UID it loses when the URL answers (a restart would replace the running pod twice)."""
    pod = pinned_pod(uses_env=True)
    state = ConfigState(pin_key=b"k", expected_sources=frozenset({"file", "http"}))
    state, changes = merge(state, SourceSnapshot("file", (pod,)), 0)
    assert state.all_pods() == [] and changes == []
    url_object = ConfigObject("ConfigMap", "default", "c", {"k": b"1"}, frozenset({"k"}), origin="u", source="http")
    state, changes = merge(state, SourceSnapshot("http", (), objects=(url_object,)), 0)
    [added] = [c.pod for c in changes if c.op == "ADD"]
    assert "=absent" not in added.metadata.annotations["edgelet.io/config-objects"]
    # Once every source has spoken, a pod pinned to an absent object runs (and waits in the runtime for it).
    state, changes = merge(state, SourceSnapshot("http", ()), 0)
    assert [c.op for c in changes] == ["REMOVE", "ADD"]
