"""Thin async wrapper over the OCI runtime command line (runc's, which crun shares), bound to a private root."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edgelet.container.errors import ContainerNotFound, ExecError
from edgelet.runtime import _exec
from edgelet.runtime.sealedbinary import SealedBinary, is_self_copying

# runc: "container does not exist"; crun: "error opening file `<root>/<id>/status`: No such file or directory"
# (state, kill, start) and "cannot open directory '<root>/<id>': No such file or directory" (delete).
_NOT_FOUND = ("does not exist", "not exist", "no such file")
LIST_ATTEMPTS = 5
Listing = list[dict[str, Any]]  # `runc list --format json` (named here: inside Runc, `list` is the method)


def _is_not_found(exc: ExecError) -> bool:
    return any(s in exc.stderr.lower() for s in _NOT_FOUND)


class Runc:
    """`runc --root ROOT ...`; every call goes through the runner (`_exec.run` unless a test scripts it)."""

    def __init__(
        self,
        binary: str,
        root: Path,
        *,
        timeout: float = 30,
        runner: _exec.Runner = _exec.run,
        name: str = "runc",
    ) -> None:
        self._exec = runner
        self.name = name  # the runtime handler's name
        # Whether `exec` with a terminal resizes the command's pty from its own on SIGWINCH: runc does, crun 1.8
        # does not (its exec sessions copy the size themselves, see execsession.copy_winsize).
        self.relays_resize = Path(binary).name != "crun"
        self.binary = binary
        # crun is run from a sealed copy of itself, so that it does not make one at every invocation.
        self._sealed = SealedBinary(binary) if is_self_copying(binary) else None
        self.root = Path(root)
        self.timeout = timeout
        # `list` is shared by concurrent callers (see there): lists started so far, and the last one done.
        self._list_lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        self._lists_started = 0
        self._last_list: tuple[int, Listing] = (0, [])

    def exec_path(self) -> str:
        """What to exec for this runtime: its sealed copy where it has one (see runtime.sealedbinary)."""
        return self.binary if self._sealed is None else self._sealed.exec_path()

    def conmon_runtime(self) -> tuple[str, int | None]:
        """The runtime as conmon is to exec it: the path, and a descriptor conmon must inherit for that path to
        hold (its sealed copy, named `/proc/self/fd/<n>`, valid in conmon whatever becomes of the agent)."""
        fd = self._sealed.fd() if self._sealed is not None else None
        return (self.binary, None) if fd is None else (f"/proc/self/fd/{fd}", fd)

    def argv(self, *args: str) -> list[str]:
        return [self.exec_path(), "--root", str(self.root), *args]

    async def _run(self, *args: str, timeout: float | None = None, check: bool = True) -> _exec.Completed:
        return await self._exec(self.argv(*args), timeout=timeout or self.timeout, check=check)

    async def state(self, container_id: str) -> dict[str, Any] | None:
        """runc's state of one container, None when runc does not know it."""
        try:
            out = await self._run("state", container_id)
        except ExecError as exc:
            if _is_not_found(exc):
                return None
            raise
        return json.loads(out.stdout)

    async def list(self) -> list[dict[str, Any]]:
        """Every container under the root, with annotations (`runc list --format json`).

        Concurrent callers share the work: one list runs at a time, and a caller
        takes the result of any list that *started after it asked* (so it never
        sees an older state than a call of its own would), running one itself
        only when none has. `runc list` reads every container's state, so with
        100 pods syncing at once (a boot, --runonce) each sync listing on its
        own made the syncs quadratic in the number of containers; now they
        share at most two lists each.
        """
        asked = self._lists_started
        loop = asyncio.get_running_loop()
        if self._list_lock is None or self._list_lock[0] is not loop:  # a lock belongs to one loop
            self._list_lock = (loop, asyncio.Lock())
        async with self._list_lock[1]:
            seq, entries = self._last_list
            if seq > asked:
                return [dict(e) for e in entries]
            self._lists_started += 1
            seq = self._lists_started
            entries = await self._list_now()
            self._last_list = (seq, entries)
            return [dict(e) for e in entries]

    async def _list_now(self) -> Listing:
        """runc 1.1 reads each container's state dir after listing the root; one
        deleted in between fails the whole list (`stat .../<id>: no such file or
        directory`). That is a race, not an error: list again.
        """
        for attempt in range(LIST_ATTEMPTS):
            try:
                out = await self._run("list", "--format", "json")
                break
            except ExecError as exc:
                if attempt == LIST_ATTEMPTS - 1 or "no such file or directory" not in exc.stderr.lower():
                    raise
        data = json.loads(out.stdout or b"null")
        return list(data or [])

    async def start(self, container_id: str) -> None:
        try:
            await self._run("start", container_id)
        except ExecError as exc:
            if _is_not_found(exc):
                raise ContainerNotFound(container_id) from exc
            raise

    async def kill(self, container_id: str, signal: str | int = "SIGTERM", all: bool = False) -> None:
        args = ["kill"]
        if all:
            args.append("--all")
        await self._run(*args, container_id, str(signal))

    async def delete(self, container_id: str, force: bool = False) -> None:
        """Delete the container; no error when runc does not know it."""
        try:
            await self._run("delete", *(["--force"] if force else []), container_id)
        except ExecError as exc:
            if _is_not_found(exc):
                return
            raise

    async def exec(self, container_id: str, argv: Sequence[str], timeout: float | None = None) -> _exec.Completed:
        """Run `argv` in the container (for exec probes); never raises on a non-zero exit."""
        return await self._exec(self.argv("exec", container_id, *argv), timeout=timeout, check=False)
