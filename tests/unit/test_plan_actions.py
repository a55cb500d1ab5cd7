"""compute_pod_actions in the style of kubelet's TestComputePodActions: a base pod and status, mutators, expected actions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import msgspec
import pytest

from edgelet.api.hash import container_hash
from edgelet.api.types import Container, ObjectMeta, Pod, PodSpec
from edgelet.container.types import ContainerRecord, PodRuntimeStatus, SandboxRecord
from edgelet.plan import ContainerToStart, PodActions, compute_pod_actions, compute_pod_kill
from edgelet.plan.actions import go_duration
from edgelet.util.backoff import Backoff

UID = "12345678"
NOW = 5000.0
SB = "sandbox-0"


def base_pod(policy: str = "Always", inits: list[Container] | None = None) -> Pod:
    return Pod(
        metadata=ObjectMeta(name="foo", namespace="new", uid=UID),
        spec=PodSpec(
            containers=[Container(name=n, image="busybox") for n in ("foo1", "foo2", "foo3")],
            init_containers=inits,
            restart_policy=policy,
        ),
    )


def rec(
    pod: Pod,
    name: str,
    state: str = "running",
    *,
    attempt: int = 0,
    exit_code: int | None = None,
    reason: str = "",
    created: float | None = None,
    hash_: str | None = None,
    pid: int | None = None,
    sandbox_id: str = SB,
) -> ContainerRecord:
    spec = {c.name: c for c in [*(pod.spec.init_containers or []), *pod.spec.containers]}.get(name)
    if state == "exited" and exit_code is None:
        exit_code = 0
    return ContainerRecord(
        id=f"{name}-{attempt}",
        pod_uid=UID,
        pod_name="foo",
        pod_namespace="new",
        name=name,
        attempt=attempt,
        spec_hash=hash_ if hash_ is not None else (container_hash(spec) if spec else "x"),
        sandbox_id=sandbox_id,
        state=state,
        pid=pid,
        created_at=created if created is not None else 100.0 + attempt,  # type: ignore[arg-type]
        exit_code=exit_code,
        reason=reason,
    )


def sandbox(
    state: str = "running", attempt: int = 0, sid: str = SB, created: float = 50.0, host_network: bool = False
) -> SandboxRecord:
    return SandboxRecord(
        id=sid,
        pod_uid=UID,
        pod_name="foo",
        pod_namespace="new",
        attempt=attempt,
        state=state,
        pid=1,
        created_at=created,
        host_network=host_network,
    )  # type: ignore[arg-type]


def base_status(pod: Pod) -> PodRuntimeStatus:
    """kubelet's makeBasePodAndStatus: a ready sandbox and every regular container running."""
    return PodRuntimeStatus(
        uid=UID,
        name="foo",
        namespace="new",
        sandboxes=(sandbox(),),
        containers=tuple(rec(pod, c.name) for c in pod.spec.containers),
    )


def set_container(status: PodRuntimeStatus, new: ContainerRecord) -> PodRuntimeStatus:
    others = tuple(c for c in status.containers if c.id != new.id)
    return replace(status, containers=(new, *others))


def drop(status: PodRuntimeStatus, *names: str) -> PodRuntimeStatus:
    return replace(status, containers=tuple(c for c in status.containers if c.name not in names))


def start(name: str, attempt: int = 0, ctype: str = "regular") -> ContainerToStart:
    return ContainerToStart(name=name, attempt=attempt, container_type=ctype)


def crash_msg(name: str, delay: str = "10s") -> tuple[str, str]:
    return ("CrashLoopBackOff", f"back-off {delay} restarting failed container={name} pod=foo_new({UID})")


PodMut = Callable[[Pod], Pod]
StatusMut = Callable[[Pod, PodRuntimeStatus], PodRuntimeStatus]


def policy(p: str) -> PodMut:
    return lambda pod: msgspec.structs.replace(pod, spec=msgspec.structs.replace(pod.spec, restart_policy=p))


def exited(name: str, code: int, attempt: int = 0, reason: str = "") -> StatusMut:
    return lambda pod, s: set_container(s, rec(pod, name, "exited", attempt=attempt, exit_code=code, reason=reason))


def all_exited(code_by_name: dict[str, int]) -> StatusMut:
    def mut(pod: Pod, s: PodRuntimeStatus) -> PodRuntimeStatus:
        for n, code in code_by_name.items():
            s = set_container(s, rec(pod, n, "exited", exit_code=code))
        return s

    return mut


def sandbox_dead(pod: Pod, s: PodRuntimeStatus) -> PodRuntimeStatus:
    return replace(s, sandboxes=(sandbox("exited"),))


def chain(*muts: StatusMut) -> StatusMut:
    def mut(pod: Pod, s: PodRuntimeStatus) -> PodRuntimeStatus:
        for m in muts:
            s = m(pod, s)
        return s

    return mut


def _change_image(pod: Pod) -> Pod:
    cs = list(pod.spec.containers)
    cs[1] = msgspec.structs.replace(cs[1], image="busybox:new")
    return msgspec.structs.replace(pod, spec=msgspec.structs.replace(pod.spec, containers=cs))


NO_ACTION = PodActions(sandbox_id=SB)
RESTART_ALL = (start("foo1", 1), start("foo2", 1), start("foo3", 1))

CASES: list[tuple[str, PodMut | None, StatusMut | None, PodActions]] = [
    ("everything running: nothing to do", None, None, NO_ACTION),
    (
        "start a container that never ran",
        None,
        lambda pod, s: drop(s, "foo3"),
        PodActions(sandbox_id=SB, containers_to_start=(start("foo3"),)),
    ),
    (
        "Always: restart an exited container, next attempt",
        None,
        exited("foo1", 0, attempt=2),
        PodActions(sandbox_id=SB, containers_to_start=(start("foo1", 3),)),
    ),
    ("OnFailure: no restart after success", policy("OnFailure"), exited("foo1", 0), NO_ACTION),
    (
        "OnFailure: restart after failure",
        policy("OnFailure"),
        exited("foo2", 1),
        PodActions(sandbox_id=SB, containers_to_start=(start("foo2", 1),)),
    ),
    ("Never: no restart after failure", policy("Never"), exited("foo2", 1), NO_ACTION),
    (
        "Never: all exited -> pod finished, sandbox stopped, nothing killed",
        policy("Never"),
        all_exited({"foo1": 0, "foo2": 1, "foo3": 0}),
        PodActions(sandbox_id=SB, pod_finished=True),
    ),
    (
        "OnFailure: all succeeded -> pod finished",
        policy("OnFailure"),
        all_exited({"foo1": 0, "foo2": 0, "foo3": 0}),
        PodActions(sandbox_id=SB, pod_finished=True),
    ),
    (
        "dead sandbox: kill the pod, new sandbox, everything again",
        None,
        sandbox_dead,
        PodActions(
            kill_pod=True, create_sandbox=True, sandbox_attempt=1, sandbox_id=SB, containers_to_start=RESTART_ALL
        ),
    ),
    (
        "no sandbox and no containers: first sandbox",
        None,
        lambda pod, s: PodRuntimeStatus(uid=UID),
        PodActions(
            kill_pod=True, create_sandbox=True, containers_to_start=(start("foo1"), start("foo2"), start("foo3"))
        ),
    ),
    (
        "Never, first run: a sandbox is created",
        policy("Never"),
        lambda pod, s: PodRuntimeStatus(uid=UID),
        PodActions(
            kill_pod=True, create_sandbox=True, containers_to_start=(start("foo1"), start("foo2"), start("foo3"))
        ),
    ),
    (
        "Never, dead sandbox after containers ran: no new sandbox, running containers stopped",
        policy("Never"),
        chain(sandbox_dead, exited("foo1", 0)),
        PodActions(
            sandbox_id=SB,
            sandbox_attempt=1,
            pod_finished=True,
            containers_to_kill={
                "foo2-0": "Pod sandbox is gone and restartPolicy is Never",
                "foo3-0": "Pod sandbox is gone and restartPolicy is Never",
            },
        ),
    ),
    (
        # An agent killed while foo1 was created beside its sandbox's CNI ADD (issue 25): nothing ran yet.
        "Never, a sandbox that never started, its first container only created: the pod runs",
        policy("Never"),
        lambda pod, s: replace(s, sandboxes=(sandbox("exited"),), containers=(rec(pod, "foo1", "created", pid=7),)),
        PodActions(
            kill_pod=True,
            create_sandbox=True,
            sandbox_attempt=1,
            sandbox_id=SB,
            containers_to_start=(start("foo1"), start("foo2"), start("foo3")),
        ),
    ),
    (
        "Never, the same once that container was killed (an unknown exit, never started): the pod runs",
        policy("Never"),
        lambda pod, s: replace(
            s,
            sandboxes=(sandbox("exited"),),
            containers=(rec(pod, "foo1", "exited", exit_code=255, reason="ContainerStatusUnknown"),),
        ),
        PodActions(
            kill_pod=True,
            create_sandbox=True,
            sandbox_attempt=1,
            sandbox_id=SB,
            containers_to_start=(start("foo1"), start("foo2"), start("foo3")),
        ),
    ),
    (
        "OnFailure, dead sandbox, all succeeded: no new sandbox",
        policy("OnFailure"),
        chain(sandbox_dead, all_exited({"foo1": 0, "foo2": 0, "foo3": 0})),
        PodActions(sandbox_id=SB, sandbox_attempt=1, pod_finished=True),
    ),
    (
        "OnFailure, dead sandbox: only the unsucceeded containers start again",
        policy("OnFailure"),
        chain(sandbox_dead, all_exited({"foo1": 0, "foo2": 1, "foo3": 0})),
        PodActions(
            kill_pod=True,
            create_sandbox=True,
            sandbox_attempt=1,
            sandbox_id=SB,
            containers_to_start=(start("foo2", 1),),
        ),
    ),
    (
        "two ready sandboxes: recreate",
        None,
        lambda pod, s: replace(s, sandboxes=(sandbox(attempt=1, sid="sb-1", created=60.0), sandbox())),
        PodActions(
            kill_pod=True, create_sandbox=True, sandbox_attempt=2, sandbox_id="sb-1", containers_to_start=RESTART_ALL
        ),
    ),
    (
        "an older dead sandbox next to the ready newest one is fine",
        None,
        lambda pod, s: replace(s, sandboxes=(sandbox(attempt=1, sid="sb-1", created=60.0), sandbox("exited"))),
        PodActions(sandbox_id="sb-1", sandbox_attempt=1),
    ),
    (
        "network mode changed: recreate without a sandbox id",
        None,
        lambda pod, s: replace(s, sandboxes=(sandbox(host_network=True),)),
        PodActions(kill_pod=True, create_sandbox=True, sandbox_attempt=1, containers_to_start=RESTART_ALL),
    ),
    (
        # A CNI CHECK in housekeeping failed (the bridge or veth went): kubelet's answer to a sandbox that is
        # not ready, a new sandbox with a new network.
        "the sandbox's network failed its check: recreate",
        None,
        lambda pod, s: replace(s, sandboxes=(replace(sandbox(), network_ready=False),)),
        PodActions(
            kill_pod=True, create_sandbox=True, sandbox_attempt=1, sandbox_id=SB, containers_to_start=RESTART_ALL
        ),
    ),
    (
        "spec hash changed: kill and restart that container",
        _change_image,
        None,
        PodActions(
            sandbox_id=SB,
            containers_to_kill={"foo2-0": "Container foo2 definition changed, will be restarted"},
            containers_to_start=(start("foo2", 1),),
        ),
    ),
    (
        "spec hash changed under Never: still restarted",
        lambda pod: policy("Never")(_change_image(pod)),
        None,
        PodActions(
            sandbox_id=SB,
            containers_to_kill={"foo2-0": "Container foo2 definition changed, will be restarted"},
            containers_to_start=(start("foo2", 1),),
        ),
    ),
    (
        "running container not in the spec is killed",
        None,
        lambda pod, s: set_container(s, rec(pod, "gone")),
        PodActions(sandbox_id=SB, containers_to_kill={"gone-0": "Container gone is not in the pod spec"}),
    ),
    (
        # Created without a pid (conmon's `runc create` has not written its state): the run never happened, so
        # the attempt number is taken back (no restart counted). With a pid it is started as it is (RESUME_CASES).
        "created container: killed and started again as the same attempt",
        None,
        lambda pod, s: set_container(drop(s, "foo1"), rec(pod, "foo1", "created")),
        PodActions(
            sandbox_id=SB,
            containers_to_kill={"foo1-0": 'Container foo1 is in "created" state, killing it before restart'},
            containers_to_start=(start("foo1", 0),),
        ),
    ),
    (
        "unknown container: killed and started again, even under Never",
        policy("Never"),
        lambda pod, s: set_container(drop(s, "foo1"), rec(pod, "foo1", "unknown")),
        PodActions(
            sandbox_id=SB,
            containers_to_kill={"foo1-0": 'Container foo1 is in "unknown" state, killing it before restart'},
            containers_to_start=(start("foo1", 1),),
        ),
    ),
    (
        "older exited instances are removed, the newest exited one stays for lastState",
        None,
        lambda pod, s: set_container(
            set_container(
                set_container(drop(s, "foo1"), rec(pod, "foo1", "exited", attempt=0, exit_code=1)),
                rec(pod, "foo1", "exited", attempt=1, exit_code=1),
            ),
            rec(pod, "foo1", "running", attempt=2),
        ),
        PodActions(sandbox_id=SB, containers_to_remove=("foo1-0",)),
    ),
]


@pytest.mark.parametrize(("pod_mut", "status_mut", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_compute_pod_actions(pod_mut: PodMut | None, status_mut: StatusMut | None, expected: PodActions) -> None:
    pod = base_pod()
    status = base_status(pod)
    if pod_mut is not None:
        pod = pod_mut(pod)
    if status_mut is not None:
        status = status_mut(pod, status)
    assert compute_pod_actions(pod, status, Backoff(), NOW) == expected


# --- back-off ---


def test_crash_loop_back_off_waits_then_restarts() -> None:
    pod = base_pod()
    status = exited("foo1", 1, attempt=1)(pod, base_status(pod))
    backoff = Backoff()
    backoff.next((UID, "foo1"), NOW - 5)  # the syncer recorded the last restart 5 s ago: delay 10 s
    actions = compute_pod_actions(pod, status, backoff, NOW)
    assert actions == PodActions(sandbox_id=SB, waiting={"foo1": crash_msg("foo1")})
    backoff.next((UID, "foo1"), NOW - 5)  # now 20 s
    assert compute_pod_actions(pod, status, backoff, NOW).waiting == {"foo1": crash_msg("foo1", "20s")}
    # Past the delay the container restarts.
    assert compute_pod_actions(pod, status, backoff, NOW + 20).containers_to_start == (start("foo1", 2),)


def test_back_off_does_not_hold_a_container_that_never_ran_or_other_pods() -> None:
    pod = base_pod()
    backoff = Backoff()
    backoff.next((UID, "foo3"), NOW)
    backoff.next(("other-uid", "foo1"), NOW)
    status = exited("foo1", 1)(pod, drop(base_status(pod), "foo3"))
    actions = compute_pod_actions(pod, status, backoff, NOW)
    assert actions.containers_to_start == (start("foo1", 1), start("foo3", 0))
    assert actions.waiting == {}


def test_back_off_applies_to_containers_started_in_a_new_sandbox() -> None:
    pod = base_pod()
    status = chain(sandbox_dead, exited("foo1", 1, attempt=3))(pod, base_status(pod))
    backoff = Backoff()
    backoff.next((UID, "foo1"), NOW)
    actions = compute_pod_actions(pod, status, backoff, NOW)
    assert actions.create_sandbox and actions.kill_pod
    assert actions.containers_to_start == (start("foo2", 1), start("foo3", 1))
    assert actions.waiting == {"foo1": crash_msg("foo1")}


def test_a_waiting_container_keeps_the_pod_from_finishing() -> None:
    pod = policy("OnFailure")(base_pod())
    status = all_exited({"foo1": 0, "foo2": 1, "foo3": 0})(pod, base_status(pod))
    backoff = Backoff()
    backoff.next((UID, "foo2"), NOW)
    actions = compute_pod_actions(pod, status, backoff, NOW)
    assert not actions.pod_finished
    assert actions.waiting == {"foo2": crash_msg("foo2")}


# --- probes ---


@pytest.mark.parametrize(
    ("restart_policy", "probe", "expected"),
    [
        (
            "Always",
            "liveness",
            PodActions(
                sandbox_id=SB,
                containers_to_kill={"foo1-0": "Container foo1 failed liveness probe, will be restarted"},
                containers_to_start=(start("foo1", 1),),
            ),
        ),
        (
            "OnFailure",
            "startup",
            PodActions(
                sandbox_id=SB,
                containers_to_kill={"foo1-0": "Container foo1 failed startup probe, will be restarted"},
                containers_to_start=(start("foo1", 1),),
            ),
        ),
        (
            "Never",
            "liveness",
            PodActions(sandbox_id=SB, containers_to_kill={"foo1-0": "Container foo1 failed liveness probe"}),
        ),
        ("Always", "readiness", NO_ACTION),
    ],
)
def test_probe_failures(restart_policy: str, probe: str, expected: PodActions) -> None:
    pod = policy(restart_policy)(base_pod())
    actions = compute_pod_actions(pod, base_status(pod), Backoff(), NOW, probe_failures={"foo1-0": probe})
    assert actions == expected


# --- init containers (kubelet TestComputePodActionsWithInitContainers) ---

INITS = [Container(name="init1", image="busybox"), Container(name="init2", image="busybox")]


def init_pod(restart_policy: str = "Always") -> Pod:
    return base_pod(restart_policy, inits=list(INITS))


def init_status(pod: Pod, *records: ContainerRecord) -> PodRuntimeStatus:
    return PodRuntimeStatus(uid=UID, sandboxes=(sandbox(),), containers=records)


INIT_CASES: list[tuple[str, str, Callable[[Pod], tuple[ContainerRecord, ...]], PodActions]] = [
    (
        "nothing ran: first init container",
        "Always",
        lambda p: (),
        PodActions(sandbox_id=SB, next_init_container=start("init1", 0, "init")),
    ),
    ("first init running: wait", "Always", lambda p: (rec(p, "init1"),), NO_ACTION),
    (
        "first init done: second",
        "Always",
        lambda p: (rec(p, "init1", "exited"),),
        PodActions(sandbox_id=SB, next_init_container=start("init2", 0, "init")),
    ),
    (
        "all init done: regular containers",
        "Always",
        lambda p: (rec(p, "init1", "exited"), rec(p, "init2", "exited")),
        PodActions(sandbox_id=SB, containers_to_start=(start("foo1"), start("foo2"), start("foo3"))),
    ),
    (
        "init failed: retried",
        "Always",
        lambda p: (rec(p, "init1", "exited", exit_code=1),),
        PodActions(sandbox_id=SB, next_init_container=start("init1", 1, "init")),
    ),
    (
        "init failed under OnFailure: retried",
        "OnFailure",
        lambda p: (rec(p, "init1", "exited", exit_code=2),),
        PodActions(sandbox_id=SB, next_init_container=start("init1", 1, "init")),
    ),
    (
        "init OOM-killed with exit 0 still counts as failed",
        "Always",
        lambda p: (rec(p, "init1", "exited", exit_code=0, reason="OOMKilled"),),
        PodActions(sandbox_id=SB, next_init_container=start("init1", 1, "init")),
    ),
    (
        "init failed under Never: pod failed",
        "Never",
        lambda p: (rec(p, "init1", "exited"), rec(p, "init2", "exited", exit_code=1)),
        PodActions(sandbox_id=SB, pod_failed=True, pod_finished=True),
    ),
    (
        "init created: killed and started again as the same attempt",
        "Always",
        lambda p: (rec(p, "init1", "created"),),
        PodActions(
            sandbox_id=SB,
            containers_to_kill={"init1-0": 'Container init1 is in "created" state, killing it before restart'},
            next_init_container=start("init1", 0, "init"),
        ),
    ),
    (
        "a never-started init killed into an unknown exit: same attempt, under Never too",
        "Never",
        lambda p: (rec(p, "init1", "exited", exit_code=255, reason="ContainerStatusUnknown"),),
        PodActions(sandbox_id=SB, next_init_container=start("init1", 0, "init")),
    ),
    (
        "regular containers exist: initialized even without init records",
        "Always",
        lambda p: tuple(rec(p, c.name) for c in p.spec.containers),
        NO_ACTION,
    ),
]


@pytest.mark.parametrize(
    ("restart_policy", "records", "expected"), [c[1:] for c in INIT_CASES], ids=[c[0] for c in INIT_CASES]
)
def test_init_containers(
    restart_policy: str, records: Callable[[Pod], tuple[ContainerRecord, ...]], expected: PodActions
) -> None:
    pod = init_pod(restart_policy)
    assert compute_pod_actions(pod, init_status(pod, *records(pod)), Backoff(), NOW) == expected


def test_failed_init_container_in_back_off_waits() -> None:
    pod = init_pod()
    backoff = Backoff()
    backoff.next((UID, "init1"), NOW)
    actions = compute_pod_actions(pod, init_status(pod, rec(pod, "init1", "exited", exit_code=1)), backoff, NOW)
    assert actions == PodActions(sandbox_id=SB, waiting={"init1": crash_msg("init1")})


def test_new_sandbox_restarts_initialization_from_the_first_init_container() -> None:
    pod = init_pod()
    records = (rec(pod, "init1", "exited"), rec(pod, "init2", "exited"), rec(pod, "foo1", "exited", exit_code=1))
    status = PodRuntimeStatus(uid=UID, sandboxes=(sandbox("exited"),), containers=records)
    actions = compute_pod_actions(pod, status, Backoff(), NOW)
    assert actions == PodActions(
        kill_pod=True,
        create_sandbox=True,
        sandbox_attempt=1,
        sandbox_id=SB,
        next_init_container=start("init1", 1, "init"),
    )


# --- sidecars (init containers with restartPolicy Always) ---


def sidecar_pod(restart_policy: str = "Always") -> Pod:
    return base_pod(restart_policy, inits=[Container(name="side", image="busybox", restart_policy="Always"), INITS[0]])


def test_sidecar_starts_first_and_counts_as_initialized_once_running() -> None:
    pod = sidecar_pod()
    assert compute_pod_actions(pod, init_status(pod), Backoff(), NOW).next_init_container == start("side", 0, "init")
    actions = compute_pod_actions(pod, init_status(pod, rec(pod, "side")), Backoff(), NOW)
    assert actions.next_init_container == start("init1", 0, "init")
    actions = compute_pod_actions(pod, init_status(pod, rec(pod, "side"), rec(pod, "init1", "exited")), Backoff(), NOW)
    assert actions.containers_to_start == (start("foo1"), start("foo2"), start("foo3"))


def test_sidecar_restarts_whatever_the_pod_policy_and_stops_with_the_main_containers() -> None:
    pod = sidecar_pod("Never")
    mains = [rec(pod, c.name) for c in pod.spec.containers]
    status = init_status(pod, rec(pod, "side", "exited", exit_code=0), rec(pod, "init1", "exited"), *mains)
    assert compute_pod_actions(pod, status, Backoff(), NOW).containers_to_start == (start("side", 1, "init"),)
    # The main containers are done: the sidecar is stopped, not restarted.
    done = [rec(pod, c.name, "exited") for c in pod.spec.containers]
    status = init_status(pod, rec(pod, "side"), rec(pod, "init1", "exited"), *done)
    actions = compute_pod_actions(pod, status, Backoff(), NOW)
    assert actions == PodActions(
        sandbox_id=SB, pod_finished=True, containers_to_kill={"side-0": "All main containers have finished"}
    )


def test_compute_pod_kill_lists_everything_alive() -> None:
    pod = base_pod()
    status = exited("foo1", 0)(pod, base_status(pod))
    status = replace(status, sandboxes=(sandbox(), sandbox("exited", sid="old")))
    assert sorted(compute_pod_kill(pod, status)) == sorted(["foo2-0", "foo3-0", SB])
    assert compute_pod_kill(None, PodRuntimeStatus(uid=UID)) == []


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(10, "10s"), (20, "20s"), (80, "1m20s"), (160, "2m40s"), (300, "5m0s"), (0, "0s"), (3700, "1h1m40s")],
)
def test_go_duration(seconds: float, text: str) -> None:
    assert go_duration(seconds) == text


# --- sidecars: startup gate, restarts during initialization, stop order (kubelet TestComputePodActionsWithRestartableInitContainers) ---


def two_sidecars_pod(restart_policy: str = "Always") -> Pod:
    return base_pod(
        restart_policy,
        inits=[
            Container(name="side1", image="busybox", restart_policy="Always"),
            INITS[0],
            Container(name="side2", image="busybox", restart_policy="Always"),
        ],
    )


SIDECAR_CASES: list[tuple[str, str, Callable[[Pod], tuple[ContainerRecord, ...]], dict[str, bool], PodActions]] = [
    (
        "sidecar running, startup probe not passed: the next init waits",
        "Always",
        lambda p: (rec(p, "side1"),),
        {"side1": False},
        NO_ACTION,
    ),
    (
        "sidecar running and started: the next init starts",
        "Always",
        lambda p: (rec(p, "side1"),),
        {"side1": True},
        PodActions(sandbox_id=SB, next_init_container=start("init1", 0, "init")),
    ),
    (
        "sidecar running without a startup probe counts as started",
        "Never",
        lambda p: (rec(p, "side1"), rec(p, "init1", "exited")),
        {},
        PodActions(sandbox_id=SB, next_init_container=start("side2", 0, "init")),
    ),
    (
        "sidecar exited during initialization: restarted even under Never",
        "Never",
        lambda p: (rec(p, "side1", "exited", exit_code=1), rec(p, "init1")),
        {},
        PodActions(sandbox_id=SB, next_init_container=start("side1", 1, "init")),
    ),
    (
        "second sidecar not started yet: main containers wait",
        "Always",
        lambda p: (rec(p, "side1"), rec(p, "init1", "exited"), rec(p, "side2")),
        {"side2": False},
        NO_ACTION,
    ),
    (
        "all initialized: main containers start",
        "OnFailure",
        lambda p: (rec(p, "side1"), rec(p, "init1", "exited"), rec(p, "side2")),
        {"side2": True},
        PodActions(sandbox_id=SB, containers_to_start=(start("foo1"), start("foo2"), start("foo3"))),
    ),
    (
        "init container fails under Never: the running sidecar is killed, the pod fails",
        "Never",
        lambda p: (rec(p, "side1"), rec(p, "init1", "exited", exit_code=3)),
        {},
        PodActions(
            sandbox_id=SB,
            pod_failed=True,
            pod_finished=True,
            containers_to_kill={"side1-0": "Init container failed and restartPolicy is Never"},
        ),
    ),
    (
        "main containers done under OnFailure: sidecars stop, last started first",
        "OnFailure",
        lambda p: (
            rec(p, "side1"),
            rec(p, "init1", "exited"),
            rec(p, "side2"),
            *(rec(p, c.name, "exited") for c in p.spec.containers),
        ),
        {},
        PodActions(
            sandbox_id=SB,
            pod_finished=True,
            containers_to_kill={
                "side2-0": "All main containers have finished",
                "side1-0": "All main containers have finished",
            },
        ),
    ),
    (
        "main containers done under Always: restarted, sidecars keep running",
        "Always",
        lambda p: (
            rec(p, "side1"),
            rec(p, "init1", "exited"),
            rec(p, "side2"),
            *(rec(p, c.name, "exited") for c in p.spec.containers),
        ),
        {},
        PodActions(sandbox_id=SB, containers_to_start=(start("foo1", 1), start("foo2", 1), start("foo3", 1))),
    ),
]


@pytest.mark.parametrize(
    ("restart_policy", "records", "started", "expected"),
    [c[1:] for c in SIDECAR_CASES],
    ids=[c[0] for c in SIDECAR_CASES],
)
def test_sidecars(
    restart_policy: str,
    records: Callable[[Pod], tuple[ContainerRecord, ...]],
    started: dict[str, bool],
    expected: PodActions,
) -> None:
    pod = two_sidecars_pod(restart_policy)
    actions = compute_pod_actions(pod, init_status(pod, *records(pod)), Backoff(), NOW, started=started)
    assert actions == expected
    assert list(actions.containers_to_kill) == list(expected.containers_to_kill)  # the order is the stop order


def test_sidecar_in_back_off_holds_initialization() -> None:
    pod = two_sidecars_pod()
    backoff = Backoff()
    backoff.next((UID, "side1"), NOW)
    status = init_status(pod, rec(pod, "side1", "exited", exit_code=1))
    assert compute_pod_actions(pod, status, backoff, NOW) == PodActions(
        sandbox_id=SB, waiting={"side1": crash_msg("side1")}
    )


# --- which exited instances go (the current instance and its lastState stay) ---


def _instances(pod: Pod, name: str, *states: str, code: int = 1) -> tuple[ContainerRecord, ...]:
    """Instances of `name` with attempts 0, 1, ... in the given states (the last one is the newest)."""
    return tuple(
        rec(pod, name, st, attempt=i, exit_code=code if st == "exited" else None) for i, st in enumerate(states)
    )


REMOVE_CASES = [
    ("one exited instance: it is the current one", "Always", ("exited",), ()),
    ("running after one failure: the failure is lastState", "Always", ("exited", "running"), ()),
    ("exited after a failure (crash loop): current and lastState stay", "Always", ("exited", "exited"), ()),
    ("exited after two failures: the oldest goes", "Always", ("exited", "exited", "exited"), ("foo1-0",)),
    ("running after two failures: the oldest goes", "Always", ("exited", "exited", "running"), ("foo1-0",)),
    ("many older instances all go", "Always", ("exited",) * 5 + ("running",), ("foo1-0", "foo1-1", "foo1-2", "foo1-3")),
    ("OnFailure done after a failure: both stay (lastState shows the failure)", "OnFailure", ("exited", "exited"), ()),
    (
        "an older instance still alive is the kill step's business",
        "Always",
        ("unknown", "exited", "exited", "running"),
        ("foo1-1",),
    ),
]


@pytest.mark.parametrize(
    ("restart_policy", "states", "removed"), [c[1:] for c in REMOVE_CASES], ids=[c[0] for c in REMOVE_CASES]
)
def test_old_instances_are_removed_but_the_current_one_and_its_last_state_stay(
    restart_policy: str, states: tuple[str, ...], removed: tuple[str, ...]
) -> None:
    pod = base_pod(restart_policy)
    status = replace(
        drop(base_status(pod), "foo1"),
        containers=(*_instances(pod, "foo1", *states), *drop(base_status(pod), "foo1").containers),
    )
    assert sorted(compute_pod_actions(pod, status, Backoff(), NOW).containers_to_remove) == list(removed)


def test_init_container_instances_follow_the_same_rule() -> None:
    pod = init_pod()
    status = init_status(pod, *_instances(pod, "init1", "exited", "exited", "exited"))
    assert compute_pod_actions(pod, status, Backoff(), NOW).containers_to_remove == ("init1-0",)


def test_a_container_being_killed_is_not_removed() -> None:
    pod = base_pod()
    old = _instances(pod, "foo1", "exited", "exited")
    # foo1's spec changed while its newest instance runs: that one is killed, the older exited ones follow the rule.
    running = rec(pod, "foo1", "running", attempt=2, hash_="stale")
    status = replace(base_status(pod), containers=(*old, running, *drop(base_status(pod), "foo1").containers))
    actions = compute_pod_actions(pod, status, Backoff(), NOW)
    assert "foo1-2" in actions.containers_to_kill
    assert actions.containers_to_remove == ("foo1-0",)


def test_a_never_started_container_under_never_gets_its_one_run() -> None:
    pod = base_pod("Never")
    status = set_container(
        drop(base_status(pod), "foo1"), rec(pod, "foo1", "exited", exit_code=255, reason="ContainerStatusUnknown")
    )
    actions = compute_pod_actions(pod, status, Backoff(), NOW)
    assert actions.containers_to_start == (start("foo1", 0),)


def resume(name: str, attempt: int = 0, ctype: str = "regular") -> ContainerToStart:
    return ContainerToStart(name=name, attempt=attempt, container_type=ctype, existing=f"{name}-{attempt}")


# An agent killed between a container's `runc create` and its `runc start` (issue 21): the instance runc holds
# created, its init process waiting under conmon, is the desired one and is started as it is; anything that
# makes it not the desired one (or not startable) kills and replaces it as before.
KILL_CREATED = {"foo1-0": 'Container foo1 is in "created" state, killing it before restart'}
RESUME_CASES = [
    (
        "created with a pid in the sandbox in use, same spec: started as it is",
        lambda p: rec(p, "foo1", "created", pid=42),
        frozenset(),
        PodActions(sandbox_id=SB, containers_to_start=(resume("foo1"),)),
    ),
    (
        "a created restart keeps its attempt (restartCount stays, nothing killed)",
        lambda p: rec(p, "foo1", "created", pid=42, attempt=3),
        frozenset(),
        PodActions(sandbox_id=SB, containers_to_start=(resume("foo1", 3),)),
    ),
    (
        "its spec changed since: killed and replaced",
        lambda p: rec(p, "foo1", "created", pid=42, hash_="stale"),
        frozenset(),
        PodActions(sandbox_id=SB, containers_to_kill=KILL_CREATED, containers_to_start=(start("foo1", 0),)),
    ),
    (
        "created in an older sandbox: killed and replaced",
        lambda p: rec(p, "foo1", "created", pid=42, sandbox_id="sandbox-old"),
        frozenset(),
        PodActions(sandbox_id=SB, containers_to_kill=KILL_CREATED, containers_to_start=(start("foo1", 0),)),
    ),
    (
        "no pid (runc has not written its state): killed and replaced",
        lambda p: rec(p, "foo1", "created"),
        frozenset(),
        PodActions(sandbox_id=SB, containers_to_kill=KILL_CREATED, containers_to_start=(start("foo1", 0),)),
    ),
    (
        "its start already failed in this agent: killed and replaced",
        lambda p: rec(p, "foo1", "created", pid=42),
        frozenset({"foo1-0"}),
        PodActions(sandbox_id=SB, containers_to_kill=KILL_CREATED, containers_to_start=(start("foo1", 0),)),
    ),
    # The agent died before it read conmon's answer to `runc create`, and conmon with it: started, the
    # instance's exit would be recorded nowhere (255 ContainerStatusUnknown for good, chaos seed 21).
    (
        "its conmon is gone: killed and replaced",
        lambda p: replace(rec(p, "foo1", "created", pid=42), monitored=False),
        frozenset(),
        PodActions(sandbox_id=SB, containers_to_kill=KILL_CREATED, containers_to_start=(start("foo1", 0),)),
    ),
]


@pytest.mark.parametrize(
    ("record", "start_failed", "expected"), [c[1:] for c in RESUME_CASES], ids=[c[0] for c in RESUME_CASES]
)
def test_a_created_never_started_instance(
    record: Callable[[Pod], ContainerRecord], start_failed: frozenset[str], expected: PodActions
) -> None:
    pod = base_pod()
    status = set_container(drop(base_status(pod), "foo1"), record(pod))
    assert compute_pod_actions(pod, status, Backoff(), NOW, start_failed=start_failed) == expected


def test_a_created_init_container_is_started_as_it_is() -> None:
    pod = init_pod()
    status = init_status(pod, rec(pod, "init1", "created", pid=42))
    assert compute_pod_actions(pod, status, Backoff(), NOW) == PodActions(
        sandbox_id=SB, next_init_container=resume("init1", 0, "init")
    )


def test_a_created_instance_is_not_started_in_a_new_sandbox() -> None:
    pod = base_pod()
    status = replace(
        set_container(drop(base_status(pod), "foo1"), rec(pod, "foo1", "created", pid=42)),
        sandboxes=(sandbox("exited"),),
    )
    actions = compute_pod_actions(pod, status, Backoff(), NOW)
    assert actions.create_sandbox and all(s.existing is None for s in actions.containers_to_start)
