"""The update manager without an agent: real releases, real minisign signatures and real symlink swaps on temp
dirs, a fake clock, and a restart that is only recorded. Applying a card release, what a trial record means at
the next start, a trial committed, and a trial rolled back."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import msgspec
import pytest

from edgelet.events import EventRecorder
from edgelet.testing.signing import MinisignKey, missing_tools, trusted_dir
from edgelet.trust.keys import load_trusted_keys
from edgelet.update import RELEASE_JSON
from edgelet.update.decide import PodInstance, TrialRecord
from edgelet.update.manager import AgentView, UpdateManager
from edgelet.update.release import ReleaseInfo, describe_tree, own_arch, pack_release
from edgelet.update.stage import ENV_RELEASE_DIR, current_target
from edgelet.update.store import UpdateStore
from edgelet.util.clock import FakeClock, read_boot_id

pytestmark = pytest.mark.skipif(bool(missing_tools()), reason=f"needs {missing_tools()} (make deps)")

PODS = {"default/web/app": PodInstance("a" * 64, 4242)}


def onedir(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "edgelet").write_text("#!/bin/sh\n")
    (path / "edgelet").chmod(0o755)
    return path


class Device:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.key = MinisignKey.generate(tmp_path / "k")
        self.keys = load_trusted_keys(trusted_dir(tmp_path / "k" / "trusted", self.key))
        self.lib = tmp_path / "lib"
        self.old = onedir(self.lib / "releases" / "1000")
        info = ReleaseInfo(version=1000, label="0.1.0", arch=own_arch(), files=describe_tree(self.old))
        (self.old / RELEASE_JSON).write_bytes(msgspec.json.encode(info))
        self.current = self.lib / "current"
        os.symlink(self.old, self.current)
        self.card = tmp_path / "card"
        (self.card / "update").mkdir(parents=True)
        self.releases = tmp_path / "root" / "releases"
        self.store = UpdateStore(tmp_path / "root" / "update")
        self.clock = FakeClock(start=time.time())
        self.events = EventRecorder(self.clock)
        self.restarts = 0
        self.pods: dict[str, PodInstance] | None = dict(PODS)
        self.lease_link = False  # a kubeconfig
        self.lease_live = False  # the Lease renewed lately

    def manager(self) -> UpdateManager:
        def restart() -> None:
            self.restarts += 1

        async def healthz() -> bool:
            return True

        return UpdateManager(
            store=self.store,
            releases_dir=self.releases,
            current=self.current,
            keys=self.keys,
            card_dir=self.card,
            clock=self.clock,
            events=self.events,
            node="edge1",
            view=AgentView(
                pods=lambda: self.pods,
                healthz=healthz,
                lease_link=lambda: self.lease_link,
                lease_renewed_since=lambda t: False,
                lease_live=lambda: self.lease_live,
            ),
            restart=restart,
            environ={ENV_RELEASE_DIR: os.path.realpath(self.current)},
        )

    def publish(self, version: int) -> Path:
        out = self.card / "update" / f"edgelet-{version}-{own_arch()}.tar.xz"
        work = self.tmp / f"w{version}"
        pack_release(onedir(work / "od"), work / out.name, version=version, arch=own_arch())
        self.key.sign(work / out.name, version=version, out=Path(str(out) + ".minisig"))
        os.replace(work / out.name, out)
        return out

    def reasons(self) -> list[str]:
        return [e.reason for e in self.events.events()]


async def run_until_applied(m: UpdateManager) -> None:
    await asyncio.wait_for(m.run(), 30)


def test_a_card_release_is_staged_recorded_and_swapped_then_the_agent_restarts(tmp_path: Path) -> None:
    d = Device(tmp_path)
    d.publish(1001)  # its mtime is now: left to settle first, never refused as a short archive
    m = d.manager()
    m.begin()
    asyncio.run(run_until_applied(m))
    assert d.restarts == 1 and m.phase == "restarting"
    assert current_target(d.current) == str(d.releases / "1001")
    trial = d.store.trial()
    assert trial is not None and (trial.version, trial.previous, trial.attempts) == (1001, str(d.old), 0)
    assert d.store.snapshot(read_boot_id()) == (PODS, False)
    assert [e["outcome"] for e in d.store.history()] == ["started"]
    assert d.reasons() == ["UpdateStarted"]


def test_the_swap_waits_for_the_agents_pods_to_settle_so_the_snapshot_is_whole(tmp_path: Path) -> None:
    # Before its first full sync the agent has no pods to show, then a sandbox is still being started: a
    # snapshot taken then would leave the container the old agent was starting out of the trial's comparison.
    d = Device(tmp_path)
    d.publish(1001)
    seen = iter([None, None, {}, {}, PODS])
    d.pods = None
    m = d.manager()

    def pods() -> dict[str, PodInstance] | None:
        d.pods = next(seen, d.pods)
        return d.pods

    m.view = replace(m.view, pods=pods)
    asyncio.run(run_until_applied(m))
    assert d.restarts == 1
    assert d.store.snapshot(read_boot_id()) == (PODS, False)


@pytest.mark.parametrize(("live", "needed"), [(False, False), (True, True)])
def test_the_trial_asks_for_a_lease_only_when_the_old_agent_reached_the_apiserver(
    tmp_path: Path, live: bool, needed: bool
) -> None:
    """A kubeconfig whose apiserver the old agent never reached (the emulated Pi's, a device whose link is down)
    must not hold every trial until its deadline: only a Lease renewed lately counts as a link."""
    d = Device(tmp_path)
    d.lease_link, d.lease_live = True, live
    d.publish(1001)
    asyncio.run(run_until_applied(d.manager()))
    assert d.store.snapshot(read_boot_id())[1] is needed


def test_the_new_agent_commits_its_trial_and_removes_older_releases(tmp_path: Path) -> None:
    d = Device(tmp_path)
    d.publish(1001)
    first = d.manager()
    asyncio.run(run_until_applied(first))
    (d.releases / "999").mkdir()  # an older staged release
    d.store.write_trial(replace(d.store.trial(), attempts=1))  # type: ignore[type-var]
    new = d.manager()  # started from current: the release on trial
    new.begin()
    assert new.phase == "trial" and new.condition() is not None
    d.publish(1002)
    asyncio.run(asyncio.wait_for(new.run(), 30))  # commits, then applies 1002 from the card
    outcomes = [(e["outcome"], e["version"]) for e in d.store.history()]
    assert outcomes[:3] == [("started", 1001), ("committed", 1001), ("started", 1002)]
    assert not (d.releases / "999").exists() and d.old.is_dir()  # the previous release is the .deb's: kept
    assert "UpdateCommitted" in d.reasons()


def test_a_restarted_pod_rolls_the_trial_back_and_the_previous_agent_records_it(tmp_path: Path) -> None:
    d = Device(tmp_path)
    d.publish(1001)
    asyncio.run(run_until_applied(d.manager()))
    d.pods = {"default/web/app": PodInstance("b" * 64, 5151)}
    new = d.manager()
    new.begin()
    asyncio.run(asyncio.wait_for(new.run(), 30))
    assert d.restarts == 2 and current_target(d.current) == str(d.old)
    trial = d.store.trial()
    assert trial is not None and trial.outcome == "rolled-back" and "default/web/app was restarted" in trial.reason
    old = d.manager()  # the launcher starts the previous release
    old.begin()
    assert d.store.trial() is None and d.store.rolled_back_versions() == {1001}
    assert not (d.releases / "1001").exists()
    assert d.reasons()[-1] == "UpdateRolledBack"
    assert old.outcomes() == ({"started": 1, "rolled-back": 1}, False)
    # The same release again is refused as a replay, with an event.
    asyncio.run(asyncio.wait_for(_one_scan(old), 30))
    assert d.store.history()[-1]["outcome"] == "refused" and "rolled back before" in d.store.history()[-1]["reason"]


async def _one_scan(m: UpdateManager) -> None:
    task = asyncio.ensure_future(m.run())
    for _ in range(200):
        await asyncio.sleep(0.02)
        if m.last_problem:
            break
    task.cancel()


@pytest.mark.parametrize("attempts, want_history", [(0, []), (2, ["rolled-back"])])
def test_a_record_whose_target_is_not_current(tmp_path: Path, attempts: int, want_history: list[str]) -> None:
    """No start counted: the swap never happened (forgotten); starts counted: a rollback whose outcome was lost."""
    d = Device(tmp_path)
    d.store.write_trial(
        TrialRecord(version=1001, target=str(d.releases / "1001"), previous=str(d.old), attempts=attempts)
    )
    d.manager().begin()
    assert d.store.trial() is None
    assert [e["outcome"] for e in d.store.history()] == want_history


def test_without_trusted_keys_updates_are_off(tmp_path: Path) -> None:
    d = Device(tmp_path)
    d.keys = None  # type: ignore[assignment]
    m = d.manager()
    assert m.off_reason() == "no --trusted-keys: releases cannot be verified"
    d.publish(1001)
    asyncio.run(asyncio.wait_for(m.run(), 5))  # returns at once
    assert current_target(d.current) == str(d.old) and d.store.history() == []


def test_a_release_still_being_copied_is_left_to_settle(tmp_path: Path) -> None:
    d = Device(tmp_path)
    full = d.publish(1001)
    data = full.read_bytes()
    full.write_bytes(data[: len(data) // 2])  # a copy in progress: changed just now
    m = d.manager()
    assert m._new_releases(d.card / "update") == [None]
    full.write_bytes(data)
    d.clock.advance(3.0)
    assert m._new_releases(d.card / "update") == [full]
    assert m._new_releases(d.card / "update") == []  # looked at once until it changes again


def test_a_release_that_did_not_fit_is_tried_again_once_its_delay_passed(tmp_path: Path) -> None:
    """A full disk is this device's problem, not the release's: the same file on the card is staged again after
    a minute (doubling), and applied once there is room; a refused release is not looked at again."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    d = Device(tmp_path)
    d.releases.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(d.releases)], check=True)
    try:
        filler = d.releases / "filler"
        with open(filler, "wb") as f:  # the disk full but for a page or two
            while os.statvfs(d.releases).f_bavail > 1:
                f.write(b"x" * 4096)
                f.flush()
        path = d.publish(1001)
        d.clock.advance(3.0)
        m = d.manager()
        assert m._new_releases(d.card / "update") == [path]
        assert asyncio.run(m._try(path)) is False
        assert "No space left on device" in d.store.history()[-1]["reason"]
        d.clock.advance(30.0)
        assert m._new_releases(d.card / "update") == []  # not before its delay
        d.clock.advance(31.0)
        assert m._new_releases(d.card / "update") == [path]
        assert m._new_releases(d.card / "update") == []  # once per delay
        assert asyncio.run(m._try(path)) is False  # still full: the next delay doubles
        d.clock.advance(61.0)
        assert m._new_releases(d.card / "update") == []
        filler.unlink()
        d.clock.advance(60.0)
        asyncio.run(run_until_applied(m))
        assert current_target(d.current) == str(d.releases / "1001") and d.restarts == 1
    finally:
        subprocess.run(["umount", "-l", str(d.releases)], check=True)


def test_a_refused_release_is_not_tried_again(tmp_path: Path) -> None:
    d = Device(tmp_path)
    path = d.publish(999)  # older than the running 1000
    d.clock.advance(3.0)
    m = d.manager()
    assert m._new_releases(d.card / "update") == [path]
    assert asyncio.run(m._try(path)) is False
    d.clock.advance(7200.0)
    assert m._new_releases(d.card / "update") == []
    # Every start of the agent reads the card's old releases again: refused again, recorded once.
    other = d.publish(998)
    d.clock.advance(3.0)
    assert asyncio.run(m._try(other)) is False
    for _ in range(2):
        again = d.manager()
        assert asyncio.run(again._try(path)) is False and asyncio.run(again._try(other)) is False
    assert [e.get("release") for e in d.store.history()] == [str(path), str(other)]


class _Server:
    """A loopback HTTP server of files (with an ETag and 304s); `short` serves the archive cut short."""

    def __init__(self, root: Path) -> None:
        import http.server
        import threading

        server_root = root
        outer = self
        self.short = False
        self.requests: list[str] = []
        self.authorization: list[str | None] = []  # each request's Authorization header

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests.append(self.path)
                outer.authorization.append(self.headers.get("Authorization"))
                path = server_root / self.path.lstrip("/")
                if not path.is_file():
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = path.read_bytes()
                etag = f'"{hash(data) & 0xFFFFFFFF:x}"'
                if self.headers.get("If-None-Match") == etag:
                    self.send_response(304)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("ETag", etag)
                self.end_headers()
                self.wfile.write(data[: len(data) // 2] if outer.short and path.suffix == ".xz" else data)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def serve_release(d: Device, version: int) -> tuple[Path, _Server]:
    """A signed release published on a loopback server instead of the card: its archive path there and the server."""
    served = d.tmp / "served"
    served.mkdir(exist_ok=True)
    archive = d.publish(version)
    os.replace(archive, served / archive.name)
    os.replace(str(archive) + ".minisig", str(served / archive.name) + ".minisig")
    return served / archive.name, _Server(served)


def test_a_release_from_the_update_url_is_downloaded_with_its_signature_and_applied(tmp_path: Path) -> None:
    from edgelet.update.errors import StagingError
    from edgelet.update.fetch import UrlReleases

    d = Device(tmp_path)
    archive, server = serve_release(d, 1001)
    try:
        source = UrlReleases(f"{server.url}/{archive.name}", d.releases / ".download")
        server.short = True
        with pytest.raises(StagingError, match="short download|cannot download"):
            asyncio.run(source.fetch())
        assert current_target(d.current) == str(d.old)  # a short download changes nothing
        server.short = False
        d.card = None  # type: ignore[assignment]  # the URL alone
        m = d.manager()
        kept = d.store.dir / "url-validators.json"
        m.url_source, m.url_period = UrlReleases(source.url, source.download_dir, validators_file=kept), 0.01
        asyncio.run(asyncio.wait_for(m.run(), 30))
        assert current_target(d.current) == str(d.releases / "1001") and d.restarts == 1
        assert f"/{archive.name}.minisig" in server.requests
        assert [e["outcome"] for e in d.store.history()] == ["started"]
        # The agent it starts (or the next boot) asks with the kept validators: a 304, nothing downloaded again.
        again = UrlReleases(source.url, source.download_dir, validators_file=kept)
        assert asyncio.run(_fetch_twice(again)) == (None, None)
        again.forget()  # as after a staging that failed on this device
        first, second = asyncio.run(_fetch_twice(UrlReleases(source.url, source.download_dir, validators_file=kept)))
        assert first is not None and second is None  # downloaded once more, then unchanged
    finally:
        server.close()


def test_a_kill_during_the_download_changes_nothing_and_the_next_start_downloads_again(tmp_path: Path) -> None:
    from edgelet.update.fetch import UrlReleases

    d = Device(tmp_path)
    archive, server = serve_release(d, 1001)
    try:
        url, download, kept = (
            f"{server.url}/{archive.name}",
            d.releases / ".download",
            d.store.dir / "url-validators.json",
        )
        fetch = (
            "import asyncio; from pathlib import Path; from edgelet.update.fetch import UrlReleases; "
            f"asyncio.run(UrlReleases({url!r}, Path({str(download)!r}), validators_file=Path({str(kept)!r})).fetch())"
        )
        env = {**os.environ, "EDGELET_TEST_CRASH_AT": "update.download"}
        killed = subprocess.run([sys.executable, "-c", fetch], env=env, capture_output=True, timeout=120)
        assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]
        assert not (download / archive.name).exists() and not kept.exists()  # only a .part, no validators
        assert current_target(d.current) == str(d.old) and d.store.history() == []
        # The next start removes the .part even when the URL is no longer configured (or the release is gone).
        (part,) = download.glob(".*.part")
        d.manager().begin()
        assert not part.exists()
        d.card = None  # type: ignore[assignment]  # the URL alone
        m = d.manager()
        m.url_source, m.url_period = UrlReleases(url, download, validators_file=kept), 0.01
        asyncio.run(asyncio.wait_for(m.run(), 30))
        assert current_target(d.current) == str(d.releases / "1001") and d.restarts == 1
    finally:
        server.close()


def test_the_update_urls_own_headers_and_header_file_go_with_every_request(tmp_path: Path) -> None:
    from edgelet.update.errors import StagingError
    from edgelet.update.fetch import UrlReleases

    d = Device(tmp_path)
    archive, server = serve_release(d, 1001)
    header_file = tmp_path / "update-headers"
    try:
        header_file.write_text("# rotated on disk\nAuthorization: Bearer first\n")
        source = UrlReleases(
            f"{server.url}/{archive.name}",
            d.releases / ".download",
            headers=(("X-Fleet", "a"),),
            header_file=header_file,
        )
        assert asyncio.run(source.fetch()) == source.archive_path
        assert server.authorization == ["Bearer first", "Bearer first"]  # the archive and its signature
        header_file.write_text("Authorization: Bearer second\n")
        source.forget()
        assert asyncio.run(_fetch_twice(source))[0] is not None
        assert server.authorization[2:4] == ["Bearer second", "Bearer second"]  # read again at each poll
        header_file.write_text("Authorization Bearer secret-token\n")
        with pytest.raises(StagingError) as raised:
            asyncio.run(UrlReleases(source.url, source.download_dir, header_file=header_file).fetch())
        assert str(header_file) in str(raised.value) and "line 1" in str(raised.value)
        assert "secret-token" not in str(raised.value)
        header_file.write_bytes(b"Authorization: Bearer \xffsecret\n")
        with pytest.raises(StagingError, match="not UTF-8 text") as raised:
            asyncio.run(UrlReleases(source.url, source.download_dir, header_file=header_file).fetch())
        assert "secret" not in str(raised.value) and "xff" not in str(raised.value)
        header_file.unlink()
        with pytest.raises(StagingError, match="cannot read --update-url-header-file"):
            asyncio.run(UrlReleases(source.url, source.download_dir, header_file=header_file).fetch())
        assert len(server.authorization) == 5  # neither bad header file sent a request
    finally:
        server.close()


async def _fetch_twice(source) -> tuple[Path | None, Path | None]:
    try:
        return await source.fetch(), await source.fetch()
    finally:
        await source.aclose()


def test_a_rollback_keeps_the_release_the_running_one_replaced(tmp_path: Path) -> None:
    """1001 committed over 1000 (both staged), 1002 rolled back: 1002 goes, 1001 and 1000 stay."""
    d = Device(tmp_path)
    for version in (1000, 1001, 1002):
        onedir(d.releases / str(version))
    (d.releases / "1001" / RELEASE_JSON).write_bytes(
        msgspec.json.encode(ReleaseInfo(version=1001, arch=own_arch(), files=describe_tree(d.releases / "1001")))
    )
    os.unlink(d.current)
    os.symlink(d.releases / "1001", d.current)
    d.store.append({"time": 1, "version": 1001, "outcome": "committed", "previous": str(d.releases / "1000")})
    d.store.write_trial(
        TrialRecord(version=1002, target=str(d.releases / "1002"), previous=str(d.releases / "1001"), attempts=3)
    )
    d.manager().begin()
    assert sorted(p.name for p in d.releases.iterdir()) == ["1000", "1001"]
