"""Progress of image pulls and imports: the pure formatting, table-tested, and the Progress counter."""

from __future__ import annotations

import io

import pytest

from edgelet.cli.describe import describe_pod
from edgelet.cli.pods import pulls_message
from edgelet.cli.progress import (
    blob_line,
    format_eta,
    plain_lines,
    pull_text,
    rate_and_eta,
    short_name,
    terminal_lines,
    with_progress,
)
from edgelet.images.progress import BlobProgress, Progress, ProgressSnapshot
from edgelet.status.snapshot import PodRow
from edgelet.util.clock import FakeClock

D1 = "sha256:" + "a1b2c3d4e5f6" + "0" * 52
D2 = "sha256:" + "ffeeddccbbaa" + "1" * 52


@pytest.mark.parametrize(
    "name, short",
    [
        (D1, "a1b2c3d4e5f6"),
        ("/x/busybox.tar:blobs/sha256/abc", "abc"),
        ("/x/img.tar:layer.tar", "layer.tar"),
        ("blob", "blob"),
    ],
)
def test_short_name(name, short):
    assert short_name(name) == short


@pytest.mark.parametrize(
    "seconds, text", [(None, "--"), (-1, "--"), (0, "0s"), (9.6, "10s"), (59.4, "59s"), (184, "3m04s"), (3720, "1h02m")]
)
def test_format_eta(seconds, text):
    assert format_eta(seconds) == text


@pytest.mark.parametrize(
    "done, total, elapsed, expected",
    [
        (0, 100, 1.0, (0.0, None)),
        (50, 100, 2.0, (25.0, 2.0)),
        (100, None, 4.0, (25.0, None)),
        (10, 100, 0.0, (0.0, None)),
    ],
)
def test_rate_and_eta(done, total, elapsed, expected):
    assert rate_and_eta(done, total, elapsed) == expected


@pytest.mark.parametrize(
    "blob, line",
    [
        (BlobProgress(D1, 53_500_000, 12_300_000, started=0.0), "a1b2c3d4e5f6  12.3MB/53.5MB  22%  4.1MB/s  ETA 10s"),
        (BlobProgress(D1, None, 1000, started=1.0), "a1b2c3d4e5f6  1kB/?  ?%  500B/s  ETA --"),
        (BlobProgress(D1, 0, 0, started=3.0), "a1b2c3d4e5f6  0B/0B  100%  0B/s  ETA --"),
        (
            BlobProgress(D1, 53_500_000, 53_500_000, True, started=0.0, ended=2.0),
            "a1b2c3d4e5f6  done 53.5MB in 2.0s (26.8MB/s)",
        ),
    ],
)
def test_blob_line(blob, line):
    assert blob_line(blob, now=3.0) == line


def test_terminal_lines_add_a_total_for_several_blobs():
    snap = ProgressSnapshot(
        (BlobProgress(D1, 2000, 1000, started=0.0), BlobProgress(D2, 2000, 2000, True, started=0.0, ended=1.0)),
        now=2.0,
        started=0.0,
    )
    assert terminal_lines(snap) == [
        "a1b2c3d4e5f6  1kB/2kB  50%  500B/s  ETA 2s",
        "ffeeddccbbaa  done 2kB in 1.0s (2kB/s)",
        "total  3kB/4kB  75%  1.5kB/s  ETA 1s",
    ]
    one = ProgressSnapshot(snap.blobs[:1], now=2.0, started=0.0)
    assert terminal_lines(one) == ["a1b2c3d4e5f6  1kB/2kB  50%  500B/s  ETA 2s"]


def test_plain_lines_say_each_start_and_finish_once():
    running = ProgressSnapshot((BlobProgress(D1, 2000, 10, started=0.0),), now=1.0, started=0.0)
    assert plain_lines(None, running) == ["a1b2c3d4e5f6  started (2kB)"]
    assert plain_lines(running, running) == []
    done = ProgressSnapshot(
        (BlobProgress(D1, 2000, 2000, True, started=0.0, ended=4.0), BlobProgress(D2, None, 0, started=4.0)),
        now=4.0,
        started=0.0,
    )
    assert plain_lines(running, done) == [
        "a1b2c3d4e5f6  done 2kB in 4.0s (500B/s)",
        "ffeeddccbbaa  started (unknown size)",
    ]
    # Started and finished between two looks: both lines.
    assert plain_lines(None, done)[:2] == ["a1b2c3d4e5f6  started (2kB)", "a1b2c3d4e5f6  done 2kB in 4.0s (500B/s)"]


def test_progress_counts_per_blob():
    clock = FakeClock()
    p = Progress(clock)
    p.begin(D1, 100)
    p.begin(D1, 999)  # a second begin changes nothing
    p.advance(D1, 40)
    p.advance("unknown", 5)
    clock.advance(2)
    p.begin("member", None)
    p.advance("member", 7)
    p.finish("member")
    snap = p.snapshot()
    assert (snap.done, snap.total) == (47, 107)
    start = p.started
    assert snap.blobs[1] == BlobProgress("member", 7, 7, True, started=start + 2, ended=start + 2)


def test_with_progress_plain_and_errors():
    out = io.StringIO()

    def work(p: Progress) -> str:
        p.begin(D1, 3)
        p.advance(D1, 3)
        p.finish(D1)
        return "ok"

    assert with_progress(work, out, tty=False) == "ok"
    lines = out.getvalue().splitlines()
    assert lines[0] == "a1b2c3d4e5f6  started (3B)" and lines[1].startswith("a1b2c3d4e5f6  done 3B in ")
    tty = io.StringIO()
    with_progress(work, tty, tty=True)
    assert tty.getvalue().startswith("\x1b[2Ka1b2c3d4e5f6  done 3B")

    def fails(p: Progress) -> None:
        raise OSError("boom")

    with pytest.raises(OSError, match="boom"):
        with_progress(fails, io.StringIO(), tty=False)


POD = {
    "metadata": {"name": "web-node", "namespace": "default"},
    "spec": {"containers": [{"name": "main", "image": "reg/app:1"}, {"name": "side", "image": "reg/side:2"}]},
    "status": {
        "phase": "Pending",
        "containerStatuses": [
            {
                "name": "main",
                "image": "reg/app:1",
                "ready": False,
                "restartCount": 0,
                "state": {"waiting": {"reason": "ContainerCreating"}},
            },
            {
                "name": "side",
                "image": "reg/side:2",
                "ready": False,
                "restartCount": 0,
                "state": {"waiting": {"reason": "ContainerCreating"}},
            },
        ],
    },
}


def test_pull_shown_in_wide_message_and_describe():
    assert pull_text(12_300_000, 53_500_000) == "12.3MB of 53.5MB (22%)"
    row = PodRow(
        namespace="default",
        name="web-node",
        uid="u",
        ready="0/2",
        status="ContainerCreating",
        restarts=0,
        created=0.0,
        source="file",
        origin="/m/web.yaml",
        pod=POD,
    )
    assert (
        pulls_message(row, {"reg/app:1": [12_300_000, 53_500_000], "other": [1, 2]})
        == "pulling reg/app:1: 12.3MB of 53.5MB (22%)"
    )
    assert pulls_message(row, {}) == ""
    text = describe_pod(POD, [], 0.0, {"reg/app:1": [12_300_000, 53_500_000]})
    main = text[text.index("  main:") : text.index("  side:")]
    assert "      Reason:       ContainerCreating\n      Pulling:      12.3MB of 53.5MB (22%)\n" in main
    assert "Pulling:" not in text[text.index("  side:") :]
