"""Probes and lifecycle hooks end to end: a real agent, runc exec probes, HTTP and TCP probes inside the pod's netns."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.e2e.conftest import IMAGE, shared_agent, wait_for

pytestmark = pytest.mark.privileged


def pod(name: str, container: str, *, grace: int = 2, volumes: str = "") -> str:
    return f"""apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: {grace}
  containers:
  - name: app
    image: {IMAGE}
{container}{volumes}"""


def events(agent, pod: str, reason: str | None = None) -> list[dict]:
    """The events about pod `pod` (the agent is shared: other tests' pods have theirs)."""
    out = agent.cli("events", "-o", "json")
    data = json.loads(out) if out.strip() else []
    items = data if isinstance(data, list) else data.get("events", data.get("items", []))
    return [
        e for e in items if e["object"]["name"] == f"{pod}-testnode" and (reason is None or e.get("reason") == reason)
    ]


# One agent per handler for the module: each test runs its own pod (named after it) and reads only that pod's
# rows and events; its manifest goes at the end, so no probe of it keeps running into the next tests.
@pytest.fixture(scope="module")
def runc_agent(tmp_path_factory, busybox_archive):
    with shared_agent(tmp_path_factory, busybox_archive) as a:
        a.start()
        yield a


@pytest.fixture(scope="module")
def crun_agent(tmp_path_factory, busybox_archive, crun_ready):
    with shared_agent(tmp_path_factory, busybox_archive, "crun") as a:
        a.start()
        yield a


@pytest.fixture
def agent(request: pytest.FixtureRequest):
    """The module's agent (crun's for a test that takes `runtime_handler` crun), its manifests removed after."""
    crun = "runtime_handler" in request.fixturenames and request.getfixturevalue("runtime_handler") == "crun"
    a = request.getfixturevalue("crun_agent" if crun else "runc_agent")
    yield a
    for manifest in a.manifests.glob("*.yaml"):
        manifest.unlink()


def container_id(agent, pod_name: str, container: str) -> str:
    running = [
        c
        for c in agent.containers_of(pod_name)
        if (c.get("annotations") or {}).get("io.kubernetes.container.name") == container
        and c.get("status") == "running"
    ]
    assert running, f"no running {container} in {pod_name}"
    return running[0]["id"]


def runc_exec(agent, cid: str, *argv: str) -> None:
    subprocess.run([*agent.runtime_argv(cid), "exec", cid, *argv], check=True, timeout=10)


def test_liveness_exec_failure_restarts_the_container(runtime_handler, agent):
    agent.write_manifest(
        "live.yaml",
        pod(
            "live",
            """    command: ["sh", "-c", "touch /tmp/healthy; sleep 2; rm -f /tmp/healthy; exec sleep 300"]
    livenessProbe:
      exec:
        command: ["cat", "/tmp/healthy"]
      periodSeconds: 1
      failureThreshold: 1
      terminationGracePeriodSeconds: 1
""",
        ),
    )
    wait_for(lambda: (r := agent.pod("live")) and r["restarts"] >= 1, timeout=30, what="a liveness restart")
    unhealthy = wait_for(lambda: events(agent, "live", "Unhealthy"), what="Unhealthy event")
    assert any(e["message"].startswith("Liveness probe failed: cat: can't open '/tmp/healthy'") for e in unhealthy)
    killing = [e["message"] for e in events(agent, "live", "Killing")]
    assert "Container app failed liveness probe, will be restarted" in killing
    assert "Unhealthy" in agent.cli("events")


def test_readiness_http_get_flips_ready_both_ways(agent):
    agent.write_manifest(
        "web.yaml",
        pod(
            "web",
            """    command: ["sh", "-c", "mkdir -p /www && echo ok > /www/healthz && exec httpd -f -p 8080 -h /www"]
    ports:
    - name: http
      containerPort: 8080
    readinessProbe:
      httpGet:
        path: /healthz
        port: http
        httpHeaders:
        - name: X-Probe
          value: edgelet
      periodSeconds: 1
      failureThreshold: 1
""",
        ),
    )
    wait_for(lambda: (r := agent.pod("web")) and r["ready"] == "1/1", what="ready via httpGet")
    # kubectl describe's probe line, with the defaults filled in.
    assert re.search(
        r"\n    Readiness: +http-get http://:http/healthz delay=0s timeout=1s period=1s #success=1 "
        r"#failure=1\n",
        agent.cli("describe", "pod", "web"),
    )
    cid = container_id(agent, "web", "app")
    runc_exec(agent, cid, "rm", "/www/healthz")  # 404 from now on
    wait_for(lambda: agent.pod("web")["ready"] == "0/1", what="not ready after 404")
    assert any("HTTP probe failed with statuscode: 404" in e["message"] for e in events(agent, "web", "Unhealthy"))
    runc_exec(agent, cid, "sh", "-c", "echo ok > /www/healthz")
    wait_for(lambda: agent.pod("web")["ready"] == "1/1", what="ready again")
    assert agent.pod("web")["restarts"] == 0  # readiness never restarts


def test_tcp_socket_readiness(agent):
    agent.write_manifest(
        "tcp.yaml",
        pod(
            "tcp",
            """    command: ["sh", "-c", "sleep 1; exec httpd -f -p 9000 -h /"]
    readinessProbe:
      tcpSocket:
        port: 9000
      periodSeconds: 1
""",
        ),
    )
    wait_for(lambda: (r := agent.pod("tcp")) and r["ready"] == "1/1", what="ready via tcpSocket")


def test_startup_probe_gates_liveness(agent):
    # Liveness would fail at once if it ran before the startup probe passed: the file appears after 3 s.
    agent.write_manifest(
        "slow.yaml",
        pod(
            "slow",
            """    command: ["sh", "-c", "sleep 3; touch /tmp/started; exec sleep 300"]
    startupProbe:
      exec:
        command: ["test", "-f", "/tmp/started"]
      periodSeconds: 1
      failureThreshold: 30
    livenessProbe:
      exec:
        command: ["test", "-f", "/tmp/started"]
      periodSeconds: 1
      failureThreshold: 1
""",
        ),
    )
    wait_for(lambda: (r := agent.pod("slow")) and r["ready"] == "1/1", timeout=30, what="started and ready")
    assert any(e["message"].startswith("Startup probe failed") for e in events(agent, "slow", "Unhealthy"))
    assert not any(e["message"].startswith("Liveness") for e in events(agent, "slow", "Unhealthy"))
    assert agent.pod("slow")["restarts"] == 0


def test_prestop_runs_before_the_stop(agent, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    path = agent.write_manifest(
        "bye.yaml",
        pod(
            "bye",
            """    command: ["sh", "-c", "exec sleep 300"]
    volumeMounts:
    - name: shared
      mountPath: /shared
    lifecycle:
      preStop:
        exec:
          command: ["sh", "-c", "echo prestop-ran > /shared/prestop"]
""",
            volumes=f"""  volumes:
  - name: shared
    hostPath:
      path: {shared}
""",
        ),
    )
    wait_for(lambda: (r := agent.pod("bye")) and r["status"] == "Running", what="pod Running")
    path.unlink()
    wait_for(lambda: agent.pod("bye") is None, what="pod removed")
    assert (shared / "prestop").read_text() == "prestop-ran\n"
    # kubelet's Killing message for a deleted pod.
    assert "Stopping container app" in [e["message"] for e in events(agent, "bye", "Killing")]


def test_failing_post_start_kills_the_container(agent):
    agent.write_manifest(
        "ps.yaml",
        pod(
            "ps",
            """    command: ["sh", "-c", "exec sleep 300"]
    lifecycle:
      postStart:
        exec:
          command: ["sh", "-c", "echo nope; exit 3"]
""",
        ),
    )
    failed = wait_for(lambda: events(agent, "ps", "FailedPostStartHook"), what="FailedPostStartHook event")
    assert "exited with 3" in failed[0]["message"] and "nope" in failed[0]["message"]
    assert "FailedPostStartHook" in [e["message"] for e in events(agent, "ps", "Killing")]
    wait_for(lambda: (r := agent.pod("ps")) and r["restarts"] >= 1, timeout=30, what="restarted after the hook")
