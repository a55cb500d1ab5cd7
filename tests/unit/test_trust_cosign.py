"""cosign signature checks over a SignatureSource in memory (the registry is the lowest boundary; the real one is
in tests/integration/test_images_cosign.py): payload and manifest parsing, each reason for a refusal."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest

from edgelet.testing.cosign import CosignKey, Signature, signature_manifest, simple_signing
from edgelet.trust.cosign import SIGNATURE_ANNOTATION, enforce, parse_payload, parse_signature_manifest, signature_tag
from edgelet.trust.errors import ImageSignatureError
from edgelet.trust.policy import Identity, Match, PublicKey, Requirement

REF = "reg.example/fleet/app:1"
DIGEST = "sha256:" + "1" * 64
OTHER = "sha256:" + "2" * 64
TRUSTED = CosignKey()
STRANGER = CosignKey()


class Source:
    """A registry's answers in memory; counts the requests."""

    def __init__(self, signatures: list[Signature] | None, *, manifest: object = None) -> None:
        self.requests: list[str] = []
        self.blobs: dict[str, bytes] = {}
        self.doc = manifest
        if signatures is not None and manifest is None:
            body, self.blobs = signature_manifest("reg.example", "fleet/app", signatures)
            self.doc = json.loads(body)

    def manifest(self, tag: str):
        self.requests.append(tag)
        return self.doc if tag == signature_tag(DIGEST) else None

    def blob(self, digest: str, size: int) -> bytes:
        self.requests.append(digest)
        return self.blobs[digest]


def _match(*reqs: Requirement) -> Match:
    return Match("reg.example/fleet", reqs)


def _sigstore(identity: Identity = Identity(), *keys: CosignKey) -> Requirement:
    return Requirement(
        "sigstoreSigned",
        tuple(PublicKey("f", f"key{i}.pub", k.public_pem) for i, k in enumerate(keys or (TRUSTED,))),
        identity,
    )


def _refused(match: Match, source: Source, ref: str = REF) -> str:
    with pytest.raises(ImageSignatureError) as exc:
        enforce(match, ref, DIGEST, source, policy="/p.json")
    assert exc.value.policy == "/p.json" and exc.value.scope == "docker:reg.example/fleet"
    return exc.value.reason


def test_a_good_signature_is_accepted():
    enforce(_match(_sigstore()), REF, DIGEST, Source([TRUSTED.sign(simple_signing(REF, DIGEST))]))


def test_any_trusted_key_and_any_good_signature_is_enough():
    sigs = [STRANGER.sign(simple_signing(REF, DIGEST)), TRUSTED.sign(simple_signing(REF, DIGEST))]
    enforce(_match(_sigstore(Identity(), STRANGER)), REF, DIGEST, Source(sigs[:1]))
    enforce(_match(_sigstore()), REF, DIGEST, Source(sigs))


def test_insecure_accept_anything_fetches_nothing():
    src = Source(None)
    enforce(_match(Requirement("insecureAcceptAnything")), REF, DIGEST, src)
    assert src.requests == []


@pytest.mark.parametrize(
    "reqs, reason",
    [
        ((Requirement("reject"),), "type reject"),
        ((Requirement("insecureAcceptAnything"), Requirement("signedBy")), "GPG"),
    ],
)
def test_refusing_requirements_ask_nothing(reqs, reason):
    src = Source([TRUSTED.sign(simple_signing(REF, DIGEST))])
    assert reason in _refused(_match(*reqs), src)
    assert src.requests == []


def test_every_requirement_must_hold():
    src = Source([TRUSTED.sign(simple_signing(REF, DIGEST))])
    assert "not signed by a trusted key (key0.pub)" in _refused(
        _match(_sigstore(), _sigstore(Identity(), STRANGER)), src
    )


def _tampered(sig: Signature, *, payload: bytes | None = None, signature: str | None = None) -> Signature:
    return Signature(payload if payload is not None else sig.payload, signature or sig.signature)


GOOD = TRUSTED.sign(simple_signing(REF, DIGEST))
FLIPPED = bytearray(base64.b64decode(GOOD.signature))
FLIPPED[-1] ^= 1


@pytest.mark.parametrize(
    "signatures, reason",
    [
        ([], "the image has none"),
        (None, "the image has none (no tag sha256-" + "1" * 64 + ".sig)"),
        ([STRANGER.sign(simple_signing(REF, DIGEST))], "not signed by a trusted key (key0.pub)"),
        ([_tampered(GOOD, payload=GOOD.payload.replace(b"1111", b"1112", 1))], "not signed by a trusted key"),
        ([_tampered(GOOD, signature=base64.b64encode(bytes(FLIPPED)).decode())], "not signed by a trusted key"),
        ([_tampered(GOOD, signature="not base64!")], "not signed by a trusted key"),
        ([TRUSTED.sign(simple_signing(REF, OTHER))], f"signs manifest {OTHER}, the image is {DIGEST}"),
        (
            [TRUSTED.sign(simple_signing("reg.example/fleet/app:2", DIGEST))],
            "signed identity 'reg.example/fleet/app:2' does not match reg.example/fleet/app:1",
        ),
        ([TRUSTED.sign(b'{"critical": {}}')], "signed payload is malformed"),
        (
            [STRANGER.sign(simple_signing(REF, DIGEST)), TRUSTED.sign(simple_signing(REF, OTHER))],
            "signature 1: not signed by a trusted key (key0.pub); signature 2: signs manifest",
        ),
    ],
)
def test_refusals_name_their_reason(signatures, reason):
    assert reason in _refused(_match(_sigstore()), Source(signatures))


def test_a_malformed_signature_manifest_is_a_refusal():
    assert "signature manifest sha256-" in _refused(_match(_sigstore()), Source(None, manifest={"layers": "x"}))


def test_other_layers_of_the_sig_manifest_are_ignored():
    doc = {
        "layers": [
            {"mediaType": "application/vnd.dsse.envelope.v1+json", "digest": "x"},
            {
                "mediaType": "application/vnd.dev.cosign.simplesigning.v1+json",
                "size": 3,
                "digest": "sha256:" + "a" * 64,
                "annotations": {SIGNATURE_ANNOTATION: "QUJD"},
            },
        ]
    }
    assert [(s.digest, s.signature) for s in parse_signature_manifest(doc)] == [("sha256:" + "a" * 64, "QUJD")]


@pytest.mark.parametrize(
    "layer, reason",
    [
        ({"digest": "sha256:x", "size": 1}, "invalid digest"),
        ({"digest": "sha256:" + "a" * 64, "size": 10**9}, "payload size"),
        ({"digest": "sha256:" + "a" * 64, "size": True}, "payload size"),
        ({"digest": "sha256:" + "a" * 64, "size": 1}, "annotation"),
        ({"digest": "sha256:" + "a" * 64, "size": 1, "annotations": {SIGNATURE_ANNOTATION: "A" * 5000}}, "annotation"),
    ],
)
def test_malformed_signature_layers(layer, reason):
    with pytest.raises(ValueError, match=reason):
        parse_signature_manifest(
            {"layers": [{"mediaType": "application/vnd.dev.cosign.simplesigning.v1+json", **layer}]}
        )


def test_payload_parsing_is_strict():
    assert parse_payload(simple_signing(REF, DIGEST, optional={"creator": "ci"})).manifest_digest == DIGEST
    good = json.loads(simple_signing(REF, DIGEST))
    for bad in [
        {**good, "extra": 1},
        {"optional": None},
        {**good, "critical": {**good["critical"], "type": "atomic container signature"}},
        {**good, "critical": {**good["critical"], "extra": 1}},
        {**good, "critical": {**good["critical"], "identity": {"docker-reference": 1}}},
        {**good, "critical": {**good["critical"], "image": {"docker-manifest-digest": DIGEST, "x": 1}}},
        {**good, "optional": []},
    ]:
        with pytest.raises(ValueError):
            parse_payload(json.dumps(bad).encode())


def test_signature_tag():
    assert signature_tag(DIGEST) == "sha256-" + "1" * 64 + ".sig"
    with pytest.raises(ValueError):
        signature_tag("md5:abc")


def test_the_helper_stores_signatures_as_cosign_does():
    body, blobs = signature_manifest("h", "r", [GOOD])
    doc = json.loads(body)
    layer = doc["layers"][0]
    assert layer["mediaType"] == "application/vnd.dev.cosign.simplesigning.v1+json"
    assert layer["digest"] == "sha256:" + hashlib.sha256(GOOD.payload).hexdigest()
    assert layer["annotations"] == {"dev.cosignproject.cosign/signature": GOOD.signature}


def _pem(der: bytes) -> bytes:
    body = base64.encodebytes(der).decode()
    return f"-----BEGIN PUBLIC KEY-----\n{body}-----END PUBLIC KEY-----\n".encode()


def _other_keys() -> dict[str, bytes]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

    spki = (serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    p256 = ec.generate_private_key(ec.SECP256R1()).public_key()
    der = p256.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    point = p256.public_bytes(serialization.Encoding.X962, serialization.PublicFormat.CompressedPoint)
    return {
        "p256": TRUSTED.public_pem,
        "p256-compressed": _pem(bytes.fromhex("3039301306072a8648ce3d020106082a8648ce3d030107032200") + point),
        "p384": CosignKey("p384").public_pem,
        "rsa": rsa.generate_private_key(public_exponent=65537, key_size=1024).public_key().public_bytes(*spki),
        "ed25519": ed25519.Ed25519PrivateKey.generate().public_key().public_bytes(*spki),
        "garbage": b"-----BEGIN PUBLIC KEY-----\nnot base64!\n-----END PUBLIC KEY-----\n",
        "private": b"-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n",
        "empty": b"",
        "p256-rewrapped": _pem(der),  # other line lengths than the library writes
    }


@pytest.mark.parametrize(
    "name, ok",
    [
        ("p256", True),
        ("p256-compressed", True),
        ("p256-rewrapped", True),
        ("p384", False),
        ("rsa", False),
        ("ed25519", False),
        ("garbage", False),
        ("private", False),
        ("empty", False),
    ],
)
def test_key_format_check_agrees_with_the_library(name, ok):
    """check_p256_pem (at start, no cryptography) accepts exactly what public_key (at verification) accepts."""
    from edgelet.trust.cosign import check_p256_pem
    from edgelet.trust.crypto import p256_public_key as public_key

    pem = _other_keys()[name]
    for check in (check_p256_pem, public_key):
        if ok:
            check(pem)
        else:
            with pytest.raises(ValueError):
                check(pem)


def test_a_point_off_the_curve_is_refused_at_verification_with_the_key_named():
    bad = bytearray(base64.b64decode(b"".join(TRUSTED.public_pem.splitlines()[1:-1])))
    bad[-1] ^= 1  # still the shape of a P-256 key, no longer a point on the curve
    from edgelet.trust.cosign import check_p256_pem

    check_p256_pem(_pem(bytes(bad)))
    req = Requirement("sigstoreSigned", (PublicKey("f", "bad.pub", _pem(bytes(bad))),))
    assert "no usable key (bad.pub)" in _refused(_match(req), Source([GOOD]))


def test_loading_a_policy_does_not_load_cryptography(tmp_path):
    """The package (about 10 MB of RSS) is loaded by the first verification, not by the policy at start."""
    import subprocess
    import sys

    (tmp_path / "k.pub").write_bytes(TRUSTED.public_pem)
    (tmp_path / "p.json").write_text(
        json.dumps({"default": [{"type": "sigstoreSigned", "keyPath": str(tmp_path / "k.pub")}]})
    )
    code = (
        "import sys; from edgelet.trust.policy import load_policy; import edgelet.images.puller; "
        f"load_policy({str(tmp_path / 'p.json')!r}); print(sorted(m for m in sys.modules if 'cryptography' in m))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr
