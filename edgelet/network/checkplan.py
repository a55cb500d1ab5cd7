"""Which pod networks housekeeping CHECKs at a period, and when (the decision is pure).

A CHECK runs every plugin of a pod's chain (four processes for the bridge, host-local, portmap and loopback);
a round of all pods each few minutes was most of an idle node's CPU. What breaks a pod's network from outside
is mostly a link going or losing its carrier, or an address going: rtnetlink notifies those (linkwatch), and
a pod they concern is CHECKed at the next period, alone. What no notification shows (a portmap rule deleted,
host-local's reservation file) gets a safety CHECK: each pod once every SAFETY_PERIODS periods, one pod at a
time and at most one every SAFETY_PERIODS / (running pods) periods, so a settled node runs a plugin rarely
and never a round. A new sandbox is not CHECKed at once: its ADD has just set its network up. At start,
sandboxes that were running before (the agent was down: anything may have happened, and no notification
was read) are all CHECKed at the first period. A CHECK that could not run is tried again at the next.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

SAFETY_PERIODS = 60  # each pod's safety CHECK: once an hour at the default one-minute period


@dataclass(frozen=True)
class CheckPlan:
    period: int = 0  # periods since the agent started
    last: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))  # sandbox -> its last CHECK
    pending: frozenset[str] = frozenset()  # to CHECK at the next period (adopted, or a CHECK that did not run)
    last_safety: int = 0  # the period of the last safety CHECK


def first(adopted: Iterable[str]) -> CheckPlan:
    """The plan at start: the sandboxes already running (`adopted`) are CHECKed at the first period."""
    return CheckPlan(pending=frozenset(adopted))


def spacing(running: int) -> int:
    """Periods between two safety CHECKs with `running` sandboxes: each gets one every SAFETY_PERIODS."""
    return max(1, SAFETY_PERIODS // max(1, running))


def due(plan: CheckPlan, running: Collection[str], marked: Collection[str]) -> tuple[frozenset[str], CheckPlan]:
    """One period has passed: the sandboxes to CHECK now among `running` (`marked`: those a notification
    concerned), and the plan until then. A sandbox new to the plan counts as CHECKed now (its ADD)."""
    period = plan.period + 1
    last = {sid: plan.last.get(sid, period) for sid in running}
    now = (plan.pending | frozenset(marked)) & frozenset(running)
    last_safety = plan.last_safety
    if period - last_safety >= spacing(len(running)):
        oldest = sorted((when, sid) for sid, when in last.items() if sid not in now)
        if oldest and period - oldest[0][0] >= SAFETY_PERIODS:
            now |= {oldest[0][1]}
            last_safety = period
    return now, CheckPlan(period, MappingProxyType(last), frozenset(), last_safety)


def checked(plan: CheckPlan, sandboxes: Collection[str], *, ran: bool) -> CheckPlan:
    """The CHECK of `sandboxes` (chosen by `due`) ran, or could not (`ran` False: tried again next period)."""
    if not ran:
        return CheckPlan(plan.period, plan.last, plan.pending | frozenset(sandboxes), plan.last_safety)
    last = {**plan.last, **{sid: plan.period for sid in sandboxes if sid in plan.last}}
    return CheckPlan(plan.period, MappingProxyType(last), plan.pending, plan.last_safety)
