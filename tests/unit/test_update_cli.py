"""`edgelet update status|history|rollback` on the files self-update keeps, and `edgelet check`'s line."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from edgelet.cli import main
from edgelet.cli.update import is_supervised, restart_decision
from edgelet.update import RELEASE_JSON
from edgelet.update.decide import TrialRecord
from edgelet.update.release import ReleaseInfo
from edgelet.update.store import UpdateStore


def release_dir(path: Path, version: int) -> Path:
    path.mkdir(parents=True)
    (path / "edgelet").write_text("#!/bin/sh\n")
    info = ReleaseInfo(version=version, label=f"0.1.{version}", arch="amd64", files={"edgelet": {"sha256": "0" * 64}})  # type: ignore[dict-item]
    (path / RELEASE_JSON).write_bytes(msgspec.json.encode(info))
    return path


def run(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    keys = tmp_path / "keys"
    keys.mkdir(exist_ok=True)
    argv = ["update", *args, "--config", "/dev/null", "--root-dir", str(tmp_path / "root")]
    argv += ["--run-dir", str(tmp_path / "run")]  # never the host's: a rollback restarts the agent listening there
    argv += ["--update-current", str(tmp_path / "lib" / "current"), "--trusted-keys", str(keys)]
    return main(argv, out=out, err=err), out.getvalue(), err.getvalue()


@pytest.fixture
def device(tmp_path: Path) -> UpdateStore:
    old = release_dir(tmp_path / "lib" / "releases" / "1000", 1000)
    new = release_dir(tmp_path / "root" / "releases" / "1001", 1001)
    os.symlink(new, tmp_path / "lib" / "current")
    store = UpdateStore(tmp_path / "root" / "update")
    store.append({"time": 1_700_000_000, "version": 1001, "outcome": "committed", "previous": str(old)})
    return store


def test_status_names_the_running_release_and_the_last_outcome(tmp_path: Path, device: UpdateStore) -> None:
    rc, out, _ = run(tmp_path, "status")
    assert rc == 0
    assert "Release:   0.1.1001 (1001, amd64)" in out and "Updates:   on" in out and "committed 1001" in out
    device.write_trial(TrialRecord(version=1002, target="/x/1002", previous="/x/1001", attempts=2))
    assert "Trial:     version 1002 (on trial, 2 start(s) counted; previous /x/1001)" in run(tmp_path, "status")[1]


def test_rollback_points_current_at_the_previous_release_and_says_so_in_the_history(
    tmp_path: Path, device: UpdateStore
) -> None:
    rc, out, _ = run(tmp_path, "rollback")
    assert rc == 0 and "edgelet is not running: its next start runs it" in out
    assert os.readlink(tmp_path / "lib" / "current") == str(tmp_path / "lib" / "releases" / "1000")
    last = device.history()[-1]
    assert last["outcome"] == "operator-rollback" and last["version"] == 1001
    # The release left is still on the card (or at the URL): it is not applied again; a newer one is.
    assert device.rolled_back_versions() == {1001}
    rc, _, err = run(tmp_path, "rollback")  # nothing older kept
    assert rc == 1 and "no previous release is kept to roll back to" in err
    assert "operator-rollback" in run(tmp_path, "history")[1]


def test_rollback_is_refused_while_a_trial_runs(tmp_path: Path, device: UpdateStore) -> None:
    device.write_trial(TrialRecord(version=1002, target="/x/1002", previous="/x/1001"))
    rc, _, err = run(tmp_path, "rollback")
    assert rc == 1 and "on trial" in err
    assert os.readlink(tmp_path / "lib" / "current") == str(tmp_path / "root" / "releases" / "1001")


def test_without_the_layout_updates_are_off_and_say_why(tmp_path: Path) -> None:
    rc, out, _ = run(tmp_path, "status")
    assert rc == 0 and "is not a symlink: edgelet was not installed with the releases layout" in out


@pytest.mark.parametrize(
    "pid, supervised, no_restart, restart, says",
    [
        (None, False, False, False, "edgelet is not running: its next start runs it"),
        (42, True, False, True, "restarting edgelet (pid 42) into it; pods keep running"),
        (42, True, True, False, "restart edgelet (pid 42) to run it (systemctl restart edgelet)"),
        (42, False, False, False, "edgelet (pid 42) does not run under systemd: restart it to run it"),
    ],
)
def test_restart_decision(pid: int | None, supervised: bool, no_restart: bool, restart: bool, says: str) -> None:
    assert restart_decision(pid, supervised=supervised, no_restart=no_restart) == (restart, says)


LISTENER = """
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1])
s.listen()
print("listening", flush=True)
time.sleep(120)
"""


@pytest.mark.parametrize("under_systemd, no_restart", [(False, False), (True, False), (True, True)])
def test_a_rollback_restarts_the_agent_found_by_its_socket_only_under_systemd(
    tmp_path: Path, device: UpdateStore, under_systemd: bool, no_restart: bool
) -> None:
    """A process stands for the agent on the API socket: found by the kernel's SO_PEERCRED, it gets SIGTERM (the
    agent's own way into a restart) only when systemd started it ($INVOCATION_ID); otherwise it is only named."""
    from edgelet.cli.client import agent_pid
    from edgelet.server.api import socket_path

    (tmp_path / "run").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "INVOCATION_ID"}
    if under_systemd:
        env["INVOCATION_ID"] = "0123456789abcdef0123456789abcdef"
    sock = socket_path(tmp_path / "run")
    child = subprocess.Popen([sys.executable, "-c", LISTENER, str(sock)], env=env, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"listening\n"
        assert agent_pid(tmp_path / "run") == child.pid and is_supervised(child.pid) is under_systemd
        rc, out, _ = run(tmp_path, "rollback", *(["--no-restart"] if no_restart else []))
        assert rc == 0
        if no_restart:
            assert f"restart edgelet (pid {child.pid}) to run it (systemctl restart edgelet)" in out
            assert child.poll() is None
        elif under_systemd:
            assert f"restarting edgelet (pid {child.pid}) into it" in out
            assert child.wait(60) == -signal.SIGTERM
        else:
            assert f"edgelet (pid {child.pid}) does not run under systemd: restart it to run it" in out
            assert child.poll() is None
    finally:
        child.kill()
        child.wait()
        child.stdout.close()  # type: ignore[union-attr]
    assert agent_pid(tmp_path / "run") is None  # a stale socket: none listens
