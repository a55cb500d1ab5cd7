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
