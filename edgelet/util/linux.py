"""Linux's mount and namespace constants, and the namespace-file primitives every caller shares: make
namespaces and pin them as bind-mounted files, join one by its file, unmount and delete one.

The calls go through `util.libc`'s one handle. They raise OSError whose `strerror` is a whole message
(the step and the path, then the kernel's reason), so a caller wraps it in its own error as is.
"""

from __future__ import annotations

import ctypes
import errno
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from edgelet.util.libc import libc

CLONE_NEWNET = 0x40000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUTS = 0x04000000
# The clone flag of each namespace file name under /proc/<pid>/ns.
NAMESPACE_FLAGS = {"net": CLONE_NEWNET, "ipc": CLONE_NEWIPC, "uts": CLONE_NEWUTS}

MS_NOSUID = 2
MS_NODEV = 4
MS_BIND = 4096
MS_REC = 16384
MNT_DETACH = 2


def check(rc: int, what: str) -> None:
    """Raise OSError "<what>: <reason>" with the call's errno when a libc call returned non-zero."""
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def in_thread(work: Callable[[], None], name: str) -> None:
    """Run `work` in a new thread that ends right after, and raise what it raised: what the thread
    unshares or joins never reaches the agent's other threads."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


def setns(fd: int, kind: str = "net") -> None:
    """Move the calling thread into the namespace of `kind` ("net", "ipc", "uts") open at `fd`; OSError
    with the kernel's reason. Python 3.11 has no os.setns."""
    if libc().setns(fd, NAMESPACE_FLAGS[kind]) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def join_namespace(path: str | Path, kind: str = "net") -> None:
    """Move the calling thread into the namespace of `kind` at `path` (a /proc/PID/ns file or a
    bind-mounted one); OSError "join <path>: <reason>"."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        check(libc().setns(fd, NAMESPACE_FLAGS[kind]), f"join {path}")
    finally:
        os.close(fd)


def pin_namespaces(
    paths: Mapping[str, Path], label: str, setup: Callable[[], None] | None = None, thread_name: str = "pinns"
) -> None:
    """New namespaces of the kinds of `paths` ({"net"|"ipc"|"uts": existing file}), each bind-mounted at
    its file, made by a thread that unshares them, runs `setup` inside them and ends.

    The files must exist (made before the namespaces, so a kill in between leaves only files
    `unpin_file` removes); `label` names the sandbox or file in an error."""
    flags = 0
    for kind in paths:
        flags |= NAMESPACE_FLAGS[kind]

    def work() -> None:
        check(libc().unshare(flags), f"unshare the namespaces of {label}")
        if setup is not None:
            setup()
        tid = threading.get_native_id()
        for kind, path in paths.items():
            check(
                libc().mount(
                    f"/proc/self/task/{tid}/ns/{kind}".encode(),
                    str(path).encode(),
                    b"none",
                    ctypes.c_ulong(MS_BIND),
                    None,
                ),
                f"bind-mount {path}",
            )

    in_thread(work, thread_name)


def unpin_file(path: Path) -> None:
    """Unmount (lazily) and delete a namespace file; a file never mounted (a kill before the bind) or
    missing is fine."""
    if libc().umount2(str(path).encode(), MNT_DETACH) != 0:
        err = ctypes.get_errno()
        if err != errno.EINVAL:  # not a mount point
            raise OSError(err, f"unmount {path}: {os.strerror(err)}")
    path.unlink(missing_ok=True)
