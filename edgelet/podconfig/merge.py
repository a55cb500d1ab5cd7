"""Turns one source's SET snapshot into the new merged config and the ADD/UPDATE/REMOVE/RECONCILE changes (pure).

KUBELET-SEMANTICS "Merging sources": per source, pods are keyed by UID; a
new UID is an ADD, a vanished one a REMOVE, the same UID with a changed
spec, labels or non-local annotations an UPDATE, a status-only change a
RECONCILE; changes come out in the order REMOVE, ADD, UPDATE, RECONCILE.
Full names (namespace/name) must be unique: within a source the first in
source order wins, across sources the earlier source in SOURCE_ORDER wins
(edgelet: kubelet only checks within one source).

The accepted set is a function of the latest snapshot of every source and
nothing else, so a pod rejected for a name conflict is admitted (ADDed) in
the same merge that frees its name, whichever source freed it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import msgspec

from edgelet.api.annotations import CONFIG_MIRROR, CONFIG_SEEN, CONFIG_SOURCE, ORIGIN
from edgelet.api.configobjects import pin_pod, pins_absent
from edgelet.podconfig import ConfigState, PodChange, RejectedObject, RejectedPod
from edgelet.sources import SOURCE_ORDER

if TYPE_CHECKING:
    from edgelet.api.configobjects import ConfigObject, ObjectKey
    from edgelet.api.types import Pod
    from edgelet.sources import SourceName, SourceSnapshot

EDGELET_ANNOTATION_PREFIX = "edgelet.io/"

# kubelet config.go localAnnotations: set by the kubelet itself, never a reason to update a pod.
LOCAL_ANNOTATIONS = frozenset({CONFIG_SOURCE, CONFIG_SEEN, CONFIG_MIRROR})

REJECT_REASON = "FailedValidation"


def format_seen(now: float) -> str:
    """`now` as Go's RFC3339Nano in UTC (trailing zeros of the fraction dropped), kubelet's config.seen format."""
    # A float holds about microseconds at today's epoch; nanoseconds beyond that would be noise.
    micros = round(now * 1_000_000)
    seconds, frac_us = divmod(micros, 1_000_000)
    base = datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    frac = f"{frac_us * 1000:09d}".rstrip("0")
    return f"{base}.{frac}Z" if frac else f"{base}Z"


def is_local_annotation(key: str) -> bool:
    return key in LOCAL_ANNOTATIONS or key.startswith(EDGELET_ANNOTATION_PREFIX)


def full_name(pod: Pod) -> str:
    meta = pod.metadata
    return f"{(meta.namespace if meta else None) or 'default'}/{(meta.name if meta else None) or ''}"


def pod_uid(pod: Pod) -> str:
    return (pod.metadata.uid if pod.metadata else None) or ""


def _annotations(pod: Pod) -> dict[str, str]:
    return dict((pod.metadata.annotations if pod.metadata else None) or {})


def _origin(pod: Pod, source: str) -> str:
    return _annotations(pod).get(ORIGIN) or source


def _non_local(annotations: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in annotations.items() if not is_local_annotation(k)}


def pods_differ_semantically(old: Pod, new: Pod) -> bool:
    """kubelet podsDifferSemantically (spec, labels, deletion fields, non-local annotations), plus the full name."""
    om, nm = old.metadata, new.metadata
    if full_name(old) != full_name(new):
        # Sources derive the UID from the content, so only an explicit metadata.uid can keep it
        # across a rename; the pod must then be seen under its new name.
        return True
    if old.spec != new.spec:
        return True
    if ((om.labels if om else None) or {}) != ((nm.labels if nm else None) or {}):
        return True
    if (om.deletion_timestamp if om else None) != (nm.deletion_timestamp if nm else None):
        return True
    if (om.deletion_grace_period_seconds if om else None) != (nm.deletion_grace_period_seconds if nm else None):
        return True
    return _non_local(_annotations(old)) != _non_local(_annotations(new))


def _with_annotation(pod: Pod, key: str, value: str) -> Pod:
    from edgelet.api.types import ObjectMeta

    meta = pod.metadata if pod.metadata is not None else ObjectMeta()
    annotations = dict(meta.annotations or {})
    annotations[key] = value
    return msgspec.structs.replace(pod, metadata=msgspec.structs.replace(meta, annotations=annotations))


def _admit(
    snapshots: Mapping[SourceName, tuple[Pod, ...]],
) -> tuple[dict[SourceName, dict[str, Pod]], list[RejectedPod]]:
    """The pods that may run, per source keyed by UID, and the rejected ones, from every source's latest pods."""
    accepted: dict[SourceName, dict[str, Pod]] = {}
    rejected: list[RejectedPod] = []
    # full name / uid -> (source, origin) of the pod that holds it
    names: dict[str, tuple[str, str]] = {}
    uids: dict[str, tuple[str, str]] = {}
    for source in SOURCE_ORDER:
        if source not in snapshots:
            continue
        kept: dict[str, Pod] = {}
        for pod in snapshots[source]:
            name, uid, origin = full_name(pod), pod_uid(pod), _origin(pod, source)
            if name in names:
                holder = names[name][1]
                rejected.append(
                    RejectedPod(
                        source=source,
                        origin=origin,
                        pod=name,
                        reason=REJECT_REASON,
                        message=f'duplicate pod name "{name}": {origin} is ignored, '
                        f"the name is taken by the pod from {holder}",
                    )
                )
                continue
            if not uid or uid in uids:
                # Sources derive UIDs from content and origin, so this only happens with an explicit
                # metadata.uid copied between manifests; two pods may never share one.
                why = "has no UID" if not uid else f'has the UID "{uid}" of the pod from {uids[uid][1]}'
                rejected.append(
                    RejectedPod(
                        source=source,
                        origin=origin,
                        pod=name,
                        reason=REJECT_REASON,
                        message=f'pod "{name}" from {origin} {why}; ignoring it',
                    )
                )
                continue
            names[name] = (source, origin)
            uids[uid] = (source, origin)
            kept[uid] = pod
        accepted[source] = kept
    return accepted, rejected


def merge(state: ConfigState, snapshot: SourceSnapshot, now: float) -> tuple[ConfigState, list[PodChange]]:
    """Apply one source's snapshot: the new state and the changes, REMOVEs first, then ADD, UPDATE, RECONCILE.

    `now` is wall time; it becomes `kubernetes.io/config.seen` of added pods.
    An updated or reconciled pod keeps the config.seen of the pod it replaces.
    """
    snapshots: dict[SourceName, tuple[Pod, ...]] = {
        source: tuple(state.pods.get(source, {}).values()) for source in state.pods
    }
    snapshots.update(state.snapshots)
    snapshots[snapshot.source] = tuple(snapshot.pods)
    source_objects = dict(state.source_objects)
    source_objects[snapshot.source] = tuple(snapshot.objects)
    objects, rejected_objects = merge_objects(state.objects, source_objects)

    # A pod is a version of the objects it uses in env or subPath too (their change needs a restart).
    ready = state.expected_sources <= state.seen_sources | {snapshot.source}
    pinned = {
        s: tuple(
            p
            for p in (pin_pod(p, objects, state.pin_key, default=state.pin_versions) for p in pods)
            if ready or not pins_absent(p)
        )
        for s, pods in snapshots.items()
    }
    admitted, rejected = _admit(pinned)

    # UIDs are unique across sources (see _admit), so the diff is by UID over all sources: a pod
    # whose UID moves to another source (an explicit metadata.uid) is updated, not removed and added.
    old_all = {uid: pod for source in SOURCE_ORDER for uid, pod in state.pods.get(source, {}).items()}
    new_all = {uid for kept in admitted.values() for uid in kept}
    removes = [PodChange("REMOVE", pod) for uid, pod in old_all.items() if uid not in new_all]
    adds: list[PodChange] = []
    updates: list[PodChange] = []
    reconciles: list[PodChange] = []
    new_pods: dict[SourceName, dict[str, Pod]] = {}
    for source in SOURCE_ORDER:
        if source not in admitted:
            continue
        kept: dict[str, Pod] = {}
        for uid, pod in admitted[source].items():
            existing = old_all.get(uid)
            if existing is None:
                pod = _with_annotation(pod, CONFIG_SEEN, format_seen(now))
                adds.append(PodChange("ADD", pod))
            else:
                seen = _annotations(existing).get(CONFIG_SEEN)
                if seen is not None and _annotations(pod).get(CONFIG_SEEN) != seen:
                    pod = _with_annotation(pod, CONFIG_SEEN, seen)
                if pods_differ_semantically(existing, pod):
                    updates.append(PodChange("UPDATE", pod))
                elif existing.status != pod.status or _annotations(existing) != _annotations(pod):
                    # Status or local annotations only (e.g. the pod moved to another source under an
                    # explicit UID): nothing to do on the device, but holders get the current object.
                    reconciles.append(PodChange("RECONCILE", pod))
                else:
                    # Nothing a kubelet looks at changed: keep the object the workers already hold.
                    pod = existing
            kept[uid] = pod
        new_pods[source] = kept

    errors = dict(state.errors)
    errors[snapshot.source] = tuple(snapshot.errors)
    new_state = replace(
        state,
        pods=new_pods,
        rejected=tuple(rejected),
        errors=errors,
        seen_sources=state.seen_sources | {snapshot.source},
        snapshots=snapshots,
        objects=objects,
        source_objects=source_objects,
        rejected_objects=rejected_objects,
    )
    return new_state, [*removes, *adds, *updates, *reconciles]


def merge_objects(
    accepted: Mapping[ObjectKey, ConfigObject], latest: Mapping[SourceName, tuple[ConfigObject, ...]]
) -> tuple[dict[ObjectKey, ConfigObject], tuple[RejectedObject, ...]]:
    """The ConfigMaps and Secrets in use, from every source's latest objects, and the refused ones (pure).

    As for pod names, the first in source order (files by name, then the URL) holds a name and a second
    definition is refused naming both files. An immutable object once accepted keeps its content: a changed
    copy is refused, naming its file, and the accepted one stays until the object is deleted.
    """
    objects: dict[ObjectKey, ConfigObject] = {}
    rejected: list[RejectedObject] = []
    for source in SOURCE_ORDER:
        for obj in latest.get(source, ()):
            key = obj.key
            held, before = objects.get(key), accepted.get(key)
            if held is not None:
                why = f"{obj.origin} is ignored, the name is taken by the {obj.kind} from {held.origin}"
                message = f'duplicate {obj.kind} "{obj.full_name}": {why}'
            elif before is not None and before.immutable and not before.same_content(obj):
                objects[key] = before
                message = (
                    f'{obj.kind} "{obj.full_name}" in {obj.origin} is immutable: the change is refused, '
                    "the accepted content stays until the object is deleted"
                )
            else:
                objects[key] = obj
                continue
            rejected.append(RejectedObject(source, obj.origin, obj.kind, obj.full_name, message))
    return objects, tuple(rejected)
