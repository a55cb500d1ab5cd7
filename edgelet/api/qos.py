"""The pod's QoS class and resource lists, computed from the spec alone as kubelet's ComputePodQOS does."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import TYPE_CHECKING, Literal

from edgelet.api.quantity import parse_quantity

if TYPE_CHECKING:
    from edgelet.api.types import Container, Pod

QOSClass = Literal["Guaranteed", "Burstable", "BestEffort"]
ResourceList = dict[str, Fraction]

_QOS_RESOURCES = ("cpu", "memory")


def parse_resource_list(raw: Mapping[str, str | int | float] | None) -> ResourceList:
    return {name: parse_quantity(q) for name, q in (raw or {}).items()}


def container_limits(container: Container) -> ResourceList:
    res = container.resources
    return parse_resource_list(res.limits if res else None)


def container_requests(container: Container) -> ResourceList:
    """Requests with API defaulting applied: a resource with a limit and no request requests its limit."""
    res = container.resources
    requests = parse_resource_list(res.requests if res else None)
    for name, limit in container_limits(container).items():
        requests.setdefault(name, limit)
    return requests


def all_containers(pod: Pod) -> list[Container]:
    spec = pod.spec
    if spec is None:
        return []
    return [*(spec.containers or []), *(spec.init_containers or [])]


def qos_class(pod: Pod) -> QOSClass:
    """The pod's QoS class, computed as kubelet's ComputePodQOS does (containers and init containers)."""
    requests: ResourceList = {}
    limits: ResourceList = {}
    guaranteed = True
    pod_level = pod.spec.resources if pod.spec is not None else None
    if pod_level is not None and (pod_level.requests or pod_level.limits):
        # Pod-level resources, when given, decide the class on their own.
        req = parse_resource_list(pod_level.requests)
        lim = parse_resource_list(pod_level.limits)
        for name, q in lim.items():
            req.setdefault(name, q)
        requests = {n: q for n, q in req.items() if n in _QOS_RESOURCES and q > 0}
        limits = {n: q for n, q in lim.items() if n in _QOS_RESOURCES and q > 0}
        if not all(r in limits for r in _QOS_RESOURCES):
            guaranteed = False
    else:
        for c in all_containers(pod):
            for name, q in container_requests(c).items():
                if name in _QOS_RESOURCES and q > 0:
                    requests[name] = requests.get(name, Fraction(0)) + q
            found = set()
            for name, q in container_limits(c).items():
                if name in _QOS_RESOURCES and q > 0:
                    found.add(name)
                    limits[name] = limits.get(name, Fraction(0)) + q
            if not found.issuperset(_QOS_RESOURCES):
                guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed:
        for name, requested in requests.items():
            if limits.get(name) != requested:
                guaranteed = False
                break
    if guaranteed and len(requests) == len(limits):
        return "Guaranteed"
    return "Burstable"
