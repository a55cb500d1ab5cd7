"""Named crash points for the chaos tests: the process SIGKILLs itself where a test asked, and nowhere otherwise.

`EDGELET_TEST_CRASH_AT=<point>[:<n>][,<point>[:<n>]...]` arms points: the
n-th time (default the first) the process passes `crash_point(<point>)` it
kills itself with SIGKILL, as a power cut or the OOM killer would, in the
middle of whatever it was doing. Unset (always, outside the chaos tests) the
armed table is empty and `crash_point` is a dictionary truth test: nothing is
parsed, counted or looked up.

With `EDGELET_TEST_CRASH_HOLD=1` an armed point holds instead of killing: it
writes `crash point <point>: holding` to stderr (the journal, under systemd)
and blocks forever, so that a test outside the process (the emulated board's)
cuts the power exactly there and loses the page cache as well.
"""

from __future__ import annotations

import os
import signal
import sys

ENV = "EDGELET_TEST_CRASH_AT"
HOLD_ENV = "EDGELET_TEST_CRASH_HOLD"

# The points the product passes, so that a test naming another one is told (see `parse`).
POINTS = frozenset(
    {
        "image.import",  # an archive's blobs are in the store, its index record is not yet written
        "image.unpack",  # between two members of a layer's tar
        "sandbox.create",  # the namespaces are pinned (or the pause container created), the sandbox not yet started
        "cni.add",  # the plugin chain has attached the pod, its result is not yet cached
        "container.create",  # a container is created under conmon, not yet started
        "sandbox.ready",  # a sandbox's CNI ADD and its first container's create (beside it) succeeded, not yet started
        "conmon.answer",  # conmon runs `runc create` (a sandbox's or a container's), its answer not yet read
        "container.stop",  # the stop signal is sent, the exit not yet seen
        "container.remove",  # runc state is deleted, the exit file and bundle are not yet removed
        "pod.remove",  # a removed pod's containers, logs and cgroups are gone, its pod dir is not yet
        "rollout.step",  # a rollout record is written, the step it decided not yet taken (any step)
        "rollout.replace",  # the record says replacing: the old version is not yet stopped, the new not started
        "rollout.gate",  # the record says gating: the new version runs, the gate has not judged it
        "rollout.rollback",  # the record says rolling back: the failed version still runs, the last good not yet
        "update.download",  # a chunk of a release's archive from --update-url is written to its .part file
        "update.unpack",  # a release's files are written under its partial directory, its signature not yet checked
        "update.swap",  # the trial record is written, `current` not yet pointed at the new release
        "update.trial",  # `current` points at the new release, the old agent has not yet exited
        "update.commit",  # the history says committed, the trial record is not yet removed
        "update.rollback",  # a trial's rollback swapped `current` back, its outcome is not yet written
        "checkpoint.write",  # write_atomic's temp file is written and synced, not yet renamed over the file
    }
)


def parse(text: str) -> dict[str, int]:
    """`point[:n],...` -> {point: n}; an unknown point or a count below 1 is a ValueError (a test's typo)."""
    armed: dict[str, int] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, _, count = item.partition(":")
        if name not in POINTS:
            raise ValueError(f"{ENV}: unknown crash point {name!r} (known: {', '.join(sorted(POINTS))})")
        n = int(count) if count else 1
        if n < 1:
            raise ValueError(f"{ENV}: {item!r}: the count must be at least 1")
        armed[name] = n
    return armed


_armed: dict[str, int] = parse(os.environ.get(ENV, "")) if os.environ.get(ENV) else {}
_hold = os.environ.get(HOLD_ENV) == "1"


def crash_point(name: str) -> None:
    """Die here by SIGKILL (or hold here forever) if a chaos test armed `name` and this is its n-th passage."""
    if not _armed:
        return
    left = _armed.get(name)
    if left is None:
        return
    if left > 1:
        _armed[name] = left - 1
        return
    if _hold:
        _hold_forever(name)
    os.kill(os.getpid(), signal.SIGKILL)


def _hold_forever(name: str) -> None:
    """Say where, then block until the process is killed (or the power cut)."""
    sys.stderr.write(f"crash point {name}: holding\n")
    sys.stderr.flush()
    while True:
        signal.pause()  # a signal's handler runs and returns here: nothing but SIGKILL ends the hold
