"""End to end, issue 21: a changed static pod is pulled first, gated, and rolled back to the last good version
(real runc and conmon, the file source, a real registry on loopback for the missing image)."""

from __future__ import annotations

import json
import shutil
import signal
import time

import pytest

from tests.e2e.conftest import IMAGE, wait_for
from tests.integration.registry import Registry

pytestmark = [
    pytest.mark.privileged,
    pytest.mark.skipif(shutil.which("docker-registry") is None, reason="needs docker-registry"),
]

# Short gate times so the test takes seconds; never asserted on.
GATE = ("--rollout-deadline", "120s", "--rollout-stability-window", "2s")


def pod_yaml(image: str, command: str, policy: str = "IfNotPresent") -> str:
    return f"""apiVersion: v1
kind: Pod
metadata:
  name: app
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: c
      image: {image}
      imagePullPolicy: {policy}
      command: ["sh", "-c", "{command}"]
"""


def record(agent) -> dict | None:
    """The pod's rollout record as the agent wrote it (read from disk: the agent may be down)."""
    for path in (agent.paths.root_dir / "state" / "rollout").glob("*.json"):
        stored = json.loads(path.read_text())
        if stored["record"]["name"] == "default/app-testnode":
            return stored["record"]
    return None


def phase(agent, want: str, target: str | None = None):
    def check():
        r = record(agent)
        return r if r is not None and r["phase"] == want and (target is None or r["target"] == target) else None

    return check


def running_uids(agent) -> set[str]:
    return {
        c["annotations"]["io.kubernetes.pod.uid"]
        for c in agent.containers_of("app")
        if c["status"] == "running" and c["annotations"].get("io.kubernetes.container.name") == "c"
    }


def app_container(agent) -> dict | None:
    return next(
        (
            c
            for c in agent.containers_of("app")
            if c["status"] == "running" and c["annotations"].get("io.kubernetes.container.name") == "c"
        ),
        None,
    )


def test_missing_image_then_crash_roll_back_then_good(agent, tmp_path):
    reg = Registry(tmp_path / "reg")
    reg.start()
    try:
        # Armed for the rollback: the agent dies (SIGKILL, as a power cut would) right after it has written
        # the decision to roll back and before it has stopped anything.
        agent.start(*GATE, env={"EDGELET_TEST_CRASH_AT": "rollout.rollback"})
        agent.write_manifest("app.yaml", pod_yaml(IMAGE, "exec sleep 300"))
        v1 = wait_for(phase(agent, "good"), timeout=90, what="v1 good")["active"]
        first = wait_for(lambda: app_container(agent), timeout=30, what="v1 running")

        # v2's image does not exist: v1 never stops; the record and the table say why.
        agent.write_manifest("app.yaml", pod_yaml(f"{reg.host}/test/missing:1", "exec sleep 300"))
        pulling = wait_for(
            lambda: (r := phase(agent, "pulling")()) and "ErrImagePull" in r["reason"] and r,
            timeout=60,
            what="v2 pulling fails",
        )
        assert pulling["active"] == v1
        assert "manifest unknown" in pulling["reason"] or "not found" in pulling["reason"].lower()
        row = wait_for(
            lambda: (r := agent.pod("app")) and "RolloutPulling" in r["message"] and r,
            timeout=30,
            what="edgelet pods says the pull failed",
        )
        assert row["status"] == "Running"
        still = app_container(agent)
        assert still is not None and still["id"] == first["id"], "v1 was stopped while v2 could not be pulled"
        assert running_uids(agent) == {v1}

        # v2 crashes: it replaces v1, fails the gate, and the agent dies as it decides to roll back.
        agent.write_manifest("app.yaml", pod_yaml(IMAGE, "echo broken; exit 1"))
        wait_for(lambda: agent.proc.poll() is not None, timeout=120, what="the agent to crash at rollout.rollback")
        assert agent.proc.returncode == -signal.SIGKILL
        agent.proc = None
        agent._log.close()
        r = record(agent)
        assert r["phase"] == "rolling-back" and r["active"] == v1 and r["blocked"] == r["target"] != v1
        v2 = r["target"]
        assert "CrashLoopBackOff" in r["reason"] or "exit" in r["reason"]

        # The restarted agent takes the same decision from the record: v1 runs again, v2 is gone.
        agent.start(*GATE)
        done = wait_for(phase(agent, "rolled-back"), timeout=90, what="rolled back after the restart")
        assert done["active"] == v1 and done["target"] == v2
        wait_for(lambda: running_uids(agent) == {v1}, timeout=60, what="v1 running again, v2 gone")
        row = wait_for(
            lambda: (
                (r := agent.pod("app"))
                and r["uid"] == v1
                and "RolledBack" in r["message"]
                and r["status"] == "Running"
                and r
            ),
            timeout=60,
            what="edgelet pods says RolledBack",
        )
        conds = {c["type"]: c for c in row["pod"]["status"]["conditions"]}
        assert conds["edgelet.io/Rollout"]["reason"] == "RolledBack"
        assert v2[:8] in conds["edgelet.io/Rollout"]["message"]
        events = agent.cli("events", "--for", "app-testnode")
        assert "RolledBack" in events and v2[:8] in events
        described = agent.cli("describe", "pod", "app-testnode")
        assert "Rollout:" in described and "RolledBack" in described and v2[:8] in described, described
        status = agent.cli("rollout", "status")
        assert "rolled-back" in status and v1[:8] in status
        history = agent.cli("rollout", "history", "app-testnode")
        assert "rolled-back" in history and "failed" in history
        # Steady: the failed version is not tried again while its manifest stays.
        assert record(agent)["phase"] == "rolled-back"
        assert running_uids(agent) == {v1}

        # An operator retry tries v2 again (it fails again, and is rolled back again).
        out = agent.cli("rollout", "retry", "app-testnode")
        assert "tried again" in out, out
        wait_for(
            lambda: (
                (r := record(agent))
                and r["phase"] == "rolled-back"
                and sum(h["outcome"] == "failed" for h in r["history"]) == 2
            ),
            timeout=120,
            what="the retried v2 rolled back again",
        )
        wait_for(lambda: running_uids(agent) == {v1}, timeout=60, what="v1 running again after the retry")

        # v3 is good: it replaces v1 and becomes the last good version.
        agent.write_manifest("app.yaml", pod_yaml(IMAGE, "exec sleep 301"))
        good = wait_for(
            lambda: (r := phase(agent, "good")()) and r["target"] not in (v1, v2) and r, timeout=120, what="v3 good"
        )
        assert good["last_good"] == good["active"] == good["target"]
        wait_for(lambda: running_uids(agent) == {good["active"]}, timeout=60, what="v3 alone running")
        assert agent.stop() == 0
    finally:
        reg.stop()


def test_runonce_waits_for_the_gate_and_names_the_rolled_back_pod(agent):
    agent.write_manifest("app.yaml", pod_yaml(IMAGE, "exec sleep 300"))
    # A first version has nothing to roll back to: runonce does not wait out its stability window (far longer
    # than the run's timeout here), and the daemon that adopts the pod finishes the gate, as on a device.
    res = agent.run_once("--rollout-stability-window", "600s", "--runonce-timeout", "90s")
    assert res.returncode == 0, res.stdout + res.stderr
    assert record(agent)["phase"] == "gating", record(agent)
    agent.start(*GATE)
    v1 = wait_for(phase(agent, "good"), timeout=60, what="the daemon finishes the first version's gate")
    assert agent.stop() == 0

    # The device boots with a changed manifest whose version crashes: the same gate, then the rollback.
    agent.write_manifest("app.yaml", pod_yaml(IMAGE, "echo broken; exit 1"))
    res = agent.run_once(*GATE, "--runonce-timeout", "90s")
    assert res.returncode != 0, res.stdout + res.stderr
    assert "rolled back: default/app-testnode:" in res.stdout, res.stdout
    r = record(agent)
    assert r["phase"] == "rolled-back" and r["active"] == v1["active"]
    assert running_uids(agent) == {v1["active"]}


def ready_yaml(command: str, ready_cmd: str, annotations: str = "") -> str:
    return f"""apiVersion: v1
kind: Pod
metadata:
  name: app
  annotations:
    edgelet.io/rollout-deadline: "6s"
{annotations}spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: c
      image: {IMAGE}
      command: ["sh", "-c", "{command}"]
      readinessProbe:
        exec: {{command: ["sh", "-c", "{ready_cmd}"]}}
        periodSeconds: 1
"""


def test_never_ready_is_rolled_back_at_the_deadline_and_the_off_switch_keeps_it(agent):
    agent.start("--rollout-stability-window", "1s")
    agent.write_manifest("app.yaml", ready_yaml("exec sleep 300", "true"))
    v1 = wait_for(phase(agent, "good"), timeout=90, what="v1 good")["active"]

    # v2 runs but never gets Ready: rolled back once the pod's own 6 s deadline has passed.
    agent.write_manifest("app.yaml", ready_yaml("exec sleep 299", "false"))
    r = wait_for(phase(agent, "rolled-back"), timeout=120, what="v2 rolled back at the deadline")
    assert r["active"] == v1 and "deadline" in r["reason"] and "not Ready" in r["reason"], r
    wait_for(lambda: running_uids(agent) == {v1}, timeout=60, what="v1 running again")

    # The same bad version with the off switch: kubelet's kill-and-start, and it stays (no record to act on).
    agent.write_manifest("app.yaml", ready_yaml("exec sleep 298", "false", '    edgelet.io/rollout: "off"\n'))
    wait_for(lambda: record(agent) is None, timeout=60, what="the record dropped by the off switch")
    wait_for(lambda: (u := running_uids(agent)) and v1 not in u and u, timeout=60, what="v3 replaced v1")
    time.sleep(8)  # past the 6 s deadline the gate would have used: nothing rolls it back
    assert v1 not in running_uids(agent) and record(agent) is None


def surge_yaml(command: str, host_port: int | None = None) -> str:
    ports = (
        f"""
      ports: [{{containerPort: 8080, hostPort: {host_port}}}]"""
        if host_port
        else ""
    )
    return f"""apiVersion: v1
kind: Pod
metadata:
  name: app
  annotations:
    edgelet.io/rollout-strategy: Surge
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: c
      image: {IMAGE}
      command: ["sh", "-c", "{command}"]{ports}
"""


def test_surge_keeps_the_old_version_until_the_new_is_good_and_is_refused_on_a_host_port(agent):
    agent.start(*GATE)
    agent.write_manifest("app.yaml", surge_yaml("exec sleep 300"))
    v1 = wait_for(phase(agent, "good"), timeout=90, what="v1 good")["active"]
    first = wait_for(lambda: app_container(agent), timeout=30, what="v1 running")

    # v2 is good: it runs beside v1 while it is judged, then v1 goes.
    agent.write_manifest("app.yaml", surge_yaml("exec sleep 299"))
    both = wait_for(lambda: (u := running_uids(agent)) and len(u) == 2 and u, timeout=90, what="v1 and v2 side by side")
    assert v1 in both
    v2 = wait_for(lambda: (r := phase(agent, "good")()) and r["active"] != v1 and r, timeout=90, what="v2 good")[
        "active"
    ]
    wait_for(lambda: running_uids(agent) == {v2}, timeout=60, what="v1 stopped once v2 was good")

    # v3 crashes: v2 is never stopped, v3 goes.
    v2_container = app_container(agent)
    agent.write_manifest("app.yaml", surge_yaml("echo broken; exit 1"))
    r = wait_for(phase(agent, "rolled-back"), timeout=120, what="v3 rolled back")
    assert r["active"] == v2
    wait_for(lambda: running_uids(agent) == {v2}, timeout=60, what="v3 gone")
    assert app_container(agent)["id"] == v2_container["id"], "Surge stopped the good version"
    assert first["id"] != v2_container["id"]

    # With the same hostPort in both versions, Surge is refused and the update replaces instead.
    agent.write_manifest("app.yaml", surge_yaml("exec sleep 298", host_port=18080))
    v4 = wait_for(
        lambda: (r := phase(agent, "good")()) and r["active"] not in (v1, v2) and r, timeout=90, what="v4 good"
    )["active"]
    agent.write_manifest("app.yaml", surge_yaml("exec sleep 297", host_port=18080))
    wait_for(
        lambda: (r := phase(agent, "good")()) and r["active"] not in (v1, v2, v4) and r, timeout=90, what="v5 good"
    )
    events = agent.cli("events", "--for", "app-testnode")
    assert "SurgeRefused" in events and "hostPort 18080/TCP" in events, events


def test_url_source_version_is_rolled_back_too(agent):
    from tests.e2e.test_url_source import ManifestServer

    server = ManifestServer()
    try:
        server.body = pod_yaml(IMAGE, "exec sleep 300").encode()
        agent.start(*GATE, "--manifest-url", server.url, "--http-check-frequency", "1s")
        v1 = wait_for(phase(agent, "good"), timeout=90, what="v1 good")["active"]
        server.body = pod_yaml(IMAGE, "echo broken; exit 1").encode()
        r = wait_for(phase(agent, "rolled-back"), timeout=120, what="v2 rolled back")
        assert r["active"] == v1
        wait_for(lambda: running_uids(agent) == {v1}, timeout=60, what="v1 running again")
        # The source still serves v2: it is not tried again.
        assert record(agent)["phase"] == "rolled-back" and running_uids(agent) == {v1}
        wait_for(
            lambda: (row := agent.pod("app")) and row["uid"] == v1 and row["source"] == "http",
            timeout=30,
            what="the table shows the URL pod's v1",
        )
    finally:
        server.down()


def test_power_cut_during_the_gate_ends_in_the_same_rollback(agent):
    from tests.e2e.test_power_loss import power_cut

    agent.start(*GATE, env={"EDGELET_TEST_CRASH_AT": "rollout.gate"})
    agent.write_manifest("app.yaml", pod_yaml(IMAGE, "exec sleep 300"))
    v1 = wait_for(phase(agent, "good"), timeout=90, what="v1 good")["active"]
    agent.write_manifest("app.yaml", pod_yaml(IMAGE, "echo broken; exit 1"))
    # The agent dies as v2's gate begins (v1 stopped, v2 about to run), and the power goes with it.
    wait_for(lambda: agent.proc.poll() is not None, timeout=120, what="the agent to crash at rollout.gate")
    assert agent.proc.returncode == -signal.SIGKILL
    r = record(agent)
    assert r["phase"] == "gating" and r["active"] != v1
    power_cut(agent)
    agent.start(*GATE)
    done = wait_for(phase(agent, "rolled-back"), timeout=120, what="rolled back after the power cut")
    assert done["active"] == v1 and done["blocked"] == r["active"]
    wait_for(lambda: running_uids(agent) == {v1}, timeout=60, what="v1 running again, alone")
    assert agent.stop() == 0


def test_agent_killed_at_the_replace_step_finishes_the_update(agent):
    agent.start(*GATE, env={"EDGELET_TEST_CRASH_AT": "rollout.replace"})
    agent.write_manifest("app.yaml", pod_yaml(IMAGE, "exec sleep 300"))
    v1 = wait_for(phase(agent, "good"), timeout=90, what="v1 good")["active"]
    agent.write_manifest("app.yaml", pod_yaml(IMAGE, "exec sleep 299"))
    wait_for(lambda: agent.proc.poll() is not None, timeout=120, what="the agent to crash at rollout.replace")
    assert agent.proc.returncode == -signal.SIGKILL
    agent.proc = None
    agent._log.close()
    r = record(agent)
    assert r["phase"] == "replacing" and r["active"] != v1
    assert running_uids(agent) == {v1}, "the record was written before anything was stopped"
    agent.start(*GATE)
    good = wait_for(
        lambda: (x := phase(agent, "good")()) and x["active"] == r["active"] and x,
        timeout=120,
        what="v2 good after the restart",
    )
    assert good["last_good"] == r["active"]
    wait_for(lambda: running_uids(agent) == {r["active"]}, timeout=60, what="v2 alone running")
    assert agent.stop() == 0


def test_a_new_version_during_the_first_versions_gate_downloads_first(agent, tmp_path):
    """v1 is still in its first gate (nothing to roll back to) when v2 arrives with an image that cannot be
    had: v1 keeps running (it was replaced at once, leaving nothing running), and the failed pull is said."""
    reg = Registry(tmp_path / "reg")
    reg.start()
    try:
        agent.start("--rollout-deadline", "300s", "--rollout-stability-window", "300s")
        agent.write_manifest("app.yaml", pod_yaml(IMAGE, "exec sleep 300"))
        v1 = wait_for(
            lambda: (r := phase(agent, "gating")()) and running_uids(agent) and r,
            timeout=90,
            what="v1 running in its first gate",
        )["active"]
        first = app_container(agent)
        agent.write_manifest("app.yaml", pod_yaml(f"{reg.host}/test/missing:1", "exec sleep 300"))
        pulling = wait_for(
            lambda: (r := phase(agent, "pulling")()) and "ErrImagePull" in r["reason"] and r,
            timeout=60,
            what="v2 pulling fails",
        )
        assert pulling["active"] == v1 and pulling["last_good"] is None
        still = app_container(agent)
        assert still is not None and still["id"] == first["id"], "v1 was stopped before v2's image was in"
        assert running_uids(agent) == {v1}
        agent.stop()
    finally:
        reg.stop()
