"""The file source: static pods from a manifest directory, as whole snapshots on change (kubelet config/file.go).

`scan_directory` reads the directory once and is the whole decision; the
`FileSource` around it decides *when* to scan: at start, on inotify events
(util/inotify.py on the loop, coalesced), and every `file_check_frequency`.
"""

from __future__ import annotations

import asyncio
import functools
import os
import stat
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from edgelet.api import decode as _decode  # noqa: F401  (imported before any scan thread: see its warm-up)
from edgelet.api.annotations import ORIGIN
from edgelet.api.types import ObjectMeta
from edgelet.sources import ManifestProblem, SourceName, SourceSnapshot, snapshot_key
from edgelet.util.files import NotRegularFile, open_regular
from edgelet.util.log import get_logger
from edgelet.util.watch import CHANGE_EVENTS

# What the directory's watch reports (opens and closes too: a file open for writing is not read on an event), and
# the parent's (only the directory itself appearing, going or being replaced).
WATCHED = {
    "dir": frozenset({"created", "deleted", "modified", "closed", "closed_no_write", "opened"}),
    "parent": frozenset({"created", "deleted"}),
}

if TYPE_CHECKING:
    from edgelet.api.configobjects import ConfigObject
    from edgelet.api.types import Pod
    from edgelet.trust.verify import Trust
    from edgelet.util.clock import Clock

log = get_logger(__name__)

SOURCE: SourceName = "file"
MAX_MANIFEST_BYTES = 10 * 1024 * 1024  # kubelet's maxConfigLength
# Scans follow events at once; a file a writer still holds open is left as it was until
# its close event (a `cp` or an editor is never read half-written).


@dataclass(frozen=True)
class FileSourceState:
    """What the last scan found: the last valid pods of every file (by path), and whether the dir was missing."""

    files: Mapping[str, tuple[Pod, ...]] = field(default_factory=dict)
    missing: bool = False
    warnings: tuple[ManifestProblem, ...] = ()
    # Per valid file: its stat signature and unknown-field warnings, so an unchanged
    # file is not decoded again (a scan costs what changed, not what the directory holds).
    stats: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    file_warnings: Mapping[str, tuple[ManifestProblem, ...]] = field(default_factory=dict)
    # The ConfigMaps and Secrets of every file whose pods are in `files`, from the same read.
    objects: Mapping[str, tuple[ConfigObject, ...]] = field(default_factory=dict)


def _list_manifests(path: Path) -> list[Path] | None:
    """Candidate files in sorted name order; None when `path` does not exist.

    kubelet also accepts a single file as --pod-manifest-path; so do we.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        return [path]
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        return None
    return [path / name for name in sorted(names) if not name.startswith(".")]


class _Skip(Exception):
    """Not a manifest at all (a subdirectory, a dangling symlink, a FIFO): ignored, like kubelet."""


class _ManifestProblem(Exception):
    """A file that is a manifest but cannot be used; the message is the reason."""


def _read_manifest(path: Path) -> bytes:
    """Read at most MAX_MANIFEST_BYTES of a regular file (symlinks followed)."""
    try:
        # Never opened unless regular: a FIFO dropped in the directory must not hang the scan, nor a
        # symlink to a device act on it.
        f = open_regular(path)
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise _Skip(f"{path}: vanished or dangling symlink") from exc
    except NotRegularFile as exc:
        if exc.kind == "a directory":
            raise _Skip(f"{path}: a directory") from exc
        # A named pipe, a device or a socket: never read, and said so.
        raise _ManifestProblem(f"not a regular file ({exc.kind}): not read") from exc
    except OSError as exc:
        raise _ManifestProblem(f"cannot open: {exc.strerror or exc}") from exc
    with f:
        st = os.fstat(f.fileno())
        if st.st_size > MAX_MANIFEST_BYTES:
            raise _ManifestProblem(f"file is larger than the limit of {MAX_MANIFEST_BYTES} bytes ({st.st_size} bytes)")
        try:
            data = f.read(MAX_MANIFEST_BYTES + 1)
        except OSError as exc:
            raise _ManifestProblem(f"cannot read: {exc.strerror or exc}") from exc
    if len(data) > MAX_MANIFEST_BYTES:  # it grew while we read it
        raise _ManifestProblem(f"file is larger than the limit of {MAX_MANIFEST_BYTES} bytes")
    return data


def _with_origin(pod: Pod, origin: str) -> Pod:
    meta = pod.metadata or ObjectMeta()
    annotations = dict(meta.annotations or {})
    annotations[ORIGIN] = origin
    return msgspec.structs.replace(pod, metadata=msgspec.structs.replace(meta, annotations=annotations))


def _pods_of(path: Path, data: bytes, node_name: str) -> tuple[tuple[Pod, ...], list[str], tuple[ConfigObject, ...]]:
    """The file's static pods, a warning per unknown field in it, and its ConfigMaps and Secrets."""
    from edgelet.api.decode import parse_documents
    from edgelet.api.static import make_static_pod

    origin = str(path)
    pods = []
    decoded, objects, warnings = parse_documents(data, origin)
    for pod in decoded:
        static = make_static_pod(pod, node_name=node_name, source=SOURCE, origin=origin)
        pods.append(_with_origin(static, origin))
    return tuple(pods), warnings, tuple(replace(o, origin=origin, source=SOURCE) for o in objects)


def _error(path: Path, reason: str, pod: str | None = None) -> ManifestProblem:
    origin = str(path)
    message = reason if reason.startswith(origin) else f"{origin}: {reason}"
    return ManifestProblem(source=SOURCE, origin=origin, message=message, pod=pod)


def _signature(path: Path, trust: Trust | None = None) -> tuple[int, ...] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    sig: tuple[int, ...] = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if trust is None:
        return sig
    from edgelet.trust import SIGNATURE_SUFFIXES

    # The detached signature files belong to the manifest: an edit of either re-verifies.
    for suffix in SIGNATURE_SUFFIXES:
        try:
            sst = os.stat(str(path) + suffix)
        except OSError:
            sig += (-1,)
            continue
        sig += (sst.st_dev, sst.st_ino, sst.st_size, sst.st_mtime_ns, sst.st_ctime_ns)
    return sig


UNTRUSTED_REASON = "UntrustedManifest"  # the event reason of a refused signature


def _is_signature_file(path: Path) -> bool:
    from edgelet.trust import SIGNATURE_SUFFIXES

    return path.name.endswith(SIGNATURE_SUFFIXES)


def _trusted_pods(
    path: Path, data: bytes, node_name: str, trust: Trust
) -> tuple[tuple[Pod, ...], list[str], tuple[ConfigObject, ...]]:
    """`_pods_of`, once the detached signature beside the file holds and its version is no replay.

    Raises SignatureRefused; records the accepted version (a failed record is logged: the pods still run).
    """
    from edgelet.trust.verify import read_signature_beside

    signature, name = read_signature_beside(path)
    verified = trust.check_manifest(data, signature, name)
    pods, unknown, objects = _pods_of(path, data, node_name)
    names = _pod_names(pods)
    source_key = f"file:{os.path.abspath(path)}"
    trust.check_replay(source_key, names, verified, data)
    try:
        trust.accept(source_key, names, verified, data)
        trust.save_accepted(source_key, data, signature, name)
    except OSError as exc:
        log.error("Cannot record the accepted signed version", exc, path=str(path))
    log.info("Signed manifest accepted", path=str(path), key=verified.key_id, version=verified.version)
    return pods, unknown, objects


def _last_accepted(path: Path, node_name: str, trust: Trust) -> tuple[tuple[Pod, ...], tuple[ConfigObject, ...]] | None:
    """The pods and objects of the file's last accepted body, kept by the trust state and verified again; None
    if none."""
    found = trust.load_accepted(f"file:{os.path.abspath(path)}")
    if found is None:
        return None
    try:
        pods, _, objects = _pods_of(path, found[0], node_name)
        return pods, objects
    except Exception as exc:  # a copy that no longer decodes (a stricter edgelet): as if there were none
        log.warning("Cannot use the last accepted copy of a manifest", path=str(path), err=str(exc))
        return None


def _pod_names(pods: Iterable[Pod]) -> list[str]:
    return [f"{p.metadata.namespace}/{p.metadata.name}" for p in pods if p.metadata is not None]


def _revoke_deletions(
    directory: Path, before: Mapping[str, tuple[Pod, ...]], now: Mapping[str, tuple[Pod, ...]], trust: Trust
) -> None:
    """A deletion is a signed fact: a manifest gone from `directory` and a pod no file holds any more become
    tombstones, so their accepted bodies put back (under any name) are replays, and their kept copies go.

    A manifest whose record outlives its file was deleted while no scan saw it (the agent was down): the
    same. A rename within one scan keeps its pods, which are live under the new name.
    """
    live = {name for pods in now.values() for name in _pod_names(pods)}
    present = {os.path.abspath(f) for f in now}
    gone = {os.path.abspath(f) for f in before} - present
    dropped = {name for pods in before.values() for name in _pod_names(pods)} - live
    directory_key = os.path.abspath(directory)
    for key, pods in trust.versions.live_manifests(f"file:{directory_key}/").items():
        file = key.removeprefix("file:")
        if os.path.dirname(file) == directory_key and file not in present and not os.path.lexists(file):
            gone.add(file)
            dropped |= set(pods) - live
    if not gone and not dropped:
        return
    try:
        trust.revoke([f"file:{f}" for f in sorted(gone)], sorted(dropped))
    except OSError as exc:
        log.error("Cannot record deleted signed manifests", exc, path=str(directory))
        return
    for file in sorted(gone):
        log.info("Signed manifest deleted: its version is revoked", path=file)
    for name in sorted(dropped):
        log.info("Signed pod deleted: its version is revoked", pod=name)


def scan_directory(
    path: Path,
    node_name: str,
    previous: FileSourceState,
    *,
    writing: frozenset[str] = frozenset(),
    trust: Trust | None = None,
) -> tuple[SourceSnapshot, FileSourceState]:
    """Read every manifest in `path` once; a failing file keeps its last valid pods from `previous`.

    kubelet drops a failing file's pod at the next periodic list. edgelet
    deliberately keeps the last valid version running and reports the error
    until the file is fixed or deleted (KUBELET-SEMANTICS "File source").
    With `trust`, a file counts only with a valid detached signature beside it
    (`NAME.minisig` or `NAME.sig`, which are not manifests themselves); a
    refused one is such a failing file: its last accepted pods keep running.
    A file whose stat signature is unchanged since `previous` is not read
    again; a file in `writing` (open for writing now) keeps what it had.
    """
    from edgelet.api.errors import ApiError
    from edgelet.trust.errors import SignatureRefused

    candidates = _list_manifests(path)
    if candidates is not None and trust is not None:
        candidates = [c for c in candidates if not _is_signature_file(c)]
    if candidates is None:
        if not previous.missing:
            log.info("Manifest path does not exist; no file pods until it appears", path=str(path))
        return SourceSnapshot(source=SOURCE, pods=(), errors=()), FileSourceState(files={}, missing=True)
    if previous.missing:
        log.info("Manifest path appeared", path=str(path))

    files: dict[str, tuple[Pod, ...]] = {}
    stats: dict[str, tuple[int, ...]] = {}
    file_warnings: dict[str, tuple[ManifestProblem, ...]] = {}
    # Objects of the files read in this scan; any other file in `files` keeps its objects from `previous`.
    read_objects: dict[str, tuple[ConfigObject, ...]] = {}
    errors: list[ManifestProblem] = []
    for file in candidates:
        key = str(file)
        if key in writing or (trust is not None and any(key + s in writing for s in (".minisig", ".sig"))):
            if key in previous.files:
                files[key] = previous.files[key]
                file_warnings[key] = previous.file_warnings.get(key, ())
            continue
        sig = _signature(file, trust)
        if sig is not None and key in previous.files and previous.stats.get(key) == sig:
            files[key], stats[key] = previous.files[key], sig
            file_warnings[key] = previous.file_warnings.get(key, ())
            continue
        try:
            data = _read_manifest(file)
            files[key], unknown, read_objects[key] = (
                _pods_of(file, data, node_name) if trust is None else _trusted_pods(file, data, node_name, trust)
            )
            if sig is not None and _signature(file, trust) == sig:  # not rewritten while we read it
                stats[key] = sig
            file_warnings[key] = tuple(_error(file, w) for w in unknown)
        except _Skip as exc:
            log.debug("Ignoring manifest path entry", path=key, reason=str(exc))
        except _ManifestProblem as exc:
            errors.append(_error(file, str(exc)))
        except SignatureRefused as exc:
            errors.append(replace(_error(file, str(exc)), reason=UNTRUSTED_REASON))
            if key not in previous.files and trust is not None:
                # Refused at start: the pods of its last accepted version keep running (never a removal).
                kept = _last_accepted(file, node_name, trust)
                if kept is not None:
                    files[key], read_objects[key] = kept
                    continue
        except ApiError as exc:
            pod = getattr(exc, "pod", None)
            errors.append(_error(file, str(exc), pod if isinstance(pod, str) else None))
        except Exception as exc:  # a decoder bug on one file must not take the other files (or the agent) down
            log.error("Unexpected error reading manifest", exc, path=key)
            errors.append(_error(file, f"unexpected {type(exc).__name__}: {exc}"))
        else:
            continue
        if key in previous.files:
            files[key] = previous.files[key]
            file_warnings[key] = previous.file_warnings.get(key, ())
    if trust is not None:
        _revoke_deletions(path, previous.files, files, trust)
    pods = tuple(p for pods_of_file in files.values() for p in pods_of_file)
    warnings = tuple(w for ws in file_warnings.values() for w in ws)
    objects = {k: read_objects[k] if k in read_objects else previous.objects.get(k, ()) for k in files}
    snapshot = SourceSnapshot(
        source=SOURCE,
        pods=pods,
        errors=tuple(errors),
        warnings=warnings,
        objects=tuple(o for of_file in objects.values() for o in of_file),
    )
    state = FileSourceState(files=files, warnings=warnings, stats=stats, file_warnings=file_warnings, objects=objects)
    return snapshot, state


class FileSource:
    """Watches the manifest directory and emits a SourceSnapshot whenever what it holds changes.

    `run` emits the first snapshot at once (even an empty one: it tells the
    sync loop this source has been read), then only changed snapshots. It
    runs until cancelled; cancellation closes the watch.
    """

    def __init__(
        self, path: Path, node_name: str, file_check_frequency: float, clock: Clock, trust: Trust | None = None
    ) -> None:
        self.path = Path(path)
        self.trust = trust
        self.node_name = node_name
        self.period = file_check_frequency
        self._clock = clock
        self._state = FileSourceState()
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # (scheduled watch, (st_dev, st_ino) of the watched dir) for the directory and its parent.
        self._watches: dict[str, tuple[Any, tuple[int, int]]] = {}
        # Files some process has open for writing (inotify's open/close events), and whether
        # the current wake-up came from an event (True) or the periodic timer.
        self._writing: set[str] = set()
        self._writing_lock = threading.Lock()
        self._by_event = False

    async def scan_once(self) -> SourceSnapshot:
        """Scan now (in a thread: reading files must not block the loop) and remember the result.

        After an event, files still open for writing keep what they had; the periodic
        rescan reads everything, so a writer that never closes cannot hide a file forever.
        """
        with self._writing_lock:
            writing = frozenset(self._writing) if self._by_event else frozenset()
        snapshot, self._state = await asyncio.to_thread(
            functools.partial(scan_directory, self.path, self.node_name, self._state, writing=writing, trust=self.trust)
        )
        return snapshot

    async def run(self, emit: Callable[[SourceSnapshot], Awaitable[None]]) -> None:
        from edgelet.util.inotify import Inotify

        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        watcher = Inotify()
        last: tuple[Any, ...] | None = None
        try:
            while True:
                self._ensure_watches(watcher)
                self._wake.clear()
                snapshot = await self.scan_once()
                # The directory may have appeared (or been replaced) while we scanned it:
                # watch the new one and scan again so nothing written there is missed.
                if self._ensure_watches(watcher):
                    self._wake.set()
                key = snapshot_key(snapshot)
                if key != last:
                    log.debug(
                        "File source changed", path=str(self.path), pods=len(snapshot.pods), errors=len(snapshot.errors)
                    )
                    await emit(snapshot)
                    last = key
                await self._wait()
        finally:
            watcher.close()

    async def _wait(self) -> None:
        """Until the next periodic rescan or the next event, whichever first.

        Events during a scan leave the wake flag set, so a burst of writes costs a
        few scans (each reading only what changed), never a missed change.
        """
        assert self._wake is not None
        timer = asyncio.ensure_future(self._clock.sleep(self.period))
        woken = asyncio.ensure_future(self._wake.wait())
        try:
            done, _ = await asyncio.wait({timer, woken}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            woken.cancel()
        self._by_event = woken in done

    # --- inotify side (on the loop: a stat and a syscall per path, nothing that blocks) ---

    def _ensure_watches(self, watcher: Any) -> bool:
        """Watch the directory and its parent (for the directory appearing or being replaced).

        Returns True when a watch on the directory itself was added.
        """
        added = False
        for role, target in (("dir", self.path), ("parent", self.path.parent)):
            try:
                st = os.stat(target)
                ident: tuple[int, int] | None = (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None
            except OSError:
                ident = None
            current = self._watches.get(role)
            if current is not None and current[1] == ident:
                continue
            if current is not None:
                watcher.remove(current[0])  # a no-op when the kernel dropped it with its directory
                del self._watches[role]
            if ident is None:
                continue
            try:
                watch = watcher.add(str(target), WATCHED[role], functools.partial(self._on_inotify, role))
            except OSError as exc:
                # Out of inotify watches, or no permission: the periodic rescan still works.
                log.warning("Cannot watch manifest path; relying on periodic rescans", path=str(target), err=str(exc))
                continue
            self._watches[role] = (watch, ident)
            added = added or role == "dir"
        return added

    def _is_relevant(self, role: str, paths: list[str]) -> bool:
        if role == "parent":
            return any(Path(p) == self.path for p in paths)
        return any(Path(p) == self.path or not os.path.basename(p).startswith(".") for p in paths)

    def _notify(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _on_inotify(self, role: str, event_type: str, path: str) -> None:
        self._on_event(role, event_type, [path])

    def _on_event(self, role: str, event_type: str, paths: list[str]) -> None:
        if role == "dir" and event_type in ("opened", "closed", "closed_no_write", "deleted", "moved"):
            with self._writing_lock:
                if event_type == "opened":
                    # inotify reports every open; only writers matter, and a reader's
                    # close clears it again right away.
                    self._writing.add(paths[0])
                else:
                    self._writing.difference_update(paths)
        if event_type not in CHANGE_EVENTS or not self._is_relevant(role, paths):
            return
        self._notify()  # inotify's reader runs on the loop


def combine_snapshots(snapshots: Sequence[SourceSnapshot]) -> SourceSnapshot:
    """Several manifest directories' snapshots as the one `file` snapshot, in directory order (pure).

    Their pods share the source, so a name held by two directories is settled by
    podconfig's merge like two files of one directory: the earlier directory wins
    and the other file is reported with both paths.
    """
    return SourceSnapshot(
        source=SOURCE,
        pods=tuple(p for s in snapshots for p in s.pods),
        errors=tuple(e for s in snapshots for e in s.errors),
        warnings=tuple(w for s in snapshots for w in s.warnings),
        objects=tuple(o for s in snapshots for o in s.objects),
    )


class FileSources:
    """Several manifest directories (the node's, then the card's) watched as the one `file` source.

    Same contract as FileSource: `run` emits once every directory has been
    read, then whenever one of them changes; `scan_once` reads them all now.
    """

    def __init__(self, sources: Sequence[FileSource]) -> None:
        if not sources:
            raise ValueError("FileSources needs at least one directory")
        self.sources = tuple(sources)

    @property
    def paths(self) -> tuple[Path, ...]:
        return tuple(s.path for s in self.sources)

    async def scan_once(self) -> SourceSnapshot:
        return combine_snapshots([await s.scan_once() for s in self.sources])

    async def run(self, emit: Callable[[SourceSnapshot], Awaitable[None]]) -> None:
        if len(self.sources) == 1:
            await self.sources[0].run(emit)
            return
        latest: dict[int, SourceSnapshot] = {}

        async def emit_one(index: int, snapshot: SourceSnapshot) -> None:
            latest[index] = snapshot
            if len(latest) == len(self.sources):
                await emit(combine_snapshots([latest[i] for i in range(len(self.sources))]))

        async with asyncio.TaskGroup() as tg:
            for i, source in enumerate(self.sources):
                tg.create_task(source.run(functools.partial(emit_one, i)), name=f"source-file-{i}")
