"""The sync loop's turns: when it wakes (`next_wait`, a table) and, driven by a fake clock, how often an idle
loop turns and housekeeps in a minute, and that a retry a worker asks for still comes on time."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from edgelet.sources import SourceSnapshot
from edgelet.sync.loop import HOUSEKEEPING_PERIOD, IDLE_TICK, TICK, SyncLoop, next_wait
from edgelet.sync.workers import SyncResult
from edgelet.util.clock import FakeClock
from tests.unit.test_podconfig import mkpod

NOW = 1000.0


@pytest.mark.parametrize(
    "requeue, housekeeping_at, due, ticking, expected",
    [
        ([], NOW + 2, False, False, IDLE_TICK),  # idle: nothing arrives, nothing is due
        ([], NOW + 2, True, False, 2.0),  # something arrived: housekeeping at its period
        ([], NOW + 2, False, True, TICK),  # a rollout step is open: every tick
        ([NOW + 3.5], NOW + 2, False, False, 3.5),  # a back-off ends first
        ([NOW + 20], NOW + 2, False, False, IDLE_TICK),
        ([NOW - 1], NOW + 2, False, False, 0.0),  # overdue: at once
        ([], NOW - 5, True, False, 0.0),
    ],
)
def test_next_wait(requeue, housekeeping_at, due, ticking, expected):
    got = next_wait(NOW, requeue_at=requeue, next_housekeeping=housekeeping_at, housekeeping_due=due, ticking=ticking)
    assert got == pytest.approx(expected)


class _Workers:
    def __init__(self) -> None:
        self.synced: list[str] = []

    def sync(self, pod: Any) -> None:
        self.synced.append(pod.metadata.name)

    def terminate(self, uid: str, pod: Any) -> None:
        pass

    def is_terminating(self, uid: str) -> bool:
        return False


class _Publisher:
    def set_config(self, config: Any) -> None:
        pass

    def remove(self, uid: str) -> None:
        pass


class _Stop(Exception):
    pass


class _Harness:
    """A loop whose waits move a fake clock: the wait it asks for passes at once unless an item is queued."""

    def __init__(self, until: float, rollout: Any = None) -> None:
        self.clock = FakeClock()
        self.until = self.clock.monotonic() + until
        self.turns = 0
        self.housekeepings = 0
        self.workers = _Workers()

        def runtime_uids() -> set[str]:
            self.housekeepings += 1
            return {"uid-web"}

        self.loop = SyncLoop(
            workers=self.workers,  # type: ignore[arg-type]
            publisher=_Publisher(),  # type: ignore[arg-type]
            clock=self.clock,
            expected_sources=["file"],
            runtime_uids=runtime_uids,
            next_item=self.next_item,
            rollout=rollout(self.clock) if rollout is not None else None,
        )

    async def next_item(self, queue: asyncio.Queue[Any], timeout: float) -> Any:
        self.turns += 1
        assert self.turns < 1000, "the loop spins: it asks for no wait at all, again and again"
        await asyncio.sleep(0)  # let whatever the test scheduled run
        if not queue.empty():
            return queue.get_nowait()
        if self.clock.monotonic() + timeout > self.until:
            raise _Stop
        self.clock.advance(timeout)
        return None

    def run(self, *snapshots: SourceSnapshot, lifecycle: tuple[str, ...] = ()) -> None:
        async def main() -> None:
            for snap in snapshots:
                await self.loop.emit_config(snap)
            if lifecycle:
                self.loop.emit_lifecycle(lifecycle)
            await self.loop.run()

        with pytest.raises(_Stop):
            asyncio.run(main())


WEB = SourceSnapshot(source="file", pods=(mkpod("web", "uid-web"),))


def test_an_idle_minute_turns_the_loop_a_few_times_not_every_second():
    h = _Harness(until=60.0)
    h.run(WEB)
    # One turn for the snapshot, then one per IDLE_TICK (10 s), each housekeeping as a safety net: not 60
    # turns and 30 housekeepings as with a turn every second.
    assert h.turns <= 8
    assert h.housekeepings <= 7
    assert h.workers.synced == ["web"]


def test_a_retry_a_worker_asks_for_comes_on_time():
    h = _Harness(until=30.0)
    synced_at: list[float] = []
    sync = h.workers.sync

    def record(pod: Any) -> None:
        synced_at.append(h.clock.monotonic())
        sync(pod)
        if len(synced_at) == 1:  # the first sync's result: try again in 3.5 s
            h.loop.on_result("uid-web", SyncResult(requeue_after=3.5))

    h.workers.sync = record  # type: ignore[method-assign]
    h.run(WEB)
    assert len(synced_at) == 2 and synced_at[1] - synced_at[0] == pytest.approx(3.5)


def test_housekeeping_follows_what_arrives_within_its_period():
    h = _Harness(until=5.0)
    h.run(WEB, lifecycle=("uid-web",))
    # At the snapshot, then once more HOUSEKEEPING_PERIOD later for the lifecycle event that followed it.
    assert h.housekeepings == 2
    assert HOUSEKEEPING_PERIOD < 5.0


class _Gate:
    """A rollout manager with one first version under its gate, judged: the clock decides at `due`."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.due: float | None = clock.monotonic() + 30.0
        self.rounds: list[float] = []
        self.on_change: Any = None

    def ticking(self) -> bool:
        return False

    def gate_round_at(self) -> float | None:
        return self.due

    def judges(self, uid: str) -> bool:
        return self.due is not None and uid == "uid-web"

    decides = True  # its round at the due time decides it
    enabled = True

    def versions_to_run(self, source: Any, sources_ready: bool) -> tuple[dict, set]:
        self.rounds.append(self.clock.monotonic())
        if self.decides and self.due is not None and self.clock.monotonic() >= self.due:
            self.due = None  # good: every record rests
        return dict(source), set()


def test_a_judged_gate_brings_rounds_at_its_clock_decision_not_every_tick():
    h = _Harness(until=60.0, rollout=_Gate)
    h.run(WEB)
    gate = h.loop._rollout
    assert isinstance(gate, _Gate)
    # The snapshot's round, then the gate's at its window end: not a round every second while it gates.
    assert gate.rounds == [pytest.approx(gate.rounds[0]), pytest.approx(gate.rounds[0] + 30.0)]
    assert h.turns <= 10


def test_a_sync_result_brings_a_round_while_a_gate_judges():
    h = _Harness(until=5.0, rollout=_Gate)
    sync = h.workers.sync

    def synced(pod: Any) -> None:
        sync(pod)
        h.loop.on_result("uid-web", SyncResult())  # published a status the gate reads
        h.loop.on_result("uid-web", SyncResult())

    h.workers.sync = synced  # type: ignore[method-assign]
    h.run(WEB)
    gate = h.loop._rollout
    assert isinstance(gate, _Gate)
    assert len(gate.rounds) == 2  # the snapshot's, and one for both results


class _StuckGate(_Gate):
    """Its round at the due time leaves it undecided (the record being written): due stays in the past."""

    decides = False


def test_a_gate_left_undecided_at_its_due_time_does_not_spin_the_loop():
    h = _Harness(until=60.0, rollout=_StuckGate)
    h.run(WEB)
    gate = h.loop._rollout
    assert isinstance(gate, _StuckGate)
    assert len(gate.rounds) == 2 and h.turns <= 10  # the write's own round (on_change) judges it again


def test_a_burst_of_record_writes_brings_one_round():
    h = _Harness(until=5.0, rollout=_Gate)
    gate = h.loop._rollout
    assert isinstance(gate, _Gate)
    sync = h.workers.sync

    def synced(pod: Any) -> None:
        sync(pod)
        for _ in range(20):
            gate.on_change()  # twenty first versions' records written at once

    h.workers.sync = synced  # type: ignore[method-assign]
    h.run(WEB)
    assert len(gate.rounds) == 2  # the snapshot's, and one for the twenty writes
