"""util/linux's namespace-file primitives on the real kernel: a namespace pinned as a file outlives the thread
that made it, a thread joins it by path, and unpinning frees it; the errors name the step and the path."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

from edgelet.util import linux

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (unshare, mount)")


def _netns_inode_seen_from(path: Path) -> int:
    seen: list[int] = []

    def work() -> None:
        linux.join_namespace(path, "net")
        seen.append(os.stat(f"/proc/self/task/{threading.get_native_id()}/ns/net").st_ino)

    linux.in_thread(work, "test-join")
    return seen[0]


def test_pin_join_and_unpin_a_network_namespace(tmp_path: Path) -> None:
    path = tmp_path / "net"
    path.touch()
    setup_ran: list[int] = []
    linux.pin_namespaces({"net": path}, str(tmp_path), lambda: setup_ran.append(threading.get_native_id()))
    try:
        assert setup_ran and setup_ran[0] != threading.get_native_id()  # in a thread of its own
        pinned = os.stat(path)
        assert pinned.st_dev != os.stat(tmp_path).st_dev  # nsfs, not the directory's filesystem
        assert pinned.st_ino != os.stat("/proc/self/ns/net").st_ino  # a new namespace, the agent's untouched
        assert _netns_inode_seen_from(path) == pinned.st_ino
    finally:
        linux.unpin_file(path)
    assert not path.exists()


def test_unpin_a_file_never_mounted_is_fine(tmp_path: Path) -> None:
    # A kill between the file's creation and the bind leaves a plain file: umount2 says EINVAL, not an error.
    path = tmp_path / "ipc"
    path.touch()
    linux.unpin_file(path)
    assert not path.exists()


def test_errors_name_the_step_and_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "gone" / "net"  # the bind target does not exist
    with pytest.raises(OSError) as caught:
        linux.pin_namespaces({"net": missing}, "sandbox-x")
    assert caught.value.errno == errno.ENOENT
    assert caught.value.strerror.startswith(f"bind-mount {missing}: ")
    with pytest.raises(OSError) as caught:
        linux.join_namespace(tmp_path, "net")  # a directory is no namespace
    assert caught.value.strerror.startswith(f"join {tmp_path}: ")
