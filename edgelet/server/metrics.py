"""Prometheus metrics named after kubelet's: running pods and containers, pod start duration, runtime operations (and the tunnel).

Counting is plain integers kept here; prometheus_client is imported only
when /metrics is first scraped, and renders those counts through a custom
collector. Most devices are never scraped, and the library with what it
imports (http.server, email, urllib) costs about 2 MB of resident memory.
Gauges are computed at scrape time from the status publisher; the runtime
is counted by wrapping it (`InstrumentedRuntime`, as kubelet wraps its CRI
client in `instrumentedRuntimeService`); the pod start duration is observed
by wrapping the syncer's publish callback.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from edgelet.api.annotations import CONFIG_SEEN
from edgelet.api.pod import meta
from edgelet.api.pod import uid as pod_uid

if TYPE_CHECKING:
    from edgelet.api.types import Pod, PodStatus
    from edgelet.status.publisher import StatusPublisher
    from edgelet.tunnel.device import Tunnel
    from edgelet.util.clock import Clock

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # prometheus_client's CONTENT_TYPE_PLAIN_0_0_4
# kubelet metrics.PodStartDuration's buckets (seconds).
POD_START_BUCKETS = (
    0.5,
    1,
    2,
    3,
    4,
    5,
    6,
    8,
    10,
    20,
    30,
    45,
    60,
    120,
    180,
    240,
    300,
    360,
    480,
    600,
    900,
    1200,
    1800,
    2700,
    3600,
)
# The Runtime protocol's methods: each call is one runtime operation.
RUNTIME_OPERATIONS = frozenset(
    {
        "list_pods",
        "pod_status",
        "run_sandbox",
        "create_sandbox",
        "start_sandbox",
        "stop_sandbox",
        "create_container",
        "start_container",
        "stop_container",
        "remove_container",
        "remove_pod",
    }
)


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


def count_running(statuses: Iterable[PodStatus]) -> tuple[int, dict[str, int]]:
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


class _Histogram:
    """Cumulative bucket counts, sum and count: what a Prometheus histogram exposes."""

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.bounds = tuple(float(b) for b in buckets)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, int]]:
        out, total = [], 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts):
            total += n
            out.append(("+Inf" if bound == float("inf") else repr(bound), total))
        return out


class _Collector:
    """Yields every edgelet metric family from the counts above (prometheus_client's collector protocol)."""

    def __init__(self, metrics: Metrics, prefix: str = "edgelet") -> None:
        self._m = metrics
        self._p = prefix

    def collect(self) -> Iterable[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        m = self._m
        hist = HistogramMetricFamily(
            f"{self._p}_pod_start_duration_seconds",
            "Duration in seconds from edgelet seeing a pod for the first time to the pod starting to run",
        )
        hist.add_metric([], m.pod_start_duration.cumulative(), m.pod_start_duration.sum)
        yield hist
        for name, doc, counts in (
            (
                f"{self._p}_runtime_operations",
                "Cumulative number of runtime operations by operation type",
                m.runtime_operations,
            ),
            (
                f"{self._p}_runtime_operations_errors",
                "Cumulative number of runtime operation errors by operation type",
                m.runtime_errors,
            ),
        ):
            counter = CounterMetricFamily(name, doc, labels=["operation_type"])
            for op, n in sorted(counts.items()):
                counter.add_metric([op], n)
            yield counter
        if m.update_outcomes is not None:
            outcomes, trial = m.update_outcomes()
            counter = CounterMetricFamily(
                f"{self._p}_update_outcomes",
                "Cumulative number of self-update outcomes (started, committed, rolled-back, refused) on this node",
                labels=["outcome"],
            )
            for outcome, n in sorted(outcomes.items()):
                counter.add_metric([outcome], n)
            yield counter
            yield GaugeMetricFamily(
                f"{self._p}_update_trial", "1 while a new edgelet release runs on trial, else 0", value=int(trial)
            )
        if m.publisher is not None:
            pods, containers = count_running(e.status for e in m.publisher.entries())
            yield GaugeMetricFamily(
                f"{self._p}_running_pods", "Number of pods that have a running container", value=pods
            )
            family = GaugeMetricFamily(
                f"{self._p}_running_containers", "Number of containers currently running", labels=["container_state"]
            )
            for state, n in sorted(containers.items()):
                family.add_metric([state], n)
            yield family
        if m.tunnel is not None:
            yield from _tunnel_families(m.tunnel, m._clock.now(), self._p)


def _tunnel_families(tunnel: Tunnel, now: float, p: str) -> Iterable[Any]:
    """The WireGuard tunnel as of its last check (every 10 s): up, each peer's handshake age and bytes, and the
    times it was mended. Byte counts restart with a device made again, as a counter may."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    from edgelet.tunnel.config import encode_key

    name = tunnel.interface
    up = GaugeMetricFamily(
        f"{p}_tunnel_up", "Whether the WireGuard interface is up and answering", labels=["interface"]
    )
    up.add_metric([name], 1 if tunnel.status.up else 0)
    yield up
    ages = GaugeMetricFamily(
        f"{p}_tunnel_last_handshake_age_seconds",
        "Seconds since the newest handshake with the peer (none before the first)",
        labels=["interface", "peer"],
    )
    rx = CounterMetricFamily(f"{p}_tunnel_receive_bytes", "Bytes received from the peer", labels=["interface", "peer"])
    tx = CounterMetricFamily(f"{p}_tunnel_transmit_bytes", "Bytes sent to the peer", labels=["interface", "peer"])
    for peer in tunnel.state_seen.peers if tunnel.state_seen is not None else ():
        labels = [name, encode_key(peer.public_key)]
        if peer.last_handshake is not None:
            ages.add_metric(labels, max(0.0, now - peer.last_handshake))
        rx.add_metric(labels, peer.rx_bytes)
        tx.add_metric(labels, peer.tx_bytes)
    yield from (ages, rx, tx)
    mended = CounterMetricFamily(
        f"{p}_tunnel_reconnects",
        "Times the tunnel was mended: its device made again (reason=device), a peer's name resolved anew (endpoint)",
        labels=["interface", "reason"],
    )
    for reason in ("device", "endpoint"):
        mended.add_metric([name, reason], tunnel.reconnects[reason])
    yield mended


class Metrics:
    """Every metric of one agent; `render()` is the /metrics body."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.pod_start_duration = _Histogram(POD_START_BUCKETS)
        self.runtime_operations: Counter[str] = Counter()
        self.runtime_errors: Counter[str] = Counter()
        self.publisher: StatusPublisher | None = None
        # Self-update's outcomes so far (from its history, so they count across the agent's restarts) and
        # whether a trial runs; set by the app when self-update is built.
        self.update_outcomes: Callable[[], tuple[Mapping[str, int], bool]] | None = None
        self.tunnel: Tunnel | None = None
        self._registries: dict[str, Any] = {}

    def watch_publisher(self, publisher: StatusPublisher) -> None:
        self.publisher = publisher

    def watch_tunnel(self, tunnel: Tunnel) -> None:
        self.tunnel = tunnel

    def observing_publish(self, publisher: StatusPublisher) -> Callable[..., None]:
        """`publisher.update`, observing the pod start duration when a pod first runs."""

        def publish(pod: Pod, *args: Any, **kwargs: Any) -> None:
            uid = pod_uid(pod)
            before = publisher.get(uid)
            publisher.update(pod, *args, **kwargs)
            after = publisher.get(uid)
            if after is None:
                return
            if should_observe_start(before.status.phase if before is not None else None, after.status.phase):
                seen = parse_seen((meta(pod).annotations or {}).get(CONFIG_SEEN))
                if seen is not None:
                    self.pod_start_duration.observe(max(0.0, self._clock.now() - seen))

        return publish

    def render(self, prefix: str = "edgelet") -> bytes:
        """The text exposition; the node API asks for `kubelet` names, which kubelet's dashboards and alerts use."""
        from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest

        registry = self._registries.get(prefix)
        if registry is None:
            registry = self._registries[prefix] = CollectorRegistry(auto_describe=True)
            ProcessCollector(registry=registry)
            registry.register(_Collector(self, prefix))
        return generate_latest(registry)


class InstrumentedRuntime:
    """A Runtime that counts every operation and its errors; anything else passes through to the real one."""

    def __init__(self, runtime: Any, metrics: Metrics) -> None:
        self._runtime = runtime
        self._metrics = metrics

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._runtime, name)
        if name not in RUNTIME_OPERATIONS:
            return attr
        ops = self._metrics.runtime_operations
        errors = self._metrics.runtime_errors

        async def call(*args: Any, **kwargs: Any) -> Any:
            ops[name] += 1
            try:
                return await attr(*args, **kwargs)
            except Exception:
                errors[name] += 1  # counted, then raised unchanged: the caller owns the error
                raise

        call.__name__ = name
        return call
