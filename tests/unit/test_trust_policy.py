"""containers-policy.json as podman reads it: scope precedence, signedIdentity, strict parsing (tables, no I/O)."""

from __future__ import annotations

import base64
import json

import pytest

from edgelet.images.reference import parse_reference
from edgelet.trust.errors import PolicyError
from edgelet.trust.policy import (
    Identity,
    evaluate,
    identity_matches,
    parse_policy,
    refusal,
    scope_candidates,
    split_reference,
)

PEM = b"-----BEGIN PUBLIC KEY-----\nMFkw...\n-----END PUBLIC KEY-----\n"


def _policy(docker: dict, default: str = "reject", **extra):
    doc = {
        "default": [{"type": default}],
        "transports": {
            "docker": {
                scope: [{"type": t} if t != "sigstoreSigned" else {"type": t, "keyPath": "/k.pub"}]
                for scope, t in docker.items()
            },
            **extra,
        },
    }
    return parse_policy(json.dumps(doc), "/etc/containers/policy.json", read_key=lambda p: PEM)


SCOPES = {
    "reg.example:5000/fleet/app:1": "sigstoreSigned",  # exact tag
    "reg.example:5000/fleet/app@sha256:" + "a" * 64: "insecureAcceptAnything",  # exact digest
    "reg.example:5000/fleet/app": "reject",  # repository
    "reg.example:5000/fleet": "sigstoreSigned",  # namespace
    "reg.example:5000": "insecureAcceptAnything",  # host with port
    "*.corp.example": "sigstoreSigned",
    "*.example": "reject",
    "docker.io/library": "insecureAcceptAnything",
}


@pytest.mark.parametrize(
    "reference, scope",
    [
        ("reg.example:5000/fleet/app:1", "reg.example:5000/fleet/app:1"),
        ("reg.example:5000/fleet/app:2", "reg.example:5000/fleet/app"),
        ("reg.example:5000/fleet/app@sha256:" + "a" * 64, "reg.example:5000/fleet/app@sha256:" + "a" * 64),
        ("reg.example:5000/fleet/app@sha256:" + "b" * 64, "reg.example:5000/fleet/app"),
        ("reg.example:5000/fleet/other:1", "reg.example:5000/fleet"),
        ("reg.example:5000/fleet/deep/er:1", "reg.example:5000/fleet"),
        ("reg.example:5000/elsewhere:1", "reg.example:5000"),
        ("reg.example/fleet/app:1", "*.example"),  # no port: another host; the wildcard of its domain
        ("a.b.corp.example/x:1", "*.corp.example"),
        ("corp.example/x:1", "*.example"),  # *.corp.example does not match corp.example itself
        ("busybox", "docker.io/library"),  # short names are normalised before the lookup
        ("index.docker.io/library/busybox:1", "docker.io/library"),
        ("quay.io/x/y:1", None),  # no scope: the policy's default
    ],
)
def test_the_most_specific_scope_wins(reference, scope):
    match = evaluate(_policy(SCOPES), reference)
    if scope is None:
        assert match.source == "default" and match.name == "default" and match.requirements[0].type == "reject"
    else:
        assert match.scope == scope and match.requirements[0].type == SCOPES[scope]


def test_the_transport_default_comes_before_the_global_default():
    match = evaluate(_policy({"": "insecureAcceptAnything"}), "quay.io/x/y:1")
    assert match.source == "docker" and match.scope == "" and match.requirements[0].type == "insecureAcceptAnything"


def test_scope_candidates_follow_containers_image():
    assert scope_candidates(split_reference("a.b.example.com:5000/ns/repo:1")) == [
        "a.b.example.com:5000/ns/repo:1",
        "a.b.example.com:5000/ns/repo",
        "a.b.example.com:5000/ns",
        "a.b.example.com:5000",
        "*.b.example.com",
        "*.example.com",
        "*.com",
    ]


@pytest.mark.parametrize(
    "text",
    [
        "busybox",
        "busybox:1",
        "library/busybox@sha256:" + "c" * 64,
        "quay.io/a/b:2",
        "localhost/app",
        "localhost:5000/app:x",
        "127.0.0.1:5000/a/b/c:1",
        "index.docker.io/x/y",
        "Upper.example/app:1",
    ],
)
def test_split_reference_normalises_as_the_puller_does(text):
    assert str(split_reference(text)) == str(parse_reference(text, default_tag=False))


@pytest.mark.parametrize("text", ["", "app/UPPER", "a/b:", "a@sha256:zz", "a:b:c/d", "-a/b", " busybox"])
def test_split_reference_refuses_non_references(text):
    with pytest.raises(ValueError):
        split_reference(text)


H = "reg.example/fleet/app"
D = "sha256:" + "d" * 64


@pytest.mark.parametrize(
    "identity, image, signed, ok",
    [
        # matchRepoDigestOrExact (the default): by tag, exactly that tag; by digest, any of the repository
        (Identity(), f"{H}:1", f"{H}:1", True),
        (Identity(), f"{H}:1", f"{H}:2", False),
        (Identity(), f"{H}:1", H, False),  # cosign's repository-only identity needs matchRepository
        (Identity(), f"{H}@{D}", H, True),
        (Identity(), f"{H}@{D}", f"{H}:7", True),
        (Identity(), f"{H}@{D}", "reg.example/fleet/other", False),
        (Identity(), f"{H}:1@{D}", H, True),
        (Identity("matchExact"), f"{H}:1", f"{H}:1", True),
        (Identity("matchExact"), f"{H}@{D}", f"{H}:1", False),
        (Identity("matchRepository"), f"{H}:1", H, True),
        (Identity("matchRepository"), f"{H}:1", f"{H}:9", True),
        (Identity("matchRepository"), f"{H}:1", "evil.example/fleet/app", False),
        (Identity("exactReference", f"{H}:stable"), f"{H}:1", f"{H}:stable", True),
        (Identity("exactReference", f"{H}:stable"), f"{H}:1", f"{H}:1", False),
        (Identity("exactRepository", "docker.io/library/busybox"), f"{H}:1", "busybox", True),
        (Identity("exactRepository", "docker.io/library/busybox"), f"{H}:1", H, False),
        (Identity(), f"{H}:1", "not a reference!", False),
    ],
)
def test_signed_identity(identity, image, signed, ok):
    assert identity_matches(identity, image, signed) is ok


def test_refusal_of_reject_and_gpg():
    assert "type reject" in refusal(evaluate(_policy({}), "x.io/a:1"))
    gpg = parse_policy(json.dumps({"default": [{"type": "signedBy", "keyType": "GPGKeys", "keyPath": "/k"}]}), "p")
    assert "signedBy" in refusal(evaluate(gpg, "x.io/a:1"))
    assert refusal(evaluate(_policy({}, default="insecureAcceptAnything"), "x.io/a:1")) is None


def test_key_sources_and_identity_are_parsed():
    key_data = base64.b64encode(PEM).decode()
    p = parse_policy(
        json.dumps(
            {
                "default": [
                    {
                        "type": "sigstoreSigned",
                        "keyDatas": [key_data, key_data],
                        "signedIdentity": {"type": "exactRepository", "dockerRepository": "busybox"},
                    }
                ]
            }
        ),
        "p",
    )
    req = p.default[0]
    assert [k.pem for k in req.keys] == [PEM, PEM] and req.keys[1].field == "default[0].keyDatas[1]"
    assert req.identity == Identity("exactRepository", "docker.io/library/busybox")


def test_other_transports_are_parsed_but_their_key_files_never_read():
    read = []
    parse_policy(
        json.dumps(
            {
                "default": [{"type": "reject"}],
                "transports": {
                    "docker-daemon": {"": [{"type": "insecureAcceptAnything"}]},
                    "atomic": {"x": [{"type": "sigstoreSigned", "keyPath": "/nowhere.pub"}]},
                },
            }
        ),
        "p",
        read_key=lambda path: read.append(path) or PEM,
    )
    assert read == []


S = {"type": "sigstoreSigned", "keyPath": "/k.pub"}


@pytest.mark.parametrize(
    "doc, field, reason",
    [
        ("{", "", "not valid JSON"),
        ("[]", "", "must be a JSON object"),
        ({}, "default", "missing"),
        ({"default": []}, "default", "non-empty list"),
        ({"default": [{"type": "reject"}], "extra": 1}, "extra", "unknown field"),
        ({"default": [{"type": "acceptAll"}]}, "default[0].type", "unknown requirement type 'acceptAll'"),
        ({"default": [{}]}, "default[0].type", "missing"),
        ({"default": [{"type": "reject", "keyPath": "/k"}]}, "default[0].keyPath", "unknown field"),
        ({"default": [{"type": "sigstoreSigned"}]}, "default[0]", "exactly one of keyPath"),
        ({"default": [{**S, "keyData": "x"}]}, "default[0]", "found keyPath, keyData"),
        ({"default": [{"type": "sigstoreSigned", "fulcio": {}}]}, "default[0].fulcio", "keyless"),
        ({"default": [{**S, "rekorPublicKeyPath": "/r"}]}, "default[0].rekorPublicKeyPath", "Rekor"),
        ({"default": [{"type": "sigstoreSigned", "keyData": "%%%"}]}, "default[0].keyData", "not base64"),
        ({"default": [{"type": "sigstoreSigned", "keyPaths": []}]}, "default[0].keyPaths", "non-empty list"),
        (
            {"default": [{**S, "signedIdentity": {"type": "remapIdentity"}}]},
            "default[0].signedIdentity.type",
            "remapIdentity",
        ),
        (
            {"default": [{**S, "signedIdentity": {"type": "matchAny"}}]},
            "default[0].signedIdentity.type",
            "unknown signedIdentity type",
        ),
        (
            {"default": [{**S, "signedIdentity": {"type": "exactReference", "dockerReference": "x.io/a"}}]},
            "default[0].signedIdentity.dockerReference",
            "tag or digest",
        ),
        (
            {"default": [{**S, "signedIdentity": {"type": "matchExact", "dockerReference": "x.io/a:1"}}]},
            "default[0].signedIdentity.dockerReference",
            "unknown field",
        ),
        ({"default": [{"type": "reject"}], "transports": []}, "transports", "JSON object"),
        (
            {"default": [{"type": "reject"}], "transports": {"docker": {"https://x.io/a": [S]}}},
            'transports.docker["https://x.io/a"]',
            "not a URL",
        ),
        (
            {"default": [{"type": "reject"}], "transports": {"docker": {"library/busybox": [S]}}},
            'transports.docker["library/busybox"]',
            "fully expanded: write 'docker.io/library/busybox'",
        ),
        (
            {"default": [{"type": "reject"}], "transports": {"docker": {"*.x.io/a": [S]}}},
            'transports.docker["*.x.io/a"]',
            "wildcard",
        ),
        (
            {"default": [{"type": "reject"}], "transports": {"docker": {"x.io": [{"type": "nope"}]}}},
            'transports.docker["x.io"][0].type',
            "unknown requirement type 'nope'",
        ),
        ('{"default": [{"type": "reject"}], "default": [{"type": "reject"}]}', "default", "duplicated field"),
    ],
)
def test_malformed_policies_name_the_file_and_field(doc, field, reason):
    text = doc if isinstance(doc, str) else json.dumps(doc)
    with pytest.raises(PolicyError) as exc:
        parse_policy(text, "/etc/containers/policy.json", read_key=lambda p: PEM)
    assert exc.value.path == "/etc/containers/policy.json" and exc.value.field == field
    assert reason in exc.value.reason, exc.value.reason
    assert str(exc.value).startswith("signature policy /etc/containers/policy.json")


def test_an_unreadable_key_file_names_the_field():
    def missing(path: str) -> bytes:
        raise FileNotFoundError(2, "No such file or directory", path)

    with pytest.raises(PolicyError, match=r'transports.docker\["x.io"\]\[0\].keyPath: key file /k.pub: No such file'):
        parse_policy(
            json.dumps({"default": [{"type": "reject"}], "transports": {"docker": {"x.io": [S]}}}),
            "p",
            read_key=missing,
        )
