"""Decision tables for self-update (edgelet.update.decide), and the launcher script run on the same table."""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from edgelet.update.decide import (
    ABANDONED,
    COMMIT,
    COUNT,
    NONE,
    REASON_ATTEMPTS,
    ROLLBACK,
    ROLLED_BACK,
    START,
    TRIAL,
    WAIT,
    Candidate,
    PodInstance,
    TrialObservation,
    TrialRecord,
    acceptance_problem,
    launch_action,
    resolve_trial,
    staging_retry_delay,
    trial_verdict,
)
from edgelet.update.release import link_problem, normalise_arch, path_problem, release_number
from edgelet.update.store import UpdateStore, format_trial, parse_trial

LAUNCH = Path(__file__).resolve().parents[2] / "packaging" / "launch"


@pytest.mark.parametrize(
    "candidate, running, rolled_back, want",
    [
        (Candidate(1001, "amd64", 1001), 1000, (), None),
        (Candidate(1001, "amd64", None), 1000, (), None),  # signify/SSH: release.json's version, signed in the archive
        (Candidate(1001, "arm64", 1001), 1000, (), "built for arm64, this device is amd64"),
        (Candidate(1001, "amd64", 1002), 1000, (), "its signature says version 1002, its release.json 1001"),
        (Candidate(1000, "amd64", 1000), 1000, (), "version 1000 is not newer than the running version 1000"),
        (Candidate(999, "amd64", 999), 1000, (), "version 999 is not newer than the running version 1000"),
        (
            Candidate(1001, "amd64", 1001),
            1000,
            (1001,),
            "version 1001 is not newer than version 1001, rolled back before",
        ),
        (
            Candidate(1001, "amd64", 1001),
            1000,
            (1003, 1002),
            "version 1001 is not newer than version 1003, rolled back before",
        ),
        (Candidate(1004, "amd64", 1004), 1000, (1003,), None),  # a newer one after a rolled-back one
    ],
)
def test_acceptance(candidate: Candidate, running: int, rolled_back: tuple[int, ...], want: str | None) -> None:
    assert acceptance_problem(candidate, arch="amd64", running=running, rolled_back=rolled_back) == want


REC = TrialRecord(version=1001, target="/r/1001", previous="/r/1000", previous_version=1000)

# (record, where current points, max attempts) -> (action, attempts written)
LAUNCH_TABLE = [
    (None, "/r/1000", 3, (START, 0)),
    (REC, "/r/1001", 3, (COUNT, 1)),
    (replace(REC, attempts=2), "/r/1001", 3, (COUNT, 3)),
    (replace(REC, attempts=3), "/r/1001", 3, (ROLLBACK, 3)),
    (replace(REC, attempts=1), "/r/1001", 1, (ROLLBACK, 1)),
    (replace(REC, attempts=5), "/r/1000", 3, (START, 5)),  # already swapped back (power cut before the outcome)
    (REC, "/r/1000", 3, (START, 0)),  # the old agent crashed between the record and the swap
    (replace(REC, attempts=3, outcome="rolled-back"), "/r/1000", 3, (START, 3)),
    (replace(REC, attempts=1, outcome="rolled-back"), "/r/1001", 3, (START, 1)),  # an operator pointed it again
]


@pytest.mark.parametrize("record, current, max_attempts, want", LAUNCH_TABLE)
def test_launch_action(record: TrialRecord | None, current: str, max_attempts: int, want: tuple[str, int]) -> None:
    assert launch_action(record, current, max_attempts) == want


@pytest.mark.parametrize("record, current, max_attempts, want", LAUNCH_TABLE)
def test_the_launcher_script_takes_the_same_decisions(
    tmp_path: Path, record: TrialRecord | None, current: str, max_attempts: int, want: tuple[str, int]
) -> None:
    """packaging/launch, the real sh script, on the same table: what it writes and what it runs."""
    lib, state, releases = tmp_path / "lib", tmp_path / "root" / "update", tmp_path / "r"
    lib.mkdir(), state.mkdir(parents=True)
    for version in ("1000", "1001"):
        (releases / version).mkdir(parents=True)
        entry = releases / version / "edgelet"
        entry.write_text(f'#!/bin/sh\necho "{version} $EDGELET_RELEASE_DIR $*"\n')
        entry.chmod(0o755)
    where = lambda p: str(tmp_path) + p  # noqa: E731
    os.symlink(where(current), lib / "current")
    if record is not None:
        record = replace(record, target=where(record.target), previous=where(record.previous))
        (state / "trial").write_bytes(format_trial(record))
    env = {
        "PATH": os.environ["PATH"],
        "EDGELET_UPDATE_CURRENT": str(lib / "current"),
        "EDGELET_ROOT_DIR": str(tmp_path / "root"),
        "EDGELET_UPDATE_MAX_ATTEMPTS": str(max_attempts),
    }
    done = subprocess.run(["sh", str(LAUNCH), "--flag"], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    action, attempts = want
    ran = os.readlink(lib / "current")
    assert done.stdout == f"{Path(ran).name} {ran} --flag\n"
    if record is None:
        assert not (state / "trial").exists() and ran == where(current)
        return
    after = parse_trial((state / "trial").read_text())
    assert after is not None and after.attempts == attempts
    if action == ROLLBACK:
        assert ran == record.previous
        assert after.outcome == "rolled-back" and after.reason == REASON_ATTEMPTS.format(n=attempts)
    else:
        assert ran == where(current) and after.outcome == record.outcome
    assert sorted(p.name for p in state.iterdir()) == ["trial"]  # no temp file left


@pytest.mark.parametrize(
    "record, running, want",
    [
        (None, "/r/1000", NONE),
        (REC, "/r/1001", TRIAL),
        (replace(REC, attempts=2), "/r/1001", TRIAL),
        (replace(REC, outcome="rolled-back", reason="x"), "/r/1000", ROLLED_BACK),
        (replace(REC, attempts=3), "/r/1000", ROLLED_BACK),  # swapped back, outcome not yet written
        (REC, "/r/1000", ABANDONED),  # record written, never swapped: no start counted
    ],
)
def test_resolve_trial(record: TrialRecord | None, running: str, want: str) -> None:
    assert resolve_trial(record, running) == want


A = {"default/web/app": PodInstance("a" * 64, 100), "default/db/db": PodInstance("b" * 64, 200)}


def obs(**kw: object) -> TrialObservation:
    base: dict[str, object] = {
        "elapsed": 10.0,
        "before": A,
        "now": dict(A),
        "healthz": True,
        "lease_needed": False,
        "lease_renewed": False,
    }
    base.update(kw)
    return TrialObservation(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "observation, want",
    [
        (obs(), (COMMIT, "")),
        (obs(before={}, now={}), (COMMIT, "")),  # no pods, or a boot since the snapshot
        (obs(now=None), (WAIT, "no full sync")),
        (obs(healthz=False), (WAIT, "/healthz not answered")),
        (obs(lease_needed=True), (WAIT, "the Lease not renewed")),
        (obs(lease_needed=True, lease_renewed=True), (COMMIT, "")),
        (obs(now=None, elapsed=120.0), (ROLLBACK, "not healthy within 120s: no full sync")),
        (
            obs(healthz=False, lease_needed=True, elapsed=121.0),
            (ROLLBACK, "not healthy within 120s: /healthz not answered, the Lease not renewed"),
        ),
        (
            obs(now={**A, "default/web/app": PodInstance("c" * 64, 101)}),
            (
                ROLLBACK,
                f"pods not adopted as they ran: default/web/app was restarted (container {'a' * 12} -> {'c' * 12})",
            ),
        ),
        (
            obs(now={**A, "default/web/app": PodInstance("a" * 64, 101)}, healthz=False),
            (ROLLBACK, "pods not adopted as they ran: default/web/app was restarted (pid 100 -> 101)"),
        ),
        (
            obs(now={"default/web/app": A["default/web/app"]}),
            (ROLLBACK, "pods not adopted as they ran: default/db/db is gone"),
        ),
        (obs(now={**A, "default/new/x": PodInstance("d", 1)}), (COMMIT, "")),  # a pod started since is no harm
    ],
)
def test_trial_verdict(observation: TrialObservation, want: tuple[str, str]) -> None:
    assert trial_verdict(observation, deadline=120.0) == want


@pytest.mark.parametrize(
    "label, want",
    [("0.1.0", 1000), ("1.2.3", 1_002_003), ("2", 2_000_000), ("0.1.0+git", 1000), ("0.1.0-rc1", 1000)],
)
def test_release_number(label: str, want: int) -> None:
    assert release_number(label) == want


@pytest.mark.parametrize("label", ["", "a.b", "1.2.3.4", "1.1000.0"])
def test_release_number_refuses(label: str) -> None:
    with pytest.raises(ValueError, match="MAJOR.MINOR.PATCH"):
        release_number(label)


@pytest.mark.parametrize(
    "path, want",
    [
        ("edgelet", None),
        ("_internal/libpython3.11.so.1.0", None),
        ("/etc/passwd", "not a relative path inside the release"),
        ("_internal/../../x", "not a relative path inside the release"),
        ("a//b", "not a relative path inside the release"),
        ("release.json", "not a relative path inside the release"),
    ],
)
def test_path_problem(path: str, want: str | None) -> None:
    assert path_problem(path) == want


@pytest.mark.parametrize(
    "path, target, ok",
    [
        ("_internal/a.so", "b.so", True),
        ("_internal/a.so", "../edgelet", True),
        ("a", "../x", False),
        ("a", "/x", False),
    ],
)
def test_link_problem(path: str, target: str, ok: bool) -> None:
    assert (link_problem(path, target) is None) == ok


def test_arch_names_are_debian_names() -> None:
    assert [normalise_arch(m) for m in ("x86_64", "aarch64", "armv7l", "riscv64")] == [
        "amd64",
        "arm64",
        "armhf",
        "riscv64",
    ]


def test_the_trial_record_round_trips_and_a_torn_one_is_no_trial(tmp_path: Path) -> None:
    record = replace(REC, attempts=2, reason="a reason\nwith a line break", started=1.5)
    assert parse_trial(format_trial(record).decode()) == replace(record, reason="a reason with a line break")
    assert parse_trial("version=1001\ntarget=/r/1001\n") is None
    assert parse_trial("version=x\ntarget=a\nprevious=b\n") is None
    store = UpdateStore(tmp_path)
    assert store.trial() is None
    store.write_trial(record)
    assert store.trial() is not None


def test_history_keeps_rolled_back_versions_and_skips_a_repeated_entry(tmp_path: Path) -> None:
    store = UpdateStore(tmp_path)
    store.append({"time": 1, "version": 1001, "outcome": "rolled-back", "reason": "r"})
    store.append({"time": 1, "version": 1003, "outcome": "operator-rollback", "reason": "r"})
    for i in range(60):
        store.append({"time": 2 + i, "version": 2000 + i, "outcome": "committed"})
    store.append({"time": 99, "version": 2059, "outcome": "committed"})  # the same event written again
    history = store.history()
    assert len(history) == 52 and [e["version"] for e in history[:2]] == [1001, 1003] and history[-1]["time"] == 61
    assert store.rolled_back_versions() == {1001, 1003}  # the operator's rollback bars the version left too


def test_outcome_counts_never_go_down_when_the_history_drops_entries(tmp_path: Path) -> None:
    store = UpdateStore(tmp_path)
    store.append({"time": 1, "version": 1001, "outcome": "rolled-back", "reason": "r"})
    seen = []
    for i in range(70):
        store.append({"time": 2 + i, "version": 2000 + i, "outcome": "started"})
        store.append({"time": 2 + i, "version": 2000 + i, "outcome": "committed"})
        seen.append(store.outcome_counts())
    assert seen[-1] == {"rolled-back": 1, "started": 70, "committed": 70}
    assert all(a["committed"] < b["committed"] and a["started"] < b["started"] for a, b in zip(seen, seen[1:]))
    history = store.history()  # the tally is no entry of its own
    assert len(history) == 51 and all(e["outcome"] != "tally" for e in history)
    assert store.rolled_back_versions() == {1001}


def test_the_snapshot_counts_only_for_its_own_boot(tmp_path: Path) -> None:
    store = UpdateStore(tmp_path)
    store.write_snapshot("boot-1", A, lease=True)
    assert store.snapshot("boot-1") == (A, True)
    assert store.snapshot("boot-2") == ({}, True)


def test_running_containers_are_keyed_by_pod_and_container() -> None:
    from edgelet.container.types import ContainerRecord, PodRuntimeStatus
    from edgelet.update.build import running_containers

    def rec(name: str, state: str, pid: int | None) -> ContainerRecord:
        return ContainerRecord(
            id=f"id-{name}", pod_uid="u", pod_name="web", pod_namespace="default", name=name, attempt=0,
            spec_hash="h", sandbox_id="s", state=state, pid=pid, created_at=0.0,
        )  # fmt: skip

    pods = {"u": PodRuntimeStatus(uid="u", name="web", namespace="default", containers=(
        rec("app", "running", 10), rec("init", "exited", None), rec("side", "created", 12),
    ))}  # fmt: skip
    assert running_containers(pods) == {"default/web/app": PodInstance("id-app", 10)}


A = {"default/p/c": PodInstance("aaa", 10)}
B = {"default/p/c": PodInstance("bbb", 11)}


@pytest.mark.parametrize(
    "label, pods, last, since, now, waited, expect",
    [
        ("before the first full sync", None, None, None, 100.0, 10.0, ("wait", None)),
        ("first look", A, None, None, 100.0, 10.0, ("wait", 100.0)),
        ("the same, not yet quiet long enough", A, A, 100.0, 103.0, 13.0, ("wait", 100.0)),
        ("the same for the quiet time", A, A, 100.0, 105.0, 15.0, ("go", 100.0)),
        ("a container changed: the quiet time starts again", B, A, 100.0, 105.0, 15.0, ("wait", 105.0)),
        ("no pods at all, settled", {}, {}, 100.0, 106.0, 16.0, ("go", 100.0)),
        ("never settles: the limit", B, A, 100.0, 500.0, 300.0, ("go", 100.0)),
        ("no first sync after the limit", None, None, None, 500.0, 300.0, ("go", None)),
    ],
)
def test_settle_step(label, pods, last, since, now, waited, expect) -> None:
    from edgelet.update.decide import settle_step

    assert settle_step(pods, last, since, now, quiet=5.0, waited=waited, limit=300.0) == expect, label


@pytest.mark.parametrize(
    ("failures", "delay"),
    [(1, 60.0), (2, 120.0), (3, 240.0), (6, 1920.0), (7, 3600.0), (30, 3600.0)],
)
def test_a_failed_staging_is_tried_again_after_a_minute_doubling_to_an_hour(failures: int, delay: float) -> None:
    assert staging_retry_delay(failures) == delay
