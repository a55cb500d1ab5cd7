"""Prometheus metrics named after kubelet's: running pods and containers, pod start duration, runtime operations.

The registry is per agent (not prometheus_client's global one) so tests
can build several. Gauges are computed at scrape time from the status
publisher; the runtime is counted by wrapping it (`InstrumentedRuntime`,
as kubelet wraps its CRI client in `instrumentedRuntimeService`); the pod
start duration is observed by wrapping the syncer's publish callback.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

if TYPE_CHECKING:
    from edgelet.api.types import Pod, PodStatus
    from edgelet.status.publisher import StatusPublisher
    from edgelet.util.clock import Clock

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
SEEN_ANNOTATION = "kubernetes.io/config.seen"
# kubelet metrics.PodStartDuration's buckets (seconds).
POD_START_BUCKETS = (0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200,
                     1800, 2700, 3600)
# The Runtime protocol's methods: each call is one runtime operation.
RUNTIME_OPERATIONS = frozenset({
    "list_pods", "pod_status", "run_sandbox", "stop_sandbox", "create_container", "start_container",
    "stop_container", "remove_container", "remove_pod",
})


def parse_seen(value: str | None) -> float | None:
    """kubernetes.io/config.seen (RFC3339Nano, UTC) as epoch seconds; None when absent or unreadable."""
    if not value:
        return None
    text = value.rstrip("Z")
    head, _, frac = text.partition(".")
    try:
        base = datetime.fromisoformat(head + "+00:00").timestamp()
    except ValueError:
        return None
    return base + (float(f"0.{frac}") if frac.isdigit() else 0.0)


def should_observe_start(previous_phase: str | None, phase: str | None) -> bool:
    """kubelet observes PodStartDuration when a pod's status goes from none or Pending to Running."""
    return phase == "Running" and previous_phase in (None, "Pending")


def count_running(statuses: Iterable["PodStatus"]) -> tuple[int, dict[str, int]]:
    """Pods with something running, and containers by kubelet's container_state label (running, exited)."""
    pods = 0
    containers = {"running": 0, "exited": 0}
    for st in statuses:
        all_statuses = [*(st.init_container_statuses or []), *(st.container_statuses or [])]
        running = 0
        for cs in all_statuses:
            if cs.state is None:
                continue
            if cs.state.running is not None:
                running += 1
            elif cs.state.terminated is not None:
                containers["exited"] += 1
        containers["running"] += running
        if running or st.phase == "Running":
            pods += 1
    return pods, containers


class _RunningCollector:
    """edgelet_running_pods and edgelet_running_containers, read from the publisher at scrape time."""

    def __init__(self, publisher: "StatusPublisher") -> None:
        self._publisher = publisher

    def collect(self) -> Iterable[Any]:
        pods, containers = count_running(e.status for e in self._publisher.entries())
        yield GaugeMetricFamily("edgelet_running_pods", "Number of pods that have a running container", value=pods)
        family = GaugeMetricFamily("edgelet_running_containers", "Number of containers currently running",
                                   labels=["container_state"])
        for state, n in sorted(containers.items()):
            family.add_metric([state], n)
        yield family


class Metrics:
    """Every metric of one agent; `render()` is the /metrics body."""

    def __init__(self, clock: "Clock") -> None:
        self._clock = clock
        self.registry = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=self.registry)
        self.pod_start_duration = Histogram(
            "edgelet_pod_start_duration_seconds",
            "Duration in seconds from edgelet seeing a pod for the first time to the pod starting to run",
            buckets=POD_START_BUCKETS, registry=self.registry,
        )
        self.runtime_operations = Counter(
            "edgelet_runtime_operations", "Cumulative number of runtime operations by operation type",
            ["operation_type"], registry=self.registry,
        )
        self.runtime_errors = Counter(
            "edgelet_runtime_operations_errors", "Cumulative number of runtime operation errors by operation type",
            ["operation_type"], registry=self.registry,
        )

    def watch_publisher(self, publisher: "StatusPublisher") -> None:
        self.registry.register(_RunningCollector(publisher))

    def observing_publish(self, publisher: "StatusPublisher") -> Callable[..., None]:
        """`publisher.update`, observing the pod start duration when a pod first runs."""

        def publish(pod: "Pod", *args: Any, **kwargs: Any) -> None:
            uid = pod.metadata.uid
            before = publisher.get(uid)
            publisher.update(pod, *args, **kwargs)
            after = publisher.get(uid)
            if after is None:
                return
            if should_observe_start(before.status.phase if before is not None else None, after.status.phase):
                seen = parse_seen((pod.metadata.annotations or {}).get(SEEN_ANNOTATION))
                if seen is not None:
                    self.pod_start_duration.observe(max(0.0, self._clock.now() - seen))

        return publish

    def render(self) -> bytes:
        return generate_latest(self.registry)


class InstrumentedRuntime:
    """A Runtime that counts every operation and its errors; anything else passes through to the real one."""

    def __init__(self, runtime: Any, metrics: Metrics) -> None:
        self._runtime = runtime
        self._metrics = metrics

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._runtime, name)
        if name not in RUNTIME_OPERATIONS:
            return attr
        ops = self._metrics.runtime_operations.labels(name)
        errors = self._metrics.runtime_errors.labels(name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            ops.inc()
            try:
                return await attr(*args, **kwargs)
            except Exception:
                errors.inc()  # counted, then raised unchanged: the caller owns the error
                raise

        call.__name__ = name
        return call

