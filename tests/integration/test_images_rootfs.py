"""Container rootfs over real overlayfs (and the copy fallback) from an imported busybox image."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from edgelet.images.store import ImageStore
from edgelet.runtime import rootfs as rootfs_mod
from edgelet.runtime.rootfs import build_overlay_options, is_mountpoint, mount_rootfs, unmount_rootfs
from edgelet.testing.images import build_busybox_image

pytestmark = pytest.mark.privileged

EXTRA = [
    {"etc/motd": b"hello\n", "bin/wget": None, "usr/share/doc/a": b"a"},
    {"usr/share/doc/.wh..wh..opq": b"", "usr/share/doc/b": b"b", "etc/motd": b"again\n"},
]


@pytest.fixture
def image(runtime_paths):
    archive = build_busybox_image(runtime_paths.root_dir / "bb.tar", name="edgelet.local/layered:1", extra_layers=EXTRA)
    [rec] = ImageStore(runtime_paths.root_dir / "images").import_archive(archive)
    return rec


def mounted_under(path: Path) -> list[str]:
    prefix = str(path.resolve())
    with open("/proc/self/mountinfo") as f:
        return [line for line in f if line.split()[4].startswith(prefix)]


def check_merged_view(rootfs: Path) -> None:
    assert (rootfs / "bin/busybox").is_file()
    assert os.readlink(rootfs / "bin/sh") == "busybox"
    assert not os.path.lexists(rootfs / "bin/wget")  # whited out by an upper layer
    assert (rootfs / "etc/motd").read_bytes() == b"again\n"
    assert sorted(os.listdir(rootfs / "usr/share/doc")) == ["b"]  # opaque dir hides the lower "a"
    assert (rootfs / "etc/passwd").read_bytes().startswith(b"root:x:0:0:")
    assert stat.S_IMODE((rootfs / "tmp").stat().st_mode) == 0o1777


def test_overlay_mount_and_unmount(image, runtime_paths) -> None:
    ctr = runtime_paths.root_dir / "pods" / "uid" / "containers" / "c1"
    rootfs = mount_rootfs(image.layers, ctr)
    assert rootfs == ctr / "rootfs" and is_mountpoint(rootfs)
    check_merged_view(rootfs)
    (rootfs / "tmp/written").write_bytes(b"w")
    assert (ctr / "upper/tmp/written").exists()
    assert not any((layer / "tmp/written").exists() for layer in image.layers)
    assert mount_rootfs(image.layers, ctr) == rootfs  # idempotent: still one mount
    assert len(mounted_under(ctr)) == 1
    unmount_rootfs(ctr)
    assert mounted_under(ctr) == []
    assert os.listdir(ctr) == []
    unmount_rootfs(ctr)  # nothing mounted: no error
    check_merged_view_layers_untouched(image)


def check_merged_view_layers_untouched(image) -> None:
    assert (image.layers[0] / "bin/wget").is_symlink()
    assert (image.layers[1] / "usr/share/doc/a").exists()


def test_long_layer_paths_use_fd_paths(image, runtime_paths, monkeypatch) -> None:
    monkeypatch.setattr(rootfs_mod, "MAX_MOUNT_DATA", 300)  # as if the paths were many and long
    ctr = runtime_paths.root_dir / "c-fd"
    rootfs = mount_rootfs(image.layers, ctr)
    [line] = mounted_under(ctr)
    assert "lowerdir=/proc/self/fd/" in line
    check_merged_view(rootfs)
    unmount_rootfs(ctr)
    assert mounted_under(ctr) == []


def test_copy_fallback_when_overlay_fails(image, runtime_paths, monkeypatch) -> None:
    def no_overlay(*args, **kwargs):
        raise OSError(19, "No such device")

    monkeypatch.setattr(rootfs_mod, "_mount_overlay", no_overlay)
    monkeypatch.setattr(rootfs_mod, "_warned_copy", False)
    ctr = runtime_paths.root_dir / "c-copy"
    rootfs = mount_rootfs(image.layers, ctr)
    assert not is_mountpoint(rootfs)
    check_merged_view(rootfs)
    assert mount_rootfs(image.layers, ctr) == rootfs  # idempotent: the marker says it is complete
    unmount_rootfs(ctr)
    assert os.listdir(ctr) == []


def test_empty_image_and_options() -> None:
    assert build_overlay_options(["/b", "/a"], "/u", "/w") == "lowerdir=/b:/a,upperdir=/u,workdir=/w"


def test_zero_layers(runtime_paths) -> None:
    ctr = runtime_paths.root_dir / "c-empty"
    rootfs = mount_rootfs([], ctr)
    assert is_mountpoint(rootfs) and os.listdir(rootfs) == []
    unmount_rootfs(ctr)
    assert mounted_under(ctr) == [] and os.listdir(ctr) == []
