"""Merging source snapshots into one desired set of pods and the changes between sets (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from edgelet.api.configobjects import ConfigObject, ObjectKey
    from edgelet.api.types import Pod
    from edgelet.sources import ManifestProblem, SourceName

Op = Literal["REMOVE", "ADD", "UPDATE", "RECONCILE"]


@dataclass(frozen=True)
class PodChange:
    op: Op
    pod: Pod


@dataclass(frozen=True)
class RejectedPod:
    """A pod that parsed but cannot run, e.g. its name is taken by another pod."""

    source: SourceName
    origin: str  # file path or URL the pod came from (config.source annotation's origin)
    pod: str  # "namespace/name"
    reason: str  # kubelet event reason, e.g. "FailedValidation"
    message: str


@dataclass(frozen=True)
class RejectedObject:
    """A ConfigMap or Secret that parsed but is not used: its name is taken, or it is immutable and changed."""

    source: SourceName
    origin: str
    kind: str
    name: str  # "namespace/name"
    message: str
    reason: str = "FailedValidation"


@dataclass(frozen=True)
class ConfigState:
    """The merged view: accepted pods per source keyed by UID, plus what was rejected."""

    pods: Mapping[SourceName, Mapping[str, Pod]] = field(default_factory=dict)
    rejected: tuple[RejectedPod, ...] = ()
    errors: Mapping[SourceName, tuple[ManifestProblem, ...]] = field(default_factory=dict)
    seen_sources: frozenset[str] = frozenset()
    # The latest snapshot's pods of every source, rejected ones included, so that a merge of one
    # source can admit a pod of another whose name it frees (see merge.py).
    snapshots: Mapping[SourceName, tuple[Pod, ...]] = field(default_factory=dict)
    # The accepted ConfigMaps and Secrets of every source, the latest objects of each source, and the objects
    # refused (one named by two files, an immutable one changed) with why (see merge.py's merge_objects).
    objects: Mapping[ObjectKey, ConfigObject] = field(default_factory=dict)
    source_objects: Mapping[SourceName, tuple[ConfigObject, ...]] = field(default_factory=dict)
    rejected_objects: tuple[RejectedObject, ...] = ()
    # The node's key for the digests that pin a pod version's ConfigMaps and Secrets (api.configobjects).
    pin_key: bytes = b""
    # Whether a pod's version covers its config by default (the node's --rollout): without a rollout, kubelet
    # leaves a running container as it is, so nothing is pinned (a pod's edgelet.io/rollout annotation wins).
    pin_versions: bool = True
    # The sources that must all have spoken before a pod pinned to an absent object is admitted: the object may
    # be another source's, and pinned to "absent" the pod would get a UID it loses a moment later.
    expected_sources: frozenset[str] = frozenset()

    def all_pods(self) -> list[Pod]:
        """Accepted pods of every source, in source order."""
        from edgelet.sources import SOURCE_ORDER

        return [p for s in SOURCE_ORDER for p in self.pods.get(s, {}).values()]


from edgelet.podconfig.merge import merge  # noqa: E402  (merge.py imports the types above)

__all__ = ["ConfigState", "Op", "PodChange", "RejectedObject", "RejectedPod", "merge"]
