"""Image references, digests and platforms as docker and containerd read them (pure: no I/O).

`parse_reference("busybox")` gives docker.io/library/busybox:latest, exactly as
docker's `ParseNormalizedNamed` + `TagNameOnly` do; `str()` of the result is the
normalised form the store keys its images by.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from edgelet.images.errors import InvalidReference

DEFAULT_DOMAIN = "docker.io"
LEGACY_DEFAULT_DOMAIN = "index.docker.io"
OFFICIAL_REPO_PREFIX = "library/"
DEFAULT_TAG = "latest"
NAME_TOTAL_LENGTH_MAX = 255

# The grammar of github.com/distribution/reference (regexp.go), verbatim in spirit.
_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_PATH_RE = re.compile(rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*")
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN_NAME = rf"{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*"
_IPV6 = r"\[(?:[a-fA-F0-9:]+)\]"
_DOMAIN_RE = re.compile(rf"(?:{_DOMAIN_NAME}|{_IPV6})(?::[0-9]+)?")
_TAG_RE = re.compile(r"[\w][\w.-]{0,127}")
_DIGEST_RE = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}")
_ANCHORED_HEX64 = re.compile(r"[a-f0-9]{64}")
_HEX_LENGTHS = {"sha256": 64, "sha512": 128}


@dataclass(frozen=True)
class Reference:
    """A parsed, normalised image reference; at least one of `tag` and `digest` is set."""

    domain: str
    path: str
    tag: str | None = None
    digest: str | None = None

    @property
    def name(self) -> str:
        """The repository: `domain/path`."""
        return f"{self.domain}/{self.path}"

    def __str__(self) -> str:
        out = self.name
        if self.tag is not None:
            out += ":" + self.tag
        if self.digest is not None:
            out += "@" + self.digest
        return out

    @property
    def familiar(self) -> str:
        """The short form docker prints: `busybox:latest`, `nginx@sha256:...`, `quay.io/x/y:1`."""
        name = self.name
        if self.domain == DEFAULT_DOMAIN:
            name = self.path.removeprefix(OFFICIAL_REPO_PREFIX) if self.path.count("/") == 1 else self.path
        out = name
        if self.tag is not None:
            out += ":" + self.tag
        if self.digest is not None:
            out += "@" + self.digest
        return out


def validate_digest(digest: str) -> str:
    """`digest` itself when it is `sha256:<64 lowercase hex>` or `sha512:<128>`; InvalidReference otherwise."""
    if not _DIGEST_RE.fullmatch(digest):
        raise InvalidReference(digest, "not a digest (algorithm:hex)")
    algorithm, hex_ = digest.split(":", 1)
    want = _HEX_LENGTHS.get(algorithm)
    if want is None:
        raise InvalidReference(digest, f"unsupported digest algorithm {algorithm!r}")
    if len(hex_) != want or hex_ != hex_.lower():
        raise InvalidReference(digest, f"{algorithm} digest must be {want} lowercase hex characters")
    return digest


def is_digest(text: str) -> bool:
    try:
        validate_digest(text)
    except InvalidReference:
        return False
    return True


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _split_domain(name: str) -> tuple[str, str]:
    """docker's splitDockerDomain: the first component is a domain only if it looks like a host."""
    first, sep, rest = name.partition("/")
    if not sep or (not any(c in first for c in ".:") and first != "localhost" and first.lower() == first):
        domain, remainder = DEFAULT_DOMAIN, name
    else:
        domain, remainder = first, rest
    if domain == LEGACY_DEFAULT_DOMAIN:
        domain = DEFAULT_DOMAIN
    if domain == DEFAULT_DOMAIN and "/" not in remainder:
        remainder = OFFICIAL_REPO_PREFIX + remainder
    return domain, remainder


def parse_reference(text: str, *, default_tag: bool = True) -> Reference:
    """Parse and normalise as docker does; `default_tag` adds ":latest" when neither tag nor digest is given."""
    if not text:
        raise InvalidReference(text, "empty reference")
    if text != text.strip():
        raise InvalidReference(text, "surrounding whitespace")
    if _ANCHORED_HEX64.fullmatch(text):
        raise InvalidReference(text, "a bare 64-character hex string is an image id, not a reference")
    remainder, at, found = text.partition("@")
    digest: str | None = found
    if at:
        try:
            validate_digest(found)
        except InvalidReference as exc:
            raise InvalidReference(text, exc.reason) from exc
    else:
        digest = None
    tag: str | None = None
    colon = remainder.rfind(":")
    if colon > remainder.rfind("/"):
        remainder, tag = remainder[:colon], remainder[colon + 1 :]
        if not _TAG_RE.fullmatch(tag):
            raise InvalidReference(text, f"invalid tag {tag!r}")
    if not remainder:
        raise InvalidReference(text, "empty repository name")
    domain, path = _split_domain(remainder)
    if path.lower() != path:
        raise InvalidReference(text, "repository name must be lowercase")
    if not _DOMAIN_RE.fullmatch(domain):
        raise InvalidReference(text, f"invalid registry domain {domain!r}")
    if not _PATH_RE.fullmatch(path):
        raise InvalidReference(text, f"invalid repository path {path!r}")
    if len(domain) + 1 + len(path) > NAME_TOTAL_LENGTH_MAX:
        raise InvalidReference(text, f"repository name longer than {NAME_TOTAL_LENGTH_MAX} characters")
    if tag is None and digest is None and default_tag:
        tag = DEFAULT_TAG
    return Reference(domain=domain, path=path, tag=tag, digest=digest)


def normalize_reference(text: str) -> str:
    """`busybox` -> `docker.io/library/busybox:latest`; raises InvalidReference."""
    return str(parse_reference(text))


def is_latest_or_untagged(ref: str | Reference) -> bool:
    """True for `:latest` or a reference with neither tag nor digest: kubelet's imagePullPolicy default is
    then Always, otherwise IfNotPresent. An unparsable reference counts as untagged."""
    if isinstance(ref, Reference):
        return ref.tag == DEFAULT_TAG or (ref.tag is None and ref.digest is None)
    try:
        parsed = parse_reference(ref, default_tag=False)
    except InvalidReference:
        return True
    return parsed.tag == DEFAULT_TAG or (parsed.tag is None and parsed.digest is None)


# ---------------------------------------------------------------------------------------------
# Platforms


_ARCH_ALIASES = {
    "x86_64": "amd64",
    "x86-64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "armhf": "arm",
    "armel": "arm",
    "arm": "arm",
    "i386": "386",
    "i686": "386",
    "386": "386",
}


@dataclass(frozen=True)
class Platform:
    os: str
    architecture: str
    variant: str = ""

    def __str__(self) -> str:
        return f"{self.os}/{self.architecture}" + (f"/{self.variant}" if self.variant else "")


def platform_for_machine(machine: str, os_name: str = "linux") -> Platform:
    """The OCI platform of `platform.machine()` output (`x86_64`, `aarch64`, `armv7l`, ...)."""
    m = machine.lower()
    if m.startswith("armv") and m[4:5].isdigit():
        return Platform(os_name, "arm", "v" + m[4])
    if m in ("aarch64", "arm64"):
        return Platform(os_name, "arm64", "v8")
    return Platform(os_name, _ARCH_ALIASES.get(m, m))


def parse_platform(doc: Mapping[str, Any] | None) -> Platform | None:
    """The platform object of an index descriptor or an image config, if it names one."""
    if not doc or not isinstance(doc.get("architecture"), str) or not isinstance(doc.get("os"), str):
        return None
    variant = doc.get("variant")
    return Platform(
        doc["os"],
        _ARCH_ALIASES.get(doc["architecture"], doc["architecture"]),
        variant if isinstance(variant, str) else "",
    )


def _platform_score(candidate: Platform, wanted: Platform) -> int | None:
    """Higher is better; None when the candidate cannot run here (containerd's platforms.Only, simplified)."""
    if candidate.os != wanted.os or candidate.architecture != wanted.architecture:
        return None
    if candidate.variant == wanted.variant:
        return 3
    if not candidate.variant:
        return 2
    # arm: a v6 image runs on v7 and v8 hardware, not the other way round.
    if wanted.architecture == "arm" and candidate.variant[1:].isdigit() and wanted.variant[1:].isdigit():
        return 1 if int(candidate.variant[1:]) <= int(wanted.variant[1:]) else None
    if wanted.architecture == "arm64" and candidate.variant == "v8":
        return 3
    return None


def select_platform(descriptors: Sequence[Mapping[str, Any]], wanted: Platform) -> Mapping[str, Any] | None:
    """The best descriptor of an index for `wanted`; descriptors without a platform are a last resort.

    Returns None when none fits; the first of equally good descriptors wins (index order)."""
    best: tuple[int, int] | None = None
    chosen: Mapping[str, Any] | None = None
    for i, desc in enumerate(descriptors):
        plat = parse_platform(desc.get("platform"))
        score = 0 if plat is None else _platform_score(plat, wanted)
        if score is None:
            continue
        key = (score, -i)
        if best is None or key > best:
            best, chosen = key, desc
    return chosen


def describe_platforms(descriptors: Iterable[Mapping[str, Any]]) -> list[str]:
    out = []
    for desc in descriptors:
        plat = parse_platform(desc.get("platform"))
        out.append(str(plat) if plat else "unspecified")
    return out


def chain_ids(diff_ids: Sequence[str]) -> list[str]:
    """OCI chain IDs: ChainID(L0) = DiffID(L0); ChainID(Ln) = sha256(ChainID(Ln-1) + " " + DiffID(Ln))."""
    out: list[str] = []
    for diff_id in diff_ids:
        out.append(diff_id if not out else sha256_digest(f"{out[-1]} {diff_id}".encode()))
    return out
