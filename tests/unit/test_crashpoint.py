"""The chaos tests' crash points: parsing, a no-op when unarmed, SIGKILL at the n-th passage when armed; and the
test-only wall-clock offset."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from edgelet.util import crashpoint
from edgelet.util.clock import OFFSET_ENV, OffsetClock, RealClock, clock_from_environ


@pytest.mark.parametrize(
    "text, armed",
    [
        ("", {}),
        ("cni.add", {"cni.add": 1}),
        ("cni.add:3, checkpoint.write:1", {"cni.add": 3, "checkpoint.write": 1}),
    ],
)
def test_parse(text, armed):
    assert crashpoint.parse(text) == armed


@pytest.mark.parametrize("text", ["nowhere", "cni.add:0", "cni.add:x"])
def test_parse_refuses_typos(text):
    with pytest.raises(ValueError):
        crashpoint.parse(text)


def test_unarmed_points_do_nothing():
    assert crashpoint._armed == {}
    for name in crashpoint.POINTS:
        crashpoint.crash_point(name)


def test_an_armed_point_kills_the_process_at_its_nth_passage():
    code = (
        "from edgelet.util.crashpoint import crash_point\n"
        "for i in range(5):\n"
        "    print(i, flush=True)\n"
        "    crash_point('container.create')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={"EDGELET_TEST_CRASH_AT": "container.create:3", "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == -signal.SIGKILL
    assert out.stdout.split() == ["0", "1", "2"]


def test_the_clock_is_real_unless_a_test_names_an_offset_file(tmp_path):
    assert isinstance(clock_from_environ({}), RealClock)
    offset = tmp_path / "offset"
    offset.write_text("-3600")
    clock = clock_from_environ({OFFSET_ENV: str(offset)})
    assert isinstance(clock, OffsetClock)
    assert abs(clock.now() - (time.time() - 3600)) < 60
    mono = clock.monotonic()
    assert abs(mono - time.monotonic()) < 60  # never shifted


def test_a_held_point_says_where_and_blocks_until_killed():
    code = (
        "import signal\n"
        "signal.signal(signal.SIGTERM, lambda *_: print('term', flush=True))\n"
        "from edgelet.util.crashpoint import crash_point\n"
        "for i in range(5):\n"
        "    print(i, flush=True)\n"
        "    crash_point('update.trial')\n"
    )
    env = {"EDGELET_TEST_CRASH_AT": "update.trial:2", "EDGELET_TEST_CRASH_HOLD": "1", "PATH": "/usr/bin:/bin"}
    with subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    ) as proc:
        assert proc.stderr is not None and proc.stdout is not None
        try:
            assert proc.stderr.readline() == "crash point update.trial: holding\n"
            proc.send_signal(signal.SIGTERM)  # a handled signal does not end the hold (asyncio's handlers return)
            assert proc.stdout.readline() == "0\n"
            assert proc.stdout.readline() == "1\n"
            assert proc.stdout.readline() == "term\n"
            assert proc.poll() is None
        finally:
            proc.kill()
            proc.wait(timeout=60)
        assert proc.returncode == -signal.SIGKILL
        assert proc.stdout.read() == ""  # it never went on to the third passage
