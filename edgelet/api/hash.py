"""Identity helpers: the container spec hash and a pod's full name."""

from __future__ import annotations

import msgspec

from edgelet.api.types import Container, Pod

__all__ = ["canonical_json", "container_hash", "fnv32a", "pod_full_name"]

_FNV32_OFFSET = 0x811C9DC5
_FNV32_PRIME = 0x01000193


def canonical_json(obj: msgspec.Struct) -> bytes:
    """JSON with sorted keys and defaults omitted: equal specs always give equal bytes."""
    return msgspec.json.encode(obj, order="sorted")


def fnv32a(data: bytes) -> int:
    """32-bit FNV-1a, the hash kubelet uses for container specs."""
    h = _FNV32_OFFSET
    for byte in data:
        h = ((h ^ byte) * _FNV32_PRIME) & 0xFFFFFFFF
    return h


def container_hash(container: Container) -> str:
    """Stable 8-hex-digit hash of a container spec; a change means the container is restarted.

    Like kubelet, fnv32a over a canonical encoding of the whole Container;
    unlike kubelet (which hashes Go's deep-printed struct) the encoding is our
    canonical JSON, so hashes are not comparable with a real kubelet's.
    """
    return f"{fnv32a(canonical_json(container)):08x}"


def pod_full_name(pod: Pod) -> str:
    """`namespace/name` (namespace `default` when unset), the key sources and podconfig use."""
    meta = pod.metadata
    namespace = (meta.namespace if meta is not None else None) or "default"
    name = (meta.name if meta is not None else None) or ""
    return f"{namespace}/{name}"
