"""A signed image archive's import from the import directory: wall time and bytes read from the archive.

The same run can time other trees' code for comparison (`--other-tree DIR`, repeatable, e.g. an export of the
commit before): each round imports the same minisign-signed archive (a busybox image plus an incompressible layer
of `--mb` MiB) into a fresh store, alternating trees, and reports the medians. Bytes read are the process's
`rchar` (/proc/self/io) during the scan, in archives' worth: the store's own unpacking reads each layer blob once
more (about 1.0x of an archive that is mostly one layer), the rest is how often the archive itself was read.

Run as root: `.venv/bin/python bench/import_archive.py [--mb 100] [--rounds 3] [--other-tree DIR ...]`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
from pathlib import Path
from edgelet.images.importdir import ImportDir
from edgelet.images.store import ImageStore
from edgelet.trust.verify import Trust
from edgelet.util.clock import RealClock

imp, work, trusted = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
clock = RealClock()
store = ImageStore(work / "store", clock=clock)
trust = Trust.load(trusted, work / "trust", clock)
d = ImportDir(imp, store, work / "imported.json", clock=clock, trust=trust)

def rchar():
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])

r0, t0 = rchar(), time.perf_counter()
n = d.scan()
t1, r1 = time.perf_counter(), rchar()
print(json.dumps({"images": n, "seconds": t1 - t0, "rchar": r1 - r0}))
"""


def drop_from_page_cache(path: Path) -> None:
    """The archive's pages out of the page cache (this file only), so its first read comes from the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def run(tree: Path, imp: Path, trusted: Path) -> dict:
    with tempfile.TemporaryDirectory(prefix="edgelet-bench-import-") as work:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(imp), work, str(trusted)],
            env=env,
            check=True,
            cwd=work,
            capture_output=True,
            text=True,
            timeout=600,
        )
        result = json.loads(out.stdout.strip().splitlines()[-1])
        if result["images"] != 1:
            raise SystemExit(f"{tree}: imported {result['images']} images: {out.stderr[-2000:]}")
        return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cold", action="store_true", help="drop the archive from the page cache before each import")
    ap.add_argument(
        "--other-tree",
        type=Path,
        action="append",
        default=[],
        help="another tree to time in the same run (e.g. the code before); repeatable",
    )
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from edgelet.testing.images import build_busybox_image
    from edgelet.testing.signing import MinisignKey, trusted_dir

    with tempfile.TemporaryDirectory(prefix="edgelet-bench-archive-") as tmp:
        base = Path(tmp)
        imp = base / "import"
        imp.mkdir()
        archive = build_busybox_image(
            imp / "big.tar", name="edgelet.local/big:1", extra_layers=[{"data/blob": os.urandom(args.mb << 20)}]
        )
        key = MinisignKey.generate(base / "k")
        key.sign(archive)
        trusted = trusted_dir(base / "trusted", key)
        size = archive.stat().st_size
        trees = {"this tree": REPO, **{f"other {i + 1}": t.resolve() for i, t in enumerate(args.other_tree)}}
        results: dict[str, list[dict]] = {name: [] for name in trees}
        for _ in range(args.rounds):
            for name, tree in trees.items():
                if args.cold:
                    drop_from_page_cache(archive)
                results[name].append(run(tree, imp, trusted))
        cache = "cold: dropped from the page cache before each import" if args.cold else "page cache warm"
        print(
            f"archive {size / 1e6:.1f} MB (minisign-signed), {args.rounds} rounds, {cache}, "
            f"load {os.getloadavg()[0]:.1f}"
        )
        for name, rs in results.items():
            secs = statistics.median(r["seconds"] for r in rs)
            reads = statistics.median(r["rchar"] for r in rs) / size
            print(f"{name:>10} ({trees[name]}): import {secs:.2f} s median, bytes read {reads:.2f}x the archive")


if __name__ == "__main__":
    main()
