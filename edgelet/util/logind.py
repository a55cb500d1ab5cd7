"""systemd-logind over D-Bus: a delay inhibitor lock on shutdown, the PrepareForShutdown signal, InhibitDelayMaxUSec.

jeepney (pure Python, no libdbus) is imported on first use. Its blocking
connection is the one that passes file descriptors (the inhibitor lock is
one), so every call runs in a worker thread. The bus is the system bus, or
`DBUS_SYSTEM_BUS_ADDRESS` when set (tests point it at a bus of their own
with a stand-in logind).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

from edgelet.errors import EdgeletError

LOGIND = "org.freedesktop.login1"
PATH = "/org/freedesktop/login1"
MANAGER = "org.freedesktop.login1.Manager"
_POLL = 1.0  # seconds a signal wait blocks its thread before it looks whether it was cancelled


class LogindUnavailable(EdgeletError):
    """No system bus, or no logind on it: graceful node shutdown falls back to SIGTERM."""


class Logind:
    """One connection to logind; use as `async with Logind() as logind:`."""

    def __init__(self) -> None:
        self._conn: Any = None
        self._addr: Any = None

    async def __aenter__(self) -> Logind:
        try:
            from jeepney import DBusAddress
            from jeepney.io.blocking import open_dbus_connection
        except ImportError as exc:  # pragma: no cover - a dependency
            raise LogindUnavailable(f"jeepney is not installed: {exc}") from exc
        self._addr = DBusAddress(PATH, bus_name=LOGIND, interface=MANAGER)
        try:
            self._conn = await asyncio.to_thread(open_dbus_connection, bus="SYSTEM", enable_fds=True)
        except (OSError, ValueError, KeyError) as exc:
            raise LogindUnavailable(f"no system bus: {exc}") from exc
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._conn is not None:
            self._conn.close()

    async def _request(self, msg: Any, what: str) -> Any:
        from jeepney.wrappers import DBusErrorResponse, unwrap_msg

        try:
            reply = await asyncio.to_thread(self._conn.send_and_get_reply, msg, timeout=10)
            return unwrap_msg(reply)
        except DBusErrorResponse as exc:
            raise LogindUnavailable(f"logind {what}: {exc.name}: {exc.data}") from exc
        except (OSError, TimeoutError) as exc:
            raise LogindUnavailable(f"logind {what}: {exc}") from exc

    async def inhibit_delay_max(self) -> float:
        """InhibitDelayMaxUSec in seconds: how long a delay lock may hold a shutdown back."""
        from jeepney import Properties

        ((_, usec),) = await self._request(Properties(self._addr).get("InhibitDelayMaxUSec"), "InhibitDelayMaxUSec")
        return int(usec) / 1e6

    async def inhibit_shutdown(self, why: str) -> int:
        """Take a delay lock on shutdown; the returned descriptor holds it until closed."""
        from jeepney import new_method_call

        (fd,) = await self._request(
            new_method_call(self._addr, "Inhibit", "ssss", ("shutdown", "edgelet", why, "delay")), "Inhibit"
        )
        return int(fd.to_raw_fd())

    async def prepare_for_shutdown(self) -> AsyncIterator[bool]:
        """Every PrepareForShutdown signal: True when a shutdown begins, False when it is cancelled."""
        from jeepney import MatchRule, message_bus
        from jeepney.io.blocking import Proxy

        # The bus matches the sender by its well-known name; the local filter sees only the unique name
        # (":1.42") in the header, so it leaves the sender out.
        on_bus = MatchRule(type="signal", sender=LOGIND, interface=MANAGER, member="PrepareForShutdown", path=PATH)
        await asyncio.to_thread(Proxy(message_bus, self._conn).AddMatch, on_bus)
        local = MatchRule(type="signal", interface=MANAGER, member="PrepareForShutdown", path=PATH)
        with self._conn.filter(local) as queue:
            while True:
                try:
                    msg = await asyncio.to_thread(self._conn.recv_until_filtered, queue, timeout=_POLL)
                except TimeoutError:
                    continue
                except OSError as exc:
                    raise LogindUnavailable(f"lost the system bus: {exc}") from exc
                yield bool(msg.body[0])


def release(fd: int | None) -> None:
    """Let the shutdown go on."""
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass
