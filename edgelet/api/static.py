"""Turning a decoded manifest Pod into a static pod: defaults, identity (name, UID), annotations, checks."""

from __future__ import annotations

import hashlib
from typing import Literal

import msgspec

from edgelet.api.annotations import CONFIG_HASH, CONFIG_SEEN, CONFIG_SOURCE
from edgelet.api.defaults import apply_defaults
from edgelet.api.errors import FieldError, ValidationError
from edgelet.api.hash import canonical_json, pod_full_name
from edgelet.api.types import ObjectMeta, Pod, PodStatus, Toleration, Volume
from edgelet.api.validation import validate_pod

__all__ = [
    "CONFIG_HASH",
    "CONFIG_SEEN",
    "CONFIG_SOURCE",
    "find_api_object_references",
    "make_static_pod",
    "static_pod_name",
    "static_pod_uid",
]

NAME_REQUIRED = "name is needed for the pod"

# File pods tolerate every NoExecute taint so node problems never evict them.
_STATIC_TOLERATION = Toleration(operator="Exists", effect="NoExecute")
_VOLUME_SOURCES = tuple(
    (attr, json) for attr, json in zip(Volume.__struct_fields__, Volume.__struct_encode_fields__) if attr != "name"
)
# ConfigMaps and Secrets come from the sources beside the pods (api.configobjects): those references resolve.
_OBJECT_VOLUMES = {
    "persistentVolumeClaim": "PersistentVolumeClaim",
    "ephemeral": "PersistentVolumeClaim",
}
_PROJECTIONS = {
    "serviceAccountToken": "ServiceAccount",
    "clusterTrustBundle": "ClusterTrustBundle",
    "podCertificate": "PodCertificateRequest",
}
# Fields of other volume sources (cephfs, rbd, csi, azureFile, ...) that name a Secret.
_SECRET_FIELDS = (
    ("secret_ref", "secretRef"),
    ("node_publish_secret_ref", "nodePublishSecretRef"),
    ("secret_name", "secretName"),
)


def static_pod_name(name: str, node_name: str) -> str:
    return f"{name}-{node_name.lower()}"


def static_pod_uid(pod: Pod, *, node_name: str, source: Literal["file", "http"], origin: str) -> str:
    """md5 hex of the pod as decoded, the node and the origin: any edit or rename gives a new UID.

    kubelet hashes its Go structs; we hash the canonical JSON, so UIDs differ
    from a real kubelet's. kubelet also leaves the node out for URL pods; we
    include it for both sources so one URL served to many nodes never yields
    the same UID twice.
    """
    hasher = hashlib.md5(usedforsecurity=False)
    hasher.update(canonical_json(pod))
    hasher.update(f"host:{node_name}".encode())
    hasher.update(f"file:{origin}".encode() if source == "file" else f"url:{origin}".encode())
    return hasher.hexdigest()


def make_static_pod(pod: Pod, *, node_name: str, source: Literal["file", "http"], origin: str) -> Pod:
    """Return a new, defaulted static pod for `pod`; raise ValidationError listing every problem.

    `origin` is the manifest's path (file) or URL (http). `pod` is not modified.
    """
    meta = pod.metadata
    if meta is None or not meta.name:
        raise ValidationError([FieldError("$.metadata.name", NAME_REQUIRED)], origin=origin)
    uid = meta.uid or static_pod_uid(pod, node_name=node_name, source=source, origin=origin)

    result = apply_defaults(pod)
    rmeta = result.metadata or ObjectMeta()
    result.metadata = rmeta
    rmeta.name = static_pod_name(meta.name, node_name)
    rmeta.namespace = rmeta.namespace or "default"
    rmeta.uid = uid
    annotations = dict(rmeta.annotations or {})
    annotations[CONFIG_SOURCE] = source
    annotations[CONFIG_HASH] = uid
    rmeta.annotations = annotations
    if result.spec is not None:
        result.spec.node_name = node_name
        if source == "file":
            tolerations = list(result.spec.tolerations or [])
            if _STATIC_TOLERATION not in tolerations:
                tolerations.append(Toleration(operator="Exists", effect="NoExecute"))
            result.spec.tolerations = tolerations
    # As kubelet: only the phase is set, anything else in status is kept.
    result.status = result.status or PodStatus()
    result.status.phase = "Pending"

    errors = validate_pod(result) + find_api_object_references(result)
    if errors:
        raise ValidationError(errors, origin=origin, pod=pod_full_name(result))
    return result


def find_api_object_references(pod: Pod) -> list[FieldError]:
    """Fields that reference API objects a static pod cannot resolve (ServiceAccounts, PVCs, ...); ConfigMaps
    and Secrets, as volumes, projections and env, come from the sources beside the pods."""
    errors: list[FieldError] = []
    spec = pod.spec
    if spec is None:
        return errors
    for field in ("service_account_name", "service_account"):
        account = getattr(spec, field)
        if account not in (None, "", "default"):
            json_name = "serviceAccountName" if field == "service_account_name" else "serviceAccount"
            errors.append(_ref(f"$.spec.{json_name}", "ServiceAccount"))
    for i, _ in enumerate(spec.image_pull_secrets or []):
        errors.append(_ref(f"$.spec.imagePullSecrets[{i}]", "Secret"))
    for i, _ in enumerate(spec.resource_claims or []):
        errors.append(_ref(f"$.spec.resourceClaims[{i}]", "ResourceClaim"))
    for i, volume in enumerate(spec.volumes or []):
        errors.extend(_volume_references(volume, f"$.spec.volumes[{i}]"))
    return errors


def _ref(path: str, kind: str) -> FieldError:
    return FieldError(path, f"static pods may not reference {kind} objects")


def _volume_references(volume: Volume, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    for attr, json_name in _VOLUME_SOURCES:
        source = getattr(volume, attr)
        if source is None:
            continue
        spath = f"{path}.{json_name}"
        if json_name in ("secret", "configMap"):
            continue  # resolved from the sources' objects
        if json_name in _OBJECT_VOLUMES:
            errors.append(_ref(spath, _OBJECT_VOLUMES[json_name]))
        elif json_name == "projected":
            for j, projection in enumerate(source.sources or []):
                for pattr, pjson in zip(projection.__struct_fields__, projection.__struct_encode_fields__):
                    if getattr(projection, pattr) is not None and pjson in _PROJECTIONS:
                        errors.append(_ref(f"{spath}.sources[{j}].{pjson}", _PROJECTIONS[pjson]))
        elif isinstance(source, msgspec.Struct):
            for sattr, sjson in _SECRET_FIELDS:
                if getattr(source, sattr, None):
                    errors.append(_ref(f"{spath}.{sjson}", "Secret"))
    return errors
