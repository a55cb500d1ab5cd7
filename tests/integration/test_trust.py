"""Trusted delivery with the real signing tools (minisign, signify-openbsd, ssh-keygen -Y sign): keys, signatures,
the file source, replay and the import directory. Every attack is refused with its reason and changes nothing."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from edgelet.sources.file import FileSourceState, scan_directory
from edgelet.testing.signing import MinisignKey, SignifyKey, SshKey, missing_tools, trusted_dir
from edgelet.trust import ARCHIVE_NAMESPACE
from edgelet.trust.errors import KeyFileError, SignatureRefused
from edgelet.trust.keys import load_trusted_keys
from edgelet.trust.message import Message
from edgelet.trust.verify import Trust, check_signature
from edgelet.trust.versions import VERSIONS_FILE, VersionStore
from edgelet.util.clock import FakeClock
from tests.integration.test_http_source import pod_yaml as unsigned_pod_yaml

pytestmark = pytest.mark.skipif(bool(missing_tools()), reason=f"needs {missing_tools()} (make deps)")

NODE = "node1"
NOW = 1_800_000_000.0  # 2027-01-15


def pod_yaml(name: str, image: str = "busybox:1.36", version: int | None = None) -> str:
    head = f"# edgelet-version: {version}\n" if version is not None else ""
    return head + unsigned_pod_yaml(name, image)


@pytest.fixture(scope="module")
def tools(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("keys")
    return {
        "minisign": MinisignKey.generate(d),
        "signify": SignifyKey.generate(d),
        "ssh": SshKey.generate(d),
        "stranger": MinisignKey.generate(d, "stranger"),
        "ssh_stranger": SshKey.generate(d, "ssh_stranger"),
        "dir": d,
    }


@pytest.fixture
def keydir(tmp_path: Path, tools: dict) -> Path:
    return trusted_dir(
        tmp_path / "trusted", tools["minisign"], tools["signify"], tools["ssh"], ssh_options='namespaces="edgelet-*"'
    )


@pytest.fixture
def trust(tmp_path: Path, keydir: Path) -> Trust:
    return Trust.load(keydir, tmp_path / "state" / "trust", FakeClock(NOW))


def flip_signature_byte(sig: Path) -> None:
    """Flip one bit in the signature bytes themselves (not the armour), so the file still parses."""
    lines = sig.read_text().splitlines()
    if lines[0].startswith("-----BEGIN"):
        raw = bytearray(base64.b64decode("".join(lines[1:-1])))
        raw[-5] ^= 0x01
        b64 = base64.b64encode(bytes(raw)).decode()
        lines = [lines[0], *[b64[i : i + 70] for i in range(0, len(b64), 70)], lines[-1]]
    else:
        raw = bytearray(base64.b64decode(lines[1]))
        raw[-5] ^= 0x01
        lines[1] = base64.b64encode(bytes(raw)).decode()
    sig.write_text("\n".join(lines) + "\n")


# --- keys ---------------------------------------------------------------------------


def test_a_key_directory_loads_every_format(keydir: Path, tools: dict) -> None:
    keys = load_trusted_keys(keydir)
    assert len(keys.ed25519) == 2 and len(keys.ssh) == 1
    minisign_id = tools["minisign"].public.read_text().splitlines()[0].rsplit(" ", 1)[1]
    assert keys.ed25519[0].key_id == minisign_id  # as `minisign -G` prints it
    assert keys.ssh[0].fingerprint == tools["ssh"].fingerprint()  # as `ssh-keygen -l` prints it
    assert keys.ssh[0].namespaces == ("edgelet-*",)


def test_a_world_writable_key_directory_or_file_is_refused(keydir: Path) -> None:
    os.chmod(keydir, 0o777)
    with pytest.raises(KeyFileError, match="world-writable") as err:
        load_trusted_keys(keydir)
    assert err.value.path == str(keydir)
    os.chmod(keydir, 0o755)
    os.chmod(keydir / "signify.pub", 0o666)
    with pytest.raises(KeyFileError, match="signify.pub: the file is world-writable"):
        load_trusted_keys(keydir)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_key_files_as_sshds_strict_modes(keydir: Path, tmp_path: Path) -> None:
    """Whoever owns or may write a key file, its directory or one above it could add a key: only root."""
    key = keydir / "signify.pub"
    os.chown(key, 65534, 65534)
    with pytest.raises(KeyFileError, match="signify.pub: the file is owned by uid 65534, not root"):
        load_trusted_keys(keydir)
    os.chown(key, 0, 0)
    os.chmod(key, 0o664)
    with pytest.raises(KeyFileError, match=r"signify.pub: the file is group-writable \(mode 0664\)"):
        load_trusted_keys(keydir)
    os.chmod(key, 0o644)
    os.chmod(keydir, 0o775)
    with pytest.raises(KeyFileError, match="the directory is group-writable"):
        load_trusted_keys(keydir)
    os.chmod(keydir, 0o755)
    os.chown(keydir, 65534, 65534)
    try:
        with pytest.raises(KeyFileError, match=f"its directory {keydir} is owned by uid 65534, not root"):
            load_trusted_keys(key)
        with pytest.raises(KeyFileError, match="the directory is owned by uid 65534, not root"):
            load_trusted_keys(keydir)
    finally:
        os.chown(keydir, 0, 0)
    above = keydir.parent
    os.chown(above, 65534, 65534)
    try:
        for named in (key, keydir):
            with pytest.raises(KeyFileError, match=rf"directory {above}( above it)? is owned by uid 65534"):
                load_trusted_keys(named)
    finally:
        os.chown(above, 0, 0)
    assert len(load_trusted_keys(keydir))


@pytest.mark.parametrize(
    "text, line, match",
    [
        ("untrusted comment: x\nRWSnotbase64!!\n", 2, "not base64"),
        ("# ok\n\nops@x ssh-rsa AAAAB3NzaC1yc2E=\n", 3, "unsupported key type 'ssh-rsa'"),
        ("ops@x cert-authority ssh-ed25519 AAAA\n", 1, "cert-authority"),
        (
            'ops@x valid-before="2027" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKK8gRRUkEnVHqOlke9N694pakkyWVpXtr5yU4FSxzs8\n',
            1,
            "YYYYMMDD",
        ),
        ('ops@x namespaces="a ssh-ed25519 AAAA\n', 1, "unterminated quote"),
    ],
)
def test_a_malformed_key_file_names_file_and_line(tmp_path: Path, text: str, line: int, match: str) -> None:
    f = tmp_path / "keys"
    f.write_text(text)
    with pytest.raises(KeyFileError, match=match) as err:
        load_trusted_keys(f)
    assert (err.value.path, err.value.line) == (str(f), line)
    assert f"{f}:{line}" in str(err.value)


def test_a_missing_or_empty_key_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="cannot read"):
        load_trusted_keys(tmp_path / "nope")
    (tmp_path / "empty").write_text("# nothing\n")
    with pytest.raises(KeyFileError, match="holds no key"):
        load_trusted_keys(tmp_path / "empty")
    (tmp_path / "d").mkdir()
    os.symlink(tmp_path / "gone", tmp_path / "d" / "dangling.pub")
    with pytest.raises(KeyFileError, match="dangling.pub: cannot read"):
        load_trusted_keys(tmp_path / "d")


# --- signatures ---------------------------------------------------------------------------


def _sign(tools: dict, how: str, path: Path) -> Path:
    if how == "minisign":
        return tools["minisign"].sign(path, version=7)
    if how == "minisign-legacy":
        return tools["minisign"].sign(path, legacy=True)
    if how == "signify":
        return tools["signify"].sign(path)
    return tools["ssh"].sign(path)


def _check(trust: Trust, body: Path, sig: Path, namespace: str = "edgelet-manifest"):
    return check_signature(
        Message(data=body.read_bytes()), sig.read_bytes(), trust.keys, namespace=namespace, now=NOW, name=str(sig)
    )


SIGNERS = ["minisign", "minisign-legacy", "signify", "ssh"]


@pytest.mark.parametrize("how", SIGNERS)
def test_each_tool_signature_is_accepted_with_its_version(tmp_path: Path, tools: dict, trust: Trust, how: str) -> None:
    body = tmp_path / "web.yaml"
    body.write_text(pod_yaml("web", version=5))
    verified = _check(trust, body, _sign(tools, how, body))
    # minisign: the trusted comment (edgelet-version, else its own timestamp); signify/SSH: the body's line.
    want = {"minisign": 7, "signify": 5, "ssh": 5}.get(how)
    if how == "minisign-legacy":
        assert verified.version is not None and verified.version > 1_700_000_000
    else:
        assert verified.version == want
    if how == "ssh":
        assert verified.key_id == f"ops@example {tools['ssh'].fingerprint()}"


@pytest.mark.parametrize("how", SIGNERS)
def test_a_flipped_byte_in_body_or_signature_is_bad(tmp_path: Path, tools: dict, trust: Trust, how: str) -> None:
    body = tmp_path / "web.yaml"
    body.write_text(pod_yaml("web"))
    sig = _sign(tools, how, body)
    body.write_bytes(body.read_bytes().replace(b"busybox", b"busyb0x"))
    with pytest.raises(SignatureRefused) as err:
        _check(trust, body, sig)
    assert err.value.reason == "bad" and err.value.key_id
    body.write_text(pod_yaml("web"))
    _check(trust, body, sig)
    flip_signature_byte(sig)
    with pytest.raises(SignatureRefused) as err:
        _check(trust, body, sig)
    assert err.value.reason in ("bad", "malformed")


@pytest.mark.parametrize("how", SIGNERS)
def test_the_signature_of_another_file_is_bad(tmp_path: Path, tools: dict, trust: Trust, how: str) -> None:
    other = tmp_path / "other.yaml"
    other.write_text(pod_yaml("other"))
    body = tmp_path / "web.yaml"
    body.write_text(pod_yaml("web"))
    with pytest.raises(SignatureRefused, match=r"\(bad\)"):
        _check(trust, body, _sign(tools, how, other))


def test_an_unknown_key_is_refused(tmp_path: Path, tools: dict, trust: Trust) -> None:
    body = tmp_path / "web.yaml"
    body.write_text(pod_yaml("web"))
    with pytest.raises(SignatureRefused) as err:
        _check(trust, body, tools["stranger"].sign(body))
    assert err.value.reason == "unknown key"
    assert err.value.key_id == tools["stranger"].public.read_text().splitlines()[0].rsplit(" ", 1)[1]
    with pytest.raises(SignatureRefused) as err:
        _check(trust, body, tools["ssh_stranger"].sign(body))
    assert err.value.reason == "unknown key" and err.value.key_id == tools["ssh_stranger"].fingerprint()


def test_a_tampered_trusted_comment_is_bad(tmp_path: Path, tools: dict, trust: Trust) -> None:
    body = tmp_path / "web.yaml"
    body.write_text(pod_yaml("web"))
    sig = tools["minisign"].sign(body, version=3)
    sig.write_text(sig.read_text().replace("edgelet-version: 3", "edgelet-version: 9"))
    with pytest.raises(SignatureRefused, match="trusted comment") as err:
        _check(trust, body, sig)
    assert err.value.reason == "bad"


@pytest.mark.parametrize(
    "options, reason",
    [
        ('valid-before="20260101Z"', "expired"),
        ('valid-after="20990101Z"', "expired"),
        ('namespaces="edgelet-image"', "wrong namespace"),
        ('namespaces="*,!edgelet-manifest"', "wrong namespace"),
        ('valid-after="20250101",valid-before="20990101Z",namespaces="edgelet-manifest"', None),
    ],
)
def test_ssh_key_validity_and_namespaces(tmp_path: Path, tools: dict, options: str, reason: str | None) -> None:
    keys = tmp_path / "allowed_signers"
    keys.write_text(tools["ssh"].allowed_signer(options=options))
    trust = Trust.load(keys, tmp_path / "state", FakeClock(NOW))
    body = tmp_path / "web.yaml"
    body.write_text(pod_yaml("web"))
    sig = tools["ssh"].sign(body)
    if reason is None:
        _check(trust, body, sig)
        return
    with pytest.raises(SignatureRefused) as err:
        _check(trust, body, sig)
    assert err.value.reason == reason and err.value.key_id.startswith("ops@example SHA256:")


def test_an_ssh_signature_for_another_namespace_is_refused(tmp_path: Path, tools: dict, trust: Trust) -> None:
    body = tmp_path / "web.yaml"
    body.write_text(pod_yaml("web"))
    sig = tools["ssh"].sign(body, namespace=ARCHIVE_NAMESPACE)
    with pytest.raises(SignatureRefused, match="signed for namespace 'edgelet-image'") as err:
        _check(trust, body, sig)
    assert err.value.reason == "wrong namespace"
    assert _check(trust, body, sig, namespace=ARCHIVE_NAMESPACE)


# --- the file source ------------------------------------------------------------------------


def _scan(mdir: Path, trust: Trust, state: FileSourceState | None = None):
    return scan_directory(mdir, NODE, state or FileSourceState(), trust=trust)


def _images(snap) -> dict[str, str]:
    return {p.metadata.name: p.spec.containers[0].image for p in snap.pods}


@pytest.fixture
def mdir(tmp_path: Path) -> Path:
    d = tmp_path / "manifests"
    d.mkdir()
    return d


def test_file_source_takes_signed_manifests_and_refuses_unsigned_ones(mdir: Path, tools: dict, trust: Trust) -> None:
    signed = mdir / "web.yaml"
    signed.write_text(pod_yaml("web"))
    tools["minisign"].sign(signed, version=1)
    ssh_signed = mdir / "db.yaml"
    ssh_signed.write_text(pod_yaml("db"))
    tools["ssh"].sign(ssh_signed)
    (mdir / "evil.yaml").write_text(pod_yaml("evil"))
    snap, _ = _scan(mdir, trust)
    assert sorted(_images(snap)) == ["db-node1", "web-node1"]  # the .minisig/.sig files are no manifests
    [error] = snap.errors
    assert error.reason == "UntrustedManifest" and error.origin == str(mdir / "evil.yaml")
    assert "signature refused (missing)" in error.message and "evil.yaml.minisig or" in error.message


def test_a_refused_update_keeps_the_running_pods(mdir: Path, tools: dict, trust: Trust, tmp_path: Path) -> None:
    f = mdir / "web.yaml"
    f.write_text(pod_yaml("web", "busybox:1"))
    tools["minisign"].sign(f, version=1)
    snap, state = _scan(mdir, trust)
    assert _images(snap) == {"web-node1": "busybox:1"}
    good_sig = (mdir / "web.yaml.minisig").read_bytes()

    def attempt(mutate, reason: str) -> None:
        nonlocal state
        mutate()
        snap, state = _scan(mdir, trust, state)
        assert _images(snap) == {"web-node1": "busybox:1"}, reason  # like no update at all
        [error] = snap.errors
        assert f"signature refused ({reason})" in error.message and error.reason == "UntrustedManifest"

    # An unsigned update (the signature removed), then a new body beside the old signature.
    attempt(lambda: (mdir / "web.yaml.minisig").unlink(), "missing")
    attempt(lambda: ((mdir / "web.yaml.minisig").write_bytes(good_sig), f.write_text(pod_yaml("web", "evil:1"))), "bad")
    # Signed by a key the device does not trust.
    attempt(lambda: tools["stranger"].sign(f), "unknown key")
    # A signed update is taken, and re-verified when only its signature changes.
    f.write_text(pod_yaml("web", "busybox:2"))
    tools["minisign"].sign(f, version=2)
    snap, state = _scan(mdir, trust, state)
    assert _images(snap) == {"web-node1": "busybox:2"} and snap.errors == ()
    flip_signature_byte(mdir / "web.yaml.minisig")
    snap, state = _scan(mdir, trust, state)
    assert _images(snap) == {"web-node1": "busybox:2"} and "(bad)" in snap.errors[0].message


def test_an_older_signed_version_is_a_replay_even_after_a_restart(
    mdir: Path, tools: dict, trust: Trust, keydir: Path, tmp_path: Path
) -> None:
    f = mdir / "web.yaml"
    f.write_text(pod_yaml("web", "vulnerable:1"))
    tools["minisign"].sign(f, version=41)
    old_body, old_sig = f.read_bytes(), (mdir / "web.yaml.minisig").read_bytes()
    snap, state = _scan(mdir, trust)
    f.write_text(pod_yaml("web", "fixed:2"))
    tools["minisign"].sign(f, version=42)
    snap, state = _scan(mdir, trust, state)
    assert _images(snap) == {"web-node1": "fixed:2"}
    record = json.loads((tmp_path / "state" / "trust" / VERSIONS_FILE).read_text())
    assert record[f"file:{f}"]["version"] == 42 and record["pod:default/web-node1"]["version"] == 42

    # The attacker puts back the old, validly signed manifest.
    f.write_bytes(old_body)
    (mdir / "web.yaml.minisig").write_bytes(old_sig)
    snap, state = _scan(mdir, trust, state)
    assert _images(snap) == {"web-node1": "fixed:2"}
    assert (
        "signature refused (replay)" in snap.errors[0].message
        and "41 is older than version 42" in snap.errors[0].message
    )
    # ... after a restart (fresh source state, records read from disk): still refused, and the pods are those
    # of the last accepted version, from its kept copy.
    restarted = Trust.load(keydir, tmp_path / "state" / "trust", FakeClock(NOW))
    snap, _ = _scan(mdir, restarted)
    assert _images(snap) == {"web-node1": "fixed:2"} and "(replay)" in snap.errors[0].message
    # ... and under another file name: the pod's own record refuses it.
    f.unlink()
    (mdir / "web.yaml.minisig").unlink()
    (mdir / "copy.yaml").write_bytes(old_body)
    (mdir / "copy.yaml.minisig").write_bytes(old_sig)
    snap, _ = _scan(mdir, restarted)
    assert snap.pods == () and "default/web-node1: version 41 is older" in snap.errors[0].message


def test_the_same_version_for_another_body_is_refused(mdir: Path, tools: dict, trust: Trust) -> None:
    f = mdir / "web.yaml"
    f.write_text(pod_yaml("web", "a:1"))
    tools["minisign"].sign(f, version=5)
    snap, state = _scan(mdir, trust)
    f.write_text(pod_yaml("web", "b:1"))
    tools["minisign"].sign(f, version=5)
    snap, state = _scan(mdir, trust, state)
    assert (
        _images(snap) == {"web-node1": "a:1"}
        and "version 5 was accepted before for another body" in snap.errors[0].message
    )


def test_ssh_and_signify_versions_come_from_the_signed_body(mdir: Path, tools: dict, trust: Trust) -> None:
    f = mdir / "web.yaml"
    f.write_text(pod_yaml("web", "a:1", version=3))
    tools["ssh"].sign(f)
    snap, state = _scan(mdir, trust)
    f.write_text(pod_yaml("web", "b:1", version=2))
    tools["ssh"].sign(f)
    snap, state = _scan(mdir, trust, state)
    assert _images(snap) == {"web-node1": "a:1"} and "(replay)" in snap.errors[0].message
    (mdir / "web.yaml.sig").unlink()
    f.write_text(pod_yaml("web", "c:1", version=4))
    tools["signify"].sign(f)
    snap, state = _scan(mdir, trust, state)
    assert _images(snap) == {"web-node1": "c:1"} and snap.errors == ()


def test_without_trust_signature_files_are_read_as_manifests_as_before(mdir: Path, tools: dict) -> None:
    f = mdir / "web.yaml"
    f.write_text(pod_yaml("web"))
    tools["minisign"].sign(f)
    snap, _ = scan_directory(mdir, NODE, FileSourceState())
    assert list(_images(snap)) == ["web-node1"] and len(snap.errors) == 1  # today's behaviour: no exception


def test_version_records_are_written_atomically_and_survive_garbage(tmp_path: Path) -> None:
    store = VersionStore(tmp_path)
    store.record(["file:/a", "pod:default/a"], 3, "d1")
    assert VersionStore(tmp_path).get("file:/a") == {"version": 3, "digest": "d1"}
    store.record(["file:/a"], 2, "d2")  # never lowered
    assert VersionStore(tmp_path).get("file:/a") == {"version": 3, "digest": "d2"}
    (tmp_path / VERSIONS_FILE).write_text("{not json")
    assert VersionStore(tmp_path).get("file:/a") is None  # logged; the device keeps working
    assert [p.name for p in tmp_path.iterdir()] == [VERSIONS_FILE]  # no temp file left


def test_a_file_refused_at_start_keeps_its_last_accepted_pods(
    mdir: Path, tools: dict, trust: Trust, keydir: Path, tmp_path: Path
) -> None:
    f = mdir / "web.yaml"
    f.write_text(pod_yaml("web", "good:1"))
    tools["minisign"].sign(f, version=1)
    snap, _ = _scan(mdir, trust)
    [accepted] = snap.pods
    # While the agent is down the file is replaced by an unsigned one: after the restart its pods are those
    # of the last accepted copy (same UID: the running pod is adopted, not replaced), and the refusal is shown.
    f.write_text(pod_yaml("web", "evil:1"))
    restarted = Trust.load(keydir, tmp_path / "state" / "trust", FakeClock(NOW))
    snap, state = _scan(mdir, restarted)
    assert snap.pods == (accepted,) and "(bad)" in snap.errors[0].message
    # A copy edited on disk is verified again, and then not used.
    [copy] = (tmp_path / "state" / "trust" / "accepted").iterdir()
    doc = json.loads(copy.read_bytes())
    doc["body"] = base64.b64encode(base64.b64decode(doc["body"]).replace(b"good:1", b"evil:1")).decode()
    copy.write_text(json.dumps(doc))
    snap, _ = _scan(mdir, Trust.load(keydir, tmp_path / "state" / "trust", FakeClock(NOW)))
    assert snap.pods == ()


def test_a_deleted_file_does_not_come_back_from_its_copy(mdir: Path, tools: dict, trust: Trust) -> None:
    f = mdir / "web.yaml"
    f.write_text(pod_yaml("web", "good:1"))
    tools["minisign"].sign(f, version=1)
    snap, state = _scan(mdir, trust)
    f.unlink()
    (mdir / "web.yaml.minisig").unlink()
    snap, state = _scan(mdir, trust, state)
    assert snap.pods == ()
    f.write_text(pod_yaml("web", "evil:1"))  # an unsigned file under the same name
    snap, _ = _scan(mdir, trust)
    assert snap.pods == () and "(missing)" in snap.errors[0].message


def _sign_as(tools: dict, path: Path, body: str, version: int) -> tuple[bytes, bytes]:
    path.write_text(body)
    tools["minisign"].sign(path, version=version)
    return path.read_bytes(), Path(str(path) + ".minisig").read_bytes()


def _put(path: Path, body: bytes, sig: bytes) -> None:
    path.write_bytes(body)
    Path(str(path) + ".minisig").write_bytes(sig)


def _delete(path: Path) -> None:
    path.unlink()
    Path(str(path) + ".minisig").unlink()


def test_deletion_revokes_the_exact_signed_body_under_any_name(mdir: Path, tools: dict, trust: Trust) -> None:
    """The operator deletes a signed manifest to stop its pod; whoever kept a copy of the body and its
    signature cannot bring the pod back, under its own name or another: a tombstone refuses the same version."""
    f = mdir / "web.yaml"
    body, sig = _sign_as(tools, f, pod_yaml("web", "old:1"), 3)
    snap, state = _scan(mdir, trust)
    assert _images(snap) == {"web-node1": "old:1"}
    _delete(f)
    snap, state = _scan(mdir, trust, state)
    assert snap.pods == ()
    for name in ("web.yaml", "other.yaml"):
        _put(mdir / name, body, sig)
        snap, state = _scan(mdir, trust, state)
        assert snap.pods == (), name
        [err] = snap.errors
        assert err.reason == "UntrustedManifest" and "signature refused (replay)" in err.message
        assert "version 3 was deleted" in err.message, err.message
        _delete(mdir / name)
        snap, state = _scan(mdir, trust, state)
    # Only a newer signed version brings the pod back.
    _sign_as(tools, mdir / "other.yaml", pod_yaml("web", "new:1"), 4)
    snap, state = _scan(mdir, trust, state)
    assert _images(snap) == {"web-node1": "new:1"} and snap.errors == ()


def test_a_pod_dropped_by_a_newer_version_stays_revoked(mdir: Path, tools: dict, trust: Trust) -> None:
    f = mdir / "app.yaml"
    body, sig = _sign_as(tools, f, pod_yaml("db"), 1)
    snap, state = _scan(mdir, trust)
    assert sorted(_images(snap)) == ["db-node1"]
    _sign_as(tools, f, pod_yaml("web"), 2)  # v2 drops db for web
    snap, state = _scan(mdir, trust, state)
    assert sorted(_images(snap)) == ["web-node1"]
    _put(mdir / "old.yaml", body, sig)  # v1, with db, under another name
    snap, state = _scan(mdir, trust, state)
    assert sorted(_images(snap)) == ["web-node1"] and "(replay)" in snap.errors[0].message


def test_a_rename_in_one_scan_keeps_its_pods(mdir: Path, tools: dict, trust: Trust) -> None:
    f = mdir / "web.yaml"
    _sign_as(tools, f, pod_yaml("web"), 1)
    snap, state = _scan(mdir, trust)
    os.rename(f, mdir / "web2.yaml")
    os.rename(str(f) + ".minisig", str(mdir / "web2.yaml") + ".minisig")
    snap, state = _scan(mdir, trust, state)
    assert sorted(_images(snap)) == ["web-node1"] and snap.errors == ()


def test_a_file_deleted_while_down_then_junk_at_its_path_runs_nothing(
    mdir: Path, tools: dict, trust: Trust, keydir: Path, tmp_path: Path
) -> None:
    f = mdir / "web.yaml"
    body, sig = _sign_as(tools, f, pod_yaml("web", "good:1"), 5)
    _scan(mdir, trust)
    _delete(f)  # while the agent is down
    restarted = Trust.load(keydir, tmp_path / "state" / "trust", FakeClock(NOW))
    snap, state = _scan(mdir, restarted)  # the first scan after the start sees the deletion
    assert snap.pods == ()
    assert not list((tmp_path / "state" / "trust" / "accepted").iterdir())
    f.write_text("unsigned junk\n")  # later, anything at the path
    snap, state = _scan(mdir, restarted, state)
    assert snap.pods == () and snap.errors[0].reason == "UntrustedManifest"
    f.unlink()
    _put(f, body, sig)  # and the exact signed body: a replay, across another restart too
    again = Trust.load(keydir, tmp_path / "state" / "trust", FakeClock(NOW))
    snap, _ = _scan(mdir, again)
    assert snap.pods == () and "version 5 was deleted" in snap.errors[0].message


@pytest.mark.timeout(60)
def test_named_pipes_in_the_manifest_dir_are_refused_and_block_nothing(mdir: Path, tools: dict, trust: Trust) -> None:
    """A FIFO as a manifest or as a signature: never opened blocking, refused with a reason naming the file,
    and the other manifests are read as ever."""
    _sign_as(tools, mdir / "web.yaml", pod_yaml("web"), 1)
    os.mkfifo(mdir / "pipe.yaml")
    (mdir / "db.yaml").write_text(pod_yaml("db"))
    os.mkfifo(mdir / "db.yaml.minisig")
    snap, _ = _scan(mdir, trust)
    assert sorted(_images(snap)) == ["web-node1"]
    reasons = {Path(e.origin).name: e.message for e in snap.errors}
    assert "not a regular file" in reasons["pipe.yaml"]
    assert "a named pipe, not a regular file" in reasons["db.yaml"] and "(malformed)" in reasons["db.yaml"]
    # Without trust too: a FIFO is refused by name, the rest read.
    snap, _ = scan_directory(mdir, NODE, FileSourceState())
    assert "not a regular file" in {Path(e.origin).name: e.message for e in snap.errors}["pipe.yaml"]
