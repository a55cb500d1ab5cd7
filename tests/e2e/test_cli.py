"""The CLI as a new user meets it, against a real agent: short pod names without the agent's node name, the
common flags on every subcommand, the Node's conditions, and unknown or abbreviated flags refused (issue 23)."""

from __future__ import annotations

import socket
import subprocess

import pytest

from tests.e2e.conftest import IMAGE, edgelet_command, wait_for

pytestmark = pytest.mark.privileged

WEB = f"""apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: {IMAGE}
    command: ["sh", "-c", "echo hello from web; exec sleep 3600"]
"""


def run_cli(agent, *args: str) -> subprocess.CompletedProcess:
    """An `edgelet` subcommand on the agent's dirs, without its --hostname-override (the CLI's node is this
    machine's hostname)."""
    return subprocess.run(
        [
            *edgelet_command(),
            *args,
            "--root-dir",
            str(agent.paths.root_dir),
            "--run-dir",
            str(agent.paths.run_dir),
            "--log-dir",
            str(agent.paths.log_dir),
            "--config",
            "/dev/null",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def conditions(node_output: str) -> dict[str, list[str]]:
    lines = node_output.splitlines()
    start = lines.index("Conditions:") + 3  # the header and its underline
    out = {}
    for line in lines[start:]:
        if not line.startswith("  "):
            break
        cells = line.split()
        out[cells[0]] = cells[1:3]
    return out


def test_a_static_pod_is_found_by_its_short_name_and_the_node_shows_its_conditions(agent):
    assert socket.gethostname().strip().lower() != "testnode"  # else this test would prove nothing
    agent.start()
    agent.write_manifest("web.yaml", WEB)
    wait_for(lambda: (r := agent.pod("web")) and r["status"] == "Running", timeout=90, what="web Running")

    # events --for takes the node name from the agent, as describe does: it printed nothing before.
    events = wait_for(
        lambda: (e := run_cli(agent, "events", "--for", "web")).returncode == 0 and "Started" in e.stdout and e,
        timeout=30,
        what="web's Started event",
    )
    assert "pod/web-testnode" in events.stdout
    assert "Name:" in run_cli(agent, "describe", "pod", "web").stdout
    assert run_cli(agent, "pods", "web").stdout.splitlines()[1].split()[1] == "web-testnode"
    assert "hello from web" in run_cli(agent, "logs", "web").stdout

    # Every subcommand that reads the agent's state takes the same common flags.
    for args in (
        ["pods"],
        ["describe", "pod", "web"],
        ["events", "--for", "web"],
        ["logs", "web"],
        ["node"],
        ["images"],
    ):
        done = run_cli(agent, *args, "--hostname-override", "testnode")
        assert done.returncode == 0, (args, done.stderr)

    node = wait_for(
        lambda: (n := run_cli(agent, "node")).returncode == 0 and "KubeletReady" in n.stdout and n,
        timeout=60,
        what="the node Ready",
    )
    assert node.stdout.splitlines()[0].split() == ["Node:", "testnode"]
    assert conditions(node.stdout) == {
        "MemoryPressure": ["False", "KubeletHasSufficientMemory"],
        "DiskPressure": ["False", "KubeletHasNoDiskPressure"],
        "PIDPressure": ["False", "KubeletHasSufficientPID"],
        "Ready": ["True", "KubeletReady"],
    }


def test_an_abbreviated_flag_starts_no_agent(agent):
    """`edgelet --pod-manifes DIR` once started an agent (a prefix was taken for --pod-manifest-path, or the
    value for a subcommand): now an unknown flag, named, exit 2, and nothing runs."""
    argv = agent.argv("--runonce")  # should it start after all, it ends by itself
    argv[argv.index("--pod-manifest-path")] = "--pod-manifes"
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "unknown flag: --pod-manifes" in done.stderr and "invalid choice" not in done.stderr
    assert agent.runc_list() == []
    assert not (agent.paths.run_dir / "edgelet.sock").exists()
