"""Runtime handlers: the OCI runtimes (runc, crun) a pod may run under, chosen by its runtimeClassName.

A handler is an OCI runtime command line with its own state root. The
configuration names them (`[runtime_handlers]`), the runc and crun found on
PATH are there by default, and `runtime_handler` names the one a pod without
runtimeClassName gets. Static pods have no RuntimeClass objects: the class
name is the handler's name. The handler a sandbox was made with is written
in its record (and each container's), so an agent restarted with another
default keeps every pod on the runtime it runs under.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgelet.cgroups.controllers import Admission
from edgelet.container.errors import RuntimeError_
from edgelet.runtime import _exec
from edgelet.runtime.runc import Runc

if TYPE_CHECKING:
    from edgelet.api.types import Pod
    from edgelet.runtime.layout import RuntimePaths

DEFAULT_HANDLER = "runc"
# Found on PATH when not configured: runc (the `runtime` setting names its binary) and crun.
BUILTIN = ("runc", "crun")
REASON_NOT_FOUND = "RuntimeClassNotFound"  # kubelet's event when a pod's RuntimeClass does not exist
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-.")
_OPTIONS = frozenset({"path", "root", "systemd_cgroup"})


class HandlerError(RuntimeError_):
    """A runtime handler is misconfigured or missing; names the handler and the fix."""


@dataclass(frozen=True)
class HandlerConfig:
    """One configured handler: its binary, and optionally its state root (default: under --run-dir)."""

    path: str
    root: Path | None = None
    systemd_cgroup: bool = False


def _handler(name: str, raw: Any) -> HandlerConfig:
    if isinstance(raw, str):
        raw = {"path": raw}
    if not isinstance(raw, Mapping):
        raise ValueError(f"handler {name!r}: expected a path or a table with path, root, systemd_cgroup")
    unknown = sorted(set(raw) - _OPTIONS)
    if unknown:
        raise ValueError(
            f"handler {name!r}: unknown option(s) {', '.join(unknown)} (known: path, root, systemd_cgroup)"
        )
    path, root, systemd = raw.get("path"), raw.get("root"), raw.get("systemd_cgroup", False)
    if not isinstance(path, str) or not path.strip():
        raise ValueError(f"handler {name!r}: path must be a non-empty string")
    if root is not None and (not isinstance(root, str) or not root.startswith("/")):
        raise ValueError(f"handler {name!r}: root must be an absolute path, got {root!r}")
    if not isinstance(systemd, bool):
        raise ValueError(f"handler {name!r}: systemd_cgroup must be true or false, got {systemd!r}")
    if systemd:
        # Pod cgroups are cgroupfs paths under --cgroup-root; systemd's slice:prefix:name form is another layout.
        raise ValueError(
            f"handler {name!r}: systemd_cgroup = true is not supported: edgelet lays pod cgroups out itself "
            "(cgroupfs, under cgroup_root); drop the option"
        )
    return HandlerConfig(path.strip(), Path(root) if root else None, systemd)


def check_name(name: str) -> str:
    """A handler name: what runtimeClassName may hold (a DNS-1123 label's characters)."""
    if not name or len(name) > 63 or not set(name) <= _NAME_CHARS or name[0] in "-." or name[-1] in "-.":
        raise ValueError(
            f"handler name {name!r}: expected lower-case letters, digits, '-' or '.' (a RuntimeClass name)"
        )
    return name


def parse_handlers(raw: Any, from_toml: bool) -> tuple[tuple[str, HandlerConfig], ...]:
    """`[runtime_handlers]`: name = path, or name = {path, root, systemd_cgroup}; from env or a flag, `name=path`
    pairs, comma-separated, or the same table as JSON."""
    if isinstance(raw, (list, tuple)) and not from_toml:  # a repeated flag: every pair counts
        raw = ",".join(str(item) for item in raw)
    if isinstance(raw, str) and not from_toml:
        text = raw.strip()
        if text.startswith("{"):
            try:
                raw = json.loads(text)
            except ValueError as exc:
                raise ValueError(f"expected a JSON object of handlers: {exc}") from None
        else:
            pairs: dict[str, Any] = {}
            for part in (p.strip() for p in text.split(",")):
                if not part:
                    continue
                name, sep, path = part.partition("=")
                if not sep or not path.strip():
                    raise ValueError(f"malformed handler {part!r}, expected name=path such as crun=/usr/bin/crun")
                pairs[name.strip()] = path.strip()
            raw = pairs
    if not isinstance(raw, Mapping):
        raise ValueError(f"expected a table of handlers (name = path), got {raw!r}")
    return tuple(sorted((check_name(str(name)), _handler(str(name), value)) for name, value in raw.items()))


def resolve_handlers(
    configured: Iterable[tuple[str, HandlerConfig]], runc_binary: str = "runc", *, which: Any = shutil.which
) -> dict[str, HandlerConfig]:
    """The handlers this agent has: runc (from `runc_binary`, the `runtime` setting) and crun where found on
    PATH, then the configured ones (which replace a built-in of the same name)."""
    found: dict[str, HandlerConfig] = {}
    for name, binary in (("runc", runc_binary), ("crun", "crun")):
        path = which(binary)
        if path:
            found[name] = HandlerConfig(path)
    if "runc" not in found:
        found["runc"] = HandlerConfig(runc_binary)  # reported missing where it is used, as before
    found.update(dict(configured))
    return found


def pod_handler(pod: Pod, default: str) -> str:
    """The handler a new sandbox of `pod` gets: its runtimeClassName, else the default."""
    name = pod.spec.runtime_class_name if pod.spec is not None else None
    return name or default


def admit_handler(pod: Pod, names: Iterable[str], default: str) -> Admission | None:
    """None when the pod's handler is one of `names`; else a refusal naming them (kubelet: a missing
    RuntimeClass fails the pod's sandbox with RuntimeClassNotFound)."""
    name = pod_handler(pod, default)
    known = sorted(names)
    if name in known:
        return None
    return Admission(
        True,
        (),
        REASON_NOT_FOUND,
        f"runtimeClassName {name!r}: no such runtime handler on this node (static pods have no RuntimeClass "
        f"objects: the name is the handler's); this node's handlers are {', '.join(known)}",
    )


def parse_features(stdout: str | bytes) -> dict[str, Any] | None:
    """`<runtime> features` (OCI runtime-features JSON); None when the runtime has no such command (crun
    1.8 prints nothing usable) or the output is not a JSON object."""
    try:
        data = json.loads(stdout or b"null")
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def features_summary(features: Mapping[str, Any] | None) -> str:
    """One line of what `features` says matters here: the OCI versions, seccomp notify, cgroup v1/v2/systemd."""
    if features is None:
        return "features unknown (the runtime has no `features` command)"
    parts = [f"OCI {features.get('ociVersionMin', '?')}..{features.get('ociVersionMax', '?')}"]
    linux = features.get("linux") or {}
    cgroup = linux.get("cgroup") or {}
    if cgroup:
        kinds = [k for k in ("v1", "v2", "systemd") if cgroup.get(k)]
        parts.append("cgroup " + ("/".join(kinds) or "none"))
    seccomp = linux.get("seccomp") or {}
    if seccomp:
        notify = "SCMP_ACT_NOTIFY" in (seccomp.get("actions") or [])
        parts.append(f"seccomp{' (notify)' if notify else ''}" if seccomp.get("enabled") else "no seccomp")
    return ", ".join(parts)


class RuntimeHandlers:
    """The agent's handlers by name, each a `Runc` on its own root; `default` serves pods without
    runtimeClassName."""

    def __init__(
        self,
        configs: Mapping[str, HandlerConfig],
        default: str,
        paths: RuntimePaths,
        *,
        runner: _exec.Runner = _exec.run,
        which: Any = shutil.which,
    ) -> None:
        if default not in configs:
            raise HandlerError(
                f"runtime_handler {default!r}: no such runtime handler (this node's: {', '.join(sorted(configs))});"
                f" install it or name it in [runtime_handlers]"
            )
        self.default = default
        self.configs = dict(configs)
        # conmon execs the runtime by path, without a PATH search.
        self.runcs: dict[str, Runc] = {
            name: Runc(which(cfg.path) or cfg.path, cfg.root or paths.handler_root(name), runner=runner, name=name)
            for name, cfg in sorted(configs.items())
        }

    @property
    def names(self) -> list[str]:
        return sorted(self.runcs)

    def get(self, name: str) -> Runc:
        """The handler `name` ("" is a record written before handlers existed: runc's); HandlerError when this
        agent has no such handler (removed from the configuration while its pods ran)."""
        runc = self.runcs.get(name or DEFAULT_HANDLER)
        if runc is None:
            raise HandlerError(
                f"runtime handler {name!r} is not configured any more (this node's: {', '.join(self.names)}):"
                " its containers cannot be reached until it is configured again"
            )
        return runc

    def for_pod(self, pod: Pod) -> Runc:
        return self.get(pod_handler(pod, self.default))

    def all(self) -> list[Runc]:
        return [self.runcs[name] for name in self.names]
