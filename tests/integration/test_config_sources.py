"""ConfigMaps and Secrets through the real file source: beside pods, kept while a file is broken, merged across
files by podconfig, and covered by the file's detached signature under --trusted-keys (real minisign)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgelet.podconfig import ConfigState, merge
from edgelet.sources.file import FileSourceState, scan_directory
from edgelet.testing.signing import MinisignKey, missing_tools, trusted_dir
from edgelet.trust.verify import Trust
from edgelet.util.clock import FakeClock

NODE = "node1"
NOW = 1_800_000_000.0

CONFIG = """apiVersion: v1
kind: ConfigMap
metadata: {{name: app-config}}
data:
  app.conf: "{value}"
---
apiVersion: v1
kind: Pod
metadata: {{name: web}}
spec:
  containers:
  - name: app
    image: busybox:1.36
    envFrom: [{{configMapRef: {{name: app-config}}}}]
"""


def _objects(snapshot) -> dict[str, bytes]:
    return {o.full_name: o.data.get("app.conf", b"") for o in snapshot.objects}


def test_objects_come_with_their_file_and_stay_while_it_is_broken(tmp_path: Path) -> None:
    (tmp_path / "web.yaml").write_text(CONFIG.format(value="v1"))
    snap, state = scan_directory(tmp_path, NODE, FileSourceState())
    assert _objects(snap) == {"default/app-config": b"v1"} and len(snap.pods) == 1
    assert snap.objects[0].origin == str(tmp_path / "web.yaml") and snap.objects[0].source == "file"
    # A broken edit keeps the last valid pods and objects, and says why.
    (tmp_path / "web.yaml").write_text(CONFIG.format(value="v2") + "---\nkind: Secret\napiVersion: v1\nmetadata: {}\n")
    snap, state = scan_directory(tmp_path, NODE, state)
    assert _objects(snap) == {"default/app-config": b"v1"}
    [error] = snap.errors
    assert "document 2: $.metadata.name: Required value" in error.message
    # A second file naming the same ConfigMap: podconfig refuses it naming both files.
    (tmp_path / "web.yaml").write_text(CONFIG.format(value="v3"))
    (tmp_path / "zz.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app-config}\n")
    snap, state = scan_directory(tmp_path, NODE, state)
    config, _ = merge(ConfigState(), snap, NOW)
    assert config.objects[("ConfigMap", "default", "app-config")].data == {"app.conf": b"v3"}
    [rejected] = config.rejected_objects
    assert str(tmp_path / "zz.yaml") in rejected.message and str(tmp_path / "web.yaml") in rejected.message
    # Deleting the file takes its objects.
    (tmp_path / "web.yaml").unlink()
    (tmp_path / "zz.yaml").unlink()
    snap, state = scan_directory(tmp_path, NODE, state)
    assert snap.objects == ()


@pytest.mark.skipif("minisign" in missing_tools(), reason="minisign not installed")
def test_objects_are_signed_with_their_file(tmp_path: Path) -> None:
    key = MinisignKey.generate(tmp_path / "k")
    trust = Trust.load(trusted_dir(tmp_path / "trusted", key), tmp_path / "state", FakeClock(NOW))
    mdir = tmp_path / "m"
    mdir.mkdir()
    signed = mdir / "web.yaml"
    signed.write_text(CONFIG.format(value="good"))
    key.sign(signed, version=1)
    (mdir / "evil.yaml").write_text(CONFIG.format(value="evil").replace("app-config", "other"))
    snap, state = scan_directory(mdir, NODE, FileSourceState(), trust=trust)
    # The unsigned file's ConfigMap is refused with it.
    assert _objects(snap) == {"default/app-config": b"good"}
    assert [e.reason for e in snap.errors] == ["UntrustedManifest"]
    # Changing only the ConfigMap of a signed file breaks its signature: the old content stays.
    signed.write_text(CONFIG.format(value="tampered"))
    snap, state = scan_directory(mdir, NODE, state, trust=trust)
    assert _objects(snap) == {"default/app-config": b"good"}
    assert any("signature refused (bad)" in e.message for e in snap.errors)
    # Signed again (a newer version), the change is taken.
    signed.write_text(CONFIG.format(value="new"))
    key.sign(signed, version=2)
    snap, state = scan_directory(mdir, NODE, state, trust=trust)
    assert _objects(snap) == {"default/app-config": b"new"}
