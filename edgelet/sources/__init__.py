"""Pod sources: each one emits whole snapshots (kubelet's SET updates) of the pods it holds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import msgspec

if TYPE_CHECKING:
    from edgelet.api.configobjects import ConfigObject
    from edgelet.api.types import Pod

SourceName = Literal["file", "http"]

# Where a pod came from (file path or URL), set by every source; local to the
# device, so a change of it alone is never an UPDATE.

# Merge order across sources: a pod name taken by an earlier source wins.
SOURCE_ORDER: tuple[SourceName, ...] = ("file", "http")


@dataclass(frozen=True)
class ManifestProblem:
    """A manifest (or one document/item in it) that could not be used.

    `origin` is the file path or URL; `message` already names the field path
    (`$.spec.containers[0].image: ...`) when there is one.
    """

    source: SourceName
    origin: str
    message: str
    pod: str | None = None  # "namespace/name" when it could be read
    # The event reason: FailedValidation for a manifest that cannot be used, FailedToFetch when the URL
    # could not be read at all.
    reason: str = "FailedValidation"


@dataclass(frozen=True)
class SourceSnapshot:
    """Everything one source holds now, in source order (files sorted by name).

    Pods are already static pods: defaulted, named `<name>-<node>`, with UID
    and `kubernetes.io/config.*` annotations except `config.seen`, which
    podconfig sets when it first sees the UID.
    """

    source: SourceName
    pods: tuple[Pod, ...]
    errors: tuple[ManifestProblem, ...] = field(default=())
    # Accepted manifests with fields the Kubernetes types do not know (kubectl's
    # field validation Warn): the pods run, the typo is reported.
    warnings: tuple[ManifestProblem, ...] = field(default=())
    # The ConfigMaps and Secrets beside the pods, each naming its file or URL.
    objects: tuple[ConfigObject, ...] = field(default=())


def snapshot_key(snapshot: SourceSnapshot) -> tuple[Any, ...]:
    """What makes two snapshots different for the consumer: pods by uid and content, objects, and the errors."""
    return (
        tuple((p.metadata.uid if p.metadata else None, msgspec.json.encode(p)) for p in snapshot.pods),
        snapshot.errors,
        snapshot.warnings,
        snapshot.objects,
    )
