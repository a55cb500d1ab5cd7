"""Eviction thresholds from kubelet's flags: `memory.available<100Mi,nodefs.available<10%`, grace periods, reclaim.

Pure: parsing and the arithmetic of a threshold against a signal's capacity.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from edgelet.api.quantity import QuantityError, parse_quantity
from edgelet.eviction.errors import EvictionConfigError
from edgelet.settings import EVICTION_HARD_DEFAULT
from edgelet.util.duration import parse_duration as duration

MEMORY = "memory.available"
NODEFS = "nodefs.available"
NODEFS_INODES = "nodefs.inodesFree"
IMAGEFS = "imagefs.available"
IMAGEFS_INODES = "imagefs.inodesFree"
PIDS = "pid.available"
SIGNALS = (MEMORY, NODEFS, NODEFS_INODES, IMAGEFS, IMAGEFS_INODES, PIDS)

DEFAULT_HARD = EVICTION_HARD_DEFAULT

# The node condition each signal sets (kubelet's signalToNodeCondition).
CONDITION = {
    MEMORY: "MemoryPressure",
    NODEFS: "DiskPressure",
    NODEFS_INODES: "DiskPressure",
    IMAGEFS: "DiskPressure",
    IMAGEFS_INODES: "DiskPressure",
    PIDS: "PIDPressure",
}
# The resource named in events and the eviction message (kubelet's signalToResource).
RESOURCE = {
    MEMORY: "memory",
    NODEFS: "ephemeral-storage",
    NODEFS_INODES: "inodes",
    IMAGEFS: "ephemeral-storage",
    IMAGEFS_INODES: "inodes",
    PIDS: "pids",
}


@dataclass(frozen=True)
class Value:
    """An absolute quantity (bytes, inodes, pids) or a fraction of the signal's capacity."""

    quantity: int | None = None
    percentage: float | None = None

    def of(self, capacity: int) -> int:
        if self.quantity is not None:
            return self.quantity
        return int((self.percentage or 0.0) * capacity)

    def __str__(self) -> str:
        return f"{self.percentage * 100:g}%" if self.percentage is not None else str(self.quantity)


@dataclass(frozen=True)
class Threshold:
    signal: str
    value: Value
    grace_period: float = 0.0  # seconds the signal must stay below before it counts; 0 for hard thresholds
    min_reclaim: Value = Value(quantity=0)
    hard: bool = True


def _value(flag: str, signal: str, text: str, *, allow_zero: bool = False) -> Value:
    text = text.strip()
    if text.endswith("%"):
        try:
            pct = float(text[:-1])
        except ValueError:
            raise EvictionConfigError(flag, f"{signal}: {text!r} is not a percentage") from None
        if not 0 < pct <= 100 and not (allow_zero and pct == 0):
            raise EvictionConfigError(flag, f"{signal}: {text!r} must be a percentage in (0, 100]")
        return Value(percentage=pct / 100)
    try:
        q = parse_quantity(text)
    except QuantityError as exc:
        raise EvictionConfigError(flag, f"{signal}: {exc}") from exc
    if q < 0 or (q == 0 and not allow_zero):
        raise EvictionConfigError(flag, f"{signal}: {text!r} must be positive")
    return Value(quantity=int(q))


def _pairs(flag: str, text: str, sep: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        signal, found, rest = part.partition(sep)
        signal = signal.strip()
        if not found:
            raise EvictionConfigError(flag, f"{part!r}: expected SIGNAL{sep}VALUE")
        if signal not in SIGNALS:
            raise EvictionConfigError(flag, f"unknown signal {signal!r} (known: {', '.join(SIGNALS)})")
        if any(s == signal for s, _ in out):
            raise EvictionConfigError(flag, f"{signal} given twice")
        out.append((signal, rest))
    return out


def parse_thresholds(text: str, *, flag: str = "eviction-hard", hard: bool = True) -> dict[str, Threshold]:
    """`memory.available<100Mi,nodefs.available<10%` (only `<`, as kubelet) into thresholds by signal."""
    out = {}
    for signal, rest in _pairs(flag, text, "<"):
        out[signal] = Threshold(signal, _value(flag, signal, rest), hard=hard)
    return out


def hard_reserved(eviction_hard: str | None, *, memory_bytes: int, disk_bytes: int) -> dict[str, int]:
    """What the hard thresholds of memory.available and nodefs.available leave out of the Node's allocatable
    (kubelet's node status does so), in bytes by resource; a percentage is of the node's memory or of the
    root dir's filesystem. The app hands this to the mirror as data: the reporter does not parse thresholds."""
    thresholds = parse_thresholds(eviction_hard or "")
    out = {}
    for signal, resource, capacity in ((MEMORY, "memory", memory_bytes), (NODEFS, "ephemeral-storage", disk_bytes)):
        if signal in thresholds:
            out[resource] = thresholds[signal].value.of(capacity)
    return out


def parse_signal_map(text: str, *, flag: str) -> dict[str, str]:
    """`memory.available=1m30s,nodefs.available=500Mi` into raw values by signal."""
    return dict(_pairs(flag, text, "="))


def configure(hard: str, soft: str = "", soft_grace: str = "", min_reclaim: str = "") -> list[Threshold]:
    """Every threshold the flags define, soft ones with their grace periods and every one with its reclaim.

    kubelet refuses a soft threshold without a grace period, and a grace period without its threshold.
    """
    out = list(parse_thresholds(hard).values())
    softs = parse_thresholds(soft, flag="eviction-soft", hard=False)
    graces = parse_signal_map(soft_grace, flag="eviction-soft-grace-period")
    for signal in graces:
        if signal not in softs:
            raise EvictionConfigError("eviction-soft-grace-period", f"{signal} has no soft threshold")
    for signal, th in softs.items():
        if signal not in graces:
            raise EvictionConfigError("eviction-soft", f"{signal} has no grace period (--eviction-soft-grace-period)")
        try:
            grace = duration(graces[signal])
        except ValueError as exc:
            raise EvictionConfigError("eviction-soft-grace-period", f"{signal}: {exc}") from exc
        if grace < 0:
            raise EvictionConfigError("eviction-soft-grace-period", f"{signal}: must not be negative")
        out.append(replace(th, grace_period=grace))
    reclaims = {
        s: _value("eviction-minimum-reclaim", s, v, allow_zero=True)
        for s, v in parse_signal_map(min_reclaim, flag="eviction-minimum-reclaim").items()
    }
    return [replace(t, min_reclaim=reclaims.get(t.signal, t.min_reclaim)) for t in out]
