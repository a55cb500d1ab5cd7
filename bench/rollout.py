"""Health-gated rollout (issue 21): time from a bad version's manifest to the last good version running again (a
crash-looping v2, and a v2 whose image does not exist on a loopback registry), beside the gate's deadline; and the
downtime of a `Replace` update of a good version against kubelet's kill-and-start (--rollout=false), same pod, same
machine, same run.

Run as root: `.venv/bin/python bench/rollout.py [--updates 3]`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import IMAGE, REPO, Bench, machine, wait_files

sys.path.insert(0, str(REPO))
from tests.integration.registry import Registry

DEADLINE = "60s"
WINDOW = "2s"


def manifest(image: str, command: str, version: str = "") -> str:
    return f"""apiVersion: v1
kind: Pod
metadata:
  name: app
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: {image}
    env: [{{name: V, value: "{version}"}}]
    command: ["sh", "-c", {command!r}]
    volumeMounts: [{{name: out, mountPath: /out}}]
  volumes: [{{name: out, hostPath: {{path: /tmp/PLACEHOLDER, type: Directory}}}}]
"""


# Says when it started and when it was told to stop, so the downtime is read from the files' times.
SERVE = "touch /out/start-$V; trap 'touch /out/stop-$V; exit 0' TERM; while true; do sleep 0.05; done"


def record(b: Bench) -> dict | None:
    for path in (b.paths.root_dir / "state" / "rollout").glob("*.json"):
        try:
            return json.loads(path.read_text())["record"]
        except (OSError, ValueError):
            return None
    return None


def wait(pred, timeout: float = 300.0, what: str = "condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    raise TimeoutError(what)


def put(b: Bench, out: Path, text: str) -> float:
    return b.put_manifest("app.yaml", text.replace("/tmp/PLACEHOLDER", str(out)))


def bad_versions(reg_host: str) -> tuple[float, float, float]:
    """(crash-loop: manifest -> v1 running again, missing image: manifest -> failure reported, v1's downtime)."""
    b = Bench("rollout-bad")
    out = b.base / "out"
    out.mkdir()
    try:
        b.start_agent("--rollout-deadline", DEADLINE, "--rollout-stability-window", WINDOW)
        put(b, out, manifest(IMAGE, SERVE, "1"))
        v1 = wait(lambda: (r := record(b)) and r["phase"] == "good" and r["active"], what="v1 good")
        # Missing image: v1 never stops; the time until the failure is reported.
        t0 = put(b, out, manifest(f"{reg_host}/bench/missing:1", SERVE, "2"))
        wait(
            lambda: (r := record(b)) and r["phase"] == "pulling" and "ErrImagePull" in r["reason"],
            what="pull failure reported",
        )
        missing = time.monotonic() - t0
        v1_stopped = (out / "stop-1").exists()
        # Crash-looping v2: replaced, judged, rolled back; until v1 started again.
        (out / "start-1").unlink()
        t0 = put(b, out, manifest(IMAGE, "echo broken; exit 1", "3"))
        seen = wait_files(out, {"start-1"}, timeout=300, agent=b.proc)
        crash = seen["start-1"] - t0
        wait(lambda: (r := record(b)) and r["phase"] == "rolled-back" and r["active"] == v1, what="rolled back")
        return crash, missing, 0.0 if not v1_stopped else float("nan")
    finally:
        b.close()


def update_downtime(updates: int, *extra: str) -> list[float]:
    """Downtime of each good update: v(n)'s stop signal to v(n+1)'s start, from the files' times."""
    b = Bench("rollout-update")
    out = b.base / "out"
    out.mkdir()
    downs = []
    try:
        b.start_agent("--rollout-deadline", DEADLINE, "--rollout-stability-window", WINDOW, *extra)
        put(b, out, manifest(IMAGE, SERVE, "0"))
        wait_files(out, {"start-0"}, timeout=120, agent=b.proc)
        for n in range(1, updates + 1):
            if "--rollout=false" not in extra:
                wait(lambda: (r := record(b)) and r["phase"] == "good", what=f"v{n - 1} good")
            put(b, out, manifest(IMAGE, SERVE, str(n)))
            wait_files(out, {f"stop-{n - 1}", f"start-{n}"}, timeout=120, agent=b.proc)
            downs.append((out / f"start-{n}").stat().st_mtime - (out / f"stop-{n - 1}").stat().st_mtime)
        return downs
    finally:
        b.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--updates", type=int, default=3)
    args = ap.parse_args()
    reg_dir = Bench("rollout-registry")
    reg = Registry(reg_dir.base / "reg")
    reg.start()
    try:
        crash, missing, v1_down = bad_versions(reg.host)
    finally:
        reg.stop()
        reg_dir.close()
    replace = update_downtime(args.updates)
    kill_start = update_downtime(args.updates, "--rollout=false")
    print(f"machine: {machine()}")
    print(f"gate: deadline {DEADLINE}, stability window {WINDOW}")
    print(f"crash-looping v2: manifest written -> last good v1 started again: {crash:.2f} s (deadline {DEADLINE})")
    print(
        f"v2 image missing (registry 404): manifest written -> failure reported: {missing:.2f} s; "
        f"v1 downtime {v1_down:.0f} s (never stopped)"
    )
    print(
        f"Replace update of a good version, downtime (stop signal -> new start), {args.updates} updates: "
        + ", ".join(f"{d:.2f}" for d in replace)
        + " s"
    )
    print(
        "kill-and-start (--rollout=false), same pod, same run:                  "
        + ", ".join(f"{d:.2f}" for d in kill_start)
        + " s"
    )


if __name__ == "__main__":
    main()
