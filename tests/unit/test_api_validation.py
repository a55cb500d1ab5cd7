"""Table tests of validate_pod: one row per rule, with kubectl's exact message; and the name predicates."""

from __future__ import annotations

import copy
import json
from typing import Any

import msgspec
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgelet.api.decode import parse_manifests_with_warnings
from edgelet.api.defaults import apply_defaults
from edgelet.api.errors import ApiError, FieldError, ValidationError
from edgelet.api.static import make_static_pod
from edgelet.api.types import (
    Container,
    ContainerPort,
    ObjectMeta,
    Pod,
    PodSpec,
    ResourceRequirements,
    Volume,
    VolumeMount,
)
from edgelet.api.unknown import find_unknown_fields
from edgelet.api.validation import (
    is_dns1123_label,
    is_dns1123_subdomain,
    port_name_errors,
    qualified_name_errors,
    validate_pod,
)

BASE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web-node", "namespace": "default"},
    "spec": {"containers": [{"name": "app", "image": "busybox:1.36"}]},
}

LABEL_RE = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and "
    f"end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '{LABEL_RE}')"
)  # sic: apimachinery's RegexError puts two spaces before "or"
SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    r"'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
QNAME_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
QUANTITY_MSG = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
C0 = "$.spec.containers[0]"


def build(edits: dict[str, Any]) -> Pod:
    """BASE with `edits` applied ("spec.containers.0.ports": value; value None deletes), decoded and defaulted."""
    doc = copy.deepcopy(BASE)
    for dotted, value in edits.items():
        *parents, last = dotted.split(".")
        node: Any = doc
        for part in parents:
            node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
        if value is None:
            del node[last]
        else:
            node[last] = value
    return apply_defaults(msgspec.convert(doc, Pod))


def messages(edits: dict[str, Any]) -> list[str]:
    return [str(e) for e in validate_pod(build(edits))]


def ctr(**fields: Any) -> dict[str, Any]:
    return {"name": "app", "image": "busybox:1.36", **fields}


VALID = [
    pytest.param({}, id="minimal"),
    pytest.param(
        {
            "spec.hostNetwork": True,
            "spec.volumes": [{"name": "data"}],
            "spec.containers": [
                ctr(
                    ports=[
                        {"containerPort": 80, "name": "http"},
                        {"containerPort": 80, "hostPort": 80, "protocol": "UDP"},
                    ],
                    volumeMounts=[{"name": "data", "mountPath": "/data", "subPath": "a/b"}],
                )
            ],
        },
        id="host-network-ports-mounts",
    ),
    pytest.param(
        {
            "spec.containers": [
                ctr(
                    ports=[{"containerPort": 8080, "name": "web"}],
                    livenessProbe={"httpGet": {"port": "web"}, "successThreshold": 1},
                    readinessProbe={"tcpSocket": {"port": 8080}, "successThreshold": 3},
                    startupProbe={"grpc": {"port": 9090}},
                    lifecycle={"preStop": {"sleep": {"seconds": 5}}, "postStart": {"exec": {"command": ["true"]}}},
                    resources={
                        "limits": {"cpu": "500m", "memory": "128Mi", "example.com/dongle": 1},
                        "requests": {"cpu": 0.1, "memory": "64Mi"},
                    },
                    env=[
                        {"name": "my.var-1 x"},
                        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    ],
                )
            ]
        },
        id="probes-hooks-resources-env",
    ),
    pytest.param(
        {
            "spec.initContainers": [
                ctr(name="side", restartPolicy="Always", readinessProbe={"exec": {"command": ["true"]}})
            ]
        },
        id="sidecar-with-probe",
    ),
    pytest.param(
        {
            "spec.dnsPolicy": "None",
            "spec.dnsConfig": {"nameservers": ["10.0.0.1", "fd00::1"], "searches": ["svc.local.", "."]},
        },
        id="dns-none",
    ),
    pytest.param(
        {
            "metadata.labels": {"app.kubernetes.io/name": "web", "tier": ""},
            "metadata.annotations": {"Example.com/Note": "x"},
        },
        id="labels-annotations",
    ),
    pytest.param(
        {
            "spec.activeDeadlineSeconds": 1,
            "spec.terminationGracePeriodSeconds": 0,
            "spec.securityContext": {"runAsUser": 0, "fsGroup": 2147483647},
        },
        id="pod-numbers",
    ),
    pytest.param(
        {
            "spec.securityContext": {
                "seccompProfile": {"type": "Localhost", "localhostProfile": "p/a.json"},
                "appArmorProfile": {"type": "RuntimeDefault"},
            },
            "spec.containers.0.securityContext": {
                "seccompProfile": {"type": "Unconfined"},
                "appArmorProfile": {"type": "Localhost", "localhostProfile": "k8s-x"},
                "procMount": "Default",
            },
        },
        id="security-profiles",
    ),
]


@pytest.mark.parametrize("edits", VALID)
def test_valid_pods_have_no_errors(edits: dict[str, Any]) -> None:
    assert messages(edits) == []


REJECTED = [
    # --- metadata
    pytest.param(
        {"metadata.name": None},
        ["$.metadata.name: Required value: name or generateName is required"],
        id="name-required",
    ),
    pytest.param(
        {"metadata.name": "Bad_Name"},
        [f'$.metadata.name: Invalid value: "Bad_Name": {SUBDOMAIN_MSG}'],
        id="name-subdomain",
    ),
    pytest.param(
        {"metadata.name": "a" * 254},
        [f'$.metadata.name: Invalid value: "{"a" * 254}": must be no more than 253 characters'],
        id="name-too-long",
    ),
    pytest.param(
        {"metadata.namespace": "kube.system"},
        [f'$.metadata.namespace: Invalid value: "kube.system": {LABEL_MSG}'],
        id="namespace-label",
    ),
    pytest.param(
        {"metadata.labels": {"-x": "ok"}}, [f'$.metadata.labels: Invalid value: "-x": {QNAME_MSG}'], id="label-key"
    ),
    pytest.param(
        {"metadata.labels": {"x": "a" * 64}},
        [f'$.metadata.labels: Invalid value: "{"a" * 64}": must be no more than 63 characters'],
        id="label-value-length",
    ),
    pytest.param(
        {"metadata.annotations": {"a/b/c": "x"}},
        [
            '$.metadata.annotations: Invalid value: "a/b/c": a qualified name must consist of alphanumeric '
            "characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. "
            "'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
            "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' "
            "(e.g. 'example.com/MyName')"
        ],
        id="annotation-key",
    ),
    pytest.param(
        {"metadata.annotations": {"big": "x" * (256 * 1024)}},
        ["$.metadata.annotations: Too long: must have at most 262144 bytes"],
        id="annotations-size",
    ),
    # --- pod spec
    pytest.param({"spec.containers": []}, ["$.spec.containers: Required value"], id="no-containers"),
    pytest.param(
        {"spec.restartPolicy": "Sometimes"},
        ['$.spec.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never"'],
        id="restart-policy",
    ),
    pytest.param(
        {"spec.dnsPolicy": "Host"},
        [
            '$.spec.dnsPolicy: Unsupported value: "Host": supported values: "ClusterFirstWithHostNet", '
            '"ClusterFirst", "Default", "None"'
        ],
        id="dns-policy",
    ),
    pytest.param(
        {"spec.dnsPolicy": "None"},
        ["$.spec.dnsConfig: Required value: must provide `dnsConfig` when `dnsPolicy` is None"],
        id="dns-none-needs-config",
    ),
    pytest.param(
        {"spec.dnsPolicy": "None", "spec.dnsConfig": {"searches": ["x"]}},
        [
            "$.spec.dnsConfig.nameservers: Required value: must provide at least one DNS nameserver when "
            "`dnsPolicy` is None"
        ],
        id="dns-none-needs-nameserver",
    ),
    pytest.param(
        {"spec.dnsConfig": {"nameservers": ["1.1.1.1", "1.0.0.1", "8.8.8.8", "dns.local"]}},
        [
            "$.spec.dnsConfig.nameservers: Too many: 4: must have at most 3 items",
            '$.spec.dnsConfig.nameservers[3]: Invalid value: "dns.local": must be a valid IP address',
        ],
        id="dns-nameservers",
    ),
    pytest.param(
        {"spec.dnsConfig": {"searches": ["Bad_"]}},
        [f'$.spec.dnsConfig.searches[0]: Invalid value: "Bad_": {SUBDOMAIN_MSG}'],
        id="dns-search",
    ),
    pytest.param(
        {"spec.hostname": "my.host"}, [f'$.spec.hostname: Invalid value: "my.host": {LABEL_MSG}'], id="hostname"
    ),
    pytest.param(
        {"spec.terminationGracePeriodSeconds": -1},
        ["$.spec.terminationGracePeriodSeconds: Invalid value: -1: must be greater than or equal to 0"],
        id="grace-negative",
    ),
    pytest.param(
        {"spec.activeDeadlineSeconds": 0},
        ["$.spec.activeDeadlineSeconds: Invalid value: 0: must be between 1 and 2147483647, inclusive"],
        id="active-deadline",
    ),
    pytest.param(
        {"spec.securityContext": {"runAsUser": -1, "supplementalGroups": [1, -2]}},
        [
            "$.spec.securityContext.runAsUser: Invalid value: -1: must be between 0 and 2147483647, inclusive",
            "$.spec.securityContext.supplementalGroups[1]: Invalid value: -2: must be between 0 and "
            "2147483647, inclusive",
        ],
        id="pod-ids",
    ),
    # --- container names and images
    pytest.param(
        {"spec.containers": [ctr(), ctr(image="other")]},
        [f'{C0[:-3]}[1].name: Duplicate value: "app"'],
        id="duplicate-container",
    ),
    pytest.param(
        {"spec.initContainers": [ctr()]}, [f'{C0}.name: Duplicate value: "app"'], id="init-and-regular-share-name"
    ),
    pytest.param(
        {"spec.containers.0.name": "App_1"}, [f'{C0}.name: Invalid value: "App_1": {LABEL_MSG}'], id="container-name"
    ),
    pytest.param({"spec.containers.0.name": ""}, [f"{C0}.name: Required value"], id="container-name-empty"),
    pytest.param({"spec.containers.0.image": ""}, [f"{C0}.image: Required value"], id="image-required"),
    pytest.param(
        {"spec.containers.0.image": " busybox"},
        [f'{C0}.image: Invalid value: " busybox": must not have leading or trailing whitespace'],
        id="image-whitespace",
    ),
    pytest.param(
        {"spec.containers.0.imagePullPolicy": "Maybe"},
        [f'{C0}.imagePullPolicy: Unsupported value: "Maybe": supported values: "Always", "IfNotPresent", "Never"'],
        id="pull-policy",
    ),
    pytest.param(
        {"spec.containers.0.terminationMessagePolicy": "Log"},
        [f'{C0}.terminationMessagePolicy: Unsupported value: "Log": supported values: "File", "FallbackToLogsOnError"'],
        id="termination-message-policy",
    ),
    pytest.param(
        {"spec.containers.0.restartPolicy": "Always"},
        [f"{C0}.restartPolicy: Forbidden: may not be set for non-init containers"],
        id="container-restart-policy",
    ),
    pytest.param(
        {"spec.initContainers": [ctr(name="init", restartPolicy="Never")]},
        ['$.spec.initContainers[0].restartPolicy: Unsupported value: "Never": supported values: "Always"'],
        id="init-restart-policy",
    ),
    pytest.param(
        {
            "spec.initContainers": [
                ctr(
                    name="init",
                    livenessProbe={"exec": {"command": ["x"]}},
                    lifecycle={"preStop": {"exec": {"command": ["x"]}}},
                )
            ]
        },
        [
            "$.spec.initContainers[0].lifecycle: Forbidden: may not be set for init containers without "
            "restartPolicy=Always",
            "$.spec.initContainers[0].livenessProbe: Forbidden: may not be set for init containers without "
            "restartPolicy=Always",
        ],
        id="init-probes-and-hooks",
    ),
    # --- ports
    pytest.param(
        {"spec.containers.0.ports": [{"containerPort": 70000}]},
        [f"{C0}.ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive"],
        id="container-port-range",
    ),
    pytest.param(
        {"spec.containers.0.ports": [{"containerPort": 0}]},
        [f"{C0}.ports[0].containerPort: Required value"],
        id="container-port-zero",
    ),
    pytest.param(
        {"spec.containers.0.ports": [{"containerPort": 80, "hostPort": -1}]},
        [f"{C0}.ports[0].hostPort: Invalid value: -1: must be between 1 and 65535, inclusive"],
        id="host-port-range",
    ),
    pytest.param(
        {"spec.containers.0.ports": [{"containerPort": 80, "protocol": "HTTP"}]},
        [f'{C0}.ports[0].protocol: Unsupported value: "HTTP": supported values: "SCTP", "TCP", "UDP"'],
        id="protocol",
    ),
    pytest.param(
        {"spec.containers.0.ports": [{"containerPort": 80, "name": "web"}, {"containerPort": 81, "name": "web"}]},
        [f'{C0}.ports[1].name: Duplicate value: "web"'],
        id="duplicate-port-name",
    ),
    pytest.param(
        {"spec.containers.0.ports": [{"containerPort": 80, "name": "a-very-long-port-name"}]},
        [f'{C0}.ports[0].name: Invalid value: "a-very-long-port-name": must be no more than 15 characters'],
        id="port-name-length",
    ),
    pytest.param(
        {"spec.containers.0.ports": [{"containerPort": 80, "name": "Web_1"}]},
        [
            f'{C0}.ports[0].name: Invalid value: "Web_1": must contain only alpha-numeric characters (a-z, '
            "0-9), and hyphens (-)"
        ],
        id="port-name-charset",
    ),
    pytest.param(
        {"spec.containers.0.ports": [{"containerPort": 80, "name": "8080"}]},
        [f'{C0}.ports[0].name: Invalid value: "8080": must contain at least one letter (a-z)'],
        id="port-name-letter",
    ),
    pytest.param(
        {"spec.containers.0.ports": [{"containerPort": 80, "name": "a--b"}]},
        [f'{C0}.ports[0].name: Invalid value: "a--b": must not contain consecutive hyphens'],
        id="port-name-double-hyphen",
    ),
    pytest.param(
        {"spec.containers.0.ports": [{"containerPort": 80, "name": "-ab"}]},
        [f'{C0}.ports[0].name: Invalid value: "-ab": must not begin or end with a hyphen'],
        id="port-name-edge-hyphen",
    ),
    pytest.param(
        {"spec.hostNetwork": True, "spec.containers.0.ports": [{"containerPort": 80, "hostPort": 81}]},
        [f"{C0}.ports[0].containerPort: Invalid value: 80: must match `hostPort` when `hostNetwork` is true"],
        id="host-network-port",
    ),
    pytest.param(
        {
            "spec.containers": [
                ctr(ports=[{"containerPort": 80, "hostPort": 8080}]),
                ctr(name="b", ports=[{"containerPort": 81, "hostPort": 8080}]),
            ]
        },
        ['$.spec.containers[1].ports[0].hostPort: Duplicate value: "/TCP/8080"'],
        id="host-port-conflict",
    ),
    # --- volumes and mounts
    pytest.param(
        {"spec.volumes": [{"name": "Data"}]},
        [f'$.spec.volumes[0].name: Invalid value: "Data": {LABEL_MSG}'],
        id="volume-name",
    ),
    pytest.param(
        {"spec.volumes": [{"name": "v"}, {"name": "v"}]},
        ['$.spec.volumes[1].name: Duplicate value: "v"'],
        id="duplicate-volume",
    ),
    pytest.param(
        {"spec.volumes": [{"name": "v", "hostPath": {"path": "/x"}, "emptyDir": {}}]},
        ["$.spec.volumes[0].hostPath: Forbidden: may not specify more than 1 volume type"],
        id="two-volume-sources",
    ),
    pytest.param(
        {"spec.volumes": [{"name": "v", "hostPath": {"path": "/x/../etc", "type": "Dir"}}]},
        [
            "$.spec.volumes[0].hostPath.path: Invalid value: \"/x/../etc\": must not contain '..'",
            '$.spec.volumes[0].hostPath.type: Unsupported value: "Dir": supported values: "", "BlockDevice", '
            '"CharDevice", "Directory", "DirectoryOrCreate", "File", "FileOrCreate", "Socket"',
        ],
        id="host-path",
    ),
    pytest.param(
        {"spec.volumes": [{"name": "v", "emptyDir": {"sizeLimit": "1 GB"}}]},
        [f'$.spec.volumes[0].emptyDir.sizeLimit: Invalid value: "1 GB": {QUANTITY_MSG}'],
        id="empty-dir-size",
    ),
    pytest.param(
        {"spec.containers.0.volumeMounts": [{"name": "nope", "mountPath": "/x"}]},
        [f'{C0}.volumeMounts[0].name: Not found: "nope"'],
        id="undeclared-volume",
    ),
    pytest.param(
        {"spec.volumes": [{"name": "v"}], "spec.containers.0.volumeMounts": [{"name": "v", "mountPath": "d"}]},
        [f'{C0}.volumeMounts[0].mountPath: Invalid value: "d": must be an absolute path'],
        id="relative-mount-path",
    ),
    pytest.param(
        {
            "spec.volumes": [{"name": "v"}],
            "spec.containers.0.volumeMounts": [{"name": "v", "mountPath": "/d"}, {"name": "v", "mountPath": "/d"}],
        },
        [f'{C0}.volumeMounts[1].mountPath: Invalid value: "/d": must be unique'],
        id="duplicate-mount-path",
    ),
    pytest.param(
        {
            "spec.volumes": [{"name": "v"}],
            "spec.containers.0.volumeMounts": [
                {"name": "v", "mountPath": "/a", "subPath": "/abs"},
                {"name": "v", "mountPath": "/b", "subPath": "x/../.."},
            ],
        },
        [
            f'{C0}.volumeMounts[0].subPath: Invalid value: "/abs": must be a relative path',
            f"{C0}.volumeMounts[1].subPath: Invalid value: \"x/../..\": must not contain '..'",
        ],
        id="sub-path",
    ),
    # --- env
    pytest.param(
        {"spec.containers.0.env": [{"name": ""}, {"name": "A=B"}, {"name": "tab\t"}]},
        [
            f"{C0}.env[0].name: Required value",
            f'{C0}.env[1].name: Invalid value: "A=B": a valid environment variable name must consist only '
            "of printable ASCII characters other than '='",
            f'{C0}.env[2].name: Invalid value: "tab\\t": a valid environment variable name must consist only '
            "of printable ASCII characters other than '='",
        ],
        id="env-names",
    ),
    pytest.param(
        {
            "spec.containers.0.env": [
                {"name": "A", "valueFrom": {}},
                {"name": "B", "value": "x", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            ]
        },
        [
            f'{C0}.env[0].valueFrom: Invalid value: "": must specify one of: `fieldRef`, `resourceFieldRef`, '
            "`configMapKeyRef` or `secretKeyRef`",
            f'{C0}.env[1].valueFrom: Invalid value: "": may not be specified when `value` is not empty',
        ],
        id="env-value-from",
    ),
    # --- resources
    pytest.param(
        {"spec.containers.0.resources": {"limits": {"cpu": "1 core", "memory": "-1Mi"}}},
        [
            f'{C0}.resources.limits[cpu]: Invalid value: "1 core": {QUANTITY_MSG}',
            f'{C0}.resources.limits[memory]: Invalid value: "-1Mi": must be greater than or equal to 0',
        ],
        id="quantity-invalid-and-negative",
    ),
    pytest.param(
        {"spec.containers.0.resources": {"limits": {"cpu": "500m"}, "requests": {"cpu": 1}}},
        [f'{C0}.resources.requests: Invalid value: "1": must be less than or equal to cpu limit of 500m'],
        id="request-over-limit",
    ),
    pytest.param(
        {"spec.containers.0.resources": {"limits": {"example.com/gpu": 2}, "requests": {"example.com/gpu": 1}}},
        [f'{C0}.resources.requests: Invalid value: "1": must be equal to example.com/gpu limit of 2'],
        id="extended-resource-must-equal",
    ),
    pytest.param(
        {"spec.containers.0.resources": {"requests": {"gpu": 1}}},
        [f'{C0}.resources.requests[gpu]: Invalid value: "gpu": must be a standard resource for containers'],
        id="resource-name",
    ),
    # --- probes
    pytest.param(
        {"spec.containers.0.livenessProbe": {"initialDelaySeconds": 1}},
        [f"{C0}.livenessProbe: Required value: must specify a handler type"],
        id="probe-no-action",
    ),
    pytest.param(
        {"spec.containers.0.readinessProbe": {"exec": {"command": ["x"]}, "tcpSocket": {"port": 80}}},
        [f"{C0}.readinessProbe.tcpSocket: Forbidden: may not specify more than 1 handler type"],
        id="probe-two-actions",
    ),
    pytest.param(
        {"spec.containers.0.livenessProbe": {"exec": {"command": []}}},
        [f"{C0}.livenessProbe.exec.command: Required value"],
        id="probe-exec-command",
    ),
    pytest.param(
        {
            "spec.containers.0.livenessProbe": {"exec": {"command": ["x"]}, "successThreshold": 2},
            "spec.containers.0.startupProbe": {"exec": {"command": ["x"]}, "successThreshold": 3},
        },
        [
            f"{C0}.livenessProbe.successThreshold: Invalid value: 2: must be 1",
            f"{C0}.startupProbe.successThreshold: Invalid value: 3: must be 1",
        ],
        id="success-threshold",
    ),
    pytest.param(
        {
            "spec.containers.0.readinessProbe": {
                "exec": {"command": ["x"]},
                "initialDelaySeconds": -1,
                "periodSeconds": 0,
                "failureThreshold": -3,
            }
        },
        [
            f"{C0}.readinessProbe.initialDelaySeconds: Invalid value: -1: must be greater than or equal to 0",
            f"{C0}.readinessProbe.periodSeconds: Invalid value: 0: must be greater than zero",
            f"{C0}.readinessProbe.failureThreshold: Invalid value: -3: must be greater than or equal to 0",
        ],
        id="probe-numbers",
    ),
    pytest.param(
        {
            "spec.containers.0.readinessProbe": {"exec": {"command": ["x"]}, "terminationGracePeriodSeconds": 5},
            "spec.containers.0.livenessProbe": {"exec": {"command": ["x"]}, "terminationGracePeriodSeconds": 0},
        },
        [
            f"{C0}.livenessProbe.terminationGracePeriodSeconds: Invalid value: 0: must be greater than 0",
            f"{C0}.readinessProbe.terminationGracePeriodSeconds: Invalid value: 5: must not be set for readinessProbes",
        ],
        id="probe-grace",
    ),
    pytest.param(
        {"spec.containers.0.livenessProbe": {"httpGet": {"port": 0, "scheme": "FTP"}}},
        [
            f"{C0}.livenessProbe.httpGet.port: Invalid value: 0: must be between 1 and 65535, inclusive",
            f'{C0}.livenessProbe.httpGet.scheme: Unsupported value: "FTP": supported values: "HTTP", "HTTPS"',
        ],
        id="http-get-port-and-scheme",
    ),
    pytest.param(
        {
            "spec.containers.0.livenessProbe": {
                "httpGet": {"port": 80, "httpHeaders": [{"name": "X Bad", "value": "1"}]}
            }
        },
        [
            f'{C0}.livenessProbe.httpGet.httpHeaders: Invalid value: "X Bad": a valid HTTP header must consist '
            "of alphanumeric characters or '-' (e.g. 'X-Header', regex used for validation is "
            "'[-A-Za-z0-9]+')"
        ],
        id="http-header",
    ),
    pytest.param(
        {
            "spec.containers.0.ports": [{"containerPort": 80, "name": "web"}],
            "spec.containers.0.readinessProbe": {"tcpSocket": {"port": "wbe"}},
        },
        [
            f'{C0}.readinessProbe.tcpSocket.port: Invalid value: "wbe": must be the name of a port declared in '
            "this container's ports"
        ],
        id="named-port-undeclared",
    ),
    pytest.param(
        {"spec.containers.0.readinessProbe": {"tcpSocket": {"port": "Web"}}},
        [
            f'{C0}.readinessProbe.tcpSocket.port: Invalid value: "Web": must contain only alpha-numeric '
            "characters (a-z, 0-9), and hyphens (-)"
        ],
        id="named-port-invalid",
    ),
    pytest.param(
        {"spec.containers.0.startupProbe": {"grpc": {"port": 65536}}},
        [f"{C0}.startupProbe.grpc.port: Invalid value: 65536: must be between 1 and 65535, inclusive"],
        id="grpc-port",
    ),
    # --- lifecycle
    pytest.param(
        {"spec.containers.0.lifecycle": {"postStart": {}}},
        [f"{C0}.lifecycle.postStart: Required value: must specify a handler type"],
        id="hook-no-action",
    ),
    pytest.param(
        {"spec.containers.0.lifecycle": {"preStop": {"sleep": {"seconds": 1}, "exec": {"command": ["x"]}}}},
        [f"{C0}.lifecycle.preStop.sleep: Forbidden: may not specify more than 1 handler type"],
        id="hook-two-actions",
    ),
    pytest.param(
        {
            "spec.terminationGracePeriodSeconds": 10,
            "spec.containers.0.lifecycle": {"preStop": {"sleep": {"seconds": 11}}},
        },
        [
            f"{C0}.lifecycle.preStop.sleep: Invalid value: 11: must be non-negative and less than "
            "terminationGracePeriodSeconds (10)"
        ],
        id="hook-sleep",
    ),
    pytest.param(
        {"spec.containers.0.lifecycle": {"preStop": {"httpGet": {"port": "http"}}}},
        [
            f'{C0}.lifecycle.preStop.httpGet.port: Invalid value: "http": must be the name of a port declared '
            "in this container's ports"
        ],
        id="hook-named-port",
    ),
    # --- container security context
    pytest.param(
        {
            "spec.containers.0.securityContext": {
                "runAsGroup": 2**31,
                "privileged": True,
                "allowPrivilegeEscalation": False,
            }
        },
        [
            f"{C0}.securityContext.runAsGroup: Invalid value: 2147483648: must be between 0 and 2147483647, inclusive",
            f"{C0}.securityContext.allowPrivilegeEscalation: Forbidden: cannot set `allowPrivilegeEscalation` "
            "to false and `privileged` to true",
        ],
        id="container-security-context",
    ),
    # --- seccomp, AppArmor, procMount, user namespaces
    pytest.param(
        {"spec.securityContext": {"seccompProfile": {"type": "Localhost", "localhostProfile": "../x"}}},
        ["$.spec.securityContext.seccompProfile.localhostProfile: Invalid value: \"../x\": must not contain '..'"],
        id="seccomp-backstep",
    ),
    pytest.param(
        {"spec.containers.0.securityContext": {"seccompProfile": {"type": "Localhost"}}},
        [f"{C0}.securityContext.seccompProfile.localhostProfile: Required value: must be set when type is Localhost"],
        id="seccomp-localhost-name",
    ),
    pytest.param(
        {"spec.containers.0.securityContext": {"appArmorProfile": {"type": "Strict"}}},
        [
            f'{C0}.securityContext.appArmorProfile.type: Unsupported value: "Strict": supported values: '
            '"Localhost", "RuntimeDefault", "Unconfined"'
        ],
        id="apparmor-type",
    ),
    pytest.param(
        {"spec.containers.0.securityContext": {"appArmorProfile": {"type": "RuntimeDefault", "localhostProfile": "x"}}},
        [
            f'{C0}.securityContext.appArmorProfile.localhostProfile: Invalid value: "x": can only be set when '
            "type is Localhost"
        ],
        id="apparmor-name-without-localhost",
    ),
    pytest.param(
        {"spec.containers.0.securityContext": {"procMount": "Unmasked"}},
        [f'{C0}.securityContext.procMount: Invalid value: "Unmasked": `hostUsers` must be false to use `Unmasked`'],
        id="unmasked-without-user-namespace",
    ),
    pytest.param(
        {"spec.containers.0.securityContext": {"procMount": "Open"}},
        [f'{C0}.securityContext.procMount: Unsupported value: "Open": supported values: "Default", "Unmasked"'],
        id="procmount-value",
    ),
    pytest.param(
        {"spec.hostUsers": False, "spec.containers.0.securityContext": {"procMount": "Unmasked"}},
        [
            "$.spec.hostUsers: Forbidden: user namespaces (hostUsers: false) are not supported by edgelet: its "
            "runtime (runc 1.1) cannot give the rootfs and volumes idmapped mounts"
        ],
        id="host-users-false",
    ),
]


@pytest.mark.parametrize(("edits", "expected"), REJECTED)
def test_rejections(edits: dict[str, Any], expected: list[str]) -> None:
    assert messages(edits) == expected


def test_missing_spec() -> None:
    assert [str(e) for e in validate_pod(Pod(metadata=ObjectMeta(name="x")))] == ["$.spec: Required value"]


def test_every_problem_is_reported_in_field_order() -> None:
    errors = validate_pod(
        build(
            {
                "metadata.name": "Web",
                "spec.restartPolicy": "Sometimes",
                "spec.volumes": [{"name": "v"}, {"name": "v"}],
                "spec.containers": [ctr(image="", ports=[{"containerPort": 0}]), ctr()],
            }
        )
    )
    assert [e.path for e in errors] == [
        "$.metadata.name",
        "$.spec.volumes[1].name",
        "$.spec.containers[0].image",
        "$.spec.containers[0].ports[0].containerPort",
        "$.spec.containers[1].name",
        "$.spec.restartPolicy",
    ]


def test_undefaulted_volume_without_source_is_reported() -> None:
    # apply_defaults gives it an emptyDir; a pod validated without defaulting is told.
    target = Pod(
        metadata=ObjectMeta(name="p"),
        spec=PodSpec(
            containers=[
                Container(
                    name="a",
                    image="x",
                    volume_mounts=[VolumeMount(name="v", mount_path="/v")],
                    ports=[ContainerPort(container_port=80)],
                )
            ],
            volumes=[Volume(name="v")],
        ),
    )
    assert validate_pod(target) == [FieldError("$.spec.volumes[0]", "Required value: must specify a volume type")]


def test_unusual_quantities_are_errors_not_exceptions() -> None:
    # Decoding rejects non-finite numbers; a pod built in code may still carry them.
    resources = ResourceRequirements(limits={"cpu": float("inf"), "memory": float("nan")})
    target = Pod(
        metadata=ObjectMeta(name="p"), spec=PodSpec(containers=[Container(name="app", image="x", resources=resources)])
    )
    assert [str(e) for e in validate_pod(target)] == [
        f'{C0}.resources.limits[cpu]: Invalid value: "inf": {QUANTITY_MSG}',
        f'{C0}.resources.limits[memory]: Invalid value: "nan": {QUANTITY_MSG}',
    ]


def test_static_pod_name_with_node_is_validated_whole() -> None:
    pod = msgspec.convert({**BASE, "metadata": {"name": "a" * 250}}, Pod)
    with pytest.raises(ValidationError) as info:
        make_static_pod(pod, node_name="Edge-1", source="file", origin="/m/a.yaml")
    name = "a" * 250 + "-edge-1"
    assert [str(e) for e in info.value.errors] == [
        f'$.metadata.name: Invalid value: "{name}": must be no more than 253 characters'
    ]


def test_make_static_pod_lists_every_problem_in_one_error() -> None:
    doc = copy.deepcopy(BASE)
    doc["spec"]["containers"] = [ctr(ports=[{"containerPort": 70000}]), ctr()]
    doc["spec"]["serviceAccountName"] = "robot"
    with pytest.raises(ValidationError) as info:
        make_static_pod(msgspec.convert(doc, Pod), node_name="edge", source="http", origin="http://x/pods")
    assert str(info.value) == (
        "$.spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive; "
        '$.spec.containers[1].name: Duplicate value: "app"; '
        "$.spec.serviceAccountName: static pods may not reference ServiceAccount objects"
    )
    assert info.value.origin == "http://x/pods"


@pytest.mark.parametrize(
    ("value", "label", "subdomain"),
    [
        ("web", True, True),
        ("web-1.edge", False, True),
        ("-web", False, False),
        ("a" * 64, False, True),
        ("Web", False, False),
        ("", False, False),
        ("a" * 63, True, True),
        ("a." * 126 + "ab", False, False),
    ],
)
def test_dns_names(value: str, label: bool, subdomain: bool) -> None:
    assert is_dns1123_label(value) is label
    assert is_dns1123_subdomain(value) is subdomain


@pytest.mark.parametrize(
    ("name", "problems"),
    [("http", 0), ("h2c-web", 0), ("a" * 15, 0), ("a" * 16, 1), ("", 2), ("-", 2), ("a-", 1), ("A", 2)],
)
def test_port_names(name: str, problems: int) -> None:
    assert len(port_name_errors(name)) == problems


@pytest.mark.parametrize(
    ("key", "valid"),
    [
        ("app", True),
        ("example.com/app", True),
        ("App.v1_x", True),
        ("/app", False),
        ("example.com/", False),
        ("Example.com/app", False),
        ("a" * 64, False),
        ("a/b/c", False),
    ],
)
def test_qualified_names(key: str, valid: bool) -> None:
    assert (not qualified_name_errors(key)) is valid


# --- property: decoding then making a static pod fails only with ApiError ---------------------------
# Values are mostly of the right type (so most examples reach validation) and sometimes anything at all.

_JUNK = st.recursive(
    st.none() | st.booleans() | st.floats() | st.text(max_size=4) | st.integers(),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=4), inner, max_size=2),
    max_leaves=4,
)
_INT = st.integers(min_value=-3, max_value=70000) | st.sampled_from([2**31, -(2**63), 2**63 - 1])
_STR = st.sampled_from(
    ["", "/", "..", "a/../b", "/x", "Always", "None", "TCP", "web", "App", "a--b", "x=y", "-", "1.1.1.1"]
) | st.text(max_size=6)
_QTY = st.sampled_from(["100m", "1Gi", "-1", "1e3", "1 GB", ".5", "1E", "+1"]) | st.floats() | st.integers()


def _maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(*[strategy] * 12, _JUNK)


def _fields(
    required: dict[str, st.SearchStrategy[Any]] | None = None, **optional: st.SearchStrategy[Any]
) -> st.SearchStrategy[dict[str, Any]]:
    """An object with these fields (and maybe an unknown one, `zz`)."""
    return st.fixed_dictionaries(required or {}, optional={**optional, "zz": _JUNK})


def _obj(
    required: dict[str, st.SearchStrategy[Any]] | None = None, **optional: st.SearchStrategy[Any]
) -> st.SearchStrategy[Any]:
    """Usually such an object, sometimes anything."""
    return _maybe(_fields(required, **optional))


_PORT_REF = _maybe(st.integers(min_value=-1, max_value=70000) | _STR)
_HANDLER = dict(
    exec=_obj(command=_maybe(st.lists(_STR, max_size=2))),
    httpGet=_obj(
        {"port": _PORT_REF},
        path=_STR,
        scheme=_STR,
        httpHeaders=st.lists(_obj({"name": _STR, "value": _STR}), max_size=1),
    ),
    tcpSocket=_obj({"port": _PORT_REF}),
)
_PROBE = _obj(
    **_HANDLER, grpc=_obj({"port": _INT}), periodSeconds=_INT, successThreshold=_INT, terminationGracePeriodSeconds=_INT
)
_HOOK = _obj(**_HANDLER, sleep=_obj({"seconds": _INT}))
_CONTAINER = st.fixed_dictionaries(
    {"name": _STR, "image": _maybe(_STR)},
    optional={
        "ports": st.lists(_obj({"containerPort": _INT}, hostPort=_INT, name=_STR, protocol=_STR), max_size=3),
        "env": st.lists(
            _obj({"name": _STR}, value=_STR, valueFrom=_obj(fieldRef=_obj({"fieldPath": _STR}))), max_size=2
        ),
        "volumeMounts": st.lists(_obj({"name": _STR, "mountPath": _STR}, subPath=_STR, subPathExpr=_STR), max_size=2),
        "resources": _obj(
            limits=st.dictionaries(_STR | st.sampled_from(["cpu", "memory", "x/y"]), _QTY, max_size=2),
            requests=st.dictionaries(st.sampled_from(["cpu", "memory", "x/y"]), _QTY, max_size=2),
        ),
        "livenessProbe": _PROBE,
        "readinessProbe": _PROBE,
        "startupProbe": _PROBE,
        "lifecycle": _obj(preStop=_HOOK, postStart=_HOOK),
        "restartPolicy": _STR,
        "imagePullPolicy": _STR,
        "securityContext": _obj(runAsUser=_INT, privileged=_JUNK),
    },
)
_POD = st.fixed_dictionaries(
    {"apiVersion": st.just("v1"), "kind": st.just("Pod")},
    optional={
        "metadata": _fields(name=_STR, namespace=_STR, labels=st.dictionaries(_STR, _STR, max_size=2), uid=_STR),
        "spec": _fields(
            {"containers": st.lists(_CONTAINER, max_size=2)},
            initContainers=st.lists(_CONTAINER, max_size=1),
            volumes=st.lists(
                _obj(
                    {"name": _STR},
                    hostPath=_obj({"path": _STR}, type=_STR),
                    emptyDir=_obj(sizeLimit=_QTY),
                    secret=_obj(secretName=_STR),
                ),
                max_size=2,
            ),
            hostNetwork=st.booleans(),
            dnsPolicy=_STR,
            dnsConfig=_obj(nameservers=st.lists(_STR, max_size=4)),
            restartPolicy=_STR,
            terminationGracePeriodSeconds=_INT,
            activeDeadlineSeconds=_INT,
            securityContext=_obj(runAsUser=_INT, supplementalGroups=st.lists(_INT, max_size=2)),
        ),
    },
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=_POD, as_json=st.booleans())
def test_decoding_and_static_validation_raise_only_api_errors(doc: dict[str, Any], as_json: bool) -> None:
    data = json.dumps(doc).encode() if as_json else yaml.safe_dump(doc).encode()
    try:
        pods, _ = parse_manifests_with_warnings(data, "fuzz.yaml")
        for pod in pods:
            make_static_pod(pod, node_name="Edge-1", source="file", origin="fuzz.yaml")
    except ApiError:
        pass
    assert all(isinstance(path, str) for path in find_unknown_fields(doc))


def test_a_pod_level_pids_limit_is_accepted_and_nothing_else_new() -> None:
    from edgelet.api.decode import parse_manifests
    from edgelet.api.errors import ValidationError
    from edgelet.api.static import make_static_pod

    def admit(resources: str) -> Pod:
        text = f"""apiVersion: v1
kind: Pod
metadata: {{name: p}}
spec:
  resources: {resources}
  containers: [{{name: a, image: busybox}}]
"""
        (pod,) = parse_manifests(text.encode(), "p.yaml")
        return make_static_pod(pod, node_name="n", source="file", origin="p.yaml")

    pod = admit("{limits: {pids: 100}}")
    assert pod.spec.resources.limits == {"pids": 100}
    with pytest.raises(ValidationError, match=r"resources.requests\[pids\].*pids can only be limited"):
        admit("{limits: {pids: 100}, requests: {pids: 10}}")
    with pytest.raises(ValidationError, match="must be a standard resource for pods"):
        admit("{limits: {gpus: 1}}")
