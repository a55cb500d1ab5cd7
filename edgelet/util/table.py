"""The one table printer: left-aligned columns three spaces apart, as kubectl prints them."""

from __future__ import annotations

from collections.abc import Sequence


def format_table(rows: Sequence[Sequence[str]]) -> str:
    """`rows[0]` is the header; every row has as many cells as it."""
    if not rows:
        return ""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows)
