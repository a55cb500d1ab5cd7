"""A pod's namespaces without an infra container: made by a short-lived thread, pinned as bind-mounted files.

As CRI-O's `pinns`: a thread unshares the namespaces the pod needs (network,
IPC, UTS), sets the pod's hostname in the new UTS namespace and brings the
loopback up in a new network namespace, then bind-mounts each one at a file
of the sandbox's directory under the run dir, and ends. The files keep the
namespaces alive with no process in them; containers join them by path.
`apply_sysctls` writes the pod's sysctls from a thread that joined the
namespaces (a network one made by CNI included). `unpin` unmounts and deletes.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
import threading
from pathlib import Path
from typing import Callable, Mapping

from edgelet.container.errors import SandboxError
from edgelet.util.libc import libc

CLONE_NEWNET = 0x40000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUTS = 0x04000000
FLAGS = {"net": CLONE_NEWNET, "ipc": CLONE_NEWIPC, "uts": CLONE_NEWUTS}
# The OCI namespace type each file stands for.
OCI_TYPES = {"net": "network", "ipc": "ipc", "uts": "uts"}
MS_BIND = 4096
MNT_DETACH = 2
EINVAL = 22
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise SandboxError(f"{what}: {os.strerror(err)}")


def _in_thread(work: Callable[[], None], name: str) -> None:
    """Run `work` in a new thread that ends right after: what it unshares or joins never reaches the
    agent's other threads."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            failure.append(exc)

    t = threading.Thread(target=run, name=name, daemon=True)
    t.start()
    t.join()
    if failure:
        raise failure[0]


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sH14s", b"lo", 0, b"")
        flags = struct.unpack("16sH14s", fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, req))[1]
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | IFF_UP, b""))


def pin(directory: Path, kinds: tuple[str, ...], hostname: str) -> dict[str, str]:
    """New namespaces of `kinds` ("net", "ipc", "uts") bind-mounted at `directory/<kind>`; {kind: path}.

    The files are made before the namespaces, so a kill in between leaves only files `unpin` removes."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    paths = {k: directory / k for k in kinds}
    if not paths:
        return {}
    for p in paths.values():
        os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
    flags = 0
    for k in kinds:
        flags |= FLAGS[k]

    def work() -> None:
        _check(libc().unshare(flags), f"unshare the namespaces of {directory}")
        if "uts" in paths:
            name = hostname.encode()
            _check(libc().sethostname(name, len(name)), f"set hostname {hostname!r} in {paths['uts']}")
        if "net" in paths:
            # runc brings up the loopback of a network namespace it makes; nobody else does for this one.
            _loopback_up()
        tid = threading.get_native_id()
        for kind, path in paths.items():
            _check(libc().mount(f"/proc/self/task/{tid}/ns/{kind}".encode(), str(path).encode(), b"none",
                              ctypes.c_ulong(MS_BIND), None), f"bind-mount {path}")

    try:
        _in_thread(work, "pinns")
    except (SandboxError, OSError):
        unpin(directory)
        raise
    return {k: str(p) for k, p in paths.items()}


def loopback_up(netns: str) -> None:
    """Bring up the loopback of the network namespace file `netns` (CNI made it; a conflist without the
    loopback plugin leaves it down, and no pause process's runc brings it up any more)."""

    def work() -> None:
        fd = os.open(netns, os.O_RDONLY | os.O_CLOEXEC)
        try:
            _check(libc().setns(fd, CLONE_NEWNET), f"join {netns}")
        finally:
            os.close(fd)
        _loopback_up()

    _in_thread(work, "loopback")


def is_pinned(path: str | Path) -> bool:
    """Whether `path` is a namespace bind-mounted there (its device is nsfs', not its directory's)."""
    try:
        st = os.stat(path)
        parent = os.stat(os.path.dirname(str(path)) or ".")
    except OSError:
        return False
    return st.st_dev != parent.st_dev


def unpin(directory: Path) -> None:
    """Unmount and delete every namespace file of `directory`, then the directory; a missing one is fine."""
    try:
        entries = list(directory.iterdir())
    except FileNotFoundError:
        return
    except NotADirectoryError:
        directory.unlink(missing_ok=True)
        return
    for path in entries:
        if libc().umount2(str(path).encode(), MNT_DETACH) != 0:
            err = ctypes.get_errno()
            if err != EINVAL:  # EINVAL: not a mount point (a kill before the bind)
                raise SandboxError(f"unmount {path}: {os.strerror(err)}")
        path.unlink(missing_ok=True)
    try:
        directory.rmdir()
    except FileNotFoundError:
        pass


def sysctl_path(name: str) -> str:
    """/proc/sys path of a sysctl in its dotted form (pure)."""
    return "/proc/sys/" + name.replace(".", "/")


def apply_sysctls(sysctls: Mapping[str, str], namespaces: Mapping[str, str]) -> None:
    """Write `sysctls` (dotted names) from a thread that joined `namespaces` ({"net"|"ipc": path})."""
    if not sysctls:
        return

    def work() -> None:
        for kind, path in namespaces.items():
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                _check(libc().setns(fd, FLAGS[kind]), f"join {path}")
            finally:
                os.close(fd)
        for name, value in sysctls.items():
            try:
                with open(sysctl_path(name), "w") as f:
                    f.write(value)
            except OSError as exc:
                raise SandboxError(f"cannot set sysctl {name}={value!r}: {exc}") from exc

    _in_thread(work, "sysctl")
