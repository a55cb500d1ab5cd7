"""Pod workers: one serialised task per pod that applies sync decisions to the runtime.

Each pod UID has at most one task running at a time; updates that arrive
while it works replace each other, so the newest pending update wins
(kubelet pod_workers.go). A pod that is told to terminate never syncs again
under the same worker; if the same UID is added back after it has fully
terminated, a fresh worker starts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from edgelet.api.pod import log_name
from edgelet.api.pod import uid as pod_uid
from edgelet.util.clock import REAL_CLOCK, Clock
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.api.types import Pod

TERMINATE_RETRY = 2.0  # seconds between attempts to stop a pod that failed to stop

log = get_logger(__name__)


@dataclass(frozen=True)
class SyncResult:
    """What one sync asks of the loop: when to look at the pod again (None = on the next event)."""

    requeue_after: float | None = None
    # The sync created, stopped or removed something in the runtime (a relist is worth it).
    changed: bool = True
    # Its after-state came from a relist that asked runc after its changes: PLEG has seen them already.
    relisted: bool = False


class PodSyncer(Protocol):
    """The side-effect half of a sync (see sync.syncpod)."""

    async def sync_pod(self, pod: Pod) -> SyncResult: ...

    async def terminate_pod(self, uid: str, pod: Pod | None) -> None: ...


@dataclass
class _Work:
    kind: Literal["sync", "terminate"]
    pod: Pod | None


@dataclass
class _Worker:
    task: asyncio.Task | None = None
    pending: _Work | None = None
    terminating: bool = False


class PodWorkers:
    """Dispatches pod work; `on_result(uid, result)` tells the loop when to requeue."""

    def __init__(
        self,
        syncer: PodSyncer,
        on_result: Callable[[str, SyncResult], None] | None = None,
        on_terminated: Callable[[str], None] | None = None,
        clock: Clock = REAL_CLOCK,
        may_run_beside: Callable[[str], bool] | None = None,
    ) -> None:
        self._clock = clock
        self._syncer = syncer
        self._workers: dict[str, _Worker] = {}
        self._on_result = on_result or (lambda uid, result: None)
        self._on_terminated = on_terminated or (lambda uid: None)
        self._names: dict[str, str] = {}  # uid -> namespace/name of every pod with a worker
        self._parked: dict[str, Pod] = {}  # namespace/name -> the pod waiting for that name
        # A uid the rollout starts beside the running pod of its name (its Surge strategy); else one at a time.
        self._may_run_beside = may_run_beside or (lambda uid: False)

    def is_terminating(self, uid: str) -> bool:
        w = self._workers.get(uid)
        return bool(w and w.terminating)

    def known(self) -> set[str]:
        return set(self._workers)

    def sync(self, pod: Pod) -> None:
        uid = pod_uid(pod)
        w = self._workers.get(uid)
        if w is not None and w.terminating:
            # kubelet: a terminating pod cannot be resurrected by an update to the same UID.
            log.debug("Ignoring sync of a terminating pod", pod=uid)
            return
        name = log_name(pod) or uid
        if (
            w is None
            and not self._may_run_beside(uid)
            and any(n == name and other != uid for other, n in self._names.items())
        ):
            # kubelet allowStaticPodStart: one pod per full name at a time, so an edited
            # static pod (new UID) starts only once the old one has fully terminated.
            if name not in self._parked:
                log.info("Waiting for the previous pod of the same name to terminate", pod=name, uid=uid)
            self._parked[name] = pod
            return
        self._parked.pop(name, None)
        self._names[uid] = name
        self._submit(uid, _Work("sync", pod))

    def terminate(self, uid: str, pod: Pod | None) -> None:
        # A pod waiting for its name that is no longer wanted (the rollout went back to the running version)
        # must not start once the name is free.
        for name in [n for n, p in self._parked.items() if pod_uid(p) == uid]:
            del self._parked[name]
        w = self._workers.get(uid)
        if w is not None and w.terminating:
            return
        self._submit(uid, _Work("terminate", pod))

    def _submit(self, uid: str, work: _Work) -> None:
        w = self._workers.get(uid)
        if w is None:
            w = self._workers[uid] = _Worker()
        if work.kind == "terminate":
            w.terminating = True
        w.pending = work
        if w.task is None or w.task.done():
            w.task = asyncio.get_running_loop().create_task(self._run(uid, w), name=f"pod-worker-{uid}")

    async def _run(self, uid: str, w: _Worker) -> None:
        while w.pending is not None:
            work, w.pending = w.pending, None
            if work.kind == "terminate":
                await self._terminate(uid, work.pod)
                return
            assert work.pod is not None  # only a terminate may come without its pod
            try:
                result = await self._syncer.sync_pod(work.pod)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a loop never dies: log, and the next sync retries
                log.error("Error syncing pod", exc, pod=log_name(work.pod), uid=uid)
                result = SyncResult(requeue_after=5.0)
            self._on_result(uid, result)

    async def _terminate(self, uid: str, pod: Pod | None) -> None:
        while True:
            try:
                await self._syncer.terminate_pod(uid, pod)
                break
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.error("Error terminating pod, will retry", exc, pod=log_name(pod), uid=uid)
                await self._clock.sleep(TERMINATE_RETRY)
        self._workers.pop(uid, None)
        name = self._names.pop(uid, None)
        self._on_terminated(uid)
        parked = self._parked.pop(name, None) if name is not None else None
        if parked is not None:
            self.sync(parked)

    async def wait_idle(self) -> None:
        """Wait until no worker has work (for --runonce and tests)."""
        while True:
            tasks = [w.task for w in self._workers.values() if w.task is not None and not w.task.done()]
            if not tasks:
                return
            await asyncio.wait(tasks)

    async def finish(self) -> None:
        """--runonce, once judged: end the syncs, as the daemon's stop does (`shutdown`), and let the pods being
        stopped be stopped. The syncs left are resyncs PLEG's events asked for, which change nothing the
        verdict saw; one cut short leaves what a stop of the agent leaves, which the next start adopts."""
        tasks = []
        for w in self._workers.values():
            if w.task is None or w.task.done():
                continue
            tasks.append(w.task)
            if not w.terminating:  # a terminate, under way or queued behind a sync, runs to its end
                w.pending = None
                w.task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def shutdown(self) -> None:
        """Cancel the workers; containers keep running (kubelet leaves pods alone when it stops)."""
        tasks = [w.task for w in self._workers.values() if w.task is not None and not w.task.done()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
