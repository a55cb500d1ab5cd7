"""What a container's configuration is written from the accepted ConfigMaps and Secrets: its spec (a Secret's
values kept out of the bundle), the envFrom keys skipped, and the pod's config volumes kept up to date.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgelet.api.configobjects import ConfigObjects, volume_sources
from edgelet.api.pod import full_name, meta
from edgelet.api.pod import uid as pod_uid
from edgelet.container.errors import VolumeError
from edgelet.ocispec import build as ocispec
from edgelet.ocispec.env import env_from_values
from edgelet.ocispec.errors import EnvError
from edgelet.runtime import bundle as bl
from edgelet.runtime import configvolumes, secretspec
from edgelet.runtime.containerprep import container_mounts
from edgelet.runtime.host import HostFacts
from edgelet.runtime.layout import RuntimePaths
from edgelet.util.clock import Clock
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.api.types import Container, Pod
    from edgelet.images.types import ImageRecord

log = get_logger("edgelet.runtime")


class ContainerSpecs:
    """Writes container specs and config volumes from `config_objects`; remembers, per pod and volume, the
    objects a config volume was last brought up to date with."""

    def __init__(
        self,
        config_objects: ConfigObjects,
        paths: RuntimePaths,
        facts: HostFacts,
        clock: Clock,
        layout: Callable[[str], bl.PodLayout],
        on_warning: Callable[[Pod, str | None, str, str], None] | None,
    ) -> None:
        self.config_objects = config_objects
        self.paths = paths
        self.facts = facts
        self.clock = clock
        self.layout = layout
        self.on_warning = on_warning
        # (pod uid, volume) -> the objects its config volume was last brought up to date with
        self._volume_sources: dict[tuple[str, str], tuple[object, ...]] = {}

    def write_spec(
        self,
        pod: Pod,
        container: Container,
        image: ImageRecord,
        layout: bl.PodLayout,
        bundle: Path,
        cid: str,
        ctx_args: dict[str, Any],
    ) -> tuple[ocispec.ContainerContext, dict[str, Any] | None]:
        """Mounts, spec and config.json in one trip to a worker thread; with the spec for the bundle once runc
        has read the whole one from the run dir, when the container's env holds Secret values (else None)."""
        objects = self.config_objects.for_pod(pod)  # the contents this version of the pod was made with
        mounts = container_mounts(pod, container, layout, bundle, self.facts.recursive_read_only, (objects, self.clock))
        ctx = ocispec.ContainerContext(mounts=mounts, config_objects=objects, **ctx_args)
        config = ocispec.build_container_spec(pod, container, image.config, ctx)
        hidden = secretspec.secret_values(pod, container, objects)
        if not hidden:
            bl.write_file(bundle / bl.CONFIG, json.dumps(config, indent=1))
            return ctx, None
        real = secretspec.write_spec_copy(self.paths.run_dir, cid, config)
        if os.path.lexists(bundle / bl.CONFIG):
            os.unlink(bundle / bl.CONFIG)
        os.symlink(real, bundle / bl.CONFIG)
        return ctx, secretspec.redact(config, hidden)

    def warn_env_skipped(self, pod: Pod, container: Container) -> None:
        """kubelet's InvalidEnvironmentVariableNames: envFrom keys that are no variable name, skipped."""
        namespace = meta(pod).namespace or "default"
        try:
            _, skipped = env_from_values(container, namespace, self.config_objects.for_pod(pod))
        except EnvError:
            return  # the container was made, so the objects changed since: the next start says it
        for message in skipped:
            log.warning("envFrom keys skipped", pod=full_name(pod), container=container.name, detail=message)
            if self.on_warning is not None:
                self.on_warning(pod, container.name, "InvalidEnvironmentVariableNames", message)

    async def refresh_volumes(self, pod: Pod) -> list[str]:
        """Bring the pod's configMap, secret and projected volumes up to date with the accepted objects, as
        kubelet's periodic remount: the names of those rewritten. Only a pod whose volumes exist (it has
        started) is touched; a failure is logged and left for the next sync (the containers keep the old)."""
        uid = pod_uid(pod)
        layout = self.layout(uid)
        objects = self.config_objects.for_pod(pod)
        namespace = meta(pod).namespace or "default"
        rewritten: list[str] = []
        for volume in configvolumes.config_volumes(pod):
            if not os.path.lexists(layout.volume_dir(volume.name) / configvolumes.DATA_LINK):
                continue
            # The same objects as at the last refresh: nothing to compare on disk (a sync runs on every event).
            sources = volume_sources(volume, namespace, objects)
            if self._volume_sources.get((uid, volume.name)) == sources:
                continue
            try:
                if await asyncio.to_thread(configvolumes.prepare_volume, pod, volume, layout, objects, self.clock):
                    rewritten.append(volume.name)
                self._volume_sources[(uid, volume.name)] = sources
            except VolumeError as exc:
                log.warning("Cannot update volume", pod=full_name(pod), volume=volume.name, err=str(exc))
        if rewritten:
            log.info("Volumes updated from their objects", pod=full_name(pod), volumes=",".join(rewritten))
        return rewritten

    def forget(self, uid: str) -> None:
        """A removed pod's volumes are no longer kept up to date."""
        for key in [k for k in self._volume_sources if k[0] == uid]:
            del self._volume_sources[key]
