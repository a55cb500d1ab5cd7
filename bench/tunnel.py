"""The WireGuard tunnel's figures in a lab of network namespaces (edgelet/testing/wglab.py): the time from
bringing the device's interface up (wireguard-go started, configured over UAPI, addresses and routes) to its
first handshake with the hub; the time the keep-up loop takes to bring it back after its wireguard-go is
SIGKILLed (at the agent's 10 s check period, so most of it is the wait for the next check); and wireguard-go's
own RSS with the tunnel up and idle.

Run as root: `.venv/bin/python bench/tunnel.py [--rounds 5]`. Prints medians.

With `--path`, the issue's figures on the whole path (the lab of tests/e2e/test_tunnel_kubectl.py: the real
agent behind a masquerading router, the real kube-apiserver and kubectl in the hub namespace): the time from
the agent's start to `kubectl exec` working through the tunnel; the time to heal after a hub restart, after
a NAT rebinding and after the hub moved to another address (the device names it by DNS: the wait for the
agent's next lookup of the name, and from that lookup to `kubectl exec` working); `kubectl port-forward` throughput through the tunnel against the same lab without it
(no router, the apiserver dialing the device's own address); the agent's idle CPU and RSS with the tunnel up
(and without it), wireguard-go's separately. `.venv/bin/python bench/tunnel.py --path [--rounds 3] [--mb 20]`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from edgelet.testing.wglab import sh, wireguard_gos, wireguard_lab

# Run in the site namespace: bring the tunnel up, time the first handshake, then kill wireguard-go and time the
# keep-up loop's recovery to the next handshake.
DEVICE = """
import asyncio, json, os, signal, sys, time
from pathlib import Path
from edgelet.tunnel import keys
from edgelet.tunnel.device import Tunnel
from edgelet.util.clock import REAL_CLOCK

def daemons():
    # wireguard-go processes in this network namespace
    mine, found = os.readlink("/proc/self/ns/net"), []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if open(f"/proc/{pid}/comm").read().strip() == "wireguard-go" and os.readlink(f"/proc/{pid}/ns/net") == mine:
                found.append(int(pid))
        except OSError:
            pass
    return found

async def handshake_after(tunnel, since):
    while True:
        try:
            state = await tunnel.state()
            if any(p.last_handshake and p.last_handshake >= since for p in state.peers):
                return time.monotonic()
        except Exception:
            pass
        await asyncio.sleep(0.01)

async def main():
    loaded = keys.load(Path(sys.argv[1]), Path(sys.argv[2]))
    tunnel = Tunnel(loaded.config, REAL_CLOCK)
    wall, t0 = time.time() // 1, time.monotonic()
    await tunnel.up()
    up = time.monotonic() - t0
    first = await handshake_after(tunnel, wall) - t0
    tunnel.status.up = True
    keeper = asyncio.create_task(tunnel.keep_up())
    await asyncio.sleep(2)
    pids = daemons()
    rss = sum(int(l.split()[1]) for p in pids for l in open(f"/proc/{p}/status") if l.startswith("VmRSS:"))
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    wall, t0 = time.time() // 1 + 1, time.monotonic()
    healed = await handshake_after(tunnel, wall) - t0
    keeper.cancel()
    print(json.dumps({"up": up, "first_handshake": first, "healed": healed, "rss_kib": rss}))

asyncio.run(main())
"""


def one_round() -> dict:
    with tempfile.TemporaryDirectory(prefix="edgelet-bench-tunnel-") as tmp:
        with wireguard_lab(Path(tmp)) as lab:
            out = sh(
                sys.executable, "-c", DEVICE, str(lab["conf"]), str(lab["root"]), netns=lab["site_ns"], timeout=120
            )
            assert len(wireguard_gos(lab)) == 1  # brought back, once
            return json.loads(out.strip().splitlines()[-1])


NODE = "bench"


def wait(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if v := pred():
            return v
        time.sleep(0.1)
    raise TimeoutError(what)


def get_big(port: int, size: int) -> float:
    """Seconds to GET /big over 127.0.0.1:port (run in the hub's namespace, where kubectl port-forward listens)."""
    with socket.create_connection(("127.0.0.1", port), 30) as conn:
        t = time.perf_counter()
        conn.sendall(b"GET /big HTTP/1.0\r\nHost: x\r\n\r\n")
        got = 0
        while chunk := conn.recv(1 << 20):
            got += len(chunk)
        elapsed = time.perf_counter() - t
    if got < size:
        raise RuntimeError(f"short transfer: {got} of {size} bytes")
    return elapsed


def path_round(tunnel: bool, mb: int, idle: float) -> dict:
    """One agent behind a NAT with the tunnel (or, `tunnel` False, reached directly without one) and its figures."""
    from _harness import Bench

    b = Bench("tunnel-path")
    out: dict = {}
    try:
        return _path_round(b, tunnel, mb, idle, out)
    except BaseException:
        log = b.base / "agent.log"
        if log.exists():  # why, before the files go
            print(*log.read_text(errors="replace").splitlines()[-60:], sep="\n", file=sys.stderr)
        raise
    finally:
        b.close()  # the agent died with its namespace; its pods and files go now


def _path_round(b, tunnel: bool, mb: int, idle: float, out: dict) -> dict:
    from _harness import cpu_split, memory_mb
    from streaming import pod

    from edgelet.testing.apiserver import ADMIN_TOKEN, ApiServer, kube_bin_dir
    from edgelet.testing.dnsstub import move_hub, named_hub
    from edgelet.testing.wglab import InNetns, kill_hub, rebind_nat, start_hub

    # The lab's kept device key under b.base/root, the agent's --root-dir: the one the hub knows. With the
    # tunnel, the device names the hub by DNS (a server of the lab's answers the name in the site namespace).
    with wireguard_lab(b.base, nat=tunnel) as lab, named_hub(lab) if tunnel else contextlib.nullcontext() as dns:
        in_hub = InNetns(lab["hub_ns"])
        api = ApiServer(
            b.base / "apiserver", kube_bin_dir(), netns=lab["hub_ns"], address=lab["hub_ip"], in_netns=in_hub
        )
        forward = None
        try:
            (b.base / "apiserver").mkdir()
            api.node_token(NODE)
            api.start()
            node_ip = f"{lab['tun']}.2" if tunnel else lab["site_ip"]
            crt, key = api.kubelet_serving_cert(NODE, ip=node_ip)
            b.put_manifest("web.yaml", pod(mb))
            flags = [
                "--kubeconfig", str(api.kubeconfig(b.base / "kubeconfig", token=api.node_token(NODE))),
                "--node-api-address", node_ip,
                "--port", "10250",
                "--client-ca-file", str(api.ca_file),
                "--tls-cert-file", str(crt),
                "--tls-private-key-file", str(key),
                *(["--wireguard-config", str(lab["conf"])] if tunnel else ["--node-ip", node_ip]),
            ]  # fmt: skip
            admin = api.kubeconfig(b.base / "kubeconfig-admin", token=ADMIN_TOKEN)
            kubectl = ["ip", "netns", "exec", lab["hub_ns"], str(api.bin_dir / "kubectl"), f"--kubeconfig={admin}"]

            def works(*command: str) -> bool:
                argv = [*kubectl, "--request-timeout=10s", "exec", f"web-{NODE}", "--", *command]
                try:
                    done = subprocess.run(argv, capture_output=True, timeout=30)
                except subprocess.TimeoutExpired:  # a dial through a tunnel not up yet
                    return False
                out["last_error"] = done.stderr.decode(errors="replace")[-300:]
                return done.returncode == 0

            log = open(b.base / "agent.log", "ab")
            started = time.monotonic()
            b.proc = subprocess.Popen(
                ["nsenter", f"--net=/run/netns/{lab['site_ns']}", *b.argv(*flags)], stdout=log, stderr=log
            )
            try:
                wait(lambda: works("true"), 120, "kubectl exec")
            except TimeoutError:
                raise TimeoutError(f"kubectl exec through the tunnel: {out.get('last_error')}") from None
            out["start_to_exec"] = time.monotonic() - started
            wait(lambda: works("test", "-f", "/www/ready"), 300, "the pod serving")

            time.sleep(5)  # past the start's own work
            daemons = [int(p) for p in wireguard_gos(lab)]
            cpu = [cpu_split(b.proc.pid)[0], *(cpu_split(p)[0] for p in daemons)]
            time.sleep(idle)
            after = [cpu_split(b.proc.pid)[0], *(cpu_split(p)[0] for p in daemons)]
            out["agent_idle_cpu_pct"] = (after[0] - cpu[0]) / idle * 100
            out["agent_rss_mb"] = memory_mb(b.proc.pid)[0]
            if daemons:
                out["wg_idle_cpu_pct"] = (sum(after[1:]) - sum(cpu[1:])) / idle * 100
                out["wg_rss_mb"] = sum(memory_mb(p)[0] for p in daemons)

            forward = subprocess.Popen([*kubectl, "port-forward", f"web-{NODE}", ":8080"], stdout=subprocess.PIPE)
            assert forward.stdout is not None
            port = int(re.search(r"127\.0\.0\.1:(\d+)", forward.stdout.readline().decode())[1])  # type: ignore[index]
            size = mb * 1048576
            in_hub(get_big, port, size)  # warm-up
            out["port_forward_mb_s"] = max(size / 1e6 / in_hub(get_big, port, size) for _ in range(3))

            if tunnel:
                kill_hub(lab)
                start_hub(lab)
                t = time.monotonic()
                wait(lambda: works("true"), 120, "exec after a hub restart")
                out["heal_hub_restart"] = time.monotonic() - t
                rebind_nat(lab)
                t = time.monotonic()
                wait(lambda: works("true"), 120, "exec after a NAT rebinding")
                out["heal_nat_rebinding"] = time.monotonic() - t
                move_hub(lab, dns)
                t = time.monotonic()
                # Nothing can mend it before the agent asks the name again: exec is tried from that lookup on.
                looked = wait(lambda: dns.asked(lab["hub_name"], since=t), 120, "a lookup of the moved hub's name")
                wait(lambda: works("true"), 120, "exec after the hub moved")
                done = time.monotonic()
                out["heal_hub_moved"] = done - t
                out["hub_moved_to_lookup"] = looked[0].at - t
                out["lookup_to_exec"] = done - looked[0].at
        finally:
            if forward is not None:
                forward.terminate()
                forward.communicate(timeout=30)
            api.stop()
            in_hub.close()
    return out


def path_main(rounds: int, mb: int, idle: float) -> None:
    from _harness import machine

    results = {True: [], False: []}
    for _ in range(rounds):
        for tunnel in (True, False):  # interleaved: the machine's load falls on both alike
            results[tunnel].append(path_round(tunnel, mb, idle))
    print(f"machine: {machine()}")
    for tunnel, what in ((True, "with the tunnel"), (False, "without (direct, no NAT)")):
        for key, unit in (
            ("start_to_exec", "s"),
            ("heal_hub_restart", "s"),
            ("heal_nat_rebinding", "s"),
            ("heal_hub_moved", "s"),
            ("hub_moved_to_lookup", "s"),
            ("lookup_to_exec", "s"),
            ("port_forward_mb_s", "MB/s"),
            ("agent_idle_cpu_pct", "%"),
            ("agent_rss_mb", "MB"),
            ("wg_idle_cpu_pct", "%"),
            ("wg_rss_mb", "MB"),
        ):
            values = [r[key] for r in results[tunnel] if key in r]
            if values:
                print(
                    f"{what:25} {key:20} median {statistics.median(values):8.2f} {unit}  "
                    f"(min {min(values):.2f}, max {max(values):.2f}, {len(values)} rounds)"
                )
    with open("/proc/loadavg") as f:
        print(f"load average at the end: {f.read().split()[0]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--path", action="store_true", help="the whole path: agent, apiserver, kubectl")
    parser.add_argument("--mb", type=int, default=20, help="--path: the port-forwarded file's size")
    parser.add_argument("--idle", type=float, default=20.0, help="--path: seconds of idle CPU measured")
    args = parser.parse_args()
    if args.path:
        path_main(args.rounds, args.mb, args.idle)
        return
    rounds = [one_round() for _ in range(args.rounds)]
    for key, unit, scale in (
        ("up", "ms", 1000),
        ("first_handshake", "ms", 1000),
        ("healed", "s", 1),
        ("rss_kib", "MiB", 1 / 1024),
    ):
        values = [r[key] * scale for r in rounds]
        print(
            f"{key:16} median {statistics.median(values):8.2f} {unit}  (min {min(values):.2f}, "
            f"max {max(values):.2f}, {len(values)} rounds)"
        )


if __name__ == "__main__":
    main()
