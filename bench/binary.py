"""The frozen edgelet against the venv: size, cold/warm start, start to /healthz 200, RSS with pods, cold --runonce.

Run as root after `make binary-onedir` (and with PyInstaller in the venv: `make binary`):
`.venv/bin/python bench/binary.py [--pods 20] [--reps 5] [--skip-rss] [--size-only]`.

The one-file build is made again here with its unpack dir under the bench's
temp dir (EDGELET_RUNTIME_TMPDIR), so the bench never writes under
/var/lib/edgelet; its size is that of dist/edgelet.
Every figure is printed for the one-file build, the one-dir
build (dist/onedir/edgelet/) and, as the baseline, the source in the venv
(`python -m edgelet`). "Cold" drops the page cache first
(`sync; echo 3 > /proc/sys/vm/drop_caches`), as after a boot.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import REPO, Bench, drop_caches, machine, pod_manifest

ONEFILE = REPO / "dist" / "edgelet"
ONEDIR = REPO / "dist" / "onedir" / "edgelet" / "edgelet"
SAMPLES = REPO / "manifests.d"


PYINSTALLER = Path(sys.executable).parent / "pyinstaller"


def build_onefile(work: Path) -> Path | None:
    """dist/edgelet as `make binary` builds it, but unpacking under `work` instead of /var/lib/edgelet."""
    if not PYINSTALLER.exists():
        return None
    env = {**os.environ, "EDGELET_RUNTIME_TMPDIR": str(work / "unpack")}
    subprocess.run(
        [
            str(PYINSTALLER),
            "--noconfirm",
            "--clean",
            "--log-level",
            "WARN",
            "--distpath",
            str(work / "dist"),
            "--workpath",
            str(work / "build"),
            str(REPO / "build.spec"),
        ],
        check=True,
        env=env,
        cwd=REPO,
        capture_output=True,
    )
    return work / "dist" / "edgelet"


def variants() -> dict[str, list[str]]:
    found = {"venv": [sys.executable, "-m", "edgelet"]}
    if ONEFILE.exists():
        found["one-file"] = [str(ONEFILE)]
    if ONEDIR.exists():
        found["one-dir"] = [str(ONEDIR)]
    return found


def tree_size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def timed_run(argv: list[str], cwd: Path) -> float:
    t = time.monotonic()
    subprocess.run(argv, cwd=cwd, env={}, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - t


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VariantBench(Bench):
    """Bench whose agent is `command` (a frozen binary or the venv) instead of always the venv."""

    def __init__(self, name: str, command: list[str]) -> None:
        super().__init__(name)
        self.command = command

    def argv(self, *extra: str) -> list[str]:
        return [*self.command, *super().argv(*extra)[3:]]  # Bench.argv starts with python -m edgelet


def healthz_ms(command: list[str], *, cold: bool) -> float | None:
    """Start the agent and poll /healthz: ms from exec to the first 200 (None if it never answers)."""
    b = VariantBench("healthz", command)
    port = free_port()
    try:
        if cold:
            drop_caches()
        t0 = time.monotonic()
        proc = b.start_agent("--healthz-port", str(port))
        url = f"http://127.0.0.1:{port}/healthz"
        while time.monotonic() - t0 < 30 and proc.poll() is None:
            try:
                with urllib.request.urlopen(url, timeout=1) as resp:
                    if resp.status == 200:
                        return (time.monotonic() - t0) * 1000
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.005)
        return None
    finally:
        b.close()


def process_rss_mb(pid: int) -> float:
    """RSS of `pid` plus its edgelet children (the one-file bootloader's agent), in MB."""
    total = 0
    pids = [pid]
    children = Path(f"/proc/{pid}/task/{pid}/children")
    if children.exists():
        for child in children.read_text().split():
            if Path(f"/proc/{child}/exe").resolve() == Path(f"/proc/{pid}/exe").resolve():
                pids.append(int(child))
    for p in pids:
        for line in Path(f"/proc/{p}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total / 1024


def rss_with_pods(command: list[str], pods: int, settle: float) -> tuple[float, float, int]:
    import json

    b = VariantBench("rss", command)
    try:
        proc = b.start_agent()
        time.sleep(settle)
        idle = process_rss_mb(proc.pid)
        for i in range(pods):
            b.put_manifest(f"p{i}.yaml", pod_manifest(f"p{i}", "exec sleep 3600"))
        deadline = time.monotonic() + 180
        running = 0
        while time.monotonic() < deadline:
            try:
                snap = json.loads((b.paths.root_dir / "state" / "pods.json").read_text())
                running = sum(1 for r in snap["pods"] if r["status"] == "Running")
            except (OSError, ValueError):
                running = 0
            if running >= pods:
                break
            time.sleep(0.5)
        time.sleep(settle)
        return idle, process_rss_mb(proc.pid), running
    finally:
        b.close()


def runonce_cold_s(command: list[str]) -> tuple[float, int]:
    b = VariantBench("runonce", command)
    try:
        for sample in SAMPLES.glob("*.yaml"):
            shutil.copy(sample, b.manifests / sample.name)
        drop_caches()
        t = time.monotonic()
        out = subprocess.run(b.argv("--runonce", "--runonce-timeout", "120s"), capture_output=True, cwd=REPO)
        return time.monotonic() - t, out.returncode
    finally:
        b.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pods", type=int, default=20)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--settle", type=float, default=3.0)
    ap.add_argument("--skip-rss", action="store_true")
    ap.add_argument(
        "--size-only",
        action="store_true",
        help="only the sizes: no start, no drop_caches (which slows everything else on the machine)",
    )
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench/binary.py: run as root (drop_caches, runc)")
    global ONEFILE
    work = Path(tempfile.mkdtemp(prefix="edgelet-bench-binary-"))
    try:
        ONEFILE = build_onefile(work) or work / "none"
        run_all(args)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_all(args: argparse.Namespace) -> None:
    found = variants()
    print(f"machine: {machine()}")
    print("size:")
    if ONEFILE.exists():
        print(f"  one-file (as dist/edgelet):    {ONEFILE.stat().st_size / 1e6:6.1f} MB")
    if ONEDIR.exists():
        print(f"  one-dir dist/onedir/edgelet/:  {tree_size(ONEDIR.parent) / 1e6:6.1f} MB")
    if len(found) == 1:
        print("  (no frozen build: make binary binary-onedir)")
    if args.size_only:
        return

    outside = Path("/")  # never from the checkout: nothing may come from the repository
    print(f"`edgelet version` (includes runc --version and conmon --version), median of {args.reps}, empty env:")
    for name, command in found.items():
        argv = [*command, "version", "--config", "/dev/null"]
        cold = []
        for _ in range(args.reps):
            drop_caches()
            cold.append(timed_run(argv, outside))
        warm = [timed_run(argv, outside) for _ in range(args.reps)]
        print(
            f"  {name:9s} cold {statistics.median(cold) * 1000:6.0f} ms   warm {statistics.median(warm) * 1000:6.0f} ms"
        )

    print("agent start to /healthz 200 (median of 3):")
    for name, command in found.items():
        cold = [healthz_ms(command, cold=True) for _ in range(3)]
        warm = [healthz_ms(command, cold=False) for _ in range(3)]
        if None in cold or None in warm:
            print(f"  {name:9s} /healthz never answered 200 (server not in this build?)")
            continue
        print(f"  {name:9s} cold {statistics.median(cold):6.0f} ms   warm {statistics.median(warm):6.0f} ms")

    if not args.skip_rss:
        print(f"agent RSS (one-file: bootloader + agent), idle and with {args.pods} pods:")
        for name, command in found.items():
            idle, loaded, running = rss_with_pods(command, args.pods, args.settle)
            print(f"  {name:9s} idle {idle:5.1f} MB   {running} pods {loaded:5.1f} MB")

    print("--runonce of manifests.d from a cold page cache (fresh dirs, image import included):")
    for name, command in found.items():
        seconds, rc = runonce_cold_s(command)
        print(f"  {name:9s} {seconds:5.2f} s  (exit {rc})")


if __name__ == "__main__":
    main()
