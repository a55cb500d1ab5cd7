"""Keeping a Secret's values out of a container's bundle on disk: runc reads the whole spec from a copy in the
run dir (memory), and the bundle's config.json keeps it with those values redacted once the container exists."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from edgelet.api.configobjects import ConfigObjects
    from edgelet.api.types import Container, Pod

REDACTED = "<redacted: from a Secret>"
SPECS = "specs"  # under the run dir: the whole spec of a container that carries Secret values


def secret_values(pod: Pod, container: Container, objects: ConfigObjects) -> list[str]:
    """The values the container's env takes from Secrets (longest first, so a value inside another is not
    redacted out of it first)."""
    namespace = (pod.metadata.namespace if pod.metadata else None) or "default"
    values: set[str] = set()
    for var in container.env or []:
        ref = var.value_from.secret_key_ref if var.value_from is not None else None
        if ref is None:
            continue
        obj = objects.get("Secret", namespace, ref.name or "")
        if obj is not None and ref.key in obj.data:
            values.add(obj.data[ref.key].decode(errors="replace"))
    for env_from in container.env_from or []:
        if env_from.secret_ref is None:
            continue
        obj = objects.get("Secret", namespace, env_from.secret_ref.name or "")
        if obj is not None:
            values.update(v.decode(errors="replace") for v in obj.data.values())
    return sorted((v for v in values if v), key=len, reverse=True)


def redact(config: dict[str, Any], values: list[str]) -> dict[str, Any]:
    """`config` with every Secret value in the process's env and args replaced (a copy)."""
    out = copy.deepcopy(config)
    process = out.get("process") or {}

    def scrub(text: str) -> str:
        for value in values:
            text = text.replace(value, REDACTED)
        return text

    env = []
    for item in process.get("env") or []:
        name, sep, value = item.partition("=")
        env.append(name + sep + scrub(value))
    if "env" in process:
        process["env"] = env
    if "args" in process:
        process["args"] = [scrub(a) for a in process["args"]]
    return out


def spec_copy(run_dir: Path, cid: str) -> Path:
    return run_dir / SPECS / f"{cid}.json"


def write_spec_copy(run_dir: Path, cid: str, config: dict[str, Any]) -> Path:
    """The whole spec, 0600 from its creation, in the run dir (memory on a device, never the card)."""
    path = spec_copy(run_dir, cid)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(config, f, indent=1)
    os.replace(tmp, path)
    return path
