"""Backoff: kubelet's 10 s doubling to 300 s, reset after 600 s quiet, with time passed in."""

from __future__ import annotations

import pytest

from edgelet.util.backoff import Backoff

KEY = ("uid-1", "app")


@pytest.mark.parametrize(
    ("failures_at", "expected_delays"),
    [
        ([0], [10]),
        ([0, 1, 2, 3, 4, 5, 6], [10, 20, 40, 80, 160, 300, 300]),
        # 600 s quiet (exclusive) keeps the entry; beyond it the delay starts over.
        ([0, 600], [10, 20]),
        ([0, 600.5], [10, 10]),
        ([0, 10, 20, 700], [10, 20, 40, 10]),
    ],
)
def test_next_doubles_caps_and_resets(failures_at: list[float], expected_delays: list[float]) -> None:
    b = Backoff()
    assert [b.next(KEY, t) for t in failures_at] == expected_delays


@pytest.mark.parametrize(
    ("now", "in_backoff", "remaining"),
    [
        (100.0, True, 10.0),
        (105.0, True, 5.0),
        (109.999, True, pytest.approx(0.001)),
        (110.0, False, 0.0),
        (500.0, False, 0.0),
    ],
)
def test_is_in_backoff_from_last_failure(now: float, in_backoff: bool, remaining: float) -> None:
    b = Backoff()
    b.next(KEY, 100.0)
    assert b.is_in_backoff(KEY, now) is in_backoff
    assert b.remaining(KEY, now) == remaining


def test_is_in_backoff_since_event_time_like_kubelet() -> None:
    b = Backoff()
    b.next(KEY, 100.0)  # delay 10
    # kubelet IsInBackOffSince(finishedAt): the delay runs from the container's finish.
    assert b.is_in_backoff(KEY, 112.0, since=105.0)
    assert not b.is_in_backoff(KEY, 115.0, since=105.0)


def test_unknown_key_is_never_in_backoff() -> None:
    b = Backoff()
    assert not b.is_in_backoff(KEY, 0.0)
    assert b.remaining(KEY, 0.0) == 0.0
    assert b.get(KEY) == 0.0


def test_expired_entry_is_not_in_backoff_and_gc_drops_it() -> None:
    b = Backoff(initial=10, cap=300, reset_after=600)
    for t in range(6):
        b.next(KEY, float(t))  # delay now 300
    b.next(("uid-2", "web"), 650.0)
    assert b.is_in_backoff(KEY, 200.0)
    assert not b.is_in_backoff(KEY, 606.0)
    b.gc(606.0)
    assert list(b.keys()) == [("uid-2", "web")]


def test_keys_are_independent_and_forget_pod_drops_one_pod() -> None:
    b = Backoff()
    b.next(("a", "x"), 0.0)
    b.next(("a", "x"), 1.0)
    b.next(("a", "image:x"), 1.0)
    b.next(("b", "x"), 1.0)
    assert b.get(("a", "x")) == 20
    assert b.get(("b", "x")) == 10
    b.forget_pod("a")
    assert list(b.keys()) == [("b", "x")]
    b.reset(("b", "x"))
    assert len(b) == 0


def test_custom_parameters_and_validation() -> None:
    b = Backoff(initial=1, cap=4, reset_after=5)
    assert [b.next(KEY, t) for t in (0, 1, 2, 3)] == [1, 2, 4, 4]
    with pytest.raises(ValueError):
        Backoff(initial=0)
    with pytest.raises(ValueError):
        Backoff(initial=10, cap=5)
