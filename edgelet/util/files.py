"""Opening a file that edgelet reads from a place others fill (a manifest, card or import directory): one
descriptor, never a FIFO or a device, never through a symlink where none belongs."""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO

_KINDS = {
    stat.S_IFIFO: "a named pipe",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
    stat.S_IFLNK: "a symbolic link",
}


def open_regular(path: str | os.PathLike[str], *, follow_symlinks: bool = True) -> BinaryIO:
    """The file opened for reading, once it is shown to be a regular file on the descriptor that reads it.

    O_NONBLOCK: opening a FIFO someone dropped there returns at once instead of waiting for a writer (and a
    regular file ignores the flag). Without `follow_symlinks`, a symlink is refused (O_NOFOLLOW: ELOOP).
    Raises OSError: the open's own, or EINVAL naming what the path is when it is not a regular file.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_symlinks:
            raise OSError(errno.ELOOP, "a symbolic link, not followed here", os.fspath(path)) from exc
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
            raise OSError(errno.EINVAL, f"{kind}, not a regular file", os.fspath(path))
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike[str], limit: int, *, follow_symlinks: bool = True) -> bytes:
    """At most `limit` + 1 bytes of a regular file (open_regular's checks): a caller seeing more refuses it."""
    with open_regular(path, follow_symlinks=follow_symlinks) as f:
        return f.read(limit + 1)
