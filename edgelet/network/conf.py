"""The network configuration: the first conflist in lexical order in the conf dir, validated, as kubelet/containerd.

Pure but for `load`, which reads the directory.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgelet.network.errors import ConfigError

SUPPORTED_VERSIONS = ("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
EXTENSIONS = (".conflist", ".conf", ".json")


@dataclass(frozen=True)
class NetworkConfig:
    name: str
    cni_version: str
    plugins: tuple[Mapping[str, Any], ...]
    path: str
    raw: Mapping[str, Any]

    def plugin_types(self) -> list[str]:
        return [str(p["type"]) for p in self.plugins]


def parse(text: str, path: str) -> NetworkConfig:
    """A conflist, or a single-plugin .conf wrapped into one (libcni's ConfListFromConf)."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ConfigError(path, f"not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise ConfigError(path, "not a JSON object")
    if "plugins" not in doc and "type" in doc:
        doc = {"cniVersion": doc.get("cniVersion", "0.4.0"), "name": doc.get("name", ""), "plugins": [doc]}
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(path, "no network name")
    version = doc.get("cniVersion")
    if version not in SUPPORTED_VERSIONS:
        raise ConfigError(path, f"cniVersion {version!r} is not one of {', '.join(SUPPORTED_VERSIONS)}")
    plugins = doc.get("plugins")
    if not isinstance(plugins, list) or not plugins:
        raise ConfigError(path, "no plugins")
    for i, p in enumerate(plugins):
        if not isinstance(p, dict) or not isinstance(p.get("type"), str) or not p["type"]:
            raise ConfigError(path, f"plugins[{i}] has no type")
        if "/" in p["type"] or p["type"] in (".", ".."):
            raise ConfigError(path, f"plugins[{i}]: type {p['type']!r} is not a plugin name")
    return NetworkConfig(name, version, tuple(plugins), path, doc)


def find(conf_dir: Path) -> Path | None:
    """The first config file in lexical order, as kubelet and containerd take it."""
    try:
        names = sorted(n for n in os.listdir(conf_dir) if n.endswith(EXTENSIONS) and not n.startswith("."))
    except OSError:
        return None
    return conf_dir / names[0] if names else None


def load(conf_dir: Path) -> NetworkConfig | None:
    """The network config of `conf_dir`; None when there is none; ConfigError when it is broken."""
    path = find(conf_dir)
    if path is None:
        return None
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(str(path), exc.strerror or str(exc)) from exc
    return parse(text, str(path))


def find_plugin(plugin: str, bin_dirs: Sequence[str]) -> str | None:
    for d in bin_dirs:
        candidate = os.path.join(d, plugin)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def plugin_stdin(
    config: NetworkConfig,
    plugin: Mapping[str, Any],
    prev_result: Mapping[str, Any] | None,
    runtime_config: Mapping[str, Any],
) -> bytes:
    """One plugin's stdin: its own section with the network's name and version, the previous plugin's
    result, and the runtimeConfig entries of the capabilities it declares (libcni's buildOneConfig)."""
    doc = dict(plugin)
    doc["name"] = config.name
    doc["cniVersion"] = config.cni_version
    if prev_result is not None:
        doc["prevResult"] = prev_result
    caps = plugin.get("capabilities") or {}
    wanted = {k: v for k, v in runtime_config.items() if caps.get(k)}
    if wanted:
        doc["runtimeConfig"] = wanted
    return json.dumps(doc).encode()
