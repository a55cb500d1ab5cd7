"""The C library, loaded once with errno kept, for the few calls Python's os module does not offer."""

from __future__ import annotations

import ctypes
import functools
import os
from pathlib import Path


@functools.cache
def libc() -> ctypes.CDLL:
    """glibc or musl as one shared handle (mount, umount2, unshare, sethostname, syncfs; errno via ctypes).

    The process's own symbols (dlopen of NULL): the C library the interpreter is linked against, whichever it is.
    ctypes.util.find_library would run `ldconfig -p` in a subprocess at every start to find its name."""
    return ctypes.CDLL(None, use_errno=True)


def syncfs(path: Path) -> None:
    """Flush the filesystem holding the directory `path` (one syscall instead of an fsync per file written)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        libc().syncfs(fd)
    finally:
        os.close(fd)
