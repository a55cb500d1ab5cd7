"""A real kube-apiserver v1.20 with etcd on loopback, TLS and Node,RBAC authorization, for tests.

The binaries come from `tools/kube-apiserver.sh` (built once from Debian's
source package and cached outside the checkout). Certificates are made with
the `openssl` program; identities are static tokens (an admin in
`system:masters`, and one `system:node:<name>` per node) and client
certificates signed by the cluster CA. Everything lives in one temp dir and
both processes are stopped and reaped by `stop()`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent.parent
BUILD_SCRIPT = REPO / "tools" / "kube-apiserver.sh"
ADMIN_TOKEN = "edgelet-test-admin-token"


def kube_bin_dir() -> Path:
    """The directory holding kube-apiserver and kubectl, building them first when they are not cached."""
    given = os.environ.get("EDGELET_KUBE_BIN")
    if given:
        return Path(given)
    done = subprocess.run(["bash", str(BUILD_SCRIPT)], check=True, stdout=subprocess.PIPE, text=True)
    return Path(done.stdout.strip().splitlines()[-1])


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports (held together while chosen: two calls in a row may give the same one)."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def make_ca(d: Path, name: str = "ca") -> tuple[Path, Path]:
    key, crt = d / f"{name}.key", d / f"{name}.crt"
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        str(key),
        "-out",
        str(crt),
        "-days",
        "2",
        "-subj",
        f"/CN=edgelet-test-{name}",
    )
    return crt, key


def make_cert(
    d: Path, name: str, ca: tuple[Path, Path], subject: str, *, sans: str = "", server: bool = False
) -> tuple[Path, Path]:
    """A key and a certificate signed by `ca`; `subject` like `/O=system:nodes/CN=system:node:n1`."""
    key, csr, crt, ext = d / f"{name}.key", d / f"{name}.csr", d / f"{name}.crt", d / f"{name}.ext"
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", subject)
    usage = "serverAuth" if server else "clientAuth"
    ext.write_text(f"extendedKeyUsage={usage}\n" + (f"subjectAltName={sans}\n" if sans else ""))
    _openssl(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(ca[0]),
        "-CAkey",
        str(ca[1]),
        "-CAcreateserial",
        "-out",
        str(crt),
        "-days",
        "2",
        "-extfile",
        str(ext),
    )
    return crt, key


@dataclass
class ApiServer:
    """One etcd and one kube-apiserver under `base`; `start()` waits for /readyz."""

    base: Path
    bin_dir: Path
    node_tokens: dict[str, str] = field(default_factory=dict)  # node name -> token
    port: int = 0
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    # In a network namespace (`ip netns exec`), listening on `address` too (its certificate names it): the
    # namespace's own requests then go through `in_netns`, a call that runs a function inside it.
    netns: str | None = None
    address: str = "127.0.0.1"
    in_netns: Callable[..., Any] | None = None

    @property
    def url(self) -> str:
        return f"https://{self.address}:{self.port}"

    def _in(self) -> list[str]:
        return ["ip", "netns", "exec", self.netns] if self.netns else []

    @property
    def ca_file(self) -> Path:
        return self.base / "pki" / "ca.crt"

    def node_token(self, node: str) -> str:
        return self.node_tokens.setdefault(node, f"edgelet-test-node-{node}-{os.urandom(6).hex()}")

    def _write_tokens(self) -> Path:
        lines = [f'{ADMIN_TOKEN},admin,admin,"system:masters"']
        lines += [f'{tok},system:node:{n},node-{n},"system:nodes"' for n, tok in self.node_tokens.items()]
        path = self.base / "tokens.csv"
        path.write_text("\n".join(lines) + "\n")
        return path

    def start(self, *, fresh_etcd: bool = False, timeout: float = 120.0) -> None:
        pki = self.base / "pki"
        if not pki.is_dir():
            pki.mkdir(parents=True)
            ca = make_ca(pki)
            sans = "IP:127.0.0.1,DNS:localhost" + (f",IP:{self.address}" if self.address != "127.0.0.1" else "")
            make_cert(pki, "server", ca, "/CN=kube-apiserver", sans=sans, server=True)
            make_cert(pki, "kubelet-client", ca, "/O=system:masters/CN=kube-apiserver-kubelet-client")
            _openssl("genrsa", "-out", str(pki / "sa.key"), "2048")
            _openssl("rsa", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))
        etcd_dir = self.base / "etcd"
        if fresh_etcd and etcd_dir.exists():
            subprocess.run(["rm", "-rf", str(etcd_dir)], check=True)
        self.port = self.port or free_port()
        logs = self.base / "logs"
        logs.mkdir(exist_ok=True)
        # etcd's ports are free when chosen, not when it binds: another test process (or its etcd) may take one in
        # between, and then etcd exits at once; new ports are chosen then.
        for attempt in range(3):
            if self._start_once(etcd_dir, logs, timeout, last=attempt == 2):
                return

    def _start_once(self, etcd_dir: Path, logs: Path, timeout: float, *, last: bool) -> bool:
        """etcd and the apiserver started and ready (True), or etcd gone at once on a port taken meanwhile (False,
        to try on new ports; raised when `last`)."""
        client, peer = free_ports(2)
        pki = self.base / "pki"
        self._spawn(
            [
                *self._in(),
                "etcd",
                "--name",
                "default",
                "--data-dir",
                str(etcd_dir),
                "--listen-client-urls",
                f"http://127.0.0.1:{client}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{client}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-cluster",
                f"default=http://127.0.0.1:{peer}",
            ],
            logs / "etcd.log",
        )
        self._spawn(
            [
                *self._in(),
                str(self.bin_dir / "kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{client}",
                "--bind-address=127.0.0.1" if self.address == "127.0.0.1" else "--bind-address=0.0.0.0",
                f"--advertise-address={self.address}",
                f"--secure-port={self.port}",
                "--insecure-port=0",
                "--endpoint-reconciler-type=none",
                f"--cert-dir={pki}",
                f"--tls-cert-file={pki / 'server.crt'}",
                f"--tls-private-key-file={pki / 'server.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--token-auth-file={self._write_tokens()}",
                f"--kubelet-client-certificate={pki / 'kubelet-client.crt'}",
                f"--kubelet-client-key={pki / 'kubelet-client.key'}",
                f"--kubelet-certificate-authority={pki / 'ca.crt'}",
                # Reach a node at its InternalIP (tests advertise 127.0.0.1), never by resolving its name.
                "--kubelet-preferred-address-types=InternalIP",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                "--allow-privileged=true",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-cluster-ip-range=10.96.0.0/24",
            ],
            logs / "apiserver.log",
        )
        deadline = time.monotonic() + timeout
        while True:
            etcd_gone = self.procs[0].poll() is not None
            try:
                if not etcd_gone and self.get("/readyz", raw=True) == b"ok":
                    return True
            except (OSError, urllib.error.URLError, ValueError):
                pass
            if any(p.poll() is not None for p in self.procs) or time.monotonic() > deadline:
                etcd_tail = (logs / "etcd.log").read_text(errors="replace")[-1500:]
                tail = (logs / "apiserver.log").read_text(errors="replace")[-3000:]
                self.stop()
                # Read from etcd's log, not from whether it had exited when polled: it may exit in between.
                if "address already in use" in etcd_tail and not last:
                    return False
                raise RuntimeError(f"kube-apiserver did not become ready:\n{tail}\netcd:\n{etcd_tail}")
            time.sleep(0.2)

    def _spawn(self, argv: list[str], log: Path) -> None:
        with open(log, "ab") as out:
            self.procs.append(
                subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
            )

    def stop(self) -> None:
        # A short grace: an apiserver still holding a proxied stream to a node that is gone waits it out (20 s
        # and more); it keeps no state, and etcd has synced its log before it answered.
        for p in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        self.procs.clear()

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def request(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        token: str = ADMIN_TOKEN,
        content_type: str = "application/json",
    ) -> tuple[int, bytes]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {token}", "Content-Type": content_type},
        )

        def send() -> tuple[int, bytes]:
            try:
                with urllib.request.urlopen(req, context=self.context(), timeout=30) as resp:
                    return resp.status, resp.read()
            except urllib.error.HTTPError as exc:
                return exc.code, exc.read()

        return self.in_netns(send) if self.in_netns is not None else send()

    def get(self, path: str, *, token: str = ADMIN_TOKEN, raw: bool = False) -> object:
        status, body = self.request("GET", path, token=token)
        if status != 200:
            raise ValueError(f"GET {path}: {status} {body[:300]!r}")
        return body if raw else json.loads(body)

    def kubeconfig(self, path: Path, *, token: str) -> Path:
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "test",
                    "clusters": [
                        {"name": "test", "cluster": {"server": self.url, "certificate-authority": str(self.ca_file)}}
                    ],
                    "users": [{"name": "test", "user": {"token": token}}],
                    "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
                }
            )
        )
        return path

    def cert_kubeconfig(self, path: Path, *, node: str) -> Path:
        """A kubeconfig for `node` with a client certificate (O=system:nodes, CN=system:node:<node>), all inline."""
        import base64

        pki = self.base / "pki"
        crt, key = make_cert(
            pki, f"node-{node}", (pki / "ca.crt", pki / "ca.key"), f"/O=system:nodes/CN=system:node:{node}"
        )

        def b64(p: Path) -> str:
            return base64.b64encode(p.read_bytes()).decode()

        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "node",
                    "clusters": [
                        {
                            "name": "test",
                            "cluster": {"server": self.url, "certificate-authority-data": b64(self.ca_file)},
                        }
                    ],
                    "users": [
                        {"name": node, "user": {"client-certificate-data": b64(crt), "client-key-data": b64(key)}}
                    ],
                    "contexts": [{"name": "node", "context": {"cluster": "test", "user": node}}],
                }
            )
        )
        return path

    def kubelet_serving_cert(self, node: str, ip: str = "127.0.0.1") -> tuple[Path, Path]:
        """A serving pair for `node`'s node API signed by the cluster CA (the apiserver verifies it, as
        --kubelet-certificate-authority asks), valid for `ip`; the CA also signs the apiserver's kubelet
        client certificate (O=system:masters), so a node trusting `ca_file` lets the apiserver in."""
        pki = self.base / "pki"
        return make_cert(
            pki,
            f"kubelet-serving-{node}",
            (pki / "ca.crt", pki / "ca.key"),
            f"/CN=system:node:{node}",
            sans=f"IP:{ip},DNS:{node}",
            server=True,
        )

    def kubectl(self, *args: str, token: str = ADMIN_TOKEN) -> str:
        cfg = self.kubeconfig(self.base / f"kubeconfig-{abs(hash(token))}", token=token)
        done = subprocess.run(
            [*self._in(), str(self.bin_dir / "kubectl"), f"--kubeconfig={cfg}", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if done.returncode != 0:
            raise ValueError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout
