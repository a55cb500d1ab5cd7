"""containerd's TestBreakouts (pkg/archive/tar_test.go), ported to the unpacker: each case must fail or stay inside.

containerd resolves absolute and `..`-climbing link targets inside the root, so its cases use the
root's own /etc/passwd as the thing to protect. Here the protected things live outside the root
(a sentinel file and a 0400 file next to it, named by absolute and climbing paths), and each case
passes when the layer is refused (UnpackError) or applied without touching them; a few cases
also say which of the two must happen. `pre` builds what earlier state containerd's `apply` sets up.
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from edgelet.images.errors import UnpackError
from edgelet.images.unpack import apply_layer
from edgelet.testing.images import build_tar

UP = "../" * 8  # climbs past the root from anywhere in it


def m(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", *, link: str = "", mode: int = 0o644):
    ti = tarfile.TarInfo(name)
    ti.type, ti.linkname, ti.mode, ti.mtime = kind, link, mode, 1_600_000_000
    if kind == tarfile.REGTYPE:
        ti.size = len(data)
    return ti, data if kind == tarfile.REGTYPE else None


def f(name: str, data: bytes = b"inside", mode: int = 0o644):
    return m(name, data=data, mode=mode)


def d(name: str, mode: int = 0o755):
    return m(name, tarfile.DIRTYPE, mode=mode)


def sym(name: str, target: str):
    return m(name, tarfile.SYMTYPE, link=target, mode=0o777)


def ln(name: str, target: str):
    return m(name, tarfile.LNKTYPE, link=target)


# (entries(o) where o is the absolute path of the outside dir, pre(root, o) or None, expected outcome)
# expected: "refused", "applied" or "either".
Case = tuple[Callable[[str], list], Callable[[Path, str], None] | None, str]

CASES: dict[str, Case] = {
    "HardlinkRelative": (
        lambda o: [d("breakouts"), sym("breakouts/d1", f"{UP}{o}"), ln("breakouts/mypasswd", "breakouts/d1/sentinel")],
        None,
        "refused",
    ),
    "HardlinkDownAndOut": (
        lambda o: [
            d("breakouts"),
            d("downandout"),
            sym("breakouts/d1", f"../downandout/{UP}{o}"),
            ln("breakouts/mypasswd", "breakouts/d1/sentinel"),
        ],
        None,
        "refused",
    ),
    "HardlinkAbsolute": (lambda o: [sym("localetc", o), ln("localpasswd", "localetc/sentinel")], None, "refused"),
    "HardlinkRelativeLong": (
        lambda o: [sym("localetc", f"{UP}{o}"), ln("localpasswd", "/localetc/sentinel")],
        None,
        "refused",
    ),
    "HardlinkRelativeUpAndOut": (
        lambda o: [sym("localetc", f"upandout/{UP}{o}"), ln("localpasswd", "/localetc/sentinel")],
        None,
        "refused",
    ),
    "HardlinkDirectRelative": (lambda o: [ln("localpasswd", f"{UP}{o}/sentinel")], None, "refused"),
    "HardlinkDirectAbsolute": (lambda o: [ln("localpasswd", f"{o}/sentinel")], None, "refused"),
    "SymlinkParentDirectory": (lambda o: [sym("..", o), ln("localpasswd", "../sentinel")], None, "refused"),
    "SymlinkEmptyFilename": (lambda o: [sym("", o), ln("localpasswd", "sentinel")], None, "refused"),
    "SymlinkParentRelative": (lambda o: [sym("localetc/sub/..", o), f("localetc/sentinel", b"pwned")], None, "refused"),
    "SymlinkOverrideDirectory": (
        lambda o: [sym("localetc", o), f("localetc/sentinel", b"pwned")],
        lambda r, o: (r / "localetc").mkdir(),
        "refused",
    ),
    "SymlinkOverrideDirectoryRelative": (
        lambda o: [sym("localetc", f"{UP}{o}"), ln("localetc/l", "x")],
        lambda r, o: (r / "localetc").mkdir(),
        "refused",
    ),
    "DirectoryOverrideSymlink": (
        lambda o: [d("localetc/"), f("localetc/sentinel", b"inside")],
        lambda r, o: (r / "localetc").symlink_to(o),
        "applied",
    ),
    "DirectoryOverrideSymlinkAndHardlink": (
        lambda o: [d("localetc/"), f("localetc/sentinel", b"different")],
        lambda r, o: (r / "localetc").symlink_to(o),
        "applied",
    ),
    "WhiteoutRootParent": (lambda o: [f(".wh...")], None, "refused"),
    "WhiteoutParent": (lambda o: [d("etc"), f("etc/.wh...")], None, "refused"),
    "WhiteoutRoot": (lambda o: [f(".wh..")], None, "refused"),
    "WhiteoutCurrentDirectory": (lambda o: [d("etc"), f("etc/.wh..")], None, "refused"),
    "WhiteoutOutsideByPath": (lambda o: [f(f"{UP}{o}/.wh.sentinel")], None, "either"),
    "WhiteoutSymlinkPath": (
        lambda o: [f("localetc/.wh.sentinel")],
        lambda r, o: (r / "localetc").symlink_to(o),
        "refused",
    ),
    "WhiteoutDeadSymlinkParent": (
        lambda o: [f("localetc/.wh.etc")],
        lambda r, o: (r / "localetc").symlink_to("/dne"),
        "refused",
    ),
    "WhiteoutSymlink": (lambda o: [f(".wh.localetc")], lambda r, o: (r / "localetc").symlink_to(o), "applied"),
    "HardlinkSymlinkBeforeCreateTarget": (
        lambda o: [sym("localpasswd", f"{o}/sentinel"), ln("localpasswd-dup", "localpasswd")],
        None,
        "refused",
    ),
    "HardlinkSymlinkRelative": (
        lambda o: [sym("passwdlink", f"{UP}{o}/sentinel"), ln("localpasswd", "/passwdlink")],
        None,
        "refused",
    ),
    "HardlinkSymlinkAbsolute": (
        lambda o: [sym("passwdlink", f"{o}/sentinel"), ln("localpasswd", "/passwdlink")],
        None,
        "refused",
    ),
    # A symlink to an outside 0400 file, a hardlink to the symlink, then entries that chmod the link's name:
    # a chmod that follows the symlink would make the outside file 0777.
    "HardlinkSymlinkChmod": (
        lambda o: [
            sym(f"{o}/also-exists-outside-root", f"{o}/perm400"),
            ln("sketchylink", f"{o}/also-exists-outside-root"),
        ],
        None,
        "refused",
    ),
    "SymlinkThenChmodByFile": (
        lambda o: [sym("sketchylink", f"{o}/perm400"), f("sketchylink", b"", 0o777)],
        None,
        "applied",
    ),
    "SymlinkThenChmodByDir": (lambda o: [sym("sketchylink", f"{o}/perm400"), d("sketchylink", 0o777)], None, "applied"),
}


@pytest.fixture
def env(tmp_path: Path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "sentinel").write_bytes(b"sentinel")
    (outside / "perm400").write_bytes(b"...")
    os.chmod(outside / "perm400", 0o400)
    (outside / "also-exists-outside-root").write_bytes(b"...")
    os.chmod(outside / "also-exists-outside-root", 0o640)
    return root, outside


def snapshot(outside: Path) -> dict[str, tuple[int, int, bytes]]:
    out = {}
    for p in sorted(outside.iterdir()):
        st = os.lstat(p)
        out[p.name] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), p.read_bytes() if p.is_file() else b"")
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_breakout(env, name: str) -> None:
    root, outside = env
    entries, pre, expected = CASES[name]
    if pre is not None:
        pre(root, str(outside))
    before = snapshot(outside)
    try:
        apply_layer(io.BytesIO(build_tar(entries(str(outside)))), root, label=name)
        outcome = "applied"
    except UnpackError:
        outcome = "refused"
    assert snapshot(outside) == before, f"{name} changed something outside the root"
    assert snapshot(outside)["perm400"][1] == 0o400
    if expected != "either":
        assert outcome == expected


def test_directory_override_symlink_writes_inside(env) -> None:
    root, outside = env
    (root / "localetc").symlink_to(outside)
    apply_layer(io.BytesIO(build_tar([d("localetc/"), f("localetc/sentinel", b"different")])), root)
    assert not (root / "localetc").is_symlink() and (root / "localetc" / "sentinel").read_bytes() == b"different"
    assert (outside / "sentinel").read_bytes() == b"sentinel"


def test_chmod_by_file_replaces_the_symlink(env) -> None:
    root, outside = env
    apply_layer(io.BytesIO(build_tar([sym("sketchylink", f"{outside}/perm400"), f("sketchylink", b"", 0o777)])), root)
    assert not (root / "sketchylink").is_symlink()
    assert stat.S_IMODE(os.lstat(root / "sketchylink").st_mode) == 0o777
