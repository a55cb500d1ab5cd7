"""The agent's memory while clients flood a command and a listener that never read: a WebSocket `exec -i` into
`sleep`, a WebSocket port-forward into a listener that never reads, and a `kubectl port-forward` (SPDY through a
real kube-apiserver) into the same listener, with a GET through the same kubectl session meanwhile.

Run as root: `.venv/bin/python bench/streaming_flood.py [--mb 1024]`. The agent runs from the first PYTHONPATH
entry (default: this checkout), so `PYTHONPATH=/path/to/main` measures main's agent with this bench. Each flood
sends up to `--mb` MB on loopback and stops when a send has blocked for 3 s (the agent stopped reading); the
figure is the agent's peak RSS over its RSS before, sampled every 50 ms.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import REPO, Bench, machine
from streaming import NODE, start_node_agent, wait

from edgelet.testing import wsflood
from edgelet.testing.apiserver import ADMIN_TOKEN, ApiServer, kube_bin_dir, make_cert

STALL = 3.0


def pods() -> dict[str, str]:
    def pod(name: str, command: str) -> str:
        return f"""apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: edgelet.local/busybox:1.36
    command: ["sh", "-c", {command!r}]
"""

    return {
        "box": pod("box", "sleep 3600"),
        "sink": pod(
            "sink",
            "mkdir -p /www && echo ok > /www/ok && httpd -p 127.0.0.1:8080 -h /www && "
            "exec nc -ll -p 9000 -e sleep 3600",
        ),
    }


def http_ok(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(b"GET /ok HTTP/1.0\r\nHost: x\r\n\r\n")
        got = b""
        while chunk := s.recv(4096):
            got += chunk
    return got.endswith(b"ok\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mb", type=int, default=1024)
    args = ap.parse_args()
    total = args.mb * 1024 * 1024
    source = Path((os.environ.get("PYTHONPATH") or str(REPO)).split(":")[0]).resolve()
    b = Bench("streaming-flood")
    api = ApiServer(b.base / "apiserver", kube_bin_dir())
    pf = None
    results: list[str] = []
    try:
        (b.base / "apiserver").mkdir()
        api.node_token(NODE)
        api.start()
        kubeconfig = api.kubeconfig(b.base / "kubeconfig", token=api.node_token(NODE))
        crt, key = api.kubelet_serving_cert(NODE)
        pki = api.base / "pki"
        client = make_cert(pki, "flood", (pki / "ca.crt", pki / "ca.key"), "/O=ops/CN=flood")
        for name, text in pods().items():
            b.put_manifest(f"{name}.yaml", text)
        start_node_agent(b, api, kubeconfig, crt, key, "--node-api-grants", "group:ops=proxy", source=source)
        log = b.base / "agent.log"
        port = int(wait(lambda: re.search(r"Node API listening.*?port=(\d+)", log.read_text()), 120, "the node API")[1])
        admin = api.kubeconfig(b.base / "kubeconfig-admin", token=ADMIN_TOKEN)
        kubectl = [str(api.bin_dir / "kubectl"), f"--kubeconfig={admin}"]
        for name in ("box", "sink"):
            wait(
                lambda name=name: (
                    subprocess.run(
                        [*kubectl, "exec", f"{name}-{NODE}", "--", "true"], capture_output=True, check=False
                    ).returncode
                    == 0
                ),
                300,
                f"{name} running",
            )
        ctx = ssl.create_default_context(cafile=str(api.ca_file))
        ctx.load_cert_chain(*map(str, client))
        pid = b.proc.pid

        def measure(name: str, flood) -> None:
            with wsflood.RssPeak(pid) as rss:
                done = flood()
            results.append(
                f"{name}: sent {done.sent / 1e6:.0f} MB of {total / 1e6:.0f} MB, "
                f"{'pushed back' if done.pushed_back else 'not pushed back'}; agent RSS "
                f"{rss.before / 1024:.1f} MiB before, peak +{rss.growth_kib / 1024:.1f} MiB"
            )

        def ws(path: str, sub: str):
            return lambda: wsflood.ws_flood(port, ctx, path, sub, channel=0, total=total, stall=STALL)

        measure(
            "WebSocket exec -i into sleep",
            ws(f"/exec/default/box-{NODE}/c?command=sleep&command=3600&input=1", "v5.channel.k8s.io"),
        )
        measure(
            "WebSocket port-forward into a listener that never reads",
            ws(f"/portForward/default/sink-{NODE}?port=9000", "v4.channel.k8s.io"),
        )
        pf = subprocess.Popen(
            [*kubectl, "port-forward", f"sink-{NODE}", ":9000", ":8080"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        local: dict[int, int] = {}  # the pod's port -> kubectl's local one
        while len(local) < 2:
            if m := re.search(r"127\.0\.0\.1:(\d+) -> (\d+)", pf.stdout.readline().decode()):
                local[int(m[2])] = int(m[1])
        ports = [local[9000], local[8080]]
        get: list[float] = []

        def get_meanwhile() -> None:
            time.sleep(1.0)  # the flood is under way
            t = time.monotonic()
            try:
                if http_ok(ports[1]):
                    get.append(time.monotonic() - t)
            except OSError:
                pass  # no answer within the timeout: reported below

        getter = threading.Thread(target=get_meanwhile)
        getter.start()
        measure(
            "kubectl port-forward (SPDY via the apiserver) into a listener that never reads",
            lambda: wsflood.tcp_flood(ports[0], total, STALL),
        )
        getter.join(120)
        results.append(
            "a GET through the same kubectl port-forward during that flood: "
            + (f"answered in {get[0]:.1f} s" if get else "no answer in 60 s")
        )
    finally:
        if pf is not None:
            pf.terminate()
            pf.communicate(timeout=30)
        b.close()
        api.stop()
    print(f"machine: {machine()}")
    print(f"agent source: {source}")
    for line in results:
        print(line)


if __name__ == "__main__":
    main()
