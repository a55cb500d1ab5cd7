"""Hostile volumes against the real runtime: the subPath swap race, planted symlinks, cleanup of subPath mounts,
and recursively read-only hostPath mounts (privileged: real runc, conmon, mounts)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from edgelet.api.types import EmptyDirVolumeSource, HostPathVolumeSource, Volume, VolumeMount
from edgelet.container.errors import CreateContainerError
from edgelet.runtime import bundle as bl
from edgelet.runtime import subpath
from edgelet.runtime.host import probe_host_facts
from edgelet.runtime.runc_runtime import RuncRuntime
from edgelet.runtime.subpath import SubPathError
from tests.integration.test_runtime_runc import _assert_pod_gone, _c, _pod, _run, _wait_exited, aio

pytestmark = pytest.mark.privileged

SIBLINGS = 12
ROUNDS = 3


def _mounts_under(path: Path) -> list[str]:
    return bl.mounts_under(path)


def _log(c) -> str:
    return Path(c.log_path).read_text() if c.log_path and Path(c.log_path).exists() else ""


@aio
async def test_swap_race_never_mounts_the_host_directory(rt: RuncRuntime, busybox, tmp_path: Path) -> None:
    host = tmp_path / "host-secret"
    host.mkdir()
    (host / "secret").write_text("host data\n")
    vol = [Volume(name="v", empty_dir=EmptyDirVolumeSource())]
    # The flipper swaps /v/d between a directory and a symlink to the host directory, pausing so both states last.
    flip = _c(
        "flipper",
        "sh",
        "-c",
        f"while :; do mkdir /v/d; sleep 0.1; rm -rf /v/d; ln -s {host} /v/d; sleep 0.1; rm /v/d; done",
        volume_mounts=[VolumeMount(name="v", mount_path="/v")],
    )
    siblings = [
        _c(
            f"sib{i}",
            "sh",
            "-c",
            "if [ -e /m/secret ]; then echo ESCAPED; exit 3; fi",
            volume_mounts=[VolumeMount(name="v", mount_path="/m", sub_path="d")],
        )
        for i in range(SIBLINGS)
    ]
    pod = _pod("race", [flip, *siblings], volumes=vol)
    uid = pod.metadata.uid
    sandbox, _ = await _run(rt, pod, busybox, flip)
    outcomes = {"mounted": 0, "refused": 0, "deleted": 0}
    for attempt in range(ROUNDS):
        for sib in siblings:
            try:
                cid = await rt.create_container(pod, sib, sandbox, busybox, attempt)
            except SubPathError as exc:
                # The swap was caught: refused, naming what failed.
                assert "race" in str(exc) and sib.name in str(exc) and "'v'" in str(exc) and "'d'" in str(exc)
                outcomes["refused"] += 1
                continue
            except CreateContainerError as exc:
                # The directory that was opened and mounted has been deleted since: runc cannot mount it.
                assert "no such file or directory" in str(exc), exc
                outcomes["deleted"] += 1
                continue
            await rt.start_container(cid)
            c = await _wait_exited(rt, uid, sib.name, timeout=30)
            assert c.exit_code == 0, f"{sib.name} saw the host directory: {_log(c)}"
            outcomes["mounted"] += 1
    assert sum(outcomes.values()) == SIBLINGS * ROUNDS
    print("swap race outcomes:", outcomes)
    # Nothing a sibling wrote reached the host directory.
    assert sorted(p.name for p in host.iterdir()) == ["secret"]
    await rt.remove_pod(uid)
    _assert_pod_gone(rt, uid)


@aio
async def test_planted_symlink_creates_nothing_outside_and_fails_clearly(
    rt: RuncRuntime, busybox, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    vol = [Volume(name="v", empty_dir=EmptyDirVolumeSource())]
    planter = _c(
        "planter",
        "sh",
        "-c",
        f"ln -s {outside} /v/link && ln -s {tmp_path}/absent/x /v/dangling",
        volume_mounts=[VolumeMount(name="v", mount_path="/v")],
    )
    victims = {
        sub: _c(f"victim{i}", "true", volume_mounts=[VolumeMount(name="v", mount_path="/m", sub_path=sub)])
        for i, sub in enumerate(["link", "link/new/dir", "dangling", "dangling/deeper"])
    }
    pod = _pod("planted", [planter, *victims.values()], volumes=vol)
    uid = pod.metadata.uid
    sandbox, _ = await _run(rt, pod, busybox, planter)
    assert (await _wait_exited(rt, uid, "planter")).exit_code == 0
    for sub, victim in victims.items():
        with pytest.raises(SubPathError) as info:
            await rt.create_container(pod, victim, sandbox, busybox, 0)
        text = str(info.value)
        assert "default/planted" in text and victim.name in text and "'v'" in text and repr(sub) in text, text
        assert "outside the volume" in text
        assert isinstance(info.value, CreateContainerError)
    assert list(outside.iterdir()) == []
    assert not (tmp_path / "absent").exists()
    assert not _mounts_under(rt.paths.pod_dir(uid) / subpath.SUBPATHS_DIR)
    await rt.remove_pod(uid)
    _assert_pod_gone(rt, uid)


@aio
async def test_sub_path_mounts_go_with_the_container_and_the_pod(rt: RuncRuntime, busybox) -> None:
    vol = [Volume(name="v", empty_dir=EmptyDirVolumeSource())]
    app = _c(
        "app",
        "sh",
        "-c",
        "echo hi > /m/g && cat /f1",
        volume_mounts=[
            VolumeMount(name="v", mount_path="/m", sub_path="a/b"),
            VolumeMount(name="v", mount_path="/f1", sub_path="a/b/f", read_only=True),
        ],
    )
    stay = _c("stay", "sleep", "3600", volume_mounts=[VolumeMount(name="v", mount_path="/m", sub_path="a")])
    pod = _pod("subpaths", [app, stay], volumes=vol)
    uid = pod.metadata.uid
    pod_dir = rt.paths.pod_dir(uid)
    (pod_dir / "volumes" / "v" / "a" / "b").mkdir(parents=True)
    (pod_dir / "volumes" / "v" / "a" / "b" / "f").write_text("file\n")
    sandbox, cid = await _run(rt, pod, busybox, app)
    c = await _wait_exited(rt, uid, "app")
    assert c.exit_code == 0 and "file" in _log(c), _log(c)
    assert (pod_dir / "volumes" / "v" / "a" / "b" / "g").read_text() == "hi\n"
    _, stay_id = await _run(rt, pod, busybox, stay, sandbox=sandbox)
    app_mounts = subpath.subpaths_dir(pod_dir) / "v" / "app"
    assert len(_mounts_under(app_mounts)) == 2  # a directory and a file, one per volumeMount index
    await rt.remove_container(cid)
    assert not app_mounts.exists() and not _mounts_under(app_mounts)
    assert len(_mounts_under(subpath.subpaths_dir(pod_dir))) == 1  # the other container's
    # A running container holds its own copy of the mount: removing the host-side one (as the removal of an
    # older instance of the same container does) leaves it working.
    subpath.remove_container_sub_paths(pod_dir, "stay")
    assert not _mounts_under(subpath.subpaths_dir(pod_dir))
    done = await rt.exec_sync(stay_id, ["sh", "-c", "test -f /m/b/f && echo still > /m/after"], timeout=30)
    assert done.returncode == 0, done
    assert (pod_dir / "volumes" / "v" / "a" / "after").read_text() == "still\n"
    await rt.remove_pod(uid)
    _assert_pod_gone(rt, uid)


@aio
async def test_sub_path_mounts_are_cleaned_after_a_crash(runtime_paths, busybox) -> None:
    rt = RuncRuntime(runtime_paths)
    vol = [Volume(name="v", empty_dir=EmptyDirVolumeSource())]
    app = _c("app", "sleep", "3600", volume_mounts=[VolumeMount(name="v", mount_path="/m", sub_path="d")])
    pod = _pod("crash", [app], volumes=vol)
    uid = pod.metadata.uid
    await _run(rt, pod, busybox, app)
    # The agent dies between a subPath mount and `runc create` of another container: its mount is left too.
    subpath.mount_sub_path(
        rt.paths.pod_dir(uid),
        rt.paths.pod_dir(uid) / "volumes" / "v",
        pod="default/crash",
        volume="v",
        container="half-made",
        index=0,
        sub_path="e",
    )
    assert len(_mounts_under(subpath.subpaths_dir(rt.paths.pod_dir(uid)))) == 2
    del rt  # crash: nothing in memory survives
    fresh = RuncRuntime(runtime_paths)
    assert uid in await fresh.list_pods()
    await fresh.remove_pod(uid)
    _assert_pod_gone(fresh, uid)


def _ro_pod(host: Path):
    writer = _c(
        "writer",
        "sh",
        "-c",
        "touch /h/top 2>/dev/null && echo top-writable; touch /h/sub/x 2>/dev/null && echo sub-writable; echo done",
        volume_mounts=[VolumeMount(name="h", mount_path="/h", read_only=True)],
    )
    return _pod(
        "rro", [writer], volumes=[Volume(name="h", host_path=HostPathVolumeSource(path=str(host), type="Directory"))]
    )


@pytest.fixture
def host_with_submount(tmp_path_factory: pytest.TempPathFactory):
    # Outside the runtime's temp dir, which must hold no mount once the pod is gone.
    host = tmp_path_factory.mktemp("hostdir")
    (host / "sub").mkdir(parents=True)
    bl.mount_tmpfs(host / "sub", ["mode=0777", "size=1m"])
    yield host
    bl.unmount_all_under(host)


@aio
async def test_read_only_host_path_is_read_only_in_its_submounts(runtime_paths, busybox, host_with_submount) -> None:
    facts = probe_host_facts()
    if not facts.recursive_read_only:
        pytest.skip("this kernel has no mount_setattr (Linux < 5.12): read-only mounts are not recursive")
    rt = RuncRuntime(runtime_paths, host_facts=facts)
    pod = _ro_pod(host_with_submount)
    await _run(rt, pod, busybox, pod.spec.containers[0])
    c = await _wait_exited(rt, pod.metadata.uid, "writer")
    out = _log(c)
    assert "done" in out and "top-writable" not in out and "sub-writable" not in out, out
    assert not (host_with_submount / "sub" / "x").exists()
    await rt.remove_pod(pod.metadata.uid)
    _assert_pod_gone(rt, pod.metadata.uid)


@aio
async def test_without_rro_a_read_only_mount_leaves_submounts_writable(
    runtime_paths, busybox, host_with_submount
) -> None:
    # The fallback where the kernel cannot (documented): plain `ro` covers the top mount only.
    rt = RuncRuntime(runtime_paths, host_facts=dataclasses.replace(probe_host_facts(), recursive_read_only=False))
    pod = _ro_pod(host_with_submount)
    await _run(rt, pod, busybox, pod.spec.containers[0])
    out = _log(await _wait_exited(rt, pod.metadata.uid, "writer"))
    assert "top-writable" not in out and "sub-writable" in out, out
    await rt.remove_pod(pod.metadata.uid)
    _assert_pod_gone(rt, pod.metadata.uid)
