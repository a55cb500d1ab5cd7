"""Durations in kubelet's flag forms (Go's time.ParseDuration: `20s`, `1m30s`, `500ms`), parsed and shown."""

from __future__ import annotations

import re

_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Go's time.ParseDuration (what kubelet flags use), in seconds: `1m30s` -> 90.0."""
    s = text.strip()
    if s in ("0", "+0", "-0"):
        return 0.0
    sign = 1.0
    if s[:1] in ("+", "-"):
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if not s:
        raise ValueError(f"invalid duration {text!r}")
    total = 0.0
    pos = 0
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        if m is None:
            if re.fullmatch(r"\d+\.?\d*", s[pos:]):
                raise ValueError(f"missing unit in duration {text!r} (e.g. 20s, 1m30s, 500ms)")
            raise ValueError(f"invalid duration {text!r} (e.g. 20s, 1m30s, 500ms)")
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    return sign * total


def format_duration(seconds: float) -> str:
    """The inverse of parse_duration for display: 90 -> `1m30s`, 0.5 -> `500ms`."""
    if seconds == 0:
        return "0s"
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    out = ""
    rest = seconds
    for unit, size in (("h", 3600), ("m", 60)):
        if rest >= size:
            n = int(rest // size)
            out += f"{n}{unit}"
            rest -= n * size
    if rest or not out:
        out += f"{rest:g}s"
    return out
