"""Which rtnetlink notifications mark a pod's network for a CHECK (edgelet.network.linkevents): tables."""

from __future__ import annotations

import struct

import pytest

from edgelet.network import linkevents as le
from edgelet.network.linkevents import Event, affected, breaking, parse

UP = le.IFF_UP | le.IFF_LOWER_UP


def _msg(kind: int, body: bytes) -> bytes:
    length = 16 + len(body)
    return struct.pack("=IHHII", length, kind, 0, 0, 0) + body + b"\0" * (-length % 4)


def _link(kind: int, index: int, flags: int) -> bytes:
    return _msg(kind, struct.pack("=BxHiII", 0, 1, index, flags, 0) + b"\x08\x00\x03\x00eth0")


def _addr(kind: int, index: int) -> bytes:
    return _msg(kind, struct.pack("=BBBBI", 2, 24, 0, 0, index) + b"\x08\x00\x01\x00\x0a\x00\x00\x02")


def test_parse_reads_the_type_index_and_flags_of_links_and_addresses():
    data = _link(le.RTM_NEWLINK, 7, UP) + _addr(le.RTM_DELADDR, 7) + _msg(24, b"\0" * 12) + _link(le.RTM_DELLINK, 3, 0)
    assert parse(data) == [Event(le.RTM_NEWLINK, 7, UP), Event(le.RTM_DELADDR, 7), Event(le.RTM_DELLINK, 3, 0)]


def test_parse_refuses_a_truncated_message():
    with pytest.raises(ValueError, match="link message of 4 bytes"):
        parse(_msg(le.RTM_NEWLINK, b"\0" * 4))
    with pytest.raises(ValueError, match="netlink message of length 64"):
        parse(struct.pack("=IHHII", 64, le.RTM_NEWLINK, 0, 0, 0))


@pytest.mark.parametrize(
    ("event", "before", "want"),
    [
        (Event(le.RTM_DELLINK, 7), UP, True),  # a veth or the bridge gone
        (Event(le.RTM_DELADDR, 7), None, True),  # the pod's address or the gateway's gone
        (Event(le.RTM_NEWADDR, 7), None, False),  # an address added (IPv6's own after an ADD)
        (Event(le.RTM_NEWLINK, 7, UP), None, False),  # a change of anything but up/carrier
        (Event(le.RTM_NEWLINK, 7, UP), 0, False),  # coming up
        (Event(le.RTM_NEWLINK, 7, le.IFF_LOWER_UP), UP, True),  # set down
        (Event(le.RTM_NEWLINK, 7, le.IFF_UP), None, True),  # lost its carrier (its peer went)
        (Event(le.RTM_NEWLINK, 7, le.IFF_UP), le.IFF_UP, False),  # still without carrier: said already
        (Event(19, 7), None, False),
    ],
)
def test_breaking(event, before, want):
    assert breaking(event, before) is want


def test_affected_maps_host_indexes_to_their_sandboxes_and_keeps_each_links_flags():
    users = {3: frozenset({"a", "b"}), 7: frozenset({"a"}), 8: frozenset({"b"})}
    flags: dict[int, int] = {}
    assert affected([Event(le.RTM_DELLINK, 7)], users, flags, whole=frozenset()) == {"a"}
    assert affected([Event(le.RTM_DELLINK, 99)], users, flags, whole=frozenset()) == set(), "another's link"
    assert affected([Event(le.RTM_NEWLINK, 3, le.IFF_UP)], users, flags, whole=frozenset()) == {"a", "b"}
    assert flags == {3: le.IFF_UP}
    assert affected([Event(le.RTM_NEWLINK, 3, le.IFF_UP)], users, flags, whole=frozenset()) == set()
    assert affected([Event(le.RTM_NEWLINK, 3, UP)], users, flags, whole=frozenset()) == set(), "back up"
    assert affected([Event(le.RTM_NEWADDR, 8)], users, flags, whole=frozenset()) == set()


def test_affected_in_a_pods_namespace_names_that_pod_for_any_of_its_links():
    flags: dict[int, int] = {}
    assert affected([Event(le.RTM_DELADDR, 2)], {}, flags, whole=frozenset({"a"})) == {"a"}
    assert affected([Event(le.RTM_NEWLINK, 2, UP)], {}, flags, whole=frozenset({"a"})) == set()
