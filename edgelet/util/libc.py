"""The C library, loaded once with errno kept, for the few calls Python's os module does not offer."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def libc() -> ctypes.CDLL:
    """glibc or musl as one shared handle (mount, umount2, unshare, sethostname, syncfs; errno via ctypes)."""
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
