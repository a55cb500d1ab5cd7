"""Pure decisions of the mirror: which mirror pods to delete and create, which statuses to send, and their bodies.

Mirrors are compared by the `kubernetes.io/config.mirror` annotation (the
static pod's config hash), never by spec: admission adds defaults to what
the apiserver stores.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgelet.api.annotations import CONFIG_HASH, CONFIG_MIRROR


@dataclass(frozen=True)
class MirrorInfo:
    """A mirror pod as the apiserver holds it."""

    uid: str
    hash: str
    deleting: bool = False
    owner_uid: str = ""


@dataclass(frozen=True)
class Actions:
    delete: tuple[tuple[str, str], ...] = ()  # (namespace/name, mirror uid)
    create: tuple[str, ...] = ()  # namespace/name


def mirror_info(obj: dict[str, Any]) -> MirrorInfo | None:
    """A listed pod as MirrorInfo, or None when it is not a mirror pod (not ours to touch)."""
    meta = obj.get("metadata") or {}
    ann = meta.get("annotations") or {}
    if CONFIG_MIRROR not in ann:
        return None
    owners = [o for o in meta.get("ownerReferences") or [] if o.get("kind") == "Node" and o.get("controller")]
    return MirrorInfo(
        uid=meta.get("uid", ""),
        hash=ann[CONFIG_MIRROR],
        deleting=bool(meta.get("deletionTimestamp")),
        owner_uid=owners[0].get("uid", "") if owners else "",
    )


def key_of(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"


def decide(static: dict[str, str], mirrors: dict[str, MirrorInfo], node_uid: str) -> Actions:
    """`static` maps namespace/name to config hash. A mirror that is orphaned, being deleted, of a stale hash or
    owned by an earlier Node (one an admin deleted and we registered again) is deleted; every static pod without a
    good mirror gets one created (after the delete, in the same round)."""
    delete: list[tuple[str, str]] = []
    create: list[str] = []
    for key, m in sorted(mirrors.items()):
        want = static.get(key)
        if want is None or m.deleting or m.hash != want or (node_uid and m.owner_uid != node_uid):
            delete.append((key, m.uid))
    deleted = {k for k, _ in delete}
    for key in sorted(static):
        if key not in mirrors or key in deleted:
            create.append(key)
    return Actions(delete=tuple(delete), create=tuple(create))


def statuses_to_push(
    current: dict[str, str], pushed: dict[str, tuple[str, str]], mirrors: dict[str, MirrorInfo]
) -> list[str]:
    """Pods whose status (by fingerprint in `current`) differs from what was last sent to their present mirror.

    `pushed` maps namespace/name to (mirror uid, fingerprint sent); a mirror replaced since gets its status again.
    """
    out = []
    for key, fp in sorted(current.items()):
        m = mirrors.get(key)
        if m is None or m.deleting:
            continue
        if pushed.get(key) != (m.uid, fp):
            out.append(key)
    return out


# What a node may not put in a mirror pod (NodeRestriction) or the apiserver fills itself.
_DROP_META = (
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "generation",
    "selfLink",
    "managedFields",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "ownerReferences",
)


def build_mirror_pod(pod: dict[str, Any], node: str, node_uid: str) -> dict[str, Any]:
    """The mirror of static pod `pod` (the API form the status publisher keeps), owned by the Node."""
    meta = {k: v for k, v in (pod.get("metadata") or {}).items() if k not in _DROP_META and v is not None}
    ann = dict(meta.get("annotations") or {})
    ann[CONFIG_MIRROR] = ann.get(CONFIG_HASH, "")
    meta["annotations"] = ann
    meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": True}]
    spec, replaced = without_object_references(dict(pod.get("spec") or {}))
    if replaced:
        ann[MIRROR_REPLACED] = "; ".join(replaced)
    spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


# The apiserver refuses a mirror pod that references ConfigMaps or Secrets (its ServiceAccount and
# NodeRestriction admission), and it must never see a Secret's data: the mirror shows what the node resolved
# locally as plain stand-ins, listed in this annotation.
MIRROR_REPLACED = "edgelet.io/mirror-replaced"


def without_object_references(spec: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """`spec` (API form) with configMap, secret and projected volumes as emptyDirs, env valueFrom of a
    ConfigMap or Secret as a bare name and envFrom dropped; what was replaced, as `volume conf (configMap app)`."""
    replaced: list[str] = []
    volumes = []
    for vol in spec.get("volumes") or []:
        kinds = [k for k in ("configMap", "secret", "projected") if k in vol]
        if not kinds:
            volumes.append(vol)
            continue
        src = vol[kinds[0]] or {}
        what = src.get("name") or src.get("secretName") or ""
        replaced.append(f"volume {vol.get('name')} ({kinds[0]}{' ' + what if what else ''})")
        volumes.append({"name": vol.get("name"), "emptyDir": {}})
    if "volumes" in spec:
        spec["volumes"] = volumes
    for field in ("initContainers", "containers"):
        containers = []
        for c in spec.get(field) or []:
            c = dict(c)
            env = []
            for var in c.get("env") or []:
                source = var.get("valueFrom") or {}
                ref = source.get("configMapKeyRef") or source.get("secretKeyRef")
                if ref is None:
                    env.append(var)
                    continue
                kind = "configMap" if "configMapKeyRef" in source else "secret"
                replaced.append(
                    f"env {c.get('name')}/{var.get('name')} ({kind} {ref.get('name')} key {ref.get('key')})"
                )
                env.append({"name": var.get("name")})
            if "env" in c:
                c["env"] = env
            for item in c.pop("envFrom", None) or []:
                kind, ref = (
                    ("configMap", item["configMapRef"])
                    if "configMapRef" in item
                    else ("secret", item.get("secretRef") or {})
                )
                replaced.append(f"envFrom {c.get('name')} ({kind} {ref.get('name')})")
            containers.append(c)
        if field in spec:
            spec[field] = containers
    return spec, replaced


def build_status_patch(status: dict[str, Any], mirror_uid: str) -> dict[str, Any]:
    """A strategic merge patch of pods/<name>/status; the uid makes it fail (409) on a replaced mirror."""
    return {"metadata": {"uid": mirror_uid}, "status": status}
