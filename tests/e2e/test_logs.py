"""Container logs end to end: rotation under the agent, `edgelet logs -f` across rotations, container GC keeping
the last exited instance, and a removed pod's logs going with it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import IMAGE, wait_for

pytestmark = pytest.mark.privileged

ROTATION = (
    "--container-log-max-size",
    "8Ki",
    "--container-log-max-files",
    "4",
    "--container-log-monitor-interval",
    "1s",
)


def pod_yaml(name: str, script: str, restart: str = "Always") -> str:
    return f"""apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  restartPolicy: {restart}
  terminationGracePeriodSeconds: 1
  volumes:
  - name: shared
    emptyDir: {{}}
  containers:
  - name: c
    image: {IMAGE}
    command: ["sh", "-c", {script!r}]
    volumeMounts:
    - {{name: shared, mountPath: /data}}
"""


def log_dir_of(agent, name: str) -> Path:
    uid = agent.pod(name)["uid"]
    return agent.paths.log_dir / "pods" / f"default_{name}-testnode_{uid}"


def cli_argv(agent, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "edgelet",
        *args,
        "--root-dir",
        str(agent.paths.root_dir),
        "--run-dir",
        str(agent.paths.run_dir),
        "--config",
        "/dev/null",
    ]


def test_logs_follow_across_rotations_misses_and_repeats_nothing_and_pod_removal_takes_the_logs(runtime_handler, agent):
    agent.start(*ROTATION)
    count = 1500
    # Says it is there and waits until the test follows, then about 9 kB/s of numbered lines against 8 KiB files.
    script = (
        "echo ready; while [ ! -f /data/go ]; do sleep 0.1; done; i=0; "
        f"while [ $i -lt {count} ]; do echo line-$i; i=$((i+1)); [ $((i % 10)) -eq 0 ] && sleep 0.05; done; "
        "echo done; exec sleep 3600"
    )
    agent.write_manifest("steady.yaml", pod_yaml("steady", script))
    wait_for(lambda: (r := agent.pod("steady")) and r["status"] == "Running", timeout=60, what="pod Running")
    proc = subprocess.Popen(cli_argv(agent, "logs", "-f", "steady"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        uid = agent.pod("steady")["uid"]
        # The follower is connected once it shows the first line: only then do the numbered lines start.
        assert proc.stdout.readline() == b"ready\n"
        (agent.paths.pod_dir(uid) / "volumes" / "shared" / "go").touch()
        seen = []
        while (line := proc.stdout.readline()) != b"done\n":
            assert line, f"the follower ended early: {proc.stderr.read()!r}"
            seen.append(line)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    assert seen == [f"line-{i}\n".encode() for i in range(count)]
    directory = log_dir_of(agent, "steady") / "c"
    names = os.listdir(directory)
    # Rotated, the older files gzipped, never more than max-files of them (the current file's link aside,
    # and the spare conmon opens at its next reopen, empty).
    assert any(n.endswith(".gz") for n in names), names
    spare = os.stat(directory / "0.log.tmp").st_ino if "0.log.tmp" in names else None
    assert len({os.stat(directory / n).st_ino for n in names if n.startswith("0.log")} - {spare}) <= 4
    # --tail reads across the rotated files.
    assert agent.cli("logs", "steady", "--tail", "3") == f"line-{count - 2}\nline-{count - 1}\ndone\n"
    links = agent.paths.log_dir / "containers"
    assert [p for p in links.iterdir() if "steady" in p.name]

    (agent.manifests / "steady.yaml").unlink()
    wait_for(
        lambda: agent.pod("steady") is None and not directory.parent.exists(),
        timeout=60,
        what="the removed pod's log dir gone",
    )
    assert not [p for p in links.iterdir() if "steady" in p.name]


def test_gc_keeps_the_last_exited_instance_with_its_state_and_removes_older_ones_with_their_logs(agent):
    agent.start()
    agent.write_manifest(
        "crash.yaml",
        pod_yaml(
            "crash",
            "echo run-$(cat /data/n 2>/dev/null || echo 0); "
            "echo $(( $(cat /data/n 2>/dev/null || echo 0) + 1 )) "
            "> /data/n; exit 3",
        ),
    )

    def restarts() -> int:
        row = agent.pod("crash") or {}
        statuses = ((row.get("pod") or {}).get("status") or {}).get("containerStatuses") or [{}]
        return statuses[0].get("restartCount") or 0

    # Back-off: 10 s, then 20 s; the third instance has run once restartCount reaches 2.
    wait_for(
        lambda: (
            restarts() >= 2
            and len(os.listdir(log_dir_of(agent, "crash") / "c")) <= 2
            and "run-2" in agent.cli("logs", "crash")
        ),
        timeout=120,
        what="three instances run and the oldest collected",
    )
    status = agent.pod("crash")["pod"]["status"]["containerStatuses"][0]
    assert status["lastState"]["terminated"]["exitCode"] == 3
    directory = log_dir_of(agent, "crash") / "c"
    assert sorted(os.listdir(directory)) == ["1.log", "2.log"]
    assert agent.cli("logs", "crash", "-p") == "run-1\n"
    uid = agent.pod("crash")["uid"]
    containers = agent.paths.pod_dir(uid) / "containers" / "c"
    assert sorted(os.listdir(containers)) == ["1", "2"]
    # Exited instances keep their bundle (their record) but not their runc state or rootfs mount.
    wait_for(
        lambda: (
            not [
                c
                for c in agent.containers_of("crash")
                if (c.get("annotations") or {}).get("io.edgelet.kind") == "container"
            ]
        ),
        timeout=30,
        what="exited instances released from runc",
    )
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(containers) not in mounts
