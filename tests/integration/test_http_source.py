"""The URL source against a real HTTP(S) server on loopback whose answers each test sets (no root needed)."""

from __future__ import annotations

import asyncio
import logging
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from edgelet.api.annotations import ORIGIN
from edgelet.sources import SourceSnapshot
from edgelet.sources.http import CACHE_FILE, MAX_BODY_BYTES, HttpSource
from edgelet.util.clock import RealClock

NODE = "node1"
WAIT = 10.0  # upper bound of every wait; tests pass long before


# 600 bytes whose `<<:` merges copy 2^11 times over: refused while parsing, not after building 400 MB.
MERGE_BOMB = b"a0: &a0 {k0: v, k1: v, k2: v, k3: v, k4: v, k5: v, k6: v, k7: v}\n" + b"".join(
    f"a{i}: &a{i} {{<<: [*a{i - 1}, *a{i - 1}], x{i}: {{<<: *a{i - 1}}}}}\n".encode() for i in range(1, 12)
)


def pod_yaml(name: str, image: str = "busybox:1.36") -> str:
    return f"""apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  containers:
  - name: app
    image: {image}
"""


def pod_list_yaml(*names: str, kind: str = "PodList") -> str:
    items = "".join(
        f"""- apiVersion: v1
  kind: Pod
  metadata:
    name: {n}
  spec:
    containers:
    - name: app
      image: busybox:1.36
"""
        for n in names
    )
    return f"apiVersion: v1\nkind: {kind}\nitems:\n{items}" if names else f"apiVersion: v1\nkind: {kind}\nitems: []\n"


@dataclass
class Reply:
    """What the server answers next; a matching If-None-Match / If-Modified-Since gets a 304."""

    status: int = 200
    body: bytes = b""
    etag: str | None = None
    last_modified: str | None = None
    delay: float = 0.0
    content_length: bool = True
    headers: dict[str, str] = field(default_factory=dict)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        owner = self.server.owner
        with owner.lock:
            reply = owner.reply
            owner.requests.append(self.headers)
        if reply.delay:
            owner.stopping.wait(reply.delay)
        try:
            if (reply.etag and self.headers.get("If-None-Match") == reply.etag) or (
                reply.last_modified and self.headers.get("If-Modified-Since") == reply.last_modified
            ):
                self.send_response(304)
                self.end_headers()
                return
            self.send_response(reply.status)
            if reply.etag:
                self.send_header("ETag", reply.etag)
            if reply.last_modified:
                self.send_header("Last-Modified", reply.last_modified)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            if reply.content_length:
                self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped reading (size limit, timeout): expected

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: ManifestServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # aborted TLS handshakes and clients that hang up are part of the tests


class ManifestServer:
    """An HTTP/1.0 server on 127.0.0.1 (each answer closes its connection), in a thread."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.lock = threading.Lock()
        self.reply = Reply()
        self.requests: list[Any] = []
        self.stopping = threading.Event()
        self.httpd = _Server(("127.0.0.1", 0), _Handler)
        self.httpd.owner = self
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.scheme = "https" if tls else "http"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.running = True

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}/pods.yaml"

    def set(self, body: str | bytes = b"", **kw: Any) -> None:
        with self.lock:
            self.reply = Reply(body=body.encode() if isinstance(body, str) else body, **kw)

    def request_count(self) -> int:
        with self.lock:
            return len(self.requests)

    def stop(self) -> None:
        if not self.running:
            return
        self.running = False
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(WAIT)


@pytest.fixture
def server() -> Iterator[ManifestServer]:
    srv = ManifestServer()
    yield srv
    srv.stop()


def make_source(url: str, cache_dir: Path, **kw: Any) -> HttpSource:
    kw.setdefault("headers", {})
    kw.setdefault("check_frequency", 0.05)
    kw.setdefault("timeout", 5.0)
    return HttpSource(url, NODE, clock=RealClock(), cache_dir=cache_dir, **kw)


def scan(source: HttpSource, times: int = 1) -> list[SourceSnapshot]:
    """`times` scans in one event loop, then close the client."""

    async def main() -> list[SourceSnapshot]:
        try:
            return [await source.scan_once() for _ in range(times)]
        finally:
            await source.aclose()

    return asyncio.run(main())


def scan_after(source: HttpSource, server: ManifestServer, *bodies: dict[str, Any]) -> list[SourceSnapshot]:
    """One scan per server reply, in one event loop."""

    async def main() -> list[SourceSnapshot]:
        out = []
        try:
            for reply in bodies:
                server.set(**reply)
                out.append(await source.scan_once())
        finally:
            await source.aclose()
        return out

    return asyncio.run(main())


def names(snapshot: SourceSnapshot) -> list[str]:
    return [p.metadata.name for p in snapshot.pods]


def uids(snapshot: SourceSnapshot) -> list[str]:
    return [p.metadata.uid for p in snapshot.pods]


def only_error(snapshot: SourceSnapshot) -> str:
    (error,) = snapshot.errors
    assert error.source == "http"
    return error.message


# --- what a body may hold -------------------------------------------------------------


def test_one_pod(server: ManifestServer, tmp_path: Path) -> None:
    server.set(pod_yaml("web"))
    (snap,) = scan(make_source(server.url, tmp_path))
    assert snap.source == "http" and snap.errors == ()
    (pod,) = snap.pods
    assert pod.metadata.name == "web-node1"
    assert pod.metadata.namespace == "default"
    assert pod.metadata.uid
    assert pod.metadata.annotations[ORIGIN] == server.url
    assert pod.metadata.annotations["kubernetes.io/config.source"] == "http"
    assert pod.spec.node_name == NODE


def test_pod_list_and_v1_list(server: ManifestServer, tmp_path: Path) -> None:
    source = make_source(server.url, tmp_path)
    a, b = scan_after(source, server, {"body": pod_list_yaml("a", "b")}, {"body": pod_list_yaml("c", kind="List")})
    assert names(a) == ["a-node1", "b-node1"] and a.errors == ()
    assert names(b) == ["c-node1"] and b.errors == ()


def test_multi_document_yaml_and_json(server: ManifestServer, tmp_path: Path) -> None:
    source = make_source(server.url, tmp_path)
    json_pod = (
        b'{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "j"}, '
        b'"spec": {"containers": [{"name": "c", "image": "busybox"}]}}'
    )
    multi, js = scan_after(
        source, server, {"body": pod_yaml("x") + "---\n" + pod_list_yaml("y", "z")}, {"body": json_pod}
    )
    assert names(multi) == ["x-node1", "y-node1", "z-node1"] and multi.errors == ()
    assert names(js) == ["j-node1"]


def test_same_body_gives_same_uids_and_a_changed_body_new_ones(server: ManifestServer, tmp_path: Path) -> None:
    source = make_source(server.url, tmp_path)
    s1, s2, s3 = scan_after(
        source,
        server,
        {"body": pod_yaml("web")},
        {"body": pod_yaml("web")},
        {"body": pod_yaml("web", image="busybox:1.37")},
    )
    assert uids(s1) == uids(s2)
    assert uids(s3) != uids(s1)


# --- failures keep the last good pods -----------------------------------------------------


def _after_good(server: ManifestServer, tmp_path: Path, bad: dict[str, Any], **kw: Any) -> tuple[SourceSnapshot, ...]:
    source = make_source(server.url, tmp_path, **kw)
    good, after, again = scan_after(source, server, {"body": pod_yaml("web")}, bad, {"body": pod_yaml("web")})
    assert good.errors == () and names(good) == ["web-node1"]
    assert again.errors == () and again.pods == good.pods  # recovered
    return good, after


@pytest.mark.parametrize(
    "bad, fragment",
    [
        ({"status": 500, "body": b"oops"}, "HTTP status 500"),
        ({"status": 404}, "HTTP status 404"),
        ({"body": b"\x00\x01 not: [yaml"}, ""),
        ({"body": b'{"kind": "Deployment", "apiVersion": "apps/v1"}'}, "unsupported kind Deployment"),
        ({"body": b""}, "empty body"),
        ({"body": b"  \n\n"}, "empty body"),
        ({"body": b"# nothing here\n---\n"}, "no manifest"),
        ({"body": b"x" * (MAX_BODY_BYTES + 1024 * 1024)}, "larger than the limit"),
        ({"body": b"x" * (MAX_BODY_BYTES + 1024 * 1024), "content_length": False}, "larger than the limit"),
        ({"body": b"- " * 30000 + b"x\n"}, "nested more than 100 levels deep"),
        ({"body": MERGE_BOMB}, "more than 100000 values (aliases and merge keys expanded)"),
    ],
    ids=[
        "500",
        "404",
        "garbage",
        "wrong-kind",
        "empty",
        "blank",
        "comments-only",
        "11MiB",
        "11MiB-streamed",
        "deep-nesting",
        "merge-bomb",
    ],
)
def test_bad_answers_keep_the_last_good_pods(
    server: ManifestServer, tmp_path: Path, bad: dict[str, Any], fragment: str
) -> None:
    good, after = _after_good(server, tmp_path, bad)
    assert after.pods == good.pods
    message = only_error(after)
    assert message.startswith(server.url + ": ")
    assert fragment in message
    assert after.errors[0].origin == server.url


def test_fetch_failures_and_bad_bodies_have_their_own_event_reasons(server: ManifestServer, tmp_path: Path) -> None:
    """A URL that cannot be read is FailedToFetch, not FailedValidation (issue 15)."""
    _, failed = _after_good(server, tmp_path, {"status": 500, "body": b"oops"})
    assert failed.errors[0].reason == "FailedToFetch"
    _, bad = _after_good(server, tmp_path, {"body": b'{"kind": "Deployment", "apiVersion": "apps/v1"}'})
    assert bad.errors[0].reason == "FailedValidation"


def test_timeout_keeps_the_last_good_pods(server: ManifestServer, tmp_path: Path) -> None:
    good, after = _after_good(server, tmp_path, {"body": pod_yaml("other"), "delay": 3.0}, timeout=0.5)
    assert after.pods == good.pods
    assert "timed out after 0.5s" in only_error(after)


def test_trickling_body_hits_the_overall_deadline(tmp_path: Path) -> None:
    """A server that sends a byte now and then never trips httpx's per-read timeout; the deadline stops it."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    done = threading.Event()

    def trickle() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 1000\r\n\r\n")
            while not done.wait(0.1):
                try:
                    conn.sendall(b"#")
                except OSError:
                    return

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        (snap,) = scan(make_source(f"http://127.0.0.1:{port}/", tmp_path, timeout=0.5))
        assert "timed out" in only_error(snap)
    finally:
        done.set()
        thread.join(WAIT)
        listener.close()


def test_connection_refused_with_nothing_cached(tmp_path: Path) -> None:
    server = ManifestServer()
    url = server.url
    server.stop()
    (snap,) = scan(make_source(url, tmp_path))
    assert snap.pods == ()
    assert "cannot fetch" in only_error(snap)


def test_one_invalid_item_rejects_the_whole_list(server: ManifestServer, tmp_path: Path) -> None:
    bad = (
        pod_list_yaml("a", "b").replace("image: busybox:1.36", "image: ''", 2).replace("image: ''", "image: busybox", 1)
    )
    good, after = _after_good(server, tmp_path, {"body": bad})
    assert after.pods == good.pods
    message = only_error(after)
    assert "$.items[1].spec.containers[0].image" in message
    assert after.errors[0].pod == "default/b-node1"


def test_invalid_item_in_a_multi_document_body_names_the_document(server: ManifestServer, tmp_path: Path) -> None:
    body = pod_yaml("ok") + "---\n" + pod_yaml("bad").replace("name: app", "name: Bad_Name")
    server.set(body)
    (snap,) = scan(make_source(server.url, tmp_path))
    assert snap.pods == ()
    assert "document 1: $.spec.containers[0].name" in only_error(snap)


def test_decode_error_names_the_item(server: ManifestServer, tmp_path: Path) -> None:
    server.set(pod_list_yaml("a", "b", "c").replace("name: c\n", "name: [c]\n"))
    (snap,) = scan(make_source(server.url, tmp_path))
    assert "$.items[2].metadata.name" in only_error(snap)


@pytest.mark.parametrize("kind", ["PodList", "List"])
def test_explicit_empty_list_removes_every_pod(server: ManifestServer, tmp_path: Path, kind: str) -> None:
    source = make_source(server.url, tmp_path)
    good, empty = scan_after(source, server, {"body": pod_list_yaml("a", "b")}, {"body": pod_list_yaml(kind=kind)})
    assert len(good.pods) == 2
    assert empty.pods == () and empty.errors == ()


# --- conditional requests, headers ------------------------------------------------------------


def test_etag_is_sent_back_and_304_changes_nothing(server: ManifestServer, tmp_path: Path) -> None:
    source = make_source(server.url, tmp_path)
    first, second = scan_after(
        source,
        server,
        {"body": pod_yaml("web"), "etag": '"v1"'},
        {"body": pod_yaml("changed-but-same-etag"), "etag": '"v1"'},
    )
    assert "If-None-Match" not in server.requests[0]
    assert server.requests[1]["If-None-Match"] == '"v1"'
    assert second == first  # the server answered 304: the pods of the first body stay


def test_last_modified_is_sent_back(server: ManifestServer, tmp_path: Path) -> None:
    stamp = "Wed, 21 Oct 2015 07:28:00 GMT"
    source = make_source(server.url, tmp_path)
    first, second = scan_after(
        source,
        server,
        {"body": pod_yaml("web"), "last_modified": stamp},
        {"body": pod_yaml("other"), "last_modified": stamp},
    )
    assert server.requests[1]["If-Modified-Since"] == stamp
    assert second == first


def test_configured_headers_are_sent(server: ManifestServer, tmp_path: Path) -> None:
    server.set(pod_yaml("web"))
    scan(make_source(server.url, tmp_path, headers={"Authorization": "Bearer t0k", "X-Device": "d1"}))
    scan(make_source(server.url, tmp_path, headers=[("X-Multi", "a"), ("X-Multi", "b")]))
    first, second = server.requests
    assert first["Authorization"] == "Bearer t0k" and first["X-Device"] == "d1"
    assert first["User-Agent"].startswith("edgelet/")
    assert ",".join(second.get_all("X-Multi")).replace(" ", "") == "a,b"


def test_plain_http_is_warned_about_once(
    server: ManifestServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server.set(pod_yaml("web"))
    with caplog.at_level(logging.WARNING, logger="edgelet.sources.http"):
        scan(make_source(server.url, tmp_path), times=3)
    assert sum("plain http" in r.getMessage() for r in caplog.records) == 1


def test_failures_are_logged_then_recovery_once(
    server: ManifestServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source = make_source(server.url, tmp_path)
    replies = [{"status": 503}] * 5 + [{"body": pod_yaml("web")}] * 2
    with caplog.at_level(logging.INFO, logger="edgelet.sources.http"):
        scan_after(source, server, *replies)
    messages = [r.getMessage() for r in caplog.records]
    assert sum(m.startswith("Cannot use manifest URL") for m in messages) == 3  # then throttled
    assert sum(m.startswith("Manifest URL recovered") for m in messages) == 1


# --- the on-disk copy -------------------------------------------------------------------------


def test_cached_copy_is_used_when_the_url_is_down_at_start(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    server = ManifestServer()
    url = server.url
    try:
        server.set(pod_list_yaml("a", "b"), etag='"e1"')
        (online,) = scan(make_source(url, tmp_path))
    finally:
        server.stop()
    cache = tmp_path / CACHE_FILE
    assert cache.is_file() and (cache.stat().st_mode & 0o777) == 0o600
    with caplog.at_level(logging.WARNING, logger="edgelet.sources.http"):
        offline, still = scan(make_source(url, tmp_path), times=2)  # a new instance, as after a reboot
    assert offline.errors == () and still.errors == ()
    assert names(offline) == ["a-node1", "b-node1"]
    assert uids(offline) == uids(online)
    assert offline.pods == online.pods
    assert any(r.getMessage().startswith("Using cached copy of manifest URL from=") for r in caplog.records)


def test_cached_copy_of_another_url_is_not_used(tmp_path: Path) -> None:
    server = ManifestServer()
    try:
        server.set(pod_yaml("web"))
        scan(make_source(server.url, tmp_path))
        other = server.url.replace("pods.yaml", "other.yaml")
    finally:
        server.stop()
    (snap,) = scan(make_source(other, tmp_path))
    assert snap.pods == () and "cannot fetch" in only_error(snap)


def test_cached_copy_is_used_when_the_url_serves_garbage_at_start(server: ManifestServer, tmp_path: Path) -> None:
    server.set(pod_yaml("web"))
    (online,) = scan(make_source(server.url, tmp_path))
    server.set(b"")
    (snap,) = scan(make_source(server.url, tmp_path))
    assert snap.pods == online.pods
    assert "empty body" in only_error(snap)  # the server is up: its bad answer is reported


def test_cache_is_rewritten_only_when_the_body_changes(server: ManifestServer, tmp_path: Path) -> None:
    cache = tmp_path / CACHE_FILE
    source = make_source(server.url, tmp_path)

    async def main() -> list[int]:
        inodes = []
        try:
            for body in (pod_yaml("a"), pod_yaml("a"), "", pod_yaml("b")):
                server.set(body)
                await source.scan_once()
                inodes.append(cache.stat().st_ino)
        finally:
            await source.aclose()
        return inodes

    first, same, after_error, changed = asyncio.run(main())
    assert first == same == after_error  # write_atomic renames a new file in: a new inode means a write
    assert changed != first
    assert b"b" in cache.read_bytes()


def test_cache_write_failure_keeps_the_pods(server: ManifestServer, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    server.set(pod_yaml("web"))
    (snap,) = scan(make_source(server.url, blocker / "sub"))  # cache_dir under a regular file: cannot exist
    assert names(snap) == ["web-node1"] and snap.errors == ()


# --- HTTPS --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("needs the openssl command to make a test certificate")
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


@pytest.fixture
def tls_server(tls_files: tuple[Path, Path]) -> Iterator[ManifestServer]:
    cert, key = tls_files
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    srv = ManifestServer(tls=ctx)
    yield srv
    srv.stop()


def test_https_with_a_ca_bundle(
    tls_server: ManifestServer, tls_files: tuple[Path, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tls_server.set(pod_yaml("web"))
    with caplog.at_level(logging.WARNING, logger="edgelet.sources.http"):
        (snap,) = scan(make_source(tls_server.url, tmp_path, ca_file=tls_files[0]))
    assert snap.errors == () and names(snap) == ["web-node1"]
    assert not any("plain http" in r.getMessage() for r in caplog.records)


def test_https_without_the_ca_is_refused(tls_server: ManifestServer, tmp_path: Path) -> None:
    tls_server.set(pod_yaml("web"))
    (snap,) = scan(make_source(tls_server.url, tmp_path))
    assert snap.pods == ()
    assert "CERTIFICATE_VERIFY_FAILED" in only_error(snap)


def test_missing_ca_bundle_is_reported_per_poll(server: ManifestServer, tmp_path: Path) -> None:
    server.set(pod_yaml("web"))
    (snap,) = scan(make_source(server.url, tmp_path, ca_file=tmp_path / "nope.pem"))
    assert snap.pods == () and "cannot load CA bundle" in only_error(snap)


# --- run() ----------------------------------------------------------------------------------------


class Collector:
    def __init__(self) -> None:
        self.queue: asyncio.Queue[SourceSnapshot] = asyncio.Queue()

    async def emit(self, snapshot: SourceSnapshot) -> None:
        self.queue.put_nowait(snapshot)

    async def next(self) -> SourceSnapshot:
        return await asyncio.wait_for(self.queue.get(), WAIT)


async def _until(predicate: Any) -> None:
    async with asyncio.timeout(WAIT):
        while not predicate():
            await asyncio.sleep(0.01)


def test_run_emits_only_on_change(server: ManifestServer, tmp_path: Path) -> None:
    source = make_source(server.url, tmp_path, check_frequency=0.05)
    got = Collector()

    async def main() -> None:
        server.set(pod_yaml("web"), etag='"v1"')
        task = asyncio.create_task(source.run(got.emit))
        try:
            first = await got.next()
            assert names(first) == ["web-node1"]
            # Several polls answered 304: nothing new is emitted.
            await _until(lambda: server.request_count() >= 5)
            assert got.queue.empty()
            assert all(r["If-None-Match"] == '"v1"' for r in server.requests[1:5])
            # The same body without validators: still nothing new.
            server.set(pod_yaml("web"))
            seen = server.request_count()
            await _until(lambda: server.request_count() >= seen + 3)
            assert got.queue.empty()
            # A failure is a change (the error), and so is the recovery.
            server.set(status=500)
            failed = await got.next()
            assert failed.pods == first.pods and "HTTP status 500" in only_error(failed)
            server.set(pod_yaml("web"))
            recovered = await got.next()
            assert recovered == first
            server.set(pod_yaml("db"), etag='"v2"')
            changed = await got.next()
            assert names(changed) == ["db-node1"]
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        assert source._client is None  # run closed its client

    asyncio.run(main())


# --- redirects and header secrets (issue 11.9) ------------------------------------------------------


def test_an_https_url_redirected_to_plain_http_is_refused(
    tls_server: ManifestServer, tls_files: tuple[Path, Path], server: ManifestServer, tmp_path: Path
) -> None:
    server.set(pod_yaml("web"))
    tls_server.set(status=302, headers={"Location": server.url})
    (snap,) = scan(make_source(tls_server.url, tmp_path, ca_file=tls_files[0]))
    assert snap.pods == () and "redirect from https to plain http refused" in only_error(snap)
    assert server.request_count() == 0  # not even asked


def test_a_redirect_to_a_file_url_is_refused(server: ManifestServer, tmp_path: Path) -> None:
    server.set(status=301, headers={"Location": "file:///etc/kubernetes/manifests/x.yaml"})
    (snap,) = scan(make_source(server.url, tmp_path))
    assert "redirect to a file: URL refused" in only_error(snap)


def test_configured_headers_stay_with_the_first_host(tmp_path: Path) -> None:
    first, second = ManifestServer(), ManifestServer()
    try:
        second.set(pod_yaml("web"))
        # Same address, another port: another origin.
        first.set(status=307, headers={"Location": second.url})
        (snap,) = scan(
            make_source(first.url, tmp_path, headers=[("X-Api-Key", "s3cret"), ("Authorization", "Bearer t")])
        )
        assert names(snap) == ["web-node1"]
        assert first.requests[0]["X-Api-Key"] == "s3cret"
        assert second.requests[0]["X-Api-Key"] is None and second.requests[0]["Authorization"] is None
    finally:
        first.stop()
        second.stop()


def test_a_same_host_redirect_keeps_the_headers(server: ManifestServer, tmp_path: Path) -> None:
    source = make_source(server.url.replace("/pods.yaml", "/old.yaml"), tmp_path, headers=[("X-Api-Key", "k")])
    # The test server answers every path alike; a redirect to itself on another path is what a move looks like.
    server.set(status=302, headers={"Location": "/pods.yaml"})

    async def main() -> list[SourceSnapshot]:
        try:
            first = await source.scan_once()
            return [first]
        finally:
            await source.aclose()

    (snap,) = asyncio.run(main())
    assert "more than 10 redirects" in only_error(snap)  # it kept following with the header each time
    assert all(r["X-Api-Key"] == "k" for r in server.requests)


def test_headers_from_a_file_are_read_at_each_fetch(server: ManifestServer, tmp_path: Path) -> None:
    header_file = tmp_path / "headers"
    header_file.write_text("# the device's token\nX-Api-Key: one\n\nX-Site: lab\n")
    source = make_source(server.url, tmp_path, header_file=header_file)
    server.set(pod_yaml("web"))

    async def main() -> list[SourceSnapshot]:
        try:
            out = [await source.scan_once()]
            header_file.write_text("X-Api-Key: two\n")  # rotated: no restart needed
            out.append(await source.scan_once())
            header_file.write_text("no colon here\n")
            out.append(await source.scan_once())
            header_file.write_bytes(b"X-Api-Key: \xffsecret\n")  # not UTF-8: an error, not a crash
            out.append(await source.scan_once())
            return out
        finally:
            await source.aclose()

    ok, rotated, broken, binary = asyncio.run(main())
    assert ok.errors == () and rotated.errors == ()
    assert [r["X-Api-Key"] for r in server.requests] == ["one", "two"]
    assert server.requests[0]["X-Site"] == "lab"
    assert f"--manifest-url-header-file {header_file}: line 1: expected `Name: value`" in only_error(broken)
    assert broken.pods == ok.pods  # the last good pods stay
    assert f"--manifest-url-header-file {header_file}: not UTF-8 text" in only_error(binary)
    assert "secret" not in only_error(binary) and "xff" not in only_error(binary) and binary.pods == ok.pods
