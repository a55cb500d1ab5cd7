"""Stopping: a stop that cannot finish still ends the process; graceful node shutdown's plan."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_a_stuck_shutdown_exits_anyway() -> None:
    code = """
import threading
from edgelet.util.log import configure
from edgelet.agentprocess import exit_if_stuck
configure(0)
threading.Thread(target=threading.Event().wait).start()  # non-daemon, never ends: exit would wait forever
exit_if_stuck(0.2)
"""
    # The bound only keeps a broken implementation from hanging the suite; nothing is timed.
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    assert "Shutdown is taking too long; exiting now" in out.stderr


# --- graceful node shutdown (edgelet.sync.shutdown) ------------------------------------------------


@pytest.mark.parametrize(
    "priorities, total, critical, groups",
    [
        ({}, 30, 10, []),
        ({"a": 0, "b": 5}, 30, 10, [(("a", "b"), 20.0)]),
        ({"a": 0, "c": 2_000_001_000}, 30, 10, [(("a",), 20.0), (("c",), 10.0)]),
        ({"c": 2_000_000_000}, 30, 10, [(("c",), 10.0)]),
        ({"a": 0}, 0, 0, []),  # 0: no graceful node shutdown
        ({"a": 0, "c": 2_000_000_000}, 5, 9, [(("a",), 0.0), (("c",), 5.0)]),  # the critical share is capped
    ],
)
def test_node_shutdown_plan(priorities, total, critical, groups) -> None:
    from edgelet.sync.shutdown import plan

    assert [(g.uids, g.grace) for g in plan(priorities, total, critical)] == groups


def test_the_systemd_status_line_summarizes_the_pods() -> None:
    from types import SimpleNamespace

    from edgelet.sdnotify import pods_summary

    def entry(phase: str, status: str):
        return SimpleNamespace(row=SimpleNamespace(phase=phase, status=status))

    assert pods_summary([]) == "0 pods: 0 running"
    assert (
        pods_summary(
            [
                entry("Running", "Running"),
                entry("Running", "CrashLoopBackOff"),
                entry("Pending", "ErrImagePull"),
                entry("Failed", "Error"),
                entry("Succeeded", "Completed"),
                entry("Pending", "ContainerCreating"),
            ]
        )
        == "6 pods: 1 running, 3 waiting (CrashLoopBackOff, ErrImagePull), 1 failed, 1 completed"
    )
