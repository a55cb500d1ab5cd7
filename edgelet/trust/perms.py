"""Whether a file that decides what the device trusts (a key, a policy) could be changed by anyone on the device."""

from __future__ import annotations

import os
import stat


def writable_by_others(mode: int, what: str, harm: str) -> str | None:
    """Why a file or directory of `mode` cannot be trusted, or None (pure).

    Whoever can write a key or a policy decides what the device runs, so one every user may write
    is refused, for --trusted-keys (edgelet.trust.keys) and --signature-policy alike. A sticky
    directory (/tmp) is no exception: a trust file has no business in one.
    """
    if mode & stat.S_IWOTH:
        return f"{what} is world-writable (mode {stat.S_IMODE(mode):04o}): {harm}"
    return None


def file_writable_by_others(path: str, harm: str) -> str | None:
    """Why the file at `path`, or a directory that holds it (as named or once resolved), is world-writable, or None.

    A path that cannot be stat'ed is left to the reader (which names its error).
    """
    try:
        problem = writable_by_others(os.stat(path).st_mode, "the file", harm)
    except OSError:
        return None
    if problem:
        return problem
    dirs = dict.fromkeys(os.path.dirname(p) or "." for p in (os.path.abspath(path), os.path.realpath(path)))
    for directory in dirs:
        try:
            mode = os.stat(directory).st_mode
        except OSError:
            continue
        problem = writable_by_others(mode, f"its directory {directory}", "anyone on the device could replace the file")
        if problem:
            return problem
    return None
