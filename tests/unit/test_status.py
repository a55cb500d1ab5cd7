"""compute_pod_status (kubelet generateAPIPodStatus/getPhase) and summarize (kubectl printPod), table-driven."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import pytest

from edgelet.api.types import Container, ContainerStatus, ObjectMeta, Pod, PodSpec, PodStatus
from edgelet.container.types import ContainerRecord, PodRuntimeStatus, SandboxRecord
from edgelet.status.compute import compute_pod_status, format_time, summarize

UID = "uid-1"
NOW = 1_700_000_100.0
T0 = 1_700_000_000.0


def mkpod(
    policy: str = "Always", names: tuple[str, ...] = ("foo1", "foo2", "foo3"), inits: list[Container] | None = None
) -> Pod:
    return Pod(
        metadata=ObjectMeta(name="foo", namespace="default", uid=UID),
        spec=PodSpec(
            containers=[Container(name=n, image=f"img/{n}:1") for n in names],
            init_containers=inits,
            restart_policy=policy,
        ),
    )


def rec(
    name: str,
    state: str = "running",
    *,
    attempt: int = 0,
    code: int | None = None,
    reason: str = "",
    started: float | None = T0 + 1,
    finished: float | None = None,
) -> ContainerRecord:
    if state == "exited":
        finished = finished if finished is not None else T0 + 10 + attempt
    return ContainerRecord(
        id=f"{name}-{attempt}",
        pod_uid=UID,
        pod_name="foo",
        pod_namespace="default",
        name=name,
        attempt=attempt,
        spec_hash="h",
        sandbox_id="sb",
        state=state,
        pid=None,
        created_at=T0 + attempt,  # type: ignore[arg-type]
        started_at=started if state != "created" else None,
        finished_at=finished,
        exit_code=code,
        reason=reason,
        image=f"img/{name}:1",
        image_id=f"sha256:{name}",
    )


def rt(*records: ContainerRecord, sandbox: str | None = "running") -> PodRuntimeStatus:
    sbs = (
        ()
        if sandbox is None
        else (
            SandboxRecord(
                id="sb",
                pod_uid=UID,
                pod_name="foo",
                pod_namespace="default",
                attempt=0,
                state=sandbox,
                pid=1,
                created_at=T0,
            ),
        )
    )  # type: ignore[arg-type]
    return PodRuntimeStatus(uid=UID, name="foo", namespace="default", sandboxes=sbs, containers=records)


def running_all(*names: str) -> tuple[ContainerRecord, ...]:
    return tuple(rec(n) for n in names)


def status_of(
    pod: Pod, runtime: PodRuntimeStatus, waiting: dict | None = None, pod_failed: bool = False, **kw: object
) -> PodStatus:
    return compute_pod_status(pod, runtime, waiting=waiting or {}, pod_failed=pod_failed, now=NOW, **kw)  # type: ignore[arg-type]


def cond(status: PodStatus, type_: str) -> tuple[str, str | None, str | None]:
    c = next(c for c in status.conditions or [] if c.type == type_)
    return c.status, c.reason, c.message


def cs(status: PodStatus, name: str) -> ContainerStatus:
    return next(
        c for c in [*(status.init_container_statuses or []), *(status.container_statuses or [])] if c.name == name
    )


INIT2 = [Container(name="init1", image="img/init:1"), Container(name="init2", image="img/init:1")]

# (id, pod, runtime, waiting, pod_failed, phase, (ready, STATUS, restarts))
CASES: list[tuple[str, Pod, PodRuntimeStatus, dict, bool, str, tuple[str, str, int]]] = [
    ("nothing yet", mkpod(), rt(sandbox=None), {}, False, "Pending", ("0/3", "ContainerCreating", 0)),
    ("all running", mkpod(), rt(*running_all("foo1", "foo2", "foo3")), {}, False, "Running", ("3/3", "Running", 0)),
    (
        "one still being created",
        mkpod(),
        rt(rec("foo1"), rec("foo2"), rec("foo3", "created")),
        {},
        False,
        "Pending",
        ("2/3", "ContainerCreating", 0),
    ),
    (
        "crash loop",
        mkpod(),
        rt(rec("foo1", "exited", attempt=2, code=1), rec("foo2"), rec("foo3")),
        {"foo1": ("CrashLoopBackOff", "back-off 40s restarting failed container=foo1 pod=foo_default(uid-1)")},
        False,
        "Running",
        ("2/3", "CrashLoopBackOff", 2),
    ),
    (
        "image never pulled",
        mkpod(),
        rt(rec("foo2"), rec("foo3")),
        {"foo1": ("ErrImageNeverPull", 'Container image "img/foo1:1" is not present with pull policy of Never')},
        False,
        "Pending",
        ("2/3", "ErrImageNeverPull", 0),
    ),
    (
        "Never, all succeeded",
        mkpod("Never"),
        rt(*(rec(n, "exited", code=0) for n in ("foo1", "foo2", "foo3"))),
        {},
        False,
        "Succeeded",
        ("0/3", "Completed", 0),
    ),
    (
        "Never, first failed",
        mkpod("Never"),
        rt(rec("foo1", "exited", code=3), rec("foo2", "exited", code=0), rec("foo3", "exited", code=0)),
        {},
        False,
        "Failed",
        ("0/3", "Error", 0),
    ),
    (
        "OnFailure, one failed and restarting",
        mkpod("OnFailure"),
        rt(rec("foo1", "exited", code=0), rec("foo2", "exited", code=1), rec("foo3", "exited", code=0)),
        {},
        False,
        "Running",
        ("0/3", "Completed", 0),
    ),
    (
        "Always, all exited: still Running",
        mkpod(),
        rt(*(rec(n, "exited", code=0) for n in ("foo1", "foo2", "foo3"))),
        {},
        False,
        "Running",
        ("0/3", "Completed", 0),
    ),
    (
        "completed next to a running one shows NotReady",
        mkpod(),
        rt(rec("foo1"), rec("foo2", "exited", code=0), rec("foo3")),
        {},
        False,
        "Running",
        ("2/3", "NotReady", 0),
    ),
    (
        "OOM killed",
        mkpod(),
        rt(rec("foo1", "exited", code=137, reason="OOMKilled"), rec("foo2"), rec("foo3")),
        {},
        False,
        "Running",
        ("2/3", "OOMKilled", 0),
    ),
    ("first init running", mkpod(inits=list(INIT2)), rt(rec("init1")), {}, False, "Pending", ("0/3", "Init:0/2", 0)),
    (
        "second init pending",
        mkpod(inits=list(INIT2)),
        rt(rec("init1", "exited", code=0)),
        {},
        False,
        "Pending",
        ("0/3", "Init:1/2", 0),
    ),
    (
        "init crash looping",
        mkpod(inits=list(INIT2)),
        rt(rec("init1", "exited", attempt=1, code=1)),
        {"init1": ("CrashLoopBackOff", "back-off 10s ...")},
        False,
        "Pending",
        ("0/3", "Init:CrashLoopBackOff", 1),
    ),
    (
        "init failed under Never",
        mkpod("Never", inits=list(INIT2)),
        rt(rec("init1", "exited", code=1)),
        {},
        True,
        "Failed",
        ("0/3", "Init:Error", 0),
    ),
    (
        "init done, main containers not created",
        mkpod(inits=list(INIT2)),
        rt(rec("init1", "exited", code=0), rec("init2", "exited", code=0)),
        {},
        False,
        "Pending",
        ("0/3", "PodInitializing", 0),
    ),
    (
        "init done, main running",
        mkpod(inits=list(INIT2)),
        rt(rec("init1", "exited", code=0), rec("init2", "exited", code=0), *running_all("foo1", "foo2", "foo3")),
        {},
        False,
        "Running",
        ("3/3", "Running", 0),
    ),
]


@pytest.mark.parametrize(
    ("pod", "runtime", "waiting", "pod_failed", "phase", "summary"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_phase_and_summary(
    pod: Pod, runtime: PodRuntimeStatus, waiting: dict, pod_failed: bool, phase: str, summary: tuple[str, str, int]
) -> None:
    status = status_of(pod, runtime, waiting, pod_failed)
    assert status.phase == phase
    assert summarize(pod, status) == summary
    # Whatever we compute must encode as a valid PodStatus.
    assert msgspec.json.decode(msgspec.json.encode(status), type=PodStatus) == status


def test_running_container_status_fields() -> None:
    status = status_of(mkpod(), rt(*running_all("foo1", "foo2", "foo3")))
    c = cs(status, "foo1")
    assert c.state is not None and c.state.running is not None
    assert c.state.running.started_at == "2023-11-14T22:13:21Z"
    assert (c.ready, c.started, c.restart_count) == (True, True, 0)
    assert (c.container_id, c.image, c.image_id) == ("runc://foo1-0", "img/foo1:1", "sha256:foo1")
    assert c.last_state is not None and c.last_state.terminated is None
    assert status.start_time == format_time(T0)
    assert [x.type for x in status.conditions or []] == [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ]
    assert all(x.status == "True" for x in status.conditions or [])
    assert status.init_container_statuses is None


def test_waiting_container_status_fields() -> None:
    status = status_of(mkpod(), rt(sandbox=None))
    c = cs(status, "foo1")
    assert c.state is not None and c.state.waiting is not None and c.state.waiting.reason == "ContainerCreating"
    assert (c.ready, c.started, c.restart_count, c.container_id, c.image, c.image_id) == (
        False,
        False,
        0,
        None,
        "img/foo1:1",
        "",
    )
    assert cond(status, "PodReadyToStartContainers") == ("False", None, None)
    assert cond(status, "Ready") == ("False", "ContainersNotReady", "containers with unready status: [foo1 foo2 foo3]")
    assert cond(status, "ContainersReady")[0] == "False"
    assert cond(status, "Initialized") == ("True", None, None)
    assert cond(status, "PodScheduled") == ("True", None, None)
    assert status.start_time == format_time(NOW)  # the status manager stamps the first status it sees


def test_terminated_state_and_last_state_from_the_previous_instance() -> None:
    runtime = rt(
        rec("foo1", "exited", attempt=0, code=2),
        rec("foo1", "running", attempt=1, started=T0 + 20),
        rec("foo2"),
        rec("foo3", "exited", code=None),
    )
    status = status_of(mkpod(), runtime)
    c = cs(status, "foo1")
    assert c.restart_count == 1 and c.container_id == "runc://foo1-1"
    assert c.last_state is not None and c.last_state.terminated is not None
    t = c.last_state.terminated
    assert (t.exit_code, t.reason, t.container_id) == (2, "Error", "runc://foo1-0")
    assert (t.started_at, t.finished_at) == (format_time(T0 + 1), format_time(T0 + 10))
    unknown_code = cs(status, "foo3").state.terminated  # type: ignore[union-attr]
    assert unknown_code is not None and unknown_code.exit_code == 255 and unknown_code.reason == "Error"


def test_waiting_override_moves_the_termination_to_last_state() -> None:
    status = status_of(
        mkpod(),
        rt(rec("foo1", "exited", attempt=3, code=1), rec("foo2"), rec("foo3")),
        {"foo1": ("CrashLoopBackOff", "back-off 1m20s")},
    )
    c = cs(status, "foo1")
    assert c.state is not None and c.state.waiting is not None
    assert (c.state.waiting.reason, c.state.waiting.message) == ("CrashLoopBackOff", "back-off 1m20s")
    assert c.last_state is not None and c.last_state.terminated is not None and c.last_state.terminated.exit_code == 1
    assert c.restart_count == 3


@pytest.mark.parametrize(
    ("policy", "code", "shown"),
    [("Never", 1, "terminated"), ("OnFailure", 0, "terminated"), ("OnFailure", 1, "waiting"), ("Always", 0, "waiting")],
)
def test_waiting_override_only_for_containers_that_will_restart(policy: str, code: int, shown: str) -> None:
    status = status_of(
        mkpod(policy, names=("foo1",)), rt(rec("foo1", "exited", code=code)), {"foo1": ("CrashLoopBackOff", "x")}
    )
    state = cs(status, "foo1").state
    assert state is not None
    assert (state.waiting is not None) == (shown == "waiting")


def test_readiness_probe_results() -> None:
    status = status_of(mkpod(), rt(*running_all("foo1", "foo2", "foo3")), readiness={"foo2": False})
    assert [c.ready for c in status.container_statuses or []] == [True, False, True]
    assert cond(status, "Ready") == ("False", "ContainersNotReady", "containers with unready status: [foo2]")
    assert summarize(mkpod(), status) == ("2/3", "Running", 0)


def test_init_conditions_and_ready_init_containers() -> None:
    pod = mkpod(inits=list(INIT2))
    status = status_of(pod, rt(rec("init1", "exited", code=0), rec("init2")))
    assert cond(status, "Initialized") == (
        "False",
        "ContainersNotInitialized",
        "containers with incomplete status: [init2]",
    )
    assert cs(status, "init1").ready is True and cs(status, "init2").ready is False
    assert cs(status, "foo1").state.waiting.reason == "PodInitializing"  # type: ignore[union-attr]


def test_succeeded_pod_conditions() -> None:
    pod = mkpod("OnFailure", names=("foo1",))
    status = status_of(pod, rt(rec("foo1", "exited", code=0)))
    assert status.phase == "Succeeded"
    assert cond(status, "ContainersReady") == ("False", "PodCompleted", None)
    assert cond(status, "Ready") == ("False", "PodCompleted", None)


def test_failed_pod_conditions() -> None:
    pod = mkpod("Never", names=("foo1",))
    status = status_of(pod, rt(rec("foo1", "exited", code=1)))
    assert status.phase == "Failed"
    assert cond(status, "ContainersReady") == ("False", "PodFailed", None)


def test_previous_status_keeps_transition_times_start_time_and_terminal_phase() -> None:
    pod = mkpod("Never", names=("foo1",))
    first = status_of(pod, rt(rec("foo1")), previous=PodStatus())
    assert {c.last_transition_time for c in first.conditions or []} == {format_time(NOW)}
    later = compute_pod_status(
        pod, rt(rec("foo1", "exited", code=0)), waiting={}, pod_failed=False, now=NOW + 50, previous=first
    )
    assert later.phase == "Succeeded"
    assert cond(later, "PodScheduled")[0] == "True"
    assert next(c for c in later.conditions or [] if c.type == "PodScheduled").last_transition_time == format_time(NOW)
    assert next(c for c in later.conditions or [] if c.type == "Ready").last_transition_time == format_time(NOW + 50)
    assert later.start_time == first.start_time
    # A terminal phase never changes back (kubelet's status manager).
    again = compute_pod_status(pod, rt(rec("foo1")), waiting={}, pod_failed=False, now=NOW + 60, previous=later)
    assert again.phase == "Succeeded"


def test_terminating_and_signal_statuses() -> None:
    pod = mkpod()
    pod = msgspec.structs.replace(
        pod, metadata=msgspec.structs.replace(pod.metadata, deletion_timestamp="2023-11-14T22:15:00Z")
    )
    status = status_of(pod, rt(*running_all("foo1", "foo2", "foo3")))
    assert summarize(pod, status)[1] == "Terminating"


@pytest.mark.parametrize(
    "records, ready",
    [
        ((rec("foo1", "exited", code=137), rec("foo2", "exited", code=137), rec("foo3", "exited", code=0)), "0/3"),
        ((rec("foo1", "exited", code=137), rec("foo2"), rec("foo3")), "2/3"),  # containers still being stopped
        ((), "0/3"),
    ],
)
def test_an_evicted_pod_shows_evicted_not_its_killed_containers_error(records: tuple, ready: str) -> None:
    """The pod's status.reason wins the STATUS column, as `kubectl get pods` shows an evicted pod (issue 23)."""
    pod = mkpod()
    status = compute_pod_status(
        pod,
        rt(*records),
        waiting={},
        pod_failed=False,
        now=NOW,
        evicted=("Evicted", "The node was low on resource: memory. "),
    )
    status = msgspec.structs.replace(status, phase="Failed")
    assert summarize(pod, status)[:2] == (ready, "Evicted")
    # A reason without a Failed phase is not a pod-level failure: the containers decide, as before.
    if records:
        assert summarize(pod, msgspec.structs.replace(status, phase="Running"))[1] == "Error"


SIDECAR = Container(name="side", image="img/side:1", restart_policy="Always")


def test_sidecar_counts_in_ready_and_initialization() -> None:
    pod = mkpod(names=("foo1",), inits=[SIDECAR])
    status = status_of(pod, rt(rec("side", attempt=1), rec("foo1")))
    assert status.phase == "Running"
    assert cond(status, "Initialized")[0] == "True"
    assert summarize(pod, status) == ("2/2", "Running", 1)
    starting = status_of(pod, rt())
    assert starting.phase == "Pending"
    assert summarize(pod, starting) == ("0/2", "Init:0/1", 0)


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda t: msgspec.structs.replace(t, reason=None, signal=9), "Signal:9"),
        (lambda t: msgspec.structs.replace(t, reason=None, exit_code=3), "ExitCode:3"),
    ],
)
def test_summarize_terminated_without_reason(mutate: Callable, expected: str) -> None:
    pod = mkpod("Never", names=("foo1",))
    status = status_of(pod, rt(rec("foo1", "exited", code=1)))
    c = status.container_statuses[0]  # type: ignore[index]
    c.state.terminated = mutate(c.state.terminated)  # type: ignore[union-attr]
    assert summarize(pod, status)[1] == expected


def test_a_container_that_never_started_is_no_restart_and_no_last_state() -> None:
    """An agent killed between `runc create` and `runc start` (issue 16): the next agent kills the created
    instance (exit 255, unknown) and starts the same attempt; a Never pod shows restartCount 0."""
    from edgelet.api.types import Container, ObjectMeta, Pod, PodSpec
    from edgelet.container.types import ContainerRecord, PodRuntimeStatus, SandboxRecord
    from edgelet.status.compute import compute_pod_status

    pod = Pod(
        metadata=ObjectMeta(name="job", namespace="default", uid="u"),
        spec=PodSpec(restart_policy="Never", containers=[Container(name="app", image="busybox")]),
    )
    sb = SandboxRecord(
        id="s", pod_uid="u", pod_name="job", pod_namespace="default", attempt=0, state="running", pid=1, created_at=1.0
    )
    killed = ContainerRecord(
        id="old",
        pod_uid="u",
        pod_name="job",
        pod_namespace="default",
        name="app",
        attempt=0,
        spec_hash="h",
        sandbox_id="s",
        state="exited",
        pid=None,
        created_at=2.0,
        exit_code=255,
        reason="ContainerStatusUnknown",
        finished_at=3.0,
    )
    done = ContainerRecord(
        id="new",
        pod_uid="u",
        pod_name="job",
        pod_namespace="default",
        name="app",
        attempt=0,
        spec_hash="h",
        sandbox_id="s",
        state="exited",
        pid=None,
        created_at=4.0,
        started_at=4.5,
        finished_at=5.0,
        exit_code=0,
        reason="Completed",
    )
    # Before its replacement ran: still creating, not a failure (a Failed phase would stick for good; chaos
    # test with a runc failing after the work, make test).
    between = compute_pod_status(
        pod,
        PodRuntimeStatus(uid="u", name="job", namespace="default", sandboxes=(sb,), containers=(killed,)),
        waiting={},
        pod_failed=False,
        now=3.5,
    )
    (cs,) = between.container_statuses
    assert cs.state.waiting is not None and cs.state.waiting.reason == "ContainerCreating", cs.state
    assert cs.last_state.terminated is None and between.phase == "Pending"
    status = compute_pod_status(
        pod,
        PodRuntimeStatus(uid="u", name="job", namespace="default", sandboxes=(sb,), containers=(killed, done)),
        waiting={},
        pod_failed=False,
        now=10.0,
        previous=between,
    )
    (cs,) = status.container_statuses
    assert cs.restart_count == 0 and cs.state.terminated.exit_code == 0
    assert cs.last_state.terminated is None
    assert status.phase == "Succeeded"
