"""The highest signed version accepted per source and per pod, kept crash-safely, so an older signed body is refused.

A record is `{"version": N or null, "digest": sha256}` under a key:
`file:<path>` or `url:<url>` for a manifest (with `"pods"`, the names it
held), `pod:<namespace>/<name>` for each pod it holds (so an old signed
manifest copied in under a new file name is still a replay for the pods it
names). A deletion is a signed fact too: a manifest that is gone, and a pod
no manifest holds any more, keep their record with `"deleted": true`, a
tombstone that refuses the same or an older version, the exact body
included; only a newer signed version brings them back. The decision
(`replay_problem`) is pure; `VersionStore` keeps the records in one JSON file
written with `state.write_atomic`, so a power cut leaves the old or the new
records.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from edgelet.state import write_atomic
from edgelet.util.log import get_logger

log = get_logger(__name__)

VERSIONS_FILE = "versions.json"


def replay_problem(recorded: Any, version: int | None, digest: str, *, same_body_only: bool) -> str | None:
    """Why a body signed with `version` cannot follow what `recorded` says was accepted, or None (pure).

    The accepted body itself (same digest) is always fine: it is read again at
    every rescan and restart. `same_body_only` (a manifest's own key) also
    refuses a different body under the same version; a pod's key refuses only
    strictly older versions (one version may carry several files' pods).
    """
    if not isinstance(recorded, Mapping):
        return None
    if recorded.get("deleted"):
        return _tombstone_problem(recorded, version, digest)
    if recorded.get("digest") == digest:
        return None
    last = recorded.get("version")
    if not isinstance(last, int):
        return None  # nothing versioned accepted yet: no order to keep
    if version is None:
        return f"the body carries no version, version {last} was accepted before"
    if version < last:
        return f"version {version} is older than version {last}, accepted before"
    if version == last and same_body_only:
        return f"version {version} was accepted before for another body"
    return None


def _tombstone_problem(recorded: Mapping[str, Any], version: int | None, digest: str) -> str | None:
    """A deleted manifest or pod: the same or an older version stays deleted (pure)."""
    last = recorded.get("version")
    if isinstance(last, int):
        if version is None:
            return f"the body carries no version, and version {last} was deleted: only a newer version brings it back"
        if version <= last:
            return f"version {version} was deleted (at version {last}): only a newer version brings it back"
        return None
    if recorded.get("digest") == digest:
        return "this body was deleted: only a newer signed version brings it back"
    return None  # an unversioned body was deleted: without versions only that body is known


class VersionStore:
    """Records in `<dir>/versions.json`; thread-safe (sources verify in worker threads)."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / VERSIONS_FILE
        self._lock = threading.Lock()
        self._records: dict[str, dict[str, Any]] = self._load()

    def _load(self) -> dict[str, dict[str, Any]]:
        try:
            doc = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            # Refusing every manifest would stop the device; starting afresh only reopens replays until
            # the next accepted version, and the operator is told.
            log.error("Cannot read the signed-version records; starting without them", exc, path=str(self.path))
            return {}
        return {k: v for k, v in doc.items() if isinstance(v, dict)} if isinstance(doc, dict) else {}

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            return self._records.get(key)

    def problem(self, source_key: str, pod_keys: Iterable[str], version: int | None, digest: str) -> str | None:
        """The first replay problem of a body for its source and pods, or None."""
        with self._lock:
            found = replay_problem(self._records.get(source_key), version, digest, same_body_only=True)
            if found:
                return found
            for key in pod_keys:
                found = replay_problem(self._records.get(key), version, digest, same_body_only=False)
                if found:
                    return f"{key.removeprefix('pod:')}: {found}"
        return None

    def record(
        self, keys: Iterable[str], version: int | None, digest: str, pods: Mapping[str, Iterable[str]] | None = None
    ) -> None:
        """Remember an accepted body for each key (never lowering a version; a tombstone is lifted) and write
        the file if it changed. `pods` gives a manifest key the names of the pods it holds."""
        with self._lock:
            changed = False
            for key in keys:
                old = self._records.get(key) or {}
                old_version = old.get("version")
                new_version = version
                if isinstance(old_version, int) and (version is None or version < old_version):
                    new_version = old_version
                entry: dict[str, Any] = {"version": new_version, "digest": digest}
                if pods is not None and key in pods:
                    entry["pods"] = sorted(pods[key])
                if old != entry:
                    self._records[key] = entry
                    changed = True
            if changed:
                self._write()

    def revoke(self, keys: Iterable[str]) -> None:
        """Turn the records of `keys` into tombstones (deleted, version and digest kept) and write the file."""
        with self._lock:
            changed = False
            for key in keys:
                old = self._records.get(key)
                if old is not None and not old.get("deleted"):
                    self._records[key] = {**old, "deleted": True}
                    changed = True
            if changed:
                self._write()

    def live_manifests(self, prefix: str) -> dict[str, list[str]]:
        """Manifest keys starting with `prefix` that are not deleted, with the pod names each held."""
        with self._lock:
            return {
                key: [str(p) for p in rec.get("pods") or ()]
                for key, rec in self._records.items()
                if key.startswith(prefix) and not rec.get("deleted")
            }

    def _write(self) -> None:
        write_atomic(self.path, json.dumps(self._records, sort_keys=True).encode())
