"""Pod lifecycle end to end: init chains, sidecars, SIGKILL after the grace period, termination messages, final phases."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import IMAGE, wait_for

pytestmark = pytest.mark.privileged


def status_of(agent, name: str) -> dict | None:
    row = agent.pod(name)
    return (row.get("pod") or {}).get("status") if row else None


def final_status(agent, name: str, phase: str, timeout: float = 40.0) -> dict:
    return wait_for(lambda: (s := status_of(agent, name)) and s.get("phase") == phase and s,
                    timeout=timeout, what=f"pod {name} {phase}")


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
    agent.write_manifest("chain.yaml", pod_yaml(
        "chain", restart="Never",
        inits=container("first", "echo first >> /data/order")
        + container("second", "grep -q first /data/order && echo second >> /data/order"),
        containers=container("main", "echo main >> /data/order; cat /data/order"),
    ))
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

    text = wait_for(lambda: (t := agent.cli("describe", "pod", "chain")) and "Events:" in t and "Started" in t and t,
                    what="describe with events")
    assert text.split("\nStatus:", 1)[1].split("\n", 1)[0].strip() == "Succeeded"
    assert "Init Containers:" in text and "Conditions:" in text
    for cond in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"):
        assert cond in text
    assert "Started container: first" in text and "Started container: main" in text


def test_sidecar_outlives_init_and_main_then_stops_and_a_sigterm_ignorer_is_killed(agent):
    agent.start()
    sidecar_script = ("echo side-start >> /data/log; "
                      "trap 'echo side-stop >> /data/log; exit 0' TERM; while true; do sleep 0.1; done")
    # The second sidecar ignores SIGTERM: it is SIGKILLed once its 3 s grace period is spent.
    stubborn = "trap '' TERM; echo stubborn >> /data/log; sleep 300"
    always = "\n    restartPolicy: Always"
    agent.write_manifest("side.yaml", pod_yaml(
        "side", restart="Never", grace=3,
        inits=container("side", sidecar_script, always)
        + container("init", "grep -q side-start /data/log && echo init >> /data/log")
        + container("stubborn", stubborn, always),
        containers=container("main", "echo main >> /data/log; sleep 1; echo main-done >> /data/log"),
    ))
    status = final_status(agent, "side", "Succeeded")
    log = wait_for(lambda: "side-stop" in (t := shared_file(agent, "side", "log").read_text()) and t,
                   what="sidecar stopped")
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
    # Sidecars stop after the main container, the first sidecar after the one started later.
    assert main["finishedAt"] <= killed["finishedAt"] <= inits["side"]["state"]["terminated"]["finishedAt"]
    assert "Grace period over, killing" in agent.log()


def test_termination_messages_and_never_ends_failed(agent):
    agent.start()
    fallback = "\n    terminationMessagePolicy: FallbackToLogsOnError"
    agent.write_manifest("msg.yaml", pod_yaml(
        "msg", restart="Never",
        containers=container("file", "printf 'bye now' > /dev/termination-log; exit 3", mount=False)
        + container("logs", "echo from-the-log; exit 4", fallback, mount=False)
        + container("ok", "exit 0", mount=False),
    ))
    status = final_status(agent, "msg", "Failed")
    statuses = by_name(status["containerStatuses"])
    assert statuses["file"]["state"]["terminated"] == {
        **statuses["file"]["state"]["terminated"], "exitCode": 3, "reason": "Error", "message": "bye now"}
    assert statuses["logs"]["state"]["terminated"]["message"] == "from-the-log\n"
    assert "message" not in statuses["ok"]["state"]["terminated"]
    conditions = {c["type"]: (c["status"], c.get("reason")) for c in status["conditions"]}
    assert conditions["Ready"] == ("False", "PodFailed")


def test_on_failure_restarts_a_failed_container_until_it_succeeds(agent):
    agent.start()
    agent.write_manifest("retry.yaml", pod_yaml(
        "retry", restart="OnFailure",
        containers=container("c", "if [ -f /data/once ]; then exit 0; fi; touch /data/once; exit 1"),
    ))
    status = final_status(agent, "retry", "Succeeded")
    c = by_name(status["containerStatuses"])["c"]
    assert c["restartCount"] == 1
    assert c["state"]["terminated"]["exitCode"] == 0
    # lastState is not asserted: the failed instance is garbage-collected once a newer one exited
    # (kubelet's GC keeps one dead instance too, only it runs a minute later).
