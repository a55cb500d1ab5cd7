"""Where the agent's event loop spends its CPU: loop wakeups, and per subsystem the callbacks run and their CPU time.

An idle agent should wake rarely and briefly; when it does not, this says which part woke it. The agent's
loop is an `AccountedLoop`, which, once an account is installed, times every callback it runs with the loop
thread's CPU clock (and work sent to threads with theirs). A callback is charged to its subsystem: the name
of the long-running task it belongs to (`pleg`, `probes`, `syncloop`, `mirror-lease`...), which every task
and callback created under that task inherits through its context (a relist that a pod worker asks for is
the worker's), and per-object task names are folded into their family (`pod-worker-<uid>` is `pod-worker`). A synchronous stretch inside a
callback can be charged to a subsystem of its own with `charged("gates")`: its time moves out of the
callback's. A closure and two clock reads per callback (a few microseconds; a pod's start runs about 200
callbacks) keep it cheap enough to stay on; tests and tools that never install it pay nothing but the check
in `charged`.
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
    nested: float = 0.0
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
    began = time.thread_time()  # the clock the callbacks are timed with: the stretch leaves its callback's
    try:
        yield
    finally:
        spent = time.thread_time() - began
        account.charge(name, spent)
        account.nested += spent


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


# The task whose context was given its line: each task's name is read once, at its first step.
_NAMED: ContextVar[object] = ContextVar("edgelet_subsystem_named", default=None)


def _timed(callback: Callable[..., Any]) -> Callable[..., Any]:
    """`callback`, charged to its subsystem when it runs (in the context the loop runs it in)."""
    owner = getattr(callback, "__self__", None)
    task = owner if isinstance(owner, asyncio.Task) else None  # a task's step or wakeup
    # The thread's CPU clock, not the wall clock: a callback preempted on a busy machine would otherwise
    # be charged for the time others ran. It is a system call (about 1 us), which a pod's start (about 200
    # callbacks) pays well under a millisecond for.
    clock = time.thread_time

    def run(*args: Any) -> Any:
        account = _account
        if account is None:
            return callback(*args)
        if task is not None and _NAMED.get() is not task:
            # Its first step (a task is named after that step is queued): in the task's own context, so what
            # it creates inherits the line; an unnamed task keeps its creator's.
            _NAMED.set(task)
            name = subsystem_of(task.get_name())
            if name is not None:
                SUBSYSTEM.set(name)
        outer = account.nested
        account.nested = 0.0
        began = clock()
        try:
            return callback(*args)
        finally:
            spent = clock() - began - account.nested
            account.nested = outer
            account.charge(SUBSYSTEM.get(), spent)

    return run


class AccountedLoop(asyncio.SelectorEventLoop):
    """asyncio's own loop, whose wakeups and callbacks the installed account counts (a Runner's loop_factory).

    asyncio has no hook around a callback, so every way one is scheduled wraps it: soon, at a time, from
    another thread, and when a file is ready (the selector transports' readers and writers)."""

    def __init__(self) -> None:
        super().__init__(_CountingSelector())

    # The stubs type callbacks by their arguments (TypeVarTuple); these pass any callback through, wrapped.
    def call_soon(  # type: ignore[override]
        self, callback: Callable[..., Any], *args: Any, context: Context | None = None
    ) -> asyncio.Handle:
        return super().call_soon(_timed(callback), *args, context=context)

    def call_soon_threadsafe(  # type: ignore[override]
        self, callback: Callable[..., Any], *args: Any, context: Context | None = None
    ) -> asyncio.Handle:
        return super().call_soon_threadsafe(_timed(callback), *args, context=context)

    def call_at(  # type: ignore[override]
        self, when: float, callback: Callable[..., Any], *args: Any, context: Context | None = None
    ) -> asyncio.TimerHandle:
        return super().call_at(when, _timed(callback), *args, context=context)

    def _add_reader(self, fd: Any, callback: Callable[..., Any], *args: Any) -> asyncio.Handle:
        return super()._add_reader(fd, _timed(callback), *args)  # type: ignore[misc]

    def _add_writer(self, fd: Any, callback: Callable[..., Any], *args: Any) -> asyncio.Handle:
        return super()._add_writer(fd, _timed(callback), *args)  # type: ignore[misc]


def install() -> CpuAccount:
    """Start counting (what AccountedLoops run from now on); idempotent, returns the account."""
    global _account
    if _account is None:
        _account = CpuAccount()
    return _account


def uninstall() -> None:
    """Stop counting (tests)."""
    global _account
    _account = None
