"""Shared set-up for the benchmarks: temp dirs, the busybox image, an edgelet process, cleanup."""

from __future__ import annotations

import json
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
    # The load says how far the figures can be trusted: the machine may be shared with other work.
    return (
        f"{platform.machine()}, {os.cpu_count()} cores, {cpu}, kernel {platform.release()},"
        f" load average {os.getloadavg()[0]:.1f}"
    )


def compile_bytecode() -> None:
    """Write edgelet's bytecode (__pycache__) as an installed package or the frozen build holds it: with
    PYTHONDONTWRITEBYTECODE set (as on the machines these benches run on) every agent a bench starts would
    otherwise compile each of its modules again, half a second of a cold start that no device pays."""
    import compileall

    compileall.compile_dir(REPO / "edgelet", quiet=1)


class Bench:
    """Temp root/run/log dirs, a unique cgroup parent and the image; `close()` removes everything."""

    def __init__(self, name: str) -> None:
        self.base = Path(tempfile.mkdtemp(prefix=f"edgelet-bench-{name}-"))
        self.paths = RuntimePaths(
            root_dir=self.base / "root",
            run_dir=self.base / "run",
            log_dir=self.base / "log",
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
        # EDGELET_BIN runs a frozen build instead of the source in this venv (its footprint differs).
        agent = [os.environ["EDGELET_BIN"]] if os.environ.get("EDGELET_BIN") else [sys.executable, "-m", "edgelet"]
        return [
            *agent,
            "--pod-manifest-path",
            str(self.manifests),
            "--root-dir",
            str(self.paths.root_dir),
            "--run-dir",
            str(self.paths.run_dir),
            "--log-dir",
            str(self.paths.log_dir),
            "--cgroup-root",
            self.paths.cgroup_root,
            "--hostname-override",
            "bench",
            "--config",
            "/dev/null",
            "--healthz-port",
            "0",
            # Never the machine's /etc/cni: a bench that wants pod networking passes a conf dir of its own.
            f"--cni-conf-dir={self.base / 'no-cni'}",
            *extra,
        ]

    def start_agent(self, *extra: str, source: Path = REPO) -> subprocess.Popen:
        """Run the agent from `source` (`python -m edgelet` there: another checkout's agent for a before/after)."""
        log = open(self.base / "agent.log", "ab")
        self.proc = subprocess.Popen(self.argv(*extra), stdout=log, stderr=subprocess.STDOUT, cwd=source)
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
            if self.proc.poll() is not None:  # it died on its own: show why before the log goes
                log = (self.base / "agent.log").read_text(errors="replace").splitlines()
                print(f"agent exited with {self.proc.returncode}; its log ends:", *log[-80:], sep="\n", file=sys.stderr)
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


def running_pods(b: Bench) -> int:
    """Pods the agent's pods checkpoint shows Running (0 before it has written one)."""
    try:
        snap = json.loads((b.paths.root_dir / "state" / "pods.json").read_text())
    except (OSError, ValueError):
        return 0
    return sum(1 for r in snap["pods"] if r["status"] == "Running")


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


def wait_files(
    directory: Path,
    names: set[str],
    timeout: float = 300.0,
    interval: float = 0.01,
    agent: subprocess.Popen | None = None,
) -> dict[str, float]:
    """Poll `directory` until every name in `names` exists; returns the monotonic time each was first seen.
    With `agent`, fails at once if that process has exited."""
    seen: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while len(seen) < len(names):
        if agent is not None and agent.poll() is not None:
            raise RuntimeError(f"the agent exited ({agent.returncode}) with {len(names) - len(seen)} files missing")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(names) - len(seen)} of {len(names)} files did not appear within {timeout}s")
        now = time.monotonic()
        for n in names.intersection(os.listdir(directory)).difference(seen):
            seen[n] = now
        time.sleep(interval)
    return seen


def drop_caches() -> None:
    """Empty the page cache, as after a boot (`sync; echo 3 > /proc/sys/vm/drop_caches`)."""
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def memory_mb(pid: int) -> tuple[float, float]:
    """VmRSS and PSS of one process, in MB."""
    rss = pss = 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) / 1024
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            pss = int(line.split()[1]) / 1024
    return rss, pss


CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_split(pid: int) -> tuple[float, float]:
    """User+system seconds of the process itself, and of the children it has waited for (runc, ...)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + stime) / CLK_TCK, (cutime + cstime) / CLK_TCK


def stop_containers(b: Bench) -> None:
    """Kill the agent and every container and conmon of the bench, unmount their rootfs and empty the run dir,
    as a reboot does; the root dir (images, bundles, pod dirs) stays."""
    from edgelet.testing.cleanup import kill_processes_mentioning, remove_cgroups, runc_containers, unmount_under

    if b.proc is not None:
        b.proc.kill()
        b.proc.wait()
        b.proc = None
    root = b.paths.runc_root
    for cid in runc_containers(root):
        subprocess.run(["runc", "--root", str(root), "kill", cid, "KILL"], capture_output=True)
    kill_processes_mentioning(str(b.base))
    for cid in runc_containers(root):
        subprocess.run(["runc", "--root", str(root), "delete", "-f", cid], capture_output=True)
    unmount_under(b.base)
    remove_cgroups(b.paths.cgroup_root)
    shutil.rmtree(b.paths.run_dir, ignore_errors=True)
    b.paths.run_dir.mkdir()


NS_FILE = {"network": "net", "mount": "mnt"}


def pause_config(b: Bench, cont_cfg: dict) -> dict:
    """config.json of a catatonit pause process for the pod whose container config is `cont_cfg`, as
    edgelet's `--pod-infra-container` builds it (its own namespaces, the built-in pause rootfs)."""
    from edgelet.api.types import Container, ObjectMeta, Pod, PodSpec
    from edgelet.ocispec import build as ocispec
    from edgelet.runtime.sandbox import PAUSE_ARGS, ensure_pause_rootfs

    pod = Pod(
        metadata=ObjectMeta(name="pause", namespace="default", uid="0" * 32),
        spec=PodSpec(containers=[Container(name="c")]),
    )
    from edgelet.runtime.host import probe_host_facts

    rootfs = ensure_pause_rootfs(b.paths.root_dir, "catatonit")
    ctx = ocispec.SandboxContext(
        rootfs=str(rootfs),
        args=PAUSE_ARGS,
        cgroups_path="/pause",
        hostname=cont_cfg.get("hostname", "pause"),
        annotations={},
        min_oom_score_adj=probe_host_facts().min_oom_score_adj,
    )
    return ocispec.build_sandbox_spec(pod, ctx)


class RawRunc:
    """Edgelet's own bundles (pause sandbox + one container) re-run by hand, the baseline of every bench:
    `runc create` + `runc start` of each, or with `conmon=True` through conmon as edgelet does (the floor of
    any conmon-based agent). The bundles are copied from a pod edgelet made in the same run, so the baseline
    runs exactly the containers edgelet ran; pair `i` runs `sh -c command` with `/out` mounted as edgelet's did."""

    def __init__(self, b: Bench, tag: str, *, conmon: bool = False, alone: bool = False, runtime: str = "runc") -> None:
        """`alone`: the container by itself, in namespaces runc makes for it (a fresh network namespace, no
        pause process): the floor of a sandbox without an infra container. `runtime`: the OCI runtime's binary
        (runc, or crun: the same command line)."""
        import json

        from edgelet.images.store import ImageStore

        self.b, self.tag, self.conmon, self.alone = b, tag, conmon, alone
        pod_dirs = [p for p in (b.paths.root_dir / "pods").iterdir() if (p / "sandbox" / "config.json").exists()]
        pod_dir = sorted(pod_dirs)[0]
        self.cont_cfg = json.loads(sorted(pod_dir.glob("containers/*/*/config.json"))[0].read_text())
        self.sandbox_cfg = json.loads((pod_dir / "sandbox" / "config.json").read_text())
        if "process" not in self.sandbox_cfg:
            # Edgelet ran no pause process (its sandbox is namespaces pinned as files): the baseline's pause
            # sandbox is the one an infra container would be, built as edgelet builds it.
            self.sandbox_cfg = pause_config(b, self.cont_cfg)
        self.layers = ImageStore(b.paths.root_dir / "images").get(IMAGE).layers
        self.root = b.base / f"baseline-{tag}"
        self.runc = [runtime, "--root", str(self.root)]
        # A file, not a pipe: the container's process inherits runc's stdio and would hold a pipe open forever.
        self.errors = open(b.base / f"baseline-{tag}.err", "ab")
        self.runc_path = shutil.which(runtime) or runtime
        self.conmon_path = shutil.which("conmon") or "conmon"
        self.exits = b.base / f"exits-{tag}"
        self.socks = b.base / f"socks-{tag}"
        self.exits.mkdir(exist_ok=True)
        self.socks.mkdir(exist_ok=True)
        self.prepared: dict[int, tuple[Path, str]] = {}
        self.running: set[int] = set()
        self.netns: dict[int, Path] = {}  # pair i's container joins this network namespace (alone only)

    def _dir(self, i: int) -> Path:
        return self.b.base / f"baseline-{self.tag}-bundles" / str(i)

    def prepare(self, i: int, command: str) -> None:
        """Write pair i's two bundles and mount its container's overlay rootfs (what edgelet does before create)."""
        import json

        from edgelet.runtime.rootfs import mount_rootfs

        work = self._dir(i)
        sb, ct = work / "sandbox", work / "ctr"
        sb.mkdir(parents=True)
        ct.mkdir(parents=True)
        scfg = json.loads(json.dumps(self.sandbox_cfg))
        scfg["linux"]["cgroupsPath"] = f"{self.b.paths.cgroup_root}/{self.tag}{i}/sandbox"
        scfg["annotations"] = {}
        (sb / "config.json").write_text(json.dumps(scfg))
        ccfg = json.loads(json.dumps(self.cont_cfg))
        ccfg["root"]["path"] = str(mount_rootfs(self.layers, ct))
        ccfg["linux"]["cgroupsPath"] = f"{self.b.paths.cgroup_root}/{self.tag}{i}/ctr"
        ccfg["process"]["args"] = ["sh", "-c", command]
        ccfg["process"]["terminal"] = False
        ccfg["annotations"] = {}
        self.prepared[i] = (ct, json.dumps(ccfg))

    def _create(self, cid: str, bundle: Path) -> None:
        if not self.conmon:
            subprocess.run(
                [*self.runc, "create", "--bundle", str(bundle), cid],
                check=True,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self.errors,
            )
            return
        import asyncio

        from edgelet.runtime import conmon as cm

        args = cm.ConmonArgs(
            conmon=self.conmon_path,
            runtime=self.runc_path,
            runtime_root=self.root,
            container_id=cid,
            name=cid,
            bundle=bundle,
            log_path=Path("/dev/null"),
            exit_dir=self.exits,
            socket_dir=self.socks,
        )
        asyncio.run(cm.create(args))

    def start(self, i: int) -> None:
        """Create and start the sandbox, point the container's namespaces at it, create and start the container
        (`alone`: only the container, in new namespaces)."""
        import json

        ct, ctext = self.prepared[i]
        if self.alone:
            ccfg = json.loads(ctext)
            ccfg["linux"]["namespaces"] = [{"type": ns["type"]} for ns in ccfg["linux"]["namespaces"]]
            if i in self.netns:
                # A network namespace made beforehand (the CNI baseline's, its plugin chain run by hand).
                for ns in ccfg["linux"]["namespaces"]:
                    if ns["type"] == "network":
                        ns["path"] = str(self.netns[i])
            (ct / "config.json").write_text(json.dumps(ccfg))
            self.running.add(i)
            self._create(f"bc{i}", ct)
            subprocess.run([*self.runc, "start", f"bc{i}"], check=True)
            return
        self._create(f"bs{i}", self._dir(i) / "sandbox")
        self.running.add(i)
        subprocess.run([*self.runc, "start", f"bs{i}"], check=True)
        pid = json.loads(subprocess.run([*self.runc, "state", f"bs{i}"], capture_output=True, check=True).stdout)["pid"]
        ccfg = json.loads(ctext)
        for ns in ccfg["linux"]["namespaces"]:
            if "path" in ns:
                ns["path"] = f"/proc/{pid}/ns/{NS_FILE.get(ns['type'], ns['type'])}"
        (ct / "config.json").write_text(json.dumps(ccfg))
        self._create(f"bc{i}", ct)
        subprocess.run([*self.runc, "start", f"bc{i}"], check=True)

    def remove(self, i: int, *, signal: str = "KILL") -> None:
        """Stop pair i (the container by `signal`, waiting for it to exit), delete both and unmount the rootfs."""
        import json

        from edgelet.runtime.rootfs import unmount_rootfs

        if i in self.running:
            subprocess.run([*self.runc, "kill", f"bc{i}", signal], capture_output=True)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                st = subprocess.run([*self.runc, "state", f"bc{i}"], capture_output=True)
                if st.returncode or json.loads(st.stdout)["status"] == "stopped":
                    break
                time.sleep(0.005)
            for cid in (f"bc{i}", f"bs{i}"):
                subprocess.run([*self.runc, "delete", "--force", cid], capture_output=True)
            self.running.discard(i)
        if i in self.prepared:
            unmount_rootfs(self.prepared.pop(i)[0])
            shutil.rmtree(self._dir(i), ignore_errors=True)

    def close(self) -> None:
        for i in sorted(set(self.prepared) | self.running):
            self.remove(i)
        shutil.rmtree(self.root, ignore_errors=True)
        self.errors.close()


# The agent's loop accounts (edgelet.util.cpuaccount) grouped as the idle figures are read: a line per
# subsystem that wakes an idle agent; what no group names is "other".
CPU_GROUPS = {
    "relists": ("pleg",),
    "probes": ("probes",),
    "gates": ("gates", "rollout-write", "rollout-pull"),
    "API": ("api", "node-api", "mirror", "mirror-sync", "mirror-lease", "mirror-watch", "events"),
    "sync": ("syncloop", "pod-worker"),
}


def loop_account(run_dir: Path) -> dict | None:
    """The agent's event-loop CPU account (GET /debug/cpu on its socket), None when it serves none."""
    from edgelet.cli import client

    try:
        body = client.get(run_dir, "/debug/cpu")
    except client.AgentError:
        return None
    return json.loads(body) if body else None


def cpu_breakdown(before: dict | None, after: dict | None) -> str:
    """The loop's wakeups and each group's callbacks and CPU (on the loop and in the executor's threads) between
    two accounts, then what no line holds: the loop between callbacks (selecting, timers) and other threads."""
    if not before or not after:
        return "loop account: not served by this agent"
    subs0, subs1 = before["subsystems"], after["subsystems"]
    delta = {
        n: (v["calls"] - subs0.get(n, {}).get("calls", 0), v["cpu"] - subs0.get(n, {}).get("cpu", 0.0))
        for n, v in subs1.items()
    }
    grouped: dict[str, list[float]] = {g: [0, 0.0] for g in (*CPU_GROUPS, "other")}
    names: dict[str, list[str]] = {g: [] for g in grouped}
    for n, (calls, cpu) in delta.items():
        own = n.removesuffix(" (thread)")  # its work off the loop, in the executor's threads
        g = next((g for g, members in CPU_GROUPS.items() if own in members), "other")
        grouped[g][0] += calls
        grouped[g][1] += cpu
        if calls:
            names[g].append(f"{n} {calls}/{cpu * 1000:.0f}ms")
    in_loop = sum(cpu for n, (_, cpu) in delta.items() if not n.endswith(" (thread)"))
    in_threads = sum(cpu for n, (_, cpu) in delta.items() if n.endswith(" (thread)"))
    process = after["process_cpu"] - before["process_cpu"]
    loop = after["loop_cpu"] - before["loop_cpu"]
    parts = [f"{g} {c:.0f} callbacks {s * 1000:.1f} ms" for g, (c, s) in grouped.items()]
    detail = "; ".join(f"{g}: {', '.join(v)}" for g, v in names.items() if v)
    return (
        f"loop wakeups {after['wakeups'] - before['wakeups']}; "
        + ", ".join(parts)
        + f"; the loop between callbacks {max(0.0, loop - in_loop) * 1000:.1f} ms"
        + f", threads outside the executor {max(0.0, process - loop - in_threads) * 1000:.1f} ms\n    ({detail})"
    )
