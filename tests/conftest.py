"""Shared fixtures: temp runtime dirs with a unique cgroup parent, and the privileged-test gate."""

from __future__ import annotations

# Before any test imports edgelet.cli: the test process has OpenSSL as usual, whatever order tests run in
# (edgelet.util.openssl.defer() is for the agent's own process; tests/integration/test_openssl_deferred.py
# checks it in fresh interpreters).
import asyncio  # noqa: F401
import contextlib
import hashlib  # noqa: F401
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from edgelet.runtime.layout import RuntimePaths
from edgelet.testing.cleanup import cleanup_all

if TYPE_CHECKING:
    from edgelet.testing.apiserver import ApiServer

REPO = Path(__file__).resolve().parent.parent
SPECS = (
    (REPO.parent / "shared" / "specs")
    if (REPO.parent / "shared" / "specs").is_dir()
    else Path(os.environ.get("EDGELET_SPECS", "/work/shared/specs"))
)

NEEDED_BINARIES = ("runc", "conmon", "catatonit")


def privileged_skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (runc, cgroups and mounts)"
    missing = [b for b in NEEDED_BINARIES if shutil.which(b) is None]
    if missing:
        return f"needs {', '.join(missing)} on PATH (make test installs them)"
    if not Path("/sys/fs/cgroup").is_dir():
        return "needs /sys/fs/cgroup"
    return None


# The order a whole run takes: quick pure tests first, so `pytest -x` stops at a broken unit within seconds
# rather than after minutes of agents; a file's tests stay together and in their order (module fixtures).
DIR_ORDER = ("unit", "fuzz", "integration", "e2e", "chaos")


def _dir_rank(item: pytest.Item) -> int:
    try:
        top = item.path.relative_to(REPO / "tests").parts[0]
    except (ValueError, IndexError):
        return len(DIR_ORDER)
    return DIR_ORDER.index(top) if top in DIR_ORDER else len(DIR_ORDER)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Spread over workers (pytest-xdist, `make test`), the other way round: files go out in this order, so the
    # longest (the chaos campaign, the agents' files) start first and the many quick ones fill in at the end,
    # rather than a campaign starting last and running alone.
    distributed = hasattr(config, "workerinput")
    items.sort(key=lambda item: -_dir_rank(item) if distributed else _dir_rank(item))
    reason = privileged_skip_reason()
    if reason is None:
        return
    for item in items:
        if "privileged" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=reason))


SUMMARIES: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """A test's figures (`record_property("summary", line)`), printed at the end of the run: the report
    carries them from a pytest-xdist worker to the process that prints."""
    if report.when == "call":
        SUMMARIES.extend(str(value) for name, value in report.user_properties if name == "summary")


def pytest_terminal_summary(terminalreporter) -> None:
    for line in SUMMARIES:
        terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def crun_ready() -> None:
    """crun can run containers here: on a hybrid cgroup layout, the controllers its cgroup2 mount holds are
    moved to v1 hierarchies first (docs/runtime-handlers.md); skips without crun."""
    from edgelet.testing.crun import crun_skip_reason

    reason = privileged_skip_reason() or crun_skip_reason()
    if reason is not None:
        pytest.skip(reason)


@pytest.fixture(params=["runc", "crun"])
def runtime_handler(request: pytest.FixtureRequest) -> str:
    """The runtime handler a test runs its pods under, both in turn (crun made ready first)."""
    if request.param == "crun":
        request.getfixturevalue("crun_ready")
    return request.param


@pytest.fixture
def specs_dir() -> Path:
    return SPECS


@contextlib.contextmanager
def temp_runtime_paths(base: Path) -> Iterator[RuntimePaths]:
    """Root, run and log dirs under `base` and a unique cgroup parent; everything is removed afterwards."""
    paths = RuntimePaths(
        root_dir=base / "root",
        run_dir=base / "run",
        log_dir=base / "log",
        cgroup_root=f"/edgelet-test-{uuid.uuid4().hex[:10]}",
    )
    for d in (paths.root_dir, paths.run_dir, paths.log_dir):
        d.mkdir(parents=True)
    try:
        yield paths
    finally:
        cleanup_all(base, paths.runc_root, paths.cgroup_root)


@pytest.fixture
def runtime_paths(tmp_path: Path):
    """Temp root, run and log dirs and a unique cgroup parent; everything is removed afterwards."""
    with temp_runtime_paths(Path(tmp_path)) as paths:
        yield paths


@pytest.fixture(scope="session")
def apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """One real kube-apiserver (and etcd) for every test of this process that takes it (each pytest-xdist
    worker starts its own), the harness's own tests (tests/integration) and the e2e tests' `cluster` alike:
    its start is the slowest fixture there is, and `cluster` clears what a test left. The node identities the
    tests use have their tokens from the start."""
    from edgelet.testing.apiserver import ApiServer, kube_bin_dir

    if shutil.which("etcd") is None:
        pytest.fail("etcd is not installed: make test installs etcd-server")
    server = ApiServer(tmp_path_factory.mktemp("apiserver"), kube_bin_dir())
    for node in ("testnode", "othernode", "edge-1"):  # e2e's NODE, another node's, the harness tests'
        server.node_token(node)
    server.start()
    yield server
    server.stop()
