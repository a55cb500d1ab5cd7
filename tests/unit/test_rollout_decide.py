"""Decision tables for the rollout state machine and its health gate (edgelet.rollout.decide)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from edgelet.rollout.decide import (
    ContainerObs,
    GateObs,
    Observation,
    Policy,
    Record,
    after_reboot,
    assess_gate,
    changes_what_runs,
    condition,
    decide,
    gate_clock_offset,
    retry,
    start,
)

P = Policy(deadline=60.0, window=10.0)


def ok(name: str = "app", restarts: int = 0) -> ContainerObs:
    return ContainerObs(name, started=True, restarts=restarts)


def waiting(reason: str, message: str = "", name: str = "app") -> ContainerObs:
    return ContainerObs(name, waiting=reason, message=message)


READY = GateObs(phase="Running", ready=True, containers=(ok(),))


@pytest.mark.parametrize(
    "gate, now, ready_since, restarts_at_ready, want, why",
    [
        (None, 5.0, None, 0, "pending", ""),
        (None, 60.0, None, 0, "failed", "deadline: the pod has not started"),
        (GateObs(phase="Pending", containers=(ContainerObs("app"),)), 61.0, None, 0, "failed", "not started: app"),
        (GateObs(phase="Running", containers=(ok(),)), 61.0, None, 0, "failed", "not Ready"),
        (READY, 5.0, None, 0, "pending", ""),  # the window starts
        (READY, 14.0, 5.0, 0, "pending", ""),
        (READY, 15.0, 5.0, 0, "good", "no restart for 10s"),
        (READY, 200.0, 5.0, 0, "good", ""),  # Ready within the deadline: the window may end after it
        (GateObs(phase="Running", ready=True, containers=(ok(restarts=1),)), 15.0, 5.0, 0, "pending", ""),  # restarted
        (
            GateObs(phase="Running", containers=(waiting("CrashLoopBackOff", "back-off 10s"),)),
            3.0,
            None,
            0,
            "failed",
            "CrashLoopBackOff",
        ),
        (
            GateObs(containers=(waiting("CreateContainerConfigError", "no key"),)),
            1.0,
            None,
            0,
            "failed",
            "CreateContainerConfigError: no key",
        ),
        (GateObs(containers=(waiting("ErrImagePull", "manifest unknown"),)), 1.0, None, 0, "failed", "ErrImagePull"),
        (GateObs(containers=(waiting("ErrImagePull", "connection timed out"),)), 1.0, None, 0, "pending", ""),
        (GateObs(containers=(waiting("ImagePullBackOff", "Back-off"),)), 1.0, None, 0, "pending", ""),
        (
            GateObs(
                restart_policy="Never",
                init_containers=(ContainerObs("init", exit_code=3),),
                containers=(ContainerObs("app"),),
            ),
            1.0,
            None,
            0,
            "failed",
            "init container init failed",
        ),
        (
            GateObs(
                restart_policy="OnFailure",
                init_containers=(ContainerObs("init", exit_code=3, restarts=0),),
                containers=(ContainerObs("app"),),
            ),
            1.0,
            None,
            0,
            "pending",
            "",
        ),
        (
            GateObs(restart_policy="Never", phase="Succeeded", containers=(ContainerObs("job", exit_code=0),)),
            1.0,
            None,
            0,
            "good",
            "succeeded",
        ),
        (
            GateObs(restart_policy="Never", phase="Failed", containers=(ContainerObs("job", exit_code=2),)),
            1.0,
            None,
            0,
            "failed",
            "job exited 2",
        ),
        # A run-to-completion pod that runs and is Ready is not good yet: only success is.
        (
            GateObs(restart_policy="OnFailure", phase="Running", ready=True, containers=(ok("job"),)),
            30.0,
            1.0,
            0,
            "pending",
            "",
        ),
    ],
)
def test_gate(gate, now, ready_since, restarts_at_ready, want, why):
    v = assess_gate(
        gate, started_at=0.0, now=now, policy=P, ready_since=ready_since, restarts_at_ready=restarts_at_ready
    )
    assert v.outcome == want
    assert why in v.reason


def test_gate_window_restarts_after_a_restart():
    v = assess_gate(
        GateObs(phase="Running", ready=True, containers=(ok(restarts=2),)),
        started_at=0.0,
        now=20.0,
        policy=P,
        ready_since=5.0,
        restarts_at_ready=1,
    )
    assert (v.outcome, v.ready_since, v.restarts_at_ready) == ("pending", 20.0, 2)


GOOD_V1 = Record(name="ns/p", phase="good", target="v1", active="v1", last_good="v1")


def steps(rec: Record, *rounds: tuple[float, Observation]) -> list[Record]:
    out = []
    for now, obs in rounds:
        rec = decide(rec, obs, now, P).record
        out.append(rec)
    return out


def test_first_version_runs_at_once_and_becomes_good():
    rec = start("ns/p", "v1", 0.0)
    assert (rec.phase, rec.active, rec.last_good) == ("gating", "v1", None)
    r1, r2 = steps(rec, (1.0, Observation("v1", gate=READY)), (12.0, Observation("v1", gate=READY)))
    assert r1.phase == "gating" and r1.ready_since == 1.0
    assert (r2.phase, r2.last_good) == ("good", "v1")


def test_first_version_failing_has_nothing_to_roll_back_to():
    d = decide(
        start("ns/p", "v1", 0.0), Observation("v1", gate=GateObs(containers=(waiting("CrashLoopBackOff"),))), 1.0, P
    )
    assert (d.record.phase, d.record.active) == ("failed", "v1")
    assert "no last good version" in d.record.reason
    assert [e.reason for e in d.events] == ["RolloutFailed"]


def test_new_version_pulls_while_the_old_runs():
    d = decide(GOOD_V1, Observation("v2"), 1.0, P)
    assert (d.record.phase, d.record.active, d.record.target, d.pull) == ("pulling", "v1", "v2", True)
    # The pull fails: v1 keeps running, the reason is said, the pull is asked for again.
    d2 = decide(d.record, Observation("v2", pull_error="ErrImagePull: manifest unknown"), 2.0, P)
    assert (d2.record.phase, d2.record.active, d2.pull) == ("pulling", "v1", True)
    assert "manifest unknown" in d2.record.reason
    assert condition(d2.record) is not None and condition(d2.record)[0] == "RolloutPulling"


def test_replace_gate_good():
    rec = decide(GOOD_V1, Observation("v2"), 1.0, P).record
    r_replacing, r_wait, r_gating, r_ready, r_good = steps(
        rec,
        (2.0, Observation("v2", pulled=True, running=frozenset({"v1"}))),
        (3.0, Observation("v2", pulled=True, running=frozenset({"v1"}))),  # v1 still stopping
        (4.0, Observation("v2", pulled=True, running=frozenset())),
        (5.0, Observation("v2", pulled=True, running=frozenset({"v2"}), gate=READY)),
        (16.0, Observation("v2", pulled=True, running=frozenset({"v2"}), gate=READY)),
    )
    assert (r_replacing.phase, r_replacing.active) == ("replacing", "v2")
    assert r_wait.phase == "replacing"
    assert (r_gating.phase, r_gating.since) == ("gating", 4.0)
    assert r_ready.ready_since == 5.0
    assert (r_good.phase, r_good.last_good, r_good.active) == ("good", "v2", "v2")
    assert [h.outcome for h in r_good.history if h.hash == "v2"] == ["pulling", "gating", "good"]


def test_failed_version_rolls_back_and_is_blocked():
    gating = Record(name="ns/p", phase="gating", target="v2", active="v2", last_good="v1", since=0.0)
    crash = GateObs(phase="Running", containers=(waiting("CrashLoopBackOff", "back-off 20s"),))
    d = decide(gating, Observation("v2", running=frozenset({"v2"}), gate=crash), 3.0, P)
    assert (d.record.phase, d.record.active, d.record.blocked) == ("rolling-back", "v1", "v2")
    assert [e.reason for e in d.events] == ["RollingBack"]
    still = decide(d.record, Observation("v2", running=frozenset({"v2"})), 4.0, P)
    assert still.record.phase == "rolling-back"
    done = decide(d.record, Observation("v2", running=frozenset({"v1"})), 5.0, P)
    assert (done.record.phase, done.record.active) == ("rolled-back", "v1")
    assert done.events[0].reason == "RolledBack" and "v2" in done.events[0].message
    assert "CrashLoopBackOff" in done.events[0].message
    assert condition(done.record)[0] == "RolledBack"
    # Steady: the same manifest is not tried again.
    again = decide(done.record, Observation("v2", running=frozenset({"v1"})), 100.0, P)
    assert again.record == done.record and not again.pull
    # A new manifest is.
    v3 = decide(done.record, Observation("v3", running=frozenset({"v1"})), 101.0, P)
    assert (v3.record.phase, v3.record.active, v3.record.target, v3.record.blocked) == ("pulling", "v1", "v3", None)
    # So is the blocked one, when the operator asks.
    r = retry(done.record, 102.0)
    assert (r.phase, r.active, r.target, r.blocked) == ("pulling", "v1", "v2", None)


def test_deadline_rolls_back():
    gating = Record(name="ns/p", phase="gating", target="v2", active="v2", last_good="v1", since=0.0)
    not_ready = GateObs(phase="Running", containers=(ok(),))
    assert decide(gating, Observation("v2", gate=not_ready), 59.0, P).record.phase == "gating"
    d = decide(gating, Observation("v2", gate=not_ready), 60.0, P)
    assert d.record.phase == "rolling-back" and "deadline" in d.record.reason


def test_rollback_off_keeps_the_failed_version():
    gating = Record(name="ns/p", phase="gating", target="v2", active="v2", last_good="v1", since=0.0)
    d = decide(
        gating,
        Observation("v2", gate=GateObs(containers=(waiting("CrashLoopBackOff"),))),
        1.0,
        replace(P, rollback=False),
    )
    assert (d.record.phase, d.record.active) == ("failed", "v2")


def test_manifest_back_to_the_last_good_version():
    pulling = decide(GOOD_V1, Observation("v2"), 1.0, P).record
    d = decide(pulling, Observation("v1"), 2.0, P)
    assert (d.record.phase, d.record.active, d.record.target) == ("good", "v1", "v1")
    assert "superseded" in [h.outcome for h in d.record.history]


def test_new_version_during_the_gate_pulls_while_the_gated_one_runs():
    gating = Record(name="ns/p", phase="gating", target="v2", active="v2", last_good="v1", since=0.0)
    d = decide(gating, Observation("v3"), 1.0, P)
    assert (d.record.phase, d.record.active, d.record.target, d.record.last_good) == ("pulling", "v2", "v3", "v1")


def test_history_is_bounded():
    rec = GOOD_V1
    for i in range(40):
        rec = decide(rec, Observation(f"x{i}"), float(i), P).record
    assert len(rec.history) == 20


SURGE = replace(P, strategy="Surge")


def test_surge_starts_beside_the_old_and_stops_it_once_good():
    pulling = decide(GOOD_V1, Observation("v2"), 1.0, SURGE).record
    d = decide(pulling, Observation("v2", pulled=True, running=frozenset({"v1"})), 2.0, SURGE)
    assert (d.record.phase, d.record.active, d.record.surge_from) == ("gating", "v2", "v1")
    assert [e.reason for e in d.events] == ["RolloutSurging"]
    r = d.record
    r = decide(r, Observation("v2", running=frozenset({"v1", "v2"}), gate=READY), 3.0, SURGE).record
    r = decide(r, Observation("v2", running=frozenset({"v1", "v2"}), gate=READY), 14.0, SURGE).record
    assert (r.phase, r.active, r.surge_from, r.last_good) == ("good", "v2", None, "v2")


def test_surge_failure_keeps_the_old_running():
    gating = Record(name="ns/p", phase="gating", target="v2", active="v2", last_good="v1", surge_from="v1")
    d = decide(
        gating,
        Observation("v2", running=frozenset({"v1", "v2"}), gate=GateObs(containers=(waiting("CrashLoopBackOff"),))),
        1.0,
        SURGE,
    )
    assert (d.record.phase, d.record.active, d.record.surge_from) == ("rolling-back", "v1", None)


def test_surge_refused_on_a_clash_replaces_instead():
    pulling = decide(GOOD_V1, Observation("v2"), 1.0, SURGE).record
    d = decide(pulling, Observation("v2", pulled=True, clash="both versions ask for hostPort 80/TCP"), 2.0, SURGE)
    assert (d.record.phase, d.record.active, d.record.surge_from) == ("replacing", "v2", None)
    assert d.events[0].reason == "SurgeRefused" and "hostPort 80/TCP" in d.events[0].message


def test_a_new_manifest_during_a_surge_stops_the_surged_version():
    gating = Record(name="ns/p", phase="gating", target="v2", active="v2", last_good="v1", surge_from="v1")
    d = decide(gating, Observation("v3"), 1.0, SURGE)
    assert (d.record.phase, d.record.active, d.record.surge_from, d.record.target) == ("pulling", "v1", None, "v3")


@pytest.mark.parametrize(
    "phase, last_good, surge_from, rollback, want",
    [
        ("gating", None, None, True, False),  # a first version: nothing to fall back to, the daemon finishes its gate
        ("gating", "v2", None, True, False),  # the target itself was good before (manifest back to it)
        ("gating", "v1", None, True, True),  # an update: the gate may roll it back
        ("gating", "v1", None, False, False),  # rollback off: the gate only reports
        ("gating", "v1", "v1", False, True),  # Surge: the gate's end stops the previous version
        ("pulling", "v1", None, True, True),
        ("replacing", "v1", None, True, True),
        ("rolling-back", "v1", None, True, True),
        ("good", "v2", None, True, False),
        ("rolled-back", "v1", None, True, False),
        ("failed", None, None, True, False),
    ],
)
def test_runonce_waits_only_for_steps_that_change_what_runs(phase, last_good, surge_from, rollback, want):
    rec = Record(name="default/app", phase=phase, target="v2", active="v2", last_good=last_good, surge_from=surge_from)
    assert changes_what_runs(rec, rollback=rollback) is want


@pytest.mark.parametrize("rollback", [True, False])
def test_a_new_version_during_a_first_versions_gate_downloads_first(rollback: bool) -> None:
    """v1 is still in its first gate (nothing to roll back to): v2 still waits for its images, so a v2 whose
    image is missing never leaves the device with nothing running."""
    v1 = start("ns/p", "v1", 0.0)
    d = decide(v1, Observation("v2"), 1.0, replace(P, rollback=rollback))
    assert (d.record.phase, d.record.active, d.record.target, d.pull) == ("pulling", "v1", "v2", True)
    missing = decide(d.record, Observation("v2", pull_error="ErrImagePull: manifest unknown"), 2.0, P)
    assert (missing.record.phase, missing.record.active) == ("pulling", "v1")
    present = decide(missing.record, Observation("v2", pulled=True, running=frozenset({"v1"})), 3.0, P)
    assert (present.record.phase, present.record.active) == ("replacing", "v2")


# Gate time (monotonic) against wall time (NTP): (wall jump, gate seconds elapsed, want phase)
@pytest.mark.parametrize(
    "wall_jump, gate_elapsed, want",
    [
        (+86400.0 * 30, 5.0, "gating"),  # NTP sets a month forward: the 60 s deadline has not passed
        (-86400.0, 5.0, "gating"),  # the clock set back a day: nothing expires, nothing waits a day more
        (+86400.0, 61.0, "rolling-back"),  # the deadline passes on gate time, whatever the wall clock did
        (-86400.0, 61.0, "rolling-back"),
    ],
)
def test_the_deadline_counts_gate_time_not_wall_time(wall_jump: float, gate_elapsed: float, want: str) -> None:
    gating = Record(name="ns/p", phase="gating", target="v2", active="v2", last_good="v1", since=1000.0)
    not_ready = GateObs(phase="Running", containers=(ok(),))
    d = decide(gating, Observation("v2", gate=not_ready), 1000.0 + gate_elapsed, P, wall=1_800_000_000.0 + wall_jump)
    assert d.record.phase == want


@pytest.mark.parametrize("wall_jump", [+86400.0 * 30, -86400.0])
def test_the_stability_window_counts_gate_time_not_wall_time(wall_jump: float) -> None:
    gating = Record(
        name="ns/p", phase="gating", target="v2", active="v2", last_good="v1", since=1000.0, ready_since=1001.0
    )
    d = decide(
        gating, Observation("v2", running=frozenset({"v2"}), gate=READY), 1002.0, P, wall=1_800_000_000.0 + wall_jump
    )
    assert d.record.phase == "gating"  # 1 s of the 10 s window, whatever the wall clock says
    d = decide(
        gating, Observation("v2", running=frozenset({"v2"}), gate=READY), 1011.0, P, wall=1_800_000_000.0 + wall_jump
    )
    assert d.record.phase == "good" and d.record.history[-1].at == 1_800_000_000.0 + wall_jump  # dated by wall


@pytest.mark.parametrize(
    "saved, boot, mono, want",
    [
        ([], "b1", 5.0, -5.0),  # nothing saved: gate time starts at 0
        ([("b1", 100.0, 150.0)], "b1", 60.0, 100.0),  # same boot (an agent restart): the same offset
        ([("b0", 7.0, 400.0), ("b0", 7.0, 420.0)], "b1", 3.0, 417.0),  # after a reboot: on from the last write
        ([("", 0.0, 0.0)], "b1", 3.0, -3.0),  # records of an agent that kept wall times
    ],
)
def test_gate_clock_offset(saved, boot, mono, want) -> None:
    assert gate_clock_offset(saved, boot, mono) == want


def test_after_a_reboot_the_stability_window_restarts_and_the_deadline_goes_on() -> None:
    gating = Record(
        name="ns/p",
        phase="gating",
        target="v2",
        active="v2",
        last_good="v1",
        since=400.0,
        ready_since=410.0,
        restarts_at_ready=1,
    )
    r = after_reboot(gating, boot_changed=True, legacy=False, now=420.0)
    assert (r.since, r.ready_since, r.restarts_at_ready) == (400.0, None, 0)  # 20 s of the deadline spent
    assert after_reboot(gating, boot_changed=False, legacy=False, now=420.0) == gating
    legacy = after_reboot(replace(gating, since=1_795_000_000.0), boot_changed=True, legacy=True, now=420.0)
    assert (legacy.since, legacy.ready_since) == (420.0, None)
