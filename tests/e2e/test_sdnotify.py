"""systemd Type=notify end to end: a real agent sends READY=1, WATCHDOG=1 and STOPPING=1 to a real datagram socket."""

from __future__ import annotations

import signal
import socket
import uuid

import pytest

from tests.e2e.conftest import IMAGE, wait_for

pytestmark = pytest.mark.privileged

POD = f"""apiVersion: v1
kind: Pod
metadata:
  name: notified
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: main
      image: {IMAGE}
      command: ["sh", "-c", "env; exec sleep 300"]
"""


@pytest.fixture
def notify_socket():
    """An abstract-namespace datagram socket standing in for systemd's (nothing to clean up on disk)."""
    name = f"edgelet-e2e-notify-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(60)  # a generous bound on a hang, not a timing assertion
    yield "@" + name, sock
    sock.close()


def receive_until(sock: socket.socket, wanted: str, seen: list[str]) -> list[str]:
    """Collect datagrams into `seen` until one carries the line `wanted`."""
    while True:
        message = sock.recv(4096).decode()
        seen.append(message)
        if wanted in message.splitlines():
            return seen


def test_ready_watchdog_and_stopping_reach_systemd(agent, notify_socket):
    address, sock = notify_socket
    agent.write_manifest("notified.yaml", POD)
    # 2 s watchdog: a ping every second. No WATCHDOG_PID: the watchdog is ours.
    agent.start(env={"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "2000000"})
    seen: list[str] = []
    receive_until(sock, "READY=1", seen)
    ready = next(m for m in seen if "READY=1" in m.splitlines())
    assert any(line.startswith("STATUS=") for line in ready.splitlines())

    # The pod starts: runc did not inherit NOTIFY_SOCKET (it would wait for the
    # container's own READY=1 and never start it), and neither did the container.
    wait_for(lambda: (r := agent.pod("notified")) and r["status"] == "Running", what="pod Running")
    log_file = agent.paths.container_log_path("default", "notified-testnode", agent.pod("notified")["uid"], "main", 0)
    env_dump = wait_for(
        lambda: log_file.exists() and "PATH=" in log_file.read_text() and log_file.read_text(),
        what="container env in its log",
    )
    assert "NOTIFY_SOCKET" not in env_dump and "WATCHDOG_USEC" not in env_dump

    # systemd's STATUS= follows the pods (it said "syncing 0 pods" for ever before, issue 15).
    while not any("STATUS=1 pod: 1 running" in m for m in seen):
        seen.append(sock.recv(4096).decode())

    # Pings keep coming while the agent runs.
    before = seen.count("WATCHDOG=1")
    while seen.count("WATCHDOG=1") < before + 2:
        receive_until(sock, "WATCHDOG=1", seen)

    assert agent.stop(signal.SIGTERM) == 0
    receive_until(sock, "STOPPING=1", seen)
    # Stopping edgelet leaves the pod running.
    assert [c for c in agent.containers_of("notified") if c["status"] == "running"]
