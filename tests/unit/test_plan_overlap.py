"""The decisions of the container created beside the CNI ADD (edgelet.plan.overlap), as tables."""

from __future__ import annotations

import pytest

from edgelet.plan import ContainerToStart
from edgelet.plan.overlap import OverlapOutcome, beside_network, overlap_outcome

A = ContainerToStart("a", 0)
B = ContainerToStart("b", 0)
INIT = ContainerToStart("setup", 0, "init")
RESUMED = ContainerToStart("a", 2, existing="c1")


@pytest.mark.parametrize(
    "to_start, at_hand, expected",
    [
        ((), {}, None),  # nothing to start
        ((A, B), {"a": True, "b": True}, A),  # only the first, never a later one
        ((INIT,), {"setup": True}, INIT),  # the next init container is the first
        ((A, B), {"a": False, "b": True}, None),  # its image failed: reported after the sandbox, as before
        ((A, B), {"b": True}, None),  # its image not resolved
        ((RESUMED, B), {"a": True, "b": True}, None),  # an instance to resume is started, not created
    ],
    ids=["none", "first-only", "init", "image-failed", "image-unknown", "resumed"],
)
def test_which_container_is_created_beside_the_network(to_start, at_hand, expected) -> None:
    assert beside_network(to_start, at_hand) == expected


@pytest.mark.parametrize(
    "network_ok, created, expected",
    [
        (True, True, OverlapOutcome(remove_container=False, remove_sandbox=False, start=True)),
        (True, False, OverlapOutcome(remove_container=False, remove_sandbox=False, start=False)),
        (False, True, OverlapOutcome(remove_container=True, remove_sandbox=True, start=False)),
        (False, False, OverlapOutcome(remove_container=False, remove_sandbox=True, start=False)),
    ],
    ids=["both-ok", "create-failed", "add-failed", "both-failed"],
)
def test_what_either_half_failing_undoes(network_ok, created, expected) -> None:
    assert overlap_outcome(network_ok, created) == expected
