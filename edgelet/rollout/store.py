"""The rollout records on disk: one file per static pod with its record and the specs of the versions it names.

Written with `write_atomic` before each step, so a power cut leaves the
previous or the next record, and the agent that starts after it takes the
same decision from it. The specs of the last good version and of the target
are kept here because no source holds the last good one any more.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from edgelet.rollout.decide import Record
from edgelet.state import write_atomic
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.api.types import Pod

log = get_logger(__name__)


class StoredRollout(msgspec.Struct, kw_only=True):
    record: Record
    pods: dict[str, Any] = {}  # hash -> the Pod as JSON (only the versions the record names)
    # The gate clock when it was written (rollout.decide.gate_clock_offset): the boot, the offset of gate time
    # from that boot's monotonic clock, and the gate time then. "" for a record whose times are wall times.
    boot_id: str = ""
    gate_offset: float = 0.0
    saved_gate: float = 0.0


def rollout_dir(root_dir: Path | str) -> Path:
    return Path(root_dir) / "state" / "rollout"


def _file(directory: Path, name: str) -> Path:
    # Names hold a "/" and may be long: the file is named by a digest, the name is inside.
    return directory / (hashlib.sha256(name.encode()).hexdigest()[:32] + ".json")


def encode_pod(pod: Pod) -> Any:
    return msgspec.to_builtins(pod)


def decode_pod(data: Any) -> Pod:
    from edgelet.api.types import Pod

    return msgspec.convert(data, Pod)


class RolloutStore:
    """Reads and writes the records under `<root>/state/rollout/`."""

    def __init__(self, root_dir: Path | str) -> None:
        self.dir = rollout_dir(root_dir)

    def load(self) -> dict[str, StoredRollout]:
        out: dict[str, StoredRollout] = {}
        if not self.dir.is_dir():
            return out
        for path in sorted(self.dir.glob("*.json")):
            try:
                stored = msgspec.json.decode(path.read_bytes(), type=StoredRollout)
            except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
                # A record that cannot be read is a pod with no last good version: it behaves as today.
                log.warning("Ignoring an unreadable rollout record", path=str(path), err=str(exc))
                continue
            out[stored.record.name] = stored
        return out

    def save(self, stored: StoredRollout, *, durable: bool = True) -> None:
        write_atomic(_file(self.dir, stored.record.name), msgspec.json.encode(stored), durable=durable)

    def delete(self, name: str) -> None:
        _file(self.dir, name).unlink(missing_ok=True)


def read_records(root_dir: Path | str) -> list[Record]:
    """Every record, for the CLI while no agent runs."""
    return [s.record for s in RolloutStore(root_dir).load().values()]


__all__ = ["RolloutStore", "StoredRollout", "decode_pod", "encode_pod", "read_records", "rollout_dir"]
