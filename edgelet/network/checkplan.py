"""When housekeeping CHECKs the pod networks: at once when the host's links or the running sandboxes changed,
else on a span of periods that stretches while every CHECK passes (the decision is pure).

A CHECK runs every plugin of every pod's chain (20 pods: 60 processes), which was most of an idle node's
CPU with a CNI network (issue 25). What breaks a pod's network from outside is mostly a link going (a veth,
the bridge) or changing state; those show in the host's /sys/class/net, read each period for a few
syscalls (the links the pods' CNI results name: others come and go with other software). Nothing changed and the last CHECK passed: the next waits twice as many periods, up to
MAX_STRETCH (10 minutes at the default 1 minute); a change or a failure brings it back to every period.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

MAX_STRETCH = 10

Fingerprint = tuple[tuple[str, ...], tuple[tuple[str, str, str], ...]]  # (running sandbox ids, host links)


@dataclass(frozen=True)
class CheckPlan:
    stretch: int = 1  # periods between CHECKs while nothing changes
    waited: int = 0  # periods since the last CHECK
    seen: Fingerprint | None = None  # what the last CHECK saw


def due(plan: CheckPlan, now: Fingerprint) -> tuple[bool, CheckPlan]:
    """One period has passed: whether to CHECK now, and the plan until then."""
    waited = plan.waited + 1
    return (now != plan.seen or waited >= plan.stretch), CheckPlan(plan.stretch, waited, plan.seen)


def checked(plan: CheckPlan, now: Fingerprint, *, broken: bool) -> CheckPlan:
    """A CHECK ran on `now`: every period after a failure, else twice the span (a change had its CHECK at
    once, `due`; one that passed starts the doubling again from the first span)."""
    if broken:
        stretch = 1
    elif now != plan.seen:
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
