"""A pod using a ConfigMap and a Secret mirrored to a real kube-apiserver (NodeRestriction, ServiceAccount
admission): the apiserver accepts the mirror, which references neither and holds no byte of the Secret."""

from __future__ import annotations

import json

import pytest

from tests.e2e.conftest import wait_for
from tests.e2e.test_configmaps import SECRET, manifest
from tests.e2e.test_mirror import mirror, start_agent

pytestmark = [pytest.mark.privileged, pytest.mark.apiserver]


def test_the_mirror_of_a_pod_with_config_and_secrets_is_accepted_and_holds_no_secret(agent, cluster) -> None:
    agent.write_manifest("cfg.yaml", manifest("one"))
    start_agent(agent, cluster)
    wait_for(lambda: (r := agent.pod("cfg")) and r["status"] == "Running", timeout=60, what="cfg Running")
    m = wait_for(lambda: mirror(cluster, "cfg"), timeout=60, what="the mirror pod")
    volumes = {v["name"]: v for v in m["spec"]["volumes"]}
    assert set(volumes["conf"]) == {"name", "emptyDir"} and set(volumes["creds"]) == {"name", "emptyDir"}
    replaced = m["metadata"]["annotations"]["edgelet.io/mirror-replaced"]
    assert "volume conf (configMap app-config)" in replaced and "env c/PASS (secret creds key PASS)" in replaced
    wait_for(
        lambda: (p := mirror(cluster, "cfg")) and p["status"].get("phase") == "Running",
        timeout=60,
        what="the mirror's status",
    )
    everything = json.dumps(cluster.get("/api/v1/pods")) + json.dumps(cluster.get("/api/v1/events"))
    assert SECRET not in everything
    assert "mirror pod may not reference" not in agent.log()
