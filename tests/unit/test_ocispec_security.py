"""Table tests of user resolution (runAsUser/runAsGroup, image USER, runAsNonRoot, groups) and capabilities."""

import pytest

from edgelet.api.types import Capabilities, Container, ObjectMeta, Pod, PodSecurityContext, PodSpec, SecurityContext
from edgelet.ocispec.defaults import ALL_CAPABILITIES, DEFAULT_CAPABILITIES
from edgelet.ocispec.security import SecurityError, compute_capabilities, resolve_user

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
    ("runAsNonRoot with a non-root image user", SecurityContext(run_as_non_root=True), None, "app", (1000, 1000, (1000, 29, 44))),
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
    sc = SecurityContext(capabilities=Capabilities(add=add, drop=drop) if (add or drop) else None, privileged=privileged)
    return compute_capabilities(Container(name="c", security_context=sc), DEFAULT_CAPABILITIES, ALL_CAPABILITIES)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, list(DEFAULT_CAPABILITIES)),
        ({"add": ["NET_ADMIN"]}, [*DEFAULT_CAPABILITIES, "CAP_NET_ADMIN"]),
        ({"add": ["CAP_SYS_TIME", "net_admin"]}, [*DEFAULT_CAPABILITIES, "CAP_SYS_TIME", "CAP_NET_ADMIN"]),
        ({"add": ["CHOWN"]}, list(DEFAULT_CAPABILITIES)),  # already there: no duplicate
        ({"drop": ["NET_RAW", "CAP_MKNOD"]}, [c for c in DEFAULT_CAPABILITIES if c not in ("CAP_NET_RAW", "CAP_MKNOD")]),
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
