"""Whether a file that decides what the device trusts (a key, a policy) could be changed by anyone but its admin.

The rule is sshd's StrictModes for authorized_keys, applied to --trusted-keys,
--signature-policy and the policy's key files alike: the file, and every
directory from it up to /, belongs to root (or to the user edgelet runs as) and
no group or other user may write it. Whoever can write any of them decides what
the device runs.

One exception above the file's own directory: a root-owned sticky directory
(/tmp) may be writable by all, because the sticky bit keeps other users from
renaming or removing an entry they do not own, so the root-owned directory
below it cannot be swapped. The directory that holds the file gets no such
exception: anyone could add a file to it (a key of their own, in a
--trusted-keys directory).
"""

from __future__ import annotations

import os
import stat


def mode_problem(st: os.stat_result, what: str, harm: str, *, euid: int, sticky_ok: bool = False) -> str | None:
    """Why a file or directory with this stat cannot be trusted, or None (pure)."""
    if st.st_uid not in (0, euid):
        return f"{what} is owned by uid {st.st_uid}, not root: {harm}"
    mode = st.st_mode
    shielded = sticky_ok and bool(mode & stat.S_ISVTX) and st.st_uid == 0
    if mode & stat.S_IWOTH and not shielded:
        return f"{what} is world-writable (mode {stat.S_IMODE(mode):04o}): {harm}"
    if mode & stat.S_IWGRP and not shielded:
        return f"{what} is group-writable (mode {stat.S_IMODE(mode):04o}): {harm}"
    return None


def path_problem(path: str, harm: str, *, what: str = "the file") -> str | None:
    """Why the file or directory at `path`, or a directory above it (as named or once resolved), fails the
    rule, or None. A path that cannot be stat'ed is left to the reader (which names its error)."""
    euid = os.geteuid()
    try:
        problem = mode_problem(os.stat(path), what, harm, euid=euid)
    except OSError:
        return None
    if problem:
        return problem
    replace = "anyone who can write it could replace the file"
    seen: set[tuple[str, bool]] = set()
    for start in (os.path.abspath(path), os.path.realpath(path)):
        directory = os.path.dirname(start) or "."
        first = True
        while (directory, first) not in seen:
            seen.add((directory, first))
            try:
                st = os.stat(directory)
            except OSError:
                break
            label = f"its directory {directory}" if first else f"the directory {directory} above it"
            problem = mode_problem(st, label, replace, euid=euid, sticky_ok=not first)
            if problem:
                return problem
            parent = os.path.dirname(directory)
            if parent == directory:
                break
            directory, first = parent, False
    return None
