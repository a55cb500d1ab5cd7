"""The chaos campaign (issue 16): random manifest churn under an agent SIGKILLed at random points, zero
invariant violations wanted. `make chaos-quick` (and so `make test`) runs about 20 kills with a fixed seed;
`make chaos` runs 200. EDGELET_CHAOS_KILLS and EDGELET_CHAOS_SEED choose others."""

from __future__ import annotations

import os

import pytest

from tests.chaos.conftest import PLUGINS
from tests.chaos.harness import Campaign

pytestmark = [
    pytest.mark.privileged,
    pytest.mark.chaos,
    pytest.mark.skipif(not (PLUGINS / "bridge").exists(), reason="needs containernetworking-plugins"),
]

KILLS = int(os.environ.get("EDGELET_CHAOS_KILLS", "20"))
SEED = int(os.environ.get("EDGELET_CHAOS_SEED", "16"))


@pytest.mark.timeout(max(900, KILLS * 60))
def test_chaos_campaign_leaves_no_violation(agent, network, busybox_archive, record_property):
    def say(line: str) -> None:
        print(line, flush=True)

    campaign = Campaign(agent, network, seed=SEED, kills=KILLS, base_archive=busybox_archive, say=say)
    try:
        report = campaign.run()
    finally:
        if agent.proc is not None:
            campaign.kill()
    record_property("summary", report.summary() + f"  (EDGELET_CHAOS_KILLS={KILLS} EDGELET_CHAOS_SEED={SEED})")
    assert report.violations == [], "\n".join(report.violations[:40])


def test_the_checks_see_each_kind_of_leftover(agent, network, busybox_archive):
    """The invariants are not vacuous: a stray file of each kind the campaign looks for is reported."""
    campaign = Campaign(agent, network, seed=1, kills=0, base_archive=busybox_archive, say=print)
    campaign.add("svc")
    campaign.start()
    campaign.settle_and_check()
    assert campaign.report.violations == []
    p = agent.paths
    stray = "f" * 64
    (p.run_dir / "exits" / stray).write_text("0")
    (p.root_dir / "pods" / "0").mkdir()
    (p.run_dir / "socks").mkdir(exist_ok=True)
    (p.run_dir / "socks" / stray).symlink_to(p.root_dir / "pods" / "0")  # conmon's link to a bundle
    (p.root_dir / "cni" / f"{stray}.json").write_text("{}")
    (p.run_dir / "netns").mkdir(exist_ok=True)
    (p.run_dir / "netns" / stray).touch()
    # One look, as the agent cleans some of them up (a pod dir is an orphan to it) while a confirming one waits.
    found = "\n".join(campaign.check_invariants(confirm=False))
    for what in (
        "exits/ffffffffffff",
        f"socks/ffffffffffff -> {p.root_dir / 'pods' / '0'}",
        "pod dir 0",
        f"cni cache {stray[:24]}",
        f"netns {stray[:12]}",
    ):
        assert what in found, (what, found)
    for f in (
        p.run_dir / "exits" / stray,
        p.run_dir / "socks" / stray,
        p.root_dir / "cni" / f"{stray}.json",
        p.run_dir / "netns" / stray,
    ):
        f.unlink()
    (p.root_dir / "pods" / "0").rmdir()
    assert campaign.check_invariants() == []
    campaign.kill()
