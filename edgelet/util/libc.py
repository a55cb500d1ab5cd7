"""The C library, loaded once with errno kept, for the few calls Python's os module does not offer."""

from __future__ import annotations

import ctypes
import functools


@functools.cache
def libc() -> ctypes.CDLL:
    """glibc or musl as one shared handle (mount, umount2, unshare, sethostname, syncfs; errno via ctypes).

    The process's own symbols (dlopen of NULL): the C library the interpreter is linked against, whichever it is.
    ctypes.util.find_library would run `ldconfig -p` in a subprocess at every start to find its name."""
    return ctypes.CDLL(None, use_errno=True)
