"""Where the agent's event loop spends its CPU: loop wakeups, and per subsystem the callbacks run and their CPU time.

An idle agent should wake rarely and briefly; when it does not, this says which part woke it. The agent's
loop is built by `accounted_loop` and `install` times every callback the loop runs with the loop thread's
CPU clock. A callback is charged to its subsystem: the name of the long-running task it belongs to
(`pleg`, `probes`, `syncloop`, `mirror-lease`...), which every task and callback created under that task
inherits through its context (a relist that a pod worker asks for is the worker's), and per-object task
names are folded into their family (`pod-worker-<uid>` is `pod-worker`). A synchronous stretch inside a
callback can be charged to a subsystem of its own with `charged("gates")`: its time moves out of the
callback's. Two CPU-clock reads per callback keep it cheap enough to stay on; tests and tools that never
install it pay nothing but the check in `charged`.
"""

from __future__ import annotations

import asyncio
import selectors
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import Context, ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

OTHER = "other"
# The subsystem a task, and whatever it schedules, is charged to (OTHER: not under a named task).
SUBSYSTEM: ContextVar[str] = ContextVar("edgelet_subsystem", default=OTHER)
# Tasks named per object: the account keeps one line per family, not per pod or version.
FAMILIES = ("pod-worker-", "rollout-write-", "rollout-pull-", "source-file-")


@dataclass
class Line:
    """One subsystem's account: callbacks (or `charged` stretches) run, and their CPU seconds."""

    calls: int = 0
    cpu: float = 0.0


@dataclass
class CpuAccount:
    """The loop's wakeups and each subsystem's line; `snapshot()` is what the local API serves."""

    wakeups: int = 0
    lines: dict[str, Line] = field(default_factory=dict)
    # CPU of `charged` stretches inside the callback running now, which its own line does not keep.
    _nested: float = 0.0
    # The executor's threads charge their lines under it; the loop's own lines are the loop thread's alone.
    _threads: threading.Lock = field(default_factory=threading.Lock)

    def charge(self, name: str, cpu: float) -> None:
        line = self.lines.get(name)
        if line is None:
            line = self.lines[name] = Line()
        line.calls += 1
        line.cpu += cpu

    def charge_thread(self, name: str, cpu: float) -> None:
        with self._threads:
            self.charge(f"{name} (thread)", cpu)

    def snapshot(self) -> dict[str, object]:
        """Counts since the start, and to set them against: the CPU of the calling thread (the loop's, when the
        local API asks) and of the whole process (threads and all)."""
        return {
            "wakeups": self.wakeups,
            "loop_cpu": round(time.thread_time(), 6),
            "process_cpu": round(time.process_time(), 6),
            "subsystems": {n: {"calls": v.calls, "cpu": round(v.cpu, 6)} for n, v in sorted(self.lines.items())},
        }


_account: CpuAccount | None = None


def current() -> CpuAccount | None:
    """The installed account (None when the loop is not accounted: tests, --runonce tools)."""
    return _account


def subsystem_of(task_name: str) -> str | None:
    """The line a task's name opens, or None for an unnamed task (`Task-12`), which keeps its creator's."""
    if task_name.startswith("Task-"):
        return None
    for family in FAMILIES:
        if task_name.startswith(family):
            return family[:-1]
    return task_name


@contextmanager
def charged(name: str) -> Iterator[None]:
    """Charge the CPU of this synchronous stretch to `name` instead of the callback running it."""
    account = _account
    if account is None:
        yield
        return
    began = time.thread_time()
    try:
        yield
    finally:
        spent = time.thread_time() - began
        account.charge(name, spent)
        account._nested += spent


class _CountingSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """The platform's selector, counting the times the loop woke from a sleep."""

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(timeout)
        account = _account
        # A select that could sleep (no callback was ready) ends in a wakeup: a timer due or a file ready.
        if account is not None and (timeout is None or timeout > 0):
            account.wakeups += 1
        return ready


class AccountedExecutor(ThreadPoolExecutor):
    """A thread pool (the agent's default executor, to_thread's) charging each call's thread CPU to the
    subsystem that made it, once an account is installed."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        name = SUBSYSTEM.get()  # read on the loop, in the context of the task that asks

        def timed() -> T:
            began = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                account = _account
                if account is not None:
                    account.charge_thread(name, time.thread_time() - began)

        return super().submit(timed)


def accounted_loop() -> asyncio.AbstractEventLoop:
    """An event loop (asyncio's own) whose wakeups the installed account counts: a Runner's loop_factory."""
    return asyncio.SelectorEventLoop(_CountingSelector())


def install() -> CpuAccount:
    """Time every callback any loop of this process runs from now on; idempotent, returns the account.

    asyncio has no hook around a callback, so Handle's run is wrapped once (as its debug mode times slow
    callbacks in the same place): every other part of asyncio is untouched."""
    global _account
    if _account is not None:
        return _account
    account = _account = CpuAccount()
    run = asyncio.events.Handle._run
    clock = time.thread_time

    def _run(handle: asyncio.events.Handle) -> None:
        context: Context = handle._context  # type: ignore[attr-defined]
        task = getattr(handle._callback, "__self__", None)  # type: ignore[attr-defined]
        if isinstance(task, asyncio.Task):
            name = subsystem_of(task.get_name())
            if name is not None and context.get(SUBSYSTEM) != name:
                context.run(SUBSYSTEM.set, name)  # the task's own context: what it creates inherits the line
        outer = account._nested
        account._nested = 0.0
        began = clock()
        try:
            run(handle)
        finally:
            spent = clock() - began - account._nested
            account._nested = outer
            account.charge(context.get(SUBSYSTEM, OTHER), spent)

    asyncio.events.Handle._run = _run  # type: ignore[method-assign,assignment]
    _unwrapped.append(run)
    return account


_unwrapped: list[Callable[[asyncio.events.Handle], None]] = []  # Handle's own run, while wrapped


def uninstall() -> None:
    """Stop accounting (tests): Handle runs as asyncio wrote it again."""
    global _account
    if _unwrapped:
        asyncio.events.Handle._run = _unwrapped.pop()  # type: ignore[method-assign,assignment]
    _account = None
