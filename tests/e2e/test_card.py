"""The card folder end to end (issue 24): its manifests run at boot (--runonce) and are adopted, its images are
imported, edits while running are seen, a name both folders hold is reported, a bad config.toml is ignored."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest

from tests.e2e.conftest import sleeper_yaml, wait_for

pytestmark = pytest.mark.privileged

CARD_IMAGE = "edgelet.local/card-only:1"  # present nowhere but in the card's images/


@pytest.fixture(scope="module")
def card_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from edgelet.testing.images import build_busybox_image

    return build_busybox_image(tmp_path_factory.mktemp("card-image") / "card.oci.tar", name=CARD_IMAGE)


def _signing_node(agent, tmp_path: Path):
    """A minisign key trusted by the node (its directory for --trusted-keys) and the fixture's archive signed."""
    from edgelet.testing.signing import MinisignKey, missing_tools, trusted_dir

    if missing_tools():
        pytest.skip(f"needs {missing_tools()} (make deps)")
    minisign = MinisignKey.generate(tmp_path / "k")
    keys = trusted_dir(tmp_path / "trusted", minisign)
    [node_archive] = (agent.paths.root_dir / "images" / "import").glob("*.tar")
    minisign.sign(node_archive, version=1)
    return minisign, keys


def test_card_pods_run_at_boot_are_adopted_and_edits_are_seen(agent, tmp_path: Path, card_archive: Path) -> None:
    card = tmp_path / "card"
    (card / "manifests").mkdir(parents=True)
    (card / "images").mkdir()
    shutil.copy(card_archive, card / "images" / card_archive.name)
    (card / "config.toml").write_text('manifest_ur = "http://192.0.2.1/pods"\n')  # a typo: reported, ignored
    agent.write_manifest("web.yaml", sleeper_yaml("web", policy="Never"))
    (card / "manifests" / "sensor.yaml").write_text(sleeper_yaml("sensor", CARD_IMAGE, policy="Never"))
    clash = card / "manifests" / "web.yaml"
    clash.write_text(sleeper_yaml("web", CARD_IMAGE, policy="Never"))

    res = agent.run_once("--card-dir", str(card), "--runonce-timeout", "90s")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "sensor-testnode" in res.stdout and "web-testnode" in res.stdout
    assert "Card configuration ignored" in res.stderr + res.stdout
    assert "unknown key 'manifest_ur'" in res.stderr + res.stdout
    started = {c["id"] for c in agent.containers_of("sensor") if c["status"] == "running"}
    assert started

    agent.start("--card-dir", str(card))
    wait_for(lambda: "edgelet started" in agent.log(), what="the daemon to start")
    wait_for(lambda: (r := agent.pod("sensor")) and r["status"] == "Running", what="sensor Running")
    # Adopted, not restarted: the containers --runonce started.
    assert {c["id"] for c in agent.containers_of("sensor") if c["status"] == "running"} == started
    (rejected,) = wait_for(lambda: agent.snapshot()["rejected"], what="the name clash reported")
    assert rejected["origin"] == str(clash) and str(agent.manifests / "web.yaml") in rejected["message"]
    assert "Card configuration ignored" in agent.log()

    # A pod written onto the card while edgelet runs.
    (card / "manifests" / "later.yaml").write_text(sleeper_yaml("later", CARD_IMAGE, policy="Never"))
    try:
        wait_for(lambda: (r := agent.pod("later")) and r["status"] == "Running", what="later Running", timeout=60)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nagent log tail:\n" + "\n".join(agent.log().splitlines()[-40:])) from None
    assert agent.stop(signal.SIGTERM) == 0


def test_card_manifests_and_archives_need_signatures_with_trusted_keys(
    agent, tmp_path: Path, card_archive: Path
) -> None:
    """A card is written by a laptop: with --trusted-keys its manifests and archives are held to the same
    signatures as the node's own, so an unsigned file on the FAT partition runs nothing."""
    minisign, keys = _signing_node(agent, tmp_path)
    card = tmp_path / "card"
    (card / "manifests").mkdir(parents=True)
    (card / "images").mkdir()
    shutil.copy(card_archive, card / "images" / card_archive.name)  # unsigned: never imported
    signed = card / "manifests" / "signed.yaml"
    signed.write_text(sleeper_yaml("signed", policy="Never"))
    minisign.sign(signed, version=1)
    (card / "manifests" / "unsigned.yaml").write_text(sleeper_yaml("unsigned", policy="Never"))

    agent.start("--card-dir", str(card), "--trusted-keys", str(keys))
    wait_for(lambda: (r := agent.pod("signed")) and r["status"] == "Running", timeout=90, what="signed card pod")
    refused = wait_for(
        lambda: [
            r
            for r in agent.snapshot().get("rejected", [])
            if r["reason"] == "UntrustedManifest" and r["origin"].endswith("unsigned.yaml")
        ],
        timeout=60,
        what="the unsigned card manifest refused",
    )
    assert "signature refused (missing)" in refused[0]["message"]
    wait_for(lambda: "UntrustedArchive" in agent.cli("events"), timeout=60, what="the unsigned card archive refused")
    assert agent.pod("unsigned") is None
    assert CARD_IMAGE not in agent.cli("images", "list")
    agent.stop()


def test_the_card_cannot_turn_verification_off_nor_name_a_program(agent, tmp_path: Path) -> None:
    """The node's config file requires signatures; the card's unsigned config.toml says `trusted_keys = ""` and
    names a program on the card as the runtime. Both are ignored and reported, the card's harmless settings
    apply, an unsigned card manifest still runs nothing and the card's program never runs."""
    minisign, keys = _signing_node(agent, tmp_path)
    config = tmp_path / "config.toml"
    config.write_text(f'trusted_keys = "{keys}"\n')
    card = tmp_path / "card"
    (card / "manifests").mkdir(parents=True)
    marker = tmp_path / "card-program-ran"
    program = card / "runtime"
    program.write_text(f'#!/bin/sh\ntouch {marker}\nexec runc "$@"\n')
    program.chmod(0o755)
    (card / "config.toml").write_text(f'trusted_keys = ""\nruntime = "{program}"\nfile_check_frequency = "3s"\n')
    signed = card / "manifests" / "signed.yaml"
    signed.write_text(sleeper_yaml("signed", policy="Never"))
    minisign.sign(signed, version=1)
    (card / "manifests" / "unsigned.yaml").write_text(sleeper_yaml("unsigned", policy="Never"))

    agent.start("--card-dir", str(card), "--config", str(config))
    wait_for(lambda: (r := agent.pod("signed")) and r["status"] == "Running", timeout=90, what="signed card pod")
    wait_for(
        lambda: [
            r
            for r in agent.snapshot().get("rejected", [])
            if r["reason"] == "UntrustedManifest" and r["origin"].endswith("unsigned.yaml")
        ],
        timeout=60,
        what="the unsigned card manifest refused",
    )
    assert agent.pod("unsigned") is None
    assert not marker.exists()
    log = agent.log()
    assert "Card configuration ignored" in log and "runtime, trusted_keys cannot be set on the card" in log
    check = agent.cli("--card-dir", str(card), "check")
    assert "runtime, trusted_keys cannot be set on the card" in check, check
    assert not marker.exists()
    agent.stop()


@pytest.mark.timeout(240)
def test_named_pipes_in_the_manifest_card_and_import_dirs_stop_nothing(
    agent, tmp_path: Path, card_archive: Path
) -> None:
    """A FIFO as a manifest, as a signature, as an archive, as an archive's signature and as the card's config.toml:
    the agent starts, each is refused by name, and the signed pods beside them run (a hang fails on the timeout)."""
    import os

    minisign, keys = _signing_node(agent, tmp_path)
    agent.write_manifest("web.yaml", sleeper_yaml("web", policy="Never"))
    minisign.sign(agent.manifests / "web.yaml", version=1)
    os.mkfifo(agent.manifests / "pipe.yaml")
    agent.write_manifest("db.yaml", sleeper_yaml("db", policy="Never"))
    os.mkfifo(agent.manifests / "db.yaml.minisig")
    card = tmp_path / "card"
    (card / "manifests").mkdir(parents=True)
    (card / "images").mkdir()
    os.mkfifo(card / "config.toml")
    os.mkfifo(card / "manifests" / "pipe.yaml")
    signed = card / "manifests" / "sensor.yaml"
    signed.write_text(sleeper_yaml("sensor", CARD_IMAGE, policy="Never"))
    minisign.sign(signed, version=1)
    shutil.copy(card_archive, card / "images" / card_archive.name)
    minisign.sign(card / "images" / card_archive.name)
    os.mkfifo(card / "images" / "pipe.tar")
    imports = agent.paths.root_dir / "images" / "import"
    shutil.copy(card_archive, imports / "other.tar")
    os.mkfifo(imports / "other.tar.minisig")

    agent.start("--card-dir", str(card), "--trusted-keys", str(keys))
    for pod in ("web", "sensor"):  # the sensor's image comes only from the card's signed archive
        wait_for(lambda: (r := agent.pod(pod)) and r["status"] == "Running", timeout=90, what=f"{pod} Running")
    rejected = wait_for(
        lambda: len(rows := agent.snapshot().get("rejected", [])) >= 3 and rows,
        timeout=60,
        what="the three FIFO manifests reported",
    )
    by_origin = {r["origin"]: r["message"] for r in rejected}
    assert "not a regular file" in by_origin[str(agent.manifests / "pipe.yaml")]
    assert "not a regular file" in by_origin[str(card / "manifests" / "pipe.yaml")]
    assert "a named pipe, not a regular file" in by_origin[str(agent.manifests / "db.yaml")]
    events = wait_for(
        lambda: (out := agent.cli("events")) and "pipe.tar" in out and "other.tar" in out and out,
        timeout=60,
        what="the FIFO archive and signature refused",
    )
    assert "InvalidArchive" in events and "UntrustedArchive" in events
    assert agent.pod("db") is None
    log = agent.log()
    assert "Card configuration ignored" in log and "a named pipe, not a regular file" in log
    agent.stop()
