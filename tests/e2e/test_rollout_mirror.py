"""The cluster sees a rollback (issue 21): the mirror pod on a real kube-apiserver is the last good version's, and
its status carries the edgelet.io/Rollout condition with reason RolledBack."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import IMAGE, wait_for
from tests.e2e.test_mirror import mirror, start_agent
from tests.e2e.test_rollout import phase, pod_yaml

pytestmark = [pytest.mark.privileged, pytest.mark.apiserver]


def test_mirror_pod_shows_the_rollback(agent, cluster):
    agent.write_manifest("app.yaml", pod_yaml(IMAGE, "exec sleep 300"))
    start_agent(agent, cluster, "--rollout-stability-window", "2s", "--rollout-deadline", "120s")
    v1 = wait_for(phase(agent, "good"), timeout=90, what="v1 good")["active"]
    wait_for(
        lambda: (
            (p := mirror(cluster, "app")) and p["metadata"]["annotations"]["kubernetes.io/config.mirror"] == v1 and p
        ),
        timeout=60,
        what="v1's mirror",
    )

    agent.write_manifest("app.yaml", pod_yaml(IMAGE, "echo broken; exit 1"))
    r = wait_for(phase(agent, "rolled-back"), timeout=120, what="v2 rolled back")

    def shows_rollback():
        p = mirror(cluster, "app")
        if p is None or p["metadata"]["annotations"]["kubernetes.io/config.mirror"] != v1:
            return None
        conds = {c["type"]: c for c in p.get("status", {}).get("conditions") or []}
        c = conds.get("edgelet.io/Rollout")
        return c if c is not None and c["reason"] == "RolledBack" else None

    cond = wait_for(shows_rollback, timeout=90, what="the mirror pod's RolledBack condition")
    assert r["target"][:8] in cond["message"]
    assert agent.stop() == 0
