"""Registry credentials from a docker config.json, and the parsing of WWW-Authenticate challenges (pure except `load_credentials`).

The file format is docker's: ``{"auths": {"<registry>": {"auth": base64("user:pass")}}}`` or
``{"username": ..., "password": ...}`` per entry. Keys may be bare hosts
(`registry.example:5000`) or URLs (`https://index.docker.io/v1/`); both are
normalised to the registry domain a `Reference` carries, so lookups are a dict get.
Credential helpers (`credsStore`, `credHelpers`) are not supported: an edge device
has no desktop keychain to ask.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgelet.images.errors import CredentialError
from edgelet.images.reference import DEFAULT_DOMAIN, LEGACY_DEFAULT_DOMAIN
from edgelet.util.log import get_logger

log = get_logger(__name__)

DEFAULT_CREDENTIAL_FILES = (Path("/etc/edgelet/auth.json"), Path("/root/.docker/config.json"))
MAX_CONFIG = 1 << 20


@dataclass(frozen=True)
class Credential:
    username: str
    password: str

    def __repr__(self) -> str:  # never print a password in a log or a traceback
        return f"Credential(username={self.username!r}, password=***)"


def normalize_registry_key(key: str) -> str:
    """`https://index.docker.io/v1/` -> `docker.io`; `http://host:5000/x` -> `host:5000` (pure)."""
    host = re.sub(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", "", key.strip()).split("/", 1)[0].lower()
    if host in (LEGACY_DEFAULT_DOMAIN, "registry-1.docker.io", "registry.hub.docker.com"):
        return DEFAULT_DOMAIN
    return host


def parse_docker_config(doc: Any, source: str = "config") -> dict[str, Credential]:
    """The credentials in a parsed config.json, keyed by registry domain (pure)."""
    if not isinstance(doc, dict):
        raise CredentialError(source, "not a JSON object")
    auths = doc.get("auths", {})
    if not isinstance(auths, dict):
        raise CredentialError(source, "`auths` is not an object")
    out: dict[str, Credential] = {}
    for key, entry in auths.items():
        if not isinstance(entry, dict):
            raise CredentialError(source, f"auths[{key!r}] is not an object")
        user, password = entry.get("username"), entry.get("password")
        if isinstance(entry.get("auth"), str) and entry["auth"]:
            try:
                decoded = base64.b64decode(entry["auth"], validate=True).decode()
            except (ValueError, UnicodeDecodeError) as exc:
                raise CredentialError(source, f"auths[{key!r}].auth is not base64 of user:password") from exc
            user, sep, password = decoded.partition(":")
            if not sep:
                raise CredentialError(source, f"auths[{key!r}].auth has no ':' between user and password")
        if isinstance(user, str) and isinstance(password, str) and user:
            out[normalize_registry_key(key)] = Credential(user, password)
    return out


def load_credentials(paths: Iterable[Path]) -> dict[str, Credential]:
    """The first of `paths` that exists, parsed; {} when none does."""
    for path in paths:
        try:
            data = Path(path).read_bytes()[: MAX_CONFIG + 1]
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise CredentialError(path, f"cannot read: {exc.strerror}") from exc
        if len(data) > MAX_CONFIG:
            raise CredentialError(path, f"larger than {MAX_CONFIG} bytes")
        try:
            doc = json.loads(data)
        except ValueError as exc:
            raise CredentialError(path, f"not valid JSON: {exc}") from exc
        creds = parse_docker_config(doc, str(path))
        log.debug("Loaded registry credentials", path=str(path), registries=",".join(sorted(creds)))
        return creds
    return {}


def credential_paths(explicit: Path | None) -> tuple[Path, ...]:
    """`--image-credential-file` when given (then it alone), else the defaults in order."""
    return (explicit,) if explicit is not None else DEFAULT_CREDENTIAL_FILES


_CHALLENGE_PARAM = re.compile(r'\s*([a-zA-Z0-9_-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))\s*,?')


@dataclass(frozen=True)
class Challenge:
    scheme: str  # lowercase: "bearer" or "basic"
    params: Mapping[str, str]


def parse_challenge(header: str) -> Challenge | None:
    """One WWW-Authenticate challenge: `Bearer realm="...",service="...",scope="..."` (pure)."""
    scheme, _, rest = header.strip().partition(" ")
    if not scheme:
        return None
    params = {}
    pos = 0
    while pos < len(rest):
        m = _CHALLENGE_PARAM.match(rest, pos)
        if m is None or m.end() == pos:
            break
        value = m.group(2) if m.group(2) is not None else m.group(3)
        params[m.group(1).lower()] = re.sub(r"\\(.)", r"\1", value)
        pos = m.end()
    return Challenge(scheme.lower(), params)


__all__ = [
    "Challenge",
    "Credential",
    "CredentialError",
    "DEFAULT_CREDENTIAL_FILES",
    "credential_paths",
    "load_credentials",
    "normalize_registry_key",
    "parse_challenge",
    "parse_docker_config",
]
