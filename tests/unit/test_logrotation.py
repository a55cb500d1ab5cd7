"""Log rotation: the pure decisions (tables), reading across rotated files, following across a rotation,
and the rotator against a conmon stand-in (a FIFO the test reads) on a temp dir."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from edgelet import logs
from edgelet.runtime import conmon
from edgelet.runtime.layout import RuntimePaths
from edgelet.runtime.logrotation import LogRotator, backstop_size, disk_bound, remove_logs
from edgelet.util.clock import FakeClock

T = "2024-05-01T10:00:00.000000000Z"
R = [f"0.log.20240501-10000{i}.000000" for i in range(6)]  # rotated names, oldest first


def lines(start: int, stop: int) -> bytes:
    return b"".join(f"{T} stdout F line-{i}\n".encode() for i in range(start, stop))


def shown(start: int, stop: int) -> bytes:
    return b"".join(f"line-{i}\n".encode() for i in range(start, stop))


# ---------------------------------------------------------------- decisions


@pytest.mark.parametrize(
    "size, rotated, max_files, live, expected",
    [
        # Small: nothing to do.
        (10, [], 5, True, logs.RotationPlan()),
        # Big and live: rotate; nothing older to compress yet.
        (100, [], 5, True, logs.RotationPlan(rotate=True)),
        # Big but nobody writes it (conmon gone): kubelet rotates running containers only.
        (100, [], 5, False, logs.RotationPlan()),
        # Rotating makes the newest rotated file the second newest: it is compressed.
        (100, [R[0]], 5, True, logs.RotationPlan(compress=(R[0],), rotate=True)),
        # Not rotating: the newest rotated file stays plain.
        (10, [R[0], R[1]], 5, True, logs.RotationPlan(compress=(R[0],))),
        (10, [R[0] + ".gz", R[1]], 5, True, logs.RotationPlan()),
        # Room for the rotated file to come: max_files counts the current file.
        (
            100,
            [R[0] + ".gz", R[1] + ".gz", R[2] + ".gz", R[3]],
            5,
            True,
            logs.RotationPlan(remove=(R[0] + ".gz",), compress=(R[3],), rotate=True),
        ),
        (
            100,
            [R[i] + ".gz" for i in range(5)] + [R[5]],
            3,
            True,
            logs.RotationPlan(remove=tuple(R[i] + ".gz" for i in range(5)), compress=(R[5],), rotate=True),
        ),
        # Not rotating keeps max_files - 1 rotated files (a conmon cut may have added one).
        (10, [R[0] + ".gz", R[1] + ".gz", R[2]], 3, True, logs.RotationPlan(remove=(R[0] + ".gz",))),
        # An exited instance is pruned and compressed all the same.
        (10, [R[0], R[1], R[2]], 3, False, logs.RotationPlan(remove=(R[0],), compress=(R[1],))),
        # An interrupted compression: the plain twin goes, the archive counts.
        (10, [R[0], R[0] + ".gz", R[1]], 5, True, logs.RotationPlan(remove=(R[0],))),
    ],
)
def test_plan_rotation(size, rotated, max_files, live, expected):
    assert logs.plan_rotation(size, rotated, max_size=100, max_files=max_files, live=live) == expected


@pytest.mark.parametrize("max_files", range(2, 8))
def test_plan_rotation_never_keeps_more_than_max_files(max_files):
    rotated: list[str] = []
    for i in range(30):
        plan = logs.plan_rotation(100, rotated, max_size=100, max_files=max_files, live=True)
        rotated = [n for n in rotated if n not in plan.remove]
        rotated = [n + ".gz" if n in plan.compress else n for n in rotated]
        rotated.append(logs.rotated_name(0, rotated, 1_700_000_000 + i))
        assert len(rotated) + 1 <= max_files
        assert all(n.endswith(".gz") for n in rotated[:-1]) and not rotated[-1].endswith(".gz")


@pytest.mark.parametrize(
    "existing, now, expected",
    [
        ([], 1714557600.25, "3.log.20240501-100000.250000"),
        # The clock stepped back (or two rotations within a microsecond): still newer than the newest.
        (["3.log.20240501-100000.250000.gz"], 1714557000.0, "3.log.20240501-100000.250001"),
        (["3.log.20240501-100000.250000"], 1714557600.25, "3.log.20240501-100000.250001"),
        # Another instance's names do not matter.
        (["2.log.20990101-000000.000000"], 1714557600.0, "3.log.20240501-100000.000000"),
    ],
)
def test_rotated_name_sorts_by_age(existing, now, expected):
    assert logs.rotated_name(3, existing, now) == expected


@pytest.mark.parametrize(
    "size, rate, expected",
    [
        (0, 0.0, 10.0),  # quiet: once per interval
        (0, 10.0, 10.0),  # slow: would take 10 s to fill, capped at the interval
        (50, 100.0, 0.5),  # due in half a second
        (0, 1e9, 0.25),  # a flood: as often as allowed
        (150, 100.0, 0.25),  # already over (conmon's cut is the backstop)
    ],
)
def test_next_check_delay(size, rate, expected):
    assert logs.next_check_delay(size, rate, max_size=100, interval=10.0, min_delay=0.25) == expected


def test_backstop_leaves_room_for_one_late_rotation():
    assert backstop_size(10 * 1024 * 1024) == 20 * 1024 * 1024
    # The defaults (10Mi x 5): eight files of the backstop at the very most, whatever the flood.
    assert disk_bound(10 * 1024 * 1024, 5) == 160 * 1024 * 1024


# ---------------------------------------------------------------- reading across rotated files


def _instance(tmp_path: Path) -> Path:
    d = tmp_path / "pods" / "default_web_uid1" / "app"
    d.mkdir(parents=True)
    (d / (R[0] + ".gz")).write_bytes(gzip.compress(lines(0, 10)))
    (d / R[1]).write_bytes(lines(10, 20))
    current = d / "0.log"
    current.write_bytes(lines(20, 25) + f"{T} stdout P unfin".encode())
    os.link(current, d / R[2])  # the current file's own second name: not a separate file
    (d / "1.log").write_bytes(lines(100, 101))  # another instance
    return current


@pytest.mark.parametrize(
    "tail, expected",
    [
        (None, shown(0, 25)),
        (3, shown(22, 25)),
        (5, shown(20, 25)),
        (7, shown(18, 25)),
        (15, shown(10, 25)),
        (22, shown(3, 25)),
        (100, shown(0, 25)),
        (0, b""),
    ],
)
def test_open_log_reads_across_rotated_files(tmp_path, tail, expected):
    current = _instance(tmp_path)
    data, cursor = logs.open_log(current, tail=tail)
    cursor.close()
    assert data == expected
    assert logs.read_log(current, tail=tail)[0] == expected


def test_instance_files_skip_the_current_files_link_and_other_instances(tmp_path):
    current = _instance(tmp_path)
    assert [p.name for p in logs.instance_files(current)] == [R[0] + ".gz", R[1], "0.log"]
    assert sorted(logs.container_attempts(current.parent)) == [0, 1]


def test_attempts_count_while_the_current_file_is_renamed_away(tmp_path):
    current = _instance(tmp_path)
    current.unlink()  # a rotation between its rename and conmon's reopen
    assert logs.find_log_file(current.parent) == current.parent / "1.log"
    assert logs.find_log_file(current.parent, previous=True) == current
    # The newest rotated file is the one still being written: it is read and followed.
    data, cursor = logs.open_log(current, tail=2)
    assert data == shown(23, 25)
    with open(tmp_path / "pods" / "default_web_uid1" / "app" / R[2], "ab") as w:
        w.write(b"ished\n" + f"{T} stdout F !\n".encode())  # the raw line completed, a partial entry ended
    assert cursor.read_new() == b"unfinished!\n"
    cursor.close()


class _Conmon:
    """What conmon does to its log: appends to the file it has open; on reopen, starts a new file at the path."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.f = open(path, "ab", buffering=0)
        self.n = 0

    def write(self, count: int) -> None:
        self.f.write(lines(self.n, self.n + count))
        self.n += count

    def reopen(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        self.f.close()
        self.f = open(tmp, "wb", buffering=0)
        os.rename(tmp, self.path)


def test_follow_across_rotations_misses_and_repeats_nothing(tmp_path):
    d = tmp_path / "c"
    d.mkdir()
    current = d / "0.log"
    w = _Conmon(current)
    w.write(5)
    data, cursor = logs.open_log(current)
    got = [data]
    stamps = iter(range(1_700_000_000, 1_800_000_000))
    for step in range(12):
        w.write(3)
        if step % 2:
            got.append(cursor.read_new())
        # Rename away, write more to the renamed file, then reopen: as a rotation with conmon.
        os.rename(current, d / logs.rotated_name(0, os.listdir(d), next(stamps)))
        w.write(2)
        if step % 3 == 0:
            got.append(cursor.read_new())  # between the rename and the reopen
        w.reopen()
        w.write(1)
        if step % 4 == 0:
            # Read only every fourth round: a follower several rotations behind reads the files between.
            got.append(cursor.read_new())
    w.write(4)
    while chunk := cursor.read_new():
        got.append(chunk)
    cursor.close()
    w.f.close()
    assert b"".join(got) == shown(0, w.n)


def test_a_read_racing_a_rotation_misses_nothing(tmp_path, monkeypatch):
    """A rotation and conmon's reopen between opening the current file and listing the instance's files:
    neither the read (`edgelet logs`, the API without follow) nor the follower after it misses the file
    that was current a moment ago."""
    d = tmp_path / "c"
    d.mkdir()
    current = d / "0.log"
    w = _Conmon(current)
    w.write(5)
    real = logs.instance_files
    rotated: list[bool] = []

    def list_then_rotate(path: Path) -> list[Path]:
        files = real(path)
        if not rotated:
            rotated.append(True)
            os.rename(current, d / logs.rotated_name(0, os.listdir(d), 1_700_000_000))
            w.reopen()
            w.write(2)
        return files

    monkeypatch.setattr(logs, "instance_files", list_then_rotate)
    data, cursor = logs.open_log(current)
    monkeypatch.undo()
    try:
        assert rotated and data == shown(0, 5)
        assert cursor.read_new() == shown(5, 7)
    finally:
        cursor.close()
        w.f.close()


# ---------------------------------------------------------------- the rotator against a FIFO stand-in


@pytest.fixture
def setup(tmp_path):
    paths = RuntimePaths(root_dir=tmp_path / "root", run_dir=tmp_path / "run", log_dir=tmp_path / "log")
    log_dir = paths.log_dir / "pods" / "default_web_uid1" / "app"
    log_dir.mkdir(parents=True)
    bundle = paths.pod_dir("uid1") / "containers" / "app" / "0"
    bundle.mkdir(parents=True)
    fifo = bundle / conmon.CONTROL_FIFO
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    clock = FakeClock(1_714_557_600.0)
    rotator = LogRotator(paths, clock, max_size=1000, max_files=3, interval=10.0)
    yield rotator, log_dir / "0.log", reader, clock
    os.close(reader)


def _names(d: Path) -> list[str]:
    return sorted(os.listdir(d))


def test_rotator_links_renames_reopens_compresses_and_prunes(setup):
    rotator, current, reader, clock = setup
    w = _Conmon(current)
    w.write(2)
    rotator.check_all()
    # A live log gets its second name at once, so conmon's own cut cannot lose it; and the file conmon
    # opens at its next reopen is there already, empty, under the newest rotated name.
    spare = current.with_name("0.log.tmp")
    (link, spare_link) = [n for n in _names(current.parent) if n not in ("0.log", "0.log.tmp")]
    assert os.stat(current.parent / link).st_ino == os.stat(current).st_ino
    assert os.stat(current.parent / spare_link).st_ino == os.stat(spare).st_ino and spare.stat().st_size == 0
    for round_ in range(4):
        w.write(30)  # > max_size
        clock.advance(1)
        rotator.check_all()
        assert os.read(reader, 100) == conmon.REOPEN_LOG_MESSAGE
        assert not current.exists()  # renamed away: conmon makes the new one
        w.reopen()
        assert current.stat().st_nlink == 2  # named twice from its first byte, before any check
        w.write(1)
        clock.advance(1)
        rotator.check_all()  # makes the next spare
        assert spare.exists()
    names = _names(current.parent)
    rotated = [n for n in names if n not in ("0.log", "0.log.tmp") and n != _name_of(spare)]
    # At most 3 files of the instance besides the current file's own link; the older rotated ones gzipped.
    assert len(logs.instance_files(current)) == 3
    assert sum(n.endswith(".gz") for n in rotated) == 1
    assert rotator.rotations == 4
    # What is left reads back in order, the oldest lines pruned.
    data, cursor = logs.open_log(current)
    cursor.close()
    w.f.close()
    assert data.endswith(shown(w.n - 32, w.n)) and data == shown(w.n - data.count(b"\n"), w.n)


def _name_of(spare: Path) -> str:
    """The rotated name the spare is linked under."""
    st = spare.stat()
    return next(n for n in _names(spare.parent) if n != spare.name and os.stat(spare.parent / n).st_ino == st.st_ino)


def test_conmons_cut_right_after_a_rotation_loses_nothing(setup):
    """conmon's count of bytes runs on across our reopen, so its own cut can follow it before any check:
    the file it then cuts away was the spare, which had its rotated name already (without it, the lines
    written between the two reopens were lost: seen as ten missing lines in the e2e follow test)."""
    rotator, current, reader, clock = setup
    w = _Conmon(current)
    w.write(30)
    rotator.check_all()  # links it and makes the spare
    clock.advance(1)
    rotator.check_all()  # rotates: asks conmon to reopen
    assert os.read(reader, 100) == conmon.REOPEN_LOG_MESSAGE
    w.reopen()  # our reopen: conmon takes the spare
    w.write(2)
    w.reopen()  # its own cut, at once
    w.write(1)
    data, cursor = logs.open_log(current)
    cursor.close()
    w.f.close()
    assert data.endswith(shown(30, 33))


# conmon's own cut (--log-size-max) runs on its own count of bytes, so it can come at any moment of a check:
# each hook below is a step of `LogRotator.check`, and the cut lands just before it.
_CUT_POINTS = [
    pytest.param("stat_current", True, id="before-the-current-file-is-looked-at"),
    pytest.param("open_control", True, id="before-the-plan-of-a-due-rotation"),
    pytest.param("open_control", False, id="before-the-plan-of-a-check"),
    pytest.param("ensure_spare", True, id="between-the-rotation-and-the-next-spare"),
    pytest.param("ensure_spare", False, id="before-the-next-spare"),
    pytest.param("request_log_reopen", True, id="between-the-next-spare-and-our-reopen"),
]


def _answer_reopen(w: _Conmon, reader: int) -> None:
    """conmon's side of the control FIFO: a reopen for every request waiting there."""
    try:
        requests = os.read(reader, 100)
    except BlockingIOError:
        return
    for _ in range(requests.count(conmon.REOPEN_LOG_MESSAGE)):
        w.reopen()


@pytest.mark.parametrize(("point", "due"), _CUT_POINTS)
def test_conmons_cut_in_the_middle_of_a_check_loses_nothing(setup, monkeypatch, point, due):
    """conmon renames the spare over the path and writes to it while the rotator acts on what it saw a
    moment before: the file conmon writes keeps a name, in order, through that check and the reopen that
    follows (the old spare's link was removed as the spare's, leaving what conmon wrote until our reopen
    with no name: one line missing, `line-1209` of 1500, in a loaded e2e follow test)."""
    rotator, current, reader, clock = setup
    w = _Conmon(current)
    w.write(2)
    rotator.check_all()  # links it and makes the spare
    w.write(30 if due else 1)
    data, cursor = logs.open_log(current)  # a follower from here on
    got = [data]
    cut: list[str] = []

    def cut_first(real):
        def hooked(*args, **kwargs):
            if not cut:
                cut.append(point)
                w.reopen()  # conmon's own cut: it takes the spare
                w.write(1)
            return real(*args, **kwargs)

        return hooked

    try:
        if point == "stat_current":
            real_stat = logs.stat_or_none
            monkeypatch.setattr(
                logs, "stat_or_none", lambda p: cut_first(real_stat)(p) if p == current else real_stat(p)
            )
        elif point == "ensure_spare":
            monkeypatch.setattr(rotator, "_ensure_spare", cut_first(rotator._ensure_spare))
        else:
            monkeypatch.setattr(conmon, point, cut_first(getattr(conmon, point)))
        clock.advance(1)
        rotator.check_all()
        monkeypatch.undo()
        assert cut == [point]
        for _ in range(4):  # conmon answers, writes on; the checks after it link, make spares, prune
            got.append(cursor.read_new())
            _answer_reopen(w, reader)
            w.write(2)
            got.append(cursor.read_new())
            clock.advance(1)
            rotator.check_all()
        _answer_reopen(w, reader)
        w.write(1)
        got.append(cursor.read_new())
    finally:
        cursor.close()
        w.f.close()
    assert b"".join(got) == shown(0, w.n)
    # Read back whole too: nothing lost on disk, nothing doubled, in order.
    data, cursor = logs.open_log(current)
    cursor.close()
    assert data == shown(0, w.n)


class _Flood(_Conmon):
    """conmon with its --log-size-max: it cuts (reopens by itself) before a line would take its count of
    bytes past the limit, and counts from its own last cut, not from our reopen."""

    def __init__(self, path: Path, limit: int, each=None) -> None:
        super().__init__(path)
        self.limit = limit
        self.count = 0
        self.cuts = 0
        self.each = each  # called after every line: a watcher of the disk

    def write(self, count: int) -> None:
        for _ in range(count):
            line = lines(self.n, self.n + 1)
            if self.count + len(line) > self.limit:
                self.reopen()
                self.count = 0
                self.cuts += 1
            self.f.write(line)
            self.n += 1
            self.count += len(line)
            if self.each is not None:
                self.each()

    def flood_through(self, cuts: int) -> None:
        """Write until `cuts` more cuts have come, then a few lines more."""
        until = self.cuts + cuts
        while self.cuts < until:
            self.write(1)
        self.write(3)


def _disk(d: Path) -> tuple[int, int]:
    """(files holding bytes, bytes) of a log directory, each inode once."""
    sizes = {(st.st_dev, st.st_ino): st.st_size for st in (os.stat(d / n) for n in os.listdir(d))}
    return sum(1 for s in sizes.values() if s), sum(sizes.values())


class _Peak:
    def __init__(self, d: Path) -> None:
        self.d = d
        self.files = self.bytes = 0

    def __call__(self) -> None:
        files, size = _disk(self.d)
        self.files = max(self.files, files)
        self.bytes = max(self.bytes, size)


def test_two_cuts_between_checks_add_at_most_the_two_linked_files(setup):
    """A flood that outruns the checks: conmon cuts twice before the next one. The file current at the
    check and the spare stay under their links, full to the backstop each; the file the second cut opened
    has no second name, so a third cut would drop it rather than add a file. The next check prunes back
    to max-files (the integration flood peaked at 535 KB against the 448 KiB once promised: that bound
    counted kept files at max-size, and one cut file beside the current one)."""
    rotator, current, reader, clock = setup
    backstop = backstop_size(rotator.max_size)
    peak = _Peak(current.parent)
    w = _Flood(current, backstop, peak)
    try:
        w.write(2)
        rotator.check_all()
        for _ in range(5):
            w.flood_through(2)
            clock.advance(1)
            rotator.check_all()
            _answer_reopen(w, reader)
            assert _disk(current.parent)[0] <= rotator.max_files
    finally:
        w.f.close()
    assert w.cuts == 10
    # max-files - 1 rotated files, the two linked ones conmon cut away, the current one: reached, not passed.
    assert peak.files == rotator.max_files + 2
    assert peak.bytes <= (rotator.max_files + 2) * backstop <= disk_bound(rotator.max_size, rotator.max_files)
    data, cursor = logs.open_log(current)
    cursor.close()
    assert data == shown(w.n - data.count(b"\n"), w.n)  # nothing lost but the oldest, pruned


def test_a_cut_during_a_check_is_pruned_by_that_check(setup, monkeypatch):
    """conmon cuts while a check runs, after it listed the files: the current file's link becomes one more
    rotated file, and the check goes on to make a new spare. The check prunes again from a fresh listing,
    so two more cuts before the next check still leave max-files + 2 files (before, the cut file stayed
    until the next check beside the two new linked ones: max-files + 3)."""
    rotator, current, reader, clock = setup
    peak = _Peak(current.parent)
    w = _Flood(current, backstop_size(rotator.max_size), peak)
    real = rotator._ensure_spare

    def cut_then_ensure(*args, **kwargs):
        w.flood_through(1)  # the check planned without this cut
        return real(*args, **kwargs)

    try:
        w.write(2)
        rotator.check_all()
        for _ in range(4):
            w.write(2)  # small at the check: no rotation, the flood comes during it
            monkeypatch.setattr(rotator, "_ensure_spare", cut_then_ensure)
            clock.advance(1)
            rotator.check_all()
            monkeypatch.undo()
            assert _disk(current.parent)[0] <= rotator.max_files + 1  # the cut file went with the check
            w.flood_through(2)
            clock.advance(1)
            rotator.check_all()
            _answer_reopen(w, reader)
    finally:
        w.f.close()
    assert peak.files == rotator.max_files + 2
    assert peak.bytes <= disk_bound(rotator.max_size, rotator.max_files)
    data, cursor = logs.open_log(current)
    cursor.close()
    assert data == shown(w.n - data.count(b"\n"), w.n)


def test_a_follower_whose_file_was_compressed_reads_the_files_after_it(setup):
    """conmon's cut right after our reopen leaves a short file between two rotations, and the next check
    gzips the file a follower still reads from (all but the newest rotated file): the follower finds the
    files after its own by the rotated name its file had, not only by its inode, which the gzip replaced
    (lines in the short file were skipped under load)."""
    rotator, current, reader, clock = setup
    w = _Conmon(current)
    w.write(2)
    rotator.check_all()  # links it and makes the spare
    data, cursor = logs.open_log(current)
    got = [data]
    try:
        w.write(30)
        clock.advance(1)
        rotator.check_all()  # rotates
        _answer_reopen(w, reader)  # conmon takes the spare
        w.write(3)
        w.reopen()  # and cuts it away at once (its own count): three lines in a short file
        w.write(1)
        clock.advance(1)
        rotator.check_all()
        # The follower's file is gzipped now: only the short file and the current one are plain.
        assert sum(n.endswith(".gz") for n in os.listdir(current.parent)) == 1
        got.append(cursor.read_new())
        w.write(1)
        got.append(cursor.read_new())
    finally:
        cursor.close()
        w.f.close()
    assert b"".join(got) == shown(0, w.n)


def test_the_check_after_a_rotation_or_a_cut_comes_as_soon_as_the_log_grows(setup):
    """Rotation keeps up on its own rather than leaving it to conmon's cut: the file after our reopen is
    measured from the moment of the rotation (not a whole interval later), and a file conmon cut since
    the last look means rotation is behind (a second cut before the next check drops a whole file)."""
    rotator, current, reader, clock = setup
    w = _Conmon(current)
    try:
        w.write(2)
        rotator.check_all()
        w.write(30)
        clock.advance(1)
        assert rotator.check_all() == rotator.min_delay  # rotates
        _answer_reopen(w, reader)
        w.write(5)  # 5 lines of under 50 bytes in a second: due in about three
        clock.advance(1)
        size = current.stat().st_size
        assert rotator.check_all() == pytest.approx((1000 - size) / size)
        clock.advance(1)
        rotator.check_all()
        w.reopen()  # conmon's cut: the new file already longer than the one seen
        w.write(6)
        clock.advance(1)
        assert rotator.check_all() == rotator.min_delay
    finally:
        w.f.close()


def test_an_exited_instance_keeps_no_spare(setup):
    rotator, current, reader, _ = setup
    w = _Conmon(current)
    w.write(2)
    rotator.check_all()
    assert current.with_name("0.log.tmp").exists()
    (rotator._bundle(current) / conmon.CONTROL_FIFO).unlink()  # conmon gone: no reopen will take it
    rotator.check_all()
    w.f.close()
    assert len(_names(current.parent)) == 2  # the log and its link
    data, cursor = logs.open_log(current)
    cursor.close()
    assert data == shown(0, 2)


def test_an_idle_log_is_looked_at_in_full_only_when_it_or_its_conmon_changes(setup):
    """An idle node's passes: a log a check left settled costs a stat and a look at its conmon, not the
    listing, links and spare of a whole check; a write, a reopen or conmon's exit brings the whole check back."""
    rotator, current, reader, clock = setup
    w = _Conmon(current)
    w.write(2)
    rotator.check_all()
    names = _names(current.parent)
    assert rotator.full_checks == 1
    for _ in range(5):
        clock.advance(10)
        assert rotator.check_all() == rotator.interval
    assert rotator.full_checks == 1 and _names(current.parent) == names
    w.write(1)  # conmon wrote: looked at in full, then settled again
    clock.advance(10)
    rotator.check_all()
    clock.advance(10)
    rotator.check_all()
    assert rotator.full_checks == 2
    (rotator._bundle(current) / conmon.CONTROL_FIFO).unlink()  # conmon gone, the file unchanged
    rotator.check_all()
    assert rotator.full_checks == 3
    assert not current.with_name("0.log.tmp").exists()  # what a whole check does for an exited instance
    rotator.check_all()
    assert rotator.full_checks == 3
    w.f.close()


def test_rotator_leaves_a_log_without_a_live_conmon(setup):
    rotator, current, reader, _ = setup
    (rotator._bundle(current) / conmon.CONTROL_FIFO).unlink()  # conmon gone with its bundle's FIFO
    current.write_bytes(lines(0, 100))
    rotator.check_all()
    assert _names(current.parent) == ["0.log"]


def test_open_control_tells_a_fifo_nobody_reads(tmp_path):
    os.mkfifo(tmp_path / conmon.CONTROL_FIFO)
    assert conmon.open_control(tmp_path) is None  # ENXIO at once, never blocking
    assert conmon.open_control(tmp_path / "missing") is None


def test_a_conmon_cut_keeps_the_bytes_under_the_link(setup):
    rotator, current, reader, _ = setup
    w = _Conmon(current)
    w.write(3)
    rotator.check_all()
    w.reopen()  # conmon's own --log-size-max cut: a new file renamed over the path
    w.write(2)
    data, cursor = logs.open_log(current)
    cursor.close()
    w.f.close()
    assert data == shown(0, 5)


def test_remove_logs_takes_every_file_of_the_instance_only(tmp_path):
    current = _instance(tmp_path)
    (current.parent / (R[3] + ".gz.tmp")).write_bytes(b"")
    remove_logs(current)
    assert _names(current.parent) == ["1.log"]
