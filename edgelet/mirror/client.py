"""A small async apiserver client over httpx: JSON in and out, a timeout on every call, errors mapped with context.

Every request counts itself (`requests`), so `edgelet node` and the bench
can tell how chatty the mirror is.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import httpx

from edgelet.mirror.errors import ApiStatusError, Unreachable
from edgelet.mirror.kubeconfig import ClientConfig, read_token, ssl_context

DEFAULT_TIMEOUT = 10.0
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
MERGE_PATCH = "application/merge-patch+json"


def user_agent(version: str) -> str:
    return f"edgelet/{version}"


def _clock_skew_message(exc: BaseException) -> str | None:
    """TLS refused a certificate for its dates: on a device without an RTC that means our clock is wrong."""
    text = str(exc)
    cause = exc.__cause__ or exc.__context__
    while cause is not None:
        text += " " + str(cause)
        cause = cause.__cause__ or cause.__context__
    if "not yet valid" in text:
        return "TLS: a certificate is not yet valid: this device's clock is probably behind (no RTC, no NTP yet)"
    if "certificate has expired" in text:
        return "TLS: a certificate has expired (or this device's clock is ahead)"
    return None


class KubeClient:
    def __init__(
        self,
        cfg: ClientConfig,
        *,
        version: str,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._cfg = cfg
        self.requests = 0
        verify: ssl.SSLContext | bool = ssl_context(cfg) if cfg.server.startswith("https://") else False
        self._http = httpx.AsyncClient(
            base_url=cfg.server,
            verify=verify,
            timeout=timeout,
            transport=transport,
            headers={"User-Agent": user_agent(version), "Accept": "application/json"},
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {}
        token = read_token(self._cfg)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        params: dict[str, str] | None = None,
    ) -> Any:
        """The decoded JSON answer; ApiStatusError for a non-2xx answer, Unreachable for no answer."""
        data = json.dumps(body).encode() if body is not None else None
        self.requests += 1
        try:
            resp = await self._http.request(
                method,
                path,
                content=data,
                params=params,
                headers=self._headers(content_type if data is not None else None),
            )
        except httpx.HTTPError as exc:
            skew = _clock_skew_message(exc)
            raise Unreachable(
                skew or f"{type(exc).__name__}: {exc}" or type(exc).__name__,
                method=method,
                path=path,
                clock_skew=skew is not None,
            ) from exc
        if resp.status_code >= 300:
            raise _status_error(resp, method, path)
        return resp.json() if resp.content else None

    async def watch(self, path: str, params: dict[str, str], timeout: float) -> AsyncIterator[dict[str, Any]]:
        """Stream watch events ({type, object}) until the server ends the watch."""
        self.requests += 1
        try:
            async with self._http.stream(
                "GET",
                path,
                params={**params, "watch": "1"},
                headers=self._headers(None),
                timeout=httpx.Timeout(DEFAULT_TIMEOUT, read=timeout),
            ) as resp:
                if resp.status_code >= 300:
                    await resp.aread()
                    raise _status_error(resp, "WATCH", path)
                async for line in resp.aiter_lines():
                    if line.strip():
                        yield json.loads(line)
        except httpx.HTTPError as exc:
            skew = _clock_skew_message(exc)
            raise Unreachable(
                skew or f"{type(exc).__name__}: {exc}", method="WATCH", path=path, clock_skew=skew is not None
            ) from exc


def _status_error(resp: httpx.Response, method: str, path: str) -> ApiStatusError:
    reason, message = "", resp.text[:300]
    try:
        st = resp.json()
        reason, message = st.get("reason", ""), st.get("message", message)
    except ValueError:
        pass
    if resp.status_code == 401:
        message = (
            f"{message} (the apiserver did not accept our credentials: check the kubeconfig's token or certificate)"
        )
    return ApiStatusError(resp.status_code, message, method=method, path=path, reason=reason)


def q(name: str) -> str:
    return quote(name, safe="")
