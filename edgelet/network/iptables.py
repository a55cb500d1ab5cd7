"""Removes the iptables rules plugins tagged with a container id, for a DEL that came after its namespace was gone.

The bridge plugin finds the addresses whose masquerade rules it must delete
inside the pod's network namespace; after a power cut, or any loss of the
namespace file, DEL cannot enter it and the rules (commented
`id: "<container id>"`) would stay forever. Only rules carrying that exact
comment and the chains they jump to are touched.
"""

from __future__ import annotations

import re
import shlex

from edgelet.util import proc
from edgelet.util.log import get_logger

log = get_logger(__name__)

_TABLES = ("nat", "filter")


def stale_rules(save_output: str, container_id: str, *, key: str = "id") -> tuple[list[str], list[str]]:
    """(`-D ...` argument strings for the tagged rules, chains only those rules used), from `iptables-save -t T`.

    `key` "name" matches a network's name instead of a container id (tests clean their network so).
    """
    tag = f'{key}: \\"{container_id}\\"'
    tag_plain = f'{key}: "{container_id}"'
    rules, chains = [], []
    for line in save_output.splitlines():
        if not line.startswith("-A ") or (tag not in line and tag_plain not in line):
            continue
        rules.append(line[3:])
        m = re.search(r" -j (CNI-[A-Za-z0-9_-]+)", line)
        if m and m.group(1) not in chains:
            chains.append(m.group(1))
        owner = line.split()[1]
        if owner.startswith("CNI-") and owner not in chains and not owner.startswith("CNI-HOSTPORT"):
            chains.append(owner)
    return rules, chains


async def _run(*argv: str) -> tuple[int, str]:
    try:
        p = await proc.spawn(list(argv))
    except OSError as exc:
        return 127, str(exc)
    out, err = await p.communicate()
    return p.returncode or 0, (out or err).decode(errors="replace")


async def remove_tagged(container_id: str, *, key: str = "id") -> int:
    """Delete the rules tagged with `container_id` (or, with key "name", a network's name) and their chains."""
    removed = 0
    for table in _TABLES:
        code, out = await _run("iptables-save", "-t", table)
        if code != 0:
            return removed
        rules, chains = stale_rules(out, container_id, key=key)
        for rule in rules:
            # iptables-save quotes the comment; shlex splits it back into the arguments -D wants.
            code, _ = await _run("iptables", "-t", table, "-D", *shlex.split(rule))
            removed += code == 0
        for chain in chains:
            await _run("iptables", "-t", table, "-F", chain)
            await _run("iptables", "-t", table, "-X", chain)
    if removed:
        log.info(
            "Removed iptables rules of a sandbox whose namespace was gone", sandbox=container_id[:12], rules=removed
        )
    return removed
