"""util/files on a real temp directory: only a regular file is ever opened (a FIFO, a device, a socket, a
directory or an unfollowed symlink is refused by what it is), the descriptor keeps the inode it checked, and
the places that read dropped files keep what they support (symlinked manifests and signatures) while the card's
config is held to a FAT card's rules (no symlink) and a size bound. Each test has a timeout: a hang fails it."""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

import pytest

from edgelet.errors import EdgeletError
from edgelet.settings import MAX_CARD_CONFIG_BYTES, load_settings
from edgelet.sources.file import FileSourceState, scan_directory
from edgelet.testing.signing import MinisignKey, missing_tools, trusted_dir
from edgelet.trust.verify import Trust
from edgelet.util.clock import FakeClock
from edgelet.util.files import NotRegularFile, open_regular, read_regular
from tests.integration.test_file_source import pod_yaml

pytestmark = pytest.mark.timeout(60)


def test_read_regular_reads_at_most_one_byte_past_its_bound(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"12345")
    assert read_regular(tmp_path / "f", 5) == b"12345"
    assert read_regular(tmp_path / "f", 3) == b"1234"  # the caller sees more than its bound and refuses it


def _socket(path: Path) -> None:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()


@pytest.mark.parametrize(
    "make, kind, err",
    [
        (os.mkfifo, "a named pipe", errno.EINVAL),
        (os.mkdir, "a directory", errno.EINVAL),
        (_socket, "a socket", errno.EINVAL),
        (lambda p: p.symlink_to("/etc/hostname"), "a symbolic link", errno.ELOOP),
    ],
)
def test_anything_but_a_regular_file_is_refused_by_what_it_is(tmp_path: Path, make, kind: str, err: int) -> None:
    path = tmp_path / "x"
    make(path)
    with pytest.raises(NotRegularFile) as info:
        open_regular(path, follow_symlinks=False)
    exc = info.value
    assert isinstance(exc, OSError) and isinstance(exc, EdgeletError)
    assert exc.kind == kind and exc.errno == err and exc.filename == str(path)
    assert exc.strerror == (
        "a symbolic link, not followed here" if err == errno.ELOOP else f"{kind}, not a regular file"
    )


def test_a_followed_symlink_must_still_end_at_a_regular_file(tmp_path: Path) -> None:
    (tmp_path / "target").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    assert read_regular(tmp_path / "link", 10) == b"x"
    (tmp_path / "dev").symlink_to("/dev/zero")  # a device behind a symlink: refused, never read
    with pytest.raises(NotRegularFile, match="a character device, not a regular file"):
        read_regular(tmp_path / "dev", 10)
    (tmp_path / "gone").symlink_to(tmp_path / "missing")
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "gone", 10)


@pytest.mark.parametrize("make", [os.mkfifo, lambda p: p.symlink_to("/dev/null")])
def test_a_fifo_or_a_device_is_never_opened(tmp_path: Path, make) -> None:
    """The check opens nothing (O_PATH): inotify sees no open of the FIFO or the device, as it sees the
    regular file's (opening a device can act: a watchdog starts counting, a tape rewinds)."""
    from inotify_simple import INotify, flags

    path = tmp_path / "x"
    make(path)
    (tmp_path / "plain").write_text("x")
    with INotify() as watcher:
        watcher.add_watch(str(path), flags.OPEN)
        watcher.add_watch(str(tmp_path / "plain"), flags.OPEN)
        with pytest.raises(NotRegularFile):
            open_regular(path)
        assert read_regular(tmp_path / "plain", 1) == b"x"
        opened = [e.wd for e in watcher.read(timeout=0)]
    assert len(opened) == 1  # the regular file's open only


def test_the_descriptor_reads_the_file_it_checked_across_a_rename(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"checked")
    with open_regular(tmp_path / "a") as f:
        (tmp_path / "b").write_bytes(b"swapped")
        os.rename(tmp_path / "b", tmp_path / "a")
        assert f.read() == b"checked"


@pytest.mark.skipif(bool(missing_tools()), reason=f"needs {missing_tools()} (make deps)")
def test_symlinked_manifests_and_their_signatures_are_still_followed(tmp_path: Path) -> None:
    """kubelet follows symlinks in the manifest dir (a config tool's `ln -s`), and so does edgelet, signed too."""
    key = MinisignKey.generate(tmp_path / "k")
    trust = Trust.load(trusted_dir(tmp_path / "trusted", key), tmp_path / "trust", FakeClock())
    elsewhere, mdir = tmp_path / "elsewhere", tmp_path / "m"
    elsewhere.mkdir()
    mdir.mkdir()
    (elsewhere / "web.yaml").write_text(pod_yaml("web"))
    key.sign(elsewhere / "web.yaml", version=1)
    (mdir / "web.yaml").symlink_to(elsewhere / "web.yaml")
    (mdir / "web.yaml.minisig").symlink_to(elsewhere / "web.yaml.minisig")
    snap, _ = scan_directory(mdir, "node1", FileSourceState(), trust=trust)
    assert [p.metadata.name for p in snap.pods] == ["web-node1"] and snap.errors == ()


def _card_settings(tmp_path: Path):
    return load_settings({"card_dir": str(tmp_path / "card")}, env={}, default_config=tmp_path / "none.toml")


def test_a_symlink_as_the_cards_config_is_refused(tmp_path: Path) -> None:
    """A FAT card holds no symlinks: one there (to a device, to a file elsewhere) was not put by a laptop."""
    (tmp_path / "card").mkdir()
    (tmp_path / "real.toml").write_text("verbosity = 3\n")
    (tmp_path / "card" / "config.toml").symlink_to(tmp_path / "real.toml")
    s = _card_settings(tmp_path)
    assert s.verbosity != 3
    assert s.card_config_error is not None and "a symbolic link, not followed here" in s.card_config_error


def test_a_card_config_past_its_bound_is_refused_unread(tmp_path: Path) -> None:
    (tmp_path / "card").mkdir()
    (tmp_path / "card" / "config.toml").write_bytes(b"verbosity = 3\n" + b"#" * MAX_CARD_CONFIG_BYTES + b"\n")
    s = _card_settings(tmp_path)
    assert s.verbosity != 3
    assert s.card_config_error is not None and f"larger than {MAX_CARD_CONFIG_BYTES} bytes" in s.card_config_error
