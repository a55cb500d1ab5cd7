"""A real OCI registry for tests: Debian's docker-registry on a free loopback port, images pushed with skopeo.

    reg = Registry(tmp_path)           # or Registry(tmp_path, htpasswd=("user", "secret"))
    reg.start()
    reg.push_layout(layout_dir, "test/busybox:1")
    ...
    reg.stop()

Also builds the OCI layouts to push: single images (any platform, gzip'd or plain
layers) and a multi-platform index over several of them.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Mapping, Sequence

from edgelet.testing.images import build_config, build_layer, build_tar, _info

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

    def __init__(self, base: Path, *, htpasswd: tuple[str, str] | None = None) -> None:
        self.base = Path(base)
        self.storage = self.base / "storage"
        self.storage.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.creds = htpasswd
        self.proc: subprocess.Popen | None = None
        auth = ""
        if htpasswd is not None:
            pw_file = self.base / "htpasswd"
            subprocess.run(["htpasswd", "-Bbc", str(pw_file), htpasswd[0], htpasswd[1]], check=True,
                           capture_output=True)
            auth = f"auth:\n  htpasswd:\n    realm: edgelet-test\n    path: {pw_file}\n"
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
            self.proc = subprocess.Popen([REGISTRY_BIN, "serve", str(self.config)], stdout=log, stderr=log,
                                         start_new_session=True)
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

    def image(self, layers: Sequence[tuple[bytes, bool]], *, architecture: str | None = None,
              variant: str | None = None, config: Mapping | None = None) -> dict:
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
