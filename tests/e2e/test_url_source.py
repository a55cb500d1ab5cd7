"""The URL source in a real agent: pods served over loopback HTTP run, change, collide with file pods, and survive an offline boot."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.e2e.conftest import IMAGE, wait_for

pytestmark = pytest.mark.privileged


def pod_yaml(name: str, command: str = "exec sleep 300", extra: str = "") -> str:
    return f"""apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: {IMAGE}
    command: ["sh", "-c", {command!r}]{extra}
"""


class ManifestServer:
    """A loopback HTTP server whose body the test changes; `down()` stops answering."""

    def __init__(self) -> None:
        self.body = b""
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = outer.body
                self.send_response(200)
                self.send_header("Content-Type", "application/yaml")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/pods.yaml"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def down(self) -> None:
        if self._thread.is_alive():
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join()


@pytest.fixture
def server():
    s = ManifestServer()
    yield s
    s.down()


def url_args(server: ManifestServer) -> tuple[str, ...]:
    return ("--manifest-url", server.url, "--http-check-frequency", "1s")


def test_url_pod_runs_and_an_edit_replaces_it(agent, server):
    server.body = pod_yaml("web").encode()
    agent.start(*url_args(server))
    first = wait_for(lambda: (r := agent.pod("web")) and r["status"] == "Running" and r, what="URL pod running")
    assert first["source"] == "http" and first["origin"] == server.url
    server.body = pod_yaml("web", "echo v2; exec sleep 300").encode()
    second = wait_for(
        lambda: (r := agent.pod("web")) and r["uid"] != first["uid"] and r["status"] == "Running" and r,
        what="edited URL pod replaced (REMOVE + ADD)",
    )
    assert second["restarts"] == 0
    wait_for(
        lambda: all(c["annotations"]["io.kubernetes.pod.uid"] == second["uid"] for c in agent.containers_of("web")),
        what="old pod's containers gone",
    )


def test_file_pod_wins_a_name_collision_visibly(agent, server):
    agent.write_manifest("web.yaml", pod_yaml("web", "echo from-file; exec sleep 300"))
    server.body = (pod_yaml("web") + "---\n" + pod_yaml("other")).encode()
    agent.start(*url_args(server))
    wait_for(lambda: (r := agent.pod("other")) and r["status"] == "Running", what="non-colliding URL pod runs")
    row = wait_for(lambda: (r := agent.pod("web")) and r["status"] == "Running" and r, what="file pod runs")
    assert row["source"] == "file"
    rejected = wait_for(lambda: [r for r in agent.snapshot()["rejected"] if r["source"] == "http"], what="rejection")
    assert rejected[0]["pod"] == "default/web-testnode" and "file" in rejected[0]["message"]
    pods_out = agent.cli("pods")
    assert "Rejected manifests" in pods_out and server.url in pods_out


def test_unknown_field_runs_the_pod_and_warns_once(agent, server):
    server.body = pod_yaml("typo", extra="\n    imagePullPolcy: Never").encode()
    agent.start(*url_args(server))
    wait_for(lambda: (r := agent.pod("typo")) and r["status"] == "Running", what="pod runs without the field")
    events = wait_for(lambda: (o := agent.cli("events")) and "UnknownField" in o and o, what="warning event")
    assert 'unknown field "spec.containers[0].imagePullPolcy"' in events
    assert "(x" not in events.split("UnknownField", 1)[1].splitlines()[0], "reported once, not on every poll"


def test_explicit_empty_list_removes_url_pods_but_an_empty_body_does_not(agent, server):
    server.body = pod_yaml("web").encode()
    agent.start(*url_args(server))
    wait_for(lambda: (r := agent.pod("web")) and r["status"] == "Running", what="running")
    server.body = b""
    wait_for(lambda: "empty" in agent.cli("events"), what="empty body reported")
    assert agent.pod("web")["status"] == "Running", "an empty body keeps the last good pods"
    server.body = b"apiVersion: v1\nkind: PodList\nitems: []\n"
    wait_for(lambda: agent.pod("web") is None and not agent.containers_of("web"), what="pods removed")


def test_runonce_offline_uses_the_cached_copy(agent, server):
    server.body = (
        pod_yaml("job", "echo ran", extra="").replace("spec:\n", "spec:\n  restartPolicy: OnFailure\n", 1).encode()
    )
    first = agent.run_once(*url_args(server), "--runonce-timeout", "60s")
    assert first.returncode == 0, first.stdout + first.stderr
    server.down()
    again = agent.run_once(*url_args(server), "--runonce-timeout", "60s")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "cached copy" in again.stderr, again.stderr
    assert "job-testnode" in again.stdout
