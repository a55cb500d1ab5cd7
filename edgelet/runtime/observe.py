"""Gathering the actual state (I/O): every container of every runtime handler plus the bundles on disk no
runtime knows any more, with their exit files, start times, OOM kills and termination messages; `runtime.state`
judges what is gathered.

Nothing is kept only in memory: a fresh instance observes what an earlier edgelet started. What is cached
(bundle paths, termination messages read after a recorded exit, OOM counters read) is only a shortcut and is
dropped with its container.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgelet.cgroups.stats import read_oom_kills
from edgelet.container.types import ContainerRecord
from edgelet.runtime import bundle as bl
from edgelet.runtime import conmon
from edgelet.runtime.host import CGROUP_MOUNT
from edgelet.runtime.layout import ANN_KIND, ANN_POD_UID, ANN_RUNTIME_HANDLER, KIND_CONTAINER, RuntimePaths
from edgelet.runtime.runc import Runc
from edgelet.runtime.state import ExitInfo, Observed, build_record, judge_state
from edgelet.runtime.termination import termination_message
from edgelet.util.clock import Clock
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.runtime.sandboxkind import SandboxKind

log = get_logger("edgelet.runtime")


def read_exit(path: Path, now: float) -> ExitInfo | None:
    """conmon's exit file: None when there is none, a code of None when it cannot be read."""
    try:
        st = path.stat()
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    except OSError:
        return ExitInfo(None, now)
    try:
        return ExitInfo(int(text), st.st_mtime)
    except ValueError:
        return ExitInfo(None, st.st_mtime)


def _holds_any(root: Path) -> bool:
    """Whether a runtime's state root holds an entry (a container's state dir): without one, its `list` is
    empty."""
    try:
        with os.scandir(root) as entries:
            return any(True for _ in entries)
    except OSError:
        return False


def _read_float(path: Path) -> float | None:
    try:
        return float(path.read_text().strip())
    except (OSError, ValueError):
        return None


class Observer:
    """Observes the runtime's containers and sandboxes, under every handler in `runcs` (the first, the default,
    always listed; the others only while their root holds a container, so that a node whose pods all run on
    the default spawns no second `list` per relist); `kind_of` names the
    sandbox kind of a bundle's annotations (None for a container), which says how a sandbox without a monitored
    process is live."""

    def __init__(
        self,
        paths: RuntimePaths,
        runcs: Sequence[Runc],
        clock: Clock,
        *,
        pod_cgroups: Callable[[str], list[str]],
        kind_of: Callable[[Mapping[str, str]], SandboxKind | None],
    ) -> None:
        self.paths = paths
        self.runcs = list(runcs)
        self.clock = clock
        self.pod_cgroups = pod_cgroups
        self.kind_of = kind_of
        self.bundles: dict[str, Path] = {}  # container id -> bundle dir, refreshed by every observation
        # Container id -> the name of the handler that holds it (or, once none does, its record names).
        self.handlers: dict[str, str] = {}
        # Annotations of the containers whose handler's `list` omits them (crun's), read once from the bundle:
        # a container's annotations never change.
        self.annotations: dict[str, dict[str, str]] = {}
        # Termination messages of exited containers by id: read once conmon recorded the exit, since an exited
        # container's files no longer change; an entry goes with its container (`forget`, or a relist that
        # misses it).
        self.messages: dict[str, str] = {}
        self.oom_checked: set[str] = set()  # exited containers whose OOM counter was read

    async def observe(self, uid: str | None = None) -> list[Observed]:
        """Every container and sandbox (of pod `uid` only, when given)."""
        runcs = [self.runcs[0], *[r for r in self.runcs[1:] if await asyncio.to_thread(_holds_any, r.root)]]
        listings = await asyncio.gather(*(runc.list() for runc in runcs))
        entries: dict[str, dict[str, Any]] = {}
        for runc, listing in zip(runcs, listings, strict=True):
            for entry in listing:
                if entry.get("id"):
                    entry["_handler"] = runc.name
                    entries[entry["id"]] = entry
        return await asyncio.to_thread(self.scan_disk, entries, uid)

    def handler_of(self, cid: str) -> str | None:
        """The name of the handler that held the container at the last observation (or that created it)."""
        return self.handlers.get(cid)

    async def bundle_of(self, cid: str) -> Path | None:
        known = self.bundles.get(cid)
        if known is not None and known.exists():
            return known
        await self.observe()
        return self.bundles.get(cid)

    def forget(self, cid: str) -> None:
        """Drop what is cached of a removed container."""
        self.oom_checked.discard(cid)
        self.bundles.pop(cid, None)
        self.messages.pop(cid, None)
        self.handlers.pop(cid, None)
        self.annotations.pop(cid, None)

    def observe_bundle(
        self, cid: str, ann: Mapping[str, str], entry: Mapping[str, Any] | None, bundle: Path | None
    ) -> Observed:
        exit_info = read_exit(self.paths.exit_dir / cid, self.clock.now())
        if exit_info is None and bundle is not None:
            exit_info = read_exit(bundle / bl.EXIT_FILE, self.clock.now())
        started = _read_float(bundle / bl.STARTED_FILE) if bundle is not None else None
        oom = bundle is not None and (bundle / bl.OOM_FILE).exists()
        if exit_info is not None and bundle is not None and not oom and cid not in self.oom_checked:
            oom = self._record_oom_kills(cid, ann, bundle)
        alive = False
        pinned_live = False
        # Created too: one whose conmon is gone (an agent killed while conmon ran `runc create`) must not be
        # started, since nobody would record its exit (plan.actions resumable).
        status = entry.get("status") if entry is not None else None
        kind = self.kind_of(ann)
        if kind is not None and not kind.monitored:
            # No process stands for it: the kind says whether it still runs.
            pinned_live = started is not None and exit_info is None and kind.is_live(ann)
        elif bundle is not None and exit_info is None and (entry is None or status in ("stopped", "created")):
            alive = conmon.is_alive(conmon.conmon_pid(bundle))
        return self._with_message(
            Observed(cid, dict(ann), entry, exit_info, started, oom, alive, pinned_live=pinned_live), bundle
        )

    def _with_message(self, observed: Observed, bundle: Path | None) -> Observed:
        """`observed` with its termination message once it exited (blocking I/O: kubelet's runtime reads it in
        getContainerStatus), from the cache when it was read after a recorded exit."""
        message = self.messages.get(observed.id)
        if message is None:
            # Judged first, so that a relist builds no second record of every running container.
            if observed.annotations.get(ANN_KIND) != KIND_CONTAINER or judge_state(observed)[0] != "exited":
                return observed
            rec = build_record(observed)
            if not isinstance(rec, ContainerRecord):
                return observed
            if bundle is None:
                bundle = bl.PodLayout(self.paths.pod_dir(rec.pod_uid)).container_dir(rec.name, rec.attempt)
            message = termination_message(bundle, observed.annotations, rec)
            if observed.exit is not None and observed.exit.code is not None:
                # Only an exit conmon recorded is final (it writes the exit file once the log is drained). An
                # exit judged unknown may be a container created after `runc list` began, still running.
                self.messages[observed.id] = message
        return dataclasses.replace(observed, termination_message=message)

    def _record_oom_kills(self, cid: str, ann: Mapping[str, str], bundle: Path) -> bool:
        """Whether the kernel OOM-killed a process of the exited container, from its cgroup's counter.

        Read once per exit, while runc still keeps the container's cgroup; a kill is recorded as the
        bundle's `oom` marker (the file conmon writes when it catches the event itself), so the reason
        outlives the cgroup and an agent restart, and nothing is written when there was none.
        """
        self.oom_checked.add(cid)
        uid = ann.get(ANN_POD_UID, "")
        if not uid:
            return False
        kills = None
        for pod_cgroup in self.pod_cgroups(uid):
            kills = read_oom_kills(f"{pod_cgroup}/{cid}", CGROUP_MOUNT)
            if kills is not None:
                break
        if not kills:
            return False
        try:
            (bundle / bl.OOM_FILE).touch()
        except OSError as exc:
            log.warning("cannot record the OOM kill", container=cid, error=str(exc))
        return True

    def scan_disk(self, entries: Mapping[str, Mapping[str, Any]], uid: str | None) -> list[Observed]:
        """Observe every runc container plus the bundles on disk runc no longer knows (blocking I/O)."""
        observed: list[Observed] = []
        for cid, entry in entries.items():
            bundle = Path(entry["bundle"]) if entry.get("bundle") else None
            ann = entry.get("annotations") or self._bundle_annotations(cid, bundle)
            if ANN_KIND not in ann or (uid is not None and ann.get(ANN_POD_UID) != uid):
                continue
            if bundle is not None:
                self.bundles[cid] = bundle
            self.handlers[cid] = entry.get("_handler") or ann.get(ANN_RUNTIME_HANDLER) or "runc"
            observed.append(self.observe_bundle(cid, ann, entry, bundle))
        observed.extend(self._scan_orphan_bundles(entries, uid))
        if uid is None:
            # A container gone without remove_container (its bundle removed by hand) takes its message and its
            # OOM check along: over a year of restarts, what is kept per container id must not only grow.
            seen = {o.id for o in observed}
            for cid in [c for c in list(self.messages) if c not in seen]:
                self.messages.pop(cid, None)
            for cid in [c for c in list(self.oom_checked) if c not in seen]:
                self.oom_checked.discard(cid)
            for cid in [c for c in list(self.annotations) if c not in entries]:
                self.annotations.pop(cid, None)
        return observed

    def _bundle_annotations(self, cid: str, bundle: Path | None) -> dict[str, str]:
        """The annotations of a container whose listing lacks them (crun's `list` prints none; `state` does),
        from its bundle's config.json: {} when it cannot be read (being created or removed right now)."""
        known = self.annotations.get(cid)
        if known is not None:
            return known
        if bundle is None:
            return {}
        try:
            ann = json.loads((bundle / bl.CONFIG).read_bytes()).get("annotations") or {}
        except (OSError, ValueError, AttributeError):
            return {}
        if ANN_KIND in ann:
            self.annotations[cid] = ann
        return ann

    def _scan_orphan_bundles(self, entries: Mapping[str, Mapping[str, Any]], uid: str | None) -> list[Observed]:
        """The bundles of the pods' dirs that `runc list` did not name (sandboxes without a process, and
        containers whose runc state is gone: released, or a reboot)."""
        observed: list[Observed] = []
        pods_dir = self.paths.pods_dir
        uid_dirs = [pods_dir / uid] if uid is not None else (sorted(pods_dir.iterdir()) if pods_dir.is_dir() else [])
        for uid_dir in uid_dirs:
            try:
                bundles = bl.PodLayout(uid_dir).bundles()
            except FileNotFoundError:
                continue
            for bundle in bundles:
                try:
                    cid = (bundle / bl.ID_FILE).read_text().strip()
                    if not cid or cid in entries:
                        continue
                    config = json.loads((bundle / bl.CONFIG).read_text())
                except (OSError, ValueError):
                    # A bundle being created or removed right now; the next relist sees it settled.
                    continue
                ann = config.get("annotations") or {}
                if ANN_KIND not in ann:
                    continue
                self.bundles[cid] = bundle
                self.handlers[cid] = ann.get(ANN_RUNTIME_HANDLER) or "runc"
                observed.append(self.observe_bundle(cid, ann, None, bundle))
        return observed
