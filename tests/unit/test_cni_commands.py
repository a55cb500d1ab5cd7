"""CNI's CHECK, STATUS and GC through the real exec path, against scripted plugins.

Debian's plugins speak up to 1.0.0 (no STATUS or GC), so the 1.1.0 commands
are exercised against small shell plugins that log what they were asked and
answer as a file tells them; the real plugins' CHECK runs in
tests/e2e/test_network.py.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from edgelet.network.cache import Cache, Entry
from edgelet.network.cni import CNI
from edgelet.network.conf import parse
from edgelet.network.errors import NetworkError, PluginError
from edgelet.network.manager import PodNetwork

PLUGIN = r"""#!/bin/sh
in=$(cat)
dir=$(dirname "$0")
printf '%s %s %s %s\n' "$(basename "$0")" "$CNI_COMMAND" "${CNI_CONTAINERID:--}" "$in" >> "$dir/calls.log"
for f in "$dir/fail-$CNI_COMMAND-${CNI_CONTAINERID:-none}" "$dir/fail-$CNI_COMMAND-$(basename "$0")"; do
  if [ -e "$f" ]; then
    printf '{"cniVersion": "1.1.0", "code": %s, "msg": "told to fail"}' "$(cat "$f")"
    exit 1
  fi
done
if [ "$CNI_COMMAND" = ADD ]; then
  printf '{"cniVersion": "1.1.0", "ips": [{"address": "10.99.0.7/24"}]}'
fi
"""


@pytest.fixture
def plugins(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("alpha", "beta"):
        (bin_dir / name).write_text(PLUGIN)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def _calls(bin_dir: Path) -> list[tuple[str, str, str, dict]]:
    log = bin_dir / "calls.log"
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        plugin, command, cid, stdin = line.split(" ", 3)
        out.append((plugin, command, cid, json.loads(stdin)))
    return out


def _conf(version: str) -> dict:
    return {"cniVersion": version, "name": "net", "plugins": [{"type": "alpha"}, {"type": "beta", "x": 1}]}


def test_status_and_gc_are_asked_of_1_1_0_networks_only(plugins: Path) -> None:
    cni = CNI([str(plugins)])
    old = parse(json.dumps(_conf("1.0.0")), "old.conflist")
    asyncio.run(cni.status(old))
    asyncio.run(cni.gc(old, [("sb1", "eth0")]))
    assert _calls(plugins) == []  # libcni: STATUS and GC came with 1.1.0

    new = parse(json.dumps(_conf("1.1.0")), "new.conflist")
    asyncio.run(cni.status(new))
    asyncio.run(cni.gc(new, [("sb1", "eth0"), ("sb2", "eth0")]))
    calls = _calls(plugins)
    assert [(p, c) for p, c, _, _ in calls] == [
        ("alpha", "STATUS"),
        ("beta", "STATUS"),
        ("alpha", "GC"),
        ("beta", "GC"),
    ]
    assert all(cid == "-" for _, _, cid, _ in calls)  # neither names a container
    assert calls[1][3] == {"type": "beta", "x": 1, "name": "net", "cniVersion": "1.1.0"}
    assert calls[3][3]["cni.dev/valid-attachments"] == [
        {"containerID": "sb1", "ifname": "eth0"},
        {"containerID": "sb2", "ifname": "eth0"},
    ]


def test_a_plugin_that_is_not_ready_says_so(plugins: Path) -> None:
    (plugins / "fail-STATUS-beta").write_text("50")
    cni = CNI([str(plugins)])
    with pytest.raises(PluginError, match=r"beta STATUS failed: told to fail \(code 50\)"):
        asyncio.run(cni.status(parse(json.dumps(_conf("1.1.0")), "n")))


def _network(tmp_path: Path, plugins: Path, version: str) -> PodNetwork:
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir(exist_ok=True)
    (conf_dir / "10-net.conflist").write_text(json.dumps(_conf(version)))
    return PodNetwork(conf_dir, [str(plugins)], tmp_path / "netns", tmp_path / "cache")


def _entry(sid: str, result: dict | None, version: str = "1.0.0") -> Entry:
    return Entry(sid, f"/run/netns/{sid}", "eth0", "p", "default", "u-" + sid, _conf(version), {}, result)


def test_check_names_the_sandboxes_whose_network_failed(tmp_path: Path, plugins: Path) -> None:
    net = _network(tmp_path, plugins, "1.0.0")
    cache = Cache(tmp_path / "cache")
    result = {"cniVersion": "1.0.0", "ips": [{"address": "10.99.0.7/24"}]}
    for sid in ("good", "broken"):
        cache.write(_entry(sid, result))
    cache.write(_entry("half", None))  # ADD never finished: nothing to check against
    cache.write(_entry("gone", result))  # its sandbox no longer runs: cleanup's business, not CHECK's
    (plugins / "fail-CHECK-broken").write_text("11")

    failed = asyncio.run(net.check({"good", "broken", "half"}))
    assert set(failed) == {"broken"} and "told to fail" in failed["broken"]
    checked = [(p, cid) for p, c, cid, _ in _calls(plugins) if c == "CHECK"]
    # In chain order per attachment, stopping at the first failure.
    assert sorted(checked) == [("alpha", "broken"), ("alpha", "good"), ("beta", "good")]
    assert checked.index(("alpha", "good")) < checked.index(("beta", "good"))
    assert next(s for p, c, cid, s in _calls(plugins) if cid == "good" and p == "beta")["prevResult"] == result


def test_check_gives_no_verdict_when_a_plugin_is_missing_or_the_network_predates_check(
    tmp_path: Path, plugins: Path
) -> None:
    net = _network(tmp_path, plugins, "1.0.0")
    cache = Cache(tmp_path / "cache")
    result = {"ips": [{"address": "10.99.0.7/24"}]}
    cache.write(_entry("old", result, "0.3.1"))  # CHECK came with 0.4.0
    (plugins / "beta").unlink()  # a missing binary: recreating the sandbox would not help
    cache.write(_entry("nobeta", result))
    assert asyncio.run(net.check({"old", "nobeta"})) == {}
    assert [c for _, c, _, _ in _calls(plugins)] == []


def test_setup_refuses_a_network_whose_plugins_are_not_ready(tmp_path: Path, plugins: Path) -> None:
    from edgelet.api.types import ObjectMeta, Pod

    (plugins / "fail-STATUS-alpha").write_text("50")
    net = _network(tmp_path, plugins, "1.1.0")
    pod = Pod(metadata=ObjectMeta(name="p", namespace="default", uid="u1"))
    with pytest.raises(NetworkError, match="alpha STATUS failed"):
        asyncio.run(net.setup(pod, "sb1"))
    assert [c for _, c, _, _ in _calls(plugins)] == ["STATUS"]  # no ADD, nothing to release
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").iterdir())


def test_cleanup_collects_garbage_with_the_live_attachments(tmp_path: Path, plugins: Path) -> None:
    net = _network(tmp_path, plugins, "1.1.0")
    cache = Cache(tmp_path / "cache")
    result = {"ips": [{"address": "10.99.0.7/24"}]}
    cache.write(_entry("live", result, "1.1.0"))
    released = asyncio.run(net.cleanup({"live"}))
    assert released == 0
    gc = [s for _, c, _, s in _calls(plugins) if c == "GC"]
    assert len(gc) == 2 and gc[0]["cni.dev/valid-attachments"] == [{"containerID": "live", "ifname": "eth0"}]


@pytest.mark.parametrize(
    "plugin, message, addresses, false",
    [
        # containernetworking/plugins#819, as Debian's portmap 1.1.1 answers for an IPv4-only pod.
        ("portmap", "could not check ipv6 dnat: chain CNI-DN-x not found in iptables table nat", ["10.1.0.2/24"], True),
        ("portmap", "could not check ipv6 dnat: chain CNI-DN-x not found", ["10.1.0.2/24", "fd00::2/64"], False),
        ("portmap", "could not check ipv4 dnat: chain CNI-DN-x not found", ["10.1.0.2/24"], False),
        ("bridge", "ipv6 address fd00::2 not found", ["10.1.0.2/24"], False),
        # containernetworking/plugins#805: udev gave the host veth (or the bridge) another MAC after ADD.
        ("bridge", "Interface veth5c225f9c Mac doesn't match: b6:64:dc:fc:71:c2 not found", ["10.1.0.2/24"], True),
        ("bridge", "Bridge interface cni0 Mac doesn't match: a6:2d:36:d9:1c:6c", ["10.1.0.2/24"], True),
        # The pod's own interface changed: a real change, the sandbox is made again.
        ("bridge", "Interface eth0 Mac 52:59:2d:7e:87:60 doesn't match container Mac: 5e:cd:4b:bf:43:8c", [], False),
        # Debian's bandwidth 1.1.1 panics on CHECK for a pod without a limit: no error document, no verdict.
        ("bandwidth", "no message", ["10.1.0.2/24"], True),
    ],
)
def test_a_known_false_check_failure_is_told_apart(
    plugin: str, message: str, addresses: list[str], false: bool
) -> None:
    from edgelet.network.cni import false_check_failure

    result = {"ips": [{"address": a} for a in addresses]}
    code = None if message == "no message" else 999
    assert false_check_failure(PluginError(plugin, "CHECK", message, code), result) is false


def test_check_goes_on_past_portmaps_ipv6_false_failure(tmp_path: Path, plugins: Path) -> None:
    (plugins / "portmap").write_text(PLUGIN.replace('"told to fail"', '"could not check ipv6 dnat: chain not found"'))
    (plugins / "portmap").chmod(0o755)
    (plugins / "fail-CHECK-portmap").write_text("999")
    conf = {"cniVersion": "1.0.0", "name": "net", "plugins": [{"type": "alpha"}, {"type": "portmap"}, {"type": "beta"}]}
    cache = Cache(tmp_path / "cache")
    cache.write(
        Entry("v4", "/run/netns/v4", "eth0", "p", "default", "u", conf, {}, {"ips": [{"address": "10.1.0.2/24"}]})
    )
    net = _network(tmp_path, plugins, "1.0.0")
    assert asyncio.run(net.check({"v4"})) == {}
    assert [p for p, c, _, _ in _calls(plugins) if c == "CHECK"] == ["alpha", "portmap", "beta"]


def test_a_pod_whose_new_sandboxes_keep_failing_check_is_left_alone(tmp_path: Path, plugins: Path) -> None:
    """A CHECK that fails on every fresh attachment is a plugin's bug, not a broken network: after two new
    sandboxes failed their first check, the pod is not re-created again (a restart loop every period)."""
    net = _network(tmp_path, plugins, "1.0.0")
    cache = Cache(tmp_path / "cache")
    result = {"ips": [{"address": "10.99.0.7/24"}]}

    def sandbox(sid: str, uid: str = "u-pod") -> None:
        cache.write(Entry(sid, f"/run/netns/{sid}", "eth0", "p", "default", uid, _conf("1.0.0"), {}, result))
        (plugins / f"fail-CHECK-{sid}").write_text("11")

    sandbox("s1")
    assert set(asyncio.run(net.check({"s1"}))) == {"s1"}
    cache.remove("s1")
    sandbox("s2")
    assert set(asyncio.run(net.check({"s2"}))) == {"s2"}
    cache.remove("s2")
    sandbox("s3")
    assert asyncio.run(net.check({"s3"})) == {}  # the third fresh sandbox failing: the plugin, not the network
    assert asyncio.run(net.check({"s3"})) == {}

    # Another pod is judged on its own, and a sandbox that once passed is trusted when it fails later.
    cache.write(Entry("t1", "/run/netns/t1", "eth0", "q", "default", "u-other", _conf("1.0.0"), {}, result))
    assert asyncio.run(net.check({"t1"})) == {}
    (plugins / "fail-CHECK-t1").write_text("11")
    assert set(asyncio.run(net.check({"t1"}))) == {"t1"}


def test_check_of_some_sandboxes_runs_their_chains_only(tmp_path: Path, plugins: Path) -> None:
    """Housekeeping CHECKs the pods a notification marked, or one pod's safety CHECK: not a round of all."""
    net = _network(tmp_path, plugins, "1.0.0")
    cache = Cache(tmp_path / "cache")
    result = {"ips": [{"address": "10.99.0.7/24"}]}
    for sid in ("a", "b", "c"):
        cache.write(_entry(sid, result))
    (plugins / "fail-CHECK-c").write_text("11")
    assert set(asyncio.run(net.check({"a", "b", "c"}, {"b", "c", "gone"}))) == {"c"}
    assert sorted({cid for _, c, cid, _ in _calls(plugins) if c == "CHECK"}) == ["b", "c"]
