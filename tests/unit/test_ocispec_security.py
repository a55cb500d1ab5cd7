"""Table tests of the security decisions: users and groups, capabilities within the agent's bounding set,
seccomp (profile choice, RuntimeDefault per architecture, capability and kernel, Localhost files), AppArmor."""

import re

import pytest

from edgelet.api.types import (
    AppArmorProfile,
    Capabilities,
    Container,
    ObjectMeta,
    Pod,
    PodSecurityContext,
    PodSpec,
    SeccompProfile,
    SecurityContext,
)
from edgelet.ocispec.apparmor import compute_apparmor
from edgelet.ocispec.defaults import ALL_CAPABILITIES, DEFAULT_CAPABILITIES
from edgelet.ocispec.seccomp import (
    SeccompChoice,
    build_seccomp,
    compute_seccomp,
    default_profile,
    goarch,
    resolve_seccomp,
)
from edgelet.ocispec.security import SecurityError, compute_capabilities, resolve_user
from edgelet.runtime.host import parse_apparmor_profiles, parse_cap_mask, parse_kernel_version

PASSWD = {"root": (0, 0), "app": (1000, 1000), "www": (33, 33), "nobody": (65534, 65534)}
GROUPS = {"root": 0, "app": 1000, "www": 33, "audio": 29, "video": 44, "nogroup": 65534}
MEMBERS = {"audio": ("app",), "video": ("app", "www"), "root": ()}


def _pod(container_sc=None, pod_sc=None):
    c = Container(name="c", security_context=container_sc)
    return Pod(metadata=ObjectMeta(name="p", namespace="d"), spec=PodSpec(containers=[c], security_context=pod_sc)), c


USER_CASES = [
    # label, container sc, pod sc, image USER, (uid, gid, additional gids)
    ("default root", None, None, "", (0, 0, (0,))),
    ("image uid", None, None, "1000", (1000, 1000, (1000, 29, 44))),
    ("image uid unknown to passwd", None, None, "4242", (4242, 0, (0,))),
    ("image uid:gid", None, None, "1000:5", (1000, 5, (5, 29, 44))),
    ("image name", None, None, "www", (33, 33, (33, 44))),
    ("image name:group", None, None, "app:video", (1000, 44, (44, 29))),
    ("image uid:group name", None, None, "33:audio", (33, 29, (29, 44))),
    ("pod runAsUser", None, PodSecurityContext(run_as_user=1000), "www", (1000, 1000, (1000, 29, 44))),
    (
        "container over pod",
        SecurityContext(run_as_user=33),
        PodSecurityContext(run_as_user=1000, run_as_group=7),
        "",
        (33, 7, (7, 44)),
    ),
    ("runAsGroup alone applies to image user", SecurityContext(run_as_group=5), None, "app", (1000, 5, (5, 29, 44))),
    (
        "fsGroup then supplementalGroups, deduplicated",
        None,
        PodSecurityContext(run_as_user=1000, fs_group=2000, supplemental_groups=[3000, 29, 2000]),
        "",
        (1000, 1000, (1000, 29, 44, 2000, 3000)),
    ),
    (
        "Strict policy ignores /etc/group memberships",
        None,
        PodSecurityContext(run_as_user=1000, supplemental_groups=[3000], supplemental_groups_policy="Strict"),
        "",
        (1000, 1000, (1000, 3000)),
    ),
    (
        "runAsNonRoot with a non-root image user",
        SecurityContext(run_as_non_root=True),
        None,
        "app",
        (1000, 1000, (1000, 29, 44)),
    ),
]


@pytest.mark.parametrize(("label", "sc", "psc", "image_user", "expected"), USER_CASES, ids=[c[0] for c in USER_CASES])
def test_resolve_user(label, sc, psc, image_user, expected):
    pod, c = _pod(sc, psc)
    u = resolve_user(pod, c, image_user, PASSWD, GROUPS, MEMBERS)
    assert (u.uid, u.gid, u.additional_gids) == expected


@pytest.mark.parametrize(
    ("sc", "psc", "image_user", "message"),
    [
        (None, None, "ghost", "unable to find user 'ghost'"),
        (None, None, "app:ghosts", "unable to find group 'ghosts'"),
        (SecurityContext(run_as_non_root=True), None, "", "image will run as root"),
        (None, PodSecurityContext(run_as_non_root=True), "0", "image will run as root"),
        (None, PodSecurityContext(run_as_non_root=True), "root", "image will run as root"),
        (None, PodSecurityContext(run_as_non_root=True), "0:1000", "image will run as root"),
        (SecurityContext(run_as_non_root=True, run_as_user=0), None, "app", "runAsUser breaks non-root policy"),
    ],
)
def test_resolve_user_errors(sc, psc, image_user, message):
    pod, c = _pod(sc, psc)
    with pytest.raises(SecurityError, match=message):
        resolve_user(pod, c, image_user, PASSWD, GROUPS, MEMBERS)


def test_run_as_non_root_false_in_container_overrides_pod():
    pod, c = _pod(SecurityContext(run_as_non_root=False), PodSecurityContext(run_as_non_root=True))
    assert resolve_user(pod, c, "", PASSWD, GROUPS).uid == 0


def _caps(add=None, drop=None, privileged=None):
    sc = SecurityContext(
        capabilities=Capabilities(add=add, drop=drop) if (add or drop) else None, privileged=privileged
    )
    return compute_capabilities(Container(name="c", security_context=sc), DEFAULT_CAPABILITIES, ALL_CAPABILITIES)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, list(DEFAULT_CAPABILITIES)),
        ({"add": ["NET_ADMIN"]}, [*DEFAULT_CAPABILITIES, "CAP_NET_ADMIN"]),
        ({"add": ["CAP_SYS_TIME", "net_admin"]}, [*DEFAULT_CAPABILITIES, "CAP_SYS_TIME", "CAP_NET_ADMIN"]),
        ({"add": ["CHOWN"]}, list(DEFAULT_CAPABILITIES)),  # already there: no duplicate
        (
            {"drop": ["NET_RAW", "CAP_MKNOD"]},
            [c for c in DEFAULT_CAPABILITIES if c not in ("CAP_NET_RAW", "CAP_MKNOD")],
        ),
        ({"drop": ["ALL"]}, []),
        ({"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}, ["CAP_NET_BIND_SERVICE"]),
        ({"add": ["ALL"]}, list(ALL_CAPABILITIES)),
        ({"add": ["ALL"], "drop": ["SYS_ADMIN"]}, [c for c in ALL_CAPABILITIES if c != "CAP_SYS_ADMIN"]),
        ({"privileged": True, "drop": ["ALL"]}, list(ALL_CAPABILITIES)),
    ],
)
def test_capabilities(kwargs, expected):
    assert _caps(**kwargs) == expected


@pytest.mark.parametrize("kwargs", [{"add": ["NOT_A_CAP"]}, {"drop": ["CAP_NOPE"]}])
def test_unknown_capability(kwargs):
    with pytest.raises(SecurityError, match="unknown capability"):
        _caps(**kwargs)


# ---------------------------------------------------------------- bounding set

BOUNDING = tuple(c for c in ALL_CAPABILITIES if c not in ("CAP_SYS_RESOURCE", "CAP_NET_RAW"))


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"privileged": True}, list(BOUNDING)),
        ({}, [c for c in DEFAULT_CAPABILITIES if c != "CAP_NET_RAW"]),
        ({"add": ["ALL"], "drop": ["SYS_ADMIN"]}, [c for c in BOUNDING if c != "CAP_SYS_ADMIN"]),
        ({"add": ["NET_ADMIN"]}, [*(c for c in DEFAULT_CAPABILITIES if c != "CAP_NET_RAW"), "CAP_NET_ADMIN"]),
    ],
    ids=["privileged is the agent's set", "defaults cut to it", "ALL is the agent's set", "add within it"],
)
def test_capabilities_within_the_agents_bounding_set(kwargs, expected):
    sc = SecurityContext(
        capabilities=Capabilities(add=kwargs.get("add"), drop=kwargs.get("drop")), privileged=kwargs.get("privileged")
    )
    got = compute_capabilities(
        Container(name="c", security_context=sc), DEFAULT_CAPABILITIES, ALL_CAPABILITIES, BOUNDING
    )
    assert got == expected


def test_adding_a_capability_the_agent_lacks_is_an_error():
    sc = SecurityContext(capabilities=Capabilities(add=["SYS_RESOURCE"]))
    with pytest.raises(SecurityError, match="'SYS_RESOURCE' .* not in edgelet's own bounding set"):
        compute_capabilities(Container(name="c", security_context=sc), DEFAULT_CAPABILITIES, ALL_CAPABILITIES, BOUNDING)


# ---------------------------------------------------------------- seccomp

RD, LH, UC = (
    SeccompProfile(type="RuntimeDefault"),
    SeccompProfile(type="Localhost", localhost_profile="a.json"),
    SeccompProfile(type="Unconfined"),
)

SECCOMP_CASES = [
    # label, container sc, pod sc, default_on, (kind, localhost name)
    ("unset, default on", None, None, True, ("RuntimeDefault", None)),
    ("unset, default off", None, None, False, ("Unconfined", None)),
    ("pod RuntimeDefault", None, PodSecurityContext(seccomp_profile=RD), False, ("RuntimeDefault", None)),
    ("pod Localhost", None, PodSecurityContext(seccomp_profile=LH), True, ("Localhost", "a.json")),
    (
        "container over pod",
        SecurityContext(seccomp_profile=UC),
        PodSecurityContext(seccomp_profile=LH),
        True,
        ("Unconfined", None),
    ),
    (
        "container Localhost over pod Unconfined",
        SecurityContext(seccomp_profile=LH),
        PodSecurityContext(seccomp_profile=UC),
        True,
        ("Localhost", "a.json"),
    ),
    ("privileged gets none", SecurityContext(privileged=True, seccomp_profile=RD), None, True, ("Unconfined", None)),
    (
        "privileged over pod profile",
        SecurityContext(privileged=True),
        PodSecurityContext(seccomp_profile=LH),
        True,
        ("Unconfined", None),
    ),
]


@pytest.mark.parametrize(
    ("label", "sc", "psc", "default_on", "expected"), SECCOMP_CASES, ids=[c[0] for c in SECCOMP_CASES]
)
def test_compute_seccomp(label, sc, psc, default_on, expected):
    pod, c = _pod(sc, psc)
    choice = compute_seccomp(pod, c, default_on=default_on)
    assert (choice.kind, choice.localhost_profile) == expected


def test_sandbox_follows_the_pod_level_profile():
    pod, _c = _pod(SecurityContext(seccomp_profile=UC), PodSecurityContext(seccomp_profile=LH))
    assert compute_seccomp(pod, None, default_on=True).kind == "Localhost"


@pytest.mark.parametrize("name", ["../etc/x", "/abs.json", ""])
def test_localhost_profile_names_stay_in_the_profile_dir(name):
    pod, c = _pod(SecurityContext(seccomp_profile=SeccompProfile(type="Localhost", localhost_profile=name)))
    with pytest.raises(SecurityError, match="localhostProfile"):
        compute_seccomp(pod, c, default_on=True)


def _rules(profile, **kw):
    out = build_seccomp(profile, name="t", **kw)
    return out, {n for r in out.get("syscalls", []) if r["action"] == "SCMP_ACT_ALLOW" for n in r["names"]}


@pytest.mark.parametrize(
    ("arch", "architectures", "present", "absent"),
    [
        (
            "amd64",
            ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
            {"arch_prctl", "modify_ldt"},
            {"set_tls", "cacheflush"},
        ),
        (
            "arm64",
            ["SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"],
            {"set_tls", "cacheflush", "arm_fadvise64_64"},
            {"arch_prctl", "modify_ldt"},
        ),
        ("arm", ["SCMP_ARCH_ARM"], {"set_tls", "breakpoint"}, {"arch_prctl"}),
    ],
)
def test_runtime_default_per_architecture(arch, architectures, present, absent):
    out, allowed = _rules(default_profile(), arch=arch, caps=DEFAULT_CAPABILITIES, kernel=(6, 1))
    assert out["defaultAction"] == "SCMP_ACT_ERRNO" and out["defaultErrnoRet"] == 1
    assert out["architectures"] == architectures
    assert present <= allowed and not absent & allowed


def test_runtime_default_follows_capabilities_and_kernel():
    _out, plain = _rules(default_profile(), arch="amd64", caps=DEFAULT_CAPABILITIES, kernel=(6, 1))
    # New namespaces and mounts need CAP_SYS_ADMIN; without it clone may not take namespace flags.
    assert not {"unshare", "mount", "setns", "bpf", "kcmp", "reboot", "open_by_handle_at"} & plain
    assert {"read", "execve", "chroot", "socket", "personality"} <= plain
    out, admin = _rules(
        default_profile(), arch="amd64", caps=[*DEFAULT_CAPABILITIES, "CAP_SYS_ADMIN", "CAP_SYS_PTRACE"], kernel=(6, 1)
    )
    assert {"unshare", "mount", "setns", "clone3", "kcmp"} <= admin
    assert not any(r["names"] == ["clone3"] and r["action"] == "SCMP_ACT_ERRNO" for r in out["syscalls"])
    masked = [
        r
        for r in _rules(default_profile(), arch="amd64", caps=(), kernel=(6, 1))[0]["syscalls"]
        if r["names"] == ["clone"]
    ]
    assert masked == [
        {
            "names": ["clone"],
            "action": "SCMP_ACT_ALLOW",
            "args": [{"index": 0, "value": 2114060288, "op": "SCMP_CMP_MASKED_EQ"}],
        }
    ]
    # ptrace of one's own children only from 4.8 on.
    assert "ptrace" in _rules(default_profile(), arch="amd64", caps=(), kernel=(4, 8))[1]
    assert "ptrace" not in _rules(default_profile(), arch="amd64", caps=(), kernel=(4, 4, 1))[1]


def test_localhost_profiles_in_oci_and_moby_form():
    oci = {
        "defaultAction": "SCMP_ACT_LOG",
        "architectures": ["SCMP_ARCH_X86_64"],
        "syscalls": [{"names": ["mkdir"], "action": "SCMP_ACT_ERRNO", "errnoRet": 13}],
    }
    assert build_seccomp(oci, arch="arm64", caps=(), kernel=None, name="t") == oci
    single = {"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"name": "mkdir", "action": "SCMP_ACT_ERRNO"}]}
    assert build_seccomp(single, arch="amd64", caps=(), kernel=None, name="t")["syscalls"] == [
        {"names": ["mkdir"], "action": "SCMP_ACT_ERRNO"}
    ]


@pytest.mark.parametrize(
    ("profiles", "message"),
    [
        ({}, "localhost seccomp profile 'a.json' not found in /r/seccomp"),
        ({"a.json": "{"}, "'a.json' is not valid JSON"),
        ({"a.json": "[]"}, "'a.json' has no defaultAction"),
        (
            {"a.json": '{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"action": "SCMP_ACT_ERRNO"}]}'},
            "needs names and an action",
        ),
        (
            {
                "a.json": '{"defaultAction": "SCMP_ACT_ALLOW", "architectures": ["SCMP_ARCH_X86_64"], '
                '"archMap": [{"architecture": "SCMP_ARCH_X86_64"}]}'
            },
            "either architectures or archMap",
        ),
    ],
)
def test_bad_localhost_profiles(profiles, message):
    choice = SeccompChoice("Localhost", "a.json", "securityContext.seccompProfile")
    with pytest.raises(SecurityError, match=re.escape(message)):
        resolve_seccomp(
            choice, localhost_profiles=profiles, profile_dir="/r/seccomp", arch="amd64", caps=(), kernel=None
        )


def test_unconfined_is_no_filter_and_goarch_names():
    assert (
        resolve_seccomp(
            SeccompChoice("Unconfined"), localhost_profiles={}, profile_dir="", arch="amd64", caps=(), kernel=None
        )
        is None
    )
    assert [goarch(m) for m in ("x86_64", "aarch64", "armv7l", "riscv64")] == ["amd64", "arm64", "arm", "riscv64"]


# ---------------------------------------------------------------- AppArmor

AA_RD = AppArmorProfile(type="RuntimeDefault")
AA_LH = AppArmorProfile(type="Localhost", localhost_profile="k8s-web")
AA_UC = AppArmorProfile(type="Unconfined")
ANN = "container.apparmor.security.beta.kubernetes.io/c"
LOADED = frozenset({"k8s-web", "docker-default"})

APPARMOR_CASES = [
    # label, container sc, pod sc, annotation, enabled, loaded, (profile, warns)
    ("unset: the loaded runtime default", None, None, None, True, LOADED, ("docker-default", False)),
    ("unset, none loaded: nothing, quietly", None, None, None, True, frozenset(), (None, False)),
    ("unset, no AppArmor", None, None, None, False, frozenset(), (None, False)),
    (
        "RuntimeDefault, none loaded: warns",
        SecurityContext(app_armor_profile=AA_RD),
        None,
        None,
        True,
        frozenset(),
        (None, True),
    ),
    (
        "RuntimeDefault, no AppArmor: warns",
        None,
        PodSecurityContext(app_armor_profile=AA_RD),
        None,
        False,
        frozenset(),
        (None, True),
    ),
    ("edgelet's own default first", None, None, None, True, LOADED | {"edgelet-default"}, ("edgelet-default", False)),
    ("Localhost loaded", SecurityContext(app_armor_profile=AA_LH), None, None, True, LOADED, ("k8s-web", False)),
    ("Unconfined", SecurityContext(app_armor_profile=AA_UC), None, None, True, LOADED, (None, False)),
    (
        "container field over annotation",
        SecurityContext(app_armor_profile=AA_UC),
        None,
        "localhost/k8s-web",
        True,
        LOADED,
        (None, False),
    ),
    (
        "annotation over pod field",
        None,
        PodSecurityContext(app_armor_profile=AA_UC),
        "localhost/k8s-web",
        True,
        LOADED,
        ("k8s-web", False),
    ),
    ("annotation runtime/default", None, None, "runtime/default", True, LOADED, ("docker-default", False)),
    ("privileged: no default", SecurityContext(privileged=True), None, None, True, LOADED, (None, False)),
    (
        "privileged keeps a Localhost profile",
        SecurityContext(privileged=True, app_armor_profile=AA_LH),
        None,
        None,
        True,
        LOADED,
        ("k8s-web", False),
    ),
]


def _aa_pod(sc, psc, annotation):
    pod, c = _pod(sc, psc)
    if annotation is not None:
        pod.metadata.annotations = {ANN: annotation}
    return pod, c


@pytest.mark.parametrize(
    ("label", "sc", "psc", "annotation", "enabled", "loaded", "expected"),
    APPARMOR_CASES,
    ids=[c[0] for c in APPARMOR_CASES],
)
def test_compute_apparmor(label, sc, psc, annotation, enabled, loaded, expected):
    pod, c = _aa_pod(sc, psc, annotation)
    decision = compute_apparmor(pod, c, enabled=enabled, loaded=loaded)
    assert (decision.profile, decision.warning is not None) == expected


@pytest.mark.parametrize(
    ("sc", "annotation", "enabled", "message"),
    [
        (
            SecurityContext(app_armor_profile=AppArmorProfile(type="Localhost", localhost_profile="gone")),
            None,
            True,
            "AppArmor profile 'gone' is not loaded",
        ),
        (SecurityContext(app_armor_profile=AA_LH), None, False, "AppArmor is not enabled on this host"),
        (None, "localhost/gone", True, f"metadata.annotations[{ANN}]: AppArmor profile 'gone' is not loaded"),
        (None, "strict", True, "is not runtime/default, unconfined or localhost/<profile>"),
    ],
)
def test_apparmor_refusals(sc, annotation, enabled, message):
    pod, c = _aa_pod(sc, None, annotation)
    with pytest.raises(SecurityError, match=re.escape(message)):
        compute_apparmor(pod, c, enabled=enabled, loaded=LOADED)


# ---------------------------------------------------------------- host facts


def test_host_fact_parsers():
    assert parse_cap_mask(0x000001FFFEFFFFFF) == tuple(c for c in ALL_CAPABILITIES if c != "CAP_SYS_RESOURCE")
    assert parse_cap_mask(0xA80425FB) == (
        "CAP_CHOWN",
        "CAP_DAC_OVERRIDE",
        "CAP_FOWNER",
        "CAP_FSETID",
        "CAP_KILL",
        "CAP_SETGID",
        "CAP_SETUID",
        "CAP_SETPCAP",
        "CAP_NET_BIND_SERVICE",
        "CAP_NET_RAW",
        "CAP_SYS_CHROOT",
        "CAP_MKNOD",
        "CAP_AUDIT_WRITE",
        "CAP_SETFCAP",
    )
    assert parse_kernel_version("6.1.0-18-arm64") == (6, 1, 0)
    assert parse_kernel_version("6.18") == (6, 18)
    assert parse_kernel_version("weird") is None
    assert parse_apparmor_profiles("docker-default (enforce)\n/usr/bin/man (complain)\nk8s web (enforce)\n") == {
        "docker-default",
        "/usr/bin/man",
        "k8s web",
    }
