"""Graceful node shutdown, as kubelet's nodeshutdown manager: stop the pods before the machine goes down.

With logind, edgelet holds a delay inhibitor lock on shutdown; when logind
announces PrepareForShutdown, regular pods are stopped first within
`shutdown_grace_period - shutdown_grace_period_critical_pods`, then the
critical ones within the rest, each with its own grace period capped by its
group's; their status is Failed/Terminated with kubelet's message; then the
lock is released and the shutdown goes on. A cancelled shutdown starts them
again. Without logind the app does the same on a SIGTERM while systemd is
stopping the system (never on a plain `systemctl stop edgelet`, which leaves
the pods running).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from edgelet.util.clock import Clock
from edgelet.util.log import get_logger

log = get_logger(__name__)

REASON = "Terminated"
MESSAGE = "Pod was terminated in response to imminent node shutdown."
CRITICAL_PRIORITY = 2_000_000_000  # kubelet's SystemCriticalPriority
POLL = 0.2


@dataclass(frozen=True)
class Group:
    uids: tuple[str, ...]
    grace: float  # the most any pod of the group may take


def plan(priorities: Mapping[str, int], total: float, critical: float) -> list[Group]:
    """Regular pods, then critical ones (priority >= SystemCriticalPriority), with their share of `total`."""
    if total <= 0:
        return []
    critical = min(max(critical, 0.0), total)
    regular = tuple(sorted(u for u, p in priorities.items() if p < CRITICAL_PRIORITY))
    crit = tuple(sorted(u for u, p in priorities.items() if p >= CRITICAL_PRIORITY))
    return [g for g in (Group(regular, total - critical), Group(crit, critical)) if g.uids]


class NodeShutdown:
    def __init__(
        self,
        *,
        clock: Clock,
        total: float,
        critical: float,
        priorities: Callable[[], Mapping[str, int]],
        stop: Callable[[str, float], None],
        running: Callable[[str], Awaitable[bool]],
        restart: Callable[[str], None],
        logind_factory: Callable[[], object] | None = None,
    ) -> None:
        self._clock = clock
        self.total = total
        self.critical = critical
        self._priorities = priorities
        self._stop = stop
        self._running = running
        self._restart = restart
        self._logind_factory = logind_factory
        self.stopped: list[str] = []
        self.shutting_down = False
        self.lock_held = False

    async def shutdown_pods(self) -> None:
        """Stop every pod, group by group; returns when all are down or their time is up."""
        self.shutting_down = True
        for group in plan(self._priorities(), self.total, self.critical):
            log.info("Shutting down pods", pods=len(group.uids), grace=group.grace)
            for uid in group.uids:
                self._stop(uid, group.grace)
                self.stopped.append(uid)
            deadline = self._clock.monotonic() + group.grace + 2.0  # the kill itself takes a moment
            pending = set(group.uids)
            while pending and self._clock.monotonic() < deadline:
                pending = {u for u in pending if await self._running(u)}
                if pending:
                    await self._clock.sleep(POLL)
            if pending:
                log.warning("Pods still running when their shutdown time was up", pods=len(pending))

    def cancel(self) -> None:
        """The shutdown was called off: the stopped pods start again."""
        self.shutting_down = False
        for uid in self.stopped:
            self._restart(uid)
        self.stopped.clear()

    async def run(self) -> None:
        """Hold logind's delay lock and act on PrepareForShutdown; without logind, do nothing (SIGTERM path)."""
        if self.total <= 0:
            return
        if self._logind_factory is None and not _system_bus_present():
            # No bus, no logind: D-Bus code would only cost memory. SIGTERM during a shutdown still works.
            log.info("No system bus: pods are stopped gracefully only on SIGTERM during a system shutdown")
            return
        from edgelet.util.logind import Logind, LogindUnavailable, release

        factory = self._logind_factory or Logind
        try:
            async with factory() as logind:  # type: ignore[attr-defined]
                delay_max = await logind.inhibit_delay_max()
                if delay_max < self.total:
                    log.warning(
                        "logind lets a shutdown wait less than shutdown_grace_period: pods get less time; "
                        "raise InhibitDelayMaxSec in /etc/systemd/logind.conf.d/",
                        inhibit_delay_max=delay_max,
                        shutdown_grace_period=self.total,
                    )
                fd: int | None = await logind.inhibit_shutdown("Stopping pods gracefully")
                self.lock_held = True
                log.info("Holding a shutdown inhibitor lock", grace=self.total)
                async for active in logind.prepare_for_shutdown():
                    if active and fd is not None:
                        log.info("The node is shutting down: stopping pods")
                        await self.shutdown_pods()
                        release(fd)
                        fd = None
                        self.lock_held = False
                    elif not active:
                        log.info("Shutdown cancelled: starting pods again")
                        self.cancel()
                        if fd is None:
                            fd = await logind.inhibit_shutdown("Stopping pods gracefully")
                            self.lock_held = True
        except LogindUnavailable as exc:
            log.info("No logind: pods are stopped gracefully only on SIGTERM during a system shutdown", reason=str(exc))
        except asyncio.CancelledError:
            raise


def _system_bus_present() -> bool:
    import os

    address = os.environ.get("DBUS_SYSTEM_BUS_ADDRESS", "unix:path=/run/dbus/system_bus_socket")
    if not address.startswith("unix:path="):
        return True  # an address we cannot check cheaply: let the connection say
    return os.path.exists(address.split("=", 1)[1].split(",", 1)[0])


async def system_is_stopping() -> bool:
    """Whether systemd is taking the system down (`systemctl is-system-running` says "stopping")."""
    from edgelet.util import proc

    try:
        p = await proc.spawn(["systemctl", "is-system-running"])
        async with asyncio.timeout(5):
            out, _ = await p.communicate()
    except (OSError, TimeoutError):
        return False
    return out.decode(errors="replace").strip() == "stopping"
