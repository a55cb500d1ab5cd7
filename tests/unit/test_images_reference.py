"""Reference parsing and normalisation as docker does it, platform selection, chain IDs."""

from __future__ import annotations

import pytest

from edgelet.images.errors import InvalidReference
from edgelet.images.reference import (
    Platform,
    chain_ids,
    is_latest_or_untagged,
    normalize_reference,
    parse_reference,
    platform_for_machine,
    select_platform,
    sha256_digest,
    validate_digest,
)

D = "sha256:" + "a" * 64


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("busybox", "docker.io/library/busybox:latest"),
        ("busybox:1.36", "docker.io/library/busybox:1.36"),
        ("library/busybox", "docker.io/library/busybox:latest"),
        ("docker.io/busybox", "docker.io/library/busybox:latest"),
        ("index.docker.io/busybox:1", "docker.io/library/busybox:1"),
        ("user/app", "docker.io/user/app:latest"),
        ("localhost/app", "localhost/app:latest"),
        ("localhost:5000/x", "localhost:5000/x:latest"),
        ("localhost:5000/x:v1", "localhost:5000/x:v1"),
        ("edgelet.local/busybox:1.36", "edgelet.local/busybox:1.36"),
        ("quay.io/a/b/c:tag_1.0-x", "quay.io/a/b/c:tag_1.0-x"),
        ("Registry.Example.com/a", "Registry.Example.com/a:latest"),
        ("[::1]:5000/a", "[::1]:5000/a:latest"),
        (f"busybox@{D}", f"docker.io/library/busybox@{D}"),
        (f"busybox:1.36@{D}", f"docker.io/library/busybox:1.36@{D}"),
        ("a__b/c-d--e.f", "docker.io/a__b/c-d--e.f:latest"),
    ],
)
def test_normalise(text: str, normalised: str) -> None:
    assert normalize_reference(text) == normalised


@pytest.mark.parametrize(
    "text",
    [
        "",
        " busybox",
        "Busybox",
        "busybox:",
        "busybox:-x",
        "busybox@sha256:abc",
        f"busybox@md5:{'a' * 64}",
        f"busybox@sha256:{'A' * 64}",
        "a" * 64,
        "docker.io/",
        "/busybox",
        "bus//box",
        "busybox:" + "t" * 129,
        "x/" + "a" * 260,
        "-bad/x",
        "a_/x",
        "ex ample.com/x",
    ],
)
def test_invalid(text: str) -> None:
    with pytest.raises(InvalidReference) as info:
        parse_reference(text)
    assert isinstance(info.value, ValueError)
    assert repr(text) in str(info.value)


def test_parts_and_familiar() -> None:
    r = parse_reference("localhost:5000/team/app:v2")
    assert (r.domain, r.path, r.tag, r.digest, r.name) == (
        "localhost:5000",
        "team/app",
        "v2",
        None,
        "localhost:5000/team/app",
    )
    assert parse_reference("busybox").familiar == "busybox:latest"
    assert parse_reference("user/app:1").familiar == "user/app:1"
    assert parse_reference("quay.io/a/b").familiar == "quay.io/a/b:latest"
    assert parse_reference("busybox", default_tag=False).tag is None


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("busybox", True),
        ("busybox:latest", True),
        ("busybox:1.36", False),
        (f"busybox@{D}", False),
        (f"busybox:latest@{D}", True),
        ("localhost:5000/x", True),
        ("localhost:5000/x:2", False),
        ("NOT VALID", True),
    ],
)
def test_is_latest_or_untagged(ref: str, expected: bool) -> None:
    assert is_latest_or_untagged(ref) is expected


def test_is_latest_or_untagged_accepts_parsed() -> None:
    assert is_latest_or_untagged(parse_reference("busybox:1", default_tag=False)) is False
    assert is_latest_or_untagged(parse_reference("busybox", default_tag=False)) is True


def test_digest_validation() -> None:
    assert validate_digest(D) == D
    assert validate_digest("sha512:" + "0" * 128)
    for bad in ("sha256:" + "a" * 63, "sha256", "sha1:" + "a" * 40, ":" + "a" * 64):
        with pytest.raises(InvalidReference):
            validate_digest(bad)


@pytest.mark.parametrize(
    ("machine", "platform"),
    [
        ("x86_64", Platform("linux", "amd64")),
        ("aarch64", Platform("linux", "arm64", "v8")),
        ("armv7l", Platform("linux", "arm", "v7")),
        ("armv6l", Platform("linux", "arm", "v6")),
        ("riscv64", Platform("linux", "riscv64")),
    ],
)
def test_platform_for_machine(machine: str, platform: Platform) -> None:
    assert platform_for_machine(machine) == platform


def _desc(name: str, os_: str | None, arch: str | None = None, variant: str | None = None) -> dict:
    d: dict = {"digest": name}
    if os_ is not None:
        d["platform"] = {"os": os_, "architecture": arch}
        if variant:
            d["platform"]["variant"] = variant
    return d


INDEX = [
    _desc("amd64", "linux", "amd64"),
    _desc("arm64", "linux", "arm64", "v8"),
    _desc("armv6", "linux", "arm", "v6"),
    _desc("armv7", "linux", "arm", "v7"),
    _desc("attestation", "unknown", "unknown"),
    _desc("windows", "windows", "amd64"),
]


@pytest.mark.parametrize(
    ("descs", "wanted", "chosen"),
    [
        (INDEX, Platform("linux", "amd64"), "amd64"),
        (INDEX, Platform("linux", "arm64", "v8"), "arm64"),
        (INDEX, Platform("linux", "arm", "v7"), "armv7"),
        (INDEX[:3], Platform("linux", "arm", "v7"), "armv6"),
        (INDEX[:3], Platform("linux", "arm", "v5"), None),
        ([_desc("arm64-novariant", "linux", "arm64")], Platform("linux", "arm64", "v8"), "arm64-novariant"),
        ([_desc("only", None)], Platform("linux", "amd64"), "only"),
        ([_desc("x", None), _desc("amd", "linux", "x86_64")], Platform("linux", "amd64"), "amd"),
        (INDEX[4:], Platform("linux", "amd64"), None),
        ([], Platform("linux", "amd64"), None),
    ],
)
def test_select_platform(descs: list, wanted: Platform, chosen: str | None) -> None:
    got = select_platform(descs, wanted)
    assert (got["digest"] if got else None) == chosen


def test_chain_ids() -> None:
    a, b, c = (sha256_digest(x) for x in (b"a", b"b", b"c"))
    ab = sha256_digest(f"{a} {b}".encode())
    assert chain_ids([]) == []
    assert chain_ids([a]) == [a]
    assert chain_ids([a, b, c]) == [a, ab, sha256_digest(f"{ab} {c}".encode())]
