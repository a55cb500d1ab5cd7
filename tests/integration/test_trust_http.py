"""The URL source with trusted keys, against a real HTTP server on loopback and signatures of the real tools:
the signature travels with the body (same server, headers), a refused body changes nothing, the offline copy
keeps body and signature together and is verified again when read."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import msgspec
import pytest

from edgelet.sources import SourceSnapshot
from edgelet.sources.http import CACHE_FILE, CachedManifest, HttpSource
from edgelet.testing.signing import MinisignKey, SshKey, missing_tools, trusted_dir
from edgelet.trust.verify import Trust
from edgelet.util.clock import RealClock

pytestmark = pytest.mark.skipif(bool(missing_tools()), reason=f"needs {missing_tools()} (make deps)")

NODE = "node1"


def pod_yaml(name: str, image: str = "busybox:1.36", version: int | None = None) -> str:
    head = f"# edgelet-version: {version}\n" if version is not None else ""
    return (
        f"{head}apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n"
        f"  - name: app\n    image: {image}\n"
    )


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        owner = self.server.owner
        path = self.path.split("?")[0]
        with owner.lock:
            owner.requests.append((self.path, dict(self.headers)))
            status, body, etag = owner.files.get(path, (404, b"not found", None))
        if etag and self.headers.get("If-None-Match") == etag:
            self.send_response(304)
            self.end_headers()
            return
        self.send_response(status)
        if etag:
            self.send_header("ETag", etag)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: FileServer


class FileServer:
    """Serves `files` (path -> (status, body, etag)) on 127.0.0.1, in a thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.files: dict[str, tuple[int, bytes, str | None]] = {}
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.httpd = _Server(("127.0.0.1", 0), _Handler)
        self.httpd.owner = self
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/pods.yaml"

    def put(self, path: str, body: bytes | None, status: int = 200, etag: str | None = None) -> None:
        with self.lock:
            if body is None:
                self.files.pop(path, None)
            else:
                self.files[path] = (status, body, etag)

    def paths(self) -> list[str]:
        with self.lock:
            return [p for p, _ in self.requests]

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)


@pytest.fixture
def server() -> Iterator[FileServer]:
    srv = FileServer()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("keys")
    minisign, ssh = MinisignKey.generate(d), SshKey.generate(d)
    trusted = trusted_dir(d / "trusted", minisign, ssh)
    return {"minisign": minisign, "ssh": ssh, "trusted": trusted, "dir": d}


def signed(keys: dict, tmp_path: Path, text: str, version: int, tool: str = "minisign") -> tuple[bytes, bytes]:
    body = tmp_path / f"body-{version}-{tool}"
    body.write_text(text)
    sig = keys[tool].sign(body, version=version) if tool == "minisign" else keys[tool].sign(body)
    return body.read_bytes(), sig.read_bytes()


def make_source(url: str, tmp_path: Path, keys: dict, **kw: Any) -> HttpSource:
    trust = Trust.load(keys["trusted"], tmp_path / "trust", RealClock())
    return HttpSource(
        url,
        NODE,
        headers=kw.pop("headers", {"X-Token": "t1"}),
        check_frequency=0.05,
        timeout=5.0,
        clock=RealClock(),
        cache_dir=tmp_path / "sources",
        trust=trust,
        **kw,
    )


def scans(source: HttpSource, *steps: Any) -> list[SourceSnapshot]:
    """Run each step (a callable changing the server), then scan; all in one event loop."""

    async def main() -> list[SourceSnapshot]:
        out = []
        try:
            for step in steps:
                step()
                out.append(await source.scan_once())
        finally:
            await source.aclose()
        return out

    return asyncio.run(main())


def images(snap: SourceSnapshot) -> dict[str, str]:
    return {p.metadata.name: p.spec.containers[0].image for p in snap.pods}


def test_a_signed_body_is_taken_and_its_signature_fetched_with_the_same_headers(
    server: FileServer, tmp_path: Path, keys: dict
) -> None:
    body, sig = signed(keys, tmp_path, pod_yaml("web"), 1)
    server.put("/pods.yaml", body)
    server.put("/pods.yaml.minisig", sig)
    [snap] = scans(make_source(server.url, tmp_path, keys), lambda: None)
    assert images(snap) == {"web-node1": "busybox:1.36"} and snap.errors == ()
    assert server.paths() == ["/pods.yaml", "/pods.yaml.minisig"]
    assert all(h.get("X-Token") == "t1" for _, h in server.requests)


def test_ssh_signature_at_dot_sig_and_a_query_string_url(server: FileServer, tmp_path: Path, keys: dict) -> None:
    body, sig = signed(keys, tmp_path, pod_yaml("web"), 1, tool="ssh")
    server.put("/pods.yaml", body)
    server.put("/pods.yaml.sig", sig)
    [snap] = scans(make_source(server.url + "?node=n1", tmp_path, keys), lambda: None)
    assert list(images(snap)) == ["web-node1"]
    assert [p for p in server.paths()] == ["/pods.yaml?node=n1", "/pods.yaml.minisig?node=n1", "/pods.yaml.sig?node=n1"]


def test_attacks_on_the_url_are_refused_and_the_pods_keep_running(
    server: FileServer, tmp_path: Path, keys: dict
) -> None:
    v1, sig1 = signed(keys, tmp_path, pod_yaml("web", "good:1"), 1)
    v2, sig2 = signed(keys, tmp_path, pod_yaml("web", "good:2"), 2)
    evil = pod_yaml("web", "evil:1").encode()
    source = make_source(server.url, tmp_path, keys)
    snaps = scans(
        source,
        lambda: (server.put("/pods.yaml", v1), server.put("/pods.yaml.minisig", sig1)),
        lambda: server.put("/pods.yaml", evil),  # a new body with the old signature
        lambda: server.put("/pods.yaml.minisig", None),  # no signature at all
        lambda: server.put("/pods.yaml.minisig", b"garbage\n"),
        lambda: (server.put("/pods.yaml", v2), server.put("/pods.yaml.minisig", sig2)),
        lambda: (server.put("/pods.yaml", v1), server.put("/pods.yaml.minisig", sig1)),  # replay of version 1
        lambda: server.put("/pods.yaml.minisig", b"x", status=500),  # the signature cannot be fetched
    )
    ok, new_body_old_sig, unsigned, garbage, updated, replay, sig_down = snaps
    assert images(ok) == {"web-node1": "good:1"} and ok.errors == ()
    for snap, reason in ((new_body_old_sig, "bad"), (unsigned, "missing"), (garbage, "malformed")):
        assert images(snap) == {"web-node1": "good:1"}
        [error] = snap.errors
        assert error.reason == "UntrustedManifest" and f"signature refused ({reason})" in error.message
    assert "pods.yaml.minisig or" in unsigned.errors[0].message
    assert images(updated) == {"web-node1": "good:2"} and updated.errors == ()
    assert images(replay) == {"web-node1": "good:2"} and "(replay)" in replay.errors[0].message
    assert images(sig_down) == {"web-node1": "good:2"}
    assert sig_down.errors[0].reason == "FailedToFetch" and "cannot fetch the signature" in sig_down.errors[0].message


def test_not_modified_needs_no_signature_fetch(server: FileServer, tmp_path: Path, keys: dict) -> None:
    body, sig = signed(keys, tmp_path, pod_yaml("web"), 1)
    server.put("/pods.yaml", body, etag='"e1"')
    server.put("/pods.yaml.minisig", sig)
    a, b = scans(make_source(server.url, tmp_path, keys), lambda: None, lambda: None)
    assert images(a) == images(b) and b.errors == ()
    assert server.paths() == ["/pods.yaml", "/pods.yaml.minisig", "/pods.yaml"]


def test_the_offline_copy_keeps_the_signature_and_is_verified_again(
    server: FileServer, tmp_path: Path, keys: dict
) -> None:
    body, sig = signed(keys, tmp_path, pod_yaml("web"), 1)
    server.put("/pods.yaml", body)
    server.put("/pods.yaml.minisig", sig)
    scans(make_source(server.url, tmp_path, keys), lambda: None)
    cached = msgspec.json.decode((tmp_path / "sources" / CACHE_FILE).read_bytes(), type=CachedManifest)
    assert cached.body == body and cached.signature == sig
    url = server.url
    server.stop()
    # Offline boot: the copy is used, after its signature is checked.
    [offline] = scans(make_source(url, tmp_path, keys), lambda: None)
    assert list(images(offline)) == ["web-node1"]
    # Someone edits the copy on disk: it is not used.
    tampered = msgspec.structs.replace(cached, body=pod_yaml("web", "evil:1").encode())
    (tmp_path / "sources" / CACHE_FILE).write_bytes(msgspec.json.encode(tampered))
    [refused] = scans(make_source(url, tmp_path, keys), lambda: None)
    assert refused.pods == ()
    # The version record is kept beside: versions.json names the URL.
    record = json.loads((tmp_path / "trust" / "versions.json").read_text())
    assert record[f"url:{url}"]["version"] == 1


def test_a_configured_signature_url(server: FileServer, tmp_path: Path, keys: dict) -> None:
    body, sig = signed(keys, tmp_path, pod_yaml("web"), 1)
    server.put("/pods.yaml", body)
    server.put("/sigs/pods.minisig", sig)
    sig_url = server.url.replace("/pods.yaml", "/sigs/pods.minisig")
    [snap] = scans(make_source(server.url, tmp_path, keys, signature_url=sig_url), lambda: None)
    assert list(images(snap)) == ["web-node1"] and server.paths() == ["/pods.yaml", "/sigs/pods.minisig"]
