"""The pods' links watched through rtnetlink (edgelet.network.linkwatch) on a real bridge, veth and network
namespace the test makes (privileged; no plugin): what breaks a pod's network marks that pod, what does not
leaves it alone, and a forgotten sandbox's socket no longer holds its namespace."""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgelet.network import netns
from edgelet.network.linkwatch import LinkWatch, Target

pytestmark = pytest.mark.privileged
SID = "a" * 64


def _ip(*argv: str, ns: Path | None = None) -> None:
    prefix = ["nsenter", f"--net={ns}"] if ns is not None else []
    subprocess.run([*prefix, "ip", *argv], check=True, capture_output=True)


@pytest.fixture
def pod_link(tmp_path: Path) -> Iterator[dict]:
    """A bridge, a veth whose host end is its port, the other end `eth0` with an address in a namespace file."""
    tag = secrets.token_hex(3)
    bridge, host, other = f"elwb{tag}", f"elwh{tag}", f"elwd{tag}"
    path = tmp_path / "netns"
    netns.create(path)
    try:
        _ip("link", "add", bridge, "type", "bridge")
        _ip("link", "add", "eth0", "type", "veth", "peer", "name", host, "netns", str(os.getpid()), ns=path)
        _ip("link", "set", host, "master", bridge, "up")
        _ip("link", "set", bridge, "up")
        _ip("addr", "add", "10.254.77.2/24", "dev", "eth0", ns=path)
        _ip("link", "set", "eth0", "up", ns=path)
        _ip("link", "add", other, "type", "veth", "peer", "name", f"{other}p")
        yield {"netns": path, "bridge": bridge, "host": host, "other": other}
    finally:
        for name in (host, bridge, other):
            subprocess.run(["ip", "link", "del", name], capture_output=True)
        netns.remove(path)


async def _marked(watch: LinkWatch, want: str, rounds: int = 200) -> set[str]:
    """What `watch` marked once `want` shows (the loop reads the sockets between the polls)."""
    seen: set[str] = set()
    for _ in range(rounds):
        seen |= watch.take()
        if want in seen:
            return seen
        await asyncio.sleep(0.05)
    return seen


def test_a_pods_address_gone_or_its_bridge_down_marks_it_and_a_forgotten_one_frees_its_namespace(pod_link):
    async def body() -> None:
        watch = LinkWatch()
        target = Target(str(pod_link["netns"]), frozenset({pod_link["bridge"], pod_link["host"]}))
        await watch.update({SID: target})
        try:
            # What does not break a network: another link gone, an address added inside the pod.
            _ip("link", "del", pod_link["other"])
            _ip("addr", "add", "10.254.78.2/24", "dev", "eth0", ns=pod_link["netns"])
            await asyncio.sleep(0.5)
            assert watch.take() == set()

            _ip("addr", "flush", "dev", "eth0", ns=pod_link["netns"])
            assert await _marked(watch, SID) == {SID}, "an address gone inside the pod"

            _ip("link", "set", pod_link["bridge"], "down")
            assert await _marked(watch, SID) == {SID}, "the bridge set down, seen in the host's namespace"

            # Forgotten (the sandbox goes), its socket holds the namespace no more: with the file gone, the
            # namespace ends, and the veth's host end with it.
            watch.forget(SID)
            netns.remove(pod_link["netns"])
            host_end = Path("/sys/class/net") / pod_link["host"]
            for _ in range(200):
                if not host_end.exists():
                    break
                await asyncio.sleep(0.05)
            assert not host_end.exists(), "the namespace outlived its sandbox"
        finally:
            watch.close()

    asyncio.run(body())


def test_a_pods_veth_deleted_on_the_host_marks_it(pod_link):
    async def body() -> None:
        watch = LinkWatch()
        await watch.update({SID: Target(str(pod_link["netns"]), frozenset({pod_link["bridge"], pod_link["host"]}))})
        try:
            _ip("link", "del", pod_link["host"])
            assert await _marked(watch, SID) == {SID}
        finally:
            watch.close()

    asyncio.run(body())


def test_a_namespace_that_cannot_be_entered_leaves_the_sandbox_unwatched_and_no_sandbox_means_no_socket(tmp_path):
    async def body() -> None:
        watch = LinkWatch()
        fds = len(os.listdir("/proc/self/fd"))
        try:
            await watch.update({})
            assert len(os.listdir("/proc/self/fd")) == fds, "no pod network: the host's links are not watched"
            await watch.update({SID: Target(str(tmp_path / "gone"), frozenset())})
            await watch.update({SID: Target(str(tmp_path / "gone"), frozenset())})  # said once, not retried
            assert watch.take() == set()
            assert len(os.listdir("/proc/self/fd")) == fds + 1, "the host's subscription alone"
            await watch.update({})
            assert len(os.listdir("/proc/self/fd")) == fds
        finally:
            watch.close()

    asyncio.run(body())
