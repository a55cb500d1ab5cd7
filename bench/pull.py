"""Pull+unpack throughput of a ~50 MB image from a loopback docker-registry: edgelet's Puller into a fresh
store, against `skopeo copy docker://... oci:DIR` + `umoci unpack` of the same image in the same run.

Run as root: `.venv/bin/python bench/pull.py [--runs 3] [--mib 50]`. Prints the median of each and the
throughput ratio edgelet/baseline (target >= 0.8x). The image is busybox plus one gzip'd layer of
random (incompressible) data, built locally and pushed with skopeo; everything started is stopped and
every temp dir removed on exit.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from edgelet.util import openssl

# As in the agent: layer digests by hashlib's own sha256, OpenSSL loaded only for TLS (none here).
openssl.defer()

from _harness import machine  # noqa: E402  (also puts the repo on sys.path)

from edgelet.images.puller import Puller  # noqa: E402
from edgelet.images.store import ImageStore  # noqa: E402
from tests.integration.registry import Layout, Registry, big_file_layer, busybox_tar  # noqa: E402

REPO_TAG = "bench/big:1"


def build_and_push(base: Path, mib: int) -> tuple[Registry, int]:
    """Start the registry, push the image; returns it and the image's compressed size in bytes."""
    reg = Registry(base / "reg")
    reg.start()
    lay = Layout(base / "layout")
    desc = lay.image([(busybox_tar(), True), (big_file_layer("data/random.bin", mib << 20), True)])
    lay.tag(desc)
    reg.push_layout(lay.dir, REPO_TAG)
    size = sum(p.stat().st_size for p in (lay.dir / "blobs" / "sha256").iterdir())
    return reg, size


def edgelet_once(reg: Registry, work: Path) -> float:
    store_dir = work / "store"
    t0 = time.perf_counter()
    rec = Puller(ImageStore(store_dir)).pull_sync(f"{reg.host}/{REPO_TAG}")
    took = time.perf_counter() - t0
    assert (rec.layers[-1] / "data" / "random.bin").is_file()
    shutil.rmtree(store_dir)
    return took


def _run(argv: list[str]) -> None:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {out.stderr[-2000:]}")


def baseline_once(reg: Registry, work: Path) -> float:
    oci, bundle = work / "oci", work / "bundle"
    t0 = time.perf_counter()
    _run(["skopeo", "copy", "--quiet", "--src-tls-verify=false", f"docker://{reg.host}/{REPO_TAG}", f"oci:{oci}:img"])
    _run(["umoci", "unpack", "--image", f"{oci}:img", str(bundle)])
    took = time.perf_counter() - t0
    assert (bundle / "rootfs" / "data" / "random.bin").is_file()
    shutil.rmtree(oci)
    shutil.rmtree(bundle)
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--mib", type=int, default=50, help="size of the random layer in MiB")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="edgelet-bench-pull-"))
    reg = None
    try:
        reg, size = build_and_push(base, args.mib)
        ed, raw = [], []
        for i in range(args.runs):  # interleaved, so page cache and CPU frequency treat both alike
            work = base / f"run{i}"
            work.mkdir()
            ed.append(edgelet_once(reg, work))
            raw.append(baseline_once(reg, work))
    finally:
        if reg is not None:
            reg.stop()
        shutil.rmtree(base, ignore_errors=True)
    mb = size / 1e6
    e, b = statistics.median(ed), statistics.median(raw)
    print(f"machine: {machine()}")
    print(f"image: busybox + {args.mib} MiB random layer, {mb:.1f} MB compressed (gzip), {args.runs} runs each")
    print(
        f"edgelet Puller pull+unpack:       median {e:.3f} s  ({mb / e:.1f} MB/s)  runs {', '.join(f'{x:.3f}' for x in ed)}"
    )
    print(
        f"skopeo copy + umoci unpack:       median {b:.3f} s  ({mb / b:.1f} MB/s)  runs {', '.join(f'{x:.3f}' for x in raw)}"
    )
    print(f"throughput ratio edgelet/baseline: {b / e:.2f}x  (target >= 0.8x)")


if __name__ == "__main__":
    main()
