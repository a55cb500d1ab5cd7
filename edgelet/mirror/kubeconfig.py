"""The kubeconfig subset a node needs: server, CA, client certificate and key, bearer token or token file.

Why not a library: lightkube's loader (the maintained one) imports the whole
lightkube client with it (measured here with lightkube 0.22: +9.4 MB RSS,
154 modules, 118 ms), and lightkube 1.x needs `httpx2`, a second HTTP stack
beside httpx; kr8s is heavier still. A node's kubeconfig (what kubeadm and
k3s write for a kubelet) uses only the fields below, so this is a small
pure parser over PyYAML, which edgelet already has. Exec credential plugins
and auth-provider entries are refused with a clear error.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgelet.mirror.errors import KubeconfigError


@dataclass(frozen=True)
class ClientConfig:
    """Where the apiserver is and how to prove who we are; file paths are absolute."""

    server: str
    ca_file: str | None = None
    ca_data: bytes | None = None
    insecure: bool = False
    cert_file: str | None = None
    cert_data: bytes | None = None
    key_file: str | None = None
    key_data: bytes | None = None
    token: str | None = None
    token_file: str | None = None


def _named(entries: Any, name: str, kind: str, path: str) -> dict[str, Any]:
    if not isinstance(entries, list):
        raise KubeconfigError(f"{kind}s: expected a list", path=path)
    for e in entries:
        if isinstance(e, dict) and e.get("name") == name:
            body = e.get(kind)
            if not isinstance(body, dict):
                raise KubeconfigError(f"{kind}s[name={name}].{kind}: expected a mapping", path=path)
            return body
    raise KubeconfigError(f"{kind} {name!r} is not defined", path=path)


def _data(value: Any, field: str, path: str) -> bytes | None:
    if value is None:
        return None
    try:
        return base64.b64decode(str(value), validate=True)
    except ValueError as exc:
        raise KubeconfigError(f"{field}: not valid base64", path=path) from exc


def parse_kubeconfig(doc: Any, *, path: str = "", base_dir: str = ".", context: str | None = None) -> ClientConfig:
    """The current (or named) context's cluster and user as a ClientConfig; relative files against `base_dir`."""
    if not isinstance(doc, dict):
        raise KubeconfigError("expected a kubeconfig mapping (apiVersion: v1, kind: Config)", path=path)
    ctx_name = context or doc.get("current-context")
    if not ctx_name:
        raise KubeconfigError("no current-context", path=path)
    ctx = _named(doc.get("contexts"), ctx_name, "context", path)
    cluster = _named(doc.get("clusters"), str(ctx.get("cluster", "")), "cluster", path)
    user = _named(doc.get("users"), str(ctx.get("user", "")), "user", path) if ctx.get("user") else {}
    server = cluster.get("server")
    if not isinstance(server, str) or not server.startswith(("https://", "http://")):
        raise KubeconfigError(
            f"cluster {ctx.get('cluster')!r}: server must be an https:// URL, got {server!r}", path=path
        )

    def file(value: Any) -> str | None:
        return None if not value else os.path.join(base_dir, str(value))

    for unsupported in ("exec", "auth-provider", "username"):
        if user.get(unsupported):
            raise KubeconfigError(
                f"user {ctx.get('user')!r}: {unsupported} credentials are not supported "
                "(use a client certificate or a token)",
                path=path,
            )
    return ClientConfig(
        server=server.rstrip("/"),
        ca_file=file(cluster.get("certificate-authority")),
        ca_data=_data(cluster.get("certificate-authority-data"), "certificate-authority-data", path),
        insecure=bool(cluster.get("insecure-skip-tls-verify", False)),
        cert_file=file(user.get("client-certificate")),
        cert_data=_data(user.get("client-certificate-data"), "client-certificate-data", path),
        key_file=file(user.get("client-key")),
        key_data=_data(user.get("client-key-data"), "client-key-data", path),
        token=user.get("token") or None,
        token_file=file(user.get("tokenFile")),
    )


def load_kubeconfig(path: Path, context: str | None = None) -> ClientConfig:
    import yaml

    try:
        text = path.read_text()
    except OSError as exc:
        raise KubeconfigError(f"cannot read: {exc.strerror or exc}", path=str(path)) from exc
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise KubeconfigError(f"invalid YAML: {exc}", path=str(path)) from exc
    return parse_kubeconfig(doc, path=str(path), base_dir=str(path.parent.resolve()), context=context)


def ssl_context(cfg: ClientConfig) -> ssl.SSLContext:
    """A TLS context verifying the cluster CA and presenting the client certificate, if any."""
    # Only the cluster's CA when one is given (as kubectl does): the system store is not trusted for the
    # apiserver then, and not loading it saves about 1.7 MB.
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        if cfg.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        elif cfg.ca_data is not None:
            ctx.load_verify_locations(cadata=cfg.ca_data.decode())
        elif cfg.ca_file is not None:
            ctx.load_verify_locations(cafile=cfg.ca_file)
        else:
            ctx.load_default_certs()
        if cfg.cert_data is not None or cfg.cert_file is not None:
            _load_cert_chain(ctx, cfg)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise KubeconfigError(f"TLS material unusable: {exc}") from exc
    return ctx


def _load_cert_chain(ctx: ssl.SSLContext, cfg: ClientConfig) -> None:
    # ssl loads certificates only from files: inline data goes through private temp files, removed at once.
    temps: list[str] = []
    try:

        def materialize(data: bytes | None, given: str | None) -> str | None:
            if data is None:
                return given
            fd, name = tempfile.mkstemp(prefix="edgelet-kc-")
            temps.append(name)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            return name

        cert = materialize(cfg.cert_data, cfg.cert_file)
        key = materialize(cfg.key_data, cfg.key_file)
        if cert is None:
            raise ValueError("a client key without a client certificate")
        ctx.load_cert_chain(cert, key)
    finally:
        for name in temps:
            os.unlink(name)


def read_token(cfg: ClientConfig) -> str | None:
    """The bearer token; a tokenFile is read on every call, so a rotated token is picked up."""
    if cfg.token_file:
        try:
            return Path(cfg.token_file).read_text().strip() or None
        except OSError as exc:
            raise KubeconfigError(f"tokenFile: {exc.strerror or exc}", path=cfg.token_file) from exc
    return cfg.token
