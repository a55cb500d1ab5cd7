"""Container log rotation as kubelet does it: rename the log, ask conmon to reopen it, gzip and prune older files.

Every `--container-log-monitor-interval` (sooner for a log growing fast, see
`logs.next_check_delay`) each instance's log is looked at; a log of
`--container-log-max-size` or more whose conmon still runs is renamed to
`<n>.log.<stamp>` and conmon is told through its control FIFO to reopen the
path (never copy-truncate, which loses what is written during the copy). At
most `--container-log-max-files` files stay per instance; all rotated files
but the newest are gzipped. What to do is decided by `logs.plan_rotation`
(pure); this module only carries it out.

The backstop is conmon's own `--log-size-max` (twice the rotation size):
when rotation falls behind (a flood between two checks, edgelet stopped)
conmon cuts the file by itself. conmon counts bytes since its last own cut,
not since the file was reopened, so that cut would fall at arbitrary points
of a file rotation already restarted and drop what it held. To keep that
from losing lines, the current file of a live log always has a second name,
a hard link under the rotated name it will get: conmon's cut then only
removes one of two names, and the bytes stay as a rotated file. Rotating
such a file is removing its current name. And because conmon's count runs
on across a reopen, its cut can come right after one, before a check could
name the new file: so the next file is made ahead. conmon reopens by opening
`<n>.log.tmp` and renaming it over the path; the rotator keeps that file
ready, empty and already under its rotated name (the newest), so the file
conmon writes next has its second name from its first byte. Readers skip
both links (`logs.instance_files`). conmon's cut runs on its own count, so it
can also come in the middle of a check: the spare's link is therefore only
renamed, never removed (once taken, it names what conmon writes), and a file
the path no longer names is not rotated.
"""

from __future__ import annotations

import asyncio
import errno
import gzip
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from edgelet import logs
from edgelet.runtime import conmon
from edgelet.runtime.bundle import PodLayout
from edgelet.runtime.layout import RuntimePaths
from edgelet.util.clock import Clock
from edgelet.util.log import get_logger

log = get_logger("edgelet.logrotation")

COMPRESS_LEVEL = 1  # cheap on a Pi's CPU; CRI text logs still shrink several times
MIN_CHECK_DELAY = 0.5  # seconds: how soon a flooding log is looked at again
_COMPRESS_TMP = logs.GZ_SUFFIX + logs.TMP_SUFFIX


def backstop_size(max_size: int) -> int:
    """conmon's --log-size-max for a rotation size: room for one rotation to be late by a whole file."""
    return 2 * max_size


def disk_bound(max_size: int, max_files: int) -> int:
    """The most bytes one instance's log files can hold at any moment, however fast it floods and however
    late the checks are: `max_files + 3` files of at most the backstop each.

    conmon never writes more than its `--log-size-max` to one file, so no file (rotated or current)
    exceeds the backstop. A check leaves at most `max_files - 1` rotated files besides the current
    file's link and the spare's; until the next check prunes, conmon's cuts can turn only those two
    linked files into more rotated ones (the file a third cut replaces has no second name and goes):
    `max_files + 2` files. One more while a check runs: the gzip copy of the file it compresses, or,
    when conmon cuts four times during one check, the spare that check made.
    """
    return (max_files + 3) * backstop_size(max_size)


@dataclass
class _Seen:
    size: int
    at: float  # monotonic
    ino: int | None  # the file seen; None after our rotation (the next one, which starts empty then)
    # What a whole check left with nothing more to do: the file (inode, size, mtime) and whether its conmon ran.
    settled: tuple[tuple[int, int, int], bool] | None = None


def _file_key(st: os.stat_result) -> tuple[int, int, int]:
    return st.st_ino, st.st_size, st.st_mtime_ns


class LogRotator:
    """Rotates every container's log under `paths.log_dir`; `run()` under the app's TaskGroup."""

    def __init__(
        self,
        paths: RuntimePaths,
        clock: Clock,
        *,
        max_size: int,
        max_files: int,
        interval: float,
        min_delay: float = MIN_CHECK_DELAY,
    ) -> None:
        self.paths = paths
        self.clock = clock
        self.max_size = max_size
        self.max_files = max_files
        self.interval = interval
        self.min_delay = min(min_delay, interval)
        self.rotations = 0  # counters for logs and the bench
        self.compressed_bytes = 0
        self.full_checks = 0  # instances looked at in full: an idle node's passes should add none
        self._seen: dict[Path, _Seen] = {}
        self._bundles: dict[Path, Path] = {}  # current log -> its container's bundle
        self._paths: dict[str, Path] = {}  # the walk's current logs, made once
        self._errors: dict[Path, str] = {}

    async def run(self) -> None:
        """Check all logs, then again after the shortest delay any log asked for; errors never stop it."""
        while True:
            delay = await asyncio.to_thread(self.check_all)
            await self.clock.sleep(delay)

    def check_all(self) -> float:
        """One pass over every instance's log; returns the seconds until the next pass is due."""
        delay = self.interval
        seen: set[Path] = set()
        for current in self._current_logs():
            seen.add(current)
            try:
                delay = min(delay, self.check(current))
                self._errors.pop(current, None)
            except OSError as exc:
                # Logged once per distinct error, not every pass: a read-only disk would flood the journal.
                if self._errors.get(current) != str(exc):
                    log.warning("Log rotation failed", path=str(current), err=str(exc))
                    self._errors[current] = str(exc)
        for gone in set(self._seen) - seen:
            del self._seen[gone]
        for gone in set(self._bundles) - seen:
            del self._bundles[gone]
        if len(self._paths) > len(seen):
            self._paths = {str(p): p for p in seen}
        return delay

    def _current_logs(self) -> list[Path]:
        """`<log_dir>/pods/<pod>/<container>/<n>.log` of every instance that has one (or rotated files).

        Walked with strings, each path made once while its log is there: on an idle node the walk is most
        of a pass, and pathlib's joins were most of the walk."""
        found: list[Path] = []
        for pod_dir in _subdirs(str(self.paths.log_dir / "pods")):
            for container_dir in _subdirs(pod_dir):
                for attempt in set(logs.container_attempts(container_dir)):
                    name = f"{container_dir}/{attempt}.log"
                    path = self._paths.get(name)
                    if path is None:
                        path = self._paths[name] = Path(name)
                    found.append(path)
        return found

    def _bundle(self, current: Path) -> Path:
        """The bundle of the container writing `current` (the pod log dir is `<ns>_<name>_<uid>`)."""
        bundle = self._bundles.get(current)
        if bundle is None:  # kept while the log is: a pass over idle logs builds no paths
            uid = current.parent.parent.name.rsplit("_", 1)[-1]
            attempt = int(current.name.split(".", 1)[0])
            bundle = self._bundles[current] = PodLayout(self.paths.pod_dir(uid)).container_dir(
                current.parent.name, attempt
            )
        return bundle

    def check(self, current: Path) -> float:
        """Carry out `plan_rotation` for one instance; returns when it wants to be looked at again.

        An instance a whole check left settled, whose file is the same and as long and whose conmon still
        runs (or still does not), needs nothing: only conmon changes its files (a write, a cut, a reopen all
        change the file the path names), and an idle node's logs are that, pass after pass."""
        before = self._seen.get(current)
        if before is not None and before.settled is not None:
            st = logs.stat_or_none(current)
            if st is not None and _file_key(st) == before.settled[0] and self._live(current) == before.settled[1]:
                return self._delay(current, st, settled=before.settled)
        return self._check_fully(current)

    def _live(self, current: Path) -> bool:
        fd = conmon.open_control(self._bundle(current))
        if fd is None:
            return False
        os.close(fd)
        return True

    def _check_fully(self, current: Path) -> float:
        self.full_checks += 1
        directory = current.parent
        attempt = int(current.name.split(".", 1)[0])
        names = os.listdir(directory)
        for name in names:
            if name.startswith(f"{attempt}.log.") and name.endswith(_COMPRESS_TMP):
                (directory / name).unlink(missing_ok=True)  # a compression a crash interrupted
        rotated = logs.rotated_names(names, attempt)
        spare = logs.spare_path(current)
        spare_link = logs.link_name(directory, rotated, logs.stat_or_none(spare))
        st = logs.stat_or_none(current)
        if st is None:
            return self.min_delay  # between a rename and conmon's reopen: look again soon
        link = logs.link_name(directory, rotated, st)
        others = [n for n in rotated if n not in (link, spare_link)]
        fd = conmon.open_control(self._bundle(current))
        try:
            plan = logs.plan_rotation(
                st.st_size, others, max_size=self.max_size, max_files=self.max_files, live=fd is not None
            )
            for name in plan.remove:
                (directory / name).unlink(missing_ok=True)
            for name in plan.compress:
                self._compress(directory / name)
            if fd is None:
                # No conmon, no reopen: nothing will take the spare.
                spare.unlink(missing_ok=True)
                if spare_link is not None:
                    (directory / spare_link).unlink(missing_ok=True)
                self._seen[current] = _Seen(st.st_size, self.clock.monotonic(), st.st_ino, (_file_key(st), False))
                return self.interval
            if plan.rotate and not logs.same_file(current, st):
                # conmon cut the file away since it was looked at (its own --log-size-max): the path names
                # the spare it took, fresh, with its own link. Nothing to rotate; the next check plans anew.
                self._ensure_spare(spare, spare_link, attempt, names)
                self._prune_surplus(current, attempt)
                return self.min_delay
            if plan.rotate:
                if link is None:
                    rotated_to = logs.rotated_name(attempt, names, self.clock.now())
                    os.rename(current, directory / rotated_to)
                    names.append(rotated_to)
                else:
                    current.unlink()  # its bytes stay under the link's name
                self._ensure_spare(spare, spare_link, attempt, names)  # what conmon opens next
                conmon.request_log_reopen(fd)
                self.rotations += 1
                # The next file starts empty now: its growth by the next check gives the rate at once,
                # rather than waiting a whole interval to learn it while conmon's cut stands in.
                self._seen[current] = _Seen(0, self.clock.monotonic(), None)
                self._prune_surplus(current, attempt)
                return self.min_delay  # soon: a reopen that found no spare leaves a file without its link
            if link is None:
                linked_to = logs.rotated_name(attempt, names, self.clock.now())
                os.link(current, directory / linked_to)
                names.append(linked_to)
            self._ensure_spare(spare, spare_link, attempt, names)  # for conmon's cut, which may come any time
            self._prune_surplus(current, attempt)
        finally:
            if fd is not None:
                os.close(fd)
        return self._delay(current, st, settled=(_file_key(st), True))

    def _prune_surplus(self, current: Path, attempt: int) -> None:
        """Remove, oldest first, the rotated files beyond `max_files - 1` that conmon's cuts added during
        this check, from a fresh listing: the plan was made from the listing at the start, and a cut
        since then turned the current file's link (or the spare's) into one more rotated file.

        Without it such a file stayed until the next check, while the two links made or kept now could
        take two more cuts: three backstop-sized files beside the kept ones instead of two.
        """
        directory = current.parent
        rotated = logs.rotated_names(os.listdir(directory), attempt)
        own = {
            logs.link_name(directory, rotated, logs.stat_or_none(current)),
            logs.link_name(directory, rotated, logs.stat_or_none(logs.spare_path(current))),
        }
        others = [n for n in rotated if n not in own]
        plan = logs.plan_rotation(0, others, max_size=self.max_size, max_files=self.max_files, live=True)
        for name in plan.remove:
            (directory / name).unlink(missing_ok=True)

    def _ensure_spare(self, spare: Path, spare_link: str | None, attempt: int, names: list[str]) -> None:
        """Make `<n>.log.tmp`, empty, under the newest rotated name, unless it is there: conmon's next
        reopen (ours or its cut) then writes a file that already has its second name.

        conmon may take the spare at any moment (its own cut renames it over the path), so the spare's
        link is only ever renamed, never removed: once taken, that link is the second name of the file
        conmon writes, and after the next reopen its only one.
        """
        directory = spare.parent
        rotated = logs.rotated_names(names, attempt)  # oldest first
        newest = rotated[-1] if rotated else None
        spare_st = logs.stat_or_none(spare)
        if spare_link is not None and spare_link == newest and spare_st is not None:
            return
        # Named after every other file, or readers would put what conmon writes to it before older lines.
        name = logs.rotated_name(attempt, names, self.clock.now())
        target = directory / name
        if spare_st is not None:
            try:
                if spare_link is not None:
                    os.rename(directory / spare_link, target)  # taken meanwhile or not, the file keeps a name
                else:
                    os.link(spare, target)  # a spare without its link (conmon's own, mid-reopen)
            except FileNotFoundError:
                return  # conmon took it already (renamed it over the path): the next check names it
            names.append(name)
            return
        # No spare: conmon took it (its link, if any, stays: it names what conmon writes). The new one is
        # made under its rotated name first, so it never exists without it.
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o640))
        try:
            os.link(target, spare)
        except FileExistsError:
            target.unlink()  # conmon is making one for a reopen of its own this very moment: the next check
            return
        names.append(name)

    def _delay(
        self, current: Path, st: os.stat_result, settled: tuple[tuple[int, int, int], bool] | None = None
    ) -> float:
        now = self.clock.monotonic()
        size = st.st_size
        before = self._seen.get(current)
        self._seen[current] = _Seen(size, now, st.st_ino, settled)
        if before is None or now <= before.at:
            return self.min_delay if size >= self.max_size // 2 else self.interval
        if before.ino is not None and before.ino != st.st_ino:
            # conmon cut the file since the last look (its backstop): rotation has fallen behind, and a
            # second cut before the next check would drop a whole file.
            return self.min_delay
        # A smaller file than last time was cut by conmon meanwhile: all of it is new.
        grown = size - before.size if size >= before.size else size
        return logs.next_check_delay(
            size, grown / (now - before.at), max_size=self.max_size, interval=self.interval, min_delay=self.min_delay
        )

    def _compress(self, path: Path) -> None:
        """gzip `path` to `path.gz` (through a temp file, so a crash leaves either whole) and remove it."""
        tmp = path.with_name(path.name + _COMPRESS_TMP)
        target = path.with_name(path.name + logs.GZ_SUFFIX)
        try:
            src = open(path, "rb")
        except FileNotFoundError:
            return
        with src:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o640)
            with (
                os.fdopen(fd, "wb") as raw,
                gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=COMPRESS_LEVEL, mtime=0) as gz,
            ):
                shutil.copyfileobj(src, gz, 1 << 20)
            self.compressed_bytes += src.tell()
        os.rename(tmp, target)
        path.unlink(missing_ok=True)


def _subdirs(path: str) -> list[str]:
    try:
        with os.scandir(path) as it:
            return [e.path for e in it if e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return []
    except OSError as exc:
        if exc.errno == errno.ENOTDIR:
            return []
        raise


def remove_logs(current: Path) -> None:
    """Remove every file of one container instance's log: the current file and its rotated files."""
    try:
        names = os.listdir(current.parent)
    except FileNotFoundError:
        return
    attempt = int(current.name.split(".", 1)[0])
    for name in names:
        if (
            name == current.name
            or name.startswith(f"{attempt}.log.")
            and (
                logs.rotated_stamp(name.removesuffix(_COMPRESS_TMP), attempt) is not None
                or name == f"{attempt}.log{logs.TMP_SUFFIX}"
            )
        ):
            (current.parent / name).unlink(missing_ok=True)


def remove_pod_logs(log_dir: Path, uid: str) -> None:
    """Remove the log dirs of pod `uid` (`pods/<ns>_<name>_<uid>`) and every link under `containers/` into
    them, dangling ones included."""
    pods = log_dir / "pods"
    dirs = [
        pod_dir
        for pod_dir in (pods.glob(f"*_{uid}") if pods.is_dir() else [])
        if pod_dir.name.rsplit("_", 1)[-1] == uid
    ]
    links = log_dir / "containers"
    for entry in list(links.iterdir()) if links.is_dir() else []:
        # A link points at pods/<ns>_<name>_<uid>/<container>/<n>.log.
        if entry.is_symlink() and Path(os.readlink(entry)).parent.parent.name.rsplit("_", 1)[-1] == uid:
            entry.unlink(missing_ok=True)
    for pod_dir in dirs:
        shutil.rmtree(pod_dir)
