"""Both halves of trusted delivery at once, end to end: the real agent with `--trusted-keys` and `--signature-policy`,
a real registry on loopback. A signed manifest is not enough: the image it names must carry a cosign signature by a
policy key, and an update whose image has none, or one by another key, is refused at the pull with the reason.

With the health-gated rollout (issue 21, on by default) the new version's images are pulled before the old version
stops, so a refused update leaves the last good version running, untouched. A brand-new pod has nothing to keep and
waits in ErrImagePull/ImagePullBackOff, and with the rollout off (kubelet's kill-and-start) the old version is removed
and the new one waits the same way."""

from __future__ import annotations

import json
import shutil

import pytest

from edgelet.testing.cosign import CosignKey, push_signatures, simple_signing
from edgelet.testing.signing import MinisignKey, missing_tools, trusted_dir
from tests.e2e.conftest import sleeper_yaml as pod_yaml
from tests.e2e.conftest import wait_for
from tests.integration.registry import Layout, Registry, busybox_tar, file_layer

pytestmark = [
    pytest.mark.privileged,
    pytest.mark.skipif(
        shutil.which("docker-registry") is None or shutil.which("skopeo") is None,
        reason="needs docker-registry and skopeo",
    ),
    pytest.mark.skipif(bool(missing_tools()), reason=f"needs {missing_tools()} (make deps)"),
]


def _containers(agent, pod: str) -> list[dict]:
    return [
        c for c in agent.containers_of(pod) if (c.get("annotations") or {}).get("io.kubernetes.container.name") == "c"
    ]


def _gated_pod_yaml(name: str, image: str, rollout: str = "on") -> str:
    """pod_yaml with a 2 s stability window, so v1 becomes the last good version in seconds (never asserted on)."""
    return pod_yaml(name, image).replace(
        f"  name: {name}\n",
        f"  name: {name}\n  annotations:\n"
        '    edgelet.io/rollout-stability-window: "2s"\n'
        f'    edgelet.io/rollout: "{rollout}"\n',
        1,
    )


def _record(agent, pod: str) -> dict | None:
    """The pod's rollout record as the agent wrote it."""
    for path in (agent.paths.root_dir / "state" / "rollout").glob("*.json"):
        stored = json.loads(path.read_text())
        if stored["record"]["name"] == f"default/{pod}-testnode":
            return stored["record"]
    return None


def _pull_refused(agent, reason: str, image: str):
    """The rollout record once the new version's pull is refused with `reason` for `image`, else None."""
    rec = _record(agent, "web")
    if (
        rec is None
        or rec["phase"] != "pulling"
        or "ErrImagePull" not in rec["reason"]
        or reason not in rec["reason"]
        or image not in rec["reason"]
    ):
        return None
    return rec


def test_a_signed_update_naming_an_unsigned_or_foreign_signed_image_is_refused_and_v1_keeps_running(agent, tmp_path):
    reg = Registry(tmp_path / "reg")
    reg.start()
    try:
        trusted, stranger = CosignKey(), CosignKey()
        digests = {}
        for tag in ("1", "2", "3"):
            lay = Layout(tmp_path / f"lay{tag}")
            desc = lay.image([(busybox_tar(), True), (file_layer({"etc/version": tag.encode()}), True)])
            lay.tag(desc)
            reg.push_layout(lay.dir, f"fleet/app:{tag}")
            digests[tag] = desc["digest"]
        # v1 signed by the trusted key, v2 not at all, v3 by a key the policy does not name (as `cosign sign --key`
        # stores them: the repository, no tag, in the identity).
        push_signatures(
            reg.host, "fleet/app", digests["1"], [trusted.sign(simple_signing(f"{reg.host}/fleet/app", digests["1"]))]
        )
        push_signatures(
            reg.host, "fleet/app", digests["3"], [stranger.sign(simple_signing(f"{reg.host}/fleet/app", digests["3"]))]
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
        minisign = MinisignKey.generate(tmp_path / "mk")
        keys = trusted_dir(tmp_path / "trusted", minisign)
        [archive] = (agent.paths.root_dir / "images" / "import").glob("*.tar")
        minisign.sign(archive)  # the fixture's archive is imported as always: only the registry images are at stake

        staged = tmp_path / "staged.yaml"

        def publish(pod: str, tag: str, version: int, rollout: str = "on") -> None:
            staged.write_text(_gated_pod_yaml(pod, f"{reg.host}/fleet/app:{tag}", rollout))
            sig = minisign.sign(staged, version=version)
            (agent.manifests / f"{pod}.yaml.minisig").write_bytes(sig.read_bytes())
            agent.write_manifest(f"{pod}.yaml", staged.read_text())

        publish("web", "1", 1)
        agent.start("--trusted-keys", str(keys), "--signature-policy", str(policy))
        v1 = wait_for(
            lambda: (r := _record(agent, "web")) and r["phase"] == "good" and r,
            timeout=120,
            what="the signed pod of the signed image a good version",
        )["active"]
        [first] = wait_for(lambda: _containers(agent, "web"), what="the v1 container")
        assert agent.pod("web")["uid"] == v1
        assert f"{reg.host}/fleet/app:1" in agent.cli("images")

        for tag, version, reason in (
            ("2", 2, "a signature is required and the image has none"),
            ("3", 3, "not signed by a trusted key"),
        ):
            image = f"{reg.host}/fleet/app:{tag}"
            publish("web", tag, version)
            rec = wait_for(
                lambda reason=reason, image=image: _pull_refused(agent, reason, image),
                timeout=90,
                what=f"ErrImagePull of v{tag}: {reason}",
            )
            assert rec["active"] == v1 and rec["last_good"] == v1 and rec["target"] != v1, rec
            assert str(policy) in rec["reason"], rec
            # The operator sees why: `edgelet rollout status` and the pods row (v1 still Running).
            status = agent.cli("rollout", "status")
            assert "pulling" in status and reason in status and v1[:8] in status, status
            row = wait_for(
                lambda reason=reason: (
                    (r := agent.pod("web")) and "RolloutPulling" in r["message"] and reason in r["message"] and r
                ),
                timeout=30,
                what="edgelet pods says the pull was refused",
            )
            assert row["status"] == "Running" and row["uid"] == v1, row
            events = agent.cli("events")
            assert image in events and str(policy) in events, events
            assert "ErrImagePull" in events, events
            # The manifest itself was accepted (signed, newer): the refusal is the image's, at the pull.
            assert not [r for r in agent.snapshot().get("rejected", []) if r["reason"] == "UntrustedManifest"]
            versions = json.loads((agent.paths.root_dir / "trust" / "versions.json").read_text())
            assert versions[f"file:{agent.manifests / 'web.yaml'}"]["version"] == version
            # Nothing else changed: no image of the refused version stored, no other pod.
            images = agent.cli("images")
            assert image not in images
            assert f"{reg.host}/fleet/app:1" in images
            assert [p["name"] for p in agent.snapshot()["pods"]] == ["web-testnode"]
            # No container of the refused version was ever created (the pull comes first), and v1's container is
            # the very one that ran before the update: never stopped, never restarted.
            assert not [
                c
                for c in agent.containers_of("web")
                if (c.get("annotations") or {}).get("io.kubernetes.pod.uid") == rec["target"]
            ]
            running = [c for c in _containers(agent, "web") if c["status"] == "running"]
            assert [c["id"] for c in running] == [first["id"]], running
            assert [c["annotations"]["io.kubernetes.pod.uid"] for c in running] == [v1]

        # A brand-new pod naming the unsigned image has no last good version to keep: it waits in
        # ErrImagePull/ImagePullBackOff with the reason, as any pod whose image cannot be pulled.
        publish("fresh", "2", 1)
        reason = "a signature is required and the image has none"
        row = wait_for(
            lambda: (
                (r := agent.pod("fresh"))
                and r["status"] in ("ErrImagePull", "ImagePullBackOff")
                and reason in agent.cli("events", "--for", "fresh-testnode")
                and r
            ),
            timeout=90,
            what="the new pod in ErrImagePull",
        )
        assert not _containers(agent, "fresh")
        assert f"{reg.host}/fleet/app:2" not in agent.cli("images")
        # ... and the refused update of web is still refused, v1 still the same container.
        assert [c["id"] for c in _containers(agent, "web") if c["status"] == "running"] == [first["id"]]

        # With the rollout off for the pod (kubelet's kill-and-start, as --rollout=false), the same refused update
        # removes v1: its manifest changed, and the new version waits for an image it will never get.
        publish("web", "2", 4, rollout="off")
        row = wait_for(
            lambda: (
                (r := agent.pod("web")) and r["uid"] != v1 and r["status"] in ("ErrImagePull", "ImagePullBackOff") and r
            ),
            timeout=90,
            what="the rollout-off update in ErrImagePull",
        )
        wait_for(
            lambda: not [c for c in agent.runc_list() if c["id"] == first["id"]],
            timeout=60,
            what="v1's container removed",
        )
        assert _record(agent, "web") is None
        assert f"{reg.host}/fleet/app:2" not in agent.cli("images")
    finally:
        reg.stop()


def _refused_start(agent, *flags: str) -> str:
    agent.start(*flags)
    rc = agent.proc.wait(timeout=60)
    agent.proc = None
    agent._log.close()
    assert rc != 0
    assert agent.runc_list() == []
    return agent.log()


def test_a_bad_policy_or_key_file_stops_the_start_naming_it_as_edgelet_check_does(agent, tmp_path):
    minisign = MinisignKey.generate(tmp_path / "mk")
    keys = trusted_dir(tmp_path / "trusted", minisign)
    staged = tmp_path / "web.yaml"
    staged.write_text(pod_yaml("web", "edgelet.local/busybox:1.36"))
    (agent.manifests / "web.yaml.minisig").write_bytes(minisign.sign(staged, version=1).read_bytes())
    agent.write_manifest("web.yaml", staged.read_text())
    policy = tmp_path / "policy.json"
    policy.write_text(
        '{"default": [{"type": "insecureAcceptAnything"}], "transports": {"docker": {'
        '"registry.example/fleet": [{"type": "sigstoreSigned", "keyPath": "/nonexistent/cosign.pub"}]}}}'
    )
    flags = ("--trusted-keys", str(keys), "--signature-policy", str(policy))
    want = (
        f'signature policy {policy} field transports.docker["registry.example/fleet"][0].keyPath: key file '
        "/nonexistent/cosign.pub"
    )
    assert want in _refused_start(agent, *flags)
    assert want in agent.cli("check", *flags)

    policy.write_text('{"default": [{"type": "insecureAcceptAnything"}]}')
    with open(keys / "minisign.pub", "a") as f:
        f.write("RWQnot-a-key\n")
    want = f"--trusted-keys {keys / 'minisign.pub'}:3: not base64"
    assert want in _refused_start(agent, *flags)
    assert want in agent.cli("check", *flags)

    # A policy or a policy's key file anyone on the device may write is refused as a world-writable key of
    # --trusted-keys is: whoever can write it chooses which images run.
    (keys / "minisign.pub").write_text(minisign.public.read_text())
    key = CosignKey().write_public(tmp_path / "cosign.pub")
    policy.write_text(json.dumps({"default": [{"type": "sigstoreSigned", "keyPath": str(key)}]}))
    policy.chmod(0o666)
    want = f"signature policy {policy}: the file is world-writable (mode 0666)"
    assert want in _refused_start(agent, *flags)
    assert want in agent.cli("check", *flags)
    policy.chmod(0o644)
    key.chmod(0o666)
    want = f"signature policy {policy} field default[0].keyPath: key file {key}: the file is world-writable (mode 0666)"
    assert want in _refused_start(agent, *flags)
    assert want in agent.cli("check", *flags)


def test_a_deleted_signed_manifest_stays_deleted_across_restarts(agent, tmp_path):
    """Deletion revokes: the exact signed body of a deleted manifest put back (same name, another name) is a
    replay; a file deleted while the agent is down, then junk written at its path, runs nothing; only a newer
    signed version brings the pod back."""
    minisign = MinisignKey.generate(tmp_path / "mk")
    keys = trusted_dir(tmp_path / "trusted", minisign)
    [archive] = (agent.paths.root_dir / "images" / "import").glob("*.tar")
    minisign.sign(archive)
    staged = tmp_path / "staged.yaml"
    staged.write_text(pod_yaml("web", policy="Never"))
    sig = minisign.sign(staged, version=1).read_bytes()
    body = staged.read_bytes()

    def put(name: str) -> None:
        (agent.manifests / f"{name}.minisig").write_bytes(sig)
        agent.write_manifest(name, body.decode())

    def delete(name: str) -> None:
        (agent.manifests / name).unlink()
        (agent.manifests / f"{name}.minisig").unlink()

    def refused(name: str) -> list:
        return [
            r
            for r in agent.snapshot().get("rejected", [])
            if r["reason"] == "UntrustedManifest" and r["origin"].endswith(name)
        ]

    put("web.yaml")
    agent.start("--trusted-keys", str(keys))
    wait_for(lambda: (r := agent.pod("web")) and r["status"] == "Running", timeout=90, what="web Running")
    delete("web.yaml")
    wait_for(lambda: agent.pod("web") is None and not agent.containers_of("web"), timeout=60, what="web removed")
    put("again.yaml")  # the same signed body under another name
    [row] = wait_for(lambda: refused("again.yaml"), timeout=60, what="the replay refused")
    assert "(replay)" in row["message"] and "version 1 was deleted" in row["message"]
    assert agent.pod("web") is None
    delete("again.yaml")
    agent.stop()

    # While the agent is down: signed again at version 2, accepted at the start, then deleted while it is down.
    staged.write_text(pod_yaml("web", policy="Never"))
    sig = minisign.sign(staged, version=2).read_bytes()
    body = staged.read_bytes()
    put("web.yaml")
    agent.start("--trusted-keys", str(keys))
    wait_for(lambda: (r := agent.pod("web")) and r["status"] == "Running", timeout=90, what="web v2 Running")
    agent.stop()
    delete("web.yaml")
    agent.start("--trusted-keys", str(keys))
    wait_for(lambda: "edgelet started" in agent.log(), what="the restart")
    try:
        wait_for(
            lambda: agent.pod("web") is None and not agent.containers_of("web"),
            timeout=60,
            what="web removed after a deletion while the agent was down",
        )
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}: pod {agent.pod('web')}, containers {agent.containers_of('web')}\n"
            + "\n".join(agent.log().splitlines()[-30:])
        ) from None
    agent.write_manifest("web.yaml", "junk: [unsigned\n")
    wait_for(lambda: refused("web.yaml"), timeout=60, what="the junk refused")
    assert agent.pod("web") is None and not agent.containers_of("web")
    agent.stop()
    (agent.manifests / "web.yaml").unlink()
    put("web.yaml")  # the exact signed v2, after another restart
    agent.start("--trusted-keys", str(keys))
    # (the table the previous agent wrote still shows the junk's refusal until this one's first scan)
    wait_for(
        lambda: [r for r in refused("web.yaml") if "version 2 was deleted" in r["message"]],
        timeout=60,
        what="v2 put back refused as deleted",
    )
    assert agent.pod("web") is None

    staged.write_text(pod_yaml("web", policy="Never"))  # a newer signed version brings it back
    (agent.manifests / "web.yaml.minisig").write_bytes(minisign.sign(staged, version=3).read_bytes())
    agent.write_manifest("web.yaml", staged.read_text())
    wait_for(lambda: (r := agent.pod("web")) and r["status"] == "Running", timeout=90, what="web v3 Running")
    agent.stop()
