"""Keeps OpenSSL (libssl and libcrypto: about 5 MB of an agent's RSS) out of the process until something uses TLS.

asyncio imports `ssl` at its own import, and hashlib and hmac import `_hashlib`, so every asyncio program
maps and initialises libcrypto whether or not it ever speaks TLS; most agents never do (no node API, no
apiserver, no registry over https, no https probe). `defer()` imports asyncio, hashlib and hmac while both
are hidden: hashlib and hmac then use CPython's own digests (sha256 about 4x slower than OpenSSL's, which
only image imports and pulls notice), and asyncio's three modules that bind `ssl` at import bind None.
A finder then waits for the first real `import ssl` (the node API, httpx, an https probe), lets it load
as usual and hands the module to those asyncio modules, so TLS works exactly as if it had been there.
"""

from __future__ import annotations

import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # importlib.abc imports importlib.resources: tens of ms of a cold start, for two base classes
    import importlib.abc

# The stdlib modules that do `try: import ssl except ImportError: ssl = None` when asyncio is imported.
ASYNCIO_SSL_USERS = ("asyncio.base_events", "asyncio.selector_events", "asyncio.sslproto")
_HIDDEN = ("ssl", "_ssl", "_hashlib")


def defer() -> bool:
    """Import asyncio, hashlib and hmac without OpenSSL and arm the finder; False (and nothing done) when
    any of them is already imported, as in a test run."""
    if any(name in sys.modules for name in ("asyncio", "hashlib", "hmac", *_HIDDEN)):
        return False
    for name in _HIDDEN:
        sys.modules[name] = None  # type: ignore[assignment]  # the documented way to make an import fail
    try:
        import asyncio
        import asyncio.sslproto  # noqa: F401
        import hashlib  # noqa: F401
        import hmac  # noqa: F401
    finally:
        for name in _HIDDEN:
            del sys.modules[name]
    sys.meta_path.insert(0, _SslFinder())
    return True


def attach(ssl: ModuleType) -> None:
    """Give the real ssl module to the asyncio modules that bound None in its place."""
    for name in ASYNCIO_SSL_USERS:
        mod = sys.modules.get(name)
        if mod is not None and getattr(mod, "ssl", None) is None:
            mod.ssl = ssl  # type: ignore[attr-defined]
    proto = sys.modules.get("asyncio.sslproto")
    if proto is not None and not hasattr(proto, "SSLAgainErrors"):
        # The one constant sslproto computes from ssl at import (under `if ssl is not None`).
        proto.SSLAgainErrors = (ssl.SSLWantReadError, ssl.SSLSyscallError)  # type: ignore[attr-defined]


class _SslFinder:
    """Finds `ssl` through the other finders (the path, or a frozen build's archive) and wraps its loader."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "ssl":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _AttachingLoader(spec.loader)  # type: ignore[assignment]  # a loader by its methods
                sys.meta_path.remove(self)  # once loaded, ssl stays in sys.modules
                return spec
        return None


class _AttachingLoader:
    def __init__(self, inner: importlib.abc.Loader) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def __getattr__(self, name: str) -> object:  # get_source, is_package, ...: the inner loader's
        return getattr(self.inner, name)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        attach(module)
