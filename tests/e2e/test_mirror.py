"""The cluster sees the device: a real edgelet with real pods against a real kube-apiserver (Node,RBAC, NodeRestriction).

The node's identity is its `system:node:testnode` token; every assertion on
the cluster side is made with the admin's. Intervals are short (settings),
nothing is asserted on wall-clock time.
"""

from __future__ import annotations

import json
import os
import signal

import pytest

from edgelet.testing.apiserver import ADMIN_TOKEN, ApiServer
from tests.e2e.conftest import IMAGE, NODE, wait_for

pytestmark = [pytest.mark.privileged, pytest.mark.apiserver]

FAST = (
    "--node-lease-renew-interval",
    "1s",
    "--node-status-update-frequency",
    "1s",
    "--node-status-report-frequency",
    "3s",
    "--address",
    "127.0.0.1",
    "--port",
    "0",
)


def pod_yaml(name: str, command: str = "sleep 3600", *, label: str = "a") -> str:
    return f"""apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels: {{app: {name}, rev: {label}}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: {IMAGE}
    imagePullPolicy: Never
    command: ["sh", "-c", {command!r}]
"""


def mirrors(api: ApiServer) -> dict[str, dict]:
    items = api.get(f"/api/v1/pods?fieldSelector=spec.nodeName={NODE}")["items"]
    return {p["metadata"]["name"]: p for p in items}


def mirror(api: ApiServer, pod: str) -> dict | None:
    return mirrors(api).get(f"{pod}-{NODE}")


def running_ids(agent, pod: str) -> dict[str, int]:
    return {c["id"]: c["pid"] for c in agent.containers_of(pod) if c["status"] == "running"}


def start_agent(agent, api: ApiServer, *extra: str, token: str | None = None, cert: bool = False) -> None:
    path = agent.paths.run_dir.parent / "kubeconfig"
    cfg = api.cert_kubeconfig(path, node=NODE) if cert else api.kubeconfig(path, token=token or api.node_token(NODE))
    agent.start("--kubeconfig", str(cfg), *FAST, *extra)


def healthz(agent) -> tuple[int, str]:
    import httpx

    from edgelet.server.api import socket_path

    with httpx.Client(
        transport=httpx.HTTPTransport(uds=str(socket_path(agent.paths.run_dir))), base_url="http://edgelet", timeout=10
    ) as c:
        r = c.get("/healthz")
        return r.status_code, r.text


def node_state(agent) -> dict:
    return json.loads(agent.cli("node", "-o", "json"))


def test_registers_the_node_renews_the_lease_and_mirrors_pods(agent, cluster):
    agent.write_manifest("web.yaml", pod_yaml("web"))
    start_agent(
        agent,
        cluster,
        "--node-labels",
        "example.com/site=lab,node.kubernetes.io/role-edge=true",
        "--register-with-taints",
        "edge=true:NoSchedule",
    )
    node = wait_for(lambda: cluster.get(f"/api/v1/nodes/{NODE}"), timeout=60, what="the Node")
    labels = node["metadata"]["labels"]
    assert labels["kubernetes.io/hostname"] == NODE and labels["kubernetes.io/os"] == "linux"
    assert labels["example.com/site"] == "lab" and labels["kubernetes.io/arch"]
    assert {"key": "edge", "value": "true", "effect": "NoSchedule"} in node["spec"]["taints"]
    info = node["status"]["nodeInfo"]
    assert info["containerRuntimeVersion"].startswith("runc://") and info["containerRuntimeVersion"] != "runc://unknown"
    assert "edgelet" in info["kubeletVersion"] and info["kernelVersion"] and info["osImage"]
    assert {"cpu", "memory", "pods", "ephemeral-storage"} <= set(node["status"]["capacity"])
    ready = wait_for(
        lambda: [
            c
            for c in cluster.get(f"/api/v1/nodes/{NODE}")["status"]["conditions"]
            if c["type"] == "Ready" and c["status"] == "True"
        ],
        timeout=60,
        what="Node Ready",
    )
    assert ready
    conds = {c["type"]: c["status"] for c in cluster.get(f"/api/v1/nodes/{NODE}")["status"]["conditions"]}
    assert conds == {"Ready": "True", "MemoryPressure": "False", "DiskPressure": "False", "PIDPressure": "False"}

    lease_path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NODE}"
    first = wait_for(lambda: cluster.get(lease_path), timeout=30, what="the Lease")["spec"]["renewTime"]
    lease = wait_for(
        lambda: (l := cluster.get(lease_path)) and l["spec"]["renewTime"] != first and l,
        timeout=30,
        what="a lease renewal",
    )
    assert lease["spec"]["holderIdentity"] == NODE and lease["spec"]["leaseDurationSeconds"] == 40
    assert lease["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]

    m = wait_for(
        lambda: (p := mirror(cluster, "web")) and p.get("status", {}).get("phase") == "Running" and p,
        timeout=60,
        what="the mirror pod Running",
    )
    row = agent.pod("web")
    assert m["metadata"]["annotations"]["kubernetes.io/config.mirror"] == row["uid"]
    assert m["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node["metadata"]["uid"], "controller": True}
    ]
    local = row["pod"]["status"]
    assert [c["containerID"] for c in m["status"]["containerStatuses"]] == [
        c["containerID"] for c in local["containerStatuses"]
    ]
    assert "Running" in cluster.kubectl("get", "pods", "-o", "wide")

    # Events about the pod reach the cluster, pointing at the mirror.
    events = wait_for(
        lambda: [
            e
            for e in cluster.get("/api/v1/namespaces/default/events")["items"]
            if e["involvedObject"].get("uid") == m["metadata"]["uid"]
        ],
        timeout=30,
        what="events of the mirror pod",
    )
    assert {e["reason"] for e in events} & {"Started", "Created", "Pulled", "Scheduled"}

    state = node_state(agent)
    assert state["registered"] and state["link"] == "up" and state["last_lease_renewal"]
    # `edgelet node` shows the conditions the Node carries in the cluster (issue 23).
    api_conds = {
        c["type"]: (c["status"], c["reason"], c["message"])
        for c in cluster.get(f"/api/v1/nodes/{NODE}")["status"]["conditions"]
    }
    assert {c["type"]: (c["status"], c["reason"], c["message"]) for c in state["conditions"]} == api_conds
    text = agent.cli("node")
    assert "Registered:" in text and "yes" in text and "Link:" in text
    assert agent.stop() == 0


def test_mirror_follows_deletes_edits_and_removals_without_touching_containers(agent, cluster):
    agent.write_manifest("web.yaml", pod_yaml("web"))
    agent.write_manifest("db.yaml", pod_yaml("db"))
    start_agent(agent, cluster)
    first = wait_for(
        lambda: (p := mirror(cluster, "web")) and p.get("status", {}).get("phase") == "Running" and p,
        timeout=60,
        what="the web mirror",
    )
    wait_for(lambda: mirror(cluster, "db"), timeout=60, what="the db mirror")
    ids = running_ids(agent, "web")
    assert ids

    # An admin deletes the mirror: it goes Terminating, edgelet deletes it for good and creates it again.
    cluster.kubectl("delete", "pod", f"web-{NODE}", "--wait=false")
    again = wait_for(
        lambda: (
            (p := mirror(cluster, "web"))
            and p["metadata"]["uid"] != first["metadata"]["uid"]
            and not p["metadata"].get("deletionTimestamp")
            and p
        ),
        timeout=60,
        what="the mirror recreated",
    )
    assert again["metadata"]["annotations"]["kubernetes.io/config.mirror"] == agent.pod("web")["uid"]
    assert running_ids(agent, "web") == ids  # the containers were never touched

    # A manifest edit: a new static pod, a new mirror with the new hash.
    old_hash = agent.pod("db")["uid"]
    agent.write_manifest("db.yaml", pod_yaml("db", label="b"))
    wait_for(
        lambda: (
            (p := mirror(cluster, "db"))
            and p["metadata"]["labels"].get("rev") == "b"
            and p["metadata"]["annotations"]["kubernetes.io/config.mirror"] != old_hash
        ),
        timeout=90,
        what="the db mirror replaced",
    )

    # The static pod goes: so does its mirror.
    os.unlink(agent.manifests / "db.yaml")
    wait_for(lambda: mirror(cluster, "db") is None, timeout=90, what="the db mirror deleted")
    assert running_ids(agent, "web") == ids
    assert agent.stop() == 0


def test_outage_queues_then_resyncs_with_counts_right(agent, cluster):
    agent.write_manifest("web.yaml", pod_yaml("web"))
    start_agent(agent, cluster)
    wait_for(
        lambda: (p := mirror(cluster, "web")) and p.get("status", {}).get("phase") == "Running",
        timeout=60,
        what="the mirror Running",
    )
    cluster.stop()
    wait_for(lambda: node_state(agent)["link"] == "down", timeout=60, what="the link reported down")
    # A container restarts while the apiserver is away; nothing waits for the apiserver.
    app = [
        c for c in agent.containers_of("web") if (c.get("annotations") or {}).get("io.kubernetes.container.name") == "c"
    ]
    os.kill(app[0]["pid"], signal.SIGKILL)
    wait_for(
        lambda: (r := agent.pod("web")) and r["restarts"] == 1 and r["status"] == "Running",
        timeout=60,
        what="the local restart",
    )
    assert node_state(agent)["queue_depth"] >= 1
    # The agent is healthy without its apiserver: /healthz is about the pods' loop, never the link.
    assert healthz(agent) == (200, "ok")
    cluster.start()
    m = wait_for(
        lambda: (p := mirror(cluster, "web")) and p["status"]["containerStatuses"][0]["restartCount"] == 1 and p,
        timeout=90,
        what="the restart count in the cluster",
    )
    assert len([n for n in mirrors(cluster) if n.startswith("web")]) == 1
    state = wait_for(
        lambda: (s := node_state(agent)) and s["link"] == "up" and s["queue_depth"] == 0 and s,
        timeout=60,
        what="the queue drained",
    )
    assert state["resyncs"] >= 2
    assert m["status"]["containerStatuses"][0]["ready"]
    assert agent.stop() == 0


def test_an_empty_etcd_gets_everything_back(agent, cluster):
    agent.write_manifest("web.yaml", pod_yaml("web"))
    start_agent(agent, cluster)
    wait_for(lambda: mirror(cluster, "web"), timeout=60, what="the mirror")
    ids = running_ids(agent, "web")
    cluster.stop()
    cluster.start(fresh_etcd=True)
    wait_for(lambda: cluster.get(f"/api/v1/nodes/{NODE}"), timeout=90, what="the Node registered again")
    wait_for(
        lambda: (p := mirror(cluster, "web")) and p.get("status", {}).get("phase") == "Running",
        timeout=90,
        what="the mirror recreated with its status",
    )
    wait_for(
        lambda: cluster.get(f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NODE}"),
        timeout=60,
        what="the Lease recreated",
    )
    assert running_ids(agent, "web") == ids
    assert agent.stop() == 0


def test_an_admin_deleting_the_node_gets_it_registered_again(agent, cluster):
    agent.write_manifest("web.yaml", pod_yaml("web"))
    start_agent(agent, cluster, cert=True)  # a client certificate this time, inline in the kubeconfig
    first = wait_for(lambda: (p := mirror(cluster, "web")) and p, timeout=60, what="the mirror")
    node_uid = cluster.get(f"/api/v1/nodes/{NODE}")["metadata"]["uid"]
    cluster.kubectl("delete", "node", NODE)
    node = wait_for(
        lambda: (n := cluster.get(f"/api/v1/nodes/{NODE}")) and n["metadata"]["uid"] != node_uid and n,
        timeout=90,
        what="the Node registered again",
    )
    # Mirrors owned by the old Node are replaced by ones owned by the new one.
    wait_for(
        lambda: (
            (p := mirror(cluster, "web"))
            and p["metadata"]["uid"] != first["metadata"]["uid"]
            and p["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]
        ),
        timeout=90,
        what="the mirror owned by the new Node",
    )
    assert agent.stop() == 0


def test_bad_credentials_are_reported_clearly(agent, cluster):
    agent.write_manifest("web.yaml", pod_yaml("web"))
    start_agent(agent, cluster, token="not-a-valid-token")
    state = wait_for(
        lambda: (s := node_state(agent)) and s["link"] == "down" and "401" in s["last_error"] and s,
        timeout=60,
        what="a 401 reported",
    )
    assert "credentials" in state["last_error"]
    assert "401" in agent.cli("node")
    wait_for(
        lambda: (r := agent.pod("web")) and r["status"] == "Running", timeout=60, what="the pod running regardless"
    )
    assert "401" in agent.log()
    assert agent.stop() == 0


def test_another_nodes_identity_is_forbidden_and_said_so(agent, cluster):
    agent.write_manifest("web.yaml", pod_yaml("web"))
    start_agent(agent, cluster, token=cluster.node_token("othernode"))
    state = wait_for(
        lambda: (s := node_state(agent)) and "403" in s["last_error"] and s, timeout=60, what="a 403 reported"
    )
    assert "system:node:<name>" in state["last_error"] and state["link"] == "down"
    wait_for(
        lambda: (r := agent.pod("web")) and r["status"] == "Running", timeout=60, what="the pod running regardless"
    )
    assert agent.stop() == 0


def test_labels_a_node_may_not_set_stop_the_start(agent, cluster):
    cfg = cluster.kubeconfig(agent.paths.run_dir.parent / "kubeconfig", token=cluster.node_token(NODE))
    agent.start("--kubeconfig", str(cfg), "--node-labels", "node-role.kubernetes.io/worker=")
    assert agent.proc.wait(timeout=60) == 1
    agent.proc = None
    agent._log.close()
    assert "node-role.kubernetes.io/worker" in agent.log() and "NodeRestriction" in agent.log()


def test_a_missing_kubeconfig_stops_the_start_naming_it(agent, tmp_path):
    agent.start("--kubeconfig", str(tmp_path / "absent"))
    assert agent.proc.wait(timeout=60) == 1
    agent.proc = None
    agent._log.close()
    assert f"{tmp_path / 'absent'}: cannot read" in agent.log()


def test_kubectl_logs_of_a_mirror_pod_reaches_the_node_api(agent, cluster):
    """The apiserver connects to the advertised InternalIP and port with its kubelet client certificate
    (O=system:masters, signed by the cluster CA that edgelet trusts) and verifies edgelet's serving certificate."""
    import re
    import subprocess

    crt, key = cluster.kubelet_serving_cert(NODE)
    agent.write_manifest(
        "talk.yaml", pod_yaml("talk", "i=0; while true; do echo hello-$i; i=$((i+1)); sleep 0.5; done")
    )
    start_agent(
        agent,
        cluster,
        "--node-ip",
        "127.0.0.1",
        "--client-ca-file",
        str(cluster.ca_file),
        "--tls-cert-file",
        str(crt),
        "--tls-private-key-file",
        str(key),
    )
    port = int(wait_for(lambda: re.search(r"Node API listening.*?port=(\d+)", agent.log()), what="node API")[1])
    node = wait_for(
        lambda: (
            (n := cluster.get(f"/api/v1/nodes/{NODE}"))
            and n["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == port
            and n
        ),
        timeout=60,
        what="the Node advertising the node API's port",
    )
    assert {"type": "InternalIP", "address": "127.0.0.1"} in node["status"]["addresses"]
    wait_for(
        lambda: (p := mirror(cluster, "talk")) and p.get("status", {}).get("phase") == "Running",
        timeout=60,
        what="the mirror pod Running",
    )
    out = wait_for(
        lambda: (
            (o := cluster.kubectl("logs", f"talk-{NODE}", "--tail", "3"))
            and "hello-2" in cluster.kubectl("logs", f"talk-{NODE}")
            and o
        ),
        timeout=60,
        what="kubectl logs",
    )
    lines = out.splitlines()
    assert len(lines) == 3 and all(re.fullmatch(r"hello-\d+", x) for x in lines), out
    # kubectl logs -f streams through the apiserver as the container writes.
    cfg = cluster.kubeconfig(cluster.base / "kubeconfig-follow", token=ADMIN_TOKEN)
    follow = subprocess.Popen(
        [str(cluster.bin_dir / "kubectl"), f"--kubeconfig={cfg}", "logs", "-f", f"talk-{NODE}", "--tail", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        seen = [follow.stdout.readline().decode().strip() for _ in range(3)]
        numbers = [int(x.split("-")[1]) for x in seen]
        assert numbers == sorted(numbers) and len(set(numbers)) == 3, seen
    finally:
        follow.kill()
        follow.wait()
        follow.stdout.close()
        follow.stderr.close()
    assert agent.stop() == 0


def test_a_mirror_pod_keeps_its_runtime_class_name(agent, cluster, crun_ready):
    """Static pods have no RuntimeClass objects: the name is edgelet's handler, and the mirror carries it as the
    static pod says. The apiserver's RuntimeClass admission (on by default) refuses a pod whose RuntimeClass does
    not exist: that pod's mirror waits, named in the log with the fix, while the other pods' mirrors go on; once
    an administrator creates the RuntimeClass, the mirror is made."""
    text = pod_yaml("oncrun").replace("spec:\n", "spec:\n  runtimeClassName: crun\n", 1)
    agent.write_manifest("oncrun.yaml", text)
    agent.write_manifest("web.yaml", pod_yaml("web"))
    start_agent(agent, cluster)
    wait_for(
        lambda: (p := mirror(cluster, "web")) and p.get("status", {}).get("phase") == "Running" and p,
        timeout=60,
        what="the other pod's mirror Running",
    )
    wait_for(lambda: 'RuntimeClass \\"crun\\" not found' in agent.log(), timeout=30, what="the refusal in the log")
    assert "create a RuntimeClass of that name" in agent.log()
    assert agent.pod("oncrun")["runtime_handler"] == "crun" and agent.pod("oncrun")["status"] == "Running"
    assert node_state(agent)["link"] == "up"
    rc = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "crun"}, "handler": "crun"}
    cluster.request("POST", "/apis/node.k8s.io/v1/runtimeclasses", rc)
    try:
        m = wait_for(
            lambda: (p := mirror(cluster, "oncrun")) and p.get("status", {}).get("phase") == "Running" and p,
            timeout=90,
            what="the mirror pod Running",
        )
        assert m["spec"]["runtimeClassName"] == "crun"
        assert agent.stop() == 0
    finally:
        cluster.request("DELETE", "/apis/node.k8s.io/v1/runtimeclasses/crun")
