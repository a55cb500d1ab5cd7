"""End to end with a real registry and `--signature-policy`: a pod whose image carries a cosign signature by the
trusted key runs; a pod whose image is signed by another key gets ErrImagePull naming the reason (in the pods table
and the events), and the running pod is not touched."""

from __future__ import annotations

import json
import shutil

import pytest

from edgelet.testing.cosign import CosignKey, push_signatures, simple_signing
from tests.e2e.conftest import sleeper_yaml as pod_yaml
from tests.e2e.conftest import wait_for
from tests.integration.registry import Layout, Registry, busybox_tar, file_layer

pytestmark = [
    pytest.mark.privileged,
    pytest.mark.skipif(
        shutil.which("docker-registry") is None or shutil.which("skopeo") is None,
        reason="needs docker-registry and skopeo",
    ),
]


def test_only_images_signed_by_a_trusted_key_run(agent, tmp_path):
    reg = Registry(tmp_path / "reg")
    reg.start()
    try:
        trusted, stranger = CosignKey(), CosignKey()
        for name, key in (("good", trusted), ("evil", stranger)):
            lay = Layout(tmp_path / name)
            desc = lay.image([(busybox_tar(), True), (file_layer({"etc/which": name.encode()}), True)])
            lay.tag(desc)
            reg.push_layout(lay.dir, f"fleet/{name}:1")
            # as `cosign sign --key` stores it: the repository, no tag, in the identity
            push_signatures(
                reg.host,
                f"fleet/{name}",
                desc["digest"],
                [key.sign(simple_signing(f"{reg.host}/fleet/{name}", desc["digest"]))],
            )
        policy = tmp_path / "policy.json"
        policy.write_text(
            json.dumps(
                {
                    "default": [{"type": "insecureAcceptAnything"}],
                    "transports": {
                        "docker": {
                            f"{reg.host}/fleet": [
                                {
                                    "type": "sigstoreSigned",
                                    "keyPath": str(trusted.write_public(tmp_path / "k.pub")),
                                    "signedIdentity": {"type": "matchRepository"},
                                }
                            ]
                        }
                    },
                }
            )
        )
        agent.start("--signature-policy", str(policy))
        agent.write_manifest("good.yaml", pod_yaml("good", f"{reg.host}/fleet/good:1"))
        wait_for(
            lambda: (r := agent.pod("good")) and r["status"] == "Running" and r,
            timeout=90,
            what="the pod of the signed image Running",
        )
        agent.write_manifest("evil.yaml", pod_yaml("evil", f"{reg.host}/fleet/evil:1"))
        wait_for(
            lambda: (r := agent.pod("evil")) and r["status"] in ("ErrImagePull", "ImagePullBackOff") and r,
            timeout=90,
            what="ErrImagePull for the image signed by another key",
        )
        events = agent.cli("events")
        assert "not signed by a trusted key" in events and str(policy) in events, events
        assert f"{reg.host}/fleet/evil:1" not in agent.cli("images")
        assert agent.pod("good")["status"] == "Running"
    finally:
        reg.stop()
