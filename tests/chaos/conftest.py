"""Chaos fixtures: a real agent on temp dirs (the e2e one) with a CNI network of its own, and the campaign's
figures printed at the end of the pytest run."""

from __future__ import annotations

import json
import random
import secrets
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import agent, busybox_archive  # noqa: F401 (fixtures)

PLUGINS = Path("/usr/lib/cni")
SUMMARIES: list[str] = []


@pytest.fixture
def network(tmp_path):
    """A conflist of the test's own (bridge name, /24 and host-local dataDir), in a conf dir of its own."""
    bridge = f"edc{secrets.token_hex(4)}"[:15]
    subnet = f"10.{random.randint(150, 250)}.{random.randint(0, 255)}"
    conf_dir = tmp_path / "cni"
    conf_dir.mkdir()
    ipam = tmp_path / "ipam"
    conflist = {
        "cniVersion": "1.0.0", "name": f"chaos-{bridge}",
        "plugins": [
            {"type": "bridge", "bridge": bridge, "isGateway": True, "ipMasq": True, "hairpinMode": True,
             "ipam": {"type": "host-local", "dataDir": str(ipam),
                      "ranges": [[{"subnet": f"{subnet}.0/24", "gateway": f"{subnet}.1"}]]}},
            {"type": "portmap", "capabilities": {"portMappings": True}, "snat": True},
            {"type": "loopback"},
        ],
    }
    (conf_dir / "10-chaos.conflist").write_text(json.dumps(conflist))
    yield {"conf_dir": conf_dir, "bridge": bridge, "gateway": f"{subnet}.1", "ipam": ipam, "subnet": subnet}
    import asyncio

    from edgelet.network.iptables import remove_tagged

    asyncio.run(remove_tagged(conflist["name"], key="name"))
    subprocess.run(["ip", "link", "del", bridge], capture_output=True)


def pytest_terminal_summary(terminalreporter) -> None:
    for line in SUMMARIES:
        terminalreporter.write_line(line)
