"""The chaos campaign (issue 16): random manifest churn under an agent SIGKILLed at random points, zero
invariant violations wanted. `make chaos-quick` (and so `make test`) runs about 20 kills with a fixed seed;
`make chaos` runs 200. EDGELET_CHAOS_KILLS and EDGELET_CHAOS_SEED choose others."""

from __future__ import annotations

import os

import pytest

from tests.chaos.conftest import PLUGINS, SUMMARIES
from tests.chaos.harness import Campaign

pytestmark = [pytest.mark.privileged, pytest.mark.chaos,
              pytest.mark.skipif(not (PLUGINS / "bridge").exists(), reason="needs containernetworking-plugins")]

KILLS = int(os.environ.get("EDGELET_CHAOS_KILLS", "20"))
SEED = int(os.environ.get("EDGELET_CHAOS_SEED", "16"))


@pytest.mark.timeout(max(900, KILLS * 60))
def test_chaos_campaign_leaves_no_violation(agent, network, busybox_archive):
    def say(line: str) -> None:
        print(line, flush=True)

    campaign = Campaign(agent, network, seed=SEED, kills=KILLS, base_archive=busybox_archive, say=say)
    try:
        report = campaign.run()
    finally:
        if agent.proc is not None:
            campaign.kill()
    SUMMARIES.append(report.summary() + f"  (EDGELET_CHAOS_KILLS={KILLS} EDGELET_CHAOS_SEED={SEED})")
    assert report.violations == [], "\n".join(report.violations[:40])
