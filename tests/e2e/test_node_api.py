"""The node API on TCP against a live agent with a real pod and real TLS: who gets in (an auth table), and what the
endpoints answer (PodList against the Kubernetes OpenAPI schema, Summary field by field, metrics through
prometheus_client's parser, container logs with kubelet's query parameters)."""

from __future__ import annotations

import json
import re
import ssl
from pathlib import Path

import httpx
import pytest

from edgelet.testing.apiserver import make_ca, make_cert
from tests.e2e.conftest import wait_for
from tests.e2e.test_server import pod_yaml

pytestmark = pytest.mark.privileged

GRANTS = "group:readers=pods/stats/metrics,group:monitoring=pods/stats/metrics"
TOKENS = 'ro-token,metrics-reader,"monitoring"\nfull-token,ops,"system:masters,ops"\n'


@pytest.fixture
def pki(tmp_path):
    d = tmp_path / "pki-test"
    d.mkdir()
    ca = make_ca(d, "ca")
    wrong = make_ca(d, "wrongca")
    certs = {
        "admin": make_cert(d, "admin", ca, "/O=system:masters/CN=admin"),
        "reader": make_cert(d, "reader", ca, "/O=readers/CN=reader"),
        "nobody": make_cert(d, "nobody", ca, "/CN=nobody"),
        "wrong-ca": make_cert(d, "wrong", wrong, "/O=system:masters/CN=intruder"),
    }
    tokens = d / "tokens.csv"
    tokens.write_text(TOKENS)
    return ca[0], certs, tokens


def start(agent, pki) -> int:
    ca, _, tokens = pki
    agent.start(
        "--address",
        "127.0.0.1",
        "--port",
        "0",
        "--client-ca-file",
        str(ca),
        "--api-token-file",
        str(tokens),
        "--node-api-grants",
        GRANTS,
    )
    m = wait_for(lambda: re.search(r"Node API listening.*?port=(\d+)", agent.log()), what="node API listening")
    return int(m.group(1))


def client(agent, port: int, cert=None, token=None) -> httpx.Client:
    server_cert = agent.paths.root_dir / "pki" / "edgelet.crt"
    ctx = ssl.create_default_context(cafile=str(server_cert))  # the self-signed pair, with SAN 127.0.0.1
    if cert is not None:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=f"https://127.0.0.1:{port}", verify=ctx, headers=headers, timeout=30)


ENDPOINTS = {
    "healthz": "/healthz",
    "pods": "/pods",
    "stats": "/stats/summary",
    "metrics": "/metrics/resource",
    "logs": "/containerLogs/default/talk-testnode/main?tailLines=1",
}
# credential -> the status of each endpoint (in ENDPOINTS order); "tls" = the handshake is refused.
EXPECTED = {
    "none": (401, 401, 401, 401, 401),
    "wrong-ca": ("tls",) * 5,
    "nobody": (403, 403, 403, 403, 403),
    "reader": (403, 200, 200, 200, 403),
    "admin": (200, 200, 200, 200, 200),
    "ro-token": (403, 200, 200, 200, 403),
    "full-token": (200, 200, 200, 200, 200),
    "bad-token": (401, 401, 401, 401, 401),
}


def test_auth_table(agent, pki):
    port = start(agent, pki)
    agent.write_manifest("talk.yaml", pod_yaml("talk", "echo one; echo two; sleep 3600"))
    _, certs, _ = pki
    with client(agent, port, certs["admin"]) as c:
        wait_for(lambda: c.get(ENDPOINTS["logs"]).text == "two\n", timeout=60, what="the pod's log")
    fingerprint = re.search(r"sha256=([0-9A-F:]+)", agent.log())
    assert fingerprint, "the self-signed certificate's fingerprint is logged"
    key = agent.paths.root_dir / "pki" / "edgelet.key"
    assert key.stat().st_mode & 0o777 == 0o600
    got = {}
    for cred in EXPECTED:
        cert = certs.get(cred)
        token = {"ro-token": "ro-token", "full-token": "full-token", "bad-token": "nope"}.get(cred)
        row = []
        with client(agent, port, cert, token) as c:
            for path in ENDPOINTS.values():
                try:
                    row.append(c.get(path).status_code)
                except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError):
                    # TLS 1.3: the client finishes its side before the server refuses its certificate.
                    row.append("tls")
        got[cred] = tuple(row)
    assert got == EXPECTED
    with client(agent, port) as c:
        r = c.get("/pods")
        assert r.json()["kind"] == "Status" and r.json()["code"] == 401
    with client(agent, port, certs["nobody"]) as c:
        assert "user=nobody" in c.get("/stats/summary").json()["message"]
        # Plain HTTP on the TLS port gets nothing.
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).raise_for_status()


def _strict(node):
    """The OpenAPI document with `additionalProperties: false` on every object that lists its properties."""
    if isinstance(node, dict):
        out = {k: _strict(v) for k, v in node.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [_strict(v) for v in node]
    return node


def validate_pod_list(body: dict, specs_dir: Path) -> None:
    import jsonschema
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT4

    doc_path = specs_dir / "kubernetes" / "api__v1_openapi.json"
    if not doc_path.is_file():
        pytest.skip(f"no Kubernetes OpenAPI document under {specs_dir}")
    doc = _strict(json.loads(doc_path.read_text()))
    registry = Registry().with_resource("urn:k8s", Resource.from_contents(doc, default_specification=DRAFT4))
    schema = {"$ref": "urn:k8s#/components/schemas/io.k8s.api.core.v1.PodList"}
    jsonschema.Draft4Validator(schema, registry=registry).validate(body)


def test_endpoints(agent, pki, specs_dir):
    from prometheus_client.parser import text_string_to_metric_families

    port = start(agent, pki)
    agent.write_manifest("talk.yaml", pod_yaml("talk", "i=0; while true; do echo line-$i; i=$((i+1)); sleep 0.3; done"))
    _, certs, _ = pki
    with client(agent, port, token="full-token") as c:
        wait_for(
            lambda: "line-3" in c.get("/containerLogs/default/talk-testnode/main").text,
            timeout=60,
            what="the pod's log",
        )
        pods = c.get("/pods").json()
        assert [p["metadata"]["name"] for p in pods["items"]] == ["talk-testnode"]
        validate_pod_list(pods, specs_dir)
        running = c.get("/runningpods/").json()
        assert running["kind"] == "PodList"
        (rp,) = running["items"]
        assert rp["metadata"]["name"] == "talk-testnode" and rp["spec"]["containers"][0]["name"] == "main"
        validate_pod_list(running, specs_dir)

        # Summary, field by field; a second sample gives the CPU rates.
        first = c.get("/stats/summary").json()
        summary = wait_for(
            lambda: (
                (s := c.get("/stats/summary").json())
                and s["pods"]
                and "usageNanoCores" in s["pods"][0]["containers"][0].get("cpu", {})
                and s
            ),
            timeout=30,
            interval=0.6,
            what="a second CPU sample",
        )
        node = summary["node"]
        assert node["nodeName"] == "testnode"
        assert node["cpu"]["usageCoreNanoSeconds"] >= first["node"]["cpu"]["usageCoreNanoSeconds"] > 0
        assert 0 < node["memory"]["workingSetBytes"] <= node["memory"]["usageBytes"]
        assert node["memory"]["availableBytes"] > 0
        assert node["fs"]["capacityBytes"] >= node["fs"]["availableBytes"] > 0
        assert node["runtime"]["imageFs"]["capacityBytes"] > 0
        assert node["rlimit"]["maxpid"] > node["rlimit"]["curproc"] > 0
        (pod,) = summary["pods"]
        assert pod["podRef"]["name"] == "talk-testnode" and pod["podRef"]["namespace"] == "default"
        assert pod["podRef"]["uid"] == pods["items"][0]["metadata"]["uid"]
        assert pod["cpu"]["usageCoreNanoSeconds"] > 0
        assert 0 < pod["memory"]["workingSetBytes"] <= pod["memory"]["usageBytes"]
        assert pod["process_stats"]["process_count"] >= 2  # pause, sh (and sleep)
        (ctr,) = pod["containers"]
        assert ctr["name"] == "main" and ctr["startTime"].endswith("Z")
        assert 0 < ctr["cpu"]["usageCoreNanoSeconds"] <= pod["cpu"]["usageCoreNanoSeconds"]
        assert ctr["cpu"]["usageNanoCores"] >= 0
        assert 0 < ctr["memory"]["workingSetBytes"] <= pod["memory"]["workingSetBytes"]
        assert ctr["memory"]["rssBytes"] > 0
        assert ctr["logs"]["usedBytes"] > 0 and ctr["rootfs"]["usedBytes"] >= 0
        assert pod["ephemeral-storage"]["usedBytes"] >= ctr["logs"]["usedBytes"]
        if "network" in pod:  # a pod netns with only loopback has no interface to report
            assert all(i["name"] != "lo" for i in pod["network"]["interfaces"])

        # Metrics, through prometheus_client's own parser.
        fams = {f.name: f for f in text_string_to_metric_families(c.get("/metrics").text)}
        assert fams["kubelet_running_pods"].samples[0].value == 1
        assert "kubelet_runtime_operations" in fams and "kubelet_pod_start_duration_seconds" in fams
        res = {f.name: f for f in text_string_to_metric_families(c.get("/metrics/resource").text)}
        (cpu,) = [s for s in res["container_cpu_usage_seconds"].samples]
        assert cpu.labels == {"container": "main", "namespace": "default", "pod": "talk-testnode"} and cpu.value > 0
        assert res["node_memory_working_set_bytes"].samples[0].value > 0
        assert res["pod_memory_working_set_bytes"].samples[0].labels == {"namespace": "default", "pod": "talk-testnode"}
        cad = {f.name: f for f in text_string_to_metric_families(c.get("/metrics/cadvisor").text)}
        ws = {s.labels["container"]: s for s in cad["container_memory_working_set_bytes"].samples}
        assert ws["main"].labels["pod"] == "talk-testnode" and ws["main"].labels["namespace"] == "default"
        assert ws["main"].value > 0 and ws[""].value >= ws["main"].value

        # Logs with kubelet's parameters.
        base = "/containerLogs/default/talk-testnode/main"
        assert len(c.get(base + "?tailLines=2").text.splitlines()) == 2
        stamped = c.get(base + "?tailLines=1&timestamps=true").text
        assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+(Z|[+-]\d\d:\d\d) line-\d+\n$", stamped), stamped
        assert c.get(base + "?limitBytes=5").text == "line-"
        # The pod writes on: the whole log, read after the recent lines, holds them in a row (and may have more).
        recent = c.get(base + "?sinceSeconds=1").text.splitlines()
        everything = c.get(base).text.splitlines()
        assert 0 < len(recent) < len(everything), (recent, everything)
        first = everything.index(recent[0])
        assert first > 0 and everything[first : first + len(recent)] == recent
        assert c.get(base + "?sinceSeconds=0").status_code == 400
        assert c.get(base + "?previous=true").status_code == 400
        with c.stream("GET", base + "?follow=true&tailLines=0") as r:
            assert r.status_code == 200
            seen = b""
            for chunk in r.iter_bytes():
                seen += chunk
                if seen.count(b"\n") >= 2:
                    break
        numbers = [int(x.split("-")[1]) for x in seen.decode().split()]
        assert numbers == sorted(numbers) and numbers[0] > int(everything[-1].split("-")[1]) - 1
        assert c.get("/nope").status_code == 404
        assert c.post("/pods").status_code == 405

    # The CLI shows the same figures through the local socket.
    top = agent.cli("top").splitlines()
    assert top[0].split() == ["NAMESPACE", "NAME", "CPU(cores)", "MEMORY(bytes)"]
    assert re.fullmatch(r"default\s+talk-testnode\s+\d+m\s+\d+Mi", top[1]), top
    containers = agent.cli("top", "containers").splitlines()
    assert re.fullmatch(r"default\s+talk-testnode\s+main\s+\d+m\s+\d+Mi", containers[1]), containers
    node = agent.cli("node")
    for needle in ("Node:", "Capacity:", "Allocatable:", "Usage:", "pods:", "1 running", "Apiserver:"):
        assert needle in node, node
