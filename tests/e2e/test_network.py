"""Pod networking through CNI on a real agent with Debian's real plugins (bridge, host-local, portmap, loopback).

Each test gets a conf dir of its own, a bridge name and a /24 of its own, and
host-local's dataDir in its temp dir; it never touches /etc/cni. Traffic goes
only to the pods' addresses on that bridge and to its gateway address.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import IMAGE, wait_for

PLUGINS = Path("/usr/lib/cni")
pytestmark = [
    pytest.mark.privileged,
    pytest.mark.skipif(not (PLUGINS / "bridge").exists(), reason="needs containernetworking-plugins"),
]


def _sh(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=False).stdout


def _pod(name: str, command: str, ports: str = "") -> str:
    return f"""apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 1
  hostAliases:
  - ip: 10.9.9.9
    hostnames: [alias.example]
  containers:
  - name: app
    image: {IMAGE}
    command: ["sh", "-c", {command!r}]
{ports}"""


SERVER = _pod(
    "server",
    "mkdir -p /www && echo hello-from-pod > /www/index.html && exec httpd -f -p 8080 -h /www",
    "    ports:\n    - containerPort: 8080\n      hostPort: 18089\n",
)
CLIENT = _pod("client", "exec sleep 3600")


def _ctr(agent, pod: str) -> dict | None:
    return next(
        (
            c
            for c in agent.containers_of(pod)
            if c["annotations"].get("io.edgelet.kind") == "container" and c["status"] == "running"
        ),
        None,
    )


def _exec(agent, pod: str, *argv: str) -> subprocess.CompletedProcess:
    c = _ctr(agent, pod)
    assert c is not None, f"{pod} has no running container"
    return subprocess.run(
        ["runc", "--root", str(agent.paths.runc_root), "exec", c["id"], *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _fetch(url: str) -> str:
    """The body at `url` from the host, "" when it does not answer (yet)."""
    try:
        return subprocess.run(["wget", "-qO-", "-T", "5", url], capture_output=True, text=True, timeout=10).stdout
    except subprocess.TimeoutExpired:
        return ""


def _pod_ip(agent, name: str) -> str | None:
    row = agent.pod(name)
    return ((row or {}).get("pod", {}).get("status") or {}).get("podIP")


def _leftovers(agent, network) -> dict[str, object]:
    ipam = network["ipam"]
    return {
        "veths": _sh("ip", "-o", "link", "show", "master", network["bridge"]).strip(),
        "ipam": sorted(
            p.name for p in ipam.rglob("*") if p.is_file() and not p.name.startswith(("last_reserved", "lock"))
        )
        if ipam.exists()
        else [],
        "rules": [line for line in _sh("iptables-save", "-t", "nat").splitlines() if network["subnet"] in line],
        "netns": sorted(os.listdir(agent.paths.run_dir / "netns")) if (agent.paths.run_dir / "netns").exists() else [],
        "cache": sorted(os.listdir(agent.paths.root_dir / "cni")) if (agent.paths.root_dir / "cni").exists() else [],
    }


NOTHING = {"veths": "", "ipam": [], "rules": [], "netns": [], "cache": []}


def test_pods_get_addresses_reach_each_other_and_a_host_port_and_leave_nothing(agent, network):
    agent.start(
        f"--cni-conf-dir={network['conf_dir']}",
        f"--cni-bin-dir={PLUGINS}",
        "--cluster-dns=10.96.0.10",
        "--cluster-domain=cluster.local",
    )
    agent.write_manifest("server.yaml", SERVER)
    agent.write_manifest("client.yaml", CLIENT)
    for name in ("server", "client"):
        wait_for(lambda n=name: _ctr(agent, n) and _pod_ip(agent, n), timeout=90, what=f"{name} to run with an IP")
    ip = _pod_ip(agent, "server")
    assert ip.startswith(network["subnet"] + ".")
    assert f"{ip}\tserver-testnode" in _exec(agent, "server", "cat", "/etc/hosts").stdout
    assert "10.9.9.9\talias.example" in _exec(agent, "server", "cat", "/etc/hosts").stdout
    resolv = _exec(agent, "server", "cat", "/etc/resolv.conf").stdout
    assert "nameserver 10.96.0.10" in resolv and "search default.svc.cluster.local svc.cluster.local" in resolv
    # Pod to pod by IP.
    got = wait_for(
        lambda: (
            (r := _exec(agent, "client", "wget", "-qO-", f"http://{ip}:8080/")) and "hello-from-pod" in r.stdout and r
        ),
        timeout=30,
        what="client to reach server",
    )
    assert got.returncode == 0
    # The host port, from the host, through the bridge's address.
    out = wait_for(
        lambda: "hello-from-pod" in (b := _fetch(f"http://{network['gateway']}:18089/")) and b,
        timeout=60,
        what="the host port",
    )
    assert "hello-from-pod" in out
    assert agent.pod("server")["pod"]["status"]["podIPs"] == [{"ip": ip}]
    assert ip in agent.cli("pods", "-o", "wide")

    for name in ("server", "client"):
        (agent.manifests / f"{name}.yaml").unlink()
    wait_for(
        lambda: not agent.containers_of("server") and not agent.containers_of("client"),
        timeout=60,
        what="the pods to go",
    )
    wait_for(lambda: _leftovers(agent, network) == NOTHING, timeout=30, what="nothing left of the pods' network")


def test_a_kill_and_a_power_cut_leak_nothing_and_the_pods_come_back_networked(agent, network):
    agent.start(f"--cni-conf-dir={network['conf_dir']}", f"--cni-bin-dir={PLUGINS}")
    agent.write_manifest("server.yaml", SERVER)
    wait_for(lambda: _ctr(agent, "server") and _pod_ip(agent, "server"), timeout=90, what="server to run")
    first_sandbox = json.loads(
        (agent.paths.root_dir / "cni" / os.listdir(agent.paths.root_dir / "cni")[0]).read_text()
    )["container_id"]

    # A power cut: every process dies, the run dir (tmpfs) is gone with the namespaces; the root dir stays.
    agent.proc.kill()
    agent.proc.wait()
    for c in agent.runc_list():
        _sh("kill", "-9", str(c["pid"])) if c.get("pid") else None
    _sh("pkill", "-9", "-f", f"conmon.*{agent.paths.runc_root}")
    for f in [*(agent.paths.run_dir / "netns").iterdir(), *(agent.paths.run_dir / "ns").glob("*/*")]:
        _sh("umount", "-l", str(f))
    for child in agent.paths.run_dir.iterdir():
        if child.name != "agent.log":
            shutil.rmtree(child, ignore_errors=True) if child.is_dir() else child.unlink()
    shutil.rmtree(network["ipam"], ignore_errors=True)  # host-local's dataDir would be on tmpfs too

    agent._log.close()
    agent.start(f"--cni-conf-dir={network['conf_dir']}", f"--cni-bin-dir={PLUGINS}")
    wait_for(
        lambda: "Releasing the network of a sandbox that is gone" in agent.log(),
        timeout=60,
        what="the old sandbox's network to be released",
    )
    wait_for(lambda: _ctr(agent, "server") and _pod_ip(agent, "server"), timeout=120, what="server back")
    ip = _pod_ip(agent, "server")
    out = wait_for(lambda: _fetch(f"http://{ip}:8080/"), timeout=60, what="the new sandbox to answer")
    assert "hello-from-pod" in out
    # The old sandbox's rules are gone: only the new one's hostPort chain is left.
    rules = "\n".join(_leftovers(agent, network)["rules"])
    assert first_sandbox[:12] not in rules
    (agent.manifests / "server.yaml").unlink()
    wait_for(lambda: _leftovers(agent, network) == NOTHING, timeout=60, what="nothing left")


def test_a_sandbox_killed_from_outside_gives_back_its_network(agent, network):
    """The pause process dies without the agent stopping it (OOM killer, an operator's kill): the pod gets a
    new sandbox, and the dead one's removal releases its address, veth, namespace file and cache entry
    then, not at the agent's next start."""
    agent.start(f"--cni-conf-dir={network['conf_dir']}", f"--cni-bin-dir={PLUGINS}", "--pod-infra-container")
    agent.write_manifest("client.yaml", CLIENT)
    wait_for(lambda: _ctr(agent, "client") and _pod_ip(agent, "client"), timeout=90, what="client to run")
    old = next(c for c in agent.containers_of("client") if c["annotations"].get("io.edgelet.kind") == "sandbox")
    os.kill(old["pid"], signal.SIGKILL)

    def replaced() -> bool:
        sandboxes = [c for c in agent.containers_of("client") if c["annotations"].get("io.edgelet.kind") == "sandbox"]
        return bool(sandboxes) and all(c["id"] != old["id"] for c in sandboxes) and bool(_ctr(agent, "client"))

    wait_for(replaced, timeout=120, what="a new sandbox, and the dead one removed")
    left = wait_for(
        lambda: (f"{old['id']}.json" not in (lo := _leftovers(agent, network))["cache"]) and lo,
        timeout=30,
        what="the dead sandbox's cache entry to go",
    )
    assert old["id"] not in left["netns"] and len(left["ipam"]) == 1  # the new sandbox's address only
    assert not [r for r in left["rules"] if old["id"] in r]
    (agent.manifests / "client.yaml").unlink()
    wait_for(lambda: _leftovers(agent, network) == NOTHING, timeout=60, what="nothing left")


def test_without_a_cni_config_pods_get_loopback_and_a_warning(agent, tmp_path):
    empty = tmp_path / "no-cni"
    empty.mkdir()
    agent.start(f"--cni-conf-dir={empty}", f"--cni-bin-dir={PLUGINS}")
    agent.write_manifest("client.yaml", CLIENT)
    wait_for(lambda: _ctr(agent, "client") and agent.pod("client"), timeout=90, what="client to run")
    assert _pod_ip(agent, "client") is None
    events = json.loads(agent.cli("events", "-o", "json"))
    assert any(e["reason"] == "NetworkNotReady" and "no CNI config" in e["message"] for e in events)
    assert any(e["reason"] == "MissingClusterDNS" for e in events)  # ClusterFirst without --cluster-dns
    assert "lo" in _exec(agent, "client", "ip", "-o", "link").stdout


def _sandbox(agent, pod: str) -> str | None:
    """The running sandbox of `pod`: without a pause process, its bundle is all there is of it."""
    row = agent.pod(pod)
    bundle = agent.paths.root_dir / "pods" / row["uid"] / "sandbox" if row else None
    if bundle is None or not (bundle / "started").exists() or (bundle / "exit").exists():
        return None
    return (bundle / "id").read_text().strip()


def _sandbox_annotations(agent, pod: str) -> dict:
    bundle = agent.paths.root_dir / "pods" / agent.pod(pod)["uid"] / "sandbox"
    return json.loads((bundle / "config.json").read_text())["annotations"]


def test_a_sandbox_whose_namespaces_are_unmounted_from_outside_gives_back_its_network(agent, network):
    """Without a pause process, a sandbox dies when its namespace files go (an operator's umount): the pod
    gets a new sandbox, and the dead one's removal releases its network and namespace files.

    Only a full relist sees namespace files go, and an idle agent runs one a minute (pleg.FULL_RELIST_EVERY):
    a host-network pod started after the umount makes the next one come at once (a sync that created
    containers asks for it), with nothing of the pod network's for the checks below to count."""
    agent.start(f"--cni-conf-dir={network['conf_dir']}", f"--cni-bin-dir={PLUGINS}")
    agent.write_manifest("client.yaml", CLIENT)
    wait_for(lambda: _ctr(agent, "client") and _pod_ip(agent, "client"), timeout=90, what="client to run")
    old = _sandbox(agent, "client")
    assert old and not [c for c in agent.containers_of("client") if c["annotations"]["io.edgelet.kind"] == "sandbox"]
    for f in ("ipc", "uts"):
        subprocess.run(["umount", str(agent.paths.run_dir / "ns" / old / f)], check=True)
    nudge = _pod("nudge", "exec sleep 3600").replace("spec:\n", "spec:\n  hostNetwork: true\n", 1)
    agent.write_manifest("nudge.yaml", nudge)
    wait_for(
        lambda: (s := _sandbox(agent, "client")) and s != old and _ctr(agent, "client"),
        timeout=120,
        what="a new sandbox",
    )
    left = wait_for(
        lambda: (f"{old}.json" not in (lo := _leftovers(agent, network))["cache"]) and lo,
        timeout=30,
        what="the dead sandbox's cache entry to go",
    )
    assert old not in left["netns"] and len(left["ipam"]) == 1
    assert not (agent.paths.run_dir / "ns" / old).exists()
    (agent.manifests / "client.yaml").unlink()
    (agent.manifests / "nudge.yaml").unlink()
    wait_for(lambda: _leftovers(agent, network) == NOTHING, timeout=60, what="nothing left")
    # The namespace files go in a later step of the removal than the network: a loaded machine shows the gap.
    wait_for(lambda: not os.listdir(agent.paths.run_dir / "ns"), timeout=60, what="the namespace files to go")


def _spawned(trace: Path, program: str) -> int:
    """How many times the agent started `program` (EDGELET_TRACE_SPAWNS's file: one line per child)."""
    lines = trace.read_text().splitlines() if trace.exists() else []
    return sum(1 for line in lines if line.split(" ")[1:2] == [program])


def test_a_broken_pod_network_fails_its_check_and_the_pod_gets_a_new_one(agent, network, tmp_path):
    """A settled node runs no plugin: its pods' links are watched through rtnetlink, and only a pod whose
    veth or address went is CHECKed, alone, with the real plugins; it gets a new sandbox and a working
    network, the healthy one is left alone. The rare safety CHECKs go one pod at a time."""
    trace = tmp_path / "spawns"
    agent.start(
        f"--cni-conf-dir={network['conf_dir']}",
        f"--cni-bin-dir={PLUGINS}",
        # Half a second: the first safety CHECK comes 60 periods after the pods showed, and the test waits for it.
        "--cni-check-period=500ms",
        env={"EDGELET_TRACE_SPAWNS": str(trace)},
    )
    agent.write_manifest("server.yaml", SERVER)
    agent.write_manifest("client.yaml", CLIENT)
    for name in ("server", "client"):
        wait_for(lambda n=name: _ctr(agent, n) and _pod_ip(agent, n), timeout=90, what=f"{name} to run with an IP")
    broken, healthy = _sandbox(agent, "server"), _sandbox(agent, "client")
    # Settled: no plugin runs until the first safety CHECK, SAFETY_PERIODS (60) periods after the pods showed,
    # and that one CHECKs one pod (the server's hostPort chain passes too: portmap 1.1.1's false IPv6 failure).
    wait_for(lambda: "Checked pod networks checked=1 failed=0" in agent.log(), timeout=240, what="a safety CHECK")
    assert _spawned(trace, "bridge") == 3, "two ADDs and one safety CHECK, in 60 periods"
    assert not [e for e in json.loads(agent.cli("events", "-o", "json")) if e["reason"] == "SandboxChanged"]
    netns = agent.paths.run_dir / "netns" / broken
    assert _sh("nsenter", f"--net={netns}", "ip", "-o", "addr", "show", "dev", "eth0").count("inet ") == 1
    before = _spawned(trace, "bridge")
    subprocess.run(["nsenter", f"--net={netns}", "ip", "addr", "flush", "dev", "eth0"], check=True)

    events = wait_for(
        lambda: [e for e in json.loads(agent.cli("events", "-o", "json")) if e["reason"] == "SandboxChanged"],
        timeout=60,
        what="the failed check reported",
    )
    assert events[0]["object"]["name"] == "server-testnode"
    assert "CNI plugin bridge CHECK failed" in events[0]["message"]
    new = wait_for(
        lambda: (s := _sandbox(agent, "server")) and s != broken and _ctr(agent, "server") and s,
        timeout=120,
        what="the server in a new sandbox",
    )
    # The server's CHECK (it stops at bridge's failure), its old network's DEL and its new one's ADD; a
    # safety CHECK of the client may have come meanwhile (30 periods after the first).
    assert _spawned(trace, "bridge") - before in (3, 4)
    ip = _sandbox_annotations(agent, "server")["io.edgelet.pod-ips"]
    wait_for(lambda: _pod_ip(agent, "server") == ip, timeout=60, what="the status to show the new address")
    out = wait_for(
        lambda: (
            (r := _exec(agent, "client", "wget", "-qO-", f"http://{ip}:8080/"))
            and "hello-from-pod" in r.stdout
            and r.stdout
        ),
        timeout=60,
        what="the new network to answer",
    )
    assert "hello-from-pod" in out
    # The healthy pod lived through every check untouched, and so far only the broken one was reported.
    assert _sandbox(agent, "client") == healthy
    assert all(
        e["object"]["name"] == "server-testnode"
        for e in json.loads(agent.cli("events", "-o", "json"))
        if e["reason"] == "SandboxChanged"
    )
    # The client's veth deleted (from inside its namespace: both ends go): its CHECK, and a new sandbox.
    subprocess.run(
        ["nsenter", f"--net={agent.paths.run_dir / 'netns' / healthy}", "ip", "link", "del", "eth0"], check=True
    )
    wait_for(
        lambda: (
            (s := _sandbox(agent, "client")) and s != healthy and _ctr(agent, "client") and _pod_ip(agent, "client")
        ),
        timeout=120,
        what="the client in a new sandbox",
    )
    assert _sandbox(agent, "server") == new, "the server, healthy now, untouched"
    assert "Checked pod networks checked=2" not in agent.log(), "never a round of all pods"
    for name in ("server", "client"):
        (agent.manifests / f"{name}.yaml").unlink()
    wait_for(
        lambda: not agent.containers_of("server") and not agent.containers_of("client"),
        timeout=60,
        what="the pods to go",
    )
    try:
        wait_for(lambda: _leftovers(agent, network) == NOTHING, timeout=30, what="nothing left of the pods' network")
    except AssertionError:
        raise AssertionError(f"left: {_leftovers(agent, network)}\n{agent.log()[-3000:]}") from None


STALL = """#!/bin/sh
# The chain's last plugin: on its first ADD it tells the test and waits to be killed with the agent.
in=$(cat)
dir=$(dirname "$0")
if [ "$CNI_COMMAND" = ADD ] && [ -e "$dir/stall-once" ]; then
  rm -f "$dir/stall-once"
  echo "$CNI_CONTAINERID" > "$dir/stalled"
  echo $$ > "$dir/stall.pid"
  exec sleep 600
fi
if [ "$CNI_COMMAND" = ADD ] || [ "$CNI_COMMAND" = CHECK ]; then
  printf '%s' "$in" | sed -n 's/.*"prevResult": *\\({.*}\\)}$/\\1/p'
fi
exit 0
"""


def test_a_sigkill_between_add_and_the_container_start_leaks_nothing(agent, network, tmp_path):
    """The agent dies inside the plugin chain: bridge and host-local have made a veth, an address and
    masquerade rules, no result is saved, and the pod's container, created beside ADD (issue 25), waits in
    runc init, never started. The next start DELs the network from the cache entry written before ADD
    (without a prevResult), removes that container with the sandbox that never started, and the pod comes
    up networked in a new one."""
    bin_dir = tmp_path / "cni-bin"
    bin_dir.mkdir()
    (bin_dir / "stall").write_text(STALL)
    (bin_dir / "stall").chmod(0o755)
    (bin_dir / "stall-once").touch()
    conf = json.loads((network["conf_dir"] / "10-test.conflist").read_text())
    conf["plugins"].append({"type": "stall"})
    (network["conf_dir"] / "10-test.conflist").write_text(json.dumps(conf))
    flags = (f"--cni-conf-dir={network['conf_dir']}", f"--cni-bin-dir={bin_dir}:{PLUGINS}")
    agent.start(*flags)
    agent.write_manifest("server.yaml", SERVER)
    sandbox = wait_for(lambda: (bin_dir / "stalled").read_text().strip(), timeout=90, what="ADD to reach the stall")
    assert network["bridge"] and _sh("ip", "-o", "link", "show", "master", network["bridge"]).strip(), "no veth yet"
    assert [r for r in _leftovers(agent, network)["rules"] if sandbox in r], "no masquerade rules yet"
    cached = json.loads((agent.paths.root_dir / "cni" / f"{sandbox}.json").read_text())
    assert cached["result"] is None  # written before ADD, never completed

    # Created in the pod's namespaces while ADD stalls; never started.
    (created,) = wait_for(
        lambda: [c for c in agent.containers_of("server") if c["status"] == "created"],
        timeout=60,
        what="the container created beside ADD",
    )

    agent.proc.send_signal(signal.SIGKILL)
    agent.proc.wait()
    os.kill(int((bin_dir / "stall.pid").read_text()), signal.SIGKILL)  # the plugin the agent left behind
    assert [c["status"] for c in agent.containers_of("server")] == ["created"]  # no container ever ran

    agent._log.close()
    agent.start(*flags)
    wait_for(
        lambda: "Releasing the network of a sandbox that is gone" in agent.log(),
        timeout=60,
        what="the killed ADD to be released",
    )
    wait_for(lambda: _ctr(agent, "server") and _pod_ip(agent, "server"), timeout=120, what="server back")
    assert created["id"] not in [c["id"] for c in agent.containers_of("server")]
    assert _ctr(agent, "server")["annotations"]["io.kubernetes.cri.sandbox-id"] != sandbox
    ip = _pod_ip(agent, "server")
    out = wait_for(lambda: _fetch(f"http://{ip}:8080/"), timeout=60, what="the pod to answer")
    assert "hello-from-pod" in out
    left = _leftovers(agent, network)
    assert not [r for r in left["rules"] if sandbox in r] and sandbox not in left["netns"]
    assert f"{sandbox}.json" not in left["cache"] and len(left["ipam"]) == 1  # the new sandbox's address only
    (agent.manifests / "server.yaml").unlink()
    wait_for(lambda: _leftovers(agent, network) == NOTHING, timeout=60, what="nothing left")
