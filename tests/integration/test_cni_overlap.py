"""A pod's first container created while its CNI ADD runs (issue 25), with real runc, conmon, overlay mounts and
Debian's plugins (bridge, host-local, portmap, loopback) on the test's own bridge and subnet (privileged).

The chain ends with a test plugin that holds ADD until the test opens its gate (and fails it when told), so
the container is seen created, never started, while ADD has not finished; it starts with the pod IP in its
/etc/hosts once ADD succeeded, and a failed ADD leaves nothing of either half.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import uuid
from pathlib import Path

import pytest

from edgelet.api.types import Container, ObjectMeta, Pod, PodSpec
from edgelet.network.manager import PodNetwork
from edgelet.runtime.host import CGROUP_MOUNT
from edgelet.runtime.layout import ANN_SANDBOX_ID
from edgelet.runtime.runc_runtime import RuncRuntime
from edgelet.sync.syncpod import Syncer
from edgelet.testing.cleanup import conmon_processes
from edgelet.testing.fakes import FakeImageStore
from edgelet.util.backoff import Backoff
from edgelet.util.clock import RealClock
from tests.e2e.conftest import network  # noqa: F401 - the fixture: a bridge, subnet and conf dir of the test's own
from tests.integration.test_runtime_runc import aio

PLUGINS = Path("/usr/lib/cni")
pytestmark = [
    pytest.mark.privileged,
    pytest.mark.skipif(not (PLUGINS / "bridge").exists(), reason="needs containernetworking-plugins"),
]

# The chain's last plugin: ADD says it began, waits for the test to open its gate (the file `open`; 60 s at
# most), then passes the previous result on, or fails when told to (the file `fail`). DEL and CHECK succeed.
GATE = """#!/bin/sh
in=$(cat)
dir=$(dirname "$0")
if [ "$CNI_COMMAND" = ADD ]; then
  echo "$CNI_CONTAINERID" > "$dir/adding"
  i=0
  while [ ! -e "$dir/open" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done
  if [ -e "$dir/fail" ]; then
    printf '{"cniVersion":"1.0.0","code":11,"msg":"refused by the test"}'
    exit 1
  fi
  printf '%s' "$in" | sed -n 's/.*"prevResult": *\\({.*}\\)}$/\\1/p'
fi
exit 0
"""


@pytest.fixture
def gated(network, runtime_paths, tmp_path: Path, busybox):
    bin_dir = tmp_path / "cni-bin"
    bin_dir.mkdir()
    (bin_dir / "gate").write_text(GATE)
    (bin_dir / "gate").chmod(0o755)
    conf_path = network["conf_dir"] / "10-test.conflist"
    conf = json.loads(conf_path.read_text())
    conf["plugins"].append({"type": "gate"})
    conf_path.write_text(json.dumps(conf))
    net = PodNetwork(
        network["conf_dir"],
        [str(bin_dir), str(PLUGINS)],
        runtime_paths.run_dir / "netns",
        runtime_paths.root_dir / "cni",
    )
    rt = RuncRuntime(runtime_paths, network=net)
    images = FakeImageStore()
    images.records = {"edgelet.local/busybox:1.36": busybox}
    published: dict[str, object] = {}
    syncer = Syncer(
        rt,
        images,
        Backoff(),
        RealClock(),
        publish=lambda pod, status, st: published.__setitem__("waiting", dict(st.waiting)),
    )
    yield rt, syncer, bin_dir, published, network


def _pod(name: str) -> Pod:
    return Pod(
        metadata=ObjectMeta(name=name, namespace="default", uid=uuid.uuid4().hex),
        spec=PodSpec(
            containers=[
                Container(
                    name="app",
                    image="edgelet.local/busybox:1.36",
                    command=["sh", "-c", "touch /tmp/ran; exec sleep 3600"],
                    image_pull_policy="IfNotPresent",
                )
            ],
            restart_policy="Always",
            termination_grace_period_seconds=1,
        ),
    )


async def _until(predicate, what: str, timeout: float = 60.0):
    for _ in range(int(timeout / 0.05)):
        value = await asyncio.to_thread(predicate)
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _ours(rt: RuncRuntime) -> list[dict]:
    """`runc list` of the runtime's own root, as JSON."""
    if not rt.paths.runc_root.exists():
        return []
    out = subprocess.run(
        ["runc", "--root", str(rt.paths.runc_root), "list", "--format", "json"], capture_output=True, text=True
    )
    return json.loads(out.stdout or "null") or []


def _mounts_under(base: Path) -> list[str]:
    return [
        ln.split()[4]
        for ln in Path("/proc/self/mountinfo").read_text().splitlines()
        if ln.split()[4].startswith(str(base))
    ]


def _container_cgroups(rt: RuncRuntime, uid: str) -> list[str]:
    out = []
    for cg in rt.pod_cgroups(uid):
        d = CGROUP_MOUNT / cg.lstrip("/")
        out += (
            [p.name for p in d.rglob("*") if p.is_dir() and re.fullmatch(r"[0-9a-f]{64}", p.name)] if d.is_dir() else []
        )
    return out


def _exec(rt: RuncRuntime, cid: str, *argv: str) -> str:
    return subprocess.run(
        ["runc", "--root", str(rt.paths.runc_root), "exec", cid, *argv], capture_output=True, text=True, timeout=60
    ).stdout


@aio
async def test_the_first_container_is_created_during_add_and_starts_after_it_with_its_ip(gated) -> None:
    rt, syncer, bin_dir, published, net = gated
    pod = _pod("overlap")
    uid = pod.metadata.uid
    sync = asyncio.ensure_future(syncer.sync_pod(pod))
    try:
        sid = await _until(
            lambda: (bin_dir / "adding").exists() and (bin_dir / "adding").read_text().strip(), "ADD to reach the gate"
        )
        # ADD is held: the container is created in the pod's namespaces, its process waiting in runc init.
        (created,) = await _until(
            lambda: [c for c in _ours(rt) if c["status"] == "created"], "the container created beside ADD"
        )
        assert created["annotations"][ANN_SANDBOX_ID] == sid
        assert not sync.done()
        assert not [c for c in _ours(rt) if c["status"] == "running"]
        rootfs = Path(created["bundle"]) / "rootfs"
        assert not (rootfs / "tmp" / "ran").exists()  # its command has not run
        hosts = (rt.layout(uid).hosts).read_text()
        assert net["subnet"] not in hosts  # no address yet
        (bin_dir / "open").touch()
        await asyncio.wait_for(sync, 120)
    finally:
        (bin_dir / "open").touch()
        if not sync.done():
            sync.cancel()
    (running,) = [c for c in _ours(rt) if c["status"] == "running"]
    assert running["id"] == created["id"]  # the same instance, started
    status = await rt.pod_status(uid)
    (sandbox,) = status.sandboxes
    assert sandbox.state == "running" and sandbox.ips and sandbox.ips[0].startswith(net["subnet"] + ".")
    ip = sandbox.ips[0]
    # /etc/hosts was written in place after ADD: the container's bind mount shows the pod IP.
    assert re.search(rf"^{re.escape(ip)}\s+overlap\b", _exec(rt, running["id"], "cat", "/etc/hosts"), re.M)
    assert ip in _exec(rt, running["id"], "ip", "-o", "addr", "show", "eth0")
    await syncer.terminate_pod(uid, pod)
    assert not _ours(rt) and not _mounts_under(rt.paths.root_dir.resolve())
    assert not os.listdir(rt.paths.run_dir / "netns") and not os.listdir(rt.paths.root_dir / "cni")


@aio
async def test_a_failed_add_leaves_nothing_of_the_container_created_beside_it(gated) -> None:
    rt, syncer, bin_dir, published, net = gated
    pod = _pod("addfails")
    uid = pod.metadata.uid
    (bin_dir / "fail").touch()
    sync = asyncio.ensure_future(syncer.sync_pod(pod))
    try:
        (created,) = await _until(
            lambda: [c for c in _ours(rt) if c["status"] == "created"], "the container created beside ADD"
        )
        (bin_dir / "open").touch()
        await asyncio.wait_for(sync, 120)
    finally:
        (bin_dir / "open").touch()
        if not sync.done():
            sync.cancel()
    waiting = published["waiting"]
    assert waiting["app"][0] == "ContainerCreating" and "refused by the test" in waiting["app"][1], waiting
    # Nothing of either half: no runc state, conmon, rootfs mount, bundle, log link or cgroup of the container;
    # no namespace file, CNI cache entry, address or veth of the sandbox.
    assert not _ours(rt)
    assert not [pid for pid, argv in conmon_processes() if str(rt.paths.runc_root) in " ".join(argv)]
    assert not _mounts_under(rt.paths.root_dir.resolve())
    assert not list(rt.paths.pod_dir(uid).glob("containers/*/*"))
    assert not (rt.layout(uid).sandbox_dir / "config.json").exists()
    assert not [p for p in rt.paths.log_dir.rglob("*") if p.is_symlink()]
    assert created["id"] not in _container_cgroups(rt, uid)
    assert not os.listdir(rt.paths.run_dir / "netns") and not os.listdir(rt.paths.root_dir / "cni")
    assert not (rt.paths.ns_dir.exists() and os.listdir(rt.paths.ns_dir))
    ipam = net["ipam"]
    assert not [p.name for p in ipam.rglob("*") if p.is_file() and not p.name.startswith(("last_reserved", "lock"))]
    veths = subprocess.run(["ip", "-o", "link", "show", "master", net["bridge"]], capture_output=True, text=True).stdout
    assert not veths.strip()
    # The next sync, with ADD working, runs the pod.
    (bin_dir / "fail").unlink()
    await asyncio.wait_for(syncer.sync_pod(pod), 120)
    assert [c["status"] for c in _ours(rt)] == ["running"]
    await syncer.terminate_pod(uid, pod)
    assert not _ours(rt) and not _mounts_under(rt.paths.root_dir.resolve())
