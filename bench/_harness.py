"""Shared set-up for the benchmarks: temp dirs, the busybox image, an edgelet process, cleanup."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from edgelet.runtime.layout import RuntimePaths  # noqa: E402
from edgelet.testing.cleanup import cleanup_all  # noqa: E402

IMAGE = "edgelet.local/busybox:1.36"


def machine() -> str:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.machine()}, {os.cpu_count()} cores, {cpu}, kernel {platform.release()}"


class Bench:
    """Temp root/run/log dirs, a unique cgroup parent and the image; `close()` removes everything."""

    def __init__(self, name: str) -> None:
        self.base = Path(tempfile.mkdtemp(prefix=f"edgelet-bench-{name}-"))
        self.paths = RuntimePaths(
            root_dir=self.base / "root", run_dir=self.base / "run", log_dir=self.base / "log",
            cgroup_root=f"/edgelet-bench-{uuid.uuid4().hex[:8]}",
        )
        for d in (self.paths.root_dir, self.paths.run_dir, self.paths.log_dir):
            d.mkdir(parents=True)
        self.manifests = self.base / "manifests"
        self.manifests.mkdir()
        self.staging = self.base / "staging"
        self.staging.mkdir()
        from edgelet.testing.images import build_busybox_image

        self.archive = build_busybox_image(self.base / "busybox.oci.tar", name=IMAGE, fmt="oci-archive")
        imp = self.paths.root_dir / "images" / "import"
        imp.mkdir(parents=True)
        shutil.copy(self.archive, imp / self.archive.name)
        self.proc: subprocess.Popen | None = None

    def argv(self, *extra: str) -> list[str]:
        return [
            sys.executable, "-m", "edgelet",
            "--pod-manifest-path", str(self.manifests),
            "--root-dir", str(self.paths.root_dir), "--run-dir", str(self.paths.run_dir),
            "--log-dir", str(self.paths.log_dir), "--cgroup-root", self.paths.cgroup_root,
            "--hostname-override", "bench", "--config", "/dev/null", "--healthz-port", "0",
            # Never the machine's /etc/cni: a bench that wants pod networking passes a conf dir of its own.
            f"--cni-conf-dir={self.base / 'no-cni'}", *extra,
        ]

    def start_agent(self, *extra: str) -> subprocess.Popen:
        log = open(self.base / "agent.log", "ab")
        self.proc = subprocess.Popen(self.argv(*extra), stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        return self.proc

    def put_manifest(self, name: str, text: str) -> float:
        """Atomically rename a manifest into the directory; returns the monotonic time of the rename."""
        tmp = self.staging / name
        tmp.write_text(text)
        t = time.monotonic()
        os.rename(tmp, self.manifests / name)
        return t

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
        cleanup_all(self.base, self.paths.runc_root, self.paths.cgroup_root)


def pod_manifest(name: str, command: str, *, host_dir: str | None = None, restart: str = "Always") -> str:
    vol = ""
    mount = ""
    if host_dir:
        vol = f"""
  volumes:
  - name: out
    hostPath: {{path: {host_dir}, type: Directory}}"""
        mount = """
    volumeMounts:
    - {name: out, mountPath: /out}"""
    return f"""apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  restartPolicy: {restart}
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: {IMAGE}
    command: ["sh", "-c", {command!r}]{mount}{vol}
"""


def percentile(values: list[float], p: float) -> float:
    s = sorted(values)
    k = (len(s) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def wait_file(path: Path, timeout: float = 30.0, interval: float = 0.001) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            return time.monotonic()
        time.sleep(interval)
    raise TimeoutError(f"{path} did not appear within {timeout}s")
