"""Pods under runc and crun side by side in one runtime, with real runc, crun, conmon, mounts and cgroups
(privileged): each pod's sandbox and containers run under its handler, a fresh runtime with another default
adopts them on theirs, and removal leaves nothing under either."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from edgelet.api.types import PodSecurityContext
from edgelet.runtime.handlers import HandlerConfig
from edgelet.runtime.runc_runtime import RuncRuntime
from tests.integration.test_runtime_runc import _assert_pod_gone, _c, _pod, _run, _wait_exited, aio

pytestmark = pytest.mark.privileged

HANDLERS = {"runc": HandlerConfig("runc"), "crun": HandlerConfig("crun")}


def _runtime(paths, default: str) -> RuncRuntime:
    return RuncRuntime(paths, runtime_handlers=HANDLERS, runtime_handler=default)


def _listed(rt: RuncRuntime, handler: str) -> set[str]:
    runc = rt.handlers.get(handler)
    out = subprocess.run([runc.binary, "--root", str(runc.root), "list", "--format", "json"], capture_output=True)
    return {e["id"] for e in json.loads(out.stdout or b"null") or []}


@aio
async def test_pods_of_both_handlers_run_side_by_side_and_keep_their_handler_across_a_restart(
    runtime_paths, busybox, crun_ready
) -> None:
    rt = _runtime(runtime_paths, "runc")
    pods = {
        # A pod sharing its PID namespace gets a pause process: the sandbox itself is a container of its handler.
        "crun": _pod(
            "on-crun",
            [_c("c", "sh", "-c", "echo hi-from-crun; exec sleep 300")],
            runtime_class_name="crun",
            share_process_namespace=True,
        ),
        "runc": _pod("on-runc", [_c("c", "sh", "-c", "echo hi-from-runc; exec sleep 300")]),
    }
    started = {}
    for handler, pod in pods.items():
        sandbox, cid = await _run(rt, pod, busybox, pod.spec.containers[0])
        assert sandbox.runtime_handler == handler
        started[handler] = (sandbox, cid)
    assert started["crun"][1] in _listed(rt, "crun") and started["crun"][0].id in _listed(rt, "crun")
    assert started["runc"][1] in _listed(rt, "runc") and started["runc"][1] not in _listed(rt, "crun")

    for handler, pod in pods.items():
        out = await rt.exec_sync(started[handler][1], ["sh", "-c", "echo $$"], timeout=10)
        assert out.returncode == 0 and out.stdout.strip()

    # An agent restarted with crun as its default: the runc pod stays on runc, its new containers too.
    rt2 = _runtime(runtime_paths, "crun")
    listed = await rt2.list_pods()
    for handler, pod in pods.items():
        status = listed[pod.metadata.uid]
        assert [s.runtime_handler for s in status.sandboxes] == [handler]
        running = status.latest("c")
        assert running is not None and running.state == "running"
    runc_pod = pods["runc"]
    sandbox = listed[runc_pod.metadata.uid].sandboxes[0]
    three = _c("three", "sh", "-c", "exit 3")
    cid = await rt2.create_container(runc_pod, three, sandbox, busybox, 0)
    assert cid in _listed(rt2, "runc")
    await rt2.start_container(cid)
    done = await _wait_exited(rt2, runc_pod.metadata.uid, "three")
    assert (done.exit_code, done.reason) == (3, "Error")

    # Stop and removal through the new instance reach each pod's own handler.
    for handler, pod in pods.items():
        c = (await rt2.pod_status(pod.metadata.uid)).latest("c")
        await rt2.stop_container(c.id, grace=1)
        stopped = (await rt2.pod_status(pod.metadata.uid)).latest("c")
        # 143: not pid 1 in a shared PID namespace, sleep dies of the TERM
        assert stopped.state == "exited" and stopped.exit_code in (137, 143)
        await rt2.stop_sandbox(started[handler][0].id)
        await rt2.remove_pod(pod.metadata.uid)
    for pod in pods.values():
        _assert_pod_gone(rt2, pod.metadata.uid)
    assert not _listed(rt2, "crun") and not _listed(rt2, "runc")


@aio
async def test_crun_container_exit_codes_oom_and_limits(runtime_paths, busybox, crun_ready) -> None:
    from edgelet.api.types import ResourceRequirements

    rt = _runtime(runtime_paths, "crun")
    limits = ResourceRequirements(limits={"memory": "32Mi", "cpu": "500m"}, requests={"memory": "32Mi", "cpu": "500m"})
    pod = _pod(
        "crun-limits",
        [
            _c("oom", "sh", "-c", "x=a; while true; do x=$x$x; done", resources=limits),
            _c("nine", "sleep", "300", resources=limits),
        ],
        security_context=PodSecurityContext(),
    )
    uid = pod.metadata.uid
    sandbox, _ = await _run(rt, pod, busybox, pod.spec.containers[0])
    assert sandbox.runtime_handler == "crun"
    oom = await _wait_exited(rt, uid, "oom", timeout=60)
    assert oom.reason == "OOMKilled" and oom.exit_code == 137
    _, nine = await _run(rt, pod, busybox, pod.spec.containers[1], sandbox=sandbox)
    running = (await rt.pod_status(uid)).latest("nine")
    # The pod cgroup's memory limit is crun's to apply to the container.
    cgroup = rt.pod_cgroup(uid, pod).strip("/")
    limit = (
        f"/sys/fs/cgroup/{cgroup}/{nine}/memory.max"
        if os.path.exists("/sys/fs/cgroup/cgroup.controllers")
        else f"/sys/fs/cgroup/memory/{cgroup}/{nine}/memory.limit_in_bytes"
    )
    assert int(Path(limit).read_text()) == 32 * 1024 * 1024
    os.kill(running.pid, 9)
    killed = await _wait_exited(rt, uid, "nine")
    assert killed.exit_code == 137
    await rt.remove_pod(uid)
    _assert_pod_gone(rt, uid)


def test_an_exec_session_copies_the_terminal_size_where_the_runtime_does_not() -> None:
    """crun 1.8's `exec -t` ignores SIGWINCH: the session gives the command's pty the size of the runtime's own,
    both reached through /proc (here two real ptys, each the stdin of a real process)."""
    import fcntl
    import pty
    import struct
    import termios

    from edgelet.runtime.execsession import copy_winsize, terminal_size

    procs, masters = [], []
    try:
        for rows, cols in ((40, 120), (24, 80)):
            master, slave = pty.openpty()
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
            procs.append(subprocess.Popen(["sleep", "30"], stdin=slave))
            os.close(slave)
            masters.append(master)
        runtime, command = procs
        copy_winsize(runtime.pid, command.pid)
        assert terminal_size(masters[1]) == (120, 40)
    finally:
        for p in procs:
            p.kill()
            p.wait()
        for m in masters:
            os.close(m)
