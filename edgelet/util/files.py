"""Opening a file that edgelet reads from a place others fill (a manifest, card or import directory): one
descriptor, never a FIFO or a device, never through a symlink where none belongs."""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO

from edgelet.errors import EdgeletError

_KINDS = {
    stat.S_IFIFO: "a named pipe",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
    stat.S_IFLNK: "a symbolic link",
}


class NotRegularFile(EdgeletError, OSError):
    """A named pipe, device, socket, directory or (not followed) symlink where a regular file was expected.

    An OSError (EINVAL, or ELOOP for a symlink) whose `strerror` says what the path is, so a caller's
    `except OSError` reports it like any file that cannot be read."""

    def __init__(self, path: str | os.PathLike[str], kind: str) -> None:
        if kind == _KINDS[stat.S_IFLNK]:
            super().__init__(errno.ELOOP, "a symbolic link, not followed here", os.fspath(path))
        else:
            super().__init__(errno.EINVAL, f"{kind}, not a regular file", os.fspath(path))
        self.kind = kind


def open_regular(path: str | os.PathLike[str], *, follow_symlinks: bool = True) -> BinaryIO:
    """The file opened for reading, once it is shown to be a regular file on the descriptor that reads it.

    Nothing else is ever opened: an O_PATH descriptor (which opens nothing: no FIFO waits for a writer, no
    device acts on an open) is checked with fstat, and only a regular file is then opened for reading, through
    /proc/self/fd, as the very inode that was checked, whatever the path names by then. Without
    `follow_symlinks`, a symlink is refused. Raises NotRegularFile, or the open's own OSError
    (FileNotFoundError for a name that is gone or a dangling symlink).
    """
    handle = os.open(path, os.O_PATH | os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW))
    try:
        mode = os.fstat(handle).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(path, _KINDS.get(stat.S_IFMT(mode), f"file type {stat.S_IFMT(mode):o}"))
        # O_NONBLOCK changes nothing for a regular file; it is there should the checks above ever be bypassed.
        fd = os.open(f"/proc/self/fd/{handle}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    finally:
        os.close(handle)
    return os.fdopen(fd, "rb")


def read_regular(path: str | os.PathLike[str], limit: int, *, follow_symlinks: bool = True) -> bytes:
    """At most `limit` + 1 bytes of a regular file (open_regular's checks): a caller seeing more refuses it."""
    with open_regular(path, follow_symlinks=follow_symlinks) as f:
        return f.read(limit + 1)
