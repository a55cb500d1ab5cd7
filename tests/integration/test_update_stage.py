"""Staging a release with real tar.xz archives and real minisign/ssh-keygen signatures: a good one is unpacked and
verified beside the running one; unsigned, badly signed, wrong-arch, older, replayed, corrupted, short and
disk-full ones are refused with the reason and leave nothing behind."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

import msgspec
import pytest

from edgelet.testing.signing import MinisignKey, SshKey, missing_tools, trusted_dir
from edgelet.trust.keys import load_trusted_keys
from edgelet.update import RELEASE_JSON
from edgelet.update.decide import Candidate, acceptance_problem
from edgelet.update.errors import ReleaseRefused, StagingError
from edgelet.update.release import ReleaseInfo, describe_tree, pack_release
from edgelet.update.stage import (
    current_target,
    prune_releases,
    read_release,
    remove_interrupted,
    stage_release,
    swap_current,
    verify_tree,
)

pytestmark = pytest.mark.skipif(bool(missing_tools()), reason=f"needs {missing_tools()} (make deps)")


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict:
    d = tmp_path_factory.mktemp("keys")
    minisign, ssh, stranger = MinisignKey.generate(d), SshKey.generate(d), MinisignKey.generate(d, "stranger")
    return {
        "minisign": minisign,
        "ssh": ssh,
        "stranger": stranger,
        "trusted": trusted_dir(d / "trusted", minisign, ssh),
    }


def onedir(root: Path, marker: str = "v1") -> Path:
    """A one-dir's shape: the entry program, a library under _internal/, a symlink between them."""
    (root / "_internal").mkdir(parents=True)
    (root / "edgelet").write_text(f"#!/bin/sh\necho {marker}\n")
    (root / "edgelet").chmod(0o755)
    (root / "_internal" / "libpython.so.1.0").write_bytes(os.urandom(300_000))
    os.symlink("libpython.so.1.0", root / "_internal" / "libpython.so")
    return root


def judge(running: int = 1000, rolled_back: tuple[int, ...] = ()):
    def problem(info: ReleaseInfo, signed: int | None) -> str | None:
        return acceptance_problem(
            Candidate(info.version, info.arch, signed), arch="amd64", running=running, rolled_back=rolled_back
        )

    return problem


def stage(path: Path, keys: dict, releases: Path, signature: Path | None = None, **judged: object):
    sig = signature if signature is not None else Path(str(path) + ".minisig")
    with open(path, "rb") as f:
        return stage_release(
            f,
            sig.read_bytes() if sig.exists() else None,
            name=str(path),
            signature_name=str(sig),
            keys=load_trusted_keys(keys["trusted"]),
            releases_dir=releases,
            judge=judge(**judged),  # type: ignore[arg-type]
            now=1_700_000_000.0,
        )


def release(tmp_path: Path, keys: dict, version: int = 1001, arch: str = "amd64", sign: bool = True) -> Path:
    out = tmp_path / f"edgelet-{version}-{arch}.tar.xz"
    pack_release(onedir(tmp_path / f"onedir-{version}-{arch}"), out, version=version, arch=arch, label=f"0.1.{version}")
    if sign:
        keys["minisign"].sign(out, version=version)
    return out


def left_behind(releases: Path) -> list[str]:
    return sorted(p.name for p in releases.iterdir()) if releases.exists() else []


def test_a_signed_release_is_staged_verified_and_made_current_by_one_swap(tmp_path: Path, keys: dict) -> None:
    archive = release(tmp_path, keys)
    releases, lib = tmp_path / "releases", tmp_path / "lib"
    running = onedir(lib / "releases" / "1000", "v0")
    swap_current(lib / "current", running)
    staged = stage(archive, keys, releases)
    assert staged.path == releases / "1001" and staged.info.version == 1001 and staged.info.label == "0.1.1001"
    assert staged.bytes_written > 300_000 and left_behind(releases) == ["1001"]
    assert verify_tree(staged.path, staged.info) == []
    assert read_release(staged.path) == staged.info
    assert os.readlink(staged.path / "_internal" / "libpython.so") == "libpython.so.1.0"
    assert os.stat(staged.path / "edgelet").st_mode & 0o777 == 0o755
    assert current_target(lib / "current") == str(running)  # staging never touches what runs
    swap_current(lib / "current", staged.path)
    assert subprocess.run([lib / "current" / "edgelet"], capture_output=True, text=True).stdout == "v1\n"
    assert left_behind(lib) == ["current", "releases"]  # no temp link left
    prune_releases(releases, {str(staged.path)})
    assert left_behind(releases) == ["1001"]


def test_what_an_interrupted_staging_or_download_left_is_removed_and_nothing_else(tmp_path: Path) -> None:
    releases = tmp_path / "releases"
    (releases / ".1001.partial" / "_internal").mkdir(parents=True)
    (releases / ".1001.partial" / "edgelet").write_text("half")
    (releases / "1000").mkdir()
    (releases / ".download").mkdir()
    (releases / ".download" / ".edgelet-1002-arm64.tar.xz.part").write_bytes(b"half")
    (releases / ".download" / "edgelet-1001-arm64.tar.xz").write_bytes(b"whole")  # judged: its validators say so
    assert sorted(p.name for p in remove_interrupted(releases)) == [".1001.partial", ".edgelet-1002-arm64.tar.xz.part"]
    assert sorted(p.name for p in releases.iterdir()) == [".download", "1000"]
    assert [p.name for p in (releases / ".download").iterdir()] == ["edgelet-1001-arm64.tar.xz"]
    assert remove_interrupted(tmp_path / "absent") == []


def test_an_ssh_signature_needs_the_release_namespace(tmp_path: Path, keys: dict) -> None:
    archive = release(tmp_path, keys, sign=False)
    releases = tmp_path / "releases"
    good = keys["ssh"].sign(archive, namespace="edgelet-release")
    assert stage(archive, keys, releases, signature=good).info.version == 1001
    manifest_sig = keys["ssh"].sign(archive, namespace="edgelet-manifest", out=tmp_path / "m.sig")
    with pytest.raises(ReleaseRefused, match="wrong namespace"):
        stage(archive, keys, tmp_path / "r2", signature=manifest_sig)
    assert left_behind(tmp_path / "r2") == []


@pytest.mark.parametrize(
    "case, match",
    [
        ("unsigned", "unsigned: no .*minisig"),
        ("stranger", r"signature refused \(unknown key\)"),
        ("other-body", r"signature refused \(bad\)"),
        ("wrong-arch", "built for arm64, this device is amd64"),
        ("older", "version 999 is not newer than the running version 1000"),
        ("same", "version 1000 is not newer than the running version 1000"),
        ("replayed", "version 1001 is not newer than version 1001, rolled back before"),
        ("comment-lies", "its signature says version 1005, its release.json 1001"),
        ("short", "corrupted or short archive"),
        ("corrupted", "_internal/libpython.so.1.0: corrupted"),
        ("unlisted", "extra: not listed in release.json"),
        ("missing", "1 listed files missing"),
        ("first-not-json", "its first member is not release.json"),
    ],
)
def test_refused_releases_leave_nothing_behind(tmp_path: Path, keys: dict, case: str, match: str) -> None:
    version = {"older": 999, "same": 1000}.get(case, 1001)
    archive = release(tmp_path, keys, version=version, arch="arm64" if case == "wrong-arch" else "amd64", sign=False)
    rolled_back: tuple[int, ...] = (1001,) if case == "replayed" else ()
    if case in ("corrupted", "unlisted", "missing", "first-not-json"):
        rewrite(archive, case)
    if case == "short":
        data = archive.read_bytes()
        keys["minisign"].sign(archive, version=version)  # signed whole, then cut short in transit
        archive.write_bytes(data[: len(data) // 2])
    elif case == "stranger":
        keys["stranger"].sign(archive, version=version)
    elif case == "other-body":
        other = release(tmp_path / "o", keys, version=version)
        os.replace(str(other) + ".minisig", str(archive) + ".minisig")
    elif case == "comment-lies":
        keys["minisign"].sign(archive, version=1005)
    elif case != "unsigned":
        keys["minisign"].sign(archive, version=version)
    releases = tmp_path / "releases"
    with pytest.raises(ReleaseRefused, match=match) as refused:
        stage(archive, keys, releases, rolled_back=rolled_back)
    assert refused.value.release == str(archive)
    assert left_behind(releases) == []


def rewrite(archive: Path, case: str) -> None:
    """Re-tar a release with one thing wrong, keeping its release.json as it was."""
    members: list[tuple[tarfile.TarInfo, bytes | None]] = []
    with tarfile.open(archive, "r:xz") as tar:
        for m in tar:
            f = tar.extractfile(m) if m.isreg() else None
            members.append((m, f.read() if f else None))
    info = msgspec.json.decode(members[0][1] or b"", type=ReleaseInfo)
    if case == "corrupted":
        members = [(m, (b"X" + d[1:]) if d and m.name.endswith("1.0") else d) for m, d in members]
    elif case == "unlisted":
        extra = tarfile.TarInfo("extra")
        extra.size = 1
        members.append((extra, b"x"))
    elif case == "missing":
        members = [(m, d) for m, d in members if m.name != "edgelet"]
    elif case == "first-not-json":
        members = members[1:] + members[:1]
    assert info.files
    with tarfile.open(archive, "w:xz") as tar:
        for m, d in members:
            tar.addfile(m, io.BytesIO(d) if d is not None else None)


@pytest.fixture
def small_disk(tmp_path: Path):
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_a_full_disk_is_reported_and_leaves_the_running_release(tmp_path: Path, keys: dict, small_disk: Path) -> None:
    archive = release(tmp_path, keys)
    running = small_disk / "1000"
    running.mkdir()
    (running / RELEASE_JSON).write_text("{}")
    with pytest.raises(StagingError, match="No space left on device") as failed:
        stage(archive, keys, small_disk)
    assert failed.value.release == str(archive)
    assert left_behind(small_disk) == ["1000"] and (running / RELEASE_JSON).read_text() == "{}"


def test_describe_tree_lists_files_and_symlinks(tmp_path: Path) -> None:
    files = describe_tree(onedir(tmp_path / "d"))
    assert sorted(files) == ["_internal/libpython.so", "_internal/libpython.so.1.0", "edgelet"]
    assert files["_internal/libpython.so"].link == "libpython.so.1.0" and files["edgelet"].mode == 0o755
