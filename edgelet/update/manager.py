"""The agent's side of self-update: finds releases on the card, stages and swaps them, and judges its own trial.

At start `begin` reads the trial record (`decide.resolve_trial`): a rollback
that happened (the launcher's, or a trial agent's) is recorded with its
reason; a trial of this very release makes `run` judge it. `run` then
judges the trial if there is one (`decide.trial_verdict` once a second:
commit, or swap `current` back and exit so that systemd starts the previous
release) and watches `<card>/update/` for `edgelet-*.tar.xz` releases with
their signatures beside them. An accepted release is staged
(`stage.stage_release`), the pods' container ids and pids are written, the
trial record written, `current` swapped, and the agent stops itself (pods
keep running: the unit's `KillMode=process`) so that the launcher starts the
new release on trial.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from edgelet.events import EventRecorder, InvolvedObject
from edgelet.trust.keys import TrustedKeys
from edgelet.trust.verify import read_signature_beside
from edgelet.update import ARCHIVE_SUFFIX, DEFAULT_MAX_ATTEMPTS, DEFAULT_TRIAL_DEADLINE
from edgelet.update.decide import (
    ABANDONED,
    COMMIT,
    ROLLBACK,
    ROLLED_BACK,
    TRIAL,
    Candidate,
    PodInstance,
    TrialObservation,
    TrialRecord,
    acceptance_problem,
    resolve_trial,
    settle_step,
    staging_retry_delay,
    trial_verdict,
)
from edgelet.update.errors import StagingError, UpdateError
from edgelet.update.fetch import UrlReleases
from edgelet.update.release import ReleaseInfo, own_arch, release_number
from edgelet.update.stage import (
    ENV_RELEASE_DIR,
    Staged,
    current_target,
    off_reason,
    prune_releases,
    read_release,
    remove_interrupted,
    stage_release,
    swap_current,
)
from edgelet.update.store import COMMITTED, REFUSED, STARTED, UpdateStore
from edgelet.update.store import ROLLED_BACK as H_ROLLED_BACK
from edgelet.util.clock import Clock, read_boot_id
from edgelet.util.crashpoint import crash_point
from edgelet.util.log import get_logger

log = get_logger(__name__)

# Before a swap: the old agent's containers unchanged this long (none being started), waited for at most
# SETTLE_LIMIT (a crash-looping pod never settles, and must not keep a device from its updates).
SETTLE_QUIET = 5.0
SETTLE_LIMIT = 300.0
SCAN_PERIOD = 10.0  # seconds between two looks at the card's update folder (a stat of each file), besides inotify
SETTLE = 2.0  # a file changed this recently may still be being copied: looked at again after it settles
TRIAL_PERIOD = 1.0

STARTED_REASON = "UpdateStarted"
COMMITTED_REASON = "UpdateCommitted"
ROLLED_BACK_REASON = "UpdateRolledBack"
REFUSED_REASON = "UpdateRefused"


@dataclass(frozen=True)
class AgentView:
    """What the trial needs to see of the agent, as callables the app hands in."""

    pods: Callable[[], dict[str, PodInstance] | None]  # running containers after the first full sync, else None
    healthz: Callable[[], Awaitable[bool]]
    lease_link: Callable[[], bool]  # this agent has an apiserver link (a kubeconfig)
    lease_renewed_since: Callable[[float], bool]  # a Lease renewal at or after this wall time
    lease_live: Callable[[], bool]  # this agent renewed its Lease lately: it reaches the apiserver now


class UpdateManager:
    def __init__(
        self,
        *,
        store: UpdateStore,
        releases_dir: Path,
        current: Path,
        keys: TrustedKeys | None,
        card_dir: Path | None,
        clock: Clock,
        events: EventRecorder,
        node: str,
        view: AgentView,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        deadline: float = DEFAULT_TRIAL_DEADLINE,
        arch: str | None = None,
        restart: Callable[[], None] | None = None,
        environ: dict[str, str] | None = None,
        url_source: UrlReleases | None = None,
        url_period: float = 20.0,
    ) -> None:
        self.url_source = url_source
        self.url_period = url_period
        self.store = store
        self.releases_dir = releases_dir
        self.current = current
        self.keys = keys
        self.card_dir = card_dir
        self.clock = clock
        self.events = events
        self.node = node
        self.view = view
        self.max_attempts = max_attempts
        self.deadline = deadline
        self.arch = arch or own_arch()
        self._restart = restart or (lambda: os.kill(os.getpid(), signal.SIGTERM))
        env = os.environ if environ is None else environ
        # Absolute: the .deb's `current` is relative (releases/N), and the trial record compares directories.
        self.running_dir = env.get(ENV_RELEASE_DIR) or current_target(current, absolute=True)
        info = read_release(Path(self.running_dir)) if self.running_dir else None
        self.running: ReleaseInfo | None = info
        self.running_version = info.version if info else _package_version()
        self.trial: TrialRecord | None = None
        self.phase = "idle"  # idle | trial | applying | restarting
        self.last_problem = ""
        self._seen: dict[str, tuple[int, int]] = {}
        # Releases whose staging failed here (not refused): name -> (failures, when to try again).
        self._failed: dict[str, tuple[int, float]] = {}
        self._started = clock.monotonic()
        self._started_wall = clock.now()

    # --- what is reported ---

    @property
    def label(self) -> str:
        """The running release's version as people read it (the Node's kubeletVersion)."""
        from edgelet import __version__

        return self.running.label if self.running is not None and self.running.label else __version__

    def off_reason(self) -> str:
        """Why updates are off ("" when they are on)."""
        return off_reason(self.keys is not None, self.current)

    def status(self) -> dict[str, Any]:
        trial = self.trial
        return {
            "version": self.running_version,
            "label": self.running.label if self.running else "",
            "release_dir": self.running_dir,
            "phase": self.phase,
            "updates": self.off_reason() or "on",
            "trial": None
            if trial is None
            else {"version": trial.version, "previous": trial.previous, "attempts": trial.attempts},
            "last_problem": self.last_problem,
        }

    def outcomes(self) -> tuple[dict[str, int], bool]:
        """How many updates ended each way (from the history: across restarts), and whether a trial runs."""
        return self.store.outcome_counts(), self.phase == "trial"

    def condition(self) -> dict[str, str] | None:
        """The Node condition while a trial runs (None otherwise)."""
        if self.trial is None or self.phase != "trial":
            return None
        return {
            "type": "EdgeletUpdateTrial",
            "status": "True",
            "reason": "TrialRunning",
            "message": f"edgelet {self.trial.version} runs on trial (previous {self.trial.previous_version})",
        }

    def _event(self, warning: bool, reason: str, message: str) -> None:
        obj = InvolvedObject(kind="Node", name=self.node)
        (self.events.warning if warning else self.events.normal)(obj, reason, message)

    # --- start ---

    def begin(self) -> None:
        """Read the trial record left by the previous start and act on what it says (before the sync loop)."""
        if left := remove_interrupted(self.releases_dir):
            log.info("Removed what an interrupted staging or download left", paths=[str(p) for p in left])
        record = self.store.trial()
        what = resolve_trial(record, self.running_dir)
        if record is None:
            return
        if what == TRIAL:
            self.trial, self.phase = record, "trial"
            log.info("Running on trial", version=record.version, attempts=record.attempts, previous=record.previous)
            return
        if what == ROLLED_BACK:
            reason = record.reason or f"stopped after {record.attempts} start(s) without a commit"
            self.store.append(
                {"time": self.clock.now(), "version": record.version, "outcome": H_ROLLED_BACK, "reason": reason}
            )
            self.store.clear_trial()
            log.warning("An update was rolled back", version=record.version, reason=reason)
            self._event(
                True, ROLLED_BACK_REASON, f"edgelet {record.version} rolled back to {self.running_version}: {reason}"
            )
            # The bad release goes; the running one and the one it replaced stay (`edgelet update rollback`).
            prune_releases(self.releases_dir, {self.running_dir, self._previous_of(self.running_version)})
        elif what == ABANDONED:
            log.info("An update was stopped before its swap; forgetting it", version=record.version)
            self.store.clear_trial()

    def _previous_of(self, version: int) -> str:
        """The release `version` replaced when it was committed ("" when the history does not say)."""
        for entry in reversed(self.store.history()):
            if entry.get("outcome") == COMMITTED and entry.get("version") == version:
                return str(entry.get("previous") or "")
        return ""

    # --- the loop ---

    async def run(self) -> None:
        if self.trial is not None:
            await self._judge_trial()
            if self.phase != "idle":
                return
        off = self.off_reason()
        if off:
            log.info("Self-update is off", reason=off)
            return
        sources = []
        if self.card_dir is not None:
            sources.append(asyncio.ensure_future(self._watch(self.card_dir / "update")))
        if self.url_source is not None:
            sources.append(asyncio.ensure_future(self._poll(self.url_source)))
        if not sources:
            return
        try:
            await asyncio.wait(sources, return_when=asyncio.FIRST_COMPLETED)  # one of them applied a release
        finally:
            for task in sources:
                task.cancel()

    async def _poll(self, source: UrlReleases) -> None:
        """Poll the URL every `url_period` (doubling up to 10 periods while downloads fail); returns once a
        release is applied."""
        failures = 0
        try:
            while True:
                if self._retry_due(source.url):
                    source.validators = {}  # the same release again: a 304 would hide it
                try:
                    path = await source.fetch()
                    failures = 0
                except UpdateError as exc:
                    failures += 1
                    self.last_problem = str(exc)
                    if failures == 1 or failures % 10 == 0:
                        log.warning("Cannot download the release", url=source.url, err=str(exc), failures=failures)
                    path = None
                if path is not None:
                    applied = await self._try(path, name=source.url)
                    try:
                        if source.url in self._failed:
                            source.forget()
                        else:
                            source.remember()
                    except OSError as exc:
                        log.warning("Cannot keep the release URL's validators", url=source.url, err=str(exc))
                    if applied:
                        return
                await self.clock.sleep(
                    self.url_period * min(10, 2 ** max(0, failures - 1)) if failures else self.url_period
                )
        finally:
            await source.aclose()

    async def _watch(self, folder: Path) -> None:
        """Look at `folder` at start, at every change inotify reports and every SCAN_PERIOD (a card mounted
        later, a missed event); returns once a release is applied."""
        from edgelet.util.watch import stop_watching, watch_directory

        wake = asyncio.Event()
        watcher = None
        try:
            while True:
                if watcher is None and folder.is_dir():
                    try:
                        watcher = watch_directory(folder, wake)
                    except OSError as exc:
                        log.warning(
                            "Cannot watch the update folder; looking every period", path=str(folder), err=str(exc)
                        )
                wake.clear()
                pending = False
                for path in self._new_releases(folder):
                    if path is None:
                        pending = True
                    elif await self._try(path):
                        return
                await self._wait(wake, SETTLE if pending else SCAN_PERIOD)
        finally:
            if watcher is not None:
                await stop_watching(watcher)

    async def _wait(self, wake: asyncio.Event, seconds: float) -> None:
        sleep = asyncio.ensure_future(self.clock.sleep(seconds))
        woken = asyncio.ensure_future(wake.wait())
        try:
            await asyncio.wait({sleep, woken}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleep.cancel()
            woken.cancel()

    async def _judge_trial(self) -> None:
        assert self.trial is not None
        before, lease_needed = self.store.snapshot(read_boot_id())
        while True:
            now = self.view.pods()
            obs = TrialObservation(
                elapsed=self.clock.monotonic() - self._started,
                before=before,
                now=now,
                healthz=await self.view.healthz(),
                lease_needed=lease_needed and self.view.lease_link(),
                lease_renewed=self.view.lease_renewed_since(self._started_wall),
            )
            verdict, why = trial_verdict(obs, self.deadline)
            if verdict == COMMIT:
                self.commit()
                return
            if verdict == ROLLBACK:
                self.rollback(why)
                return
            await self.clock.sleep(TRIAL_PERIOD)

    def commit(self) -> None:
        trial = self.trial
        assert trial is not None
        seconds = round(self.clock.now() - trial.started, 3) if trial.started else None
        history = self.store.history()
        # A commit killed before it removed the record is done again at the next start: recorded once.
        if not history or (history[-1].get("outcome"), history[-1].get("version")) != (COMMITTED, trial.version):
            self._record_commit(trial, seconds)
        crash_point("update.commit")
        self.store.clear_trial()
        prune_releases(self.releases_dir, {trial.target, trial.previous})
        self.trial, self.phase = None, "idle"
        log.info("Update committed", version=trial.version, previous=trial.previous_version, seconds=seconds)
        self._event(False, COMMITTED_REASON, f"edgelet {trial.version} committed (previous {trial.previous_version})")

    def _record_commit(self, trial: TrialRecord, seconds: float | None) -> None:
        self.store.append(
            {
                "time": self.clock.now(),
                "version": trial.version,
                "outcome": COMMITTED,
                "previous": trial.previous,
                "previous_version": trial.previous_version,
                "seconds": seconds,
            }
        )

    def rollback(self, reason: str) -> None:
        """The trial failed: `current` back to the previous release, the outcome written, and this agent stops."""
        trial = self.trial
        assert trial is not None
        log.warning("Trial failed: rolling back", version=trial.version, reason=reason)
        swap_current(self.current, trial.previous)
        crash_point("update.rollback")
        self.store.write_trial(replace(trial, outcome="rolled-back", reason=reason))
        self.phase = "restarting"
        self._restart()

    # --- finding and applying releases ---

    def _new_releases(self, folder: Path) -> list[Path | None]:
        """Archives in `folder` not looked at in this state (name, size, mtime) yet; None for one still settling
        (changed less than SETTLE ago: a copy in progress is not refused as a short archive)."""
        try:
            entries = sorted(folder.glob(f"edgelet-*{ARCHIVE_SUFFIX}"))
        except OSError:
            return []
        found: list[Path | None] = []
        for path in entries:
            try:
                st = path.stat()
                sig = max(
                    (os.stat(str(path) + s).st_mtime_ns for s in (".minisig", ".sig") if os.path.exists(str(path) + s)),
                    default=0,
                )
            except OSError:
                continue
            key = (st.st_size, st.st_mtime_ns ^ sig)
            if self._seen.get(str(path)) != key and self.clock.now() - max(st.st_mtime, sig / 1e9) < SETTLE:
                found.append(None)
                continue
            if self._seen.get(str(path)) != key or self._retry_due(str(path)):
                self._seen[str(path)] = key
                found.append(path)
        return found

    def _retry_due(self, name: str) -> bool:
        """Whether the release `name`, whose staging failed here, is due to be tried again (once per delay)."""
        failed = self._failed.get(name)
        if failed is None or self.clock.now() < failed[1]:
            return False
        self._failed[name] = (failed[0], float("inf"))  # until this try's own outcome
        return True

    def judge(self, info: ReleaseInfo, signed: int | None) -> str | None:
        return acceptance_problem(
            Candidate(info.version, info.arch, signed),
            arch=self.arch,
            running=self.running_version,
            rolled_back=self.store.rolled_back_versions(),
        )

    async def _try(self, path: Path, name: str = "") -> bool:
        """Stage and apply the release at `path` (`name`: where it came from, for messages; its path by default);
        True once the agent is stopping to start it."""
        assert self.keys is not None
        name = name or str(path)
        try:
            signature, signature_name = read_signature_beside(path, follow_symlinks=False)
            staged = await asyncio.to_thread(self._stage, path, name, signature, signature_name)
        except StagingError as exc:  # this device's disk, not the release: tried again later
            failures = self._failed.get(name, (0, 0.0))[0] + 1
            self._failed[name] = (failures, self.clock.now() + staging_retry_delay(failures))
            self._refused(name, exc)
            return False
        except UpdateError as exc:
            self._failed.pop(name, None)
            self._refused(name, exc)
            return False
        except Exception as exc:  # a release must never take the agent down: reported, and the next one is tried
            self._refused(name, exc)
            return False
        self._failed.pop(name, None)
        await self._settle()
        self.apply(staged)
        return True

    async def _settle(self) -> None:
        """Wait until the agent's pods have settled (`decide.settle_step`), so that the snapshot is whole."""
        start = self.clock.monotonic()
        last: dict[str, PodInstance] | None = None
        since: float | None = None
        while True:
            now = self.clock.monotonic()
            pods = self.view.pods()
            verdict, since = settle_step(
                pods, last, since, now, quiet=SETTLE_QUIET, waited=now - start, limit=SETTLE_LIMIT
            )
            if verdict == "go":
                return
            last = pods
            await self.clock.sleep(TRIAL_PERIOD)

    def _stage(self, path: Path, name: str, signature: bytes | None, signature_name: str) -> Staged:
        assert self.keys is not None
        with open(path, "rb") as f:
            return stage_release(
                f,
                signature,
                name=name,
                signature_name=signature_name,
                keys=self.keys,
                releases_dir=self.releases_dir,
                judge=self.judge,
                now=self.clock.now(),
            )

    def _refused(self, name: str, exc: Exception) -> None:
        self.last_problem = str(exc)
        if f"version {self.running_version} is not newer than the running version" in str(exc):
            log.info("Release not applied", release=name, reason=str(exc))  # the card still holds the one that runs
            return
        log.warning("Release refused", release=name, reason=str(exc))
        if any(e.get("release") == name and e.get("reason") == str(exc) for e in self.store.history()):
            # Reported when first refused: the card keeps old releases, and every start of the agent reads them
            # again (a write to the card and an event per boot otherwise).
            return
        self.store.append({"time": self.clock.now(), "release": name, "outcome": REFUSED, "reason": str(exc)})
        self._event(True, REFUSED_REASON, str(exc))

    def apply(self, staged: Staged) -> None:
        """Make a staged release current on trial and stop this agent so that the launcher starts it."""
        self.phase = "applying"
        pods = self.view.pods() or {}
        # The trial asks the new agent for a Lease only if this one reached the apiserver: a device whose link is
        # down (or whose kubeconfig names a server it never reached) would otherwise roll back every update.
        self.store.write_snapshot(read_boot_id(), pods, lease=self.view.lease_live())
        record = TrialRecord(
            version=staged.info.version,
            target=str(staged.path),
            previous=self.running_dir,
            previous_version=self.running_version,
            started=self.clock.now(),
        )
        self.store.write_trial(record)
        crash_point("update.swap")
        swap_current(self.current, staged.path)
        crash_point("update.trial")
        self.store.append(
            {
                "time": self.clock.now(),
                "version": staged.info.version,
                "outcome": STARTED,
                "key": staged.key_id,
                "bytes": staged.bytes_written,
            }
        )
        message = f"edgelet {staged.info.name} staged ({staged.bytes_written} bytes), starting it on trial"
        log.info("Update started", version=staged.info.version, key=staged.key_id, bytes=staged.bytes_written)
        self._event(False, STARTED_REASON, message)
        self.phase = "restarting"
        self._restart()


async def probe_healthz(host: str, port: int, timeout: float = 5.0) -> bool:
    """Whether GET /healthz on host:port answers 200 (True when the listener is off: nothing to ask)."""
    if port == 0:
        return True
    writer = None
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        writer.write(f"GET /healthz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), timeout)
        return line.split(b" ")[1:2] == [b"200"]
    except (OSError, TimeoutError, IndexError):
        return False
    finally:
        if writer is not None:
            writer.close()


def _package_version() -> int:
    from edgelet import __version__

    try:
        return release_number(__version__)
    except ValueError:
        return 0
