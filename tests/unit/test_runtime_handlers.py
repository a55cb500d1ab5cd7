"""Runtime handlers: their configuration, a pod's choice and its admission, and the parsers of what runc and
crun print, on output captured from both binaries (tests/unit/oci_output)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from edgelet.api.types import Pod
from edgelet.container.errors import ExecError
from edgelet.container.types import Completed
from edgelet.runtime.handlers import (
    REASON_NOT_FOUND,
    HandlerConfig,
    HandlerError,
    RuntimeHandlers,
    admit_handler,
    features_summary,
    parse_features,
    parse_handlers,
    pod_handler,
    resolve_handlers,
)
from edgelet.runtime.host import HostFacts
from edgelet.runtime.layout import (
    ANN_KIND,
    ANN_POD_NAME,
    ANN_POD_NAMESPACE,
    ANN_POD_UID,
    ANN_RUNTIME_HANDLER,
    KIND_CONTAINER,
    KIND_SANDBOX,
    RuntimePaths,
)
from edgelet.runtime.runc import Runc, _is_not_found
from edgelet.runtime.runc_runtime import RuncRuntime
from edgelet.runtime.state import parse_runc_time
from edgelet.util.clock import FakeClock
from edgelet.util.proc import program_name

OUTPUT = Path(__file__).parent / "oci_output"


def _pod(runtime_class: str | None = None) -> Pod:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "i"}]}
    if runtime_class is not None:
        spec["runtimeClassName"] = runtime_class
    from edgelet.api.decode import parse_manifests

    doc = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}
    (pod,) = parse_manifests(json.dumps(doc).encode(), "test")
    return pod


# ------------------------------------------------------------ configuration


@pytest.mark.parametrize(
    "raw, from_toml, expected",
    [
        ({"crun": "/usr/bin/crun"}, True, (("crun", HandlerConfig("/usr/bin/crun")),)),
        (
            {"kata": {"path": "/opt/kata", "root": "/run/kata"}, "crun": {"path": "crun"}},
            True,
            (("crun", HandlerConfig("crun")), ("kata", HandlerConfig("/opt/kata", Path("/run/kata")))),
        ),
        ({"crun": {"path": "crun", "systemd_cgroup": False}}, True, (("crun", HandlerConfig("crun")),)),
        (
            "crun=/usr/bin/crun, youki=/usr/local/bin/youki",
            False,
            (
                ("crun", HandlerConfig("/usr/bin/crun")),
                ("youki", HandlerConfig("/usr/local/bin/youki")),
            ),
        ),
        (["crun=/a", "kata=/b"], False, (("crun", HandlerConfig("/a")), ("kata", HandlerConfig("/b")))),
        ('{"crun": {"path": "/a", "root": "/r"}}', False, (("crun", HandlerConfig("/a", Path("/r"))),)),
        ("", False, ()),
        ({}, True, ()),
    ],
)
def test_parse_handlers(raw: Any, from_toml: bool, expected: tuple[tuple[str, HandlerConfig], ...]) -> None:
    assert parse_handlers(raw, from_toml) == expected


@pytest.mark.parametrize(
    "raw, from_toml, error",
    [
        ({"crun": {"path": "/a", "rooot": "/r"}}, True, "unknown option(s) rooot"),
        ({"crun": {"path": "/a", "systemd_cgroup": True}}, True, "systemd_cgroup = true is not supported"),
        ({"crun": {"path": "/a", "root": "run/crun"}}, True, "root must be an absolute path"),
        ({"crun": {"root": "/r"}}, True, "path must be a non-empty string"),
        ({"Crun": "/a"}, True, "handler name 'Crun'"),
        ({"crun": 3}, True, "expected a path or a table"),
        ("crun", False, "expected name=path"),
        ("{nope", False, "expected a JSON object"),
        (["crun"], True, "expected a table of handlers"),
    ],
)
def test_parse_handlers_refuses_with_the_reason(raw: Any, from_toml: bool, error: str) -> None:
    with pytest.raises(ValueError, match=error.replace("(", r"\(").replace(")", r"\)")):
        parse_handlers(raw, from_toml)


def test_settings_read_handlers_from_toml_env_and_flags(tmp_path: Path) -> None:
    from edgelet.settings import SettingsError, load_settings

    cfg = tmp_path / "c.toml"
    cfg.write_text('runtime_handler = "crun"\n[runtime_handlers.crun]\npath = "/usr/bin/crun"\nroot = "/run/c"\n')
    s = load_settings(config=cfg, env={})
    assert s.runtime_handler == "crun"
    assert s.runtime_handlers == (("crun", HandlerConfig("/usr/bin/crun", Path("/run/c"))),)
    s = load_settings(config=cfg, env={"EDGELET_RUNTIME_HANDLERS": "kata=/opt/kata"})
    assert s.runtime_handlers == (("kata", HandlerConfig("/opt/kata")),)
    s = load_settings({"runtime_handlers": ["crun=/x"], "runtime_handler": "runc"}, config=cfg, env={})
    assert (s.runtime_handlers, s.runtime_handler) == ((("crun", HandlerConfig("/x")),), "runc")
    cfg.write_text('[runtime_handlers.crun]\npath = "/c"\nsystemd_cgroup = true\n')
    with pytest.raises(SettingsError, match="runtime_handlers: handler 'crun': systemd_cgroup"):
        load_settings(config=cfg, env={})


@pytest.mark.parametrize(
    "found, configured, expected",
    [
        ({"runc": "/usr/sbin/runc", "crun": "/usr/bin/crun"}, (), {"runc": "/usr/sbin/runc", "crun": "/usr/bin/crun"}),
        ({"runc": "/usr/sbin/runc"}, (), {"runc": "/usr/sbin/runc"}),
        ({}, (), {"runc": "runc"}),  # missing: reported where it is used, as before handlers
        (
            {"runc": "/usr/sbin/runc", "crun": "/usr/bin/crun"},
            (("crun", HandlerConfig("/opt/crun")), ("kata", HandlerConfig("/opt/kata"))),
            {"runc": "/usr/sbin/runc", "crun": "/opt/crun", "kata": "/opt/kata"},
        ),
    ],
)
def test_resolve_handlers(found: dict[str, str], configured: Any, expected: dict[str, str]) -> None:
    got = resolve_handlers(configured, "runc", which=found.get)
    assert {name: cfg.path for name, cfg in got.items()} == expected


def test_handlers_registry_roots_and_lookups(tmp_path: Path) -> None:
    paths = RuntimePaths(tmp_path / "root", tmp_path / "run", tmp_path / "log")
    handlers = RuntimeHandlers(
        {
            "runc": HandlerConfig("/usr/sbin/runc"),
            "crun": HandlerConfig("/usr/bin/crun"),
            "k": HandlerConfig("/k", Path("/r")),
        },
        "crun",
        paths,
        which=lambda p: None,
    )
    # runc's root stays where every earlier edgelet kept its containers.
    assert handlers.get("runc").root == tmp_path / "run" / "runc"
    assert handlers.get("crun").root == tmp_path / "run" / "runtimes" / "crun"
    assert handlers.get("k").root == Path("/r")
    assert handlers.get("").name == "runc"  # a record older than handlers
    assert handlers.for_pod(_pod()).name == "crun"
    assert handlers.for_pod(_pod("runc")).name == "runc"
    with pytest.raises(HandlerError, match="'gone' is not configured any more.*crun, k, runc"):
        handlers.get("gone")
    with pytest.raises(HandlerError, match="runtime_handler 'crun': no such runtime handler.*runc"):
        RuntimeHandlers({"runc": HandlerConfig("runc")}, "crun", paths)


# ------------------------------------------------------------ a pod's choice and its admission


@pytest.mark.parametrize(
    "runtime_class, default, expected",
    [(None, "runc", "runc"), (None, "crun", "crun"), ("crun", "runc", "crun"), ("", "crun", "crun")],
)
def test_pod_handler(runtime_class: str | None, default: str, expected: str) -> None:
    assert pod_handler(_pod(runtime_class), default) == expected


@pytest.mark.parametrize(
    "runtime_class, refused",
    [(None, False), ("runc", False), ("crun", False), ("kata", True), ("gvisor", True)],
)
def test_admit_handler(runtime_class: str | None, refused: bool) -> None:
    verdict = admit_handler(_pod(runtime_class), ["runc", "crun"], "runc")
    if not refused:
        assert verdict is None
        return
    assert verdict is not None and verdict.refused
    assert verdict.reason == REASON_NOT_FOUND
    assert f"runtimeClassName {runtime_class!r}" in verdict.message
    assert "this node's handlers are crun, runc" in verdict.message


# ------------------------------------------------------------ what the two binaries print


def test_features_of_both_binaries() -> None:
    runc = parse_features((OUTPUT / "runc-features.json").read_bytes())
    assert runc is not None and runc["ociVersionMax"] == "1.0.2-dev"
    assert features_summary(runc) == "OCI 1.0.0..1.0.2-dev, cgroup v1/v2/systemd, seccomp (notify)"
    # crun 1.8.1 has no `features` command.
    assert parse_features((OUTPUT / "crun-features.txt").read_bytes()) is None
    assert parse_features(b"") is None
    assert features_summary(None).startswith("features unknown")


@pytest.mark.parametrize(
    "line", (OUTPUT / "not-found.txt").read_text().splitlines(), ids=lambda line: line.split("\t")[0]
)
def test_not_found_errors_of_both_binaries(line: str) -> None:
    command, stderr = line.split("\t", 1)
    assert _is_not_found(ExecError(command.split(), 1, stderr.encode()))


def test_other_errors_are_not_not_found() -> None:
    assert not _is_not_found(ExecError(["crun", "kill"], 1, b"kill container: Operation not permitted"))


@pytest.mark.parametrize(
    "name, created",
    [("runc-list.json", 1795860375.475598361), ("crun-list.json", 1795860375.678857)],
)
def test_list_output_of_both_binaries(name: str, created: float) -> None:
    (entry,) = json.loads((OUTPUT / name).read_bytes())
    assert entry["status"] == "running" and entry["pid"] > 0
    assert parse_runc_time(entry["created"]) == pytest.approx(created)
    # runc lists annotations; crun does not (the observer reads them from the bundle).
    assert ("annotations" in entry) == name.startswith("runc")


@pytest.mark.parametrize("name", ["runc-state.json", "crun-state.json"])
def test_state_output_of_both_binaries(name: str) -> None:
    state = json.loads((OUTPUT / name).read_bytes())
    assert state["status"] == "running" and state["annotations"]["io.edgelet.kind"] == "container"


def test_an_empty_crun_list_is_empty() -> None:
    class Once:
        async def __call__(self, argv: Sequence[str], **kw: Any) -> Completed:
            return Completed(tuple(argv), 0, (OUTPUT / "crun-list-empty.json").read_bytes(), b"")

    assert asyncio.run(Runc("crun", Path("/r"), runner=Once()).list()) == []


# ------------------------------------------------------------ the runtime with two handlers


class TwoRuntimes:
    """Answers `list` per binary from a table; records every call (fakes only the process boundary)."""

    def __init__(self, listings: Mapping[str, list[dict[str, Any]]]) -> None:
        self.listings = listings
        self.calls: list[tuple[str, ...]] = []

    async def __call__(self, argv: Sequence[str], *, check: bool = True, **kw: Any) -> Completed:
        args = tuple(str(a) for a in argv)
        self.calls.append(args)
        binary, sub = program_name(args[0]), args[3]  # crun runs from its sealed copy: named by what it holds
        if sub == "list":
            return Completed(args, 0, json.dumps(self.listings.get(binary, [])).encode(), b"")
        if sub == "state":
            cid = args[4]
            for entry in self.listings.get(binary, []):
                if entry["id"] == cid:
                    return Completed(args, 0, json.dumps(entry).encode(), b"")
            err = b"error opening file: No such file or directory"
            if check:
                raise ExecError(args, 1, err)
            return Completed(args, 1, b"", err)
        return Completed(args, 0, b"", b"")


def _bundle(tmp_path: Path, uid: str, name: str, cid: str, ann: dict[str, str]) -> Path:
    bundle = tmp_path / "root" / "pods" / uid / name
    bundle.mkdir(parents=True)
    (bundle / "id").write_text(cid)
    (bundle / "config.json").write_text(json.dumps({"annotations": ann}))
    return bundle


def test_a_runtime_observes_and_drives_each_container_under_its_own_handler(tmp_path: Path) -> None:
    paths = RuntimePaths(tmp_path / "root", tmp_path / "run", tmp_path / "log", cgroup_root="/t")
    base = {ANN_POD_NAME: "p", ANN_POD_NAMESPACE: "default"}
    crun_ann = {**base, ANN_KIND: KIND_CONTAINER, ANN_POD_UID: "u2", "io.kubernetes.container.name": "c"}
    crun_ann[ANN_RUNTIME_HANDLER] = "crun"
    crun_bundle = _bundle(tmp_path, "u2", "containers/c/0", "c2", crun_ann)
    runc_ann = {**base, ANN_KIND: KIND_CONTAINER, ANN_POD_UID: "u1", "io.kubernetes.container.name": "c"}
    crun_entry = json.loads((OUTPUT / "crun-list.json").read_bytes())[0] | {"id": "c2", "bundle": str(crun_bundle)}
    runc_entry = json.loads((OUTPUT / "runc-list.json").read_bytes())[0] | {"id": "c1", "annotations": runc_ann}
    runner = TwoRuntimes({"runc": [runc_entry], "crun": [crun_entry]})
    (paths.run_dir / "runtimes" / "crun" / "c2").mkdir(parents=True)  # crun's state dir of its container
    rt = RuncRuntime(
        paths,
        clock=FakeClock(),
        host_facts=HostFacts(),
        runner=runner,
        runtime_handlers={"runc": HandlerConfig("/usr/sbin/runc"), "crun": HandlerConfig("/usr/bin/crun")},
        runtime_handler="runc",
    )
    pods = asyncio.run(rt.list_pods())
    # crun's listing has no annotations: they are read from the bundle, and the pod is found.
    assert {uid: [c.id for c in p.containers] for uid, p in pods.items() if p.containers} == {
        "u1": ["c1"],
        "u2": ["c2"],
    }
    crun = rt.handlers.get("crun").exec_path()  # its sealed copy where this machine has a crun
    assert {call[0] for call in runner.calls if call[3] == "list"} == {"/usr/sbin/runc", crun}
    # A handler other than the default whose root holds nothing is not listed: no second spawn per relist.
    (paths.run_dir / "runtimes" / "crun" / "c2").rmdir()
    runner.calls.clear()
    asyncio.run(rt.list_pods())
    assert [call[0] for call in runner.calls if call[3] == "list"] == ["/usr/sbin/runc"]
    (paths.run_dir / "runtimes" / "crun" / "c2").mkdir()
    asyncio.run(rt.list_pods())
    runner.calls.clear()
    asyncio.run(rt.exec_sync("c2", ["true"], timeout=1))
    asyncio.run(rt.exec_sync("c1", ["true"], timeout=1))
    assert [(c[0], c[3]) for c in runner.calls] == [(crun, "exec"), ("/usr/sbin/runc", "exec")]
    # A bundle no handler lists any more (a reboot cleared /run) is its record's handler's.
    orphan_ann = {**base, ANN_KIND: KIND_SANDBOX, ANN_POD_UID: "u3", ANN_RUNTIME_HANDLER: "crun"}
    _bundle(tmp_path, "u3", "sandbox", "s3", orphan_ann)
    pods = asyncio.run(rt.list_pods())
    assert pods["u3"].sandboxes[0].runtime_handler == "crun"
    assert asyncio.run(rt.runc_of("s3")).name == "crun"
    # An unknown runtimeClassName is refused before anything is made.
    verdict = rt.admit(_pod("kata"))
    assert verdict is not None and verdict.refused and "crun, runc" in verdict.message


@pytest.mark.parametrize(
    "binary, relays", [("/usr/sbin/runc", True), ("runc", True), ("/usr/bin/crun", False), ("crun", False)]
)
def test_which_runtime_resizes_an_exec_terminal_itself(binary: str, relays: bool) -> None:
    # crun 1.8's `exec -t` ignores SIGWINCH: its sessions copy the client's terminal size to the command's.
    assert Runc(binary, Path("/r")).relays_resize is relays
