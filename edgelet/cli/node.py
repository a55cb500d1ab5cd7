"""`edgelet node`: the running agent's apiserver link."""

from __future__ import annotations

import argparse
from typing import TextIO

from edgelet.cli import common
from edgelet.cli.common import EXIT_FAILURE, EXIT_OK, CommandError, format_age, format_time
from edgelet.settings import Settings


def cmd_node(settings: Settings, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """The apiserver link of the running agent: registration, last lease renewal, link state, queue depth."""
    import json

    try:
        body = common.from_agent(settings, "/node")
    except CommandError as exc:
        if "404" in str(exc) or "no apiserver" in str(exc):
            print("This agent reports to no apiserver (start it with --kubeconfig).", file=out)
            return EXIT_OK
        raise
    if body is None:
        print("edgelet is not running (the apiserver link exists only while it runs).", file=err)
        return EXIT_FAILURE
    state = json.loads(body)
    if args.output == "json":
        print(json.dumps(state, indent=2), file=out)
        return EXIT_OK
    now = common.clock.now()

    def ago(ts: float | None) -> str:
        return "never" if ts is None else f"{format_age(now - ts)} ago ({format_time(ts)})"

    link = state["link"] + (f" ({state['last_error']})" if state.get("last_error") else "")
    rows = [("Node:", state["node"]), ("Server:", state["server"]),
            ("Registered:", f"yes (uid {state['node_uid']})" if state["registered"] else "no"),
            ("Link:", link), ("Last lease renewal:", ago(state.get("last_lease_renewal"))),
            ("Last node status:", ago(state.get("last_status_update"))),
            ("Last full resync:", ago(state.get("last_resync")) + f", {state['resyncs']} in all"),
            ("Mirror pods:", str(state["mirror_pods"])), ("Queue depth:", str(state["queue_depth"])),
            ("Requests sent:", str(state["requests"]))]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k.ljust(width)} {v}", file=out)
    return EXIT_OK
