"""Pulls from a real docker-registry on loopback: single and multi-platform images, basic auth, and hostile cases."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from edgelet.images.auth import Credential
from edgelet.images.errors import BlobError, ImageError
from edgelet.images.puller import ManifestError, Puller, PullError
from edgelet.images.store import ImageStore
from edgelet.images.unpack import LayerTooLarge
from tests.integration.registry import Layout, Registry, TokenServer, big_file_layer, busybox_tar, file_layer

pytestmark = pytest.mark.skipif(
    shutil.which("docker-registry") is None or shutil.which("skopeo") is None,
    reason="needs docker-registry and skopeo (make deps)",
)


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    base = tmp_path_factory.mktemp("registry")
    reg = Registry(base / "reg")
    reg.start()
    lay = Layout(base / "layout")
    lay.tag(lay.image([(busybox_tar(), True), (file_layer({"etc/motd": b"hello\n"}), False)]))
    reg.push_layout(lay.dir, "test/busybox:1")
    amd = lay.image([(busybox_tar(), True), (file_layer({"etc/arch": b"amd64\n"}), True)], architecture="amd64")
    arm = lay.image(
        [(busybox_tar(), True), (file_layer({"etc/arch": b"arm64\n"}), True)], architecture="arm64", variant="v8"
    )
    lay.tag(lay.index([arm, amd]))
    reg.push_layout(lay.dir, "test/multi:1", all_platforms=True)
    yield reg
    reg.stop()


def _push_one(reg: Registry, base: Path, repo_tag: str, layers) -> dict:
    lay = Layout(base)
    desc = lay.image(layers)
    lay.tag(desc)
    reg.push_layout(lay.dir, repo_tag)
    return desc


def assert_consistent(store: ImageStore) -> None:
    """Every blob matches its name, no temp leftovers, every recorded image's layers exist."""
    blobs = store.root / "blobs" / "sha256"
    for f in blobs.iterdir():
        assert hashlib.sha256(f.read_bytes()).hexdigest() == f.name, f"corrupt blob {f.name}"
    assert list((store.root / "tmp").iterdir()) == []
    for rec in store.list():
        assert all(layer.is_dir() for layer in rec.layers)


def test_pull_single_arch_image(registry, tmp_path):
    store = ImageStore(tmp_path / "store")
    rec = Puller(store).pull_sync(f"{registry.host}/test/busybox:1")
    assert (rec.layers[-1] / "etc" / "motd").read_bytes() == b"hello\n"
    assert (rec.layers[0] / "bin" / "busybox").is_file()
    assert store.get(f"{registry.host}/test/busybox:1").id == rec.id
    # By digest too, and a second pull downloads nothing new.
    again = Puller(store).pull_sync(f"{registry.host}/test/busybox@{rec.digest}")
    assert again.id == rec.id
    assert_consistent(store)


def test_pull_multi_arch_index_picks_this_platform(registry, tmp_path):
    store = ImageStore(tmp_path / "store")
    rec = Puller(store).pull_sync(f"{registry.host}/test/multi:1")
    from edgelet.images.archive import host_platform

    want = host_platform().architecture
    if want in ("amd64", "arm64"):
        assert (rec.layers[-1] / "etc" / "arch").read_text() == want + "\n"
    from edgelet.images.reference import Platform

    arm = Puller(ImageStore(tmp_path / "arm"), platform=Platform("linux", "arm64", "v8"))
    assert (arm.pull_sync(f"{registry.host}/test/multi:1").layers[-1] / "etc" / "arch").read_text() == "arm64\n"
    with pytest.raises(ImageError, match="no image for platform linux/s390x"):
        Puller(ImageStore(tmp_path / "s390x"), platform=Platform("linux", "s390x")).pull_sync(
            f"{registry.host}/test/multi:1"
        )


def test_missing_tag_and_repository(registry, tmp_path):
    p = Puller(ImageStore(tmp_path / "store"))
    with pytest.raises(PullError, match="HTTP 404"):
        p.pull_sync(f"{registry.host}/test/busybox:nope")
    with pytest.raises(PullError, match="HTTP 404"):
        p.pull_sync(f"{registry.host}/no/such:1")


def test_basic_auth_registry(tmp_path):
    reg = Registry(tmp_path / "reg", htpasswd=("edge", "s3cret"))
    reg.start()
    try:
        _push_one(reg, tmp_path / "lay", "private/img:1", [(file_layer({"x": b"1"}), True)])
        ref = f"{reg.host}/private/img:1"
        with pytest.raises(PullError, match="no credentials"):
            Puller(ImageStore(tmp_path / "s0")).pull_sync(ref)
        with pytest.raises(PullError, match="unauthorized as edge"):
            Puller(ImageStore(tmp_path / "s1"), credentials={reg.host: Credential("edge", "wrong")}).pull_sync(ref)
        rec = Puller(ImageStore(tmp_path / "s2"), credentials={reg.host: Credential("edge", "s3cret")}).pull_sync(ref)
        assert (rec.layers[0] / "x").read_bytes() == b"1"
    finally:
        reg.stop()


def test_corrupt_and_truncated_blobs(tmp_path):
    reg = Registry(tmp_path / "reg")
    reg.start()
    try:
        desc_layers = []
        for i, name in enumerate(("flip", "short")):
            lay = Layout(tmp_path / f"lay{i}")
            d = lay.image([(file_layer({f"f{i}": b"x" * 5000}), True)])
            lay.tag(d)
            reg.push_layout(lay.dir, f"test/{name}:1")
            manifest = (lay.dir / "blobs" / "sha256" / d["digest"].split(":")[1]).read_bytes()
            import json

            desc_layers.append(json.loads(manifest)["layers"][0]["digest"])
        flip = reg.blob_file(desc_layers[0])
        data = bytearray(flip.read_bytes())
        data[100] ^= 0x01
        flip.write_bytes(bytes(data))
        short = reg.blob_file(desc_layers[1])
        short.write_bytes(short.read_bytes()[:-10])
        store = ImageStore(tmp_path / "store")
        with pytest.raises(BlobError, match="content has digest"):
            Puller(store).pull_sync(f"{reg.host}/test/flip:1")
        with pytest.raises(BlobError, match="bytes"):
            Puller(store).pull_sync(f"{reg.host}/test/short:1")
        assert store.list() == []
        assert not store.has_blob(desc_layers[0]) and not store.has_blob(desc_layers[1])
        assert_consistent(store)
    finally:
        reg.stop()


def test_token_auth_registry(tmp_path):
    tokens = TokenServer(tmp_path / "token", ("edge", "t0ken"))
    tokens.start()
    reg = Registry(tmp_path / "reg", token=tokens)
    reg.start()
    try:
        _push_one(reg, tmp_path / "lay", "private/img:1", [(file_layer({"x": b"token"}), True)])
        ref = f"{reg.host}/private/img:1"
        tokens.requests.clear()
        # Anonymous: the token service hands out a token without access; the registry still says 401.
        with pytest.raises(PullError, match="unauthorized"):
            Puller(ImageStore(tmp_path / "s0")).pull_sync(ref)
        with pytest.raises(PullError, match="token request .* HTTP 401"):
            Puller(ImageStore(tmp_path / "s1"), credentials={reg.host: Credential("edge", "wrong")}).pull_sync(ref)
        tokens.requests.clear()
        rec = Puller(ImageStore(tmp_path / "s2"), credentials={reg.host: Credential("edge", "t0ken")}).pull_sync(ref)
        assert (rec.layers[0] / "x").read_bytes() == b"token"
        # One token for the repository, asked for with the scope of the registry's challenge.
        assert tokens.requests == [("edge", ["repository:private/img:pull"])]
    finally:
        reg.stop()
        tokens.stop()


@pytest.mark.skipif(shutil.which("zstd") is None, reason="needs the zstd program (make deps)")
def test_zstd_layers_pull_unpack_and_run(tmp_path, monkeypatch):
    import json

    import edgelet.images.zstd as zstd_mod

    reg = Registry(tmp_path / "reg")
    reg.start()
    try:
        lay = Layout(tmp_path / "lay")
        lay.tag(lay.image([(busybox_tar(), True), (file_layer({"z": b"zstd"}), False)]))
        out = subprocess.run(
            [
                "skopeo",
                "copy",
                "--quiet",
                "--dest-tls-verify=false",
                "--dest-compress-format",
                "zstd",
                "--dest-compress",
                f"oci:{lay.dir}:img",
                f"docker://{reg.host}/test/zstd:1",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        # Without the zstd program: refused before a byte of a layer is downloaded, naming the program.
        monkeypatch.setattr(zstd_mod, "program", lambda: None)
        store = ImageStore(tmp_path / "store")
        with pytest.raises(
            ManifestError, match=r"tar\+zstd\): zstd-compressed data needs the zstd program \(apt install zstd\)"
        ):
            Puller(store).pull_sync(f"{reg.host}/test/zstd:1")
        assert store.list() == [] and list((store.root / "blobs" / "sha256").iterdir()) == []
        monkeypatch.undo()
        # With it: pulled, every layer checked against its diffID, and the unpacked busybox runs.
        rec = Puller(store).pull_sync(f"{reg.host}/test/zstd:1")
        manifest = json.loads(store.read_blob(rec.digest, 1 << 20))
        assert {la["mediaType"] for la in manifest["layers"]} == {"application/vnd.oci.image.layer.v1.tar+zstd"}
        assert (rec.layers[1] / "z").read_bytes() == b"zstd"
        ran = subprocess.run(
            [str(rec.layers[0] / "bin" / "busybox"), "echo", "unpacked"], capture_output=True, text=True, timeout=10
        )
        assert ran.stdout == "unpacked\n"
        assert_consistent(store)
    finally:
        reg.stop()


def test_swapped_layers_fail_the_diff_id_check(registry, tmp_path):
    """The manifest lists the layers in the wrong order: each blob is fine, but not the layer the config
    says comes at that position."""
    import json

    lay = Layout(tmp_path / "lay")
    good = lay.image([(file_layer({"a": b"first"}), True), (file_layer({"b": b"second"}), True)])
    manifest = json.loads((lay.dir / "blobs" / "sha256" / good["digest"].split(":")[1]).read_bytes())
    manifest["layers"].reverse()
    body = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    lay.tag({"mediaType": good["mediaType"], **lay.blob(body)})
    registry.push_layout(lay.dir, "test/swapped:1")
    store = ImageStore(tmp_path / "store")
    with pytest.raises(BlobError, match="uncompressed content has diffID .* the image config says"):
        Puller(store).pull_sync(f"{registry.host}/test/swapped:1")
    assert store.list() == [] and list((store.root / "layers").iterdir()) == []
    assert_consistent(store)
    assert store.sweep() == (4, 0)  # the manifest, config and two layer blobs of the failed pull
    assert list((store.root / "blobs" / "sha256").iterdir()) == []


class _KillAfterFirstChunk(httpx.HTTPTransport):
    """Kills the registry as soon as a big blob's body starts arriving: a crash mid-download."""

    def __init__(self, reg: Registry) -> None:
        super().__init__()
        self.reg = reg

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        resp = super().handle_request(request)
        if "/blobs/" in request.url.path and int(resp.headers.get("content-length", "0")) > 1 << 20:
            inner = resp.stream
            reg = self.reg

            class _Stream(httpx.SyncByteStream):
                def __iter__(self):
                    first = True
                    for chunk in inner:
                        yield chunk
                        if first:
                            first = False
                            reg.kill()

                def close(self) -> None:
                    inner.close()

            resp.stream = _Stream()
        return resp


def test_registry_killed_mid_download_then_next_pull_succeeds(tmp_path):
    reg = Registry(tmp_path / "reg")
    reg.start()
    try:
        # 48 MiB of random data, uncompressed: far more than the socket buffers can hold when the registry dies.
        _push_one(reg, tmp_path / "lay", "test/big:1", [(big_file_layer("big.bin", 48 << 20), False)])
        store = ImageStore(tmp_path / "store")
        with pytest.raises(PullError):
            Puller(store, transport=_KillAfterFirstChunk(reg)).pull_sync(f"{reg.host}/test/big:1")
        assert store.list() == []
        assert_consistent(store)
        reg.start()
        rec = Puller(store).pull_sync(f"{reg.host}/test/big:1")
        assert (rec.layers[0] / "big.bin").stat().st_size == 48 << 20
        assert_consistent(store)
    finally:
        reg.stop()


@pytest.mark.privileged
def test_decompression_bomb_fails_cleanly_on_a_small_filesystem(tmp_path):
    reg = Registry(tmp_path / "reg")
    reg.start()
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(mnt)], check=True)
    try:
        # 256 MiB of zeros gzip to a few hundred KiB.
        _push_one(reg, tmp_path / "lay", "test/bomb:1", [(big_file_layer("zeros", 256 << 20, random=False), True)])
        store = ImageStore(mnt / "store")
        with pytest.raises(
            LayerTooLarge, match="more than the .* bytes of space the layer may take: .* free on the filesystem"
        ):
            Puller(store).pull_sync(f"{reg.host}/test/bomb:1")
        assert store.list() == []
        assert list((store.root / "layers").iterdir()) == []
        assert_consistent(store)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
        reg.stop()
