"""When housekeeping CHECKs the pod networks (edgelet.network.checkplan): a table of periods."""

from __future__ import annotations

from edgelet.network.checkplan import MAX_STRETCH, CheckPlan, checked, due, host_links

A = (("sb1", "sb2"), (("br0", "3", "up"), ("veth1", "7", "up")))
B = (("sb1", "sb2", "sb3"), A[1])  # a new sandbox
C = (A[0], (("br0", "3", "up"),))  # a veth gone


def _run(fingerprints: list, broken_at: frozenset[int] = frozenset()) -> list[int]:
    """The periods (1-based) at which a CHECK runs, one fingerprint per period."""
    plan, ran = CheckPlan(), []
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


def test_a_new_sandbox_or_a_link_gone_is_checked_at_the_next_period_and_restarts_the_doubling():
    fps = [A] * 10 + [B] * 9
    assert _run(fps) == [1, 3, 7, 11, 13, 17]
    fps = [A] * 10 + [C] * 3
    assert _run(fps) == [1, 3, 7, 11, 13]


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
