"""OpenSSL stays out of a fresh agent process until TLS is used, and TLS then works as usual (util/openssl.py).

Each check runs in a fresh interpreter: in the test process asyncio is imported already, where `defer()`
rightly does nothing.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_python(code: str, tmp_path: Path) -> str:
    res = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_agent_modules_load_no_openssl(tmp_path):
    # What `edgelet` (no subcommand) imports before and while running pods without TLS.
    out = run_python(
        """
        import sys
        import edgelet.cli
        import edgelet.app, edgelet.sync.loop, edgelet.sync.syncpod, edgelet.sync.workers, edgelet.pleg
        import edgelet.probes.manager, edgelet.probes.hooks, edgelet.eviction.manager, edgelet.network.manager
        import edgelet.runtime.runc_runtime, edgelet.images.puller, edgelet.images.importdir, edgelet.sources.file
        import edgelet.server.api, edgelet.server.health, edgelet.status.publisher, edgelet.stats.collector
        import hashlib
        maps = open("/proc/self/maps").read()
        print(sorted(m for m in ("ssl", "_ssl", "_hashlib") if m in sys.modules), "libcrypto" in maps)
        print(hashlib.sha256(b"abc").hexdigest())
    """,
        tmp_path,
    )
    assert out.splitlines() == ["[] False", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"]


def test_tls_works_after_deferral(tmp_path):
    # The node API's own certificate and context, a TLS client over loopback: asyncio gets the real ssl.
    out = run_python(
        """
        import sys
        from pathlib import Path
        from edgelet.util import openssl
        assert openssl.defer()
        import asyncio
        import asyncio.sslproto
        assert asyncio.sslproto.ssl is None
        from edgelet.server import tls  # imports ssl for real
        import ssl
        assert asyncio.sslproto.ssl is ssl and asyncio.base_events.ssl is ssl and asyncio.selector_events.ssl is ssl
        assert asyncio.sslproto.SSLAgainErrors == (ssl.SSLWantReadError, ssl.SSLSyscallError)

        async def main():
            cert, key = await tls.ensure_self_signed(Path(sys.argv[1]) / "pki", "n1", ["127.0.0.1"])
            async def serve(reader, writer):
                writer.write(await reader.readline())
                await writer.drain()
                writer.close()
            server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=tls.server_context(cert, key, None))
            port = server.sockets[0].getsockname()[1]
            client = ssl.create_default_context(cafile=str(cert))
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="127.0.0.1")
            writer.write(b"hello over tls\\n")
            print((await reader.readline()).decode().strip(), writer.get_extra_info("ssl_object").version())
            writer.close()
            server.close()
        asyncio.run(main())
    """,
        tmp_path,
    )
    assert out.split()[:3] == ["hello", "over", "tls"]


@pytest.mark.parametrize("already", ["asyncio", "hashlib"])
def test_defer_is_a_no_op_once_loaded(tmp_path, already):
    out = run_python(
        f"""
        import {already}
        from edgelet.util import openssl
        print(openssl.defer())
    """,
        tmp_path,
    )
    assert out.strip() == "False"
