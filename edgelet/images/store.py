"""The local image store: content-addressed blobs, layers unpacked once, and image records in images.json.

Layout under `root` (`<root-dir>/images`)::

    blobs/sha256/<hex>      every blob, verified against its digest and size before it gets this name
    layers/<chainID hex>/   one unpacked layer (overlay form), complete or absent; read-only by convention
    images.json             the image records (write temp, fsync, rename, fsync dir)
    tmp/                    temp files and dirs; emptied at start
    .lock                   flock held while the store changes, so a CLI import and the agent do not collide
    .pull.lock              flock held shared by every pull under way: `sweep` leaves their blobs alone

A registry puller adds content through the same `add_blob` / `commit_image`
methods `import_archive` uses. Methods are safe to call from several threads
(`asyncio.to_thread`): changes are serialised, reads see a consistent snapshot.
"""

from __future__ import annotations

import builtins
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO

from edgelet.images.archive import MAX_JSON, read_archive
from edgelet.images.errors import BlobError, ImageNotFound, InvalidReference, StoreError, UnpackError
from edgelet.images.progress import Progress
from edgelet.images.reference import (
    Reference,
    chain_ids,
    is_digest,
    parse_reference,
    validate_digest,
)
from edgelet.images.types import ByteSource, ImageConfig, ImageRecord
from edgelet.images.unpack import LayerTooLarge, unpack_layer_file
from edgelet.state import write_atomic
from edgelet.util.clock import Clock, RealClock
from edgelet.util.crashpoint import crash_point
from edgelet.util.libc import syncfs
from edgelet.util.log import get_logger

log = get_logger(__name__)

FORMAT_VERSION = 1
DEFAULT_MAX_IMAGE_SIZE = 16 << 30  # bytes an image may take unpacked, whatever the free space
DISK_RESERVE = 32 << 20  # bytes (at most 5 % of the filesystem) an unpack leaves free for everything else
TOUCH_PERSIST_INTERVAL = 60.0  # seconds; last-used times are for GC, not worth a write per container start
_CHUNK = 1 << 20


def _hex(digest: str) -> str:
    return digest.split(":", 1)[1]


def parse_image_config(doc: Any) -> ImageConfig:
    """The parts of an OCI image config JSON document that shape a container (pure)."""
    cfg = doc.get("config") if isinstance(doc, dict) else None
    cfg = cfg if isinstance(cfg, dict) else {}

    def strings(key: str) -> tuple[str, ...]:
        value = cfg.get(key)
        return tuple(str(v) for v in value) if isinstance(value, list) else ()

    def string(key: str) -> str:
        value = cfg.get(key)
        return value if isinstance(value, str) else ""

    raw_labels = cfg.get("Labels")
    labels: dict[str, Any] = raw_labels if isinstance(raw_labels, dict) else {}
    return ImageConfig(
        entrypoint=strings("Entrypoint"),
        cmd=strings("Cmd"),
        env=strings("Env"),
        working_dir=string("WorkingDir"),
        user=string("User"),
        stop_signal=string("StopSignal"),
        labels=tuple(sorted((str(k), str(v)) for k, v in labels.items())),
    )


def _platform_of(doc: Any) -> str:
    if not isinstance(doc, dict):
        return "unknown"
    out = f"{doc.get('os', 'unknown')}/{doc.get('architecture', 'unknown')}"
    return out + (f"/{doc['variant']}" if isinstance(doc.get("variant"), str) and doc["variant"] else "")


@dataclass
class _Entry:
    """One image as stored in images.json (the ImageRecord is derived from it)."""

    id: str
    digest: str
    references: list[str]
    config: dict[str, Any]
    chain_ids: list[str]
    blobs: list[str]  # manifest, config and layer blob digests
    size: int
    pinned: bool
    platform: str
    created: float
    last_used: float = 0.0
    layer_sizes: list[int] = field(default_factory=list)  # uncompressed, per chain id
    persisted_last_used: float = field(default=0.0, compare=False)

    def copy(self) -> _Entry:
        return replace(
            self,
            references=list(self.references),
            chain_ids=list(self.chain_ids),
            blobs=list(self.blobs),
            layer_sizes=list(self.layer_sizes),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "digest": self.digest,
            "references": self.references,
            "config": self.config,
            "chain_ids": self.chain_ids,
            "blobs": self.blobs,
            "size": self.size,
            "pinned": self.pinned,
            "platform": self.platform,
            "created": self.created,
            "last_used": self.last_used,
            "layer_sizes": self.layer_sizes,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> _Entry:
        e = cls(
            id=doc["id"],
            digest=doc["digest"],
            references=list(doc["references"]),
            config=dict(doc["config"]),
            chain_ids=list(doc["chain_ids"]),
            blobs=list(doc["blobs"]),
            size=int(doc["size"]),
            pinned=bool(doc["pinned"]),
            platform=str(doc["platform"]),
            created=float(doc["created"]),
            last_used=float(doc.get("last_used", 0.0)),
            layer_sizes=[int(x) for x in doc.get("layer_sizes", [])],
        )
        e.persisted_last_used = e.last_used
        return e


class ImageStore:
    """Images on local disk. See the module docstring for the layout and the concurrency contract."""

    def __init__(self, root: Path, *, clock: Clock | None = None, max_image_size: int = DEFAULT_MAX_IMAGE_SIZE) -> None:
        self.root = Path(root)
        self._clock = clock or RealClock()
        self.max_image_size = max_image_size
        self._blobs = self.root / "blobs" / "sha256"
        self._layers = self.root / "layers"
        self._tmp = self.root / "tmp"
        self._index = self.root / "images.json"
        self._write_lock = threading.RLock()  # serialises changes inside this process
        self._read_lock = threading.Lock()  # guards reloading images.json
        self._entries: dict[str, _Entry] = {}
        self._stamp: tuple[int, int, int] | None = None
        self._lock_held = False
        self.corrupt_index: Path | None = None  # where an unreadable index was set aside at start
        try:
            for d in (self._blobs, self._layers, self._tmp):
                d.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(self.root, f"cannot create store directories: {exc}") from exc
        self._sweep_tmp()
        self._reload(force=True)

    # ------------------------------------------------------------------ reading

    def get(self, ref: str) -> ImageRecord | None:
        """The image for a reference (normalised: `busybox` finds docker.io/library/busybox:latest),
        an image id or manifest digest `sha256:...`, or `name@sha256:...`. None when absent or unparsable."""
        entry = self._find(ref)
        return self._record(entry) if entry is not None else None

    def list(self) -> list[ImageRecord]:
        self._reload()
        return [self._record(e) for e in sorted(self._entries.values(), key=lambda e: e.created)]

    def _find(self, ref: str) -> _Entry | None:
        self._reload()
        entries = self._entries
        if is_digest(ref):
            return entries.get(ref) or next((e for e in entries.values() if e.digest == ref), None)
        if _is_bare_id(ref):
            return entries.get("sha256:" + ref)
        try:
            parsed = parse_reference(ref)
        except InvalidReference:
            return None
        return _match(entries.values(), parsed)

    def _record(self, e: _Entry) -> ImageRecord:
        return ImageRecord(
            id=e.id,
            digest=e.digest,
            references=tuple(e.references),
            config=parse_image_config(e.config),
            layers=tuple(self._layers / _hex(c) for c in e.chain_ids),
            size=e.size,
            pinned=e.pinned,
            platform=e.platform,
            extra={"created": f"{e.created:.3f}", "last_used": f"{e.last_used:.3f}"},
        )

    def _reload(self, force: bool = False) -> None:
        """Re-read images.json when another process (the CLI) changed it."""
        try:
            st = os.stat(self._index)
            stamp: tuple[int, int, int] | None = (st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stamp = None
        except OSError as exc:
            raise StoreError(self._index, f"cannot stat: {exc.strerror}") from exc
        if not force and stamp == self._stamp:
            return
        with self._read_lock:
            if stamp is None:
                self._entries, self._stamp = {}, None
                return
            try:
                doc = json.loads(self._index.read_bytes())
                if doc.get("version") != FORMAT_VERSION:
                    raise ValueError(f"unknown format version {doc.get('version')!r}")
                entries = {d["id"]: _Entry.from_json(d) for d in doc["images"]}
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                if force:
                    # A torn or corrupt index (a power cut on a card that lies about fsync): set it aside and
                    # start empty, rather than not start; blobs stay, and imports and pulls fill it again.
                    aside = self._index.with_name(f"images.json.corrupt-{int(self._clock.now())}")
                    log.error(
                        "Image records unreadable; set aside, starting with none",
                        exc,
                        path=str(self._index),
                        moved_to=str(aside),
                    )
                    try:
                        os.replace(self._index, aside)
                    except OSError as move_exc:
                        raise StoreError(self._index, f"cannot read image records: {exc}") from move_exc
                    self.corrupt_index = aside
                    self._entries, self._stamp = {}, None
                    return
                # Already running: keep serving what we had rather than failing every lookup.
                log.error("Cannot reload image records; keeping the previous ones", exc, path=str(self._index))
                self._stamp = stamp
                return
            # Keep last-used times this process has not persisted yet.
            for eid, old in self._entries.items():
                if eid in entries and old.last_used > entries[eid].last_used:
                    entries[eid].last_used = old.last_used
            self._entries, self._stamp = entries, stamp

    def _save(self, entries: dict[str, _Entry]) -> None:
        doc = {"version": FORMAT_VERSION, "images": [e.to_json() for e in entries.values()]}
        data = json.dumps(doc, indent=1, sort_keys=True).encode()
        try:
            write_atomic(self._index, data)
        except OSError as exc:
            raise StoreError(self._index, f"cannot write image records: {exc}") from exc
        for e in entries.values():
            e.persisted_last_used = e.last_used
        st = os.stat(self._index)
        with self._read_lock:
            self._entries, self._stamp = entries, (st.st_ino, st.st_mtime_ns, st.st_size)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Exclusive access for this thread and against other processes (flock); re-entrant."""
        with self._write_lock:
            if self._lock_held:
                yield
                return
            with _flock(self.root / ".lock", fcntl.LOCK_EX):
                self._lock_held = True
                try:
                    yield
                finally:
                    self._lock_held = False

    @contextmanager
    def _changing(self) -> Iterator[dict[str, _Entry]]:
        """Under the lock, a private copy of the entries to change and hand to `_save`."""
        with self._locked():
            self._reload()
            yield {k: v.copy() for k, v in self._entries.items()}

    # ------------------------------------------------------------------ blobs (the BlobSink of archive.py)

    def blob_path(self, digest: str) -> Path:
        validate_digest(digest)
        if not digest.startswith("sha256:"):
            raise BlobError(digest, "only sha256 blobs are stored")
        return self._blobs / _hex(digest)

    def has_blob(self, digest: str) -> bool:
        return self.blob_path(digest).is_file()

    def blob_size(self, digest: str) -> int:
        try:
            return self.blob_path(digest).stat().st_size
        except FileNotFoundError:
            raise BlobError(digest, "not in the store") from None

    def open_blob(self, digest: str) -> BinaryIO:
        try:
            return open(self.blob_path(digest), "rb")
        except FileNotFoundError:
            raise BlobError(digest, "not in the store") from None

    def read_blob(self, digest: str, limit: int) -> bytes:
        size = self.blob_size(digest)
        if 0 <= limit < size:
            raise BlobError(digest, f"is {size} bytes, more than the {limit} allowed here")
        with self.open_blob(digest) as f:
            return f.read()

    def add_blob(
        self,
        src: ByteSource,
        *,
        digest: str | None = None,
        size: int | None = None,
        source: str = "",
        progress: Progress | None = None,
    ) -> tuple[str, int]:
        """Copy `src` into the store, hashing as it goes; with `digest`/`size`, a mismatch is a BlobError and
        nothing is kept. Returns (digest, size). A blob already present is not read again. `progress`
        counts the bytes as they come, under the digest (or the source when the digest is not known yet)."""
        key = digest or source or "blob"
        if digest is not None:
            try:
                final = self.blob_path(digest)
            except (InvalidReference, BlobError) as exc:
                raise BlobError(digest, f"unusable digest: {exc}", source=source or None) from exc
            if final.is_file() and (size is None or final.stat().st_size == size):
                return digest, final.stat().st_size
        # A blob must fit in what the disk can spare, checked before a byte is written when its size
        # is known and again as it streams: an archive or registry cannot fill the device's disk.
        budget, why = self.disk_budget()
        if size is not None and size > budget:
            raise BlobError(digest or "unknown", f"{size} bytes do not fit: {why}", source=source or None)
        sha = hashlib.sha256()
        written = 0
        try:
            fd, tmp = tempfile.mkstemp(prefix="blob-", dir=self._tmp)
        except OSError as exc:
            raise StoreError(self._tmp, f"cannot create a temp file: {exc.strerror}") from exc
        try:
            if progress is not None:
                progress.begin(key, size)
            with os.fdopen(fd, "wb") as out:
                while True:
                    chunk = src.read(_CHUNK)
                    if not chunk:
                        break
                    written += len(chunk)
                    if progress is not None:
                        progress.advance(key, len(chunk))
                    if size is not None and written > size:
                        raise BlobError(
                            digest or "unknown", f"longer than the {size} bytes expected", source=source or None
                        )
                    if written > budget:
                        raise BlobError(
                            digest or "unknown", f"more than {budget} bytes do not fit: {why}", source=source or None
                        )
                    sha.update(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            actual = "sha256:" + sha.hexdigest()
            if size is not None and written != size:
                raise BlobError(digest or actual, f"{written} bytes, expected {size}", source=source or None)
            if digest is not None and actual != digest:
                raise BlobError(digest, f"content has digest {actual}", source=source or None)
            os.chmod(tmp, 0o444)
            os.replace(tmp, self._blobs / _hex(actual))
            if progress is not None:
                progress.finish(key)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        return actual, written

    # ------------------------------------------------------------------ layers

    def layer_path(self, chain_id: str) -> Path:
        return self._layers / _hex(chain_id)

    def disk_budget(self) -> tuple[int, str]:
        """Bytes the store may still write: the free space of its filesystem less a reserve; with the reason."""
        try:
            st = os.statvfs(self._tmp)
        except OSError as exc:
            raise StoreError(self._tmp, f"cannot statvfs: {exc.strerror}") from exc
        free, capacity = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
        reserve = min(DISK_RESERVE, capacity // 20)
        return max(0, free - reserve), f"{free} bytes free on the filesystem of {self.root}, {reserve} kept in reserve"

    def unpack_budget(self) -> tuple[int, str]:
        """Bytes an image may still take unpacked: the free space of the store's filesystem less a reserve,
        and at most `max_image_size`; with the reason, for the error when a layer passes it."""
        budget, why = self.disk_budget()
        return min(self.max_image_size, budget), f"{why}, {self.max_image_size} at most per image"

    def ensure_layer(
        self, blob_digest: str, diff_id: str, chain_id: str, *, max_size: int | None = None, why: str = ""
    ) -> int:
        """Unpack a stored layer blob to layers/<chainID>, verifying its diffID; returns its uncompressed size
        (0 when it was already there). Complete or absent: it is unpacked into tmp/ and renamed. More than
        `max_size` bytes uncompressed is a LayerTooLarge (`why` says where the cap comes from)."""
        final = self.layer_path(chain_id)
        if final.is_dir():
            return 0
        blob = self.blob_path(blob_digest)
        work = Path(tempfile.mkdtemp(prefix="layer-", dir=self._tmp))
        label = f"{blob_digest} (diffID {diff_id})"
        try:
            os.chmod(work, 0o755)  # a "./" entry in the layer may still change it
            try:
                result = unpack_layer_file(blob, work, label=label, max_size=max_size)
            except LayerTooLarge as exc:
                raise LayerTooLarge(label, f"{exc.reason}: {why}" if why else exc.reason, member=exc.member) from exc
            if result.diff_id != diff_id:
                raise BlobError(
                    blob_digest, f"uncompressed content has diffID {result.diff_id}, the image config says {diff_id}"
                )
            syncfs(work)
            try:
                os.rename(work, final)
            except OSError as exc:
                if final.is_dir():
                    return 0  # another importer won the race with identical content
                raise StoreError(final, f"cannot move unpacked layer into place: {exc.strerror}") from exc
            return result.size
        finally:
            if work.exists():
                _remove_tree(work)

    # ------------------------------------------------------------------ images

    def commit_image(
        self,
        *,
        manifest_digest: str,
        config_digest: str,
        layer_digests: Sequence[str],
        references: Sequence[str],
        pinned: bool = False,
        source: str = "",
    ) -> ImageRecord:
        """Unpack the layers of an image whose blobs are stored, and record it under `references`.

        A reference held by another image moves to this one (a re-tag), as docker does."""
        try:
            config = json.loads(self.read_blob(config_digest, MAX_JSON))
        except ValueError as exc:
            raise BlobError(config_digest, f"image config is not valid JSON: {exc}", source=source or None) from exc
        diff_ids = (config.get("rootfs") or {}).get("diff_ids") if isinstance(config, dict) else None
        if not isinstance(diff_ids, list) or len(diff_ids) != len(layer_digests):
            raise BlobError(
                config_digest,
                f"config lists {len(diff_ids) if isinstance(diff_ids, list) else 'no'} "
                f"diff_ids for {len(layer_digests)} layers",
                source=source or None,
            )
        for d in diff_ids:
            try:
                validate_digest(str(d))
            except InvalidReference as exc:
                raise BlobError(config_digest, f"config has an invalid diff_id: {exc}", source=source or None) from exc
        chains = chain_ids([str(d) for d in diff_ids])
        with self._changing() as entries:
            known = {c: n for e in entries.values() for c, n in zip(e.chain_ids, e.layer_sizes)}
            sizes = []
            budget, why = self.unpack_budget()
            for blob, diff_id, chain in zip(layer_digests, diff_ids, chains):
                new = self.ensure_layer(blob, str(diff_id), chain, max_size=budget, why=why)
                budget -= new
                sizes.append(new or known.get(chain) or _tree_size_hint(self._layers / _hex(chain)))
            refs = list(dict.fromkeys(references))
            for other in entries.values():
                if other.id != config_digest:
                    other.references = [r for r in other.references if r not in refs]
            now = self._clock.now()
            old = entries.get(config_digest)
            entry = _Entry(
                id=config_digest,
                digest=manifest_digest,
                references=list(dict.fromkeys([*(old.references if old else []), *refs])),
                config={k: config[k] for k in ("config", "os", "architecture", "variant", "created") if k in config},
                chain_ids=chains,
                # The same image imported from another format brings other manifest/layer blobs: keep them all.
                blobs=list(
                    dict.fromkeys([manifest_digest, config_digest, *layer_digests, *(old.blobs if old else [])])
                ),
                size=sum(sizes),
                layer_sizes=sizes,
                pinned=pinned or (old.pinned if old else False),
                platform=_platform_of(config),
                created=old.created if old else now,
                last_used=old.last_used if old else 0.0,
            )
            entries[config_digest] = entry
            crash_point("image.import")
            self._save(entries)
            return self._record(entry)

    def import_archive(
        self,
        path: Path,
        *,
        pinned: bool = False,
        progress: Progress | None = None,
        fileobj: ByteSource | None = None,
        admit: Callable[[], bool] | None = None,
    ) -> builtins.list[ImageRecord]:
        """Import every image of a docker-archive, OCI archive or OCI layout dir (see archive.py).

        Blobs the archive brought that no image ends up using are removed again. `progress` counts the
        bytes of each file read from the archive into the store. `fileobj`: the archive already open, read
        once from where it stands (`path` then only names it). `admit` is asked once every blob is stored,
        before any layer is unpacked or image recorded: False (or its exception) imports nothing, and the
        blobs go again."""
        path = Path(path)
        with self._locked():
            self._reload()
            before = set(self._stored_blobs())
            try:
                images = read_archive(
                    path, self if progress is None else _CountingSink(self, progress), fileobj=fileobj
                )
                if admit is not None and not admit():
                    return []
                records = [
                    self.commit_image(
                        manifest_digest=im.manifest_digest,
                        config_digest=im.config_digest,
                        layer_digests=im.layer_digests,
                        references=im.names,
                        pinned=pinned,
                        source=str(path),
                    )
                    for im in images
                ]
            except UnpackError as exc:  # same class (UnsafeLayerError, LayerTooLarge), with the archive named
                raise type(exc)(exc.layer, f"{exc.reason} (importing {path})", member=exc.member) from exc
            finally:
                self._drop_unused_blobs(exclude=before)
        for r in records:
            if not r.references:
                log.warning("Imported image has no name; refer to it by id", archive=str(path), id=r.id)
        return records

    def touch(self, ref: str) -> None:
        """Record that `ref` was just used (for image GC); persisted at most every TOUCH_PERSIST_INTERVAL."""
        entry = self._find(ref)
        if entry is None:
            raise ImageNotFound(ref)
        now = self._clock.now()
        entry.last_used = now
        if now - entry.persisted_last_used < TOUCH_PERSIST_INTERVAL:
            return
        with self._changing() as entries:
            if entry.id in entries:
                entries[entry.id].last_used = max(now, entries[entry.id].last_used)
                self._save(entries)

    def remove(self, ref: str) -> None:
        """Untag `ref`, or when it is the image's last name (or an id/digest) remove the image and the layers
        and blobs no other image uses. ImageNotFound when nothing matches."""
        with self._changing() as entries:
            entry = self._find(ref)
            if entry is None or entry.id not in entries:
                raise ImageNotFound(ref)
            entry = entries[entry.id]
            if not is_digest(ref) and not _is_bare_id(ref):
                normalised = str(parse_reference(ref))
                if normalised in entry.references and len(entry.references) > 1:
                    entry.references.remove(normalised)
                    self._save(entries)
                    log.info("Untagged image", image=normalised, id=entry.id)
                    return
            del entries[entry.id]
            self._save(entries)
            used_chains = {c for e in entries.values() for c in e.chain_ids}
            for chain in entry.chain_ids:
                if chain not in used_chains:
                    self._remove_layer(chain)
            self._drop_unused_blobs(exclude=set(), entries=entries)
            log.info("Removed image", image=",".join(entry.references) or entry.id, id=entry.id)

    # ------------------------------------------------------------------ housekeeping

    @contextmanager
    def pulling(self) -> Iterator[None]:
        """Held around a pull, whose blobs no image refers to until it commits: `sweep` waits for none."""
        with _flock(self.root / ".pull.lock", fcntl.LOCK_SH):
            yield

    def sweep(self) -> tuple[int, int] | None:
        """Remove the blobs and unpacked layers no image refers to (left by failed pulls, crashes, a
        half-finished removal); (blobs, layers) removed, or None when skipped because a pull, in this
        process or another, is under way."""
        with self._locked(), _flock(self.root / ".pull.lock", fcntl.LOCK_EX | fcntl.LOCK_NB) as got:
            if not got:
                return None
            self._reload()
            used_blobs = {b for e in self._entries.values() for b in e.blobs}
            stale_blobs = set(self._stored_blobs()) - used_blobs
            for digest in stale_blobs:
                try:
                    os.unlink(self._blobs / _hex(digest))
                except FileNotFoundError:
                    pass
            used_layers = {_hex(c) for e in self._entries.values() for c in e.chain_ids}
            try:
                stale_layers = [n for n in os.listdir(self._layers) if n not in used_layers]
            except OSError as exc:
                raise StoreError(self._layers, f"cannot list layers: {exc.strerror}") from exc
            for name in stale_layers:
                self._remove_layer("sha256:" + name)
        if stale_blobs or stale_layers:
            log.info("Swept unreferenced image content", blobs=len(stale_blobs), layers=len(stale_layers))
        return len(stale_blobs), len(stale_layers)

    def _stored_blobs(self) -> Iterator[str]:
        try:
            names = os.listdir(self._blobs)
        except OSError as exc:
            raise StoreError(self._blobs, f"cannot list blobs: {exc.strerror}") from exc
        return ("sha256:" + n for n in names)

    def _drop_unused_blobs(self, exclude: set[str], entries: dict[str, _Entry] | None = None) -> None:
        entries = self._entries if entries is None else entries
        used = {b for e in entries.values() for b in e.blobs}
        for digest in set(self._stored_blobs()) - used - exclude:
            try:
                os.unlink(self._blobs / _hex(digest))
            except FileNotFoundError:
                pass

    def _remove_layer(self, chain: str) -> None:
        src = self._layers / _hex(chain)
        if not src.exists():
            return
        # Rename first so the layer disappears at once, then delete at leisure.
        doomed = Path(tempfile.mkdtemp(prefix="rm-", dir=self._tmp)) / "layer"
        os.rename(src, doomed)
        _remove_tree(doomed.parent)

    def _sweep_tmp(self) -> None:
        """Remove temp leftovers of a crashed import, unless another process is importing right now."""
        with _flock(self.root / ".lock", fcntl.LOCK_EX | fcntl.LOCK_NB) as got:
            if got:
                for leftover in self._tmp.iterdir():
                    _remove_tree(leftover)


class _CountingSink:
    """The store as an archive's BlobSink, counting what each add_blob reads into `progress`."""

    def __init__(self, store: ImageStore, progress: Progress) -> None:
        self._store = store
        self._progress = progress

    def add_blob(
        self, src: ByteSource, *, digest: str | None = None, size: int | None = None, source: str = ""
    ) -> tuple[str, int]:
        return self._store.add_blob(src, digest=digest, size=size, source=source, progress=self._progress)

    def has_blob(self, digest: str) -> bool:
        return self._store.has_blob(digest)

    def blob_size(self, digest: str) -> int:
        return self._store.blob_size(digest)

    def read_blob(self, digest: str, limit: int) -> bytes:
        return self._store.read_blob(digest, limit)

    def open_blob(self, digest: str) -> BinaryIO:
        return self._store.open_blob(digest)


@contextmanager
def _flock(path: Path, operation: int) -> Iterator[bool]:
    """Hold flock(`operation`) on `path` (created if missing) while in the block; released on close.

    Yields False, holding nothing, when `operation` has LOCK_NB and another holder has it.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise StoreError(path, f"cannot open lock file: {exc.strerror}") from exc
    try:
        try:
            fcntl.flock(fd, operation)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def _is_bare_id(ref: str) -> bool:
    return len(ref) == 64 and all(c in "0123456789abcdef" for c in ref)


def _match(entries: Any, ref: Reference) -> _Entry | None:
    text = str(ref)
    for e in entries:
        if text in e.references:
            return e
    if ref.digest is not None:
        # `name@digest` (with or without a tag): the image with that manifest digest under that repository.
        for e in entries:
            if e.digest == ref.digest and any(parse_reference(r).name == ref.name for r in e.references):
                return e
    return None


def _tree_size_hint(path: Path) -> int:
    """Disk usage of an already-unpacked layer (counted once per image record; cheap enough at import)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def _remove_tree(path: Path) -> None:
    """rmtree that also copes with read-only directories and overlay whiteout devices."""

    def onerror(func: Any, p: str, exc_info: Any) -> None:
        try:
            os.chmod(os.path.dirname(p), 0o755)
            func(p)
        except OSError:
            pass

    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, onerror=onerror)
    else:
        try:
            path.unlink()
        except FileNotFoundError:
            pass


__all__ = ["ImageStore", "parse_image_config"]
