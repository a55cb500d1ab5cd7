"""RuncRuntime end to end with real runc, conmon, overlay mounts and cgroups (privileged)."""

from __future__ import annotations

import asyncio
import copy
import functools
import os
import re
import uuid
from pathlib import Path

import pytest

from edgelet.api.types import Container, EmptyDirVolumeSource, ObjectMeta, Pod, PodSpec, Volume, VolumeMount
from edgelet.container.errors import CreateContainerError, SandboxError, StartContainerError
from edgelet.ocispec import build as ocispec
from edgelet.runtime import conmon as conmon_mod
from edgelet.runtime.runc_runtime import RuncRuntime
from edgelet.testing.cleanup import conmon_processes

pytestmark = pytest.mark.privileged

CRI_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+(Z|[+-]\d\d:\d\d) (stdout|stderr) [FP] (.*)$")


# ---------------------------------------------------------------- fixtures


def _pod(name: str, containers: list[Container], **spec) -> Pod:
    return Pod(
        api_version="v1",
        kind="Pod",
        metadata=ObjectMeta(name=name, namespace="default", uid=str(uuid.uuid4()), annotations={}),
        spec=PodSpec(
            containers=containers,
            restart_policy="Always",
            termination_grace_period_seconds=30,
            dns_policy="Default",
            **spec,
        ),
    )


def _c(name: str, *cmd: str, **kw) -> Container:
    return Container(
        name=name,
        image="edgelet.local/busybox:1.36",
        command=list(cmd),
        image_pull_policy="IfNotPresent",
        termination_message_path="/dev/termination-log",
        **kw,
    )


async def _run(rt: RuncRuntime, pod: Pod, busybox, container: Container, attempt: int = 0, sandbox=None):
    if sandbox is None:
        sandbox = await rt.run_sandbox(pod, 0)
    cid = await rt.create_container(pod, container, sandbox, busybox, attempt)
    await rt.start_container(cid)
    return sandbox, cid


async def _wait_exited(rt: RuncRuntime, uid: str, name: str, timeout: float = 10.0):
    for _ in range(int(timeout / 0.05)):
        c = (await rt.pod_status(uid)).latest(name)
        if c is not None and c.state == "exited":
            return c
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name} did not exit: {(await rt.pod_status(uid)).latest(name)}")


def _conmons_under(base: Path) -> list[int]:
    return [pid for pid, argv in conmon_processes() if any(str(base) in a for a in argv) and conmon_mod.is_alive(pid)]


def _assert_pod_gone(rt: RuncRuntime, uid: str) -> None:
    paths = rt.paths
    assert not rt.paths.pod_dir(uid).exists()
    base = paths.root_dir.parent.resolve()
    mounts = [ln.split()[4] for ln in Path("/proc/self/mountinfo").read_text().splitlines()]
    assert not [m for m in mounts if m.startswith(str(base))]
    rel = rt.pod_cgroup(uid).strip("/")
    assert not [h for h in Path("/sys/fs/cgroup").iterdir() if (h / rel).exists()]
    assert not _conmons_under(base)


# ---------------------------------------------------------------- tests


def aio(fn):
    """Run an async test body on a fresh event loop (the suite has no asyncio plugin)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return asyncio.run(fn(*args, **kwargs))

    return wrapper


@aio
async def test_containers_share_the_sandbox_network_and_log_in_cri_format(rt: RuncRuntime, busybox) -> None:
    pod = _pod(
        "web",
        [
            # pid 1 of a pid namespace ignores SIGTERM without a handler: the shell forwards it.
            _c("server", "sh", "-c", "httpd -f -p 8080 -h /etc & p=$!; trap 'kill $p; exit 0' TERM; wait"),
            _c(
                "client",
                "sh",
                "-c",
                "for i in 1 2 3 4 5 6 7 8 9 10; do "
                "wget -q -O - http://127.0.0.1:8080/hostname && exit 0; sleep 0.2; done; exit 1",
            ),
        ],
    )
    uid = pod.metadata.uid
    sandbox, server = await _run(rt, pod, busybox, pod.spec.containers[0])
    assert sandbox.state == "running"
    _, client = await _run(rt, pod, busybox, pod.spec.containers[1], sandbox=sandbox)
    done = await _wait_exited(rt, uid, "client")
    assert done.exit_code == 0, Path(done.log_path).read_text()
    assert done.reason == "Completed" and done.finished_at is not None

    # The client printed the pod's /etc/hostname, served by the other container: one network, one hostname file.
    lines = Path(done.log_path).read_text().splitlines()
    parsed = [CRI_LINE.match(line) for line in lines]
    assert all(parsed), lines
    assert ("stdout", "web") in [(m.group(2), m.group(3)) for m in parsed if m]
    link = rt.paths.container_log_link("default", "web", "client", client)
    assert link.is_symlink() and link.resolve() == Path(done.log_path).resolve()
    assert done.log_path == str(rt.paths.container_log_path("default", "web", uid, "client", 0))

    status = await rt.pod_status(uid)
    running = status.latest("server")
    assert running is not None and running.state == "running" and running.pid

    # A fresh instance (as after an agent restart) sees the same thing.
    again = (await RuncRuntime(rt.paths).list_pods())[uid]
    assert again.name == "web" and again.namespace == "default"
    assert [(s.id, s.pid, s.attempt, s.state) for s in again.sandboxes] == [
        (s.id, s.pid, s.attempt, s.state) for s in status.sandboxes
    ]
    assert [
        (c.id, c.name, c.pid, c.attempt, c.spec_hash, c.state, c.exit_code, c.sandbox_id, c.image_id)
        for c in again.containers
    ] == [
        (c.id, c.name, c.pid, c.attempt, c.spec_hash, c.state, c.exit_code, c.sandbox_id, c.image_id)
        for c in status.containers
    ]
    from edgelet.api.hash import container_hash

    assert running.spec_hash == container_hash(pod.spec.containers[0])

    await rt.stop_container(server, grace=5)
    stopped = (await rt.pod_status(uid)).latest("server")
    assert stopped is not None and stopped.state == "exited" and stopped.exit_code == 0
    await rt.stop_sandbox(sandbox.id)
    await rt.remove_pod(uid)
    _assert_pod_gone(rt, uid)
    assert await rt.pod_status(uid) == type(status)(uid=uid)
    await rt.remove_pod(uid)  # idempotent


@aio
async def test_exit_codes_come_from_conmon(rt: RuncRuntime, busybox) -> None:
    pod = _pod("codes", [_c("three", "sh", "-c", "exit 3"), _c("nine", "sleep", "300")])
    uid = pod.metadata.uid
    sandbox, _ = await _run(rt, pod, busybox, pod.spec.containers[0])
    three = await _wait_exited(rt, uid, "three")
    assert (three.exit_code, three.reason) == (3, "Error")
    assert (rt.paths.exit_dir / three.id).read_text().strip() == "3"

    _, nine = await _run(rt, pod, busybox, pod.spec.containers[1], sandbox=sandbox)
    pid = (await rt.pod_status(uid)).latest("nine").pid
    os.kill(pid, 9)
    killed = await _wait_exited(rt, uid, "nine")
    assert killed.exit_code == 137

    # A restart is a new attempt next to the old one; removing the old leaves the new.
    _, nine1 = await _run(rt, pod, busybox, pod.spec.containers[1], attempt=1, sandbox=sandbox)
    await rt.remove_container(nine)
    names = [(c.name, c.attempt) for c in (await rt.pod_status(uid)).containers]
    assert ("nine", 0) not in names and ("nine", 1) in names
    assert not (rt.paths.exit_dir / nine).exists()
    assert not Path(killed.log_path).exists()  # container GC: the log goes with the container, as in kubelet
    await rt.remove_pod(uid)
    _assert_pod_gone(rt, uid)


@aio
async def test_an_exited_containers_record_carries_its_termination_message(rt: RuncRuntime, busybox) -> None:
    pod = _pod(
        "msg",
        [
            _c("file", "sh", "-c", "printf 'bye now' > /dev/termination-log; exit 3"),
            _c("logs", "sh", "-c", "echo from-the-log; exit 4", termination_message_policy="FallbackToLogsOnError"),
            _c("ok", "true"),
        ],
    )
    uid = pod.metadata.uid
    sandbox, _ = await _run(rt, pod, busybox, pod.spec.containers[0])
    for c in pod.spec.containers[1:]:
        await _run(rt, pod, busybox, c, sandbox=sandbox)
    expected = {"file": "bye now", "logs": "from-the-log\n", "ok": ""}
    assert {n: (await _wait_exited(rt, uid, n)).termination_message for n in expected} == expected
    # Released (runc state and rootfs gone) and read by a new agent: the bundle alone gives the message.
    for c in (await rt.pod_status(uid)).containers:
        await rt.release_container(c.id)
    fresh = await RuncRuntime(rt.paths).pod_status(uid)
    assert {c.name: c.termination_message for c in fresh.containers} == expected
    await rt.remove_pod(uid)
    _assert_pod_gone(rt, uid)


@aio
async def test_stop_kills_a_process_ignoring_sigterm_after_the_grace(rt: RuncRuntime, busybox) -> None:
    pod = _pod("stubborn", [_c("app", "sh", "-c", "trap '' TERM; echo ready; while true; do sleep 1; done")])
    uid = pod.metadata.uid
    _, cid = await _run(rt, pod, busybox, pod.spec.containers[0])
    log_path = rt.paths.container_log_path("default", "stubborn", uid, "app", 0)
    for _ in range(100):
        if log_path.exists() and "ready" in log_path.read_text():
            break
        await asyncio.sleep(0.05)
    await rt.stop_container(cid, grace=0.5)
    c = (await rt.pod_status(uid)).latest("app")
    assert c.state == "exited" and c.exit_code == 137
    await rt.remove_pod(uid)
    _assert_pod_gone(rt, uid)


@aio
async def test_bundle_without_runc_state_is_reported_unknown(rt: RuncRuntime, busybox) -> None:
    pod = _pod("lost", [_c("app", "sleep", "300")])
    uid = pod.metadata.uid
    _, cid = await _run(rt, pod, busybox, pod.spec.containers[0])
    # As after a reboot: the processes and /run are gone, the bundle on disk stays.
    await rt.runc.delete(cid, force=True)
    await rt.removal.wait_monitor_gone(rt.observer.bundles[cid])
    (rt.paths.exit_dir / cid).unlink()
    (rt.observer.bundles[cid] / "exit").unlink(missing_ok=True)
    c = (await RuncRuntime(rt.paths).pod_status(uid)).latest("app")
    assert (c.id, c.state, c.exit_code, c.reason) == (cid, "exited", 255, "ContainerStatusUnknown")
    await rt.remove_pod(uid)
    _assert_pod_gone(rt, uid)


@aio
async def test_failed_create_leaves_nothing_behind(rt: RuncRuntime, busybox) -> None:
    pod = _pod("broken", [_c("app", "/no/such/binary")])
    uid = pod.metadata.uid
    sandbox = await rt.run_sandbox(pod, 0)
    bad_hostpath = _pod(
        "broken",
        [_c("app", "true", volume_mounts=[VolumeMount(name="v", mount_path="/v", sub_path="../../etc")])],
        volumes=[Volume(name="v", empty_dir=EmptyDirVolumeSource())],
    )
    bad_hostpath.metadata.uid = uid
    with pytest.raises(CreateContainerError, match="subPath"):
        await rt.create_container(bad_hostpath, bad_hostpath.spec.containers[0], sandbox, busybox, 0)
    # runc create itself fails on a missing executable? runc 1.1 only fails at start; either way nothing is left.
    try:
        cid = await rt.create_container(pod, pod.spec.containers[0], sandbox, busybox, 0)
        await rt.start_container(cid)
    except (CreateContainerError, StartContainerError):
        pass
    statuses = (await rt.pod_status(uid)).containers
    assert all(c.name == "app" for c in statuses)
    assert len(list((rt.paths.pod_dir(uid) / "containers").glob("*/*"))) == len(statuses)
    await rt.remove_pod(uid)
    _assert_pod_gone(rt, uid)


@aio
async def test_memory_emptydir_is_a_tmpfs_and_is_unmounted_with_the_pod(rt: RuncRuntime, busybox) -> None:
    pod = _pod(
        "vols",
        [
            _c(
                "app",
                "sh",
                "-c",
                "echo hi > /cache/sub/f && grep -q ' /cache ' /proc/mounts",
                volume_mounts=[VolumeMount(name="cache", mount_path="/cache")],
            )
        ],
        volumes=[Volume(name="cache", empty_dir=EmptyDirVolumeSource(medium="Memory", size_limit="16Mi"))],
    )
    pod.spec.containers[0].volume_mounts.append(VolumeMount(name="cache", mount_path="/sub", sub_path="sub"))
    uid = pod.metadata.uid
    await _run(rt, pod, busybox, pod.spec.containers[0])
    c = await _wait_exited(rt, uid, "app")
    assert c.exit_code == 0, Path(c.log_path).read_text()
    vol = rt.paths.pod_dir(uid) / "volumes" / "cache"
    assert (vol / "sub" / "f").read_text() == "hi\n"
    await rt.remove_pod(uid)
    _assert_pod_gone(rt, uid)


@aio
async def test_sandbox_failure_is_undone(rt: RuncRuntime, monkeypatch: pytest.MonkeyPatch) -> None:
    rt.infra_container = True  # a pause process that cannot start
    pod = _pod("nosandbox", [_c("app", "true")])
    real = ocispec.build_sandbox_spec

    def broken(p, ctx):
        spec = copy.deepcopy(real(p, ctx))
        spec["process"]["args"] = ["/does-not-exist"]
        return spec

    monkeypatch.setattr(ocispec, "build_sandbox_spec", broken)
    with pytest.raises(SandboxError):
        sb = await rt.run_sandbox(pod, 0)
        # runc only notices a missing binary at start; run_sandbox starts it, so it must have raised.
        raise AssertionError(f"sandbox started: {sb}")
    assert (await rt.pod_status(pod.metadata.uid)).sandboxes == ()
    await rt.remove_pod(pod.metadata.uid)
    _assert_pod_gone(rt, pod.metadata.uid)


def test_overlay_is_probed_by_a_trial_mount_that_leaves_nothing_behind(tmp_path, monkeypatch) -> None:
    import tempfile

    from edgelet.runtime.rootfs import probe_overlay

    # The probe's scratch dir in this test's own temp dir: an `edgelet check` running meanwhile elsewhere on the
    # machine (another test, another suite) probes in the shared /tmp and must not count here.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    made: list[str] = []
    real_mkdtemp = tempfile.mkdtemp
    monkeypatch.setattr(tempfile, "mkdtemp", lambda *a, **kw: made.append(real_mkdtemp(*a, **kw)) or made[-1])
    assert probe_overlay() is None  # overlayfs works on the test machines
    assert made and all(Path(d).parent == tmp_path for d in made), made  # it did mount in there
    assert str(tmp_path) not in Path("/proc/self/mountinfo").read_text()
    assert list(tmp_path.iterdir()) == []


@aio
async def test_a_bundle_left_without_its_id_is_cleared_before_its_instance_is_made_again(
    rt: RuncRuntime, busybox
) -> None:
    """A power cut can leave an instance's bundle dir without its id file (only the files are fsynced, not the
    directory entries): it names no container to remove, but the new container must not get its old
    writable layer."""
    pod = _pod("torn", [_c("app", "sh", "-c", "test ! -e /left-by-the-old-one")])
    uid = pod.metadata.uid
    sandbox = await rt.run_sandbox(pod, 0)
    torn = rt.layout(uid).container_dir("app", 0)
    (torn / "upper").mkdir(parents=True)
    (torn / "upper" / "left-by-the-old-one").write_text("old")
    await _run(rt, pod, busybox, pod.spec.containers[0], sandbox=sandbox)
    c = await _wait_exited(rt, uid, "app")
    assert (c.attempt, c.exit_code) == (0, 0), Path(c.log_path).read_text()
    await rt.remove_pod(uid)
    _assert_pod_gone(rt, uid)


@aio
async def test_an_exec_with_a_terminal_starts_with_the_clients_size(rt: RuncRuntime, busybox) -> None:
    """runc's own first resize comes only after the command runs: the size must be in the process spec, or a
    shell reading already-typed input sees a 0x0 terminal (busybox `stty size` then fails)."""
    import fcntl
    import json
    import select
    import struct
    import termios

    pod = _pod("tty", [_c("box", "sleep", "300")])
    uid = pod.metadata.uid
    sandbox, cid = await _run(rt, pod, busybox, pod.spec.containers[0])
    master, slave = os.openpty()
    try:
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 111, 0, 0))
        session = await rt.start_exec(cid, ["stty", "size"], tty=True, stdin=slave, stdout=slave, stderr=slave)
        os.close(slave)
        slave = -1
        spec = json.loads(session.process_file.read_text())  # what runc was given (removed once reaped)
        assert spec["terminal"] is True and spec["consoleSize"] == {"width": 111, "height": 33}
        seen = b""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while b"33 111" not in seen and loop.time() < deadline:
            ready, _, _ = await asyncio.to_thread(select.select, [master], [], [], 0.5)
            if ready:
                try:
                    seen += os.read(master, 4096)
                except OSError:  # EIO: runc closed its side
                    break
        assert await session.wait() == 0, seen
        assert b"33 111" in seen, seen
    finally:
        for fd in (master, slave):
            if fd >= 0:
                os.close(fd)
        await rt.stop_sandbox(sandbox.id)
        await rt.remove_pod(uid)
    _assert_pod_gone(rt, uid)
