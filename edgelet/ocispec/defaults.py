"""The default pieces of a container's OCI config: capabilities, mounts, masked paths, device rules.

Taken from containerd (oci/spec.go populateDefaultUnixSpec and oci/mounts.go,
plus the CRI plugin's /sys/fs/cgroup mount) and runc's allowed device list,
so a pod behaves here as it does under containerd.
"""

from __future__ import annotations

from typing import Any

OCI_VERSION = "1.0.2-dev"  # what runc 1.1.5 reports as its spec version

DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# containerd's defaultUnixCaps (the same set Docker gives).
DEFAULT_CAPABILITIES: tuple[str, ...] = (
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
)

# Every capability Linux 5.9+ defines, in number order (0..40).
ALL_CAPABILITIES: tuple[str, ...] = (
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
)

# containerd's populateDefaultUnixSpec list, plus /sys/devices/virtual/powercap
# which kubelet and moby mask since the RAPL power side channel
# (CVE-2020-8694); containerd 1.7's default list predates it.
MASKED_PATHS: tuple[str, ...] = (
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
    "/proc/scsi",
)

READONLY_PATHS: tuple[str, ...] = (
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
)


def default_mounts(*, privileged: bool = False, cgroup_mount: bool = True) -> list[dict[str, Any]]:
    """containerd's default mounts without /run (the CRI plugin drops it), with the CRI /sys/fs/cgroup mount.

    Privileged containers get /sys and /sys/fs/cgroup read-write, as
    containerd's WithPrivileged does.
    """
    ro = [] if privileged else ["ro"]
    mounts = [
        {"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"]},
        {
            "destination": "/dev",
            "type": "tmpfs",
            "source": "tmpfs",
            "options": ["nosuid", "strictatime", "mode=755", "size=65536k"],
        },
        {
            "destination": "/dev/pts",
            "type": "devpts",
            "source": "devpts",
            "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"],
        },
        {
            "destination": "/dev/shm",
            "type": "tmpfs",
            "source": "shm",
            "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
        },
        {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]},
        {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", *ro]},
    ]
    if cgroup_mount:
        mounts.append(
            {
                "destination": "/sys/fs/cgroup",
                "type": "cgroup",
                "source": "cgroup",
                "options": ["nosuid", "noexec", "nodev", "relatime", *(["rw"] if privileged else ["ro"])],
            }
        )
    return mounts


def _allow(kind: str, major: int | None, minor: int | None, access: str = "rwm") -> dict[str, Any]:
    rule: dict[str, Any] = {"allow": True, "type": kind, "access": access}
    if major is not None:
        rule["major"] = major
    if minor is not None:
        rule["minor"] = minor
    return rule


def default_device_rules() -> list[dict[str, Any]]:
    """Deny every device, then allow mknod and the standard char devices (runc's AllowedDevices)."""
    return [
        {"allow": False, "access": "rwm"},
        _allow("c", None, None, "m"),
        _allow("b", None, None, "m"),
        _allow("c", 1, 3),  # /dev/null
        _allow("c", 1, 8),  # /dev/random
        _allow("c", 1, 7),  # /dev/full
        _allow("c", 5, 0),  # /dev/tty
        _allow("c", 1, 5),  # /dev/zero
        _allow("c", 1, 9),  # /dev/urandom
        _allow("c", 5, 1),  # /dev/console
        _allow("c", 136, None),  # /dev/pts/*
        _allow("c", 5, 2),  # /dev/ptmx
    ]


def privileged_device_rules() -> list[dict[str, Any]]:
    return [{"allow": True, "access": "rwm"}]
