"""kubelet's getPhase table (kubelet_pods_test TestPodPhaseWith*), probe verdicts, IPs, QoS and termination messages."""

from __future__ import annotations

from dataclasses import replace

import msgspec
import pytest

from edgelet.api.types import (
    Container,
    ContainerState,
    ContainerStateRunning,
    ContainerStateTerminated,
    ContainerStateWaiting,
    ContainerStatus,
    ObjectMeta,
    Pod,
    PodReadinessGate,
    PodSpec,
    ResourceRequirements,
)
from edgelet.container.types import ContainerRecord, PodRuntimeStatus, SandboxRecord
from edgelet.status.compute import compute_phase, compute_pod_status, format_time, summarize

NOW = 1_700_000_100.0
T0 = 1_700_000_000.0


def pod_of(policy: str, inits: tuple[str, ...] = (), sidecars: tuple[str, ...] = ()) -> Pod:
    init_containers = [
        Container(name=n, image="busybox", restart_policy="Always" if n in sidecars else None) for n in inits
    ]
    return Pod(
        metadata=ObjectMeta(name="p", namespace="default", uid="u"),
        spec=PodSpec(
            containers=[Container(name="containerA", image="busybox"), Container(name="containerB", image="busybox")],
            init_containers=init_containers or None,
            restart_policy=policy,
        ),
    )


# kubelet_pods_test's state helpers.
def running(name: str, started: bool = True) -> ContainerStatus:
    return ContainerStatus(
        name=name,
        image="",
        image_id="",
        ready=False,
        restart_count=0,
        started=started,
        state=ContainerState(running=ContainerStateRunning()),
    )


def stopped(name: str, code: int = 0) -> ContainerStatus:
    return ContainerStatus(
        name=name,
        image="",
        image_id="",
        ready=False,
        restart_count=0,
        state=ContainerState(terminated=ContainerStateTerminated(exit_code=code)),
    )


def succeeded(name: str) -> ContainerStatus:
    return stopped(name, 0)


def failed(name: str) -> ContainerStatus:
    return stopped(name, 42)


def waiting(name: str) -> ContainerStatus:
    return ContainerStatus(
        name=name,
        image="",
        image_id="",
        ready=False,
        restart_count=0,
        state=ContainerState(waiting=ContainerStateWaiting(reason="dummy")),
    )


def waiting_after(name: str, code: int) -> ContainerStatus:
    s = waiting(name)
    s.last_state = ContainerState(terminated=ContainerStateTerminated(exit_code=code))
    return s


A, B = "containerA", "containerB"

# (kubelet test name, pod, init statuses, statuses, phase)
PHASE_CASES: list[tuple[str, Pod, list[ContainerStatus], list[ContainerStatus], str]] = [
    # TestPodPhaseWithRestartAlways
    ("Always: all running", pod_of("Always"), [], [running(A), running(B)], "Running"),
    ("Always: all stopped", pod_of("Always"), [], [stopped(A), stopped(B)], "Running"),
    ("Always: mixed state #1", pod_of("Always"), [], [running(A), stopped(B)], "Running"),
    ("Always: mixed state #2", pod_of("Always"), [], [running(A)], "Pending"),
    ("Always: mixed state #3", pod_of("Always"), [], [running(A), waiting(B)], "Pending"),
    ("Always: backoff crashloop container", pod_of("Always"), [], [running(A), waiting_after(B, 42)], "Running"),
    # TestPodPhaseWithRestartAlwaysInitContainers
    ("Always init: init container running", pod_of("Always", ("init",)), [running("init")], [], "Pending"),
    ("Always init: init container terminated non-zero", pod_of("Always", ("init",)), [failed("init")], [], "Pending"),
    (
        "Always init: init waiting, terminated zero",
        pod_of("Always", ("init",)),
        [waiting_after("init", 0)],
        [],
        "Pending",
    ),
    (
        "Always init: init waiting, terminated non-zero",
        pod_of("Always", ("init",)),
        [waiting_after("init", 1)],
        [],
        "Pending",
    ),
    ("Always init: init waiting, not terminated", pod_of("Always", ("init",)), [waiting("init")], [], "Pending"),
    (
        "Always init: init succeeded",
        pod_of("Always", ("init",)),
        [succeeded("init")],
        [running(A), running(B)],
        "Running",
    ),
    # TestPodPhaseWithRestartAlwaysRestartableInitContainers
    ("sidecar running, not started", pod_of("Always", ("s",), ("s",)), [running("s", started=False)], [], "Pending"),
    ("sidecar stopped", pod_of("Always", ("s",), ("s",)), [stopped("s")], [], "Pending"),
    ("sidecar waiting, terminated zero", pod_of("Always", ("s",), ("s",)), [waiting_after("s", 0)], [], "Pending"),
    ("sidecar waiting, terminated non-zero", pod_of("Always", ("s",), ("s",)), [waiting_after("s", 1)], [], "Pending"),
    ("sidecar waiting, not terminated", pod_of("Always", ("s",), ("s",)), [waiting("s")], [], "Pending"),
    ("sidecar started, 1/2 regular running", pod_of("Always", ("s",), ("s",)), [running("s")], [running(A)], "Pending"),
    (
        "sidecar started, all regular running",
        pod_of("Always", ("s",), ("s",)),
        [running("s")],
        [running(A), running(B)],
        "Running",
    ),
    (
        "sidecar running (not started), all regular running",
        pod_of("Always", ("s",), ("s",)),
        [running("s", started=False)],
        [running(A), running(B)],
        "Running",
    ),
    (
        "sidecar started, all regular stopped",
        pod_of("Always", ("s",), ("s",)),
        [running("s")],
        [stopped(A), stopped(B)],
        "Running",
    ),
    (
        "sidecar in backoff, all regular running",
        pod_of("Always", ("s",), ("s",)),
        [waiting_after("s", 1)],
        [running(A), running(B)],
        "Running",
    ),
    (
        "sidecar in backoff, regular waiting after termination",
        pod_of("Always", ("s",), ("s",)),
        [waiting_after("s", 1)],
        [waiting_after(A, 1), waiting_after(B, 1)],
        "Running",
    ),
    # TestPodPhaseWithRestartNever
    ("Never: all running", pod_of("Never"), [], [running(A), running(B)], "Running"),
    ("Never: all succeeded", pod_of("Never"), [], [succeeded(A), succeeded(B)], "Succeeded"),
    ("Never: all failed", pod_of("Never"), [], [failed(A), failed(B)], "Failed"),
    ("Never: mixed state #1", pod_of("Never"), [], [running(A), succeeded(B)], "Running"),
    ("Never: mixed state #2", pod_of("Never"), [], [running(A)], "Pending"),
    ("Never: mixed state #3", pod_of("Never"), [], [running(A), waiting(B)], "Pending"),
    # TestPodPhaseWithRestartNeverInitContainers
    ("Never init: init running", pod_of("Never", ("init",)), [running("init")], [], "Pending"),
    ("Never init: init terminated non-zero", pod_of("Never", ("init",)), [failed("init")], [], "Failed"),
    (
        "Never init: init waiting, terminated zero",
        pod_of("Never", ("init",)),
        [waiting_after("init", 0)],
        [],
        "Pending",
    ),
    (
        "Never init: init waiting, terminated non-zero",
        pod_of("Never", ("init",)),
        [waiting_after("init", 1)],
        [],
        "Failed",
    ),
    (
        "Never init: init succeeded",
        pod_of("Never", ("init",)),
        [succeeded("init")],
        [succeeded(A), succeeded(B)],
        "Succeeded",
    ),
    # TestPodPhaseWithRestartNeverRestartableInitContainers
    (
        "Never sidecar: started, all regular succeeded",
        pod_of("Never", ("s",), ("s",)),
        [running("s")],
        [succeeded(A), succeeded(B)],
        "Running",
    ),
    (
        "Never sidecar: stopped, all regular succeeded",
        pod_of("Never", ("s",), ("s",)),
        [stopped("s", 137)],
        [succeeded(A), succeeded(B)],
        "Succeeded",
    ),
    (
        "Never sidecar: stopped, a regular failed",
        pod_of("Never", ("s",), ("s",)),
        [stopped("s", 137)],
        [succeeded(A), failed(B)],
        "Failed",
    ),
    (
        "Never sidecar and init: init failed",
        pod_of("Never", ("s", "init"), ("s",)),
        [running("s"), failed("init")],
        [],
        "Failed",
    ),
    # TestPodPhaseWithRestartOnFailure
    ("OnFailure: all running", pod_of("OnFailure"), [], [running(A), running(B)], "Running"),
    ("OnFailure: all succeeded", pod_of("OnFailure"), [], [succeeded(A), succeeded(B)], "Succeeded"),
    ("OnFailure: all failed", pod_of("OnFailure"), [], [failed(A), failed(B)], "Running"),
    ("OnFailure: mixed state #1", pod_of("OnFailure"), [], [running(A), succeeded(B)], "Running"),
    ("OnFailure: mixed state #2", pod_of("OnFailure"), [], [running(A)], "Pending"),
    ("OnFailure: mixed state #3", pod_of("OnFailure"), [], [running(A), waiting(B)], "Pending"),
    ("OnFailure: backoff crashloop container", pod_of("OnFailure"), [], [running(A), waiting_after(B, 42)], "Running"),
]


@pytest.mark.parametrize(
    ("pod", "inits", "statuses", "phase"), [c[1:] for c in PHASE_CASES], ids=[c[0] for c in PHASE_CASES]
)
def test_get_phase(pod: Pod, inits: list[ContainerStatus], statuses: list[ContainerStatus], phase: str) -> None:
    assert compute_phase(pod, inits, statuses) == phase


# --- compute_pod_status over runtime records ---


def rec(
    name: str, state: str = "running", *, attempt: int = 0, code: int | None = None, ctype: str = "regular"
) -> ContainerRecord:
    return ContainerRecord(
        id=f"{name}-{attempt}",
        pod_uid="u",
        pod_name="p",
        pod_namespace="default",
        name=name,
        attempt=attempt,
        spec_hash="h",
        sandbox_id="sb",
        state=state,
        pid=None,
        created_at=T0 + attempt,  # type: ignore[arg-type]
        started_at=T0 + 1,
        finished_at=T0 + 10 + attempt if state == "exited" else None,
        exit_code=code,
        reason=("Completed" if code == 0 else "Error") if state == "exited" else "",
        container_type=ctype,  # type: ignore[arg-type]
        log_path=f"/nonexistent/{name}/{attempt}.log",
    )


def rt(*records: ContainerRecord, sandbox: str = "running") -> PodRuntimeStatus:
    sb = SandboxRecord(
        id="sb", pod_uid="u", pod_name="p", pod_namespace="default", attempt=0, state=sandbox, pid=1, created_at=T0
    )  # type: ignore[arg-type]
    return PodRuntimeStatus(uid="u", name="p", namespace="default", sandboxes=(sb,), containers=records)


def cond(status, type_: str) -> tuple[str, str | None, str | None]:
    c = next(c for c in status.conditions if c.type == type_)
    return c.status, c.reason, c.message


def test_sidecar_past_its_startup_probe_initializes_the_pod() -> None:
    pod = pod_of("Always", ("s",), ("s",))
    not_yet = compute_pod_status(
        pod, rt(rec("s", ctype="init")), waiting={}, pod_failed=False, now=NOW, started={"s": False}
    )
    assert not_yet.phase == "Pending"
    side = not_yet.init_container_statuses[0]  # type: ignore[index]
    assert (side.started, side.ready) == (False, False)  # not ready before started, whatever readiness says
    assert cond(not_yet, "Initialized") == (
        "False",
        "ContainersNotInitialized",
        "containers with incomplete status: [s]",
    )
    assert summarize(pod, not_yet) == ("0/3", "Init:0/1", 0)
    done = compute_pod_status(
        pod, rt(rec("s", ctype="init")), waiting={}, pod_failed=False, now=NOW, started={"s": True}
    )
    assert done.init_container_statuses[0].started is True  # type: ignore[index]
    assert cond(done, "Initialized") == ("True", None, None)


def test_started_and_ready_from_the_probe_verdicts() -> None:
    pod = pod_of("Always")
    status = compute_pod_status(
        pod,
        rt(rec(A), rec(B)),
        waiting={},
        pod_failed=False,
        now=NOW,
        started={A: False},
        readiness={A: True, B: False},
    )
    a, b = status.container_statuses  # type: ignore[misc]
    assert (a.started, a.ready) == (False, False)
    assert (b.started, b.ready) == (True, False)
    assert cond(status, "ContainersReady") == (
        "False",
        "ContainersNotReady",
        "containers with unready status: [containerA containerB]",
    )


def test_readiness_gates_without_conditions_keep_the_pod_unready() -> None:
    pod = pod_of("Always")
    pod.spec.readiness_gates = [PodReadinessGate(condition_type="example.com/feature")]
    status = compute_pod_status(pod, rt(rec(A), rec(B)), waiting={}, pod_failed=False, now=NOW)
    assert cond(status, "ContainersReady") == ("True", None, None)
    assert cond(status, "Ready") == (
        "False",
        "ReadinessGatesNotReady",
        'corresponding condition of pod readiness gate "example.com/feature" does not exist.',
    )


def test_condition_order_and_first_transition_times() -> None:
    status = compute_pod_status(pod_of("Always"), rt(rec(A), rec(B)), waiting={}, pod_failed=False, now=NOW)
    assert [c.type for c in status.conditions or []] == [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ]
    assert {c.last_transition_time for c in status.conditions or []} == {format_time(NOW)}
    again = compute_pod_status(
        pod_of("Always"),
        rt(rec(A), rec(B, "exited", code=1)),
        waiting={},
        pod_failed=False,
        now=NOW + 30,
        previous=status,
    )
    times = {c.type: c.last_transition_time for c in again.conditions or []}
    assert times["Ready"] == format_time(NOW + 30) and times["PodScheduled"] == format_time(NOW)


def test_dead_sandbox_is_not_ready_to_start_containers() -> None:
    status = compute_pod_status(pod_of("Always"), rt(rec(A), sandbox="exited"), waiting={}, pod_failed=False, now=NOW)
    assert cond(status, "PodReadyToStartContainers")[0] == "False"


@pytest.mark.parametrize(("host_network", "pod_ip"), [(True, "192.0.2.7"), (False, None)])
def test_host_and_pod_ips(host_network: bool, pod_ip: str | None) -> None:
    pod = pod_of("Always")
    pod.spec.host_network = host_network
    status = compute_pod_status(pod, rt(rec(A), rec(B)), waiting={}, pod_failed=False, now=NOW, host_ip="192.0.2.7")
    assert status.host_ip == "192.0.2.7" and [h.ip for h in status.host_ips or []] == ["192.0.2.7"]
    assert status.pod_ip == pod_ip
    assert [p.ip for p in status.pod_ips or []] == ([pod_ip] if pod_ip else [])


def test_dual_stack_pod_ips_from_cni_reach_the_status() -> None:
    """IPv4 and IPv6 from a dual-stack CNI result: podIP is the IPv4 one, podIPs has both, as kubelet."""
    from dataclasses import replace

    from edgelet.network.result import pod_ips

    ips = pod_ips({"ips": [{"address": "fd00:89::5/64"}, {"address": "10.89.0.5/16"}]})
    runtime = rt(rec(A), rec(B))
    runtime = replace(runtime, sandboxes=(replace(runtime.sandboxes[0], ips=ips),))
    status = compute_pod_status(pod_of("Always"), runtime, waiting={}, pod_failed=False, now=NOW, host_ip="192.0.2.7")
    assert status.pod_ip == "10.89.0.5"
    assert [p.ip for p in status.pod_ips or []] == ["10.89.0.5", "fd00:89::5"]
    from edgelet.runtime.bundle import build_hosts_file

    assert build_hosts_file("p", pod_ips=list(ips)).endswith("10.89.0.5\tp\nfd00:89::5\tp\n")


def test_qos_class() -> None:
    pod = pod_of("Always")
    assert compute_pod_status(pod, rt(), waiting={}, pod_failed=False, now=NOW).qos_class == "BestEffort"
    for c in pod.spec.containers:
        c.resources = ResourceRequirements(limits={"cpu": "100m", "memory": "64Mi"})
    assert compute_pod_status(pod, rt(), waiting={}, pod_failed=False, now=NOW).qos_class == "Guaranteed"


def test_termination_messages_in_state_and_last_state() -> None:
    # The runtime read them into the records (edgelet.runtime.termination); status only carries them.
    pod = pod_of("Always")
    records = (
        replace(rec(A, "exited", attempt=1, code=2), termination_message="second"),
        replace(rec(A, "exited", attempt=0, code=1), termination_message="first"),
        rec(B),
    )
    status = compute_pod_status(pod, rt(*records), waiting={}, pod_failed=False, now=NOW)
    a = status.container_statuses[0]  # type: ignore[index]
    assert a.state.terminated.message == "second"  # type: ignore[union-attr]
    assert a.last_state.terminated.message == "first"  # type: ignore[union-attr]
    assert a.state.terminated.signal is None  # type: ignore[union-attr]
    encoded = msgspec.json.decode(msgspec.json.encode(status))
    assert encoded["containerStatuses"][1]["lastState"] == {}
