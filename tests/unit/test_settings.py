"""Settings: defaults < TOML file < EDGELET_* environment < flags; durations; errors name key and source."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgelet.images.registries import RegistryHost
from edgelet.runtime.handlers import HandlerConfig
from edgelet.runtime.layout import RuntimePaths
from edgelet.settings import KEYS, Settings, SettingsError, format_duration, load_settings, parse_duration

NO_DEFAULT = Path("/nonexistent/edgelet/config.toml")


def load(flags=None, *, config=None, env=None, default_config=NO_DEFAULT) -> Settings:
    return load_settings(flags, config=config, env=env or {}, default_config=default_config)


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("20s", 20.0),
        ("1m30s", 90.0),
        ("500ms", 0.5),
        ("1h", 3600.0),
        ("0", 0.0),
        ("1.5h", 5400.0),
        ("2h45m10.5s", 9910.5),
        ("100us", 0.0001),
        ("100µs", 0.0001),
        ("3ns", 3e-9),
        ("-1s", -1.0),
        (" 5m ", 300.0),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "20", "1.5", "s", "10x", "1m30", "abc", "1 m", "-"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize(
    "seconds, text", [(0, "0s"), (20, "20s"), (90, "1m30s"), (0.5, "500ms"), (3600, "1h"), (5400, "1h30m")]
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert parse_duration(text) == seconds


def test_defaults() -> None:
    s = load()
    assert s == Settings()
    assert s.pod_manifest_path == Path("/etc/kubernetes/manifests")
    assert s.file_check_frequency == 20.0
    assert s.runonce is False
    assert s.runonce_timeout == 300.0
    assert s.root_dir == Path("/var/lib/edgelet")
    assert s.run_dir == Path("/run/edgelet")
    assert s.log_dir == Path("/var/log")
    assert s.hostname_override is None
    assert s.pod_infra_container_image is None
    assert s.pod_infra_container is False
    assert s.cgroup_root == "/kubepods"
    assert (s.runtime, s.conmon) == ("runc", "conmon")
    assert s.image_import_dir is None
    assert s.verbosity == 0


def test_derived_properties(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("socket.gethostname", lambda: "Edge-Box-01 ")
    s = Settings(root_dir=Path("/r"), run_dir=Path("/run/x"), log_dir=Path("/l"), cgroup_root="/k")
    assert s.node_name == "edge-box-01"
    assert s.import_dir == Path("/r/images/import")
    assert s.runtime_paths() == RuntimePaths(
        root_dir=Path("/r"), run_dir=Path("/run/x"), log_dir=Path("/l"), cgroup_root="/k"
    )
    s2 = Settings(hostname_override="Node-A", image_import_dir=Path("/imp"))
    assert s2.node_name == "node-a"
    assert s2.import_dir == Path("/imp")


def test_strings_become_paths_when_built_directly() -> None:
    s = Settings(root_dir="/r", image_import_dir="/i")  # type: ignore[arg-type]
    assert s.root_dir == Path("/r") and s.image_import_dir == Path("/i")


def test_settings_are_frozen() -> None:
    with pytest.raises(AttributeError):
        Settings().root_dir = Path("/x")  # type: ignore[misc]


FULL_TOML = """
pod_manifest_path = "/m"
card_dir = "/nonexistent-card"
file_check_frequency = "1m30s"
manifest_url = "https://h/p"
manifest_url_header = ["A:1"]
http_check_frequency = "30s"
manifest_url_ca = "/ca.pem"
trusted_keys = "/etc/edgelet/trusted"
manifest_url_signature = "https://h/p.sig"
runonce = true
runonce_timeout = 120
root_dir = "/r"
run_dir = "/run/e"
log_dir = "/l"
hostname_override = "node1"
pod_infra_container_image = "local/pause:1"
pod_infra_container = true
cgroup_root = "/edge/"
runtime = "/usr/bin/crun"
runtime_handlers = { crun = "/usr/bin/crun", kata = { path = "/opt/kata/bin/runtime", root = "/run/kata" } }
runtime_handler = "crun"
conmon = "/usr/local/bin/conmon"
image_import_dir = "/imp"
image_credential_file = "/auth.json"
signature_policy = "/etc/containers/policy.json"
image_gc_high_threshold = 90
image_gc_low_threshold = 70
image_minimum_gc_age = "5m"
manifest_url_header_file = "/etc/edgelet/url-headers"
container_log_max_size = "2Mi"
container_log_max_files = 3
container_log_monitor_interval = "2s"
eviction_hard = "memory.available<200Mi"
eviction_soft = "memory.available<1Gi"
eviction_soft_grace_period = "memory.available=1m"
eviction_minimum_reclaim = "memory.available=100Mi"
eviction_max_pod_grace_period = 30
eviction_pressure_transition_period = "1m"
eviction_monitoring_interval = "5s"
shutdown_grace_period = "1m"
pod_max_pids = 4096
system_reserved = { cpu = "500m", memory = "256Mi" }
kube_reserved = ["memory=128Mi", "pid=100"]
enforce_node_allocatable = ["none"]
allow_missing_cgroup_controllers = true
cni_conf_dir = "/etc/edgelet/cni"
cni_bin_dir = "/usr/lib/cni"
cni_check_period = "5m"
cluster_dns = ["10.43.0.10"]
cluster_domain = "cluster.local"
allowed_unsafe_sysctls = ["net.core.somaxconn", "kernel.msg*"]
shutdown_grace_period_critical_pods = "20s"
registries = { "docker.io" = { mirrors = ["https://m.example"] }, "10.0.0.9:5000" = { insecure = true } }
enable_server = false
healthz_port = 0
healthz_bind_address = "0.0.0.0"
port = 10250
address = "10.0.0.5"
tls_cert_file = "/pki/tls.crt"
tls_private_key_file = "/pki/tls.key"
client_ca_file = "/pki/ca.crt"
api_token_file = "/pki/tokens.csv"
node_api_grants = ["group:monitoring=stats/metrics", "user:alice=*"]
kubeconfig = "/etc/edgelet/kubeconfig"
wireguard_config = "/etc/edgelet/wireguard.conf"
wireguard_backend = "WireGuard-Go"
register_node = false
node_labels = { "example.com/site" = "lab" }
register_with_taints = ["edge=true:NoSchedule", "gpu:NoExecute"]
node_ip = "10.0.0.5"
node_status_update_frequency = "20s"
node_status_report_frequency = "10m"
node_lease_duration_seconds = 60
node_lease_renew_interval = "15s"
seccomp_default = false
verbosity = 3
rollout = false
rollout_deadline = "2m"
rollout_stability_window = "10s"
rollout_strategy = "Surge"
update_current = "/opt/edgelet/current"
update_url = "https://releases.example/edgelet-amd64.tar.xz"
update_url_header = { Authorization = "Bearer t" }
update_url_header_file = "/etc/edgelet/update-headers"
update_url_ca = "/etc/edgelet/update-ca.pem"
update_max_attempts = 5
update_trial_deadline = "3m"
streaming_connection_idle_timeout = "30m"
"""


def test_toml_file_sets_every_key(tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text(FULL_TOML)
    s = load(config=cfg)
    assert s == Settings(
        pod_manifest_path=Path("/m"),
        file_check_frequency=90.0,
        manifest_url="https://h/p",
        manifest_url_header=(("A", "1"),),
        http_check_frequency=30.0,
        manifest_url_ca=Path("/ca.pem"),
        trusted_keys=Path("/etc/edgelet/trusted"),
        manifest_url_signature="https://h/p.sig",
        runonce=True,
        runonce_timeout=120.0,
        root_dir=Path("/r"),
        run_dir=Path("/run/e"),
        log_dir=Path("/l"),
        hostname_override="node1",
        pod_infra_container_image="local/pause:1",
        pod_infra_container=True,
        cgroup_root="/edge",
        runtime="/usr/bin/crun",
        conmon="/usr/local/bin/conmon",
        image_import_dir=Path("/imp"),
        verbosity=3,
        enable_server=False,
        healthz_port=0,
        healthz_bind_address="0.0.0.0",
        port=10250,
        address="10.0.0.5",
        tls_cert_file=Path("/pki/tls.crt"),
        tls_private_key_file=Path("/pki/tls.key"),
        client_ca_file=Path("/pki/ca.crt"),
        api_token_file=Path("/pki/tokens.csv"),
        node_api_grants=("group:monitoring=stats/metrics", "user:alice=*"),
        image_credential_file=Path("/auth.json"),
        signature_policy=Path("/etc/containers/policy.json"),
        image_gc_high_threshold=90,
        image_gc_low_threshold=70,
        image_minimum_gc_age=300.0,
        manifest_url_header_file=Path("/etc/edgelet/url-headers"),
        container_log_max_size=2 * 1024 * 1024,
        container_log_max_files=3,
        container_log_monitor_interval=2.0,
        eviction_hard="memory.available<200Mi",
        eviction_soft="memory.available<1Gi",
        eviction_soft_grace_period="memory.available=1m",
        eviction_minimum_reclaim="memory.available=100Mi",
        eviction_max_pod_grace_period=30,
        eviction_pressure_transition_period=60.0,
        eviction_monitoring_interval=5.0,
        shutdown_grace_period=60.0,
        pod_max_pids=4096,
        system_reserved=(("cpu", "500m"), ("memory", "256Mi")),
        kube_reserved=(("memory", "128Mi"), ("pid", "100")),
        enforce_node_allocatable=("none",),
        allow_missing_cgroup_controllers=True,
        cni_conf_dir=Path("/etc/edgelet/cni"),
        cni_bin_dir="/usr/lib/cni",
        cni_check_period=300.0,
        cluster_dns=("10.43.0.10",),
        cluster_domain="cluster.local",
        allowed_unsafe_sysctls=("net.core.somaxconn", "kernel.msg*"),
        shutdown_grace_period_critical_pods=20.0,
        runtime_handlers=(
            ("crun", HandlerConfig("/usr/bin/crun")),
            ("kata", HandlerConfig("/opt/kata/bin/runtime", Path("/run/kata"))),
        ),
        runtime_handler="crun",
        registries=(
            ("10.0.0.9:5000", RegistryHost(insecure=True)),
            ("docker.io", RegistryHost(mirrors=("https://m.example",))),
        ),
        kubeconfig=Path("/etc/edgelet/kubeconfig"),
        wireguard_config=Path("/etc/edgelet/wireguard.conf"),
        wireguard_backend="wireguard-go",
        register_node=False,
        node_labels=(("example.com/site", "lab"),),
        register_with_taints=(("edge", "true", "NoSchedule"), ("gpu", "", "NoExecute")),
        node_ip="10.0.0.5",
        node_status_update_frequency=20.0,
        node_status_report_frequency=600.0,
        node_lease_duration_seconds=60,
        node_lease_renew_interval=15.0,
        seccomp_default=False,
        card_dir=Path("/nonexistent-card"),
        rollout=False,
        rollout_deadline=120.0,
        rollout_stability_window=10.0,
        rollout_strategy="Surge",
        update_current=Path("/opt/edgelet/current"),
        update_url="https://releases.example/edgelet-amd64.tar.xz",
        update_url_header=(("Authorization", "Bearer t"),),
        update_url_header_file=Path("/etc/edgelet/update-headers"),
        update_url_ca=Path("/etc/edgelet/update-ca.pem"),
        update_max_attempts=5,
        update_trial_deadline=180.0,
        streaming_connection_idle_timeout=1800.0,
    )
    # The test's TOML covers every key, so a key added later without a test fails here.
    assert set(KEYS) == {line.split("=")[0].strip() for line in FULL_TOML.strip().splitlines()}


@pytest.mark.parametrize(
    "key, raw, error",
    [
        ("system_reserved", "gpu=1", "unknown resource 'gpu'"),
        ("system_reserved", "memory", "expected name=quantity"),
        ("kube_reserved", "memory=lots", "memory=lots"),
        ("kube_reserved", "cpu=-1", "must not be negative"),
        ("enforce_node_allocatable", "system-reserved", "pods only"),
        ("enforce_node_allocatable", "pods,none", "cannot be combined"),
    ],
)
def test_reservations_and_enforcement_are_checked(key: str, raw: str, error: str) -> None:
    with pytest.raises(SettingsError, match=error):
        load({key: raw})


def test_precedence_defaults_file_env_flags(tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text('root_dir = "/from-file"\nrun_dir = "/run-file"\nlog_dir = "/log-file"\n')
    env = {"EDGELET_RUN_DIR": "/run-env", "EDGELET_LOG_DIR": "/log-env"}
    s = load({"log_dir": "/log-flag"}, config=cfg, env=env)
    assert s.root_dir == Path("/from-file")
    assert s.run_dir == Path("/run-env")
    assert s.log_dir == Path("/log-flag")
    assert s.pod_manifest_path == Path("/etc/kubernetes/manifests")


def test_default_config_file_is_read_when_present(tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text("verbosity = 4\n")
    assert load(default_config=cfg).verbosity == 4


def test_missing_default_config_is_fine() -> None:
    assert load(default_config=NO_DEFAULT) == Settings()


def test_missing_explicit_config_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="does not exist"):
        load(config=tmp_path / "nope.toml")


def test_config_from_environment(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("verbosity = 5\n")
    assert load(env={"EDGELET_CONFIG": str(cfg)}).verbosity == 5
    with pytest.raises(SettingsError, match="does not exist"):
        load(env={"EDGELET_CONFIG": str(tmp_path / "missing.toml")})


def test_dev_null_is_an_empty_config() -> None:
    assert load(config="/dev/null") == Settings()


@pytest.mark.parametrize(
    "toml, key, fragment",
    [
        ('pod-manifest-path = "/m"\n', "pod-manifest-path", "did you mean pod_manifest_path"),
        ("bogus = 1\n", "bogus", "unknown key 'bogus'"),
        ('file_check_frequency = "20"\n', "file_check_frequency", "missing unit"),
        ("file_check_frequency = 0\n", "file_check_frequency", "positive"),
        ("file_check_frequency = true\n", "file_check_frequency", "duration"),
        ('runonce_timeout = "-5s"\n', "runonce_timeout", "positive"),
        ('runonce = "yes"\n', "runonce", "true or false"),
        ('verbosity = "2"\n', "verbosity", "integer"),
        ("verbosity = -1\n", "verbosity", "at least 0"),
        ("root_dir = 5\n", "root_dir", "string"),
        ('root_dir = ""\n', "root_dir", "empty"),
        ('cgroup_root = "kubepods"\n', "cgroup_root", "absolute"),
        ('hostname_override = "bad_name"\n', "hostname_override", "node name"),
        ('wireguard_backend = "boringtun"\n', "wireguard_backend", "one of auto, kernel, wireguard-go"),
    ],
)
def test_bad_toml_values_name_key_and_file(tmp_path: Path, toml: str, key: str, fragment: str) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text(toml)
    with pytest.raises(SettingsError) as info:
        load(config=cfg)
    assert info.value.key == key
    assert fragment in str(info.value)
    if key != "hostname_override":
        assert str(cfg) in str(info.value)
        assert info.value.source == str(cfg)


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text("root_dir = \n")
    with pytest.raises(SettingsError, match=str(cfg)):
        load(config=cfg)


def test_toml_plain_numbers_are_seconds(tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text("file_check_frequency = 2.5\nrunonce_timeout = 60\n")
    s = load(config=cfg)
    assert (s.file_check_frequency, s.runonce_timeout) == (2.5, 60.0)


def test_empty_optional_string_means_unset(tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text('hostname_override = ""\nimage_import_dir = ""\n')
    s = load(config=cfg)
    assert s.hostname_override is None and s.image_import_dir is None


@pytest.mark.parametrize(
    "env, attr, value",
    [
        ({"EDGELET_RUNONCE": "true"}, "runonce", True),
        ({"EDGELET_RUNONCE": "0"}, "runonce", False),
        ({"EDGELET_FILE_CHECK_FREQUENCY": "500ms"}, "file_check_frequency", 0.5),
        ({"EDGELET_VERBOSITY": "2"}, "verbosity", 2),
        ({"EDGELET_HOSTNAME_OVERRIDE": ""}, "hostname_override", None),
        ({"EDGELET_POD_MANIFEST_PATH": "/x"}, "pod_manifest_path", Path("/x")),
    ],
)
def test_environment_values(env: dict[str, str], attr: str, value: object) -> None:
    assert getattr(load(env=env), attr) == value


def test_unknown_edgelet_env_vars_are_ignored() -> None:
    assert load(env={"EDGELET_TEST_SHOW_LOG": "1", "EDGELET_SPECS": "/x"}) == Settings()


def test_bad_env_value_names_the_variable() -> None:
    with pytest.raises(SettingsError) as info:
        load(env={"EDGELET_RUNONCE_TIMEOUT": "soon"})
    assert info.value.source == "EDGELET_RUNONCE_TIMEOUT"
    assert "EDGELET_RUNONCE_TIMEOUT" in str(info.value)


def test_bad_flag_value_names_the_flag() -> None:
    with pytest.raises(SettingsError) as info:
        load({"file_check_frequency": "20"})
    assert info.value.source == "--file-check-frequency"
    assert str(info.value).startswith("--file-check-frequency:")
    with pytest.raises(SettingsError) as info:
        load({"verbosity": "x"})
    assert info.value.source == "--v"


def test_unknown_flag_key_is_an_error() -> None:
    with pytest.raises(SettingsError, match="unknown setting"):
        load({"nope": "1"})


def test_every_key_has_a_flag_and_env_name() -> None:
    for key, spec in KEYS.items():
        assert spec.env == "EDGELET_" + key.upper()
        assert spec.flags
        assert spec.help
    assert KEYS["pod_manifest_path"].flags == ("--pod-manifest-path",)
    assert KEYS["verbosity"].flags == ("-v", "--v")


@pytest.mark.parametrize("raw, error", [("65536", "0-65535"), ("-1", "at least 0"), ("x", "integer")])
def test_healthz_port_must_be_a_port(raw: str, error: str) -> None:
    with pytest.raises(SettingsError, match=error):
        load({"healthz_port": raw})


@pytest.mark.parametrize(
    "key, raw, message",
    [
        ("node_labels", "novalue", "expected key=value"),
        ("node_labels", "bad key=x", "invalid label key"),
        ("register_with_taints", "k=v:Sometimes", "Effect one of"),
    ],
)
def test_node_flags_are_checked(key: str, raw: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        load_settings({key: raw}, env={}, default_config=Path("/nonexistent"))


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("10Mi", 10 * 1024 * 1024),
        ("500Ki", 500 * 1024),
        ("1G", 10**9),
        ("4096", 4096),
    ],
)
def test_container_log_max_size_takes_quantities(raw, expected):
    assert load({"container_log_max_size": raw}, default_config=Path("/nonexistent")).container_log_max_size == expected


@pytest.mark.parametrize(
    "key, raw",
    [
        ("container_log_max_size", "0"),
        ("container_log_max_size", "ten"),
        ("container_log_max_files", "1"),
        ("container_log_monitor_interval", "0s"),
    ],
)
def test_container_log_settings_refuse_what_cannot_rotate(key, raw):
    with pytest.raises(SettingsError):
        load({key: raw}, default_config=Path("/nonexistent"))
