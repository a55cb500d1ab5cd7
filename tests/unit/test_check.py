"""`edgelet check`: each check's verdict and hint from hand-written host facts."""

from __future__ import annotations

import dataclasses

import pytest

from edgelet.cli import check
from edgelet.cli.check import HostFacts
from edgelet.ocispec.defaults import ALL_CAPABILITIES

GOOD = HostFacts(
    euid=0,
    runtime="runc",
    runtime_path="/usr/sbin/runc",
    runtime_version="runc version 1.1.5+ds1",
    conmon_path="/usr/bin/conmon",
    conmon_version="conmon version 2.1.6",
    pause_path="/usr/bin/catatonit",
    pause_image=None,
    cgroup_v1_controllers=frozenset({"cpu", "cpuacct", "memory", "pids", "devices", "freezer", "cpuset"}),
    cgroup_v2_controllers=frozenset(),
    cgroup_enabled={"memory": True, "cpu": True},
    filesystems=frozenset({"ext4", "overlay", "tmpfs"}),
    cni_plugins=("bridge", "loopback"),
    root_dir="/var/lib/edgelet",
    root_free_bytes=10 << 30,
    bounding_capabilities=ALL_CAPABILITIES,
)
V2 = dataclasses.replace(
    GOOD, cgroup_v1_controllers=frozenset(), cgroup_v2_controllers=frozenset({"cpu", "memory", "pids", "io", "cpuset"})
)


def test_a_good_machine_passes_everything():
    results = check.run_checks(GOOD)
    assert [r.verdict for r in results] == ["OK"] * len(check.CHECKS)
    assert not check.failed(results)
    assert check.run_checks(V2)[4].detail.startswith("cgroup v2")
    assert not check.failed(check.run_checks(V2))


@pytest.mark.parametrize(
    "changes, name, verdict, text",
    [
        ({"euid": 1000}, "root privileges", "FAIL", "run edgelet as root"),
        ({"runtime_path": None}, "runtime (runc)", "FAIL", "apt-get install runc"),
        ({"runtime_version": "runc version 1.0.2"}, "runtime (runc)", "FAIL", "older than 1.1"),
        ({"runtime_version": ""}, "runtime (runc)", "FAIL", "cannot read its version"),
        (
            {"runtime": "crun", "runtime_path": "/usr/bin/crun", "runtime_version": "crun version 1.8.1"},
            "runtime (crun)",
            "OK",
            "1.8.1",
        ),
        ({"conmon_path": None}, "conmon", "FAIL", "apt-get install conmon"),
        ({"pause_path": None}, "pause", "FAIL", "apt-get install catatonit"),
        ({"pause_path": None, "pause_image": "local/pause:3.9"}, "pause", "OK", "local/pause:3.9"),
        ({"cgroup_v1_controllers": frozenset()}, "cgroups", "FAIL", "no cgroup controller"),
        ({"cgroup_v1_controllers": frozenset({"cpu", "memory"})}, "cgroups", "FAIL", "pids"),
        # Raspberry Pi OS: memory controller present but disabled at boot.
        (
            {
                "cgroup_enabled": {"memory": False},
                "is_raspberry_pi": True,
                "cgroup_v1_controllers": GOOD.cgroup_v1_controllers - {"memory"},
            },
            "memory cgroup",
            "FAIL",
            "add `cgroup_enable=memory cgroup_memory=1` to the kernel command line "
            "(/boot/firmware/cmdline.txt, one line)",
        ),
        (
            {"cgroup_enabled": {"memory": False}, "cmdline_file": "/boot/cmdline.txt"},
            "memory cgroup",
            "FAIL",
            "(/boot/cmdline.txt, one line)",
        ),
        # Not booted by the Pi firmware: no cmdline.txt to name, the boot loader's configuration instead.
        (
            {"cgroup_enabled": {"memory": False}, "cmdline_file": None},
            "memory cgroup",
            "FAIL",
            "GRUB_CMDLINE_LINUX in /etc/default/grub",
        ),
        # The card folder (issue 24): an invalid config.toml and secrets left on the FAT partition warn.
        ({"card_dir": "/boot/firmware/edgelet", "card_present": True}, "card folder", "OK", "manifests/, images/"),
        ({"card_dir": "/boot/firmware/edgelet"}, "card folder", "OK", "does not exist"),
        (
            {
                "card_dir": "/boot/firmware/edgelet",
                "card_present": True,
                "card_config_error": "/boot/firmware/edgelet/config.toml: unknown key 'manifest_ur'",
            },
            "card folder",
            "WARN",
            "unknown key 'manifest_ur'",
        ),
        (
            {"card_dir": "/boot/firmware/edgelet", "card_present": True, "card_secrets": ("kubeconfig",)},
            "card folder",
            "WARN",
            "/boot/firmware/edgelet/kubeconfig",
        ),
        ({"cgroup_enabled": {"memory": False}}, "memory cgroup", "FAIL", "--allow-missing-cgroup-controllers"),
        ({"filesystems": frozenset({"ext4"})}, "overlayfs", "WARN", "modprobe overlay"),
        # A fresh boot: not listed yet (the module loads on first mount), but a trial mount worked.
        ({"filesystems": frozenset({"ext4"}), "overlay_error": None}, "overlayfs", "OK", "trial mount worked"),
        ({"overlay_error": "No such device"}, "overlayfs", "WARN", "trial mount failed: No such device"),
        ({"recursive_read_only": False}, "recursive read-only mounts", "WARN", "5.12"),
        ({"cni_plugins": ()}, "CNI plugins", "WARN", "containernetworking-plugins"),
        (
            {"cni_network": ("WARN", "no CNI config in /etc/cni/net.d: pods without hostNetwork get loopback only")},
            "CNI network",
            "WARN",
            "10-edgelet.conflist",
        ),
        (
            {"cni_network": ("FAIL", "/c/10.conflist: plugins not found in /opt/cni/bin: bridge")},
            "CNI network",
            "FAIL",
            "containernetworking-plugins",
        ),
        # Inside some containers and sandboxes the agent lacks CAP_SYS_RESOURCE: privileged pods get less.
        (
            {"bounding_capabilities": tuple(c for c in ALL_CAPABILITIES if c != "CAP_SYS_RESOURCE")},
            "capabilities",
            "WARN",
            "reduced bounding set, without CAP_SYS_RESOURCE",
        ),
        ({"bounding_capabilities": None}, "capabilities", "WARN", "cannot read CapBnd"),
        ({"root_free_bytes": 100 << 20}, "free space (/var/lib/edgelet)", "FAIL", "100 MiB free"),
        ({"root_free_bytes": None}, "free space (/var/lib/edgelet)", "FAIL", "cannot stat"),
        # Trusted delivery: not configured is today's behaviour; a key or policy the agent would refuse fails the check.
        ({}, "trusted keys", "OK", "not configured"),
        (
            {"trusted_keys": ("OK", "/etc/edgelet/keys: 1 minisign/signify and 0 SSH keys")},
            "trusted keys",
            "OK",
            "1 minisign/signify",
        ),
        (
            {"trusted_keys": ("FAIL", "--trusted-keys /k/a.pub:3: not base64")},
            "trusted keys",
            "FAIL",
            "/k/a.pub:3: not base64",
        ),
        ({}, "signature policy", "OK", "not configured"),
        (
            {"signature_policy": ("FAIL", "signature policy /p.json field default: missing")},
            "signature policy",
            "FAIL",
            "containers-policy.json(5)",
        ),
    ],
)
def test_check_verdicts(changes, name, verdict, text):
    results = {r.name: r for r in check.run_checks(dataclasses.replace(GOOD, **changes))}
    r = results[name]
    assert r.verdict == verdict
    assert text in r.detail + " " + r.hint
    assert check.failed(list(results.values())) is (verdict == "FAIL")


def test_format_results_shows_hints_for_problems_only():
    text = check.format_results(check.run_checks(dataclasses.replace(GOOD, cni_plugins=())))
    lines = text.splitlines()
    assert lines[0] == "OK    root privileges: running as root"
    assert any(line.startswith("WARN  CNI plugins: none") and "-> apt-get install" in line for line in lines)


def test_parsers():
    assert check.parse_proc_cgroups(
        "#subsys_name\thierarchy\tnum_cgroups\tenabled\ncpu\t2\t10\t1\nmemory\t0\t1\t0\n"
    ) == {"cpu": True, "memory": False}
    mounts = (
        "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,cpu,cpuacct 0 0\n"
        "cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n"
        "cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n"
    )
    assert check.parse_mounts_cgroup_v1(mounts) == {"cpu", "cpuacct", "memory"}
    assert check.parse_filesystems("nodev\tsysfs\n\text4\nnodev\toverlay\n") == {"sysfs", "ext4", "overlay"}


# --- trusted delivery: the thin side reads the real files as the agent does --------------------------------------


def _keys_dir(tmp_path):
    from edgelet.testing.signing import MinisignKey, SshKey, trusted_dir

    return trusted_dir(tmp_path / "keys", MinisignKey.generate(tmp_path / "m"), SshKey.generate(tmp_path / "s"))


def _policy(tmp_path, transports: dict | None = None) -> object:
    import json

    from edgelet.testing.cosign import CosignKey

    key = CosignKey().write_public(tmp_path / "cosign.pub")
    path = tmp_path / "policy.json"
    path.write_text(
        json.dumps(
            {
                "default": [{"type": "reject"}],
                "transports": transports
                if transports is not None
                else {"docker": {"registry.example/fleet": [{"type": "sigstoreSigned", "keyPath": str(key)}]}},
            }
        )
    )
    return path


@pytest.mark.skipif(
    bool(__import__("edgelet.testing.signing", fromlist=["x"]).missing_tools()),
    reason="needs minisign, signify-openbsd and ssh-keygen",
)
def test_trusted_keys_are_read_as_the_agent_reads_them(tmp_path):
    keys = _keys_dir(tmp_path)
    assert check.trusted_keys_status(keys) == ("OK", f"{keys}: 1 minisign/signify and 1 SSH keys")
    with open(keys / "allowed_signers", "a") as f:
        f.write("# a comment\nops@example ssh-ed25519 not-base64!\n")
    assert check.trusted_keys_status(keys) == (
        "FAIL",
        f"--trusted-keys {keys / 'allowed_signers'}:3: the key is not base64",
    )
    (keys / "allowed_signers").unlink()
    keys.chmod(0o777)
    verdict, detail = check.trusted_keys_status(keys)
    assert verdict == "FAIL" and detail.startswith(f"--trusted-keys {keys}: the directory is world-writable")
    verdict, detail = check.trusted_keys_status(tmp_path / "absent")
    assert verdict == "FAIL" and detail.startswith(f"--trusted-keys {tmp_path / 'absent'}: cannot read")


def test_a_signature_policy_is_read_as_the_agent_reads_it(tmp_path):
    path = _policy(tmp_path)
    assert check.signature_policy_status(path) == ("OK", f"{path}: 1 docker scopes, default reject")
    path = _policy(
        tmp_path,
        {"docker": {"registry.example/fleet": [{"type": "sigstoreSigned", "keyPath": str(tmp_path / "nokey.pub")}]}},
    )
    verdict, detail = check.signature_policy_status(path)
    assert verdict == "FAIL"
    assert detail.startswith(
        f'signature policy {path} field transports.docker["registry.example/fleet"][0].keyPath: '
        f"key file {tmp_path / 'nokey.pub'}"
    )
    (tmp_path / "nokey.pub").write_text("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
    verdict, detail = check.signature_policy_status(path)
    assert verdict == "FAIL" and "not an ECDSA P-256 public key" in detail and ".keyPath" in detail
    path.write_text('{"default": [{"type": "reject"}], "transport": {}}')
    assert check.signature_policy_status(path) == ("FAIL", f"signature policy {path} field transport: unknown field")


def test_a_world_writable_policy_or_key_file_fails_as_a_world_writable_trusted_key_does(tmp_path):
    path = _policy(tmp_path)
    path.chmod(0o666)
    verdict, detail = check.signature_policy_status(path)
    assert verdict == "FAIL" and detail.startswith(f"signature policy {path}: the file is world-writable (mode 0666)")
    path.chmod(0o644)
    (tmp_path / "cosign.pub").chmod(0o666)
    verdict, detail = check.signature_policy_status(path)
    assert verdict == "FAIL"
    assert detail.startswith(
        f'signature policy {path} field transports.docker["registry.example/fleet"][0].keyPath: '
        f"key file {tmp_path / 'cosign.pub'}: the file is world-writable (mode 0666)"
    )


@pytest.mark.skipif(
    bool(__import__("edgelet.testing.signing", fromlist=["x"]).missing_tools()),
    reason="needs minisign, signify-openbsd and ssh-keygen",
)
def test_edgelet_check_reports_both_trust_settings(tmp_path):
    import io

    from edgelet.cli import main

    keys = _keys_dir(tmp_path)
    (keys / "minisign.pub").write_text("untrusted comment: x\nRWQ-not-a-key\n")
    # keyless verification is refused at start, as the agent would refuse to start with it
    policy = _policy(tmp_path, {"docker": {"registry.example/fleet": [{"type": "sigstoreSigned", "fulcio": {}}]}})
    out, err = io.StringIO(), io.StringIO()
    rc = main(
        [
            "check",
            "--config",
            "/dev/null",
            "--root-dir",
            str(tmp_path / "root"),
            "--trusted-keys",
            str(keys),
            "--signature-policy",
            str(policy),
        ],
        out=out,
        err=err,
    )
    lines = out.getvalue().splitlines()
    assert rc != 0, out.getvalue()
    [keys_line] = [line for line in lines if line.startswith("FAIL  trusted keys: ")]
    assert f"--trusted-keys {keys / 'minisign.pub'}:2: not base64" in keys_line
    [policy_line] = [line for line in lines if line.startswith("FAIL  signature policy: ")]
    assert (
        f'signature policy {policy} field transports.docker["registry.example/fleet"][0].fulcio: keyless' in policy_line
    ), policy_line


# --- the kubeconfig (issue 24: a malformed one from the card is named, never a crash loop) -----------------


@pytest.mark.parametrize(
    "changes, verdict, text",
    [
        ({}, "OK", "not configured: standalone"),
        (
            {"kubeconfig": ("OK", "/etc/edgelet/kubeconfig: server https://10.0.0.1:6443")},
            "OK",
            "https://10.0.0.1:6443",
        ),
        ({"kubeconfig": ("FAIL", "/etc/edgelet/kubeconfig: invalid YAML")}, "FAIL", "/etc/edgelet/kubeconfig: invalid"),
    ],
)
def test_kubeconfig_verdict(changes, verdict, text):
    result = next(r for r in check.run_checks(dataclasses.replace(GOOD, **changes)) if r.name == "kubeconfig")
    assert result.verdict == verdict and text in result.detail


def test_a_kubeconfig_set_aside_by_card_setup_warns_naming_it_and_why():
    facts = dataclasses.replace(
        GOOD,
        card_dir="/boot/firmware/edgelet",
        card_present=True,
        card_rejected=(("/etc/edgelet/kubeconfig.rejected", "/etc/edgelet/kubeconfig.rejected: invalid YAML: ..."),),
    )
    result = next(r for r in check.run_checks(facts) if r.name == "card folder")
    assert result.verdict == "WARN" and "invalid YAML" in result.detail
    assert "/etc/edgelet/kubeconfig.rejected" in result.hint


@pytest.mark.parametrize(
    "text, verdict, detail",
    [
        (
            "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters: [{name: k, cluster: {server: 'http://127.0.0.1:1'}}]\n"
            "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n",
            "OK",
            "server http://127.0.0.1:1",
        ),
        ("clusters: [unclosed\n", "FAIL", "invalid YAML"),
        ("apiVersion: v1\nkind: Config\n", "FAIL", "kubeconfig"),
    ],
)
def test_kubeconfig_status_loads_the_file_as_the_agent_does(tmp_path, text, verdict, detail):
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    got = check.kubeconfig_status(path)
    assert got[0] == verdict and detail in got[1] and (verdict == "OK" or str(path) in got[1])
    assert check.kubeconfig_status(tmp_path / "absent")[0] == "FAIL"


def test_rejected_card_secrets(tmp_path):
    assert check.rejected_card_secrets(tmp_path) == ()
    (tmp_path / "kubeconfig.rejected").write_text("{{{")
    [(path, why)] = check.rejected_card_secrets(tmp_path)
    assert path == str(tmp_path / "kubeconfig.rejected") and "invalid YAML" in why
    # A usable kubeconfig or any other secret set aside: the device held one, and a card never replaces it.
    (tmp_path / "kubeconfig.rejected").write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters: [{name: k, cluster: {server: 'http://192.0.2.1'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    (tmp_path / "api-tokens.csv.rejected").write_text("t,u,g\n")
    reasons = dict(check.rejected_card_secrets(tmp_path))
    assert reasons[str(tmp_path / "kubeconfig.rejected")].endswith("a card never replaces a secret)")
    assert (
        f"the device holds {tmp_path / 'api-tokens.csv'} already" in reasons[str(tmp_path / "api-tokens.csv.rejected")]
    )


RUNC_H = ("runc", "/usr/sbin/runc", "runc version 1.1.5+ds1", "OCI 1.0.0..1.0.2-dev")
CRUN_H = ("crun", "/usr/bin/crun", "crun version 1.8.1", "features unknown (the runtime has no `features` command)")
HYBRID = (
    "hybrid cgroups: the cgroup2 mount /sys/fs/cgroup/unified holds hugetlb, so crun refuses every container; "
    "fix (as root, at every boot): mkdir -p /sys/fs/cgroup/hugetlb && mount -t cgroup -o hugetlb cgroup "
    "/sys/fs/cgroup/hugetlb"
)


@pytest.mark.parametrize(
    "handlers, default, hybrid, handlers_verdict, crun_verdict",
    [
        ((RUNC_H, CRUN_H), "runc", None, "OK", "OK"),
        ((RUNC_H,), "runc", HYBRID, "OK", "OK"),  # no crun: the layout does not matter
        ((RUNC_H, CRUN_H), "runc", HYBRID, "OK", "WARN"),
        ((RUNC_H, CRUN_H), "crun", HYBRID, "OK", "FAIL"),
        ((RUNC_H, ("crun", None, "", "")), "runc", None, "WARN", "OK"),
        ((RUNC_H, ("crun", None, "", "")), "crun", None, "FAIL", "OK"),
        ((RUNC_H,), "kata", None, "FAIL", "OK"),
    ],
)
def test_runtime_handlers_and_crun_cgroups(handlers, default, hybrid, handlers_verdict, crun_verdict) -> None:
    facts = dataclasses.replace(GOOD, handlers=handlers, default_handler=default, hybrid_cgroups=hybrid)
    listed = check.check_handlers(facts)
    assert listed.verdict == handlers_verdict, listed
    found = [h for h in handlers if h[1]]
    for name, path, _, features in found:
        assert f"{path} " in listed.detail and features in listed.detail, name
    crun = check.check_crun_cgroups(facts)
    assert crun.verdict == crun_verdict, crun
    if crun_verdict != "OK":
        assert "hugetlb" in crun.detail and crun.hint.startswith("mkdir -p /sys/fs/cgroup/hugetlb && mount")


@pytest.mark.parametrize(
    "files, held",
    [
        ({"unified/cgroup.controllers": "hugetlb\n"}, ["hugetlb"]),  # this machine before the fix
        ({"unified/cgroup.controllers": "\n"}, []),  # after it
        ({"cgroup.controllers": "cpu memory pids\n"}, []),  # pure v2 (a Pi on bookworm)
        ({}, []),  # pure v1
    ],
)
def test_hybrid_cgroups_problem(tmp_path, files, held) -> None:
    from edgelet.cgroups.hybrid import problem, unified_controllers

    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert unified_controllers(tmp_path) == held
    found = problem(tmp_path)
    if not held:
        assert found is None
    else:
        assert f"mount -t cgroup -o hugetlb cgroup {tmp_path}/hugetlb" in found
        assert "crun refuses" in found
