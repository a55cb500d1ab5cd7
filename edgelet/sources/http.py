"""The URL source: static pods polled from --manifest-url, as whole snapshots on change (kubelet config/http.go).

`apply_outcome` is the whole decision (what one GET's outcome does to the
source's state) and is pure; `HttpSource` around it does the I/O: the GET
through httpx, the on-disk copy of the last good body, logging, and *when*
to poll (every `http_check_frequency`).

Where edgelet differs from kubelet (KUBELET-SEMANTICS "HTTP source"):

- an empty body is an error and the last good pods keep running; kubelet
  removes every URL pod. Removing them all takes an explicit empty list
  (`kind: PodList` or `kind: List` with `items: []`), so a misconfigured
  server or proxy answering 200 with nothing cannot wipe a device;
- multi-document YAML and `v1 List` are accepted besides Pod and PodList;
- conditional requests (If-None-Match / If-Modified-Since), a CA bundle,
  and a copy of the last good body on disk, used when the URL cannot be
  fetched at start, so a device that boots offline still runs its URL pods.

With trusted keys (`--trusted-keys`), a fetched body counts only with a valid
detached signature, fetched right after it from `--manifest-url-signature` or
the URL's path + `.minisig`, then + `.sig`, with the same headers and TLS
rules; the on-disk copy keeps body and signature together and is verified
again when it is read. A refused body is like a failed fetch: the last good
pods keep running.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import msgspec

from edgelet.api.annotations import ORIGIN
from edgelet.errors import EdgeletError
from edgelet.sources import ManifestProblem, SourceName, SourceSnapshot, snapshot_key
from edgelet.util.headerfile import HeaderFileError, read_header_file
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    import httpx

    from edgelet.api.configobjects import ConfigObject
    from edgelet.api.types import Pod
    from edgelet.trust.verify import Trust, Verified
    from edgelet.util.clock import Clock

__all__ = [
    "CACHE_FILE",
    "BodyProblem",
    "MAX_BODY_BYTES",
    "CachedManifest",
    "FetchFailed",
    "Fetched",
    "HttpSource",
    "HttpSourceState",
    "NotModified",
    "apply_cache",
    "apply_outcome",
    "decode_body",
    "redact_url",
    "should_log_failure",
]

log = get_logger(__name__)

SOURCE: SourceName = "http"
MAX_BODY_BYTES = 10 * 1024 * 1024  # kubelet's maxConfigLength
DEFAULT_TIMEOUT = 10.0  # kubelet's http source client timeout
CACHE_FILE = "manifest-url.cache"
# Failure logging: every one of the first few in a row, then every 10th or once a minute.
MAX_REDIRECTS = 10  # Go's http client's limit, which kubelet's source uses
LOG_FIRST_FAILURES = 3
LOG_EVERY_NTH = 10
LOG_INTERVAL = 60.0
_LIST_KINDS = ("PodList", "List")
_OBJECT_KINDS = ("ConfigMap", "Secret")
_EMPTY_BODY = "empty body (serve an empty PodList to remove every pod)"
_NO_MANIFEST = "body holds no manifest (serve an empty PodList to remove every pod)"


# --- outcomes of one GET --------------------------------------------------------


@dataclass(frozen=True)
class Fetched:
    """A 2xx answer with its whole body (at most MAX_BODY_BYTES) and cache validators."""

    body: bytes
    etag: str | None = None
    last_modified: str | None = None
    # With trusted keys: the detached signature fetched with the body (None: none served) and where from.
    signature: bytes | None = None
    signature_url: str = ""


@dataclass(frozen=True)
class NotModified:
    """A 304 to our conditional request: the last good body is still current."""


@dataclass(frozen=True)
class FetchFailed:
    """No usable answer: connection error, timeout, non-2xx status, oversized body; `reason` says which."""

    reason: str
    status: int | None = None  # the HTTP status, when the server answered


Outcome = Fetched | NotModified | FetchFailed


class CachedManifest(msgspec.Struct, frozen=True, kw_only=True):
    """The on-disk copy of the last good body (`<cache_dir>/manifest-url.cache`, JSON, body in base64)."""

    url: str
    fetched_at: float  # wall time of the fetch, for the log line when the copy is used
    body: bytes
    etag: str | None = None
    last_modified: str | None = None
    signature: bytes | None = None  # with trusted keys: the body's detached signature, verified again when read


@dataclass(frozen=True)
class HttpSourceState:
    """What the source holds: the last good pods and body identity, and the current error."""

    pods: tuple[Pod, ...] = ()
    digest: str | None = None  # sha256 of the last good body; None until there is one
    etag: str | None = None  # validators sent back with the next request
    last_modified: str | None = None
    error: ManifestProblem | None = None
    # The last invalid body and its error: served again, it is not decoded again.
    bad_digest: str | None = None
    bad_error: ManifestProblem | None = None
    # The pods come from the on-disk copy and the URL has not answered since start: fetch
    # failures are then logged only, not reported, since being offline at boot is expected.
    from_cache: bool = False
    warnings: tuple[ManifestProblem, ...] = ()  # unknown fields in the last good body
    # With trusted keys: the signature check of the last good body (its version is recorded by the source).
    verified: Verified | None = None
    objects: tuple[ConfigObject, ...] = ()  # the ConfigMaps and Secrets of the last good body

    def snapshot(self) -> SourceSnapshot:
        return SourceSnapshot(
            source=SOURCE,
            pods=self.pods,
            errors=(self.error,) if self.error else (),
            warnings=self.warnings,
            objects=self.objects,
        )

    def conditional_headers(self) -> dict[str, str]:
        """If-None-Match / If-Modified-Since for the last good body, when the server gave validators."""
        headers: dict[str, str] = {}
        if self.digest is None:
            return headers
        if self.etag:
            headers["If-None-Match"] = self.etag
        if self.last_modified:
            headers["If-Modified-Since"] = self.last_modified
        return headers


# --- pure decisions -----------------------------------------------------------------


class BodyProblem(EdgeletError, ValueError):
    """A fetched body that cannot be used; the message is the reason, `pod` the pod it names if any."""

    def __init__(self, message: str, pod: str | None = None) -> None:
        super().__init__(message)
        self.pod = pod


def redirect_refusal(current: httpx.URL, target: httpx.URL) -> str | None:
    """Why a redirect from `current` to `target` is not followed, or None.

    Go's client follows an https page to http; edgelet does not: the pods
    would then travel where anyone on the path can read and change them.
    """
    if target.scheme not in ("http", "https"):
        return f"redirect to a {target.scheme}: URL refused"
    if current.scheme == "https" and target.scheme == "http":
        return f"redirect from https to plain http refused ({redact_url(str(target))})"
    return None


def redact_url(url: str) -> str:
    """The URL as shown in logs, errors and annotations: a password in it is replaced by `***`."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def _digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def _documents(body: bytes) -> list[Any] | None:
    """The body's documents as plain objects, only to locate items for messages; None when unsure.

    parse_manifests has accepted the body already; this second, shallow read
    only serves errors and the empty-body check, so it runs on small or bad
    bodies, never on every good one.
    """
    import yaml

    stripped = body.lstrip(b"\xef\xbb\xbf \t\r\n")
    if stripped[:1] in (b"{", b"["):
        try:
            return [msgspec.json.decode(stripped)]
        except msgspec.DecodeError:
            pass  # YAML flow style, as parse_manifests allows
    try:
        return list(yaml.load_all(body, Loader=yaml.CSafeLoader))
    except (yaml.YAMLError, ValueError, RecursionError):
        return None


def _item_locations(docs: list[Any]) -> list[str]:
    """`$`, `$.items[2]` or `document 1: $.items[0]` for each pod, in parse_manifests' order."""
    multi = len(docs) > 1
    locations: list[str] = []
    for index, doc in enumerate(docs):
        prefix = f"document {index}: " if multi else ""
        if doc is None or _is_object(doc):  # a ConfigMap or Secret is no pod
            continue
        if isinstance(doc, dict) and doc.get("kind") in _LIST_KINDS:
            items = doc.get("items") or []
            locations.extend(f"{prefix}$.items[{j}]" for j, item in enumerate(items) if not _is_object(item))
        else:
            locations.append(f"{prefix}$")
    return locations


def _is_object(doc: Any) -> bool:
    return isinstance(doc, dict) and doc.get("kind") in _OBJECT_KINDS


def _with_origin(pod: Pod, origin: str) -> Pod:
    meta = pod.metadata
    assert meta is not None  # make_static_pod always sets it
    annotations = dict(meta.annotations or {})
    annotations[ORIGIN] = origin
    return msgspec.structs.replace(pod, metadata=msgspec.structs.replace(meta, annotations=annotations))


def decode_body(body: bytes, url: str, node_name: str) -> tuple[Pod, ...]:
    """The static pods served in `body`; raise BodyProblem naming the item and field.

    One invalid pod rejects the whole body, as kubelet does: a served list is
    one unit, so it never half-applies.
    """
    return decode_body_objects(body, url, node_name)[0]


def decode_body_objects(
    body: bytes, url: str, node_name: str
) -> tuple[tuple[Pod, ...], list[str], tuple[ConfigObject, ...]]:
    """decode_body, plus a warning per unknown field of the body and the ConfigMaps and Secrets beside the pods."""
    from edgelet.api.decode import parse_documents
    from edgelet.api.errors import ApiError

    if not body.strip():
        raise BodyProblem(_EMPTY_BODY)
    shown = redact_url(url)
    try:
        decoded, found, warnings = parse_documents(body, shown)
    except ApiError as exc:
        raise BodyProblem(str(exc)) from exc
    objects = tuple(replace(o, origin=shown, source=SOURCE) for o in found)
    return (_static_pods(body, url, node_name, decoded) if decoded or not objects else ()), warnings, objects


def _static_pods(body: bytes, url: str, node_name: str, decoded: list[Pod]) -> tuple[Pod, ...]:
    from edgelet.api.errors import ValidationError
    from edgelet.api.static import make_static_pod

    shown = redact_url(url)
    if not decoded:
        docs = _documents(body)
        explicit = docs is not None and any(isinstance(d, dict) and d.get("kind") in _LIST_KINDS for d in docs)
        if not explicit:
            raise BodyProblem(_NO_MANIFEST)
        return ()
    pods = []
    for index, pod in enumerate(decoded):
        try:
            static = make_static_pod(pod, node_name=node_name, source=SOURCE, origin=url)
        except ValidationError as exc:
            raise BodyProblem(_locate(exc, index, body, len(decoded)), pod=exc.pod) from exc
        pods.append(_with_origin(static, shown))
    return tuple(pods)


def _locate(exc: Any, index: int, body: bytes, count: int) -> str:
    """Prefix each field path of a ValidationError of the `index`-th pod with the item's place in the body."""
    docs = _documents(body)
    locations = _item_locations(docs) if docs is not None else []
    if len(locations) != count:  # could not map pods to items: name the pod by its position
        locations = ["$" if count == 1 else f"pod {index}: $"] * count
    where = locations[index]
    parts = []
    for error in exc.errors:
        path = error.path
        parts.append(f"{where}{path[1:]}: {error.message}" if path.startswith("$") else f"{where}: {error}")
    return "; ".join(parts) or str(exc)


def _error(url: str, reason: str, pod: str | None = None, *, kind: str = "FailedValidation") -> ManifestProblem:
    shown = redact_url(url)
    return ManifestProblem(source=SOURCE, origin=shown, message=f"{shown}: {reason}", pod=pod, reason=kind)


UNTRUSTED_REASON = "UntrustedManifest"  # the event reason of a refused signature


def _pod_names(pods: tuple[Pod, ...]) -> list[str]:
    return [f"{p.metadata.namespace}/{p.metadata.name}" for p in pods if p.metadata is not None]


def _check_trust(
    trust: Trust, body: bytes, signature: bytes | None, signature_url: str, url: str, node_name: str
) -> tuple[tuple[Pod, ...], list[str], Verified, tuple[ConfigObject, ...]]:
    """The body's pods once its signature holds and its version is no replay; SignatureRefused or BodyProblem."""
    verified = trust.check_manifest(body, signature, redact_url(signature_url))
    pods, unknown, objects = decode_body_objects(body, url, node_name)
    trust.check_replay(f"url:{url}", _pod_names(pods), verified, body)
    return pods, unknown, verified, objects


def apply_outcome(
    state: HttpSourceState, outcome: Outcome, *, url: str, node_name: str, trust: Trust | None = None
) -> HttpSourceState:
    """The source's state after one GET: a failure keeps the last good pods and reports why.

    The same body as the last good one, or a 304, changes nothing but
    clearing the error; the same invalid body as last time is not decoded again.
    With `trust`, a body whose signature is refused is reported (reason
    UntrustedManifest) and changes nothing else; reading the version records
    is its only I/O, recording an accepted version is the caller's.
    """
    if isinstance(outcome, NotModified):
        if state.digest is None:
            return replace(state, error=_error(url, "server answered 304 Not Modified to a request for the whole body"))
        return replace(state, error=None, from_cache=False)
    if isinstance(outcome, FetchFailed):
        if state.from_cache:
            return replace(state, error=None)
        return replace(state, error=_error(url, outcome.reason, kind="FailedToFetch"))
    digest = _digest(outcome.body)
    if digest == state.digest:
        return replace(state, error=None, from_cache=False, etag=outcome.etag, last_modified=outcome.last_modified)
    if digest == state.bad_digest and state.bad_error is not None and trust is None:
        return replace(state, error=state.bad_error, from_cache=False)
    verified = None
    try:
        if trust is None:
            pods, unknown, objects = decode_body_objects(outcome.body, url, node_name)
        else:
            from edgelet.trust.errors import SignatureRefused

            try:
                pods, unknown, verified, objects = _check_trust(
                    trust, outcome.body, outcome.signature, outcome.signature_url, url, node_name
                )
            except SignatureRefused as exc:
                # Not remembered as a bad body: the same body with a fixed signature must be tried again.
                return replace(state, error=_error(url, str(exc), kind=UNTRUSTED_REASON), from_cache=False)
    except BodyProblem as exc:
        error = _error(url, str(exc), exc.pod)
        return replace(state, error=error, bad_digest=digest, bad_error=error, from_cache=False)
    return HttpSourceState(
        pods=pods,
        digest=digest,
        etag=outcome.etag,
        last_modified=outcome.last_modified,
        warnings=tuple(_error(url, w) for w in unknown),
        verified=verified,
        objects=objects,
    )


def apply_cache(
    state: HttpSourceState, cached: CachedManifest, *, url: str, node_name: str, trust: Trust | None = None
) -> HttpSourceState:
    """The state seeded from the on-disk copy (no error: running offline on it is expected).

    Raises BodyProblem when the copy is for another URL or no longer decodes
    (a newer edgelet may validate more strictly), or, with `trust`, when its
    signature no longer holds (a copy changed on disk, a key no longer trusted).
    """
    if cached.url != url:
        raise BodyProblem(f"the cached copy is of another URL ({redact_url(cached.url)})")
    verified = None
    if trust is None:
        pods, _, objects = decode_body_objects(cached.body, url, node_name)
    else:
        from edgelet.trust.errors import SignatureRefused

        body, signature = cached.body, cached.signature
        try:
            pods, _, verified, objects = _check_trust(trust, body, signature, "cached copy", url, node_name)
        except SignatureRefused as exc:
            raise BodyProblem(str(exc)) from exc
    return HttpSourceState(
        pods=pods,
        digest=_digest(cached.body),
        etag=cached.etag,
        last_modified=cached.last_modified,
        from_cache=True,
        verified=verified,
        objects=objects,
    )


def should_log_failure(consecutive: int, now: float, last_logged: float | None) -> bool:
    """Log the first LOG_FIRST_FAILURES failures in a row, then every LOG_EVERY_NTH or once per LOG_INTERVAL."""
    if consecutive <= LOG_FIRST_FAILURES or consecutive % LOG_EVERY_NTH == 0:
        return True
    return last_logged is None or now - last_logged >= LOG_INTERVAL


def format_timestamp(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


# --- the source -----------------------------------------------------------------------


class HttpSource:
    """Polls the manifest URL and emits a SourceSnapshot whenever what it holds changes.

    `scan_once` fetches once and returns the snapshot (also what --runonce
    uses). `run` emits the first snapshot at once, then only changed ones,
    polling every `check_frequency`; it runs until cancelled and never dies
    of a failed poll. Call `aclose` after using `scan_once` alone.
    """

    def __init__(
        self,
        url: str,
        node_name: str,
        *,
        headers: Mapping[str, str] | Iterable[tuple[str, str]],
        check_frequency: float,
        clock: Clock,
        cache_dir: Path,
        ca_file: Path | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        header_file: Path | None = None,
        trust: Trust | None = None,
        signature_url: str | None = None,
    ) -> None:
        self.url = url
        self.trust = trust
        self.signature_url = signature_url
        # Header values kept out of argv (`ps` shows it to every local user): read at each fetch, so a
        # rotated token needs no restart.
        self.header_file = None if header_file is None else Path(header_file)
        self.node_name = node_name
        pairs = headers.items() if isinstance(headers, Mapping) else headers
        # A list of pairs, not a dict: kubelet sends a repeated header name once per value.
        self.headers: tuple[tuple[str, str], ...] = tuple((str(k), str(v)) for k, v in pairs)
        self.period = check_frequency
        self.timeout = timeout
        self.cache_path = Path(cache_dir) / CACHE_FILE
        self.ca_file = None if ca_file is None else Path(ca_file)
        self._clock = clock
        self._shown = redact_url(url)
        self._state = HttpSourceState()
        self._client: httpx.AsyncClient | None = None
        self._warned_plain = False
        self._cache_tried = False
        self._persisted: tuple[str | None, str | None, str | None] | None = None
        self._failures = 0
        self._last_logged: float | None = None

    @property
    def state(self) -> HttpSourceState:
        return self._state

    async def scan_once(self) -> SourceSnapshot:
        """GET the URL once, update what the source holds, and return it as a snapshot."""
        self._warn_plain_http()
        outcome = await self._fetch()
        previous = self._state
        if isinstance(outcome, Fetched) and self.trust is not None and _digest(outcome.body) != previous.digest:
            outcome = await self._with_signature(outcome)
        if isinstance(outcome, Fetched):
            # Decoding a large body takes a while: keep the event loop free.
            state = await asyncio.to_thread(
                apply_outcome, previous, outcome, url=self.url, node_name=self.node_name, trust=self.trust
            )
        else:
            state = apply_outcome(previous, outcome, url=self.url, node_name=self.node_name, trust=self.trust)
        if state.digest is None and state.error is not None and not self._cache_tried:
            state = await self._load_cache(state, outcome)
        if self.trust is not None and state.verified is not None and state.digest != previous.digest:
            await self._record_version(state, outcome)
        self._state = state
        self._log_result(outcome, state)
        if isinstance(outcome, Fetched) and state.error is None:
            await self._persist(outcome, state)
        return state.snapshot()

    async def run(self, emit: Callable[[SourceSnapshot], Awaitable[None]]) -> None:
        last: tuple[Any, ...] | None = None
        try:
            while True:
                try:
                    snapshot = await self.scan_once()
                except Exception as exc:  # a bug in one poll must not stop the source; the next poll retries
                    log.error("Manifest URL poll failed unexpectedly", exc, url=self._shown)
                else:
                    key = snapshot_key(snapshot)
                    if key != last:
                        log.debug(
                            "URL source changed", url=self._shown, pods=len(snapshot.pods), errors=len(snapshot.errors)
                        )
                        await emit(snapshot)
                        last = key
                await self._clock.sleep(self.period)
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client (its connections); the next scan opens a new one."""
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    # --- I/O ---

    def _warn_plain_http(self) -> None:
        if self._warned_plain or not self.url.lower().startswith("http://"):
            return
        self._warned_plain = True
        log.warning("Manifest URL uses plain http: its pods can be read and changed on the way", url=self._shown)

    def _make_client(self) -> httpx.AsyncClient:
        import httpx

        from edgelet import __version__

        # The system's trust store unless a bundle is given (httpx alone would use certifi's).
        context = ssl.create_default_context(cafile=str(self.ca_file) if self.ca_file else None)
        return httpx.AsyncClient(
            verify=context,
            timeout=httpx.Timeout(self.timeout),
            follow_redirects=False,  # followed by _fetch, which refuses downgrades and drops headers off-host
            headers={"User-Agent": f"edgelet/{__version__}"},
        )

    def signature_urls(self) -> list[str]:
        """Where the body's signature is looked for, in order: the configured URL, else path + .minisig, + .sig."""
        if self.signature_url:
            return [self.signature_url]
        from edgelet.trust import SIGNATURE_SUFFIXES

        parts = urlsplit(self.url)
        return [urlunsplit(parts._replace(path=parts.path + suffix)) for suffix in SIGNATURE_SUFFIXES]

    async def _with_signature(self, outcome: Fetched) -> Outcome:
        """The fetched body with its signature; a signature that cannot be fetched (but is not absent) is a
        failed fetch, so the last good pods keep running and the next poll tries again."""
        tried = []
        for url in self.signature_urls():
            answer = await self._fetch(url, conditional=False)
            if isinstance(answer, Fetched):
                return replace(outcome, signature=answer.body, signature_url=url)
            if isinstance(answer, FetchFailed) and answer.status in (404, 410):
                tried.append(redact_url(url))
                continue
            reason = answer.reason if isinstance(answer, FetchFailed) else "unexpected 304"
            return FetchFailed(f"cannot fetch the signature {redact_url(url)}: {reason}")
        return replace(outcome, signature=None, signature_url=" or ".join(tried))

    async def _record_version(self, state: HttpSourceState, outcome: Outcome) -> None:
        assert self.trust is not None and state.verified is not None
        body = outcome.body if isinstance(outcome, Fetched) else None
        if body is None:
            cached = await asyncio.to_thread(self._read_cache)
            body = cached.body if cached is not None else None
        if body is None or _digest(body) != state.digest:
            return
        try:
            await asyncio.to_thread(
                functools.partial(self.trust.accept, revoke_dropped=True),
                f"url:{self.url}",
                _pod_names(state.pods),
                state.verified,
                body,
            )
        except OSError as exc:
            log.error("Cannot record the accepted signed version", exc, url=self._shown)
            return
        log.info("Signed manifest accepted", url=self._shown, key=state.verified.key_id, version=state.verified.version)

    async def _fetch(self, target_url: str | None = None, *, conditional: bool = True) -> Outcome:
        import httpx

        if self._client is None:
            try:
                # Loading a CA bundle reads files: not on the event loop.
                self._client = await asyncio.to_thread(self._make_client)
            except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
                return FetchFailed(f"cannot load CA bundle {self.ca_file or '(system default)'}: {exc}")
        try:
            configured = list(self.headers) + await asyncio.to_thread(self._file_headers)
        except HeaderFileError as exc:
            return FetchFailed(str(exc))
        headers = configured + (list(self._state.conditional_headers().items()) if conditional else [])
        try:
            # httpx's timeout is per read; the overall deadline also bounds a server that trickles bytes.
            async with asyncio.timeout(self.timeout):
                url = httpx.URL(target_url or self.url)
                for _ in range(MAX_REDIRECTS + 1):
                    async with self._client.stream("GET", url, headers=headers) as response:
                        if not response.has_redirect_location:
                            return await self._read(response)
                        target = url.join(response.headers["location"])
                    refused = redirect_refusal(url, target)
                    if refused:
                        return FetchFailed(refused)
                    if (target.scheme, target.host, target.port) != (url.scheme, url.host, url.port):
                        # Go drops only Authorization off-host; every configured header may be a secret
                        # (X-Api-Key), and the validators belong to the first server.
                        headers = []
                    url = target
                return FetchFailed(f"more than {MAX_REDIRECTS} redirects")
        except (TimeoutError, httpx.TimeoutException):
            return FetchFailed(f"timed out after {self.timeout:g}s")
        except httpx.HTTPError as exc:
            return FetchFailed(f"cannot fetch: {type(exc).__name__}: {exc}")
        except OSError as exc:  # ssl.SSLError included
            return FetchFailed(f"cannot fetch: {type(exc).__name__}: {exc}")

    def _file_headers(self) -> list[tuple[str, str]]:
        return [] if self.header_file is None else read_header_file(self.header_file, "--manifest-url-header-file")

    async def _read(self, response: httpx.Response) -> Outcome:
        """The outcome of a response whose headers have arrived; the body is read up to the limit only."""
        if response.status_code == 304:
            return NotModified()
        if not 200 <= response.status_code < 300:
            return FetchFailed(
                f"HTTP status {response.status_code} {response.reason_phrase}".rstrip(), status=response.status_code
            )
        too_big = f"body is larger than the limit of {MAX_BODY_BYTES} bytes"
        length = response.headers.get("content-length", "")
        if length.isdigit() and int(length) > MAX_BODY_BYTES:
            return FetchFailed(f"{too_big} ({length} bytes)")
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():  # decoded size: a gzip bomb stops here too
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                return FetchFailed(too_big)
            chunks.append(chunk)
        return Fetched(b"".join(chunks), response.headers.get("etag"), response.headers.get("last-modified"))

    async def _load_cache(self, state: HttpSourceState, outcome: Outcome) -> HttpSourceState:
        """At start, with no good body from the URL: the last good one from disk, if it is this URL's.

        An unreachable URL is then not reported (only logged); a URL that
        serves something unusable still is, while the cached pods run.
        """
        self._cache_tried = True
        cached = await asyncio.to_thread(self._read_cache)
        if cached is None:
            return state
        try:
            seeded = await asyncio.to_thread(
                apply_cache, state, cached, url=self.url, node_name=self.node_name, trust=self.trust
            )
        except BodyProblem as exc:
            log.warning(
                "Not using cached copy of manifest URL", url=self._shown, path=str(self.cache_path), reason=str(exc)
            )
            return state
        self._persisted = (seeded.digest, cached.etag, cached.last_modified)
        reason = outcome.reason if isinstance(outcome, FetchFailed) else state.error.message if state.error else ""
        log.warning(
            "Using cached copy of manifest URL",
            **{"from": format_timestamp(cached.fetched_at)},
            url=self._shown,
            pods=len(seeded.pods),
            reason=reason,
        )
        if not isinstance(outcome, FetchFailed):
            seeded = replace(
                seeded, error=state.error, bad_digest=state.bad_digest, bad_error=state.bad_error, from_cache=False
            )
        return seeded

    def _read_cache(self) -> CachedManifest | None:
        try:
            data = self.cache_path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning(
                "Cannot read cached copy of manifest URL", path=str(self.cache_path), err=exc.strerror or str(exc)
            )
            return None
        try:
            return msgspec.json.decode(data, type=CachedManifest)
        except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
            log.warning("Ignoring corrupt cached copy of manifest URL", path=str(self.cache_path), err=str(exc))
            return None

    async def _persist(self, outcome: Fetched, state: HttpSourceState) -> None:
        key = (state.digest, outcome.etag, outcome.last_modified)
        if key == self._persisted:
            return
        from edgelet.state import write_atomic

        entry = CachedManifest(
            url=self.url,
            fetched_at=self._clock.now(),
            body=outcome.body,
            etag=outcome.etag,
            last_modified=outcome.last_modified,
            signature=outcome.signature,
        )
        try:
            # 0600: the pods' env may hold credentials.
            await asyncio.to_thread(write_atomic, self.cache_path, msgspec.json.encode(entry), 0o600)
        except OSError as exc:  # the pods still run; only an offline boot would miss the copy
            log.warning(
                "Cannot write cached copy of manifest URL", path=str(self.cache_path), err=exc.strerror or str(exc)
            )
            return
        self._persisted = key

    def _log_result(self, outcome: Outcome, state: HttpSourceState) -> None:
        failed = isinstance(outcome, FetchFailed) or state.error is not None
        if not failed:
            if self._failures:
                log.info("Manifest URL recovered", url=self._shown, failures=self._failures)
            self._failures = 0
            self._last_logged = None
            return
        self._failures += 1
        now = self._clock.monotonic()
        if not should_log_failure(self._failures, now, self._last_logged):
            return
        self._last_logged = now
        reason = outcome.reason if isinstance(outcome, FetchFailed) else state.error.message if state.error else ""
        log.warning(
            "Cannot use manifest URL; keeping the last good pods",
            url=self._shown,
            reason=reason,
            failures=self._failures,
            pods=len(state.pods),
            cached=state.from_cache or None,
        )
