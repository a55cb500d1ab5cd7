"""Per-container root filesystems: an overlay over read-only image layers, or a copy where overlay is missing.

CONTRACT STUB: signatures agreed; bodies to be completed by the images work.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence


def mount_rootfs(layers: Sequence[Path], container_dir: Path) -> Path:
    """Mount `layers` (bottom first) as the rootfs at `container_dir/rootfs`; upper and work dirs
    live in `container_dir` too. Returns the rootfs path. Idempotent: an existing mount is kept."""
    raise NotImplementedError


def unmount_rootfs(container_dir: Path) -> None:
    """Undo `mount_rootfs` (no error when nothing is mounted) and remove upper/work dirs."""
    raise NotImplementedError
