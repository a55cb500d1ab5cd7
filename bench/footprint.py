"""Agent footprint: RSS and PSS idle with 0 and 20 running pods (plus one completed), the CPU the pods' starts
cost, and CPU used over 60 s idle with the agent's own account of it (GET /debug/cpu: loop wakeups, and per
subsystem the callbacks and their time, grouped as relists, probes, gates, API, sync and other).

Run as root: `.venv/bin/python bench/footprint.py [--pods 20] [--idle 60] [--cni]`; `--cni` gives the pods a bridge
network of the bench's own (bridge, host-local, portmap, loopback), whose housekeeping CHECKs then count too;
`--spawns` counts the processes the agent started in the idle window, per program (EDGELET_TRACE_SPAWNS), and
those it started from the first manifest until the pods ran and settled (runc by subcommand: `runc list` per pod
start is what a sync's state reads cost).
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Bench, cpu_breakdown, cpu_split, loop_account, machine, pod_manifest, running_pods
from _harness import memory_mb as memory


def rss_by_mapping(pid: int, top: int = 15) -> list[tuple[str, int]]:
    """The process's resident KiB per mapped file (anonymous memory as "[anon]"), largest first, the rest summed."""
    per: collections.Counter[str] = collections.Counter()
    name = "?"
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and not fields[0].endswith(":"):
            name = fields[5] if len(fields) > 5 else "[anon]"
        elif fields[0] == "Rss:":
            per[name] += int(fields[1])
    ranked = per.most_common()
    return ranked[:top] + [(f"({len(ranked) - top} more)", sum(k for _, k in ranked[top:]))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pods", type=int, default=20)
    ap.add_argument("--idle", type=float, default=60.0)
    ap.add_argument("--settle", type=float, default=5.0)
    ap.add_argument("--cni", action="store_true", help="pods on a CNI bridge network instead of none")
    ap.add_argument("--spawns", action="store_true", help="count what the agent spawns in the idle window")
    ap.add_argument("--runtime-handler", help="the agent's default runtime handler (runc unless given: crun)")
    ap.add_argument(
        "--one-by-one",
        action="store_true",
        help="start the pods one at a time, each once the one before runs (what one pod start costs)",
    )
    ap.add_argument(
        "--breakdown",
        action="store_true",
        help="with the pods running, print the agent's RSS by mapping (heap, each library, the rest)",
    )
    args = ap.parse_args()
    b = Bench("footprint")
    trace = b.base / "spawns.txt"
    if args.spawns:
        os.environ["EDGELET_TRACE_SPAWNS"] = str(trace)
    spawned: collections.Counter[str] = collections.Counter()
    starting: collections.Counter[str] = collections.Counter()
    bridge = None
    try:
        extra: tuple[str, ...] = ("--runtime-handler", args.runtime_handler) if args.runtime_handler else ()
        if args.cni:
            from start_latency import cni_conf

            conf, bridge = cni_conf(b.base)
            extra += (f"--cni-conf-dir={conf}", "--cni-bin-dir=/usr/lib/cni")
        proc = b.start_agent(*extra)
        time.sleep(args.settle)
        rss0, pss0 = memory(proc.pid)
        s0, c0 = cpu_split(proc.pid)
        t_put = time.time()
        for i in range(args.pods):
            b.put_manifest(f"p{i}.yaml", pod_manifest(f"p{i}", "exec sleep 3600"))
            until = time.monotonic() + 60
            while args.one_by_one and running_pods(b) <= i and time.monotonic() < until:
                time.sleep(0.05)
        # And one completed job: exited containers are what an idle agent must not keep re-reading.
        b.put_manifest("job.yaml", pod_manifest("job", "echo done", restart="OnFailure"))
        deadline = time.monotonic() + 120
        while running_pods(b) < args.pods and time.monotonic() < deadline:
            time.sleep(0.5)
        n = running_pods(b)
        time.sleep(args.settle)
        rss1, pss1 = memory(proc.pid)
        breakdown = rss_by_mapping(proc.pid) if args.breakdown else []
        acct0 = loop_account(b.paths.run_dir)
        a0, k0 = cpu_split(proc.pid)
        t0 = time.time()
        time.sleep(args.idle)
        a1, k1 = cpu_split(proc.pid)
        t1 = time.time()
        acct1 = loop_account(b.paths.run_dir)
        if args.spawns and trace.exists():
            for line in trace.read_text().splitlines():
                at, prog, rest = (line.split(" ", 2) + ["", ""])[:3]
                what = f"{prog} {_subcommand(prog, rest.split())}".strip()
                if t0 <= float(at) <= t1:
                    spawned[what] += 1
                elif t_put <= float(at) < t0:
                    starting[what] += 1
        rss2, pss2 = memory(proc.pid)
    finally:
        b.close()
        if bridge is not None:
            import asyncio

            from edgelet.network.iptables import remove_tagged

            asyncio.run(remove_tagged(f"bench-{bridge}", key="name"))  # the pods' masquerade rules
            subprocess.run(["ip", "link", "del", bridge], capture_output=True)
    print(f"machine: {machine()}" + ("; pods on a CNI bridge network" if args.cni else ""))
    for name, kib in breakdown:
        print(f"  RSS {kib / 1024:6.2f} MB  {name}")
    print(f"agent idle, 0 pods:        VmRSS {rss0:.1f} MB  PSS {pss0:.1f} MB")
    print(
        f"agent idle, {n} pods:       VmRSS {rss1:.1f} MB  PSS {pss1:.1f} MB  (after {args.idle:.0f} s: {rss2:.1f} / {pss2:.1f} MB)"
    )
    used = (a1 - a0) + (k1 - k0)
    print(
        f"CPU over {args.idle:.0f} s idle with {n} pods: {used:.2f} s  = {100 * used / args.idle:.2f} % of one core"
        f"  (agent {a1 - a0:.2f} s, runc/conmon children {k1 - k0:.2f} s)"
    )
    print(f"  {cpu_breakdown(acct0, acct1)}")
    pods = args.pods + 1  # and the job
    print(
        f"CPU from the first manifest until {pods} pods ran and settled ({args.settle:.0f} s):"
        f" agent {a0 - s0:.2f} s = {1000 * (a0 - s0) / pods:.1f} ms a pod, children {k0 - c0:.2f} s"
        f" = {1000 * (k0 - c0) / pods:.1f} ms a pod"
    )
    if args.spawns:
        how = "one by one" if args.one_by_one else "at once"
        print(
            f"spawned while {pods} pods started ({how}) and settled ({args.settle:.0f} s): {sum(starting.values())};"
            f" runc list per pod: {starting['runc list'] / pods:.2f}"
            + "".join(f"\n  {n:4d}  {what}" for what, n in starting.most_common())
        )
        print(
            f"spawned in the idle window: {sum(spawned.values())}"
            + "".join(f"\n  {n:4d}  {what}" for what, n in spawned.most_common())
        )


def _subcommand(prog: str, args: list[str]) -> str:
    """runc's subcommand (after its --root DIR), else the first argument, as the spawn trace has them."""
    if prog == "runc":
        while args and args[0].startswith("-"):
            args = args[2:] if "=" not in args[0] else args[1:]
        return args[0] if args else ""
    return args[0] if args else ""


if __name__ == "__main__":
    main()
