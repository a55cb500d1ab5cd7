"""The event ring: aggregation of repeats, the capacity bound, the file `edgelet events` reads, and the table."""

from __future__ import annotations

import io
from pathlib import Path

from edgelet.api.types import ObjectMeta, Pod
from edgelet.cli import main
from edgelet.cli.events import events_table
from edgelet.events import EventRecorder, InvolvedObject, events_path, pod_ref, read_events
from edgelet.util.clock import FakeClock


def _pod(name: str = "web", uid: str = "u1") -> Pod:
    return Pod(metadata=ObjectMeta(name=name, namespace="default", uid=uid))


def test_repeat_bumps_count_and_last_time() -> None:
    clock = FakeClock()
    rec = EventRecorder(clock)
    ref = pod_ref(_pod(), "app")
    rec.warning(ref, "BackOff", "Back-off restarting failed container app")
    clock.advance(10)
    e = rec.warning(ref, "BackOff", "Back-off restarting failed container app")
    assert len(rec.events()) == 1
    assert e.count == 2
    assert e.last_timestamp - e.first_timestamp == 10
    assert e.object.field_path == "spec.containers{app}"


def test_different_message_is_another_event_and_order_is_by_last_occurrence() -> None:
    rec = EventRecorder(FakeClock())
    ref = pod_ref(_pod())
    rec.normal(ref, "Started", "Started container: a")
    rec.normal(ref, "Started", "Started container: b")
    rec.normal(ref, "Started", "Started container: a")
    assert [e.message for e in rec.events()] == ["Started container: b", "Started container: a"]


def test_ring_is_bounded() -> None:
    rec = EventRecorder(FakeClock(), capacity=3)
    for i in range(10):
        rec.normal(pod_ref(_pod()), "Created", f"Created container: c{i}")
    assert [e.message for e in rec.events()] == [f"Created container: c{i}" for i in (7, 8, 9)]


def test_filter_by_pod_uid() -> None:
    rec = EventRecorder(FakeClock())
    rec.normal(pod_ref(_pod("a", "u1")), "Started", "x")
    rec.normal(pod_ref(_pod("b", "u2")), "Started", "y")
    assert [e.message for e in rec.events("u2")] == ["y"]


def test_init_container_field_path() -> None:
    assert pod_ref(_pod(), "setup", init=True).field_path == "spec.initContainers{setup}"


def test_flush_and_cli(tmp_path: Path, capsys) -> None:
    clock = FakeClock()
    rec = EventRecorder(clock, events_path(tmp_path))
    rec.warning(
        InvolvedObject(kind="Manifest", name="/m/bad.yaml"), "FailedValidation", "/m/bad.yaml: $.spec: Required value"
    )
    rec.normal(pod_ref(_pod()), "Started", "Started container: app")
    rec.flush()
    snap = read_events(events_path(tmp_path))
    assert snap is not None and [e.reason for e in snap.events] == ["FailedValidation", "Started"]
    assert main(["events", "--run-dir", str(tmp_path), "--root-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "FailedValidation" in out and "manifest//m/bad.yaml" in out
    assert main(["events", "--run-dir", str(tmp_path), "--root-dir", str(tmp_path), "--for", "default/web"]) == 0
    out = capsys.readouterr().out
    assert "Started container: app" in out and "FailedValidation" not in out


def test_events_table_shows_repeat_count() -> None:
    clock = FakeClock()
    rec = EventRecorder(clock)
    rec.warning(pod_ref(_pod(), "app"), "BackOff", "m")
    clock.advance(65)
    rec.warning(pod_ref(_pod(), "app"), "BackOff", "m")
    table = events_table(rec.events(), clock.now() + 5)
    assert "5s (x2 over 1m)" in table
    assert "pod/web spec.containers{app}" in table


def test_no_events_file_is_a_clear_error(tmp_path: Path, capsys) -> None:
    assert main(["events", "--run-dir", str(tmp_path / "none"), "--root-dir", str(tmp_path)]) == 1
    assert "No events at" in capsys.readouterr().err


def test_events_for_a_static_pod_by_its_short_name(tmp_path: Path, capsys) -> None:
    """`edgelet events --for hostroot` finds `hostroot-<node>`, as `describe pod hostroot` does (issue 15)."""
    clock = FakeClock()
    rec = EventRecorder(clock, events_path(tmp_path))
    rec.normal(
        pod_ref(Pod(metadata=ObjectMeta(name="hostroot-node1", namespace="default", uid="u2"))),
        "Started",
        "Started container: app",
    )
    rec.flush()
    assert (
        main(
            [
                "events",
                "--run-dir",
                str(tmp_path),
                "--root-dir",
                str(tmp_path),
                "--hostname-override",
                "node1",
                "--for",
                "hostroot",
            ]
        )
        == 0
    )
    assert "Started container: app" in capsys.readouterr().out


def test_events_for_a_short_name_take_the_node_from_the_agents_snapshot(tmp_path: Path, capsys) -> None:
    """Without --hostname-override, `--for hostroot` still finds `hostroot-<node>`: the node name is the agent's
    (its pods checkpoint), not this command's hostname (issue 23)."""
    import msgspec

    from edgelet.status.snapshot import PodsSnapshot, snapshot_path

    rec = EventRecorder(FakeClock(), events_path(tmp_path))
    rec.normal(
        pod_ref(Pod(metadata=ObjectMeta(name="hostroot-edge7", namespace="default", uid="u2"))),
        "Started",
        "Started container: app",
    )
    rec.flush()
    snapshot_path(tmp_path).parent.mkdir(parents=True)
    snapshot_path(tmp_path).write_bytes(msgspec.json.encode(PodsSnapshot(written_at=0, agent_pid=0, node_name="edge7")))
    assert (
        main(
            [
                "events",
                "--run-dir",
                str(tmp_path),
                "--root-dir",
                str(tmp_path),
                "--config",
                "/dev/null",
                "--for",
                "hostroot",
            ]
        )
        == 0
    )
    assert "Started container: app" in capsys.readouterr().out


def test_events_for_filters_by_name_suffix_and_namespace() -> None:
    from edgelet.cli.events import events_for

    rec = EventRecorder(FakeClock())
    for ns, name in (("default", "web-n1"), ("kube-system", "web-n1"), ("default", "web"), ("default", "webx-n1")):
        rec.normal(pod_ref(Pod(metadata=ObjectMeta(name=name, namespace=ns, uid=ns + name))), "Started", name)
    got = {(e.object.namespace, e.object.name) for e in events_for(rec.events(), "web", "n1")}
    assert got == {("default", "web-n1"), ("kube-system", "web-n1"), ("default", "web")}
    got = {(e.object.namespace, e.object.name) for e in events_for(rec.events(), "kube-system/web", "n1")}
    assert got == {("kube-system", "web-n1")}
    assert [e.object.name for e in events_for(rec.events(), "web", "other")] == ["web"]


def test_a_closed_pipe_ends_the_command_quietly(tmp_path: Path) -> None:
    """`edgelet events | head -1`: the reader went away; exit 0, no `[Errno 32] Broken pipe` (issue 15)."""
    clock = FakeClock()
    rec = EventRecorder(clock, events_path(tmp_path))
    rec.normal(pod_ref(_pod()), "Started", "Started container: app")
    rec.flush()

    class ClosedPipe(io.StringIO):
        def write(self, s: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    err = io.StringIO()
    assert main(["events", "--run-dir", str(tmp_path), "--root-dir", str(tmp_path)], out=ClosedPipe(), err=err) == 0
    assert "Broken pipe" not in err.getvalue() and "Errno" not in err.getvalue()


def test_events_survive_an_agent_restart(tmp_path: Path) -> None:
    """The boot's runonce, then the service: `edgelet events` still shows what runonce recorded (issue 15)."""
    clock = FakeClock()
    first = EventRecorder(clock, events_path(tmp_path))
    first.normal(pod_ref(_pod()), "Started", "Started container: app")
    first.flush()
    second = EventRecorder(clock, events_path(tmp_path))
    assert [e.reason for e in second.events()] == ["Started"]
    second.normal(pod_ref(_pod()), "Started", "Started container: app")
    assert second.events()[0].count == 2  # the same event again, counted on
    events_path(tmp_path).write_text("{torn")
    assert EventRecorder(clock, events_path(tmp_path)).events() == []


def test_an_unchanged_ring_is_not_written_again(tmp_path: Path) -> None:
    clock = FakeClock()
    path = events_path(tmp_path)
    rec = EventRecorder(clock, path)
    rec.normal(pod_ref(_pod()), "Started", "Started container: app")
    rec.flush()
    first = path.stat().st_ino
    clock.advance(60)
    rec.flush()  # nothing happened: the same inode (write_atomic would have replaced it)
    assert path.stat().st_ino == first
    rec.normal(pod_ref(_pod()), "Killing", "Stopping container app")
    rec.flush()
    assert path.stat().st_ino != first


def test_flush_encodes_on_the_loop_and_writes_in_a_thread(tmp_path: Path) -> None:
    # Encoding walks the ring the loop keeps changing: done in the writer thread it raced pod churn
    # ("OrderedDict mutated during iteration") and the agent died.
    import asyncio
    import threading

    from edgelet.util.clock import RealClock

    threads: dict[str, int] = {}

    async def go() -> bytes:
        loop = asyncio.get_running_loop()
        rec = EventRecorder(FakeClock(), path=tmp_path / "events.json")
        written = asyncio.Event()

        def encode() -> bytes | None:
            threads["encode"] = threading.get_ident()
            return rec.encode()

        def write(data: bytes) -> bool:
            threads["write"] = threading.get_ident()
            ok = rec.write(data)
            loop.call_soon_threadsafe(written.set)
            return ok

        from edgelet.state import flush_when_changed

        task = asyncio.create_task(flush_when_changed(rec._dirty, encode, write, 0.01, RealClock()))
        rec.warning(pod_ref(_pod()), "BackOff", "x")
        await asyncio.wait_for(written.wait(), 60)
        task.cancel()
        return (tmp_path / "events.json").read_bytes()

    main_thread = threading.get_ident()
    data = asyncio.run(go())
    assert threads["encode"] == main_thread != threads["write"]
    assert b"BackOff" in data


def test_events_recorded_from_worker_threads_while_the_loop_encodes(tmp_path: Path) -> None:
    # The runtime warns (MissingClusterDNS, NetworkNotReady) from the thread that writes a pod's files while
    # the loop encodes the ring for events.json: unguarded, "OrderedDict mutated during iteration" killed
    # the agent under pod churn. Here threads record while the loop encodes, and their records reach the file.
    import asyncio
    import sys
    import threading

    async def go() -> bytes:
        rec = EventRecorder(FakeClock(), path=tmp_path / "events.json", capacity=3000, interval=0.0)
        task = asyncio.create_task(rec.run())
        await asyncio.sleep(0)  # run() has noted its loop

        def burst(n: int) -> None:
            for i in range(2000):
                rec.warning(pod_ref(_pod(f"p{n}", f"u{n}")), "MissingClusterDNS", f"m{i}")

        threads = [threading.Thread(target=burst, args=(n,)) for n in range(3)]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            rec.encode()  # what flush does on the loop
            await asyncio.sleep(0)
        for t in threads:
            t.join()
        rec.warning(pod_ref(_pod("last", "ul")), "Done", "end")  # from the loop, after the threads
        for _ in range(600):
            data = (tmp_path / "events.json").read_bytes() if (tmp_path / "events.json").exists() else b""
            if b'"Done"' in data:
                break
            await asyncio.sleep(0.05)
        task.cancel()
        return data

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: the race shows at once without the lock
    try:
        data = asyncio.run(go())
    finally:
        sys.setswitchinterval(interval)
    assert b'"Done"' in data and b"MissingClusterDNS" in data
