"""Staging a release beside the running one, and the one atomic step that makes a release current.

`stage_release` reads the archive once: the signature's digests are taken as
the bytes go past, `release.json` (its first member) is judged before
anything is written, every other member is written under
`<releases>/.<version>.partial/` and checked against its digest, and only
when the signature holds for the whole file is the directory synced and
renamed to `<releases>/<version>/`. Whatever fails (a refused signature, a
corrupted or short archive, a full disk) removes the partial directory and
leaves the running release as it was. `swap_current` points the `current`
symlink at a release with one rename.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO

from edgelet.trust.errors import SignatureRefused
from edgelet.trust.keys import TrustedKeys
from edgelet.trust.message import MessageReader
from edgelet.trust.verify import check_signature, needs_of
from edgelet.update import DOWNLOAD_DIR, PART_SUFFIX, PARTIAL_SUFFIX, RELEASE_JSON, RELEASE_NAMESPACE
from edgelet.update.errors import ReleaseRefused, StagingError
from edgelet.update.release import MAX_RELEASE_JSON, FileEntry, ReleaseInfo, decode_release_json
from edgelet.util.crashpoint import crash_point
from edgelet.util.libc import syncfs
from edgelet.util.log import get_logger

log = get_logger(__name__)

_CHUNK = 1 << 20
ENV_RELEASE_DIR = "EDGELET_RELEASE_DIR"  # set by packaging/launch: the release directory it started


@dataclass(frozen=True)
class Staged:
    """A release unpacked, verified and synced under its version's directory."""

    path: Path
    info: ReleaseInfo
    key_id: str
    bytes_written: int


def stage_release(
    archive: BinaryIO,
    signature: bytes | None,
    *,
    name: str,
    signature_name: str,
    keys: TrustedKeys,
    releases_dir: Path,
    judge: Callable[[ReleaseInfo, int | None], str | None],
    now: float,
) -> Staged:
    """Unpack and verify the release `archive` (named `name`) into `releases_dir`; ReleaseRefused or StagingError.

    `judge(info, signed_version)` says why the release is refused (None: accepted); it is asked with no
    signed version as soon as release.json is read, to refuse an old or foreign release before writing it,
    and again once the signature holds.
    """
    if signature is None:
        raise ReleaseRefused(name, f"unsigned: no {signature_name}")
    try:
        needs = needs_of(signature, keys, namespace=RELEASE_NAMESPACE, name=signature_name)
    except SignatureRefused as exc:
        raise ReleaseRefused(name, str(exc)) from exc
    import lzma  # only when a release is staged: the agent that never updates does not load it

    reader = MessageReader(archive, sorted(needs.digests), keep_whole=needs.whole)
    partial: Path | None = None
    try:
        with tarfile.open(fileobj=reader, mode="r|xz") as tar:  # type: ignore[call-overload]
            info, raw = _read_release_json(tar, name)
            problem = judge(info, None)
            if problem:
                raise ReleaseRefused(name, problem)
            releases_dir.mkdir(parents=True, exist_ok=True)
            partial = releases_dir / f".{info.version}{PARTIAL_SUFFIX}"
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir(mode=0o755)
            (partial / RELEASE_JSON).write_bytes(raw)
            written = len(raw) + _unpack(tar, info, partial, name)
            crash_point("update.unpack")
        reader.drain()
        try:
            verified = check_signature(
                reader.message(), signature, keys, namespace=RELEASE_NAMESPACE, now=now, name=signature_name
            )
        except SignatureRefused as exc:
            raise ReleaseRefused(name, str(exc)) from exc
        except ValueError as exc:  # a legacy (non-prehashed) signature of a release too large to hold whole
            raise ReleaseRefused(name, str(exc)) from exc
        problem = judge(info, verified.version)
        if problem:
            raise ReleaseRefused(name, problem)
        final = releases_dir / str(info.version)
        syncfs(partial)
        if final.exists():
            shutil.rmtree(final)  # a staging of the same version that never became current
        os.rename(partial, final)
        partial = None
        _fsync_dir(releases_dir)
        return Staged(final, info, verified.key_id, written)
    except (tarfile.TarError, lzma.LZMAError, EOFError) as exc:
        raise ReleaseRefused(name, f"corrupted or short archive: {exc}") from exc
    except OSError as exc:
        raise StagingError(name, f"cannot stage under {releases_dir}: {exc.strerror or exc}") from exc
    finally:
        if partial is not None:
            shutil.rmtree(partial, ignore_errors=True)


def _read_release_json(tar: tarfile.TarFile, name: str) -> tuple[ReleaseInfo, bytes]:
    first = tar.next()
    if first is None or first.name != RELEASE_JSON or not first.isreg():
        raise ReleaseRefused(name, f"its first member is not {RELEASE_JSON}")
    if first.size > MAX_RELEASE_JSON:
        raise ReleaseRefused(name, f"{RELEASE_JSON} is larger than {MAX_RELEASE_JSON} bytes")
    f = tar.extractfile(first)
    assert f is not None
    raw = f.read()
    try:
        return decode_release_json(raw, name), raw
    except ValueError as exc:
        raise ReleaseRefused(name, str(exc)) from exc


def _unpack(tar: tarfile.TarFile, info: ReleaseInfo, into: Path, name: str) -> int:
    """Write every member release.json lists, checking type, size and digest; returns the bytes written."""
    seen: set[str] = set()
    written = 0
    first = True
    for member in tar:  # a stream's iteration starts again with the members already read: release.json
        if first and member.name == RELEASE_JSON:
            first = False
            continue
        first = False
        if member.isdir():
            continue
        entry = info.files.get(member.name)
        if entry is None or member.name in seen:
            raise ReleaseRefused(name, f"{member.name}: not listed in {RELEASE_JSON} (or listed twice)")
        seen.add(member.name)
        dest = into / member.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        if entry.link:
            if not member.issym() or member.linkname != entry.link:
                raise ReleaseRefused(name, f"{member.name}: not the symlink {RELEASE_JSON} lists")
            os.symlink(entry.link, dest)
            continue
        if not member.isreg() or member.size != entry.size:
            raise ReleaseRefused(
                name, f"{member.name}: not the regular file of {entry.size} bytes {RELEASE_JSON} lists"
            )
        source = tar.extractfile(member)
        assert source is not None
        written += _write_checked(source, dest, entry, name, member.name)
    missing = sorted(set(info.files) - seen)
    if missing:
        raise ReleaseRefused(name, f"{len(missing)} listed files missing, first {missing[0]}")
    return written


def _write_checked(source: IO[bytes], dest: Path, entry: FileEntry, name: str, member: str) -> int:
    h = hashlib.sha256()
    size = 0
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as out:
        for chunk in iter(lambda: source.read(_CHUNK), b""):
            h.update(chunk)
            out.write(chunk)
            size += len(chunk)
        os.fchmod(out.fileno(), entry.mode & 0o755)
    if h.hexdigest() != entry.sha256:
        raise ReleaseRefused(name, f"{member}: corrupted (its sha256 is not the one {RELEASE_JSON} lists)")
    return size


def verify_tree(path: Path, info: ReleaseInfo) -> list[str]:
    """The files of a staged release that differ from its release.json (a card that rotted, a hand edit)."""
    problems = []
    for rel, entry in sorted(info.files.items()):
        full = path / rel
        try:
            if entry.link:
                if os.readlink(full) != entry.link:
                    problems.append(f"{rel}: another symlink")
                continue
            h = hashlib.sha256()
            with open(full, "rb") as f:
                for chunk in iter(lambda: f.read(_CHUNK), b""):
                    h.update(chunk)
            if h.hexdigest() != entry.sha256:
                problems.append(f"{rel}: another digest")
        except OSError as exc:
            problems.append(f"{rel}: {exc.strerror or exc}")
    return problems


def read_release(path: Path) -> ReleaseInfo | None:
    """The release.json of a release directory, None when it has none (a .deb's plain install) or it is bad."""
    try:
        return decode_release_json((path / RELEASE_JSON).read_bytes(), str(path))
    except (OSError, ValueError):
        return None


def off_reason(has_keys: bool, current: Path) -> str:
    """Why self-update is off on this node ("" when it is on): the agent logs it, `edgelet check` and
    `edgelet update status` show it."""
    if not has_keys:
        return "no --trusted-keys: releases cannot be verified"
    if not os.path.islink(current):
        return f"{current} is not a symlink: edgelet was not installed with the releases layout"
    return ""


def current_target(current: Path, *, absolute: bool = False) -> str:
    """Where the `current` symlink points ("" when there is none); `absolute`: a relative target joined to the
    link's directory."""
    try:
        target = os.readlink(current)
    except OSError:
        return ""
    return os.path.join(current.parent, target) if absolute else target


def swap_current(current: Path, target: Path | str) -> None:
    """Point `current` at `target` with one rename (a power cut leaves the old or the new link) and sync it."""
    tmp = current.with_name(f".{current.name}.new")
    tmp.unlink(missing_ok=True)
    os.symlink(str(target), tmp)
    os.replace(tmp, current)
    _fsync_dir(current.parent)


def prune_releases(releases_dir: Path, keep: set[str]) -> list[Path]:
    """Remove release directories (and partial ones) under `releases_dir` that are not in `keep` (paths)."""
    removed = []
    try:
        entries = list(releases_dir.iterdir())
    except FileNotFoundError:
        return []
    kept = {os.path.realpath(k) for k in keep if k}
    for entry in entries:
        if os.path.realpath(entry) in kept or not entry.is_dir() or entry.is_symlink():
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


def remove_interrupted(releases_dir: Path) -> list[Path]:
    """What a staging or a download that a kill or a power cut interrupted left under `releases_dir` (its
    `.N.partial` directories and `.download/` `.part` files): at the agent's start, when neither runs. Staging
    the same release again would replace them, but the release may be gone from the card or the URL by then."""
    removed = []
    for partial in releases_dir.glob(f".*{PARTIAL_SUFFIX}"):
        shutil.rmtree(partial, ignore_errors=True)
        removed.append(partial)
    for part in (releases_dir / DOWNLOAD_DIR).glob(f".*{PART_SUFFIX}"):
        part.unlink(missing_ok=True)
        removed.append(part)
    return removed


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
