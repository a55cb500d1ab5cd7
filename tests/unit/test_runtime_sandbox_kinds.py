"""Which sandbox kind the runtime picks: for a new sandbox from the pod and --pod-infra-container, for an
existing one from its record's annotations (records written before pinned sandboxes carry no infra mark and
ran a pause process). Pure, table-driven; the kinds themselves run for real in tests/integration."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgelet.api.types import ObjectMeta, Pod, PodSpec
from edgelet.runtime.host import HostFacts
from edgelet.runtime.layout import ANN_INFRA, ANN_KIND, KIND_CONTAINER, KIND_SANDBOX, RuntimePaths
from edgelet.runtime.runc_runtime import RuncRuntime


async def _never(*_args: object, **_kwargs: object) -> object:
    raise AssertionError("no runc call is expected")


def _runtime(tmp_path: Path, infra_container: bool = False) -> RuncRuntime:
    paths = RuntimePaths(
        root_dir=tmp_path / "root", run_dir=tmp_path / "run", log_dir=tmp_path / "log", cgroup_root="/edgelet-test"
    )
    return RuncRuntime(
        paths,
        runtime_bin="/usr/sbin/runc",
        conmon_bin="/usr/bin/conmon",
        host_facts=HostFacts(),
        runner=_never,
        infra_container=infra_container,
    )  # type: ignore[arg-type]


def _pod(**spec: object) -> Pod:
    return Pod(metadata=ObjectMeta(name="p", namespace="ns", uid="u1"), spec=PodSpec(containers=[], **spec))


@pytest.mark.parametrize(
    "infra_container, spec, kind",
    [
        (False, {}, "pinned"),
        (False, {"share_process_namespace": True}, "infra"),
        (False, {"share_process_namespace": True, "host_pid": True}, "pinned"),
        (False, {"host_network": True}, "pinned"),
        (True, {}, "infra"),
    ],
)
def test_a_new_sandbox_kind(tmp_path: Path, infra_container: bool, spec: dict[str, object], kind: str) -> None:
    rt = _runtime(tmp_path, infra_container)
    assert rt.kind_for_pod(_pod(**spec)) is getattr(rt, kind)


@pytest.mark.parametrize(
    "annotations, kind",
    [
        ({ANN_KIND: KIND_SANDBOX, ANN_INFRA: "false"}, "pinned"),
        ({ANN_KIND: KIND_SANDBOX}, "infra"),  # older records: a pause process
        ({ANN_KIND: KIND_SANDBOX, ANN_INFRA: "true"}, "infra"),
        ({ANN_KIND: KIND_CONTAINER}, None),
        ({}, None),
    ],
)
def test_an_existing_sandbox_kind(tmp_path: Path, annotations: dict[str, str], kind: str | None) -> None:
    rt = _runtime(tmp_path)
    found = rt.kind_of_record(annotations)
    assert found is (getattr(rt, kind) if kind else None)
    assert (found is None) == (kind is None)
    if found is not None:
        assert found.monitored == (kind == "infra")


def test_the_oci_runtime_is_chosen_per_pod_in_one_place(tmp_path: Path) -> None:
    # The seam a runtime handler (runtimeClassName) plugs into: today one runc for every pod.
    rt = _runtime(tmp_path)
    assert rt.runc_for(_pod()) is rt.runc
    args = rt.conmon_args("c1", "n", tmp_path / "b", tmp_path / "l", runc=rt.runc_for(_pod()))
    assert (args.runtime, args.runtime_root) == ("/usr/sbin/runc", rt.paths.runc_root)


def test_a_pinned_sandbox_makes_its_pod_cgroup_beside_its_namespaces(tmp_path: Path, monkeypatch) -> None:
    """The pod cgroup (tens of ms in v1's hierarchies) and the namespaces are made at the same time; the
    sandbox is started only once both exist."""
    import asyncio
    import threading

    from edgelet.runtime import pinns

    rt = _runtime(tmp_path)
    made, pinning = threading.Event(), threading.Event()
    saw: dict[str, bool] = {}

    def make_cgroup(pod: Pod, uid: str, name: str) -> None:
        saw["pinning while the cgroup is made"] = pinning.wait(10)
        made.set()

    def pin(directory: Path, kinds: tuple[str, ...], hostname: str) -> dict[str, str]:
        pinning.set()
        saw["cgroup made before pinning ended"] = made.wait(10)
        return {kind: str(directory / kind) for kind in kinds}

    monkeypatch.setattr(rt.cgroups, "make", make_cgroup)
    monkeypatch.setattr(pinns, "pin", pin)
    sandbox = asyncio.run(rt.create_sandbox(_pod(), 0))
    assert sandbox.state == "running"
    assert saw == {"pinning while the cgroup is made": True, "cgroup made before pinning ended": True}
