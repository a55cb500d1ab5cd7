"""Probers against real containers: `runc exec` with a timeout that kills the command, and sockets in the pod's netns."""

from __future__ import annotations

import asyncio
import os

import pytest

from edgelet.api.types import HTTPGetAction, TCPSocketAction
from edgelet.probes.machine import Result
from edgelet.probes.probers import exec_probe, http_probe, tcp_probe
from edgelet.probes.target import target_for
from edgelet.runtime.runc_runtime import RuncRuntime
from tests.integration.test_runtime_runc import _c, _pod, _run, aio

pytestmark = pytest.mark.privileged


def _procs_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


@aio
async def test_exec_probe_and_timeout_kills_the_command(rt: RuncRuntime, busybox) -> None:
    container = _c("app", "sh", "-c", "mkdir -p /www && echo ok > /www/index.html && exec httpd -f -p 8080 -h /www")
    pod = _pod("probed", [container])
    uid = pod.metadata.uid
    try:
        sandbox, cid = await _run(rt, pod, busybox, container)
        target = target_for(cid, container, sandbox.netns_path(), host_network=False)
        ok = await exec_probe(rt, target, ["cat", "/www/index.html"], 2.0)
        assert (ok.result, ok.message) == (Result.SUCCESS, "ok\n")
        bad = await exec_probe(rt, target, ["cat", "/nope"], 2.0)
        assert bad.result == Result.FAILURE and "/nope" in bad.message
        marker = "sleep 4242"
        slow = await exec_probe(rt, target, ["sh", "-c", f"exec {marker}"], 0.5)
        assert slow.result == Result.FAILURE and "timed out" in slow.message
        assert not _procs_with(marker), "the timed-out command must be killed, not just runc exec"

        # The server listens only inside the pod's netns: the probe reaches it there, not on the host.
        for _ in range(100):
            up = await tcp_probe(TCPSocketAction(port=8080), target, 1.0)
            if up.result == Result.SUCCESS:
                break
            await asyncio.sleep(0.05)
        assert up.result == Result.SUCCESS
        http = await http_probe(HTTPGetAction(port=8080, path="/index.html"), target, 1.0)
        assert http.result == Result.SUCCESS
        missing = await http_probe(HTTPGetAction(port=8080, path="/missing"), target, 1.0)
        assert missing.message == "HTTP probe failed with statuscode: 404"
        host = target_for(cid, container, None, host_network=True)
        outside = await tcp_probe(TCPSocketAction(port=8080), host, 1.0)
        if outside.result == Result.FAILURE:  # unless something on the host happens to use 8080
            assert "connection refused" in outside.message
    finally:
        for c in (await rt.pod_status(uid)).containers:
            await rt.stop_container(c.id, 0, "SIGKILL")
        for s in (await rt.pod_status(uid)).sandboxes:
            await rt.stop_sandbox(s.id)
        await rt.remove_pod(uid)
