"""Applies one layer tar (plain, gzip or zstd) into a directory without ever writing outside it.

Safety does not rest on tarfile's extraction filters: every member's path is
cleaned lexically (`..` may not climb above the root), then walked component by
component with `openat(O_NOFOLLOW | O_DIRECTORY)` from a descriptor of the root,
so a symlink planted by an earlier member is never traversed. Symlinks are
created as given (absolute targets are normal in images) but never followed;
hardlinks must name a regular file already inside the root, found the same way.

Each layer is unpacked into its own directory and later used as one overlayfs
lowerdir, so whiteouts are converted to overlayfs form: `.wh.name` becomes a
0:0 character device `name`, `.wh..wh..opq` sets `trusted.overlay.opaque=y` on
its directory. Like containerd's overlay snapshotter (and unlike docker's
chrooted apply onto the merged view) a layer never sees its lower layers.

zstd layers stream through the system's `zstd` program (Debian's `zstd`, already
needed for `.tar.zst` imports): the `zstandard` wheel would add 24 MB. The size cap
and the diffID apply to its output exactly as to gzip's.
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import os
import shutil
import stat
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from edgelet.images import zstd
from edgelet.images.errors import DecompressError, LayerTooLarge, UnpackError, UnsafeLayerError
from edgelet.util.crashpoint import crash_point
from edgelet.util.log import get_logger

log = get_logger(__name__)

WHITEOUT_PREFIX = ".wh."
OPAQUE_MARKER = ".wh..wh..opq"
OPAQUE_XATTR = "trusted.overlay.opaque"
GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 1 << 20
# After an error, how long zstd may take to exit by itself (it has failed, or gets EPIPE) before it is killed.

# xattrs a layer may set. trusted.overlay.* above all must never come from a layer:
# redirect/origin/metacopy xattrs would let it steer overlayfs lookups elsewhere.
_ALLOWED_XATTR_PREFIXES = ("user.",)
_ALLOWED_XATTRS = ("security.capability",)

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class UnpackResult:
    """`diff_id` is the sha256 of the whole uncompressed stream; `size` its length in bytes."""

    diff_id: str
    size: int
    compressed: bool


class _HashingReader:
    """A read-only stream that hashes and counts everything read through it, up to `limit` bytes."""

    def __init__(self, raw: BinaryIO, label: str, limit: int | None) -> None:
        self._raw = raw
        self._label = label
        self.limit = limit
        self.sha = hashlib.sha256()
        self.size = 0

    def read(self, n: int = -1) -> bytes:
        data = self._raw.read(n)
        self.sha.update(data)
        self.size += len(data)
        if self.limit is not None and self.size > self.limit:
            raise LayerTooLarge(
                self._label, f"uncompressed, the layer is larger than the {self.limit} bytes of space it may take"
            )
        return data

    def drain(self) -> None:
        while self.read(_CHUNK):
            pass


def clean_member_path(name: str) -> list[str]:
    """The path components of a member name inside the root; `/` and `./` prefixes are dropped,
    `..` resolved lexically. UnsafeLayerError (via ValueError) if it climbs above the root."""
    parts: list[str] = []
    for comp in name.split("/"):
        if comp in ("", "."):
            continue
        if comp == "..":
            if not parts:
                raise ValueError("path climbs above the layer root")
            parts.pop()
            continue
        if "\0" in comp:
            raise ValueError("path contains a NUL byte")
        parts.append(comp)
    return parts


class _Applier:
    """Applies members one at a time below `root_fd`; holds no fds between members except the root."""

    def __init__(self, root_fd: int, label: str, is_root: bool, limit: int | None = None) -> None:
        self.root_fd = root_fd
        self.label = label
        self.is_root = is_root
        self.limit = limit
        self.declared = 0  # bytes of regular-file content the members so far announced
        self.dir_meta: dict[tuple[str, ...], tuple[int, int]] = {}  # path -> (mode, mtime_ns), applied last

    def unsafe(self, member: str, reason: str) -> UnsafeLayerError:
        return UnsafeLayerError(self.label, reason, member=member)

    def open_parent(self, member: str, parts: list[str], *, create: bool) -> int:
        """An fd of the directory holding `parts[-1]`, walked without following any symlink.

        Missing directories are created (0755, as tar does for implied parents) when `create`."""
        fd = os.dup(self.root_fd)
        try:
            for comp in parts[:-1]:
                try:
                    nfd = os.open(comp, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise self.unsafe(member, f"parent directory {comp!r} does not exist") from None
                    os.mkdir(comp, 0o755, dir_fd=fd)
                    nfd = os.open(comp, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        kind = "a symlink" if _is_symlink(fd, comp) else "not a directory"
                        raise self.unsafe(member, f"parent {comp!r} is {kind}; refusing to go through it") from exc
                    raise
                os.close(fd)
                fd = nfd
            return fd
        except BaseException:
            os.close(fd)
            raise

    def clear(self, dir_fd: int, name: str, *, keep_dir: bool) -> None:
        """Remove whatever `name` is (a later member replaces an earlier one), keeping a directory if asked."""
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            if keep_dir:
                return
            # rmtree with dir_fd walks by descriptors and never follows symlinks.
            shutil.rmtree(name, dir_fd=dir_fd)
        else:
            os.unlink(name, dir_fd=dir_fd)

    def set_owner(self, member: tarfile.TarInfo, target: int | str, dir_fd: int | None = None) -> None:
        if not self.is_root:
            return
        if isinstance(target, int):
            os.fchown(target, member.uid, member.gid)
        else:
            os.chown(target, member.uid, member.gid, dir_fd=dir_fd, follow_symlinks=False)

    def set_xattrs(self, member: tarfile.TarInfo, fd: int) -> None:
        for key, value in member.pax_headers.items():
            if not key.startswith("SCHILY.xattr."):
                continue
            attr = key[len("SCHILY.xattr.") :]
            if not (attr.startswith(_ALLOWED_XATTR_PREFIXES) or attr in _ALLOWED_XATTRS):
                log.debug("Skipping layer xattr", layer=self.label, member=member.name, xattr=attr)
                continue
            try:
                os.setxattr(fd, attr, value.encode("utf-8", "surrogateescape"))
            except OSError as exc:
                # Filesystems without user xattrs (tmpfs on old kernels) or without caps: the file still works.
                log.debug("Could not set xattr", layer=self.label, member=member.name, xattr=attr, err=str(exc))

    def apply(self, tar: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        try:
            parts = clean_member_path(member.name)
        except ValueError as exc:
            raise self.unsafe(member.name, str(exc)) from exc
        if not parts:
            if member.isdir():
                self.dir_meta[()] = (member.mode & 0o7777, _mtime_ns(member))
                return
            raise self.unsafe(member.name, "a non-directory entry for the layer root")
        base = parts[-1]
        if base.startswith(WHITEOUT_PREFIX):
            self.whiteout(member, parts)
            return
        parent = self.open_parent(member.name, parts, create=True)
        try:
            if member.isdir():
                self.make_dir(member, parent, parts)
            elif member.isreg():
                self.make_file(tar, member, parent, base)
            elif member.issym():
                self.clear(parent, base, keep_dir=False)
                os.symlink(member.linkname, base, dir_fd=parent)
                self.set_owner(member, base, parent)
                os.utime(base, ns=(_mtime_ns(member),) * 2, dir_fd=parent, follow_symlinks=False)
            elif member.islnk():
                self.make_hardlink(member, parent, base)
            elif member.isfifo():
                self.clear(parent, base, keep_dir=False)
                os.mkfifo(base, member.mode & 0o7777, dir_fd=parent)
                self.finish_path(member, parent, base)
            elif member.ischr() or member.isblk():
                if not self.is_root:
                    log.debug("Skipping device node (not root)", layer=self.label, member=member.name)
                    return
                self.clear(parent, base, keep_dir=False)
                kind = stat.S_IFCHR if member.ischr() else stat.S_IFBLK
                os.mknod(
                    base, kind | (member.mode & 0o7777), os.makedev(member.devmajor, member.devminor), dir_fd=parent
                )
                self.finish_path(member, parent, base)
            else:
                log.debug("Skipping unsupported tar member", layer=self.label, member=member.name, type=member.type)
        finally:
            os.close(parent)

    def finish_path(self, member: tarfile.TarInfo, parent: int, base: str) -> None:
        """Owner, mode and mtime of a special file, by name but without following symlinks."""
        self.set_owner(member, base, parent)
        os.chmod(base, member.mode & 0o7777, dir_fd=parent)  # not a symlink: we just created it
        os.utime(base, ns=(_mtime_ns(member),) * 2, dir_fd=parent, follow_symlinks=False)

    def make_dir(self, member: tarfile.TarInfo, parent: int, parts: list[str]) -> None:
        base = parts[-1]
        self.clear(parent, base, keep_dir=True)  # a directory replaces a symlink or file, merges with a directory
        try:
            os.mkdir(base, 0o700, dir_fd=parent)
        except FileExistsError:
            pass
        fd = os.open(base, _DIR_FLAGS, dir_fd=parent)
        try:
            self.set_owner(member, fd)
            self.set_xattrs(member, fd)
        finally:
            os.close(fd)
        # Mode and mtime last: children change the mtime, and a 0555 dir would block them when not root.
        self.dir_meta[tuple(parts)] = (member.mode & 0o7777, _mtime_ns(member))

    def make_file(self, tar: tarfile.TarFile, member: tarfile.TarInfo, parent: int, base: str) -> None:
        self.declared += member.size
        if self.limit is not None and self.declared > self.limit:
            # Refused on the header, before a byte of it is written: a bomb fails at once, not at ENOSPC.
            raise LayerTooLarge(
                self.label,
                f"its files add up to more than the {self.limit} bytes of space the layer may take",
                member=member.name,
            )
        self.clear(parent, base, keep_dir=False)
        fd = os.open(base, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=parent)
        try:
            src = tar.extractfile(member)
            if src is not None:
                with os.fdopen(os.dup(fd), "wb", closefd=True) as dst:
                    shutil.copyfileobj(src, dst, _CHUNK)
            self.set_owner(member, fd)  # before chmod: chown clears setuid/setgid
            os.fchmod(fd, member.mode & 0o7777)
            self.set_xattrs(member, fd)
            os.utime(fd, ns=(_mtime_ns(member),) * 2)
        finally:
            os.close(fd)

    def make_hardlink(self, member: tarfile.TarInfo, parent: int, base: str) -> None:
        try:
            target = clean_member_path(member.linkname)
        except ValueError as exc:
            raise self.unsafe(member.name, f"hardlink target {member.linkname!r}: {exc}") from exc
        if not target:
            raise self.unsafe(member.name, "hardlink to the layer root")
        tparent = self.open_parent(member.name, target, create=False)
        try:
            try:
                st = os.stat(target[-1], dir_fd=tparent, follow_symlinks=False)
            except FileNotFoundError:
                raise self.unsafe(
                    member.name, f"hardlink target {member.linkname!r} does not exist in the layer"
                ) from None
            if not stat.S_ISREG(st.st_mode):
                raise self.unsafe(member.name, f"hardlink target {member.linkname!r} is not a regular file")
            if target[:-1] == clean_member_path(member.name)[:-1] and target[-1] == base:
                return  # a link to itself: nothing to do
            self.clear(parent, base, keep_dir=False)
            os.link(target[-1], base, src_dir_fd=tparent, dst_dir_fd=parent, follow_symlinks=False)
        finally:
            os.close(tparent)

    def whiteout(self, member: tarfile.TarInfo, parts: list[str]) -> None:
        base = parts[-1]
        if base == OPAQUE_MARKER:
            fd = self.open_parent(member.name, parts, create=True)  # the directory the marker sits in
            try:
                os.setxattr(fd, OPAQUE_XATTR, b"y")
            except OSError as exc:
                raise UnpackError(
                    self.label, f"cannot mark directory opaque ({OPAQUE_XATTR} needs root): {exc}", member=member.name
                ) from exc
            finally:
                os.close(fd)
            return
        hidden = base[len(WHITEOUT_PREFIX) :]
        if hidden in ("", ".", "..") or "/" in hidden:
            raise self.unsafe(member.name, f"whiteout names {hidden!r}, which is not an entry of its directory")
        if hidden.startswith(WHITEOUT_PREFIX):
            raise self.unsafe(member.name, "whiteout of a whiteout")
        parent = self.open_parent(member.name, parts, create=True)
        try:
            self.clear(parent, hidden, keep_dir=False)
            try:
                os.mknod(hidden, stat.S_IFCHR | 0o000, os.makedev(0, 0), dir_fd=parent)
            except PermissionError as exc:
                raise UnpackError(
                    self.label, "cannot create an overlay whiteout (needs CAP_MKNOD)", member=member.name
                ) from exc
            if self.is_root:
                os.chown(hidden, member.uid, member.gid, dir_fd=parent, follow_symlinks=False)
        finally:
            os.close(parent)

    def finish_dirs(self) -> None:
        """Apply directory modes and mtimes, deepest first, re-walking each path without following symlinks."""
        for parts, (mode, mtime) in sorted(self.dir_meta.items(), key=lambda kv: len(kv[0]), reverse=True):
            try:
                if parts:
                    parent = self.open_parent("/".join(parts), list(parts), create=False)
                    try:
                        fd = os.open(parts[-1], _DIR_FLAGS, dir_fd=parent)
                    finally:
                        os.close(parent)
                else:
                    fd = os.dup(self.root_fd)
            except (UnsafeLayerError, OSError):
                continue  # replaced by a later member: its own metadata already applies
            try:
                os.fchmod(fd, mode)
                os.utime(fd, ns=(mtime, mtime))
            finally:
                os.close(fd)


def _is_symlink(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _mtime_ns(member: tarfile.TarInfo) -> int:
    return int(member.mtime * 1_000_000_000)


def _members(tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    while True:
        member = tar.next()
        if member is None:
            return
        yield member


def apply_layer(
    src: BinaryIO, dest: Path, *, label: str | None = None, is_root: bool | None = None, max_size: int | None = None
) -> UnpackResult:
    """Apply the layer tar read from `src` (gzip and zstd detected by their magic) into the existing directory
    `dest`.

    `max_size` caps the uncompressed stream (and the file sizes its headers announce): LayerTooLarge as soon
    as it is passed.

    Reads `src` to its end so `diff_id` covers the whole uncompressed stream. Raises UnsafeLayerError for
    members that try to leave `dest`, UnpackError for anything else (a zstd layer without the `zstd`
    program included); `dest` is then partly written and the caller discards it (the store unpacks into a
    temp dir for exactly that reason). A zstd process is always reaped before this returns or raises."""
    label = label or str(dest)
    if is_root is None:
        is_root = os.geteuid() == 0
    head = src.read(4)
    if head.startswith(zstd.MAGIC):
        try:
            dec = zstd.ZstdDecoder(src, head)
        except DecompressError as exc:
            raise UnpackError(label, str(exc)) from exc
        try:
            result = _apply_stream(dec.stdout, dest, label, is_root, max_size)  # type: ignore[arg-type]
        except BaseException as exc:
            # zstd's own complaint ("Data corruption detected") explains a truncated tar better than tarfile.
            failed = dec.abort(wait=isinstance(exc, Exception))
            if isinstance(exc, UnpackError) and not isinstance(exc, LayerTooLarge):
                if dec.feed_error is not None:
                    raise UnpackError(label, f"cannot read the compressed data: {dec.feed_error}") from exc
                if failed:
                    raise UnpackError(label, f"corrupt zstd stream: {failed}") from exc
            raise
        try:
            dec.finish()
        except DecompressError as exc:
            raise UnpackError(label, str(exc)) from exc
        return UnpackResult(diff_id=result.diff_id, size=result.size, compressed=True)
    stream: BinaryIO = _Prefixed(head, src)  # type: ignore[assignment]
    compressed = head.startswith(GZIP_MAGIC)
    if compressed:
        stream = gzip.GzipFile(fileobj=stream, mode="rb")  # type: ignore[assignment]
    result = _apply_stream(stream, dest, label, is_root, max_size)
    return UnpackResult(diff_id=result.diff_id, size=result.size, compressed=compressed)


def _apply_stream(stream: BinaryIO, dest: Path, label: str, is_root: bool, max_size: int | None) -> UnpackResult:
    """Apply the uncompressed tar `stream` into `dest`, reading it to its end."""
    reader = _HashingReader(stream, label, max_size)
    try:
        root_fd = os.open(dest, _DIR_FLAGS)
    except OSError as exc:
        raise UnpackError(label, f"cannot open destination {dest}: {exc.strerror}") from exc
    applier = _Applier(root_fd, label, is_root, max_size)
    current = None
    try:
        with tarfile.open(fileobj=reader, mode="r|") as tar:  # type: ignore[call-overload]
            for member in _members(tar):
                current = member.name
                applier.apply(tar, member)
                crash_point("image.unpack")
        current = None
        reader.drain()
        applier.finish_dirs()
    except UnpackError:
        raise
    except (tarfile.TarError, EOFError, gzip.BadGzipFile, OSError, UnicodeError) as exc:
        raise UnpackError(label, f"{type(exc).__name__}: {exc}", member=current) from exc
    finally:
        os.close(root_fd)
    return UnpackResult(diff_id="sha256:" + reader.sha.hexdigest(), size=reader.size, compressed=False)


def unpack_layer_file(
    path: Path, dest: Path, *, label: str | None = None, is_root: bool | None = None, max_size: int | None = None
) -> UnpackResult:
    """`apply_layer` from a file."""
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise UnpackError(label or str(path), f"cannot open layer: {exc.strerror}") from exc
    with f:
        return apply_layer(f, dest, label=label or str(path), is_root=is_root, max_size=max_size)


class _Prefixed:
    """Puts already-read bytes back in front of a stream."""

    def __init__(self, prefix: bytes, raw: BinaryIO) -> None:
        self._prefix = prefix
        self._raw = raw

    def read(self, n: int = -1) -> bytes:
        if not self._prefix:
            return self._raw.read(n)
        if n is None or n < 0:
            data, self._prefix = self._prefix + self._raw.read(), b""
            return data
        data, self._prefix = self._prefix[:n], self._prefix[n:]
        if len(data) < n:
            data += self._raw.read(n - len(data))
        return data
