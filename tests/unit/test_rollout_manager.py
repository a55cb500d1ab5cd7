"""The rollout manager over fakes at the lowest boundary: what runs per round, the record on disk, pulls, the off
switch, image GC's keep list and a restart from the record."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from edgelet.api.static import make_static_pod
from edgelet.api.types import Pod, PodStatus
from edgelet.container.types import PodRuntimeStatus, SandboxRecord
from edgelet.events import EventRecorder
from edgelet.images.manager import ImageUnavailable
from edgelet.rollout.decide import Policy
from edgelet.rollout.policy import policy_for
from edgelet.rollout.store import RolloutStore
from edgelet.sync.rollout import RolloutManager
from edgelet.util.clock import FakeClock

POLICY = Policy(deadline=60.0, window=5.0)


def make_pod(command: str, image: str = "edgelet.local/busybox:1.36", annotations: dict | None = None) -> Pod:
    raw = msgspec.convert(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "app", "annotations": annotations or {}},
            "spec": {"containers": [{"name": "c", "image": image, "command": [command]}]},
        },
        Pod,
    )
    return make_static_pod(raw, node_name="node", source="file", origin="/m/app.yaml")


READY = msgspec.convert(
    {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [
            {
                "name": "c",
                "image": "i",
                "imageID": "",
                "ready": True,
                "restartCount": 0,
                "started": True,
                "state": {"running": {"startedAt": "2024-01-01T00:00:00Z"}},
            }
        ],
    },
    PodStatus,
)
CRASH = msgspec.convert(
    {
        "phase": "Running",
        "containerStatuses": [
            {
                "name": "c",
                "image": "i",
                "imageID": "",
                "ready": False,
                "restartCount": 2,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            }
        ],
    },
    PodStatus,
)


class Images:
    def __init__(self) -> None:
        self.missing: set[str] = set()
        self.asked: list[str] = []

    async def ensure(self, pod, container, *, init=False):
        self.asked.append(container.image)
        if container.image in self.missing:
            raise ImageUnavailable("ErrImagePull", f'Failed to pull image "{container.image}": manifest unknown')
        return None


class World:
    """The runtime (uid -> live) and the published statuses the manager observes."""

    def __init__(self, tmp_path, enabled: bool = True) -> None:
        self.clock = FakeClock()
        self.tmp = tmp_path
        self.live: set[str] = set()
        self.status: dict[str, PodStatus] = {}
        self.images = Images()
        self.events = EventRecorder(self.clock)
        self.manager = self.build(enabled)

    def build(self, enabled: bool = True) -> RolloutManager:
        return RolloutManager(
            RolloutStore(self.tmp),
            clock=self.clock,
            events=self.events,
            policy=POLICY,
            enabled=enabled,
            images=self.images,
            runtime_pods=self.runtime_pods,
            status_of=self.status.get,
        )

    def runtime_pods(self):
        return {
            uid: PodRuntimeStatus(
                uid=uid,
                name="app-node",
                namespace="default",
                sandboxes=(
                    SandboxRecord(
                        id="s" + uid,
                        pod_uid=uid,
                        pod_name="app-node",
                        pod_namespace="default",
                        attempt=0,
                        state="running",
                        pid=1,
                        created_at=0.0,
                    ),
                ),
            )
            for uid in self.live
        }

    def round(self, pod: Pod) -> set[str]:
        """One round; the runtime then runs exactly what the manager wants (the workers' job)."""

        async def go():
            out, _ = self.manager.versions_to_run({pod.metadata.uid: pod}, True)
            if self.manager.writing():
                # The step's record is written off the loop and acted on once written: the round its write
                # asks for (on_change) runs what it says.
                await self.manager.settle()
                out, _ = self.manager.versions_to_run({pod.metadata.uid: pod}, True)
                await self.manager.settle()
            await asyncio.sleep(0)  # let a pull started in this round finish
            await asyncio.sleep(0)
            return out

        out = asyncio.run(go())
        self.live = set(out)
        return set(out)

    def reasons(self) -> list[str]:
        return [e.reason for e in self.events.snapshot().events]


def test_first_version_runs_at_once_then_is_good(tmp_path):
    w = World(tmp_path)
    v1 = make_pod("a")
    assert w.round(v1) == {v1.metadata.uid}
    w.status[v1.metadata.uid] = READY
    w.round(v1)
    w.clock.advance(6)
    w.round(v1)
    rec = w.manager.record("default/app-node")
    assert (rec.phase, rec.last_good) == ("good", v1.metadata.uid)


def test_only_a_first_version_record_skips_fsync_and_an_emptied_one_reads_as_none(tmp_path, monkeypatch):
    import os

    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    w = World(tmp_path)
    v1 = make_pod("a")
    w.round(v1)
    assert synced == []  # the first version's record, on its start path
    w.status[v1.metadata.uid] = READY
    w.round(v1)
    w.clock.advance(6)
    w.round(v1)
    assert w.manager.record("default/app-node").phase == "good" and synced  # what a rollback needs is durable

    # What a power cut can leave of a record written without fsync: an empty file. It reads as no record, so
    # the pod is a first version again, which is what it was.
    for path in RolloutStore(tmp_path).dir.glob("*.json"):
        path.write_bytes(b"")
    assert RolloutStore(tmp_path).load() == {}


def test_steady_once_every_record_rests_so_an_idle_loop_runs_no_rounds(tmp_path):
    w = World(tmp_path)
    assert w.manager.steady(), "no record at all"
    v1 = make_pod("a")
    w.round(v1)
    assert not w.manager.steady(), "under the gate: its clock decides, every tick"
    w.status[v1.metadata.uid] = READY
    w.round(v1)
    w.clock.advance(6)
    w.round(v1)
    assert w.manager.steady(), "good: only a new manifest, the runtime, a probe or a retry changes it"
    w.round(make_pod("b"))
    assert not w.manager.steady(), "a new version is under way"


def test_a_judged_gate_asks_for_rounds_only_at_its_clock_decisions(tmp_path):
    """A first version under the gate is judged from its start: the loop wakes for its deadline, or once Ready
    for its window's end, and otherwise only for a new status of it (a sync's result); a pull ticks."""
    w = World(tmp_path)
    v1 = make_pod("a")
    w.round(v1)  # the record is made, judged at once: only its deadline can decide by the clock yet
    assert not w.manager.ticking()
    assert w.manager.gate_round_at() == pytest.approx(w.clock.monotonic() + POLICY.deadline + 0.001)
    w.round(v1)  # not started yet: the same
    assert not w.manager.ticking()
    assert w.manager.gate_round_at() == pytest.approx(w.clock.monotonic() + POLICY.deadline + 0.001)
    assert w.manager.judges(v1.metadata.uid) and not w.manager.judges("another-version")
    w.status[v1.metadata.uid] = READY
    w.round(v1)  # Ready: the window starts
    assert w.manager.gate_round_at() == pytest.approx(w.clock.monotonic() + POLICY.window + 0.001)
    w.clock.advance(POLICY.window)
    w.round(v1)
    assert w.manager.record("default/app-node").phase == "good"
    assert not w.manager.ticking() and w.manager.gate_round_at() is None
    assert not w.manager.judges(v1.metadata.uid)  # good: its syncs bring no round
    w.round(make_pod("b"))  # a new version: its pull is a step a clock moves
    assert w.manager.ticking()


def test_gates_due_close_together_are_judged_in_one_round(tmp_path):
    """Pods started together become Ready a little apart: their windows end within GATE_BATCH of each other,
    and the loop wakes once for all of them (at the last), not once per pod."""
    w = World(tmp_path)
    pods = {}
    for i in range(3):
        p = make_pod(f"x{i}")
        p = msgspec.structs.replace(p, metadata=msgspec.structs.replace(p.metadata, name=f"app{i}-node"))
        pods[p.metadata.uid] = p

    async def round_() -> None:
        w.manager.versions_to_run(pods, True)
        await w.manager.settle()

    asyncio.run(round_())  # the records
    asyncio.run(round_())  # judged
    for uid in pods:  # Ready 0.3 s apart
        w.status[uid] = READY
        asyncio.run(round_())
        w.clock.advance(0.3)
    assert w.manager.gate_round_at() == pytest.approx(w.clock.monotonic() - 0.3 + POLICY.window + 0.001)
    w.clock.advance(POLICY.window)
    asyncio.run(round_())
    assert {r.phase for r in w.manager.records()} == {"good"} and w.manager.gate_round_at() is None


def good_v1(w: World) -> Pod:
    v1 = make_pod("a")
    w.round(v1)
    w.status[v1.metadata.uid] = READY
    w.round(v1)
    w.clock.advance(6)
    w.round(v1)
    return v1


def test_missing_image_keeps_the_old_version_then_a_crash_rolls_back(tmp_path):
    w = World(tmp_path)
    v1 = good_v1(w)
    u1 = v1.metadata.uid
    v2 = make_pod("b", image="reg.example/missing:1")
    w.images.missing.add("reg.example/missing:1")
    for _ in range(3):
        assert w.round(v2) == {u1}
    rec = w.manager.record("default/app-node")
    assert rec.phase == "pulling" and "manifest unknown" in rec.reason
    assert w.manager.pod_condition(v1)[0] == "RolloutPulling"

    v3 = make_pod("crash")
    u3 = v3.metadata.uid
    assert w.round(v3) == {u1}  # the round that decides to pull
    assert w.round(v3) == {u3}  # pulled: replaced (the workers stop v1 before they start v3)
    w.round(v3)  # v1 gone: gating
    w.status[u3] = CRASH
    assert w.round(v3) == {u1}  # rolled back
    assert w.manager.record("default/app-node").phase == "rolling-back"
    w.round(v3)
    rec = w.manager.record("default/app-node")
    assert (rec.phase, rec.active, rec.blocked) == ("rolled-back", u1, u3)
    assert "RolledBack" in w.reasons()
    assert w.manager.pod_condition(v1)[0] == "RolledBack"
    # Image GC keeps the last good version's images and the failed target's.
    assert "edgelet.local/busybox:1.36" in w.manager.kept_images()

    # A restarted agent reads the same decision from disk.
    w2 = w.build()
    out, _ = w2.versions_to_run({u3: v3}, True)
    assert set(out) == {u1}
    assert w2.record("default/app-node") == rec


def test_crash_between_the_record_and_the_step_takes_the_same_step(tmp_path):
    w = World(tmp_path)
    v1 = good_v1(w)
    v2 = make_pod("b")
    w.round(v2)
    # The record says replacing (v2 active) but the agent died before the workers acted: v1 still runs.
    asyncio.run(_one(w.manager, v2))
    assert w.manager.record("default/app-node").phase == "replacing"
    w2 = w.build()
    out, _ = w2.versions_to_run({v2.metadata.uid: v2}, True)
    assert set(out) == {v2.metadata.uid}  # the restarted agent stops v1 and starts v2, as decided
    assert v1.metadata.uid in w.live


async def _one(manager, pod):
    return manager.versions_to_run({pod.metadata.uid: pod}, True)


def test_off_switch_by_annotation_is_kill_and_start(tmp_path):
    w = World(tmp_path)
    v1 = good_v1(w)
    v2 = make_pod("b", annotations={"edgelet.io/rollout": "off"})
    assert w.round(v2) == {v2.metadata.uid}
    assert w.manager.record("default/app-node") is None
    assert not list((tmp_path / "state" / "rollout").glob("*.json"))
    assert v1.metadata.uid not in w.live


def test_off_switch_by_flag(tmp_path):
    w = World(tmp_path, enabled=False)
    v1 = make_pod("a")
    assert w.round(v1) == {v1.metadata.uid}
    assert w.manager.records() == []


def test_removed_pod_loses_its_record(tmp_path):
    w = World(tmp_path)
    good_v1(w)
    asyncio.run(_none(w.manager))
    assert w.manager.records() == []


async def _none(manager):
    return manager.versions_to_run({}, True)


def test_policy_annotations():
    node = Policy(deadline=300.0, window=30.0)
    assert policy_for({}, node, enabled=True) == (node, [])
    assert policy_for({"edgelet.io/rollout": "off"}, node, enabled=True) == (None, [])
    assert policy_for({}, node, enabled=False) == (None, [])
    assert policy_for({"edgelet.io/rollout": "on"}, node, enabled=False)[0] == node
    p, problems = policy_for(
        {"edgelet.io/rollout-deadline": "20s", "edgelet.io/rollout-stability-window": "2s"}, node, enabled=True
    )
    assert (p.deadline, p.window, problems) == (20.0, 2.0, [])
    p, problems = policy_for({"edgelet.io/rollout-deadline": "soon", "edgelet.io/rollout": "maybe"}, node, enabled=True)
    assert p == node and len(problems) == 2 and "rollout-deadline" in problems[1]


def test_surge_clash():
    from edgelet.rollout.observe import surge_clash

    def pod(ports=(), host_network=False):
        return msgspec.convert(
            {
                "metadata": {"name": "p"},
                "spec": {
                    "hostNetwork": host_network,
                    "containers": [{"name": "c", "image": "i", "ports": [dict(p) for p in ports]}],
                },
            },
            Pod,
        )

    web = {"containerPort": 80, "hostPort": 8080}
    assert "hostPort 8080/TCP" in surge_clash(pod([web]), pod([web]))
    assert surge_clash(pod([web]), pod([{**web, "protocol": "UDP"}])) == ""
    assert surge_clash(pod([web]), pod([{"containerPort": 80, "hostPort": 8081}])) == ""
    assert surge_clash(pod([{**web, "hostIP": "10.0.0.1"}]), pod([{**web, "hostIP": "10.0.0.2"}])) == ""
    assert "hostNetwork" in surge_clash(pod(host_network=True), pod())
    assert surge_clash(pod(), pod()) == ""


def test_surge_runs_both_versions_until_the_new_is_good(tmp_path):
    w = World(tmp_path)
    w.manager._policy = Policy(deadline=60.0, window=5.0, strategy="Surge")
    v1 = good_v1(w)
    v2 = make_pod("b")
    u1, u2 = v1.metadata.uid, v2.metadata.uid
    w.round(v2)
    assert w.round(v2) == {u1, u2}
    assert w.manager.is_surging(u2) and not w.manager.is_surging(u1)
    w.status[u2] = READY
    w.round(v2)
    w.clock.advance(6)
    assert w.round(v2) == {u2}


def test_retry_refuses_clearly(tmp_path):
    import pytest

    from edgelet.rollout.errors import NoSuchRollout, NothingToRetry

    w = World(tmp_path)
    good_v1(w)
    with pytest.raises(NoSuchRollout, match="default/other"):
        asyncio.run(w.manager.retry("default/other"))
    with pytest.raises(NothingToRetry, match="phase good"):
        asyncio.run(w.manager.retry("default/app-node"))


def test_a_record_that_cannot_be_written_changes_nothing(tmp_path):
    """A full disk: the step is not taken (what runs stays) until the record can be written; nothing raises."""
    import errno

    w = World(tmp_path)
    v1 = good_v1(w)
    full = {"on": True}
    save = w.manager._store.save

    def failing(stored, *, durable=True):
        if full["on"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        save(stored, durable=durable)

    w.manager._store.save = failing
    v2 = make_pod("b")
    for _ in range(3):
        assert w.round(v2) == {v1.metadata.uid}
    assert w.manager.record("default/app-node").phase == "good"
    other = make_pod("c")
    other = msgspec.structs.replace(other, metadata=msgspec.structs.replace(other.metadata, name="new-node"))
    out, _ = asyncio.run(_both(w.manager, v2, other))
    assert set(out) == {v1.metadata.uid, other.metadata.uid}  # a brand-new pod runs as today, recorded later
    full["on"] = False
    w.round(v2)  # written now: the step is taken (and the round its write asks for may take the next)
    rec = w.manager.record("default/app-node")
    assert rec.target == v2.metadata.uid and rec.phase in ("pulling", "replacing")


async def _both(manager, a, b):
    return manager.versions_to_run({a.metadata.uid: a, b.metadata.uid: b}, True)


def test_gate_observation_of_a_published_status():
    from edgelet.rollout.observe import gate_observation

    pod = make_pod("a")
    g = gate_observation(pod, READY)
    assert (g.restart_policy, g.phase, g.ready) == ("Always", "Running", True)
    assert g.containers[0].started and g.containers[0].restarts == 0
    c = gate_observation(pod, CRASH).containers[0]
    assert (c.started, c.waiting, c.restarts) == (False, "CrashLoopBackOff", 2)


def test_cli_reads_the_records_while_the_agent_is_stopped(tmp_path):
    import argparse
    import io

    from edgelet.cli.rollout import cmd_rollout
    from edgelet.settings import Settings

    w = World(tmp_path / "root")
    good_v1(w)
    settings = Settings(root_dir=tmp_path / "root", run_dir=tmp_path / "run", hostname_override="node")
    out, err = io.StringIO(), io.StringIO()
    assert cmd_rollout(settings, argparse.Namespace(rollout_command=None, pod=None), out, err) == 0
    assert "default/app-node" in out.getvalue() and "good" in out.getvalue()
    out = io.StringIO()
    assert cmd_rollout(settings, argparse.Namespace(rollout_command="history", pod="app"), out, err) == 0
    assert "gating" in out.getvalue() and "good" in out.getvalue()
    # A retry needs the agent.
    assert cmd_rollout(settings, argparse.Namespace(rollout_command="retry", pod="app"), io.StringIO(), err) == 1
    assert "not running" in err.getvalue()


@pytest.mark.parametrize("jump", [+86400.0 * 365, -86400.0])
def test_a_wall_clock_jump_neither_passes_the_window_nor_expires_the_deadline(tmp_path, jump):
    """A board without an RTC boots at its saved time and NTP sets it later: neither the stability window
    (a bad version marked good at once) nor the deadline (a good one rolled back at once) may move with it."""
    w = World(tmp_path)
    v1 = make_pod("a")
    w.round(v1)
    w.status[v1.metadata.uid] = READY
    w.round(v1)  # ready: the window starts
    w.clock.jump_wall(jump)
    w.round(v1)
    assert w.manager.record("default/app-node").phase == "gating"
    w.clock.advance(6)
    w.round(v1)
    assert w.manager.record("default/app-node").phase == "good"


def test_gate_time_goes_on_across_an_agent_restart_and_a_reboot(tmp_path):
    w = World(tmp_path)
    w.manager = RolloutManager(
        RolloutStore(tmp_path),
        clock=w.clock,
        events=w.events,
        policy=POLICY,
        images=w.images,
        runtime_pods=w.runtime_pods,
        status_of=w.status.get,
        boot_id="b1",
    )
    v1 = make_pod("a")
    w.round(v1)
    w.status[v1.metadata.uid] = READY
    w.round(v1)
    before = w.manager.gate_now()
    # The agent restarts in the same boot: the same gate clock, the window goes on.
    again = RolloutManager(RolloutStore(tmp_path), clock=w.clock, events=w.events, policy=POLICY, boot_id="b1")
    assert again.gate_now() == before
    assert again.record("default/app-node").ready_since is not None
    # A reboot: the monotonic clock starts again near zero, gate time goes on from the last record written,
    # and the stability window starts again (the pod was restarted).
    from edgelet.util.clock import FakeClock

    rebooted = FakeClock(start=w.clock.now() - 86400.0)  # and the wall clock is a day behind
    after = RolloutManager(RolloutStore(tmp_path), clock=rebooted, events=w.events, policy=POLICY, boot_id="b2")
    assert after.gate_now() >= before
    rec = after.record("default/app-node")
    assert rec.phase == "gating" and rec.ready_since is None and after.gate_now() - rec.since < POLICY.window


def test_a_steps_record_is_written_off_the_loop_and_acted_on_only_once_written(tmp_path):
    """The fsyncs of a step's record never stall the loop (PLEG, probes, the API run meanwhile), and nothing
    acts on the record before it is on disk."""
    import threading

    w = World(tmp_path)
    v1 = good_v1(w)
    release = threading.Event()
    save = w.manager._store.save

    def slow(stored, *, durable=True):
        assert release.wait(30)
        save(stored, durable=durable)

    w.manager._store.save = slow
    v2 = make_pod("b")

    async def go():
        out, _ = w.manager.versions_to_run({v2.metadata.uid: v2}, True)
        assert w.manager.writing() and w.manager.record("default/app-node").phase == "good"
        ticks = 0
        for _ in range(20):  # the loop runs other work while the write waits
            await asyncio.sleep(0)
            ticks += 1
        assert ticks == 20 and w.manager.writing()
        again, _ = w.manager.versions_to_run({v2.metadata.uid: v2}, True)  # a round meanwhile: the old record
        assert set(again) == {v1.metadata.uid} == set(out)
        release.set()
        await w.manager.settle()
        assert w.manager.record("default/app-node").phase == "pulling"

    asyncio.run(go())
