"""runonce_verdict: a pod is judged from its containers' observed states as soon as they are final."""

from __future__ import annotations

import msgspec
import pytest

from edgelet.api.types import Pod, PodStatus
from edgelet.status.runonce import STABLE, note_running, runonce_verdict

NOW = 1000.0


def pod(policy: str = "Always", containers: tuple[str, ...] = ("a",)) -> Pod:
    return msgspec.convert({"metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
                            "spec": {"restartPolicy": policy,
                                     "containers": [{"name": n, "image": "i"} for n in containers]}}, Pod)


def running(name: str = "a", cid: str = "runc://1", ready: bool = True, started: bool | None = True) -> dict:
    return {"name": name, "image": "i", "imageID": "", "restartCount": 0, "ready": ready, "started": started,
            "containerID": cid, "state": {"running": {"startedAt": "2026-11-26T01:00:00Z"}}}


def exited(name: str = "a", code: int = 0) -> dict:
    return {"name": name, "image": "i", "imageID": "", "restartCount": 0, "ready": False, "containerID": "runc://9",
            "state": {"terminated": {"exitCode": code}}}


def waiting(name: str = "a", reason: str = "CrashLoopBackOff") -> dict:
    return {"name": name, "image": "i", "imageID": "", "restartCount": 3, "ready": False,
            "state": {"waiting": {"reason": reason}}}


def status(phase: str = "Running", *containers: dict) -> PodStatus:
    return msgspec.convert({"phase": phase, "containerStatuses": list(containers)}, PodStatus)


LONG_AGO = {"runc://1": NOW - STABLE, "runc://2": NOW - 5}
JUST_NOW = {"runc://1": NOW - 0.1}

CASES = [
    # (id, pod, status, seen, expected (failed, pending, next_check))
    ("no status published yet: pending", pod(), None, {}, ((), ("ns/p",), None)),
    ("running, ready, seen running for STABLE: done", pod(), status("Running", running()), LONG_AGO, ((), (), None)),
    ("running but just started: pending until it is stable", pod(), status("Running", running()), JUST_NOW,
     ((), ("ns/p",), NOW - 0.1 + STABLE)),
    ("running, not seen before (the verdict notes it now): pending", pod(), status("Running", running()), {},
     ((), ("ns/p",), None)),
    ("running but not ready (a readiness probe has not passed): pending", pod(),
     status("Running", running(ready=False)), LONG_AGO, ((), ("ns/p",), None)),
    ("running but its startup probe has not passed: pending", pod(),
     status("Running", running(ready=True, started=False)), LONG_AGO, ((), ("ns/p",), None)),
    ("waiting in CrashLoopBackOff (restarting): pending", pod(), status("Running", waiting()), LONG_AGO,
     ((), ("ns/p",), None)),
    ("completed under OnFailure: done", pod("OnFailure"), status("Running", exited()), {}, ((), (), None)),
    ("exited 0 under Always (it will restart): pending", pod("Always"), status("Running", exited()), {},
     ((), ("ns/p",), None)),
    ("exited 1 under OnFailure (it will restart): pending", pod("OnFailure"), status("Running", exited(code=1)), {},
     ((), ("ns/p",), None)),
    ("Succeeded: done", pod("Never"), status("Succeeded", exited()), {}, ((), (), None)),
    ("Failed: final, fails the run", pod("Never"), status("Failed", exited(code=1)), {}, (("ns/p",), (), None)),
    ("one of two containers not running: pending", pod(containers=("a", "b")),
     status("Running", running(), waiting("b", "ContainerCreating")), LONG_AGO, ((), ("ns/p",), None)),
    ("two stable containers: done", pod(containers=("a", "b")),
     status("Running", running(), running("b", "runc://2")), LONG_AGO, ((), (), None)),
]


@pytest.mark.parametrize(("the_pod", "the_status", "seen", "expected"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_runonce_verdict(the_pod, the_status, seen, expected) -> None:
    verdict = runonce_verdict({"u1": the_pod}, {"u1": the_status}, seen, NOW)
    assert (verdict.failed, verdict.pending, verdict.next_check) == expected
    assert verdict.done == (not expected[1])


def test_a_restarted_instance_starts_its_stable_time_again() -> None:
    """kubelet's rule that a container must not be restarting: a new instance (new containerID) is judged anew."""
    seen: dict[str, float] = {}
    note_running(seen, [status("Running", running(cid="runc://1"))], NOW - 10)
    note_running(seen, [status("Running", running(cid="runc://1"))], NOW - 5)
    assert seen == {"runc://1": NOW - 10}, "the first sighting counts"
    note_running(seen, [status("Running", running(cid="runc://3"))], NOW)
    verdict = runonce_verdict({"u1": pod()}, {"u1": status("Running", running(cid="runc://3"))}, seen, NOW)
    assert verdict.pending == ("ns/p",) and verdict.next_check == NOW + STABLE
