"""v1 ConfigMaps and Secrets of the manifest sources: decoding and validation as the apiserver does, the
store of accepted ones, and what a pod's volumes and env make of them (pure, no I/O)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from edgelet.api.errors import ApiError, FieldError
from edgelet.api.fielderrors import (
    dns1123_label_errors,
    dns1123_subdomain_errors,
    forbidden,
    invalid,
    label_value_errors,
    qualified_name_errors,
    regex_error,
    required,
    too_long,
)

if TYPE_CHECKING:
    from edgelet.api.types import KeyToPath, Pod, Volume

__all__ = [
    "KINDS",
    "MAX_TOTAL_BYTES",
    "ConfigObject",
    "ConfigObjects",
    "FileProjection",
    "MissingObject",
    "ObjectKey",
    "decode_config_object",
    "pod_references",
    "volume_payload",
]

Kind = Literal["ConfigMap", "Secret"]
KINDS: tuple[Kind, ...] = ("ConfigMap", "Secret")
# (kind, namespace, name)
ObjectKey = tuple[str, str, str]

# The apiserver's limit on a ConfigMap's or a Secret's data (corev1 MaxSecretSize, configMap total size).
MAX_TOTAL_BYTES = 1024 * 1024
_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_KEY_MSG = "a valid config key must consist of alphanumeric characters, '-', '_' or '.'"
_DEFAULT_MODE = 0o644
_TOP_FIELDS = {
    "ConfigMap": frozenset({"apiVersion", "kind", "metadata", "data", "binaryData", "immutable"}),
    "Secret": frozenset({"apiVersion", "kind", "metadata", "data", "stringData", "immutable", "type"}),
}
_META_FIELDS = frozenset(
    {
        "name",
        "namespace",
        "labels",
        "annotations",
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "generation",
        "managedFields",
        "generateName",
        "selfLink",
        "ownerReferences",
        "finalizers",
    }
)
# Secret types whose keys the apiserver checks (ValidateSecret); any other non-empty type is opaque to it.
_TYPE_KEYS = {
    "kubernetes.io/dockercfg": (".dockercfg",),
    "kubernetes.io/dockerconfigjson": (".dockerconfigjson",),
    "kubernetes.io/ssh-auth": ("ssh-privatekey",),
    "kubernetes.io/tls": ("tls.crt", "tls.key"),
}


@dataclass(frozen=True)
class ConfigObject:
    """An accepted ConfigMap or Secret: its keys' bytes, where it came from, whether it may change.

    `text_keys` are a ConfigMap's `data` keys (env may use them; `binaryData` ones only volumes), all keys
    of a Secret. `repr` never shows the values, so a log line or a traceback cannot leak a Secret.
    """

    kind: Kind
    namespace: str
    name: str
    data: Mapping[str, bytes] = field(repr=False)
    text_keys: frozenset[str] = field(repr=False, default=frozenset())
    immutable: bool = False
    type: str = ""  # a Secret's type ("Opaque" by default)
    origin: str = ""  # the file or URL that holds it
    source: str = ""  # "file" or "http"

    @property
    def key(self) -> ObjectKey:
        return (self.kind, self.namespace, self.name)

    @property
    def full_name(self) -> str:
        return f"{self.namespace}/{self.name}"

    def sizes(self) -> dict[str, int]:
        """Key -> length in bytes: all that reports show of the data."""
        return {k: len(v) for k, v in sorted(self.data.items())}

    def same_content(self, other: ConfigObject) -> bool:
        return (self.data, self.text_keys, self.immutable, self.type) == (
            other.data,
            other.text_keys,
            other.immutable,
            other.type,
        )


def _str(obj: Mapping[str, Any], key: str, path: str, errors: list[FieldError]) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        errors.append(FieldError(f"{path}.{key}", f"expected str, got {type(value).__name__}"))
        return None
    return value


def _string_map(obj: Mapping[str, Any], key: str, path: str, errors: list[FieldError]) -> dict[str, str]:
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        errors.append(FieldError(f"{path}.{key}", f"expected object, got {type(value).__name__}"))
        return {}
    out: dict[str, str] = {}
    for k, v in value.items():
        if not isinstance(v, str):
            # The type only, never the value: this may be a Secret's.
            errors.append(FieldError(f"{path}.{key}[{k!r}]", f"expected str, got {type(v).__name__}"))
            continue
        out[k] = v
    return out


def _key_errors(key: str, path: str) -> list[FieldError]:
    """IsConfigMapKey: at most 253 of `[-._a-zA-Z0-9]`, not `.` nor `..` (nor starting with `..`)."""
    errors: list[FieldError] = []
    if len(key) > 253:
        errors.append(invalid(path, key, "must be no more than 253 characters"))
    if not _KEY.match(key):
        errors.append(invalid(path, key, regex_error(_KEY_MSG, "[-._a-zA-Z0-9]+", "key.name", "KEY_NAME", "key-name")))
    if key in (".", ".."):
        errors.append(invalid(path, key, f"must not be '{key}'"))
    elif key.startswith(".."):
        errors.append(invalid(path, key, "must not start with '..'"))
    return errors


def decode_config_object(obj: Mapping[str, Any], path: str = "$") -> tuple[ConfigObject, list[str]]:
    """A ConfigMap or Secret document (a plain object) as the apiserver validates it, with unknown-field
    warnings; raises ConfigObjectError listing every problem (values never quoted)."""
    errors: list[FieldError] = []
    kind = obj.get("kind")
    if kind not in KINDS:
        raise ConfigObjectError([FieldError(f"{path}.kind", f"expected ConfigMap or Secret, got {kind}")])
    warnings = [f'unknown field "{_rel(path, k)}"' for k in obj if k not in _TOP_FIELDS[kind]]
    meta = obj.get("metadata")
    name = namespace = None
    if meta is None:
        errors.append(required(f"{path}.metadata.name", "name or generateName is required"))
    elif not isinstance(meta, dict):
        errors.append(FieldError(f"{path}.metadata", f"expected object, got {type(meta).__name__}"))
    else:
        mpath = f"{path}.metadata"
        warnings += [f'unknown field "{_rel(mpath, k)}"' for k in meta if k not in _META_FIELDS]
        name = _str(meta, "name", mpath, errors)
        namespace = _str(meta, "namespace", mpath, errors)
        if not name:
            errors.append(required(f"{mpath}.name", "name or generateName is required"))
        else:
            errors.extend(invalid(f"{mpath}.name", name, m) for m in dns1123_subdomain_errors(name))
        if namespace:
            errors.extend(invalid(f"{mpath}.namespace", namespace, m) for m in dns1123_label_errors(namespace))
        for key, value in sorted(_string_map(meta, "labels", mpath, errors).items()):
            errors.extend(invalid(f"{mpath}.labels", key, m) for m in qualified_name_errors(key))
            errors.extend(invalid(f"{mpath}.labels", value, m) for m in label_value_errors(value))
        for key in sorted(_string_map(meta, "annotations", mpath, errors)):
            errors.extend(invalid(f"{mpath}.annotations", key, m) for m in qualified_name_errors(key.lower()))
    immutable = obj.get("immutable")
    if immutable is not None and not isinstance(immutable, bool):
        errors.append(FieldError(f"{path}.immutable", f"expected bool, got {type(immutable).__name__}"))
    data: dict[str, bytes] = {}
    text_keys: set[str] = set()
    secret_type = ""
    if kind == "ConfigMap":
        for key, text in _string_map(obj, "data", path, errors).items():
            errors.extend(_key_errors(key, f"{path}.data[{key!r}]"))
            data[key] = text.encode()
            text_keys.add(key)
        for key, b64 in _string_map(obj, "binaryData", path, errors).items():
            kpath = f"{path}.binaryData[{key!r}]"
            errors.extend(_key_errors(key, kpath))
            if key in data:
                errors.append(invalid(kpath, key, "duplicate of key present in data"))
            data[key] = _b64(b64, kpath, errors)
    else:
        secret_type = _str(obj, "type", path, errors) or "Opaque"
        for key, b64 in _string_map(obj, "data", path, errors).items():
            kpath = f"{path}.data[{key!r}]"
            errors.extend(_key_errors(key, kpath))
            data[key] = _b64(b64, kpath, errors)
        # The apiserver merges stringData over data (its values win), then drops it.
        for key, text in _string_map(obj, "stringData", path, errors).items():
            errors.extend(_key_errors(key, f"{path}.stringData[{key!r}]"))
            data[key] = text.encode()
        text_keys = set(data)
        errors.extend(_secret_type_errors(secret_type, data, path))
    total = sum(len(v) for v in data.values())
    if total > MAX_TOTAL_BYTES:
        errors.append(too_long(f"{path}.data", MAX_TOTAL_BYTES))
    if errors:
        raise ConfigObjectError(errors, kind=kind, name=f"{namespace or 'default'}/{name or ''}")
    assert name is not None
    result = ConfigObject(
        kind=kind,
        namespace=namespace or "default",
        name=name,
        data=data,
        text_keys=frozenset(text_keys),
        immutable=bool(immutable),
        type=secret_type,
    )
    return result, warnings


def _rel(path: str, key: str) -> str:
    """A field path as kubectl's unknown-field warnings write it: no leading `$.`."""
    full = f"{path}.{key}"
    return full[2:] if full.startswith("$.") else full


def _b64(text: str, path: str, errors: list[FieldError]) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        # Not the value: it may be a Secret's.
        errors.append(FieldError(path, "illegal base64 data"))
        return b""


def _secret_type_errors(secret_type: str, data: Mapping[str, bytes], path: str) -> list[FieldError]:
    if secret_type == "kubernetes.io/service-account-token":
        return [forbidden(f"{path}.type", "a service account token Secret needs a ServiceAccount: none on a node")]
    if secret_type == "kubernetes.io/basic-auth":
        if "username" not in data and "password" not in data:
            return [required(f"{path}.data[username]", "either username or password is required")]
        return []
    return [required(f"{path}.data[{key}]", "") for key in _TYPE_KEYS.get(secret_type, ()) if key not in data]


class ConfigObjectError(ApiError):
    """A ConfigMap or Secret document the apiserver would refuse; `errors` lists every problem."""

    def __init__(self, errors: list[FieldError], *, kind: str = "", name: str = "") -> None:
        super().__init__("; ".join(str(e) for e in errors))
        self.errors = errors
        self.kind = kind
        self.name = name


class ConfigObjects:
    """The accepted ConfigMaps and Secrets of every source, by (kind, namespace, name), and their recent
    contents by pin (see `pin_digest`), so that a pod version pinned to an older content (a rollback) gets it.

    podconfig decides what is accepted and replaces the whole set; the runtime reads it when it makes a
    container's env and writes a volume. A replacement is one assignment of an immutable mapping, so a
    reader sees the set before or after, never half of it.
    """

    def __init__(self, objects: Mapping[ObjectKey, ConfigObject] | None = None, *, key: bytes = b"") -> None:
        self._objects: Mapping[ObjectKey, ConfigObject] = dict(objects or {})
        self._lock = threading.Lock()
        self.key = key
        self._history: dict[tuple[ObjectKey, str], ConfigObject] = {}
        self._remember(self._objects.values())

    def get(self, kind: str, namespace: str, name: str) -> ConfigObject | None:
        return self._objects.get((kind, namespace, name))

    def all(self) -> list[ConfigObject]:
        return [self._objects[k] for k in sorted(self._objects)]

    def replace(self, objects: Mapping[ObjectKey, ConfigObject]) -> set[ObjectKey]:
        """Make `objects` the accepted set; the keys whose content changed, appeared or went."""
        with self._lock:
            old = self._objects
            self._objects = dict(objects)
            self._remember(objects.values())
        changed = {k for k in set(old) | set(objects) if k not in old or k not in objects}
        changed |= {k for k in set(old) & set(objects) if not old[k].same_content(objects[k])}
        return changed

    def _remember(self, objects: Iterable[ConfigObject]) -> None:
        for obj in objects:
            self._history[(obj.key, pin_digest(obj, self.key))] = obj
        # The last few contents of each object: enough for a version under the gate and its last good one.
        per: dict[ObjectKey, list[tuple[ObjectKey, str]]] = {}
        for hk in self._history:
            per.setdefault(hk[0], []).append(hk)
        for entries in per.values():
            for stale in entries[:-_HISTORY_PER_OBJECT]:
                del self._history[stale]

    def for_pod(self, pod: Pod) -> ConfigObjects:
        """The objects as `pod` sees them: those its version pinned (env, subPath) with the content it was
        made with, while that content is still known; the current ones otherwise."""
        pins = read_pins(pod)
        if not pins:
            return self
        current = dict(self._objects)
        for key, digest in pins.items():
            old = self._history.get((key, digest))
            if old is not None:
                current[key] = old
            elif digest == _ABSENT:
                current.pop(key, None)
        return ConfigObjects(current, key=self.key)


_HISTORY_PER_OBJECT = 4
_ABSENT = "absent"
PINS_ANNOTATION = "edgelet.io/config-objects"  # "Kind/namespace/name=digest,...": a version's restart-needing config


def pin_digest(obj: ConfigObject | None, key: bytes) -> str:
    """A short keyed digest of an object's content: names a version of it without revealing a Secret (the key
    is the node's own, 0600)."""
    if obj is None:
        return _ABSENT
    mac = hmac.new(key or b"edgelet", digestmod=hashlib.sha256)
    for k in sorted(obj.data):
        mac.update(len(k).to_bytes(4, "big") + k.encode() + len(obj.data[k]).to_bytes(8, "big") + obj.data[k])
    mac.update(b"text:" + ",".join(sorted(obj.text_keys)).encode() + b"type:" + obj.type.encode())
    return mac.hexdigest()[:16]


def read_pins(pod: Pod) -> dict[ObjectKey, str]:
    text = ((pod.metadata.annotations if pod.metadata else None) or {}).get(PINS_ANNOTATION, "")
    pins: dict[ObjectKey, str] = {}
    for item in filter(None, text.split(",")):
        ref, _, digest = item.partition("=")
        kind, _, rest = ref.partition("/")
        namespace, _, name = rest.partition("/")
        pins[(kind, namespace, name)] = digest
    return pins


def pins_absent(pod: Pod) -> bool:
    """The pod's version is pinned to an object no source defines (yet)."""
    return _ABSENT in read_pins(pod).values()


def pin_pod(pod: Pod, objects: Mapping[ObjectKey, ConfigObject], key: bytes, *, default: bool = True) -> Pod:
    """`pod` as a version of its config too: the objects it uses in env or subPath (which a running container
    does not see change) are pinned in PINS_ANNOTATION, and the UID and config hash fold their digests in, so
    a change of them is a new version of the pod (the rollout's gate and rollback). Unchanged when it pins
    nothing, or when its rollout is off (`default` is the node's, the pod's edgelet.io/rollout wins): kubelet's
    semantics, the running container keeps what it started with. A function of its arguments only."""
    from edgelet.api.annotations import CONFIG_HASH, ROLLOUT, ROLLOUT_OFF, ROLLOUT_ON

    switch = ((pod.metadata.annotations if pod.metadata else None) or {}).get(ROLLOUT, "").strip().lower()
    if switch in ROLLOUT_OFF or (not default and switch not in ROLLOUT_ON):
        return pod
    refs = sorted(k for k, uses in pod_references(pod).items() if uses & {"env", "subPath"})
    if not refs or pod.metadata is None:
        return pod
    pins = ",".join(f"{k[0]}/{k[1]}/{k[2]}={pin_digest(objects.get(k), key)}" for k in refs)
    meta = pod.metadata
    uid = hashlib.md5(f"{meta.uid}|{pins}".encode(), usedforsecurity=False).hexdigest()
    annotations = dict(meta.annotations or {})
    annotations[PINS_ANNOTATION] = pins
    annotations[CONFIG_HASH] = uid
    return msgspec.structs.replace(pod, metadata=msgspec.structs.replace(meta, uid=uid, annotations=annotations))


class MissingObject(ApiError):
    """A reference a container cannot be made without (kubelet's CreateContainerConfigError message)."""


@dataclass(frozen=True)
class FileProjection:
    """One file of a configMap/secret/projected volume: its bytes and mode."""

    data: bytes = field(repr=False)
    mode: int


def _object_of(objects: ConfigObjects, kind: str, namespace: str, name: str, optional: bool) -> ConfigObject | None:
    found = objects.get(kind, namespace, name)
    if found is None and not optional:
        raise MissingObject(f'{kind.lower()} "{name}" not found')
    return found


def _project(
    obj: ConfigObject | None,
    items: Iterable[KeyToPath] | None,
    default_mode: int,
    optional: bool,
    out: dict[str, FileProjection],
) -> None:
    """kubelet's MakePayload: every key, or the `items` listed (a missing one fails unless optional)."""
    if obj is None:
        return
    listed = list(items or [])
    if not listed:
        for key, value in obj.data.items():
            out[key] = FileProjection(value, default_mode)
        return
    for item in listed:
        if item.key not in obj.data:
            if optional:
                continue
            raise MissingObject(f"configmap references non-existent config key: {item.key}")
        mode = item.mode if item.mode is not None else default_mode
        out[item.path] = FileProjection(obj.data[item.key], mode)


def volume_sources(volume: Volume, namespace: str, objects: ConfigObjects) -> tuple[ConfigObject | None, ...]:
    """The objects a configMap, secret or projected volume is made of now (None for one that is absent): equal
    tuples give the same payload."""
    names: list[tuple[str, str]] = []
    if volume.config_map is not None:
        names.append(("ConfigMap", volume.config_map.name or ""))
    if volume.secret is not None:
        names.append(("Secret", volume.secret.secret_name or ""))
    for proj in (volume.projected.sources or []) if volume.projected is not None else []:
        if proj.config_map is not None:
            names.append(("ConfigMap", proj.config_map.name or ""))
        if proj.secret is not None:
            names.append(("Secret", proj.secret.name or ""))
    return tuple(objects.get(kind, namespace, name) for kind, name in names)


def volume_payload(volume: Volume, namespace: str, objects: ConfigObjects) -> dict[str, FileProjection]:
    """The files (relative path -> bytes and mode) of a configMap, secret or projected volume now; raises
    MissingObject naming the object or key a non-optional reference lacks."""
    out: dict[str, FileProjection] = {}
    if volume.config_map is not None:
        src = volume.config_map
        mode = src.default_mode if src.default_mode is not None else _DEFAULT_MODE
        obj = _object_of(objects, "ConfigMap", namespace, src.name or "", bool(src.optional))
        _project(obj, src.items, mode, bool(src.optional), out)
    elif volume.secret is not None:
        ssrc = volume.secret
        mode = ssrc.default_mode if ssrc.default_mode is not None else _DEFAULT_MODE
        obj = _object_of(objects, "Secret", namespace, ssrc.secret_name or "", bool(ssrc.optional))
        try:
            _project(obj, ssrc.items, mode, bool(ssrc.optional), out)
        except MissingObject as exc:
            raise MissingObject(str(exc).replace("configmap references", "secret references")) from None
    elif volume.projected is not None:
        mode = volume.projected.default_mode if volume.projected.default_mode is not None else _DEFAULT_MODE
        for proj in volume.projected.sources or []:
            if proj.config_map is not None:
                c = proj.config_map
                obj = _object_of(objects, "ConfigMap", namespace, c.name or "", bool(c.optional))
                _project(obj, c.items, mode, bool(c.optional), out)
            elif proj.secret is not None:
                s = proj.secret
                obj = _object_of(objects, "Secret", namespace, s.name or "", bool(s.optional))
                _project(obj, s.items, mode, bool(s.optional), out)
            else:
                kinds = [j for a, j in zip(proj.__struct_fields__, proj.__struct_encode_fields__) if getattr(proj, a)]
                raise MissingObject(f"projected source {', '.join(kinds)}: edgelet projects only configMap and secret")
    return out


def is_config_volume(volume: Volume) -> bool:
    return volume.config_map is not None or volume.secret is not None or volume.projected is not None


def holds_secret(volume: Volume) -> bool:
    """Secret bytes may land in it: it lives on tmpfs, never on the card."""
    if volume.secret is not None:
        return True
    return volume.projected is not None and any(p.secret is not None for p in volume.projected.sources or [])


def pod_references(pod: Pod) -> dict[ObjectKey, set[str]]:
    """Every ConfigMap and Secret the pod names -> how it uses it ("volume", "env", "subPath")."""
    refs: dict[ObjectKey, set[str]] = {}
    spec = pod.spec
    if spec is None:
        return refs
    ns = (pod.metadata.namespace if pod.metadata else None) or "default"

    def add(kind: str, name: str | None, use: str) -> None:
        refs.setdefault((kind, ns, name or ""), set()).add(use)

    sub_path_volumes = {
        vm.name
        for c in [*(spec.init_containers or []), *spec.containers]
        for vm in c.volume_mounts or []
        if vm.sub_path or vm.sub_path_expr
    }
    for volume in spec.volumes or []:
        use = "subPath" if volume.name in sub_path_volumes else "volume"
        if volume.config_map is not None:
            add("ConfigMap", volume.config_map.name, use)
        if volume.secret is not None:
            add("Secret", volume.secret.secret_name, use)
        if volume.projected is not None:
            for proj in volume.projected.sources or []:
                if proj.config_map is not None:
                    add("ConfigMap", proj.config_map.name, use)
                if proj.secret is not None:
                    add("Secret", proj.secret.name, use)
    for c in [*(spec.init_containers or []), *spec.containers]:
        for env in c.env or []:
            src = env.value_from
            if src is not None and src.config_map_key_ref is not None:
                add("ConfigMap", src.config_map_key_ref.name, "env")
            if src is not None and src.secret_key_ref is not None:
                add("Secret", src.secret_key_ref.name, "env")
        for env_from in c.env_from or []:
            if env_from.config_map_ref is not None:
                add("ConfigMap", env_from.config_map_ref.name, "env")
            if env_from.secret_ref is not None:
                add("Secret", env_from.secret_ref.name, "env")
    return refs


class ObjectReport(msgspec.Struct, kw_only=True):
    """What `edgelet get configmaps|secrets` shows of an object: never a value, only keys and sizes."""

    kind: str
    namespace: str
    name: str
    keys: dict[str, int]  # key -> size in bytes
    source: str
    origin: str
    immutable: bool = False
    type: str = ""
    used_by: list[str] = msgspec.field(default_factory=list)  # "namespace/pod (volume, env)"
    missing: bool = False  # named by a pod, defined by no source


def object_reports(objects: Iterable[ConfigObject], pods: Iterable[Pod]) -> list[ObjectReport]:
    """Every accepted object with the pods that use it, and the references no source defines (pure)."""
    users: dict[ObjectKey, list[str]] = {}
    for pod in pods:
        name = f"{(pod.metadata.namespace if pod.metadata else None) or 'default'}/{pod.metadata.name if pod.metadata else ''}"
        for key, uses in pod_references(pod).items():
            users.setdefault(key, []).append(f"{name} ({', '.join(sorted(uses))})")
    reports = []
    seen: set[ObjectKey] = set()
    for obj in objects:
        seen.add(obj.key)
        reports.append(
            ObjectReport(
                kind=obj.kind,
                namespace=obj.namespace,
                name=obj.name,
                keys=obj.sizes(),
                source=obj.source,
                origin=obj.origin,
                immutable=obj.immutable,
                type=obj.type,
                used_by=sorted(users.get(obj.key, [])),
            )
        )
    for key in sorted(set(users) - seen):
        kind, namespace, name = key
        reports.append(
            ObjectReport(
                kind=kind,
                namespace=namespace,
                name=name,
                keys={},
                source="",
                origin="",
                used_by=sorted(users[key]),
                missing=True,
            )
        )
    return sorted(reports, key=lambda r: (r.kind, r.namespace, r.name))
