"""A pod's new sandbox and the work that overlaps its setup: images, bundles, and the first container's create.

Creating a sandbox takes long (its namespaces, then the CNI plugin chain's
ADD in them); what the containers need that does not depend on it is done
meanwhile, in named steps:

  1. `_prepare_ahead`: each new container's image and bundle (`prepare_container`), in the pod's order.
  2. `Runtime.create_sandbox`: the namespaces; a sandbox without a CNI network is running from here.
  3. `_attach_network`: `start_sandbox` (the CNI ADD), with the first container created beside it
     (`plan.overlap.beside_network` says which): created only, so it starts after the network is ready.
  4. `_settle_overlap`: a failed ADD removes that container, then the sandbox (`_roll_back`), and the
     sandbox's creation fails; `_abandon_overlap` does the same for a sync cancelled meanwhile.

The sync's container starts then `take` what was made for each container; `discard` undoes what no
start took (a sandbox that failed, a sync cut short), so nothing made ahead outlives the sync.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from edgelet.api.pod import log_name
from edgelet.api.pod import spec as pod_spec
from edgelet.images.manager import ImageUnavailable
from edgelet.plan.overlap import beside_network, overlap_outcome
from edgelet.util.crashpoint import crash_point
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.api.types import Container, Pod
    from edgelet.container import Runtime
    from edgelet.container.types import PreparedContainer, SandboxRecord
    from edgelet.images.types import ImageRecord
    from edgelet.plan import ContainerToStart

log = get_logger(__name__)

# The image of a container, resolved (pulled if its policy says so) the way its own start would: init or not.
ResolveImage = Callable[["Container", bool], Awaitable["ImageRecord"]]


@dataclass(frozen=True)
class HeadStart:
    """What a container got while its sandbox was set up; its start uses it instead of doing it again.

    `image`: resolved, or the reason it is unavailable (reported by the start as its own). `prepared`: its
    bundle and rootfs (create_container then owns them). `created`: the instance created beside the CNI
    ADD (its id), or that create's error.
    """

    image: ImageRecord | ImageUnavailable | None = None
    prepared: PreparedContainer | None = None
    created: str | Exception | None = None


NO_HEAD_START = HeadStart()


class SandboxStart:
    """One sync's creation of a pod sandbox and what overlaps it (the module docstring lists the steps)."""

    def __init__(
        self, runtime: Runtime, pod: Pod, to_start: Sequence[ContainerToStart], resolve_image: ResolveImage
    ) -> None:
        self._runtime = runtime
        self._pod = pod
        self._to_start = to_start
        self._resolve_image = resolve_image
        self._specs = {c.name: c for c in [*(pod_spec(pod).init_containers or []), *pod_spec(pod).containers]}
        # Made ahead, until a start takes it (or `discard` undoes it).
        self._images: dict[str, ImageRecord | ImageUnavailable] = {}
        self._prepared: dict[str, PreparedContainer] = {}
        self._created_beside_network: dict[str, str | Exception] = {}
        # Set once the first container's image and preparation are settled, whatever they gave: the create
        # beside the network waits for it.
        self._first_settled = asyncio.Event()

    async def create(self, attempt: int) -> SandboxRecord:
        """Steps 1 to 4: the sandbox, running, with what its containers need prepared beside it.

        A preparation that fails is left to the container's own create, which meets the error again and
        reports it as it always has. On a failure of the sandbox the preparations still finish (a pull that
        began stays useful) and `discard` undoes them; a cancelled sync cancels them.
        """
        preparing = asyncio.ensure_future(self._prepare_ahead())
        try:
            sandbox = await self._runtime.create_sandbox(self._pod, attempt)
            if sandbox.state != "running":  # created, its CNI network still to attach
                sandbox = await self._attach_network(sandbox)
        except asyncio.CancelledError:
            preparing.cancel()
            await asyncio.gather(preparing, return_exceptions=True)
            raise
        except BaseException:
            await asyncio.gather(preparing, return_exceptions=True)
            raise
        await preparing
        return sandbox

    def take(self, name: str) -> HeadStart:
        """What was made for container `name`, handed to its start (which then owns the bundle and instance)."""
        return HeadStart(
            image=self._images.get(name),
            prepared=self._prepared.pop(name, None),
            created=self._created_beside_network.pop(name, None),
        )

    async def discard(self) -> None:
        """Undo what no start took: bundles prepared for a sandbox that failed (or a sync cut short), and a
        container created beside the network that never started."""
        for prepared in self._prepared.values():
            await asyncio.shield(self._runtime.discard_prepared(prepared))
        for created in self._created_beside_network.values():
            if isinstance(created, str):
                await asyncio.shield(self._remove_quietly(created))

    # Step 1.

    async def _prepare_ahead(self) -> None:
        try:
            for item in self._to_start:
                await self._prepare_one(item)
                self._first_settled.set()
        finally:
            self._first_settled.set()

    async def _prepare_one(self, item: ContainerToStart) -> None:
        if item.existing is not None or item.name not in self._specs:
            return
        container = self._specs[item.name]
        try:
            image = await self._resolve_image(container, item.container_type != "regular")
        except ImageUnavailable as exc:
            self._images[item.name] = exc
            return
        self._images[item.name] = image
        try:
            self._prepared[item.name] = await self._runtime.prepare_container(
                self._pod, container, image, item.attempt, item.container_type
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning(
                "Preparing a container ahead of its sandbox failed",
                pod=log_name(self._pod),
                container=container.name,
                err=str(exc),
            )

    # Steps 3 and 4.

    async def _attach_network(self, sandbox: SandboxRecord) -> SandboxRecord:
        """start_sandbox (the CNI ADD) of a created sandbox, and the first container's `runc create` beside it;
        the sandbox as started, or the ADD's error once what the overlap made is undone."""
        network = asyncio.ensure_future(self._runtime.start_sandbox(self._pod, sandbox))
        first: ContainerToStart | None = None
        creating: asyncio.Future[str | Exception] | None = None
        try:
            first, creating = await self._create_first_beside(sandbox)
            await asyncio.shield(_both(network, creating))
        except asyncio.CancelledError:
            await self._abandon_overlap(sandbox, network, creating)
            raise
        return await self._settle_overlap(sandbox, network, first, creating)

    async def _create_first_beside(
        self,
        sandbox: SandboxRecord,
    ) -> tuple[ContainerToStart | None, asyncio.Future[str | Exception] | None]:
        """The first container's create, begun once its image is settled: only a new instance whose image is
        at hand (plan.overlap); None when there is none."""
        await self._first_settled.wait()
        at_hand = {name: not isinstance(image, ImageUnavailable) for name, image in self._images.items()}
        first = beside_network(self._to_start, at_hand)
        if first is None:
            return None, None
        image = self._images[first.name]
        assert not isinstance(image, ImageUnavailable)
        return first, asyncio.ensure_future(
            self._create_only(self._specs[first.name], sandbox, image, first, self._prepared.pop(first.name, None))
        )

    async def _settle_overlap(
        self,
        sandbox: SandboxRecord,
        network: asyncio.Future[SandboxRecord],
        first: ContainerToStart | None,
        creating: asyncio.Future[str | Exception] | None,
    ) -> SandboxRecord:
        """Both halves ended: plan.overlap says what stays. A failed ADD rolls both back and fails the sandbox;
        a failed create after a good ADD is the container's own failure, reported by its start."""
        failed = network.exception()
        made = creating.result() if creating is not None else None
        outcome = overlap_outcome(network_ok=failed is None, created=isinstance(made, str))
        if outcome.remove_sandbox:
            assert failed is not None
            await asyncio.shield(self._roll_back(sandbox, _created_id(creating)))
            raise failed
        if first is not None and made is not None:
            self._created_beside_network[first.name] = made
            if outcome.start:
                # The sandbox started and the container is created, not started: the next agent starts it.
                crash_point("sandbox.ready")
        return network.result()

    async def _abandon_overlap(
        self,
        sandbox: SandboxRecord,
        network: asyncio.Future[SandboxRecord],
        creating: asyncio.Future[str | Exception] | None,
    ) -> None:
        """A sync cancelled during the overlap (the agent stopping): both halves end (a create undoes itself
        when cancelled), then neither stays."""
        for task in (network, creating):
            if task is not None:
                task.cancel()
        await asyncio.shield(_both(network, creating))
        await asyncio.shield(self._roll_back(sandbox, _created_id(creating)))

    async def _roll_back(self, sandbox: SandboxRecord, created: str | None) -> None:
        """A sandbox that never started goes, the container created in it first (never a container without its
        sandbox's record); a removal that fails is logged, and what it left is found by the next sync."""
        if created is not None:
            await self._remove_quietly(created)
        await self._remove_quietly(sandbox.id)

    async def _create_only(
        self,
        container: Container,
        sandbox: SandboxRecord,
        image: ImageRecord,
        item: ContainerToStart,
        prepared: PreparedContainer | None,
    ) -> str | Exception:
        """`create_container` of `item`, its failure returned (reported with its back-off when it would have
        started, as a create failing then is)."""
        try:
            if prepared is not None:
                return await self._runtime.create_container(
                    self._pod, container, sandbox, image, item.attempt, item.container_type, prepared=prepared
                )
            return await self._runtime.create_container(
                self._pod, container, sandbox, image, item.attempt, item.container_type
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return exc

    async def _remove_quietly(self, cid: str) -> None:
        try:
            await self._runtime.remove_container(cid)
        except Exception as exc:
            log.warning(
                "Removing what a failed pod start created failed", pod=log_name(self._pod), id=cid[:12], err=str(exc)
            )


def _both(
    network: asyncio.Future[SandboxRecord], creating: asyncio.Future[str | Exception] | None
) -> asyncio.Future[list[object]]:
    """Both halves of the overlap, waited for together; their failures are read from each afterwards."""
    return asyncio.gather(network, *([creating] if creating else []), return_exceptions=True)


def _created_id(creating: asyncio.Future[str | Exception] | None) -> str | None:
    """The id a finished `_create_only` created; None when it failed, was cancelled or never ran."""
    if creating is None or not creating.done() or creating.cancelled() or creating.exception() is not None:
        return None
    made = creating.result()
    return made if isinstance(made, str) else None
