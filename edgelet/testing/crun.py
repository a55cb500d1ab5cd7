"""Makes this machine's cgroups usable by crun for the tests that run it (see edgelet.cgroups.hybrid)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from edgelet.cgroups.hybrid import CGROUP_MOUNT, unified_controllers


def crun_skip_reason(mount: Path = CGROUP_MOUNT) -> str | None:
    """None when crun can run containers here, after moving what the hybrid layout's cgroup2 mount holds to v1
    hierarchies (idempotent: a controller mounted already is not in the cgroup2 tree any more)."""
    if shutil.which("crun") is None:
        return "needs crun on PATH (make test installs it)"
    for name in unified_controllers(mount):
        target = mount / name
        target.mkdir(exist_ok=True)
        done = subprocess.run(["mount", "-t", "cgroup", "-o", name, "cgroup", str(target)], capture_output=True)
        if done.returncode != 0:
            return f"crun refuses hybrid cgroups and mounting {name} failed: {done.stderr.decode().strip()}"
    held = unified_controllers(mount)
    return f"crun refuses hybrid cgroups: {mount}/unified still holds {', '.join(held)}" if held else None
