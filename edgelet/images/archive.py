"""Reads image archives (docker-archive, OCI archive, OCI layout directory) into a blob sink and names their images.

One sequential pass over the (possibly gzip'd) outer tar copies every blob into
the sink, which verifies digests as it writes; the small JSON documents
(manifest.json, index.json) are kept in memory, capped at MAX_JSON bytes so a
hostile archive cannot exhaust memory. Then the manifests are resolved: for an
index with several platforms, the one for linux and this machine's
architecture is chosen. docker-archives have no manifest, so one is
synthesised (an OCI manifest over the stored config and layer blobs) to give
the image a manifest digest like any other.
"""

from __future__ import annotations

import contextlib
import io
import json
import platform as _platform
import posixpath
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from edgelet.images import zstd
from edgelet.images.errors import (
    ArchiveError,
    BlobError,
    DecompressError,
    ImageError,
    InvalidReference,
    PlatformNotFound,
)
from edgelet.images.reference import (
    Platform,
    describe_platforms,
    normalize_reference,
    parse_platform,
    platform_for_machine,
    select_platform,
    validate_digest,
)
from edgelet.images.types import ByteSource
from edgelet.util.log import get_logger

log = get_logger(__name__)

MAX_JSON = 4 << 20  # bytes; manifests and configs are kilobytes, so this is generous
# Reads of an archive given as a stream: each goes through the digests its signature needs, and tarfile's
# default (10 KiB) would cost a hundred times more Python calls per archive.
_STREAM_CHUNK = 1 << 20

MT_OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MT_OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
MT_OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
MT_DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MT_DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MT_OCI_LAYER_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
INDEX_TYPES = (MT_OCI_INDEX, MT_DOCKER_LIST)
MANIFEST_TYPES = (MT_OCI_MANIFEST, MT_DOCKER_MANIFEST)
# zstd layers are unpacked by the `zstd` program (unpack.py); docker's own `.tar.zstd` type is moby's.
ZSTD_LAYER_TYPES = (
    MT_OCI_LAYER_ZSTD,
    "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd",
    "application/vnd.docker.image.rootfs.diff.tar.zstd",
)
SUPPORTED_LAYER_TYPES = (
    MT_OCI_LAYER,
    MT_OCI_LAYER_GZIP,
    "application/vnd.docker.image.rootfs.diff.tar",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
    "application/vnd.oci.image.layer.nondistributable.v1.tar",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
    "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
    *ZSTD_LAYER_TYPES,
)
ANN_REF_NAME = "org.opencontainers.image.ref.name"
ANN_IMAGE_NAME = "io.containerd.image.name"

_TOP_DOCS = ("manifest.json", "index.json", "oci-layout", "repositories")
_MAX_NESTING = 4


class BlobSink(Protocol):
    """Where blobs go: the image store's content store (a puller will write through the same methods)."""

    def add_blob(
        self, src: ByteSource, *, digest: str | None = None, size: int | None = None, source: str = ""
    ) -> tuple[str, int]:
        """Copy `src` in, verifying `digest`/`size` when given; returns (digest, size)."""
        ...

    def has_blob(self, digest: str) -> bool: ...

    def blob_size(self, digest: str) -> int:
        """Size of a stored blob; BlobError when it is missing."""
        ...

    def read_blob(self, digest: str, limit: int) -> bytes:
        """A stored blob's bytes; BlobError when missing or larger than `limit`."""
        ...

    def open_blob(self, digest: str) -> BinaryIO:
        """A stored blob opened for reading; BlobError when missing."""
        ...


@dataclass(frozen=True)
class ArchiveImage:
    """One image found in an archive, its blobs already in the sink."""

    names: tuple[str, ...]  # normalised references
    manifest_digest: str
    config_digest: str
    layer_digests: tuple[str, ...]  # bottom first


def host_platform() -> Platform:
    return platform_for_machine(_platform.machine())


def _clean(name: str) -> str:
    return posixpath.normpath("/" + name).lstrip("/")


def _parse_json(data: bytes, archive: Path, what: str) -> Any:
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ArchiveError(archive, f"{what} is not valid JSON: {exc}") from exc


class _Contents:
    """What the outer archive holds: small documents in memory, every other file as a stored blob."""

    def __init__(self, archive: Path, sink: BlobSink) -> None:
        self.archive = archive
        self.sink = sink
        self.docs: dict[str, bytes] = {}
        self.files: dict[str, tuple[str, int]] = {}  # path in archive -> (digest, size)
        self.links: dict[str, str] = {}  # path -> path it points at (docker save links repeated layers)
        self.layout_dir: Path | None = None

    def path_digest(self, path: str) -> tuple[str, int]:
        """The blob of an archive path (following docker save's layer links); ArchiveError when absent."""
        seen = set()
        p = _clean(path)
        while p in self.links and p not in seen:
            seen.add(p)
            p = self.links[p]
        if p in self.files:
            return self.files[p]
        if self.layout_dir is not None:
            return self._from_dir(p)
        raise ArchiveError(self.archive, f"{path!r} is referenced but not in the archive")

    def _from_dir(self, rel: str) -> tuple[str, int]:
        assert self.layout_dir is not None
        full = self.layout_dir / rel
        expected = None
        parts = rel.split("/")
        if len(parts) == 3 and parts[0] == "blobs":
            expected = f"{parts[1]}:{parts[2]}"
        try:
            with open(full, "rb") as f:
                result = self.sink.add_blob(f, digest=expected, source=f"{self.archive}:{rel}")
        except OSError as exc:
            raise ArchiveError(self.archive, f"cannot read {rel}: {exc.strerror}") from exc
        self.files[rel] = result
        return result

    def blob(self, digest: str, size: int | None) -> None:
        """Make sure the blob a descriptor names is stored, with the size the descriptor says."""
        try:
            validate_digest(digest)
        except InvalidReference as exc:
            raise ArchiveError(self.archive, f"descriptor has an invalid digest {digest!r}") from exc
        if not self.sink.has_blob(digest):
            alg, hex_ = digest.split(":", 1)
            if self.layout_dir is None:
                raise BlobError(digest, "referenced but not in the archive", source=self.archive)
            self.path_digest(f"blobs/{alg}/{hex_}")
        if size is not None and self.sink.blob_size(digest) != size:
            raise BlobError(
                digest, f"size {self.sink.blob_size(digest)} does not match descriptor size {size}", source=self.archive
            )

    def json_blob(self, digest: str, size: int | None, what: str) -> Any:
        if size is not None and size > MAX_JSON:
            raise ArchiveError(self.archive, f"{what} {digest} is {size} bytes, more than the {MAX_JSON} allowed")
        self.blob(digest, size)
        return _parse_json(self.sink.read_blob(digest, MAX_JSON), self.archive, f"{what} {digest}")

    def doc(self, name: str) -> Any | None:
        if name in self.docs:
            return _parse_json(self.docs[name], self.archive, name)
        if self.layout_dir is not None and (self.layout_dir / name).is_file():
            full = self.layout_dir / name
            if full.stat().st_size > MAX_JSON:
                raise ArchiveError(self.archive, f"{name} is larger than {MAX_JSON} bytes")
            return _parse_json(full.read_bytes(), self.archive, name)
        return None

    def has_doc(self, name: str) -> bool:
        return name in self.docs or (self.layout_dir is not None and (self.layout_dir / name).is_file())


class _Prefixed:
    """A stream whose first bytes were already read (to see a magic number), given back in front of the rest."""

    def __init__(self, head: bytes, rest: ByteSource) -> None:
        self._head = head
        self._rest = rest

    def read(self, n: int = -1, /) -> bytes:
        if not self._head:
            return self._rest.read(n)
        if n < 0:
            out, self._head = self._head + self._rest.read(), b""
            return out
        out, self._head = self._head[:n], self._head[n:]
        return out


class _Tar:
    """A streaming reader of the archive: gzip/bz2/xz are detected by tarfile; zstd (`.tar.zst`, as k3s
    takes) goes through `images/zstd.py`. `fileobj`, when given, is read once, front to back, never seeked."""

    def __init__(self, archive: Path, fileobj: ByteSource | None = None) -> None:
        self.archive = archive
        self.dec: zstd.ZstdDecoder | None = None
        try:
            with contextlib.nullcontext(fileobj) if fileobj is not None else open(archive, "rb") as f:
                head = f.read(4)
                if head == zstd.MAGIC:
                    try:
                        # Any stream will do: only a real file's descriptor is handed to zstd itself.
                        self.dec = zstd.ZstdDecoder(f, head)  # type: ignore[arg-type]
                    except DecompressError as exc:
                        raise ArchiveError(archive, str(exc)) from exc
                elif fileobj is not None:
                    self.tar = tarfile.open(
                        fileobj=_Prefixed(head, f),
                        mode="r|*",  # type: ignore[call-overload]
                        bufsize=_STREAM_CHUNK,
                    )
                    return
            if self.dec is None:
                self.tar = tarfile.open(archive, mode="r|*")
                return
        except (tarfile.TarError, OSError) as exc:
            raise ArchiveError(archive, f"not a readable tar archive: {exc}") from exc
        try:
            self.tar = tarfile.open(fileobj=self.dec.stdout, mode="r|")
        except tarfile.TarError as exc:
            why = self.dec.abort(wait=True) or str(exc)  # a corrupt file: zstd says why on stderr as it exits
            raise ArchiveError(archive, f"not a readable zstd-compressed tar archive: {why}") from exc

    def abort(self) -> None:
        if self.dec is not None:
            self.dec.abort(wait=False)

    def finish(self) -> None:
        if self.dec is not None:
            try:
                self.dec.finish()
            except DecompressError as exc:
                raise ArchiveError(self.archive, f"zstd: {exc}") from exc


def _read_tar(archive: Path, sink: BlobSink, fileobj: ByteSource | None = None) -> _Contents:
    contents = _Contents(archive, sink)
    reader = _Tar(archive, fileobj)
    try:
        _read_members(archive, reader.tar, contents, sink)
    except BaseException:
        reader.abort()
        raise
    reader.finish()
    return contents


def _read_members(archive: Path, tar: tarfile.TarFile, contents: _Contents, sink: BlobSink) -> None:
    with tar:
        try:
            for member in tar:
                name = _clean(member.name)
                if member.issym() or member.islnk():
                    base = posixpath.dirname(name) if member.issym() else ""
                    contents.links[name] = _clean(posixpath.join(base, member.linkname))
                    continue
                if not member.isreg():
                    continue
                if name in _TOP_DOCS:
                    if member.size > MAX_JSON:
                        raise ArchiveError(archive, f"{name} is {member.size} bytes, more than the {MAX_JSON} allowed")
                    f = tar.extractfile(member)
                    contents.docs[name] = f.read() if f is not None else b""
                    continue
                if posixpath.basename(name) in ("json", "VERSION"):
                    continue  # docker save's legacy per-layer metadata: not needed
                parts = name.split("/")
                expected = f"{parts[1]}:{parts[2]}" if len(parts) == 3 and parts[0] == "blobs" else None
                f = tar.extractfile(member)
                if f is None:
                    continue
                contents.files[name] = sink.add_blob(f, digest=expected, size=member.size, source=f"{archive}:{name}")
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise ArchiveError(archive, f"cannot read archive: {type(exc).__name__}: {exc}") from exc


def _names_from_annotations(annotations: dict[str, Any] | None, archive: Path) -> list[str]:
    ann = annotations or {}
    candidates = []
    if isinstance(ann.get(ANN_IMAGE_NAME), str):
        candidates.append(ann[ANN_IMAGE_NAME])
    ref_name = ann.get(ANN_REF_NAME)
    # A bare ref.name is only a tag ("1.36"): without a repository it cannot name the image.
    if isinstance(ref_name, str) and ("/" in ref_name or ":" in ref_name or "@" in ref_name):
        candidates.append(ref_name)
    out = []
    for c in candidates:
        try:
            out.append(normalize_reference(c))
        except InvalidReference as exc:
            log.warning("Ignoring invalid image name in archive", archive=str(archive), name=c, err=str(exc))
    return out[:1]


def _manifest_image(contents: _Contents, desc: dict[str, Any], names: list[str]) -> ArchiveImage:
    archive = contents.archive
    digest = desc.get("digest")
    if not isinstance(digest, str):
        raise ArchiveError(archive, "manifest descriptor without a digest")
    manifest = contents.json_blob(digest, desc.get("size"), "manifest")
    if (
        not isinstance(manifest, dict)
        or not isinstance(manifest.get("config"), dict)
        or not isinstance(manifest.get("layers"), list)
    ):
        raise ArchiveError(archive, f"manifest {digest} has no config or layers")
    config = manifest["config"]
    contents.blob(str(config.get("digest")), config.get("size"))
    layers = []
    for layer in manifest["layers"]:
        if not isinstance(layer, dict):
            raise ArchiveError(archive, f"manifest {digest} has a malformed layer descriptor")
        mt = layer.get("mediaType", MT_OCI_LAYER_GZIP)
        if mt not in SUPPORTED_LAYER_TYPES:
            raise ArchiveError(archive, f"layer {layer.get('digest')} has unsupported media type {mt!r}")
        contents.blob(str(layer.get("digest")), layer.get("size"))
        layers.append(str(layer["digest"]))
    return ArchiveImage(
        names=tuple(names), manifest_digest=digest, config_digest=str(config["digest"]), layer_digests=tuple(layers)
    )


def _resolve_descriptor(
    contents: _Contents, desc: dict[str, Any], wanted: Platform, depth: int = 0
) -> dict[str, Any] | None:
    """The image manifest descriptor for `wanted` under `desc` (which may be an index); None if none fits."""
    mt = desc.get("mediaType")
    if mt in MANIFEST_TYPES:
        return desc
    if depth >= _MAX_NESTING:
        raise ArchiveError(contents.archive, "indexes nested too deeply")
    doc = contents.json_blob(str(desc.get("digest")), desc.get("size"), "index")
    if not isinstance(doc, dict):
        raise ArchiveError(contents.archive, f"blob {desc.get('digest')} is not a JSON object")
    if mt not in INDEX_TYPES and "manifests" not in doc:
        return desc  # no media type on the descriptor, but the document is a manifest
    manifests = [m for m in doc.get("manifests") or [] if isinstance(m, dict)]
    chosen = select_platform(manifests, wanted)
    if chosen is None:
        raise PlatformNotFound(contents.archive, str(wanted), describe_platforms(manifests))
    return _resolve_descriptor(contents, dict(chosen), wanted, depth + 1)


def _oci_images(contents: _Contents, wanted: Platform) -> list[ArchiveImage]:
    index = contents.doc("index.json")
    if not isinstance(index, dict) or not isinstance(index.get("manifests"), list):
        raise ArchiveError(contents.archive, "index.json has no manifests list")
    descs = [d for d in index["manifests"] if isinstance(d, dict)]
    if not descs:
        raise ArchiveError(contents.archive, "index.json lists no images")
    by_digest: dict[str, tuple[dict[str, Any], list[str]]] = {}
    skipped = []
    for desc in descs:
        plat = parse_platform(desc.get("platform"))
        if plat is not None and select_platform([desc], wanted) is None:
            skipped.append(desc)
            continue  # a per-platform entry of a multi-arch layout: not for this machine
        resolved = _resolve_descriptor(contents, desc, wanted)
        if resolved is None:
            continue
        names = _names_from_annotations(desc.get("annotations"), contents.archive)
        entry = by_digest.setdefault(str(resolved.get("digest")), (resolved, []))
        entry[1].extend(n for n in names if n not in entry[1])
    if not by_digest:
        raise PlatformNotFound(contents.archive, str(wanted), describe_platforms(skipped))
    return [_manifest_image(contents, desc, names) for desc, names in by_digest.values()]


def _docker_images(contents: _Contents, sink: BlobSink) -> list[ArchiveImage]:
    archive = contents.archive
    entries = contents.doc("manifest.json")
    if not isinstance(entries, list) or not entries:
        raise ArchiveError(archive, "manifest.json is not a non-empty list")
    images = []
    for entry in entries:
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("Config"), str)
            or not isinstance(entry.get("Layers"), list)
        ):
            raise ArchiveError(archive, "manifest.json entry without Config or Layers")
        config_digest, config_size = contents.path_digest(entry["Config"])
        if config_size > MAX_JSON:
            raise ArchiveError(archive, f"config {entry['Config']} is larger than {MAX_JSON} bytes")
        layers = []
        for path in entry["Layers"]:
            digest, size = contents.path_digest(str(path))
            with sink.open_blob(digest) as f:
                head = f.read(2)
            mt = MT_OCI_LAYER_GZIP if head.startswith(b"\x1f\x8b") else MT_OCI_LAYER
            layers.append({"mediaType": mt, "digest": digest, "size": size})
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": MT_OCI_MANIFEST,
                "config": {"mediaType": MT_OCI_CONFIG, "digest": config_digest, "size": config_size},
                "layers": layers,
            },
            sort_keys=True,
            separators=(",", ":"),
        ).encode()
        manifest_digest, _ = sink.add_blob(io.BytesIO(manifest), source=f"{archive}:manifest.json (synthesised)")
        names = []
        for tag in entry.get("RepoTags") or []:
            try:
                names.append(normalize_reference(str(tag)))
            except InvalidReference as exc:
                log.warning("Ignoring invalid RepoTag in archive", archive=str(archive), tag=tag, err=str(exc))
        images.append(
            ArchiveImage(
                names=tuple(dict.fromkeys(names)),
                manifest_digest=manifest_digest,
                config_digest=config_digest,
                layer_digests=tuple(str(d["digest"]) for d in layers),
            )
        )
    return images


def read_archive(
    archive: Path, sink: BlobSink, *, wanted: Platform | None = None, fileobj: ByteSource | None = None
) -> list[ArchiveImage]:
    """Store every blob of `archive` in `sink` and return its images (for `wanted`, default this machine).

    `archive` is a docker-archive or OCI archive (tar, optionally gzip'd) or an OCI layout directory;
    `fileobj`, the archive already open, read once front to back (then `archive` only names it)."""
    wanted = wanted or host_platform()
    archive = Path(archive)
    try:
        if fileobj is None and archive.is_dir():
            contents = _Contents(archive, sink)
            contents.layout_dir = archive
        else:
            contents = _read_tar(archive, sink, fileobj)
        if contents.has_doc("index.json"):
            return _oci_images(contents, wanted)
        if contents.has_doc("manifest.json"):
            return _docker_images(contents, sink)
    except ImageError:
        raise
    except OSError as exc:
        raise ArchiveError(archive, f"{type(exc).__name__}: {exc}") from exc
    raise ArchiveError(archive, "neither an OCI layout (index.json) nor a docker archive (manifest.json)")
