"""Signed registry images: the time to verify one image's cosign signature, the pull time of the same image with and
without a signature policy, and the agent's RSS with verification on against off, all in one run.

Run as root: `.venv/bin/python bench/verify_image.py [--runs 5] [--mib 10] [--no-agent]`.

A loopback docker-registry serves busybox plus one gzip'd layer of MIB MiB of random data, signed as
`cosign sign --key` stores it (ECDSA P-256, the `sha256-<digest>.sig` tag). Pulls alternate between a
Puller without a policy and one whose policy requires the signature (fresh store each time, so both
download and unpack everything). The verification time is that of trust.cosign.enforce inside those
pulls (the `.sig` manifest and payload requests, the ECDSA check and the payload parsing); the
in-memory part (ECDSA verify + parse, no requests) is timed alone as well. With the agent, one pod
runs that image under `edgelet` without and then with `--signature-policy`, and the agent's RSS and
PSS are read once the pod runs, and once more after the agent with the policy restarts over the
running pod (the image present, so nothing is verified). Everything started is stopped and every temp dir removed on exit.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import IMAGE, Bench, machine, memory_mb, pod_manifest, running_pods

from edgelet.images.puller import Puller
from edgelet.images.store import ImageStore
from edgelet.testing.cosign import CosignKey, push_signatures, simple_signing
from edgelet.trust import cosign
from edgelet.trust.policy import evaluate, load_policy
from tests.integration.registry import Layout, Registry, big_file_layer, busybox_tar

REPO_TAG = "bench/signed:1"


def setup(base: Path, mib: int) -> tuple[Registry, Path, str]:
    """Registry with the signed image; returns it, the policy file and the image's manifest digest."""
    reg = Registry(base / "reg")
    reg.start()
    lay = Layout(base / "layout")
    desc = lay.image([(busybox_tar(), True), (big_file_layer("data/random.bin", mib << 20), True)])
    lay.tag(desc)
    reg.push_layout(lay.dir, REPO_TAG)
    key = CosignKey()
    ref = f"{reg.host}/{REPO_TAG}"
    push_signatures(reg.host, REPO_TAG.split(":")[0], desc["digest"], [key.sign(simple_signing(ref, desc["digest"]))])
    policy = base / "policy.json"
    policy.write_text(
        json.dumps(
            {
                "default": [{"type": "reject"}],
                "transports": {
                    "docker": {
                        reg.host: [{"type": "sigstoreSigned", "keyPath": str(key.write_public(base / "cosign.pub"))}]
                    }
                },
            }
        )
    )
    return reg, policy, desc["digest"]


class Timed:
    """Wraps trust.cosign.enforce (what the puller calls) to record how long each verification took."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._real = cosign.enforce

    def __call__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        try:
            return self._real(*args, **kwargs)
        finally:
            self.times.append(time.perf_counter() - t0)


def pulls(reg: Registry, policy_path: Path, base: Path, runs: int) -> tuple[list[float], list[float], list[float]]:
    policy = load_policy(policy_path)
    timed = Timed()
    cosign.enforce = timed  # type: ignore[assignment]
    plain, verified = [], []
    ref = f"{reg.host}/{REPO_TAG}"
    try:
        for i in range(runs):  # interleaved, so page cache and CPU frequency treat both alike
            for with_policy, out in ((False, plain), (True, verified)):
                store_dir = base / f"store-{i}-{with_policy}"
                t0 = time.perf_counter()
                rec = Puller(ImageStore(store_dir), signature_policy=policy if with_policy else None).pull_sync(ref)
                out.append(time.perf_counter() - t0)
                assert (rec.layers[-1] / "data" / "random.bin").is_file()
                shutil.rmtree(store_dir)
    finally:
        cosign.enforce = timed._real  # type: ignore[assignment]
    assert len(timed.times) == runs
    return plain, verified, timed.times


def in_memory(digest: str, host: str, n: int = 500) -> float:
    """Median seconds of one ECDSA verify + payload parse + identity match (cosign.judge_signature)."""
    key = CosignKey()
    ref = f"{host}/{REPO_TAG}"
    sig = key.sign(simple_signing(ref, digest))
    base = Path(tempfile.mkdtemp(prefix="edgelet-bench-verify-key-"))
    try:
        policy = base / "p.json"
        policy.write_text(
            json.dumps({"default": [{"type": "sigstoreSigned", "keyPath": str(key.write_public(base / "k.pub"))}]})
        )
        req = evaluate(load_policy(policy), ref).requirements[0]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        assert cosign.judge_signature(req, ref, digest, sig.payload, sig.signature) is None
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def import_cost(n: int = 5) -> float:
    """Median seconds a fresh interpreter takes to import what the first verification imports."""
    code = (
        "import time; import edgelet.trust.cosign; t = time.perf_counter(); "
        "from cryptography.exceptions import InvalidSignature; "
        "from cryptography.hazmat.primitives import hashes; "
        "from cryptography.hazmat.primitives.asymmetric import ec; "
        "from cryptography.hazmat.primitives.serialization import load_pem_public_key; "
        "print(time.perf_counter() - t)"
    )
    times = []
    for _ in range(n):
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=Path(__file__).resolve().parent.parent,
            check=True,
        )
        times.append(float(out.stdout))
    return statistics.median(times)


def agent_rss(reg: Registry, policy: Path | None, settle: float) -> list[tuple[float, float]]:
    """RSS and PSS (MB) of an agent running one pod of the registry image, once the pod runs, then of the agent
    restarted over that running pod (the image present: nothing pulled, nothing verified)."""
    b = Bench("verify")
    flags = ["--signature-policy", str(policy)] if policy else []
    try:
        proc = b.start_agent(*flags)
        b.put_manifest("p.yaml", pod_manifest("p", "exec sleep 3600").replace(IMAGE, f"{reg.host}/{REPO_TAG}"))
        deadline = time.monotonic() + 180
        while running_pods(b) < 1:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the pod did not start; see the agent log above")
            time.sleep(0.5)
        time.sleep(settle)
        out = [memory_mb(proc.pid)]
        proc.kill()
        proc.wait()
        proc = b.start_agent(*flags)
        time.sleep(2 * settle)
        if proc.poll() is not None or running_pods(b) < 1:
            raise RuntimeError("the restarted agent lost the pod; see the agent log above")
        out.append(memory_mb(proc.pid))
        return out
    finally:
        b.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--mib", type=int, default=10, help="size of the random layer in MiB")
    ap.add_argument("--settle", type=float, default=5.0)
    ap.add_argument("--no-agent", action="store_true", help="skip the agent RSS part (needs root, runc, conmon)")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="edgelet-bench-verify-"))
    reg = None
    try:
        reg, policy, digest = setup(base, args.mib)
        plain, verified, verify = pulls(reg, policy, base, args.runs)
        mem = in_memory(digest, reg.host)
        cold = import_cost()
        rss = None if args.no_agent else (agent_rss(reg, None, args.settle), agent_rss(reg, policy, args.settle))
    finally:
        if reg is not None:
            reg.stop()
        shutil.rmtree(base, ignore_errors=True)
    p, v, t = statistics.median(plain), statistics.median(verified), statistics.median(verify)
    print(f"machine: {machine()}")
    print(f"image: busybox + {args.mib} MiB random layer, one cosign signature (ECDSA P-256); {args.runs} pulls each")
    print(
        f"verification per image (enforce: .sig manifest + payload over loopback, ECDSA, checks): median "
        f"{t * 1e3:.2f} ms  runs {', '.join(f'{x * 1e3:.2f}' for x in verify)}"
    )
    print(f"  of which in memory (ECDSA verify + payload parse + identity match): median {mem * 1e6:.0f} us")
    print(
        f"  the first verification after start also imports cryptography: median {cold * 1e3:.1f} ms "
        "(fresh interpreter)"
    )
    print(f"pull+unpack without policy: median {p:.3f} s  runs {', '.join(f'{x:.3f}' for x in plain)}")
    print(f"pull+unpack with policy:    median {v:.3f} s  runs {', '.join(f'{x:.3f}' for x in verified)}")
    print(f"difference of the medians: {(v - p) * 1e3:+.1f} ms ({(v / p - 1) * 100:+.1f}%)")
    if rss is not None:
        [(r0, s0), (q0, t0)], [(r1, s1), (q1, t1)] = rss
        print(f"agent that pulled the image for its pod, verification off: RSS {r0:.1f} MB, PSS {s0:.1f} MB")
        print(
            f"agent that pulled the image for its pod, verification on:  RSS {r1:.1f} MB, PSS {s1:.1f} MB "
            f"(RSS {r1 - r0:+.1f} MB, PSS {s1 - s0:+.1f} MB: the cryptography package, loaded to verify)"
        )
        print(f"restarted over the running pod (image present), off:       RSS {q0:.1f} MB, PSS {t0:.1f} MB")
        print(
            f"restarted over the running pod (image present), on:        RSS {q1:.1f} MB, PSS {t1:.1f} MB "
            f"(RSS {q1 - q0:+.1f} MB: nothing to verify, cryptography not loaded)"
        )


if __name__ == "__main__":
    main()
