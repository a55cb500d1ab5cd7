"""When housekeeping CHECKs the pod networks (edgelet.network.checkplan): tables of periods."""

from __future__ import annotations

import pytest

from edgelet.network.checkplan import SAFETY_PERIODS, CheckPlan, checked, due, first, spacing

A, B, C = "sandbox-a", "sandbox-b", "sandbox-c"


def _run(
    periods: int,
    running: dict[int, set[str]] | set[str],
    marked: dict[int, set[str]] | None = None,
    plan: CheckPlan | None = None,
    failed_at: frozenset[int] = frozenset(),
) -> list[tuple[int, list[str]]]:
    """(period, sandboxes CHECKed) for each period with a CHECK; `running` a set, or per period from the first
    period named on (the last one stands); `marked`: what notifications marked, per period."""
    plan, ran = plan or CheckPlan(), []
    now: set[str] = set()
    for i in range(1, periods + 1):
        if isinstance(running, set):
            now = running
        elif i in running:
            now = running[i]
        sandboxes, plan = due(plan, now, (marked or {}).get(i, set()))
        if sandboxes:
            ran.append((i, sorted(sandboxes)))
            plan = checked(plan, sandboxes, ran=i not in failed_at)
    return ran


def test_a_settled_node_runs_no_check_until_the_safety_ones_one_pod_at_a_time():
    assert SAFETY_PERIODS == 60
    ran = _run(3 * SAFETY_PERIODS, {A, B, C})
    # Nothing for SAFETY_PERIODS after they showed (period 1), then one pod every SAFETY_PERIODS / 3 periods:
    # each once every SAFETY_PERIODS.
    assert ran == [(61, [A]), (81, [B]), (101, [C]), (121, [A]), (141, [B]), (161, [C])]


@pytest.mark.parametrize(
    ("running", "want"),
    [(0, 60), (1, 60), (3, 20), (20, 3), (60, 1), (200, 1)],
)
def test_safety_checks_are_spaced_so_each_pod_gets_one_per_safety_span(running, want):
    assert spacing(running) == want


def test_a_notification_brings_a_check_of_that_pod_alone_at_the_next_period():
    ran = _run(10, {A, B, C}, marked={4: {B}, 7: {A, C}})
    assert ran == [(4, [B]), (7, [A, C])]


def test_a_marked_sandbox_that_no_longer_runs_is_not_checked():
    assert _run(10, {1: {A, B}, 5: {A}}, marked={5: {B}}) == []


def test_a_check_by_notification_postpones_that_pods_safety_check():
    ran = _run(SAFETY_PERIODS + 30, {A}, marked={10: {A}})
    assert ran == [(10, [A]), (70, [A])]  # not at 61


def test_a_new_sandbox_is_not_checked_at_once_its_add_just_ran():
    ran = _run(SAFETY_PERIODS + 10, {1: {A}, 5: {A, B}})
    assert ran == [(61, [A])]  # B's safety CHECK comes SAFETY_PERIODS after it showed, and SAFETY_PERIODS / 2 after A's
    assert _run(SAFETY_PERIODS + 40, {1: {A}, 5: {A, B}}) == [(61, [A]), (91, [B])]


def test_at_start_adopted_sandboxes_are_checked_at_the_first_period():
    assert _run(5, {A, B}, plan=first({A, B})) == [(1, [A, B])]
    assert _run(5, {1: {A, B}}, plan=first(set())) == [], "pods started after the agent: their ADD"
    assert _run(5, {1: {B}}, plan=first({A, B})) == [(1, [B])], "an adopted sandbox gone by then is not"


def test_a_check_that_could_not_run_is_tried_again_at_the_next_period():
    ran = _run(6, {A, B}, marked={3: {A}}, failed_at=frozenset({3, 4}))
    assert ran == [(3, [A]), (4, [A]), (5, [A])]
