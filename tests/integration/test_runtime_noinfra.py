"""Sandboxes without an infra container, with real runc and conmon: pinned namespaces, adoption, removal (privileged)."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import pytest

from edgelet.api.types import (
    Container,
    ObjectMeta,
    Pod,
    PodSecurityContext,
    PodSpec,
    Sysctl,
)
from edgelet.runtime import bundle as bl
from edgelet.runtime import conmon as conmon_mod
from edgelet.runtime import pinns
from edgelet.runtime.layout import RuntimePaths
from edgelet.runtime.runc_runtime import RuncRuntime
from edgelet.testing.cleanup import conmon_processes, runc_containers
from tests.integration.test_runtime_runc import aio

pytestmark = pytest.mark.privileged

# Each container prints the inodes of its namespaces, its hostname and two pod sysctls, then waits.
SHOW = (
    "echo net=$(readlink /proc/self/ns/net) ipc=$(readlink /proc/self/ns/ipc) "
    "uts=$(readlink /proc/self/ns/uts) host=$(hostname) shm=$(cat /proc/sys/kernel/shm_rmid_forced) "
    "ports=$(cat /proc/sys/net/ipv4/ip_unprivileged_port_start) lo=$(cat /sys/class/net/lo/operstate); "
    "trap 'exit 0' TERM; while true; do sleep 1; done"
)


def _pod(name: str, containers: list[Container], **spec) -> Pod:
    return Pod(
        metadata=ObjectMeta(name=name, namespace="default", uid=uuid.uuid4().hex),
        spec=PodSpec(containers=containers, restart_policy="Never", termination_grace_period_seconds=2, **spec),
    )


def _c(name: str, *cmd: str) -> Container:
    return Container(
        name=name,
        image="edgelet.local/busybox:1.36",
        command=list(cmd),
        image_pull_policy="IfNotPresent",
        termination_message_path="/dev/termination-log",
    )


def _conmons_under(base: Path) -> list[int]:
    return [pid for pid, argv in conmon_processes() if any(str(base) in a for a in argv) and conmon_mod.is_alive(pid)]


def _mounts_under(base: Path) -> list[str]:
    return [
        ln.split()[4]
        for ln in Path("/proc/self/mountinfo").read_text().splitlines()
        if ln.split()[4].startswith(str(base))
    ]


def _assert_pod_gone(rt: RuncRuntime, uid: str) -> None:
    base = rt.paths.root_dir.parent.resolve()
    assert not rt.paths.pod_dir(uid).exists()
    assert not _mounts_under(base)
    assert not [e for e in rt.paths.ns_dir.iterdir()] if rt.paths.ns_dir.exists() else True
    rel = rt.pod_cgroup(uid).strip("/")
    assert not [h for h in Path("/sys/fs/cgroup").iterdir() if (h / rel).exists()]
    assert not _conmons_under(base)


async def _output(path: str, timeout: float = 20.0) -> str:
    for _ in range(int(timeout / 0.05)):
        text = Path(path).read_text() if os.path.exists(path) else ""
        if "lo=" in text:
            return text.split(" F ", 1)[-1].split(" P ", 1)[-1].strip().splitlines()[0]
        await asyncio.sleep(0.05)
    raise AssertionError(f"no output in {path}")


async def _start(rt: RuncRuntime, pod: Pod, busybox, sandbox) -> list[str]:
    ids = []
    for c in pod.spec.containers:
        cid = await rt.create_container(pod, c, sandbox, busybox, 0)
        await rt.start_container(cid)
        ids.append(cid)
    return ids


@aio
async def test_containers_join_the_pinned_namespaces_and_no_pause_runs(rt: RuncRuntime, busybox) -> None:
    pod = _pod(
        "pinned",
        [_c("a", "sh", "-c", SHOW), _c("b", "sh", "-c", SHOW)],
        hostname="pinnedhost",
        security_context=PodSecurityContext(
            sysctls=[
                Sysctl(name="kernel.shm_rmid_forced", value="1"),
                Sysctl(name="net.ipv4.ip_unprivileged_port_start", value="80"),
            ]
        ),
    )
    uid = pod.metadata.uid
    sandbox = await rt.run_sandbox(pod, 0)
    assert sandbox.state == "running" and sandbox.pid is None and not sandbox.infra
    ns = dict(sandbox.namespaces)
    assert sorted(ns) == ["ipc", "network", "uts"]
    assert all(Path(p).parent == rt.paths.ns_dir / sandbox.id and pinns.is_pinned(p) for p in ns.values())
    # The pod cgroup exists with nothing in it yet; runc knows no sandbox; no conmon but the containers'.
    rel = rt.pod_cgroup(uid, pod).strip("/")
    assert [h for h in Path("/sys/fs/cgroup").iterdir() if (h / rel).is_dir()]
    assert sandbox.id not in runc_containers(rt.paths.runc_root)
    ids = await _start(rt, pod, busybox, sandbox)
    base = rt.paths.root_dir.parent.resolve()
    assert len(_conmons_under(base)) == 2

    status = await rt.pod_status(uid)
    outs = [await _output(c.log_path) for c in status.containers]
    assert outs[0] == outs[1], outs
    fields = dict(f.split("=", 1) for f in outs[0].split())
    assert fields["host"] == "pinnedhost" and fields["shm"] == "1" and fields["ports"] == "80"
    assert fields["lo"] in ("unknown", "up")  # the loopback is up (its operstate reads "unknown")
    assert fields["net"] == f"net:[{os.stat(ns['network']).st_ino}]"
    assert fields["net"] != os.readlink("/proc/self/ns/net") and fields["uts"] != os.readlink("/proc/self/ns/uts")

    # A fresh instance (an agent restart) adopts it as it is.
    again = (await RuncRuntime(rt.paths).list_pods())[uid]
    [sb] = again.sandboxes
    assert (sb.id, sb.state, sb.pid, sb.infra, sb.namespaces) == (
        sandbox.id,
        "running",
        None,
        False,
        sandbox.namespaces,
    )
    assert sorted(c.state for c in again.containers) == ["running", "running"]

    for cid in ids:
        await rt.stop_container(cid, grace=5)
    await rt.stop_sandbox(sandbox.id)
    [sb] = (await rt.pod_status(uid)).sandboxes
    assert sb.state == "exited"
    assert not (rt.paths.ns_dir / sandbox.id).exists()
    await rt.remove_pod(uid)
    _assert_pod_gone(rt, uid)


@aio
async def test_host_network_and_ipc_pod_pins_nothing_and_still_runs(rt: RuncRuntime, busybox) -> None:
    pod = _pod("hostnet", [_c("a", "sleep", "300")], host_network=True, host_ipc=True)
    uid = pod.metadata.uid
    sandbox = await rt.run_sandbox(pod, 0)
    assert sandbox.namespaces == () and sandbox.netns_path() is None
    assert [s.state for s in (await rt.pod_status(uid)).sandboxes] == ["running"]
    [cid] = await _start(rt, pod, busybox, sandbox)
    assert (await rt.pod_status(uid)).latest("a").state == "running"
    await rt.stop_container(cid, grace=2)
    await rt.stop_sandbox(sandbox.id)
    assert [s.state for s in (await rt.pod_status(uid)).sandboxes] == ["exited"]
    await rt.remove_pod(uid)
    _assert_pod_gone(rt, uid)


@aio
async def test_share_process_namespace_keeps_the_pause_process(rt: RuncRuntime, busybox) -> None:
    pod = _pod("shared", [_c("a", "sleep", "300")], share_process_namespace=True)
    uid = pod.metadata.uid
    sandbox = await rt.run_sandbox(pod, 0)
    assert sandbox.infra and sandbox.pid and conmon_mod.is_alive(sandbox.pid)
    assert sandbox.id in runc_containers(rt.paths.runc_root)
    await _start(rt, pod, busybox, sandbox)
    c = (await rt.pod_status(uid)).latest("a")
    assert c.state == "running"
    # The container's pid namespace is the pause process's.
    assert os.readlink(f"/proc/{c.pid}/ns/pid") == os.readlink(f"/proc/{sandbox.pid}/ns/pid")
    await rt.remove_pod(uid)
    _assert_pod_gone(rt, uid)


@aio
async def test_a_pod_of_an_older_edgelet_with_a_pause_process_is_adopted_and_removed(
    runtime_paths: RuntimePaths, busybox
) -> None:
    old = RuncRuntime(runtime_paths, infra_container=True)
    pod = _pod("old", [_c("a", "sleep", "300"), _c("b", "sleep", "300")])
    uid = pod.metadata.uid
    sandbox = await old.run_sandbox(pod, 0)
    assert sandbox.infra and sandbox.pid
    cid = await old.create_container(pod, pod.spec.containers[0], sandbox, busybox, 0)
    await old.start_container(cid)

    new = RuncRuntime(runtime_paths)  # today's default, as after an upgrade and a restart
    [sb] = (await new.list_pods())[uid].sandboxes
    assert (sb.id, sb.state, sb.infra, sb.pid) == (sandbox.id, "running", True, sandbox.pid)
    # A container started now joins the pause process's namespaces, like its sibling.
    cid2 = await new.create_container(pod, pod.spec.containers[1], sb, busybox, 0)
    await new.start_container(cid2)
    status = await new.pod_status(uid)
    a, b = status.latest("a"), status.latest("b")
    assert a.state == b.state == "running"
    assert (
        os.readlink(f"/proc/{a.pid}/ns/net")
        == os.readlink(f"/proc/{b.pid}/ns/net")
        == os.readlink(f"/proc/{sandbox.pid}/ns/net")
    )
    await new.remove_pod(uid)
    _assert_pod_gone(new, uid)


@aio
async def test_what_a_kill_leaves_of_a_pinned_sandbox_is_removed(rt: RuncRuntime, busybox) -> None:
    pod = _pod("killed", [_c("a", "sleep", "300")])
    uid = pod.metadata.uid
    sandbox = await rt.run_sandbox(pod, 0)
    # As a kill at sandbox.create leaves it: namespaces pinned, never marked started.
    (rt.paths.pod_dir(uid) / "sandbox" / bl.STARTED_FILE).unlink()
    # And namespace files whose bundle a kill removed before them.
    stray = rt.paths.ns_dir / ("0" * 64)
    pinns.pin(stray, ("ipc",), "")
    fresh = RuncRuntime(rt.paths)
    assert await fresh.remove_stray_files() >= 1
    assert not stray.exists()
    [sb] = (await fresh.list_pods())[uid].sandboxes
    assert sb.id == sandbox.id and sb.state == "exited"
    await fresh.stop_sandbox(sb.id)
    await fresh.remove_pod(uid)
    _assert_pod_gone(fresh, uid)


@aio
async def test_a_container_is_not_created_in_a_sandbox_whose_namespaces_are_gone(rt: RuncRuntime, busybox) -> None:
    from edgelet.container.errors import SandboxError

    pod = _pod("gone", [_c("a", "sleep", "300")])
    uid = pod.metadata.uid
    sandbox = await rt.run_sandbox(pod, 0)
    pinns.unpin(rt.paths.ns_dir / sandbox.id)
    assert [s.state for s in (await rt.pod_status(uid)).sandboxes] == ["exited"]
    with pytest.raises(SandboxError, match="namespaces are gone"):
        await rt.create_container(pod, pod.spec.containers[0], sandbox, busybox, 0)
    await rt.remove_pod(uid)
    _assert_pod_gone(rt, uid)


@aio
async def test_a_sandbox_whose_sysctl_cannot_be_set_is_undone(runtime_paths: RuntimePaths) -> None:
    from edgelet.container.errors import SandboxError

    rt = RuncRuntime(runtime_paths, allowed_unsafe_sysctls=("net.ipv4.no_such_sysctl",))
    pod = _pod(
        "nosysctl",
        [_c("a", "true")],
        security_context=PodSecurityContext(sysctls=[Sysctl(name="net.ipv4.no_such_sysctl", value="1")]),
    )
    with pytest.raises(SandboxError, match="no_such_sysctl"):
        await rt.run_sandbox(pod, 0)
    assert (await rt.pod_status(pod.metadata.uid)).sandboxes == ()
    assert not [e for e in rt.paths.ns_dir.iterdir()]
    await rt.remove_pod(pod.metadata.uid)
    _assert_pod_gone(rt, pod.metadata.uid)
