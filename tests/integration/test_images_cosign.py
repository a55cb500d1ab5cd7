"""Signed registry images: a real docker-registry on loopback, cosign-format signatures stored as cosign stores them
(`sha256-<hex>.sig`), and a containers-policy.json; each attack is refused with its reason and nothing is stored."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import msgspec
import pytest

from edgelet.api.static import make_static_pod
from edgelet.api.types import Pod
from edgelet.events import EventRecorder
from edgelet.images.errors import ImageSignatureRefused
from edgelet.images.manager import ImageManager, ImageUnavailable
from edgelet.images.puller import Puller
from edgelet.images.store import ImageStore
from edgelet.testing.cosign import CosignKey, push_signatures, simple_signing
from edgelet.trust.errors import PolicyError
from edgelet.trust.policy import load_policy
from edgelet.util.backoff import Backoff
from edgelet.util.clock import FakeClock
from tests.integration.registry import Layout, Registry, busybox_tar, file_layer

pytestmark = pytest.mark.skipif(
    shutil.which("docker-registry") is None or shutil.which("skopeo") is None,
    reason="needs docker-registry and skopeo (make deps)",
)


class Env:
    def __init__(self, reg: Registry, base: Path) -> None:
        self.reg = reg
        self.base = base
        self.trusted = CosignKey()
        self.stranger = CosignKey()
        self.digests: dict[str, str] = {}
        self.policy_path = base / "policy.json"
        key = self.trusted.write_public(base / "cosign.pub")
        h = reg.host
        self.policy_path.write_text(
            json.dumps(
                {
                    "default": [{"type": "insecureAcceptAnything"}],
                    "transports": {
                        "docker": {
                            f"{h}/signed": [{"type": "sigstoreSigned", "keyPath": str(key)}],
                            f"{h}/cosign": [
                                {
                                    "type": "sigstoreSigned",
                                    "keyPath": str(key),
                                    "signedIdentity": {"type": "matchRepository"},
                                }
                            ],
                            f"{h}/blocked": [{"type": "reject"}],
                        }
                    },
                }
            )
        )

    def push(self, repo_tag: str, marker: str, *, multi: bool = False) -> str:
        lay = Layout(self.base / "layouts" / repo_tag.replace("/", "_").replace(":", "_"))
        if multi:
            amd = lay.image(
                [(busybox_tar(), True), (file_layer({"etc/m": marker.encode()}), True)], architecture="amd64"
            )
            arm = lay.image(
                [(busybox_tar(), True), (file_layer({"etc/m": marker.encode()}), True)],
                architecture="arm64",
                variant="v8",
            )
            desc = lay.index([arm, amd])
        else:
            desc = lay.image([(busybox_tar(), True), (file_layer({"etc/m": marker.encode()}), False)])
        lay.tag(desc)
        self.reg.push_layout(lay.dir, repo_tag, all_platforms=multi)
        self.digests[repo_tag] = desc["digest"]
        return desc["digest"]

    def ref(self, repo_tag: str) -> str:
        return f"{self.reg.host}/{repo_tag}"

    def sign(
        self,
        repo_tag: str,
        *,
        key: CosignKey | None = None,
        identity: str | None = None,
        digest: str | None = None,
        extra: list | None = None,
    ) -> None:
        """Sign `repo_tag`'s manifest; `identity`/`digest` override what the payload claims (the attacks)."""
        named = self.digests[repo_tag]
        payload = simple_signing(identity if identity is not None else self.ref(repo_tag), digest or named)
        sigs = [(key or self.trusted).sign(payload), *(extra or [])]
        push_signatures(self.reg.host, repo_tag.split(":")[0], named, sigs)

    def puller(self, store: ImageStore) -> Puller:
        return Puller(store, signature_policy=load_policy(self.policy_path))


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    base = tmp_path_factory.mktemp("cosign")
    reg = Registry(base / "reg")
    reg.start()
    try:
        e = Env(reg, base)
        e.push("signed/app:1", "app")
        e.sign("signed/app:1")
        e.push("cosign/app:1", "cosign")
        e.sign("cosign/app:1", identity=e.reg.host + "/cosign/app")  # what `cosign sign` writes: no tag
        e.push("signed/multi:1", "multi", multi=True)
        e.sign("signed/multi:1")  # over the index, as `cosign sign` of a tag does
        e.push("signed/unsigned:1", "unsigned")
        e.push("signed/otherkey:1", "otherkey")
        e.sign("signed/otherkey:1", key=e.stranger)
        e.push("signed/swapped:1", "swapped")
        e.sign("signed/swapped:1", digest=e.digests["signed/app:1"])  # a valid signature of another image
        e.push("signed/wrongref:1", "wrongref")
        e.sign("signed/wrongref:1", identity=e.ref("signed/app:1"))
        e.push("signed/two:1", "two")  # one bad signature beside a good one: the good one is enough
        e.sign(
            "signed/two:1", extra=[e.stranger.sign(simple_signing(e.ref("signed/two:1"), e.digests["signed/two:1"]))]
        )
        e.push("cosign/tagonly:1", "tagonly")
        e.sign("cosign/tagonly:1", identity=e.reg.host + "/cosign/other")
        e.push("blocked/app:1", "blocked")
        e.push("free/app:1", "free")
        yield e
    finally:
        reg.stop()


def _nothing_stored(store: ImageStore, digest: str) -> None:
    assert store.list() == []
    assert not store.has_blob(digest)


def test_signed_images_pull(env, tmp_path):
    store = ImageStore(tmp_path / "s")
    puller = env.puller(store)
    rec = puller.pull_sync(env.ref("signed/app:1"))
    assert rec.digest == env.digests["signed/app:1"]
    assert (rec.layers[-1] / "etc" / "m").read_bytes() == b"app"
    # by digest, the tagged signature of the repository is enough (matchRepoDigestOrExact)
    assert puller.pull_sync(f"{env.reg.host}/signed/app@{rec.digest}").id == rec.id
    # a cosign signature names the repository only: accepted where the scope says matchRepository
    assert (puller.pull_sync(env.ref("cosign/app:1")).layers[-1] / "etc" / "m").read_bytes() == b"cosign"
    # a multi-platform image: the signature is over the index the tag names
    assert (puller.pull_sync(env.ref("signed/multi:1")).layers[-1] / "etc" / "m").read_bytes() == b"multi"
    assert puller.pull_sync(env.ref("signed/two:1"))
    # outside the signed scopes the default applies (insecureAcceptAnything)
    assert puller.pull_sync(env.ref("free/app:1"))


@pytest.mark.parametrize(
    "repo_tag, reason",
    [
        ("signed/unsigned:1", "a signature is required and the image has none (no tag sha256-"),
        ("signed/otherkey:1", "not signed by a trusted key"),
        ("signed/swapped:1", "signs manifest {app}, the image is {self}"),
        (
            "signed/wrongref:1",
            "signed identity '{host}/signed/app:1' does not match {host}/signed/wrongref:1 "
            "(signedIdentity matchRepoDigestOrExact)",
        ),
        ("cosign/tagonly:1", "signed identity '{host}/cosign/other' does not match"),
        ("blocked/app:1", "the policy rejects every image of this scope (type reject)"),
    ],
)
def test_attacks_are_refused_with_their_reason(env, tmp_path, repo_tag, reason):
    store = ImageStore(tmp_path / "s")
    with pytest.raises(ImageSignatureRefused) as exc:
        env.puller(store).pull_sync(env.ref(repo_tag))
    want = reason.format(app=env.digests["signed/app:1"], self=env.digests[repo_tag], host=env.reg.host)
    assert want in str(exc.value), str(exc.value)
    assert str(env.policy_path) in str(exc.value)
    _nothing_stored(store, env.digests[repo_tag])


def test_signature_of_cosign_unsigned_image_in_cosign_scope_names_the_scope(env, tmp_path):
    env.push("cosign/none:1", "none")
    with pytest.raises(ImageSignatureRefused) as exc:
        env.puller(ImageStore(tmp_path / "s")).pull_sync(env.ref("cosign/none:1"))
    assert exc.value.scope == f"docker:{env.reg.host}/cosign"


def test_without_a_policy_every_pull_is_todays(env, tmp_path):
    assert Puller(ImageStore(tmp_path / "s")).pull_sync(env.ref("signed/unsigned:1"))


def test_a_malformed_policy_names_file_and_field(env, tmp_path):
    bad = tmp_path / "policy.json"
    bad.write_text(
        json.dumps(
            {
                "default": [{"type": "insecureAcceptAnything"}],
                "transports": {
                    "docker": {"x.io/a": [{"type": "sigstoreSigned", "keyPath": str(tmp_path / "missing.pub")}]}
                },
            }
        )
    )
    with pytest.raises(PolicyError) as exc:
        load_policy(bad)
    assert str(bad) in str(exc.value) and 'transports.docker["x.io/a"][0].keyPath' in str(exc.value)
    (tmp_path / "rsa.pub").write_bytes(b"-----BEGIN PUBLIC KEY-----\nnot a key\n-----END PUBLIC KEY-----\n")
    bad.write_text(json.dumps({"default": [{"type": "sigstoreSigned", "keyPath": str(tmp_path / "rsa.pub")}]}))
    with pytest.raises(PolicyError, match=r"field default\[0\]\.keyPath: .*rsa.pub: not a PEM public key"):
        load_policy(bad)
    p384 = CosignKey("p384").write_public(tmp_path / "p384.pub")
    bad.write_text(json.dumps({"default": [{"type": "sigstoreSigned", "keyPath": str(p384)}]}))
    with pytest.raises(PolicyError, match="not an ECDSA P-256 public key"):
        load_policy(bad)


def _pod(image: str) -> Pod:
    raw = msgspec.convert(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": image, "imagePullPolicy": "Always"}]},
        },
        Pod,
    )
    return make_static_pod(raw, node_name="n", source="file", origin="/m/p.yaml")


def test_the_image_manager_reports_err_image_pull_with_the_reason(env, tmp_path):
    """What the pod's container status and events show: ErrImagePull naming the policy and the reason; a pod whose
    image verifies pulls through the same manager."""
    clock = FakeClock()
    events = EventRecorder(clock)
    store = ImageStore(tmp_path / "s")
    m = ImageManager(store, env.puller(store), events=events, backoff=Backoff(), clock=clock)
    bad = _pod(env.ref("signed/otherkey:1"))
    with pytest.raises(ImageUnavailable) as exc:
        asyncio.run(m.ensure(bad, bad.spec.containers[0]))
    assert exc.value.reason == "ErrImagePull"
    assert "not signed by a trusted key" in exc.value.message and str(env.policy_path) in exc.value.message
    failed = [e.message for e in events.events() if e.reason == "Failed"]
    assert any("not signed by a trusted key" in msg for msg in failed)
    good = _pod(env.ref("signed/app:1"))
    assert asyncio.run(m.ensure(good, good.spec.containers[0])).digest == env.digests["signed/app:1"]


def _cli(root: Path, *args: str) -> list[str]:
    import sys

    return [
        sys.executable,
        "-m",
        "edgelet",
        "images",
        *args,
        "--root-dir",
        str(root / "root"),
        "--run-dir",
        str(root / "run"),
        "--config",
        "/dev/null",
    ]


def test_edgelet_images_pull_applies_the_policy(env, tmp_path):
    import subprocess

    policy = ["--signature-policy", str(env.policy_path)]
    done = subprocess.run(
        _cli(tmp_path, "pull", env.ref("signed/swapped:1"), *policy), capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert f"signs manifest {env.digests['signed/app:1']}" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    done = subprocess.run(
        _cli(tmp_path, "pull", env.ref("signed/app:1"), *policy), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"default": [{"type": "sigstoreSigned", "fulcio": {}}]}')
    done = subprocess.run(
        _cli(tmp_path, "pull", env.ref("signed/app:1"), "--signature-policy", str(bad)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and f"signature policy {bad} field default[0].fulcio: keyless" in done.stderr, (
        done.stderr
    )
    assert "Traceback" not in done.stderr
