"""A pod's API status from its spec and runtime state (kubelet generateAPIPodStatus), and kubectl's summary of it (pure).

KUBELET-SEMANTICS "Phase and conditions". Sources: kubelet_pods.go
(getPhase, convertToAPIContainerStatuses), pkg/kubelet/status/generate.go
(conditions), prober_manager.go UpdatePodStatus (ready/started), and
kubectl's printPod (the STATUS column).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from edgelet.api.pod import is_sidecar, should_restart
from edgelet.api.pod import spec as pod_spec
from edgelet.api.types import (
    ContainerState,
    ContainerStateRunning,
    ContainerStateTerminated,
    ContainerStateWaiting,
    ContainerStatus,
    HostIP,
    PodCondition,
    PodIP,
    PodStatus,
)
from edgelet.plan.actions import sandbox_changed

if TYPE_CHECKING:
    from edgelet.api.types import Container, Pod
    from edgelet.container.types import ContainerRecord, PodRuntimeStatus

CONTAINER_ID_SCHEME = "runc://"

# Condition types in the order kubelet writes them.
READY_TO_START = "PodReadyToStartContainers"
INITIALIZED = "Initialized"
READY = "Ready"
CONTAINERS_READY = "ContainersReady"
SCHEDULED = "PodScheduled"


def format_time(t: float) -> str:
    """Wall time as metav1.Time serialises it: RFC 3339, UTC, whole seconds."""
    return datetime.fromtimestamp(int(t), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _exit_code(rec: ContainerRecord) -> int:
    # KUBELET-SEMANTICS "Exit codes": 255 when the monitor could not tell.
    return rec.exit_code if rec.exit_code is not None else 255


def _terminated(rec: ContainerRecord) -> ContainerState:
    code = _exit_code(rec)
    reason = rec.reason or ("Completed" if code == 0 else "Error")
    # `signal` stays unset, as kubelet leaves it: CRI reports no signal, only 128+n in the exit code.
    return ContainerState(
        terminated=ContainerStateTerminated(
            exit_code=code,
            reason=reason,
            message=rec.termination_message or None,
            started_at=format_time(rec.started_at) if rec.started_at is not None else None,
            finished_at=format_time(rec.finished_at) if rec.finished_at is not None else None,
            container_id=CONTAINER_ID_SCHEME + rec.id,
        )
    )


def _state(rec: ContainerRecord) -> ContainerState:
    if rec.state == "running":
        started = rec.started_at if rec.started_at is not None else rec.created_at
        return ContainerState(running=ContainerStateRunning(started_at=format_time(started)))
    if rec.state == "exited" and rec.never_started:
        # Killed while created (its create's answer was lost: an agent killed mid-create, or a runc that failed
        # after doing the work) and about to be replaced: it never ran, so it is no termination. Shown as one,
        # a Never pod turned Failed, which no later run can undo (the phase is terminal).
        return ContainerState(waiting=ContainerStateWaiting(reason="ContainerCreating"))
    if rec.state == "exited":
        return _terminated(rec)
    if rec.state == "created":
        # kubelet leaves the reason empty for a created container; edgelet names it, since it
        # only lasts between `runc create` and `runc start`.
        return ContainerState(waiting=ContainerStateWaiting(reason="ContainerCreating"))
    # kubelet collapses a state it cannot read into waiting (which keeps the pod Pending).
    return ContainerState(
        waiting=ContainerStateWaiting(
            reason="ContainerStatusUnknown", message="The container state could not be determined"
        )
    )


def _instances(rt: PodRuntimeStatus, name: str) -> list[ContainerRecord]:
    """Every instance of the named container, newest (highest attempt) first."""
    recs = [c for c in rt.containers if c.name == name]
    recs.sort(key=lambda c: (c.attempt, c.created_at), reverse=True)
    return recs


def _container_status(
    pod: Pod,
    container: Container,
    rt: PodRuntimeStatus,
    *,
    is_init: bool,
    waiting: Mapping[str, tuple[str, str]],
    readiness: Mapping[str, bool],
    started: Mapping[str, bool],
) -> ContainerStatus:
    policy = pod_spec(pod).restart_policy or "Always"
    has_init = bool(pod_spec(pod).init_containers)
    recs = _instances(rt, container.name)
    rec = recs[0] if recs else None

    last: ContainerState | None = None
    if rec is None:
        # kubelet: every container of a pod with init containers waits in PodInitializing until created.
        state = ContainerState(
            waiting=ContainerStateWaiting(reason="PodInitializing" if has_init else "ContainerCreating")
        )
    else:
        state = _state(rec)
        previous = next((r for r in recs[1:] if r.state == "exited" and not r.never_started), None)
        if previous is not None:
            last = _terminated(previous)

    override = waiting.get(container.name)
    if override is not None and (rec is None or rec.state != "running"):
        # kubelet's reasonCache: a container that failed to start, or waits to, shows why -- but
        # only if it will start again; the current termination moves to lastState.
        succeeded_init = is_init and rec is not None and rec.state == "exited" and _exit_code(rec) == 0
        restarts = True if (is_init and is_sidecar(container)) else should_restart(rec, policy)
        if restarts and not succeeded_init:
            if state.terminated is not None:
                last = state
            reason, message = override
            state = ContainerState(waiting=ContainerStateWaiting(reason=reason, message=message or None))

    # prober manager UpdatePodStatus: started needs a running container past its startup probe (none = passed);
    # ready needs started, then a passed readiness probe (none = ready).
    running = state.running is not None
    is_started = running and started.get(container.name, True)
    if is_init and not is_sidecar(container):
        # An init container is ready once it completed.
        ready = state.terminated is not None and state.terminated.exit_code == 0
    else:
        ready = is_started and readiness.get(container.name, True)

    return ContainerStatus(
        name=container.name,
        image=(rec.image if rec is not None and rec.image else container.image) or "",
        image_id=rec.image_id if rec is not None else "",
        ready=ready,
        restart_count=rec.attempt if rec is not None else 0,
        container_id=CONTAINER_ID_SCHEME + rec.id if rec is not None else None,
        state=state,
        last_state=last if last is not None else ContainerState(),
        started=is_started,
    )


def _find(statuses: list[ContainerStatus], name: str) -> ContainerStatus | None:
    return next((s for s in statuses if s.name == name), None)


def _has_any_regular_started(pod: Pod, statuses: list[ContainerStatus]) -> bool:
    """kubecontainer.HasAnyRegularContainerStarted."""
    for c in pod_spec(pod).containers or []:
        s = _find(statuses, c.name)
        if s is None or s.state is None:
            continue
        if s.state.running is not None or s.state.terminated is not None:
            return True
        if s.state.waiting is not None and s.last_state is not None and s.last_state.terminated is not None:
            return True
    return False


def compute_phase(pod: Pod, init_statuses: list[ContainerStatus], statuses: list[ContainerStatus]) -> str:
    """kubelet getPhase, line for line (static pods are never marked terminal by the kubelet itself)."""
    spec = pod_spec(pod)
    policy = spec.restart_policy or "Always"
    pending_restartable = pending_regular_init = failed_init = 0
    unknown = running = waiting = stopped = succeeded = 0

    for c in spec.init_containers or []:
        if is_sidecar(c):
            continue  # counted below, with the main containers
        s = _find(init_statuses, c.name)
        if s is None:
            pending_regular_init += 1
        elif s.state is not None and s.state.running is not None:
            pending_regular_init += 1
        elif s.state is not None and s.state.terminated is not None:
            if s.state.terminated.exit_code != 0:
                failed_init += 1
        elif s.state is not None and s.state.waiting is not None:
            if s.last_state is not None and s.last_state.terminated is not None:
                if s.last_state.terminated.exit_code != 0:
                    failed_init += 1
            else:
                pending_regular_init += 1
        else:
            pending_regular_init += 1

    for c in spec.init_containers or []:
        if not is_sidecar(c):
            continue
        s = _find(init_statuses, c.name)
        if s is None:
            unknown += 1
        elif s.state is not None and s.state.running is not None:
            if not s.started:
                pending_restartable += 1
            running += 1
        elif s.state is not None and s.state.terminated is not None:
            pass  # a terminated sidecar counts for nothing
        elif s.state is not None and s.state.waiting is not None:
            if s.last_state is None or s.last_state.terminated is None:
                pending_restartable += 1
        else:
            pending_restartable += 1
            unknown += 1

    for c in spec.containers or []:
        s = _find(statuses, c.name)
        if s is None:
            unknown += 1
        elif s.state is not None and s.state.running is not None:
            running += 1
        elif s.state is not None and s.state.terminated is not None:
            stopped += 1
            if s.state.terminated.exit_code == 0:
                succeeded += 1
        elif s.state is not None and s.state.waiting is not None:
            if s.last_state is not None and s.last_state.terminated is not None:
                stopped += 1
            else:
                waiting += 1
        else:
            unknown += 1

    if failed_init > 0 and policy == "Never":
        return "Failed"
    if pending_regular_init > 0 or (pending_restartable > 0 and not _has_any_regular_started(pod, statuses)):
        return "Pending"
    if waiting > 0:
        return "Pending"
    if running > 0 and unknown == 0:
        return "Running"
    if running == 0 and stopped > 0 and unknown == 0:
        if policy == "Always":
            return "Running"  # every container is on its way to a restart
        if stopped == succeeded:
            return "Succeeded"
        if policy == "Never":
            return "Failed"
        return "Running"  # OnFailure: the failed ones restart
    return "Pending"


def _go_list(names: list[str]) -> str:
    return "[" + " ".join(names) + "]"  # how Go's %s prints a []string


def _initialized_condition(pod: Pod, all_statuses: list[ContainerStatus], phase: str) -> PodCondition:
    """GeneratePodInitializedCondition."""
    unknown: list[str] = []
    incomplete: list[str] = []
    for c in pod_spec(pod).init_containers or []:
        s = _find(all_statuses, c.name)
        if s is None:
            unknown.append(c.name)
        elif is_sidecar(c):
            if not s.started:
                incomplete.append(c.name)
        elif not s.ready:
            incomplete.append(c.name)
    if phase == "Succeeded" and not unknown:
        return PodCondition(type=INITIALIZED, status="True", reason="PodCompleted")
    if _has_any_regular_started(pod, all_statuses):
        return PodCondition(type=INITIALIZED, status="True")
    messages = []
    if unknown:
        messages.append(f"containers with unknown status: {_go_list(unknown)}")
    if incomplete:
        messages.append(f"containers with incomplete status: {_go_list(incomplete)}")
    if messages:
        return PodCondition(
            type=INITIALIZED, status="False", reason="ContainersNotInitialized", message=", ".join(messages)
        )
    return PodCondition(type=INITIALIZED, status="True")


def _containers_ready_condition(pod: Pod, all_statuses: list[ContainerStatus], phase: str) -> PodCondition:
    """GenerateContainersReadyCondition (sidecars count like main containers)."""
    unknown: list[str] = []
    unready: list[str] = []
    wanted = [c for c in pod_spec(pod).init_containers or [] if is_sidecar(c)] + list(pod_spec(pod).containers or [])
    for c in wanted:
        s = _find(all_statuses, c.name)
        if s is None:
            unknown.append(c.name)
        elif not s.ready:
            unready.append(c.name)
    if phase == "Succeeded" and not unknown:
        return PodCondition(type=CONTAINERS_READY, status="False", reason="PodCompleted")
    if phase == "Failed":
        return PodCondition(type=CONTAINERS_READY, status="False", reason="PodFailed")
    messages = []
    if unknown:
        messages.append(f"containers with unknown status: {_go_list(unknown)}")
    if unready:
        messages.append(f"containers with unready status: {_go_list(unready)}")
    if messages:
        return PodCondition(
            type=CONTAINERS_READY, status="False", reason="ContainersNotReady", message=", ".join(messages)
        )
    return PodCondition(type=CONTAINERS_READY, status="True")


def _ready_condition(pod: Pod, containers_ready: PodCondition, conditions: list[PodCondition]) -> PodCondition:
    """GeneratePodReadyCondition: ContainersReady, then the readiness gates (nothing sets their conditions here)."""
    if containers_ready.status != "True":
        return PodCondition(
            type=READY, status=containers_ready.status, reason=containers_ready.reason, message=containers_ready.message
        )
    unready: list[str] = []
    for gate in pod_spec(pod).readiness_gates or []:
        c = next((c for c in conditions if c.type == gate.condition_type), None)
        if c is None:
            unready.append(f'corresponding condition of pod readiness gate "{gate.condition_type}" does not exist.')
        elif c.status != "True":
            unready.append(f'the status of pod readiness gate "{gate.condition_type}" is not "True", but {c.status}')
    if unready:
        return PodCondition(type=READY, status="False", reason="ReadinessGatesNotReady", message=", ".join(unready))
    return PodCondition(type=READY, status="True")


def _with_transition(cond: PodCondition, previous: PodStatus | None, now: float) -> PodCondition:
    """The status manager's lastTransitionTime: kept while the condition's status stays, else `now`."""
    old = next((c for c in (previous.conditions or []) if c.type == cond.type), None) if previous else None
    if old is not None and old.status == cond.status and old.last_transition_time:
        cond.last_transition_time = old.last_transition_time
    else:
        cond.last_transition_time = format_time(now)
    return cond


def compute_pod_status(
    pod: Pod,
    rt: PodRuntimeStatus,
    *,
    waiting: Mapping[str, tuple[str, str]],
    pod_failed: bool,
    now: float,
    previous: PodStatus | None = None,
    readiness: Mapping[str, bool] | None = None,
    started: Mapping[str, bool] | None = None,
    host_ip: str | None = None,
    evicted: tuple[str, str] | None = None,
    rejected: tuple[str, str] | None = None,
) -> PodStatus:
    """The pod's status as kubelet would publish it (generateAPIPodStatus plus the status manager).

    `waiting` names containers that wait and why (CrashLoopBackOff,
    ErrImagePull, CreateContainerError...), from the last sync; `pod_failed`
    is the plan's verdict (an init container failed under restartPolicy
    Never). `readiness` and `started` map a container name to its readiness
    and startup probe verdicts (PodSyncState.ready/started); a running
    container without an entry has no such probe and is ready / started.
    A terminated state's message is the record's termination message, which
    the runtime read. `host_ip` is the node's address: hostIP,
    and podIP of a hostNetwork pod; other pods get their sandbox's CNI
    addresses (none without a CNI network). `previous`, the status published before,
    keeps lastTransitionTime, startTime and a terminal phase (the status
    manager never leaves Succeeded or Failed). `rejected` (reason, message) is
    a pod refused before it ran: kubelet's rejectPod status, Failed with the
    reason and "Pod was rejected: " and no container statuses, so kubectl's
    STATUS column shows the reason.
    """
    from edgelet.api.qos import qos_class

    if rejected is not None:
        return PodStatus(
            phase="Failed",
            reason=rejected[0],
            message=f"Pod was rejected: {rejected[1]}",
            host_ip=host_ip or None,
            host_ips=[HostIP(ip=host_ip)] if host_ip else None,
            qos_class=qos_class(pod),
            start_time=previous.start_time if previous is not None else format_time(now),
        )

    probes = readiness or {}
    startup = started or {}
    inits = list(pod_spec(pod).init_containers or [])
    kw = dict(waiting=waiting, readiness=probes, started=startup)
    init_statuses = [_container_status(pod, c, rt, is_init=True, **kw) for c in inits]  # type: ignore[arg-type]
    statuses = [
        _container_status(pod, c, rt, is_init=False, **kw)  # type: ignore[arg-type]
        for c in pod_spec(pod).containers or []
    ]

    phase = compute_phase(pod, init_statuses, statuses)
    if pod_failed or evicted is not None:
        phase = "Failed"
    if previous is not None and previous.phase in ("Succeeded", "Failed"):
        phase = previous.phase

    conditions = _pod_conditions(pod, rt, init_statuses + statuses, phase, previous, now)
    start_time = previous.start_time if previous is not None else None
    if start_time is None:
        # The status manager stamps the first status; the oldest sandbox stands in for it after an agent restart.
        start_time = format_time(min((s.created_at for s in rt.sandboxes), default=now))

    ips = _pod_ips(pod, rt, host_ip)
    pod_ip = ips[0] if ips else None
    return PodStatus(
        phase=phase,
        conditions=conditions,
        host_ip=host_ip or None,
        host_ips=[HostIP(ip=host_ip)] if host_ip else None,
        pod_ip=pod_ip,
        pod_ips=[PodIP(ip=ip) for ip in ips] or None,
        init_container_statuses=init_statuses or None,
        container_statuses=statuses,
        qos_class=qos_class(pod),
        start_time=start_time,
        # The eviction manager's reason and message, as kubelet's evictPod sets them.
        reason=evicted[0] if evicted is not None else None,
        message=evicted[1] if evicted is not None else None,
    )


def _pod_conditions(
    pod: Pod,
    rt: PodRuntimeStatus,
    all_statuses: list[ContainerStatus],
    phase: str,
    previous: PodStatus | None,
    now: float,
) -> list[PodCondition]:
    """PodReadyToStartContainers, Initialized, Ready, ContainersReady and PodScheduled, each keeping its
    lastTransitionTime from `previous` while its status holds."""
    # GeneratePodReadyToStartContainersCondition: True unless the sandbox must be (re)created.
    sandbox_ready = not sandbox_changed(pod, rt)[0]
    containers_ready = _containers_ready_condition(pod, all_statuses, phase)
    conditions = [
        PodCondition(type=READY_TO_START, status="True" if sandbox_ready else "False"),
        _initialized_condition(pod, all_statuses, phase),
    ]
    conditions += [
        _ready_condition(pod, containers_ready, conditions),
        containers_ready,
        PodCondition(type=SCHEDULED, status="True"),
    ]
    return [_with_transition(c, previous, now) for c in conditions]


def _pod_ips(pod: Pod, rt: PodRuntimeStatus, host_ip: str | None) -> tuple[str, ...]:
    """The node's address for a hostNetwork pod, else the newest running sandbox's CNI addresses (kubelet's
    determinePodSandboxIPs)."""
    if pod_spec(pod).host_network:
        return (host_ip,) if host_ip else ()
    live = [s for s in rt.sandboxes if s.state == "running"]
    return live[0].ips if live else ()


def summarize(pod: Pod, status: PodStatus) -> tuple[str, str, int]:
    """kubectl get pods' READY, STATUS and RESTARTS columns (kubectl printers.go printPod); a Failed pod's own
    status.reason (Evicted) wins over its containers' reasons."""
    spec = pod_spec(pod)
    restarts = 0
    sidecar_restarts = 0
    total = len(spec.containers or [])
    ready_count = 0

    reason = status.phase or ""
    if status.reason:
        reason = status.reason
    for cond in status.conditions or []:
        if cond.type == SCHEDULED and cond.reason == "SchedulingGated":
            reason = "SchedulingGated"

    init_specs = {c.name: c for c in spec.init_containers or []}
    total += sum(1 for c in init_specs.values() if is_sidecar(c))

    initializing = False
    n_init = len(spec.init_containers or [])
    for i, cs in enumerate(status.init_container_statuses or []):
        restarts += cs.restart_count
        c = init_specs.get(cs.name)
        sidecar = c is not None and is_sidecar(c)
        if sidecar:
            sidecar_restarts += cs.restart_count
        st = cs.state or ContainerState()
        if st.terminated is not None and st.terminated.exit_code == 0:
            continue
        if sidecar and cs.started:
            if cs.ready:
                ready_count += 1
            continue
        if st.terminated is not None:
            if not st.terminated.reason:
                if st.terminated.signal:
                    reason = f"Init:Signal:{st.terminated.signal}"
                else:
                    reason = f"Init:ExitCode:{st.terminated.exit_code}"
            else:
                reason = "Init:" + st.terminated.reason
        elif st.waiting is not None and st.waiting.reason and st.waiting.reason != "PodInitializing":
            reason = "Init:" + st.waiting.reason
        else:
            reason = f"Init:{i}/{n_init}"
        initializing = True
        break

    initialized_true = any(c.type == INITIALIZED and c.status == "True" for c in status.conditions or [])
    if not initializing or initialized_true:
        restarts = sidecar_restarts
        has_running = False
        for cs in reversed(status.container_statuses or []):
            restarts += cs.restart_count
            st = cs.state or ContainerState()
            if st.waiting is not None and st.waiting.reason:
                reason = st.waiting.reason
            elif st.terminated is not None and st.terminated.reason:
                reason = st.terminated.reason
            elif st.terminated is not None:
                if st.terminated.signal:
                    reason = f"Signal:{st.terminated.signal}"
                else:
                    reason = f"ExitCode:{st.terminated.exit_code}"
            elif cs.ready and st.running is not None:
                has_running = True
                ready_count += 1
        if reason == "Completed" and has_running:
            pod_ready = any(c.type == READY and c.status == "True" for c in status.conditions or [])
            reason = "Running" if pod_ready else "NotReady"

    if status.reason and status.phase == "Failed":
        # A pod failed as a whole (Evicted, or refused at admission) shows why, not its killed containers'
        # `Error`: `kubectl get pods` shows kubelet's evicted pods as `Evicted`.
        reason = status.reason

    meta = pod.metadata
    if meta is not None and meta.deletion_timestamp and status.phase not in ("Succeeded", "Failed"):
        reason = "Terminating"

    return f"{ready_count}/{total}", reason, restarts
