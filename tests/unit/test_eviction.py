"""Eviction decisions as tables: threshold syntax, signals, conditions over time, the order, the manager's rounds."""

from __future__ import annotations

import asyncio
import os

import pytest

from edgelet.eviction.decide import PodUsage, PressureState, message, pod_priority, rank, step, thresholds_met
from edgelet.eviction.errors import EvictionConfigError
from edgelet.eviction.manager import EvictionManager
from edgelet.eviction.signals import (
    Observation,
    fs_observations,
    memory_observation,
    parse_meminfo,
    parse_memory_stat,
    pid_observation,
)
from edgelet.eviction.thresholds import (
    DEFAULT_HARD,
    IMAGEFS,
    MEMORY,
    NODEFS,
    NODEFS_INODES,
    PIDS,
    Threshold,
    Value,
    configure,
    parse_thresholds,
)
from edgelet.util.clock import FakeClock

Mi = 1 << 20
Gi = 1 << 30


def test_kubelets_default_hard_thresholds() -> None:
    t = parse_thresholds(DEFAULT_HARD)
    assert t[MEMORY].value == Value(quantity=100 * Mi)
    assert t[NODEFS].value == Value(percentage=0.10)
    assert t[NODEFS_INODES].value == Value(percentage=0.05)
    assert t[IMAGEFS].value == Value(percentage=0.15)
    assert all(x.hard and x.grace_period == 0 for x in t.values())


@pytest.mark.parametrize(
    "hard, soft, grace, reclaim, error",
    [
        ("memory.available>100Mi", "", "", "", "expected SIGNAL<VALUE"),
        ("memory.free<100Mi", "", "", "", "unknown signal 'memory.free'"),
        ("memory.available<lots", "", "", "", "memory.available"),
        ("nodefs.available<0%", "", "", "", "must be a percentage in (0, 100]"),
        ("nodefs.available<150%", "", "", "", "must be a percentage in (0, 100]"),
        ("memory.available<1Gi,memory.available<2Gi", "", "", "", "memory.available given twice"),
        ("", "memory.available<1Gi", "", "", "--eviction-soft: memory.available has no grace period"),
        ("", "", "memory.available=1m", "", "--eviction-soft-grace-period: memory.available has no soft threshold"),
        ("", "memory.available<1Gi", "memory.available=soon", "", "--eviction-soft-grace-period: memory.available"),
        ("", "", "", "memory.available=-1Mi", "must be positive"),
    ],
)
def test_bad_flags_name_the_flag_and_the_part(hard: str, soft: str, grace: str, reclaim: str, error: str) -> None:
    with pytest.raises(EvictionConfigError, match=error.replace("(", r"\(").replace(")", r"\)")):
        configure(hard, soft, grace, reclaim)


def test_soft_thresholds_carry_their_grace_and_every_threshold_its_reclaim() -> None:
    ts = {
        (t.signal, t.hard): t
        for t in configure(
            "memory.available<100Mi", "memory.available<1Gi", "memory.available=1m30s", "memory.available=200Mi"
        )
    }
    assert ts[(MEMORY, False)].grace_period == 90.0
    assert ts[(MEMORY, True)].min_reclaim == Value(quantity=200 * Mi)
    assert ts[(MEMORY, False)].min_reclaim == Value(quantity=200 * Mi)


def test_signal_parsing() -> None:
    info = parse_meminfo("MemTotal:       16384 kB\nMemAvailable:    4096 kB\nHugePages_Total: 0\n")
    assert info == {"MemTotal": 16 * Mi, "MemAvailable": 4 * Mi, "HugePages_Total": 0}
    stat = parse_memory_stat("cache 10\ntotal_inactive_file 1048576\n")
    # kubelet: capacity - (usage - inactive_file); without the cgroup, MemAvailable.
    assert memory_observation(info, 8 * Mi, stat) == Observation(16 * Mi - 7 * Mi, 16 * Mi)
    assert memory_observation(info, None, {}) == Observation(4 * Mi, 16 * Mi)
    assert memory_observation(info, 1 * Mi, {"total_inactive_file": 2 * Mi}) == Observation(16 * Mi, 16 * Mi)
    assert pid_observation(32768, "0.10 0.20 0.30 2/456 789\n") == Observation(32768 - 456, 32768)
    assert pid_observation(100, "garbage") == Observation(100, 100)
    st = os.statvfs_result((4096, 4096, 1000, 500, 400, 100, 50, 40, 0, 255))
    assert fs_observations(st) == (Observation(400 * 4096, 1000 * 4096), Observation(40, 100))


@pytest.mark.parametrize(
    "available, already, met",
    [
        (99 * Mi, False, True),
        (100 * Mi, False, False),  # strictly below
        (250 * Mi, True, True),  # met before: must recover the 200Mi minimum reclaim as well
        (300 * Mi, True, False),
    ],
)
def test_thresholds_met_with_minimum_reclaim(available: int, already: bool, met: bool) -> None:
    t = Threshold(MEMORY, Value(quantity=100 * Mi), min_reclaim=Value(quantity=200 * Mi))
    got = thresholds_met(
        [t], {MEMORY: Observation(available, Gi)}, frozenset({(MEMORY, True)}) if already else frozenset()
    )
    assert bool(got) is met


def test_a_signal_the_node_cannot_report_never_triggers() -> None:
    t = Threshold(IMAGEFS, Value(percentage=0.15))
    assert thresholds_met([t], {}) == [] and thresholds_met([t], {IMAGEFS: Observation(0, 0)}) == []


def test_soft_thresholds_wait_their_grace_and_conditions_linger_for_the_transition_period() -> None:
    soft = Threshold(MEMORY, Value(quantity=1 * Gi), grace_period=60, hard=False)
    low, fine = {MEMORY: Observation(512 * Mi, 4 * Gi)}, {MEMORY: Observation(3 * Gi, 4 * Gi)}
    rounds = [  # (t, observed, acted on, conditions)
        (0, low, [], set()),
        (30, low, [], set()),
        (60, low, [soft], {"MemoryPressure"}),
        (70, fine, [], {"MemoryPressure"}),  # still reported for the transition period
        (360, fine, [], set()),
    ]
    state = PressureState()
    for now, observed, acted, conditions in rounds:
        state, active, conds = step(state, [soft], observed, now, transition_period=300)
        assert (active, set(conds)) == (acted, conditions), now


def test_a_soft_threshold_that_recovers_within_its_grace_starts_over() -> None:
    soft = Threshold(MEMORY, Value(quantity=1 * Gi), grace_period=60, hard=False)
    low, fine = {MEMORY: Observation(512 * Mi, 4 * Gi)}, {MEMORY: Observation(3 * Gi, 4 * Gi)}
    state = PressureState()
    for now, observed in ((0, low), (50, fine), (70, low), (110, low)):
        state, active, _ = step(state, [soft], observed, now, transition_period=0)
        assert active == []
    state, active, _ = step(state, [soft], low, 130, transition_period=0)
    assert active == [soft]


def _pod(name: str, **kw: int) -> PodUsage:
    return PodUsage(uid=name, name=f"default/{name}", **kw)


@pytest.mark.parametrize(
    "signal, pods, order",
    [
        # Memory: over requests first, then priority, then usage above requests.
        (
            MEMORY,
            [
                _pod("guaranteed", memory=90, memory_request=100),
                _pod("besteffort", memory=10),
                _pod("burstable", memory=300, memory_request=100),
            ],
            ["burstable", "besteffort", "guaranteed"],
        ),
        (MEMORY, [_pod("low", memory=50), _pod("high", memory=500, priority=1000)], ["low", "high"]),
        (MEMORY, [_pod("a", memory=50), _pod("b", memory=500)], ["b", "a"]),
        # Critical pods are never candidates.
        (MEMORY, [_pod("crit", memory=10**9, priority=2_000_001_000), _pod("x", memory=1)], ["x"]),
        # Disk: usage, with requests honoured.
        (
            NODEFS,
            [_pod("small", disk=10), _pod("big", disk=1000), _pod("within", disk=5000, disk_request=10000)],
            ["big", "small", "within"],
        ),
        # PIDs: priority, then process count.
        (
            PIDS,
            [_pod("few", pids=3), _pod("many", pids=900), _pod("prio", pids=5000, priority=10)],
            ["many", "few", "prio"],
        ),
    ],
)
def test_eviction_order(signal: str, pods: list[PodUsage], order: list[str]) -> None:
    assert [p.uid for p in rank(pods, signal)] == order


@pytest.mark.parametrize(
    "cls, prio, expected, critical",
    [
        (None, None, 0, False),
        ("system-node-critical", None, 2_000_001_000, True),
        ("system-cluster-critical", None, 2_000_000_000, True),
        ("whatever", 7, 7, False),
        (None, 2_000_000_000, 2_000_000_000, True),
    ],
)
def test_priority_of_static_pods(cls: str | None, prio: int | None, expected: int, critical: bool) -> None:
    assert pod_priority(cls, prio) == expected
    assert PodUsage("u", "n", priority=expected).critical is critical


def test_the_message_says_what_ran_low_and_what_the_pod_used() -> None:
    t = Threshold(MEMORY, Value(quantity=100 * Mi))
    text = message(t, Observation(50 * Mi, Gi), _pod("web", memory=200 * Mi))
    assert text == (
        "The node was low on resource: memory. Threshold quantity: 102400Ki, available: 51200Ki. "
        "Pod default/web was using 204800Ki, request is 0Ki."
    )


class _Node:
    def __init__(self) -> None:
        self.observed = {MEMORY: Observation(4 * Gi, 8 * Gi), NODEFS: Observation(50 * Gi, 100 * Gi)}
        self.pods = [
            _pod("be", memory=300 * Mi),
            _pod("bu", memory=200 * Mi, memory_request=100 * Mi),
            _pod("crit", memory=Gi, priority=2_000_001_000),
        ]
        self.log: list[tuple] = []

    async def usage(self) -> list[PodUsage]:
        return [p for p in self.pods if ("evict", p.uid) not in [e[:2] for e in self.log]]

    async def evict(self, uid: str, reason: str, text: str, grace: float | None) -> None:
        self.log.append(("evict", uid, reason, grace))

    def readmit(self, uid: str) -> None:
        self.log.append(("readmit", uid))

    async def reclaim(self, signal: str) -> None:
        self.log.append(("reclaim", signal))


def _manager(node: _Node, clock: FakeClock, thresholds: str = DEFAULT_HARD) -> EvictionManager:
    return EvictionManager(
        configure(thresholds),
        clock=clock,
        observe=lambda: dict(node.observed),
        usage=node.usage,
        evict=node.evict,
        readmit=node.readmit,
        reclaim=node.reclaim,
        transition_period=30,
    )


def test_the_manager_evicts_one_pod_per_round_never_the_critical_one_and_readmits_after_the_pressure() -> None:
    node, clock = _Node(), FakeClock()
    mgr = _manager(node, clock)

    async def rounds() -> None:
        assert await mgr.synchronize() is None
        node.observed[MEMORY] = Observation(50 * Mi, 8 * Gi)
        assert await mgr.synchronize() == "be" and mgr.conditions == {"MemoryPressure"}
        clock.advance(10)
        assert await mgr.synchronize() == "bu"
        clock.advance(10)
        assert await mgr.synchronize() is None  # only the critical pod is left
        node.observed[MEMORY] = Observation(4 * Gi, 8 * Gi)
        clock.advance(10)
        await mgr.synchronize()
        assert mgr.conditions == {"MemoryPressure"}  # the transition period
        clock.advance(30)
        await mgr.synchronize()
        assert mgr.conditions == frozenset()

    asyncio.run(rounds())
    assert node.log == [
        ("evict", "be", "Evicted", 0.0),
        ("evict", "bu", "Evicted", 0.0),
        ("readmit", "be"),
        ("readmit", "bu"),
    ]


def test_disk_pressure_reclaims_node_level_resources_before_evicting() -> None:
    node, clock = _Node(), FakeClock()
    mgr = _manager(node, clock)
    node.observed[NODEFS] = Observation(5 * Gi, 100 * Gi)

    async def reclaim_relieves(signal: str) -> None:
        node.log.append(("reclaim", signal))
        node.observed[NODEFS] = Observation(30 * Gi, 100 * Gi)

    mgr._reclaim = reclaim_relieves
    assert asyncio.run(mgr.synchronize()) is None
    assert node.log == [("reclaim", NODEFS)]
    node.observed[NODEFS] = Observation(5 * Gi, 100 * Gi)
    mgr._reclaim = node.reclaim  # this time the reclaim frees nothing
    assert asyncio.run(mgr.synchronize()) is not None
    assert node.log[-2:][0] == ("reclaim", NODEFS) and node.log[-1][0] == "evict"
