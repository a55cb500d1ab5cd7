"""edgelet beside its peers, one interleaved run: podman `kube play` and kubelet v1.20.2 over containerd 1.6.

The same pod (the busybox test image, one container, `touch /out/NAME; exec sleep 3600`) is started by
each system in turn, round-robin, both with `hostNetwork: true` and on a CNI bridge (bridge + host-local
+ portmap + loopback; one bench-only bridge and 10.250.x.0/24 subnet per system). Start latency is from
the manifest's rename into the directory (edgelet, kubelet) or the `podman kube play` call (podman) to
the file the container touched. Then each system keeps 10 hostNetwork pods: the total PSS of its
processes (agent or daemon, per-pod helpers such as conmon or shims, pause; not the workload) and the
CPU of the same processes over 60 s idle, all three in the same window.

Every system runs with its own root, state and sockets under a temp dir: containerd gets a private
config (sandbox_image = a catatonit pause image built here and imported with `ctr images import`),
podman a private containers.conf/storage, so nothing touches /var/lib/containerd, /etc/containerd or
/var/lib/containers; nothing is downloaded. Needs root, podman, containerd and a kubelet from
tools/kubelet.sh (`make bench-peers` installs and builds them). A system that cannot run is reported
and left out. Redraws docs/peers.svg.

`--runtime crun` runs every system on crun (edgelet's default handler, podman's runtime, containerd's runc
shim's BinaryName, the raw baseline), so that a comparison on either runtime stays fair: `make bench-peers` runs it
both ways (on a hybrid cgroup layout, crun's run first moves what the cgroup2 mount holds to v1, as the tests do).
The crun run's chart is docs/peers-crun.svg.

Run: `.venv/bin/python bench/peers.py [--pods 20] [--idle 60] [--keep 10] [--runtime runc|crun]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import IMAGE, REPO, Bench, RawRunc, cpu_breakdown, loop_account, machine, percentile, wait_file

PAUSE_IMAGE = "edgelet.local/pause:catatonit"
KUBELET_NODE = "peers-bench"
SVG = REPO / "docs" / "peers.svg"  # on crun: docs/peers-crun.svg


# ---------------------------------------------------------------- shared pieces


def manifest(name: str, out_dir: Path, *, host_network: bool) -> str:
    hn = "\n  hostNetwork: true" if host_network else ""
    return f"""apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:{hn}
  restartPolicy: Always
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "touch /out/{name}; exec sleep 3600"]
    volumeMounts:
    - {{name: out, mountPath: /out}}
  volumes:
  - name: out
    hostPath: {{path: {out_dir}, type: Directory}}
"""


def conflist(path: Path, name: str, bridge: str, subnet: str, ipam_dir: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / f"10-{name}.conflist").write_text(
        json.dumps(
            {
                "cniVersion": "0.4.0",
                "name": name,
                "plugins": [
                    {
                        "type": "bridge",
                        "bridge": bridge,
                        "isGateway": True,
                        "ipMasq": True,
                        "ipam": {"type": "host-local", "dataDir": str(ipam_dir), "ranges": [[{"subnet": subnet}]]},
                    },
                    {"type": "portmap", "capabilities": {"portMappings": True}},
                    {"type": "loopback"},
                ],
            },
            indent=1,
        )
    )


def build_pause_image(output: Path) -> Path:
    """An OCI archive of the host's static catatonit as `/catatonit -P`: the pause edgelet runs, as an image."""
    from edgelet.testing import images as im

    data = Path(shutil.which("catatonit") or "/usr/bin/catatonit").read_bytes()
    tar = im.build_tar([(im._info("catatonit", tarfile.REGTYPE, 0o755, len(data)), data)])
    layer = im.Layer(tar=tar, blob=im.gzip_bytes(tar))
    cfg = im.build_config([layer], {"Entrypoint": ["/catatonit", "-P"], "Cmd": []})
    with tempfile.TemporaryDirectory(dir=output.parent) as tmp:
        im.write_oci_layout(Path(tmp), PAUSE_IMAGE, [layer], cfg)
        im.tar_directory(Path(tmp), output)
    return output


def proc_table() -> dict[int, tuple[int, str, str]]:
    """pid -> (ppid, comm, cmdline) of every process."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        out[int(d)] = (ppid, comm, cmd)
    return out


def system_pids(marker: str) -> dict[int, str]:
    """pid -> comm of the processes whose command line names `marker` and their descendants, less the
    workload (`sleep`): the agent or daemons, the per-pod helpers and the pause processes."""
    table = proc_table()
    keep = {p for p, (_, _, cmd) in table.items() if marker in cmd and p != os.getpid()}
    grew = True
    while grew:
        new = {p for p, (pp, _, _) in table.items() if pp in keep and p not in keep}
        keep |= new
        grew = bool(new)
    return {p: table[p][1] for p in keep if table[p][1] != "sleep"}


def workloads(marker: str) -> int:
    table = proc_table()
    pids = system_pids(marker)
    return sum(1 for p, (pp, comm, _) in table.items() if comm == "sleep" and pp in pids)


def pods_gone(marker: str) -> bool:
    """No workload and no pause process of the system is left."""
    return not workloads(marker) and "catatonit" not in system_pids(marker).values()


def pss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_ticks(pid: int) -> int:
    """utime+stime of the process and of the children it waited for (runc and the like)."""
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return -1
    return sum(int(x) for x in f[11:15])


def can_lower_oom_score() -> bool:
    """Whether this process may set a negative oom_score_adj (CAP_SYS_RESOURCE); restores the value."""
    p = Path("/proc/self/oom_score_adj")
    old = p.read_text().strip()
    try:
        p.write_text("-1")
    except OSError:
        return False
    p.write_text(old)
    return True


def group(comm: str) -> str:
    if comm == "catatonit":
        return "pause"
    if comm in ("conmon",) or comm.startswith("containerd-shim"):
        return "helpers"
    return "agent"


def run(*argv: str, check: bool = True, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=timeout, env=env)


# ---------------------------------------------------------------- the systems


class Edgelet:
    name = "edgelet"

    def __init__(self, net: tuple[str, str], runtime: str = "runc") -> None:
        self.runtime = runtime
        self.b = Bench("peers")
        self.marker = str(self.b.base)
        self.cni = self.b.base / "cni"
        conflist(self.cni, f"bench-{net[0]}", net[0], net[1], self.b.base / "ipam")

    def start(self) -> None:
        self.b.start_agent(
            f"--cni-conf-dir={self.cni}", "--cni-bin-dir=/usr/lib/cni", "--runtime-handler", self.runtime
        )

    def start_pod(self, name: str, text: str, host_network: bool) -> float:
        return self.b.put_manifest(f"{name}.yaml", text)

    def remove_pod(self, name: str) -> None:
        (self.b.manifests / f"{name}.yaml").unlink(missing_ok=True)

    def close(self) -> None:
        for m in self.b.manifests.glob("*.yaml"):
            m.unlink()
        if self.b.proc is not None and self.b.proc.poll() is None:
            deadline = time.monotonic() + 60
            while not pods_gone(self.marker) and time.monotonic() < deadline:
                time.sleep(0.5)
            self.b.proc.terminate()
            try:
                self.b.proc.wait(timeout=30)
                self.b.proc = None
            except subprocess.TimeoutExpired:
                pass
        self.b.close()


class Podman:
    name = "podman"

    def __init__(self, net: tuple[str, str], archive: Path, pause: Path, runtime: str = "runc") -> None:
        self.base = Path(tempfile.mkdtemp(prefix="peers-podman-"))
        self.marker = str(self.base)
        self.net = f"bench-{net[0]}"
        conflist(self.base / "cni", self.net, net[0], net[1], self.base / "ipam")
        (self.base / "containers.conf").write_text(f"""[network]
network_backend = "cni"
cni_plugin_dirs = ["/usr/lib/cni"]
network_config_dir = "{self.base / "cni"}"
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "{self.base / "events.log"}"
infra_image = "{PAUSE_IMAGE}"
lock_type = "file"
runtime = "{runtime}"
tmp_dir = "{self.base / "tmp"}"
volume_path = "{self.base / "volumes"}"
static_dir = "{self.base / "static"}"
""")
        (self.base / "storage.conf").write_text(f"""[storage]
driver = "overlay"
graphroot = "{self.base / "root"}"
runroot = "{self.base / "run"}"
""")
        import resource

        # podman's defaults (nofile 1048576, and nproc above the 32768 its runtime inherits from it) are
        # above this machine's hard limits without CAP_SYS_RESOURCE, where runc cannot set them: cap them.
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        nproc = min(v for v in (resource.getrlimit(resource.RLIMIT_NPROC)[1], 32768) if v >= 0)
        with open(self.base / "containers.conf", "a") as f:
            f.write(f'[containers]\ndefault_ulimits = ["nofile={soft}:{hard}", "nproc={nproc}:{nproc}"]\n')
        self.env = {
            **os.environ,
            "CONTAINERS_CONF": str(self.base / "containers.conf"),
            "CONTAINERS_STORAGE_CONF": str(self.base / "storage.conf"),
        }
        self.pods: set[str] = set()
        self.kube = self.base / "kube"
        self.kube.mkdir()
        for a in (archive, pause):
            self.podman("load", "-q", "-i", str(a))

    def podman(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return run(
            "podman",
            "--root",
            str(self.base / "root"),
            "--runroot",
            str(self.base / "run"),
            "--tmpdir",
            str(self.base / "tmp"),
            *args,
            check=check,
            env=self.env,
        )

    def start(self) -> None:
        pass  # no daemon

    def start_pod(self, name: str, text: str, host_network: bool) -> float:
        f = self.kube / f"{name}.yaml"
        f.write_text(text)
        net = () if host_network else ("--network", self.net)
        t0 = time.monotonic()
        p = subprocess.Popen(
            [
                "podman",
                "--root",
                str(self.base / "root"),
                "--runroot",
                str(self.base / "run"),
                "--tmpdir",
                str(self.base / "tmp"),
                "kube",
                "play",
                *net,
                str(f),
            ],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.pods.add(name)
        self._last = p
        return t0

    def settle(self) -> None:
        p = getattr(self, "_last", None)
        if p is not None:
            _, err = p.communicate(timeout=120)
            if p.returncode:
                raise RuntimeError(f"podman kube play failed: {err.strip()}")
            self._last = None

    def remove_pod(self, name: str) -> None:
        self.podman("pod", "rm", "-f", "-t", "0", name, check=False)
        self.pods.discard(name)

    def close(self) -> None:
        self.podman("pod", "rm", "-a", "-f", "-t", "0", check=False)
        self.podman("rm", "-a", "-f", "-t", "0", check=False)
        from edgelet.testing.cleanup import cleanup_all

        cleanup_all(self.base, self.base / "run" / "runc", None)
        # podman's cgroupfs parent for pods: only the empty directories, bottom-up (nothing is killed).
        for h in Path("/sys/fs/cgroup").iterdir():
            top = h / "libpod_parent"
            if h.is_symlink() or not top.is_dir():
                continue
            for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True) + [
                top
            ]:
                try:
                    d.rmdir()
                except OSError:
                    pass


class Kubelet:
    name = "kubelet"

    def __init__(self, net: tuple[str, str], archive: Path, pause: Path, kubelet: Path, runtime: str = "runc") -> None:
        self.base = Path(tempfile.mkdtemp(prefix="peers-kube-"))
        self.marker = str(self.base)
        self.kubelet = kubelet
        self.runtime = runtime
        self.archive, self.pause = archive, pause
        self.sock = self.base / "containerd" / "containerd.sock"
        self.cgroup_root = f"/edgelet-bench-kube-{secrets.token_hex(4)}"
        self.restrict_oom = not can_lower_oom_score()
        self.manifests = self.base / "manifests"
        self.manifests.mkdir()
        self.staging = self.base / "staging"
        self.staging.mkdir()
        conflist(self.base / "cni", f"bench-{net[0]}", net[0], net[1], self.base / "ipam")
        (self.base / "containerd").mkdir()
        (self.base / "containerd.toml").write_text(f"""version = 2
root = "{self.base / "containerd" / "root"}"
state = "{self.base / "containerd" / "state"}"
plugin_dir = ""
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "{self.sock}"
[ttrpc]
  address = "{self.sock}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{self.base / "containerd" / "opt"}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  # Where the bench runs without CAP_SYS_RESOURCE, runc cannot set the sandbox's oom_score_adj -998;
  # this keeps it at containerd's own (as for rootless containerd).
  restrict_oom_score_adj = {str(self.restrict_oom).lower()}
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "{shutil.which(runtime) or runtime}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{self.base / "cni"}"
""")
        self.procs: list[subprocess.Popen] = []

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(self.base / f"{name}.log", "ab")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(p)
        return p

    def make_cgroup_root(self) -> None:
        """kubelet wants its --cgroup-root to exist in every hierarchy (cpuset with its parent's cpus/mems)."""
        for h in Path("/sys/fs/cgroup").iterdir():
            if h.is_symlink() or h.name == "unified" or not (h / "cgroup.procs").exists():
                continue
            d = h / self.cgroup_root.strip("/")
            d.mkdir(exist_ok=True)
            if h.name == "cpuset":
                for f in ("cpuset.cpus", "cpuset.mems"):
                    (d / f).write_text((h / f).read_text())

    def start(self) -> None:
        self.make_cgroup_root()
        self._spawn("containerd", ["containerd", "--config", str(self.base / "containerd.toml")])
        deadline = time.monotonic() + 60
        while not self.sock.exists():
            if time.monotonic() > deadline or self.procs[0].poll() is not None:
                raise RuntimeError("containerd did not start: " + self.tail("containerd"))
            time.sleep(0.1)
        for a in (self.archive, self.pause):
            run("ctr", "-a", str(self.sock), "-n", "k8s.io", "images", "import", str(a))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        root = self.base / "kubelet"
        self._spawn(
            "kubelet",
            [
                str(self.kubelet),
                f"--pod-manifest-path={self.manifests}",
                f"--root-dir={root}",
                f"--cert-dir={root / 'pki'}",
                f"--volume-plugin-dir={root / 'volume-plugins'}",
                "--container-runtime=remote",
                f"--container-runtime-endpoint=unix://{self.sock}",
                f"--image-service-endpoint=unix://{self.sock}",
                f"--containerd={self.sock}",
                "--cgroup-driver=cgroupfs",
                f"--cgroup-root={self.cgroup_root}",
                "--enforce-node-allocatable=",
                "--fail-swap-on=false",
                "--make-iptables-util-chains=false",
                f"--hostname-override={KUBELET_NODE}",
                "--address=127.0.0.1",
                f"--port={port}",
                "--read-only-port=0",
                "--healthz-port=0",
                "--image-gc-high-threshold=100",
                "--image-gc-low-threshold=99",
                "--v=0",
            ],
        )

    def tail(self, name: str) -> str:
        try:
            lines = (self.base / f"{name}.log").read_text(errors="replace").splitlines()
            # klog's error and fatal lines (E1126 ..., F1126 ...), not a goroutine dump
            errs = [ln for ln in lines if ln[:1] in "EF" and ln[1:5].isdigit()]
            return "\n".join(errs[-6:] or lines[-6:])
        except OSError:
            return ""

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs)

    def start_pod(self, name: str, text: str, host_network: bool) -> float:
        tmp = self.staging / f"{name}.yaml"
        tmp.write_text(text)
        t = time.monotonic()
        os.rename(tmp, self.manifests / f"{name}.yaml")
        return t

    def remove_pod(self, name: str) -> None:
        (self.manifests / f"{name}.yaml").unlink(missing_ok=True)

    def close(self) -> None:
        for m in self.manifests.glob("*.yaml"):
            m.unlink()
        if self.procs and self.alive():
            deadline = time.monotonic() + 60
            while not pods_gone(self.marker) and time.monotonic() < deadline:
                time.sleep(0.5)
            # The sandboxes too (kubelet keeps exited ones), through CRI, so CNI DEL runs and netns go.
            crictl = shutil.which("crictl")
            if crictl:
                run(crictl, "-r", f"unix://{self.sock}", "rmp", "-af", check=False)
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        from edgelet.testing.cleanup import kill_processes_mentioning, remove_cgroups, unmount_under

        kill_processes_mentioning(str(self.base))  # shims and what they run
        for r in (self.base / "containerd" / "state" / "io.containerd.runtime.v2.task" / "k8s.io").glob("*"):
            run(
                self.runtime,
                "--root",
                str(self.base / "containerd" / "state" / "runc" / "k8s.io"),
                "delete",
                "-f",
                r.name,
                check=False,
            )
        unmount_under(self.base)
        remove_cgroups(self.cgroup_root)
        # containerd 1.6 pins pod netns under /var/run/netns (cni-UUID); kubelet logs under /var/log/pods.
        for d in Path("/var/log/pods").glob(f"*_*-{KUBELET_NODE}_*"):
            shutil.rmtree(d, ignore_errors=True)
        for f in Path("/var/log/containers").glob(f"*-{KUBELET_NODE}_*"):
            f.unlink(missing_ok=True)
        shutil.rmtree(self.base, ignore_errors=True)


# ---------------------------------------------------------------- the run


def measure_memory(systems: list) -> dict[str, dict[str, float]]:
    out = {}
    for s in systems:
        split = {"agent": 0.0, "helpers": 0.0, "pause": 0.0}
        for pid, comm in system_pids(s.marker).items():
            split[group(comm)] += pss_kb(pid) / 1024
        out[s.name] = split
    return out


def measure_idle(systems: list, seconds: float) -> dict[str, float]:
    before = {s.name: {p: cpu_ticks(p) for p in system_pids(s.marker)} for s in systems}
    time.sleep(seconds)
    out = {}
    for s in systems:
        total = 0
        for p, t0 in before[s.name].items():
            t1 = cpu_ticks(p)
            if t1 >= t0 >= 0:
                total += t1 - t0
        out[s.name] = total / os.sysconf("SC_CLK_TCK")
    return out


def wait_until(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.2)


def svg(lat: dict[tuple[str, str], list[float]], mem: dict[str, dict[str, float]], note: str) -> str:
    """Start-latency dots with median ticks (left) and stacked PSS bars (right), by hand."""
    colors = {
        "raw runc": "#888888",
        "raw crun": "#888888",
        "edgelet": "#2a7ab9",
        "podman": "#8a5cb8",
        "kubelet": "#c8553d",
    }
    names = [n for n in ("raw runc", "raw crun", "edgelet", "podman", "kubelet") if any(k[0] == n for k in lat)]
    w, h = 880, 360
    px0, px1, py0, py1 = 150, 520, 50, 300  # latency panel
    vmax = max((v for vs in lat.values() for v in vs), default=1.0) * 1000 * 1.05
    rows = [(n, var) for n in names for var in ("hostNetwork", "CNI bridge") if (n, var) in lat]
    step = (py1 - py0) / max(len(rows), 1)
    e = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
        f'<rect width="{w}" height="{h}" fill="white"/>',
        f'<text x="{px0}" y="25" font-size="14" font-weight="bold">start latency, manifest to container running (ms)</text>',
    ]
    for i in range(6):
        v = vmax * i / 5
        x = px0 + (px1 - px0) * i / 5
        e.append(f'<line x1="{x:.1f}" y1="{py0}" x2="{x:.1f}" y2="{py1}" stroke="#ddd"/>')
        e.append(f'<text x="{x:.1f}" y="{py1 + 15}" text-anchor="middle">{v:.0f}</text>')
    for r, (n, var) in enumerate(rows):
        y = py0 + step * (r + 0.5)
        vs = lat[(n, var)]
        e.append(f'<text x="{px0 - 8}" y="{y + 4:.1f}" text-anchor="end">{n}, {var}</text>')
        for k, v in enumerate(sorted(vs)):
            jit = ((k * 7) % 11 - 5) * step / 30
            e.append(
                f'<circle cx="{px0 + (px1 - px0) * v * 1000 / vmax:.1f}" cy="{y + jit:.1f}" r="3" '
                f'fill="{colors[n]}" fill-opacity="0.5"/>'
            )
        med = statistics.median(vs) * 1000
        xm = px0 + (px1 - px0) * med / vmax
        e.append(
            f'<line x1="{xm:.1f}" y1="{y - step * 0.35:.1f}" x2="{xm:.1f}" y2="{y + step * 0.35:.1f}" '
            f'stroke="black" stroke-width="2"/>'
        )
        e.append(f'<text x="{xm + 4:.1f}" y="{y - step * 0.3:.1f}" font-size="10">{med:.0f}</text>')
    # memory panel
    mx0, mx1, my0, my1 = 600, 840, 50, 300
    e.append(f'<text x="{mx0 - 20}" y="25" font-size="14" font-weight="bold">total PSS, 10 pods (MB)</text>')
    mmax = max((sum(m.values()) for m in mem.values()), default=1.0) * 1.1 or 1.0
    names = [n for n in names if n in mem]
    bw = (mx1 - mx0) / max(len(names), 1)
    shades = {"agent": 1.0, "helpers": 0.65, "pause": 0.35}
    for i, n in enumerate(names):
        if n not in mem:
            continue
        x = mx0 + bw * i + bw * 0.15
        y = my1
        for part in ("agent", "helpers", "pause"):
            hh = (my1 - my0) * mem[n][part] / mmax
            y -= hh
            e.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bw * 0.7:.1f}" height="{hh:.1f}" fill="{colors[n]}" '
                f'fill-opacity="{shades[part]}" stroke="white"><title>{n} {part} {mem[n][part]:.1f} MB</title></rect>'
            )
        e.append(
            f'<text x="{x + bw * 0.35:.1f}" y="{y - 5:.1f}" text-anchor="middle">{sum(mem[n].values()):.1f}</text>'
        )
        e.append(f'<text x="{x + bw * 0.35:.1f}" y="{my1 + 15}" text-anchor="middle">{n}</text>')
    e.append(
        f'<text x="{mx0}" y="{my1 + 32}" font-size="10">bars: agent/daemons (dark), conmon or shims, pause (light)</text>'
    )
    e.append(f'<text x="20" y="{h - 10}" font-size="10" fill="#555">{note}</text>')
    e.append("</svg>")
    return "\n".join(e) + "\n"


def raw_runc(ed: Edgelet, runtime: str = "runc") -> RawRunc:
    """The floor, as bench/start_latency.py times it: edgelet's own hostNetwork bundles (pause + container)
    re-run by `runc create` + `start` by hand, the bundles written and the rootfs mounted before the clock."""
    from _harness import pause_config

    from edgelet.runtime.layout import ANN_HOST_NETWORK

    raw = RawRunc(ed.b, "raw", runtime=runtime)
    for pod in (ed.b.paths.root_dir / "pods").iterdir():
        cfg = pod / "sandbox" / "config.json"
        if not cfg.exists():
            continue
        doc = json.loads(cfg.read_text())
        if "linux" in doc:
            host = not any(ns["type"] == "network" for ns in doc["linux"]["namespaces"])
        else:  # no infra container: the sandbox's record says so
            host = (doc.get("annotations") or {}).get(ANN_HOST_NETWORK) == "true"
        if host:
            raw.cont_cfg = json.loads(sorted(pod.glob("containers/*/*/config.json"))[0].read_text())
            if "process" not in doc:
                # The pause sandbox an infra container would be, in the host's network namespace.
                doc = pause_config(ed.b, raw.cont_cfg)
                doc["linux"]["namespaces"] = [ns for ns in doc["linux"]["namespaces"] if ns["type"] != "network"]
            raw.sandbox_cfg = doc
            return raw
    raise RuntimeError("no hostNetwork pod of edgelet's to copy the bundles from")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, default=20, help="pods per system and network mode")
    ap.add_argument("--keep", type=int, default=10, help="pods per system during the memory and idle figures")
    ap.add_argument("--idle", type=float, default=60.0)
    ap.add_argument("--kubelet", type=Path, default=None, help="the kubelet binary (default: tools/kubelet.sh's)")
    ap.add_argument("--no-svg", action="store_true")
    ap.add_argument("--runtime", choices=("runc", "crun"), default="runc", help="the OCI runtime of every system")
    args = ap.parse_args()

    if args.runtime == "crun":
        from edgelet.testing.crun import crun_skip_reason

        # The test suite's set-up: on a hybrid cgroup layout crun refuses every container until the
        # controllers the cgroup2 mount holds are moved out (docs/runtime-handlers.md).
        reason = crun_skip_reason()
        if reason is not None:
            sys.exit(f"peers.py --runtime crun: {reason}")
    tag = secrets.token_hex(2)
    raw_name = f"raw {args.runtime}"
    nets = {n: (f"ebp{i}{tag}", f"10.250.{i}.0/24") for i, n in enumerate(("edgelet", "podman", "kubelet"), 1)}
    skipped: dict[str, str] = {}
    systems: list = []
    ed = Edgelet(nets["edgelet"], args.runtime)
    systems.append(ed)
    out = ed.b.base / "out"
    out.mkdir()
    os.chmod(out, 0o777)
    pause = build_pause_image(ed.b.base / "pause.oci.tar")
    raw: RawRunc | None = None
    try:
        if shutil.which("podman"):
            try:
                systems.append(Podman(nets["podman"], ed.b.archive, pause, args.runtime))
            except (subprocess.CalledProcessError, OSError) as e:
                skipped["podman"] = f"set-up failed: {getattr(e, 'stderr', e)}"
        else:
            skipped["podman"] = "podman not installed (make bench-peers installs it)"
        kubelet = args.kubelet
        if kubelet is None:
            cached = subprocess.run(
                [str(REPO / "tools" / "kubelet.sh")],
                capture_output=True,
                text=True,
                env={**os.environ, "KUBELET_SH_NO_BUILD": "1"},
            )
            kubelet = Path(cached.stdout.strip()) / "kubelet" if cached.returncode == 0 else None
        if kubelet is None or not kubelet.exists():
            skipped["kubelet"] = "no kubelet binary (tools/kubelet.sh builds it)"
        elif not shutil.which("containerd"):
            skipped["kubelet"] = "containerd not installed (make bench-peers installs it)"
        else:
            systems.append(Kubelet(nets["kubelet"], ed.b.archive, pause, kubelet, args.runtime))

        for s in list(systems):
            try:
                s.start()
                warm = f"{s.name[0]}warm"
                for hn in (True, False):
                    w = f"{warm}{'h' if hn else 'c'}"
                    s.start_pod(w, manifest(w, out, host_network=hn), hn)
                    if isinstance(s, Podman):
                        s.settle()
                    wait_file(out / w, timeout=180)
            except (RuntimeError, TimeoutError, subprocess.CalledProcessError) as e:
                detail = s.tail("kubelet") if isinstance(s, Kubelet) else ""
                skipped[s.name] = f"could not start a pod: {getattr(e, 'stderr', None) or e} {detail}".strip()
                systems.remove(s)
                s.close()

        lat: dict[tuple[str, str], list[float]] = {}
        raw = raw_runc(ed, args.runtime)
        for var, hn in (("hostNetwork", True), ("CNI bridge", False)):
            for i in range(args.pods):
                if hn:  # the raw floor takes its turn first, so it never follows the same system
                    raw.prepare(i, f"touch /out/raw{i}; exec sleep 3600")
                    t0 = time.monotonic()
                    raw.start(i)
                    lat.setdefault((raw_name, var), []).append(wait_file(out / f"raw{i}", timeout=60) - t0)
                    time.sleep(0.2)
                order = systems[i % len(systems) :] + systems[: i % len(systems)]  # who goes first rotates
                for s in order:
                    name = f"{s.name[0]}{'h' if hn else 'c'}{i}"
                    t0 = s.start_pod(name, manifest(name, out, host_network=hn), hn)
                    t1 = wait_file(out / name, timeout=180)
                    lat.setdefault((s.name, var), []).append(t1 - t0)
                    if isinstance(s, Podman):
                        s.settle()
                    time.sleep(0.2)

        raw.close()
        # Keep `keep` hostNetwork pods per system (the warm-up ones count), remove the rest, let it settle.
        for s in systems:
            s.remove_pod(f"{s.name[0]}warmc")
            for i in range(args.pods):
                s.remove_pod(f"{s.name[0]}c{i}")
                if i >= args.keep - 1:
                    s.remove_pod(f"{s.name[0]}h{i}")
        for s in systems:
            wait_until(lambda: workloads(s.marker) == args.keep, 180, f"{s.name}: pods did not go down to {args.keep}")
        time.sleep(10)
        mem = measure_memory(systems)
        # edgelet's own account of its idle window (what woke it, per subsystem), read around it.
        edgelets = [s for s in systems if isinstance(s, Edgelet)]
        before = {s.name: loop_account(s.b.paths.run_dir) for s in edgelets}
        idle = measure_idle(systems, args.idle)
        accounts = {s.name: cpu_breakdown(before[s.name], loop_account(s.b.paths.run_dir)) for s in edgelets}
    finally:
        if raw is not None:
            raw.close()
        for s in systems:
            try:
                s.close()
            except Exception as e:
                print(f"cleanup of {s.name}: {e}", file=sys.stderr)
        from edgelet.network.iptables import remove_tagged

        for bridge, _ in nets.values():
            asyncio.run(remove_tagged(f"bench-{bridge}", key="name"))
            subprocess.run(["ip", "link", "del", bridge], capture_output=True)

    print(f"machine: {machine()}")
    print(f"OCI runtime of every system: {args.runtime}")
    print(
        f"pods: {args.pods} per system and network mode, interleaved round-robin (after one warm-up pod each);"
        f" memory and idle CPU with {args.keep} hostNetwork pods each, idle over {args.idle:.0f} s"
    )
    print(f"{'system':9} {'network':12} {'median ms':>10} {'p90 ms':>8}")
    for (n, var), v in lat.items():
        print(f"{n:9} {var:12} {statistics.median(v) * 1000:10.1f} {percentile(v, 0.9) * 1000:8.1f}")
    print(f"{'system':9} {'PSS MB':>7} {'agent':>6} {'helpers':>8} {'pause':>6} {'idle CPU s':>11} {'% core':>7}")
    for s in systems:
        m = mem[s.name]
        print(
            f"{s.name:9} {sum(m.values()):7.1f} {m['agent']:6.1f} {m['helpers']:8.1f} {m['pause']:6.1f}"
            f" {idle[s.name]:11.2f} {100 * idle[s.name] / args.idle:7.2f}"
        )
        if s.name in accounts:
            print(f"  {accounts[s.name]}")
    if (raw_name, "hostNetwork") in lat:
        floor = statistics.median(lat[(raw_name, "hostNetwork")])
        print(
            f"ratio to {raw_name} (pause + container, hostNetwork, median): "
            + ", ".join(
                f"{n} {statistics.median(lat[(n, 'hostNetwork')]) / floor:.2f}x"
                for n in ("edgelet", "podman", "kubelet")
                if (n, "hostNetwork") in lat
            )
        )
    for peer in ("podman", "kubelet"):
        if any(k[0] == peer for k in lat):
            ratios = [
                f"{var}: {statistics.median(lat[('edgelet', var)]) / statistics.median(lat[(peer, var)]):.2f}x"
                for var in ("hostNetwork", "CNI bridge")
            ]
            mr = sum(mem["edgelet"].values()) / sum(mem[peer].values())
            print(f"edgelet / {peer}: start latency (median) {', '.join(ratios)}; total PSS {mr:.2f}x")
    for n, why in skipped.items():
        print(f"left out: {n}: {why}")
    if not args.no_svg:
        note = (
            f"bench/peers.py, {time.strftime('%Y-%m-%d')}, {args.pods} pods per system and mode, interleaved;"
            f" {machine()}"
        )
        chart = SVG if args.runtime == "runc" else SVG.with_name(f"peers-{args.runtime}.svg")
        chart.write_text(svg(lat, mem, note))
        print(f"chart: {chart.relative_to(REPO)}")


if __name__ == "__main__":
    main()
