"""Releases from `--update-url`: a conditional GET of the archive (ETag / Last-Modified), then its signature
beside it (`URL.minisig`, else `URL.sig`), written to a download directory for the manager to stage.

Only outbound requests (a device behind NAT polls), with a CA bundle and headers of their own
(`--update-url-ca`, `--update-url-header`, `--update-url-header-file`, read at each poll): the release server
may be another host than the manifest server, and must not be sent its token. Redirects are not followed (a
release server that redirects is a misconfiguration to report, not a hop to trust, nor a host to send the
headers to), and a body larger than MAX_RELEASE_BYTES or shorter than its Content-Length is a failed download:
the running release is untouched and the next poll tries again.
The validators of a release that was judged (applied or refused) are kept in `validators_file`, so that
the agent it started, or the next boot, asks with them and is answered 304 instead of downloading the same
archive again (a device on a metered link restarts its agent at every update and boot).
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from edgelet.trust import SIGNATURE_SUFFIXES
from edgelet.update import ARCHIVE_SUFFIX, PART_SUFFIX
from edgelet.update.errors import StagingError
from edgelet.util.crashpoint import crash_point
from edgelet.util.headerfile import HeaderFileError, read_header_file

MAX_RELEASE_BYTES = 512 * 1024 * 1024
MAX_SIGNATURE_BYTES = 64 * 1024
TIMEOUT = 300.0


@dataclass
class UrlReleases:
    url: str
    download_dir: Path
    ca_file: Path | None = None
    headers: tuple[tuple[str, str], ...] = ()
    header_file: Path | None = None  # `Name: value` lines, read at each fetch (a token rotated on disk)
    validators: dict[str, str] = field(default_factory=dict)  # If-None-Match / If-Modified-Since of the last body
    validators_file: Path | None = None  # where they are kept across agent starts (None: in memory only)
    _client: Any = None

    def __post_init__(self) -> None:
        if not self.validators:
            self.validators = self._load()

    def _load(self) -> dict[str, str]:
        if self.validators_file is None:
            return {}
        try:
            doc = json.loads(self.validators_file.read_bytes())
        except (OSError, ValueError):
            return {}
        kept = doc.get("validators") if isinstance(doc, dict) and doc.get("url") == self.url else None
        if not isinstance(kept, dict):
            return {}
        return {k: v for k, v in kept.items() if k in ("If-None-Match", "If-Modified-Since") and isinstance(v, str)}

    def remember(self) -> None:
        """Keep the last download's validators across agent starts: its release was judged."""
        from edgelet.state import write_atomic

        if self.validators and self.validators_file is not None:
            doc = {"url": self.url, "validators": self.validators}
            self.validators_file.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.validators_file, json.dumps(doc).encode(), sync_dir=False)

    def forget(self) -> None:
        """Download the release again at the next poll (its staging failed on this device)."""
        self.validators = {}
        if self.validators_file is not None:
            self.validators_file.unlink(missing_ok=True)

    @property
    def archive_path(self) -> Path:
        name = os.path.basename(urlsplit(self.url).path)
        return self.download_dir / (name if name.endswith(ARCHIVE_SUFFIX) else "release" + ARCHIVE_SUFFIX)

    def _make_client(self) -> Any:
        import httpx

        from edgelet import __version__

        context = ssl.create_default_context(cafile=str(self.ca_file) if self.ca_file else None)
        return httpx.AsyncClient(
            verify=context,
            timeout=httpx.Timeout(60.0),
            follow_redirects=False,
            headers={"User-Agent": f"edgelet/{__version__}"},
        )

    async def fetch(self) -> Path | None:
        """Download a changed release and its signature; the archive's path, None when unchanged (304).
        StagingError (naming the URL) when the download fails."""
        import httpx

        if self._client is None:
            try:
                self._client = await asyncio.to_thread(self._make_client)
            except (OSError, ValueError) as exc:
                raise StagingError(self.url, f"cannot load the CA bundle {self.ca_file}: {exc}") from exc
        headers = [*self.headers, *await asyncio.to_thread(self._file_headers)]
        try:
            async with asyncio.timeout(TIMEOUT):
                got = await self._download(self.url, self.archive_path, MAX_RELEASE_BYTES, headers, conditional=True)
                if got is None:
                    return None
                validators = got
                for suffix in SIGNATURE_SUFFIXES:
                    Path(str(self.archive_path) + suffix).unlink(missing_ok=True)  # the last release's
                for suffix in SIGNATURE_SUFFIXES:
                    target = Path(str(self.archive_path) + suffix)
                    if (
                        await self._download(self.url + suffix, target, MAX_SIGNATURE_BYTES, headers, missing_ok=True)
                        is not None
                    ):
                        break
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise StagingError(self.url, f"download timed out after {TIMEOUT:g}s") from exc
        except httpx.HTTPError as exc:
            raise StagingError(self.url, f"cannot download: {type(exc).__name__}: {exc}") from exc
        except OSError as exc:
            raise StagingError(self.url, f"cannot download: {exc.strerror or exc}") from exc
        self.validators = validators
        return self.archive_path

    def _file_headers(self) -> list[tuple[str, str]]:
        """The header file's headers; StagingError (naming the file, never a value) when unreadable or malformed."""
        if self.header_file is None:
            return []
        try:
            return read_header_file(self.header_file, "--update-url-header-file")
        except HeaderFileError as exc:
            raise StagingError(self.url, str(exc)) from exc

    async def _download(
        self,
        url: str,
        dest: Path,
        limit: int,
        headers: list[tuple[str, str]],
        *,
        conditional: bool = False,
        missing_ok: bool = False,
    ) -> dict[str, str] | None:
        """GET `url` into `dest` (replaced whole); the response's validators, None on 304 or (missing_ok) 404."""
        headers = list(headers)
        if conditional:
            headers += [(k, v) for k, v in self.validators.items()]
        dest.parent.mkdir(parents=True, exist_ok=True)
        async with self._client.stream("GET", url, headers=headers) as response:
            if response.status_code == 304 and conditional:
                return None
            if response.status_code in (404, 410) and missing_ok:
                dest.unlink(missing_ok=True)
                return None
            if response.status_code != 200:
                raise StagingError(url, f"HTTP status {response.status_code} {response.reason_phrase}".rstrip())
            length = response.headers.get("content-length", "")
            if length.isdigit() and int(length) > limit:
                raise StagingError(url, f"larger than {limit} bytes ({length})")
            tmp = dest.with_name(f".{dest.name}{PART_SUFFIX}")
            size = 0
            with open(tmp, "wb") as out:
                async for chunk in response.aiter_raw():
                    size += len(chunk)
                    if size > limit:
                        raise StagingError(url, f"larger than {limit} bytes")
                    out.write(chunk)
                    crash_point("update.download")
            if length.isdigit() and size != int(length):
                raise StagingError(url, f"short download: {size} of {length} bytes")
            os.replace(tmp, dest)
        validators = {}
        if response.headers.get("etag"):
            validators["If-None-Match"] = response.headers["etag"]
        if response.headers.get("last-modified"):
            validators["If-Modified-Since"] = response.headers["last-modified"]
        return validators

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
