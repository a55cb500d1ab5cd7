"""The node API's TLS: the server context (client certificates requested and verified against the client CA), and
the self-signed serving pair made under the root dir when none is configured, as kubelet makes its own.

The pair is made with the `openssl` program (an EC P-256 key, valid a year)
rather than a Python crypto library: edgelet needs no other crypto, and
the `cryptography` package is a large native dependency for a device.
"""

from __future__ import annotations

import hashlib
import os
import ssl
import tempfile
from collections.abc import Sequence
from pathlib import Path

from edgelet.errors import EdgeletError
from edgelet.util import proc
from edgelet.util.log import get_logger

log = get_logger(__name__)

CERT_NAME = "edgelet.crt"
KEY_NAME = "edgelet.key"
VALID_DAYS = 365


class TlsError(EdgeletError):
    """A certificate, key or CA that cannot be loaded or made; names the file and why."""


def fingerprint(cert_pem: str) -> str:
    """SHA-256 of the certificate's DER form, as `openssl x509 -fingerprint -sha256` prints it."""
    digest = hashlib.sha256(ssl.PEM_cert_to_DER_cert(cert_pem)).hexdigest().upper()
    return ":".join(digest[i : i + 2] for i in range(0, len(digest), 2))


def subject_alt_names(node_name: str, addresses: list[str]) -> str:
    """The SAN list of the self-signed certificate: the node name, localhost and every address given."""
    names = [f"DNS:{node_name}", "DNS:localhost"]
    for addr in ["127.0.0.1", *addresses]:
        entry = f"IP:{addr}"
        if addr and addr not in ("0.0.0.0", "::") and entry not in names:
            names.append(entry)
    return ",".join(names)


async def ensure_self_signed(
    pki_dir: Path, node_name: str, addresses: list[str], *, required: Sequence[str] = ()
) -> tuple[Path, Path]:
    """The serving pair under `pki_dir`, made once (key 0600, dir 0700); kept across restarts so clients can pin it,
    unless it does not name one of the `required` addresses (a tunnel configured since: the apiserver dials that
    address and checks it), when it is made again."""
    cert, key = pki_dir / CERT_NAME, pki_dir / KEY_NAME
    if cert.exists() and key.exists():
        missing = sorted(set(required) - names_ips(cert)) if required else []
        if not missing:
            return cert, key
        log.info("The node API's certificate does not name an address it must: making it again", missing=missing)
    pki_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(pki_dir, 0o700)
    # Made in a private temp dir and renamed in: no reader ever sees a half-written key or a key with a wide mode.
    with tempfile.TemporaryDirectory(dir=pki_dir, prefix=".new-") as tmp:
        tkey, tcert = Path(tmp) / KEY_NAME, Path(tmp) / CERT_NAME
        argv = [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            str(tkey),
            "-out",
            str(tcert),
            "-days",
            str(VALID_DAYS),
            "-subj",
            f"/CN={node_name}@edgelet",
            "-addext",
            f"subjectAltName={subject_alt_names(node_name, addresses)}",
            "-addext",
            "extendedKeyUsage=serverAuth",
            "-addext",
            "keyUsage=critical,digitalSignature",
        ]
        try:
            child = await proc.spawn(argv)
            _, err = await child.communicate()
        except OSError as exc:
            raise TlsError(
                f"cannot run openssl to make the node API's certificate: {exc.strerror or exc} "
                "(install openssl, or give --tls-cert-file and --tls-private-key-file)"
            ) from exc
        if child.returncode != 0:
            tail = err.decode(errors="replace").strip()[-400:]
            raise TlsError(f"openssl failed to make the node API's certificate in {pki_dir}: {tail}")
        os.chmod(tkey, 0o600)
        os.chmod(tcert, 0o644)
        os.replace(tkey, key)
        os.replace(tcert, cert)
    log.info(
        "Generated a self-signed certificate for the node API", cert=str(cert), sha256=fingerprint(cert.read_text())
    )
    return cert, key


def names_ips(cert: Path) -> set[str]:
    """The IP addresses a PEM certificate's subjectAltName lists; empty when it cannot be read (then made again)."""
    from edgelet.trust import crypto  # only with a tunnel: a device without one never loads `cryptography`

    try:
        return crypto.certificate_ips(cert.read_bytes())
    except (OSError, ValueError):
        return set()


def server_context(cert: Path, key: Path, client_ca: Path | None) -> ssl.SSLContext:
    """TLS 1.2+; with a client CA, a client certificate is asked for and verified when given (kubelet's
    RequestClientCert: a client without one may still use a token)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(str(cert), str(key))
    except (OSError, ssl.SSLError) as exc:
        raise TlsError(f"cannot load the node API's certificate {cert} and key {key}: {exc}") from exc
    if client_ca is not None:
        try:
            ctx.load_verify_locations(cafile=str(client_ca))
        except (OSError, ssl.SSLError) as exc:
            raise TlsError(f"--client-ca-file {client_ca}: {exc}") from exc
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx
