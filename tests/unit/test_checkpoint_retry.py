"""A checkpoint write that failed (a full disk) is tried again without waiting for the next change: found by
the chaos harness, where pods.json stayed stale for good once the disk had room again (issue 16)."""

from __future__ import annotations

import asyncio
import time

from edgelet.events import EventRecorder
from edgelet.state import flush_when_changed
from edgelet.status.publisher import StatusPublisher
from edgelet.util.clock import FakeClock


def _run_until(pred, coro_factory, timeout: float = 10.0) -> None:
    async def main() -> None:
        task = asyncio.create_task(coro_factory())
        deadline = time.monotonic() + timeout
        while not pred() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass

    asyncio.run(main())


def test_a_failed_flush_is_retried_without_a_new_change():
    changed = asyncio.Event()
    outcomes = [False, False, True]
    calls: list[bool] = []

    def flush(_data: bytes) -> bool:
        ok = outcomes[len(calls)] if len(calls) < len(outcomes) else True
        calls.append(ok)
        return ok

    async def go() -> None:
        changed.set()  # one change, then none
        await flush_when_changed(changed, lambda: b"state", flush, 0.5, FakeClock())

    _run_until(lambda: len(calls) >= 3, go)
    assert calls[:3] == [False, False, True]


def test_a_successful_flush_is_not_repeated():
    changed = asyncio.Event()
    calls: list[bool] = []

    def flush(_data: bytes) -> bool:
        calls.append(True)
        return True

    async def go() -> None:
        changed.set()
        await flush_when_changed(changed, lambda: b"state", flush, 0.5, FakeClock())

    _run_until(lambda: len(calls) >= 2, go, timeout=0.5)
    assert calls == [True]


def test_publisher_and_events_say_whether_the_write_went_through(tmp_path):
    clock = FakeClock()
    pub = StatusPublisher(tmp_path / "root", "node", clock, host_ip="10.0.0.1")
    assert pub.flush() is True
    events = EventRecorder(clock, tmp_path / "run" / "events.json")
    assert events.flush() is True
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the state dir should be: every write fails
    assert StatusPublisher(blocked, "node", clock, host_ip="10.0.0.1").flush() is False
    assert EventRecorder(clock, blocked / "events.json").flush() is False


def test_an_unchanged_state_is_not_written():
    changed = asyncio.Event()
    calls: list[bytes] = []

    def write(data: bytes) -> bool:
        calls.append(data)
        return True

    async def go() -> None:
        changed.set()
        await flush_when_changed(changed, lambda: None, write, 0.5, FakeClock())

    _run_until(lambda: bool(calls), go, timeout=0.5)
    assert calls == []
