"""When housekeeping CHECKs the pod networks (edgelet.network.checkplan): a table of periods."""

from __future__ import annotations

from edgelet.network.checkplan import MAX_STRETCH, CheckPlan, checked, due, first, host_links

A = (("br0", "3", "up"), ("veth1", "7", "up"))
B = (("br0", "3", "up"), ("veth1", "7", "up"), ("veth2", "8", "up"))  # a new sandbox's veth
C = (("br0", "3", "up"), ("veth1", "", ""))  # a veth gone while its pod runs
D = (("br0", "3", "up"),)  # the pod of veth1 gone with it
E = (("br0", "9", "up"), ("veth1", "7", "up"))  # the bridge re-created


def _run(fingerprints: list, broken_at: frozenset[int] = frozenset(), plan: CheckPlan | None = None) -> list[int]:
    """The periods (1-based) at which a CHECK runs, one fingerprint per period."""
    plan, ran = plan or CheckPlan(), []
    for i, fp in enumerate(fingerprints, start=1):
        go, plan = due(plan, fp)
        if go:
            ran.append(i)
            plan = checked(plan, fp, broken=i in broken_at)
    return ran


def test_nothing_changes_the_span_doubles_up_to_the_maximum():
    assert MAX_STRETCH == 10
    # 1 (first), then every 2, 4, 8, 10, 10 periods.
    assert _run([A] * 50) == [1, 3, 7, 15, 25, 35, 45]


def test_a_link_that_changed_or_went_is_checked_at_the_next_period_and_restarts_the_doubling():
    assert _run([A] * 10 + [C] * 3) == [1, 3, 7, 11, 13]
    assert _run([A] * 10 + [E] * 3) == [1, 3, 7, 11, 13]


def test_a_new_sandbox_or_one_gone_brings_no_check_of_its_own():
    # Its ADD has just set its network up: it is CHECKed with the others at the next round.
    assert _run([A] * 10 + [B] * 9) == [1, 3, 7, 15]
    assert _run([A] * 10 + [D] * 9) == [1, 3, 7, 15]
    assert _run([()] * 2 + [A] * 20) == [1, 3, 7, 15]


def test_a_new_sandboxs_links_are_watched_from_the_period_they_show():
    gone = (("br0", "3", "up"), ("veth1", "7", "up"), ("veth2", "", ""))
    assert _run([A] * 4 + [B] + [gone]) == [1, 3, 6]
    assert _run([A] * 4 + [B] * 4 + [gone] * 3) == [1, 3, 7, 9, 11]


def test_at_start_only_adopted_sandboxes_are_checked_at_the_first_period():
    assert first(adopted=True) == CheckPlan()
    assert _run([A] * 20, plan=first(adopted=False)) == [2, 6, 14]
    assert _run([()] + [A] * 19, plan=first(adopted=False)) == [2, 6, 14], "pods started after the agent"
    assert _run([A] + [C] * 3, plan=first(adopted=False)) == [2, 4], "a link broken after it showed"


def test_a_failed_check_brings_the_span_back_to_every_period():
    assert _run([A] * 12, broken_at=frozenset({7})) == [1, 3, 7, 8, 10]


def test_host_links_reads_names_ifindex_and_state(tmp_path):
    for name, idx, state in (("lo", "1", "unknown"), ("eth0", "2", "up")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "ifindex").write_text(idx + "\n")
        (tmp_path / name / "operstate").write_text(state + "\n")
    assert host_links(["lo", "eth0"], str(tmp_path)) == (("eth0", "2", "up"), ("lo", "1", "unknown"))
    assert host_links(["eth0"], str(tmp_path)) == (("eth0", "2", "up"),), "only the links named"
    assert host_links(["veth9", "../x"], str(tmp_path)) == (("veth9", "", ""),), "a link gone reads empty"
