"""What CNI plugins answer: the pod's IPs from a 0.3.x/0.4.0/1.x result, and the error document (pure)."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any


def pod_ips(result: Mapping[str, Any]) -> tuple[str, ...]:
    """The addresses of the pod's interfaces, IPv4 first (kubelet takes the first as podIP)."""
    found = []
    for entry in result.get("ips") or []:
        addr = str(entry.get("address", "")).split("/")[0]
        try:
            found.append(ipaddress.ip_address(addr))
        except ValueError:
            continue
    found.sort(key=lambda a: a.version)
    return tuple(str(a) for a in found)


def error_of(output: bytes) -> tuple[int | None, str]:
    """(code, msg[: details]) of a CNI error document, or (None, the raw text)."""
    import json

    try:
        doc = json.loads(output or b"{}")
    except ValueError:
        return None, output.decode(errors="replace").strip()[-300:]
    if not isinstance(doc, dict):
        return None, str(doc)[-300:]
    msg = str(doc.get("msg", "")).strip()
    if doc.get("details"):
        msg += f": {doc['details']}"
    code = doc.get("code")
    return (code if isinstance(code, int) else None), msg or "no message"
