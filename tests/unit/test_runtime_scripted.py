"""RuncRuntime against a scripted runc: what it asks runc to do, and what it makes of runc's answers.

The real runc and conmon are exercised by tests/integration/test_runtime_runc.py;
these pin the decisions around the calls (stop escalation, kill --all, the
exec pid file, list parsing) without root and without a container.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from edgelet.container.errors import ExecError, ExecTimeout, StartContainerError
from edgelet.container.types import Completed
from edgelet.runtime.bundle import TERMINATION_LOG
from edgelet.runtime.host import HostFacts
from edgelet.runtime.layout import (
    ANN_CONTAINER_NAME,
    ANN_KIND,
    ANN_LOG_PATH,
    ANN_POD_NAME,
    ANN_POD_NAMESPACE,
    ANN_POD_UID,
    ANN_TERMINATION_MESSAGE_FILE,
    ANN_TERMINATION_MESSAGE_POLICY,
    KIND_CONTAINER,
    KIND_SANDBOX,
    RuntimePaths,
)
from edgelet.runtime.runc_runtime import RuncRuntime
from edgelet.util.clock import FakeClock

Reply = Callable[[tuple[str, ...]], Completed]


@dataclass
class ScriptedRunc:
    """Answers runc subcommands from a table; records every call."""

    replies: dict[str, Reply | Completed | Exception] = field(default_factory=dict)
    calls: list[tuple[str, ...]] = field(default_factory=list)

    async def __call__(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = 30,
        input: bytes | None = None,
        check: bool = True,
        env: Mapping[str, str] | None = None,
        cwd: Any = None,
        pass_fds: Sequence[int] = (),
        daemonizes: bool = False,
        spawned: Any = None,
    ) -> Completed:
        args = tuple(str(a) for a in argv)
        self.calls.append(args)
        sub = _subcommand(args)
        reply = self.replies.get(sub, Completed(args, 0, b"", b""))
        if isinstance(reply, Exception):
            raise reply
        done = reply(args) if callable(reply) else reply
        if check and done.returncode != 0:
            raise ExecError(args, done.returncode, done.stderr)
        return done

    def subcommands(self) -> list[str]:
        return [_subcommand(c) for c in self.calls]


def _subcommand(args: tuple[str, ...]) -> str:
    rest = list(args[1:])
    if rest[:1] == ["--root"]:
        rest = rest[2:]
    return rest[0] if rest else ""


def _runtime(tmp_path: Path, runner: ScriptedRunc, clock: FakeClock | None = None) -> RuncRuntime:
    paths = RuntimePaths(
        root_dir=tmp_path / "root", run_dir=tmp_path / "run", log_dir=tmp_path / "log", cgroup_root="/edgelet-test"
    )
    return RuncRuntime(
        paths,
        runtime_bin="/usr/sbin/runc",
        conmon_bin="/usr/bin/conmon",
        clock=clock or FakeClock(),
        host_facts=HostFacts(),
        runner=runner,
    )


def _entry(cid: str, status: str, **ann: str) -> dict[str, Any]:
    return {
        "id": cid,
        "status": status,
        "pid": 0 if status == "stopped" else 4242,
        "bundle": "",
        "created": "2026-11-24T10:00:00.000000000Z",
        "annotations": ann,
    }


def _listing(*entries: dict[str, Any]) -> Completed:
    return Completed(("runc", "list"), 0, json.dumps(list(entries)).encode(), b"")


def test_list_pods_groups_runcs_containers_by_pod_and_ignores_strangers(tmp_path: Path) -> None:
    pod = {ANN_POD_UID: "u1", ANN_POD_NAME: "web", ANN_POD_NAMESPACE: "default"}
    runner = ScriptedRunc(
        {
            "list": _listing(
                _entry("sb1", "running", **{ANN_KIND: KIND_SANDBOX}, **pod),
                _entry("c1", "running", **{ANN_KIND: KIND_CONTAINER, ANN_CONTAINER_NAME: "app"}, **pod),
                _entry("other", "running", foo="bar"),  # not edgelet's: no kind annotation
            )
        }
    )
    rt = _runtime(tmp_path, runner)
    pods = asyncio.run(rt.list_pods())
    assert list(pods) == ["u1"]
    st = pods["u1"]
    assert (st.name, st.namespace) == ("web", "default")
    assert [s.id for s in st.sandboxes] == ["sb1"] and st.sandboxes[0].state == "running"
    assert [(c.id, c.name, c.state) for c in st.containers] == [("c1", "app", "running")]
    assert runner.calls[0][1:] == ("--root", str(tmp_path / "run" / "runc"), "list", "--format", "json")


def test_a_stopped_container_without_an_exit_file_is_an_unknown_exit(tmp_path: Path) -> None:
    runner = ScriptedRunc(
        {
            "list": _listing(
                _entry("c1", "stopped", **{ANN_KIND: KIND_CONTAINER, ANN_POD_UID: "u1", ANN_CONTAINER_NAME: "app"})
            )
        }
    )
    (c,) = asyncio.run(_runtime(tmp_path, runner).list_pods())["u1"].containers
    assert (c.state, c.exit_code, c.reason) == ("exited", 255, "ContainerStatusUnknown")


def test_the_exit_file_gives_the_exit_code(tmp_path: Path) -> None:
    runner = ScriptedRunc(
        {
            "list": _listing(
                _entry("c1", "stopped", **{ANN_KIND: KIND_CONTAINER, ANN_POD_UID: "u1", ANN_CONTAINER_NAME: "app"})
            )
        }
    )
    rt = _runtime(tmp_path, runner)
    (rt.paths.exit_dir / "c1").write_text("3")
    (c,) = asyncio.run(rt.list_pods())["u1"].containers
    assert (c.state, c.exit_code, c.reason) == ("exited", 3, "Error")


def _container_bundle(
    rt: RuncRuntime, name: str, cid: str, message: bytes, exit_code: int | None, **ann: str
) -> tuple[Path, dict[str, str]]:
    """A container's bundle as create_container leaves it: config.json with `ann`, the termination-log file
    holding `message`, a log of 20 lines, and conmon's exit file when `exit_code` is set."""
    bundle = rt.paths.pods_dir / "u1" / "containers" / name / "0"
    bundle.mkdir(parents=True)
    (bundle / "id").write_text(cid)
    (bundle / TERMINATION_LOG).write_bytes(message)
    log = rt.paths.log_dir / "pods" / "default_web_u1" / name / "0.log"
    log.parent.mkdir(parents=True)
    log.write_text("".join(f"2026-11-24T10:00:0{i % 10}.000000000Z stderr F line {i}\n" for i in range(1, 21)))
    annotations = {ANN_KIND: KIND_CONTAINER, ANN_POD_UID: "u1", ANN_CONTAINER_NAME: name, ANN_LOG_PATH: str(log), **ann}
    (bundle / "config.json").write_text(json.dumps({"annotations": annotations}))
    if exit_code is not None:
        (rt.paths.exit_dir / cid).write_text(str(exit_code))
    return bundle, annotations


def test_an_exited_containers_record_carries_its_termination_message(tmp_path: Path) -> None:
    """The runtime fills the message in, as kubelet's getContainerStatus does: from the file, from the log
    with FallbackToLogsOnError, and from the file for a bundle of an older edgelet without the annotations."""
    entries: list[dict[str, Any]] = []

    def delete(args: tuple[str, ...]) -> Completed:
        entries[:] = [e for e in entries if e["id"] != args[-1]]
        return Completed(args, 0, b"", b"")

    rt = _runtime(tmp_path, ScriptedRunc({"list": lambda args: _listing(*entries), "delete": delete}))
    file_policy = {ANN_TERMINATION_MESSAGE_POLICY: "File", ANN_TERMINATION_MESSAGE_FILE: "true"}
    fallback = {ANN_TERMINATION_MESSAGE_POLICY: "FallbackToLogsOnError", ANN_TERMINATION_MESSAGE_FILE: "true"}
    b_file, a_file = _container_bundle(rt, "file", "c-file", b"bye now", 3, **file_policy)
    _, a_logs = _container_bundle(rt, "logs", "c-logs", b"", 1, **fallback)
    _, a_run = _container_bundle(rt, "run", "c-run", b"not yet", None, **fallback)
    # Left by an older edgelet and unknown to runc since a reboot cleared /run: only its bundle is left.
    _container_bundle(rt, "old", "c-old", b"from an old bundle", 2)
    entries += [
        {**_entry("c-file", "stopped", **a_file), "bundle": str(b_file)},
        _entry("c-logs", "stopped", **a_logs),  # no bundle from runc: the layout's path is read
        _entry("c-run", "running", **a_run),
    ]

    def messages() -> dict[str, tuple[str, str]]:
        return {c.name: (c.state, c.termination_message) for c in asyncio.run(rt.list_pods())["u1"].containers}

    assert messages() == {
        "file": ("exited", "bye now"),
        "logs": ("exited", "".join(f"line {i}\n" for i in range(1, 21))),
        "run": ("running", ""),  # only an exited container has a message
        "old": ("exited", "from an old bundle"),
    }
    # Read once: an exited container writes no more, so a relist reads nothing again.
    (b_file / TERMINATION_LOG).write_bytes(b"changed")
    assert messages()["file"] == ("exited", "bye now")
    # The cached message goes with its container, whether removed by the runtime or from under it.
    # So does what the runtime remembers of its OOM check: neither may grow over a year of restarts.
    assert {"c-file", "c-old"} <= rt.observer.oom_checked
    asyncio.run(rt.remove_container("c-file"))
    assert "c-file" not in rt.observer.messages and "c-file" not in rt.observer.oom_checked
    shutil.rmtree(rt.paths.pods_dir / "u1" / "containers" / "old")
    assert set(messages()) == {"logs", "run"}
    assert set(rt.observer.messages) == {"c-logs"}
    assert rt.observer.oom_checked <= {"c-logs"}


def test_a_message_read_before_the_exit_is_recorded_is_read_again(tmp_path: Path) -> None:
    """A bundle made after `runc list` began reads as an unknown exit until the next relist: what its files
    held then is no final message (found by the e2e test: the log fallback came out empty)."""
    entries: list[dict[str, Any]] = []
    rt = _runtime(tmp_path, ScriptedRunc({"list": lambda args: _listing(*entries)}))
    bundle, ann = _container_bundle(
        rt,
        "late",
        "c-late",
        b"",
        None,
        **{ANN_TERMINATION_MESSAGE_POLICY: "File", ANN_TERMINATION_MESSAGE_FILE: "true"},
    )

    def late() -> tuple[str, int | None, str]:
        (c,) = asyncio.run(rt.list_pods())["u1"].containers
        return c.state, c.exit_code, c.termination_message

    assert late() == ("exited", 255, "")
    entries.append({**_entry("c-late", "stopped", **ann), "bundle": str(bundle)})
    (bundle / TERMINATION_LOG).write_bytes(b"done")
    (rt.paths.exit_dir / "c-late").write_text("1")
    assert late() == ("exited", 1, "done")


def test_stop_sends_the_signal_then_kills_every_process_when_the_grace_period_is_spent(tmp_path: Path) -> None:
    exited = False

    def state(args: tuple[str, ...]) -> Completed:
        return Completed(args, 0, json.dumps({"status": "stopped" if exited else "running"}).encode(), b"")

    def kill(args: tuple[str, ...]) -> Completed:
        nonlocal exited
        if "SIGKILL" in args:
            exited = True
        return Completed(args, 0, b"", b"")

    runner = ScriptedRunc({"list": _listing(), "state": state, "kill": kill})
    asyncio.run(_runtime(tmp_path, runner).stop_container("c1", grace=5, signal="SIGQUIT"))
    kills = [c[3:] for c in runner.calls if _subcommand(c) == "kill"]
    # The container's own stop signal first; after the grace period SIGKILL to every process of its cgroup.
    assert kills == [("kill", "c1", "SIGQUIT"), ("kill", "--all", "c1", "SIGKILL")]


def test_stop_of_a_container_that_already_exited_sends_nothing(tmp_path: Path) -> None:
    runner = ScriptedRunc({"list": _listing()})
    rt = _runtime(tmp_path, runner)
    (rt.paths.exit_dir / "c1").write_text("0")
    asyncio.run(rt.stop_container("c1", grace=30))
    assert "kill" not in runner.subcommands()


def test_a_container_runc_cannot_find_fails_to_start_with_its_id(tmp_path: Path) -> None:
    runner = ScriptedRunc({"list": _listing(), "start": Completed(("runc",), 1, b"", b"container does not exist")})
    with pytest.raises(StartContainerError, match="container c1"):
        asyncio.run(_runtime(tmp_path, runner).start_container("c1"))


def test_exec_sync_kills_the_command_through_its_pid_file_on_a_timeout(tmp_path: Path) -> None:
    def timeout(args: tuple[str, ...]) -> Completed:
        pid_file = Path(args[args.index("--pid-file") + 1])
        pid_file.write_text("999999999")  # no such process: the kill is attempted and harmless
        raise ExecTimeout(args, 1.0)

    runner = ScriptedRunc({"exec": timeout})
    rt = _runtime(tmp_path, runner)
    with pytest.raises(ExecTimeout):
        asyncio.run(rt.exec_sync("c1", ["sleep", "100"], timeout=1.0))
    (call,) = runner.calls
    assert call[-3:] == ("c1", "sleep", "100")
    assert list((rt.paths.run_dir / "exec").iterdir()) == []  # the pid file is gone


def test_exec_sync_passes_the_exit_code_through(tmp_path: Path) -> None:
    runner = ScriptedRunc({"exec": lambda args: Completed(args, 7, b"out", b"err")})
    done = asyncio.run(_runtime(tmp_path, runner).exec_sync("c1", ["false"], timeout=None))
    assert (done.returncode, done.stdout, done.stderr) == (7, b"out", b"err")


def test_runc_list_racing_a_delete_is_listed_again(tmp_path: Path) -> None:
    """runc 1.1: a container deleted while `runc list` walks the root fails the whole list (issue 16)."""
    answers = [
        Completed(("runc",), 1, b"", b"stat /run/edgelet/runc/abc: no such file or directory"),
        _listing(_entry("c1", "running", **{ANN_KIND: KIND_CONTAINER, ANN_POD_UID: "u1", ANN_CONTAINER_NAME: "app"})),
    ]
    runner = ScriptedRunc({"list": lambda args: answers.pop(0)})
    pods = asyncio.run(_runtime(tmp_path, runner).list_pods())
    assert list(pods) == ["u1"] and runner.subcommands() == ["list", "list"]


def test_another_runc_list_failure_is_not_hidden(tmp_path: Path) -> None:
    runner = ScriptedRunc({"list": Completed(("runc",), 1, b"", b"permission denied")})
    with pytest.raises(ExecError, match="permission denied"):
        asyncio.run(_runtime(tmp_path, runner).list_pods())


def test_removal_drops_the_exit_file_before_the_bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kill in the middle of a removal leaves a bundle (found and removed by the next sync), never an exit
    file that nothing refers to (issue 16)."""
    from edgelet.runtime import bundle as bl

    rt = _runtime(tmp_path, ScriptedRunc({"list": _listing()}))
    bundle = rt.paths.pods_dir / "u1" / "containers" / "app" / "0"
    bundle.mkdir(parents=True)
    (bundle / bl.CONFIG).write_text("{}")
    (rt.paths.exit_dir / "c1").write_text("0")

    class Killed(BaseException):
        pass

    def killed(path: Path) -> None:
        raise Killed()

    monkeypatch.setattr(bl, "remove_tree", killed)
    with pytest.raises(Killed):
        rt.remove_files("c1", bundle)
    assert not (rt.paths.exit_dir / "c1").exists() and bundle.exists()


def test_stray_exit_files_are_swept_at_start(tmp_path: Path) -> None:
    runner = ScriptedRunc(
        {
            "list": _listing(
                _entry("live", "running", **{ANN_KIND: KIND_CONTAINER, ANN_POD_UID: "u1", ANN_CONTAINER_NAME: "app"})
            )
        }
    )
    rt = _runtime(tmp_path, runner)
    for cid in ("live", "gone1", "gone2"):
        (rt.paths.exit_dir / cid).write_text("0")
    # An agent killed during `edgelet exec` left its session's process spec (the container's env) and pid file;
    # this agent's own session, started by the API before the sweep, stays.
    rt.paths.exec_dir.mkdir(parents=True)
    for name in ("0badc0de-live-1.process.json", "0badc0de-live-1.pid", f"{rt.execs.prefix}-live-2.process.json"):
        (rt.paths.exec_dir / name).write_text("{}")
    assert asyncio.run(rt.remove_stray_files()) == 4
    assert sorted(p.name for p in rt.paths.exit_dir.iterdir()) == ["live"]
    assert [p.name for p in rt.paths.exec_dir.iterdir()] == [f"{rt.execs.prefix}-live-2.process.json"]


def test_a_pod_dir_whose_bundles_are_all_gone_is_still_listed_so_it_is_removed(tmp_path: Path) -> None:
    """Found by the chaos harness (issue 16): a kill after a pod's last bundle was removed and before its
    directory was left `pods/<uid>/` (hostname, etc-hosts, volumes) and its cgroup for good, because the
    runtime only knew pods through runc state or bundles, so the pod never came back as an orphan."""
    runner = ScriptedRunc({"list": _listing()})
    rt = _runtime(tmp_path, runner)
    leftover = rt.paths.pods_dir / "u-left"
    (leftover / "containers").mkdir(parents=True)
    (leftover / "volumes").mkdir()
    (leftover / "hostname").write_text("x\n")
    pods = asyncio.run(rt.list_pods())
    assert "u-left" in pods and not pods["u-left"].sandboxes and not pods["u-left"].containers
    asyncio.run(rt.remove_pod("u-left"))
    assert not leftover.exists()


def test_a_pod_whose_container_removal_failed_keeps_its_bundles_for_the_retry(tmp_path: Path) -> None:
    """Found by the chaos harness's flaky runtime (issue 16): when one container's `runc delete` failed,
    remove_pod still removed the pod dir, and with it the only record of the container: its exit file and
    conmon socket then stayed in the run dir, known to nothing, until the next agent start."""
    calls = {"delete": 0}

    def delete(args: tuple[str, ...]) -> Completed:
        calls["delete"] += 1
        return Completed(args, 1 if calls["delete"] <= 2 else 0, b"", b"injected failure")

    runner = ScriptedRunc(
        {
            "list": _listing(),
            "delete": delete,
            "state": Completed(("runc", "state"), 1, b"", b"container does not exist"),
        }
    )
    rt = _runtime(tmp_path, runner)
    bundle = rt.paths.pods_dir / "u1" / "containers" / "app" / "0"
    bundle.mkdir(parents=True)
    (bundle / "id").write_text("c1")
    (bundle / "config.json").write_text(
        json.dumps({"annotations": {ANN_KIND: KIND_CONTAINER, ANN_POD_UID: "u1", ANN_CONTAINER_NAME: "app"}})
    )
    (rt.paths.exit_dir / "c1").write_text("0")
    from edgelet.container.errors import RuntimeError_

    with pytest.raises(RuntimeError_):
        asyncio.run(rt.remove_pod("u1"))
    assert (bundle / "id").exists(), "the bundle stays while its container could not be removed"
    asyncio.run(rt.remove_pod("u1"))  # the retry, with runc working again
    assert not (rt.paths.pods_dir / "u1").exists()
    assert not (rt.paths.exit_dir / "c1").exists()


def test_concurrent_lists_share_calls_but_never_an_older_one() -> None:
    # 100 pods syncing at once each listed every container: quadratic. Callers now share a list, but only
    # one that started after they asked, so no caller sees a state older than its own call would.
    from edgelet.runtime.runc import Runc

    release = asyncio.Event()
    calls: list[int] = []

    async def runner(argv: Sequence[str], **_kw: Any) -> Completed:
        calls.append(len(calls) + 1)
        n = len(calls)
        if n == 1:
            await release.wait()
        return _listing(_entry(f"c{n}", "running"))

    async def go() -> list[list[str]]:
        runc = Runc("/usr/sbin/runc", Path("/run/x"), runner=runner)
        first = asyncio.create_task(runc.list())
        await asyncio.sleep(0)  # the first list is running (and blocked)
        later = [asyncio.create_task(runc.list()) for _ in range(4)]
        await asyncio.sleep(0)
        release.set()
        results = [await first, *[await t for t in later]]
        results.append(await runc.list())  # asked after every list so far ended: a list of its own
        return [[e["id"] for e in r] for r in results]

    ids = asyncio.run(go())
    assert ids == [["c1"], ["c2"], ["c2"], ["c2"], ["c2"], ["c3"]]
    assert calls == [1, 2, 3]
