"""The air-gapped import directory on real files: every archive compression, the skip-unchanged cache, pinning,
and image GC thresholds on a small tmpfs (pinned and in-use images stay)."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from edgelet.images.gc import ImageGC, fs_usage
from edgelet.images.importdir import ImportDir, cache_verdict, is_archive_name
from edgelet.images.store import ImageStore
from edgelet.testing.images import build_busybox_image
from edgelet.util.clock import FakeClock


@pytest.mark.parametrize(
    "name, want",
    [
        ("a.tar", True),
        ("a.tar.gz", True),
        ("a.TGZ", True),
        ("a.tar.zst", True),
        ("a.tar.xz", True),
        (".a.tar", False),
        ("a.tar.part", False),
        ("README", False),
        ("a.zip", False),
    ],
)
def test_is_archive_name(name, want):
    assert is_archive_name(name) is want


@pytest.mark.parametrize(
    "cached, size, mtime, want",
    [
        (None, 1, 2, "hash"),
        ({"size": 1, "mtime_ns": 2, "digest": "x"}, 1, 2, "skip"),
        ({"size": 1, "mtime_ns": 2}, 1, 3, "hash"),
        ({"size": 1, "mtime_ns": 2}, 5, 2, "hash"),
        ([1.0, 2.0], 1, 2, "hash"),
    ],
)
def test_cache_verdict(cached, size, mtime, want):
    assert cache_verdict(cached, size, mtime) == want


class CountingStore(ImageStore):
    imports = 0

    def import_archive(self, path, *, pinned=False, **kwargs):
        self.imports += 1
        return super().import_archive(path, pinned=pinned, **kwargs)


@pytest.fixture(scope="module")
def tarball(tmp_path_factory) -> Path:
    return build_busybox_image(tmp_path_factory.mktemp("imp") / "bb.tar", name="edgelet.local/imp:1")


def test_every_compression_is_imported_and_pinned(tmp_path: Path, tarball: Path) -> None:
    if shutil.which("zstd") is None:
        pytest.skip("needs the zstd program (make deps)")
    imp = tmp_path / "import"
    imp.mkdir()
    data = tarball.read_bytes()
    variants = {
        "plain.tar": data,
        "gz.tar.gz": gzip.compress(data, 1),
        "tgz.tgz": gzip.compress(data, 1),
        "zst.tar.zst": subprocess.run(["zstd", "-q", "-c"], input=data, capture_output=True, check=True).stdout,
    }
    for i, (name, blob) in enumerate(variants.items()):
        (imp / name).write_bytes(blob)
    (imp / "notes.txt").write_text("not an archive")
    (imp / "broken.tar.zst").write_bytes(b"\x28\xb5\x2f\xfd garbage")
    store = CountingStore(tmp_path / "s", clock=FakeClock())
    d = ImportDir(imp, store, tmp_path / "s" / "imported.json")
    assert d.scan() == 4  # the same image four times; the broken one logs an error
    assert store.imports == 5
    [rec] = store.list()
    assert rec.pinned and rec.references == ("edgelet.local/imp:1",)
    cache = json.loads((tmp_path / "s" / "imported.json").read_text())
    assert set(cache) == {*variants, "broken.tar.zst"} and "zstd" in cache["broken.tar.zst"]["error"]
    assert all(cache[n]["digest"].startswith("sha256:") and cache[n]["images"] == [rec.id] for n in variants)
    assert os.listdir(tmp_path / "s" / "tmp") == []


def test_unchanged_files_are_skipped_by_stamp_then_by_digest(tmp_path: Path, tarball: Path) -> None:
    imp = tmp_path / "import"
    imp.mkdir()
    shutil.copy(tarball, imp / "bb.tar")
    store = CountingStore(tmp_path / "s", clock=FakeClock())
    cache = tmp_path / "s" / "imported.json"
    assert ImportDir(imp, store, cache).scan() == 1 and store.imports == 1
    assert ImportDir(imp, store, cache).scan() == 0 and store.imports == 1  # a restart: size + mtime match
    os.utime(imp / "bb.tar", ns=(1, 1))  # touched: same content, the digest says so
    assert ImportDir(imp, store, cache).scan() == 0 and store.imports == 1
    assert json.loads(cache.read_text())["bb.tar"]["mtime_ns"] == 1
    other = build_busybox_image(tmp_path / "other.tar", name="edgelet.local/imp:2", extra_layers=[{"x": b"2"}])
    shutil.copy(other, imp / "bb.tar")  # new content under the same name
    assert ImportDir(imp, store, cache).scan() == 1 and store.imports == 2
    assert store.get("edgelet.local/imp:2").pinned


@pytest.mark.privileged
def test_a_scan_reports_progress_at_each_archive_and_each_chunk_it_stores(tmp_path: Path, tarball: Path) -> None:
    """The agent's start extends systemd's start timeout with these calls while a large archive is read."""
    imp = tmp_path / "import"
    imp.mkdir()
    shutil.copy(tarball, imp / "a.tar")
    ticks: list[None] = []
    d = ImportDir(imp, ImageStore(tmp_path / "s", clock=FakeClock()), tmp_path / "s" / "imported.json")
    assert d.scan(lambda: ticks.append(None)) == 1
    # One for the archive, then the blobs (config, manifest, each layer): each begun, advanced, finished.
    assert len(ticks) >= 1 + 3 * 3, len(ticks)
    ticks.clear()
    assert d.scan(lambda: ticks.append(None)) == 0  # unchanged: skipped, still one progress for looking at it
    assert len(ticks) == 1
    d.scan()  # without a callback: nothing to call


def test_gc_thresholds_on_a_small_tmpfs(tmp_path: Path, tarball: Path) -> None:
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mnt)], check=True)
    try:
        clock = FakeClock()
        store = ImageStore(mnt / "images", clock=clock)
        imp = tmp_path / "import"
        imp.mkdir()
        shutil.copy(tarball, imp / "pinned.tar")
        assert ImportDir(imp, store, mnt / "imported.json").scan() == 1
        for i in range(3):  # three unpinned images, each with 1 MB of its own
            arch = build_busybox_image(
                tmp_path / f"u{i}.tar", name=f"edgelet.local/u:{i}", extra_layers=[{"blob": os.urandom(1 << 20)}]
            )
            store.import_archive(arch)
            clock.advance(10)
        store.touch("edgelet.local/u:0")  # most recently used of the three

        async def in_use() -> set[str]:
            return {"edgelet.local/u:2"}

        ids = {r.references[0]: r.id for r in store.list()}
        gc = ImageGC(store, in_use, clock, high=85, low=80, min_age=0.0)
        plan = asyncio.run(gc.collect())
        assert plan.remove == ()  # well below 85 %
        capacity, available = fs_usage(mnt)
        filler = mnt / "filler"
        with open(filler, "wb") as f:  # up to 88 % used
            f.write(b"\0" * int(available - capacity * 0.12))
        plan = asyncio.run(gc.collect())
        assert plan.usage_percent >= 85
        # LRU first: u:1 (stored after u:0, never used) before u:0 (just used); the pinned and the in-use
        # image are never candidates.
        assert plan.remove[0] == ids["edgelet.local/u:1"]
        assert ids["edgelet.local/imp:1"] not in plan.remove and ids["edgelet.local/u:2"] not in plan.remove
        names = {r for rec in store.list() for r in rec.references}
        assert "edgelet.local/imp:1" in names and "edgelet.local/u:2" in names
        assert "edgelet.local/u:1" not in names
        assert os.listdir(mnt / "images" / "tmp") == []
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


class FailingOnceStore(CountingStore):
    """Fails its first import as a full disk would (ENOSPC while unpacking)."""

    def import_archive(self, path, *, pinned=False, **kwargs):
        self.imports += 1
        if self.imports == 1:
            raise OSError(28, "No space left on device")
        return ImageStore.import_archive(self, path, pinned=pinned, **kwargs)


def test_an_archive_whose_import_failed_is_tried_again_once_touched(tmp_path: Path, tarball: Path) -> None:
    """Found by the chaos harness (issue 16): after a full disk, touching or copying the same archive again
    never imported it, because the digest matched the failed attempt's cache entry."""
    imp = tmp_path / "import"
    imp.mkdir()
    shutil.copy(tarball, imp / "bb.tar")
    store = FailingOnceStore(tmp_path / "s", clock=FakeClock())
    cache = tmp_path / "s" / "imported.json"
    assert ImportDir(imp, store, cache).scan() == 0 and store.imports == 1
    assert "No space" in json.loads(cache.read_text())["bb.tar"]["error"]
    assert ImportDir(imp, store, cache).scan() == 0 and store.imports == 1  # unchanged: not retried in a loop
    os.utime(imp / "bb.tar", ns=(1, 1))  # room again, and the user touches the archive
    assert ImportDir(imp, store, cache).scan() == 1 and store.imports == 2
    entry = json.loads(cache.read_text())["bb.tar"]
    assert "error" not in entry and entry["images"]


def test_touching_an_archive_wakes_the_import_dir(tmp_path: Path, tarball: Path) -> None:
    """A touch (only the inode's times change) must reach the watcher, or the retry above waits for a restart."""
    imp = tmp_path / "import"
    imp.mkdir()
    shutil.copy(tarball, imp / "bb.tar")
    store = FailingOnceStore(tmp_path / "s", clock=FakeClock())
    d = ImportDir(imp, store, tmp_path / "s" / "imported.json", clock=FakeClock())
    assert d.scan() == 0  # the failed first import

    async def main() -> None:
        imported = asyncio.Event()
        task = asyncio.create_task(d.run(imported.set))
        await asyncio.sleep(0)  # the watch is in place once run() waits
        os.utime(imp / "bb.tar", ns=(1, 1))
        try:
            await asyncio.wait_for(imported.wait(), 30)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
    assert store.imports == 2 and store.get("edgelet.local/imp:1") is not None
