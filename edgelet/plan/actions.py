"""computePodActions: what one sync of a pod must do, from its spec, its runtime state and the back-off (pure).

Follows kubelet kuberuntime_manager.go computePodActions and
findNextInitContainerToRun (KUBELET-SEMANTICS "Pod sync"):

- no sandbox, the newest one not running, more than one running, or the
  pod's network mode changed: kill the pod and create a new sandbox, then
  start everything again -- except restartPolicy Never once containers
  have run, and a pod whose containers all finished for good;
- init containers run one at a time in order; a failed one is retried
  (with back-off) unless restartPolicy is Never, which fails the pod;
  regular containers wait until every init container has succeeded;
- sidecars (init containers with restartPolicy Always) start in order; the
  next init container waits until the sidecar runs and passed its startup
  probe; they restart whenever they exit, and once the main containers are
  done for good they are stopped, listed last-started first;
- a regular container that never ran starts; one left created and never
  started (an agent killed between its create and its start) is started as
  it is when it is the desired instance (same spec, current sandbox, its
  runc init waiting, no start of it failed), else killed and replaced; an
  exited one restarts by
  policy (Never: no; OnFailure: only after a failure; Always: yes), after
  its CrashLoopBackOff delay;
- a running container whose spec hash changed is killed and restarted; one
  whose liveness/startup probe failed is killed and restarted unless the
  policy is Never.

The back-off is only read here; the syncer records a failure
(`Backoff.next`) when it restarts a container.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, TypedDict

from edgelet.api.pod import is_sidecar, meta, should_restart
from edgelet.api.pod import spec as pod_spec
from edgelet.api.pod import uid as pod_uid
from edgelet.plan import ContainerToStart, PodActions

if TYPE_CHECKING:
    from edgelet.api.types import Container, Pod
    from edgelet.container.types import ContainerRecord, PodRuntimeStatus, SandboxRecord
    from edgelet.util.backoff import Backoff

ALIVE = ("running", "created", "unknown")  # states of a container that may still hold a process

# Reasons for stopping the containers of a pod that will never run anything again. kubelet does not
# kill these in computePodActions: its pod worker terminates the finished pod as it would a deleted
# one, so the Killing event says "Stopping container NAME" rather than the reason (is_pod_termination).
INIT_FAILED_NEVER = "Init container failed and restartPolicy is Never"
MAINS_FINISHED = "All main containers have finished"
SANDBOX_GONE_NEVER = "Pod sandbox is gone and restartPolicy is Never"
ALL_FINISHED = "All containers have finished"
_POD_TERMINATION = frozenset({INIT_FAILED_NEVER, MAINS_FINISHED, SANDBOX_GONE_NEVER, ALL_FINISHED})


def is_pod_termination(reason: str) -> bool:
    """Whether a kill reason of `containers_to_kill` is the termination of a finished pod (see above)."""
    return reason in _POD_TERMINATION


def go_duration(seconds: float) -> str:
    """Seconds as Go's time.Duration prints them ("10s", "1m20s", "5m0s"), for kubelet's messages."""
    if seconds <= 0:
        return "0s"
    total = int(round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def format_pod(pod: Pod) -> str:
    """kubelet format.Pod: `name_namespace(uid)`."""
    m = meta(pod)
    return f"{m.name}_{m.namespace}({m.uid})"


def crash_loop_message(pod: Pod, name: str, delay: float) -> str:
    # kubelet doBackOff's error text, which becomes the waiting message.
    return f"back-off {go_duration(delay)} restarting failed container={name} pod={format_pod(pod)}"


def sandbox_changed(pod: Pod, status: PodRuntimeStatus) -> tuple[bool, int, str | None]:
    """kubelet PodSandboxChanged: (create a new sandbox?, its attempt, the sandbox id in use or to kill)."""
    if not status.sandboxes:
        return True, 0, None
    newest = _newest_sandbox(status)
    ready = [s for s in status.sandboxes if s.state == "running"]
    if len(ready) > 1 or newest.state != "running" or not newest.network_ready:
        return True, newest.attempt + 1, newest.id
    if newest.host_network != bool(pod_spec(pod).host_network):
        return True, newest.attempt + 1, None
    return False, newest.attempt, newest.id


def _newest_sandbox(status: PodRuntimeStatus) -> SandboxRecord:
    return max(status.sandboxes, key=lambda s: (s.created_at, s.attempt))


def _failed(rec: ContainerRecord) -> bool:
    """kubelet isInitContainerFailed: OOM-killed, exited non-zero, or in an unknown state."""
    if rec.reason == "OOMKilled" or rec.state == "unknown":
        return True
    return rec.state == "exited" and rec.exit_code != 0


def _succeeded(rec: ContainerRecord | None) -> bool:
    return rec is not None and rec.state == "exited" and rec.exit_code == 0


class _Plan:
    """Accumulates the actions of one computation (local to compute_pod_actions)."""

    def __init__(
        self,
        pod: Pod,
        status: PodRuntimeStatus,
        backoff: Backoff,
        now: float,
        start_failed: AbstractSet[str] = frozenset(),
    ) -> None:
        self.pod = pod
        self.sandbox_id: str | None = None  # the live sandbox the containers start in (None: a new one)
        self.start_failed = start_failed
        self.status = status
        self.backoff = backoff
        self.now = now
        self.uid = pod_uid(pod)
        self.kill: dict[str, str] = {}
        self.start: list[ContainerToStart] = []
        self.waiting: dict[str, tuple[str, str]] = {}

    def latest(self, name: str) -> ContainerRecord | None:
        return self.status.latest(name)

    def resumable(self, container: Container, rec: ContainerRecord) -> bool:
        """Whether a created, never-started instance is the one to start rather than kill and replace.

        **edgelet:** kubelet never sees one (containerd's create and start are one CRI call apart, and a
        restarted kubelet kills what is not running). An agent killed between `runc create` and `runc
        start` leaves the desired instance with its conmon waiting: starting it keeps its restart count
        and does not count a restart for a container that never failed. Only when runc holds it created
        (its init process waits: a pid), in the sandbox in use, with today's spec, and no start of it
        failed in this agent (a start that failed once is not retried on the same instance), and only while
        its conmon lives: an agent killed before it read conmon's answer to `runc create` takes that conmon
        along (the answer meets a closed pipe), and started then, the instance's exit would be recorded
        nowhere (exit code 255, ContainerStatusUnknown, for good).
        """
        from edgelet.api.hash import container_hash

        return (
            rec.state == "created"
            and rec.pid is not None
            and rec.monitored
            and self.sandbox_id is not None
            and rec.sandbox_id == self.sandbox_id
            and rec.id not in self.start_failed
            and rec.spec_hash == container_hash(container)
        )

    def try_start(self, container: Container, container_type: str) -> ContainerToStart | None:
        """The start of `container`'s next instance, or None (and a CrashLoopBackOff wait) while backing off."""
        rec = self.latest(container.name)
        if rec is not None and self.resumable(container, rec):
            return ContainerToStart(
                name=container.name, attempt=rec.attempt, container_type=container_type, existing=rec.id
            )
        if rec is not None and rec.state in ALIVE and rec.state != "running":
            # kubelet kills a container in an unknown state before restarting it, so two instances
            # never run; edgelet does the same for one left "created" (a sync interrupted between
            # create and start), whose runc init process would otherwise linger.
            self.kill[rec.id] = f'Container {container.name} is in "{rec.state}" state, killing it before restart'
        if rec is not None and rec.state == "exited":
            key = (self.uid, container.name)
            if self.backoff.is_in_backoff(key, self.now):
                self.waiting[container.name] = (
                    "CrashLoopBackOff",
                    crash_loop_message(self.pod, container.name, self.backoff.get(key)),
                )
                return None
        return ContainerToStart(
            name=container.name,
            # An instance that never started takes its attempt number back: nothing ran, nothing restarted.
            attempt=(rec.attempt if rec.never_started else rec.attempt + 1) if rec is not None else 0,
            container_type=container_type,
        )


def compute_pod_actions(
    pod: Pod,
    status: PodRuntimeStatus,
    backoff: Backoff,
    now: float,
    *,
    probe_failures: Mapping[str, str] | None = None,
    started: Mapping[str, bool] | None = None,
    start_failed: AbstractSet[str] = frozenset(),
) -> PodActions:
    """What the next sync of `pod` must do, given what the runtime holds for it.

    `now` must come from the clock the back-off was fed with (the syncer uses
    the monotonic clock). `probe_failures` maps a container id to the probe
    that failed it ("liveness" or "startup"). `started` maps a container name
    to its startup probe verdict (PodSyncState.started); a running container
    without an entry has no startup probe and counts as started.
    `start_failed` holds the ids of instances whose `runc start` failed in this
    agent: a created instance among them is replaced, not started again.
    """
    spec = pod_spec(pod)
    policy = spec.restart_policy or "Always"
    inits = list(spec.init_containers or [])
    regular = list(spec.containers or [])
    plan = _Plan(pod, status, backoff, now, start_failed)

    create, attempt, sandbox_id = sandbox_changed(pod, status)
    if create:
        return _recreate(plan, policy, inits, regular, attempt, sandbox_id)
    plan.sandbox_id = sandbox_id

    # Whatever runs but is no longer in the spec must go.
    names = {c.name for c in inits} | {c.name for c in regular}
    for extra in status.containers:
        if extra.name not in names and extra.state in ALIVE:
            plan.kill[extra.id] = f"Container {extra.name} is not in the pod spec"

    actions_base: _Base = {"sandbox_id": sandbox_id, "sandbox_attempt": attempt}
    remove = _old_instances(status, plan.kill)

    initializing = _plan_init(plan, policy, inits, regular, started or {})
    if initializing is not None:
        return _actions(plan, remove=remove, **actions_base, **initializing)
    _plan_sidecars(plan, inits)
    keep, pending = _plan_regular(plan, policy, regular, probe_failures or {})

    regular_starts = [s for s in plan.start if s.container_type == "regular"]
    if keep == 0 and not regular_starts and not pending:
        # Every main container finished for good: stop the sidecars and the sandbox (kubelet KillPod),
        # but keep the exited containers, whose records are the pod's final status.
        plan.start = []
        plan.waiting = {n: w for n, w in plan.waiting.items() if n in {c.name for c in regular}}
        # Listed in reverse spec order, the order the syncer stops them in (kubelet's termination ordering).
        for c in reversed(inits):
            rec = plan.latest(c.name)
            if is_sidecar(c) and rec is not None and rec.state in ALIVE:
                plan.kill[rec.id] = MAINS_FINISHED
        return _actions(plan, remove=remove, pod_finished=True, **actions_base)
    return _actions(plan, remove=remove, **actions_base)


class _InitOutcome(TypedDict, total=False):
    next_init: ContainerToStart | None
    pod_failed: bool
    pod_finished: bool


def _plan_init(
    plan: _Plan, policy: str, inits: list[Container], regular: list[Container], started: Mapping[str, bool]
) -> _InitOutcome | None:
    """While the pod initializes: what this sync does with its init containers (None once it is initialized).

    edgelet follows kubelet's sidecar-aware rule: once any regular container
    exists, the pod has been initialized, even if init containers' records
    were removed since.
    """
    if any(plan.latest(c.name) is not None for c in regular):
        return None
    for c in inits:
        rec = plan.latest(c.name)
        if is_sidecar(c):
            if rec is not None and rec.state == "running":
                if not started.get(c.name, True):
                    # kubelet: the next init container waits until the sidecar passed its startupProbe.
                    return {}
                continue  # a started sidecar counts as initialized
            return {"next_init": plan.try_start(c, "init")}
        if rec is None or rec.state == "created" or rec.never_started:
            return {"next_init": plan.try_start(c, "init")}
        if rec.state == "running":
            return {}  # wait for it
        if _failed(rec):
            if policy == "Never":
                # kubelet: the init container failed and will not be retried: the pod fails.
                for other in plan.status.containers:
                    if other.state in ALIVE:
                        plan.kill[other.id] = INIT_FAILED_NEVER
                return {"pod_failed": True, "pod_finished": True}
            return {"next_init": plan.try_start(c, "init")}
        # Succeeded: on to the next one.
    return None


def _plan_sidecars(plan: _Plan, inits: list[Container]) -> None:
    """Sidecars keep running next to the main containers and restart whatever the pod's policy."""
    from edgelet.api.hash import container_hash

    for c in inits:
        if not is_sidecar(c):
            continue
        rec = plan.latest(c.name)
        if rec is not None and rec.state == "running":
            if rec.spec_hash != container_hash(c):
                plan.kill[rec.id] = f"Container {c.name} definition changed, will be restarted"
                plan.start.append(ContainerToStart(c.name, rec.attempt + 1, "init"))
            continue
        sidecar = plan.try_start(c, "init")
        if sidecar is not None:
            plan.start.append(sidecar)


def _plan_regular(plan: _Plan, policy: str, regular: list[Container], failures: Mapping[str, str]) -> tuple[int, int]:
    """Starts and kills of the main containers; returns how many keep running and how many wait out a back-off."""
    from edgelet.api.hash import container_hash

    keep = 0
    pending = 0
    for c in regular:
        rec = plan.latest(c.name)
        if rec is None or rec.state != "running":
            if should_restart(rec, policy):
                nxt_start = plan.try_start(c, "regular")
                if nxt_start is None:
                    pending += 1
                else:
                    plan.start.append(nxt_start)
            continue
        restart = policy != "Never"
        if rec.spec_hash != container_hash(c):
            message = f"Container {c.name} definition changed"
            restart = True  # kubelet: a changed spec restarts whatever the policy
        elif failures.get(rec.id) in ("liveness", "startup"):
            message = f"Container {c.name} failed {failures[rec.id]} probe"
        else:
            keep += 1
            continue
        if restart:
            message += ", will be restarted"
            plan.start.append(ContainerToStart(c.name, rec.attempt + 1, "regular"))
        plan.kill[rec.id] = message
    return keep, pending


def _recreate(
    plan: _Plan,
    policy: str,
    inits: list[Container],
    regular: list[Container],
    attempt: int,
    sandbox_id: str | None,
) -> PodActions:
    """The actions when the pod needs a new sandbox."""
    status = plan.status
    if policy == "Never" and attempt != 0 and any(not rec.never_started for rec in status.containers):
        # kubelet: the pod ran once and must not run again. Stop what still runs; keep the records.
        # **edgelet:** a container that never started does not count: one created beside its sandbox's CNI ADD,
        # then left by an agent killed before the sandbox started, never ran (kubelet creates
        # containers only in a ready sandbox, so it never meets one).
        for rec in status.containers:
            if rec.state in ALIVE:
                plan.kill[rec.id] = SANDBOX_GONE_NEVER
        return _actions(plan, sandbox_id=sandbox_id, sandbox_attempt=attempt, pod_finished=True)

    to_start = [c for c in regular if not (policy == "OnFailure" and _succeeded(plan.latest(c.name)))]
    if not to_start and any(plan.latest(c.name) is not None for c in regular):
        # Initialized and nothing left to run: no new sandbox for a finished pod.
        for rec in status.containers:
            if rec.state in ALIVE:
                plan.kill[rec.id] = ALL_FINISHED
        return _actions(plan, sandbox_id=sandbox_id, sandbox_attempt=attempt, pod_finished=True)

    base: _Base = {"sandbox_id": sandbox_id, "sandbox_attempt": attempt}
    # The old containers all go with the old sandbox (the syncer's kill step), so none is listed apart.
    if inits:
        # A new sandbox restarts initialization from the first init container.
        nxt = plan.try_start(inits[0], "init")
        plan.kill.clear()
        return _actions(plan, next_init=nxt, kill_pod=True, create_sandbox=True, **base)
    for c in to_start:
        started = plan.try_start(c, "regular")
        if started is not None:
            plan.start.append(started)
    plan.kill.clear()
    return _actions(plan, kill_pod=True, create_sandbox=True, **base)


def _old_instances(status: PodRuntimeStatus, killing: Mapping[str, str]) -> tuple[str, ...]:
    """Exited instances that are neither a container's current instance nor its lastState.

    Per container name, the newest instance (whatever its state) is the
    current one and the newest exited instance before it is the lastState
    (`lastState.terminated`, and the log `logs --previous` reads); every older
    exited instance goes. kubelet's container GC keeps MaxPerPodContainer=1
    dead instance per container, but only runs once a minute, so kubectl shows
    the lastState of a container that crashed or restarted.
    **edgelet:** keeps that lastState for as long as the current instance
    stays, so it never vanishes under the user; at most two instances per
    container are ever kept. Instances still alive (or being killed) are never
    listed: the kill step deals with them.
    """
    by_name: dict[str, list[ContainerRecord]] = {}
    for rec in status.containers:
        by_name.setdefault(rec.name, []).append(rec)
    remove: list[str] = []
    for recs in by_name.values():
        recs.sort(key=lambda r: (r.attempt, r.created_at), reverse=True)
        older = [r for r in recs[1:] if r.state == "exited" and r.id not in killing]
        remove.extend(r.id for r in older[1:])
    return tuple(remove)


class _Base(TypedDict):
    """What every decision of one computation carries: the sandbox in use."""

    sandbox_id: str | None
    sandbox_attempt: int


def _actions(
    plan: _Plan,
    *,
    sandbox_id: str | None,
    sandbox_attempt: int,
    next_init: ContainerToStart | None = None,
    remove: tuple[str, ...] = (),
    kill_pod: bool = False,
    create_sandbox: bool = False,
    pod_failed: bool = False,
    pod_finished: bool = False,
) -> PodActions:
    return PodActions(
        kill_pod=kill_pod,
        create_sandbox=create_sandbox,
        sandbox_attempt=sandbox_attempt,
        sandbox_id=sandbox_id,
        containers_to_kill=dict(plan.kill),
        next_init_container=next_init,
        containers_to_start=tuple(plan.start),
        waiting=dict(plan.waiting),
        containers_to_remove=remove,
        pod_failed=pod_failed,
        pod_finished=pod_finished,
    )


def compute_pod_kill(pod: Pod | None, status: PodRuntimeStatus) -> list[str]:
    """Ids of everything of the pod that may still hold a process: containers, then sandboxes.

    The worker stops them all when the pod is removed; order does not matter to it.
    """
    del pod  # the grace period is the worker's business; the set to stop depends only on the runtime
    ids = [c.id for c in status.containers if c.state in ALIVE]
    ids.extend(s.id for s in status.sandboxes if s.state in ALIVE)
    return ids
