"""What a new sandbox's first container does while the pod network is attached, and what a failure of either half undoes (pure).

A sandbox with a CNI network is created (its namespaces exist) before the
plugin chain's ADD runs in it. The first container to start is created
(`runc create`, its conmon waiting) meanwhile, and started only once ADD
succeeded: a container never runs before its pod's network is ready, as in
kubelet, where the sandbox is ready before any container is created.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from edgelet.plan import ContainerToStart


def beside_network(to_start: Sequence[ContainerToStart], image_at_hand: Mapping[str, bool]) -> ContainerToStart | None:
    """The container to create while the network is attached: the first one to start, if it is a new
    instance whose image is at hand (resolved, not failing); None: nothing is created before the network.

    Only the first: the others are created and started one by one after it, in the pod's order, as before.
    A first container whose image is missing reports that as before, after the sandbox."""
    if not to_start:
        return None
    first = to_start[0]
    if first.existing is not None or not image_at_hand.get(first.name, False):
        return None
    return first


@dataclass(frozen=True)
class OverlapOutcome:
    remove_container: bool  # the container created beside a failed ADD goes (runc state, conmon, rootfs, bundle)
    remove_sandbox: bool  # the sandbox never started: its network (DEL), namespaces and record go; the sync fails
    start: bool  # the created container is started, as any other just created


def overlap_outcome(network_ok: bool, created: bool) -> OverlapOutcome:
    """After both halves ended: `network_ok` (ADD and the sandbox's start succeeded), `created` (the
    container's create succeeded; False also when none was tried).

    A failed create after a good ADD is the container's own failure (CreateContainerError with its
    back-off, the sandbox kept), as when nothing overlapped. A failed ADD fails the sandbox whatever the
    create did: the created container goes first, then the sandbox, so no container ever outlives the
    record of the sandbox it was created in."""
    if network_ok:
        return OverlapOutcome(remove_container=False, remove_sandbox=False, start=created)
    return OverlapOutcome(remove_container=created, remove_sandbox=True, start=False)
