"""The signature policy of registry images, read from a containers-policy.json(5) file as podman and CRI-O read it.

    {"default": [{"type": "reject"}],
     "transports": {"docker": {
         "registry.example:5000/fleet": [{"type": "sigstoreSigned", "keyPath": "/etc/edgelet/cosign.pub"}],
         "docker.io/library": [{"type": "insecureAcceptAnything"}]}}}

`evaluate(policy, reference)` is the decision, pure: the requirements of the most specific
scope of the `docker` transport that matches the (normalised) reference, in the order of
containers/image's docker transport: the exact `repo:tag` / `repo@digest`, the repository,
each parent namespace, the host (with its port), then `*.domain` wildcards of the host from
the most to the least specific; then the transport's `""` scope, then `default`. Every
requirement of the chosen list must be satisfied.

Parsing is as strict as containers/image's: unknown or duplicated fields, a missing
`default`, an unknown requirement type are errors naming the file and the field. What
edgelet cannot check is refused at start (keyless `fulcio`/`pki`, Rekor keys, `remapIdentity`)
or, for GPG `signedBy` (found in distribution policies for other registries), refused for
the images it applies to, never silently accepted. Other transports (`docker-daemon`,
`atomic`, ...) are parsed and ignored: edgelet pulls only from registries.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgelet.trust.errors import PolicyError
from edgelet.trust.perms import path_problem

CONVENTIONAL_PATH = Path("/etc/containers/policy.json")
MAX_POLICY = 1 << 20  # a policy is a few kB; a larger file is not one

ACCEPT_ANYTHING = "insecureAcceptAnything"
REJECT = "reject"
SIGNED_BY = "signedBy"
SIGSTORE_SIGNED = "sigstoreSigned"

IDENTITY_TYPES = ("matchRepoDigestOrExact", "matchExact", "matchRepository", "exactReference", "exactRepository")
_REQUIREMENT_FIELDS = {
    ACCEPT_ANYTHING: {"type"},
    REJECT: {"type"},
    SIGNED_BY: {"type", "keyType", "keyPath", "keyPaths", "keyData", "signedIdentity"},
    SIGSTORE_SIGNED: {
        "type",
        "keyPath",
        "keyPaths",
        "keyData",
        "keyDatas",
        "fulcio",
        "pki",
        "rekorPublicKeyPath",
        "rekorPublicKeyPaths",
        "rekorPublicKeyData",
        "rekorPublicKeyDatas",
        "signedIdentity",
    },
}
_KEY_SOURCES = ("keyPath", "keyPaths", "keyData", "keyDatas", "fulcio", "pki")


# ---------------------------------------------------------------------------------------------
# the model


@dataclass(frozen=True)
class Identity:
    """signedIdentity: which identity a signature must claim for the image being pulled."""

    type: str = "matchRepoDigestOrExact"
    value: str = ""  # dockerReference of exactReference, dockerRepository of exactRepository (normalised)


@dataclass(frozen=True)
class PublicKey:
    """One trusted key of a sigstoreSigned requirement: its PEM and where it came from (for messages)."""

    field: str  # e.g. transports.docker["reg/app"][0].keyPath
    origin: str  # the key file, or "keyData"
    pem: bytes
    from_file: bool = False  # origin is a key file (keyPath/keyPaths), whose permissions load_policy checks


@dataclass(frozen=True)
class Requirement:
    type: str
    keys: tuple[PublicKey, ...] = ()
    identity: Identity = Identity()


@dataclass(frozen=True)
class Match:
    """The requirements that apply to one reference and the scope they come from."""

    scope: str  # the matching scope of transports.docker ("" for the transport's own default)
    requirements: tuple[Requirement, ...]
    source: str = "docker"  # "docker" (transports.docker) or "default" (the policy's top-level default)

    @property
    def name(self) -> str:
        if self.source == "default":
            return "default"
        return f"docker:{self.scope}" if self.scope else "docker (transport default)"


@dataclass(frozen=True)
class Policy:
    path: str
    default: tuple[Requirement, ...]
    docker: Mapping[str, tuple[Requirement, ...]] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# references (the trust layer sits below images, so it reads normalised references itself)

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*"
_NAME_PATH = re.compile(rf"{_COMPONENT}(?:/{_COMPONENT})*")
_DOMAIN = re.compile(
    r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*"
    r"|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
)
_TAG = re.compile(r"[\w][\w.-]{0,127}")
_DIGEST = re.compile(r"sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128}")
_WILDCARD = re.compile(r"\*\.[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?")


@dataclass(frozen=True)
class ImageName:
    """A reference split as docker normalises it: `name` is `domain/path`; tag and digest may be absent."""

    name: str
    tag: str | None = None
    digest: str | None = None

    def __str__(self) -> str:
        return self.name + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")

    @property
    def name_only(self) -> bool:
        return self.tag is None and self.digest is None


def split_reference(text: str) -> ImageName:
    """docker's ParseNormalizedNamed without a default tag (`busybox` is docker.io/library/busybox); ValueError if
    `text` is no reference (pure). edgelet.images.reference does the same for the puller; tests keep them equal."""
    if not isinstance(text, str) or not text or len(text) > 1024:
        raise ValueError("not a reference")
    name, at, digest = text.partition("@")
    if at and not _DIGEST.fullmatch(digest):
        raise ValueError(f"invalid digest in {text!r}")
    tag = None
    colon, slash = name.rfind(":"), name.rfind("/")
    if colon > slash:
        name, tag = name[:colon], name[colon + 1 :]
        if not _TAG.fullmatch(tag):
            raise ValueError(f"invalid tag in {text!r}")
    first, sep, rest = name.partition("/")
    if not sep or (not any(c in first for c in ".:") and first != "localhost" and first.lower() == first):
        domain, path = "docker.io", name
    else:
        domain, path = first, rest
        if not _DOMAIN.fullmatch(domain):
            raise ValueError(f"invalid registry host in {text!r}")
    if domain == "index.docker.io":
        domain = "docker.io"
    if domain == "docker.io" and "/" not in path:
        path = "library/" + path
    if not _NAME_PATH.fullmatch(path):
        raise ValueError(f"invalid repository name in {text!r}")
    return ImageName(f"{domain}/{path}", tag, digest or None)


def scope_candidates(reference: ImageName) -> list[str]:
    """The docker scopes that can match `reference`, most specific first (pure; containers/image's order)."""
    out = []
    if reference.digest:
        out.append(f"{reference.name}@{reference.digest}")
    if reference.tag:
        out.append(f"{reference.name}:{reference.tag}")
    name = reference.name
    while True:
        out.append(name)
        cut = name.rfind("/")
        if cut < 0:
            break
        name = name[:cut]
    host = name.split(":", 1)[0] if not name.startswith("[") else ""  # no wildcard scopes for IPv6 literals
    while "." in host:
        host = host.split(".", 1)[1]
        out.append("*." + host)
    return out


def evaluate(policy: Policy, reference: str) -> Match:
    """The requirements that apply to `reference` and the scope they come from (pure)."""
    for scope in scope_candidates(split_reference(reference)):
        reqs = policy.docker.get(scope)
        if reqs is not None:
            return Match(scope, reqs)
    if "" in policy.docker:
        return Match("", policy.docker[""])
    return Match("", policy.default, source="default")


def refusal(match: Match) -> str | None:
    """Why the requirements refuse every image whatever its signatures (reject, signedBy), or None (pure)."""
    for req in match.requirements:
        if req.type == REJECT:
            return "the policy rejects every image of this scope (type reject)"
        if req.type == SIGNED_BY:
            return (
                "the scope requires a GPG signature (type signedBy), which edgelet does not verify; use sigstoreSigned"
            )
    return None


def identity_matches(identity: Identity, image: str, signed: str) -> bool:
    """Whether a signature claiming `signed` is acceptable for pulling `image` (pure; containers/image's PRM)."""
    try:
        want, got = split_reference(image), split_reference(signed)
    except ValueError:
        return False
    if identity.type == "matchRepository":
        return got.name == want.name
    if identity.type == "exactRepository":
        return got.name == identity.value
    if identity.type == "exactReference":
        return not got.name_only and str(got) == identity.value
    if identity.type == "matchExact":
        return not want.name_only and not got.name_only and str(got) == str(want)
    # matchRepoDigestOrExact: by digest, any signature of the repository (the digest is checked anyway);
    # by tag, the signature must name exactly that tag.
    if want.digest:
        return got.name == want.name
    return want.tag is not None and not got.name_only and str(got) == str(want)


# ---------------------------------------------------------------------------------------------
# parsing


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _Duplicate(k)
        out[k] = v
    return out


class _Duplicate(Exception):
    pass


def _read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read(MAX_POLICY + 1)


def parse_policy(text: bytes | str, path: str, *, read_key: Callable[[str], bytes] = _read_bytes) -> Policy:
    """The policy in `text` (the contents of `path`); PolicyError naming the field otherwise.
    `read_key` reads a keyPath (pure when it is)."""
    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicates)
    except _Duplicate as exc:
        raise PolicyError(path, str(exc.args[0]), "duplicated field") from exc
    except (ValueError, RecursionError) as exc:
        raise PolicyError(path, "", f"not valid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise PolicyError(path, "", "must be a JSON object")
    _only(doc, {"default", "transports"}, "", path)
    if "default" not in doc:
        raise PolicyError(path, "default", "missing (containers-policy.json requires it)")
    default = _requirements(doc["default"], "default", path, read_key)
    transports = doc.get("transports", {})
    if not isinstance(transports, dict):
        raise PolicyError(path, "transports", "must be a JSON object")
    docker: dict[str, tuple[Requirement, ...]] = {}
    for transport, scopes in transports.items():
        where = f"transports.{transport}"
        if not isinstance(scopes, dict):
            raise PolicyError(path, where, "must be a JSON object of scopes")
        for scope, reqs in scopes.items():
            fld = f"{where}[{json.dumps(scope)}]"
            parsed = _requirements(reqs, fld, path, read_key if transport == "docker" else None)
            if transport == "docker":
                _check_scope(scope, fld, path)
                docker[scope] = parsed
    return Policy(path, default, docker)


def load_policy(path: Path | str) -> Policy:
    """Read, parse and check `path`, including every key (ECDSA P-256) of its docker scopes and default.

    The policy and each key file, and the directories up to /, must belong to root and be writable by no
    one else (edgelet.trust.perms, as --trusted-keys): anyone could otherwise choose which images run.
    """
    p = str(path)
    problem = path_problem(p, "anyone on the device could change which images are accepted")
    if problem:
        raise PolicyError(p, "", problem)
    try:
        data = _read_bytes(p)
    except OSError as exc:
        raise PolicyError(p, "", f"cannot be read: {exc.strerror or exc}") from exc
    if len(data) > MAX_POLICY:
        raise PolicyError(p, "", f"larger than {MAX_POLICY} bytes")
    policy = parse_policy(data, p)
    from edgelet.trust.cosign import check_p256_pem

    for reqs in (policy.default, *policy.docker.values()):
        for req in reqs:
            for key in req.keys:
                problem = (
                    path_problem(key.origin, "anyone on the device could replace the key") if key.from_file else None
                )
                if problem:
                    raise PolicyError(p, key.field, f"key file {key.origin}: {problem}")
                try:
                    check_p256_pem(key.pem)
                except ValueError as exc:
                    raise PolicyError(p, key.field, f"{key.origin}: {exc}") from exc
    return policy


def load_optional_policy(path: Path | str | None) -> Policy | None:
    """`load_policy(path)`, or None when no policy is configured (every pull is accepted, as before)."""
    return None if path is None else load_policy(path)


def _only(obj: Mapping[str, Any], allowed: set[str], where: str, path: str) -> None:
    for k in obj:
        if k not in allowed:
            raise PolicyError(path, f"{where}.{k}" if where else k, "unknown field")


def _check_scope(scope: str, fld: str, path: str) -> None:
    if scope == "":
        return
    if "://" in scope or scope != scope.strip():
        raise PolicyError(path, fld, "a scope is a registry host, namespace, repository or reference, not a URL")
    if scope.startswith("*"):
        if not _WILDCARD.fullmatch(scope):
            raise PolicyError(path, fld, "a wildcard scope is *.DOMAIN (no port, no path)")
        return
    try:
        parsed = split_reference(scope)
    except ValueError as exc:
        if "/" not in scope and _DOMAIN.fullmatch(scope):
            return  # a registry host ("quay.io", "127.0.0.1:5000")
        raise PolicyError(path, fld, f"not a registry, namespace or image reference: {exc}") from None
    first = scope.split("/", 1)[0]
    if "/" in scope and not any(c in first for c in ".:") and first != "localhost" and first == first.lower():
        # containers/image looks up only expanded names: "library/busybox" would never match anything
        raise PolicyError(path, fld, f"scopes must be fully expanded: write {str(parsed)!r}")


def _requirements(value: Any, fld: str, path: str, read_key: Callable[[str], bytes] | None) -> tuple[Requirement, ...]:
    if not isinstance(value, list) or not value:
        raise PolicyError(path, fld, "must be a non-empty list of requirements")
    return tuple(_requirement(r, f"{fld}[{i}]", path, read_key) for i, r in enumerate(value))


def _requirement(obj: Any, fld: str, path: str, read_key: Callable[[str], bytes] | None) -> Requirement:
    if not isinstance(obj, dict):
        raise PolicyError(path, fld, "must be a JSON object")
    kind = obj.get("type")
    if not isinstance(kind, str) or kind not in _REQUIREMENT_FIELDS:
        known = ", ".join(_REQUIREMENT_FIELDS)
        raise PolicyError(
            path,
            f"{fld}.type",
            f"unknown requirement type {kind!r} (known: {known})" if kind is not None else "missing",
        )
    _only(obj, _REQUIREMENT_FIELDS[kind], fld, path)
    identity = (
        _identity(obj.get("signedIdentity"), f"{fld}.signedIdentity", path) if "signedIdentity" in obj else Identity()
    )
    if kind != SIGSTORE_SIGNED:
        return Requirement(kind, identity=identity)
    sources = [k for k in _KEY_SOURCES if k in obj]
    if len(sources) != 1:
        raise PolicyError(
            path,
            fld,
            "sigstoreSigned needs exactly one of keyPath, keyPaths, keyData, keyDatas"
            + (f" (found {', '.join(sources)})" if sources else ""),
        )
    src = sources[0]
    if src in ("fulcio", "pki"):
        raise PolicyError(
            path,
            f"{fld}.{src}",
            "keyless (Fulcio/Rekor) and PKI verification are not supported by "
            "edgelet; sign with a cosign key pair and use keyPath",
        )
    for rekor in ("rekorPublicKeyPath", "rekorPublicKeyPaths", "rekorPublicKeyData", "rekorPublicKeyDatas"):
        if rekor in obj:
            raise PolicyError(
                path, f"{fld}.{rekor}", "Rekor transparency-log verification is not supported by edgelet (keys only)"
            )
    value = obj[src]
    items = value if src.endswith("s") else [value]
    if not isinstance(items, list) or not items or not all(isinstance(v, str) and v for v in items):
        raise PolicyError(
            path,
            f"{fld}.{src}",
            "must be a non-empty string" if not src.endswith("s") else "must be a non-empty list of non-empty strings",
        )
    keys = []
    for i, item in enumerate(items):
        kfld = f"{fld}.{src}" + (f"[{i}]" if src.endswith("s") else "")
        if src.startswith("keyPath"):
            if read_key is None:  # another transport: edgelet never uses it, so its files are not read
                continue
            try:
                pem = read_key(item)
            except OSError as exc:
                raise PolicyError(path, kfld, f"key file {item}: {exc.strerror or exc}") from exc
            keys.append(PublicKey(kfld, item, pem, from_file=True))
        else:
            try:
                pem = base64.b64decode(item, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise PolicyError(path, kfld, "not base64") from exc
            keys.append(PublicKey(kfld, "keyData", pem))
    return Requirement(kind, tuple(keys), identity)


def _identity(obj: Any, fld: str, path: str) -> Identity:
    if not isinstance(obj, dict):
        raise PolicyError(path, fld, "must be a JSON object")
    kind = obj.get("type")
    if not isinstance(kind, str) and kind is not None:
        raise PolicyError(path, f"{fld}.type", "must be a string")
    if kind == "remapIdentity":
        raise PolicyError(path, f"{fld}.type", "remapIdentity is not supported by edgelet")
    if kind not in IDENTITY_TYPES:
        raise PolicyError(
            path,
            f"{fld}.type",
            f"unknown signedIdentity type {kind!r} (known: {', '.join(IDENTITY_TYPES)})"
            if kind is not None
            else "missing",
        )
    extra = {"exactReference": "dockerReference", "exactRepository": "dockerRepository"}.get(kind)
    _only(obj, {"type", extra} if extra else {"type"}, fld, path)
    if extra is None:
        return Identity(kind)
    raw = obj.get(extra)
    try:
        ref = split_reference(raw) if isinstance(raw, str) else None
    except ValueError:
        ref = None
    if ref is None or (kind == "exactReference" and ref.name_only) or (kind == "exactRepository" and not ref.name_only):
        what = "an image reference with a tag or digest" if kind == "exactReference" else "a repository name"
        raise PolicyError(path, f"{fld}.{extra}", f"must be {what}")
    return Identity(kind, str(ref))


__all__ = [
    "CONVENTIONAL_PATH",
    "Identity",
    "ImageName",
    "Match",
    "Policy",
    "PublicKey",
    "Requirement",
    "evaluate",
    "identity_matches",
    "load_optional_policy",
    "load_policy",
    "parse_policy",
    "refusal",
    "scope_candidates",
    "split_reference",
]
