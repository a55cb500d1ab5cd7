"""The release artifact: `release.json` (version, architecture, every file's digest) and the tar.xz that carries it.

A release is `edgelet-<label>-<arch>.tar.xz`: its first member is
`release.json`, then the frozen one-dir's files under their relative paths
(the entry program `edgelet` at the top). Its detached signature lies beside
it (`.minisig` with the trusted comment `edgelet-version: N`, or `.sig` made
with `ssh-keygen -Y sign -n edgelet-release`). The version is an integer that
orders releases (`release_number` maps the package's `MAJOR.MINOR.PATCH` to
one); `label` is what people read.
"""

from __future__ import annotations

import hashlib
import io
import os
import platform
import stat
import tarfile
from pathlib import Path
from typing import Literal

import msgspec

from edgelet.update import ARCHIVE_SUFFIX, RELEASE_JSON

FORMAT = 1
ENTRY = "edgelet"
MAX_RELEASE_JSON = 4 * 1024 * 1024
_ARCHES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64", "armv7l": "armhf"}


class FileEntry(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A regular file (`sha256`, `size`, `mode`) or a symlink (`link`, relative, inside the release)."""

    sha256: str = ""
    size: int = 0
    mode: int = 0o644
    link: str = ""


class ReleaseInfo(msgspec.Struct, frozen=True, kw_only=True):
    """`release.json`."""

    format: int = FORMAT
    version: int
    label: str = ""
    arch: str
    entry: str = ENTRY
    commit: str = ""
    files: dict[str, FileEntry]

    @property
    def name(self) -> str:
        return f"{self.label or self.version} ({self.version}, {self.arch})"


def normalise_arch(machine: str) -> str:
    """Debian's architecture name for a kernel's machine name (`x86_64` -> `amd64`), as the .deb names it."""
    return _ARCHES.get(machine, machine)


def own_arch() -> str:
    return normalise_arch(platform.machine())


def release_number(label: str) -> int:
    """`MAJOR.MINOR.PATCH` (each below 1000) as one ordered integer: 0.1.0 -> 1000, 1.2.3 -> 1002003."""
    parts = label.split("+", 1)[0].split("-", 1)[0].split(".")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() and int(p) < 1000 for p in parts):
        raise ValueError(f"version {label!r} is not MAJOR.MINOR.PATCH with each part below 1000")
    numbers = [int(p) for p in parts] + [0] * (3 - len(parts))
    return numbers[0] * 1_000_000 + numbers[1] * 1_000 + numbers[2]


def archive_name(label: str, arch: str) -> str:
    return f"edgelet-{label}-{arch}{ARCHIVE_SUFFIX}"


def decode_release_json(data: bytes, where: str) -> ReleaseInfo:
    """Parse `release.json`; ValueError naming `where` and the field when it is not one."""
    try:
        info = msgspec.json.decode(data, type=ReleaseInfo)
    except msgspec.ValidationError as exc:
        raise ValueError(f"{where}: {RELEASE_JSON}: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise ValueError(f"{where}: {RELEASE_JSON} is not JSON: {exc}") from exc
    if info.format != FORMAT:
        raise ValueError(f"{where}: {RELEASE_JSON}: format {info.format} is not {FORMAT}")
    problem = path_problem(info.entry)
    if problem or info.entry not in info.files or info.files[info.entry].link:
        raise ValueError(f"{where}: {RELEASE_JSON}: entry {info.entry!r} is not a regular file of the release")
    links = {path for path, entry in info.files.items() if entry.link}
    for path, entry in info.files.items():
        problem = path_problem(path) or (link_problem(path, entry.link) if entry.link else None)
        parents = ["/".join(path.split("/")[:i]) for i in range(1, path.count("/") + 1)]
        if not problem and any(p in links for p in parents):
            problem = "inside a symlink of the release"
        if problem:
            raise ValueError(f"{where}: {RELEASE_JSON}: files[{path!r}]: {problem}")
    return info


def path_problem(path: str) -> str | None:
    """Why `path` cannot be a member of a release (absolute, `..`, empty parts), or None (pure)."""
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts) or path == RELEASE_JSON:
        return "not a relative path inside the release"
    return None


def link_problem(path: str, target: str) -> str | None:
    """A symlink must stay inside the release (pure)."""
    if target.startswith("/"):
        return f"symlink to the absolute path {target!r}"
    depth = len(path.split("/")) - 1
    for part in target.split("/"):
        depth += -1 if part == ".." else 0 if part in ("", ".") else 1
        if depth < 0:
            return f"symlink {target!r} leaves the release"
    return None


def describe_tree(root: Path) -> dict[str, FileEntry]:
    """Every file and symlink under `root` (a one-dir build) with its digest, size and mode."""
    files: dict[str, FileEntry] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted([*filenames, *(d for d in dirnames if os.path.islink(os.path.join(dirpath, d)))]):
            full = Path(dirpath, name)
            rel = full.relative_to(root).as_posix()
            st = full.lstat()
            if stat.S_ISLNK(st.st_mode):
                files[rel] = FileEntry(link=os.readlink(full))
            elif stat.S_ISREG(st.st_mode):
                files[rel] = FileEntry(sha256=_sha256_file(full), size=st.st_size, mode=stat.S_IMODE(st.st_mode))
    return files


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def pack_release(
    onedir: Path,
    out: Path,
    *,
    version: int,
    arch: str,
    label: str = "",
    commit: str = "",
    preset: Literal[0, 1, 2, 3, 4, 5, 6, 7, 8, 9] = 6,
) -> ReleaseInfo:
    """Write the release archive `out` of the one-dir `onedir` (its entry program `edgelet`); `preset`: xz's
    (6, its default, for what is published; 0 packs several times faster, for releases a test makes)."""
    files = describe_tree(onedir)
    info = ReleaseInfo(version=version, label=label or str(version), arch=arch, commit=commit, files=files)
    decode_release_json(msgspec.json.encode(info), str(onedir))  # the same checks a device makes
    data = msgspec.json.format(msgspec.json.encode(info), indent=1)
    tmp = out.with_name(out.name + ".tmp")
    with tarfile.open(tmp, "w:xz", format=tarfile.PAX_FORMAT, preset=preset) as tar:
        member = tarfile.TarInfo(RELEASE_JSON)
        member.size, member.mode = len(data), 0o644
        tar.addfile(member, io.BytesIO(data))
        for rel in files:
            tar.add(onedir / rel, arcname=rel, recursive=False, filter=_plain)
    os.replace(tmp, out)
    return info


def _plain(member: tarfile.TarInfo) -> tarfile.TarInfo:
    member.uid = member.gid = 0
    member.uname = member.gname = "root"
    return member
