"""Packaging: the default config stays in sync with the settings, units verify, the .deb installs, arm64 dry run.

The .deb tests install into a throwaway dpkg root (its own admindir, maintainer
scripts run chrootless with DPKG_ROOT set, systemctl stubbed), never into this
machine's. The stub-binary variant runs everywhere; the real-binary variant
needs EDGELET_BIN (make test-binary) and is marked slow.
"""

from __future__ import annotations

import configparser
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from edgelet.settings import KEYS, load_settings
from edgelet.update.release import release_number

REPO = Path(__file__).resolve().parents[2]
PACKAGING = REPO / "packaging"
CONFIG = PACKAGING / "config.toml"
VERSION = re.search(r'^__version__ = "([^"]+)"', (REPO / "edgelet" / "__init__.py").read_text(), re.M).group(1)


# --- config.toml ----------------------------------------------------------------


def test_config_toml_names_every_key() -> None:
    text = CONFIG.read_text()
    missing = [key for key in KEYS if not re.search(rf"^#\[?{re.escape(key)}\b", text, re.M)]
    assert not missing, f"packaging/config.toml lacks {missing}: add each, commented out, with its default"


def test_config_toml_commented_values_are_the_defaults(tmp_path: Path) -> None:
    """Uncommenting every `#key = value` line changes nothing: the file shows the real defaults."""
    lines = CONFIG.read_text().splitlines()
    uncommented = []
    for line in lines:
        if line.startswith("#["):
            break  # the example tables at the end are examples, not defaults
        match = re.match(r"#([a-z_]+) = ", line)
        if match:
            assert match.group(1) in KEYS, f"config.toml shows unknown key {match.group(1)}"
            uncommented.append(line[1:])
    shown = tmp_path / "shown.toml"
    shown.write_text("\n".join(uncommented) + "\n")
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    assert load_settings(config=shown, env={}) == load_settings(config=empty, env={})


def test_config_toml_example_tables_parse(tmp_path: Path) -> None:
    text = CONFIG.read_text()
    tail = text[text.index("\n#[") + 1 :]
    example = tmp_path / "example.toml"
    example.write_text("\n".join(line[1:] for line in tail.splitlines() if line.startswith("#")) + "\n")
    settings = load_settings(config=example, env={})
    assert dict(settings.registries)["docker.io"].mirrors
    assert dict(settings.runtime_handlers)["crun-test"].root is not None


# --- systemd units and CNI ---------------------------------------------------------


def read_unit(name: str) -> configparser.ConfigParser:
    unit = configparser.ConfigParser(interpolation=None, strict=True)
    unit.optionxform = str  # keys are case-sensitive
    unit.read_string((PACKAGING / name).read_text())
    return unit


def test_agent_unit() -> None:
    service = read_unit("edgelet.service")["Service"]
    assert service["Type"] == "notify"
    assert service["KillMode"] == "process"  # stopping edgelet never kills pods
    assert service["Restart"] == "always"
    assert service["WatchdogSec"]
    assert service["NotifyAccess"] == "all"  # the one-file build's agent is the bootloader's child
    assert service["ExecStart"] == "/usr/lib/edgelet/launch"  # counts a self-update's starts, then runs current
    # A release hung before READY=1 is killed within minutes; a slow start that moves extends it (sdnotify.py).
    assert service["TimeoutStartSec"] == "90s"
    # A burst of failed starts (a self-update's counted attempts) must never stop the restarts for good.
    assert read_unit("edgelet.service")["Unit"]["StartLimitIntervalSec"] == "0"


def test_runonce_unit() -> None:
    unit = read_unit("edgelet-runonce.service")
    assert unit["Service"]["Type"] == "oneshot"
    assert unit["Service"]["ExecStart"].split()[1:] == ["--runonce"]
    assert unit["Service"]["KillMode"] == "process"
    # The card's pods run before the network is online (issue 24): no wait for DHCP or a cable.
    assert {"network.target", "local-fs.target"} <= set(unit["Unit"]["After"].split())
    assert "network-online.target" not in unit["Unit"]["After"] and "Wants" not in unit["Unit"]
    assert "edgelet.service" in unit["Unit"]["Before"].split()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    # verify insists that ExecStart exists: point it at a stub.
    stub = tmp_path / "edgelet"
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(0o755)
    units = []
    for name in ("edgelet.service", "edgelet-runonce.service"):
        unit = tmp_path / name
        text = (PACKAGING / name).read_text()
        unit.write_text(text.replace("/usr/lib/edgelet/launch", str(stub)).replace("/usr/bin/edgelet", str(stub)))
        units.append(str(unit))
    out = subprocess.run(["systemd-analyze", "verify", *units], capture_output=True, text=True, timeout=60)
    # Unknown keys are only warnings (exit 0): no output at all is the bar.
    assert out.returncode == 0 and not out.stdout.strip() and not out.stderr.strip(), out.stdout + out.stderr


def test_cni_conflist() -> None:
    conf = json.loads((PACKAGING / "10-edgelet.conflist").read_text())
    assert conf["cniVersion"] and conf["name"] == "edgelet"
    types = [plugin["type"] for plugin in conf["plugins"]]
    assert types[0] == "bridge" and "portmap" in types
    if Path("/usr/lib/cni").is_dir():
        assert [t for t in types + ["host-local"] if not (Path("/usr/lib/cni") / t).exists()] == []


# --- arm64 recipe --------------------------------------------------------------------


def test_build_arm64_dry_run_prints_every_step_and_does_nothing(tmp_path: Path) -> None:
    root = tmp_path / "arm64-root"
    out = subprocess.run(
        [str(PACKAGING / "build-arm64.sh"), "--dry-run", "--deb"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "ARM64_ROOT": str(root), "IMAGE_BASE_CACHE": str(tmp_path / "base-cache")},
    )
    assert out.returncode == 0, out.stderr
    commands = [line[2:] for line in out.stdout.splitlines() if line.startswith("+ ")]
    expected_in_order = [
        "update-binfmts --enable qemu-aarch64",
        "mmdebstrap --arch=arm64 --variant=minbase --mode=root --include=",
        f"mount -t proc proc {root}/proc",
        f"chroot {root} env -i PATH=",  # pip install, in a clean environment
        "EDGELET_ONEDIR=1 /bin/sh -ec",  # pyinstaller, one-dir as on x86_64: nothing unpacked at every command
        f"cp -a {root}/src/dist/onedir/edgelet {REPO}/dist/arm64/edgelet",
        f"chroot {root} /src/dist/onedir/edgelet/edgelet version",
        f"chroot '{root}' /src/dist/onedir/edgelet/edgelet check",
        "build-deb.sh --arch arm64",
    ]
    position = 0
    for wanted in expected_in_order:
        found = next((i for i, c in enumerate(commands[position:], position) if wanted in c), None)
        assert found is not None, f"step {wanted!r} missing or out of order in:\n" + "\n".join(commands)
        position = found + 1
    assert not root.exists() and not (tmp_path / "base-cache").exists(), "--dry-run created the arm64 root"


def test_arm64_binary_names_the_newest_commit_that_changed_its_inputs(tmp_path: Path) -> None:
    # A docs-only commit keeps the name (and the cached one-dir build, keyed by the inputs' contents); an
    # edit of the code makes it -dirty.
    repo = tmp_path / "repo"
    (repo / "edgelet").mkdir(parents=True)
    (repo / "edgelet" / "x.py").write_text("x = 1\n")
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(repo), *args], env=env, check=True, capture_output=True, text=True
        ).stdout.strip()

    def onedir_commit() -> str:
        script = f"dry_run=1; REPO={repo}; . {PACKAGING}/common.sh; onedir_commit"
        return subprocess.run(["bash", "-c", script], check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "code")
    code = git("rev-parse", "--short=12", "HEAD")
    (repo / "README.md").write_text("docs\n")
    git("add", ".")
    git("commit", "-qm", "docs")
    assert onedir_commit() == code
    (repo / "edgelet" / "x.py").write_text("x = 2\n")
    assert onedir_commit() == f"{code}-dirty"


# --- the .deb ------------------------------------------------------------------------


def build_deb(binary: Path, output: Path) -> Path:
    out = subprocess.run(
        [str(PACKAGING / "build-deb.sh"), "--output", str(output), str(binary)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHON": sys.executable},  # writes the release's release.json
    )
    assert out.returncode == 0, out.stderr
    deb = Path(out.stdout.strip().splitlines()[-1])
    assert deb.parent == output and deb.name.startswith(f"edgelet_{VERSION}_") and deb.suffix == ".deb"
    return deb


class DpkgRoot:
    """A throwaway dpkg root: `dpkg --root` with maintainer scripts run chrootless (DPKG_ROOT set)."""

    def __init__(self, base: Path) -> None:
        self.root = base / "root"
        admin = self.root / "var" / "lib" / "dpkg"
        for d in (admin / "info", admin / "updates", admin / "triggers"):
            d.mkdir(parents=True)
        (admin / "status").write_text("")
        (admin / "available").write_text("")
        # Record what the maintainer scripts ask of systemd: nothing may be started.
        self.stubs = base / "stubs"
        self.stubs.mkdir()
        self.calls = base / "systemctl-calls"
        for name in ("systemctl", "deb-systemd-invoke"):
            stub = self.stubs / name
            stub.write_text(f'#!/bin/sh\necho "{name} $*" >> {self.calls}\n')
            stub.chmod(0o755)
        self.log = base / "dpkg.log"

    def dpkg(self, *args: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "PATH": f"{self.stubs}:/usr/sbin:/usr/bin:/sbin:/bin"}
        out = subprocess.run(
            [
                "dpkg",
                f"--root={self.root}",
                f"--log={self.log}",
                "--force-script-chrootless",
                "--force-depends",
                "--no-triggers",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        return out

    def systemctl_calls(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []


def check_installed(deb: Path, base: Path) -> DpkgRoot:
    fields = subprocess.run(["dpkg-deb", "--field", str(deb)], capture_output=True, text=True, check=True).stdout
    assert f"Version: {VERSION}\n" in fields
    # runc is the default handler; crun is the second (pods pick it with runtimeClassName).
    assert re.search(r"^Depends: .*runc, conmon, catatonit$", fields, re.M), fields
    assert "Recommends: containernetworking-plugins, zstd, crun" in fields  # zstd layers and .tar.zst imports

    target = DpkgRoot(base)
    target.dpkg("--install", str(deb))
    root = target.root
    edgelet = root / "usr" / "bin" / "edgelet"
    assert os.access(edgelet, os.X_OK)
    for path in (
        "lib/systemd/system/edgelet.service",
        "lib/systemd/system/edgelet-runonce.service",
        "usr/share/edgelet/10-edgelet.conflist",
        "etc/kubernetes/manifests",
    ):
        assert (root / path).exists(), path
    assert (root / "etc/edgelet/config.toml").read_text() == CONFIG.read_text()
    assert ((root / "var/lib/edgelet").stat().st_mode & 0o777) == 0o700
    assert (root / "var/lib/dpkg/info/edgelet.conffiles").read_text().split() == ["/etc/edgelet/config.toml"]
    # Enabled (the real deb-systemd-helper, honouring DPKG_ROOT) but not started.
    wants = root / "etc/systemd/system/multi-user.target.wants"
    assert (wants / "edgelet.service").is_symlink()
    assert not (wants / "edgelet-runonce.service").exists()
    assert not [c for c in target.systemctl_calls() if re.search(r"\b(start|restart|try-restart)\b", c)]

    # A local edit of the conffile survives removal; purge takes it and the enablement away.
    (root / "etc/edgelet/config.toml").write_text("verbosity = 2\n")
    target.dpkg("--remove", "edgelet")
    assert not edgelet.exists() and not edgelet.is_symlink()
    assert (root / "etc/edgelet/config.toml").read_text() == "verbosity = 2\n"
    target.dpkg("--purge", "edgelet")
    assert not (root / "etc/edgelet/config.toml").exists()
    assert not (wants / "edgelet.service").exists()
    return target


@pytest.mark.parametrize("layout", ["onefile", "onedir"])
def test_deb_around_a_stub_binary_installs_enables_and_purges(tmp_path: Path, layout: str) -> None:
    if shutil.which("dpkg-deb") is None or shutil.which("deb-systemd-helper") is None:
        pytest.skip("needs dpkg-deb and deb-systemd-helper (Debian)")
    script = "#!/bin/sh\necho stub edgelet\n"
    if layout == "onefile":
        binary = tmp_path / "edgelet"
        binary.write_text(script)
    else:
        binary = tmp_path / "onedir" / "edgelet"
        (binary / "_internal").mkdir(parents=True)
        (binary / "_internal" / "libpython.so").write_text("")
        (binary / "edgelet").write_text(script)
    (binary if layout == "onefile" else binary / "edgelet").chmod(0o755)
    deb = build_deb(binary, tmp_path / "out")
    contents = subprocess.run(["dpkg-deb", "--contents", str(deb)], capture_output=True, text=True, check=True).stdout
    assert "./usr/lib/edgelet/launch" in contents
    if layout == "onedir":
        # The releases layout self-update swaps (docs/self-update.md).
        assert "./usr/bin/edgelet -> ../lib/edgelet/current/edgelet" in contents
        assert f"./usr/lib/edgelet/current -> releases/{release_number(VERSION)}" in contents
        assert f"./usr/lib/edgelet/releases/{release_number(VERSION)}/_internal/libpython.so" in contents
        assert f"./usr/lib/edgelet/releases/{release_number(VERSION)}/release.json" in contents
    check_installed(deb, tmp_path / "install")


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("EDGELET_BIN"), reason="needs the frozen binary: make test-binary")
def test_deb_of_the_frozen_binary_installs_and_runs(tmp_path: Path) -> None:
    binary = Path(os.environ["EDGELET_BIN"]).resolve()
    if (binary.parent / "_internal").is_dir():  # the one-dir build: package the whole directory, as `make deb`
        binary = binary.parent
    deb = build_deb(binary, tmp_path / "out")
    target = DpkgRoot(tmp_path / "install")
    target.dpkg("--install", str(deb))
    out = subprocess.run(
        [str(target.root / "usr/bin/edgelet"), "version", "--config", "/dev/null"],
        env={},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and out.stdout.startswith(f"edgelet {VERSION} (commit "), out.stdout + out.stderr
    target.dpkg("--purge", "edgelet")
