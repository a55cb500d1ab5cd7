"""Building the update manager from the node's settings and what the agent lends its trial (one call for the app)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from pathlib import Path

from edgelet.container.types import PodRuntimeStatus
from edgelet.events import EventRecorder
from edgelet.settings import Settings
from edgelet.trust.keys import TrustedKeys
from edgelet.update import DOWNLOAD_DIR
from edgelet.update.decide import PodInstance
from edgelet.update.fetch import UrlReleases
from edgelet.update.manager import AgentView, UpdateManager, probe_healthz
from edgelet.update.store import URL_VALIDATORS_FILE, UpdateStore
from edgelet.util.clock import Clock

LEASE_LIVE = 60.0  # seconds: the Node Lease is renewed every 10 s; one renewed within this reaches the apiserver


def running_containers(pods: Mapping[str, PodRuntimeStatus]) -> dict[str, PodInstance]:
    """Every running container as `<namespace>/<pod>/<container>` -> its id and pid (what a trial compares)."""
    return {
        f"{p.namespace}/{p.name}/{c.name}": PodInstance(c.id, c.pid)
        for p in pods.values()
        for c in p.containers
        if c.pid is not None and c.state == "running"
    }


def build_update_manager(
    settings: Settings,
    *,
    root_dir: Path,
    clock: Clock,
    events: EventRecorder,
    keys: TrustedKeys | None,
    first_sync_done: asyncio.Event,
    runtime_pods: Callable[[], Mapping[str, PodRuntimeStatus]],
    healthz_served: bool,
    has_apiserver: bool,
    last_lease_renewal: Callable[[], float | None],
) -> UpdateManager:
    """Self-update on ROOT_DIR/releases and ROOT_DIR/update, `settings.update_current` swapped; the trial
    watches the runtime's pods after the first full sync, /healthz when it is served, and the Lease."""
    s = settings
    port = s.healthz_port if healthz_served else 0

    def pods() -> dict[str, PodInstance] | None:
        return running_containers(runtime_pods()) if first_sync_done.is_set() else None

    def renewed_since(t: float) -> bool:
        last = last_lease_renewal()
        return last is not None and last >= t

    def lease_live() -> bool:
        return renewed_since(clock.now() - LEASE_LIVE)

    return UpdateManager(
        store=UpdateStore(root_dir / "update"),
        releases_dir=root_dir / "releases",
        current=s.update_current,
        keys=keys,
        card_dir=s.card_dir,
        clock=clock,
        events=events,
        node=s.node_name,
        view=AgentView(
            pods=pods,
            healthz=lambda: probe_healthz(s.healthz_bind_address, port),
            lease_link=lambda: has_apiserver,
            lease_renewed_since=renewed_since,
            lease_live=lease_live,
        ),
        max_attempts=s.update_max_attempts,
        deadline=s.update_trial_deadline,
        url_source=None
        if s.update_url is None
        else UrlReleases(
            s.update_url,
            root_dir / "releases" / DOWNLOAD_DIR,
            ca_file=s.update_url_ca,
            headers=s.update_url_header,
            header_file=s.update_url_header_file,
            validators_file=root_dir / "update" / URL_VALIDATORS_FILE,
        ),
        url_period=s.http_check_frequency,
    )
