"""Who is asking the node API and what they may read (pure): identities from client certificates and static bearer
tokens, kubelet's path-to-subresource mapping, and the local grant policy.

Authentication is kubelet's: a client certificate verified against
`--client-ca-file` (CN is the user, each O a group) or a bearer token from
`--api-token-file`; there is no anonymous user. Authorization replaces
kubelet's SubjectAccessReview with a local policy, deny by default: the
group `system:masters` (the apiserver's kubelet client in most clusters)
may do everything, and `--node-api-grants` gives users and groups named
subresources. A path maps to a subresource of `nodes` as kubelet's does
(`/stats` stats, `/metrics` metrics, `/logs` log, anything else proxy),
plus kubelet's fine-grained names for `/pods` (pods) and `/healthz`
(healthz); as in kubelet's fine-grained mode, `proxy` covers them all.
"""

from __future__ import annotations

import csv
import hashlib
import io
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgelet.errors import EdgeletError

SUPERUSER_GROUP = "system:masters"
SUBRESOURCES = ("proxy", "pods", "log", "stats", "metrics", "healthz", "spec")
_VERBS = {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


class AuthConfigError(EdgeletError):
    """A token file or grant that cannot be used; names the file, line or grant and why."""


@dataclass(frozen=True)
class Identity:
    user: str
    groups: tuple[str, ...] = ()
    method: str = ""  # "x509" | "token"


@dataclass(frozen=True)
class Attributes:
    """kubelet's authorization attributes of a request: verb on nodes/<subresource> of this node."""

    verb: str
    subresource: str


def parse_token_file(text: str, source: str = "token file") -> dict[bytes, Identity]:
    """Static tokens, keyed by the SHA-256 of the token (lookups then compare digests, not secrets).

    Lines are CSV: `token,user,groups` with groups comma-separated inside
    quotes, or the apiserver's `--token-auth-file` form `token,user,uid,"groups"`.
    Blank lines and `#` comments are skipped.
    """
    out: dict[bytes, Identity] = {}
    for n, row in enumerate(csv.reader(io.StringIO(text)), 1):
        if not row or not "".join(row).strip() or row[0].lstrip().startswith("#"):
            continue
        fields = [f.strip() for f in row]
        if len(fields) < 2 or not fields[0] or not fields[1]:
            raise AuthConfigError(f"{source}: line {n}: expected token,user[,groups], got {len(fields)} field(s)")
        groups = fields[3] if len(fields) >= 4 else fields[2] if len(fields) == 3 else ""
        if len(fields) > 4:
            raise AuthConfigError(f'{source}: line {n}: too many fields (quote the groups: token,user,"g1,g2")')
        key = token_digest(fields[0])
        if key in out:
            raise AuthConfigError(f"{source}: line {n}: duplicate token")
        out[key] = Identity(fields[1], tuple(g.strip() for g in groups.split(",") if g.strip()), "token")
    return out


def load_token_file(path: Path) -> dict[bytes, Identity]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise AuthConfigError(f"--api-token-file {path}: {exc.strerror or exc}") from exc
    return parse_token_file(text, str(path))


def token_digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def bearer_token(headers: Iterable[tuple[str, str]]) -> str | None:
    """The token of an `Authorization: Bearer` header; None when there is none."""
    for name, value in headers:
        if name.lower() == "authorization":
            scheme, _, token = value.strip().partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    return None


def cert_identity(peer_cert: Mapping[str, Any] | None) -> Identity | None:
    """The user (CN) and groups (every O) of a verified client certificate, as ssl's getpeercert() gives it."""
    if not peer_cert:
        return None
    user, groups = None, []
    for rdn in peer_cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName" and user is None:
                user = value
            elif key == "organizationName":
                groups.append(value)
    return Identity(user, tuple(groups), "x509") if user else None


def authenticate(
    peer_cert: Mapping[str, Any] | None, headers: Iterable[tuple[str, str]], tokens: Mapping[bytes, Identity]
) -> Identity | None:
    """The certificate's identity first, then the bearer token's, as kubelet's union authenticator tries them."""
    ident = cert_identity(peer_cert)
    if ident is not None:
        return ident
    token = bearer_token(headers)
    return tokens.get(token_digest(token)) if token is not None else None


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + "/")


def request_attributes(method: str, path: str) -> Attributes:
    """kubelet's GetRequestAttributes: the verb from the method, the subresource from the path."""
    verb = _VERBS.get(method, method.lower())
    path = "/" + path.strip("/")
    if _under(path, "/stats"):
        sub = "stats"
    elif _under(path, "/metrics"):
        sub = "metrics"
    elif _under(path, "/logs"):
        sub = "log"
    elif _under(path, "/spec"):
        sub = "spec"
    elif _under(path, "/pods") or _under(path, "/runningpods"):
        sub = "pods"
    elif path == "/healthz" or _under(path, "/healthz"):
        sub = "healthz"
    else:
        sub = "proxy"
    return Attributes(verb, sub)


@dataclass(frozen=True)
class Grant:
    kind: str  # "user" | "group"
    name: str
    subresources: frozenset[str]


def parse_grant(text: str) -> Grant:
    """`user:NAME=SUB/SUB` or `group:NAME=SUB/SUB` (SUB one of SUBRESOURCES or `*`); ValueError saying why."""
    subject, sep, subs = text.strip().rpartition("=")
    kind, colon, name = subject.partition(":")
    if not sep or not colon or kind not in ("user", "group") or not name:
        raise ValueError(f"grant {text!r}: expected user:NAME=SUBRESOURCES or group:NAME=SUBRESOURCES")
    wanted = frozenset(s.strip() for s in subs.split("/") if s.strip())
    bad = sorted(wanted - set(SUBRESOURCES) - {"*"})
    if not wanted or bad:
        raise ValueError(
            f"grant {text!r}: unknown subresource(s) {', '.join(bad) or '(none)'}; "
            f"use * or some of {'/'.join(SUBRESOURCES)}"
        )
    return Grant(kind, name, wanted)


def authorize(ident: Identity, attrs: Attributes, grants: Iterable[Grant]) -> bool:
    """Whether `ident` may `attrs.verb` nodes/`attrs.subresource`; deny unless a grant says so.

    Only reads are served, so a grant covers the verbs the API answers.
    """
    if SUPERUSER_GROUP in ident.groups:
        return True
    for g in grants:
        applies = ident.user == g.name if g.kind == "user" else g.name in ident.groups
        if applies and ("*" in g.subresources or "proxy" in g.subresources or attrs.subresource in g.subresources):
            return True
    return False


def forbidden_message(ident: Identity, attrs: Attributes, node: str) -> str:
    """kubelet's 403 text, so an operator recognises what to grant."""
    return (
        f"Forbidden (user={ident.user}, verb={attrs.verb}, resource=nodes, subresource={attrs.subresource}, "
        f"node={node})"
    )
