"""Fixtures shared by the integration tests: the busybox image record the runtime tests run containers from, and
the runtime itself on the test's own paths (a module overrides `rt` where it needs other settings)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def busybox(tmp_path_factory: pytest.TempPathFactory):
    """`edgelet.local/busybox:1.36`, built locally and imported into a store of the module's own."""
    from edgelet.images.store import ImageStore
    from edgelet.testing.images import build_busybox_image

    base = tmp_path_factory.mktemp("images")
    archive = build_busybox_image(base / "bb.tar", name="edgelet.local/busybox:1.36")
    (record,) = ImageStore(base / "store").import_archive(archive)
    return record


@pytest.fixture
def rt(runtime_paths):
    """A RuncRuntime on the test's own root, run and log dirs."""
    from edgelet.runtime.runc_runtime import RuncRuntime

    return RuncRuntime(runtime_paths)
