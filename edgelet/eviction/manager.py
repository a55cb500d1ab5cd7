"""The eviction manager: every monitoring interval, observe the node, and under pressure reclaim or evict one pod.

Side effects are the app's callbacks: `usage()` lists the running pods with
what they use, `reclaim(signal)` frees node-level resources (image and
container GC) before any pod is touched, `evict(uid, reason, message,
grace)` stops a pod and marks it Failed/Evicted, `readmit(uid)` lets an
evicted static pod start again once the pressure that evicted it is gone.
kubelet never evicts static pods (they are all critical to it) and never
re-admits an evicted one (kubernetes#76598); edgelet runs only static pods,
so it evicts all but the critical ones and starts them again afterwards
(docs/kubelet-differences.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from edgelet.eviction.decide import PodUsage, PressureState, message, rank, step, to_reclaim
from edgelet.eviction.signals import Observation
from edgelet.eviction.thresholds import CONDITION, MEMORY, PIDS, Threshold
from edgelet.util.clock import Clock
from edgelet.util.log import get_logger

log = get_logger(__name__)

EVICTED = "Evicted"


class EvictionManager:
    def __init__(
        self,
        thresholds: Sequence[Threshold],
        *,
        clock: Clock,
        observe: Callable[[], dict[str, Observation]],
        usage: Callable[[], Awaitable[list[PodUsage]]],
        evict: Callable[[str, str, str, float | None], Awaitable[None]],
        readmit: Callable[[str], None],
        reclaim: Callable[[str], Awaitable[None]] | None = None,
        interval: float = 10.0,
        transition_period: float = 300.0,
        max_pod_grace: float = 0.0,
        on_conditions: Callable[[frozenset[str]], None] | None = None,
    ) -> None:
        self._thresholds = list(thresholds)
        self._clock = clock
        self._observe = observe
        self._usage = usage
        self._evict = evict
        self._readmit = readmit
        self._reclaim = reclaim
        self._interval = interval
        self._transition = transition_period
        self._max_grace = max_pod_grace
        self._on_conditions = on_conditions or (lambda c: None)
        self._state = PressureState()
        self.conditions: frozenset[str] = frozenset()
        self.evicted: dict[str, str] = {}  # uid -> the condition that evicted it
        self.evictions = 0

    async def run(self) -> None:
        if not self._thresholds:
            return
        while True:
            try:
                await self.synchronize()
            except Exception as exc:
                log.error("Eviction round failed", exc)
            await self._clock.sleep(self._interval)

    async def synchronize(self) -> str | None:
        """One round; the uid of the pod evicted, if any."""
        import asyncio

        observed = await asyncio.to_thread(self._observe)
        self._state, active, conditions = step(
            self._state, self._thresholds, observed, self._clock.monotonic(), self._transition
        )
        if conditions != self.conditions:
            log.info("Node conditions changed", pressure=",".join(sorted(conditions)) or "none")
            self.conditions = conditions
            self._on_conditions(conditions)
        for uid, condition in list(self.evicted.items()):
            if condition not in conditions:
                del self.evicted[uid]
                log.info("Pressure gone: the evicted pod may start again", uid=uid, condition=condition)
                self._readmit(uid)
        threshold = to_reclaim(active)
        if threshold is None:
            return None
        if self._reclaim is not None and threshold.signal not in (MEMORY, PIDS):
            # Disk: images and dead containers go before any running pod.
            await self._reclaim(threshold.signal)
            observed = await asyncio.to_thread(self._observe)
            self._state, active, _ = step(
                self._state, self._thresholds, observed, self._clock.monotonic(), self._transition
            )
            threshold = to_reclaim(active)
            if threshold is None:
                log.info("Node-level reclaim relieved the pressure")
                return None
        pods = [p for p in await self._usage() if p.uid not in self.evicted]
        order = rank(pods, threshold.signal)
        if not order:
            log.warning("Under pressure with no pod to evict", signal=threshold.signal)
            return None
        victim = order[0]
        text = message(threshold, observed[threshold.signal], victim)
        # kubelet: a hard threshold kills at once; a soft one uses --eviction-max-pod-grace-period (negative:
        # the pod's own grace period).
        grace: float | None = 0.0 if threshold.hard else (None if self._max_grace < 0 else self._max_grace)
        log.warning("Evicting pod", pod=victim.name, uid=victim.uid, signal=threshold.signal)
        self.evicted[victim.uid] = CONDITION[threshold.signal]
        self.evictions += 1
        await self._evict(victim.uid, EVICTED, text, grace)
        return victim.uid
