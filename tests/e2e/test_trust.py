"""Trusted delivery end to end: the real agent with --trusted-keys runs a signed manifest (from a signed image
archive), and an unsigned update of the running pod, or an unsigned new manifest, changes nothing that runs."""

from __future__ import annotations

import json

import pytest

from edgelet.testing.signing import MinisignKey, SshKey, missing_tools, trusted_dir
from tests.e2e.conftest import wait_for
from tests.e2e.test_url_source import pod_yaml

pytestmark = [
    pytest.mark.privileged,
    pytest.mark.skipif(bool(missing_tools()), reason=f"needs {missing_tools()} (make deps)"),
]


def app_containers(agent, pod: str) -> list[dict]:
    return [
        c for c in agent.containers_of(pod) if (c.get("annotations") or {}).get("io.kubernetes.container.name") == "app"
    ]


def rejected(agent) -> list[dict]:
    return agent.snapshot().get("rejected", [])


def test_signed_manifest_runs_and_an_unsigned_update_leaves_it_running(agent, tmp_path):
    minisign = MinisignKey.generate(tmp_path / "k")
    ssh = SshKey.generate(tmp_path / "k")
    keys = trusted_dir(tmp_path / "trusted", minisign, ssh)
    # The image archive the fixture dropped in the import dir is signed too (SSH, namespace edgelet-image).
    [archive] = (agent.paths.root_dir / "images" / "import").glob("*.tar")
    ssh.sign(archive, namespace="edgelet-image")

    staged = tmp_path / "web.yaml"
    staged.write_text(pod_yaml("web", "echo v1; exec sleep 300"))
    sig = minisign.sign(staged, version=1)
    (agent.manifests / "web.yaml.minisig").write_bytes(sig.read_bytes())
    agent.write_manifest("web.yaml", staged.read_text())
    agent.start("--trusted-keys", str(keys))

    row = wait_for(
        lambda: (r := agent.pod("web")) and r["status"] == "Running" and r, timeout=60, what="signed pod Running"
    )
    uid = row["uid"]
    [before] = wait_for(lambda: app_containers(agent, "web"), what="container")

    # An unsigned update of the running pod: the old signature no longer matches.
    agent.write_manifest("web.yaml", pod_yaml("web", "echo evil; exec sleep 300"))
    # And a new manifest nobody signed.
    agent.write_manifest("evil.yaml", pod_yaml("evil", "exec sleep 300"))
    rows = wait_for(
        lambda: len([r for r in rejected(agent) if r["reason"] == "UntrustedManifest"]) == 2 and rejected(agent),
        timeout=60,
        what="both manifests refused in the pods table",
    )
    by_origin = {r["origin"].rsplit("/", 1)[1]: r["message"] for r in rows}
    assert "signature refused (bad)" in by_origin["web.yaml"]
    assert "key " in by_origin["web.yaml"]  # names the key that signed the old body
    assert "signature refused (missing)" in by_origin["evil.yaml"]
    events = agent.cli("events")
    assert "UntrustedManifest" in events

    # Nothing that runs changed: the same pod, the same container, never restarted; no evil pod.
    row = agent.pod("web")
    assert row["uid"] == uid and row["status"] == "Running" and row["restarts"] == 0
    [after] = app_containers(agent, "web")
    assert after["id"] == before["id"] and after["status"] == "running"
    assert agent.pod("evil") is None and agent.containers_of("evil") == []
    pods_out = agent.cli("pods")  # `edgelet pods` shows the refusals under the pods
    assert "UntrustedManifest" in pods_out and "evil.yaml" in pods_out

    # A restart with the refused file still there: the pod is adopted as it runs, not removed or replaced.
    assert agent.stop() == 0
    agent.start("--trusted-keys", str(keys))
    # (the pods table of the new process: rows of the old one must not pass for it)
    wait_for(
        lambda: (
            agent.snapshot()["agent_pid"] == agent.proc.pid
            and "UntrustedManifest" in json.dumps(rejected(agent))
            and agent.pod("web")
        ),
        timeout=60,
        what="the agent back, the refusal reported again",
    )
    wait_for(lambda: agent.pod("web")["status"] == "Running", timeout=60, what="web Running after the restart")
    row = agent.pod("web")
    assert row["uid"] == uid and row["restarts"] == 0
    [after] = app_containers(agent, "web")
    assert after["id"] == before["id"] and after["status"] == "running"

    # A signed update is applied.
    staged.write_text(pod_yaml("web", "echo v2; exec sleep 300"))
    sig = minisign.sign(staged, version=2)
    (agent.manifests / "web.yaml.minisig").write_bytes(sig.read_bytes())
    agent.write_manifest("web.yaml", staged.read_text())
    wait_for(
        lambda: any(c["id"] != before["id"] and c["status"] == "running" for c in app_containers(agent, "web")),
        timeout=60,
        what="the signed update running",
    )
    versions = json.loads((agent.paths.root_dir / "trust" / "versions.json").read_text())
    assert versions[f"file:{agent.manifests / 'web.yaml'}"]["version"] == 2


def test_a_world_writable_key_directory_stops_the_start(agent, tmp_path):
    keys = tmp_path / "trusted"
    keys.mkdir()
    MinisignKey.generate(tmp_path / "k")
    (keys / "release.pub").write_text((tmp_path / "k" / "minisign.pub").read_text())
    keys.chmod(0o777)
    agent.write_manifest("web.yaml", pod_yaml("web", "exec sleep 300"))
    agent.start("--trusted-keys", str(keys))
    rc = agent.proc.wait(timeout=60)
    agent.proc = None
    agent._log.close()
    assert rc != 0
    assert f"--trusted-keys {keys}: the directory is world-writable" in agent.log()
    assert agent.runc_list() == []


def test_a_url_serving_a_new_body_with_the_old_signature_changes_nothing(agent, tmp_path):
    from tests.integration.test_trust_http import FileServer

    minisign = MinisignKey.generate(tmp_path / "k")
    keys = trusted_dir(tmp_path / "trusted", minisign)
    [archive] = (agent.paths.root_dir / "images" / "import").glob("*.tar")
    minisign.sign(archive)
    staged = tmp_path / "pods.yaml"
    staged.write_text(pod_yaml("web", "exec sleep 300"))
    sig = minisign.sign(staged, version=1)
    server = FileServer()
    try:
        server.put("/pods.yaml", staged.read_bytes())
        server.put("/pods.yaml.minisig", sig.read_bytes())
        agent.start("--trusted-keys", str(keys), "--manifest-url", server.url, "--http-check-frequency", "1s")
        wait_for(lambda: (r := agent.pod("web")) and r["status"] == "Running", timeout=60, what="URL pod Running")
        [before] = wait_for(lambda: app_containers(agent, "web"), what="container")
        server.put("/pods.yaml", pod_yaml("web", "echo evil; exec sleep 300").encode())  # the old signature stays
        [row] = wait_for(
            lambda: [r for r in rejected(agent) if r["reason"] == "UntrustedManifest"],
            timeout=60,
            what="the new body refused",
        )
        assert row["origin"] == server.url and "signature refused (bad)" in row["message"]
        [after] = app_containers(agent, "web")
        assert after["id"] == before["id"] and agent.pod("web")["restarts"] == 0
    finally:
        server.stop()
