"""zstd-compressed layers: unpacked through the `zstd` program with the diffID and size cap applied to its
output, clear errors for corrupt streams and a missing program, and never a zstd process left behind."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

import edgelet.images.unpack as unpack_mod
import edgelet.images.zstd as zstd_mod
from edgelet.images.errors import UnpackError
from edgelet.images.store import ImageStore
from edgelet.images.unpack import LayerTooLarge, apply_layer, unpack_layer_file
from edgelet.testing.images import build_tar
from tests.integration.registry import Layout, big_file_layer, file_layer

pytestmark = pytest.mark.skipif(shutil.which("zstd") is None, reason="needs the zstd program (make deps)")

MTIME = 1_600_000_000


def zstd(data: bytes, *args: str) -> bytes:
    return subprocess.run(["zstd", "-q", "-c", *args], input=data, capture_output=True, check=True).stdout


def reg(name: str, data: bytes, mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    ti = tarfile.TarInfo(name)
    ti.size, ti.mode, ti.mtime = len(data), mode, MTIME
    return ti, data


def zstd_children() -> list[int]:
    """Our own child processes that are zstd (running or zombies)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat_line = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        comm = stat_line[stat_line.index("(") + 1 : stat_line.rindex(")")]
        ppid = int(stat_line[stat_line.rindex(")") + 2 :].split()[1])
        if ppid == os.getpid() and comm == "zstd":
            found.append(int(entry))
    return found


@pytest.fixture(autouse=True)
def no_leftover_zstd():
    before = zstd_children()
    yield
    assert zstd_children() == before, "a zstd process was left running (or unreaped)"


LAYER = build_tar(
    [reg("bin/tool", b"#!/bin/sh\necho hi\n", 0o755), reg("etc/motd", b"zstd layer\n"), reg("big", os.urandom(3 << 20))]
)  # several MiB: more than a pipe buffer in both directions


def check_layer(root: Path, res, tar: bytes = LAYER) -> None:
    assert res.diff_id == "sha256:" + hashlib.sha256(tar).hexdigest()
    assert res.size == len(tar) and res.compressed is True
    assert (root / "etc/motd").read_bytes() == b"zstd layer\n"
    assert (root / "bin/tool").stat().st_mode & 0o777 == 0o755
    assert (root / "big").stat().st_size == 3 << 20


def test_zstd_layer_from_a_file(tmp_path: Path) -> None:
    blob = tmp_path / "blob"
    blob.write_bytes(zstd(LAYER))
    root = tmp_path / "root"
    root.mkdir()
    check_layer(root, unpack_layer_file(blob, root))


def test_zstd_layer_from_a_stream_and_after_a_prefix(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    check_layer(tmp_path / "a", apply_layer(io.BytesIO(zstd(LAYER)), tmp_path / "a"))
    # A file read from the middle: zstd must start at the frame, not at the start of the file nor where the
    # buffered reader's descriptor happens to be.
    blob = tmp_path / "blob"
    blob.write_bytes(b"x" * 10_000 + zstd(LAYER))
    (tmp_path / "b").mkdir()
    with open(blob, "rb") as f:
        f.seek(10_000)
        check_layer(tmp_path / "b", apply_layer(f, tmp_path / "b"))


def test_multiple_frames_and_checksummed_frames(tmp_path: Path) -> None:
    half = len(LAYER) // 2
    data = zstd(LAYER[:half], "--check") + zstd(LAYER[half:], "--no-check")
    check_layer(tmp_path, apply_layer(io.BytesIO(data), tmp_path))


@pytest.mark.parametrize("how", ["flipped", "truncated", "garbage"])
@pytest.mark.parametrize("from_file", [True, False])
def test_corrupt_zstd_stream_is_a_clear_error(tmp_path: Path, how: str, from_file: bool) -> None:
    good = zstd(LAYER, "--check")
    if how == "flipped":
        bad = bytearray(good)
        bad[len(bad) // 2] ^= 0xFF
        data = bytes(bad)
    elif how == "truncated":
        data = good[: len(good) // 2]
    else:
        data = b"\x28\xb5\x2f\xfd" + os.urandom(200)
    root = tmp_path / "root"
    root.mkdir()
    with pytest.raises(UnpackError, match=r"blob-z.*(corrupt zstd stream|zstd)") as info:
        if from_file:
            (tmp_path / "blob").write_bytes(data)
            unpack_layer_file(tmp_path / "blob", root, label="blob-z")
        else:
            apply_layer(io.BytesIO(data), root, label="blob-z")
    assert "corrupt zstd stream" in str(info.value), str(info.value)


def test_size_cap_applies_to_the_decompressed_stream(tmp_path: Path) -> None:
    bomb = zstd(big_file_layer("zeros", 64 << 20, random=False), "-19")
    assert len(bomb) < 64 << 10
    (tmp_path / "blob").write_bytes(bomb)
    with pytest.raises(LayerTooLarge, match="1048576 bytes"):
        unpack_layer_file(tmp_path / "blob", tmp_path, max_size=1 << 20)
    assert not (tmp_path / "zeros").exists() or (tmp_path / "zeros").stat().st_size == 0


def test_missing_zstd_program_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zstd_mod, "program", lambda: None)
    with pytest.raises(UnpackError, match=r"blob-m: zstd-compressed data needs the zstd program \(apt install zstd\)"):
        apply_layer(io.BytesIO(zstd(LAYER)), tmp_path, label="blob-m")
    assert zstd_mod.MISSING == "zstd-compressed data needs the zstd program (apt install zstd)"


class _Stop(BaseException):
    """Stands for a cancellation reaching the unpacking thread."""


def test_zstd_is_killed_when_the_unpack_is_interrupted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[subprocess.Popen] = []
    real_popen = subprocess.Popen

    def popen(*args, **kwargs):
        proc = real_popen(*args, **kwargs)
        seen.append(proc)
        return proc

    def interrupt(self, tar, member):
        raise _Stop()

    # Incompressible and large: zstd is still writing into the full pipe when the unpack stops.
    blob = tmp_path / "blob"
    blob.write_bytes(zstd(big_file_layer("rand", 8 << 20)))
    monkeypatch.setattr(subprocess, "Popen", popen)
    monkeypatch.setattr(unpack_mod._Applier, "apply", interrupt)
    with pytest.raises(_Stop):
        unpack_layer_file(blob, tmp_path)
    assert len(seen) == 1 and seen[0].returncode is not None and seen[0].returncode < 0


def _store_image(store: ImageStore, layer_blob: bytes, diff_id: str) -> dict:
    """Put a one-layer image's blobs into the store (as a pull would); the commit_image arguments."""
    layer_digest, _ = store.add_blob(io.BytesIO(layer_blob))
    cfg = json.dumps(
        {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": [diff_id]}, "config": {}}
    ).encode()
    config_digest, _ = store.add_blob(io.BytesIO(cfg))
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config_digest,
                "size": len(cfg),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+zstd",
                    "digest": layer_digest,
                    "size": len(layer_blob),
                }
            ],
        }
    ).encode()
    manifest_digest, _ = store.add_blob(io.BytesIO(manifest))
    return {"manifest_digest": manifest_digest, "config_digest": config_digest, "layer_digests": [layer_digest]}


def test_store_commits_a_zstd_layer_and_stays_consistent_after_a_corrupt_one(tmp_path: Path) -> None:
    store = ImageStore(tmp_path / "store")
    diff_id = "sha256:" + hashlib.sha256(LAYER).hexdigest()
    good = zstd(LAYER, "--check")
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0xFF
    with pytest.raises(UnpackError, match="corrupt zstd stream"):
        store.commit_image(**_store_image(store, bytes(bad), diff_id), references=["example.com/bad:1"])
    assert store.list() == []
    assert list((store.root / "tmp").iterdir()) == []
    assert not any((store.root / "layers").iterdir())
    rec = store.commit_image(**_store_image(store, good, diff_id), references=["example.com/good:1"])
    assert (rec.layers[0] / "etc" / "motd").read_bytes() == b"zstd layer\n"
    assert list((store.root / "tmp").iterdir()) == []


@pytest.mark.skipif(shutil.which("skopeo") is None, reason="needs skopeo (make deps)")
def test_import_oci_archive_with_zstd_layers(tmp_path: Path) -> None:
    lay = Layout(tmp_path / "lay")
    lay.tag(lay.image([(file_layer({"etc/motd": b"from a zstd archive\n"}), False)]))
    archive = tmp_path / "img.tar"
    out = subprocess.run(
        [
            "skopeo",
            "copy",
            "--quiet",
            "--dest-compress-format",
            "zstd",
            "--dest-compress",
            f"oci:{lay.dir}:img",
            f"oci-archive:{archive}:example.com/zstd:1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    store = ImageStore(tmp_path / "store")
    (rec,) = store.import_archive(archive)
    assert (rec.layers[0] / "etc" / "motd").read_bytes() == b"from a zstd archive\n"
    manifest = json.loads(store.read_blob(rec.digest, 1 << 20))
    assert [la["mediaType"] for la in manifest["layers"]] == ["application/vnd.oci.image.layer.v1.tar+zstd"]
