"""`edgelet node`: the node's conditions, tunnel, capacity, allocatable and usage, and the agent's apiserver link."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from edgelet.cli import common
from edgelet.cli.common import EXIT_FAILURE, EXIT_OK, CommandError, format_age, format_table, format_time
from edgelet.settings import Settings


def capacity(settings: Settings) -> tuple[dict[str, str], dict[str, str]]:
    """What the Node advertises as capacity and allocatable (the same probe as the apiserver link's)."""
    from edgelet.cgroups.allocatable import total_reserved
    from edgelet.eviction.thresholds import hard_reserved
    from edgelet.mirror.node import host_facts, node_allocatable, node_resources, with_reservations

    facts = host_facts(
        settings.node_name, root_dir=settings.root_dir, runtime_version="", edgelet_version="", node_ip=""
    )
    facts = with_reservations(
        facts,
        total_reserved(settings.system_reserved, settings.kube_reserved),
        hard_reserved(settings.eviction_hard, memory_bytes=facts.memory_bytes, disk_bytes=facts.ephemeral_bytes),
    )
    return node_resources(facts), node_allocatable(facts)


def usage_rows(summary: dict[str, Any] | None, cap: dict[str, str]) -> list[tuple[str, str]]:
    """CPU (millicores, share of the cores), memory working set, the root dir's filesystem and running pods."""
    from edgelet.api.quantity import parse_quantity
    from edgelet.cli.top import format_cpu, format_memory

    if summary is None:
        return [("Usage:", "- (edgelet is not running; usage is measured by the running agent)")]
    node = summary.get("node", {})
    cores = float(parse_quantity(cap["cpu"]))
    mem_total = float(parse_quantity(cap["memory"]))
    nano = (node.get("cpu") or {}).get("usageNanoCores")
    ws = (node.get("memory") or {}).get("workingSetBytes")
    fs = node.get("fs") or {}
    rows = [
        ("  cpu:", format_cpu(nano) + ("" if nano is None else f" ({nano / 1e9 / cores:.0%})")),
        ("  memory:", format_memory(ws) + ("" if ws is None or not mem_total else f" ({ws / mem_total:.0%})")),
    ]
    if fs.get("capacityBytes"):
        rows.append(
            (
                "  ephemeral-storage:",
                f"{format_memory(fs.get('usedBytes'))} of "
                f"{format_memory(fs['capacityBytes'])} ({fs['usedBytes'] / fs['capacityBytes']:.0%})",
            )
        )
    rows.append(("  pods:", f"{len(summary.get('pods', []))} running"))
    return [("Usage:", ""), *rows]


def fetch_conditions(settings: Settings) -> list[dict[str, str]] | None:
    """The running agent's Node conditions (pressure and Ready, as the mirror reports them); None without one."""
    import json

    try:
        body = common.from_agent(settings, "/node/conditions")
    except CommandError:
        return None  # an agent older than the endpoint
    return None if body is None else list(json.loads(body))


def conditions_lines(conditions: list[dict[str, str]]) -> list[str]:
    """kubectl describe node's Conditions block, which it leads with (less the times: the agent computes the
    conditions afresh, so they hold now)."""
    rows = [["Type", "Status", "Reason", "Message"], ["----", "------", "------", "-------"]]
    rows += [[c.get("type", ""), c.get("status", ""), c.get("reason", ""), c.get("message", "")] for c in conditions]
    return ["Conditions:", *("  " + line for line in format_table(rows).splitlines())]


def _resources(title: str, res: dict[str, str]) -> list[tuple[str, str]]:
    return [(title, ""), *((f"  {k}:", v) for k, v in res.items())]


def cmd_node(settings: Settings, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Capacity, allocatable and usage of this node; with --kubeconfig also the apiserver link's state."""
    import json

    from edgelet.cli.check import tunnel_link
    from edgelet.cli.pods import agent_node_name
    from edgelet.cli.top import fetch_summary

    state: dict[str, Any] | None = None
    try:
        body = common.from_agent(settings, "/node")
    except CommandError as exc:
        if "404" not in str(exc) and "no apiserver" not in str(exc):
            raise
        body = None
        running = True
    else:
        running = body is not None
    if body is not None:
        state = json.loads(body)
    summary = fetch_summary(settings) if running else None
    conditions = fetch_conditions(settings) if running else None
    cap, allocatable = capacity(settings)
    tunnel = tunnel_link(settings.wireguard_config) if settings.wireguard_config is not None else None
    if args.output == "json":
        usage = (
            None
            if summary is None
            else {
                "cpuNanoCores": (summary["node"].get("cpu") or {}).get("usageNanoCores"),
                "memoryWorkingSetBytes": (summary["node"].get("memory") or {}).get("workingSetBytes"),
                "pods": len(summary.get("pods", [])),
            }
        )
        print(
            json.dumps(
                {
                    **(state or {}),
                    "conditions": conditions,
                    "capacity": cap,
                    "allocatable": allocatable,
                    "usage": usage,
                    **({"tunnel": {"ready": tunnel[0], "state": tunnel[1]}} if tunnel is not None else {}),
                },
                indent=2,
            ),
            file=out,
        )
        return EXIT_OK if running else EXIT_FAILURE
    rows: list[tuple[str, str]] = [("Node:", agent_node_name(settings))]
    if conditions is None:
        rows.append(("Conditions:", "- (edgelet is not running; the running agent reports them)"))
    if tunnel is not None:
        rows.append(("Tunnel:", tunnel[1]))
    rows += _resources("Capacity:", cap) + _resources("Allocatable:", allocatable) + usage_rows(summary, cap)
    if state is not None:
        now = common.clock.now()

        def ago(ts: float | None) -> str:
            return "never" if ts is None else f"{format_age(now - ts)} ago ({format_time(ts)})"

        link = state["link"] + (f" ({state['last_error']})" if state.get("last_error") else "")
        rows += [
            ("Server:", state["server"]),
            ("Registered:", f"yes (uid {state['node_uid']})" if state["registered"] else "no"),
            ("Link:", link),
            ("Last lease renewal:", ago(state.get("last_lease_renewal"))),
            ("Last node status:", ago(state.get("last_status_update"))),
            ("Last full resync:", ago(state.get("last_resync")) + f", {state['resyncs']} in all"),
            ("Mirror pods:", str(state["mirror_pods"])),
            ("Queue depth:", str(state["queue_depth"])),
            ("Requests sent:", str(state["requests"])),
        ]
    elif running:
        rows.append(("Apiserver:", "none (standalone; --kubeconfig reports to one)"))
    width = max(len(k) for k, _ in rows)
    lines = [f"{k.ljust(width)} {v}".rstrip() for k, v in rows]
    block = conditions_lines(conditions) if conditions is not None else []
    for line in [lines[0], *block, *lines[1:]]:
        print(line, file=out)
    if not running:
        print("edgelet is not running (usage and the apiserver link exist only while it runs).", file=err)
        return EXIT_FAILURE
    return EXIT_OK
