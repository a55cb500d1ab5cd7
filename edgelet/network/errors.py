"""The network package's errors.

EdgeletError
└── NetworkError            the pod network cannot be set up or torn down
    ├── ConfigError         the conflist is missing, unreadable or invalid (file, reason)
    └── PluginError         a plugin failed (plugin, command, CNI error code and message, stderr tail)
"""

from __future__ import annotations

from edgelet.errors import EdgeletError


class NetworkError(EdgeletError):
    pass


class ConfigError(NetworkError):
    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"CNI config {path}: {reason}")
        self.path = path
        self.reason = reason


class PluginError(NetworkError):
    def __init__(self, plugin: str, command: str, message: str, code: int | None = None, stderr: str = "") -> None:
        text = f"CNI plugin {plugin} {command} failed: {message}"
        if code is not None:
            text += f" (code {code})"
        if stderr:
            text += f"; stderr: {stderr[-300:]}"
        super().__init__(text)
        self.plugin = plugin
        self.command = command
        self.code = code
