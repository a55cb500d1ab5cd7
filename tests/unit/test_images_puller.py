"""Registry pulls without a network: pure helpers in tables, auth flows and failures over httpx.MockTransport."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from pathlib import Path

import httpx
import msgspec
import pytest

from edgelet.api.static import make_static_pod
from edgelet.api.types import Container, Pod
from edgelet.events import EventRecorder
from edgelet.images.auth import Credential, normalize_registry_key, parse_challenge, parse_docker_config
from edgelet.images.errors import BlobError
from edgelet.images.manager import ImageManager, ImageUnavailable, effective_pull_policy, should_pull
from edgelet.images.puller import ManifestError, Puller, PullError, classify_manifest
from edgelet.images.reference import Platform, select_platform
from edgelet.images.registries import Endpoint, RegistryHost, parse_registries, registry_endpoints
from edgelet.images.store import ImageStore
from edgelet.testing.images import build_config, build_layer
from edgelet.util.backoff import Backoff
from edgelet.util.clock import FakeClock

OCI_M = "application/vnd.oci.image.manifest.v1+json"
OCI_I = "application/vnd.oci.image.index.v1+json"


@pytest.mark.parametrize(
    "mt, doc, want",
    [
        (OCI_M, {"schemaVersion": 2, "config": {}, "layers": []}, "manifest"),
        (
            "application/vnd.docker.distribution.manifest.v2+json",
            {"schemaVersion": 2, "config": {}, "layers": []},
            "manifest",
        ),
        (OCI_I, {"schemaVersion": 2, "manifests": []}, "index"),
        ("application/vnd.docker.distribution.manifest.list.v2+json", {"manifests": []}, "index"),
        ("", {"schemaVersion": 2, "manifests": []}, "index"),
        ("application/vnd.docker.distribution.manifest.v1+prettyjws", {"schemaVersion": 1}, "schema1"),
        ("application/json", {"schemaVersion": 1, "fsLayers": []}, "schema1"),
    ],
)
def test_classify_manifest(mt, doc, want):
    assert classify_manifest(mt, doc) == want


@pytest.mark.parametrize(
    "doc",
    [
        {"manifests": [], "layers": [], "config": {}},  # ambiguous
        {"schemaVersion": 2},
        [],
    ],
)
def test_classify_manifest_rejects(doc):
    with pytest.raises(ValueError):
        classify_manifest(OCI_M if isinstance(doc, dict) and "layers" in doc else "", doc)


def _d(arch, variant=None):
    return {
        "digest": arch + (variant or ""),
        "platform": {"os": "linux", "architecture": arch, **({"variant": variant} if variant else {})},
    }


@pytest.mark.parametrize(
    "descs, wanted, chosen",
    [
        ([_d("amd64"), _d("arm64", "v8")], Platform("linux", "amd64"), "amd64"),
        ([_d("amd64"), _d("arm64", "v8")], Platform("linux", "arm64", "v8"), "arm64v8"),
        ([_d("amd64"), _d("arm64")], Platform("linux", "arm64", "v8"), "arm64"),
        ([_d("arm", "v6"), _d("arm", "v7")], Platform("linux", "arm", "v7"), "armv7"),
        ([_d("arm", "v6")], Platform("linux", "arm", "v7"), "armv6"),  # v6 runs on v7
        ([_d("arm", "v7")], Platform("linux", "arm", "v6"), None),  # not the other way round
        ([_d("amd64")], Platform("linux", "arm64", "v8"), None),
    ],
)
def test_platform_selection(descs, wanted, chosen):
    got = select_platform(descs, wanted)
    assert (got["digest"] if got else None) == chosen


def test_parse_challenge():
    c = parse_challenge(
        'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",'
        'scope="repository:library/busybox:pull"'
    )
    assert c.scheme == "bearer"
    assert c.params == {
        "realm": "https://auth.docker.io/token",
        "service": "registry.docker.io",
        "scope": "repository:library/busybox:pull",
    }
    assert parse_challenge('Basic realm="x"').scheme == "basic"


def test_docker_config_forms():
    doc = {
        "auths": {
            "https://index.docker.io/v1/": {"auth": base64.b64encode(b"hub:pw:with:colons").decode()},
            "reg.example:5000": {"username": "u", "password": "p"},
            "empty.example": {},
        }
    }
    creds = parse_docker_config(doc)
    assert creds == {"docker.io": Credential("hub", "pw:with:colons"), "reg.example:5000": Credential("u", "p")}
    assert "pw" not in repr(creds["docker.io"])
    assert normalize_registry_key("http://Host:1/v2/") == "host:1"


def test_registry_endpoints_and_config():
    hosts = parse_registries({"docker.io": {"mirrors": ["https://m1", "m2:5000"]}, "r:1": {"insecure": True}})
    assert registry_endpoints("docker.io", hosts) == [
        Endpoint("https://m1", False, True),
        Endpoint("https://m2:5000", False, True),
        Endpoint("https://registry-1.docker.io", False, False),
    ]
    assert registry_endpoints("r:1", hosts) == [Endpoint("http://r:1", True)]
    assert registry_endpoints("127.0.0.1:5000", {}) == [Endpoint("http://127.0.0.1:5000", True)]
    assert registry_endpoints("quay.io", {}) == [Endpoint("https://quay.io", False)]
    for bad in ({"x": {"mirrors": "m"}}, {"x": {"insecure": "yes"}}, {"x": {"other": 1}}, {"a/b": {}}):
        with pytest.raises(ValueError):
            parse_registries(bad)


# --- a fake registry over MockTransport ---------------------------------------------------------


def _sha(b: bytes) -> str:
    return "sha256:" + hashlib.sha256(b).hexdigest()


class FakeRegistry:
    """Serves one image `test/img:1`; `auth` is None, "basic" or "bearer"."""

    def __init__(self, auth: str | None = None) -> None:
        layer = build_layer({"etc/hello": b"hi\n"}, busybox=False)
        self.config = build_config([layer], None)
        self.layer = layer.blob
        self.manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": OCI_M,
                "config": {
                    "mediaType": "application/vnd.oci.image.config.v1+json",
                    "digest": _sha(self.config),
                    "size": len(self.config),
                },
                "layers": [
                    {
                        "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                        "digest": _sha(self.layer),
                        "size": len(self.layer),
                    }
                ],
            }
        ).encode()
        self.blobs = {_sha(self.config): self.config, _sha(self.layer): self.layer}
        self.auth = auth
        self.requests: list[str] = []
        self.manifest_type = OCI_M

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(f"{request.method} {request.url}")
        if request.url.path == "/token":
            assert request.headers.get("authorization") == "Basic " + base64.b64encode(b"u:p").decode()
            assert request.url.params["scope"] == "repository:test/img:pull"
            return httpx.Response(200, json={"token": "T0K"})
        if (
            self.auth == "basic"
            and request.headers.get("authorization") != "Basic " + base64.b64encode(b"u:p").decode()
        ):
            return httpx.Response(401, headers={"WWW-Authenticate": 'Basic realm="r"'})
        if self.auth == "bearer" and request.headers.get("authorization") != "Bearer T0K":
            return httpx.Response(
                401,
                headers={
                    "WWW-Authenticate": 'Bearer realm="http://reg.test/token",'
                    'service="reg",scope="repository:test/img:pull"'
                },
            )
        path = request.url.path
        if path.startswith("/v2/test/img/manifests/"):
            return httpx.Response(200, content=self.manifest, headers={"Content-Type": self.manifest_type})
        if path.startswith("/v2/test/img/blobs/"):
            digest = path.rsplit("/", 1)[1]
            if digest in self.blobs:
                return httpx.Response(200, content=self.blobs[digest])
        return httpx.Response(404, json={"errors": [{"code": "NOT_FOUND"}]})


def _puller(tmp_path: Path, reg: FakeRegistry, creds=None, registries=None) -> Puller:
    return Puller(
        ImageStore(tmp_path / "store"),
        transport=httpx.MockTransport(reg.handler),
        credentials=creds or {},
        registries=registries or {"reg.test": RegistryHost(insecure=True)},
    )


@pytest.mark.parametrize("auth", [None, "basic", "bearer"])
def test_pull_with_auth(tmp_path, auth):
    reg = FakeRegistry(auth)
    p = _puller(tmp_path, reg, {"reg.test": Credential("u", "p")})
    rec = p.pull_sync("reg.test/test/img:1")
    assert rec.references == ("reg.test/test/img:1",)
    assert (rec.layers[0] / "etc" / "hello").read_bytes() == b"hi\n"
    assert p.store.get("reg.test/test/img:1") is not None


def test_unauthorized_without_credentials(tmp_path):
    p = _puller(tmp_path, FakeRegistry("basic"))
    with pytest.raises(PullError, match="no credentials"):
        p.pull_sync("reg.test/test/img:1")


def test_schema1_is_refused_clearly(tmp_path):
    reg = FakeRegistry()
    reg.manifest = json.dumps({"schemaVersion": 1, "name": "test/img", "fsLayers": []}).encode()
    reg.manifest_type = "application/vnd.docker.distribution.manifest.v1+prettyjws"
    p = _puller(tmp_path, reg)
    with pytest.raises(ManifestError, match="schema 1"):
        p.pull_sync("reg.test/test/img:1")
    assert p.store.list() == []


def test_corrupt_blob_is_not_stored(tmp_path):
    reg = FakeRegistry()
    d = _sha(reg.layer)
    reg.blobs[d] = reg.layer[:-1] + bytes([reg.layer[-1] ^ 1])
    p = _puller(tmp_path, reg)
    with pytest.raises(BlobError, match="content has digest"):
        p.pull_sync("reg.test/test/img:1")
    assert not p.store.has_blob(d) and p.store.list() == []
    assert list((tmp_path / "store" / "tmp").iterdir()) == []


def test_wrong_digest_for_pinned_reference(tmp_path):
    p = _puller(tmp_path, FakeRegistry())
    with pytest.raises(BlobError, match="manifest content has digest"):
        p.pull_sync("reg.test/test/img@sha256:" + "0" * 64)


def test_mirror_falls_back_to_registry(tmp_path):
    reg = FakeRegistry()

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "mirror.test":
            raise httpx.ConnectError("connection refused", request=request)
        return reg.handler(request)

    p = Puller(
        ImageStore(tmp_path / "store"),
        transport=httpx.MockTransport(handler),
        registries={"reg.test": RegistryHost(mirrors=("http://mirror.test",), insecure=True)},
    )
    assert p.pull_sync("reg.test/test/img:1").references == ("reg.test/test/img:1",)
    assert reg.requests[0].startswith("GET http://reg.test/v2/test/img/manifests/1")


def test_concurrent_pulls_share_one_download(tmp_path):
    reg = FakeRegistry()
    p = _puller(tmp_path, reg)

    async def main():
        return await asyncio.gather(*(p.pull("reg.test/test/img:1") for _ in range(4)))

    records = asyncio.run(main())
    assert len({r.id for r in records}) == 1
    assert sum(1 for r in reg.requests if "/manifests/" in r) == 1


# --- the image manager: policy, back-off, events -------------------------------------------------


@pytest.mark.parametrize(
    "image, policy, want",
    [
        ("busybox", None, "Always"),
        ("busybox:latest", None, "Always"),
        ("busybox:1", None, "IfNotPresent"),
        ("busybox@sha256:" + "a" * 64, None, "IfNotPresent"),
        ("busybox:1", "Never", "Never"),
    ],
)
def test_effective_pull_policy(image, policy, want):
    c = msgspec.convert({"name": "c", "image": image, **({"imagePullPolicy": policy} if policy else {})}, Container)
    assert effective_pull_policy(c) == want


@pytest.mark.parametrize(
    "policy, present, want",
    [
        ("Always", True, True),
        ("Always", False, True),
        ("IfNotPresent", True, False),
        ("IfNotPresent", False, True),
        ("Never", True, False),
        ("Never", False, False),
    ],
)
def test_should_pull(policy, present, want):
    assert should_pull(policy, present) is want


def _pod(image: str, policy: str) -> Pod:
    raw = msgspec.convert(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": image, "imagePullPolicy": policy}]},
        },
        Pod,
    )
    return make_static_pod(raw, node_name="n", source="file", origin="/m/p.yaml")


class FailingPuller:
    def __init__(self) -> None:
        self.calls = 0

    async def pull(self, ref):
        self.calls += 1
        raise PullError(ref, "connection refused")


def test_pull_failure_then_backoff_then_retry(tmp_path):
    clock = FakeClock()
    events = EventRecorder(clock)
    puller = FailingPuller()
    m = ImageManager(ImageStore(tmp_path / "s"), puller, events=events, backoff=Backoff(), clock=clock)
    pod = _pod("reg.test/x:1", "IfNotPresent")
    c = pod.spec.containers[0]

    def ensure():
        return asyncio.run(m.ensure(pod, c))

    with pytest.raises(ImageUnavailable) as e1:
        ensure()
    assert e1.value.reason == "ErrImagePull" and "connection refused" in e1.value.message
    with pytest.raises(ImageUnavailable) as e2:
        ensure()
    assert e2.value.reason == "ImagePullBackOff" and puller.calls == 1
    clock.advance(10.1)
    with pytest.raises(ImageUnavailable) as e3:
        ensure()
    assert e3.value.reason == "ErrImagePull" and puller.calls == 2
    clock.advance(10.1)  # now 20 s of back-off
    with pytest.raises(ImageUnavailable) as e4:
        ensure()
    assert e4.value.reason == "ImagePullBackOff"
    assert {"Pulling", "Failed", "BackOff"} <= {e.reason for e in events.events()}


def test_never_without_image(tmp_path):
    clock = FakeClock()
    m = ImageManager(
        ImageStore(tmp_path / "s"), FailingPuller(), events=EventRecorder(clock), backoff=Backoff(), clock=clock
    )
    pod = _pod("reg.test/x:1", "Never")
    with pytest.raises(ImageUnavailable) as e:
        asyncio.run(m.ensure(pod, pod.spec.containers[0]))
    assert e.value.reason == "ErrImageNeverPull"


def test_ensure_stamps_last_used(tmp_path):
    from edgelet.testing.images import build_busybox_image

    clock = FakeClock()
    store = ImageStore(tmp_path / "s", clock=clock)
    store.import_archive(build_busybox_image(tmp_path / "bb.tar", name="reg.test/bb:1"))
    assert store.get("reg.test/bb:1").extra["last_used"] == "0.000"
    m = ImageManager(store, FailingPuller(), events=EventRecorder(clock), backoff=Backoff(), clock=clock)
    pod = _pod("reg.test/bb:1", "IfNotPresent")
    clock.advance(500)
    asyncio.run(m.ensure(pod, pod.spec.containers[0]))
    assert float(ImageStore(tmp_path / "s").get("reg.test/bb:1").extra["last_used"]) == clock.now()  # persisted


def test_registry_bodies_past_their_bounds_are_refused(tmp_path, monkeypatch):
    """A manifest, a cosign signature manifest or a signature payload larger than it may be is an error, read no
    further: a registry must not fill the device's memory."""
    from edgelet.images import puller
    from edgelet.testing.cosign import CosignKey, simple_signing
    from edgelet.trust.policy import parse_policy

    reg = FakeRegistry()
    monkeypatch.setattr(puller, "MAX_JSON", len(reg.manifest) - 1)
    with pytest.raises(PullError, match=r"manifest at \S+ is larger than"):
        _puller(tmp_path, reg).pull_sync("reg.test/test/img:1")
    monkeypatch.setattr(puller, "MAX_JSON", 4096)

    key = CosignKey()
    payload = simple_signing("reg.test/test/img:1", _sha(reg.manifest))
    signature = key.sign(payload).signature
    sig_manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_M,
        "config": {},
        "layers": [
            {
                "mediaType": "application/vnd.dev.cosign.simplesigning.v1+json",
                "digest": _sha(payload),
                "size": len(payload),
                "annotations": {"dev.cosignproject.cosign/signature": signature},
            }
        ],
    }
    served = {"sig": json.dumps(sig_manifest).encode(), "payload": payload}
    plain = reg.handler

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith(".sig"):
            return httpx.Response(200, content=served["sig"], headers={"Content-Type": OCI_M})
        if request.url.path.endswith(_sha(payload)):
            return httpx.Response(200, content=served["payload"])
        return plain(request)

    reg.handler = handler  # type: ignore[method-assign]
    policy = parse_policy(
        json.dumps({"default": [{"type": "sigstoreSigned", "keyData": base64.b64encode(key.public_pem).decode()}]}),
        "policy.json",
    )

    def pull() -> None:
        Puller(
            ImageStore(tmp_path / "signed"),
            transport=httpx.MockTransport(reg.handler),
            credentials={},
            registries={"reg.test": RegistryHost(insecure=True)},
            signature_policy=policy,
        ).pull_sync("reg.test/test/img:1")

    pull()  # as served, the signature holds
    served["payload"] = payload + b" "
    with pytest.raises(BlobError, match=f"registry sends more than the {len(payload)} bytes"):
        pull()
    served["payload"] = payload
    served["sig"] += b" " * 4096
    with pytest.raises(PullError, match=r"signature manifest at \S+ is larger than 4096 bytes"):
        pull()
