"""When housekeeping CHECKs the pod networks: at once when a link of the running pods changed, else on a span of
periods that stretches while every CHECK passes (the decision is pure).

A CHECK runs every plugin of every pod's chain (20 pods: 80 processes), which was most of an idle node's
CPU with a CNI network. What breaks a pod's network from outside is mostly a link going (a veth,
the bridge) or changing state; those show in the host's /sys/class/net, read each period for a few
syscalls (the links the pods' CNI results name: others come and go with other software). A link that
changed or went while its pod still runs brings a CHECK at the next period. A new sandbox does not: its ADD
has just set its network up (the same plugins, the same result) and a CHECK right after would only repeat it;
its links join what is watched, and its network is CHECKed with the others at the next round. A sandbox gone
takes its links with it. At start, sandboxes that were running before (the agent was down: anything may have
happened) are CHECKed at the first period; an agent that starts with none begins as after a passing CHECK. Nothing changed and the last CHECK passed: the next waits twice as many periods, up
to MAX_STRETCH (10 minutes at the default 1 minute); a change or a failure brings it back to every period.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

MAX_STRETCH = 10

Fingerprint = tuple[tuple[str, str, str], ...]  # the running pods' host links: (name, ifindex, operstate)


@dataclass(frozen=True)
class CheckPlan:
    stretch: int = 1  # periods between CHECKs while nothing changes
    waited: int = 0  # periods since the last CHECK
    seen: Fingerprint | None = None  # what the last CHECK saw


def first(*, adopted: bool) -> CheckPlan:
    """The plan at start: CHECK at the first period when running sandboxes were adopted, else as after a CHECK
    of nothing that passed (every pod it will run gets its network from an ADD of its own)."""
    return CheckPlan() if adopted else CheckPlan(stretch=2, waited=0, seen=())


def changed(seen: Fingerprint | None, now: Fingerprint) -> bool:
    """Whether a link watched since the last CHECK changed or went while a running pod still names it (None:
    nothing was CHECKed yet). Links only in `now` are new sandboxes'; links only in `seen` left with theirs."""
    if seen is None:
        return True
    before = {name: (index, state) for name, index, state in seen}
    return any(name in before and before[name] != (index, state) for name, index, state in now)


def due(plan: CheckPlan, now: Fingerprint) -> tuple[bool, CheckPlan]:
    """One period has passed: whether to CHECK now, and the plan until then (new links join what is watched)."""
    waited = plan.waited + 1
    if changed(plan.seen, now):
        return True, CheckPlan(plan.stretch, waited, plan.seen)
    return waited >= plan.stretch, CheckPlan(plan.stretch, waited, now)


def checked(plan: CheckPlan, now: Fingerprint, *, broken: bool) -> CheckPlan:
    """A CHECK ran on `now`: every period after a failure, else twice the span (a change had its CHECK at
    once, `due`; one that passed starts the doubling again from the first span)."""
    if broken:
        stretch = 1
    elif changed(plan.seen, now):
        stretch = 2
    else:
        stretch = min(plan.stretch * 2, MAX_STRETCH)
    return CheckPlan(stretch, 0, now)


def host_links(names: Iterable[str], root: str = "/sys/class/net") -> tuple[tuple[str, str, str], ...]:
    """(name, ifindex, operstate) of the named links of the host's network namespace, sorted; a link gone
    reads as ("name", "", ""). Only the pods' own links: other software's come and go."""
    out = []
    for name in names:
        if "/" in name or name in (".", ".."):
            continue
        fields = []
        for attr in ("ifindex", "operstate"):
            try:
                with open(f"{root}/{name}/{attr}") as f:
                    fields.append(f.read().strip())
            except OSError:
                fields.append("")
        out.append((name, fields[0], fields[1]))
    return tuple(sorted(out))
