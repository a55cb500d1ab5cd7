"""Layer unpacking on a real file system: hostile tarballs never write outside the root; metadata and whiteouts."""

from __future__ import annotations

import gzip
import io
import os
import stat
import tarfile
from pathlib import Path

import pytest

from edgelet.images.errors import UnpackError, UnsafeLayerError
from edgelet.images.unpack import OPAQUE_XATTR, apply_layer, clean_member_path
from edgelet.testing.images import build_tar

MTIME = 1_600_000_000


def member(
    name: str,
    kind: bytes = tarfile.REGTYPE,
    data: bytes | None = None,
    *,
    mode: int = 0o644,
    link: str = "",
    uid: int = 0,
    gid: int = 0,
    pax: dict[str, str] | None = None,
    mtime: int = MTIME,
) -> tuple[tarfile.TarInfo, bytes | None]:
    ti = tarfile.TarInfo(name)
    ti.type = kind
    ti.mode = mode
    ti.linkname = link
    ti.uid, ti.gid = uid, gid
    ti.mtime = mtime
    if pax:
        ti.pax_headers = dict(pax)
    if kind == tarfile.REGTYPE:
        data = data if data is not None else b""
        ti.size = len(data)
    return ti, data


def d(name: str, mode: int = 0o755) -> tuple[tarfile.TarInfo, bytes | None]:
    return member(name, tarfile.DIRTYPE, mode=mode)


def sym(name: str, target: str) -> tuple[tarfile.TarInfo, bytes | None]:
    return member(name, tarfile.SYMTYPE, link=target, mode=0o777)


def hard(name: str, target: str) -> tuple[tarfile.TarInfo, bytes | None]:
    return member(name, tarfile.LNKTYPE, link=target)


@pytest.fixture
def env(tmp_path: Path):
    root = tmp_path / "root"
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    sentinel = outside / "sentinel"
    sentinel.write_bytes(b"sentinel")
    return root, outside, sentinel


def untouched(outside: Path, sentinel: Path) -> None:
    assert sentinel.read_bytes() == b"sentinel"
    assert not sentinel.is_symlink()
    assert sorted(p.name for p in outside.iterdir()) == ["sentinel"]


def apply(entries, root: Path, *, compress: bool = False):
    data = build_tar(entries)
    return apply_layer(io.BytesIO(gzip.compress(data) if compress else data), root)


def hostile_cases(outside: Path) -> dict[str, list]:
    o = str(outside)
    return {
        "dotdot file": [member("../outside/sentinel", data=b"pwned")],
        "deep dotdot": [member("a/../../outside/sentinel", data=b"pwned")],
        "absolute symlink then file through it": [sym("evil", o), member("evil/sentinel", data=b"pwned")],
        "relative symlink then file through it": [sym("evil", "../outside"), member("evil/sentinel", data=b"pwned")],
        "symlink to dir outside then dir under it": [sym("evil", o), d("evil/sub/")],
        "symlink chain": [d("a/"), sym("a/b", "../../outside"), sym("c", "a/b"), member("c/sentinel", data=b"x")],
        "hardlink outside by dotdot": [hard("h", "../outside/sentinel")],
        "hardlink through symlinked parent": [sym("evil", o), hard("h", "evil/sentinel")],
        "hardlink to a symlink pointing out": [sym("s", f"{o}/sentinel"), hard("h", "s")],
        "hardlink to missing file": [hard("h", f"{o}/sentinel")],
        "whiteout dotdot": [d("x/"), member("x/.wh...")],
        "whiteout dot": [member(".wh..")],
        "whiteout escaping by path": [member("../outside/.wh.sentinel")],
        "whiteout through symlinked parent": [sym("evil", o), member("evil/.wh.sentinel")],
        "opaque through symlinked parent": [sym("evil", o), member("evil/.wh..wh..opq")],
        "fifo through symlinked parent": [sym("evil", o), member("evil/fifo", tarfile.FIFOTYPE)],
        "symlink through symlinked parent": [sym("evil", o), sym("evil/sentinel", "/etc/passwd")],
        "root replaced by a file": [member("./", data=b"x")],
    }


@pytest.mark.parametrize("case", list(hostile_cases(Path("/x"))))
def test_hostile_layer_is_refused(env, case: str) -> None:
    root, outside, sentinel = env
    entries = hostile_cases(outside)[case]
    with pytest.raises(UnsafeLayerError) as info:
        apply(entries, root)
    assert info.value.member is not None
    assert "layer" in str(info.value)
    untouched(outside, sentinel)


def test_absolute_member_names_land_inside_root(env) -> None:
    root, outside, sentinel = env
    apply([member(str(sentinel), data=b"inside"), member("/etc/x", data=b"y"), member("a/../b", data=b"z")], root)
    assert (root / str(sentinel).lstrip("/")).read_bytes() == b"inside"
    assert (root / "etc/x").read_bytes() == b"y"
    assert (root / "b").read_bytes() == b"z"
    untouched(outside, sentinel)


def test_file_replaces_symlink_instead_of_writing_through_it(env) -> None:
    root, outside, sentinel = env
    apply([sym("s", str(sentinel)), member("s", data=b"replaced")], root)
    assert not (root / "s").is_symlink() and (root / "s").read_bytes() == b"replaced"
    untouched(outside, sentinel)


def test_directory_replaces_symlink(env) -> None:
    root, outside, sentinel = env
    apply([sym("dir", str(outside)), d("dir/"), member("dir/sentinel", data=b"inside")], root)
    assert (root / "dir").is_dir() and not (root / "dir").is_symlink()
    assert (root / "dir/sentinel").read_bytes() == b"inside"
    untouched(outside, sentinel)


def test_symlinks_are_created_verbatim_never_followed(env) -> None:
    root, outside, sentinel = env
    apply([sym("abs", str(sentinel)), sym("rel", "../outside/sentinel"), d("bin/"), sym("bin/sh", "busybox")], root)
    assert os.readlink(root / "abs") == str(sentinel)
    assert os.readlink(root / "rel") == "../outside/sentinel"
    assert os.readlink(root / "bin/sh") == "busybox"
    untouched(outside, sentinel)


def test_clean_member_path() -> None:
    assert clean_member_path("./a//b/./c/") == ["a", "b", "c"]
    assert clean_member_path("/abs/x") == ["abs", "x"]
    assert clean_member_path("a/../b") == ["b"]
    assert clean_member_path("./") == []
    for bad in ("..", "../x", "a/../../x"):
        with pytest.raises(ValueError):
            clean_member_path(bad)


@pytest.mark.parametrize("compress", [False, True])
def test_contents_modes_hardlinks_and_diff_id(tmp_path: Path, compress: bool) -> None:
    import hashlib

    entries = [
        d("bin/", 0o755),
        member("bin/tool", data=b"#!/bin/sh\n", mode=0o4755),
        hard("bin/tool2", "bin/tool"),
        d("ro/", 0o555),
        member("ro/file", data=b"r", mode=0o400),
        member("fifo", tarfile.FIFOTYPE, mode=0o600),
        member("implied/parent/file", data=b"p"),
    ]
    data = build_tar(entries)
    res = apply_layer(io.BytesIO(gzip.compress(data) if compress else data), tmp_path)
    assert res.diff_id == "sha256:" + hashlib.sha256(data).hexdigest()
    assert res.size == len(data) and res.compressed is compress
    assert stat.S_IMODE((tmp_path / "bin/tool").stat().st_mode) == 0o4755
    assert (tmp_path / "bin/tool").stat().st_ino == (tmp_path / "bin/tool2").stat().st_ino
    assert stat.S_IMODE((tmp_path / "ro").stat().st_mode) == 0o555
    assert (tmp_path / "ro").stat().st_mtime == MTIME  # set after its children were written
    assert (tmp_path / "bin/tool").stat().st_mtime == MTIME
    assert stat.S_ISFIFO((tmp_path / "fifo").lstat().st_mode)
    assert (tmp_path / "implied/parent/file").read_bytes() == b"p"


def test_later_member_overrides_earlier(tmp_path: Path) -> None:
    apply(
        [
            member("f", data=b"one"),
            member("f", data=b"two"),
            d("x/"),
            member("x/a", data=b"a"),
            member("x", data=b"file"),
        ],
        tmp_path,
    )
    assert (tmp_path / "f").read_bytes() == b"two"
    assert (tmp_path / "x").read_bytes() == b"file"


def test_zstd_and_garbage_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(UnpackError, match="zstd"):
        apply_layer(io.BytesIO(b"\x28\xb5\x2f\xfd" + b"\0" * 100), tmp_path, label="blob-x")
    truncated = build_tar([member("big", data=b"x" * 5000)])[:1024]
    with pytest.raises(UnpackError, match="blob-y"):
        apply_layer(io.BytesIO(truncated), tmp_path, label="blob-y")
    with pytest.raises(UnpackError):
        apply_layer(io.BytesIO(b"\x1f\x8bnot really gzip"), tmp_path)


@pytest.mark.privileged
def test_whiteouts_become_overlay_form(tmp_path: Path) -> None:
    apply(
        [
            d("etc/"),
            member("etc/.wh.passwd"),
            d("usr/"),
            member("usr/.wh..wh..opq"),
            member(".wh.top"),
            member("usr/keep", data=b"k"),
        ],
        tmp_path,
    )
    for p in (tmp_path / "etc/passwd", tmp_path / "top"):
        st = p.lstat()
        assert stat.S_ISCHR(st.st_mode) and st.st_rdev == 0
    assert not (tmp_path / "etc/.wh.passwd").exists()
    assert os.getxattr(tmp_path / "usr", OPAQUE_XATTR) == b"y"
    assert not (tmp_path / "usr/.wh..wh..opq").exists()
    assert (tmp_path / "usr/keep").read_bytes() == b"k"


@pytest.mark.privileged
def test_owners_devices_and_xattr_filter(tmp_path: Path) -> None:
    dev = member("dev/null", tarfile.CHRTYPE, mode=0o666)
    dev[0].devmajor, dev[0].devminor = 1, 3
    apply(
        [
            member("owned", data=b"o", uid=1234, gid=5678, mode=0o2755),
            sym("link", "owned"),
            dev,
            member(
                "x", data=b"x", pax={"SCHILY.xattr.user.note": "hello", "SCHILY.xattr.trusted.overlay.redirect": "/etc"}
            ),
        ],
        tmp_path,
    )
    st = (tmp_path / "owned").stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (1234, 5678, 0o2755)  # chown did not clear setgid
    dst = (tmp_path / "dev/null").lstat()
    assert stat.S_ISCHR(dst.st_mode) and os.major(dst.st_rdev) == 1 and os.minor(dst.st_rdev) == 3
    assert "trusted.overlay.redirect" not in os.listxattr(tmp_path / "x")
    try:
        assert os.getxattr(tmp_path / "x", "user.note") == b"hello"
    except OSError:
        pytest.skip("temp file system has no user xattrs")
