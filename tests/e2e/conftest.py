"""End-to-end fixtures: a real edgelet agent process on temp dirs with real runc, conmon and cgroups."""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgelet.runtime.layout import RuntimePaths

IMAGE = "edgelet.local/busybox:1.36"
NODE = "testnode"  # every agent's --hostname-override


def edgelet_command() -> list[str]:
    """How to run edgelet: the source in this venv, or the frozen binary named by EDGELET_BIN (make test-binary)."""
    binary = os.environ.get("EDGELET_BIN")
    if binary:
        return [str(Path(binary).resolve())]
    return [sys.executable, "-m", "edgelet"]


@pytest.fixture(scope="session")
def busybox_archive(tmp_path_factory) -> Path:
    from edgelet.testing.images import build_busybox_image

    out = tmp_path_factory.mktemp("images") / "busybox.oci.tar"
    return build_busybox_image(out, name=IMAGE, fmt="oci-archive")


def sleeper_yaml(name: str, image: str = IMAGE, policy: str = "IfNotPresent") -> str:
    """A one-container pod (`c`, sleeping 300 s) running `image` with pull policy `policy`."""
    return f"""apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: {image}
    imagePullPolicy: {policy}
    command: ["sh", "-c", "exec sleep 300"]
"""


def wait_for(predicate, timeout: float = 20.0, interval: float = 0.05, what: str = "condition"):
    """Poll until `predicate()` returns something truthy; fail naming `what` (no timing asserted)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except (OSError, ValueError, KeyError):
            last = None
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")


class AgentProc:
    """One edgelet process on a test's dirs; restartable to test adoption."""

    def __init__(self, paths: RuntimePaths, manifests: Path, archive: Path, handler: str | None = None) -> None:
        self.paths = paths
        self.handler = handler  # --runtime-handler (None: the agent's default, runc)
        self.manifests = manifests
        self.proc: subprocess.Popen | None = None
        self.log_path = paths.run_dir / "agent.log"
        import_dir = paths.root_dir / "images" / "import"
        import_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy(archive, import_dir / archive.name)
        manifests.mkdir(parents=True, exist_ok=True)
        # Never the host's /etc/cni/net.d: a config some package put there (podman's bridge, say) would give
        # the test's pods a network nobody asked for. Tests of networking pass their own --cni-conf-dir.
        self.cni_conf_dir = paths.root_dir.parent / "cni-none"
        self.cni_conf_dir.mkdir(exist_ok=True)

    def argv(self, *extra: str) -> list[str]:
        return [
            *edgelet_command(),
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
            NODE,
            "--config",
            "/dev/null",
            "-v",
            "2",
            "--healthz-port",
            "0",  # never the real 10248: tests must not clash with each other or a device agent
            # A shared test machine's disk may be below kubelet's 10% nodefs threshold: eviction tests set their own.
            "--eviction-hard=",
            "--cni-conf-dir",
            str(self.cni_conf_dir),
            *(("--runtime-handler", self.handler) if self.handler else ()),
            *extra,
        ]

    def start(self, *extra: str, env: dict[str, str] | None = None, wrapper: tuple[str, ...] = ()) -> None:
        """Start the agent; `env` adds to (or overrides) this process's environment; `wrapper` is a command
        that execs the agent's argv given after it (unshare, say)."""
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [*wrapper, *self.argv(*extra)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env} if env else None,
        )

    def run_once(self, *extra: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv("--runonce", *extra), capture_output=True, text=True, timeout=timeout)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"edgelet did not exit within 30 s of {signal.Signals(sig).name}; log tail:\n"
                + "\n".join(self.log().splitlines()[-40:])
            ) from None
        self.proc = None
        self._log.close()
        return rc

    def cli(self, *args: str) -> str:
        """An `edgelet` subcommand on this agent's dirs; its stdout."""
        out = subprocess.run(
            [
                *edgelet_command(),
                *args,
                "--root-dir",
                str(self.paths.root_dir),
                "--run-dir",
                str(self.paths.run_dir),
                "--config",
                "/dev/null",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return out.stdout

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def snapshot(self) -> dict:
        return json.loads((self.paths.root_dir / "state" / "pods.json").read_text())

    def pod(self, name: str) -> dict | None:
        """The pods-table row of the pod named `name` (without the node suffix)."""
        for row in self.snapshot()["pods"]:
            if row["name"] == f"{name}-testnode":
                return row
        return None

    def runc_list(self, attempts: int = 1) -> list[dict]:
        """Every container under every handler's root (runc's, and `runtimes/<name>` driven by the binary of
        that name), each with its annotations (crun's list has none: they are read from the bundle). A list
        that fails is tried again up to `attempts` times (runc 1.1.5's list races a concurrent delete), then
        fails the test: an empty answer would hide every container."""
        roots = [("runc", self.paths.runc_root)]
        others = self.paths.run_dir / "runtimes"
        if others.is_dir():
            roots += [(d.name, d) for d in sorted(others.iterdir()) if d.is_dir()]
        found = []
        for binary, root in roots:
            for attempt in range(attempts):
                out = subprocess.run([binary, "--root", str(root), "list", "--format", "json"], capture_output=True)
                if out.returncode == 0:
                    break
                if attempt == attempts - 1 and attempts > 1:
                    raise AssertionError(f"{binary} list keeps failing: {out.stderr.decode(errors='replace')}")
                time.sleep(0.1)
            for entry in json.loads(out.stdout or b"null") or []:
                if "annotations" not in entry:
                    try:
                        config = json.loads((Path(entry["bundle"]) / "config.json").read_bytes())
                    except (OSError, ValueError, KeyError):
                        config = {}
                    entry["annotations"] = config.get("annotations") or {}
                entry["handler"] = binary
                found.append(entry)
        return found

    def runtime_argv(self, cid: str) -> list[str]:
        """`<runtime> --root <its root>` of the handler that holds container `cid` (runc's when none does)."""
        handler = next((c["handler"] for c in self.runc_list() if c["id"] == cid), "runc")
        root = self.paths.runc_root if handler == "runc" else self.paths.run_dir / "runtimes" / handler
        return [handler, "--root", str(root)]

    def containers_of(self, pod: str) -> list[dict]:
        full = f"{pod}-testnode"
        return [c for c in self.runc_list() if (c.get("annotations") or {}).get("io.kubernetes.pod.name") == full]

    def write_manifest(self, filename: str, text: str) -> Path:
        """Atomic rename into the manifest directory, as a careful user (or config tool) does."""
        tmp = self.manifests.parent / f".{filename}.tmp"
        tmp.write_text(text)
        dest = self.manifests / filename
        os.rename(tmp, dest)
        return dest


@contextlib.contextmanager
def agent_on(paths: RuntimePaths, archive: Path, handler: str | None = None) -> Iterator[AgentProc]:
    """An agent on `paths`, killed if it still runs at the end."""
    a = AgentProc(paths, paths.root_dir.parent / "manifests", archive, handler)
    try:
        yield a
    finally:
        if a.proc is not None:
            a.proc.kill()
            a.proc.wait()
            a._log.close()
        if os.environ.get("EDGELET_TEST_SHOW_LOG"):
            print(a.log())


@pytest.fixture
def agent(runtime_paths: RuntimePaths, busybox_archive: Path, request: pytest.FixtureRequest):
    """An agent on the test's dirs; a test that takes `runtime_handler` (runc, then crun) gets an agent whose
    default handler it is."""
    handler = request.getfixturevalue("runtime_handler") if "runtime_handler" in request.fixturenames else None
    with agent_on(runtime_paths, busybox_archive, handler) as a:
        yield a


@contextlib.contextmanager
def shared_agent(
    tmp_path_factory: pytest.TempPathFactory, archive: Path, handler: str | None = None
) -> Iterator[AgentProc]:
    """An agent (not started) for the tests of a module that only read what its pods do: one start and one
    image import instead of one per test; its dirs, containers and cgroups are removed at the end."""
    from tests.conftest import temp_runtime_paths

    with temp_runtime_paths(tmp_path_factory.mktemp("agent")) as paths, agent_on(paths, archive, handler) as a:
        yield a


@pytest.fixture
def network(tmp_path):
    """A CNI network of the test's own: its bridge, its /24 and host-local dataDir, in a conf dir of its own
    (never /etc/cni); on teardown the rules the plugins tagged with its name, and the bridge, go."""
    bridge = f"edl{secrets.token_hex(4)}"[:15]
    subnet = f"10.{random.randint(150, 250)}.{random.randint(0, 255)}"
    conf_dir = tmp_path / "cni"
    conf_dir.mkdir()
    ipam = tmp_path / "ipam"
    conflist = {
        "cniVersion": "1.0.0",
        "name": f"test-{bridge}",
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge,
                "isGateway": True,
                "ipMasq": True,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(ipam),
                    "ranges": [[{"subnet": f"{subnet}.0/24", "gateway": f"{subnet}.1"}]],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}, "snat": True},
            {"type": "loopback"},
        ],
    }
    (conf_dir / "10-test.conflist").write_text(json.dumps(conflist))
    yield {"conf_dir": conf_dir, "bridge": bridge, "gateway": f"{subnet}.1", "ipam": ipam, "subnet": subnet}
    import asyncio

    from edgelet.network.iptables import remove_tagged

    asyncio.run(remove_tagged(conflist["name"], key="name"))
    subprocess.run(["ip", "link", "del", bridge], capture_output=True)


@pytest.fixture
def cluster(apiserver):
    """The apiserver with no trace of an earlier test's node (no controller-manager runs to collect it)."""
    _forget_node(apiserver)
    yield apiserver
    if not apiserver.procs:
        apiserver.start()
    _forget_node(apiserver)


def _forget_node(api) -> None:
    for pod in api.get(f"/api/v1/pods?fieldSelector=spec.nodeName={NODE}")["items"]:
        meta = pod["metadata"]
        api.request("DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", {"gracePeriodSeconds": 0})
    api.request("DELETE", f"/api/v1/nodes/{NODE}")
    api.request("DELETE", f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NODE}")
