"""Image garbage collection: when the root dir's filesystem passes the high threshold, remove unused images, least recently used first.

The decision (`plan_image_gc`) is pure and follows kubelet's realImageGCManager:
usage = 100 * (capacity - available) / capacity; at or above `high` percent, free
`capacity * (100 - low) / 100 - available` bytes by removing images that no container
uses, that are not pinned (imported from the import directory), and that were last
used (or, never used, stored) at least `min_age` seconds ago, oldest use first.
`ImageGC` is the thin wrapper: it measures the filesystem, asks the runtime what is in
use, and removes through the store, which also drops the layers and blobs no other
image shares; then `ImageStore.sweep` removes any blob or layer no image refers to
(skipped while a pull is under way).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from edgelet.images.errors import ImageError
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.images.store import ImageStore
    from edgelet.util.clock import Clock

log = get_logger(__name__)

GC_PERIOD = 300.0  # kubelet ImageGCPeriod: 5 minutes


@dataclass(frozen=True)
class ImageUsage:
    id: str
    size: int
    last_used: float  # wall time; 0 = never used
    created: float
    pinned: bool
    in_use: bool


@dataclass(frozen=True)
class GCPlan:
    usage_percent: float
    to_free: int
    remove: tuple[str, ...]
    freed: int


def plan_image_gc(
    images: Sequence[ImageUsage],
    *,
    capacity: int,
    available: int,
    high: int,
    low: int,
    min_age: float,
    now: float,
    force: bool = False,
) -> GCPlan:
    """Which images to remove (pure; see the module docstring). `high` 100 disables GC, as in kubelet;
    `force` (prune) removes every eligible image whatever the usage."""
    usage = 100.0 * (capacity - available) / capacity if capacity > 0 else 0.0
    if force:
        to_free = sum(i.size for i in images) + 1
    elif capacity <= 0 or high >= 100 or usage < high:
        return GCPlan(usage, 0, (), 0)
    else:
        to_free = int(capacity * (100 - low) / 100 - available)
    candidates = [i for i in images if not i.pinned and not i.in_use and now - max(i.last_used, i.created) >= min_age]
    candidates.sort(key=lambda i: (max(i.last_used, i.created), i.id))
    chosen: list[str] = []
    freed = 0
    for image in candidates:
        if freed >= to_free:
            break
        chosen.append(image.id)
        freed += image.size
    return GCPlan(usage, to_free, tuple(chosen), freed)


def fs_usage(path: Path) -> tuple[int, int]:
    """(capacity, available) bytes of the filesystem holding `path`."""
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def image_usages(store: ImageStore, in_use_refs: Iterable[str]) -> list[ImageUsage]:
    used_ids = set()
    for ref in in_use_refs:
        rec = store.get(ref)
        if rec is not None:
            used_ids.add(rec.id)
    return [
        ImageUsage(
            id=r.id,
            size=r.size,
            last_used=float(r.extra.get("last_used", 0) or 0),
            created=float(r.extra.get("created", 0) or 0),
            pinned=r.pinned,
            in_use=r.id in used_ids,
        )
        for r in store.list()
    ]


class ImageGC:
    """Runs `plan_image_gc` every GC_PERIOD and removes what it names; errors are logged, the next round retries."""

    def __init__(
        self,
        store: ImageStore,
        in_use: Callable[[], Awaitable[set[str]]],
        clock: Clock,
        *,
        high: int = 85,
        low: int = 80,
        min_age: float = 120.0,
        period: float = GC_PERIOD,
    ) -> None:
        self.store = store
        self._in_use = in_use
        self._clock = clock
        self.high, self.low, self.min_age, self.period = high, low, min_age, period

    async def collect(self, *, force: bool = False) -> GCPlan:
        """One round; `force` (`edgelet images prune`) removes every eligible image whatever the usage."""
        refs = await self._in_use()
        usages = await asyncio.to_thread(image_usages, self.store, refs)
        capacity, available = await asyncio.to_thread(fs_usage, self.store.root)
        plan = plan_image_gc(
            usages,
            capacity=capacity,
            available=available,
            high=self.high,
            low=self.low,
            min_age=self.min_age,
            now=self._clock.now(),
            force=force,
        )
        for image_id in plan.remove:
            try:
                await asyncio.to_thread(self.store.remove, image_id)
            except ImageError as exc:
                log.warning("Image GC could not remove an image", id=image_id, err=str(exc))
        # Then what no image refers to any more (failed pulls, crashes); not while a pull is under way.
        swept = await asyncio.to_thread(self.store.sweep)
        if swept is None:
            log.debug("Image GC skipped the sweep of unreferenced content: a pull is under way")
        if plan.remove:
            log.info(
                "Image GC removed images", count=len(plan.remove), freed=plan.freed, usage=f"{plan.usage_percent:.1f}%"
            )
        elif plan.to_free > 0 and not force:
            log.warning(
                "Disk usage above the image GC threshold and nothing can be removed",
                usage=f"{plan.usage_percent:.1f}%",
                to_free=plan.to_free,
            )
        return plan

    async def run(self) -> None:
        while True:
            await self._clock.sleep(self.period)
            try:
                await self.collect()
            except asyncio.CancelledError:
                raise
            except (ImageError, OSError) as exc:
                log.error("Image GC failed", exc)


__all__ = ["GCPlan", "ImageGC", "ImageUsage", "fs_usage", "image_usages", "plan_image_gc"]
