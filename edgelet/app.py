"""Wires the real components together, owns the task group, signals and shutdown, and --runonce."""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import TYPE_CHECKING, TextIO

from edgelet.util.clock import RealClock
from edgelet.util.log import configure, get_logger

if TYPE_CHECKING:
    from edgelet.settings import Settings

log = get_logger("edgelet")

class ConfigurationError(Exception):
    """The settings ask for something this machine does not have (the CLI exits 1 with the message)."""


RUNONCE_FIRST_POLL = 1.0  # kubelet runonce: 1 s, doubling
RUNONCE_MAX_POLL = 8.0


class Agent:
    """Every long-lived component of a running edgelet, built from Settings."""

    def __init__(self, settings: "Settings") -> None:
        from edgelet.images.importdir import ImportDir
        from edgelet.images.store import ImageStore
        from edgelet.pleg import Pleg
        from edgelet.runtime.runc_runtime import RuncRuntime
        from edgelet.sources.file import FileSource
        from edgelet.status.publisher import StatusPublisher
        from edgelet.sync.loop import SyncLoop
        from edgelet.sync.syncpod import Syncer
        from edgelet.sync.workers import PodWorkers
        from edgelet.util.backoff import Backoff

        self.settings = settings
        self.clock = RealClock()
        paths = settings.runtime_paths()
        self.paths = paths
        for d in (paths.root_dir, paths.run_dir, paths.log_dir):
            d.mkdir(parents=True, exist_ok=True)
        self.images = ImageStore(paths.root_dir / "images")
        self.import_dir = ImportDir(settings.import_dir, self.images, paths.root_dir / "images" / "imported.json")
        pause = None
        if settings.pod_infra_container_image:
            pause = self.images.get(settings.pod_infra_container_image)
            if pause is None:
                raise ConfigurationError(
                    f"--pod-infra-container-image {settings.pod_infra_container_image}: not in the image store "
                    "(import it first)"
                )
        self.runtime = RuncRuntime(
            paths, runtime_bin=settings.runtime, conmon_bin=settings.conmon, pause_image=pause, clock=self.clock
        )
        from edgelet.events import EventRecorder, events_path

        self.events = EventRecorder(self.clock, events_path(paths.run_dir))
        self.publisher = StatusPublisher(paths.root_dir, settings.node_name, self.clock)
        self.pleg = Pleg(self.runtime, paths.exit_dir)
        self.backoff = Backoff()
        self.syncer = Syncer(self.runtime, self.images, self.backoff, self.clock, publish=self.publisher.update,
                              events=self.events)
        self.workers = PodWorkers(self.syncer)
        self.loop = SyncLoop(
            workers=self.workers,
            publisher=self.publisher,
            clock=self.clock,
            expected_sources={"file"} | ({"http"} if settings.manifest_url else set()),
            runtime_uids=self.pleg.uids,
            events=self.events,
        )
        self.workers._on_result = self.loop.on_result
        self.workers._on_terminated = self.loop.on_terminated
        self.file_source = FileSource(
            settings.pod_manifest_path, settings.node_name, settings.file_check_frequency, self.clock
        )
        self.http_source = None
        if settings.manifest_url:
            from edgelet.sources.http import HttpSource

            self.http_source = HttpSource(
                settings.manifest_url,
                settings.node_name,
                headers=settings.manifest_url_header,
                check_frequency=settings.http_check_frequency,
                clock=self.clock,
                cache_dir=paths.root_dir / "sources",
                ca_file=settings.manifest_url_ca,
            )

    async def run(self) -> None:
        """Run until cancelled; cancellation stops edgelet and leaves every pod running."""
        await asyncio.to_thread(self.import_dir.scan)
        await self.pleg.relist()  # adopt what runs before the first config arrives
        log.info("edgelet started", node=self.settings.node_name, manifests=str(self.settings.pod_manifest_path),
                 adopted=len(self.pleg.uids()))
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self.loop.run(), name="syncloop")
                tg.create_task(self.pleg.run(self.loop.emit_lifecycle), name="pleg")
                tg.create_task(self.publisher.run(), name="status")
                tg.create_task(self.events.run(), name="events")
                tg.create_task(self.file_source.run(self.loop.emit_config), name="source-file")
                if self.http_source is not None:
                    tg.create_task(self.http_source.run(self.loop.emit_config), name="source-http")
                tg.create_task(self.import_dir.run(self.loop.resync_all), name="image-import")
        finally:
            await self.workers.shutdown()
            self.publisher.flush()
            self.events.flush()

    async def run_once(self, out: TextIO) -> int:
        """--runonce: read every source once, run the pods, wait until they run or completed, report."""
        timeout = self.settings.runonce_timeout
        deadline = self.clock.monotonic() + timeout
        await asyncio.to_thread(self.import_dir.scan)
        await self.pleg.relist()
        self.loop.apply_snapshot(await self.file_source.scan_once())
        if self.http_source is not None:
            try:
                self.loop.apply_snapshot(await self.http_source.scan_once())
            finally:
                await self.http_source.aclose()
        # Everything else the runtime holds is left over from an earlier configuration.
        self.loop.housekeeping()
        delay = RUNONCE_FIRST_POLL
        while True:
            await self.workers.wait_idle()
            verdict = runonce_verdict(self.loop.desired(), self.publisher)
            if verdict.done or self.clock.monotonic() >= deadline:
                break
            await asyncio.sleep(min(delay, max(0.0, deadline - self.clock.monotonic())))
            delay = min(delay * 2, RUNONCE_MAX_POLL)
            for pod in self.loop.desired().values():
                self.workers.sync(pod)
        self.publisher.flush()
        self.events.flush()
        print_runonce_summary(self.publisher, self.loop.config, out)
        if verdict.failed or not verdict.done:
            bad = verdict.failed or verdict.pending
            print(f"runonce: {len(bad)} pod(s) not running or completed: {', '.join(bad)}"
                  + ("" if verdict.done else f" (gave up after {timeout:g}s)"), file=out)
            return 1
        return 0


class RunonceVerdict:
    def __init__(self, failed: list[str], pending: list[str]) -> None:
        self.failed = failed
        self.pending = pending
        self.done = not pending

    def __repr__(self) -> str:
        return f"RunonceVerdict(failed={self.failed}, pending={self.pending})"


def runonce_verdict(desired: dict, publisher) -> RunonceVerdict:
    """A pod is done when it Succeeded, or every regular container runs; Failed is final."""
    failed, pending = [], []
    for uid, pod in desired.items():
        name = f"{pod.metadata.namespace}/{pod.metadata.name}"
        entry = publisher.get(uid)
        if entry is None:
            pending.append(name)
            continue
        status = entry.status
        if status.phase == "Failed":
            failed.append(name)
        elif status.phase == "Succeeded":
            continue
        else:
            statuses = status.container_statuses or []
            running = [cs for cs in statuses if cs.state is not None and cs.state.running is not None]
            completed = [
                cs for cs in statuses
                if cs.state is not None and cs.state.terminated is not None and cs.state.terminated.exit_code == 0
                and pod.spec.restart_policy != "Always"
            ]
            if len(running) + len(completed) < len(pod.spec.containers):
                pending.append(name)
    return RunonceVerdict(failed, pending)


def print_runonce_summary(publisher, config, out: TextIO) -> None:
    rows = [("NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "MESSAGE")]
    for e in sorted(publisher.entries(), key=lambda e: (e.row.namespace, e.row.name)):
        r = e.row
        rows.append((r.namespace, r.name, r.ready, r.status, str(r.restarts), r.message[:80]))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip(), file=out)
    problems = list(config.rejected) + [e for errs in config.errors.values() for e in errs]
    for p in problems:
        print(f"rejected: {getattr(p, 'origin', '')}: {p.message}", file=out)


def _set_process_name() -> None:
    try:
        import prctl

        prctl.set_name("edgelet")
    except (ImportError, OSError):
        pass


async def _main(settings: "Settings") -> int:
    agent = Agent(settings)
    loop = asyncio.get_running_loop()
    if settings.runonce:
        return await agent.run_once(sys.stdout)
    task = asyncio.current_task()
    stopping = False

    def _stop(signame: str) -> None:
        nonlocal stopping
        if not stopping:
            stopping = True
            log.info("Stopping edgelet; pods keep running", signal=signame)
            task.cancel()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, _stop, sig.name)
    try:
        await agent.run()
    except asyncio.CancelledError:
        if not stopping:
            raise
    return 0


def run_agent(settings: "Settings") -> int:
    """Entry point for the CLI: run the agent (or --runonce) on uvloop; returns the exit status."""
    configure(settings.verbosity)
    _set_process_name()
    try:
        import uvloop
    except ImportError:
        return asyncio.run(_main(settings))
    return uvloop.run(_main(settings))
