"""The conflist the .deb ships, run with Debian's real plugins: ADD gives an address, CHECK passes for a healthy
pod (with and without a hostPort and a bandwidth limit), DEL leaves nothing.

Debian bookworm's portmap and bandwidth 1.1.1 fail CHECK on healthy pods (an IPv6 chain never made, a
panic without a limit); the housekeeping CHECK must not take those for broken networks, or every pod of a
device with the shipped config would get a new sandbox every minute. The bridge name, subnet and dataDir
are the test's own; nothing under /etc/cni is read.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
from pathlib import Path

import pytest

from edgelet.api.types import Container, ContainerPort, ObjectMeta, Pod, PodSpec
from edgelet.network.manager import PodNetwork

REPO = Path(__file__).resolve().parents[2]
PLUGINS = Path("/usr/lib/cni")
pytestmark = [
    pytest.mark.privileged,
    pytest.mark.skipif(not (PLUGINS / "bandwidth").exists(), reason="needs containernetworking-plugins"),
]


@pytest.fixture
def shipped(tmp_path: Path):
    conf = json.loads((REPO / "packaging" / "10-edgelet.conflist").read_text())
    bridge = f"eds{secrets.token_hex(4)}"[:15]
    bridge_conf = conf["plugins"][0]
    assert bridge_conf["type"] == "bridge" and bridge_conf["ipam"]["dataDir"].startswith("/run/")
    bridge_conf["bridge"] = bridge
    bridge_conf["ipam"]["dataDir"] = str(tmp_path / "ipam")
    subnet = f"10.{secrets.randbelow(100) + 150}.{secrets.randbelow(256)}"
    bridge_conf["ipam"]["ranges"] = [[{"subnet": f"{subnet}.0/24", "gateway": f"{subnet}.1"}]]
    conf["name"] = f"test-{bridge}"
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "10-edgelet.conflist").write_text(json.dumps(conf))
    yield PodNetwork(tmp_path / "conf", [str(PLUGINS)], tmp_path / "netns", tmp_path / "cache"), tmp_path, subnet
    from edgelet.network.iptables import remove_tagged

    asyncio.run(remove_tagged(conf["name"], key="name"))
    subprocess.run(["ip", "link", "del", bridge], capture_output=True, check=False)


@pytest.mark.parametrize(
    "annotations, ports",
    [
        ({}, []),
        (
            {"kubernetes.io/ingress-bandwidth": "1M", "kubernetes.io/egress-bandwidth": "2M"},
            [ContainerPort(container_port=80, host_port=18779)],
        ),
    ],
    ids=["plain", "hostport-and-bandwidth"],
)
def test_a_healthy_pod_on_the_shipped_network_passes_its_check(shipped, annotations, ports) -> None:
    net, tmp_path, subnet = shipped
    sid = secrets.token_hex(16)
    pod = Pod(
        metadata=ObjectMeta(name="p", namespace="default", uid=f"u{sid}", annotations=annotations),
        spec=PodSpec(containers=[Container(name="c", ports=ports)]),
    )

    async def scenario() -> tuple[tuple[str, ...], dict[str, str]]:
        attached = await net.setup(pod, sid)
        assert attached is not None
        try:
            return attached.ips, await net.check({sid})
        finally:
            await net.teardown(sid)

    ips, failed = asyncio.run(scenario())
    assert ips and ips[0].startswith(subnet + ".")
    assert failed == {}
    assert not list((tmp_path / "cache").glob("*.json"))
    assert not [p for p in (tmp_path / "ipam").rglob("*") if p.is_file() and p.name[0].isdigit()]
