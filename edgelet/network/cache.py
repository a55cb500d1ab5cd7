"""What DEL needs of each attachment (network config, ifname, netns, result), kept crash-safely under the root dir.

Written before any container of the pod starts and removed after a
successful DEL; at start, every entry whose sandbox is gone is torn down.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from edgelet.state import write_atomic
from edgelet.util.log import get_logger

log = get_logger(__name__)


@dataclass(frozen=True)
class Entry:
    container_id: str
    netns: str
    ifname: str
    pod_name: str
    pod_namespace: str
    pod_uid: str
    config: dict[str, Any]  # the conflist as used for ADD
    runtime_config: dict[str, Any]
    result: dict[str, Any] | None  # None: written before ADD finished


class Cache:
    def __init__(self, directory: Path) -> None:
        self.dir = directory

    def path(self, container_id: str) -> Path:
        return self.dir / f"{container_id}.json"

    def write(self, entry: Entry, *, replacing: bool = False) -> None:
        """`replacing`: the entry is already on storage and this one adds to it (ADD's result); the
        directory's fsync is skipped, since a power cut that loses the rename leaves the older entry,
        which names everything DEL needs."""
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomic(self.path(entry.container_id), json.dumps(asdict(entry)).encode(), sync_dir=not replacing)

    def read(self, container_id: str) -> Entry | None:
        return self._load(self.path(container_id))

    def _load(self, path: Path) -> Entry | None:
        try:
            doc = json.loads(path.read_text())
            return Entry(**doc)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError) as exc:
            # A torn or foreign file: treated as absent, and said so (what it held is released by the netns going).
            log.warning("Unreadable CNI cache entry; ignoring it", path=str(path), err=str(exc))
            return None

    def remove(self, container_id: str) -> None:
        self.path(container_id).unlink(missing_ok=True)

    def entries(self) -> list[Entry]:
        if not self.dir.is_dir():
            return []
        out = []
        for p in sorted(self.dir.glob("*.json")):
            e = self._load(p)
            if e is not None:
                out.append(e)
        return out
