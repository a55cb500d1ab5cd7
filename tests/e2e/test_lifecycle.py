"""Pod lifecycle end to end: init chains, sidecars, SIGKILL after the grace period, termination messages, final phases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import IMAGE, wait_for

pytestmark = pytest.mark.privileged


def status_of(agent, name: str) -> dict | None:
    row = agent.pod(name)
    return (row.get("pod") or {}).get("status") if row else None


def final_status(agent, name: str, phase: str, timeout: float = 40.0) -> dict:
    return wait_for(
        lambda: (s := status_of(agent, name)) and s.get("phase") == phase and s,
        timeout=timeout,
        what=f"pod {name} {phase}",
    )


def by_name(statuses: list[dict] | None) -> dict[str, dict]:
    return {s["name"]: s for s in statuses or []}


def shared_file(agent, name: str, path: str) -> Path:
    uid = agent.pod(name)["uid"]
    return agent.paths.pod_dir(uid) / "volumes" / "shared" / path


def container(name: str, script: str, extra: str = "", mount: bool = True) -> str:
    text = f"""
  - name: {name}
    image: {IMAGE}
    command: ["sh", "-c", {script!r}]"""
    if mount:
        text += """
    volumeMounts:
    - {name: shared, mountPath: /data}"""
    return text + extra


def pod_yaml(name: str, *, restart: str, inits: str = "", containers: str, grace: int = 2) -> str:
    init_block = f"\n  initContainers:{inits}" if inits else ""
    return f"""apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  restartPolicy: {restart}
  terminationGracePeriodSeconds: {grace}
  volumes:
  - name: shared
    emptyDir: {{}}{init_block}
  containers:{containers}
"""


def test_init_chain_runs_in_order_then_the_pod_succeeds_and_describe_shows_it(agent):
    agent.start()
    agent.write_manifest(
        "chain.yaml",
        pod_yaml(
            "chain",
            restart="Never",
            inits=container("first", "echo first >> /data/order")
            + container("second", "grep -q first /data/order && echo second >> /data/order"),
            containers=container("main", "echo main >> /data/order; cat /data/order"),
        ),
    )
    status = final_status(agent, "chain", "Succeeded")
    assert shared_file(agent, "chain", "order").read_text().split() == ["first", "second", "main"]
    inits = by_name(status["initContainerStatuses"])
    assert [s["name"] for s in status["initContainerStatuses"]] == ["first", "second"]
    for s in inits.values():
        assert s["state"]["terminated"]["reason"] == "Completed" and s["ready"] is True
        assert s["containerID"].startswith("runc://")
    main = by_name(status["containerStatuses"])["main"]
    assert main["state"]["terminated"]["exitCode"] == 0 and main["restartCount"] == 0
    conditions = {c["type"]: (c["status"], c.get("reason")) for c in status["conditions"]}
    assert conditions["Initialized"] == ("True", "PodCompleted")
    assert conditions["Ready"] == ("False", "PodCompleted")
    assert status["qosClass"] == "BestEffort" and status["hostIP"] and status["startTime"]

    # `edgelet pods NAME -o yaml`: the whole Pod with a full Kubernetes PodStatus.
    obj = yaml.safe_load(agent.cli("pods", "chain-testnode", "-o", "yaml"))
    assert (obj["apiVersion"], obj["kind"], obj["metadata"]["name"]) == ("v1", "Pod", "chain-testnode")
    full = obj["status"]
    assert {
        "phase",
        "conditions",
        "hostIP",
        "hostIPs",
        "qosClass",
        "startTime",
        "initContainerStatuses",
        "containerStatuses",
    } <= set(full)
    assert [c["type"] for c in full["conditions"]] == [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ]
    assert all(c["lastTransitionTime"] and c["status"] in ("True", "False") for c in full["conditions"])
    for cs in full["initContainerStatuses"] + full["containerStatuses"]:
        assert {
            "name",
            "image",
            "imageID",
            "containerID",
            "ready",
            "restartCount",
            "started",
            "state",
            "lastState",
        } <= set(cs), cs
        assert cs["imageID"] and cs["image"] == IMAGE
        assert {"exitCode", "reason", "startedAt", "finishedAt", "containerID"} <= set(cs["state"]["terminated"])

    text = wait_for(
        lambda: (t := agent.cli("describe", "pod", "chain")) and "Events:" in t and "Started" in t and t,
        what="describe with events",
    )
    assert text.split("\nStatus:", 1)[1].split("\n", 1)[0].strip() == "Succeeded"
    assert "Init Containers:" in text and "Conditions:" in text
    for cond in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"):
        assert cond in text
    assert "Started container: first" in text and "Started container: main" in text


def test_sidecar_outlives_init_and_main_then_stops_and_a_sigterm_ignorer_is_killed(runtime_handler, agent):
    agent.start()
    sidecar_script = (
        "echo side-start >> /data/log; trap 'echo side-stop >> /data/log; exit 0' TERM; while true; do sleep 0.1; done"
    )
    # The second sidecar ignores SIGTERM: it is SIGKILLed once its 3 s grace period is spent.
    stubborn = "trap '' TERM; echo stubborn >> /data/log; sleep 300"
    always = "\n    restartPolicy: Always"
    agent.write_manifest(
        "side.yaml",
        pod_yaml(
            "side",
            restart="Never",
            grace=3,
            inits=container("side", sidecar_script, always)
            + container("init", "grep -q side-start /data/log && echo init >> /data/log")
            + container("stubborn", stubborn, always),
            containers=container("main", "echo main >> /data/log; sleep 1; echo main-done >> /data/log"),
        ),
    )
    status = final_status(agent, "side", "Succeeded")
    log = wait_for(
        lambda: "side-stop" in (t := shared_file(agent, "side", "log").read_text()) and t, what="sidecar stopped"
    )
    lines = log.split()
    assert lines.index("side-start") < lines.index("init") < lines.index("stubborn") < lines.index("main")
    assert lines.index("main-done") < lines.index("side-stop")

    def stopped() -> dict | None:
        s = status_of(agent, "side")
        inits = by_name((s or {}).get("initContainerStatuses"))
        done = all("terminated" in (inits.get(n) or {}).get("state", {}) for n in ("side", "stubborn"))
        return s if done else None

    status = wait_for(stopped, what="sidecars terminated in the status")
    inits = by_name(status["initContainerStatuses"])
    assert inits["side"]["state"]["terminated"]["exitCode"] == 0
    killed = inits["stubborn"]["state"]["terminated"]
    assert (killed["exitCode"], killed["reason"]) == (137, "Error")
    main = by_name(status["containerStatuses"])["main"]["state"]["terminated"]
    # Sidecars stop after the main container. The first sidecar waits for the later one at most its grace
    # period (kubelet's waitForTurn), which is also when the stubborn one is SIGKILLed: which of the two
    # exits first is a race, so only "after main" is an order the kubelet promises.
    assert main["finishedAt"] <= killed["finishedAt"]
    assert main["finishedAt"] <= inits["side"]["state"]["terminated"]["finishedAt"]
    assert "Grace period over, killing" in agent.log()


def test_a_failed_init_container_under_never_fails_the_pod(agent):
    agent.start()
    agent.write_manifest(
        "badinit.yaml",
        pod_yaml(
            "badinit",
            restart="Never",
            inits=container("setup", "echo setup >> /data/order; exit 5"),
            containers=container("main", "echo main >> /data/order"),
        ),
    )
    status = final_status(agent, "badinit", "Failed")
    setup = by_name(status["initContainerStatuses"])["setup"]
    assert (setup["state"]["terminated"]["exitCode"], setup["state"]["terminated"]["reason"]) == (5, "Error")
    assert setup["restartCount"] == 0
    main = by_name(status["containerStatuses"])["main"]
    assert main["state"] == {"waiting": {"reason": "PodInitializing"}}
    conditions = {c["type"]: (c["status"], c.get("reason")) for c in status["conditions"]}
    assert conditions["Initialized"] == ("False", "ContainersNotInitialized")
    assert shared_file(agent, "badinit", "order").read_text() == "setup\n"  # the main container never ran
    assert agent.pod("badinit")["status"] == "Init:Error"


def test_termination_messages_and_never_ends_failed(agent):
    agent.start()
    fallback = "\n    terminationMessagePolicy: FallbackToLogsOnError"
    agent.write_manifest(
        "msg.yaml",
        pod_yaml(
            "msg",
            restart="Never",
            containers=container("file", "printf 'bye now' > /dev/termination-log; exit 3", mount=False)
            + container("logs", "echo from-the-log; exit 4", fallback, mount=False)
            + container("ok", "exit 0", mount=False),
        ),
    )
    status = final_status(agent, "msg", "Failed")
    statuses = by_name(status["containerStatuses"])
    assert statuses["file"]["state"]["terminated"] == {
        **statuses["file"]["state"]["terminated"],
        "exitCode": 3,
        "reason": "Error",
        "message": "bye now",
    }
    assert statuses["logs"]["state"]["terminated"]["message"] == "from-the-log\n"
    assert "message" not in statuses["ok"]["state"]["terminated"]
    conditions = {c["type"]: (c["status"], c.get("reason")) for c in status["conditions"]}
    assert conditions["Ready"] == ("False", "PodFailed")


def pod_json(agent, name: str) -> dict:
    """`edgelet pods NAME -o json`: the full Pod object."""
    return json.loads(agent.cli("pods", f"{name}-testnode", "-o", "json"))


def test_on_failure_restarts_a_failed_container_until_it_succeeds_and_keeps_its_last_state(agent):
    agent.start()
    agent.write_manifest(
        "retry.yaml",
        pod_yaml(
            "retry",
            restart="OnFailure",
            containers=container("c", "if [ -f /data/once ]; then exit 0; fi; touch /data/once; exit 7"),
        ),
    )
    final_status(agent, "retry", "Succeeded")

    def check(status: dict) -> None:
        c = by_name(status["containerStatuses"])["c"]
        assert c["restartCount"] == 1
        assert c["state"]["terminated"]["exitCode"] == 0
        last = c["lastState"]["terminated"]
        assert (last["exitCode"], last["reason"]) == (7, "Error")
        assert last["finishedAt"] <= c["state"]["terminated"]["startedAt"]
        assert last["containerID"] != c["containerID"]

    check(pod_json(agent, "retry")["status"])
    # After an agent restart the state is rebuilt from runc's annotations: same restart count, same lastState.
    agent.stop()
    agent.start()
    pid = agent.proc.pid
    wait_for(lambda: agent.snapshot()["agent_pid"] == pid and agent.pod("retry"), what="the new agent's pods table")
    check(pod_json(agent, "retry")["status"])


def liveness_victim(trap: str, extra: str = "") -> str:
    """`app`: healthy for good from its second instance on; the first one fails its liveness probe after 2 s.

    `trap` is how it treats SIGTERM; it logs to /data/log, which outlives the instances.
    """
    script = (
        "if [ -f /data/once ]; then touch /tmp/healthy; else touch /data/once /tmp/healthy; "
        "(sleep 2; rm -f /tmp/healthy) & fi; "
        f"{trap}; echo start >> /data/log; while true; do sleep 1; done"
    )
    return container(
        "app",
        script,
        """
    livenessProbe:
      exec:
        command: ["cat", "/tmp/healthy"]
      initialDelaySeconds: 1
      periodSeconds: 1
      failureThreshold: 1"""
        + extra,
    )


def killed_instance(agent, name: str) -> tuple[dict, dict]:
    """(the container's status, its lastState.terminated) once the liveness restart is in the status."""

    def restarted() -> tuple[dict, dict] | None:
        c = by_name((status_of(agent, name) or {}).get("containerStatuses")).get("app") or {}
        last = (c.get("lastState") or {}).get("terminated")
        return (c, last) if c.get("restartCount") == 1 and last and "running" in c.get("state", {}) else None

    return wait_for(restarted, timeout=40, what=f"{name}: app restarted by its liveness probe")


def test_a_container_ignoring_sigterm_is_sigkilled_after_the_grace_period_and_reports_137(agent):
    agent.start()
    agent.write_manifest(
        "deaf.yaml", pod_yaml("deaf", restart="Always", grace=2, containers=liveness_victim("trap '' TERM"))
    )
    c, last = killed_instance(agent, "deaf")
    assert (last["exitCode"], last["reason"]) == (137, "Error")
    assert last["containerID"] != c["containerID"]
    assert "Grace period over, killing" in agent.log()
    assert "Container app failed liveness probe, will be restarted" in agent.cli("events")


def test_pre_stop_runs_inside_the_grace_period_then_the_stop_signal_then_sigkill(runtime_handler, agent):
    agent.start()
    prestop = """
    lifecycle:
      preStop:
        exec:
          command: ["sh", "-c", "echo prestop >> /data/log; sleep 1; echo prestop-done >> /data/log"]"""
    agent.write_manifest(
        "bye.yaml",
        pod_yaml(
            "bye", restart="Always", grace=3, containers=liveness_victim("trap 'echo term >> /data/log' TERM", prestop)
        ),
    )
    c, last = killed_instance(agent, "bye")
    # The stop signal came after the hook, was ignored, and SIGKILL ended the instance. "running" in the status
    # comes before the second instance's shell has written its line: on a loaded machine, well before.
    log = shared_file(agent, "bye", "log")
    lines = wait_for(
        lambda: (ls := log.read_text().split()) and len(ls) >= 5 and ls,
        timeout=60,
        what="the second instance's start line",
    )
    assert lines[:4] == ["start", "prestop", "prestop-done", "term"], lines
    assert lines[4:] == ["start"]  # the second instance
    assert (last["exitCode"], last["reason"]) == (137, "Error")
    # The hook's second came out of the 3 s budget (exactly: tests/unit/test_probes_hooks.py); here only a
    # generous bound, far below what the default 30 s grace would take.
    from datetime import datetime

    took = (datetime.fromisoformat(last["finishedAt"]) - datetime.fromisoformat(last["startedAt"])).total_seconds()
    assert took < 20, last
