"""Store hygiene on real files: the sweep of unreferenced content (not during a pull), the unpacked-size
cap checked against free disk, and a hostile archive whose index.json is 100 MiB."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import io
import os
import tarfile
from pathlib import Path

import pytest

from edgelet.images.errors import ArchiveError
from edgelet.images.gc import ImageGC
from edgelet.images.store import ImageStore
from edgelet.images.unpack import LayerTooLarge, apply_layer
from edgelet.testing.images import build_busybox_image, build_tar
from edgelet.util.clock import FakeClock

NAME = "edgelet.local/busybox:1.36"


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    return build_busybox_image(tmp_path_factory.mktemp("hyg") / "bb.tar", name=NAME)


def listing(store: ImageStore, sub: str) -> set[str]:
    return set(os.listdir(store.root / sub))


def test_sweep_removes_only_unreferenced_content_and_waits_for_pulls(tmp_path: Path, archive: Path) -> None:
    store = ImageStore(tmp_path / "s", clock=FakeClock())
    rec = store.import_archive(archive)[0]
    blobs, layers = listing(store, "blobs/sha256"), listing(store, "layers")
    stray, _ = store.add_blob(io.BytesIO(b"left by a failed pull"))
    (store.root / "layers" / ("ab" * 32)).mkdir()  # a layer no image refers to (a crash mid-removal)
    (store.root / "layers" / ("ab" * 32) / "f").write_bytes(b"x")
    with store.pulling():
        assert store.sweep() is None  # a pull's blobs are unreferenced until it commits
        assert store.has_blob(stray)
    assert store.sweep() == (1, 1)
    assert listing(store, "blobs/sha256") == blobs and listing(store, "layers") == layers
    assert store.get(NAME).id == rec.id and all(p.is_dir() for p in rec.layers)
    assert store.sweep() == (0, 0)
    assert os.listdir(store.root / "tmp") == []


def test_gc_and_prune_sweep(tmp_path: Path, archive: Path) -> None:
    store = ImageStore(tmp_path / "s", clock=FakeClock())
    store.import_archive(archive)
    store.add_blob(io.BytesIO(b"stray"))

    async def nothing_in_use() -> set[str]:
        return set()

    gc = ImageGC(store, nothing_in_use, FakeClock(), min_age=0.0)
    plan = asyncio.run(gc.collect())  # below the threshold: no image goes, the stray blob does
    assert plan.remove == () and store.get(NAME) is not None
    assert len(listing(store, "blobs/sha256")) == 3
    asyncio.run(gc.collect(force=True))  # `edgelet images prune`
    assert store.list() == [] and listing(store, "blobs/sha256") == set() and listing(store, "layers") == set()


def test_layer_over_the_cap_fails_on_its_header(tmp_path: Path) -> None:
    info = tarfile.TarInfo("big")
    info.size = 10 << 20
    data = build_tar([(info, b"\0" * info.size)])
    with pytest.raises(LayerTooLarge, match="add up to more than the 1048576 bytes") as exc:
        apply_layer(io.BytesIO(gzip.compress(data, 1)), tmp_path, max_size=1 << 20)
    assert exc.value.member == "big"
    assert not (tmp_path / "big").exists()  # refused before a byte was written


def test_stream_over_the_cap_fails(tmp_path: Path) -> None:
    # Many small files: each header is fine, the stream as a whole is not.
    entries = []
    for i in range(40):
        info = tarfile.TarInfo(f"f{i}")
        info.size = 100_000
        entries.append((info, b"\0" * info.size))
    with pytest.raises(LayerTooLarge):
        apply_layer(io.BytesIO(build_tar(entries)), tmp_path, max_size=1_000_000)


def test_image_larger_than_the_store_allows(tmp_path: Path, archive: Path) -> None:
    store = ImageStore(tmp_path / "s", clock=FakeClock(), max_image_size=100_000)
    with pytest.raises(LayerTooLarge, match="100000 at most per image"):
        store.import_archive(archive)
    assert store.list() == [] and listing(store, "layers") == set() and listing(store, "blobs/sha256") == set()
    assert os.listdir(store.root / "tmp") == []


class _Spaces(io.RawIOBase):
    """`n` bytes of spaces, produced as read (a 100 MiB document without 100 MiB in memory)."""

    def __init__(self, n: int) -> None:
        self.left = n

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = min(len(b), self.left)
        b[:n] = b" " * n
        self.left -= n
        return n


def test_archive_with_a_100_mib_index_json(tmp_path: Path, archive: Path) -> None:
    hostile = tmp_path / "hostile.tar.gz"
    with gzip.open(hostile, "wb", compresslevel=1) as gz, tarfile.open(fileobj=gz, mode="w|") as tar:
        blob = tarfile.TarInfo("blobs/sha256/" + hashlib.sha256(b"").hexdigest())  # a valid blob first
        tar.addfile(blob, io.BytesIO(b""))
        info = tarfile.TarInfo("index.json")
        info.size = 100 << 20
        tar.addfile(info, io.BufferedReader(_Spaces(info.size)))
    assert hostile.stat().st_size < 1 << 20  # small on the wire, huge once read
    store = ImageStore(tmp_path / "s", clock=FakeClock())
    with pytest.raises(ArchiveError, match=r"index.json is 104857600 bytes, more than the \d+ allowed"):
        store.import_archive(hostile)
    assert store.list() == [] and listing(store, "blobs/sha256") == set()
    assert os.listdir(store.root / "tmp") == []


@pytest.mark.privileged
@pytest.mark.parametrize("declared", [True, False], ids=["size-known", "streamed"])
def test_a_blob_that_does_not_fit_is_refused_before_the_disk_fills(tmp_path: Path, declared: bool) -> None:
    import io
    import subprocess

    from edgelet.images.errors import BlobError

    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)], check=True)
    try:
        store = ImageStore(mnt / "images")
        data = os.urandom(12 << 20)  # fits the 16 MiB, but not with the reserve (5 % or 32 MiB, the smaller)
        big = os.urandom(20 << 20)  # does not fit at all
        with pytest.raises(BlobError, match="do not fit"):
            store.add_blob(io.BytesIO(big), size=len(big) if declared else None)
        assert listing(store, "tmp") == set()
        free = os.statvfs(mnt).f_bavail * os.statvfs(mnt).f_frsize
        assert free > 15 << 20, "nothing was written when the size was known; the stream stopped at the budget"
        digest, size = store.add_blob(io.BytesIO(data), size=len(data) if declared else None)
        assert size == len(data)
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
