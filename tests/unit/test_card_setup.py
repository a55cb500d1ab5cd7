"""packaging/image/edgelet-card-setup against a temp dir standing in for / (its --root): secrets moved off the
card, hostname and authorized_keys applied at first boot only, bad files reported and skipped."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from edgelet.settings import read_config_file

SCRIPT = Path(__file__).resolve().parents[2] / "packaging" / "image" / "edgelet-card-setup"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBq0pGXkR8jD6v9G0o2Jk1oN3gk6Q0x1r7fHh0Ts4hJd laptop@home"
KEY2 = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTY= ops"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "boot" / "firmware" / "edgelet" / "manifests").mkdir(parents=True)
    (tmp_path / "etc" / "edgelet").mkdir(parents=True)
    (tmp_path / "etc" / "hosts").write_text("127.0.0.1\tlocalhost\n127.0.1.1\tedgelet\n")
    (tmp_path / "etc" / "hostname").write_text("edgelet\n")
    # The image's config: a key set, then a table (a key appended after it would land in the table).
    (tmp_path / "etc" / "edgelet" / "config.toml").write_text(
        'card_dir = "/boot/firmware/edgelet"\n\n[registries."10.0.0.9:5000"]\ninsecure = true\n'
    )
    return tmp_path


def card(root: Path) -> Path:
    return root / "boot" / "firmware" / "edgelet"


# A kubeconfig edgelet loads (the apiserver need not exist: only the file is judged).
KUBECONFIG = (
    "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
    "clusters: [{name: k, cluster: {server: 'https://192.0.2.1:6443', insecure-skip-tls-verify: true}}]\n"
    "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
)
# The real CLI of this checkout judges the card's kubeconfig (`edgelet check`), as the image's binary does.
EDGELET = str(Path(sys.executable).with_name("edgelet"))


def run(root: Path, edgelet: str = EDGELET) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(SCRIPT), "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "EDGELET_BIN": edgelet},
    )


def test_secrets_move_off_the_card_and_edgelet_is_pointed_at_them(root: Path) -> None:
    (card(root) / "kubeconfig").write_text(KUBECONFIG)
    (card(root) / "auth.json").write_text('{"auths": {}}\n')
    (card(root) / "manifest-url-headers").write_text("Authorization: Bearer s3cret\n")
    res = run(root)
    assert res.returncode == 0, res.stderr
    for name in ("kubeconfig", "auth.json", "manifest-url-headers"):
        assert not (card(root) / name).exists()
        moved = root / "etc" / "edgelet" / name
        assert stat.S_IMODE(moved.stat().st_mode) == 0o600
        assert f"moved the secret {name} off the card to /etc/edgelet/{name}" in res.stdout
    assert (root / "etc" / "edgelet" / "kubeconfig").read_text() == KUBECONFIG
    values = read_config_file(root / "etc" / "edgelet" / "config.toml")  # still valid, keys at the top level
    assert values["kubeconfig"] == Path("/etc/edgelet/kubeconfig")
    assert values["manifest_url_header_file"] == Path("/etc/edgelet/manifest-url-headers")
    assert "auth.json" not in "".join(values)  # auth.json is edgelet's default path: no key needed
    assert [h.insecure for _, h in values["registries"]] == [True]

    assert (root / "etc" / "edgelet" / "config.toml").read_text().count("kubeconfig =") == 1


@pytest.mark.parametrize("name", ["kubeconfig", "auth.json", "manifest-url-headers", "api-tokens.csv"])
def test_a_card_never_replaces_a_secret_the_device_holds(root: Path, name: str) -> None:
    """Whoever can write the card must not add a token in system:masters or swap the cluster identity: a
    secret moves off the card once, while the device has none; a later one is set aside, unused."""
    etc = root / "etc" / "edgelet"
    first = KUBECONFIG if name == "kubeconfig" else 'token1,admin,"system:masters"\n'
    (card(root) / name).write_text(first)
    assert run(root).returncode == 0
    assert (etc / name).read_text() == first
    later = KUBECONFIG + "# theirs\n" if name == "kubeconfig" else 'evil,mallory,"system:masters"\n'
    (card(root) / name).write_text(later)
    res = run(root)
    assert res.returncode == 1
    assert (etc / name).read_text() == first  # unchanged
    assert not (card(root) / name).exists()  # off the world-readable card all the same...
    assert (etc / f"{name}.rejected").read_text() == later  # ...set aside, root only, not used
    assert stat.S_IMODE((etc / f"{name}.rejected").stat().st_mode) == 0o600
    assert f"the device holds /etc/edgelet/{name} already, and a card never replaces a secret" in res.stderr


def test_a_key_set_by_the_administrator_is_left_alone(root: Path) -> None:
    config = root / "etc" / "edgelet" / "config.toml"
    config.write_text('kubeconfig = "/etc/kubernetes/kubelet.conf"\n')
    (card(root) / "kubeconfig").write_text(KUBECONFIG)
    assert run(root).returncode == 0
    assert config.read_text() == 'kubeconfig = "/etc/kubernetes/kubelet.conf"\n'


def test_hostname_and_keys_at_first_boot_only(root: Path) -> None:
    (card(root) / "hostname").write_text("Sensor-12\r\n")  # written on Windows, capitalised
    (card(root) / "authorized_keys").write_text(f"# my laptop\n{KEY}\r\nnot a key at all\n{KEY}\n{KEY2}")
    res = run(root)
    assert res.returncode == 1  # the stray line is reported...
    assert "1 line(s) are not public keys" in res.stderr
    assert (root / "etc" / "hostname").read_text() == "sensor-12\n"  # ...and everything else applied
    assert "127.0.1.1\tsensor-12" in (root / "etc" / "hosts").read_text()
    keys = root / "root" / ".ssh" / "authorized_keys"
    assert keys.read_text().splitlines() == [KEY, KEY2]
    assert stat.S_IMODE(keys.stat().st_mode) == 0o600
    assert stat.S_IMODE(keys.parent.stat().st_mode) == 0o700
    assert "hostname set to sensor-12" in res.stdout and "2 key(s) added" in res.stdout

    (card(root) / "hostname").write_text("other\n")
    res = run(root)
    assert res.returncode == 0, res.stderr
    assert (root / "etc" / "hostname").read_text() == "sensor-12\n"
    assert "applied at first boot only" in res.stdout


@pytest.mark.parametrize("name", ["-bad", "a" * 64, "under_score", ""])
def test_an_invalid_hostname_is_reported_and_skipped(root: Path, name: str) -> None:
    (card(root) / "hostname").write_text(name + "\n")
    res = run(root)
    assert res.returncode == 1 and "is not a valid hostname" in res.stderr
    assert (root / "etc" / "hostname").read_text() == "edgelet\n"


def test_a_secret_that_is_not_a_file_stays_and_is_reported(root: Path) -> None:
    (card(root) / "kubeconfig").mkdir()
    res = run(root)
    assert res.returncode == 1 and "is not a regular file" in res.stderr
    assert "kubeconfig" not in (root / "etc" / "edgelet" / "config.toml").read_text()


def test_no_card_folder(tmp_path: Path) -> None:
    res = run(tmp_path)
    assert res.returncode == 0 and "nothing to do" in res.stdout


def test_a_malformed_kubeconfig_is_taken_off_the_card_but_set_aside_naming_why(root: Path) -> None:
    """A bad kubeconfig on the card never reaches edgelet (which refuses to start with one: a crash loop)."""
    etc = root / "etc" / "edgelet"
    (card(root) / "kubeconfig").write_text("clusters: [unclosed\n")
    res = run(root)
    assert res.returncode == 1
    assert not (card(root) / "kubeconfig").exists() and not (etc / "kubeconfig").exists()
    assert stat.S_IMODE((etc / "kubeconfig.rejected").stat().st_mode) == 0o600
    assert f"{card(root)}/kubeconfig is not a usable kubeconfig" in res.stderr and "invalid YAML" in res.stderr
    assert "kubeconfig.rejected" in res.stderr and "running standalone" in res.stderr
    assert "kubeconfig" not in read_config_file(etc / "config.toml")

    # A good one while the device has none is used and clears the reject; a bad one later leaves it in use.
    (card(root) / "kubeconfig").write_text(KUBECONFIG)
    assert run(root).returncode == 0 and not (etc / "kubeconfig.rejected").exists()
    (card(root) / "kubeconfig").write_text("apiVersion: v1\nkind: Config\n")  # YAML, but no cluster
    res = run(root)
    assert res.returncode == 1 and "edgelet keeps /etc/edgelet/kubeconfig" in res.stderr
    assert (etc / "kubeconfig").read_text() == KUBECONFIG and (etc / "kubeconfig.rejected").exists()
    assert read_config_file(etc / "config.toml")["kubeconfig"] == Path("/etc/edgelet/kubeconfig")


def test_without_an_edgelet_binary_the_kubeconfig_is_moved_unjudged(root: Path) -> None:
    (card(root) / "kubeconfig").write_text("anything\n")
    assert run(root, edgelet="").returncode == 0
    assert (root / "etc" / "edgelet" / "kubeconfig").read_text() == "anything\n"


# A wg-quick file edgelet loads (no PrivateKey: the agent generates one at first start).
WIREGUARD = (
    "[Interface]\nAddress = 10.99.0.7/32\n\n"
    "[Peer]\nPublicKey = AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\nEndpoint = hub.example.net:51820\n"
    "AllowedIPs = 10.99.0.0/24\n"
)


def test_the_wireguard_config_is_a_secret_moved_off_the_card_and_named_in_the_config(root: Path) -> None:
    etc = root / "etc" / "edgelet"
    (card(root) / "wireguard.conf").write_text(WIREGUARD)
    res = run(root)
    assert res.returncode == 0, res.stderr
    assert not (card(root) / "wireguard.conf").exists()
    assert (etc / "wireguard.conf").read_text() == WIREGUARD
    assert stat.S_IMODE((etc / "wireguard.conf").stat().st_mode) == 0o600
    assert read_config_file(etc / "config.toml")["wireguard_config"] == Path("/etc/edgelet/wireguard.conf")
    assert not list(etc.glob("*.d"))  # the copy checked under its own name is gone
    # A later one never replaces it: set aside, and `edgelet check` says why.
    (card(root) / "wireguard.conf").write_text(WIREGUARD.replace("10.99.0.7", "10.99.0.66"))
    assert run(root).returncode == 1
    assert (etc / "wireguard.conf").read_text() == WIREGUARD and (etc / "wireguard.conf.rejected").exists()


def test_a_malformed_wireguard_config_is_taken_off_the_card_but_set_aside_naming_why(root: Path) -> None:
    """The agent refuses to start with a bad tunnel config (a crash loop): the card's never reaches it."""
    etc = root / "etc" / "edgelet"
    (card(root) / "wireguard.conf").write_text(WIREGUARD.replace("10.99.0.7/32", "ten"))
    res = run(root)
    assert res.returncode == 1
    assert not (card(root) / "wireguard.conf").exists() and not (etc / "wireguard.conf").exists()
    assert stat.S_IMODE((etc / "wireguard.conf.rejected").stat().st_mode) == 0o600
    assert f"{card(root)}/wireguard.conf is not a usable wireguard.conf (WireGuard config " in res.stderr
    assert f"{card(root)}/wireguard.conf:2: " in res.stderr and "running without a tunnel" in res.stderr
    assert "wireguard_config" not in read_config_file(etc / "config.toml")
    assert not list(etc.glob("*.d"))

    from edgelet.cli.check import rejected_card_secrets

    [(path, why)] = rejected_card_secrets(etc)
    assert path.endswith("wireguard.conf.rejected") and ":2: " in why and "'ten'" in why
