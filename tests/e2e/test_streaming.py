"""kubectl exec, cp and port-forward reach the device's pods through a real kube-apiserver: the real kubectl v1.20.2
speaks SPDY/3.1 to the apiserver, which dials edgelet's node API with its kubelet client certificate.

Each session must end clean on the node: no `runc exec` left, no exec pid/process file, no pipe or pty descriptor
kept by the agent (checked after the sessions). Nothing is asserted on wall-clock time.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import select
import signal
import socket
import ssl
import struct
import subprocess
import termios
import threading
import time
import urllib.request
from pathlib import Path

import httpx
import pytest

from edgelet.testing.apiserver import ADMIN_TOKEN, make_cert
from tests.e2e.conftest import IMAGE, wait_for
from tests.e2e.test_mirror import NODE, mirror, start_agent

pytestmark = [pytest.mark.privileged, pytest.mark.apiserver]


def pod_yaml(
    name: str,
    command: str,
    *,
    host_network: bool = False,
    restart: str = "Always",
    stdin: bool = False,
    tty: bool = False,
) -> str:
    return f"""apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 1
  restartPolicy: {restart}
  hostNetwork: {str(host_network).lower()}
  containers:
  - name: c
    image: {IMAGE}
    imagePullPolicy: Never
    command: ["sh", "-c", {command!r}]
    stdin: {str(stdin).lower()}
    stdinOnce: {str(stdin and not tty).lower()}
    tty: {str(tty).lower()}
"""


def start(agent, cluster, *pods: tuple[str, str], extra: tuple[str, ...] = ()) -> int:
    crt, key = cluster.kubelet_serving_cert(NODE)
    for name, text in pods:
        agent.write_manifest(f"{name}.yaml", text)
    start_agent(
        agent,
        cluster,
        "--node-ip",
        "127.0.0.1",
        "--client-ca-file",
        str(cluster.ca_file),
        "--tls-cert-file",
        str(crt),
        "--tls-private-key-file",
        str(key),
        *extra,
    )
    port = int(wait_for(lambda: re.search(r"Node API listening.*?port=(\d+)", agent.log()), what="node API")[1])
    wait_for(
        lambda: (
            (n := cluster.get(f"/api/v1/nodes/{NODE}"))
            and n["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == port
        ),
        timeout=60,
        what="the node's port",
    )
    for name, _ in pods:
        wait_for(
            lambda: (p := mirror(cluster, name)) and p.get("status", {}).get("phase") == "Running",
            timeout=90,
            what=f"the mirror of {name} Running",
        )
    return port


def kubectl(
    cluster, *args: str, input: bytes | None = None, token: str = ADMIN_TOKEN, timeout: float = 90
) -> subprocess.CompletedProcess:
    cfg = cluster.kubeconfig(cluster.base / f"kubeconfig-{abs(hash(token))}", token=token)
    return subprocess.run(
        [str(cluster.bin_dir / "kubectl"), f"--kubeconfig={cfg}", *args],
        input=input,
        capture_output=True,
        timeout=timeout,
    )


def agent_fds(agent) -> dict[str, int]:
    """The agent's pipes and terminals, by kind (what an exec session would leak)."""
    counts = {"pipe": 0, "pty": 0}
    fd_dir = Path(f"/proc/{agent.proc.pid}/fd")
    for fd in fd_dir.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("pipe:"):
            counts["pipe"] += 1
        elif target in ("/dev/ptmx", "/dev/pts/ptmx") or target.startswith("/dev/pts/"):
            counts["pty"] += 1
    return counts


def settled_fds(agent) -> dict[str, int]:
    """The agent's pipes and terminals at rest: once the sessions before are torn down, the least of two seconds'
    samples. A single sample can land while the agent runs a short subprocess (its pipes open for a moment), or
    before the last session's pipes are closed: a baseline the agent at rest never matches again."""
    wait_for_sessions_gone(agent)
    samples = []
    for _ in range(40):
        samples.append(agent_fds(agent))
        time.sleep(0.05)
    return {kind: min(s[kind] for s in samples) for kind in samples[0]}


def runc_execs(agent) -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    root = str(agent.paths.runc_root)
    return [line for line in out.splitlines() if root in line and " exec " in line]


def wait_for_sessions_gone(agent) -> None:
    # Generous deadlines: on a machine loaded by other suites a session's processes take long to be reaped.
    wait_for(lambda: not runc_execs(agent), timeout=90, what="no runc exec left")
    exec_dir = agent.paths.exec_dir
    wait_for(lambda: not exec_dir.exists() or not any(exec_dir.iterdir()), timeout=90, what="no exec files left")


def assert_clean(agent, baseline: dict[str, int]) -> None:
    wait_for_sessions_gone(agent)
    seen: list[dict[str, int]] = []
    try:
        wait_for(
            lambda: seen.append(agent_fds(agent)) or seen[-1] == baseline,
            timeout=90,
            what=f"the agent's fds back to {baseline}",
        )
    except AssertionError as e:
        raise AssertionError(f"{e}; the agent's fds last seen: {seen[-1:]}\n{pipe_holders(agent)}") from None


def pipe_holders(agent) -> str:
    """For a failure's message: each pipe the agent holds, the other processes holding it, and the sessions the
    agent's log shows (a session that never logged its end is the one to look at)."""
    pipes: dict[str, list[str]] = {}
    for fd in Path(f"/proc/{agent.proc.pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            if (target := os.readlink(fd)).startswith("pipe:"):
                pipes.setdefault(target, []).append(f"fd {fd.name}")
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == agent.proc.pid:
            continue
        with contextlib.suppress(OSError):
            for fd in (proc / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if (target := os.readlink(fd)) in pipes:
                        args = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                        pipes[target].append(f"pid {proc.name} ({args[:120]})")
    sessions = [line for line in agent.log().splitlines() if "Exec session" in line or "Exec client" in line]
    return "pipes: " + repr(pipes) + "\nsessions:\n" + "\n".join(sessions[-20:])


def test_kubectl_exec_and_cp_through_the_apiserver(agent, cluster, tmp_path):
    start(agent, cluster, ("box", pod_yaml("box", "sleep 3600")))
    pod = f"box-{NODE}"
    # The first exec also warms up whatever the agent keeps open for good; the baseline is taken after it.
    first = kubectl(cluster, "exec", pod, "--", "true")
    assert first.returncode == 0, first.stderr
    baseline = settled_fds(agent)

    # Output, error and the exit code passed through (v4's NonZeroExitCode status).
    r = kubectl(cluster, "exec", pod, "--", "sh", "-c", "echo out; echo err >&2; exit 3")
    assert r.returncode == 3, r.stderr
    assert r.stdout == b"out\n" and b"err\n" in r.stderr
    # The container's own process spec: its env and cwd.
    r = kubectl(cluster, "exec", pod, "--", "sh", "-c", "echo $HOSTNAME $PATH")
    assert r.returncode == 0 and b"/bin" in r.stdout, r

    # stdin piped through, larger than a SPDY window both ways.
    data = os.urandom(300_000).hex().encode()
    r = kubectl(cluster, "exec", "-i", pod, "--", "sh", "-c", "cat; echo done >&2", input=data)
    assert r.returncode == 0, r.stderr
    assert r.stdout == data and b"done" in r.stderr

    # A command that does not exist is an error, not a hang.
    r = kubectl(cluster, "exec", pod, "--", "/no/such/binary")
    assert r.returncode != 0 and r.stderr

    # kubectl cp both ways (exec + busybox tar).
    src = tmp_path / "in.txt"
    src.write_bytes(b"to the pod\n" * 1000)
    r = kubectl(cluster, "cp", str(src), f"{pod}:/tmp/in.txt")
    assert r.returncode == 0, r.stderr
    r = kubectl(cluster, "exec", pod, "--", "cat", "/tmp/in.txt")
    assert r.stdout == src.read_bytes()
    kubectl(cluster, "exec", pod, "--", "sh", "-c", "mkdir -p /tmp/d && seq 1 5000 > /tmp/d/numbers")
    r = kubectl(cluster, "cp", f"{pod}:/tmp/d", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out" / "numbers").read_text() == "".join(f"{i}\n" for i in range(1, 5001))

    assert_clean(agent, baseline)
    assert agent.stop() == 0


def test_kubectl_exec_with_a_terminal(agent, cluster):
    start(agent, cluster, ("box", pod_yaml("box", "sleep 3600")))
    pod = f"box-{NODE}"
    assert kubectl(cluster, "exec", pod, "--", "true").returncode == 0
    baseline = settled_fds(agent)
    # With a terminal: kubectl under a pty, the size passed on and changed, the exit code of the shell.
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 111, 0, 0))
    cfg = cluster.kubeconfig(cluster.base / "kubeconfig-tty", token=ADMIN_TOKEN)
    proc = subprocess.Popen(
        [str(cluster.bin_dir / "kubectl"), f"--kubeconfig={cfg}", "exec", "-it", pod, "--", "sh"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    seen = bytearray()

    def read_until(pattern: bytes, timeout: float = 60) -> None:
        def check():
            r, _, _ = select.select([master], [], [], 0.2)
            if r:
                try:
                    seen.extend(os.read(master, 4096))
                except OSError:
                    pass
            return re.search(pattern, seen, re.DOTALL)

        try:
            wait_for(check, timeout=timeout, what=f"{pattern!r} on the terminal")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the terminal showed {bytes(seen[-300:])!r}") from None

    try:
        os.write(master, b"tty; stty size\n")
        read_until(rb"/dev/pts/\d+.*?33 111", 60)
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 44, 122, 0, 0))
        proc.send_signal(signal.SIGWINCH)

        def resized() -> bool:  # kubectl passes the size on asynchronously: ask until the shell sees it
            os.write(master, b"stty size\n")
            try:
                read_until(rb"44 122", 3)
            except AssertionError:
                return False
            return True

        wait_for(resized, timeout=90, what="the new size in the container")
        os.write(master, b"exit 7\n")
        assert proc.wait(timeout=60) == 7
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)

    assert_clean(agent, baseline)
    assert agent.stop() == 0


def test_kubectl_port_forward_through_the_apiserver(runtime_handler, agent, cluster, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        host_port = s.getsockname()[1]
    serve = "mkdir -p /www && echo hello-from-{} > /www/index.html && exec httpd -f -p {} -h /www"
    node_port = start(
        agent,
        cluster,
        ("web", pod_yaml("web", serve.format("pod", "127.0.0.1:8080"))),
        ("hostweb", pod_yaml("hostweb", serve.format("host", f"127.0.0.1:{host_port}"), host_network=True)),
    )
    baseline = settled_fds(agent)
    # Nothing outside the pod's namespace reaches its port: the host's 8080 is not the pod's.
    with socket.socket() as s:
        s.settimeout(5)
        try:
            s.connect(("127.0.0.1", 8080))
            reached = s.recv(1) is not None and urllib.request.urlopen("http://127.0.0.1:8080/", timeout=5).read()
        except OSError:
            reached = b""
    assert b"hello-from-pod" not in (reached or b"")

    cfg = cluster.kubeconfig(cluster.base / "kubeconfig-pf", token=ADMIN_TOKEN)
    procs = []
    try:
        for pod, port in ((f"web-{NODE}", "8080"), (f"hostweb-{NODE}", str(host_port)), (f"web-{NODE}", "9999")):
            procs.append(
                subprocess.Popen(
                    [str(cluster.bin_dir / "kubectl"), f"--kubeconfig={cfg}", "port-forward", pod, f":{port}"],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
            )
        local = []
        for p in procs:
            line = p.stdout.readline().decode()
            m = re.search(r"Forwarding from 127\.0\.0\.1:(\d+)", line)
            assert m, line
            local.append(int(m[1]))

        # Several connections at once through one session.
        results: list[bytes] = []

        def fetch():
            results.append(urllib.request.urlopen(f"http://127.0.0.1:{local[0]}/", timeout=60).read())

        threads = [threading.Thread(target=fetch) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        assert results == [b"hello-from-pod\n"] * 6
        # A hostNetwork pod's port, on the host's loopback.
        assert urllib.request.urlopen(f"http://127.0.0.1:{local[1]}/", timeout=60).read() == b"hello-from-host\n"
        # A refused port is reported on the error stream (kubectl logs it) and the session goes on.
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{local[2]}/", timeout=60).read()
        assert procs[2].poll() is None
    finally:
        for p in procs:
            p.send_signal(signal.SIGINT)
        errs = []
        for p in procs:
            try:
                _, err = p.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                _, err = p.communicate()
            errs.append(err.decode())
    assert "error forwarding port 9999" in errs[2] and "refused" in errs[2].lower(), errs[2]

    # kubelet's WebSocket port-forward, straight to the node API: channel 2i data, 2i+1 error, each opened with
    # the port in two little-endian bytes.
    pki = cluster.base / "pki"
    admin = make_cert(pki, "pf-admin", (pki / "ca.crt", pki / "ca.key"), "/O=system:masters/CN=admin")
    ctx = ssl.create_default_context(cafile=str(cluster.ca_file))
    ctx.load_cert_chain(*map(str, admin))
    chosen, out = ws_exec(
        node_port,
        ctx,
        f"/portForward/default/web-{NODE}?port=8080&port=9999",
        "v4.channel.k8s.io",
        send=[b"\x00GET / HTTP/1.0\r\n\r\n"],
    )
    assert chosen == "v4.channel.k8s.io"
    assert out[0].startswith((8080).to_bytes(2, "little")) and out[0].endswith(b"hello-from-pod\n"), out[0][:200]
    assert out[1] == (8080).to_bytes(2, "little")
    assert out[2] == (9999).to_bytes(2, "little")
    assert out[3].startswith((9999).to_bytes(2, "little")) and b"refused" in out[3], out[3]
    assert_clean(agent, baseline)
    assert agent.stop() == 0


def ws_exec(
    port: int, ctx: ssl.SSLContext, path: str, subprotocol: str, *, send: list[bytes | str] = ()
) -> tuple[str, dict[int, bytes]]:
    """A WebSocket client straight to the node API (as the Python client is): the subprotocol the server chose
    and what each channel carried, until the server closes."""
    import base64

    from wsproto import ConnectionType, WSConnection
    from wsproto.events import AcceptConnection, BytesMessage, CloseConnection, RejectConnection, Request, TextMessage

    ws = WSConnection(ConnectionType.CLIENT)
    out: dict[int, bytearray] = {}
    chosen = None
    with (
        socket.create_connection(("127.0.0.1", port), timeout=60) as raw,
        ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(ws.send(Request(host="127.0.0.1", target=path, subprotocols=[subprotocol])))
        pending: dict[bool, list] = {True: [], False: []}
        while True:
            data = tls.recv(65536)
            if not data:
                break
            ws.receive_data(data)
            for ev in ws.events():
                if isinstance(ev, RejectConnection):
                    raise AssertionError(f"rejected: {ev.status_code}")
                if isinstance(ev, AcceptConnection):
                    chosen = ev.subprotocol
                    for m in send:
                        tls.sendall(ws.send(TextMessage(data=m) if isinstance(m, str) else BytesMessage(data=m)))
                elif isinstance(ev, (BytesMessage, TextMessage)):
                    text = isinstance(ev, TextMessage)
                    pending[text].append(ev.data)
                    if ev.message_finished:
                        msg = "".join(pending[text]) if text else b"".join(pending[text])
                        pending[text] = []
                        if text:
                            ch, payload = int(msg[0]), base64.b64decode(msg[1:])
                        else:
                            ch, payload = msg[0], bytes(msg[1:])
                        out.setdefault(ch, bytearray()).extend(payload)
                elif isinstance(ev, CloseConnection):
                    tls.sendall(ws.send(ev.response()))
    return chosen, {k: bytes(v) for k, v in out.items()}


def test_node_api_direct_clients_grants_and_websocket(agent, cluster):
    """kubelet's authorization (exec is nodes/proxy: 403 without it) and the WebSocket channel protocols a
    client such as the Python client speaks straight to the node API."""
    pki = cluster.base / "pki"
    reader = make_cert(pki, "stream-reader", (pki / "ca.crt", pki / "ca.key"), "/O=readers/CN=reader")
    ops = make_cert(pki, "stream-ops", (pki / "ca.crt", pki / "ca.key"), "/O=ops/CN=operator")
    last = "while [ ! -f /tmp/go ]; do sleep 0.2; done; echo bye; exit 0"
    port = start(
        agent,
        cluster,
        ("box", pod_yaml("box", "sleep 3600")),
        ("last", pod_yaml("last", last, restart="Never")),
        extra=(
            "--node-api-grants",
            "group:readers=pods/log,group:ops=proxy",
            "--streaming-connection-idle-timeout",
            "4s",
        ),
    )
    path = f"/exec/default/box-{NODE}/c"
    target = f"https://127.0.0.1:{port}{path}?command=true&output=1"
    headers = {"Connection": "Upgrade", "Upgrade": "SPDY/3.1", "X-Stream-Protocol-Version": "v4.channel.k8s.io"}
    ctx = ssl.create_default_context(cafile=str(cluster.ca_file))
    ctx.load_cert_chain(*map(str, reader))
    with httpx.Client(verify=ctx, timeout=30) as c:
        r = c.post(target, headers=headers)
    assert r.status_code == 403, r.text
    assert "subresource=proxy" in r.json()["message"]
    with pytest.raises(AssertionError, match="rejected: 403"):
        ws_exec(port, ctx, f"{path}?command=true&output=1", "v4.channel.k8s.io")
    ctx = ssl.create_default_context(cafile=str(cluster.ca_file))
    ctx.load_cert_chain(*map(str, ops))
    with httpx.Client(verify=ctx, timeout=30) as c:
        r = c.post(target, headers={k: v for k, v in headers.items() if k != "Upgrade"})
        assert r.status_code == 400 and "Upgrade request required" in r.text
        r = c.post(target, headers={**headers, "X-Stream-Protocol-Version": "v9.channel.k8s.io"})
        assert r.status_code == 403 and "unable to negotiate protocol" in r.text
    baseline = settled_fds(agent)

    # v4 binary: stdout, stderr, and the exit code as a NonZeroExitCode Status on the error channel.
    chosen, out = ws_exec(
        port,
        ctx,
        f"{path}?command=sh&command=-c&command=echo+out%3B+echo+err+>%262%3B+exit+3&output=1&error=1",
        "v4.channel.k8s.io",
    )
    assert chosen == "v4.channel.k8s.io"
    assert out[1] == b"out\n" and out[2] == b"err\n"
    status = json.loads(out[3])
    assert status["reason"] == "NonZeroExitCode" and status["details"]["causes"][0]["message"] == "3"
    # base64 (text messages), v1 semantics: a clean exit leaves the error channel empty.
    chosen, out = ws_exec(port, ctx, f"{path}?command=echo&command=hi&output=1", "base64.channel.k8s.io")
    assert chosen == "base64.channel.k8s.io" and out[1] == b"hi\n" and not out.get(3)
    # v5: stdin, closed by the close signal, and a Success status.
    chosen, out = ws_exec(
        port,
        ctx,
        f"{path}?command=cat&input=1&output=1",
        "v5.channel.k8s.io",
        send=[b"\x00hello ", b"\x00websocket", bytes([255, 0])],
    )
    assert chosen == "v5.channel.k8s.io" and out[1] == b"hello websocket"
    assert json.loads(out[3]) == {"metadata": {}, "status": "Success"}
    # attach over WebSocket: the container's output until it exits, then a Success status.
    got: list = []
    attach = threading.Thread(
        target=lambda: got.append(
            ws_exec(port, ctx, f"/attach/default/last-{NODE}/c?output=1&error=1", "v4.channel.k8s.io")
        )
    )
    attach.start()
    wait_for(
        lambda: re.search(r"Attach session started target=default/last", agent.log()),
        timeout=60,
        what="the WebSocket attach",
    )
    assert kubectl(cluster, "exec", f"last-{NODE}", "--", "touch", "/tmp/go").returncode == 0
    attach.join(90)
    assert got and got[0][1][1] == b"bye\n" and json.loads(got[0][1][3])["status"] == "Success", got
    # A session without traffic for --streaming-connection-idle-timeout is closed, its command killed.
    chosen, out = ws_exec(port, ctx, f"{path}?command=sleep&command=1004&output=1", "v4.channel.k8s.io")
    assert not out.get(1)
    assert b"sleep 1004" not in subprocess.run(["ps", "-eo", "args"], capture_output=True).stdout
    assert_clean(agent, baseline)
    assert agent.stop() == 0


def test_sessions_end_clean_when_the_client_goes_the_container_exits_or_the_agent_stops(agent, cluster):
    start(agent, cluster, ("box", pod_yaml("box", "sleep 3600")), ("gone", pod_yaml("gone", "sleep 3600")))
    pod = f"box-{NODE}"
    assert kubectl(cluster, "exec", pod, "--", "true").returncode == 0
    baseline = settled_fds(agent)
    cfg = cluster.kubeconfig(cluster.base / "kubeconfig-gone", token=ADMIN_TOKEN)

    def in_container(marker: str) -> bool:
        return marker.encode() in kubectl(cluster, "exec", pod, "--", "ps", "-o", "args").stdout

    # The client goes away mid-command: the command is killed inside the container, not only runc.
    proc = subprocess.Popen(
        [str(cluster.bin_dir / "kubectl"), f"--kubeconfig={cfg}", "exec", "-i", pod, "--", "sleep", "1001"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for(lambda: in_container("sleep 1001"), timeout=60, what="the command running")
    proc.kill()
    proc.wait()
    proc.stdin.close()
    wait_for(lambda: not in_container("sleep 1001"), timeout=60, what="the command killed")
    assert_clean(agent, baseline)

    # The container goes (its pod removed) mid-session: the session ends with the command's death.
    proc = subprocess.Popen(
        [str(cluster.bin_dir / "kubectl"), f"--kubeconfig={cfg}", "exec", f"gone-{NODE}", "--", "sleep", "1005"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    wait_for(
        lambda: b"sleep 1005" in kubectl(cluster, "exec", f"gone-{NODE}", "--", "ps", "-o", "args").stdout,
        timeout=60,
        what="the command running",
    )
    (agent.manifests / "gone.yaml").unlink()
    _, err = proc.communicate(timeout=90)
    assert proc.returncode != 0, err
    assert_clean(agent, baseline)

    # The agent stops mid-session: the session ends (kubectl fails), the command is killed, nothing is left.
    proc = subprocess.Popen(
        [str(cluster.bin_dir / "kubectl"), f"--kubeconfig={cfg}", "exec", pod, "--", "sleep", "1002"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    wait_for(lambda: in_container("sleep 1002"), timeout=60, what="the command running")
    assert agent.stop() == 0
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and b"the node agent is stopping" in err, err
    assert not runc_execs(agent)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "sleep 1002" not in ps


def test_kubectl_attach_streams_the_containers_output_until_it_exits(runtime_handler, agent, cluster):
    talk = "i=0; while true; do echo out-$i; echo err-$i >&2; i=$((i+1)); sleep 0.3; done"
    last = "while [ ! -f /tmp/go ]; do sleep 0.2; done; echo bye; exit 0"
    ask = "echo ready; while read line; do echo got-$line; done; echo stdin-closed; sleep 3600"
    start(
        agent,
        cluster,
        ("talk", pod_yaml("talk", talk)),
        ("last", pod_yaml("last", last, restart="Never")),
        ("ask", pod_yaml("ask", ask, stdin=True)),
        ("term", pod_yaml("term", "exec sh", stdin=True, tty=True)),
    )
    assert kubectl(cluster, "exec", f"talk-{NODE}", "--", "true").returncode == 0
    baseline = settled_fds(agent)
    cfg = cluster.kubeconfig(cluster.base / "kubeconfig-attach", token=ADMIN_TOKEN)
    # What the container writes from now on, stdout and stderr apart; the client going ends the session.
    proc = subprocess.Popen(
        [str(cluster.bin_dir / "kubectl"), f"--kubeconfig={cfg}", "attach", f"talk-{NODE}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        lines = [proc.stdout.readline().decode().strip() for _ in range(3)]
        assert all(re.fullmatch(r"out-\d+", x) for x in lines), lines
        numbers = [int(x.split("-")[1]) for x in lines]
        assert numbers == sorted(numbers) and len(set(numbers)) == 3
    finally:
        proc.kill()
        _, err = proc.communicate()
    assert b"err-" in err
    # The container exiting ends the session, cleanly.
    proc = subprocess.Popen(
        [str(cluster.bin_dir / "kubectl"), f"--kubeconfig={cfg}", "attach", f"last-{NODE}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    wait_for(
        lambda: re.search(r"Attach session started target=default/last", agent.log()),
        timeout=60,
        what="the second attach",
    )
    assert kubectl(cluster, "exec", f"last-{NODE}", "--", "touch", "/tmp/go").returncode == 0
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0 and b"bye" in out, (out, err)
    # attach -i to a `stdin: true, stdinOnce: true` container: conmon holds its stdin; the client's EOF closes it.
    # The session lasts as long as the container, as with kubelet: the client is stopped once it has seen.
    proc = subprocess.Popen(
        [str(cluster.bin_dir / "kubectl"), f"--kubeconfig={cfg}", "attach", "-i", f"ask-{NODE}"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        proc.stdin.write(b"one\ntwo\n")
        proc.stdin.close()
        logs = wait_for(
            lambda: (o := cluster.kubectl("logs", f"ask-{NODE}")) and "stdin-closed" in o and o,
            timeout=60,
            what="the container's stdin read and closed",
        )
        assert "got-one\ngot-two\nstdin-closed" in logs, logs
        assert [proc.stdout.readline() for _ in range(3)] == [b"got-one\n", b"got-two\n", b"stdin-closed\n"]
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()

    # attach -it to a `tty: true` container (conmon holds its console): a terminal, sized and resized by the client.
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 111, 0, 0))
    proc = subprocess.Popen(
        [str(cluster.bin_dir / "kubectl"), f"--kubeconfig={cfg}", "attach", "-it", f"term-{NODE}"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    seen = bytearray()

    def shows(pattern: bytes) -> bool:
        r, _, _ = select.select([master], [], [], 0.5)
        if r:
            with contextlib.suppress(OSError):
                seen.extend(os.read(master, 4096))
        return re.search(pattern, seen, re.DOTALL) is not None

    def answers(command: bytes, pattern: bytes) -> bool:
        os.write(master, command)
        return any(shows(pattern) for _ in range(6))

    try:
        try:
            wait_for(
                lambda: answers(b"tty; stty size\n", rb"/dev/\S+\s+33 111"),
                timeout=90,
                what="a sized terminal in the container",
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the terminal showed {bytes(seen[-300:])!r}") from None
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 44, 122, 0, 0))
        proc.send_signal(signal.SIGWINCH)
        wait_for(lambda: answers(b"stty size\n", rb"44 122"), timeout=90, what="the new size in the container")
    finally:
        proc.kill()
        proc.wait()
        os.close(master)
    assert_clean(agent, baseline)
    assert agent.stop() == 0


def test_floods_into_a_command_and_a_listener_that_never_read_keep_the_agent_bounded(agent, cluster):
    """WebSocket exec -i into `sleep` and a port-forward to a listener that never reads: the server stops
    reading the socket (the client's sends block) with the agent's RSS grown by less than 5 MB, and the agent
    still serves other sessions while both floods are held."""
    from edgelet.testing.wsflood import RssPeak, tcp_flood, ws_flood

    pki = cluster.base / "pki"
    ops = make_cert(pki, "flood-ops", (pki / "ca.crt", pki / "ca.key"), "/O=ops/CN=operator")
    port = start(
        agent,
        cluster,
        ("box", pod_yaml("box", "sleep 3600")),
        (
            "sink",
            pod_yaml(
                "sink",
                "mkdir -p /www && echo ok > /www/ok && httpd -p 127.0.0.1:8080 -h /www && "
                "exec nc -ll -p 9000 -e sleep 3600",
            ),
        ),
        extra=("--node-api-grants", "group:ops=proxy", "--streaming-connection-idle-timeout", "20s"),
    )
    ctx = ssl.create_default_context(cafile=str(cluster.ca_file))
    ctx.load_cert_chain(*map(str, ops))
    assert ws_exec(port, ctx, f"/exec/default/box-{NODE}/c?command=true&output=1", "v4.channel.k8s.io")[0]
    total = 256 * 1024 * 1024
    floods = {}
    with RssPeak(agent.proc.pid) as rss:
        floods["exec"] = ws_flood(
            port,
            ctx,
            f"/exec/default/box-{NODE}/c?command=sleep&command=3600&input=1",
            "v5.channel.k8s.io",
            channel=0,
            total=total,
        )
        floods["portforward"] = ws_flood(
            port, ctx, f"/portForward/default/sink-{NODE}?port=9000", "v4.channel.k8s.io", channel=0, total=total
        )
        # Other sessions are served meanwhile.
        _, out = ws_exec(
            port, ctx, f"/exec/default/box-{NODE}/c?command=echo&command=alive&output=1", "v4.channel.k8s.io"
        )
        assert out[1] == b"alive\n"
    for name, flood in floods.items():
        assert flood.pushed_back and flood.sent < total, (name, flood)
    assert rss.growth_kib < 5 * 1024, f"the agent's RSS grew by {rss.growth_kib} KiB during the floods"

    # SPDY through the apiserver: kubectl's spdystream ignores SPDY windows; the unread stream is held to its
    # buffer, then reset, and a connection to another port through the same session is served.
    pf = subprocess.Popen(
        [
            str(cluster.bin_dir / "kubectl"),
            f"--kubeconfig={cluster.kubeconfig(cluster.base / 'kubeconfig-pf', token=ADMIN_TOKEN)}",
            "port-forward",
            f"sink-{NODE}",
            ":9000",
            ":8080",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        local: dict[int, int] = {}
        while len(local) < 2:
            if m := re.search(r"127\.0\.0\.1:(\d+) -> (\d+)", pf.stdout.readline().decode()):
                local[int(m[2])] = int(m[1])
        with RssPeak(agent.proc.pid) as rss:
            flood = tcp_flood(local[9000], total)
            with socket.create_connection(("127.0.0.1", local[8080]), timeout=60) as s:
                s.sendall(b"GET /ok HTTP/1.0\r\nHost: x\r\n\r\n")
                got = b""
                while chunk := s.recv(4096):
                    got += chunk
        assert flood.pushed_back and flood.sent < total, flood
        assert got.endswith(b"ok\n"), got
        assert rss.growth_kib < 5 * 1024, f"the agent's RSS grew by {rss.growth_kib} KiB during the SPDY flood"
    finally:
        pf.terminate()
        pf.communicate(timeout=30)
    assert agent.stop() == 0
