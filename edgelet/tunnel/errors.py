"""The tunnel package's errors.

EdgeletError
└── TunnelError             the WireGuard tunnel cannot be configured or brought up
    ├── TunnelConfigError   the config file is unreadable, readable by others, or wrong (file, line, reason)
    ├── DeviceError         the interface cannot be created or configured (interface, what failed)
    └── NetlinkError        the kernel refused a generic netlink request (its errno); DeviceError wraps it
"""

from __future__ import annotations

from edgelet.errors import EdgeletError


class TunnelError(EdgeletError):
    pass


class TunnelConfigError(TunnelError):
    def __init__(self, path: str, reason: str, line: int | None = None) -> None:
        where = path if line is None else f"{path}:{line}"
        super().__init__(f"WireGuard config {where}: {reason}")
        self.path = path
        self.line = line
        self.reason = reason


class DeviceError(TunnelError):
    def __init__(self, interface: str, reason: str) -> None:
        # "" when a command failed before anyone knew for which interface (device.run).
        super().__init__(f"WireGuard interface {interface}: {reason}" if interface else f"WireGuard: {reason}")
        self.interface = interface
        self.reason = reason


class NetlinkError(TunnelError):
    """The kernel answered a netlink request with an errno (ENOENT: no such family; ENODEV: no such device)."""

    def __init__(self, code: int) -> None:
        import os

        super().__init__(f"netlink: {os.strerror(code)} (errno {code})")
        self.errno = code
