"""Pulls images from OCI distribution (v2) registries into the ImageStore, verifying every blob.

A pull, for one reference:

  1. For each endpoint (mirrors first, then the registry; see registries.py) until one works:
  2. GET /v2/<name>/manifests/<tag|digest>, answering a 401 with the bearer-token flow
     (or basic auth) of the WWW-Authenticate challenge; credentials come from a docker
     config.json (auth.py).
  3. An index / manifest list is resolved to this machine's platform (variant-aware,
     reference.select_platform); schema1 manifests are refused.
  4. The manifest, the config and every missing layer blob go into the store through
     `ImageStore.add_blob`, which hashes while writing a temp file and renames it only
     when digest and size match: a cut connection never leaves a blob behind. Layers
     download in parallel, at most `max_parallel` at a time.
  5. With a signature policy (--signature-policy, edgelet/trust): before any of that is
     stored, the policy's requirements for the reference are checked against the cosign
     signatures of the manifest the reference names (`sha256-<hex>.sig` on the same
     endpoint); a `reject` scope refuses before any request. A refusal is an
     ImageSignatureRefused.
  6. `ImageStore.commit_image` unpacks the layers (checking each diffID) and records the
     image under its reference, exactly as an archive import does.

The work is blocking (httpx's sync client in worker threads: the store's writer is
synchronous, and a thread per layer keeps the copy to one pass). `Puller.pull` runs it
off the event loop and shares one pull between concurrent callers of the same reference.
Cancelling a caller does not stop a pull already under way; it completes in its thread.

Blobs of a failed pull stay in the store (they are complete and verified; the next pull
reuses them) until image GC removes unreferenced blobs.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from edgelet.images import zstd as zstd_reader
from edgelet.images.archive import (
    INDEX_TYPES,
    MAX_JSON,
    MT_DOCKER_MANIFEST,
    MT_OCI_MANIFEST,
    SUPPORTED_LAYER_TYPES,
    ZSTD_LAYER_TYPES,
    host_platform,
)
from edgelet.images.auth import Credential, parse_challenge
from edgelet.images.errors import (
    BlobError,
    ImageError,
    ImageSignatureRefused,
    InvalidReference,
    ManifestError,
    PullError,
)
from edgelet.images.progress import Progress, ProgressSnapshot
from edgelet.images.reference import (
    Platform,
    Reference,
    describe_platforms,
    parse_reference,
    select_platform,
    sha256_digest,
    validate_digest,
)
from edgelet.images.registries import Endpoint, RegistryHost, registry_endpoints
from edgelet.util.clock import REAL_CLOCK, Clock
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    import httpx

    from edgelet.images.store import ImageStore
    from edgelet.images.types import ImageRecord
    from edgelet.trust.policy import Match, Policy

log = get_logger(__name__)

MT_DOCKER_SCHEMA1 = (
    "application/vnd.docker.distribution.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v1+prettyjws",
)
PULL_LAYER_TYPES = SUPPORTED_LAYER_TYPES
ACCEPT = ", ".join((MT_OCI_MANIFEST, MT_DOCKER_MANIFEST, *INDEX_TYPES))
DEFAULT_PARALLEL = 3
DEFAULT_TIMEOUT = 30.0  # seconds without progress (connect, or between two reads)
_MAX_NESTING = 4
_CHUNK = 1 << 20


@dataclass(frozen=True)
class ResolvedManifest:
    """The image manifest for this platform and the digest it has; `named_digest` is the digest of what the
    reference names (the index of a multi-platform image, else the manifest itself): what cosign signs."""

    digest: str
    body: bytes
    doc: dict[str, Any]
    named_digest: str = ""


# ---------------------------------------------------------------------------------------------
# pure helpers


def classify_manifest(media_type: str | None, doc: Any) -> str:
    """ "index", "manifest" or "schema1" from the Content-Type and the body; ValueError otherwise (pure)."""
    mt = (media_type or "").split(";", 1)[0].strip()
    if not isinstance(doc, dict):
        raise ValueError("manifest is not a JSON object")
    if mt in MT_DOCKER_SCHEMA1 or doc.get("schemaVersion") == 1:
        return "schema1"
    body_mt = doc.get("mediaType")
    if mt in INDEX_TYPES or body_mt in INDEX_TYPES or ("manifests" in doc and "layers" not in doc):
        if "layers" in doc or "config" in doc:
            raise ValueError("document has both `manifests` and `layers`/`config` (ambiguous)")
        return "index"
    if (
        mt in (MT_OCI_MANIFEST, MT_DOCKER_MANIFEST)
        or body_mt in (MT_OCI_MANIFEST, MT_DOCKER_MANIFEST)
        or ("layers" in doc and "config" in doc)
    ):
        if "manifests" in doc:
            raise ValueError("document has both `manifests` and `layers` (ambiguous)")
        return "manifest"
    raise ValueError(f"unsupported manifest media type {mt or body_mt!r}")


def check_image_manifest(doc: dict[str, Any], *, zstd: bool = True) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The config and layer descriptors of an image manifest, checked; ValueError naming the problem (pure).

    `zstd`: whether the `zstd` program is installed; without it zstd layers are refused before any download."""
    config, layers = doc.get("config"), doc.get("layers")
    if not isinstance(config, dict) or not isinstance(layers, list):
        raise ValueError("manifest has no config or layers")
    for desc in (config, *layers):
        if (
            not isinstance(desc, dict)
            or not isinstance(desc.get("digest"), str)
            or not isinstance(desc.get("size"), int)
            or isinstance(desc.get("size"), bool)
            or desc["size"] < 0
        ):
            raise ValueError(f"malformed descriptor {desc!r}")
        validate_digest(desc["digest"])
        if not desc["digest"].startswith("sha256:"):
            raise ValueError(f"unsupported digest algorithm in {desc['digest']}")
    if config["size"] > MAX_JSON:
        raise ValueError(f"config is {config['size']} bytes, more than the {MAX_JSON} allowed")
    for layer in layers:
        mt = layer.get("mediaType", "application/vnd.oci.image.layer.v1.tar+gzip")
        if mt in ZSTD_LAYER_TYPES and not zstd:
            raise ValueError(f"layer {layer['digest']} is zstd-compressed ({mt}): {zstd_reader.MISSING}")
        if mt not in PULL_LAYER_TYPES:
            raise ValueError(f"layer {layer['digest']} has unsupported media type {mt!r}")
    return config, layers


# ---------------------------------------------------------------------------------------------
# one endpoint, one repository


class _Unauthorized(Exception):
    pass


class _Session:
    """Requests to one endpoint for one repository, with the auth the registry asks for."""

    def __init__(
        self,
        endpoint: Endpoint,
        ref: Reference,
        credential: Credential | None,
        *,
        timeout: float,
        transport: httpx.BaseTransport | None,
    ) -> None:
        import httpx  # on first use: an agent that never pulls does not pay its 3.7 MB

        self.endpoint = endpoint
        self.ref = ref
        self.credential = credential
        self.client = httpx.Client(
            timeout=timeout, follow_redirects=True, transport=transport, headers={"User-Agent": "edgelet"}
        )
        self._auth: str | None = None

    def close(self) -> None:
        self.client.close()

    def url(self, kind: str, ref: str) -> str:
        return f"{self.endpoint.url}/v2/{self.ref.path}/{kind}/{ref}"

    def _headers(self, extra: Mapping[str, str]) -> dict[str, str]:
        h = dict(extra)
        if self._auth:
            h["Authorization"] = self._auth
        return h

    def send(
        self, method: str, url: str, headers: Mapping[str, str] | None = None, *, stream: bool = False
    ) -> httpx.Response:
        """One request; a 401 is answered once with the challenge's auth and retried."""
        headers = headers or {}
        for attempt in (0, 1):
            req = self.client.build_request(method, url, headers=self._headers(headers))
            resp = self.client.send(req, stream=stream)
            if resp.status_code != 401 or attempt == 1:
                break
            challenge = resp.headers.get("www-authenticate", "")
            resp.close()
            self._authenticate(challenge)
        if resp.status_code == 401:
            resp.close()
            who = f" as {self.credential.username}" if self.credential else " (no credentials for this registry)"
            raise PullError(str(self.ref), f"{method} {url}: unauthorized{who}")
        return resp

    def _authenticate(self, header: str) -> None:
        import httpx  # on first use: an agent that never pulls does not pay its 3.7 MB

        challenge = parse_challenge(header) if header else None
        if challenge is None:
            raise PullError(str(self.ref), f"{self.endpoint.url} answered 401 without a WWW-Authenticate challenge")
        if challenge.scheme == "basic":
            if self.credential is None:
                raise PullError(
                    str(self.ref),
                    f"{self.endpoint.url} requires basic auth and there are no "
                    "credentials for it (--image-credential-file)",
                )
            self._auth = _basic(self.credential)
            return
        if challenge.scheme != "bearer" or "realm" not in challenge.params:
            raise PullError(str(self.ref), f"{self.endpoint.url}: unsupported auth challenge {header!r}")
        params = {"scope": challenge.params.get("scope") or f"repository:{self.ref.path}:pull"}
        if challenge.params.get("service"):
            params["service"] = challenge.params["service"]
        headers = {"Authorization": _basic(self.credential)} if self.credential else {}
        realm = challenge.params["realm"]
        try:
            resp = self.client.get(realm, params=params, headers=headers)
        except httpx.HTTPError as exc:
            raise PullError(str(self.ref), f"token request to {realm}: {type(exc).__name__}: {exc}") from exc
        if resp.status_code != 200:
            raise PullError(str(self.ref), f"token request to {realm}: HTTP {resp.status_code}: {_tail(resp)}")
        try:
            doc = resp.json()
            token = doc.get("token") or doc.get("access_token")
        except (ValueError, AttributeError) as exc:
            raise PullError(str(self.ref), f"token response from {realm} is not JSON") from exc
        if not isinstance(token, str) or not token:
            raise PullError(str(self.ref), f"token response from {realm} has no token")
        self._auth = f"Bearer {token}"

    def get_manifest(
        self, ref: str, expected_digest: str | None, expected_size: int | None
    ) -> tuple[str, str, bytes, Any]:
        """(media type, digest, body, parsed) of a manifest or index; verified when a digest is expected."""
        url = self.url("manifests", ref)
        resp = self.send("GET", url, {"Accept": ACCEPT}, stream=True)
        try:
            _check_status(resp, str(self.ref), url)
            data = _read_at_most(resp, MAX_JSON)
        finally:
            resp.close()
        if data is None:
            raise ManifestError(str(self.ref), f"manifest at {url} is larger than {MAX_JSON} bytes")
        digest = sha256_digest(data)
        if expected_size is not None and len(data) != expected_size:
            raise BlobError(
                expected_digest or digest,
                f"manifest is {len(data)} bytes, the descriptor says {expected_size}",
                source=url,
            )
        if expected_digest is not None and digest != expected_digest:
            raise BlobError(expected_digest, f"manifest content has digest {digest}", source=url)
        try:
            doc = json.loads(data)
        except ValueError as exc:
            raise ManifestError(str(self.ref), f"manifest at {url} is not valid JSON: {exc}") from exc
        return resp.headers.get("content-type", ""), digest, data, doc

    def find_manifest(self, tag: str) -> Any | None:
        """The parsed manifest under `tag`, or None when the registry answers 404 (a signature tag that is absent)."""
        url = self.url("manifests", tag)
        resp = self.send("GET", url, {"Accept": ACCEPT}, stream=True)
        try:
            if resp.status_code == 404:
                return None
            _check_status(resp, str(self.ref), url)
            body = _read_at_most(resp, MAX_JSON)
        finally:
            resp.close()
        if body is None:
            raise PullError(str(self.ref), f"signature manifest at {url} is larger than {MAX_JSON} bytes")
        try:
            return json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise PullError(str(self.ref), f"signature manifest at {url} is not valid JSON: {exc}") from exc

    def small_blob(self, digest: str, size: int) -> bytes:
        """A blob of at most a few kB (a signature payload), read into memory and checked against digest and size."""
        resp, url = self.blob(digest)
        try:
            data = _read_at_most(resp, size)
        finally:
            resp.close()
        if data is None:
            raise BlobError(digest, f"registry sends more than the {size} bytes the manifest says", source=url)
        if len(data) != size or sha256_digest(data) != digest:
            raise BlobError(digest, f"content is {len(data)} bytes with digest {sha256_digest(data)}", source=url)
        return data

    def blob(self, digest: str) -> tuple[httpx.Response, str]:
        url = self.url("blobs", digest)
        resp = self.send("GET", url, stream=True)
        if resp.status_code != 200:
            try:
                _check_status(resp, str(self.ref), url)
            finally:
                resp.close()
        return resp, url


def _basic(c: Credential) -> str:
    return "Basic " + base64.b64encode(f"{c.username}:{c.password}".encode()).decode()


def _tail(resp: httpx.Response) -> str:
    import httpx  # on first use: an agent that never pulls does not pay its 3.7 MB

    try:
        text = resp.read().decode(errors="replace")
    except httpx.HTTPError:
        return ""
    return " ".join(text.split())[-300:]


def _check_status(resp: httpx.Response, ref: str, url: str) -> None:
    if resp.status_code == 200:
        return
    raise PullError(ref, f"GET {url}: HTTP {resp.status_code}: {_tail(resp) or resp.reason_phrase}")


def _raw_chunks(resp: httpx.Response, size: int | None = None) -> Iterator[bytes]:
    """The body as sent (no content decoding: digests are of the bytes on the wire)."""
    import httpx  # on first use: an agent that never pulls does not pay its 3.7 MB

    try:
        yield from resp.iter_raw(size)
    except httpx.StreamConsumed:  # a response built in memory (httpx.MockTransport in tests)
        yield resp.content


def _read_at_most(resp: httpx.Response, limit: int) -> bytes | None:
    """The raw body, or None as soon as it passes `limit` bytes: a registry must not fill the device's memory."""
    body = bytearray()
    for chunk in _raw_chunks(resp):
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


class _SignatureSource:
    """The signatures of the repository being pulled, from the endpoint it is pulled from (trust.cosign's source)."""

    def __init__(self, session: _Session) -> None:
        self._session = session

    def manifest(self, tag: str) -> Any | None:
        return self._session.find_manifest(tag)

    def blob(self, digest: str, size: int) -> bytes:
        return self._session.small_blob(digest, size)


class _StreamReader:
    """The read() of a streamed response body, raw (no content decoding), for ImageStore.add_blob."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks

    def read(self, n: int = -1) -> bytes:
        for chunk in self._chunks:
            if chunk:
                return chunk
        return b""


# ---------------------------------------------------------------------------------------------
# the puller


class Puller:
    """Pulls references into `store`. Thread-safe; `pull` deduplicates concurrent pulls of one reference."""

    def __init__(
        self,
        store: ImageStore,
        *,
        registries: Mapping[str, RegistryHost] | None = None,
        credentials: Mapping[str, Credential] | None = None,
        platform: Platform | None = None,
        max_parallel: int = DEFAULT_PARALLEL,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx.BaseTransport | None = None,
        clock: Clock = REAL_CLOCK,
        signature_policy: Policy | None = None,
    ) -> None:
        self._clock = clock
        self.signature_policy = signature_policy
        self.store = store
        self.registries = dict(registries or {})
        self.credentials = dict(credentials or {})
        self.platform = platform or host_platform()
        self.max_parallel = max(1, max_parallel)
        self.timeout = timeout
        self._transport = transport
        self._inflight: dict[str, asyncio.Future[ImageRecord]] = {}
        self._progress: dict[str, Progress] = {}  # the references of pulls under way, as pods name them

    @property
    def busy(self) -> bool:
        """Whether a pull is under way (image GC leaves unreferenced blobs alone meanwhile)."""
        return bool(self._inflight)

    async def pull(self, ref: str) -> ImageRecord:
        """Pull `ref` off the event loop; callers asking for the same reference share one pull."""
        key = str(parse_reference(ref))
        fut = self._inflight.get(key)
        if fut is None:
            progress = Progress(self._clock)
            fut = asyncio.ensure_future(asyncio.to_thread(self.pull_sync, key, progress=progress))
            self._inflight[key] = fut
            self._progress[key] = progress

            def _done(f: asyncio.Future[ImageRecord]) -> None:
                self._inflight.pop(key, None)
                self._progress.pop(key, None)
                if not f.cancelled():
                    f.exception()  # retrieved here so a pull nobody waits for any more does not warn

            fut.add_done_callback(_done)
        return await asyncio.shield(fut)

    def progress(self, ref: str) -> ProgressSnapshot | None:
        """How far the pull of `ref` under way is (None when none is)."""
        try:
            p = self._progress.get(str(parse_reference(ref)))
        except InvalidReference:
            return None
        return p.snapshot() if p is not None else None

    def pull_sync(self, ref: str, progress: Progress | None = None) -> ImageRecord:
        """Pull `ref` (blocking), counting the blobs' bytes into `progress`.
        Raises PullError, ManifestError, BlobError, UnpackError, StoreError."""
        try:
            parsed = parse_reference(ref)
        except InvalidReference:
            raise
        match = self._policy_match(parsed)
        endpoints = registry_endpoints(parsed.domain, self.registries)
        errors: list[ImageError] = []
        for ep in endpoints:
            try:
                with self.store.pulling():  # its blobs are nobody's until it commits: no sweep meanwhile
                    return self._pull_from(ep, parsed, progress, match)
            except ManifestError:
                raise  # the image itself is unusable: another mirror would serve the same
            except (PullError, BlobError) as exc:
                if ep.mirror:
                    log.warning(
                        "Pull from mirror failed; trying the next endpoint",
                        image=str(parsed),
                        mirror=ep.url,
                        err=str(exc),
                    )
                errors.append(exc)
        if len(errors) == 1:
            raise errors[0]
        raise PullError(str(parsed), "; ".join(str(e) for e in errors))

    def _policy_match(self, ref: Reference) -> Match | None:
        """The signature policy's requirements for `ref` (None without a policy); a scope that refuses every
        image (reject) refuses here, before any request."""
        if self.signature_policy is None:
            return None
        from edgelet.trust.policy import evaluate, refusal

        try:
            match = evaluate(self.signature_policy, str(ref))
        except ValueError as exc:  # the policy's reader disagrees with ours: refuse rather than guess
            raise ImageSignatureRefused(
                str(ref),
                f"the reference cannot be matched against the policy: {exc}",
                policy=self.signature_policy.path,
                scope="none",
            ) from exc
        why = refusal(match)
        if why is not None:
            raise ImageSignatureRefused(str(ref), why, policy=self.signature_policy.path, scope=match.name)
        return match

    def _verify(self, session: _Session, ref: Reference, match: Match, digest: str) -> None:
        from edgelet.trust.cosign import enforce
        from edgelet.trust.errors import ImageSignatureError

        started = self._clock.monotonic()
        policy = self.signature_policy.path if self.signature_policy is not None else ""
        try:
            enforce(match, str(ref), digest, _SignatureSource(session), policy=policy)
        except ImageSignatureError as exc:
            raise ImageSignatureRefused(str(ref), exc.reason, policy=policy, scope=exc.scope) from exc
        log.info(
            "Image signature accepted",
            image=str(ref),
            digest=digest,
            scope=match.name,
            seconds=f"{self._clock.monotonic() - started:.3f}",
        )

    def _pull_from(
        self, ep: Endpoint, ref: Reference, progress: Progress | None = None, match: Match | None = None
    ) -> ImageRecord:
        import httpx  # on first use: an agent that never pulls does not pay its 3.7 MB

        started = self._clock.monotonic()
        session = _Session(ep, ref, self.credentials.get(ref.domain), timeout=self.timeout, transport=self._transport)
        try:
            manifest = self._resolve(session, ref)
            if match is not None:  # before anything of the image is stored
                self._verify(session, ref, match, manifest.named_digest)
            try:
                config, layers = check_image_manifest(manifest.doc, zstd=zstd_reader.program() is not None)
            except ValueError as exc:
                raise ManifestError(str(ref), f"manifest {manifest.digest}: {exc}") from exc
            self.store.add_blob(
                io.BytesIO(manifest.body),
                digest=manifest.digest,
                size=len(manifest.body),
                source=session.url("manifests", manifest.digest),
            )
            wanted = [config, *[la for la in layers]]
            missing = list({d["digest"]: d for d in wanted if not self.store.has_blob(d["digest"])}.values())
            if missing and progress is not None:
                for d in missing:  # every size is known from the manifest: the total is right from the start
                    progress.begin(d["digest"], d["size"])
            if missing:
                with ThreadPoolExecutor(
                    max_workers=min(self.max_parallel, len(missing)), thread_name_prefix="pull"
                ) as pool:
                    # list() re-raises the first failure; the pool waits for the others first.
                    list(pool.map(lambda d: self._fetch_blob(session, d, progress), missing))
            for d in wanted:  # present before the pull: still the size the manifest says?
                if self.store.blob_size(d["digest"]) != d["size"]:
                    raise BlobError(
                        d["digest"],
                        f"stored blob is {self.store.blob_size(d['digest'])} bytes, the manifest says {d['size']}",
                    )
            record = self.store.commit_image(
                manifest_digest=manifest.digest,
                config_digest=config["digest"],
                layer_digests=[la["digest"] for la in layers],
                references=[str(ref)],
                source=ep.url,
            )
        except httpx.HTTPError as exc:
            raise PullError(str(ref), f"{ep.url}: {type(exc).__name__}: {exc}") from exc
        finally:
            session.close()
        log.info(
            "Pulled image",
            image=str(ref),
            endpoint=ep.url,
            digest=manifest.digest,
            layers=len(layers),
            seconds=f"{self._clock.monotonic() - started:.3f}",
        )
        return record

    def _resolve(self, session: _Session, ref: Reference) -> ResolvedManifest:
        target, want_digest, want_size = ref.digest or ref.tag or "latest", ref.digest, None
        named = ""
        for _depth in range(_MAX_NESTING):
            media_type, digest, body, doc = session.get_manifest(target, want_digest, want_size)
            named = named or digest
            try:
                kind = classify_manifest(media_type, doc)
            except ValueError as exc:
                raise ManifestError(str(ref), f"manifest {digest}: {exc}") from exc
            if kind == "schema1":
                raise ManifestError(
                    str(ref),
                    "the registry serves a Docker schema 1 manifest, which edgelet does "
                    "not support (deprecated since 2017); push the image again with a current "
                    "docker, buildah or skopeo",
                )
            if kind == "manifest":
                return ResolvedManifest(digest, body, doc, named)
            manifests = [m for m in doc.get("manifests") or [] if isinstance(m, dict)]
            chosen = select_platform(manifests, self.platform)
            if chosen is None:
                raise ManifestError(
                    str(ref),
                    f"no image for platform {self.platform} in the index (available: "
                    f"{', '.join(describe_platforms(manifests)) or 'none'})",
                )
            try:
                want_digest = validate_digest(str(chosen.get("digest")))
            except InvalidReference as exc:
                raise ManifestError(str(ref), f"index {digest} has an invalid digest") from exc
            size = chosen.get("size")
            want_size = size if isinstance(size, int) else None
            target = want_digest
        raise ManifestError(str(ref), "indexes nested too deeply")

    def _fetch_blob(self, session: _Session, desc: Mapping[str, Any], progress: Progress | None = None) -> None:
        digest, size = desc["digest"], desc["size"]
        resp, url = session.blob(digest)
        try:
            length = resp.headers.get("content-length")
            if length is not None and length.isdigit() and int(length) != size:
                raise BlobError(digest, f"registry sends {length} bytes, the manifest says {size}", source=url)
            self.store.add_blob(
                _StreamReader(_raw_chunks(resp, _CHUNK)), digest=digest, size=size, source=url, progress=progress
            )
        finally:
            resp.close()


__all__ = ["ImageSignatureRefused", "ManifestError", "PullError", "Puller", "check_image_manifest", "classify_manifest"]
