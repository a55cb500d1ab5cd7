"""Pure decisions of the mirror: which mirror pods to create, delete and patch, and the bodies sent."""

from __future__ import annotations

import pytest

from edgelet.api.annotations import CONFIG_MIRROR
from edgelet.mirror.reconcile import (
    MIRROR_REPLACED,
    Actions,
    MirrorInfo,
    build_mirror_pod,
    build_status_patch,
    decide,
    mirror_info,
    statuses_to_push,
)

NODE_UID = "node-uid-1"


def m(uid: str, hash_: str = "h1", *, deleting: bool = False, owner: str = NODE_UID) -> MirrorInfo:
    return MirrorInfo(uid=uid, hash=hash_, deleting=deleting, owner_uid=owner)


@pytest.mark.parametrize(
    "static, mirrors, expected",
    [
        pytest.param({"default/web": "h1"}, {}, Actions(create=("default/web",)), id="missing mirror is created"),
        pytest.param({"default/web": "h1"}, {"default/web": m("u1")}, Actions(), id="good mirror is kept"),
        pytest.param(
            {"default/web": "h2"},
            {"default/web": m("u1", "h1")},
            Actions(delete=(("default/web", "u1"),), create=("default/web",)),
            id="stale hash is replaced",
        ),
        pytest.param(
            {"default/web": "h1"},
            {"default/web": m("u1", deleting=True)},
            Actions(delete=(("default/web", "u1"),), create=("default/web",)),
            id="terminating mirror replaced",
        ),
        pytest.param({}, {"default/old": m("u9")}, Actions(delete=(("default/old", "u9"),)), id="orphan deleted"),
        pytest.param(
            {"default/web": "h1"},
            {"default/web": m("u1", owner="earlier-node")},
            Actions(delete=(("default/web", "u1"),), create=("default/web",)),
            id="mirror of a deleted Node is replaced",
        ),
        pytest.param(
            {"kube-system/a": "x", "default/b": "y"},
            {"default/b": m("u2", "y")},
            Actions(create=("kube-system/a",)),
            id="only what is missing",
        ),
    ],
)
def test_decide(static, mirrors, expected):
    assert decide(static, mirrors, NODE_UID) == expected


@pytest.mark.parametrize(
    "current, pushed, mirrors, expected",
    [
        pytest.param({"d/a": "f1"}, {}, {"d/a": m("u1")}, ["d/a"], id="never sent"),
        pytest.param({"d/a": "f1"}, {"d/a": ("u1", "f1")}, {"d/a": m("u1")}, [], id="unchanged"),
        pytest.param({"d/a": "f2"}, {"d/a": ("u1", "f1")}, {"d/a": m("u1")}, ["d/a"], id="changed"),
        pytest.param({"d/a": "f1"}, {"d/a": ("u1", "f1")}, {"d/a": m("u2")}, ["d/a"], id="mirror replaced"),
        pytest.param({"d/a": "f1"}, {}, {}, [], id="no mirror yet: waits"),
        pytest.param({"d/a": "f1"}, {}, {"d/a": m("u1", deleting=True)}, [], id="terminating mirror: waits"),
    ],
)
def test_statuses_to_push(current, pushed, mirrors, expected):
    assert statuses_to_push(current, pushed, mirrors) == expected


def test_mirror_pod_body_is_what_node_restriction_accepts():
    static = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-n1",
            "namespace": "default",
            "uid": "abc",
            "creationTimestamp": None,
            "annotations": {"kubernetes.io/config.hash": "abc", "kubernetes.io/config.source": "file"},
        },
        "spec": {"containers": [{"name": "c", "image": "x"}]},
        "status": {"phase": "Running"},
    }
    body = build_mirror_pod(static, "n1", NODE_UID)
    assert body["metadata"]["annotations"][CONFIG_MIRROR] == "abc"
    assert body["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": NODE_UID, "controller": True}
    ]
    assert "uid" not in body["metadata"] and "status" not in body and body["spec"]["nodeName"] == "n1"
    assert build_status_patch({"phase": "Running"}, "u1") == {"metadata": {"uid": "u1"}, "status": {"phase": "Running"}}


def test_mirror_info_reads_a_listed_pod_and_ignores_others():
    pod = {
        "metadata": {
            "name": "a",
            "namespace": "d",
            "uid": "u",
            "deletionTimestamp": "2020-01-01T00:00:00Z",
            "annotations": {CONFIG_MIRROR: "h"},
            "ownerReferences": [{"kind": "Node", "uid": "n", "controller": True}],
        }
    }
    assert mirror_info(pod) == MirrorInfo(uid="u", hash="h", deleting=True, owner_uid="n")
    assert mirror_info({"metadata": {"name": "scheduled", "annotations": {}}}) is None


def test_a_mirror_references_no_config_map_or_secret_and_says_what_it_replaced():
    """The apiserver refuses mirror pods that reference ConfigMaps or Secrets, and never sees a Secret's data."""
    spec = {
        "volumes": [
            {"name": "conf", "configMap": {"name": "app"}},
            {"name": "creds", "secret": {"secretName": "db"}},
            {"name": "both", "projected": {"sources": [{"configMap": {"name": "app"}}]}},
            {"name": "scratch", "emptyDir": {}},
        ],
        "containers": [
            {
                "name": "c",
                "image": "x",
                "env": [
                    {"name": "A", "value": "1"},
                    {"name": "P", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pass"}}},
                ],
                "envFrom": [{"configMapRef": {"name": "app"}, "prefix": "X_"}],
            }
        ],
    }
    static = {"metadata": {"name": "web-n1", "annotations": {"kubernetes.io/config.hash": "abc"}}, "spec": spec}
    body = build_mirror_pod(static, "n1", NODE_UID)
    assert body["spec"]["volumes"] == [
        {"name": "conf", "emptyDir": {}},
        {"name": "creds", "emptyDir": {}},
        {"name": "both", "emptyDir": {}},
        {"name": "scratch", "emptyDir": {}},
    ]
    [c] = body["spec"]["containers"]
    assert c["env"] == [{"name": "A", "value": "1"}, {"name": "P"}] and "envFrom" not in c
    assert body["metadata"]["annotations"][MIRROR_REPLACED] == (
        "volume conf (configMap app); volume creds (secret db); volume both (projected); "
        "env c/P (secret db key pass); envFrom c (configMap app)"
    )
    assert "configMap" not in str(body["spec"]) and "secret" not in str(body["spec"]).lower()
    # The static pod itself is unchanged.
    assert static["spec"]["volumes"][0] == {"name": "conf", "configMap": {"name": "app"}}
