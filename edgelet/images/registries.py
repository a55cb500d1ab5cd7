"""Per-registry settings (mirrors, insecure) and the ordered endpoints a pull tries (pure: no I/O).

TOML::

    [registries."docker.io"]
    mirrors = ["https://mirror.example.com", "http://10.0.0.5:5000"]
    [registries."10.0.0.9:5000"]
    insecure = true

Mirrors are tried in order, then the registry itself, as containerd's hosts.toml
does. `insecure` means plain HTTP. Like dockerd (and unlike containerd), loopback
registries (`localhost`, `127.0.0.0/8`, `::1`) are insecure without being told,
so a registry on the device itself needs no configuration.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from edgelet.images.reference import DEFAULT_DOMAIN

DOCKER_HUB_ENDPOINT = "registry-1.docker.io"


@dataclass(frozen=True)
class RegistryHost:
    mirrors: tuple[str, ...] = ()
    insecure: bool = False


@dataclass(frozen=True)
class Endpoint:
    """One place to pull from: `url` is scheme://host[:port][/prefix], without a trailing slash."""

    url: str
    insecure: bool
    mirror: bool = False


def parse_registries(raw: Any) -> dict[str, RegistryHost]:
    """The `registries` table; ValueError naming the bad key."""
    if not isinstance(raw, Mapping):
        raise ValueError('expected a table such as [registries."docker.io"]')
    out: dict[str, RegistryHost] = {}
    for name, entry in raw.items():
        if not isinstance(name, str) or not name or "/" in name:
            raise ValueError(f"registry name {name!r} must be a host[:port]")
        if not isinstance(entry, Mapping):
            raise ValueError(f"registries.{name!r} must be a table")
        unknown = set(entry) - {"mirrors", "insecure"}
        if unknown:
            raise ValueError(f"registries.{name!r}: unknown keys {', '.join(sorted(map(str, unknown)))}")
        mirrors = entry.get("mirrors", [])
        if not isinstance(mirrors, (list, tuple)) or not all(isinstance(m, str) and m.strip() for m in mirrors):
            raise ValueError(f"registries.{name!r}.mirrors must be a list of URLs or hosts")
        insecure = entry.get("insecure", False)
        if not isinstance(insecure, bool):
            raise ValueError(f"registries.{name!r}.insecure must be true or false")
        out[name.lower()] = RegistryHost(tuple(m.strip().rstrip("/") for m in mirrors), insecure)
    return out


def is_loopback_host(host: str) -> bool:
    """`localhost`, `127.x.y.z` or `[::1]`, with or without a port."""
    if host.startswith("["):
        addr = host[1:].split("]", 1)[0]
    else:
        addr = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    if addr == "localhost":
        return True
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return False


def _endpoint(target: str, insecure: bool, mirror: bool) -> Endpoint:
    if "://" in target:
        scheme = target.split("://", 1)[0].lower()
        return Endpoint(target.rstrip("/"), insecure or scheme == "http", mirror)
    plain = insecure or is_loopback_host(target.split("/", 1)[0])
    return Endpoint(("http://" if plain else "https://") + target.rstrip("/"), plain, mirror)


def registry_endpoints(domain: str, hosts: Mapping[str, RegistryHost]) -> list[Endpoint]:
    """Where to pull `domain`'s images from, in order: its mirrors, then itself."""
    host = hosts.get(domain.lower(), RegistryHost())
    out = [_endpoint(m, host.insecure and "://" not in m, True) for m in host.mirrors]
    out.append(_endpoint(DOCKER_HUB_ENDPOINT if domain == DEFAULT_DOMAIN else domain, host.insecure, False))
    return out


__all__ = ["Endpoint", "RegistryHost", "is_loopback_host", "parse_registries", "registry_endpoints"]
