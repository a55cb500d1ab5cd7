"""Tests of make_static_pod: defaults, identity, API-object references and validation."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import pytest

from edgelet.api.annotations import CONFIG_HASH, CONFIG_SOURCE
from edgelet.api.decode import parse_manifests
from edgelet.api.defaults import apply_defaults, default_image_pull_policy
from edgelet.api.errors import ApiError, ValidationError
from edgelet.api.static import make_static_pod, static_pod_uid
from edgelet.api.types import Pod, Toleration

BASE = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web"},
    "spec": {"containers": [{"name": "app", "image": "nginx:1.25"}]},
}


def pod_from(mutate: Callable[[dict], object] | None = None) -> Pod:
    doc = msgspec.json.decode(msgspec.json.encode(BASE))
    if mutate is not None:
        mutate(doc)
    return msgspec.convert(doc, Pod)


def static(pod: Pod, node: str = "Edge-1", source: str = "file", origin: str = "/m/web.yaml") -> Pod:
    return make_static_pod(pod, node_name=node, source=source, origin=origin)  # type: ignore[arg-type]


def encoded(pod: Pod) -> dict:
    return msgspec.json.decode(msgspec.json.encode(pod))


@pytest.mark.parametrize(
    ("image", "policy"),
    [
        ("nginx", "Always"),
        ("nginx:latest", "Always"),
        ("nginx:1.25", "IfNotPresent"),
        ("registry.local:5000/nginx", "Always"),
        ("registry.local:5000/nginx:1.25", "IfNotPresent"),
        ("nginx@sha256:" + "a" * 64, "IfNotPresent"),
        ("nginx:latest@sha256:" + "a" * 64, "Always"),
        ("localhost:5000/a/b/c:v2", "IfNotPresent"),
        ("", "Always"),
    ],
)
def test_default_image_pull_policy(image: str, policy: str) -> None:
    assert default_image_pull_policy(image) == policy


def test_defaults_of_a_minimal_pod() -> None:
    out = encoded(static(pod_from()))
    spec = out["spec"]
    assert spec["restartPolicy"] == "Always"
    assert spec["dnsPolicy"] == "ClusterFirst"
    assert spec["terminationGracePeriodSeconds"] == 30
    assert spec["schedulerName"] == "default-scheduler"
    assert spec["enableServiceLinks"] is True
    assert spec["securityContext"] == {}
    assert spec["nodeName"] == "Edge-1"
    assert spec["tolerations"] == [{"operator": "Exists", "effect": "NoExecute"}]
    assert spec["containers"][0] == {
        "name": "app",
        "image": "nginx:1.25",
        "imagePullPolicy": "IfNotPresent",
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }
    assert out["status"] == {"phase": "Pending"}
    meta = out["metadata"]
    assert meta["name"] == "web-edge-1"
    assert meta["namespace"] == "default"
    assert meta["annotations"] == {
        CONFIG_SOURCE: "file",
        CONFIG_HASH: meta["uid"],
    }
    assert len(meta["uid"]) == 32


def _set(path: str, value: object) -> Callable[[dict], None]:
    def mutate(doc: dict) -> None:
        *parents, last = path.split(".")
        node = doc
        for part in parents:
            node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
        node[last] = value  # type: ignore[index]

    return mutate


@pytest.mark.parametrize(
    ("mutate", "check"),
    [
        pytest.param(
            _set("spec.containers.0.ports", [{"containerPort": 80}, {"containerPort": 53, "protocol": "UDP"}]),
            lambda s: (
                s["containers"][0]["ports"]
                == [{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 53, "protocol": "UDP"}]
            ),
            id="port-protocol",
        ),
        pytest.param(
            lambda d: (_set("spec.hostNetwork", True)(d), _set("spec.containers.0.ports", [{"containerPort": 80}])(d)),
            lambda s: s["containers"][0]["ports"] == [{"containerPort": 80, "hostPort": 80, "protocol": "TCP"}],
            id="host-network-host-port",
        ),
        pytest.param(
            _set("spec.volumes", [{"name": "a"}, {"name": "b", "hostPath": {"path": "/x"}}]),
            lambda s: s["volumes"] == [{"name": "a", "emptyDir": {}}, {"name": "b", "hostPath": {"path": "/x"}}],
            id="volume-without-source",
        ),
        pytest.param(
            _set("spec.initContainers", [{"name": "init", "image": "busybox"}]),
            lambda s: (
                s["initContainers"][0]["imagePullPolicy"] == "Always"
                and s["initContainers"][0]["terminationMessagePolicy"] == "File"
            ),
            id="init-containers",
        ),
        pytest.param(
            _set("spec.containers.0.resources", {"limits": {"cpu": 1, "memory": "1Gi"}, "requests": {"cpu": "100m"}}),
            lambda s: s["containers"][0]["resources"]["requests"] == {"cpu": "100m", "memory": "1Gi"},
            id="requests-from-limits",
        ),
        pytest.param(
            _set("spec.containers.0.readinessProbe", {"httpGet": {"port": 80}}),
            lambda s: (
                s["containers"][0]["readinessProbe"]
                == {
                    "httpGet": {"port": 80, "path": "/", "scheme": "HTTP"},
                    "timeoutSeconds": 1,
                    "periodSeconds": 10,
                    "successThreshold": 1,
                    "failureThreshold": 3,
                }
            ),
            id="probe",
        ),
        pytest.param(
            lambda d: (
                _set("spec.restartPolicy", "Never")(d),
                _set("spec.terminationGracePeriodSeconds", 0)(d),
                _set("spec.containers.0.imagePullPolicy", "Never")(d),
            ),
            lambda s: (
                s["restartPolicy"] == "Never"
                and s["terminationGracePeriodSeconds"] == 0
                and s["containers"][0]["imagePullPolicy"] == "Never"
            ),
            id="explicit-values-kept",
        ),
        pytest.param(
            _set("spec.tolerations", [{"operator": "Exists", "effect": "NoExecute"}]),
            lambda s: s["tolerations"] == [{"operator": "Exists", "effect": "NoExecute"}],
            id="toleration-not-duplicated",
        ),
    ],
)
def test_defaults(mutate: Callable[[dict], object], check: Callable[[dict], bool]) -> None:
    spec = encoded(static(pod_from(mutate)))["spec"]
    assert check(spec), spec


def test_http_pods_get_no_toleration_and_http_source() -> None:
    out = static(pod_from(), source="http", origin="http://cfg/pods")
    assert out.spec is not None and out.spec.tolerations is None
    assert out.metadata is not None and out.metadata.annotations is not None
    assert out.metadata.annotations[CONFIG_SOURCE] == "http"


def test_input_pod_is_not_modified() -> None:
    pod = pod_from()
    before = msgspec.json.encode(pod)
    static(pod)
    apply_defaults(pod)
    assert msgspec.json.encode(pod) == before


def test_explicit_uid_and_namespace_are_kept() -> None:
    out = static(pod_from(lambda d: d["metadata"].update(uid="my-uid", namespace="kube-system")))
    assert out.metadata is not None
    assert (out.metadata.uid, out.metadata.namespace) == ("my-uid", "kube-system")
    assert out.metadata.annotations is not None and out.metadata.annotations[CONFIG_HASH] == "my-uid"


def uid(pod: Pod, node: str = "edge", source: str = "file", origin: str = "/m/web.yaml") -> str:
    return static_pod_uid(pod, node_name=node, source=source, origin=origin)  # type: ignore[arg-type]


def test_uid_is_stable_for_equal_content() -> None:
    yaml_text = (
        b"apiVersion: v1\nkind: Pod\nmetadata: {name: web, labels: {b: '2', a: '1'}}\n"
        b"spec: {containers: [{name: app, image: 'nginx:1.25'}]}\n"
    )
    json_text = (
        b'{"kind": "Pod", "apiVersion": "v1", "spec": {"containers": [{"image": "nginx:1.25", '
        b'"name": "app"}]}, "metadata": {"labels": {"a": "1", "b": "2"}, "name": "web"}}'
    )
    [a] = parse_manifests(yaml_text, "x")
    [b] = parse_manifests(json_text, "x")
    assert uid(a) == uid(b) == uid(pod_from(lambda d: d["metadata"].update(labels={"a": "1", "b": "2"})))
    assert static(a).metadata.uid == static(b).metadata.uid  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda p: uid(pod_from(_set("spec.containers.0.image", "nginx:1.26"))), id="edit"),
        pytest.param(lambda p: uid(pod_from(_set("metadata.labels", {"x": "y"}))), id="label"),
        pytest.param(lambda p: uid(p, origin="/m/renamed.yaml"), id="rename"),
        pytest.param(lambda p: uid(p, node="other"), id="node"),
        pytest.param(lambda p: uid(p, source="http"), id="source"),
    ],
)
def test_uid_changes_with_content_node_and_origin(change: Callable[[Pod], str]) -> None:
    pod = pod_from()
    assert change(pod) != uid(pod)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        pytest.param(lambda d: d["metadata"].pop("name"), "$.metadata.name: name is needed for the pod", id="no-name"),
        pytest.param(
            _set("spec.serviceAccountName", "robot"),
            "$.spec.serviceAccountName: static pods may not reference ServiceAccount objects",
            id="service-account",
        ),
        pytest.param(
            _set("spec.volumes", [{"name": "c", "persistentVolumeClaim": {"claimName": "x"}}]),
            "$.spec.volumes[0].persistentVolumeClaim: static pods may not reference PersistentVolumeClaim objects",
            id="pvc-volume",
        ),
        pytest.param(
            _set(
                "spec.volumes",
                [
                    {
                        "name": "p",
                        "projected": {
                            "sources": [{"downwardAPI": {"items": []}}, {"serviceAccountToken": {"path": "t"}}]
                        },
                    }
                ],
            ),
            "$.spec.volumes[0].projected.sources[1].serviceAccountToken: "
            "static pods may not reference ServiceAccount objects",
            id="projected-token",
        ),
        pytest.param(
            _set("spec.volumes", [{"name": "c", "cephfs": {"monitors": ["m"], "secretRef": {"name": "s"}}}]),
            "$.spec.volumes[0].cephfs.secretRef: static pods may not reference Secret objects",
            id="volume-secret-ref",
        ),
        pytest.param(
            _set("spec.resourceClaims", [{"name": "gpu", "resourceClaimName": "g"}]),
            "$.spec.resourceClaims[0]: static pods may not reference ResourceClaim objects",
            id="resource-claims",
        ),
        pytest.param(
            _set("spec.imagePullSecrets", [{"name": "regcred"}]),
            "$.spec.imagePullSecrets[0]: static pods may not reference Secret objects",
            id="image-pull-secrets",
        ),
        pytest.param(_set("spec.containers.0.image", ""), "$.spec.containers[0].image: Required value", id="no-image"),
        pytest.param(
            _set("spec.containers", [{"name": "a", "image": "x"}, {"name": "a", "image": "y"}]),
            '$.spec.containers[1].name: Duplicate value: "a"',
            id="duplicate-container",
        ),
        pytest.param(
            lambda d: _set("spec.initContainers", [{"name": "app", "image": "x"}])(d),
            '$.spec.containers[0].name: Duplicate value: "app"',
            id="init-and-regular-share-name",
        ),
        pytest.param(
            _set("spec.containers.0.name", "App_1"),
            '$.spec.containers[0].name: Invalid value: "App_1": a lowercase RFC 1123 label must consist of lower '
            "case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. "
            "'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
            id="container-name",
        ),
        pytest.param(
            _set("spec.volumes", [{"name": "v"}, {"name": "v"}]),
            '$.spec.volumes[1].name: Duplicate value: "v"',
            id="duplicate-volume",
        ),
        pytest.param(
            _set("spec.containers.0.volumeMounts", [{"name": "nope", "mountPath": "/x"}]),
            '$.spec.containers[0].volumeMounts[0].name: Not found: "nope"',
            id="undeclared-volume",
        ),
        pytest.param(
            lambda d: (
                _set("spec.volumes", [{"name": "v"}])(d),
                _set("spec.containers.0.volumeMounts", [{"name": "v", "mountPath": "data"}])(d),
            ),
            '$.spec.containers[0].volumeMounts[0].mountPath: Invalid value: "data": must be an absolute path',
            id="relative-mount-path",
        ),
        pytest.param(
            _set("spec.containers.0.ports", [{"containerPort": 70000}]),
            "$.spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
            id="port-range",
        ),
        pytest.param(
            _set("spec.containers.0.ports", [{"containerPort": 80, "protocol": "HTTP"}]),
            '$.spec.containers[0].ports[0].protocol: Unsupported value: "HTTP": supported values: "SCTP", "TCP", "UDP"',
            id="port-protocol",
        ),
        pytest.param(
            _set("spec.restartPolicy", "Sometimes"),
            '$.spec.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never"',
            id="restart-policy",
        ),
        pytest.param(
            _set("spec.containers.0.imagePullPolicy", "Maybe"),
            '$.spec.containers[0].imagePullPolicy: Unsupported value: "Maybe": supported values: "Always", '
            '"IfNotPresent", "Never"',
            id="pull-policy",
        ),
        pytest.param(
            _set("spec.containers.0.restartPolicy", "Always"),
            "$.spec.containers[0].restartPolicy: Forbidden: may not be set for non-init containers",
            id="container-restart-policy",
        ),
        pytest.param(_set("spec.containers", []), "$.spec.containers: Required value", id="no-containers"),
        pytest.param(lambda d: d.pop("spec"), "$.spec: Required value", id="no-spec"),
    ],
)
def test_rejections(mutate: Callable[[dict], object], message: str) -> None:
    with pytest.raises(ValidationError) as info:
        static(pod_from(mutate))
    assert str(info.value) == message
    assert info.value.origin == "/m/web.yaml"
    assert [str(e) for e in info.value.errors] == [message]


def test_all_problems_are_listed() -> None:
    def mutate(doc: dict) -> None:
        doc["spec"]["serviceAccountName"] = "robot"
        doc["spec"]["containers"][0]["image"] = ""
        doc["spec"]["volumes"] = [{"name": "s", "persistentVolumeClaim": {"claimName": "x"}}]

    with pytest.raises(ValidationError) as info:
        static(pod_from(mutate))
    assert [e.path for e in info.value.errors] == [
        "$.spec.containers[0].image",
        "$.spec.serviceAccountName",
        "$.spec.volumes[0].persistentVolumeClaim",
    ]
    assert info.value.pod == "default/web-edge-1"
    assert isinstance(info.value, ApiError)


@pytest.mark.parametrize("account", [None, "", "default"])
def test_default_service_account_is_allowed(account: str | None) -> None:
    static(pod_from(_set("spec.serviceAccountName", account)))


def test_sidecar_init_container_and_downward_api_are_allowed() -> None:
    def mutate(doc: dict) -> None:
        doc["spec"]["initContainers"] = [{"name": "side", "image": "x", "restartPolicy": "Always"}]
        doc["spec"]["volumes"] = [
            {"name": "info", "downwardAPI": {"items": []}},
            {"name": "p", "projected": {"sources": [{"downwardAPI": {"items": []}}]}},
        ]
        doc["spec"]["containers"][0]["env"] = [{"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]

    out = static(pod_from(mutate))
    assert out.spec is not None and out.spec.containers[0].env is not None
    field_ref = out.spec.containers[0].env[0].value_from.field_ref  # type: ignore[union-attr]
    assert field_ref is not None and field_ref.api_version == "v1"


def test_static_toleration_constant_is_not_shared() -> None:
    a = static(pod_from())
    assert a.spec is not None and a.spec.tolerations is not None
    a.spec.tolerations[0].effect = "NoSchedule"
    b = static(pod_from())
    assert b.spec is not None and b.spec.tolerations == [Toleration(operator="Exists", effect="NoExecute")]


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(_set("spec.volumes", [{"name": "s", "secret": {"secretName": "x"}}]), id="secret-volume"),
        pytest.param(_set("spec.volumes", [{"name": "c", "configMap": {"name": "x"}}]), id="configmap-volume"),
        pytest.param(
            _set(
                "spec.volumes",
                [{"name": "p", "projected": {"sources": [{"configMap": {"name": "c"}}, {"secret": {"name": "s"}}]}}],
            ),
            id="projected",
        ),
        pytest.param(
            _set("spec.containers.0.env", [{"name": "B", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]),
            id="env-secret",
        ),
        pytest.param(
            _set("spec.containers.0.env", [{"name": "B", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]),
            id="env-configmap",
        ),
        pytest.param(
            _set(
                "spec.containers.0.envFrom",
                [{"configMapRef": {"name": "c"}, "prefix": "P_"}, {"secretRef": {"name": "s"}}],
            ),
            id="env-from",
        ),
    ],
)
def test_config_map_and_secret_references_are_admitted(mutate: Callable[[dict], object]) -> None:
    """ConfigMaps and Secrets come from the sources beside the pods: a static pod may use them."""
    static(pod_from(mutate))
