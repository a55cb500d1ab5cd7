"""Log rotation, container GC and log removal with real runc, conmon, overlay mounts and cgroups (privileged)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import uuid
from pathlib import Path

import pytest

from edgelet import logs
from edgelet.api.types import Container, ObjectMeta, Pod, PodSpec
from edgelet.runtime import rootfs
from edgelet.runtime.layout import RuntimePaths
from edgelet.runtime.logrotation import LogRotator, backstop_size, disk_bound
from edgelet.runtime.runc_runtime import RuncRuntime
from edgelet.util.clock import RealClock
from tests.integration.test_runtime_runc import aio

pytestmark = pytest.mark.privileged

MAX_SIZE = 64 * 1024
MAX_FILES = 3
LINE = re.compile(rb"line-(\d+)")


def _pod(name: str, *containers: Container) -> Pod:
    return Pod(
        api_version="v1",
        kind="Pod",
        metadata=ObjectMeta(name=name, namespace="default", uid=str(uuid.uuid4()), annotations={}),
        spec=PodSpec(
            containers=list(containers),
            restart_policy="Always",
            termination_grace_period_seconds=1,
            dns_policy="Default",
        ),
    )


def _c(name: str, script: str) -> Container:
    return Container(
        name=name,
        image="edgelet.local/busybox:1.36",
        command=["sh", "-c", script],
        image_pull_policy="IfNotPresent",
        termination_message_path="/dev/termination-log",
    )


@pytest.fixture
def rt(runtime_paths: RuntimePaths) -> RuncRuntime:
    return RuncRuntime(runtime_paths, log_size_max=backstop_size(MAX_SIZE))


def _disk_bytes(directory: Path) -> int:
    """Bytes the instance's log files hold, each inode once (the current file's link is not extra)."""
    seen: dict[tuple[int, int], int] = {}
    for name in os.listdir(directory):
        try:
            st = os.stat(directory / name)
        except FileNotFoundError:
            continue
        seen[(st.st_dev, st.st_ino)] = st.st_size
    return sum(seen.values())


async def _wait(predicate, timeout: float = 60.0, what: str = "condition"):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        value = await predicate()
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def _run_and_follow(
    rt: RuncRuntime,
    busybox,
    name: str,
    script: str,
    *,
    max_size: int,
    max_files: int,
    timeout: float = 180,
    poll: float = 0.01,
) -> tuple[list[int], int, LogRotator, Pod]:
    """Run `script` in a container under a rotator, follow its log until it exits, sample the log's disk use.

    Returns the line numbers the follower saw, the peak bytes on disk, the rotator and the pod (removed).
    """
    pod = _pod(name, _c("c", script))
    rotator = LogRotator(rt.paths, RealClock(), max_size=max_size, max_files=max_files, interval=1.0, min_delay=0.05)
    current = rt.paths.container_log_path("default", name, pod.metadata.uid, "c", 0)
    peak = 0
    sandbox = await rt.run_sandbox(pod, 0)
    cid = await rt.create_container(pod, pod.spec.containers[0], sandbox, busybox, 0)
    data, cursor = await asyncio.to_thread(logs.open_log, current)
    got = [data]
    stop = asyncio.Event()

    async def watch() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, await asyncio.to_thread(_disk_bytes, current.parent))
            await asyncio.sleep(0.01)

    async def follow() -> None:
        async for chunk in logs.follow_cursor(cursor, stop.is_set, poll=poll):
            got.append(chunk)

    async def until_exited() -> None:
        # Not on a last line: a flood may lose it to conmon's cut. The follower drains after this.
        while not any(c.id == cid and c.state == "exited" for c in (await rt.pod_status(pod.metadata.uid)).containers):
            await asyncio.sleep(0.1)
        stop.set()

    tasks = [asyncio.create_task(rotator.run()), asyncio.create_task(watch()), asyncio.create_task(until_exited())]
    try:
        await rt.start_container(cid)
        await asyncio.wait_for(follow(), timeout=timeout)
    finally:
        stop.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await rt.remove_pod(pod.metadata.uid)
    # Removing the pod took its logs and the link under containers/.
    assert not current.parent.parent.exists()
    assert not list((rt.paths.log_dir / "containers").iterdir())
    # Line by line, whole lines only: conmon writes a line its read from the pipe split as a partial (P)
    # entry and the rest as the next one, and when a flood loses the file holding the rest to conmon's
    # cut, the reader joins the head to a later line ("line-1189" + "line-14232"): not a number seen.
    return [int(m.group(1)) for line in b"".join(got).split(b"\n") if (m := LINE.fullmatch(line))], peak, rotator, pod


@aio
async def test_a_flood_stays_within_the_disk_bound(rt: RuncRuntime, busybox):
    # Numbered lines as fast as the shell writes them (megabytes a second).
    count = 60000
    numbers, peak, rotator, _ = await _run_and_follow(
        rt,
        busybox,
        "flood",
        f"i=0; while [ $i -lt {count} ]; do echo line-$i; i=$((i+1)); done; echo done",
        max_size=MAX_SIZE,
        max_files=MAX_FILES,
    )
    bound = disk_bound(MAX_SIZE, MAX_FILES)
    # The flood wrote many times what may stay on disk (CRI lines of `line-N` are over 40 bytes).
    assert numbers and numbers[-1] * 40 > 2 * bound
    # Bounded however late the checks come (a loaded machine): no file exceeds conmon's backstop, and
    # only the two linked files of the last check become extra files before the next one prunes
    # (`disk_bound` has the count; a flood under load peaked at 535 KB, over the max-size x max-files +
    # two backstops once promised here). The bound counts no time nor rate: it holds under any load.
    assert peak <= bound, peak
    # A flood that outruns the checks loses lines to conmon's cut (that is the backstop), but the
    # follower never sees one twice or out of order (a line cut in two across a lost file is lost).
    assert numbers and numbers == sorted(set(numbers))


@aio
async def test_follow_across_rotations_misses_and_repeats_nothing(rt: RuncRuntime, busybox):
    # About 50 kB/s against 16 KiB files: a rotation every few tenths of a second, never outrun.
    count = 6000
    numbers, _, rotator, _ = await _run_and_follow(
        rt,
        busybox,
        "steady",
        f"i=0; while [ $i -lt {count} ]; do echo line-$i; i=$((i+1)); "
        "[ $((i % 20)) -eq 0 ] && sleep 0.02; done; echo done",
        max_size=16 * 1024,
        max_files=5,
    )
    assert rotator.rotations >= 5
    assert numbers == list(range(count))


@aio
async def test_follow_with_conmons_cut_at_twice_the_rotation_size_misses_and_repeats_nothing(rt: RuncRuntime, busybox):
    # As the agent runs it: conmon cuts at twice the rotation size on its own count of bytes, so its cuts
    # fall right after our reopens and in the middle of checks; the follower looks as seldom as the API's.
    rt.log_size_max = backstop_size(4 * 1024)
    count = 1500
    numbers, _, rotator, _ = await _run_and_follow(
        rt,
        busybox,
        "cut",
        f"i=0; while [ $i -lt {count} ]; do echo line-$i; i=$((i+1)); "
        "[ $((i % 10)) -eq 0 ] && sleep 0.05; done; echo done",
        max_size=4 * 1024,
        max_files=4,
        poll=logs.FOLLOW_POLL,
    )
    assert numbers == list(range(count)), sorted(set(range(count)) - set(numbers))
    assert rotator.rotations >= 5


@aio
async def test_gc_removes_old_instances_with_their_logs_and_exited_ones_release_mount_and_runc_state(
    rt: RuncRuntime, busybox
):
    pod = _pod("gc", _c("once", "echo hello; exit 3"))
    uid = pod.metadata.uid
    sandbox = await rt.run_sandbox(pod, 0)
    ids = []
    for attempt in range(3):
        cid = await rt.create_container(pod, pod.spec.containers[0], sandbox, busybox, attempt)
        await rt.start_container(cid)
        ids.append(cid)
        await _wait(lambda: _exited(rt, uid, cid), what=f"instance {attempt} exiting")
    # The exited instance that stays keeps its record, but not its runc state nor its rootfs mount.
    bundle = rt.layout(uid).container_dir("once", 2)
    assert rootfs.is_mountpoint(bundle / "rootfs")
    await rt.release_container(ids[2])
    assert await rt.runc.state(ids[2]) is None
    assert not rootfs.is_mountpoint(bundle / "rootfs")
    assert (bundle / "upper").is_dir()  # the writable layer stays with the record
    status = await rt.pod_status(uid)
    latest = status.latest("once")
    assert latest is not None and latest.id == ids[2] and latest.state == "exited" and latest.exit_code == 3
    # GC of the oldest instance: bundle, runc state, mount and logs go; the two newer stay.
    log_dir = rt.paths.pod_log_dir("default", "gc", uid) / "once"
    assert sorted(os.listdir(log_dir)) == ["0.log", "1.log", "2.log"]
    await rt.remove_container(ids[0])
    assert sorted(os.listdir(log_dir)) == ["1.log", "2.log"]
    assert not rt.layout(uid).container_dir("once", 0).exists()
    assert [c.id for c in (await rt.pod_status(uid)).containers] == ids[2:0:-1] or sorted(
        c.id for c in (await rt.pod_status(uid)).containers
    ) == sorted(ids[1:])
    links = [json.loads((rt.layout(uid).container_dir("once", a) / "config.json").read_text()) for a in (1, 2)]
    assert all(c["annotations"]["io.kubernetes.container.name"] == "once" for c in links)
    await rt.remove_pod(uid)
    assert not log_dir.parent.exists()


async def _exited(rt: RuncRuntime, uid: str, cid: str) -> bool:
    status = await rt.pod_status(uid)
    return any(c.id == cid and c.state == "exited" for c in status.containers)
