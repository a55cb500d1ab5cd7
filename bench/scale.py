"""Scale: 100 pods from cold by `--runonce` and by the daemon, steady state with them, churn of pod
replacements, and boot provisioning from a cold page cache; each beside raw `runc` running the same
containers (edgelet's own bundles, copied) in the same run.

Run as root: `.venv/bin/python bench/scale.py [--pods 100] [--steady 300] [--churn 500] [--boot-pods 10]`
(`--only cold,steady,churn,boot` picks phases). Pods are a pause sandbox and one busybox container each.
"From cold" is a fresh root dir with the image archive in the import dir (import, unpack, create); the raw
baseline runs the same pairs one after the other, each timed from writing its bundles and mounting its
rootfs to both started. Churn replaces `--churn-width` of the running pods at a time (a changed manifest is
a new pod: the old one is stopped, the new one started); the raw baseline does the same replacements one
at a time: `runc kill` TERM, delete, create and start the new pair. Boot keeps the root dir as a reboot
does (images, bundles), empties the run dir, kills every container and drops the page cache first.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import (
    Bench,
    RawRunc,
    compile_bytecode,
    cpu_split,
    drop_caches,
    machine,
    memory_mb,
    percentile,
    pod_manifest,
    stop_containers,
    wait_files,
)

from edgelet.status.runonce import STABLE

# What an agent imports before its first pod (the rest comes with the pods), for the cold-cache start cost.
IMPORTS = (
    "import edgelet.cli, edgelet.app, edgelet.sync.loop, edgelet.sync.syncpod, edgelet.sync.workers,"
    " edgelet.runtime.runc_runtime, edgelet.images.importdir, edgelet.sources.file, edgelet.pleg,"
    " edgelet.probes.manager, edgelet.status.publisher"
)

# sh as the container's pid 1 leaves on TERM at once, so a replacement measures edgelet, not a grace period.
COMMAND = "touch /out/{name}; trap 'exit 0' TERM; sleep 3600 & wait"


def out_dir(b: Bench) -> Path:
    d = b.base / "out"
    d.mkdir(exist_ok=True)
    os.chmod(d, 0o777)
    return d


def put_pods(b: Bench, names: list[str], *, gen: str = "") -> float:
    """Write one manifest per name (its container touches /out/<name><gen>); returns the time of the first."""
    t0 = time.monotonic()
    for name in names:
        b.put_manifest(f"{name}.yaml", pod_manifest(name, COMMAND.format(name=name + gen), host_dir=str(out_dir(b))))
    return t0


def raw_pairs(b: Bench, tag: str, n: int) -> float:
    """Seconds for raw runc to run n pairs one after the other, each from its bundles to both started."""
    raw = RawRunc(b, tag)
    names = {f"{tag}{i}" for i in range(n)}
    try:
        t0 = time.monotonic()
        for i in range(n):
            raw.prepare(i, COMMAND.format(name=f"{tag}{i}"))
            raw.start(i)
        wait_files(out_dir(b), names)
        return time.monotonic() - t0
    finally:
        raw.close()


def runonce(b: Bench) -> float:
    return runonce_timed(b)[1]


def runonce_timed(b: Bench, names: set[str] | None = None) -> tuple[float | None, float]:
    """Run `--runonce`: (seconds until every container of `names` has run its command, seconds until it
    exited). The first is what the raw baseline measures; the exit comes after kubelet's runOnce check, which
    judges the pods a retry delay (1 s) after their sync, so a container that dies at once is not seen running."""
    # Its output goes to a file: a pipe nobody reads while the files are polled could fill and stall it.
    with tempfile.TemporaryFile("w+") as out:
        t0 = time.monotonic()
        proc = subprocess.Popen(b.argv("--runonce", "--runonce-timeout", "10m"), stdout=out, stderr=out, text=True)
        running = None
        if names:
            seen = wait_files(out_dir(b), names, timeout=600)
            running = max(seen.values()) - t0
        proc.wait()
        took = time.monotonic() - t0
        if proc.returncode:
            out.seek(0)
            raise SystemExit(f"--runonce failed ({proc.returncode}):\n{out.read()[-5000:]}")
    return running, took


def cold(n: int) -> list[str]:
    names = [f"p{i}" for i in range(n)]
    b = Bench("scale-runonce")
    try:
        put_pods(b, names)
        t_runonce = runonce(b)
        wait_files(out_dir(b), set(names), timeout=60)
        stop_containers(b)
        t_raw = raw_pairs(b, "raw", n)
    finally:
        b.close()
    b = Bench("scale-daemon")
    try:
        put_pods(b, names)
        t0 = time.monotonic()
        b.start_agent()
        seen = wait_files(out_dir(b), set(names), timeout=600, agent=b.proc)
        t_daemon = max(seen.values()) - t0
        rss = memory_mb(b.proc.pid)[0]
        stop_containers(b)
        t_raw2 = raw_pairs(b, "raw", n)
    finally:
        b.close()
    return [
        f"{n} pods from cold, --runonce (start -> exit, all running): {t_runonce:.2f} s;"
        f" raw runc, same pairs one by one: {t_raw:.2f} s  ({t_runonce / t_raw:.2f}x)",
        f"{n} pods from cold, daemon (start -> all running): {t_daemon:.2f} s;"
        f" raw runc, same pairs one by one: {t_raw2:.2f} s  ({t_daemon / t_raw2:.2f}x); agent RSS then {rss:.1f} MB",
    ]


def sample(pid: int) -> tuple[float, float, float]:
    """(monotonic time, RSS MB, agent + waited-for children CPU seconds)."""
    own, children = cpu_split(pid)
    return time.monotonic(), memory_mb(pid)[0], own + children


def steady_and_churn(n: int, steady: float, churn: int, width: int, churn_raw: int, phases: set[str]) -> None:
    """Both on one agent with n pods; each phase's lines are printed as it ends."""
    names = [f"p{i}" for i in range(n)]
    b = Bench("scale-steady")
    try:
        put_pods(b, names)
        b.start_agent()
        wait_files(out_dir(b), set(names), timeout=600, agent=b.proc)
        pid = b.proc.pid
        time.sleep(10)  # the first relists and status writes after the burst
        if "steady" in phases:
            samples = [sample(pid)]
            while samples[-1][0] - samples[0][0] < steady:
                time.sleep(min(10.0, steady / 10))
                samples.append(sample(pid))
            t0, r0, c0 = samples[0]
            t1, r1, c1 = samples[-1]
            rmax = max(s[1] for s in samples)
            half = samples[len(samples) // 2]
            report(
                [
                    f"steady state, {n} pods, {t1 - t0:.0f} s: agent RSS {r0:.1f} MB at start, {half[1]:.1f} MB midway,"
                    f" {r1:.1f} MB at end (max {rmax:.1f} MB); CPU {c1 - c0:.2f} s = {100 * (c1 - c0) / (t1 - t0):.2f} %"
                    f" of one core (agent and its runc children)"
                ]
            )
        if "churn" in phases:
            report(churn_run(b, names, churn, min(width, n), churn_raw))
    finally:
        b.close()


def churn_run(b: Bench, names: list[str], count: int, width: int, count_raw: int) -> list[str]:
    pid = b.proc.pid
    rss0 = memory_mb(pid)[0]
    lat: list[float] = []
    t_start = time.monotonic()
    gen = 0
    while len(lat) < count:
        gen += 1
        wave = names[: min(width, count - len(lat))]
        starts = {}
        for name in wave:
            starts[f"{name}.{gen}"] = b.put_manifest(
                f"{name}.yaml", pod_manifest(name, COMMAND.format(name=f"{name}.{gen}"), host_dir=str(out_dir(b)))
            )
        seen = wait_files(out_dir(b), set(starts), timeout=300, agent=b.proc)
        lat += [seen[k] - starts[k] for k in starts]
    elapsed = time.monotonic() - t_start
    time.sleep(10)  # the old pods' clean-up finishes
    rss1 = memory_mb(pid)[0]
    # Raw runc, one replacement at a time over the same number of pairs, while the agent's pods still run.
    raw = RawRunc(b, "churn")
    raw_lat: list[float] = []
    try:
        for i in range(width):
            raw.prepare(i, COMMAND.format(name=f"churn{i}.0"))
            raw.start(i)
        wait_files(out_dir(b), {f"churn{i}.0" for i in range(width)})
        t_raw = time.monotonic()
        for k in range(count_raw):
            i = k % width
            t0 = time.monotonic()
            raw.remove(i, signal="TERM")
            raw.prepare(i, COMMAND.format(name=f"churn{i}.{k + 1}"))
            raw.start(i)
            raw_lat.append(wait_files(out_dir(b), {f"churn{i}.{k + 1}"})[f"churn{i}.{k + 1}"] - t0)
        raw_elapsed = time.monotonic() - t_raw
    finally:
        raw.close()
    return [
        f"churn, {count} pod replacements, {width} at a time among {len(names)} pods: {count / elapsed:.2f} /s;"
        f" rename -> new container running p50 {percentile(lat, 0.5) * 1000:.0f} ms,"
        f" p99 {percentile(lat, 0.99) * 1000:.0f} ms; agent RSS {rss0:.1f} MB before, {rss1:.1f} MB after",
        f"raw runc, {count_raw} replacements one at a time (kill TERM, delete, create+start the new pair):"
        f" {count_raw / raw_elapsed:.2f} /s; each p50 {percentile(raw_lat, 0.5) * 1000:.0f} ms,"
        f" p99 {percentile(raw_lat, 0.99) * 1000:.0f} ms",
    ]


def boot(n: int, repeat: int) -> list[str]:
    names = [f"p{i}" for i in range(n)]
    b = Bench("scale-boot")
    ed: list[float] = []
    exits: list[float] = []
    raw: list[float] = []
    imports: list[float] = []
    try:
        compile_bytecode()
        put_pods(b, names)
        runonce(b)  # provisioning: the image is imported and unpacked, the pod dirs written
        for r in range(repeat):
            stop_containers(b)
            for f in out_dir(b).iterdir():
                f.unlink()
            drop_caches()
            t0 = time.monotonic()
            subprocess.run([sys.executable, "-c", IMPORTS], check=True, cwd=b.base)
            imports.append(time.monotonic() - t0)
            drop_caches()
            running, took = runonce_timed(b, set(names))
            assert running is not None
            ed.append(running)
            exits.append(took)
            stop_containers(b)
            drop_caches()
            raw.append(raw_pairs(b, f"raw{r}x", n))
    finally:
        b.close()
    e, w, x = statistics.median(ed), statistics.median(raw), statistics.median(exits)
    return [
        f"boot, {n} pods by --runonce from a cold page cache (root dir kept, run dir empty), median of {repeat}:"
        f" every container running after {e:.2f} s (runs: {', '.join(f'{v:.2f}' for v in ed)}); raw runc, same"
        f" pairs one by one, cold cache: {w:.2f} s (runs: {', '.join(f'{v:.2f}' for v in raw)})  ({e / w:.2f}x)",
        f"  --runonce exits after {x:.2f} s (runs: {', '.join(f'{v:.2f}' for v in exits)}): the pods are judged"
        f" once every container's process has lived {STABLE:g} s and is still there (edgelet.status.runonce)"
        f"  ({x / w:.2f}x of raw)",
        f"  the exit after every container running, median {statistics.median(b - a for a, b in zip(ed, exits)):.2f} s"
        f" (runs: {', '.join(f'{b - a:.2f}' for a, b in zip(ed, exits))}): what the verdict and the exit add",
        f"  of which the interpreter starting and importing what --runonce imports, cold cache, median:"
        f" {statistics.median(imports):.2f} s",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pods", type=int, default=100)
    ap.add_argument("--steady", type=float, default=300.0, help="seconds of steady state (default 5 minutes)")
    ap.add_argument("--churn", type=int, default=500, help="pod replacements")
    ap.add_argument("--churn-width", type=int, default=10, help="pods replaced at a time")
    ap.add_argument("--churn-raw", type=int, default=None, help="replacements of the raw baseline (default: --churn)")
    ap.add_argument("--boot-pods", type=int, default=10)
    ap.add_argument("--boot-repeat", type=int, default=3)
    ap.add_argument("--only", default="cold,steady,churn,boot")
    args = ap.parse_args()
    phases = set(args.only.split(","))
    print(f"machine: {machine()} (at the start)", flush=True)
    if "cold" in phases:
        report(cold(args.pods))
    if phases & {"steady", "churn"}:
        steady_and_churn(
            args.pods,
            args.steady,
            args.churn,
            args.churn_width,
            args.churn if args.churn_raw is None else args.churn_raw,
            phases,
        )
    if "boot" in phases:
        report(boot(args.boot_pods, args.boot_repeat))
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


def report(lines: list[str]) -> None:
    """Print a phase's lines as soon as it is done (a long run that is cut short keeps them)."""
    for line in lines:
        print(line, flush=True)


if __name__ == "__main__":
    main()
