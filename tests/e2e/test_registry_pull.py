"""End to end with a real registry: a pod's image is pulled on demand; a dead registry holds back only its own pod."""

from __future__ import annotations

import shutil

import pytest

from tests.e2e.conftest import IMAGE, sleeper_yaml, wait_for
from tests.integration.registry import Layout, Registry, busybox_tar, free_port

pytestmark = [
    pytest.mark.privileged,
    pytest.mark.skipif(
        shutil.which("docker-registry") is None or shutil.which("skopeo") is None,
        reason="needs docker-registry and skopeo",
    ),
]


def test_pull_on_demand_and_dead_registry_backs_off(agent, tmp_path):
    reg = Registry(tmp_path / "reg")
    reg.start()
    try:
        lay = Layout(tmp_path / "lay")
        lay.tag(lay.image([(busybox_tar(), True)]))
        reg.push_layout(lay.dir, "test/busybox:1")
        agent.start()
        image = f"{reg.host}/test/busybox:1"
        agent.write_manifest("pulled.yaml", sleeper_yaml("pulled", image))
        wait_for(
            lambda: (r := agent.pod("pulled")) and r["status"] == "Running" and r,
            timeout=60,
            what="pod with a pulled image Running",
        )
        assert image in agent.cli("images")

        # Nothing listens on this port: the pull fails, then backs off; the other pod keeps running.
        dead = f"127.0.0.1:{free_port()}/test/busybox:1"
        agent.write_manifest("dead.yaml", sleeper_yaml("dead", dead))
        wait_for(
            lambda: (r := agent.pod("dead")) and r["status"] == "ErrImagePull" and r, timeout=60, what="ErrImagePull"
        )
        wait_for(
            lambda: (r := agent.pod("dead")) and r["status"] == "ImagePullBackOff" and r,
            timeout=60,
            what="ImagePullBackOff",
        )
        assert agent.pod("pulled")["status"] == "Running"
        agent.write_manifest("local.yaml", sleeper_yaml("local", IMAGE))
        wait_for(
            lambda: (r := agent.pod("local")) and r["status"] == "Running" and r,
            timeout=60,
            what="a pod with an imported image Running meanwhile",
        )
    finally:
        reg.stop()


class HalfwayProxy:
    """A loopback proxy in front of the registry that sends half of every large blob, then holds the rest
    until `release()`: the agent's pull is then under way for as long as the test looks at it. With
    `refuse_first`, the large blobs of the first pull are answered 503 instead (see the test for why): every
    one of them, as the puller fetches blobs side by side and one held would keep that pull going."""

    def __init__(self, upstream: str, refuse_first: bool = False) -> None:
        import http.server
        import threading
        import urllib.request

        self.gate = threading.Event()
        self.refuse = threading.Event()
        self.refused = threading.Event()
        if refuse_first:
            self.refuse.set()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_HEAD(self) -> None:
                self.do_GET(body=False)

            def do_GET(self, body: bool = True) -> None:
                req = urllib.request.Request(
                    f"http://{upstream}{self.path}",
                    method=self.command,
                    headers={k: v for k, v in self.headers.items() if k.lower() != "host"},
                )
                try:
                    resp = urllib.request.urlopen(req, timeout=30)
                except urllib.error.HTTPError as err:
                    resp = err
                data = resp.read() if body else b""
                if "/manifests/" in self.path and proxy.refused.is_set():
                    proxy.refuse.clear()  # the next pull: its blobs are held, not refused
                if "/blobs/" in self.path and len(data) > 1 << 20 and proxy.refuse.is_set():
                    proxy.refused.set()
                    self.send_error(503, "refused by the test")
                    return
                self.send_response(resp.status)
                for k, v in resp.headers.items():
                    if k.lower() not in ("connection", "transfer-encoding", "date", "server"):
                        self.send_header(k, v)
                self.end_headers()
                try:
                    if "/blobs/" in self.path and len(data) > 1 << 20:
                        self.wfile.write(data[: len(data) // 2])
                        self.wfile.flush()
                        proxy.gate.wait(60)
                        data = data[len(data) // 2 :]
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the puller gave up on a held blob (its read timeout) and will ask again

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def release(self) -> None:
        self.gate.set()

    def close(self) -> None:
        self.gate.set()
        self.server.shutdown()
        self.server.server_close()


def test_a_pull_under_way_shows_in_describe_and_wide(agent, tmp_path):
    from tests.integration.registry import big_file_layer

    reg = Registry(tmp_path / "reg")
    reg.start()
    # A pod's first pull does not show yet: the pod has no row in the pods table (state/pods.json, which
    # describe and `pods` read) until its first sync, which waits for the pull, ends. So the first attempt is
    # refused at once (ErrImagePull, then the 10 s back-off) and the retry is the pull the test looks at;
    # held instead, the first attempt only ended at the puller's 30 s read timeout, with the same retry after.
    proxy = HalfwayProxy(reg.host, refuse_first=True)
    try:
        lay = Layout(tmp_path / "lay")
        lay.tag(lay.image([(busybox_tar(), True), (big_file_layer("data/blob", 4 << 20), True)]))
        reg.push_layout(lay.dir, "test/big:1")
        agent.start()
        image = f"{proxy.host}/test/big:1"
        agent.write_manifest("slow.yaml", sleeper_yaml("slow", image))
        # Held at half a layer; should the puller's 30 s read timeout strike on a loaded machine, the next
        # retry is held again, so the pull shows for as long as the test looks.
        described = wait_for(
            lambda: (t := agent.cli("describe", "pod", "slow")) and "Pulling:" in t and t,
            timeout=180,
            what="describe pod showing the pull",
        )
        line = next(x for x in described.splitlines() if "Pulling:" in x)
        assert " of " in line and "%)" in line  # e.g. "Pulling:  2.1MB of 5.3MB (40%)"
        wide = agent.cli("pods", "-o", "wide")
        assert f"pulling {image}: " in wide
        proxy.release()
        wait_for(
            lambda: (r := agent.pod("slow")) and r["status"] == "Running" and r,
            timeout=90,
            what="the pod Running once the pull is done",
        )
        assert "Pulling:" not in agent.cli("describe", "pod", "slow")
        events = agent.cli("events", "--for", "slow-testnode")
        assert "Pulled" in events and "Image size:" in events
        assert "Failed" in events and "HTTP 503" in events  # the refused first pull
    finally:
        proxy.close()
        reg.stop()
