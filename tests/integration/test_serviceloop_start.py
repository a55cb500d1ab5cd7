"""systemd's start timeout with EXTEND_TIMEOUT_USEC=, as the service loop plays it, against edgelet's own notifier:
a start that moves is extended past the timeout and becomes ready; a start whose progress stops is killed by it.

The service is a real process sending real datagrams (edgelet.sdnotify.Notifier.progress) to the loop's socket.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from edgelet.testing.serviceloop import ServiceLoop, extend_timeout_usec
from tests.e2e.conftest import wait_for

REPO = Path(__file__).resolve().parents[2]

# A start of `steps` steps a tenth of a second apart, each marked as progress, then READY=1 (or a hang).
SERVICE = """
import sys, time
from edgelet.sdnotify import Notifier
n = Notifier.from_environ(start_window=float(sys.argv[1]))
for _ in range(int(sys.argv[2])):
    n.progress()
    time.sleep(0.1)
if sys.argv[3] == "ready":
    n.ready()
time.sleep(600)
"""


def loop(tmp_path: Path, window: float, steps: int, end: str, start_timeout: float) -> ServiceLoop:
    return ServiceLoop(
        [sys.executable, "-c", SERVICE, str(window), str(steps), end],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        log_path=tmp_path / "log",
        start_timeout=start_timeout,
        restart_sec=600,
    )


def test_a_slow_start_that_moves_is_extended_past_the_start_timeout(tmp_path: Path) -> None:
    # 150 steps of 0.1 s run well past the 6 s timeout; each extension (4 s) outlasts the gap between two.
    service = loop(tmp_path, window=4.0, steps=150, end="ready", start_timeout=6.0).start()
    try:
        wait_for(
            lambda: service.starts and (service.starts[0].ready or service.starts[0].rc is not None),
            timeout=120,
            what="the start ready or ended",
        )
        first = service.starts[0]
        assert first.ready and not first.killed, (first, (tmp_path / "log").read_text())
        assert first.extensions >= 2
    finally:
        service.stop()


def test_a_start_that_stops_moving_is_killed_once_its_extension_runs_out(tmp_path: Path) -> None:
    # Moves past the 6 s timeout (extended), then hangs: killed when its last extension (2 s) runs out.
    service = loop(tmp_path, window=2.0, steps=100, end="hang", start_timeout=6.0).start()
    try:
        wait_for(lambda: service.starts and service.starts[0].rc is not None, timeout=120, what="the hung start killed")
        first = service.starts[0]
        assert first.killed == "start timeout" and not first.ready
        assert first.extensions >= 2
    finally:
        service.stop()


def test_extend_timeout_usec_is_read_from_a_datagram() -> None:
    assert extend_timeout_usec(["STATUS=x", "EXTEND_TIMEOUT_USEC=5000000"]) == 5_000_000
    assert extend_timeout_usec(["READY=1"]) is None
    assert extend_timeout_usec(["EXTEND_TIMEOUT_USEC=soon"]) is None
