"""kubectl exec and port-forward through a real kube-apiserver to edgelet's node API, against the device-local
baselines, in the same run.

Run as root: `.venv/bin/python bench/streaming.py [--n 20] [--mb 100]` (kube-apiserver and kubectl are built
once by tools/kube-apiserver.sh). One pod (busybox httpd serving an MB-sized file) under a real agent with
`--kubeconfig`; then:

- exec round trip, N interleaved rounds of `kubectl exec POD -- true` (kubectl -> apiserver -> SPDY to the
  node API -> runc exec) and `edgelet exec POD -- true` (the local socket), medians and p90;
- port-forward throughput: one GET of the file through `kubectl port-forward` (kubectl -> apiserver -> SPDY
  -> a socket in the pod's netns) and the same GET over a direct connection made in the pod's netns, 3 each,
  interleaved, best and median MB/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import REPO, Bench, machine, percentile

from edgelet.testing.apiserver import ADMIN_TOKEN, ApiServer, kube_bin_dir

NODE = "bench"


def wait(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if v := pred():
                return v
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.2)
    raise TimeoutError(what)


def wall(argv: list[str]) -> float:
    t = time.perf_counter()
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, cwd=REPO)
    elapsed = (time.perf_counter() - t) * 1000
    if done.returncode != 0:
        raise RuntimeError(f"{argv[:4]}...: exit {done.returncode}: {done.stderr.decode()[-300:]}")
    return elapsed


def pod(mb: int) -> str:
    return f"""apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: edgelet.local/busybox:1.36
    command: ["sh", "-c", "mkdir -p /www && dd if=/dev/zero of=/www/big bs=1048576 count={mb} 2>/dev/null && touch /www/ready && exec httpd -f -p 127.0.0.1:8080 -h /www"]
"""


def http_get(sock_factory, size: int) -> float:
    """Seconds to GET /big (size bytes) over a connection from `sock_factory()` (async)."""

    async def run() -> float:
        sock = await sock_factory()
        loop = asyncio.get_running_loop()
        t = time.perf_counter()
        await loop.sock_sendall(sock, b"GET /big HTTP/1.0\r\nHost: x\r\n\r\n")
        got = 0
        while chunk := await loop.sock_recv(sock, 1 << 20):
            got += len(chunk)
        elapsed = time.perf_counter() - t
        sock.close()
        if got < size:
            raise RuntimeError(f"short transfer: {got} of {size} bytes")
        return elapsed

    return asyncio.run(run())


def start_node_agent(
    b: Bench, api: ApiServer, kubeconfig: Path, crt: Path, key: Path, *extra: str, source: Path = REPO
) -> None:
    """The agent (run from `source`) with its node API on loopback (an ephemeral port), registered with `api`."""
    b.start_agent(
        "--kubeconfig",
        str(kubeconfig),
        "--node-ip",
        "127.0.0.1",
        "--address",
        "127.0.0.1",
        "--port",
        "0",
        "--client-ca-file",
        str(api.ca_file),
        "--tls-cert-file",
        str(crt),
        "--tls-private-key-file",
        str(key),
        *extra,
        source=source,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--mb", type=int, default=100)
    args = ap.parse_args()
    b = Bench("streaming")
    api = ApiServer(b.base / "apiserver", kube_bin_dir())
    pf = None
    try:
        (b.base / "apiserver").mkdir()
        api.node_token(NODE)
        api.start()
        kubeconfig = api.kubeconfig(b.base / "kubeconfig", token=api.node_token(NODE))
        crt, key = api.kubelet_serving_cert(NODE)
        b.put_manifest("web.yaml", pod(args.mb))
        start_node_agent(b, api, kubeconfig, crt, key)
        admin = api.kubeconfig(b.base / "kubeconfig-admin", token=ADMIN_TOKEN)
        kubectl = [str(api.bin_dir / "kubectl"), f"--kubeconfig={admin}"]
        podname = f"web-{NODE}"
        wait(
            lambda: (
                subprocess.run(
                    [*kubectl, "exec", podname, "--", "test", "-f", "/www/ready"], capture_output=True
                ).returncode
                == 0
            ),
            300,
            "the pod serving",
        )
        cid, pid = wait(
            lambda: next(
                (
                    (c["id"], c["pid"])
                    for c in json.loads(
                        subprocess.run(
                            ["runc", "--root", str(b.paths.runc_root), "list", "--format", "json"],
                            capture_output=True,
                            text=True,
                        ).stdout
                        or "[]"
                    )
                    if (c.get("annotations") or {}).get("io.kubernetes.container.name") == "main"
                    and c["status"] == "running"
                ),
                None,
            ),
            60,
            "the container",
        )
        netns = f"/proc/{pid}/ns/net"
        edgelet = [
            sys.executable,
            "-m",
            "edgelet",
            "exec",
            "--root-dir",
            str(b.paths.root_dir),
            "--run-dir",
            str(b.paths.run_dir),
            "--config",
            "/dev/null",
            "web",
            "--",
            "true",
        ]
        kexec = [*kubectl, "exec", podname, "--", "true"]
        wall(kexec), wall(edgelet)  # warm-up
        ours, local = [], []
        for _ in range(args.n):
            ours.append(wall(kexec))
            local.append(wall(edgelet))

        pf = subprocess.Popen(
            [*kubectl, "port-forward", podname, ":8080"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        line = pf.stdout.readline().decode()
        port = int(re.search(r"127\.0\.0\.1:(\d+)", line)[1])
        from edgelet.util.netns import connect_local, socket_in

        async def through_pf():
            s = await socket_in(None)
            await asyncio.get_running_loop().sock_connect(s, ("127.0.0.1", port))
            return s

        size = args.mb * 1048576
        http_get(through_pf, size)  # warm-up
        fwd, direct = [], []
        for _ in range(3):
            fwd.append(size / 1e6 / http_get(through_pf, size))
            direct.append(size / 1e6 / http_get(lambda: connect_local(netns, 8080), size))
    finally:
        if pf is not None:
            pf.terminate()
            pf.communicate(timeout=30)
        b.close()
        api.stop()
    print(f"machine: {machine()}")
    print(
        f"`kubectl exec POD -- true` through the apiserver, {args.n} runs: median {percentile(ours, 0.5):.1f} ms, "
        f"p90 {percentile(ours, 0.9):.1f} ms"
    )
    print(
        f"`edgelet exec POD -- true` on the device, same run: median {percentile(local, 0.5):.1f} ms, "
        f"p90 {percentile(local, 0.9):.1f} ms"
    )
    print(
        f"port-forward of a {args.mb} MB GET through kubectl and the apiserver: best {max(fwd):.1f} MB/s, "
        f"median {percentile(fwd, 0.5):.1f} MB/s"
    )
    print(
        f"the same GET over a direct connection in the pod's netns, same run: best {max(direct):.1f} MB/s, "
        f"median {percentile(direct, 0.5):.1f} MB/s"
    )
    with open("/proc/loadavg") as f:
        print(f"load average at the end: {f.read().split()[0]}")


if __name__ == "__main__":
    main()
