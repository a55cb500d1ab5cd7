"""The image store over real files: archive import in every format, lookups, verification failures, removal."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import tarfile
import threading
from pathlib import Path

import pytest

from edgelet.images.archive import MAX_JSON
from edgelet.images.errors import ArchiveError, BlobError, ImageNotFound, PlatformNotFound
from edgelet.images.reference import chain_ids
from edgelet.images.store import ImageStore
from edgelet.testing.images import (
    build_busybox_image,
    build_config,
    build_layer,
    build_tar,
    host_architecture,
    tar_directory,
    write_oci_layout,
)
from edgelet.util.clock import FakeClock

NAME = "edgelet.local/busybox:1.36"


@pytest.fixture(scope="module")
def archives(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("archives")
    out = {
        fmt: build_busybox_image(base / f"bb-{fmt}", name=NAME, fmt=fmt)  # type: ignore[arg-type]
        for fmt in ("oci-archive", "docker-archive", "oci-layout")
    }
    for fmt in ("oci-archive", "docker-archive"):
        gz = base / f"bb-{fmt}.tar.gz"
        gz.write_bytes(gzip.compress(out[fmt].read_bytes()))
        out[fmt + "+gzip"] = gz
    return out


@pytest.fixture
def store(tmp_path: Path) -> ImageStore:
    return ImageStore(tmp_path / "images", clock=FakeClock())


def blob_names(store: ImageStore) -> set[str]:
    return set(os.listdir(store.root / "blobs" / "sha256"))


def assert_clean_tmp(store: ImageStore) -> None:
    assert os.listdir(store.root / "tmp") == []


@pytest.mark.parametrize(
    "fmt", ["oci-archive", "docker-archive", "oci-layout", "oci-archive+gzip", "docker-archive+gzip"]
)
def test_import_every_format(store: ImageStore, archives: dict[str, Path], fmt: str) -> None:
    [rec] = store.import_archive(archives[fmt])
    assert rec.references == (NAME,)
    assert rec.config.cmd == ("sh",) and rec.config.env[0].startswith("PATH=")
    assert rec.platform == f"linux/{host_architecture()}"
    assert len(rec.layers) == 1 and (rec.layers[0] / "bin" / "busybox").is_file()
    assert os.readlink(rec.layers[0] / "bin" / "sh") == "busybox"
    config = json.loads((store.root / "blobs/sha256" / rec.id.split(":")[1]).read_bytes())
    assert rec.layers[0].name == chain_ids(config["rootfs"]["diff_ids"])[0].split(":")[1]
    for digest in (rec.id, rec.digest):
        data = (store.root / "blobs/sha256" / digest.split(":")[1]).read_bytes()
        assert "sha256:" + hashlib.sha256(data).hexdigest() == digest
    assert rec.size > 1_000_000
    assert_clean_tmp(store)
    # docker-archive and OCI produce the same image id: the config is the same bytes.
    if fmt.startswith("oci"):
        index = json.loads((archives["oci-layout"] / "index.json").read_text())
        assert rec.digest == index["manifests"][0]["digest"]


def test_get_by_every_kind_of_name(store: ImageStore, tmp_path: Path) -> None:
    archive = build_busybox_image(tmp_path / "bb.tar", name="busybox")
    [rec] = store.import_archive(archive)
    assert rec.references == ("docker.io/library/busybox:latest",)
    for ref in (
        "busybox",
        "busybox:latest",
        "docker.io/library/busybox",
        "library/busybox:latest",
        rec.id,
        rec.digest,
        rec.id.split(":")[1],
        f"busybox@{rec.digest}",
        f"busybox:other@{rec.digest}",
    ):
        got = store.get(ref)
        assert got is not None and got.id == rec.id, ref
    for ref in ("busybox:1", "other", f"other@{rec.digest}", "", "NOT A REF", "sha256:" + "0" * 64):
        assert store.get(ref) is None, ref


def test_reimport_is_idempotent_and_persists(store: ImageStore, archives: dict[str, Path]) -> None:
    [a] = store.import_archive(archives["oci-archive"])
    ino = os.stat(a.layers[0] / "bin/busybox").st_ino
    blobs = blob_names(store)
    [b] = store.import_archive(archives["oci-archive"], pinned=True)
    assert b.id == a.id and b.pinned and len(store.list()) == 1
    assert os.stat(a.layers[0] / "bin/busybox").st_ino == ino  # layer reused, not unpacked again
    assert blob_names(store) == blobs
    again = ImageStore(store.root)
    assert [r.id for r in again.list()] == [a.id] and again.get(NAME).pinned


def test_other_process_changes_are_seen(store: ImageStore, archives: dict[str, Path]) -> None:
    assert store.get(NAME) is None
    ImageStore(store.root).import_archive(archives["docker-archive"])  # e.g. `edgelet images import`
    assert store.get(NAME) is not None


def test_tag_moves_to_the_newer_image(store: ImageStore, tmp_path: Path) -> None:
    [old] = store.import_archive(build_busybox_image(tmp_path / "a.tar", name=NAME))
    [new] = store.import_archive(build_busybox_image(tmp_path / "b.tar", name=NAME, config={"Cmd": ["sleep", "1"]}))
    assert new.id != old.id
    assert store.get(NAME).id == new.id
    assert store.get(old.id).references == ()
    assert new.layers == old.layers  # the same base layer, unpacked once


def test_remove_untags_then_drops_unshared_content(store: ImageStore, tmp_path: Path) -> None:
    [base] = store.import_archive(build_busybox_image(tmp_path / "a.tar", name="x.local/base:1"))
    store.import_archive(build_busybox_image(tmp_path / "a2.tar", name="x.local/base:2"))
    [top] = store.import_archive(
        build_busybox_image(
            tmp_path / "b.tar", name="x.local/top:1", config={"Cmd": ["id"]}, extra_layers=[{"etc/motd": b"hello\n"}]
        )
    )
    assert store.get("x.local/base:2").id == base.id
    store.remove("x.local/base:2")  # only untags: base:1 still names it
    assert store.get("x.local/base:2") is None and store.get("x.local/base:1").id == base.id
    store.remove("x.local/top:1")
    assert store.get(top.id) is None
    assert not top.layers[1].exists() and top.layers[0].exists()  # shared base layer stays
    assert base.layers[0].exists()
    remaining = blob_names(store)
    assert len(remaining) == 3 and {base.id.split(":")[1], base.digest.split(":")[1]} < remaining  # + its layer
    store.remove(base.id)
    assert store.list() == [] and blob_names(store) == set() and os.listdir(store.root / "layers") == []
    with pytest.raises(ImageNotFound, match="x.local/base:1"):
        store.remove("x.local/base:1")
    assert_clean_tmp(store)


def test_touch_records_last_used(tmp_path: Path, archives: dict[str, Path]) -> None:
    clock = FakeClock(start=1000.0)
    store = ImageStore(tmp_path / "images", clock=clock)
    store.import_archive(archives["oci-layout"])
    clock.advance(100)
    store.touch(NAME)
    assert store.get(NAME).extra["last_used"] == "1100.000"
    assert ImageStore(store.root).get(NAME).extra["last_used"] == "1100.000"
    clock.advance(1)
    store.touch(NAME)  # too soon to be worth a write, but visible in this process
    assert store.get(NAME).extra["last_used"] == "1101.000"
    with pytest.raises(ImageNotFound):
        store.touch("nothing:here")


def test_leftover_temp_files_are_swept(tmp_path: Path) -> None:
    root = tmp_path / "images"
    (root / "tmp" / "layer-crashed" / "bin").mkdir(parents=True)
    (root / "tmp" / "blob-crashed").write_bytes(b"half")
    ImageStore(root)
    assert os.listdir(root / "tmp") == []


def test_concurrent_imports_from_threads(store: ImageStore, archives: dict[str, Path]) -> None:
    errors: list[BaseException] = []

    def run(fmt: str) -> None:
        try:
            store.import_archive(archives[fmt])
        except BaseException as exc:  # collected and re-raised by the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(fmt,)) for fmt in ("oci-archive", "docker-archive", "oci-layout") * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(store.list()) == 1
    assert_clean_tmp(store)


# --- hostile or broken archives -------------------------------------------------------------


def layout_copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_corrupt_blob_is_rejected_and_not_kept(store: ImageStore, archives: dict[str, Path], tmp_path: Path) -> None:
    layout = layout_copy(archives["oci-layout"], tmp_path / "layout")
    index = json.loads((layout / "index.json").read_text())
    manifest = json.loads((layout / "blobs/sha256" / index["manifests"][0]["digest"].split(":")[1]).read_text())
    layer = layout / "blobs/sha256" / manifest["layers"][0]["digest"].split(":")[1]
    data = bytearray(layer.read_bytes())
    data[100] ^= 0xFF
    layer.write_bytes(bytes(data))
    with pytest.raises(BlobError) as info:
        store.import_archive(layout)
    assert manifest["layers"][0]["digest"] in str(info.value) and str(layout) in str(info.value)
    assert store.list() == [] and blob_names(store) == set()
    assert_clean_tmp(store)
    # The same in an archive (streamed): nothing bad is left either.
    archive = tmp_path / "bad.tar"
    tar_directory(layout, archive)
    with pytest.raises(BlobError):
        store.import_archive(archive)
    assert blob_names(store) == set() and store.list() == []


def test_wrong_diff_id_leaves_no_layer(store: ImageStore, tmp_path: Path) -> None:
    layer = build_layer({}, busybox=True)
    other = build_layer({"x": b"y"})
    config = build_config([other], None)  # diff_ids of another layer
    write_oci_layout(tmp_path / "layout", NAME, [layer], config)
    with pytest.raises(BlobError, match="diffID"):
        store.import_archive(tmp_path / "layout")
    assert os.listdir(store.root / "layers") == [] and store.list() == []
    assert_clean_tmp(store)


def test_oversized_json_is_refused(store: ImageStore, archives: dict[str, Path], tmp_path: Path) -> None:
    layout = layout_copy(archives["oci-layout"], tmp_path / "layout")
    index = (layout / "index.json").read_bytes()
    (layout / "index.json").write_bytes(index + b" " * MAX_JSON)
    archive = tmp_path / "big.tar"
    tar_directory(layout, archive)
    for target in (layout, archive):
        with pytest.raises(ArchiveError, match="index.json"):
            store.import_archive(target)
    assert store.list() == []


def test_not_an_archive(store: ImageStore, tmp_path: Path) -> None:
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"this is not a tar file" * 100)
    with pytest.raises(ArchiveError, match="junk.tar"):
        store.import_archive(junk)
    empty = tmp_path / "empty.tar"
    empty.write_bytes(build_tar([]))
    with pytest.raises(ArchiveError, match="neither"):
        store.import_archive(empty)


def _multi_arch_layout(tmp_path: Path, arches: list[str]) -> Path:
    """An OCI layout whose index.json points at an index of per-architecture manifests."""
    layout = tmp_path / "multi"
    layer = build_layer({}, busybox=True)
    config = build_config([layer], None)
    manifest_digest = write_oci_layout(layout, NAME, [layer], config)
    blobs = layout / "blobs/sha256"
    manifest = (blobs / manifest_digest.split(":")[1]).read_bytes()
    entries = []
    for arch in arches:
        if arch == host_architecture():
            digest, size = manifest_digest, len(manifest)
        else:  # a manifest for another machine: its blobs are absent, which is fine since it is not chosen
            other = json.dumps(
                {
                    "schemaVersion": 2,
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": {"digest": "sha256:" + "1" * 64, "size": 1},
                    "layers": [],
                }
            ).encode()
            digest, size = "sha256:" + hashlib.sha256(other).hexdigest(), len(other)
            (blobs / digest.split(":")[1]).write_bytes(other)
        entries.append(
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": digest,
                "size": size,
                "platform": {"os": "linux", "architecture": arch},
            }
        )
    nested = json.dumps(
        {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": entries}
    ).encode()
    nested_digest = "sha256:" + hashlib.sha256(nested).hexdigest()
    (blobs / nested_digest.split(":")[1]).write_bytes(nested)
    (layout / "index.json").write_text(
        json.dumps(
            {
                "schemaVersion": 2,
                "manifests": [
                    {
                        "mediaType": "application/vnd.oci.image.index.v1+json",
                        "digest": nested_digest,
                        "size": len(nested),
                        "annotations": {"io.containerd.image.name": NAME, "org.opencontainers.image.ref.name": "1.36"},
                    }
                ],
            }
        )
    )
    return layout


def test_multi_arch_index_picks_this_machine(store: ImageStore, tmp_path: Path) -> None:
    other = "s390x" if host_architecture() != "s390x" else "amd64"
    layout = _multi_arch_layout(tmp_path, [other, host_architecture()])
    [rec] = store.import_archive(layout)
    assert rec.references == (NAME,) and rec.platform == f"linux/{host_architecture()}"


def test_multi_arch_index_without_this_machine(store: ImageStore, tmp_path: Path) -> None:
    others = [a for a in ("s390x", "ppc64le") if a != host_architecture()]
    layout = _multi_arch_layout(tmp_path, others)
    with pytest.raises(PlatformNotFound, match="available: linux/"):
        store.import_archive(layout)
    assert store.list() == []


def test_docker_archive_with_gzipped_layers_and_linked_duplicates(store: ImageStore, tmp_path: Path) -> None:
    layer = build_layer({}, busybox=True)
    extra = build_layer({"etc/motd": b"hi\n"})
    config = build_config([layer, extra, layer], {"Entrypoint": ["/bin/sh", "-c"], "User": "65534"})
    cfg_name = hashlib.sha256(config).hexdigest() + ".json"

    def reg(name: str, data: bytes):
        ti = tarfile.TarInfo(name)
        ti.size = len(data)
        return ti, data

    link = tarfile.TarInfo("c/layer.tar")
    link.type, link.linkname = tarfile.SYMTYPE, "../a/layer.tar"
    manifest = [
        {
            "Config": cfg_name,
            "RepoTags": ["busybox:gz", "INVALID TAG"],
            "Layers": ["a/layer.tar", "b/layer.tar", "c/layer.tar"],
        }
    ]
    entries = [
        reg("a/layer.tar", layer.blob),
        reg("b/layer.tar", extra.tar),
        (link, None),
        reg(cfg_name, config),
        reg("manifest.json", json.dumps(manifest).encode()),
    ]
    archive = tmp_path / "docker.tar"
    archive.write_bytes(build_tar(entries))
    [rec] = store.import_archive(archive)
    assert rec.references == ("docker.io/library/busybox:gz",)
    assert rec.config.entrypoint == ("/bin/sh", "-c") and rec.config.user == "65534"
    assert len(rec.layers) == 3 and rec.layers[0] != rec.layers[2]  # same diffID, different chain
    assert (rec.layers[1] / "etc/motd").read_bytes() == b"hi\n"


def test_docker_archive_missing_layer(store: ImageStore, tmp_path: Path) -> None:
    manifest = [{"Config": "c.json", "RepoTags": ["x:1"], "Layers": ["nope/layer.tar"]}]
    data = json.dumps(manifest).encode()
    ti = tarfile.TarInfo("manifest.json")
    ti.size = len(data)
    cfg = tarfile.TarInfo("c.json")
    cfg.size = 2
    archive = tmp_path / "d.tar"
    archive.write_bytes(build_tar([(ti, data), (cfg, b"{}")]))
    with pytest.raises(ArchiveError, match="nope/layer.tar"):
        store.import_archive(archive)
    assert blob_names(store) == set()
