"""The settings' value parsers: each turns a raw value (a str from env or flags, any TOML value from the file)
into the typed value of one kind of key, or raises ValueError with a short reason the loader names the key in.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgelet.util.duration import parse_duration

if TYPE_CHECKING:
    from edgelet.runtime.handlers import HandlerConfig

# A parser turns a raw value (a str from env/flags, any TOML value from the file)
# into the typed value, raising ValueError with a short reason.
Parser = Callable[[Any, bool], Any]  # (raw, from_toml) -> value


def _duration(*, positive: bool = False) -> Parser:
    def parse(raw: Any, from_toml: bool) -> float:
        if isinstance(raw, bool):
            raise ValueError("expected a duration such as 20s")
        if isinstance(raw, (int, float)) and from_toml:
            value = float(raw)
        elif isinstance(raw, str):
            value = parse_duration(raw)
        else:
            raise ValueError("expected a duration such as 20s")
        if value < 0 or (positive and value == 0):
            raise ValueError(f"must be {'positive' if positive else 'zero or more'}, got {raw!r}")
        return value

    return parse


def _bool(raw: Any, from_toml: bool) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and not from_toml:
        low = raw.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
    raise ValueError(f"expected true or false, got {raw!r}")


def _int(*, minimum: int = 0) -> Parser:
    def parse(raw: Any, from_toml: bool) -> int:
        if isinstance(raw, bool):
            raise ValueError(f"expected an integer, got {raw!r}")
        if isinstance(raw, int):
            value = raw
        elif isinstance(raw, str) and not from_toml:
            try:
                value = int(raw.strip())
            except ValueError:
                raise ValueError(f"expected an integer, got {raw!r}") from None
        else:
            raise ValueError(f"expected an integer, got {raw!r}")
        if value < minimum:
            raise ValueError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def _str(*, optional: bool = False) -> Parser:
    def parse(raw: Any, from_toml: bool) -> str | None:
        if not isinstance(raw, str):
            raise ValueError(f"expected a string, got {raw!r}")
        value = raw.strip()
        if not value:
            if optional:
                return None
            raise ValueError("must not be empty")
        return value

    return parse


def _rollout_strategy(raw: Any, from_toml: bool) -> str:
    """Replace or Surge (any case), as the pod annotation edgelet.io/rollout-strategy takes it."""
    if isinstance(raw, str) and raw.strip().lower() in ("replace", "surge"):
        return raw.strip().capitalize()
    raise ValueError(f"expected Replace or Surge, got {raw!r}")


def _one_of(*choices: str) -> Parser:
    """One of `choices`, as written (lower case)."""

    def parse(raw: Any, from_toml: bool) -> str:
        if isinstance(raw, str) and raw.strip().lower() in choices:
            return raw.strip().lower()
        raise ValueError(f"expected one of {', '.join(choices)}, got {raw!r}")

    return parse


def _path(*, optional: bool = False) -> Parser:
    as_str = _str(optional=optional)

    def parse(raw: Any, from_toml: bool) -> Path | None:
        value = as_str(raw, from_toml)
        return None if value is None else Path(value)

    return parse


def _port(raw: Any, from_toml: bool) -> int:
    value = _int(minimum=0)(raw, from_toml)
    if value > 65535:
        raise ValueError(f"must be a TCP port (0-65535), got {value}")
    return value


def _cgroup_parent(raw: Any, from_toml: bool) -> str:
    value = _str()(raw, from_toml)
    if not value.startswith("/"):
        raise ValueError(f"must be an absolute cgroup path such as /kubepods, got {value!r}")
    return "/" + value.strip("/") if value != "/" else "/"


# RFC 9110 token characters: what a header name may be made of.
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def _url(raw: Any, from_toml: bool) -> str | None:
    value = _str(optional=True)(raw, from_toml)
    if value is None:
        return None
    scheme, sep, rest = value.partition("://")
    if not sep or scheme.lower() not in ("http", "https") or not rest or rest[0] in "/?#":
        raise ValueError(f"expected an http:// or https:// URL with a host, got {value!r}")
    return value


def _header(name: Any, value: Any) -> tuple[str, str]:
    if not isinstance(name, str) or not isinstance(value, str):
        raise ValueError(f"expected string header name and value, got {name!r} = {value!r}")
    name, value = name.strip(), value.strip()
    if not _HEADER_NAME.fullmatch(name):
        raise ValueError(f"invalid header name {name!r}")
    if any(c in value for c in "\r\n\0"):
        raise ValueError(f"header {name}: value must not contain CR, LF or NUL")
    return name, value


def _headers(raw: Any, from_toml: bool) -> tuple[tuple[str, str], ...]:
    """kubelet's --manifest-url-header: `Name:value` pairs, comma-separated and/or repeated; in TOML also a table.

    A name may repeat (kubelet sends every value, in order), so the result is
    a tuple of pairs rather than a mapping.
    """
    if isinstance(raw, dict) and from_toml:
        return tuple(_header(k, v) for k, v in raw.items())
    if isinstance(raw, str):
        items: list[Any] = [raw]
    elif isinstance(raw, (list, tuple)):  # a TOML array, or a repeated flag
        items = list(raw)
    else:
        raise ValueError(f"expected Name:value pairs, got {raw!r}")
    pairs: list[tuple[str, str]] = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"expected a Name:value string, got {item!r}")
        for part in item.split(","):
            if not part.strip():
                continue
            name, sep, value = part.partition(":")
            if not sep:
                raise ValueError(f"malformed header {part.strip()!r}, expected Name:value")
            pairs.append(_header(name, value))
    return tuple(pairs)


def _size(raw: Any, from_toml: bool) -> int:
    """A size in bytes: a Kubernetes quantity (`10Mi`, `500Ki`, `1G`) or, in TOML, a plain integer."""
    from edgelet.api.quantity import QuantityError, value

    if isinstance(raw, bool):
        raise ValueError(f"expected a size such as 10Mi, got {raw!r}")
    if isinstance(raw, int) and from_toml:
        size = raw
    elif isinstance(raw, str):
        try:
            size = value(raw.strip())
        except QuantityError as exc:
            raise ValueError(f"expected a size such as 10Mi, got {raw!r}") from exc
    else:
        raise ValueError(f"expected a size such as 10Mi, got {raw!r}")
    if size <= 0:
        raise ValueError(f"must be positive, got {raw!r}")
    return size


def _percent(raw: Any, from_toml: bool) -> int:
    value = _int(minimum=0)(raw, from_toml)
    if value > 100:
        raise ValueError(f"must be a percentage from 0 to 100, got {value}")
    return value


def _registries(raw: Any, from_toml: bool) -> tuple[tuple[str, Any], ...]:
    """The `registries` table (see edgelet/images/registries.py); from env or a flag, the same as JSON."""
    import json

    from edgelet.images.registries import parse_registries

    if isinstance(raw, (list, tuple)) and not from_toml:  # a repeated flag: the last one wins
        raw = raw[-1] if raw else "{}"
    if isinstance(raw, str) and not from_toml:
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except ValueError as exc:
            raise ValueError(f"expected a JSON object of registries: {exc}") from None
    return tuple(sorted(parse_registries(raw).items()))


_LABEL_NAME = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def _items(raw: Any, from_toml: bool, what: str) -> list[str]:
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, (list, tuple)) or not all(isinstance(x, str) for x in raw):
        raise ValueError(f"expected {what}, got {raw!r}")
    return [part.strip() for item in raw for part in item.split(",") if part.strip()]


def _ip_list(raw: Any, from_toml: bool) -> tuple[str, ...]:
    import ipaddress

    out = []
    for item in _items(raw, from_toml, "IP addresses, comma-separated"):
        try:
            out.append(str(ipaddress.ip_address(item)))
        except ValueError:
            raise ValueError(f"{item!r} is not an IP address") from None
    return tuple(out)


def _ip(raw: Any, from_toml: bool) -> str | None:
    """One IP address, as kubelet's --node-ip. Checked here rather than where the node API's certificate uses
    it, so a bad one (from the card, say) is reported with the settings, not a failed start."""
    import ipaddress

    value = _str(optional=True)(raw, from_toml)
    if value is None:
        return None
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address") from None


def _sysctl_patterns(raw: Any, from_toml: bool) -> tuple[str, ...]:
    out = _items(raw, from_toml, "sysctl names or prefixes ending in *, comma-separated")
    for item in out:
        if "*" in item[:-1] or not re.fullmatch(r"[a-z0-9_./*-]+", item):
            raise ValueError(f"{item!r} is not a sysctl name or a prefix ending in *")
    return tuple(out)


def _reserved(raw: Any, from_toml: bool) -> tuple[tuple[str, str], ...]:
    """kubelet's --system-reserved / --kube-reserved: `cpu=500m,memory=256Mi,pid=100`; in TOML also a table."""
    from edgelet.cgroups.allocatable import parse_reserved

    if isinstance(raw, dict) and from_toml:
        pairs = [(str(k).strip(), str(v).strip()) for k, v in raw.items()]
    else:
        pairs = []
        for item in _items(raw, from_toml, "name=quantity pairs"):
            name, sep, amount = item.partition("=")
            if not sep or not amount.strip():
                raise ValueError(f"malformed reservation {item!r}, expected name=quantity such as memory=256Mi")
            pairs.append((name.strip(), amount.strip()))
    parse_reserved(pairs)  # raises ValueError naming the bad pair
    return tuple(pairs)


def _enforce(raw: Any, from_toml: bool) -> tuple[str, ...]:
    """kubelet's --enforce-node-allocatable: `pods` or `none` (the system-reserved and kube-reserved cgroups
    it also accepts need --system-reserved-cgroup / --kube-reserved-cgroup, which edgelet has not)."""
    from edgelet.cgroups.allocatable import ENFORCEABLE

    out = tuple(_items(raw, from_toml, "pods or none"))
    for item in out:
        if item not in ENFORCEABLE:
            raise ValueError(f"{item!r}: edgelet enforces allocatable on pods only (pods or none)")
    if "none" in out and len(out) > 1:
        raise ValueError("none cannot be combined with other values")
    return out


def _labels(raw: Any, from_toml: bool) -> tuple[tuple[str, str], ...]:
    """kubelet's --node-labels: `key=value` pairs, comma-separated; in TOML also a table."""
    pairs = (
        list(raw.items())
        if isinstance(raw, dict) and from_toml
        else [p.partition("=")[::2] if "=" in p else (p, None) for p in _items(raw, from_toml, "key=value pairs")]
    )
    out = []
    for key, value in pairs:
        if value is None:
            raise ValueError(f"malformed label {key!r}, expected key=value")
        key, value = str(key).strip(), str(value).strip()
        if len(key.rpartition("/")[2]) > 63 or not _LABEL_NAME.fullmatch(key):
            raise ValueError(f"invalid label key {key!r}")
        if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
            raise ValueError(f"label {key}: invalid value {value!r}")
        out.append((key, value))
    return tuple(out)


def _taints(raw: Any, from_toml: bool) -> tuple[tuple[str, str, str], ...]:
    """kubelet's --register-with-taints: `key=value:Effect` or `key:Effect`, comma-separated."""
    out = []
    for item in _items(raw, from_toml, "key=value:Effect taints"):
        kv, sep, effect = item.rpartition(":")
        if not sep or effect not in _TAINT_EFFECTS:
            raise ValueError(
                f"taint {item!r}: expected key=value:Effect with Effect one of {', '.join(_TAINT_EFFECTS)}"
            )
        key, _, value = kv.partition("=")
        if not _LABEL_NAME.fullmatch(key) or (value and not _LABEL_VALUE.fullmatch(value)):
            raise ValueError(f"taint {item!r}: invalid key or value")
        out.append((key, value, effect))
    return tuple(out)


def _runtime_handlers(raw: Any, from_toml: bool) -> tuple[tuple[str, HandlerConfig], ...]:
    from edgelet.runtime.handlers import parse_handlers

    return parse_handlers(raw, from_toml)


# NodeRestriction (plugin/pkg/admission/noderestriction, v1.20): labels in the kubernetes.io and k8s.io
# namespaces a node may set on itself; any other label in those namespaces is refused.
ALLOWED_LABELS = frozenset(
    {
        "kubernetes.io/hostname",
        "kubernetes.io/arch",
        "kubernetes.io/os",
        "beta.kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
        "failure-domain.beta.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "topology.kubernetes.io/zone",
    }
)
ALLOWED_LABEL_DOMAINS = ("kubelet.kubernetes.io", "node.kubernetes.io")


def is_allowed_node_label(key: str) -> bool:
    """Whether NodeRestriction lets a node set this label on itself."""
    prefix, sep, _ = key.rpartition("/")
    if not sep:
        return True
    if key in ALLOWED_LABELS:
        return True
    domain = prefix.lower()
    for allowed in ALLOWED_LABEL_DOMAINS:
        if domain == allowed or domain.endswith("." + allowed):
            return True
    if domain == "node-restriction.kubernetes.io" or domain.endswith(".node-restriction.kubernetes.io"):
        return False
    for ns in ("kubernetes.io", "k8s.io"):
        if domain == ns or domain.endswith("." + ns):
            return False
    return True


def refused_node_labels(labels: Mapping[str, str]) -> list[str]:
    """The labels NodeRestriction would refuse a node, sorted."""
    return sorted(key for key in labels if not is_allowed_node_label(key))
