"""Image GC decisions in a table: thresholds, least recently used first, pinned and in-use images stay."""

from __future__ import annotations

import pytest

from edgelet.images.gc import ImageUsage, plan_image_gc

NOW = 10_000.0
GB = 1_000_000_000


def img(id_, size=10, last_used=0.0, created=1000.0, pinned=False, in_use=False):
    return ImageUsage(id=id_, size=size, last_used=last_used, created=created, pinned=pinned, in_use=in_use)


BASE = [img("old", last_used=2000), img("newer", last_used=5000), img("never", created=3000)]


@pytest.mark.parametrize(
    "images, available, high, low, min_age, force, want",
    [
        pytest.param(BASE, 20, 85, 80, 120, False, (), id="below-high"),
        pytest.param(BASE, 10, 85, 80, 120, False, ("old",), id="at-high-frees-to-low-lru-first"),
        pytest.param(BASE, 0, 85, 80, 120, False, ("old", "never"), id="frees-more"),
        pytest.param(BASE, 0, 100, 80, 120, False, (), id="high-100-disables"),
        pytest.param(
            [img("a", pinned=True), img("b", in_use=True), img("c")],
            0,
            85,
            80,
            0,
            False,
            ("c",),
            id="pinned-and-in-use-stay",
        ),
        pytest.param(
            [img("young", last_used=NOW - 30), img("old", last_used=NOW - 300)],
            0,
            85,
            80,
            120,
            False,
            ("old",),
            id="minimum-age",
        ),
        pytest.param(BASE + [img("p", pinned=True)], 99, 85, 80, 0, True, ("old", "never", "newer"), id="prune-all"),
    ],
)
def test_plan_image_gc(images, available, high, low, min_age, force, want):
    plan = plan_image_gc(
        images, capacity=100, available=available, high=high, low=low, min_age=min_age, now=NOW, force=force
    )
    assert plan.remove == want
