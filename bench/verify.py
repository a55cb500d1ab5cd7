"""Trusted delivery's cost: signature verification time per manifest (each format) and per image archive, and the
agent's RSS with verification on against off, in the same run (signatures made by the real tools)."""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _harness import REPO, Bench, machine, pod_manifest, running_pods

from edgelet.sources.file import FileSourceState, scan_directory
from edgelet.testing.signing import MinisignKey, SignifyKey, SshKey, missing_tools, trusted_dir
from edgelet.trust.message import MessageReader
from edgelet.trust.verify import Trust
from edgelet.util.clock import RealClock


def vmrss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def median_ms(fn, n: int) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def import_cost() -> tuple[float, float]:
    """(ms, MB of RSS) that importing cryptography's Ed25519 adds, in a fresh interpreter."""
    code = (
        "import time\n"
        "def rss():\n"
        "    return int([l for l in open('/proc/self/status') if l.startswith('VmRSS')][0].split()[1]) / 1024\n"
        "r0 = rss(); t = time.perf_counter()\n"
        "from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey\n"
        "print((time.perf_counter() - t) * 1000, rss() - r0)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    return float(out[0]), float(out[1])


def pod_list(n: int) -> str:
    return "# edgelet-version: 7\napiVersion: v1\nkind: PodList\nitems:\n" + "".join(
        "- " + pod_manifest(f"p{i}", "exec sleep 3600").replace("\n", "\n  ").rstrip() + "\n" for i in range(n)
    )


def manifest_figures(work: Path, n: int) -> None:
    keys = work / "keys"
    mini, signify, ssh = MinisignKey.generate(keys), SignifyKey.generate(keys), SshKey.generate(keys)
    trusted = trusted_dir(work / "trusted", mini, signify, ssh)
    t = time.perf_counter()
    trust = Trust.load(trusted, work / "state", RealClock())
    load_ms = (time.perf_counter() - t) * 1000
    ms, mb = import_cost()
    print(
        f"loading 3 trusted keys: {load_ms:.2f} ms; importing cryptography's Ed25519 (at the first verification): "
        f"{ms:.0f} ms, +{mb:.1f} MB RSS in a fresh interpreter"
    )
    for pods in (1, 10):
        body = work / f"pods{pods}.yaml"
        body.write_text(pod_list(pods))
        data = body.read_bytes()
        sigs = {
            "minisign (prehashed)": mini.sign(body, version=7, out=work / "a.minisig"),
            "minisign -l (legacy)": mini.sign(body, version=7, legacy=True, out=work / "b.minisig"),
            "signify": signify.sign(body, out=work / "c.sig"),
            "ssh-keygen -Y sign": ssh.sign(body, out=work / "d.sig"),
        }
        parts = []
        for name, sig in sigs.items():
            raw = sig.read_bytes()
            trust.check_manifest(data, raw, name)  # warm: the first call imports cryptography
            parts.append(f"{name} {median_ms(lambda: trust.check_manifest(data, raw, name), n):.3f} ms")
        print(f"verify one manifest of {pods} pod(s) ({len(data)} bytes), median of {n}: " + ", ".join(parts))
    # The file source's whole scan of one signed manifest against the same unsigned, as the agent reads it.
    mdir = work / "m"
    mdir.mkdir()
    (mdir / "pods.yaml").write_text(pod_list(10))
    plain = median_ms(lambda: scan_directory(mdir, "bench", FileSourceState()), max(n // 4, 10))
    mini.sign(mdir / "pods.yaml", version=7)
    signed = median_ms(lambda: scan_directory(mdir, "bench", FileSourceState(), trust=trust), max(n // 4, 10))
    print(
        f"file source scan of one 10-pod manifest, median: signed {signed:.2f} ms, unsigned (no keys) {plain:.2f} ms "
        f"({signed - plain:+.2f} ms)"
    )
    return trust, mini, ssh


def check_archive(trust: Trust, path: Path) -> None:
    """An archive's signature check alone: its signature, then one read of the archive for the digests it needs."""
    signature = trust.archive_signature(path)
    with open(path, "rb") as f:
        reader = MessageReader(f, signature.needs.digests, keep_whole=signature.needs.whole)
        reader.drain()
    trust.check_archive(reader.message(), signature)


def archive_figures(trust: Trust, mini: MinisignKey, ssh: SshKey, archive: Path, work: Path, n: int) -> None:
    size_mb = archive.stat().st_size / 1e6
    copy = work / archive.name
    copy.write_bytes(archive.read_bytes())
    baseline = median_ms(lambda: hashlib.sha256(copy.read_bytes()).digest(), n)
    mini.sign(copy)
    a = median_ms(lambda: check_archive(trust, copy), n)
    os.unlink(str(copy) + ".minisig")
    ssh.sign(copy, namespace="edgelet-image")
    b = median_ms(lambda: check_archive(trust, copy), n)
    print(
        f"verify one image archive ({size_mb:.1f} MB, page cache warm), median of {n}: minisign {a:.1f} ms, "
        f"ssh-keygen {b:.1f} ms; the import dir's own sha256 of it (baseline): {baseline:.1f} ms"
    )


def rss_figures(
    b: Bench, mini: MinisignKey, ssh: SshKey, trusted: Path, pods: int, runs: int, settle: float
) -> tuple[list[float], list[float]]:
    for i in range(pods):
        b.put_manifest(f"p{i}.yaml", pod_manifest(f"p{i}", "exec sleep 3600"))
    [archive] = (b.paths.root_dir / "images" / "import").glob("*.tar")
    ssh.sign(archive, namespace="edgelet-image")
    off: list[float] = []
    on: list[float] = []
    for run in range(runs):
        for verify in (False, True):
            sigs = [b.manifests / f"p{i}.yaml.minisig" for i in range(pods)]
            if verify:
                for i, sig in enumerate(sigs):
                    mini.sign(b.manifests / f"p{i}.yaml", version=1 + run, out=b.staging / sig.name)
                    os.rename(b.staging / sig.name, sig)
            else:
                for sig in sigs:
                    sig.unlink(missing_ok=True)
            proc = b.start_agent(*(["--trusted-keys", str(trusted)] if verify else []))
            deadline = time.monotonic() + 180
            while running_pods(b) < pods:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"pods not running; see {b.base / 'agent.log'}")
                time.sleep(0.2)
            time.sleep(settle)
            (on if verify else off).append(vmrss_mb(proc.pid))
            proc.terminate()
            proc.wait(timeout=30)
            b.proc = None
    return off, on


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-n", type=int, default=200, help="verifications per figure")
    ap.add_argument("--pods", type=int, default=10)
    ap.add_argument("--runs", type=int, default=2, help="agent starts per mode (off, on alternate)")
    ap.add_argument("--settle", type=float, default=5.0)
    args = ap.parse_args()
    if missing_tools():
        sys.exit(f"needs {missing_tools()} (make deps)")
    b = Bench("verify")
    try:
        print(f"machine: {machine()}")
        work = b.base / "work"
        work.mkdir()
        trust, mini, ssh = manifest_figures(work, args.n)
        archive_figures(trust, mini, ssh, b.archive, work, max(args.n // 20, 5))
        off, on = rss_figures(b, mini, ssh, work / "trusted", args.pods, args.runs, args.settle)
        print(
            f"agent RSS with {args.pods} pods running, idle {args.settle:g} s, median of {args.runs} starts each "
            f"(alternating): verification off {statistics.median(off):.1f} MB ({', '.join(f'{x:.1f}' for x in off)}), "
            f"on {statistics.median(on):.1f} MB ({', '.join(f'{x:.1f}' for x in on)}): "
            f"{statistics.median(on) - statistics.median(off):+.1f} MB"
        )
    finally:
        b.close()


if __name__ == "__main__":
    os.chdir(REPO)
    main()
