"""A container's environment and command line: `$(VAR)` expansion, valueFrom, kubelet's command rule.

Follows kubelet's third_party/forked/golang/expansion, kubelet_pods.go
makeEnvironmentVariables and containerd's WithProcessArgs and WithEnv.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING

from edgelet.api.configobjects import ConfigObjects
from edgelet.api.fielderrors import is_env_var_name
from edgelet.api.qos import container_limits, container_requests
from edgelet.api.quantity import QuantityError, parse_quantity
from edgelet.ocispec.errors import EnvError

if TYPE_CHECKING:
    from edgelet.api.types import Container, EnvVar, EnvVarSource, Pod, ResourceFieldSelector


def expand(text: str, mapping: Callable[[str], str | None]) -> str:
    """Expand `$(NAME)` with `mapping`; `$$` is a literal `$`; unknown names and unclosed `$(` stay as written."""
    out: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch != "$" or i + 1 == n:
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(":
            close = text.find(")", i + 2)
            if close == -1:
                # Incomplete reference: kubelet keeps "$(" and carries on after it.
                out.append("$(")
                i += 2
                continue
            name = text[i + 2 : close]
            found = mapping(name)
            out.append(found if found is not None else f"$({name})")
            i = close + 1
        else:
            out.append("$" + nxt)
            i += 2
    return "".join(out)


def _subscript(path: str, prefix: str) -> str | None:
    m = re.fullmatch(re.escape(prefix) + r"\['(.*)'\]", path)
    return m.group(1) if m else None


def _field_ref(pod: Pod, path: str, pod_ips: Sequence[str], host_ips: Sequence[str]) -> str:
    meta = pod.metadata
    spec = pod.spec
    simple: dict[str, str | None] = {
        "metadata.name": meta.name if meta else None,
        "metadata.namespace": meta.namespace if meta else None,
        "metadata.uid": meta.uid if meta else None,
        "spec.nodeName": spec.node_name if spec else None,
        "spec.serviceAccountName": spec.service_account_name if spec else None,
        "status.podIP": pod_ips[0] if pod_ips else "",
        "status.podIPs": ",".join(pod_ips),
        "status.hostIP": host_ips[0] if host_ips else "",
        "status.hostIPs": ",".join(host_ips),
    }
    if path in simple:
        return simple[path] or ""
    for prefix, source in (
        ("metadata.labels", meta.labels if meta else None),
        ("metadata.annotations", meta.annotations if meta else None),
    ):
        key = _subscript(path, prefix)
        if key is not None:
            return (source or {}).get(key, "")
    raise EnvError(f"unsupported fieldRef fieldPath {path!r}")


def _resource_field_ref(
    pod: Pod, container: Container, ref: ResourceFieldSelector, node_allocatable: Mapping[str, str | int | float]
) -> str:
    target = container
    if ref.container_name and ref.container_name != container.name:
        spec = pod.spec
        others = [*(spec.containers or []), *(spec.init_containers or [])] if spec else []
        matches = [c for c in others if c.name == ref.container_name]
        if not matches:
            raise EnvError(f"resourceFieldRef names unknown container {ref.container_name!r}")
        target = matches[0]
    kind, _, resource = ref.resource.partition(".")
    if kind not in ("limits", "requests") or not resource:
        raise EnvError(f"unsupported resourceFieldRef resource {ref.resource!r}")
    values = container_limits(target) if kind == "limits" else container_requests(target)
    amount: Fraction | None = values.get(resource)
    if not amount and kind == "limits":
        # kubelet fills an unset limit with the node's allocatable amount.
        if resource not in node_allocatable:
            raise EnvError(f"resourceFieldRef {ref.resource!r} has no limit and node allocatable {resource} is unknown")
        amount = parse_quantity(node_allocatable[resource])
    total: Fraction = amount or Fraction(0)
    try:
        divisor = parse_quantity(ref.divisor) if ref.divisor not in (None, "") else None
    except QuantityError as exc:
        raise EnvError(f"resourceFieldRef divisor {ref.divisor!r}: {exc}") from exc
    if resource == "cpu":
        # convertResourceCPUToString: ceil(milliValue / divisor.milliValue), divisor default 1
        milli = math.ceil(total * 1000)
        div = math.ceil(divisor * 1000) if divisor else 1000
        return str(math.ceil(milli / div))
    div_value = math.ceil(divisor) if divisor else 1
    return str(math.ceil(math.ceil(total) / div_value))


def container_env(
    pod: Pod,
    container: Container,
    *,
    pod_ips: Sequence[str] = (),
    host_ips: Sequence[str] = (),
    node_allocatable: Mapping[str, str | int | float] | None = None,
    objects: ConfigObjects | None = None,
) -> list[tuple[str, str]]:
    """The container's own env (not the image's), values expanded, in first-seen order with the last value.

    kubelet also adds service link variables; a standalone node has no
    Services, so edgelet adds none. `envFrom` comes first, `env` over it
    (makeEnvironmentVariables); a missing non-optional ConfigMap, Secret or
    key raises EnvError naming it, which is CreateContainerConfigError.
    """
    store = objects if objects is not None else ConfigObjects()
    namespace = (pod.metadata.namespace if pod.metadata else None) or "default"
    resolved: dict[str, str] = dict(env_from_values(container, namespace, store)[0])
    env: Iterable[EnvVar] = container.env or []
    for var in env:
        if var.value:
            text = expand(var.value, resolved.get)
        elif var.value_from is not None:
            src = var.value_from
            if src.field_ref is not None:
                text = _field_ref(pod, src.field_ref.field_path, pod_ips, host_ips)
            elif src.resource_field_ref is not None:
                text = _resource_field_ref(pod, container, src.resource_field_ref, node_allocatable or {})
            else:
                found = _key_ref(src, namespace, store)
                if found is None:
                    continue  # optional and absent: the variable is not set at all, as kubelet
                text = found
        else:
            text = ""
        resolved[var.name] = text
    return list(resolved.items())


def _key_ref(src: EnvVarSource, namespace: str, store: ConfigObjects) -> str | None:
    """A configMapKeyRef's or secretKeyRef's value; None when optional and absent."""
    ref = src.config_map_key_ref or src.secret_key_ref
    if ref is None:
        raise EnvError("valueFrom names no source")
    kind = "ConfigMap" if src.config_map_key_ref is not None else "Secret"
    obj = store.get(kind, namespace, ref.name or "")
    if obj is None:
        if ref.optional:
            return None
        raise EnvError(f'{kind.lower()} "{ref.name}" not found')
    if ref.key not in obj.text_keys:
        if ref.optional:
            return None
        raise EnvError(f"couldn't find key {ref.key} in {kind} {namespace}/{ref.name}")
    return obj.data[ref.key].decode(errors="replace")


def env_from_values(
    container: Container, namespace: str, store: ConfigObjects
) -> tuple[list[tuple[str, str]], list[str]]:
    """The variables of the container's envFrom (prefix applied), and a message per object whose keys were
    skipped as invalid variable names (kubelet's InvalidEnvironmentVariableNames event)."""
    out: list[tuple[str, str]] = []
    skipped: list[str] = []
    for env_from in container.env_from or []:
        ref = env_from.config_map_ref or env_from.secret_ref
        if ref is None:
            continue
        kind = "ConfigMap" if env_from.config_map_ref is not None else "Secret"
        obj = store.get(kind, namespace, ref.name or "")
        if obj is None:
            if ref.optional:
                continue
            raise EnvError(f'{kind.lower()} "{ref.name}" not found')
        invalid: list[str] = []
        for key in sorted(obj.text_keys):
            name = (env_from.prefix or "") + key
            if not name or not is_env_var_name(name):
                invalid.append(key)
                continue
            out.append((name, obj.data[key].decode(errors="replace")))
        if invalid:
            skipped.append(
                f"Keys [{', '.join(invalid)}] from the EnvFrom {kind.lower()} {namespace}/{ref.name} were skipped "
                "since they are invalid environment variable names."
            )
    return out, skipped


def process_args(
    command: Sequence[str] | None,
    args: Sequence[str] | None,
    entrypoint: Sequence[str],
    cmd: Sequence[str],
) -> list[str]:
    """kubelet/containerd's rule: command set -> command+args; only args -> Entrypoint+args; neither -> Entrypoint+Cmd."""
    cmd_part = list(command or [])
    args_part = list(args or [])
    if not cmd_part:
        if not args_part:
            args_part = list(cmd)
        # An image may reset its entrypoint to [""] to mean "none".
        if not (len(entrypoint) == 1 and entrypoint[0] == ""):
            cmd_part = list(entrypoint)
    result = cmd_part + args_part
    if not result:
        raise EnvError("no command specified")
    return result


def merge_env(base: Iterable[str], overrides: Iterable[str]) -> list[str]:
    """containerd's replaceOrAppendEnvValues: a known key is replaced in place, a new one appended."""
    out = list(base)
    index = {item.partition("=")[0]: i for i, item in enumerate(out)}
    for item in overrides:
        key = item.partition("=")[0]
        if key in index:
            out[index[key]] = item
        else:
            index[key] = len(out)
            out.append(item)
    return out
