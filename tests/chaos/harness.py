"""The chaos campaign: a seeded random sequence of manifest changes under a real agent that is SIGKILLed at random
points, with the invariants checked after every round and at the end.

A round arms a crash point in a fresh agent (`EDGELET_TEST_CRASH_AT`, see `edgelet/util/crashpoint.py`) or
picks a random delay, makes one or two changes (add, edit or remove a manifest; drop an image archive into
the import dir), and kills the agent there; sometimes twice before it settles. A clean agent then brings
the node to the manifests' state and the checks run. Violations are collected, never raised, so one run
reports them all.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from edgelet.runtime.podcgroups import MONITOR_CGROUP
from edgelet.testing.cleanup import conmon_processes
from edgelet.testing.images import build_busybox_image
from edgelet.util.crashpoint import ENV as CRASH_ENV
from tests.e2e.conftest import IMAGE, AgentProc

NODE = "testnode"
GEN_ANN = "chaos.edgelet.io/generation"
LOOP = "trap 'exit 0' TERM; while true; do sleep 1; done"
MAX_PODS = 8

# Crash points and the change that makes the agent pass each (see `_provoke`).
POINTS = (
    "image.import",
    "image.unpack",
    "sandbox.create",
    "cni.add",
    "container.create",
    "sandbox.ready",
    "container.stop",
    "container.remove",
    "pod.remove",
    "checkpoint.write",
    # The health-gated rollout's steps (issue 21): an edit of a pod whose version passed the gate.
    "rollout.replace",
    "rollout.gate",
    "rollout.rollback",
)
BAD = "echo bad version; exit 9"  # a bad edit's every container: CrashLoopBackOff, so the rollout rolls it back
# Short, so that versions pass the health gate within a round and edits go through pull, replace and gate.
ROLLOUT_ARGS = ("--rollout-stability-window", "3s")


@dataclass(frozen=True)
class Kind:
    """A pod shape and what the node must show for it once settled."""

    restart: str
    containers: tuple[tuple[str, str], ...]
    init: tuple[tuple[str, str], ...] = ()
    probes: bool = False
    phase: str = "Running"  # the settled phase
    exit_code: int | None = None  # a terminated main container's code, once settled
    restarts: int | None = 0  # the exact restart count once settled (None: any, never decreasing)
    last_exit: int | None = None  # lastState's exit code whenever there is one
    own_image: bool = False  # uses an image the campaign imported itself


KINDS: dict[str, Kind] = {
    "svc": Kind("Always", (("app", LOOP), ("side", LOOP)), probes=True),
    "init": Kind("Always", (("app", LOOP),), init=(("setup", "echo init-done"),)),
    "ok": Kind("Never", (("main", "echo done; exit 0"),), phase="Succeeded", exit_code=0),
    "fail": Kind("Never", (("main", "echo failing; exit 3"),), phase="Failed", exit_code=3),
    "retry": Kind(
        "OnFailure",
        (("main", "if [ -f /data/ran ]; then exit 0; fi; touch /data/ran; exit 7"),),
        phase="Succeeded",
        exit_code=0,
        restarts=1,
        last_exit=7,
    ),
    "crash": Kind("Always", (("main", "sleep 1; exit 5"),), restarts=None, last_exit=5),
    "img": Kind("Always", (("app", LOOP),), own_image=True),
}


def manifest(name: str, kind: Kind, gen: int, image: str, grace: int, bad: bool = False) -> str:
    def block(items: tuple[tuple[str, str], ...], probes: bool) -> str:
        out = ""
        for cname, cmd in items:
            cmd = BAD if bad else cmd
            out += f"""
  - name: {cname}
    image: {image}
    command: ["sh", "-c", {json.dumps(cmd)}]
    env:
    - name: GEN
      value: "{gen}"
    volumeMounts:
    - name: data
      mountPath: /data"""
            if probes:
                out += """
    readinessProbe:
      exec: {command: ["true"]}
      periodSeconds: 2
      timeoutSeconds: 10
    livenessProbe:
      exec: {command: ["true"]}
      periodSeconds: 5
      timeoutSeconds: 10
      failureThreshold: 5"""
        return out

    init = f"\n  initContainers:{block(kind.init, False)}" if kind.init else ""
    return f"""apiVersion: v1
kind: Pod
metadata:
  name: {name}
  annotations:
    {GEN_ANN}: "{gen}"
spec:
  restartPolicy: {kind.restart}
  terminationGracePeriodSeconds: {grace}
  volumes:
  - name: data
    emptyDir: {{}}{init}
  containers:{block(kind.containers, kind.probes)}
"""


@dataclass
class Wanted:
    kind: str
    gen: int
    image: str
    bad: bool = False  # the current generation crashes: the rollout runs `good_gen` again
    good_gen: int | None = None


@dataclass
class Report:
    seed: int
    rounds: int = 0
    kills: int = 0
    point_kills: dict[str, int] = field(default_factory=dict)
    timing_kills: int = 0
    violations: list[str] = field(default_factory=list)

    def summary(self) -> str:
        points = ", ".join(f"{k} {v}" for k, v in sorted(self.point_kills.items())) or "none"
        return (
            f"chaos: seed {self.seed}, {self.rounds} rounds, {self.kills} kills "
            f"({self.timing_kills} at random times; at crash points: {points}), "
            f"{len(self.violations)} invariant violations"
        )


def _sh(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=False).stdout


class Campaign:
    """One agent's dirs, its manifests and the record of what has been seen."""

    def __init__(
        self,
        agent: AgentProc,
        network: dict,
        seed: int,
        kills: int,
        base_archive: Path,
        say: Callable[[str], None] = print,
        settle_timeout: float = 180.0,
    ) -> None:
        self.agent = agent
        self.net = network
        self.rng = random.Random(seed)
        self.kills_wanted = kills
        self.report = Report(seed)
        self._say = say
        self._t0 = time.monotonic()
        self.settle_timeout = settle_timeout
        # Looks at the invariants after convergence, 3 s apart: a removal runs in steps, and a violation counts
        # only if it outlives them.
        self.invariant_tries = 4
        self.wanted: dict[str, Wanted] = {}
        self.images_ready: list[str] = []  # imported and seen in the store
        self.images_dropped: list[str] = []  # archives dropped, not yet seen imported
        self.image_count = 0
        self.max_restarts: dict[tuple[str, str], int] = {}
        self.serial = 0
        self.base_archive = base_archive
        self.extra_args: list[str] = [*ROLLOUT_ARGS]  # more agent flags (the fault tests' runtime wrapper)
        handler = os.environ.get("EDGELET_CHAOS_RUNTIME_HANDLER")
        if handler:  # the whole campaign under another default handler (crun: make chaos-quick-crun)
            self.extra_args += ["--runtime-handler", handler]
        self.env: dict[str, str] = {}  # more agent environment (the fault tests' clock offset)
        self.test_mounts: set[str] = set()  # mounts the test made itself (relative to the temp dir)
        self.archive_dir = agent.paths.root_dir.parent / "archives"
        self.archive_dir.mkdir(exist_ok=True)

    def say(self, line: str) -> None:
        self._say(f"[{time.monotonic() - self._t0:6.1f}s] {line}")

    # --- the agent -------------------------------------------------------------------------------

    def start(self, crash_at: str | None = None) -> None:
        env = {**self.env, CRASH_ENV: crash_at} if crash_at else self.env
        self.agent.start(
            f"--cni-conf-dir={self.net['conf_dir']}", "--cni-bin-dir=/usr/lib/cni", *self.extra_args, env=env or None
        )

    def kill(self) -> None:
        """SIGKILL the agent if it still runs, and reap it."""
        proc = self.agent.proc
        assert proc is not None
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        self.agent.proc = None
        self.agent._log.close()

    # --- changes -----------------------------------------------------------------------------------

    def _write(self, name: str) -> None:
        w = self.wanted[name]
        self.agent.write_manifest(
            f"{name}.yaml", manifest(name, KINDS[w.kind], w.gen, w.image, self.rng.randint(1, 3), bad=w.bad)
        )

    def add(self, kind: str | None = None) -> str:
        if kind is None:
            kinds = [k for k in KINDS if not KINDS[k].own_image or self.images_ready]
            kind = self.rng.choice(kinds)
        self.serial += 1
        name = f"{kind}{self.serial}"
        image = self.rng.choice(self.images_ready) if KINDS[kind].own_image else IMAGE
        self.wanted[name] = Wanted(kind, 1, image)
        self._write(name)
        return f"add {name}"

    def edit(self, name: str | None = None) -> str:
        name = name or self.rng.choice(sorted(self.wanted))
        self.wanted[name].gen += 1
        self.wanted[name].bad = False
        self._write(name)
        return f"edit {name} (gen {self.wanted[name].gen})"

    def rollout_record(self, name: str) -> dict | None:
        """The agent's rollout record of the pod (issue 21), with the generation of its active version."""
        for path in (self.agent.paths.root_dir / "state" / "rollout").glob("*.json"):
            try:
                stored = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            rec = stored["record"]
            if rec["name"] == f"default/{name}-{NODE}":
                pod = stored["pods"].get(rec["active"] or "") or {}
                rec["active_gen"] = ((pod.get("metadata") or {}).get("annotations") or {}).get(GEN_ANN)
                return rec
        return None

    def bad_edit(self) -> str:
        """A crashing generation of a long-running pod whose current one passed the gate: it must be rolled back."""
        good = [
            n
            for n, w in sorted(self.wanted.items())
            if KINDS[w.kind].phase == "Running"
            and not w.bad
            and KINDS[w.kind].restarts == 0
            and (r := self.rollout_record(n)) is not None
            and r["phase"] == "good"
            and r["active_gen"] == str(w.gen)
        ]
        if not good:
            return self.edit()
        name = self.rng.choice(good)
        w = self.wanted[name]
        w.good_gen, w.gen, w.bad = w.gen, w.gen + 1, True
        self._write(name)
        return f"bad edit {name} (gen {w.gen}, gen {w.good_gen} must come back)"

    def remove(self, name: str | None = None) -> str:
        name = name or self.rng.choice(sorted(self.wanted))
        (self.agent.manifests / f"{name}.yaml").unlink()
        del self.wanted[name]
        return f"remove {name}"

    def drop_archive(self) -> str:
        """A new image (its own small layer on busybox) into the import dir, by rename as a careful user does."""
        self.image_count += 1
        ref = f"edgelet.local/chaos:g{self.image_count}"
        files = {f"chaos/g{self.image_count}/f{i}": os.urandom(64) for i in range(12)}
        out = self.archive_dir / f"chaos-g{self.image_count}.tar"
        build_busybox_image(out, name=ref, fmt="oci-archive", extra_layers=[files])
        import_dir = self.agent.paths.root_dir / "images" / "import"
        tmp = import_dir / f".{out.name}.part"
        tmp.write_bytes(out.read_bytes())
        os.rename(tmp, import_dir / out.name)
        self.images_dropped.append(ref)
        return f"drop archive {ref}"

    def random_change(self) -> str:
        ops = []
        if len(self.wanted) < MAX_PODS:
            ops += ["add"] * 3
        if self.wanted:
            ops += ["edit"] * 2 + ["bad"] + ["remove"] * (2 if len(self.wanted) > 3 else 1)
        if self.image_count < 6:
            ops.append("drop")
        op = self.rng.choice(ops)
        return {
            "add": self.add,
            "edit": self.edit,
            "remove": self.remove,
            "drop": self.drop_archive,
            "bad": self.bad_edit,
        }[op]()

    def _provoke(self, point: str) -> str:
        """A change that makes the agent pass `point` soon."""
        if point in ("image.import", "image.unpack"):
            return self.drop_archive()
        if point == "pod.remove" and self.wanted:
            return self.remove()
        if point in ("container.stop", "container.remove") and self.wanted:
            running = [n for n, w in self.wanted.items() if KINDS[w.kind].phase == "Running"]
            name = self.rng.choice(running or sorted(self.wanted))
            return self.rng.choice([self.edit, self.remove])(name)
        if point == "checkpoint.write":
            return self.random_change()
        if point == "rollout.rollback" and self.wanted:
            return self.bad_edit()
        if point in ("rollout.replace", "rollout.gate") and self.wanted:
            running = [
                n
                for n, w in self.wanted.items()
                if KINDS[w.kind].phase == "Running" and KINDS[w.kind].restarts is not None
            ]
            return self.edit(self.rng.choice(running or sorted(self.wanted)))
        return self.add() if len(self.wanted) < MAX_PODS else self.edit()

    # --- rounds --------------------------------------------------------------------------------------

    def one_kill(self) -> None:
        """Start an agent, change something, kill the agent: at an armed crash point, or after a random delay."""
        use_point = self.rng.random() < 0.6
        point = self.rng.choice(POINTS) if use_point else None
        count = 1
        if point == "checkpoint.write":
            count = self.rng.randint(1, 8)
        elif point == "image.unpack":
            count = self.rng.randint(1, 10)
        self.start(f"{point}:{count}" if point else None)
        # Most changes land on a running agent; some race its start.
        time.sleep(self.rng.uniform(0.0, 3.0))
        what = [self._provoke(point) if point else self.random_change()]
        if self.rng.random() < 0.3:
            what.append(self.random_change())
        died_by_itself = False
        if point:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and self.agent.proc.poll() is None:
                time.sleep(0.05)
            died_by_itself = self.agent.proc.poll() is not None
        else:
            time.sleep(self.rng.uniform(0.0, 4.0))
        rc = self.agent.proc.poll()
        self.kill()
        self.report.kills += 1
        if died_by_itself:
            if rc != -signal.SIGKILL:
                self.report.violations.append(
                    f"round {self.report.rounds}: the agent exited {rc} before the kill at {point}"
                )
            self.report.point_kills[point] = self.report.point_kills.get(point, 0) + 1
            how = f"killed itself at {point}:{count}"
        else:
            self.report.timing_kills += 1
            how = "killed at a random time" + (f" ({point} not reached)" if point else "")
            if point and os.environ.get("EDGELET_CHAOS_VERBOSE"):
                for line in self.agent.log().splitlines()[-15:]:
                    self.say(f"    | {line[:300]}")
        self.say(f"  kill {self.report.kills}: {'; '.join(what)}; {how}")

    def round(self) -> None:
        self.report.rounds += 1
        self.say(f"round {self.report.rounds}: {len(self.wanted)} manifests")
        self.one_kill()
        if self.report.kills < self.kills_wanted and self.rng.random() < 0.3:
            self.one_kill()  # killed again before it could settle
        self.start()
        self.settle_and_check()
        self.kill_clean()

    def kill_clean(self) -> None:
        """Between rounds the settled agent goes too: the next round's agent adopts everything again."""
        self.kill()

    def run(self) -> Report:
        for _ in range(3):
            self.add(self.rng.choice(["svc", "init", "ok"]))
        self.start()
        self.settle_and_check()
        self.kill()
        while self.report.kills < self.kills_wanted:
            self.round()
        self.say("end: every manifest removed")
        self.start()
        for name in sorted(self.wanted):
            self.remove(name)
        self.wait_empty()
        self.kill()
        self.say(self.report.summary())
        for v in self.report.violations:
            self.say(f"  VIOLATION {v}")
        return self.report

    # --- what the node shows -------------------------------------------------------------------------

    def snapshot_rows(self) -> dict[str, dict] | None:
        try:
            snap = self.agent.snapshot()
        except (OSError, ValueError):
            return None
        if self.agent.proc is None or snap.get("agent_pid") != self.agent.proc.pid:
            return None
        return {r["name"].removesuffix(f"-{NODE}"): r for r in snap.get("pods", [])}

    def _runc(self) -> list[dict]:
        """Every handler's `list` (runc's and crun's roots), tried again when one fails: runc 1.1.5's list races
        a concurrent delete, and an empty answer would hide every container from the checks."""
        return self.agent.runc_list(attempts=20)

    def converged(self) -> list[str]:
        """What still differs from the manifests (empty when settled)."""
        rows = self.snapshot_rows()
        if rows is None:
            return ["no fresh pods.json"]
        runc = self._runc()
        by_name: dict[str, set[str]] = {}
        for c in runc:
            ann = c.get("annotations") or {}
            by_name.setdefault(ann.get("io.kubernetes.pod.name", "?").removesuffix(f"-{NODE}"), set()).add(
                ann.get("io.kubernetes.pod.uid", "?")
            )
        missing_images = [r for r in self.images_dropped if r not in self._store_text()]
        off = [f"image {r} not imported" for r in missing_images]
        for name, w in self.wanted.items():
            kind = KINDS[w.kind]
            row = rows.get(name)
            if row is None:
                off.append(f"{name}: no row")
                continue
            pod = row["pod"]
            gen = w.gen
            if w.bad:
                # Rolled back: the last good generation runs, and the record says why.
                rec = self.rollout_record(name)
                if rec is None or rec["phase"] != "rolled-back":
                    off.append(
                        f"{name}: bad generation {w.gen} not rolled back (rollout "
                        f"{rec['phase'] if rec else 'without a record'})"
                    )
                    continue
                gen = w.good_gen or 0
            if (pod.get("metadata", {}).get("annotations") or {}).get(GEN_ANN) != str(gen):
                off.append(f"{name}: row of another generation")
                continue
            status = pod.get("status") or {}
            if status.get("phase") != kind.phase:
                off.append(f"{name}: phase {status.get('phase')}")
                continue
            statuses = {s["name"]: s for s in status.get("containerStatuses") or []}
            if set(statuses) != {c for c, _ in kind.containers}:
                off.append(f"{name}: containers {sorted(statuses)}")
                continue
            if kind.phase == "Running":
                if kind.restarts is None:
                    if any(s.get("restartCount", 0) < 1 for s in statuses.values()):
                        off.append(f"{name}: not restarted yet")
                elif not all("running" in (s.get("state") or {}) for s in statuses.values()):
                    off.append(f"{name}: not all running")
            if by_name.get(name, set()) - {row["uid"]}:
                off.append(f"{name}: other pods of the name still in runc")
        for name in set(by_name) - set(self.wanted):
            off.append(f"{name}: in runc without a manifest")
        return off

    def _store_text(self) -> str:
        try:
            return (self.agent.paths.root_dir / "images" / "images.json").read_text()
        except OSError:
            return ""

    def settle_and_check(self) -> None:
        deadline = time.monotonic() + self.settle_timeout
        off = ["not checked"]
        while time.monotonic() < deadline:
            off = self.converged()
            if not off:
                break
            if self.agent.proc is not None and self.agent.proc.poll() is not None:
                off = [f"the agent exited {self.agent.proc.returncode}"]
                break
            time.sleep(0.5)
        tag = f"round {self.report.rounds}"
        if off:
            self.report.violations.append(f"{tag}: did not converge in {self.settle_timeout:.0f} s: {off}")
            self.say(f"  not converged: {off}; the agent's last lines:")
            for line in self.agent.log().splitlines()[-25:]:
                self.say(f"    | {line[:300]}")
        for ref in [r for r in self.images_dropped if r in self._store_text()]:
            self.images_dropped.remove(ref)
            self.images_ready.append(ref)
        # pods.json is written every 0.5 s at most, and a removal runs in steps: a violation counts only if
        # it is still there after a few seconds, with the node still converged.
        violations: list[str] = []
        for _ in range(self.invariant_tries):
            time.sleep(1.0)
            violations = self.converged() + self.check_invariants()
            if not violations:
                break
            time.sleep(2.0)
        for v in violations:
            self.report.violations.append(f"{tag}: {v}")
            self.say(f"  VIOLATION {v}")
        # What the agent logged about each leftover's id: the next occurrence of a rare leak says which path.
        named = set(re.findall(r"\b[0-9a-f]{12}\b", " ".join(violations)))
        for line in [line for line in self.agent.log().splitlines() if any(n in line for n in named)][-30:]:
            self.say(f"    | {line[:300]}")

    def wait_empty(self) -> None:
        deadline = time.monotonic() + self.settle_timeout
        left = self.leftovers(set(), set())
        while time.monotonic() < deadline:
            left = self.leftovers(set(), set())
            if not left:
                return
            time.sleep(0.5)
        for v in left:
            self.report.violations.append(f"end: left after the last manifest was removed: {v}")

    # --- invariants --------------------------------------------------------------------------------

    def check_invariants(self, *, confirm: bool = True) -> list[str]:
        """Every violation the node shows now; `confirm` looks again before calling a thing a leftover."""
        out: list[str] = []
        rows = self.snapshot_rows() or {}
        runc = self._runc()
        uids = {rows[n]["uid"] for n in self.wanted if n in rows}
        pinned = _pinned_sandboxes(self.agent.paths.root_dir / "pods", self.agent.paths.run_dir / "ns")
        ids = {c["id"] for c in runc} | {sid for uid, sbs in pinned.items() if uid in uids for sid in sbs}
        sandboxes = _sandbox_ids(runc) | {sid for uid, sbs in pinned.items() if uid in uids for sid in sbs}
        # Exactly once, with the right containers.
        for name, w in self.wanted.items():
            row = rows.get(name)
            if row is None:
                continue
            mine = [c for c in runc if (c.get("annotations") or {}).get("io.kubernetes.pod.uid") == row["uid"]]
            live_sb = [
                c for c in mine if c["annotations"].get("io.edgelet.kind") == "sandbox" and c["status"] == "running"
            ] + [sid for sid, up in pinned.get(row["uid"], {}).items() if up]
            running = sorted(
                c["annotations"].get("io.kubernetes.container.name", "?")
                for c in mine
                if c["annotations"].get("io.edgelet.kind") == "container" and c["status"] == "running"
            )
            kind = KINDS[w.kind]
            if kind.phase == "Running" and kind.restarts is not None:
                if len(live_sb) != 1:
                    out.append(f"{name}: {len(live_sb)} running sandboxes")
                if running != sorted(c for c, _ in kind.containers):
                    out.append(f"{name}: running containers {running}")
            elif kind.phase != "Running" and running:
                out.append(f"{name}: completed but {running} still run")
            out += self._check_statuses(name, kind, row)
        # `runc list` and the scan that follows are no snapshot: a container created meanwhile has its conmon,
        # cgroup, bundle and socket before runc writes its state. What a later `runc list` shows was no leftover.
        left = self.leftovers(uids, ids, sandboxes)
        for _ in range(3 if confirm else 0):
            if not left:
                break
            later = self._runc()
            ids |= {c["id"] for c in later}
            sandboxes |= _sandbox_ids(later)
            left = self.leftovers(uids, ids, sandboxes)
        return out + left

    def _exit_code_of(self, uid: str, cid: str) -> int | None:
        path = self.agent.paths.run_dir / "exits" / cid
        candidates = [path] + [
            p.parent / "exit"
            for p in (self.agent.paths.root_dir / "pods" / uid).glob("containers/*/*/id")
            if _read(p) == cid
        ]
        for p in candidates:
            text = _read(p)
            if text is not None and text.strip().lstrip("-").isdigit():
                return int(text)
        return None

    def _check_statuses(self, name: str, kind: Kind, row: dict) -> list[str]:
        out = []
        uid = row["uid"]
        status = row["pod"].get("status") or {}
        for s in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
            key = (uid, s["name"])
            rc = s.get("restartCount", 0)
            if rc < self.max_restarts.get(key, 0):
                out.append(f"{name}/{s['name']}: restartCount went back from {self.max_restarts[key]} to {rc}")
            self.max_restarts[key] = max(rc, self.max_restarts.get(key, 0))
            main = s["name"] in {c for c, _ in kind.containers}
            if main and kind.restarts is not None and rc != kind.restarts:
                out.append(f"{name}/{s['name']}: restartCount {rc}, want {kind.restarts}")
            for which in ("state", "lastState"):
                term = (s.get(which) or {}).get("terminated")
                if not term:
                    continue
                cid = (term.get("containerID") or "").split("://", 1)[-1]
                on_disk = self._exit_code_of(uid, cid) if cid else None
                if on_disk is not None and on_disk != term.get("exitCode"):
                    out.append(
                        f"{name}/{s['name']}: {which} exitCode {term.get('exitCode')}, conmon's file says {on_disk}"
                    )
                want = kind.exit_code if which == "state" else kind.last_exit
                if main and want is not None and term.get("exitCode") != want:
                    out.append(
                        f"{name}/{s['name']}: {which} exitCode {term.get('exitCode')} "
                        f"({term.get('reason')}), want {want}"
                    )
        return out

    def leftovers(self, uids: set[str], ids: set[str], sandboxes: set[str] | None = None) -> list[str]:
        """Whatever exists that no current pod accounts for (all of it when `uids` is empty)."""
        p = self.agent.paths
        out = []
        runc = self._runc()
        for c in runc:
            if (c.get("annotations") or {}).get("io.kubernetes.pod.uid") not in uids:
                out.append(f"runc state {c['id'][:12]} ({c.get('annotations', {}).get('io.kubernetes.pod.name')})")
        for pid, cid in _conmons(str(p.run_dir)):  # whichever handler's root their runtime args name
            if cid not in ids:
                out.append(f"conmon {pid} for {cid[:12]}")
        base = str(p.root_dir.parent.resolve())
        for mp in _mounts_under(base):
            rel = mp[len(base) + 1 :]
            m = re.match(r"root/pods/([0-9a-f-]+)/", rel + "/")
            n = re.match(r"run/netns/([0-9a-f]+)$", rel) or re.match(r"run/ns/([0-9a-f]+)/(net|ipc|uts)$", rel)
            if (
                (m and m.group(1) in uids)
                or (n and sandboxes is not None and n.group(1) in sandboxes)
                or rel in self.test_mounts
            ):
                continue
            out.append(f"mount {rel}")
        for cg in _pod_cgroups(p.cgroup_root):
            if cg.name.removeprefix("pod") not in uids:
                out.append(f"cgroup {cg}")
            for child in _ls(cg):
                # A live pod's conmons sit in its MONITOR_CGROUP leaf (it goes with the pod's cgroup).
                if child.is_dir() and child.name not in ids and child.name != MONITOR_CGROUP:
                    out.append(f"cgroup {child}")
        pods_dir = p.root_dir / "pods"
        released: set[str] = set()
        for d in _ls(pods_dir):
            if d.name not in uids:
                out.append(f"pod dir {d.name} ({sorted(x.name for x in _ls(d))})")
                continue
            for idf in d.glob("containers/*/*/id"):
                cid = _read(idf)
                if cid in ids:
                    continue
                if (p.run_dir / "exits" / cid).exists():
                    # Exited and released from runc (as containerd's shim does): its bundle and exit file
                    # stay as the record of the last instance; only its sockets and mount must be gone.
                    released.add(cid)
                    continue
                out.append(f"bundle {idf.parent.relative_to(pods_dir)} without runc state")
            if (d / "sandbox" / "id").exists() and _read(d / "sandbox" / "id") not in ids:
                out.append(f"sandbox bundle of {d.name} without runc state (nor namespaces pinned)")
        for sub in ("exits", "socks"):
            for f in _ls(p.run_dir / sub):
                if f.name not in ids and not f.name.startswith(".") and not (sub == "exits" and f.name in released):
                    # conmon's socket entry is a link to the bundle: where it points says which removal missed it.
                    target = f" -> {_readlink(f)}" if sub == "socks" else ""
                    out.append(f"{sub}/{f.name[:12]}{target}")
        for n in sorted(x.name for x in _ls(p.run_dir / "ns")):
            # Namespaces pinned for a sandbox without an infra container go with its pod.
            if sandboxes is None or n not in sandboxes:
                out.append(f"pinned namespaces {n[:12]}")
        netns_dir = p.run_dir / "netns"
        netns = sorted(x.name for x in _ls(netns_dir))
        for n in netns:
            if sandboxes is None or n not in sandboxes:
                out.append(f"netns {n[:12]}")
        cache = p.root_dir / "cni"
        for f in _ls(cache):
            if not f.name.startswith(".") and (sandboxes is None or f.name.split(".")[0] not in sandboxes):
                out.append(f"cni cache {f.name[:24]}")
        veths = [line for line in _sh("ip", "-o", "link", "show", "master", self.net["bridge"]).splitlines() if line]
        if len(veths) > len(netns):
            out.append(f"{len(veths)} veths on the bridge for {len(netns)} netns")
        ipam = self.net["ipam"]
        leases = (
            [f for f in ipam.rglob("*") if f.is_file() and re.fullmatch(r"[0-9.]+", f.name)] if ipam.exists() else []
        )
        if len(leases) > len(netns):
            out.append(f"{len(leases)} host-local leases for {len(netns)} netns")
        return out


def _readlink(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError as exc:
        return f"(not a link: {exc.strerror})"


def _sandbox_ids(runc: list[dict]) -> set[str]:
    return {c["id"] for c in runc if (c.get("annotations") or {}).get("io.edgelet.kind") == "sandbox"}


def _pinned_sandboxes(pods_dir: Path, ns_dir: Path) -> dict[str, dict[str, bool]]:
    """{pod uid: {sandbox id: running}} of the sandboxes without an infra container (no runc state): one runs
    once started, not stopped, with its namespace files there."""
    out: dict[str, dict[str, bool]] = {}
    for d in _ls(pods_dir):
        b = d / "sandbox"
        sid = _read(b / "id")
        try:
            ann = json.loads((b / "config.json").read_text()).get("annotations") or {}
        except (OSError, ValueError):
            continue
        if not sid or ann.get("io.edgelet.infra") != "false":
            continue
        files = [f.split("=", 1)[1] for f in ann.get("io.edgelet.namespaces", "").split(",") if "=" in f]
        up = (b / "started").exists() and not (b / "exit").exists() and all(os.path.exists(f) for f in files)
        out.setdefault(d.name, {})[sid] = up and (not files or (ns_dir / sid).is_dir())
    return out


def _ls(path: Path) -> list[Path]:
    """A directory's entries, none when it is gone (the agent removes things while the checks look)."""
    try:
        return list(path.iterdir())
    except OSError:
        return []


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _conmons(under: str) -> list[tuple[int, str]]:
    """(pid, container id) of the conmons with an argument under `under` (a runtime root, or the run dir)."""
    return [
        (pid, argv[argv.index("-c") + 1] if "-c" in argv[:-1] else "?")
        for pid, argv in conmon_processes()
        if any(a == under or a.startswith(under + "/") for a in argv)
    ]


def _mounts_under(prefix: str) -> list[str]:
    return [
        line.split()[4]
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if line.split()[4].startswith(prefix + "/")
    ]


def _pod_cgroups(cgroup_root: str) -> list[Path]:
    rel = cgroup_root.strip("/")
    found = []
    for h in Path("/sys/fs/cgroup").iterdir():
        top = h / rel
        if not top.is_dir():
            continue
        for d in [top, top / "burstable", top / "besteffort"]:
            found += [c for c in _ls(d) if c.is_dir() and c.name.startswith("pod")]
    return found
