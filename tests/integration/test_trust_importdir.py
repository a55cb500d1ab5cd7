"""Signed image archives in the import directory, with the real minisign and ssh-keygen: an unsigned or badly
signed archive stays there unimported with an event naming it; signing it afterwards imports it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from edgelet.events import EventRecorder
from edgelet.images.importdir import ImportDir
from edgelet.images.store import ImageStore
from edgelet.testing.images import build_busybox_image
from edgelet.testing.signing import MinisignKey, SignifyKey, SshKey, missing_tools, trusted_dir
from edgelet.trust import ARCHIVE_NAMESPACE, MANIFEST_NAMESPACE
from edgelet.trust.verify import Trust
from edgelet.util.clock import FakeClock

pytestmark = pytest.mark.skipif(bool(missing_tools()), reason=f"needs {missing_tools()} (make deps)")


@pytest.fixture(scope="module")
def tarball(tmp_path_factory) -> Path:
    return build_busybox_image(tmp_path_factory.mktemp("imp") / "bb.tar", name="edgelet.local/signed:1")


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("keys")
    minisign, ssh, signify = MinisignKey.generate(d), SshKey.generate(d), SignifyKey.generate(d)
    trusted = trusted_dir(d / "trusted", minisign, signify, ssh)
    return {"minisign": minisign, "ssh": ssh, "signify": signify, "trusted": trusted}


def setup(tmp_path: Path, keys: dict, tarball: Path) -> tuple[ImportDir, ImageStore, EventRecorder, Path]:
    imp = tmp_path / "import"
    imp.mkdir()
    (imp / "app.tar").write_bytes(tarball.read_bytes())
    clock = FakeClock()
    store = ImageStore(tmp_path / "s", clock=clock)
    events = EventRecorder(clock)
    trust = Trust.load(keys["trusted"], tmp_path / "trust", clock)
    return (
        ImportDir(imp, store, tmp_path / "s" / "imported.json", clock=clock, trust=trust, events=events),
        store,
        events,
        imp / "app.tar",
    )


def refusals(events: EventRecorder) -> list[str]:
    return [e.message for e in events.events() if e.reason == "UntrustedArchive"]


def test_an_unsigned_archive_stays_unimported_until_it_is_signed(tmp_path: Path, keys: dict, tarball: Path) -> None:
    d, store, events, archive = setup(tmp_path, keys, tarball)
    assert d.scan() == 0 and store.list() == []
    [message] = refusals(events)
    assert str(archive) in message and "signature refused (missing)" in message
    assert archive.exists()
    assert d.scan() == 0 and len(refusals(events)) == 1  # unchanged: not checked (nor reported) again
    keys["minisign"].sign(archive)
    assert d.scan() == 1
    [rec] = store.list()
    assert rec.references == ("edgelet.local/signed:1",) and rec.pinned
    assert "error" not in json.loads((tmp_path / "s" / "imported.json").read_text())["app.tar"]


@pytest.mark.parametrize("how", ["ssh", "signify"])
def test_ssh_and_signify_signed_archives_are_imported(tmp_path: Path, keys: dict, tarball: Path, how: str) -> None:
    d, store, events, archive = setup(tmp_path, keys, tarball)
    if how == "ssh":
        keys["ssh"].sign(archive, namespace=ARCHIVE_NAMESPACE)
    else:
        keys["signify"].sign(archive)
    assert d.scan() == 1 and refusals(events) == []


def test_a_manifest_signature_is_no_archive_signature(tmp_path: Path, keys: dict, tarball: Path) -> None:
    d, store, events, archive = setup(tmp_path, keys, tarball)
    keys["ssh"].sign(archive, namespace=MANIFEST_NAMESPACE)
    assert d.scan() == 0 and store.list() == []
    assert "(wrong namespace)" in refusals(events)[0]


def test_a_changed_archive_beside_its_old_signature_is_refused(tmp_path: Path, keys: dict, tarball: Path) -> None:
    d, store, events, archive = setup(tmp_path, keys, tarball)
    keys["minisign"].sign(archive)
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0x01
    archive.write_bytes(bytes(data))
    assert d.scan() == 0 and store.list() == []
    assert "(bad)" in refusals(events)[0]


def test_an_archive_renamed_over_the_path_after_its_check_is_never_imported(
    tmp_path: Path, keys: dict, tarball: Path
) -> None:
    """Hashed, verified and imported through one descriptor: a file renamed over the path between the check
    and the import (a fault hook makes the race certain) is not what gets imported and pinned."""
    d, store, events, archive = setup(tmp_path, keys, tarball)
    keys["minisign"].sign(archive)
    evil = build_busybox_image(tmp_path / "evil.tar", name="edgelet.local/evil:1")
    d.between_verify_and_import = lambda path: os.replace(evil, path)
    assert d.scan() == 1
    assert [list(r.references) for r in store.list()] == [["edgelet.local/signed:1"]]
    # The file now at the path is the unsigned one: checked as any change is, and refused.
    d.between_verify_and_import = None
    assert d.scan() == 0
    assert [list(r.references) for r in store.list()] == [["edgelet.local/signed:1"]]
    assert "signature refused (bad)" in refusals(events)[-1]


def _rewrite_in_place(source: Path):
    """A fault hook writing `source`'s bytes over the archive's own inode (what a process with write access, or
    a removable medium returning other bytes on a second read, does to the descriptor's next read)."""

    def rewrite(path: Path) -> None:
        with open(path, "r+b") as f:
            f.truncate(0)
            f.write(source.read_bytes())

    return rewrite


@pytest.mark.parametrize("how", ["minisign", "ssh"])
def test_an_archive_rewritten_in_place_after_its_check_is_never_imported(
    tmp_path: Path, keys: dict, tarball: Path, how: str
) -> None:
    """The bytes checked are the bytes imported: one read feeds both, so a rewrite of the same file after the
    check (the descriptor still reads it) changes nothing that is imported or pinned."""
    d, store, events, archive = setup(tmp_path, keys, tarball)
    if how == "ssh":
        keys["ssh"].sign(archive, namespace=ARCHIVE_NAMESPACE)
    else:
        keys["minisign"].sign(archive)
    evil = build_busybox_image(tmp_path / "evil.tar", name="edgelet.local/evil:1", extra_layers=[{"evil": b"1"}])
    d.between_verify_and_import = _rewrite_in_place(evil)
    assert d.scan() == 1
    [rec] = store.list()
    assert rec.references == ("edgelet.local/signed:1",) and rec.pinned
    # The file now holds the unsigned bytes: checked as any change is, and refused.
    d.between_verify_and_import = None
    assert d.scan() == 0
    assert [r.references for r in store.list()] == [("edgelet.local/signed:1",)]
    assert "signature refused (bad)" in refusals(events)[-1]


def test_a_refused_read_leaves_no_blob_behind(tmp_path: Path, keys: dict, tarball: Path) -> None:
    """Blobs are stored as the archive streams past, before its signature can be checked: a refusal removes them."""
    d, store, events, archive = setup(tmp_path, keys, tarball)
    other = build_busybox_image(tmp_path / "other.tar", name="edgelet.local/other:1", extra_layers=[{"o": b"1"}])
    keys["minisign"].sign(other, out=Path(str(archive) + ".minisig"))  # a valid signature, of another file
    assert d.scan() == 0 and store.list() == []
    assert "signature refused (bad)" in refusals(events)[0]
    assert os.listdir(tmp_path / "s" / "blobs" / "sha256") == [] and os.listdir(tmp_path / "s" / "tmp") == []


@pytest.mark.timeout(60)
def test_a_fifo_or_symlink_in_the_import_dir_is_refused_never_waited_on(
    tmp_path: Path, keys: dict, tarball: Path
) -> None:
    d, store, events, archive = setup(tmp_path, keys, tarball)
    os.mkfifo(archive.parent / "pipe.tar")
    (archive.parent / "link.tar").symlink_to(archive)
    os.mkfifo(str(archive) + ".minisig")  # a named pipe where the signature belongs
    assert d.scan() == 0 and store.list() == []
    shown = [e.message for e in events.events()]
    assert any("pipe.tar: not imported: a named pipe, not a regular file" in m for m in shown), shown
    assert any("link.tar: not imported: a symbolic link, not followed here" in m for m in shown), shown
    assert any("app.tar: not imported" in m and "a named pipe, not a regular file" in m for m in shown), shown
    assert d.scan() == 0 and len(events.events()) == len(shown)  # unchanged: not reported again
    os.unlink(str(archive) + ".minisig")
    keys["minisign"].sign(archive)
    assert d.scan() == 1
