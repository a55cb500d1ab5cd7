"""Self-update end to end: the real agent started by packaging/launch under a loop playing systemd (Restart=always,
Type=notify, KillMode=process), real runc pods, real minisign signatures, a release dropped into the card's
update/ folder. A good release is committed with every container's id and pid unchanged; a release that exits
at start, hangs without notifying, hangs after READY=1 (the watchdog's), or restarts a pod is rolled back with
the reason, the pods untouched.

The releases' payload is a one-dir whose entry program runs this tree's agent, or, under `make test-binary`
(EDGELET_BIN names a one-dir build), a copy of the real frozen one-dir: the same code under another version in
release.json is a faithful second build.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
from pathlib import Path

import msgspec
import pytest

from edgelet.testing.serviceloop import ServiceLoop
from edgelet.testing.signing import MinisignKey, missing_tools, trusted_dir
from edgelet.update import RELEASE_JSON
from edgelet.update.release import ReleaseInfo, describe_tree, own_arch, pack_release
from tests.e2e.conftest import edgelet_command, sleeper_yaml, wait_for

pytestmark = [
    pytest.mark.privileged,
    pytest.mark.skipif(bool(missing_tools()), reason=f"needs {missing_tools()} (make deps)"),
]

REPO = Path(__file__).resolve().parents[2]
LAUNCH = REPO / "packaging" / "launch"
RUN_AGENT = f'#!/bin/sh\nexec {sys.executable} -m edgelet "$@"\n'
START_TIMEOUT = 10.0
ENTRIES = {
    "good": RUN_AGENT,
    "exits": "#!/bin/sh\necho 'broken release: exits at start' >&2\nexit 3\n",
    "hangs": "#!/bin/sh\necho 'broken release: hangs' >&2\nexec sleep 600\n",
    # Tells systemd it is ready, then hangs: no WATCHDOG=1 ever, so the watchdog kills each start.
    "hangs-after-ready": (
        f"#!/bin/sh\nexec {sys.executable} -c '"
        'import os, socket, time; a = os.environ["NOTIFY_SOCKET"]; '
        'socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b"READY=1", "\\0" + a[1:]); time.sleep(600)\'\n'
    ),
    # Kills the pod's process the old agent left (its pid from the snapshot), then runs the agent, which restarts it.
    "restarts-a-pod": (
        "#!/bin/sh\n"
        'pid=$(sed -n \'s/.*"pid": *\\([0-9][0-9]*\\).*/\\1/p\' "$EDGELET_ROOT_DIR/update/snapshot.json")\n'
        '[ -n "$pid" ] && kill -9 "$pid"\n' + RUN_AGENT.split("\n", 1)[1]
    ),
}


def onedir(path: Path, kind: str) -> Path:
    """A release's payload: under `make test-binary` (EDGELET_BIN, a one-dir build) a good one is a copy of the
    real frozen one-dir; otherwise, and for every broken one, an entry script."""
    binary = Path(os.environ.get("EDGELET_BIN", "")).resolve()
    if kind == "good" and (binary.parent / "_internal").is_dir():
        shutil.copytree(binary.parent, path, symlinks=True)
        return path
    path.mkdir(parents=True)
    (path / "edgelet").write_text(ENTRIES[kind])
    (path / "edgelet").chmod(0o755)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Device:
    """The agent's dirs plus the release layout: lib/current -> lib/releases/1000 (the .deb's install)."""

    def __init__(self, agent, tmp_path: Path, crash_env: dict[str, str] | None = None) -> None:
        self.agent = agent
        self.tmp = tmp_path
        self.lib = tmp_path / "lib"
        self.current = self.lib / "current"
        self.card = tmp_path / "card"
        (self.card / "update").mkdir(parents=True)
        self.key = MinisignKey.generate(tmp_path / "keys")
        self.trusted = trusted_dir(tmp_path / "keys" / "trusted", self.key)
        installed = onedir(self.lib / "releases" / "1000", "good")
        info = ReleaseInfo(version=1000, label="0.1.0", arch=own_arch(), files=describe_tree(installed))
        (installed / RELEASE_JSON).write_bytes(msgspec.json.encode(info))
        os.symlink(installed, self.current)
        root = agent.paths.root_dir
        self.update_dir = root / "update"
        args = agent.argv()[len(edgelet_command()) :]
        args += ["--card-dir", str(self.card), "--trusted-keys", str(self.trusted)]
        args += ["--update-current", str(self.current), "--update-trial-deadline", "40s"]
        args += ["--healthz-port", str(free_port())]
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "EDGELET_UPDATE_CURRENT": str(self.current),
            "EDGELET_ROOT_DIR": str(root),
        }
        self.loop = ServiceLoop(
            ["sh", str(LAUNCH), *args],
            env=env,
            log_path=agent.log_path,
            # Short, as the unit's TimeoutStartSec: the real agent's start extends it while it moves (sdnotify).
            start_timeout=START_TIMEOUT,
            watchdog=10.0,
            crash_env=crash_env,
        )

    def publish(self, version: int, kind: str) -> None:
        """Build, sign and drop a release into the card's update/ folder (signature first, then the archive)."""
        work = self.tmp / f"build-{version}"
        name = f"edgelet-0.1.{version}-{own_arch()}.tar.xz"
        pack_release(
            onedir(work / "onedir", kind), work / name, version=version, arch=own_arch(), label=f"0.1.{version}"
        )
        sig = self.key.sign(work / name, version=version)
        os.replace(sig, self.card / "update" / (name + ".minisig"))
        os.replace(work / name, self.card / "update" / name)

    def history(self) -> list[dict]:
        try:
            return json.loads((self.update_dir / "history.json").read_text())
        except FileNotFoundError:
            return []

    def outcome(self, version: int) -> dict | None:
        return next((e for e in self.history() if e.get("version") == version and e["outcome"] != "started"), None)

    def sleeper(self) -> tuple[str, int]:
        [c] = self.agent.containers_of("sleeper")
        return c["id"], c["pid"]


def boot(agent, tmp_path: Path, crash_env: dict[str, str] | None = None) -> Device:
    """The device with a running sleeper pod under the service loop."""
    d = Device(agent, tmp_path, crash_env)
    # With --trusted-keys every manifest and image archive is signed too.
    d.key.sign(agent.paths.root_dir / "images" / "import" / "busybox.oci.tar")
    manifest = tmp_path / "sleeper.yaml"
    manifest.write_text(sleeper_yaml("sleeper"))
    d.key.sign(manifest, version=1, out=agent.manifests / "sleeper.yaml.minisig")
    os.replace(manifest, agent.manifests / "sleeper.yaml")
    d.loop.start()
    wait_for(lambda: (r := agent.pod("sleeper")) and r["status"] == "Running", timeout=60, what="pod Running")
    return d


@pytest.fixture
def device(agent, tmp_path: Path):
    d = boot(agent, tmp_path)
    yield d
    d.loop.stop()
    if os.environ.get("EDGELET_TEST_SHOW_LOG"):
        print(agent.log())


def test_a_good_release_is_committed_with_every_pod_adopted_as_it_ran(device: Device) -> None:
    before = device.sleeper()
    device.publish(1001, "good")
    done = wait_for(lambda: device.outcome(1001), timeout=180, what="release 1001 committed or rolled back")
    assert done["outcome"] == "committed", (done, device.agent.log()[-3000:])
    assert os.readlink(device.current) == str(device.agent.paths.root_dir / "releases" / "1001")
    assert device.sleeper() == before  # same container id, same pid: the update stopped no pod
    assert not [s for s in device.loop.starts if s.killed]  # every start of the real agent moved: none killed
    assert not (device.update_dir / "trial").exists()
    assert done["previous"] == str(device.lib / "releases" / "1000")  # kept for a rollback
    assert (device.lib / "releases" / "1000").is_dir()
    # Refused afterwards: the same release again (not newer), an older one.
    device.publish(999, "good")
    refused = wait_for(lambda: [e for e in device.history() if e["outcome"] == "refused"], timeout=60, what="refusal")
    assert "version 999 is not newer than the running version 1001" in refused[0]["reason"]


def test_an_operator_rollback_restarts_the_agent_into_the_previous_release(device: Device) -> None:
    """`edgelet update rollback` after a commit: `current` back, and the agent under the loop (systemd) restarted
    into the previous release by the command itself, every pod as it ran; the release left is not taken again."""
    before = device.sleeper()
    device.publish(1001, "good")
    done = wait_for(lambda: device.outcome(1001), timeout=180, what="release 1001 committed or rolled back")
    assert done["outcome"] == "committed", (done, device.agent.log()[-3000:])
    wait_for(lambda: device.loop.starts[-1].ready, timeout=60, what="release 1001 ready")
    starts = len(device.loop.starts)
    out = device.agent.cli("update", "rollback", "--update-current", str(device.current))
    assert "restarting edgelet (pid" in out, out
    assert os.readlink(device.current) == str(device.lib / "releases" / "1000")
    wait_for(
        lambda: len(device.loop.starts) > starts and device.loop.starts[-1].ready,
        timeout=120,
        what="the agent restarted and ready",
    )
    assert len(device.loop.starts) == starts + 1 and not device.loop.starts[starts - 1].killed  # SIGTERM, no kill
    assert running_release(device) == str(device.lib / "releases" / "1000")
    assert device.sleeper() == before
    refused = wait_for(lambda: [e for e in device.history() if e["outcome"] == "refused"], timeout=60, what="refusal")
    assert "version 1001 is not newer than version 1001, rolled back before" in refused[0]["reason"]


def running_release(device: Device) -> str:
    """The release the loop's running agent was started from (the launcher exports it before it execs)."""
    pid = device.loop.pid
    assert pid is not None
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return next(e.split(b"=", 1)[1].decode() for e in environ if e.startswith(b"EDGELET_RELEASE_DIR="))


@pytest.mark.parametrize(
    "kind, reason",
    [
        ("exits", "restart loop: 3 starts without a commit"),
        ("hangs", "restart loop: 3 starts without a commit"),
        ("hangs-after-ready", "restart loop: 3 starts without a commit"),
        ("restarts-a-pod", "pods not adopted as they ran: default/sleeper-testnode/c"),
    ],
)
def test_a_broken_release_is_rolled_back_with_the_reason(device: Device, kind: str, reason: str) -> None:
    before = device.sleeper()
    device.publish(1001, kind)
    done = wait_for(lambda: device.outcome(1001), timeout=300, what="release 1001 rolled back")
    assert done["outcome"] == "rolled-back" and reason in done["reason"], (done, device.agent.log()[-3000:])
    assert os.readlink(device.current) == str(device.lib / "releases" / "1000")
    wait_for(lambda: device.loop.starts[-1].ready, timeout=60, what="the previous release ready again")
    if kind != "restarts-a-pod":
        assert device.sleeper() == before
    # Replayed: the same bad release is refused from now on.
    assert 1001 in {e["version"] for e in device.history() if e["outcome"] == "rolled-back"}
    if kind == "hangs":
        # Each of its three counted starts killed by the short start timeout (nothing extended it), then the
        # launcher's rollback: minutes under the unit's 90 s, not three ten-minute timeouts.
        hung = [s for s in device.loop.starts if s.killed]
        assert [(s.killed, s.extensions) for s in hung] == [("start timeout", 0)] * 3
    if kind == "hangs-after-ready":
        # Ready, then silent: each of its three counted starts killed by the watchdog (WatchdogSec=, SIGABRT).
        assert [s.killed for s in device.loop.starts if s.killed] == ["watchdog"] * 3


@pytest.mark.parametrize(
    "point, kind, outcome, current",
    [
        ("update.unpack", "good", "committed", "1001"),  # staged again after the restart
        ("update.swap", "good", "committed", "1001"),  # the record without its swap is forgotten, then applied
        ("update.trial", "good", "committed", "1001"),  # swapped: the launcher starts the new release anyway
        ("update.commit", "good", "committed", "1001"),  # committed again at the next start, recorded once
        ("update.rollback", "restarts-a-pod", "rolled-back", "1000"),  # swapped back: the previous one records it
    ],
)
def test_a_crash_at_each_step_ends_on_exactly_one_release(
    agent, tmp_path: Path, point: str, kind: str, outcome: str, current: str
) -> None:
    """SIGKILL (EDGELET_TEST_CRASH_AT) at one step of an update; the loop restarts the agent without it."""
    d = boot(agent, tmp_path, crash_env={"EDGELET_TEST_CRASH_AT": point})
    try:
        before = d.sleeper()
        d.publish(1001, kind)
        done = wait_for(lambda: d.outcome(1001), timeout=300, what=f"release 1001 settled after a crash at {point}")
        assert done["outcome"] == outcome, (done, agent.log()[-3000:])
        wait_for(lambda: any(s.rc == -9 and not s.killed for s in d.loop.starts), timeout=60, what="the crash")
        # Settled: an agent ready after the crash, and no trial left (a commit killed midway is done again).
        wait_for(
            lambda: d.loop.starts[-1].ready and not (d.update_dir / "trial").exists(),
            timeout=120,
            what="an agent ready after it, and no trial left",
        )
        target = os.readlink(d.current)
        assert Path(target).name == current
        assert [e["outcome"] for e in d.history() if e.get("version") == 1001].count(outcome) == 1
        assert [p.name for p in (agent.paths.root_dir / "releases").iterdir() if p.name.startswith(".")] == []
        if kind == "good":
            assert d.sleeper() == before
    finally:
        d.loop.stop()
