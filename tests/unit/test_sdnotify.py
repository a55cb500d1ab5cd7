"""sd_notify client: address and watchdog parsing (tables), and real datagrams to a socket in a temp dir."""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from pathlib import Path

import pytest

from edgelet.sdnotify import (
    Notifier,
    NotifyError,
    compute_start_extension,
    format_state,
    parse_notify_address,
    parse_watchdog_interval,
)
from edgelet.util.clock import FakeClock


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("/run/systemd/notify", "/run/systemd/notify"),
        ("@/org/freedesktop/systemd1/notify/123", "\0/org/freedesktop/systemd1/notify/123"),
        ("@x", "\0x"),
    ],
)
def test_parse_notify_address(value: str, expected: str) -> None:
    assert parse_notify_address(value) == expected


@pytest.mark.parametrize("value", ["relative/path", "@", "vsock:2:1234", ""])
def test_parse_notify_address_rejects(value: str) -> None:
    with pytest.raises(ValueError, match="NOTIFY_SOCKET"):
        parse_notify_address(value)


@pytest.mark.parametrize(
    ("usec", "wpid", "expected"),
    [
        (None, None, None),
        ("", None, None),
        ("20000000", None, 20.0),
        ("20000000", "100", 20.0),  # our pid
        ("20000000", "99", 20.0),  # our parent: the one-file bootloader is systemd's main pid
        ("20000000", "7", None),  # someone else's watchdog
        ("0", None, None),
        ("-5", None, None),
        ("abc", None, None),
        ("1000", "x", None),
    ],
)
def test_parse_watchdog_interval(usec: str | None, wpid: str | None, expected: float | None) -> None:
    assert parse_watchdog_interval(usec, wpid, pid=100, ppid=99) == expected


def test_format_state_keeps_values_on_one_line() -> None:
    assert format_state({"READY": "1", "STATUS": "a\nb"}) == "READY=1\nSTATUS=a b"
    with pytest.raises(ValueError):
        format_state({"A=B": "1"})


@pytest.fixture
def receiver(tmp_path: Path):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = tmp_path / "notify"
    sock.bind(str(path))
    sock.settimeout(5)
    yield str(path), sock
    sock.close()


def test_from_environ_disabled_without_socket() -> None:
    env: dict[str, str] = {}
    n = Notifier.from_environ(env)
    assert not n.enabled
    assert n.ready() is False
    assert n.watchdog() is False


def test_from_environ_unsets_variables_so_children_do_not_inherit(receiver) -> None:
    path, _ = receiver
    env = {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "4000000", "WATCHDOG_PID": str(os.getpid()), "OTHER": "x"}
    n = Notifier.from_environ(env)
    assert n.enabled and n.watchdog_interval == 4.0
    assert env == {"OTHER": "x"}


def test_from_environ_can_keep_variables(receiver) -> None:
    path, _ = receiver
    env = {"NOTIFY_SOCKET": path}
    Notifier.from_environ(env, unset=False)
    assert env == {"NOTIFY_SOCKET": path}


def test_from_environ_ignores_malformed_socket() -> None:
    n = Notifier.from_environ({"NOTIFY_SOCKET": "nonsense", "WATCHDOG_USEC": "1000000"})
    assert not n.enabled and n.watchdog_interval is None


def test_messages_reach_a_path_socket(receiver) -> None:
    path, sock = receiver
    n = Notifier.from_environ({"NOTIFY_SOCKET": path})
    assert n.ready("2 pods running")
    assert sock.recv(4096) == b"READY=1\nSTATUS=2 pods running"
    assert n.status("syncing")
    assert sock.recv(4096) == b"STATUS=syncing"
    assert n.watchdog()
    assert sock.recv(4096) == b"WATCHDOG=1"
    assert n.stopping()
    assert sock.recv(4096) == b"STOPPING=1"


def test_messages_reach_an_abstract_socket() -> None:
    name = f"edgelet-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5)
        n = Notifier.from_environ({"NOTIFY_SOCKET": "@" + name})
        assert n.ready()
        assert sock.recv(4096) == b"READY=1"


def test_send_raises_with_context_and_helpers_do_not(tmp_path: Path) -> None:
    n = Notifier(str(tmp_path / "missing"))
    with pytest.raises(NotifyError) as info:
        n.send(READY="1")
    assert info.value.address == str(tmp_path / "missing")
    assert isinstance(info.value.__cause__, OSError)
    assert n.ready() is False  # logged, not raised: systemd trouble must not stop the agent
    assert n.watchdog() is False


def test_run_watchdog_pings_every_half_interval(receiver) -> None:
    path, sock = receiver
    n = Notifier(path, watchdog_interval=10.0)
    clock = FakeClock()
    sleeps: list[float] = []
    real_sleep = clock.sleep

    async def counting_sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 3:
            raise asyncio.CancelledError
        await real_sleep(seconds)

    clock.sleep = counting_sleep  # type: ignore[method-assign]
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(n.run_watchdog(clock))
    assert sleeps == [5.0, 5.0, 5.0]
    assert [sock.recv(64) for _ in range(3)] == [b"WATCHDOG=1"] * 3


def test_run_watchdog_returns_without_a_watchdog() -> None:
    asyncio.run(Notifier(None, watchdog_interval=10.0).run_watchdog(FakeClock()))
    asyncio.run(Notifier("/nonexistent", watchdog_interval=None).run_watchdog(FakeClock()))


def test_the_status_line_is_not_kept_up_to_date_without_systemd():
    """Not under systemd (no NOTIFY_SOCKET), the agent's READY task ends after its first sync instead of
    waking every few seconds to recompute a status line nobody receives."""
    from types import SimpleNamespace

    from edgelet.app import Agent

    done = asyncio.Event()
    done.set()
    agent = SimpleNamespace(
        loop=SimpleNamespace(first_sync_done=done),
        publisher=SimpleNamespace(entries=lambda: []),
        clock=FakeClock(),
    )

    async def main() -> None:
        await asyncio.wait_for(Agent._notify_ready(agent, Notifier(None)), 5)  # type: ignore[arg-type]

    asyncio.run(main())


INF = float("inf")


@pytest.mark.parametrize(
    "now, granted_until, window, ready, expected",
    [
        (0.0, -INF, 90.0, False, 90.0),  # the first progress: always
        (10.0, 90.0, 90.0, False, None),  # gains 10 s < a quarter window: not worth a datagram
        (22.5, 90.0, 90.0, False, 90.0),  # gains a quarter window: the deadline moves to 112.5
        (50.0, 90.0, 90.0, False, 90.0),
        (100.0, 90.0, 90.0, False, 90.0),  # systemd's own timeout may have been longer: extended again anyway
        (50.0, 90.0, 90.0, True, None),  # after READY=1 it would extend the watchdog and hide a hang
        (0.0, -INF, 0.0, False, None),  # no window: never
    ],
)
def test_compute_start_extension(
    now: float, granted_until: float, window: float, ready: bool, expected: float | None
) -> None:
    assert compute_start_extension(now, granted_until, window, ready=ready) == expected


def test_progress_extends_the_start_until_ready(receiver) -> None:
    path, sock = receiver
    clock = FakeClock()
    n = Notifier(path, start_window=8.0, clock=clock)
    assert n.progress()
    assert sock.recv(64) == b"EXTEND_TIMEOUT_USEC=8000000"
    clock.advance(1.0)
    assert not n.progress()  # a second's gain: nothing sent
    clock.advance(1.0)
    assert n.progress()
    assert sock.recv(64) == b"EXTEND_TIMEOUT_USEC=8000000"
    assert n.ready()
    assert sock.recv(64) == b"READY=1"
    clock.advance(60.0)
    assert not n.progress()  # ready: the start is over
    assert not Notifier(None).progress()
