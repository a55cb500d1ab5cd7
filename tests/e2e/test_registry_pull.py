"""End to end with a real registry: a pod's image is pulled on demand; a dead registry holds back only its own pod."""

from __future__ import annotations

import shutil

import pytest

from tests.e2e.conftest import IMAGE, wait_for
from tests.integration.registry import Layout, Registry, busybox_tar, free_port

pytestmark = [
    pytest.mark.privileged,
    pytest.mark.skipif(shutil.which("docker-registry") is None or shutil.which("skopeo") is None,
                       reason="needs docker-registry and skopeo"),
]


def pod_yaml(name: str, image: str, policy: str = "IfNotPresent") -> str:
    return f"""apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: c
      image: {image}
      imagePullPolicy: {policy}
      command: ["sh", "-c", "exec sleep 300"]
"""


def test_pull_on_demand_and_dead_registry_backs_off(agent, tmp_path):
    reg = Registry(tmp_path / "reg")
    reg.start()
    try:
        lay = Layout(tmp_path / "lay")
        lay.tag(lay.image([(busybox_tar(), True)]))
        reg.push_layout(lay.dir, "test/busybox:1")
        agent.start()
        image = f"{reg.host}/test/busybox:1"
        agent.write_manifest("pulled.yaml", pod_yaml("pulled", image))
        wait_for(lambda: (r := agent.pod("pulled")) and r["status"] == "Running" and r, timeout=60,
                 what="pod with a pulled image Running")
        assert image in agent.cli("images")

        # Nothing listens on this port: the pull fails, then backs off; the other pod keeps running.
        dead = f"127.0.0.1:{free_port()}/test/busybox:1"
        agent.write_manifest("dead.yaml", pod_yaml("dead", dead))
        wait_for(lambda: (r := agent.pod("dead")) and r["status"] == "ErrImagePull" and r, timeout=60,
                 what="ErrImagePull")
        wait_for(lambda: (r := agent.pod("dead")) and r["status"] == "ImagePullBackOff" and r, timeout=60,
                 what="ImagePullBackOff")
        assert agent.pod("pulled")["status"] == "Running"
        agent.write_manifest("local.yaml", pod_yaml("local", IMAGE))
        wait_for(lambda: (r := agent.pod("local")) and r["status"] == "Running" and r, timeout=60,
                 what="a pod with an imported image Running meanwhile")
    finally:
        reg.stop()
