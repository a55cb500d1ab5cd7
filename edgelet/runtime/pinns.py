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

import fcntl
import os
import socket
import struct
from collections.abc import Callable, Mapping
from pathlib import Path

from edgelet.container.errors import SandboxError
from edgelet.util import linux
from edgelet.util.libc import libc

# The OCI namespace type each file stands for.
OCI_TYPES = {"net": "network", "ipc": "ipc", "uts": "uts"}
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1


def _in_thread(work: Callable[[], None], name: str) -> None:
    """`linux.in_thread`, its OSError a SandboxError (the message already names the step and the path)."""
    try:
        linux.in_thread(work, name)
    except SandboxError:
        raise
    except OSError as exc:
        raise SandboxError(exc.strerror or str(exc)) from exc


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        req = struct.pack("16sH14s", b"lo", 0, b"")
        flags = struct.unpack("16sH14s", fcntl.ioctl(sock.fileno(), SIOCGIFFLAGS, req))[1]
        fcntl.ioctl(sock.fileno(), SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | IFF_UP, b""))


def pin(directory: Path, kinds: tuple[str, ...], hostname: str) -> dict[str, str]:
    """New namespaces of `kinds` ("net", "ipc", "uts") bind-mounted at `directory/<kind>`; {kind: path}.

    The files are made before the namespaces, so a kill in between leaves only files `unpin` removes."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    paths = {kind: directory / kind for kind in kinds}
    if not paths:
        return {}
    for path in paths.values():
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))

    def setup() -> None:
        if "uts" in paths:
            name = hostname.encode()
            linux.check(libc().sethostname(name, len(name)), f"set hostname {hostname!r} in {paths['uts']}")
        if "net" in paths:
            # runc brings up the loopback of a network namespace it makes; nobody else does for this one.
            _loopback_up()

    try:
        linux.pin_namespaces(paths, str(directory), setup)
    except (SandboxError, OSError) as exc:
        unpin(directory)
        if isinstance(exc, OSError):
            raise SandboxError(exc.strerror or str(exc)) from exc
        raise
    return {kind: str(path) for kind, path in paths.items()}


def loopback_up(netns: str) -> None:
    """Bring up the loopback of the network namespace file `netns` (CNI made it; a conflist without the
    loopback plugin leaves it down, and no pause process's runc brings it up any more)."""

    def work() -> None:
        linux.join_namespace(netns, "net")
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
        try:
            linux.unpin_file(path)  # a file never mounted (a kill before the bind) is fine
        except OSError as exc:
            raise SandboxError(exc.strerror or str(exc)) from exc
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
            linux.join_namespace(path, kind)
        for name, value in sysctls.items():
            try:
                with open(sysctl_path(name), "w") as f:
                    f.write(value)
            except OSError as exc:
                raise SandboxError(f"cannot set sysctl {name}={value!r}: {exc}") from exc

    _in_thread(work, "sysctl")
