"""Self-update's times under real systemd on the emulated Pi, read from the guest's journal in `make test-image`'s logs.

`make test-image` (packaging/test-image.sh) reports the update's journal lines with the guest's monotonic
timestamps (`IMAGE-TEST update-times:`, journalctl -o short-monotonic) and the moment the broken release was
renamed into the card's update folder (`IMAGE-TEST broken-dropped:`, /proc/uptime). This prints, on the guest's
clock (TCG emulation on the build host: a Pi is 10-30x faster, and the host's load weighs on every figure):

- boot 3: from edgelet.service's first start to `Update committed` (the release put on the card before the boot);
- boot 3, over SSH: from the broken release's drop to the launcher's rollback, and to the restarted agent's
  `An update was rolled back`;
- boot 4 (and each later boot of IMAGE_TEST_POWER_CUTS' chain), after the power cut at its crash point: from
  edgelet.service's first start to the outcome.

Run after `make test-image` (its logs stay in build/image-test):
    .venv/bin/python bench/image_update.py [--logs build/image-test]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

STAMP = re.compile(r"IMAGE-TEST update-times: \[\s*([0-9.]+)\]")


def stamp(log: Path, pattern: str) -> float | None:
    """The guest's monotonic time of the first update-times line of `log` that matches `pattern`."""
    for line in log.read_text(errors="replace").splitlines():
        m = STAMP.search(line)
        if m and re.search(pattern, line):
            return float(m.group(1))
    return None


def text(log: Path, what: str) -> str | None:
    """What the first `IMAGE-TEST what:` line of `log` says."""
    for line in log.read_text(errors="replace").splitlines():
        if f"IMAGE-TEST {what}: " in line:
            return line.split(f"IMAGE-TEST {what}: ", 1)[1].strip()
    return None


def value(log: Path, what: str) -> float | None:
    said = text(log, what)
    return float(said.split()[0]) if said else None


def span(label: str, start: float | None, end: float | None) -> None:
    if start is None or end is None:
        print(f"{label}: n/a (a line is missing from the logs)")
    else:
        print(f"{label}: {end - start:.1f} s (guest {start:.1f} -> {end:.1f})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logs", type=Path, default=Path(__file__).resolve().parent.parent / "build/image-test")
    args = ap.parse_args()
    c3, c3b, c4 = (args.logs / n for n in ("console-3.log", "console-3-broken.log", "console-4.log"))
    missing = [str(p) for p in (c3, c3b, c4) if not p.exists()]
    if missing:
        print(f"no test-image logs: {', '.join(missing)} (run make test-image first)", file=sys.stderr)
        return 1
    print(f"logs: {args.logs} (the guest's clock; emulated board under TCG at the host's load)")
    span("boot 3, agent start -> update committed", stamp(c3, "Starting edgelet"), stamp(c3, "Update committed"))
    dropped = value(c3b, "broken-dropped")
    span("broken release dropped -> launcher's rollback", dropped, stamp(c3b, "edgelet launch: .*rolling back"))
    span("broken release dropped -> rollback recorded by the agent", dropped, stamp(c3b, "was rolled back"))
    cut = 0
    while (cut_log := args.logs / f"console-cut-{cut}.log").exists() and (
        boot := args.logs / f"console-{4 + cut}.log"
    ).exists():
        point = text(cut_log, "cut-point") or "update.trial"
        span(
            f"boot {4 + cut} (after the power cut at {point}), agent start -> outcome",
            stamp(boot, "Starting edgelet"),
            stamp(boot, "Update committed|was rolled back"),
        )
        cut += 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
