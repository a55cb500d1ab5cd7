"""A real OCI registry for tests: Debian's docker-registry on a free loopback port, images pushed with skopeo.

    reg = Registry(tmp_path)           # or Registry(tmp_path, htpasswd=("user", "secret"))
                                       # or Registry(tmp_path, token=TokenServer(dir, ("user", "secret")))
    reg.start()
    reg.push_layout(layout_dir, "test/busybox:1")
    ...
    reg.stop()

Also builds the OCI layouts to push: single images (any platform, gzip'd or plain
layers) and a multi-platform index over several of them.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.parse
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from edgelet.testing.images import _info, build_config, build_layer, build_tar

REGISTRY_BIN = "/usr/bin/docker-registry"
MT_INDEX = "application/vnd.oci.image.index.v1+json"
MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER = "application/vnd.oci.image.layer.v1.tar"
MT_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _canon(doc: object) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Registry:
    """One docker-registry process; storage survives stop()/start() so a restart serves the same content."""

    def __init__(
        self, base: Path, *, htpasswd: tuple[str, str] | None = None, token: TokenServer | None = None
    ) -> None:
        self.base = Path(base)
        self.storage = self.base / "storage"
        self.storage.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.creds = htpasswd
        self.proc: subprocess.Popen | None = None
        auth = ""
        if htpasswd is not None:
            pw_file = self.base / "htpasswd"
            subprocess.run(
                ["htpasswd", "-Bbc", str(pw_file), htpasswd[0], htpasswd[1]], check=True, capture_output=True
            )
            auth = f"auth:\n  htpasswd:\n    realm: edgelet-test\n    path: {pw_file}\n"
        if token is not None:
            self.creds = token.creds
            auth = (
                f"auth:\n  token:\n    realm: {token.realm}\n    service: {token.service}\n"
                f"    issuer: {token.issuer}\n    rootcertbundle: {token.cert}\n"
            )
        self.config = self.base / "config.yml"
        self.config.write_text(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n"
            f"storage:\n  filesystem:\n    rootdirectory: {self.storage}\n  delete:\n    enabled: true\n"
            f"http:\n  addr: 127.0.0.1:{self.port}\n" + auth
        )
        self.log = self.base / "registry.log"

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [REGISTRY_BIN, "serve", str(self.config)], stdout=log, stderr=log, start_new_session=True
            )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"docker-registry exited: {self.log.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("docker-registry did not start listening")

    def kill(self) -> None:
        """SIGKILL, as a crash or a cut cable would end it."""
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)
            self.proc = None

    def stop(self) -> None:
        self.kill()

    def push_layout(self, layout: Path, repo_tag: str, *, all_platforms: bool = False, ref_name: str = "img") -> None:
        argv = ["skopeo", "copy", "--quiet", "--dest-tls-verify=false", "--preserve-digests"]
        if all_platforms:
            argv.append("--all")
        if self.creds is not None:
            argv += ["--dest-creds", f"{self.creds[0]}:{self.creds[1]}"]
        argv += [f"oci:{layout}:{ref_name}", f"docker://{self.host}/{repo_tag}"]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"skopeo copy failed: {out.stderr}")

    def blob_file(self, digest: str) -> Path:
        hex_ = digest.split(":", 1)[1]
        return self.storage / "docker" / "registry" / "v2" / "blobs" / "sha256" / hex_[:2] / hex_ / "data"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class TokenServer:
    """The token service of docker distribution's `auth: token` scheme, on loopback, for one user.

    A GET /token with the right basic credentials gets a JWT (RS256, signed by the `openssl` CLI with a key
    whose self-signed certificate is the registry's rootcertbundle; the certificate rides in the `x5c`
    header) granting the actions asked for in `scope`; wrong credentials get a 401. `requests` records
    (user or None, scopes) per request so a test can see the bearer flow happened."""

    service = "edgelet-test-registry"
    issuer = "edgelet-test-issuer"

    def __init__(self, base: Path, creds: tuple[str, str]) -> None:
        self.base = Path(base)
        self.base.mkdir(parents=True, exist_ok=True)
        self.creds = creds
        self.key, self.cert = self.base / "token.key", self.base / "token.pem"
        subprocess.run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                str(self.key),
                "-out",
                str(self.cert),
                "-days",
                "2",
                "-subj",
                "/CN=edgelet-test-token",
                "-addext",
                "keyUsage=critical,digitalSignature,keyCertSign",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
            ],
            check=True,
            capture_output=True,
        )
        der = subprocess.run(
            ["openssl", "x509", "-in", str(self.cert), "-outform", "DER"], check=True, capture_output=True
        ).stdout
        self._x5c = base64.b64encode(der).decode()
        self.requests: list[tuple[str | None, list[str]]] = []
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = free_port()

    @property
    def realm(self) -> str:
        return f"http://127.0.0.1:{self.port}/token"

    def sign(self, claims: dict) -> str:
        header = {"typ": "JWT", "alg": "RS256", "x5c": [self._x5c]}
        signing_input = f"{_b64url(_canon(header))}.{_b64url(_canon(claims))}"
        sig = subprocess.run(
            ["openssl", "dgst", "-sha256", "-sign", str(self.key)],
            input=signing_input.encode(),
            check=True,
            capture_output=True,
        ).stdout
        return f"{signing_input}.{_b64url(sig)}"

    def _token_for(self, user: str, scopes: list[str]) -> str:
        access = []
        for scope in scopes:
            kind, _, rest = scope.partition(":")
            name, _, actions = rest.rpartition(":")
            if kind == "repository" and name:
                access.append({"type": kind, "name": name, "actions": [a for a in actions.split(",") if a]})
        now = int(time.time())
        return self.sign(
            {
                "iss": self.issuer,
                "sub": user,
                "aud": self.service,
                "exp": now + 300,
                "nbf": now - 10,
                "iat": now,
                "jti": uuid.uuid4().hex,
                "access": access,
            }
        )

    def start(self) -> None:
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                query = urllib.parse.parse_qs(url.query)
                scopes = [s for v in query.get("scope", []) for s in v.split(" ") if s]
                user = None
                header = self.headers.get("Authorization", "")
                if header.startswith("Basic "):
                    user, _, password = base64.b64decode(header[6:]).decode().partition(":")
                    if (user, password) != outer.creds:
                        outer.requests.append((user, scopes))
                        self._reply(401, {"details": "invalid credentials"})
                        return
                outer.requests.append((user, scopes))
                if url.path != "/token" or user is None or query.get("service") != [outer.service]:
                    # Anonymous: a token with no access, as Docker Hub's token service gives for private repos.
                    self._reply(
                        200 if url.path == "/token" else 404,
                        {"token": outer._token_for("", []) if url.path == "/token" else ""},
                    )
                    return
                token = outer._token_for(user, scopes)
                self._reply(200, {"token": token, "access_token": token, "expires_in": 300})

            def _reply(self, code: int, doc: dict) -> None:
                body = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


class Layout:
    """Writes an OCI image layout with one tagged entry (an image or an index) named `img`."""

    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)
        (self.dir / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
        (self.dir / "oci-layout").write_bytes(_canon({"imageLayoutVersion": "1.0.0"}))

    def blob(self, data: bytes) -> dict:
        path = self.dir / "blobs" / "sha256" / _sha(data).split(":")[1]
        path.write_bytes(data)
        return {"digest": _sha(data), "size": len(data)}

    def image(
        self,
        layers: Sequence[tuple[bytes, bool]],
        *,
        architecture: str | None = None,
        variant: str | None = None,
        config: Mapping | None = None,
    ) -> dict:
        """Store an image of (uncompressed tar, gzip it?) layers; returns its manifest descriptor."""

        class _L:
            def __init__(self, tar: bytes) -> None:
                self.diff_id = _sha(tar)

        cfg = json.loads(build_config([_L(t) for t, _ in layers], config))  # type: ignore[arg-type]
        if architecture:
            cfg["architecture"] = architecture
        if variant:
            cfg["variant"] = variant
        cfg_desc = {"mediaType": MT_CONFIG, **self.blob(_canon(cfg))}
        layer_descs = []
        for tar, gz in layers:
            data = gzip.compress(tar, compresslevel=1, mtime=0) if gz else tar
            layer_descs.append({"mediaType": MT_LAYER_GZIP if gz else MT_LAYER, **self.blob(data)})
        manifest = _canon({"schemaVersion": 2, "mediaType": MT_MANIFEST, "config": cfg_desc, "layers": layer_descs})
        plat = {"architecture": cfg["architecture"], "os": "linux", **({"variant": variant} if variant else {})}
        return {"mediaType": MT_MANIFEST, **self.blob(manifest), "platform": plat}

    def index(self, manifests: Sequence[dict]) -> dict:
        body = _canon({"schemaVersion": 2, "mediaType": MT_INDEX, "manifests": list(manifests)})
        return {"mediaType": MT_INDEX, **self.blob(body)}

    def tag(self, desc: dict, name: str = "img") -> Path:
        entry = {k: v for k, v in desc.items() if k != "platform"}
        entry["annotations"] = {"org.opencontainers.image.ref.name": name}
        (self.dir / "index.json").write_bytes(_canon({"schemaVersion": 2, "mediaType": MT_INDEX, "manifests": [entry]}))
        return self.dir


def busybox_tar() -> bytes:
    return build_layer({}, busybox=True).tar


def file_layer(files: Mapping[str, bytes]) -> bytes:
    return build_layer(dict(files)).tar


def big_file_layer(name: str, size: int, *, random: bool = True) -> bytes:
    """A layer with one file of `size` bytes: random (incompressible) or zeros (a decompression bomb when gzip'd)."""
    data = os.urandom(size) if random else bytes(size)
    return build_tar([(_info(name, b"0", 0o644, len(data)), data)])


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
