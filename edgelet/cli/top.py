"""`edgelet top [pods|containers]`: CPU and memory of the running pods, as `kubectl top pods` shows them.

The numbers come from the agent's Summary API (/stats/summary on the local
socket): CPU is the rate between two samples the agent took at least a
second apart (usageNanoCores), memory the working set, as metrics-server
reports them to kubectl.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any, TextIO

from edgelet.cli import common
from edgelet.cli.common import EXIT_FAILURE, EXIT_OK, format_table
from edgelet.settings import Settings

SECOND_SAMPLE_AFTER = 1.2  # seconds: the agent keeps a CPU sample as a rate's base once it is a second old


def format_cpu(nano_cores: int | None) -> str:
    """kubectl's CPU column: millicores (`12m`); `-` before a rate exists."""
    return "-" if nano_cores is None else f"{nano_cores // 1_000_000}m"


def format_memory(size: int | None) -> str:
    """kubectl's memory column: mebibytes (`34Mi`)."""
    return "-" if size is None else f"{size // (1024 * 1024)}Mi"


def _cpu(obj: dict[str, Any]) -> int | None:
    return (obj.get("cpu") or {}).get("usageNanoCores")


def _mem(obj: dict[str, Any]) -> int | None:
    return (obj.get("memory") or {}).get("workingSetBytes")


def has_rates(summary: dict[str, Any]) -> bool:
    return all(_cpu(p) is not None for p in summary.get("pods", []))


def pod_rows(summary: dict[str, Any], namespace: str | None = None) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = [("NAMESPACE", "NAME", "CPU(cores)", "MEMORY(bytes)")]
    pods = sorted(summary.get("pods", []), key=lambda p: (p["podRef"]["namespace"], p["podRef"]["name"]))
    for p in pods:
        ref = p["podRef"]
        if namespace is None or ref["namespace"] == namespace:
            rows.append((ref["namespace"], ref["name"], format_cpu(_cpu(p)), format_memory(_mem(p))))
    return rows


def container_rows(summary: dict[str, Any], namespace: str | None = None) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = [("NAMESPACE", "POD", "NAME", "CPU(cores)", "MEMORY(bytes)")]
    pods = sorted(summary.get("pods", []), key=lambda p: (p["podRef"]["namespace"], p["podRef"]["name"]))
    for p in pods:
        ref = p["podRef"]
        if namespace is not None and ref["namespace"] != namespace:
            continue
        for c in sorted(p.get("containers", []), key=lambda c: c["name"]):
            rows.append((ref["namespace"], ref["name"], c["name"], format_cpu(_cpu(c)), format_memory(_mem(c))))
    return rows


def fetch_summary(settings: Settings) -> dict[str, Any] | None:
    """The agent's Summary, sampled twice when its CPU rates are not there yet; None when no agent runs."""
    body = common.from_agent(settings, "/stats/summary")
    if body is None:
        return None
    summary = json.loads(body)
    if not has_rates(summary):
        asyncio.run(common.clock.sleep(SECOND_SAMPLE_AFTER))
        body = common.from_agent(settings, "/stats/summary")
        if body is None:
            return None
        summary = json.loads(body)
    return summary


def cmd_top(settings: Settings, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    summary = fetch_summary(settings)
    if summary is None:
        print("edgelet is not running (usage is measured by the running agent).", file=err)
        return EXIT_FAILURE
    rows = container_rows(summary, args.namespace) if args.what == "containers" else pod_rows(summary, args.namespace)
    if len(rows) == 1:
        print(
            "No pods running." if args.namespace is None else f"No pods running in namespace {args.namespace}.",
            file=out,
        )
        return EXIT_OK
    print(format_table(rows), file=out)
    return EXIT_OK
