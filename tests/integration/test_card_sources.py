"""Two manifest directories (the node's and the card's) as one file source: combined, watched, conflicts named."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from edgelet.podconfig import ConfigState, merge
from edgelet.sources import SourceSnapshot
from edgelet.sources.file import FileSource, FileSources, combine_snapshots
from edgelet.util.clock import RealClock
from tests.integration.test_file_source import NO_RESCAN, NODE, Collector, names, pod_yaml, put


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    node, card = tmp_path / "manifests", tmp_path / "card" / "manifests"
    node.mkdir()
    card.mkdir(parents=True)
    return node, card


def sources(*paths: Path) -> FileSources:
    return FileSources([FileSource(p, NODE, NO_RESCAN, RealClock()) for p in paths])


def test_scan_once_reads_both_in_order(dirs: tuple[Path, Path]) -> None:
    node, card = dirs
    put(node, "web.yaml", pod_yaml("web"))
    put(card, "sensor.yaml", pod_yaml("sensor"))
    put(card, "broken.yaml", "kind: Pod\nmetadata: [\n")
    snap = asyncio.run(sources(node, card).scan_once())
    assert snap.source == "file"
    assert names(snap) == ["web-node1", "sensor-node1"]
    assert [e.origin for e in snap.errors] == [str(card / "broken.yaml")]


def test_a_name_in_both_directories_runs_from_the_first_and_names_both_files(dirs: tuple[Path, Path]) -> None:
    node, card = dirs
    mine = put(node, "web.yaml", pod_yaml("web"))
    theirs = put(card, "web.yaml", pod_yaml("web", image="busybox:2"))
    snap = asyncio.run(sources(node, card).scan_once())
    state, changes = merge(ConfigState(), snap, now=0.0)
    assert [(c.op, c.pod.metadata.annotations["kubernetes.io/config.source"]) for c in changes] == [("ADD", "file")]
    (rejected,) = state.rejected
    assert rejected.origin == str(theirs) and rejected.pod == "default/web-node1"
    assert str(theirs) in rejected.message and str(mine) in rejected.message


def test_combine_snapshots_is_ordered_concatenation() -> None:
    a = SourceSnapshot(source="file", pods=(), errors=())
    assert combine_snapshots([a, a]) == a


def test_edits_on_the_card_are_seen_while_running(dirs: tuple[Path, Path]) -> None:
    node, card = dirs
    put(node, "web.yaml", pod_yaml("web"))

    async def main() -> None:
        got = Collector()
        task = asyncio.create_task(sources(node, card).run(got.emit))
        try:
            first = await got.next()  # only once both directories were read
            assert names(first) == ["web-node1"]
            put(card, "sensor.yaml", pod_yaml("sensor"))
            await got.until(lambda s: names(s) == ["web-node1", "sensor-node1"], "the card's pod appeared")
            (card / "sensor.yaml").unlink()
            await got.until(lambda s: names(s) == ["web-node1"], "the card's pod went away")
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(main())


def test_a_missing_card_directory_appearing_later_is_watched(tmp_path: Path) -> None:
    node, card = tmp_path / "manifests", tmp_path / "card" / "manifests"
    node.mkdir()
    (tmp_path / "card").mkdir()  # the FAT partition is mounted, its folder not created yet

    async def main() -> None:
        got = Collector()
        task = asyncio.create_task(sources(node, card).run(got.emit))
        try:
            assert names(await got.next()) == []
            card.mkdir()
            put(card, "sensor.yaml", pod_yaml("sensor"))
            await got.until(lambda s: names(s) == ["sensor-node1"], "the card's pod appeared")
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(main())
