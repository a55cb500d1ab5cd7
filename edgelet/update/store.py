"""The update's records under `<root>/update/`: the trial record the launcher shares, the history, the pods' snapshot.

`trial` is `key=value` lines, so that `packaging/launch` (POSIX sh) can read
it and rewrite its `attempts=` and `outcome=` lines with sed; every write
goes through `write_atomic` (temp file, fsync, rename, fsync of the
directory) here and `sync` + `mv` there, so a power cut leaves the old or
the new record. `history.json` lists what happened (started, committed,
rolled back with the reason) newest last; the versions rolled back from are
read from it, so a replayed bad release stays refused; entries dropped past
HISTORY_KEEP leave their outcomes in a tally at its head, so the outcome
counters (`/metrics`) never go down. `snapshot.json` is
each container's id and pid as the old agent left them, for the trial's
"adopted without a restart" check.
"""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from edgelet.state import write_atomic
from edgelet.update.decide import PodInstance, TrialRecord
from edgelet.util.log import get_logger

log = get_logger(__name__)

TRIAL_FILE = "trial"
HISTORY_FILE = "history.json"
SNAPSHOT_FILE = "snapshot.json"
URL_VALIDATORS_FILE = "url-validators.json"  # the update URL's last judged release's ETag / Last-Modified
HISTORY_KEEP = 50

STARTED = "started"
COMMITTED = "committed"
ROLLED_BACK = "rolled-back"
REFUSED = "refused"
OPERATOR_ROLLBACK = "operator-rollback"
TALLY = "tally"  # the history's first entry once entries were dropped: {"outcome": "tally", "counts": {...}}


def format_trial(record: TrialRecord) -> bytes:
    lines = []
    for f in fields(record):
        value = str(getattr(record, f.name))
        lines.append(f"{f.name}={' '.join(value.split())}")  # one line per key, whatever the reason holds
    return ("\n".join(lines) + "\n").encode()


def parse_trial(text: str) -> TrialRecord | None:
    """The record, or None when it lacks the keys a trial needs (a torn or foreign file is no trial)."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key not in values:
            values[key] = value
    try:
        return TrialRecord(
            version=int(values["version"]),
            target=values["target"],
            previous=values["previous"],
            previous_version=int(values.get("previous_version") or 0),
            attempts=int(values.get("attempts") or 0),
            outcome=values.get("outcome", ""),
            reason=values.get("reason", ""),
            started=float(values.get("started") or 0),
        )
    except (KeyError, ValueError):
        return None


class UpdateStore:
    """The records of one state directory (`<root>/update`)."""

    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)

    @property
    def trial_path(self) -> Path:
        return self.dir / TRIAL_FILE

    def trial(self) -> TrialRecord | None:
        try:
            text = self.trial_path.read_text(errors="replace")
        except FileNotFoundError:
            return None
        record = parse_trial(text)
        if record is None:
            log.warning("Ignoring a trial record that cannot be read", path=str(self.trial_path))
        return record

    def write_trial(self, record: TrialRecord) -> None:
        write_atomic(self.trial_path, format_trial(record))

    def clear_trial(self) -> None:
        self.trial_path.unlink(missing_ok=True)
        (self.dir / SNAPSHOT_FILE).unlink(missing_ok=True)

    # --- history ---

    def _read(self) -> list[dict[str, Any]]:
        try:
            doc = json.loads((self.dir / HISTORY_FILE).read_bytes())
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            log.error("Cannot read the update history; starting it again", exc, path=str(self.dir / HISTORY_FILE))
            return []
        return [e for e in doc if isinstance(e, dict)] if isinstance(doc, list) else []

    def history(self) -> list[dict[str, Any]]:
        """Every update's entry kept, oldest first (the tally of dropped ones is not an entry)."""
        return [e for e in self._read() if e.get("outcome") != TALLY]

    def outcome_counts(self) -> dict[str, int]:
        """How many entries of each outcome were ever written: the kept ones and the tally of dropped ones."""
        counts: dict[str, int] = {}
        for entry in self._read():
            if entry.get("outcome") == TALLY:
                tally = entry.get("counts")
                for outcome, n in tally.items() if isinstance(tally, dict) else ():
                    if isinstance(n, int):
                        counts[str(outcome)] = counts.get(str(outcome), 0) + n
            else:
                outcome = str(entry.get("outcome", ""))
                counts[outcome] = counts.get(outcome, 0) + 1
        return counts

    def append(self, entry: dict[str, Any]) -> None:
        """Add an entry unless the last one is the same event (a start that crashed after writing it)."""
        history = self.history()
        if history and {k: v for k, v in history[-1].items() if k != "time"} == {
            k: v for k, v in entry.items() if k != "time"
        }:
            return
        counts = self.outcome_counts()
        history.append(entry)
        # Rolled-back versions are never dropped: they keep refusing replays of a bad release.
        barring = (ROLLED_BACK, OPERATOR_ROLLBACK)
        keep = [e for e in history[:-HISTORY_KEEP] if e.get("outcome") in barring] + history[-HISTORY_KEEP:]
        if len(keep) < len(history):
            outcome = str(entry.get("outcome", ""))
            counts[outcome] = counts.get(outcome, 0) + 1
            for e in keep:
                kept = str(e.get("outcome", ""))
                counts[kept] -= 1
            keep.insert(0, {"outcome": TALLY, "counts": {k: n for k, n in sorted(counts.items()) if n}})
        write_atomic(self.dir / HISTORY_FILE, json.dumps(keep, indent=1).encode())

    def rolled_back_versions(self) -> set[int]:
        """Versions rolled back from, by a trial or by the operator: the release left stays on the card or at the
        URL, and would be applied again at once otherwise (a newer one is still taken)."""
        return {
            int(e["version"])
            for e in self.history()
            if e.get("outcome") in (ROLLED_BACK, OPERATOR_ROLLBACK) and isinstance(e.get("version"), int)
        }

    # --- the pods as the old agent left them ---

    def write_snapshot(self, boot_id: str, pods: dict[str, PodInstance], *, lease: bool = False) -> None:
        """The containers as this agent leaves them, and whether it had an apiserver link (a Lease to renew)."""
        doc = {"boot_id": boot_id, "pods": {k: asdict(v) for k, v in pods.items()}, "lease": lease}
        write_atomic(self.dir / SNAPSHOT_FILE, json.dumps(doc, sort_keys=True).encode())

    def snapshot(self, boot_id: str) -> tuple[dict[str, PodInstance], bool]:
        """The pods of this boot's snapshot (a power cut took the containers with it: nothing to compare), and
        whether the old agent had a Lease to renew."""
        try:
            doc = json.loads((self.dir / SNAPSHOT_FILE).read_bytes())
            lease = doc.get("lease") is True
            if doc.get("boot_id") != boot_id:
                return {}, lease
            return {k: PodInstance(str(v["container_id"]), int(v["pid"])) for k, v in doc["pods"].items()}, lease
        except FileNotFoundError:
            return {}, False
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning(
                "Cannot read the pods' snapshot; the trial does not compare them", path=str(self.dir), err=str(exc)
            )
            return {}, False
