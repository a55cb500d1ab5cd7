"""The local API of a real agent: /healthz on TCP, /pods, /metrics, /containerLogs (follow) and the CLI over the socket."""

from __future__ import annotations

import socket
import stat
import subprocess
import sys

import httpx
import pytest

from edgelet.server.api import socket_path
from tests.e2e.conftest import IMAGE, wait_for

pytestmark = pytest.mark.privileged


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pod_yaml(name: str, command: str) -> str:
    return f"""apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: {IMAGE}
    command: ["sh", "-c", {command!r}]
"""


def healthz_status(port: int) -> int | None:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code
    except httpx.TransportError:
        return None


def api(agent) -> httpx.Client:
    return httpx.Client(
        transport=httpx.HTTPTransport(uds=str(socket_path(agent.paths.run_dir))), base_url="http://edgelet", timeout=10
    )


def test_api_end_to_end(agent):
    port = free_port()
    agent.start("--healthz-port", str(port))
    sock = socket_path(agent.paths.run_dir)
    wait_for(lambda: sock.exists(), what="API socket")
    assert stat.S_IMODE(sock.stat().st_mode) == 0o600
    wait_for(lambda: healthz_status(port) == 200, what="/healthz 200 on TCP")
    assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).text == "ok"
    # Pod data never leaves the socket.
    assert httpx.get(f"http://127.0.0.1:{port}/pods", timeout=2).status_code == 404

    agent.write_manifest(
        "talk.yaml", pod_yaml("talk", "echo one; echo two; echo three; sleep 1; echo four; exec sleep 300")
    )
    with api(agent) as c:
        wait_for(
            lambda: any(p["status"]["phase"] == "Running" for p in c.get("/pods").json()["items"]),
            what="pod Running in /pods",
        )
        pods = c.get("/pods").json()
        assert pods["kind"] == "PodList" and pods["apiVersion"] == "v1"
        (pod,) = pods["items"]
        assert pod["metadata"]["name"] == "talk-testnode"
        assert pod["status"]["containerStatuses"][0]["name"] == "main"

        metrics = wait_for(
            lambda: (t := c.get("/metrics").text) and "edgelet_running_pods 1.0" in t and t, what="running pods metric"
        )
        assert 'edgelet_running_containers{container_state="running"} 1.0' in metrics
        assert 'edgelet_runtime_operations_total{operation_type="start_container"}' in metrics
        assert "edgelet_pod_start_duration_seconds_count 1.0" in metrics
        assert "process_resident_memory_bytes" in metrics

        wait_for(lambda: b"four" in c.get("/containerLogs/default/talk-testnode/main").content, what="log")
        assert c.get("/containerLogs/default/talk-testnode/main?tailLines=2").text == "three\nfour\n"
        bad = c.get("/containerLogs/default/talk-testnode/main?tailLines=x")
        assert bad.status_code == 400 and bad.json()["kind"] == "Status" and "tailLines" in bad.json()["message"]
        assert c.get("/containerLogs/default/talk-testnode/nope").status_code == 404
        assert c.get("/containerLogs/default/nope/main").json()["reason"] == "NotFound"

        # follow: the tail, then what the container writes later, until the client hangs up.
        exec_echo = ["runc", "--root", str(agent.paths.runc_root), "exec"]
        cid = next(
            x["id"]
            for x in agent.containers_of("talk")
            if x["annotations"].get("io.kubernetes.container.name") == "main"
        )
        with c.stream("GET", "/containerLogs/default/talk-testnode/main?follow=true&tailLines=1") as r:
            assert r.status_code == 200
            chunks = r.iter_bytes()
            assert next(chunks) == b"four\n"
            # Write to the container's stdout (pid 1's fd 1) so conmon logs it.
            subprocess.run([*exec_echo, cid, "sh", "-c", "echo five > /proc/1/fd/1"], check=True, timeout=20)
            assert next(chunks) == b"five\n"

    # The CLI reads through the socket while the agent runs: same table as from the file.
    out = agent.cli("pods")
    assert "talk-testnode" in out and "Running" in out
    assert "five" in agent.cli("logs", "talk", "--tail", "1")
    events = agent.cli("events")
    assert "Started" in events

    assert agent.stop() == 0
    assert not sock.exists()
    # Agent stopped: the CLI falls back to the files.
    assert "talk-testnode" in agent.cli("pods")
    assert agent.cli("logs", "talk", "--tail", "2", "--log-dir", str(agent.paths.log_dir)) == "four\nfive\n"


def test_cli_logs_follow_through_the_socket(agent):
    agent.start("--healthz-port", "0")
    agent.write_manifest("tick.yaml", pod_yaml("tick", "i=0; while true; do echo tick-$i; i=$((i+1)); sleep 0.2; done"))
    wait_for(lambda: (r := agent.pod("tick")) and r["status"] == "Running", what="pod Running")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edgelet",
            "logs",
            "-f",
            "tick",
            "--root-dir",
            str(agent.paths.root_dir),
            "--run-dir",
            str(agent.paths.run_dir),
            "--config",
            "/dev/null",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        seen = [proc.stdout.readline() for _ in range(5)]
        assert all(line.startswith(b"tick-") for line in seen), seen
        numbers = [int(line.strip().split(b"-")[1]) for line in seen]
        assert numbers == sorted(numbers)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    # The TCP listener is off with port 0; the socket still answers.
    with api(agent) as c:
        verbose = c.get("/healthz?verbose")
        assert verbose.status_code == 200
        assert verbose.text.splitlines() == ["[+]ping ok", "[+]syncloop ok", "[+]pleg ok", "healthz check passed"]
