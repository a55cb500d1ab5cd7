"""Pods without an infra container on a real agent: shared namespaces, a pod IP through CNI, kills, upgrades."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import IMAGE, wait_for

PLUGINS = Path("/usr/lib/cni")
pytestmark = [
    pytest.mark.privileged,
    pytest.mark.skipif(not (PLUGINS / "bridge").exists(), reason="needs containernetworking-plugins"),
]

POD = f"""apiVersion: v1
kind: Pod
metadata:
  name: duo
spec:
  terminationGracePeriodSeconds: 1
  hostname: duohost
  securityContext:
    sysctls:
    - name: net.ipv4.ip_unprivileged_port_start
      value: "80"
  containers:
  - name: a
    image: {IMAGE}
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
  - name: b
    image: {IMAGE}
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
"""


def _running(agent, pod: str) -> dict[str, dict]:
    return {
        c["annotations"]["io.kubernetes.container.name"]: c
        for c in agent.containers_of(pod)
        if c["annotations"].get("io.edgelet.kind") == "container" and c["status"] == "running"
    }


def _exec(agent, cid: str, *argv: str) -> str:
    return subprocess.run(
        ["runc", "--root", str(agent.paths.runc_root), "exec", cid, *argv], capture_output=True, text=True, timeout=60
    ).stdout.strip()


def _conmons(agent) -> list[str]:
    out = subprocess.run(["pgrep", "-af", "conmon"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if str(agent.paths.runc_root) in line]


def _mounts(agent) -> list[str]:
    base = str(agent.paths.root_dir.parent.resolve())
    return [
        ln.split()[4] for ln in Path("/proc/self/mountinfo").read_text().splitlines() if ln.split()[4].startswith(base)
    ]


def _sandbox_id(agent) -> str:
    row = agent.pod("duo")
    return (agent.paths.root_dir / "pods" / row["uid"] / "sandbox" / "id").read_text().strip()


def _ip(agent) -> str | None:
    return ((agent.pod("duo") or {}).get("pod", {}).get("status") or {}).get("podIP")


def _gone(agent) -> bool:
    ns = agent.paths.run_dir / "ns"
    return (
        not agent.runc_list()
        and not _conmons(agent)
        and not _mounts(agent)
        and not (ns.exists() and os.listdir(ns))
        and not os.listdir(agent.paths.root_dir / "pods")
    )


def test_a_pod_without_a_pause_process_shares_its_namespaces_has_its_ip_and_survives_a_kill(agent, network):
    flags = (f"--cni-conf-dir={network['conf_dir']}", f"--cni-bin-dir={PLUGINS}")
    agent.start(*flags)
    agent.write_manifest("duo.yaml", POD)
    wait_for(lambda: len(_running(agent, "duo")) == 2 and _ip(agent), timeout=90, what="duo to run with an IP")
    running = _running(agent, "duo")
    # No sandbox in runc and no conmon but the containers'.
    assert [c for c in agent.runc_list() if c["annotations"].get("io.edgelet.kind") == "sandbox"] == []
    assert len(_conmons(agent)) == 2
    show = (
        "for n in net ipc uts; do readlink /proc/self/ns/$n; done; hostname; "
        "cat /proc/sys/net/ipv4/ip_unprivileged_port_start"
    )
    a, b = (_exec(agent, running[n]["id"], "sh", "-c", show) for n in ("a", "b"))
    assert a == b and a.splitlines()[3:] == ["duohost", "80"], (a, b)
    assert a.splitlines()[0] != os.readlink("/proc/self/ns/net")
    ip = _ip(agent)
    assert ip.startswith(network["subnet"] + ".") and ip in _exec(agent, running["a"]["id"], "ip", "-4", "addr")
    assert f"{ip}\tduohost" in _exec(agent, running["b"]["id"], "cat", "/etc/hosts")
    sid = _sandbox_id(agent)
    assert sorted(os.listdir(agent.paths.run_dir / "ns" / sid)) == ["ipc", "uts"]  # CNI made the netns

    # SIGKILL: the next agent adopts the sandbox and its containers as they are.
    agent.proc.send_signal(signal.SIGKILL)
    agent.proc.wait()
    agent._log.close()
    agent.start(*flags)
    wait_for(
        lambda: "Adopted" in agent.log() or "adopt" in agent.log().lower() or agent.pod("duo"),
        timeout=60,
        what="the agent to come back",
    )
    wait_for(
        lambda: (agent.pod("duo") or {}).get("pod", {}).get("status", {}).get("phase") == "Running",
        timeout=60,
        what="duo running again",
    )
    assert _sandbox_id(agent) == sid
    assert {n: c["id"] for n, c in _running(agent, "duo").items()} == {n: c["id"] for n, c in running.items()}
    statuses = agent.pod("duo")["pod"]["status"]["containerStatuses"]
    assert all(s["restartCount"] == 0 and s["ready"] for s in statuses), statuses
    assert _ip(agent) == ip

    (agent.manifests / "duo.yaml").unlink()
    wait_for(lambda: _gone(agent), timeout=60, what="nothing left of duo")
    assert not os.listdir(agent.paths.run_dir / "netns")


def test_a_pod_started_with_a_pause_process_is_adopted_and_removed_after_an_upgrade(agent):
    agent.start("--pod-infra-container")
    agent.write_manifest(
        "duo.yaml",
        POD.replace(
            '  securityContext:\n    sysctls:\n    - name: net.ipv4.ip_unprivileged_port_start\n      value: "80"\n', ""
        ),
    )
    wait_for(lambda: len(_running(agent, "duo")) == 2, timeout=90, what="duo to run")
    [pause] = [c for c in agent.runc_list() if c["annotations"].get("io.edgelet.kind") == "sandbox"]
    running = _running(agent, "duo")
    assert len(_conmons(agent)) == 3

    agent.stop()
    agent.start()  # the new default: no pause process for new pods
    wait_for(
        lambda: (agent.pod("duo") or {}).get("pod", {}).get("status", {}).get("phase") == "Running",
        timeout=60,
        what="duo adopted",
    )
    assert [c["id"] for c in agent.runc_list() if c["annotations"].get("io.edgelet.kind") == "sandbox"] == [pause["id"]]
    assert {n: c["id"] for n, c in _running(agent, "duo").items()} == {n: c["id"] for n, c in running.items()}
    assert not (agent.paths.run_dir / "ns").exists() or not os.listdir(agent.paths.run_dir / "ns")

    (agent.manifests / "duo.yaml").unlink()
    wait_for(lambda: _gone(agent), timeout=60, what="nothing left of duo")


def test_share_process_namespace_keeps_the_pause_process(agent):
    agent.start()
    agent.write_manifest(
        "shared.yaml",
        POD.replace("  hostname: duohost\n", "  shareProcessNamespace: true\n").replace("name: duo", "name: shared"),
    )
    wait_for(lambda: len(_running(agent, "shared")) == 2, timeout=90, what="shared to run")
    [pause] = [c for c in agent.runc_list() if c["annotations"].get("io.edgelet.kind") == "sandbox"]
    # Each container sees the other's processes, and PID 1 is the pause process.
    a = _running(agent, "shared")["a"]
    assert "catatonit" in _exec(agent, a["id"], "cat", "/proc/1/cmdline")
    assert pause["status"] == "running"
    (agent.manifests / "shared.yaml").unlink()
    wait_for(lambda: not agent.runc_list() and not _mounts(agent), timeout=60, what="nothing left of shared")


@pytest.mark.parametrize("point", ["sandbox.create", "cni.add", "container.create", "sandbox.ready", "pod.remove"])
def test_a_sigkill_at_a_crash_point_leaves_nothing_behind(agent, network, point):
    """The agent SIGKILLs itself at `point` (the pod's first pass there); the next agent runs the pod with
    one sandbox, and once its manifest is gone nothing of it is left: no mounts, no namespace files, no
    network, no runc state. At `sandbox.create`, `cni.add` and `container.create` container a may already
    be created beside ADD (issue 25), in a sandbox that never started: it goes with it. At `sandbox.ready`
    the sandbox started and a is created: the next agent starts that instance."""
    flags = (f"--cni-conf-dir={network['conf_dir']}", f"--cni-bin-dir={PLUGINS}")
    agent.start(*flags, env={"EDGELET_TEST_CRASH_AT": point})
    agent.write_manifest("duo.yaml", POD)
    if point == "pod.remove":
        wait_for(lambda: len(_running(agent, "duo")) == 2, timeout=90, what="duo to run")
        (agent.manifests / "duo.yaml").unlink()
    assert agent.proc.wait(timeout=90) == -signal.SIGKILL
    agent._log.close()
    agent.start(*flags)
    if point != "pod.remove":
        wait_for(lambda: len(_running(agent, "duo")) == 2 and _ip(agent), timeout=90, what="duo to run")
        if point == "sandbox.ready":
            assert "Starting a container created by the previous agent" in agent.log()
        sid = _sandbox_id(agent)
        assert os.listdir(agent.paths.run_dir / "ns") == [sid]
        assert os.listdir(agent.paths.run_dir / "netns") == [sid]
        (agent.manifests / "duo.yaml").unlink()
    wait_for(lambda: _gone(agent), timeout=60, what="nothing left of duo")
    assert not os.listdir(agent.paths.run_dir / "netns") and not os.listdir(agent.paths.root_dir / "cni")
