"""A container prepared while its sandbox is set up, with real runc, conmon and overlay mounts: created from
what was prepared, and nothing left (mounts, bundles, log links, namespaces) when either half fails (privileged)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from edgelet.api.types import Container, ObjectMeta, Pod, PodSpec
from edgelet.container.errors import CreateContainerError, SandboxError
from edgelet.runtime import pinns, rootfs
from edgelet.runtime.runc_runtime import RuncRuntime
from edgelet.sync.syncpod import Syncer
from edgelet.testing.cleanup import runc_containers
from edgelet.testing.fakes import FakeImageStore
from edgelet.util.backoff import Backoff
from edgelet.util.clock import RealClock
from tests.integration.test_runtime_runc import aio

pytestmark = pytest.mark.privileged


def _pod(name: str, *names: str) -> Pod:
    return Pod(
        metadata=ObjectMeta(name=name, namespace="default", uid=uuid.uuid4().hex),
        spec=PodSpec(
            containers=[
                Container(
                    name=n,
                    image="edgelet.local/busybox:1.36",
                    command=["sleep", "3600"],
                    image_pull_policy="IfNotPresent",
                )
                for n in names
            ],
            restart_policy="Always",
            termination_grace_period_seconds=1,
        ),
    )


def _mounts_under(base: Path) -> list[str]:
    return [
        ln.split()[4]
        for ln in Path("/proc/self/mountinfo").read_text().splitlines()
        if ln.split()[4].startswith(str(base))
    ]


def _containers_left(rt: RuncRuntime, uid: str) -> list[Path]:
    return sorted(rt.paths.pod_dir(uid).glob("containers/*/*"))


def _links(rt: RuncRuntime) -> list[Path]:
    return sorted(p for p in rt.paths.log_dir.rglob("*") if p.is_symlink())


def _syncer(rt: RuncRuntime, busybox) -> Syncer:
    images = FakeImageStore()
    images.records = {"edgelet.local/busybox:1.36": busybox}
    return Syncer(rt, images, Backoff(), RealClock(), publish=lambda *a: None)


@aio
async def test_prepared_then_created_runs_and_discard_leaves_nothing(rt: RuncRuntime, busybox) -> None:
    pod = _pod("prep", "a", "b")
    uid = pod.metadata.uid
    a, b = pod.spec.containers
    pa, pb = await asyncio.gather(rt.prepare_container(pod, a, busybox, 0), rt.prepare_container(pod, b, busybox, 0))
    assert len(_mounts_under(rt.paths.root_dir.resolve())) == 2 and len(_links(rt)) == 2
    assert not runc_containers(rt.paths.runc_root)
    sandbox = await rt.run_sandbox(pod, 0)
    cid = await rt.create_container(pod, a, sandbox, busybox, 0, prepared=pa)
    assert cid == pa.id
    await rt.start_container(cid)
    (c,) = (await rt.pod_status(uid)).containers
    assert c.state == "running" and c.name == "a"
    # "b" is not created: discarding it removes its mount, bundle and log link, and nothing of "a".
    await rt.discard_prepared(pb)
    assert [p.parent.name for p in _containers_left(rt, uid)] == ["a"]
    assert len(_links(rt)) == 1 and len(_mounts_under(rt.paths.pod_dir(uid).resolve())) == 1
    await rt.stop_container(cid, 1)
    await rt.remove_pod(uid)
    assert not _mounts_under(rt.paths.root_dir.resolve()) and not _links(rt)


@aio
async def test_a_failed_preparation_leaves_nothing(rt: RuncRuntime, busybox, monkeypatch) -> None:
    pod = _pod("badprep", "a")
    real = rootfs.mount_rootfs

    def mount_then_fail(layers, bundle):
        real(layers, bundle)  # the overlay is mounted when the failure comes
        raise OSError("injected: after the rootfs mount")

    monkeypatch.setattr(rootfs, "mount_rootfs", mount_then_fail)
    with pytest.raises(CreateContainerError, match="injected"):
        await rt.prepare_container(pod, pod.spec.containers[0], busybox, 0)
    assert not _mounts_under(rt.paths.root_dir.resolve())
    assert not _containers_left(rt, pod.metadata.uid) and not _links(rt)


@aio
async def test_a_sandbox_gone_before_the_create_discards_the_prepared(rt: RuncRuntime, busybox) -> None:
    pod = _pod("gone", "a")
    prepared = await rt.prepare_container(pod, pod.spec.containers[0], busybox, 0)
    sandbox = await rt.run_sandbox(pod, 0)
    await rt.stop_sandbox(sandbox.id)  # its namespaces unpinned
    with pytest.raises(SandboxError):
        await rt.create_container(pod, pod.spec.containers[0], sandbox, busybox, 0, prepared=prepared)
    assert not _containers_left(rt, pod.metadata.uid) and not _links(rt)
    assert not _mounts_under(rt.paths.root_dir.resolve())
    await rt.remove_pod(pod.metadata.uid)


@aio
async def test_sync_with_a_failing_sandbox_leaves_no_prepared_container(rt: RuncRuntime, busybox, monkeypatch) -> None:
    pod = _pod("sbfail", "a", "b")

    def fail_pin(*args, **kwargs):
        raise OSError("injected: cannot pin the namespaces")

    monkeypatch.setattr(pinns, "pin", fail_pin)
    await _syncer(rt, busybox).sync_pod(pod)
    uid = pod.metadata.uid
    assert not _mounts_under(rt.paths.root_dir.resolve()) and not _mounts_under(rt.paths.run_dir.resolve())
    assert not _containers_left(rt, uid) and not _links(rt)
    assert not rt.paths.ns_dir.exists() or not list(rt.paths.ns_dir.iterdir())
    assert not runc_containers(rt.paths.runc_root)
    assert not (await rt.pod_status(uid)).containers
    await rt.remove_pod(uid)


@aio
async def test_sync_with_a_failing_preparation_starts_the_rest(rt: RuncRuntime, busybox, monkeypatch) -> None:
    pod = _pod("prepfail", "a", "b")
    uid = pod.metadata.uid
    real = rootfs.mount_rootfs
    failed: list[str] = []

    def fail_first(layers, bundle):
        # The first mount of container "a" fails (the one made ahead); its own create then mounts again.
        if bundle.parent.name == "a" and not failed:
            failed.append(str(bundle))
            raise OSError("injected: overlay mount")
        return real(layers, bundle)

    monkeypatch.setattr(rootfs, "mount_rootfs", fail_first)
    await _syncer(rt, busybox).sync_pod(pod)
    assert failed
    status = await rt.pod_status(uid)
    assert sorted((c.name, c.state) for c in status.containers) == [("a", "running"), ("b", "running")]
    assert [p.parent.name for p in _containers_left(rt, uid)] == ["a", "b"]  # no third bundle from the failure
    for c in status.containers:
        await rt.stop_container(c.id, 1)
    await rt.remove_pod(uid)
    assert not _mounts_under(rt.paths.root_dir.resolve()) and not _links(rt)


@aio
async def test_a_config_that_fails_kills_the_conmon_waiting_for_it(rt: RuncRuntime, busybox, monkeypatch) -> None:
    """conmon starts beside the config write and waits on its start pipe: a failed config leaves no conmon."""
    import time

    from edgelet.container.errors import CreateContainerConfigError
    from edgelet.ocispec import build as ocispec
    from edgelet.ocispec.errors import SpecError
    from edgelet.testing.cleanup import conmon_processes

    pod = _pod("badcfg", "a")
    sandbox = await rt.run_sandbox(pod, 0)

    base = str(rt.paths.root_dir.parent.resolve())
    waiting: list[int] = []

    def slow_failure(*args, **kwargs):
        for _ in range(100):  # conmon is up meanwhile, waiting on its start pipe
            waiting[:] = [pid for pid, argv in conmon_processes() if any(base in a for a in argv)]
            if waiting:
                break
            time.sleep(0.05)
        raise SpecError("injected: the spec cannot be built")

    monkeypatch.setattr(ocispec, "build_container_spec", slow_failure)
    with pytest.raises(CreateContainerConfigError, match="injected"):
        await rt.create_container(pod, pod.spec.containers[0], sandbox, busybox, 0)
    assert len(waiting) == 1  # it was there, and is gone
    assert not [pid for pid, argv in conmon_processes() if any(base in a for a in argv)]
    assert not runc_containers(rt.paths.runc_root)
    assert not _containers_left(rt, pod.metadata.uid) and not _links(rt)
    monkeypatch.undo()
    # The next create of the same instance works.
    cid = await rt.create_container(pod, pod.spec.containers[0], sandbox, busybox, 0)
    await rt.start_container(cid)
    assert [c.state for c in (await rt.pod_status(pod.metadata.uid)).containers] == ["running"]
    await rt.stop_container(cid, 1)
    await rt.remove_pod(pod.metadata.uid)


@aio
async def test_conmon_joins_the_pods_cgroup_while_it_waits_on_its_start_pipe(
    rt: RuncRuntime, busybox, monkeypatch
) -> None:
    """conmon is moved into the pod's monitor cgroup beside the config write, before it runs `runc create`:
    what it forks starts there, and nothing stands between create and start."""
    import time

    from edgelet.ocispec import build as ocispec
    from edgelet.testing.cleanup import conmon_processes

    pod = _pod("joins", "a")
    sandbox = await rt.run_sandbox(pod, 0)
    monitor = rt.monitor_cgroup(pod.metadata.uid, pod)
    base = str(rt.paths.root_dir.parent.resolve())
    seen: list[str] = []
    build = ocispec.build_container_spec

    def watched(*args, **kwargs):
        for _ in range(200):  # conmon is up meanwhile, waiting on its start pipe for this config
            waiting = [pid for pid, argv in conmon_processes() if any(base in a for a in argv)]
            cgroups = [Path(f"/proc/{pid}/cgroup").read_text() for pid in waiting]
            if any(monitor in text for text in cgroups):
                seen.append(monitor)
                break
            time.sleep(0.025)
        return build(*args, **kwargs)

    monkeypatch.setattr(ocispec, "build_container_spec", watched)
    cid = await rt.create_container(pod, pod.spec.containers[0], sandbox, busybox, 0)
    assert seen == [monitor]  # in the pod's cgroup before its config was written
    await rt.start_container(cid)
    conmon_pid = int((rt.paths.pod_dir(pod.metadata.uid) / "containers/a/0/conmon.pid").read_text())
    assert monitor in Path(f"/proc/{conmon_pid}/cgroup").read_text()  # the monitor it forked, too
    await rt.stop_container(cid, 1)
    await rt.remove_pod(pod.metadata.uid)
