"""kubelet's /healthz rules as a pure function: the sync loop iterates and PLEG relisted recently.

kubelet (pkg/kubelet) registers two checks besides ping: `syncloop`
(fails before the first iteration, or when the last one began more than
max(2 x resync interval, 5 min) ago) and `pleg` (fails before the first
relist, or when the last one is older than 3 min, `relistThreshold`).
"""

from __future__ import annotations

from dataclasses import dataclass

SYNC_LOOP_THRESHOLD = 5 * 60.0
PLEG_THRESHOLD = 3 * 60.0


@dataclass(frozen=True)
class HealthCheck:
    name: str
    error: str | None = None  # None: healthy

    @property
    def ok(self) -> bool:
        return self.error is None


def _ago(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


def check_health(
    now: float,
    last_sync_iteration: float | None,
    last_relist: float | None,
    *,
    sync_threshold: float = SYNC_LOOP_THRESHOLD,
    pleg_threshold: float = PLEG_THRESHOLD,
) -> list[HealthCheck]:
    """Every check with its verdict; times are monotonic seconds, None when it never happened."""
    checks = [HealthCheck("ping")]
    if last_sync_iteration is None:
        checks.append(HealthCheck("syncloop", "sync loop not started yet"))
    elif now - last_sync_iteration > sync_threshold:
        checks.append(
            HealthCheck(
                "syncloop",
                f"sync loop took longer than expected (last iteration "
                f"{_ago(now - last_sync_iteration)} ago; threshold is "
                f"{_ago(sync_threshold)})",
            )
        )
    else:
        checks.append(HealthCheck("syncloop"))
    if last_relist is None:
        checks.append(HealthCheck("pleg", "pleg has yet to be successful"))
    elif now - last_relist > pleg_threshold:
        checks.append(
            HealthCheck(
                "pleg", f"pleg was last seen active {_ago(now - last_relist)} ago; threshold is {_ago(pleg_threshold)}"
            )
        )
    else:
        checks.append(HealthCheck("pleg"))
    return checks


def render_health(checks: list[HealthCheck], *, verbose: bool = False) -> tuple[int, bytes]:
    """The status code and body: "ok" when healthy; otherwise the apiserver's list format with the reasons.

    kubelet withholds the reasons from the body (it listens on TCP); edgelet
    states them since the details say nothing about the pods.
    """
    healthy = all(c.ok for c in checks)
    if healthy and not verbose:
        return 200, b"ok"
    lines = [f"[+]{c.name} ok" if c.ok else f"[-]{c.name} failed: {c.error}" for c in checks]
    lines.append("healthz check passed" if healthy else "healthz check failed")
    return (200 if healthy else 500), ("\n".join(lines) + "\n").encode()
