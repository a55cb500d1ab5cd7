"""The image a container runs: imagePullPolicy, pulls with per-pod back-off, and the kubelet's image events.

kubelet's imageManager.EnsureImageExists, step for step:

  - the policy defaults to Always for `:latest` or no tag, else IfNotPresent;
  - Never: the local image or ErrImageNeverPull;
  - IfNotPresent with the image present: "Container image ... already present on machine";
  - otherwise, within the back-off of an earlier failure: ImagePullBackOff ("Back-off pulling image");
  - else Pulling, then Pulled or Failed + ErrImagePull and a back-off step (10 s doubling to 300 s).

The back-off key is (pod uid, "image:" + container name), in the Syncer's Backoff, so the
pod's worker wakes when it ends; kubelet keys by pod uid + image, which names the same thing
for one container spec. A pull is awaited in the pod's own worker, so a slow or failing
pull holds back only that pod; concurrent pulls of one image share a single download.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

from edgelet.api.pod import meta
from edgelet.api.pod import uid as pod_uid
from edgelet.events import EventRecorder, pod_ref
from edgelet.images.errors import ImageError, ImageUnavailable
from edgelet.images.reference import is_latest_or_untagged
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.api.types import Container, Pod
    from edgelet.images.store import ImageStore
    from edgelet.images.types import ImageRecord
    from edgelet.util.backoff import Backoff
    from edgelet.util.clock import Clock

log = get_logger(__name__)


class Pulls(Protocol):
    async def pull(self, ref: str) -> ImageRecord: ...


def effective_pull_policy(container: Container) -> str:
    """The container's imagePullPolicy, or kubelet's default for its image (pure)."""
    if container.image_pull_policy:
        return container.image_pull_policy
    return "Always" if is_latest_or_untagged(container.image or "") else "IfNotPresent"


def should_pull(policy: str, present: bool) -> bool:
    """kubelet's shouldPullImage (pure)."""
    if policy == "Never":
        return False
    return policy == "Always" or not present


class ImageManager:
    """Answers `ensure(pod, container)` for the Syncer; `get` is the store's, for lookups such as STOPSIGNAL."""

    def __init__(
        self, store: ImageStore, puller: Pulls | None, *, events: EventRecorder, backoff: Backoff, clock: Clock
    ) -> None:
        self.store = store
        self.puller = puller
        self._events = events
        self._backoff = backoff
        self._clock = clock

    def get(self, ref: str) -> ImageRecord | None:
        return self.store.get(ref)

    async def ensure(self, pod: Pod, container: Container, *, init: bool = False) -> ImageRecord:
        """The image record to run `container` with; ImageUnavailable(reason, message) when there is none now."""
        image = container.image or ""
        ref = pod_ref(pod, container.name, init=init)
        policy = effective_pull_policy(container)
        present = await asyncio.to_thread(self.store.get, image)
        if not should_pull(policy, present is not None):
            if present is not None:
                self._events.normal(ref, "Pulled", f'Container image "{image}" already present on machine')
                await self._used(present)
                return present
            msg = f'Container image "{image}" is not present with pull policy of Never'
            self._events.warning(ref, "ErrImageNeverPull", msg)
            raise ImageUnavailable("ErrImageNeverPull", msg)

        key = (pod_uid(pod), "image:" + container.name)
        now = self._clock.monotonic()
        if self._backoff.is_in_backoff(key, now):
            msg = f'Back-off pulling image "{image}"'
            self._events.normal(ref, "BackOff", msg)
            raise ImageUnavailable("ImagePullBackOff", msg)

        self._events.normal(ref, "Pulling", f'Pulling image "{image}"')
        started = self._clock.monotonic()
        try:
            if self.puller is None:
                raise ImageError(
                    "registry pulls are not configured; import the image with `edgelet images "
                    "import` or the import directory"
                )
            record = await self.puller.pull(image)
        except asyncio.CancelledError:
            raise
        except (ImageError, OSError) as exc:
            self._backoff.next(key, self._clock.monotonic())
            msg = f'Failed to pull image "{image}": {exc}'
            log.warning(
                "Failed to pull image",
                pod=f"{meta(pod).namespace}/{meta(pod).name}",
                container=container.name,
                image=image,
                err=str(exc),
            )
            self._events.warning(ref, "Failed", msg)
            self._events.warning(ref, "Failed", "Error: ErrImagePull")
            raise ImageUnavailable("ErrImagePull", msg) from exc
        self._backoff.reset(key)
        took = self._clock.monotonic() - started
        self._events.normal(
            ref,
            "Pulled",
            f'Successfully pulled image "{image}" in {took:.3g}s '
            f"({took:.3g}s including waiting). Image size: {record.size} bytes.",
        )
        await self._used(record)
        return record

    async def _used(self, record: ImageRecord) -> None:
        """Stamp the image's last use (a container is about to be created from it) for image GC and
        `edgelet images`; a failure to record it never holds back the container."""
        try:
            await asyncio.to_thread(self.store.touch, record.id)
        except (ImageError, OSError) as exc:
            log.warning("Could not record image use", image=record.id, err=str(exc))


__all__ = ["ImageManager", "ImageUnavailable", "effective_pull_policy", "should_pull"]
