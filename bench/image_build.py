"""Where the Raspberry Pi image build's time goes: `make image` (and `make test-image`) timed step by step,
from scratch (empty caches, no arm64 .deb) or with the caches of an earlier run.

Each step is the span between the `==> HH:MM:SS` lines that packaging/build-image.sh and build-arm64.sh print
(build-arm64.sh runs beside the base root, so its steps overlap the image's). Emulation (qemu-user) dominates:
the figures depend on the machine and its load, printed with them.

Run as root from the checkout:
  .venv/bin/python bench/image_build.py --fresh          # empty IMAGE_BASE_CACHE (a temp dir), .deb rebuilt
  .venv/bin/python bench/image_build.py --fresh --cache-dir /var/cache/edgelet-image   # the same into an empty
                                                         # (or absent) dir, kept warm for the next builds
  .venv/bin/python bench/image_build.py                  # the caches in /var/cache/edgelet-image as they are
  .venv/bin/python bench/image_build.py --test-image     # then `make test-image` too
  .venv/bin/python bench/image_build.py --log LOG [--log LOG2]   # only read logs of a build already run
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import machine

REPO = Path(__file__).resolve().parents[1]
STEP = re.compile(r"^==> (\d\d):(\d\d):(\d\d) (.*)$")


def steps(text: str) -> list[tuple[int, str]]:
    """(seconds since midnight, step title) of every `==> HH:MM:SS title` line."""
    out = []
    for line in text.splitlines():
        m = STEP.match(line.strip())
        if m:
            out.append((int(m[1]) * 3600 + int(m[2]) * 60 + int(m[3]), m[4]))
    return out


def durations(found: list[tuple[int, str]], end: int | None) -> list[tuple[str, int]]:
    """Each step's span up to the next one (the last one's up to `end`, when known); midnight wraps."""
    spans = []
    for i, (t, title) in enumerate(found):
        nxt = found[i + 1][0] if i + 1 < len(found) else end
        if nxt is not None:
            spans.append((title, (nxt - t) % 86400))
    return spans


def report(name: str, text: str, end: int | None) -> None:
    for title, secs in durations(steps(text), end):
        print(f"  {name:<12} {secs:>5} s  {title[:110]}")


def now_of_day() -> int:
    t = time.gmtime()
    return t.tm_hour * 3600 + t.tm_min * 60 + t.tm_sec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fresh", action="store_true", help="empty base cache and no arm64 .deb: a first CI run")
    ap.add_argument("--test-image", action="store_true", help="also time `make test-image`")
    ap.add_argument("--log", action="append", default=[], help="only report the steps of these logs")
    ap.add_argument("--cache-dir", type=Path, help="with --fresh: this empty or absent IMAGE_BASE_CACHE, kept")
    args = ap.parse_args()
    print(f"machine: {machine()}")
    print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if args.log:
        for path in args.log:
            report(Path(path).name, Path(path).read_text(errors="replace"), None)
        return
    env = dict(os.environ)
    tmp = None
    if args.fresh:
        if args.cache_dir is not None:
            if args.cache_dir.exists() and any(args.cache_dir.iterdir()):
                raise SystemExit(f"--cache-dir {args.cache_dir} is not empty: not a from-scratch run")
            env["IMAGE_BASE_CACHE"] = str(args.cache_dir)
        else:
            tmp = tempfile.mkdtemp(prefix="edgelet-image-bench-")
            env["IMAGE_BASE_CACHE"] = tmp
        for deb in (REPO / "dist").glob("edgelet_*_arm64.deb"):
            deb.unlink()
    # The 1-minute load average every 30 s of the run: the figures are as good as the machine was quiet.
    loads: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            loads.append(os.getloadavg()[0])
            done.wait(30)

    threading.Thread(target=sample, daemon=True).start()
    cache = Path(env.get("IMAGE_CACHE", REPO / "build" / "image-cache"))
    arm64_log = cache / "build-arm64.log"
    arm64_log.unlink(missing_ok=True)
    try:
        t0 = time.monotonic()
        res = subprocess.run(["make", "-C", str(REPO), "image"], env=env, capture_output=True, text=True)
        build = time.monotonic() - t0
        end = now_of_day()
        if res.returncode != 0:
            print(res.stdout[-3000:], res.stderr[-3000:], sep="\n")
            raise SystemExit(f"make image failed ({res.returncode})")
        print(f"make image ({'from scratch' if args.fresh else 'caches kept'}): {build:.0f} s")
        report("build-image", res.stdout, end)
        if arm64_log.exists():
            report("build-arm64", arm64_log.read_text(errors="replace"), None)
        if args.test_image:
            t0 = time.monotonic()
            res = subprocess.run(["make", "-C", str(REPO), "test-image"], env=env, capture_output=True, text=True)
            print(f"make test-image: {time.monotonic() - t0:.0f} s, exit {res.returncode}")
            for line in res.stdout.splitlines():
                if line.startswith("boot to report:"):
                    print(f"  {line}")
            if res.returncode != 0:
                print(res.stdout[-3000:], res.stderr[-3000:], sep="\n")
        done.set()
        if loads:
            print(
                f"1-min load during the run: min {min(loads):.1f}, mean {sum(loads) / len(loads):.1f}, "
                f"max {max(loads):.1f} ({len(loads)} samples)"
            )
        print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
