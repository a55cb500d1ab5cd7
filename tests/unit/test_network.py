"""The pure parts of pod networking: conflists, plugin stdin, results, runtimeConfig, tagged iptables rules."""

from __future__ import annotations

import json

import pytest

from edgelet.api.types import Container, ContainerPort, ObjectMeta, Pod, PodSpec
from edgelet.network.conf import find, parse, plugin_stdin
from edgelet.network.errors import ConfigError
from edgelet.network.iptables import stale_rules
from edgelet.network.manager import runtime_config
from edgelet.network.result import error_of, pod_ips

CONFLIST = {
    "cniVersion": "1.0.0",
    "name": "net",
    "plugins": [
        {"type": "bridge", "bridge": "b0", "ipam": {"type": "host-local"}},
        {"type": "portmap", "capabilities": {"portMappings": True}},
        {"type": "bandwidth", "capabilities": {"bandwidth": True}},
    ],
}


@pytest.mark.parametrize(
    "doc, error",
    [
        ("{", "not JSON"),
        ("[]", "not a JSON object"),
        (json.dumps({**CONFLIST, "name": ""}), "no network name"),
        (json.dumps({**CONFLIST, "cniVersion": "9.9.9"}), "cniVersion '9.9.9' is not one of"),
        (json.dumps({**CONFLIST, "plugins": []}), "no plugins"),
        (json.dumps({**CONFLIST, "plugins": [{"bridge": "x"}]}), "plugins[0] has no type"),
        (json.dumps({**CONFLIST, "plugins": [{"type": "../../bin/sh"}]}), "is not a plugin name"),
    ],
)
def test_bad_conflists_name_the_file_and_the_reason(doc: str, error: str) -> None:
    with pytest.raises(
        ConfigError, match=r"CNI config /c/10.conflist: .*" + error.replace("[", r"\[").replace("]", r"\]")
    ):
        parse(doc, "/c/10.conflist")


def test_a_single_plugin_conf_becomes_a_list_and_the_first_file_wins(tmp_path) -> None:
    cfg = parse(json.dumps({"cniVersion": "0.4.0", "name": "one", "type": "bridge"}), "x.conf")
    assert cfg.plugin_types() == ["bridge"] and cfg.cni_version == "0.4.0"
    for name in ("20-b.conflist", "10-a.conf", ".hidden.conflist", "README"):
        (tmp_path / name).write_text("{}")
    assert find(tmp_path) == tmp_path / "10-a.conf"
    assert find(tmp_path / "missing") is None


def test_plugin_stdin_threads_prev_result_and_only_declared_capabilities() -> None:
    cfg = parse(json.dumps(CONFLIST), "n")
    rc = {"portMappings": [{"hostPort": 80, "containerPort": 8080, "protocol": "tcp"}], "bandwidth": {"ingressRate": 1}}
    bridge = json.loads(plugin_stdin(cfg, cfg.plugins[0], None, rc))
    assert bridge["name"] == "net" and bridge["cniVersion"] == "1.0.0"
    assert "runtimeConfig" not in bridge and "prevResult" not in bridge
    portmap = json.loads(plugin_stdin(cfg, cfg.plugins[1], {"ips": []}, rc))
    assert portmap["prevResult"] == {"ips": []} and portmap["runtimeConfig"] == {"portMappings": rc["portMappings"]}


def test_results_give_ipv4_first_and_errors_their_message() -> None:
    result = {"ips": [{"address": "fd00::5/64"}, {"address": "10.89.0.5/16", "gateway": "10.89.0.1"}, {"address": "x"}]}
    assert pod_ips(result) == ("10.89.0.5", "fd00::5")
    assert error_of(b'{"code": 11, "msg": "no IP addresses available", "details": "range full"}') == (
        11,
        "no IP addresses available: range full",
    )
    assert error_of(b"plain failure") == (None, "plain failure")


def test_runtime_config_from_host_ports_and_bandwidth_annotations() -> None:
    pod = Pod(
        metadata=ObjectMeta(
            name="p", annotations={"kubernetes.io/ingress-bandwidth": "1M", "kubernetes.io/egress-bandwidth": "lots"}
        ),
        spec=PodSpec(
            containers=[
                Container(
                    name="a",
                    ports=[
                        ContainerPort(container_port=80, host_port=8080),
                        ContainerPort(container_port=53, protocol="UDP"),
                        ContainerPort(container_port=443, host_port=8443, host_ip="127.0.0.1"),
                    ],
                )
            ]
        ),
    )
    assert runtime_config(pod) == {
        "portMappings": [
            {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
            {"hostPort": 8443, "containerPort": 443, "protocol": "tcp", "hostIP": "127.0.0.1"},
        ],
        "bandwidth": {"ingressRate": 1_000_000, "ingressBurst": 2**31 - 1},  # "lots" is no quantity: ignored
    }


def test_tagged_rules_and_their_chains() -> None:
    save = """*nat
:CNI-abc - [0:0]
-A POSTROUTING -s 10.1.0.2/32 -m comment --comment "name: \\"net\\" id: \\"sid1\\"" -j CNI-abc
-A CNI-abc -d 10.1.0.0/24 -m comment --comment "name: \\"net\\" id: \\"sid1\\"" -j ACCEPT
-A POSTROUTING -s 10.1.0.3/32 -m comment --comment "name: \\"net\\" id: \\"sid2\\"" -j CNI-def
COMMIT
"""
    rules, chains = stale_rules(save, "sid1")
    assert len(rules) == 2 and all("sid1" in r for r in rules)
    assert chains == ["CNI-abc"]
    assert len(stale_rules(save, "net", key="name")[0]) == 3
