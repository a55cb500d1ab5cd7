"""Node and Lease bodies, NodeRestriction's label rules, the kubeconfig subset, and how client errors read."""

from __future__ import annotations

import asyncio
import base64
import ssl

import httpx
import pytest

from edgelet.mirror.client import KubeClient
from edgelet.mirror.errors import ApiStatusError, KubeconfigError, NodeLabelError, Unreachable
from edgelet.mirror.kubeconfig import parse_kubeconfig, read_token
from edgelet.mirror.node import (
    NodeFacts,
    Taint,
    advance_transitions,
    build_lease,
    build_node,
    build_node_status,
    go_arch,
    parse_runc_version,
    status_fingerprint,
    validate_node_labels,
)
from edgelet.settingsparse import is_allowed_node_label


@pytest.mark.parametrize(
    "key, allowed",
    [
        ("example.com/site", True),
        ("site", True),
        ("kubernetes.io/hostname", True),
        ("topology.kubernetes.io/zone", True),
        ("node.kubernetes.io/exclude-from-external-load-balancers", True),
        ("kubelet.kubernetes.io/x", True),
        ("node-role.kubernetes.io/master", False),
        ("kubernetes.io/role", False),
        ("foo.k8s.io/x", False),
        ("node-restriction.kubernetes.io/a", False),
    ],
)
def test_node_restriction_label_rules(key, allowed):
    assert is_allowed_node_label(key) is allowed


def test_refused_labels_are_named_at_start():
    with pytest.raises(NodeLabelError, match="node-role.kubernetes.io/worker"):
        validate_node_labels({"node-role.kubernetes.io/worker": "", "example.com/a": "b"})


FACTS = NodeFacts(
    name="n1",
    arch="arm64",
    kernel="6.1.0",
    os_image="Debian 12",
    runtime_version="runc://1.1.5",
    edgelet_version="0.1.0",
    cpus=4,
    memory_bytes=4 << 30,
    ephemeral_bytes=32 << 30,
    node_ip="10.0.0.5",
    images=((("busybox:1.36", "sha256:abc"), 1000),),
    labels=(("example.com/a", "b"),),
    taints=(Taint("edge", "true", "NoSchedule"),),
)


def test_node_body():
    node = build_node(FACTS)
    assert node["metadata"]["labels"]["kubernetes.io/arch"] == "arm64"
    assert node["metadata"]["labels"]["example.com/a"] == "b"
    assert node["spec"]["taints"] == [{"key": "edge", "value": "true", "effect": "NoSchedule"}]
    status = build_node_status(FACTS, ready=True, ready_message="ok", now=1_700_000_000)
    assert status["capacity"] == {"cpu": "4", "memory": "4194304Ki", "pods": "110", "ephemeral-storage": "33554432Ki"}
    assert status["nodeInfo"]["containerRuntimeVersion"] == "runc://1.1.5"
    assert "edgelet" in status["nodeInfo"]["kubeletVersion"]
    assert [c["type"] for c in status["conditions"]] == ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
    assert status["addresses"][0] == {"type": "InternalIP", "address": "10.0.0.5"}


def test_status_fingerprint_ignores_heartbeats_only():
    t = dict.fromkeys(("Ready", "MemoryPressure", "DiskPressure", "PIDPressure"), 1.0)
    a = build_node_status(FACTS, ready=True, ready_message="ok", now=1_700_000_000, transitions=t)
    b = build_node_status(FACTS, ready=True, ready_message="ok", now=1_700_000_100, transitions=t)
    c = build_node_status(FACTS, ready=False, ready_message="x", now=1_700_000_100, transitions=t)
    assert status_fingerprint(a) == status_fingerprint(b) != status_fingerprint(c)


def test_lease_body_is_owned_by_the_node():
    lease = build_lease("n1", "uid-1", duration=40, now=1_700_000_000.5, resource_version="7")
    assert lease["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "uid-1"}]
    assert lease["metadata"]["resourceVersion"] == "7"
    assert lease["spec"]["renewTime"] == "2023-11-14T22:13:20.500000Z"


def test_host_probes_parse():
    assert go_arch("aarch64") == "arm64" and go_arch("x86_64") == "amd64"
    assert parse_runc_version("runc version 1.1.5\ncommit: v1.1.5\n") == "runc://1.1.5"
    assert parse_runc_version("") == "runc://unknown"


def _kubeconfig(user: dict, cluster: dict | None = None) -> dict:
    return {
        "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "clusters": [
            {"name": "k", "cluster": cluster or {"server": "https://10.0.0.1:6443", "certificate-authority": "ca.crt"}}
        ],
        "users": [{"name": "u", "user": user}],
    }


def test_kubeconfig_subset(tmp_path):
    cfg = parse_kubeconfig(
        _kubeconfig({"client-certificate-data": base64.b64encode(b"CERT").decode(), "client-key": "k.pem"}),
        base_dir="/etc/edgelet",
    )
    assert cfg.server == "https://10.0.0.1:6443" and cfg.ca_file == "/etc/edgelet/ca.crt"
    assert cfg.cert_data == b"CERT" and cfg.key_file == "/etc/edgelet/k.pem"
    token = tmp_path / "token"
    token.write_text("t0k\n")
    cfg = parse_kubeconfig(_kubeconfig({"tokenFile": str(token)}), base_dir=str(tmp_path))
    assert read_token(cfg) == "t0k"


@pytest.mark.parametrize(
    "doc, message",
    [
        ({"current-context": "x", "contexts": []}, "context 'x' is not defined"),
        (_kubeconfig({"exec": {"command": "aws"}}), "exec credentials are not supported"),
        (_kubeconfig({"token": "t"}, {"server": "10.0.0.1"}), "server must be an https:// URL"),
        (_kubeconfig({"client-key-data": "%%%"}), "client-key-data: not valid base64"),
        ([], "expected a kubeconfig mapping"),
    ],
)
def test_kubeconfig_errors_say_what(doc, message):
    with pytest.raises(KubeconfigError, match=message):
        parse_kubeconfig(doc, path="/etc/edgelet/kubeconfig")


async def _request(handler) -> None:
    cfg = parse_kubeconfig(_kubeconfig({"token": "t"}, {"server": "https://api", "insecure-skip-tls-verify": True}))
    client = KubeClient(cfg, version="0.1.0", transport=httpx.MockTransport(handler))
    try:
        await client.request("GET", "/api/v1/nodes/n1")
    finally:
        await client.aclose()


def test_a_wrong_clock_is_named_as_the_cause():
    def handler(request):
        raise httpx.ConnectError("handshake failed") from ssl.SSLCertVerificationError(
            1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: certificate is not yet valid"
        )

    with pytest.raises(Unreachable, match="clock is probably behind") as info:
        asyncio.run(_request(handler))
    assert info.value.clock_skew


def test_a_refusal_carries_the_status_and_the_servers_message():
    def handler(request):
        assert request.headers["Authorization"] == "Bearer t" and request.headers["User-Agent"] == "edgelet/0.1.0"
        return httpx.Response(401, json={"kind": "Status", "reason": "Unauthorized", "message": "Unauthorized"})

    with pytest.raises(ApiStatusError, match="401 Unauthorized.*credentials") as info:
        asyncio.run(_request(handler))
    assert info.value.is_auth


def test_pressure_conditions_come_from_the_eviction_manager() -> None:
    import dataclasses

    facts = dataclasses.replace(FACTS, pressure=frozenset({"DiskPressure"}))
    conds = {c["type"]: c for c in build_node_status(facts, ready=True, ready_message="ok", now=1.0)["conditions"]}
    assert (conds["DiskPressure"]["status"], conds["DiskPressure"]["reason"]) == ("True", "KubeletHasDiskPressure")
    assert (conds["MemoryPressure"]["status"], conds["PIDPressure"]["status"]) == ("False", "False")


def test_conditions_the_app_adds_follow_the_others() -> None:
    """Self-update's trial condition reaches the apiserver's Node as data in the facts."""
    import dataclasses

    trial = {"type": "EdgeletUpdateTrial", "status": "True", "reason": "TrialRunning", "message": "edgelet 1001"}
    facts = dataclasses.replace(FACTS, extra_conditions=(tuple(trial.items()),))
    conds = build_node_status(facts, ready=True, ready_message="ok", now=1.0)["conditions"]
    assert conds[-1]["type"] == "EdgeletUpdateTrial" and conds[-1]["reason"] == "TrialRunning"
    assert conds[-1]["lastTransitionTime"] == "1970-01-01T00:00:01Z"
    assert [c["type"] for c in build_node_status(FACTS, ready=True, ready_message="ok", now=1.0)["conditions"]][
        -1
    ] == "Ready"


@pytest.mark.parametrize(
    "pressure, ready, expected",
    [
        (
            frozenset(),
            True,
            [
                ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                ("PIDPressure", "False", "KubeletHasSufficientPID"),
                ("Ready", "True", "KubeletReady"),
            ],
        ),
        (
            frozenset({"MemoryPressure", "PIDPressure"}),
            False,
            [
                ("MemoryPressure", "True", "KubeletHasInsufficientMemory"),
                ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                ("PIDPressure", "True", "KubeletHasInsufficientPID"),
                ("Ready", "False", "KubeletNotReady"),
            ],
        ),
    ],
)
def test_node_conditions_are_the_ones_the_node_status_reports(pressure, ready, expected) -> None:
    """`edgelet node` shows what the mirror's Node status carries, less the times (issue 23)."""
    import dataclasses

    from edgelet.mirror.node import node_conditions

    conds = node_conditions(pressure, ready=ready, ready_message="why")
    assert [(c["type"], c["status"], c["reason"]) for c in conds] == expected
    assert conds[-1]["message"] == "why"
    status = build_node_status(dataclasses.replace(FACTS, pressure=pressure), ready=ready, ready_message="why", now=1.0)
    assert [{k: v for k, v in c.items() if not k.endswith("Time")} for c in status["conditions"]] == conds


def test_allocatable_is_capacity_less_the_reservations() -> None:
    from edgelet.mirror.node import build_node_status

    f = NodeFacts(
        name="n",
        cpus=4,
        memory_bytes=4 << 30,
        ephemeral_bytes=100 << 30,
        reserved=(("cpu", 500), ("ephemeral-storage", 10 << 30), ("memory", 768 << 20)),
    )
    status = build_node_status(f, ready=True, ready_message="", now=0.0)
    assert status["capacity"] == {
        "cpu": "4",
        "memory": f"{4 << 20}Ki",
        "pods": "110",
        "ephemeral-storage": f"{100 << 20}Ki",
    }
    assert status["allocatable"] == {
        "cpu": "3500m",
        "memory": f"{(4096 - 768) << 10}Ki",
        "pods": "110",
        "ephemeral-storage": f"{90 << 20}Ki",
    }
    # Nothing reserved: allocatable is the capacity.
    plain = build_node_status(NodeFacts(name="n", cpus=2, memory_bytes=1 << 30), ready=True, ready_message="", now=0.0)
    assert plain["allocatable"] == plain["capacity"]


def test_allocatable_leaves_out_the_hard_eviction_thresholds_as_kubelet() -> None:
    from edgelet.eviction.thresholds import hard_reserved
    from edgelet.mirror.node import node_allocatable, with_reservations

    f = NodeFacts(name="n", cpus=2, memory_bytes=4 << 30, ephemeral_bytes=100 << 30)
    hard = hard_reserved(
        "memory.available<100Mi,nodefs.available<10%,pid.available<5%",
        memory_bytes=f.memory_bytes,
        disk_bytes=f.ephemeral_bytes,
    )
    assert hard == {"memory": 100 << 20, "ephemeral-storage": 10 << 30}
    f = with_reservations(f, {"memory": 256 << 20}, hard)
    assert dict(f.reserved) == {"memory": 356 << 20, "ephemeral-storage": 10 << 30}
    assert node_allocatable(f)["memory"] == f"{(4096 - 356) << 10}Ki"
    assert node_allocatable(f)["ephemeral-storage"] == f"{90 << 20}Ki"
    assert with_reservations(f, {}, hard_reserved("", memory_bytes=1, disk_bytes=1)).reserved == ()
    assert hard_reserved(None, memory_bytes=1, disk_bytes=1) == {}


@pytest.mark.parametrize(
    "transitions, last, now_status, want",
    [
        # first sight: every type stamped now
        ({}, {}, {"Ready": True, "MemoryPressure": False}, {"Ready": 5.0, "MemoryPressure": 5.0}),
        # nothing changed: times kept although the heartbeat moves
        (
            {"Ready": 1.0, "MemoryPressure": 1.0},
            {"Ready": True, "MemoryPressure": False},
            {"Ready": True, "MemoryPressure": False},
            {"Ready": 1.0, "MemoryPressure": 1.0},
        ),
        # pressure comes: only its time moves
        (
            {"Ready": 1.0, "MemoryPressure": 1.0},
            {"Ready": True, "MemoryPressure": False},
            {"Ready": True, "MemoryPressure": True},
            {"Ready": 1.0, "MemoryPressure": 5.0},
        ),
        # pressure goes and Ready flips
        (
            {"Ready": 1.0, "DiskPressure": 2.0},
            {"Ready": True, "DiskPressure": True},
            {"Ready": False, "DiskPressure": False},
            {"Ready": 5.0, "DiskPressure": 5.0},
        ),
    ],
)
def test_advance_transitions(transitions, last, now_status, want):
    got, seen = advance_transitions(transitions, last, now_status, 5.0)
    assert got == want and seen == now_status
