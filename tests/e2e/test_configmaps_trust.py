"""ConfigMaps under --trusted-keys end to end: a signed file's ConfigMap reaches the running container; an
unsigned edit of only the ConfigMap is refused and changes nothing the container sees; a signed one updates it
in place."""

from __future__ import annotations

import pytest
import yaml

from edgelet.testing.signing import MinisignKey, SshKey, missing_tools, trusted_dir
from tests.e2e.conftest import wait_for
from tests.e2e.test_configmaps import _container_log, config_map, pod

pytestmark = [
    pytest.mark.privileged,
    pytest.mark.skipif(bool(missing_tools()), reason=f"needs {missing_tools()} (make deps)"),
]


def manifest(conf: str) -> str:
    return yaml.safe_dump_all(
        [
            config_map("conf", {"v": conf}),
            pod(
                "signed",
                "while true; do echo v=$(cat /conf/v); sleep 0.2; done",
                volumes=[{"name": "conf", "configMap": {"name": "conf"}}],
                volume_mounts=[{"name": "conf", "mountPath": "/conf"}],
            ),
        ]
    )


def test_a_signed_config_map_is_used_and_an_unsigned_edit_of_it_is_refused(agent, tmp_path) -> None:
    minisign = MinisignKey.generate(tmp_path / "k")
    ssh = SshKey.generate(tmp_path / "k")
    keys = trusted_dir(tmp_path / "trusted", minisign, ssh)
    [archive] = (agent.paths.root_dir / "images" / "import").glob("*.tar")
    ssh.sign(archive, namespace="edgelet-image")

    def put_signed(conf: str, version: int) -> None:
        staged = tmp_path / "cfg.yaml"
        staged.write_text(manifest(conf))
        sig = minisign.sign(staged, version=version)
        (agent.manifests / "cfg.yaml.minisig").write_bytes(sig.read_bytes())
        agent.write_manifest("cfg.yaml", staged.read_text())

    put_signed("signed-one", 1)
    agent.start("--trusted-keys", str(keys))
    wait_for(lambda: "v=signed-one" in _container_log(agent), timeout=60, what="the signed ConfigMap in the container")

    # Only the ConfigMap is edited, unsigned: refused, the container keeps seeing the signed content.
    agent.write_manifest("cfg.yaml", manifest("evil"))
    wait_for(
        lambda: [r for r in agent.snapshot().get("rejected", []) if r["reason"] == "UntrustedManifest"],
        timeout=60,
        what="the unsigned edit refused",
    )
    put_marker = _container_log(agent).count("v=signed-one")
    wait_for(lambda: _container_log(agent).count("v=signed-one") > put_marker + 3, what="the container reading on")
    assert "v=evil" not in _container_log(agent)

    # Signed (a newer version), the change reaches the running container in place.
    put_signed("signed-two", 2)
    wait_for(lambda: "v=signed-two" in _container_log(agent), timeout=60, what="the signed update in the container")
    assert agent.pod("signed")["restarts"] == 0
