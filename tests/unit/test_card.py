"""The card folder (issue 24): its config.toml layered into Settings, never fatal; which cmdline.txt a device has."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgelet.cardpolicy import CARD_KEYS, CARD_KEYS_WHEN_TRUSTED
from edgelet.cgroups.controllers import admit, choose_cmdline_file, kernel_cmdline_fix, probe_cmdline_file
from edgelet.settings import (
    KEYS,
    Settings,
    SettingsError,
    load_settings,
    read_card_config,
)

NO_DEFAULT = Path("/nonexistent/edgelet-config.toml")


def load(
    tmp_path: Path,
    card_toml: str | bytes | None,
    *,
    main: str = "",
    env: dict[str, str] | None = None,
    flags: dict[str, str] | None = None,
) -> Settings:
    card = tmp_path / "card"
    card.mkdir(exist_ok=True)
    if card_toml is not None:
        target = card / "config.toml"
        target.write_bytes(card_toml.encode() if isinstance(card_toml, str) else card_toml)
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'card_dir = "{card}"\n' + main)
    return load_settings(flags, config=cfg, env=env or {}, default_config=NO_DEFAULT)


def test_no_card_dir_by_default() -> None:
    s = load_settings({}, env={}, default_config=NO_DEFAULT)
    assert s.card_dir is None and s.card_manifest_path is None and s.card_import_dir is None
    assert s.card_config_error is None


def test_card_paths(tmp_path: Path) -> None:
    s = load(tmp_path, None)
    assert s.card_manifest_path == tmp_path / "card" / "manifests"
    assert s.card_import_dir == tmp_path / "card" / "images"
    assert s.card_config_error is None


def test_card_overrides_the_file_and_env_and_flags_override_the_card(tmp_path: Path) -> None:
    card = 'manifest_url = "https://card.example/pods"\nfile_check_frequency = "5s"\nverbosity = 2\n'
    s = load(
        tmp_path,
        card,
        main='manifest_url = "https://file.example/pods"\nverbosity = 1\ntrusted_keys = "/etc/edgelet/trusted"\n',
        env={"EDGELET_FILE_CHECK_FREQUENCY": "7s"},
        flags={"verbosity": "3"},
    )
    assert s.manifest_url == "https://card.example/pods"  # card > config file
    assert s.file_check_frequency == 7.0  # environment > card
    assert s.verbosity == 3  # flag > card
    assert s.card_config_error is None


@pytest.mark.parametrize(
    "label, card, error",
    [
        ("bad TOML", "manifest_url = \n", "invalid TOML"),
        ("not UTF-8", b"verbosity = 1\n\xff\xfe\n", "not UTF-8"),
        (
            "unknown key, with a hint",
            'manifest_ur = "https://x"\n',
            "unknown key 'manifest_ur' (did you mean manifest_url?)",
        ),
        ("bad value", 'file_check_frequency = "soon"\n', "file_check_frequency: invalid duration"),
        ("a key only the device sets", 'root_dir = "/mnt"\n', "root_dir cannot be set on the card"),
        ("the card naming another card", 'card_dir = "/elsewhere"\n', "card_dir cannot be set on the card"),
        ("verification turned off", 'trusted_keys = ""\n', "trusted_keys cannot be set on the card"),
        ("keys valid alone, not together", "image_gc_low_threshold = 90\n", "must not exceed image_gc_high_threshold"),
        # The node API's certificate names it: a bad one used to pass here and stop the agent at start.
        ("node_ip not an address", 'node_ip = "sensor.local"\n', "node_ip: 'sensor.local' is not an IP address"),
        # NodeRestriction refuses it: with a kubeconfig the agent used to stop at start over the card's label.
        (
            "a label a node may not set",
            'node_labels = ["node-role.kubernetes.io/worker="]\n',
            "node_labels: node-role.kubernetes.io/worker: a node may not set these on itself",
        ),
    ],
)
def test_an_invalid_card_config_is_reported_and_ignored(
    tmp_path: Path, label: str, card: str | bytes, error: str
) -> None:
    s = load(tmp_path, card, main='manifest_url = "https://file.example/pods"\nverbosity = 1\n')
    # The device starts with everything else: the file's settings, and the card's folders still read.
    assert s.manifest_url == "https://file.example/pods" and s.verbosity == 1
    assert s.card_manifest_path == tmp_path / "card" / "manifests"
    assert s.card_config_error is not None
    assert str(tmp_path / "card" / "config.toml") in s.card_config_error, label
    assert error in s.card_config_error, label
    assert "ignored" in s.card_config_error


def test_a_bad_main_config_still_stops_edgelet(tmp_path: Path) -> None:
    # Only the card is forgiving: the device's own config file is the administrator's and stays strict.
    with pytest.raises(SettingsError, match="unknown key"):
        load(tmp_path, None, main="bogus = 1\n")


def test_read_card_config_without_a_file(tmp_path: Path) -> None:
    assert read_card_config(tmp_path) == {}


@pytest.mark.parametrize(
    "label, existing, expected",
    [
        ("Debian raspi image", {"/boot/firmware", "/boot/firmware/cmdline.txt"}, "/boot/firmware/cmdline.txt"),
        (
            "Raspberry Pi OS bookworm (a stub left at /boot)",
            {"/boot/firmware", "/boot/firmware/cmdline.txt", "/boot/cmdline.txt"},
            "/boot/firmware/cmdline.txt",
        ),
        ("Raspberry Pi OS bullseye", {"/boot/cmdline.txt"}, "/boot/cmdline.txt"),
        ("firmware partition, file not written yet", {"/boot/firmware"}, "/boot/firmware/cmdline.txt"),
        ("a PC or a VM", set(), None),
    ],
)
def test_choose_cmdline_file(label: str, existing: set[str], expected: str | None) -> None:
    assert choose_cmdline_file(existing) == expected, label


def test_probe_cmdline_file_on_a_fixture_root(tmp_path: Path) -> None:
    assert probe_cmdline_file(tmp_path) is None
    (tmp_path / "boot").mkdir()
    (tmp_path / "boot" / "cmdline.txt").write_text("console=tty1\n")
    assert probe_cmdline_file(tmp_path) == "/boot/cmdline.txt"
    (tmp_path / "boot" / "firmware").mkdir()
    assert probe_cmdline_file(tmp_path) == "/boot/cmdline.txt"  # the file beats an empty firmware dir
    (tmp_path / "boot" / "firmware" / "cmdline.txt").write_text("console=tty1\n")
    assert probe_cmdline_file(tmp_path) == "/boot/firmware/cmdline.txt"


@pytest.mark.parametrize(
    "cmdline_file, text",
    [
        ("/boot/firmware/cmdline.txt", "to the kernel command line (/boot/firmware/cmdline.txt, one line) and reboot"),
        ("/boot/cmdline.txt", "(/boot/cmdline.txt, one line)"),
        (None, "GRUB_CMDLINE_LINUX in /etc/default/grub"),
    ],
)
def test_the_cgroup_reason_names_the_devices_file(cmdline_file: str | None, text: str) -> None:
    assert text in kernel_cmdline_fix(cmdline_file)
    verdict = admit(
        frozenset({"memory"}), frozenset({"cpu", "pids"}), allow_missing=False, v2=True, cmdline_file=cmdline_file
    )
    assert verdict is not None and verdict.reason == "CgroupControllersMissing" and text in verdict.message
    other = "/boot/cmdline.txt" if cmdline_file != "/boot/cmdline.txt" else "/boot/firmware/cmdline.txt"
    assert other not in verdict.message


# Each key below widens what runs or who can reach the device: a person holding the card must not set it.
REFUSED_ON_THE_CARD = [
    ('trusted_keys = ""', "trusted_keys"),
    ('trusted_keys = "/boot/firmware/edgelet/keys"', "trusted_keys"),
    ('signature_policy = "/boot/firmware/edgelet/policy.json"', "signature_policy"),
    ('runtime = "/boot/firmware/edgelet/x"', "runtime"),
    ('conmon = "/boot/firmware/edgelet/x"', "conmon"),
    ('cni_bin_dir = "/boot/firmware/edgelet"', "cni_bin_dir"),
    ('cni_conf_dir = "/boot/firmware/edgelet"', "cni_conf_dir"),
    ('pod_infra_container_image = "evil.example/pause:1"', "pod_infra_container_image"),
    ('api_token_file = "/boot/firmware/edgelet/tokens.csv"', "api_token_file"),
    ('node_api_grants = "group:everyone=*"', "node_api_grants"),
    ("port = 10250", "port"),
    ('address = "0.0.0.0"', "address"),
    ('client_ca_file = "/boot/firmware/edgelet/ca.pem"', "client_ca_file"),
    ('healthz_bind_address = "0.0.0.0"', "healthz_bind_address"),
    ("seccomp_default = false", "seccomp_default"),
    ('allowed_unsafe_sysctls = "kernel.*"', "allowed_unsafe_sysctls"),
    ("pod_max_pids = -1", "pod_max_pids"),
    ("allow_missing_cgroup_controllers = true", "allow_missing_cgroup_controllers"),
    ('registries = { "docker.io" = { insecure = true } }', "registries"),
    ('image_import_dir = "/boot/firmware/edgelet/x"', "image_import_dir"),
    ('pod_manifest_path = "/boot/firmware/edgelet/x"', "pod_manifest_path"),
    ('kubeconfig = "/boot/firmware/edgelet/kubeconfig"', "kubeconfig"),
    ('image_credential_file = "/boot/firmware/edgelet/auth.json"', "image_credential_file"),
    ('manifest_url = "https://card.example/pods"', "manifest_url"),  # without trusted keys: unsigned pods
    ('manifest_url_ca = "/boot/firmware/edgelet/ca.pem"', "manifest_url_ca"),
    ('manifest_url_header = "Authorization: x"', "manifest_url_header"),
    ('log_dir = "/boot/firmware"', "log_dir"),
    # Parsed only at the agent's start: a bad one would stop it at every boot; one near capacity evicts every pod.
    ('eviction_hard = "memory.available<bogus"', "eviction_hard"),
    ('eviction_soft = "memory.available<99%"', "eviction_soft"),
    ('eviction_soft_grace_period = "memory.available=x"', "eviction_soft_grace_period"),
    ('eviction_minimum_reclaim = "memory.available=1Ei"', "eviction_minimum_reclaim"),
    ('cgroup_root = "/"', "cgroup_root"),
    ('cluster_dns = "192.0.2.53"', "cluster_dns"),
    ('cluster_domain = "evil.example"', "cluster_domain"),
]


@pytest.mark.parametrize("line, key", REFUSED_ON_THE_CARD, ids=[k for _, k in REFUSED_ON_THE_CARD])
def test_a_card_cannot_weaken_the_node(tmp_path: Path, line: str, key: str) -> None:
    main = 'verbosity = 1\nruntime = "runc"\n'
    s = load(tmp_path, f'{line}\nfile_check_frequency = "5s"\n', main=main)
    (tmp_path / "x").mkdir()
    defaults = load(tmp_path / "x", None, main=main)
    assert getattr(s, key) == getattr(defaults, key), key  # ignored: the node's own value stays
    assert s.file_check_frequency == 5.0  # the card's harmless settings still apply
    assert s.card_config_error is not None
    assert f"{key} cannot be set on the card" in s.card_config_error
    assert str(tmp_path / "card" / "config.toml") in s.card_config_error


def test_a_signed_node_takes_its_manifest_url_from_the_card(tmp_path: Path) -> None:
    card = 'manifest_url = "https://card.example/pods"\nmanifest_url_ca = "/boot/firmware/ca.pem"\n'
    s = load(tmp_path, card, main='trusted_keys = "/etc/edgelet/trusted"\n')
    assert s.manifest_url == "https://card.example/pods"
    assert s.manifest_url_ca is None
    assert s.card_config_error is not None and "manifest_url_ca cannot be set" in s.card_config_error


def test_the_card_allow_list_names_real_keys_only() -> None:
    assert (CARD_KEYS | CARD_KEYS_WHEN_TRUSTED) <= set(KEYS)
    assert not CARD_KEYS & {"card_dir", "root_dir", "run_dir", "trusted_keys", "runtime", "conmon"}


@pytest.mark.timeout(60)
def test_a_named_pipe_as_the_cards_config_is_refused_never_waited_on(tmp_path: Path) -> None:
    import os

    (tmp_path / "card").mkdir()
    os.mkfifo(tmp_path / "card" / "config.toml")
    s = load(tmp_path, None, main="verbosity = 1\n")
    assert s.verbosity == 1
    assert s.card_config_error is not None and "a named pipe, not a regular file" in s.card_config_error


def test_a_card_url_never_receives_the_nodes_url_headers(tmp_path: Path) -> None:
    """With headers (a token) in the node's settings, a card's manifest URL would be sent them: refused."""
    card = 'manifest_url = "https://card.example/pods"\n'
    s = load(
        tmp_path,
        card,
        main='trusted_keys = "/etc/edgelet/trusted"\n'
        'manifest_url = "https://fleet.example/pods"\nmanifest_url_header_file = "/etc/edgelet/h"\n',
    )
    assert s.manifest_url == "https://fleet.example/pods"
    assert s.card_config_error is not None and "manifest_url cannot be set on the card" in s.card_config_error
