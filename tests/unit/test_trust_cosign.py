"""cosign signature checks over a SignatureSource in memory (the registry is the lowest boundary; the real one is
in tests/integration/test_images_cosign.py): payload and manifest parsing, each reason for a refusal."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest

from edgelet.trust.cosign import (SIGNATURE_ANNOTATION, enforce, parse_payload, parse_signature_manifest,
                                  signature_tag)
from edgelet.trust.errors import ImageSignatureError
from edgelet.trust.policy import Identity, Match, PublicKey, Requirement
from edgelet.testing.cosign import CosignKey, Signature, signature_manifest, simple_signing

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
    return Requirement("sigstoreSigned", tuple(PublicKey("f", f"key{i}.pub", k.public_pem)
                                               for i, k in enumerate(keys or (TRUSTED,))), identity)


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


@pytest.mark.parametrize("reqs, reason", [
    ((Requirement("reject"),), "type reject"),
    ((Requirement("insecureAcceptAnything"), Requirement("signedBy")), "GPG"),
])
def test_refusing_requirements_ask_nothing(reqs, reason):
    src = Source([TRUSTED.sign(simple_signing(REF, DIGEST))])
    assert reason in _refused(_match(*reqs), src)
    assert src.requests == []


def test_every_requirement_must_hold():
    src = Source([TRUSTED.sign(simple_signing(REF, DIGEST))])
    assert "not signed by a trusted key (key0.pub)" in _refused(
        _match(_sigstore(), _sigstore(Identity(), STRANGER)), src)


def _tampered(sig: Signature, *, payload: bytes | None = None, signature: str | None = None) -> Signature:
    return Signature(payload if payload is not None else sig.payload, signature or sig.signature)


GOOD = TRUSTED.sign(simple_signing(REF, DIGEST))
FLIPPED = bytearray(base64.b64decode(GOOD.signature))
FLIPPED[-1] ^= 1


@pytest.mark.parametrize("signatures, reason", [
    ([], "the image has none"),
    (None, "the image has none (no tag sha256-" + "1" * 64 + ".sig)"),
    ([STRANGER.sign(simple_signing(REF, DIGEST))], "not signed by a trusted key (key0.pub)"),
    ([_tampered(GOOD, payload=GOOD.payload.replace(b"1111", b"1112", 1))], "not signed by a trusted key"),
    ([_tampered(GOOD, signature=base64.b64encode(bytes(FLIPPED)).decode())], "not signed by a trusted key"),
    ([_tampered(GOOD, signature="not base64!")], "not signed by a trusted key"),
    ([TRUSTED.sign(simple_signing(REF, OTHER))], f"signs manifest {OTHER}, the image is {DIGEST}"),
    ([TRUSTED.sign(simple_signing("reg.example/fleet/app:2", DIGEST))],
     "signed identity 'reg.example/fleet/app:2' does not match reg.example/fleet/app:1"),
    ([TRUSTED.sign(b'{"critical": {}}')], "signed payload is malformed"),
    ([STRANGER.sign(simple_signing(REF, DIGEST)), TRUSTED.sign(simple_signing(REF, OTHER))],
     "signature 1: not signed by a trusted key (key0.pub); signature 2: signs manifest"),
])
def test_refusals_name_their_reason(signatures, reason):
    assert reason in _refused(_match(_sigstore()), Source(signatures))


def test_a_malformed_signature_manifest_is_a_refusal():
    assert "signature manifest sha256-" in _refused(_match(_sigstore()), Source(None, manifest={"layers": "x"}))


def test_other_layers_of_the_sig_manifest_are_ignored():
    doc = {"layers": [{"mediaType": "application/vnd.dsse.envelope.v1+json", "digest": "x"},
                      {"mediaType": "application/vnd.dev.cosign.simplesigning.v1+json", "size": 3,
                       "digest": "sha256:" + "a" * 64, "annotations": {SIGNATURE_ANNOTATION: "QUJD"}}]}
    assert [(s.digest, s.signature) for s in parse_signature_manifest(doc)] == [("sha256:" + "a" * 64, "QUJD")]


@pytest.mark.parametrize("layer, reason", [
    ({"digest": "sha256:x", "size": 1}, "invalid digest"),
    ({"digest": "sha256:" + "a" * 64, "size": 10 ** 9}, "payload size"),
    ({"digest": "sha256:" + "a" * 64, "size": True}, "payload size"),
    ({"digest": "sha256:" + "a" * 64, "size": 1}, "annotation"),
    ({"digest": "sha256:" + "a" * 64, "size": 1, "annotations": {SIGNATURE_ANNOTATION: "A" * 5000}}, "annotation"),
])
def test_malformed_signature_layers(layer, reason):
    with pytest.raises(ValueError, match=reason):
        parse_signature_manifest({"layers": [{"mediaType": "application/vnd.dev.cosign.simplesigning.v1+json",
                                              **layer}]})


def test_payload_parsing_is_strict():
    assert parse_payload(simple_signing(REF, DIGEST, optional={"creator": "ci"})).manifest_digest == DIGEST
    good = json.loads(simple_signing(REF, DIGEST))
    for bad in [{**good, "extra": 1}, {"optional": None},
                {**good, "critical": {**good["critical"], "type": "atomic container signature"}},
                {**good, "critical": {**good["critical"], "extra": 1}},
                {**good, "critical": {**good["critical"], "identity": {"docker-reference": 1}}},
                {**good, "critical": {**good["critical"], "image": {"docker-manifest-digest": DIGEST, "x": 1}}},
                {**good, "optional": []}]:
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
