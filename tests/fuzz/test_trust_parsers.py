"""Fuzzing the signature-policy and cosign parsers: whatever a policy file, a `.sig` manifest or a signed payload
holds, the outcome is a value or edgelet's own error naming the problem (PolicyError, ValueError from the pure
parsers, ImageSignatureError from enforce), never a crash. `make fuzz` runs EDGELET_FUZZ_EXAMPLES of each."""

from __future__ import annotations

import json
import os

import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings

from edgelet.testing.cosign import CosignKey, Signature, signature_manifest, simple_signing
from edgelet.trust.cosign import enforce, parse_payload, parse_signature_manifest
from edgelet.trust.errors import ImageSignatureError, PolicyError
from edgelet.trust.policy import Match, PublicKey, Requirement, evaluate, parse_policy, split_reference

EXAMPLES = int(os.environ.get("EDGELET_FUZZ_EXAMPLES", "150"))
FUZZ = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
PEM = b"-----BEGIN PUBLIC KEY-----\n-----END PUBLIC KEY-----\n"

_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=12))
_json = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)),
    max_leaves=20,
)
_words = st.sampled_from(
    [
        "default",
        "transports",
        "docker",
        "type",
        "reject",
        "insecureAcceptAnything",
        "sigstoreSigned",
        "signedBy",
        "keyPath",
        "keyPaths",
        "keyData",
        "keyDatas",
        "fulcio",
        "signedIdentity",
        "matchRepository",
        "matchExact",
        "exactReference",
        "dockerReference",
        "exactRepository",
        "dockerRepository",
        "remapIdentity",
        "",
        "x.io",
        "x.io/a",
        "*.io",
        "library/busybox",
        "UPPER",
        "a:b@c",
        "TUZrdw==",
    ]
)
_policyish = st.recursive(
    st.one_of(_words, _scalars),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_words, inner, max_size=4)),
    max_leaves=25,
)


def _check_policy(text: str | bytes) -> None:
    try:
        policy = parse_policy(text, "/p.json", read_key=lambda p: PEM)
    except PolicyError as exc:
        assert exc.path == "/p.json" and str(exc).startswith("signature policy /p.json")
        return
    for ref in ("x.io/a:1", "busybox", "x.io/a@sha256:" + "0" * 64):
        evaluate(policy, ref)


@FUZZ
@given(_policyish)
def test_policy_documents_parse_or_name_the_field(doc):
    _check_policy(json.dumps({"default": doc}) if not isinstance(doc, dict) else json.dumps(doc))
    _check_policy(json.dumps({"default": [{"type": "reject"}], "transports": {"docker": doc}}))


@FUZZ
@given(st.binary(max_size=300))
def test_policy_bytes_never_crash(data):
    _check_policy(data)


@FUZZ
@given(st.text(max_size=80))
def test_references_split_or_refuse(text):
    try:
        split_reference(text)
    except ValueError:
        pass


@FUZZ
@given(_json)
def test_signature_manifests_parse_or_refuse(doc):
    for candidate in (doc, {"layers": doc}, {"layers": [doc]}):
        try:
            parse_signature_manifest(candidate)
        except ValueError:
            pass


GOOD = simple_signing("x.io/a:1", "sha256:" + "0" * 64)


@FUZZ
@given(
    st.one_of(
        st.binary(max_size=400),
        _json.map(lambda d: json.dumps(d).encode()),
        st.integers(0, len(GOOD) - 1).flatmap(
            lambda i: st.integers(0, 255).map(lambda b: GOOD[:i] + bytes([b]) + GOOD[i + 1 :])
        ),
    )
)
def test_payloads_parse_or_refuse(data):
    try:
        parse_payload(data)
    except ValueError:
        pass


KEY = CosignKey()


class _Source:
    def __init__(self, doc, blobs):
        self.doc, self.blobs = doc, blobs

    def manifest(self, tag):
        return self.doc

    def blob(self, digest, size):
        return self.blobs.get(digest, b"")


@FUZZ
@given(st.binary(max_size=200), st.text(max_size=100))
def test_enforce_over_signed_garbage_refuses_with_a_reason(payload, signature):
    """A trusted key signing garbage, or garbage as the signature: refused, never a crash."""
    req = Requirement("sigstoreSigned", (PublicKey("f", "k.pub", KEY.public_pem),))
    for sig in (KEY.sign(payload), Signature(payload, signature)):
        body, blobs = signature_manifest("x.io", "a", [sig])
        try:
            enforce(Match("x.io", (req,)), "x.io/a:1", "sha256:" + "0" * 64, _Source(json.loads(body), blobs))
        except ImageSignatureError as exc:
            assert exc.reason


_component = st.from_regex(r"[a-z0-9]{1,5}(?:[._-][a-z0-9]{1,4})?", fullmatch=True)
_host = st.one_of(
    st.just(""),
    st.sampled_from(["localhost/", "x.io/", "127.0.0.1:5000/", "index.docker.io/", "docker.io/", "[::1]:80/", "A.b/"]),
)


@FUZZ
@given(
    _host,
    st.lists(_component, min_size=1, max_size=3),
    st.one_of(st.none(), st.from_regex(r"[\w][\w.-]{0,10}", fullmatch=True)),
    st.one_of(st.none(), st.just("sha256:" + "e" * 64)),
)
def test_the_policy_reads_references_as_the_puller_does(host, path, tag, digest):
    from edgelet.images.errors import InvalidReference
    from edgelet.images.reference import parse_reference

    text = host + "/".join(path) + (f":{tag}" if tag else "") + (f"@{digest}" if digest else "")
    try:
        want = str(parse_reference(text, default_tag=False))
    except InvalidReference:
        return
    assert str(split_reference(text)) == want
    assert str(split_reference(str(parse_reference(text)))) == str(parse_reference(text))
