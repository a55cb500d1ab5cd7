"""Lifecycle hooks: run a postStart or preStop handler (exec, httpGet, sleep) as kubelet's HandlerRunner does.

kubelet lifecycle/handlers.go: an exec handler fails on a non-zero exit; an
httpGet handler fails only when the request cannot be made (the status code
is not checked); a sleep handler just waits. Failures carry kubelet's
message, which the caller puts in FailedPostStartHook / FailedPreStopHook.
How long a hook may take is the caller's business (preStop: the grace
budget); a hook cancelled on its deadline kills what it ran.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from edgelet.container.errors import ExecError
from edgelet.probes.errors import HookError, ProbeError
from edgelet.probes.probers import Executor, ProbeTarget, http_get

if TYPE_CHECKING:
    from edgelet.api.types import Container, LifecycleHandler, Pod


def _format_pod(pod: Pod) -> str:
    from edgelet.plan.actions import format_pod

    return format_pod(pod)


def _go_list(items: list[str]) -> str:
    return "[" + " ".join(items) + "]"


async def run_handler(
    handler: LifecycleHandler,
    *,
    runtime: Executor,
    target: ProbeTarget,
    pod: Pod,
    container: Container,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """Run one handler to completion; raises HookError with kubelet's message when it fails."""
    where = f"for Container {json.dumps(container.name)} in Pod {json.dumps(_format_pod(pod))}"
    if handler.exec is not None:
        command = list(handler.exec.command or [])
        try:
            done = await runtime.exec_sync(target.container_id, command, None)
        except ExecError as exc:
            raise HookError(
                f"Exec lifecycle hook ({_go_list(command)}) {where} failed - error: {exc}, message: {json.dumps('')}"
            ) from exc
        if done.returncode != 0:
            output = (done.stdout + done.stderr)[: 10 * 1024].decode(errors="replace")
            raise HookError(
                f"Exec lifecycle hook ({_go_list(command)}) {where} failed - error: command "
                f"'{' '.join(command)}' exited with {done.returncode}: {done.stderr.decode(errors='replace')}, "
                f"message: {json.dumps(output)}"
            )
        return
    if handler.http_get is not None:
        try:
            await http_get(handler.http_get, target, None)
        except (TimeoutError, ProbeError, OSError) as exc:  # OSError includes ssl.SSLError
            raise HookError(
                f"HTTP lifecycle hook ({handler.http_get.path or '/'}) {where} failed - error: {exc}"
            ) from exc
        return
    if handler.sleep is not None:
        await sleep(max(0, handler.sleep.seconds))
        return
    # kubelet keeps tcpSocket in LifecycleHandler only for compatibility and never runs it.
    raise HookError(f"Cannot run handler: invalid handler {where}")
