"""Typed values the image store hands to the rest of edgelet (pure data)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class ImageConfig:
    """The parts of an OCI image config that shape a container."""

    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: tuple[str, ...] = ()  # "KEY=value"
    working_dir: str = ""
    user: str = ""  # "uid", "uid:gid", "name" or "name:group"
    stop_signal: str = ""  # e.g. "SIGQUIT"; empty = SIGTERM
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ImageRecord:
    """One image in the local store.

    `id` is the config digest (what kubelet shows as imageID's digest part);
    `digest` the manifest digest; `layers` the unpacked read-only layer
    directories, bottom first, ready to be overlay lowerdirs.
    """

    id: str
    digest: str
    references: tuple[str, ...]
    config: ImageConfig
    layers: tuple[Path, ...]
    size: int = 0
    pinned: bool = False
    platform: str = "linux/amd64"
    extra: dict[str, str] = field(default_factory=dict)


class ByteSource(Protocol):
    """Anything blobs are read from: a file, a tar member, an HTTP body."""

    def read(self, n: int = -1, /) -> bytes: ...
