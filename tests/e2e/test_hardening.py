"""A real agent keeps its state private and says when a pod is granted host access (privileged)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tests.e2e.conftest import IMAGE, wait_for

pytestmark = pytest.mark.privileged

MANIFEST = f"""apiVersion: v1
kind: Pod
metadata:
  name: private
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  securityContext:
    runAsUser: 65534
  volumes:
  - name: data
    emptyDir: {{}}
  containers:
  - name: app
    image: {IMAGE}
    env:
    - name: SECRET
      value: hunter2
    command: ["sh", "-c", "cat /etc/hosts /etc/resolv.conf /etc/hostname > /dev/null && echo ok > /data/s/f && cat /sub/f && echo ready && exec sleep 3600"]
    volumeMounts:
    - name: data
      mountPath: /data
    - name: data
      mountPath: /sub
      subPath: s
"""


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.lstat().st_mode)


def test_state_bundles_and_logs_are_private_and_host_access_is_reported(agent):
    agent.start()
    agent.write_manifest("private.yaml", MANIFEST)
    log_dir = agent.paths.log_dir
    # A non-root container still reads its /etc files and uses its volumes and subPath under the private dirs.
    log = wait_for(lambda: next(iter(log_dir.glob("pods/*_private-testnode_*/app/0.log")), None), what="log file")
    wait_for(lambda: "ready" in log.read_text(), what="the container to be ready", timeout=60)
    root, run = agent.paths.root_dir, agent.paths.run_dir
    (pod_dir,) = (root / "pods").iterdir()
    configs = list(pod_dir.glob("sandbox/config.json")) + list(pod_dir.glob("containers/*/*/config.json"))
    assert len(configs) == 2
    assert "hunter2" in configs[1].read_text() or "hunter2" in configs[0].read_text()
    events = run / "events.json"
    wait_for(lambda: events.exists() and (root / "state" / "pods.json").exists(), what="checkpoints")

    private_dirs = [root, run, root / "pods", pod_dir, *(c.parent for c in configs), root / "state"]
    assert {str(d): oct(_mode(d)) for d in private_dirs} == {str(d): "0o700" for d in private_dirs}
    private_files = [*configs, root / "state" / "pods.json", events]
    assert {str(f): oct(_mode(f)) for f in private_files} == {str(f): "0o600" for f in private_files}
    log_dirs = [log_dir / "pods", log.parent.parent, log.parent, log_dir / "containers"]
    assert {str(d): oct(_mode(d)) for d in log_dirs} == {str(d): "0o750" for d in log_dirs}
    logs = [log, *log.parent.parent.glob("*.log")]
    assert logs and all(_mode(f) & 0o137 == 0 for f in logs), {str(f): oct(_mode(f)) for f in logs}

    # Allowed, as kubelet allows it for static pods, but not silently: one warning for the pod.
    out = wait_for(lambda: (o := agent.cli("events")) and "HostAccess" in o and o, what="HostAccess event")
    assert "hostNetwork" in out


def _confined(name: str, script: str, security: str = "", pod_extra: str = "") -> str:
    return f"""apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
{pod_extra}  containers:
  - name: app
    image: {IMAGE}
    command: ["sh", "-c", {script!r}]
{security}"""


def _row_status(agent, name: str) -> dict:
    row = agent.pod(name)
    return (row.get("pod") or {}).get("status") or {} if row else {}


def test_default_seccomp_privileged_pods_and_refused_confinement_through_the_agent(agent):
    agent.start()
    agent.write_manifest(
        "plain.yaml", _confined("plain", "grep Seccomp: /proc/self/status; unshare -U -r id; echo unshare=$?")
    )
    agent.write_manifest(
        "priv.yaml",
        _confined(
            "priv",
            "grep Seccomp: /proc/self/status; ls /dev/loop-control /dev/autofs 2>&1; echo done",
            "    securityContext:\n      privileged: true\n",
        ),
    )
    agent.write_manifest(
        "gone.yaml",
        _confined(
            "gone",
            "true",
            "    securityContext:\n      seccompProfile:\n        type: Localhost\n"
            "        localhostProfile: missing/profile.json\n",
        ),
    )
    agent.write_manifest(
        "userns.yaml",
        _confined("userns", "true", "    securityContext:\n      procMount: Unmasked\n", "  hostUsers: false\n"),
    )
    agent.write_manifest(
        "unmasked.yaml", _confined("unmasked", "true", "    securityContext:\n      procMount: Unmasked\n")
    )
    logs = agent.paths.log_dir

    def log_of(name: str, last: str) -> str:
        found = next(iter(logs.glob(f"pods/*_{name}-testnode_*/app/0.log")), None)
        text = found.read_text() if found is not None else ""
        return text if last in text else ""

    plain = wait_for(lambda: log_of("plain", "unshare="), what="plain pod's output", timeout=60)
    assert "Seccomp:\t2" in plain and "unshare=0" not in plain, plain
    # Privileged starts even though this agent's bounding set may lack capabilities, and sees host devices.
    priv = wait_for(lambda: log_of("priv", "done"), what="privileged pod's output", timeout=60)
    assert "Seccomp:\t0" in priv, priv
    host_devices = [p for p in ("/dev/loop-control", "/dev/autofs") if Path(p).exists()]
    assert all(
        "No such file or directory" not in line for line in priv.splitlines() if any(p in line for p in host_devices)
    ), priv

    def waiting_reason(name: str):
        statuses = _row_status(agent, name).get("containerStatuses") or []
        return statuses and (statuses[0].get("state") or {}).get("waiting")

    waiting = wait_for(lambda: waiting_reason("gone"), what="gone pod waiting", timeout=60)
    assert waiting["reason"] == "CreateContainerConfigError" and "'missing/profile.json'" in waiting["message"]
    rejected = wait_for(
        lambda: len(agent.snapshot()["rejected"]) >= 2 and agent.snapshot()["rejected"], what="two rejections"
    )
    messages = {Path(r["origin"]).name: r["message"] for r in rejected}
    assert "spec.hostUsers" in messages["userns.yaml"], messages
    assert "`hostUsers` must be false to use `Unmasked`" in messages["unmasked.yaml"], messages
