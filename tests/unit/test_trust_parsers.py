"""The trust parsers and decisions without the tools: fuzzed key and signature parsers (malformed input is an
error, never a crash), the replay decision, SSH times and patterns, and no cryptography import by default."""

from __future__ import annotations

import base64
import re
import struct
import subprocess
import sys
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from edgelet.errors import EdgeletError
from edgelet.trust.errors import KeyFileError, SignatureRefused
from edgelet.trust.keys import TrustedKeys, match_pattern_list, parse_key_text, parse_ssh_time
from edgelet.trust.message import Message
from edgelet.trust.verify import body_version, check_signature
from edgelet.trust.versions import replay_problem

# A real minisign signature and an SSH one (made by the tools), as seeds the fuzzer mutates.
MINISIG = (
    "untrusted comment: signature from minisign secret key\n"
    "RUS2YrGlxfgIhn4Lev956Xnk8/IPQtOAp0m8O+cWI3SxqhFAcrHq1oTCvu+X3q8eSDQ+dz3utZ50O9OsoU602IemNvZ1pImPqwQ=\n"
    "trusted comment: edgelet-version: 42\n"
    "kLnXBhpFw6qRTgnZmRqkrouV0Zl5YtPaq8A+UPyTOm71xb1YKlz/+dyvJtoM/3d6HYzcZBbVhv+mh+uxGskaBg==\n"
)
PUBKEY = "untrusted comment: minisign public key 8608F8C5A5B162B6\nRWS2YrGlxfgIhgFvLt4XW8xIiYjyiC/GtUczpIotxNYGoKihuxkZiu6g\n"
SSH_LINE = "ops@x ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKK8gRRUkEnVHqOlke9N694pakkyWVpXtr5yU4FSxzs8\n"


def _ssh_string(b: bytes) -> bytes:
    return struct.pack(">I", len(b)) + b


def _sshsig(namespace: bytes = b"edgelet-manifest", hash_alg: bytes = b"sha512") -> str:
    pub = _ssh_string(b"ssh-ed25519") + _ssh_string(b"\x01" * 32)
    sig = _ssh_string(b"ssh-ed25519") + _ssh_string(b"\x02" * 64)
    blob = (
        b"SSHSIG"
        + struct.pack(">I", 1)
        + _ssh_string(pub)
        + _ssh_string(namespace)
        + _ssh_string(b"")
        + _ssh_string(hash_alg)
        + _ssh_string(sig)
    )
    return "-----BEGIN SSH SIGNATURE-----\n" + base64.b64encode(blob).decode() + "\n-----END SSH SIGNATURE-----\n"


KEYS, _ = parse_key_text(PUBKEY, "k"), None
TRUSTED = TrustedKeys(ed25519=tuple(KEYS[0]), ssh=tuple(parse_key_text(SSH_LINE, "s")[1]))


def _check(sig: bytes) -> None:
    try:
        check_signature(Message(data=b"body"), sig, TRUSTED, namespace="edgelet-manifest", now=1.8e9, name="f.sig")
    except SignatureRefused as exc:
        assert exc.reason and str(exc)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_fuzz_any_bytes_as_a_signature(data: bytes) -> None:
    _check(data)


def _mutations(seed: str) -> st.SearchStrategy[bytes]:
    raw = seed.encode()
    return st.tuples(st.integers(0, len(raw) - 1), st.integers(0, 255), st.integers(0, len(raw))).map(
        lambda t: raw[: t[0]] + bytes([t[1]]) + raw[t[0] + 1 : t[2] or None]
    )


@settings(max_examples=400, deadline=None)
@given(st.one_of(_mutations(MINISIG), _mutations(_sshsig())))
def test_fuzz_mutated_real_signatures(data: bytes) -> None:
    _check(data)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=300),
        _mutations(PUBKEY).map(lambda b: b.decode("latin-1")),
        _mutations(SSH_LINE).map(lambda b: b.decode("latin-1")),
        st.builds(lambda o: f"p {o} {SSH_LINE.split(' ', 1)[1]}", st.text(max_size=60)),
    )
)
def test_fuzz_key_files(text: str) -> None:
    try:
        parse_key_text(text, "keys")
    except KeyFileError as exc:
        assert isinstance(exc, EdgeletError) and exc.line is not None and "keys:" in str(exc)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.binary(max_size=40),
            st.builds(_ssh_string, st.binary(max_size=40)),
            st.sampled_from(
                [
                    _ssh_string(b"ssh-ed25519"),
                    _ssh_string(b"sha512"),
                    struct.pack(">I", 1),
                    struct.pack(">I", 0xFFFFFFFF),
                ]
            ),
        ),
        max_size=8,
    )
)
def test_fuzz_sshsig_structures(parts: list[bytes]) -> None:
    """Armored blobs that start like SSHSIG and go on with plausible or absurd fields reach every parser branch."""
    blob = b"SSHSIG" + b"".join(parts)
    _check(
        (
            "-----BEGIN SSH SIGNATURE-----\n" + base64.b64encode(blob).decode() + "\n-----END SSH SIGNATURE-----\n"
        ).encode()
    )


@pytest.mark.parametrize(
    "sig, reason",
    [
        (b"", "malformed"),
        (b"\xff\xfe", "malformed"),
        (MINISIG.replace("RUS2", "RXS2").encode(), "malformed"),
        (_sshsig().encode(), "unknown key"),
        (_sshsig(hash_alg=b"md5").encode(), "malformed"),
        (b"x" * 70000, "malformed"),
    ],
)
def test_malformed_signatures_have_a_reason(sig: bytes, reason: str) -> None:
    with pytest.raises(SignatureRefused) as err:
        check_signature(Message(data=b"body"), sig, TRUSTED, namespace="edgelet-manifest", now=1.8e9)
    assert err.value.reason == reason


def test_no_signature_is_missing() -> None:
    with pytest.raises(SignatureRefused, match=r"\(missing\).*\(a.yaml.minisig\)"):
        check_signature(
            Message(data=b"body"), None, TRUSTED, namespace="edgelet-manifest", now=0, name="a.yaml.minisig"
        )


@pytest.mark.parametrize(
    "recorded, version, digest, same_body_only, want",
    [
        (None, 1, "d", True, None),
        ({"version": 5, "digest": "d"}, 1, "d", True, None),  # the accepted body itself, read again
        ({"version": 5, "digest": "d"}, 6, "e", True, None),
        ({"version": 5, "digest": "d"}, 4, "e", True, "version 4 is older than version 5"),
        ({"version": 5, "digest": "d"}, 5, "e", True, "version 5 was accepted before for another body"),
        ({"version": 5, "digest": "d"}, 5, "e", False, None),
        ({"version": 5, "digest": "d"}, None, "e", False, "carries no version"),
        ({"version": None, "digest": "d"}, None, "e", True, None),  # never versioned: no order to keep
        ("garbage", 1, "e", True, None),
        # Tombstones: a deleted manifest or pod refuses its own body and anything not newer, for either key kind.
        ({"version": 5, "digest": "d", "deleted": True}, 5, "d", True, "version 5 was deleted"),
        ({"version": 5, "digest": "d", "deleted": True}, 5, "d", False, "version 5 was deleted"),
        ({"version": 5, "digest": "d", "deleted": True}, 4, "e", False, "version 4 was deleted (at version 5)"),
        ({"version": 5, "digest": "d", "deleted": True}, None, "e", False, "carries no version"),
        ({"version": 5, "digest": "d", "deleted": True}, 6, "e", True, None),
        ({"version": None, "digest": "d", "deleted": True}, None, "d", True, "this body was deleted"),
        ({"version": None, "digest": "d", "deleted": True}, None, "e", True, None),  # unversioned: only that body
    ],
)
def test_replay_problem(recorded, version, digest, same_body_only, want) -> None:
    got = replay_problem(recorded, version, digest, same_body_only=same_body_only)
    assert (got is None and want is None) or (want is not None and got is not None and want in got)


@pytest.mark.parametrize(
    "text, want",
    [
        ("20270101Z", 1798761600.0),
        ("202701011230Z", 1798806600.0),
        ("20270101123015Z", 1798806615.0),
    ],
)
def test_parse_ssh_time(text: str, want: float) -> None:
    assert parse_ssh_time(text) == want


@pytest.mark.parametrize("text", ["2027", "20271301Z", "2027010112Z", "abcdefghZ", ""])
def test_parse_ssh_time_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_ssh_time(text)


@pytest.mark.parametrize(
    "value, patterns, want",
    [
        ("edgelet-manifest", ("edgelet-*",), True),
        ("edgelet-image", ("edgelet-manifest",), False),
        ("edgelet-manifest", ("*", "!edgelet-manifest"), False),
        ("file", ("f?le",), True),
    ],
)
def test_match_pattern_list(value: str, patterns: tuple[str, ...], want: bool) -> None:
    assert match_pattern_list(value, patterns) is want


@pytest.mark.parametrize(
    "body, want",
    [
        (b"# edgelet-version: 12\napiVersion: v1\n", 12),
        (b"apiVersion: v1\n  #edgelet-version:3\r\n", 3),
        (b"metadata:\n  annotations: {x: '# edgelet-version: 9'}\n", None),
        (b"", None),
    ],
)
def test_body_version(body: bytes, want: int | None) -> None:
    assert body_version(body) == want


def test_only_trust_crypto_imports_cryptography() -> None:
    """One module loads the package (lazily): the default agent's RSS depends on no other module's discipline."""
    import edgelet

    root = Path(edgelet.__file__).parent
    importers = sorted(
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if not p.is_relative_to(root / "testing")
        and re.search(r"^\s*(from|import) cryptography\b", p.read_text(), re.M)
    )
    assert importers == ["trust/crypto.py"]


def test_the_default_agent_never_imports_cryptography() -> None:
    code = (
        "import sys, edgelet.app, edgelet.sources.file, edgelet.sources.http, edgelet.images.importdir, "
        "edgelet.trust.verify, edgelet.trust.keys; "
        "print(sorted(m for m in sys.modules if m.startswith('cryptography')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
