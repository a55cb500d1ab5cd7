"""The file source on a real temp directory: scanning rules, and watching with inotify (no root needed)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from edgelet.api.annotations import ORIGIN
from edgelet.sources import SourceSnapshot, snapshot_key
from edgelet.sources.file import MAX_MANIFEST_BYTES, FileSource, FileSourceState, scan_directory
from edgelet.util.clock import RealClock

NODE = "node1"


def pod_yaml(name: str, image: str = "busybox:1.36", namespace: str | None = None) -> str:
    ns = f"\n  namespace: {namespace}" if namespace else ""
    return f"""apiVersion: v1
kind: Pod
metadata:
  name: {name}{ns}
spec:
  containers:
  - name: app
    image: {image}
"""


def put(directory: Path, name: str, text: str) -> Path:
    """Write atomically (temp file outside the directory, then rename), as config tools do."""
    tmp = directory.parent / f".{name}.tmp"
    tmp.write_text(text)
    dest = directory / name
    os.rename(tmp, dest)
    return dest


def names(snapshot: SourceSnapshot) -> list[str]:
    return [p.metadata.name for p in snapshot.pods]


def scan(path: Path, state: FileSourceState | None = None) -> tuple[SourceSnapshot, FileSourceState]:
    return scan_directory(path, NODE, state or FileSourceState())


@pytest.fixture
def mdir(tmp_path: Path) -> Path:
    d = tmp_path / "manifests"
    d.mkdir()
    return d


# --- scan_directory -------------------------------------------------------------


def test_empty_directory(mdir: Path) -> None:
    snap, state = scan(mdir)
    assert snap == SourceSnapshot(source="file", pods=(), errors=())
    assert state == FileSourceState(files={}, missing=False)


def test_one_pod_becomes_a_static_pod(mdir: Path) -> None:
    f = put(mdir, "web.yaml", pod_yaml("web"))
    snap, state = scan(mdir)
    (pod,) = snap.pods
    assert snap.source == "file" and snap.errors == ()
    assert pod.metadata.name == "web-node1"
    assert pod.metadata.namespace == "default"
    assert pod.metadata.uid
    assert pod.metadata.annotations[ORIGIN] == str(f)
    assert pod.metadata.annotations["kubernetes.io/config.source"] == "file"
    assert state.files == {str(f): (pod,)}


def test_scan_is_stable(mdir: Path) -> None:
    put(mdir, "web.yaml", pod_yaml("web"))
    first, state = scan(mdir)
    second, _ = scan(mdir, state)
    assert snapshot_key(first) == snapshot_key(second)


def test_files_in_sorted_name_order(mdir: Path) -> None:
    for n in ("c", "a", "b"):
        put(mdir, f"{n}.yaml", pod_yaml(n))
    assert names(scan(mdir)[0]) == ["a-node1", "b-node1", "c-node1"]


def test_no_extension_filter(mdir: Path) -> None:
    put(mdir, "manifest", pod_yaml("noext"))
    put(
        mdir,
        "pod.json",
        '{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "js"},'
        ' "spec": {"containers": [{"name": "a", "image": "busybox"}]}}',
    )
    assert names(scan(mdir)[0]) == ["noext-node1", "js-node1"]


def test_dotfiles_are_ignored(mdir: Path) -> None:
    (mdir / ".web.yaml.swp").write_text(pod_yaml("hidden"))
    (mdir / ".broken").write_text("not: [yaml")
    snap, _ = scan(mdir)
    assert snap.pods == () and snap.errors == ()


def test_subdirectories_are_not_entered(mdir: Path) -> None:
    sub = mdir / "sub"
    sub.mkdir()
    (sub / "inner.yaml").write_text(pod_yaml("inner"))
    (mdir / "linkdir").symlink_to(sub)
    snap, _ = scan(mdir)
    assert snap.pods == () and snap.errors == ()


def test_symlinked_file_is_followed(mdir: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.yaml"
    target.write_text(pod_yaml("linked"))
    (mdir / "linked.yaml").symlink_to(target)
    snap, _ = scan(mdir)
    assert names(snap) == ["linked-node1"]
    assert snap.pods[0].metadata.annotations[ORIGIN] == str(mdir / "linked.yaml")


def test_dangling_symlink_is_ignored(mdir: Path, tmp_path: Path) -> None:
    (mdir / "gone.yaml").symlink_to(tmp_path / "missing.yaml")
    snap, _ = scan(mdir)
    assert snap.pods == () and snap.errors == ()


def test_fifo_does_not_hang_the_scan(mdir: Path) -> None:
    os.mkfifo(mdir / "pipe")
    put(mdir, "web.yaml", pod_yaml("web"))
    assert names(scan(mdir)[0]) == ["web-node1"]


def test_file_over_10_mib_is_an_error(mdir: Path) -> None:
    big = mdir / "big.yaml"
    big.write_bytes(pod_yaml("big").encode() + b"#" * (11 * 1024 * 1024))
    put(mdir, "ok.yaml", pod_yaml("ok"))
    snap, _ = scan(mdir)
    assert names(snap) == ["ok-node1"]
    (err,) = snap.errors
    assert err.source == "file" and err.origin == str(big)
    assert err.message.startswith(f"{big}: ") and str(MAX_MANIFEST_BYTES) in err.message


def test_exactly_10_mib_is_read(mdir: Path) -> None:
    text = pod_yaml("edge").encode()
    (mdir / "edge.yaml").write_bytes(text + b"#" * (MAX_MANIFEST_BYTES - len(text)))
    snap, _ = scan(mdir)
    assert names(snap) == ["edge-node1"] and snap.errors == ()


def test_invalid_file_keeps_its_last_pods_and_reports(mdir: Path) -> None:
    f = put(mdir, "web.yaml", pod_yaml("web"))
    put(mdir, "other.yaml", pod_yaml("other"))
    good, state = scan(mdir)
    put(mdir, "web.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers: 5\n")
    snap, state = scan(mdir, state)
    assert [p.metadata.uid for p in snap.pods] == [p.metadata.uid for p in good.pods]
    (err,) = snap.errors
    assert err.origin == str(f) and err.message.startswith(f"{f}: ")
    assert "containers" in err.message
    # Still broken on the next scan: still kept.
    snap2, state = scan(mdir, state)
    assert snapshot_key(snap2) == snapshot_key(snap)
    # Deleted: its pods go.
    f.unlink()
    snap3, _ = scan(mdir, state)
    assert names(snap3) == ["other-node1"] and snap3.errors == ()


def test_invalid_new_file_has_no_pods(mdir: Path) -> None:
    put(mdir, "bad.yaml", "kind: Pod\nmetadata: [\n")
    snap, state = scan(mdir)
    assert snap.pods == () and len(snap.errors) == 1
    assert state.files == {}


def test_validation_error_names_the_pod(mdir: Path) -> None:
    put(mdir, "nameless.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {}\nspec:\n  containers: [{name: a, image: b}]\n")
    snap, _ = scan(mdir)
    (err,) = snap.errors
    assert err.origin == str(mdir / "nameless.yaml")


def test_edit_gives_a_new_uid(mdir: Path) -> None:
    put(mdir, "web.yaml", pod_yaml("web", image="busybox:1.36"))
    first, state = scan(mdir)
    put(mdir, "web.yaml", pod_yaml("web", image="busybox:1.37"))
    second, _ = scan(mdir, state)
    assert names(first) == names(second) == ["web-node1"]
    assert first.pods[0].metadata.uid != second.pods[0].metadata.uid


def test_multi_document_yaml_and_list(mdir: Path) -> None:
    put(mdir, "a-multi.yaml", pod_yaml("one") + "---\n" + pod_yaml("two"))
    put(
        mdir,
        "b-list.yaml",
        """apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Pod
  metadata: {name: three}
  spec: {containers: [{name: a, image: busybox}]}
- apiVersion: v1
  kind: Pod
  metadata: {name: four}
  spec: {containers: [{name: a, image: busybox}]}
""",
    )
    snap, state = scan(mdir)
    assert names(snap) == ["one-node1", "two-node1", "three-node1", "four-node1"]
    assert len({p.metadata.uid for p in snap.pods}) == 4
    assert [len(v) for v in state.files.values()] == [2, 2]


def test_missing_directory_is_not_an_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    snap, state = scan(missing)
    assert snap.pods == () and snap.errors == () and state.missing
    missing.mkdir()
    put(missing, "web.yaml", pod_yaml("web"))
    snap, state = scan(missing, state)
    assert names(snap) == ["web-node1"] and not state.missing


def test_manifest_path_may_be_a_single_file(mdir: Path) -> None:
    f = put(mdir, "web.yaml", pod_yaml("web"))
    snap, _ = scan(f)
    assert names(snap) == ["web-node1"]


# --- FileSource.run ---------------------------------------------------------------


class Collector:
    def __init__(self) -> None:
        self.queue: asyncio.Queue[SourceSnapshot] = asyncio.Queue()
        self.count = 0

    async def emit(self, snapshot: SourceSnapshot) -> None:
        self.count += 1
        await self.queue.put(snapshot)

    async def next(self, timeout: float = 60.0) -> SourceSnapshot:
        # A bound so a broken watcher fails the test instead of hanging it; not a timing assertion. Generous:
        # a scan runs in a thread, which a machine at load 20 may not schedule for seconds.
        return await asyncio.wait_for(self.queue.get(), timeout)

    async def until(self, predicate: Callable[[SourceSnapshot], bool], what: str) -> SourceSnapshot:
        while True:
            try:
                snap = await self.next()
            except TimeoutError:
                raise AssertionError(f"no snapshot where {what}") from None
            if predicate(snap):
                return snap


def with_source(path: Path, period: float, body: Callable[[FileSource, Collector], Awaitable[None]]) -> None:
    async def main() -> None:
        source = FileSource(path, NODE, period, RealClock())
        got = Collector()
        task = asyncio.create_task(source.run(got.emit))
        try:
            await body(source, got)
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(main())


# A period far beyond any test: only inotify events can make these tests pass.
NO_RESCAN = 3600.0


def test_watch_add_edit_invalid_delete(mdir: Path) -> None:
    async def body(source: FileSource, got: Collector) -> None:
        first = await got.next()
        assert first.pods == () and first.errors == ()
        f = put(mdir, "web.yaml", pod_yaml("web"))
        snap = await got.until(lambda s: names(s) == ["web-node1"], "web appeared")
        uid = snap.pods[0].metadata.uid
        put(mdir, "web.yaml", pod_yaml("web", image="busybox:2"))
        snap = await got.until(lambda s: s.pods and s.pods[0].metadata.uid != uid, "web got a new uid")
        uid = snap.pods[0].metadata.uid
        # In-place write (not a rename) is seen too.
        f.write_text("kind: Pod\nmetadata: [\n")
        snap = await got.until(lambda s: bool(s.errors), "the broken file was reported")
        assert [p.metadata.uid for p in snap.pods] == [uid]
        assert snap.errors[0].origin == str(f)
        f.unlink()
        snap = await got.until(lambda s: not s.pods, "web went away")
        assert snap.errors == ()

    with_source(mdir, NO_RESCAN, body)


def test_watch_ignores_dotfiles_and_subdirs(mdir: Path) -> None:
    async def body(source: FileSource, got: Collector) -> None:
        await got.next()
        (mdir / ".hidden.yaml").write_text(pod_yaml("hidden"))
        (mdir / "sub").mkdir()
        (mdir / "sub" / "inner.yaml").write_text(pod_yaml("inner"))
        put(mdir, "real.yaml", pod_yaml("real"))
        # Snapshots are emitted only on change, so the next one is the real pod alone.
        snap = await got.next()
        assert names(snap) == ["real-node1"]
        assert got.count == 2

    with_source(mdir, NO_RESCAN, body)


def test_directory_created_after_start(tmp_path: Path) -> None:
    missing = tmp_path / "later" / "manifests"
    (tmp_path / "later").mkdir()

    async def body(source: FileSource, got: Collector) -> None:
        first = await got.next()
        assert first.pods == ()
        missing.mkdir()
        # The parent watch sees the directory appear; a file written right after is seen too.
        put(missing, "web.yaml", pod_yaml("web"))
        await got.until(lambda s: names(s) == ["web-node1"], "the pod in the new directory appeared")
        put(missing, "two.yaml", pod_yaml("two"))
        await got.until(lambda s: names(s) == ["two-node1", "web-node1"], "a second file in the new directory")

    with_source(missing, NO_RESCAN, body)


def test_periodic_rescan_finds_a_directory_with_no_parent_yet(tmp_path: Path) -> None:
    missing = tmp_path / "a" / "b" / "manifests"

    async def body(source: FileSource, got: Collector) -> None:
        await got.next()
        staging = tmp_path / "staging"
        staging.mkdir()
        (staging / "web.yaml").write_text(pod_yaml("web"))
        missing.parent.mkdir(parents=True)
        os.rename(staging, missing)
        await got.until(lambda s: names(s) == ["web-node1"], "the rescan found the directory")

    with_source(missing, 0.2, body)


def test_directory_replaced_by_rename(tmp_path: Path, mdir: Path) -> None:
    async def body(source: FileSource, got: Collector) -> None:
        await got.next()
        new = tmp_path / "manifests.new"
        new.mkdir()
        (new / "swap.yaml").write_text(pod_yaml("swap"))
        old = tmp_path / "manifests.old"
        os.rename(mdir, old)
        os.rename(new, mdir)
        await got.until(lambda s: names(s) == ["swap-node1"], "the swapped-in directory was read")
        put(mdir, "more.yaml", pod_yaml("more"))
        await got.until(lambda s: names(s) == ["more-node1", "swap-node1"], "the new directory is watched")

    with_source(mdir, NO_RESCAN, body)


def test_scan_once_updates_state(mdir: Path) -> None:
    put(mdir, "web.yaml", pod_yaml("web"))

    async def main() -> SourceSnapshot:
        return await FileSource(mdir, NODE, NO_RESCAN, RealClock()).scan_once()

    assert names(asyncio.run(main())) == ["web-node1"]


def test_directory_deleted_and_recreated(tmp_path: Path, mdir: Path) -> None:
    async def body(source: FileSource, got: Collector) -> None:
        put(mdir, "web.yaml", pod_yaml("web"))
        await got.until(lambda s: names(s) == ["web-node1"], "web appeared")
        (mdir / "web.yaml").unlink()
        mdir.rmdir()
        await got.until(lambda s: not s.pods, "the pods of the deleted directory went away")
        mdir.mkdir()
        put(mdir, "back.yaml", pod_yaml("back"))
        await got.until(lambda s: names(s) == ["back-node1"], "the recreated directory is watched")

    with_source(mdir, NO_RESCAN, body)


def test_unknown_field_is_a_warning_and_the_pod_runs(mdir: Path) -> None:
    put(mdir, "typo.yaml", pod_yaml("typo") + "    imagePullPolcy: Never\n")
    snap, _ = scan(mdir)
    assert names(snap) == ["typo-node1"]
    assert snap.errors == ()
    assert [w.message for w in snap.warnings] == [
        f'{mdir / "typo.yaml"}: unknown field "spec.containers[0].imagePullPolcy"'
    ]
    # The warning is part of what makes a snapshot new: fixing the typo alone is a change.
    put(mdir, "typo.yaml", pod_yaml("typo"))
    fixed, _ = scan(mdir)
    assert fixed.warnings == () and snapshot_key(fixed) != snapshot_key(snap)


def test_unchanged_files_are_not_decoded_again(mdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import edgelet.sources.file as file_mod

    put(mdir, "a.yaml", pod_yaml("a"))
    put(mdir, "b.yaml", pod_yaml("b"))
    decoded: list[str] = []
    real = file_mod._pods_of
    monkeypatch.setattr(file_mod, "_pods_of", lambda path, *a: decoded.append(path.name) or real(path, *a))
    snap, state = scan(mdir)
    assert sorted(decoded) == ["a.yaml", "b.yaml"]
    put(mdir, "b.yaml", pod_yaml("b", image="busybox:2"))
    snap2, state = scan(mdir, state)
    assert decoded[2:] == ["b.yaml"], "only the changed file is read again"
    assert names(snap2) == names(snap) and snapshot_key(snap2) != snapshot_key(snap)
    snap3, _ = scan(mdir, state)
    assert decoded[3:] == [] and snapshot_key(snap3) == snapshot_key(snap2)


def test_a_file_being_written_keeps_what_it_had(mdir: Path) -> None:
    good = put(mdir, "web.yaml", pod_yaml("web"))
    snap, state = scan(mdir)
    good.write_text("kind: Pod\nmetadata: [\n")  # half-written, as a scan between two writes would see it
    half = mdir / "new.yaml"
    half.write_text("apiVersion: v1\nkind: Pod\nmeta")
    writing = frozenset({str(good), str(half)})
    during, state2 = scan_directory(mdir, NODE, state, writing=writing)
    assert during.errors == () and snapshot_key(during) == snapshot_key(snap)
    after, _ = scan_directory(mdir, NODE, state2)  # closed: read as it is
    assert {e.origin for e in after.errors} == {str(good), str(half)}


def test_a_slow_writer_is_not_reported_half_way(mdir: Path) -> None:
    # Deterministic since the watch is read on the loop (util/inotify.py): the create, open and write events
    # of the writer below (on the loop's thread) come in one read and are handled before any scan starts, so
    # the scan sees the file as open for writing. With watchdog's threads, which delivered them one by one,
    # a loaded machine could scan between the create and the open and read the half (6 of 150 runs at load
    # 12 with that code, none of 1,650 with this one).
    async def body(source: FileSource, got: Collector) -> None:
        await got.next()
        text = pod_yaml("slow")
        with open(mdir / "slow.yaml", "w") as f:
            f.write(text[: len(text) // 2])
            f.flush()
            await asyncio.sleep(0.3)  # events for the open, create and write are seen and scanned meanwhile
            f.write(text[len(text) // 2 :])
        snap = await got.until(lambda s: names(s) == ["slow-node1"], "slow appeared after the close")
        assert snap.errors == ()
        assert got.count == 2, "no snapshot with a half-written file was emitted"

    with_source(mdir, NO_RESCAN, body)
