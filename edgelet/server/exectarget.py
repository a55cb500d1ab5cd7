"""Which container a request to run in names (`edgelet exec`, kubectl exec and attach): the pod by its short
name, the container (defaulted as kubectl does), and its runtime id when it runs.

The session itself is `edgelet.streaming`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

from edgelet.server.routes import HttpError
from edgelet.status.compute import CONTAINER_ID_SCHEME

if TYPE_CHECKING:
    from edgelet.api.types import ContainerStatus, PodStatus


E = TypeVar("E")


def pick_pod(pods: Sequence[tuple[str, str, E]], name: str, namespace: str | None, node: str) -> E:
    """The pod a user means among (namespace, name, item): `name` or `name-<node>` (a static pod's short
    name), in `namespace` or, when none is given, the only namespace that has it; HttpError otherwise."""
    wanted = {name, f"{name}-{node}"}
    found = [(ns, item) for ns, n, item in pods if n in wanted and (namespace is None or ns == namespace)]
    if not found:
        raise HttpError(404, f'pods "{name}" not found')
    if len(found) > 1:
        spaces = ", ".join(sorted(ns for ns, _ in found))
        raise HttpError(409, f'pods "{name}" exist in several namespaces ({spaces}): name one with -n')
    return found[0][1]


def pick_container(names: Sequence[str], requested: str | None, pod: str) -> tuple[str, str | None]:
    """The container to run in, and a note when one was chosen for the user (kubectl defaults to the first)."""
    if requested is not None:
        if requested not in names:
            raise HttpError(404, f"container {requested!r} not found in pod {pod} (it has: {', '.join(names)})")
        return requested, None
    if not names:
        raise HttpError(404, f"pod {pod} has no containers")
    if len(names) == 1:
        return names[0], None
    return names[0], f'Defaulted container "{names[0]}" out of: {", ".join(names)}'


def running_container_id(status: PodStatus, container: str, pod: str) -> str:
    """The runtime id of `container` when its status says it runs; HttpError 409 naming pod and container
    (and what it does instead) when it does not."""
    statuses: list[ContainerStatus] = [*(status.init_container_statuses or []), *(status.container_statuses or [])]
    for cs in statuses:
        if cs.name != container:
            continue
        state = cs.state
        if state is not None and state.running is not None and cs.container_id:
            return cs.container_id.removeprefix(CONTAINER_ID_SCHEME)
        if state is not None and state.waiting is not None:
            why = f"waiting: {state.waiting.reason or 'unknown'}"
        elif state is not None and state.terminated is not None:
            why = f"terminated: {state.terminated.reason or 'exit code ' + str(state.terminated.exit_code)}"
        else:
            why = "not started"
        raise HttpError(409, f"container {container!r} in pod {pod} is not running ({why})")
    raise HttpError(409, f"container {container!r} in pod {pod} is not running (no status yet)")
