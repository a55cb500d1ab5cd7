"""An OCI runtime's binary copied once into a sealed memfd, so that crun does not copy itself on every run.

crun protects the host's binary against a container that would overwrite it
through `/proc/<pid>/exe` (CVE-2019-5736) by re-executing itself from a
read-only copy at the start of *every* invocation: a bind mount of itself
remounted read-only, then unmounted, and a second exec that loads its
libraries again, about as long as the whole of a `crun start`. It skips that
when `/proc/self/exe` already is a memfd sealed against writes (the
protection holds: nothing can write to it), as its source says an
administrator may provide. The agent makes that copy once and runs the
runtime from it by `/proc/<agent pid>/fd/<n>`. conmon is passed the copy's
descriptor and told `/proc/self/fd/<n>`: it runs the runtime after it
forked, so a path through the agent would fail if the agent were killed in
between. The copy follows the binary on disk: one replaced by an upgrade is
copied again at its next use.

runc is not given one: it copies itself only for the container's init, and
its binary is twenty times crun's, which a copy would keep in memory.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from edgelet.util.log import get_logger

log = get_logger("edgelet.runtime")

# What crun (and runc) accept as a self-made copy: exactly these seals.
SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE


def is_self_copying(binary: str) -> bool:
    """Whether this runtime copies itself at every invocation unless run from a sealed copy (crun)."""
    return Path(binary).name == "crun"


class SealedBinary:
    """The sealed copy of one binary, made at first use and again whenever the file on disk changes."""

    def __init__(self, source: str) -> None:
        self.source = source
        self._fd: int | None = None
        # The copy before the current one stays open: a conmon handed its path may not have exec'd it yet.
        self._previous: int | None = None
        self._made_from: tuple[int, int, int, int] | None = None

    def exec_path(self) -> str:
        """The path to exec: the sealed copy's, or the binary's own when no copy can be made (no memfd here,
        the binary unreadable: it then protects itself as before)."""
        fd = self.fd()
        return self.source if fd is None else f"/proc/{os.getpid()}/fd/{fd}"

    def fd(self) -> int | None:
        """The sealed copy's descriptor (close-on-exec: a child that is to exec it later is passed it), made
        again when the binary changed on disk; None when there is none."""
        try:
            st = os.stat(self.source)
        except OSError:
            return None
        identity = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if identity != self._made_from:
            self._made_from = identity
            self._replace()
        return self._fd

    def _replace(self) -> None:
        try:
            fd = sealed_copy(self.source)
        except OSError as exc:
            log.warning("Cannot make a sealed copy of the runtime: it copies itself", binary=self.source, err=str(exc))
            fd = None
        if self._previous is not None:
            os.close(self._previous)
        self._previous, self._fd = self._fd, fd

    def close(self) -> None:
        for fd in (self._fd, self._previous):
            if fd is not None:
                os.close(fd)
        self._fd = self._previous = None
        self._made_from = None


def sealed_copy(source: str) -> int:
    """A close-on-exec memfd holding `source`'s bytes, sealed (SEALS) against any change; OSError on failure."""
    fd = os.memfd_create(Path(source).name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        with open(source, "rb") as src:
            size = os.fstat(src.fileno()).st_size
            offset = 0
            while offset < size:
                sent = os.sendfile(fd, src.fileno(), offset, size - offset)
                if sent == 0:
                    break  # it shrank while copied: the copy is what was there
                offset += sent
        # Executable by its owner only: the copy is the agent's, run by root.
        os.fchmod(fd, 0o700)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
    except OSError:
        os.close(fd)
        raise
    return fd
