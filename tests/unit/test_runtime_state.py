"""Pure parts of the runc runtime: conmon argv, state reconstruction from runc list + exit files, pod files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from edgelet.api.types import (
    Container,
    HostAlias,
    ObjectMeta,
    Pod,
    PodDNSConfig,
    PodDNSConfigOption,
    PodSpec,
    VolumeMount,
)
from edgelet.container.errors import ExecError, VolumeError
from edgelet.runtime import bundle as bl
from edgelet.runtime import subpath
from edgelet.runtime.conmon import ConmonArgs, conmon_argv, parse_sync_message
from edgelet.runtime.host import compute_min_oom_score_adj, parse_group, parse_group_members, parse_passwd
from edgelet.runtime.layout import (
    ANN_ATTEMPT,
    ANN_CONTAINER_NAME,
    ANN_CONTAINER_TYPE,
    ANN_CREATED,
    ANN_HASH,
    ANN_HOST_NETWORK,
    ANN_IMAGE,
    ANN_IMAGE_ID,
    ANN_KIND,
    ANN_LOG_PATH,
    ANN_POD_NAME,
    ANN_POD_NAMESPACE,
    ANN_POD_UID,
    ANN_SANDBOX_ID,
)
from edgelet.runtime.sandbox import sandbox_namespace_paths
from edgelet.runtime.state import ExitInfo, Observed, build_pod_statuses, judge_state, parse_runc_time

# ---------------------------------------------------------------- conmon


def test_conmon_argv_matches_what_works_on_these_machines() -> None:
    a = ConmonArgs(
        conmon="/usr/bin/conmon",
        runtime="/usr/sbin/runc",
        runtime_root=Path("/run/edgelet/runc"),
        container_id="abc",
        name="k8s_app_web_default_u1_0",
        bundle=Path("/b"),
        log_path=Path("/var/log/pods/x/app/0.log"),
        exit_dir=Path("/run/edgelet/exits"),
        socket_dir=Path("/run/edgelet/socks"),
    )
    argv = conmon_argv(a)
    assert argv[:3] == ["/usr/bin/conmon", "--api-version", "1"]
    pairs = dict(zip(argv[1::2], argv[2::2]))
    assert pairs["-c"] == pairs["-u"] == "abc"
    assert pairs["-r"] == "/usr/sbin/runc"
    assert pairs["-b"] == "/b" and pairs["-p"] == "/b/pidfile" and pairs["--conmon-pidfile"] == "/b/conmon.pid"
    assert pairs["-l"] == "k8s-file:/var/log/pods/x/app/0.log"
    assert pairs["--exit-dir"] == "/run/edgelet/exits" and pairs["--persist-dir"] == "/b"
    assert pairs["--socket-dir-path"] == "/run/edgelet/socks" and pairs["--log-level"] == "error"
    i = argv.index("--runtime-arg")
    assert argv[i : i + 4] == ["--runtime-arg", "--root", "--runtime-arg", "/run/edgelet/runc"]
    assert "--sync" not in argv and "-s" not in argv  # conmon must daemonise; cgroupfs, not systemd
    assert "--log-size-max" not in argv
    assert conmon_argv(ConmonArgs(**{**a.__dict__, "log_size_max": 1024}))[-2:] == ["--log-size-max", "1024"]
    # stdin: true (kubectl attach -i): conmon holds the container's stdin; stdinOnce closes it after the first.
    assert conmon_argv(ConmonArgs(**{**a.__dict__, "stdin": True, "stdin_once": True}))[-1:] == ["--stdin"]
    assert conmon_argv(ConmonArgs(**{**a.__dict__, "stdin": True}))[-2:] == ["--stdin", "--leave-stdin-open"]
    assert conmon_argv(ConmonArgs(**{**a.__dict__, "terminal": True, "stdin": True, "stdin_once": True}))[-2:] == [
        "--terminal",
        "--stdin",
    ]


@pytest.mark.parametrize(
    "line, expected",
    [
        (b'{"data": 4242}\n', (4242, "")),
        (b'{"data": -1, "message": "exec: \\"nope\\": not found"}\n', (-1, 'exec: "nope": not found')),
    ],
)
def test_parse_sync_message(line: bytes, expected: tuple[int, str]) -> None:
    assert parse_sync_message(line) == expected


@pytest.mark.parametrize("line", [b"[]", b'{"pid": 3}', b'{"data": "x"}'])
def test_parse_sync_message_rejects_garbage(line: bytes) -> None:
    with pytest.raises(ValueError):
        parse_sync_message(line)


def test_exec_error_carries_command_code_and_stderr_tail() -> None:
    err = ExecError(["runc", "--root", "/r", "start", "x"], 1, b"a\nb\nc\nd\ne\nf\nlevel=error msg=boom\n")
    assert err.returncode == 1 and err.stderr.endswith("boom") and not err.stderr.startswith("a")
    assert "runc --root /r start ..." in str(err) and "exit code 1" in str(err)


# ---------------------------------------------------------------- state reconstruction


def _ann(
    kind: str = "container", uid: str = "u1", name: str = "app", attempt: int = 0, created: float = 100.0, **extra: str
) -> dict[str, str]:
    ann = {
        ANN_KIND: kind,
        ANN_POD_UID: uid,
        ANN_POD_NAME: "web",
        ANN_POD_NAMESPACE: "default",
        ANN_ATTEMPT: str(attempt),
        ANN_CREATED: repr(created),
    }
    if kind == "container":
        ann.update(
            {
                ANN_CONTAINER_NAME: name,
                ANN_CONTAINER_TYPE: "regular",
                ANN_HASH: "deadbeef",
                ANN_SANDBOX_ID: "sb1",
                ANN_IMAGE: "busybox",
                ANN_IMAGE_ID: "sha256:img",
                ANN_LOG_PATH: f"/log/{name}/{attempt}.log",
            }
        )
    ann.update(extra)
    return ann


def _runc(cid: str, status: str, pid: int = 0, created: str = "2024-01-02T03:04:05.123456789Z") -> dict:
    return {
        "ociVersion": "1.0.2-dev",
        "id": cid,
        "pid": pid,
        "status": status,
        "bundle": f"/b/{cid}",
        "rootfs": f"/b/{cid}/rootfs",
        "created": created,
        "annotations": {},
        "owner": "root",
    }


@pytest.mark.parametrize(
    "observed, expected",
    [
        # (state, pid, exit_code, reason, finished_at)
        (Observed("c", {}, _runc("c", "created", 10)), ("created", 10, None, "", None)),
        (Observed("c", {}, _runc("c", "running", 11)), ("running", 11, None, "", None)),
        (Observed("c", {}, _runc("c", "paused", 12)), ("running", 12, None, "", None)),
        (Observed("c", {}, _runc("c", "stopped"), ExitInfo(0, 50.0)), ("exited", None, 0, "Completed", 50.0)),
        (Observed("c", {}, _runc("c", "stopped"), ExitInfo(3, 51.0)), ("exited", None, 3, "Error", 51.0)),
        (
            Observed("c", {}, _runc("c", "stopped"), ExitInfo(137, 52.0), oom=True),
            ("exited", None, 137, "OOMKilled", 52.0),
        ),
        # Stopped, conmon still writing the exit file: not yet an exit.
        (Observed("c", {}, _runc("c", "stopped"), None, monitor_alive=True), ("running", None, None, "", None)),
        # Stopped and nobody recorded the exit.
        (Observed("c", {}, _runc("c", "stopped"), None), ("exited", None, 255, "ContainerStatusUnknown", None)),
        # A bundle runc does not know (after a reboot).
        (Observed("c", {}, None, None), ("exited", None, 255, "ContainerStatusUnknown", None)),
        # A bundle created after `runc list` began: conmon runs `runc create`, no state yet.
        (Observed("c", {}, None, None, monitor_alive=True), ("created", None, None, "", None)),
        (Observed("c", {}, None, ExitInfo(0, 53.0)), ("exited", None, 0, "Completed", 53.0)),
        (
            Observed("c", {}, _runc("c", "stopped"), ExitInfo(None, 54.0)),
            ("exited", None, 255, "ContainerStatusUnknown", 54.0),
        ),
    ],
)
def test_judge_state(observed: Observed, expected: tuple) -> None:
    assert judge_state(observed) == expected


@pytest.mark.parametrize(
    "observed, monitored",
    [
        # runc holds it created and its conmon waits for `runc start`: it may be started as it is.
        (Observed("c", _ann(), _runc("c", "created", 10), monitor_alive=True), True),
        # Created, its conmon gone (an agent killed before it read conmon's answer, and conmon with it): started,
        # its exit would be recorded nowhere, so the plan replaces it (chaos campaign, seed 21).
        (Observed("c", _ann(), _runc("c", "created", 10)), False),
        # Only a created instance is judged by its conmon; a running or exited one says nothing by it.
        (Observed("c", _ann(), _runc("c", "running", 11)), True),
        (Observed("c", _ann(), _runc("c", "stopped"), ExitInfo(3, 51.0)), True),
        (Observed("c", _ann(), None, None, monitor_alive=True), True),
    ],
)
def test_a_created_instance_is_monitored_only_while_its_conmon_lives(observed: Observed, monitored: bool) -> None:
    pod = build_pod_statuses([observed])["u1"]
    assert pod.containers[0].monitored is monitored


def test_build_pod_statuses_from_canned_runc_list_and_exit_files() -> None:
    observed = [
        Observed(
            "sb1", _ann("sandbox", host_network_unused="x", **{ANN_HOST_NETWORK: "true"}), _runc("sb1", "running", 100)
        ),
        Observed("c0", _ann(attempt=0, created=101.0), _runc("c0", "stopped"), ExitInfo(1, 150.0), started_at=102.0),
        Observed("c1", _ann(attempt=1, created=160.0), _runc("c1", "running", 200), started_at=161.0),
        Observed(
            "i0",
            _ann(name="init", created=99.0, **{ANN_CONTAINER_TYPE: "init"}),
            _runc("i0", "stopped", created="2024-01-02T03:04:05Z"),
            ExitInfo(0, 99.5),
        ),
        Observed("other", {"io.kubernetes.pod.uid": "u9"}, _runc("other", "running", 5)),  # not edgelet's: no kind
        Observed("u2sb", _ann("sandbox", uid="u2", attempt=3), None),
    ]
    pods = build_pod_statuses(observed)
    assert sorted(pods) == ["u1", "u2"]
    p = pods["u1"]
    assert (p.name, p.namespace) == ("web", "default")
    (sb,) = p.sandboxes
    assert (sb.id, sb.state, sb.pid, sb.attempt, sb.host_network) == ("sb1", "running", 100, 0, True)
    assert [c.id for c in p.containers] == ["c1", "c0", "i0"]  # newest first
    latest = p.latest("app")
    assert latest is not None and (latest.id, latest.attempt, latest.state, latest.pid) == ("c1", 1, "running", 200)
    assert latest.started_at == 161.0 and latest.spec_hash == "deadbeef" and latest.sandbox_id == "sb1"
    old = next(c for c in p.containers if c.id == "c0")
    assert (old.exit_code, old.reason, old.finished_at, old.started_at) == (1, "Error", 150.0, 102.0)
    init = next(c for c in p.containers if c.id == "i0")
    assert init.container_type == "init" and init.started_at == parse_runc_time("2024-01-02T03:04:05Z")
    assert (init.image, init.image_id, init.log_path) == ("busybox", "sha256:img", "/log/init/0.log")
    (lost,) = pods["u2"].sandboxes
    assert (lost.state, lost.attempt, lost.pid) == ("exited", 3, None)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2024-01-02T03:04:05Z", 1704164645.0),
        ("2024-01-02T03:04:05.5Z", 1704164645.5),
        ("2024-01-02T03:04:05.123456789Z", 1704164645.123456789),
        ("2024-01-02T04:04:05.25+01:00", 1704164645.25),
        ("2024-01-02T03:04:05-00:30", 1704166445.0),
        ("", None),
        ("garbage", None),
    ],
)
def test_parse_runc_time(text: str, expected: float | None) -> None:
    got = parse_runc_time(text)
    assert got == pytest.approx(expected) if expected is not None else got is None


def test_parse_passwd_and_group() -> None:
    assert parse_passwd("root:x:0:0:root:/root:/bin/sh\nbad\nnobody:x:65534:65534::/:/bin/false\n") == {
        "root": (0, 0),
        "nobody": (65534, 65534),
    }
    assert parse_group("root:x:0:\nwheel:x:10:root\nbroken:x:\n") == {"root": 0, "wheel": 10}
    assert parse_group_members("root:x:0:\nwheel:x:10:root,bob\n") == {"wheel": ("root", "bob")}


@pytest.mark.parametrize(
    "cap_eff, own, expected",
    [
        (0x1FFFFFFFFFF, -500, None),  # CAP_SYS_RESOURCE: anything goes
        (0x1FFFEFFFFFF, 0, 0),  # no CAP_SYS_RESOURCE (as on these VMs)
        (0x1FFFEFFFFFF, -500, 0),  # conmon raised runc to 0; it cannot go back down
        (0x1FFFEFFFFFF, 300, 300),
    ],
)
def test_min_oom_score_adj(cap_eff: int, own: int, expected: int | None) -> None:
    assert compute_min_oom_score_adj(cap_eff, own) == expected


# ---------------------------------------------------------------- pod files


def _pod(**spec) -> Pod:
    return Pod(
        metadata=ObjectMeta(name="web", namespace="default", uid="u1"),
        spec=PodSpec(containers=[Container(name="app")], **spec),
    )


@pytest.mark.parametrize(
    "spec, expected",
    [
        ({}, "web"),
        ({"hostname": "custom"}, "custom"),
        ({"host_network": True, "hostname": "custom"}, "node1"),
    ],
)
def test_pod_hostname(spec: dict, expected: str) -> None:
    assert bl.pod_hostname(_pod(**spec), "node1") == expected


def test_pod_hostname_is_truncated_like_kubelet() -> None:
    pod = _pod()
    pod.metadata.name = "a" * 62 + "-b"
    assert bl.pod_hostname(pod, "n") == "a" * 62


def test_hosts_file() -> None:
    text = bl.build_hosts_file("web", host_aliases=[("10.0.0.1", ("db", "db.local")), ("10.0.0.2", ())])
    assert text.startswith("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n")
    assert "127.0.1.1\tweb\n" in text and "10.0.0.1\tdb\tdb.local\n" in text and "10.0.0.2" not in text
    assert "10.1.2.3\tweb\n" in bl.build_hosts_file("web", pod_ips=["10.1.2.3"])
    host = bl.build_hosts_file("node", host_network=True, host_hosts="127.0.0.1 localhost")
    assert host == "127.0.0.1 localhost\n"


HOST_RESOLV = "# generated\nnameserver 1.1.1.1\nnameserver 8.8.8.8\nsearch lan\noptions ndots:2 edns0\n"


@pytest.mark.parametrize(
    "policy, host_network, kw, expected, warns",
    [
        ("Default", False, {}, "nameserver 1.1.1.1\nnameserver 8.8.8.8\nsearch lan\noptions ndots:2 edns0\n", 0),
        ("ClusterFirst", False, {}, "nameserver 1.1.1.1\nnameserver 8.8.8.8\nsearch lan\noptions ndots:2 edns0\n", 1),
        ("ClusterFirst", True, {}, "nameserver 1.1.1.1\nnameserver 8.8.8.8\nsearch lan\noptions ndots:2 edns0\n", 0),
        (
            "None",
            False,
            {"nameservers": ["9.9.9.9"], "searches": ["x.y"], "options": [("ndots", "5")]},
            "nameserver 9.9.9.9\nsearch x.y\noptions ndots:5\n",
            0,
        ),
        (
            "Default",
            False,
            {"nameservers": ["9.9.9.9"], "options": [("ndots", "5"), ("rotate", None)]},
            "nameserver 1.1.1.1\nnameserver 8.8.8.8\nnameserver 9.9.9.9\nsearch lan\noptions ndots:5 edns0 rotate\n",
            0,
        ),
        # --cluster-dns / --cluster-domain: kubelet's ClusterFirst.
        (
            "ClusterFirst",
            False,
            {"cluster_dns": ["10.43.0.10"], "cluster_domain": "cluster.local", "namespace": "edge"},
            "nameserver 10.43.0.10\nsearch edge.svc.cluster.local svc.cluster.local cluster.local lan\noptions ndots:5\n",
            0,
        ),
        (
            "ClusterFirst",
            True,
            {"cluster_dns": ["10.43.0.10"]},  # hostNetwork: Default
            "nameserver 1.1.1.1\nnameserver 8.8.8.8\nsearch lan\noptions ndots:2 edns0\n",
            0,
        ),
        (
            "ClusterFirstWithHostNet",
            True,
            {"cluster_dns": ["10.43.0.10"], "cluster_domain": "c.l"},
            "nameserver 10.43.0.10\nsearch default.svc.c.l svc.c.l c.l lan\noptions ndots:5\n",
            0,
        ),
        (
            "ClusterFirstWithHostNet",
            True,
            {},
            "nameserver 1.1.1.1\nnameserver 8.8.8.8\nsearch lan\noptions ndots:2 edns0\n",
            1,
        ),
    ],
)
def test_resolv_conf(policy: str, host_network: bool, kw: dict, expected: str, warns: int) -> None:
    text, warnings = bl.build_resolv_conf(policy, host_network, HOST_RESOLV, **kw)
    assert text == expected and len(warnings) == warns


def test_pod_resolv_conf_reads_dns_config() -> None:
    pod = _pod(
        dns_policy="None",
        dns_config=PodDNSConfig(nameservers=["10.0.0.10"], options=[PodDNSConfigOption(name="ndots", value="1")]),
    )
    assert bl.pod_resolv_conf(pod, HOST_RESOLV)[0] == "nameserver 10.0.0.10\noptions ndots:1\n"


def test_set_hostname_as_fqdn_and_the_hosts_entry() -> None:
    pod = _pod(hostname="web", subdomain="svc1", set_hostname_as_fqdn=True)
    assert bl.pod_hostname(pod, "node", "cluster.local") == "web.svc1.default.svc.cluster.local"
    assert bl.pod_hostname(pod, "node", "") == "web"  # no domain: no FQDN
    fqdn = bl.pod_fqdn(pod, "web", "cluster.local")
    assert "10.1.0.5\tweb.svc1.default.svc.cluster.local\tweb\n" in bl.build_hosts_file(
        "web", pod_ips=["10.1.0.5"], fqdn=fqdn
    )


def test_host_aliases_reach_the_hosts_file_shape() -> None:
    pod = _pod(host_aliases=[HostAlias(ip="1.2.3.4", hostnames=["a"])])
    aliases = [(a.ip, tuple(a.hostnames or ())) for a in pod.spec.host_aliases]
    assert "1.2.3.4\ta\n" in bl.build_hosts_file("web", host_aliases=aliases)


@pytest.mark.parametrize("sub", ["/abs", "../up", "a/../../b", "a/.."])
def test_sub_path_validation_rejects(sub: str) -> None:
    with pytest.raises(VolumeError):
        bl.check_sub_path(sub)


def test_sub_path_symlink_escape_is_refused_before_anything_is_created(tmp_path: Path) -> None:
    vol, host = tmp_path / "vol", tmp_path / "host"
    vol.mkdir()
    host.mkdir()
    (vol / "link").symlink_to(host)
    for sub in ("link", "link/new/dir"):
        with pytest.raises(ValueError, match="outside"):
            subpath.open_sub_path(vol, sub)
    assert list(host.iterdir()) == []


def test_sub_path_is_opened_without_following_symlinks(tmp_path: Path) -> None:
    vol = tmp_path / "vol"
    (vol / "real").mkdir(parents=True)
    vol.chmod(0o777)
    (vol / "inside").symlink_to("real")  # a symlink that stays inside the volume is allowed, as in kubelet
    fd = subpath.open_sub_path(vol, "made/here")
    try:
        assert os.path.samestat(os.fstat(fd), os.stat(vol / "made" / "here"))
    finally:
        os.close(fd)
    assert stat.S_IMODE((vol / "made" / "here").stat().st_mode) == 0o777  # the volume root's mode, not the umask's
    fd = subpath.open_sub_path(vol, "inside")
    try:
        assert os.path.samestat(os.fstat(fd), os.stat(vol / "real"))
    finally:
        os.close(fd)


def test_sub_path_walk_refuses_a_symlink_swapped_in_after_the_check(tmp_path: Path, monkeypatch) -> None:
    vol, host = tmp_path / "vol", tmp_path / "host"
    (vol / "d").mkdir(parents=True)
    host.mkdir()
    real_realpath = os.path.realpath

    def swap_after_check(p, *a, **kw):
        out = real_realpath(p, *a, **kw)
        if str(p).endswith("/d"):  # the check saw a directory; now it becomes a symlink to the host
            (vol / "d").rmdir()
            (vol / "d").symlink_to(host)
        return out

    monkeypatch.setattr(subpath.os.path, "realpath", swap_after_check)
    with pytest.raises(ValueError, match="symlink"):
        subpath.open_sub_path(vol, "d")


@pytest.mark.parametrize(
    "base, target, expected",
    [
        ("/v", "/v", ""),
        ("/v", "/v/a/b", "a/b"),
        ("/v", "/vx", None),
        ("/v", "/", None),
        ("/v/", "/v/a/", "a"),
    ],
)
def test_relative_inside(base: str, target: str, expected: str | None) -> None:
    got = subpath.relative_inside(base, target)
    assert (None if got is None else str(got).replace(".", "")) == expected


_RRO, _RO, _RW = ("rbind", "rprivate", "ro", "rro"), ("rbind", "rprivate", "ro"), ("rbind", "rprivate", "rw")


@pytest.mark.parametrize(
    "read_only, rro, supported, expected",
    [
        (True, None, True, _RRO),  # edgelet: recursively read-only by default where the kernel can
        (True, None, False, _RO),
        (True, "IfPossible", True, _RRO),
        (True, "IfPossible", False, _RO),
        (True, "Enabled", True, _RRO),
        (True, "Enabled", False, "cannot make"),
        (True, "Disabled", True, _RO),
        (False, None, True, _RW),
        (False, "Disabled", True, _RW),
        (False, "Enabled", True, "needs readOnly"),
        (True, "Sometimes", True, "unknown recursiveReadOnly"),
    ],
)
def test_volume_mount_options(read_only: bool, rro: str | None, supported: bool, expected) -> None:
    vm = VolumeMount(name="v", mount_path="/v", read_only=read_only, recursive_read_only=rro)
    if isinstance(expected, str):
        with pytest.raises(VolumeError, match=expected):
            bl.volume_mount_options(vm, supported)
    else:
        assert bl.volume_mount_options(vm, supported) == expected


@pytest.mark.parametrize(
    "q, expected", [("16Mi", 16 * 1024**2), ("1G", 10**9), (1024, 1024), ("1.5Ki", 1536), ("100", 100)]
)
def test_quantity_bytes(q, expected: int) -> None:
    assert bl.quantity_bytes(q) == expected


def test_host_path_types(tmp_path: Path) -> None:
    def plan(path: Path, t: str) -> bl.VolumePlan:
        return bl.VolumePlan("v", "hostPath", path, host_path_type=t)

    bl.prepare_host_path(plan(tmp_path / "new-dir", "DirectoryOrCreate"))
    assert (tmp_path / "new-dir").is_dir()
    bl.prepare_host_path(plan(tmp_path / "new-file", "FileOrCreate"))
    assert (tmp_path / "new-file").is_file()
    bl.prepare_host_path(plan(tmp_path / "new-dir", "Directory"))
    bl.prepare_host_path(plan(tmp_path / "new-file", "File"))
    bl.prepare_host_path(plan(tmp_path / "missing", ""))  # no type: no check
    for path, t in [
        (tmp_path / "missing", "Directory"),
        (tmp_path / "new-dir", "File"),
        (tmp_path / "new-file", "Socket"),
        (tmp_path / "no" / "parent", "FileOrCreate"),
        (tmp_path / "new-dir", "Weird"),
    ]:
        with pytest.raises(VolumeError):
            bl.prepare_host_path(plan(path, t))


@pytest.mark.parametrize(
    "spec, expected",
    [
        ({}, {"network", "uts", "ipc"}),
        ({"host_network": True}, {"ipc"}),
        ({"host_ipc": True}, {"network", "uts"}),
        ({"share_process_namespace": True}, {"network", "uts", "ipc", "pid"}),
        ({"share_process_namespace": True, "host_pid": True}, {"network", "uts", "ipc"}),
    ],
)
def test_sandbox_namespace_paths(spec: dict, expected: set[str]) -> None:
    paths = sandbox_namespace_paths(_pod(**spec), 42)
    assert set(paths) == expected
    assert all(p.startswith("/proc/42/ns/") for p in paths.values())
    assert paths.get("network", "/proc/42/ns/net") == "/proc/42/ns/net"


def test_the_grace_period_kept_on_the_container_is_read_back() -> None:
    from edgelet.runtime.layout import ANN_GRACE
    from edgelet.runtime.state import build_record

    base = {ANN_KIND: "container", ANN_POD_UID: "u1", ANN_CONTAINER_NAME: "app"}
    assert build_record(Observed("c1", {**base, ANN_GRACE: "7"}, None)).grace_period == 7.0
    assert build_record(Observed("c1", {**base, ANN_GRACE: "soon"}, None)).grace_period is None
    assert build_record(Observed("c1", base, None)).grace_period is None  # made by an older edgelet


@pytest.mark.parametrize(
    ("runc", "exit", "expected"),
    [
        (_runc("c1", "stopped"), ExitInfo(1, 50.0), "bye"),
        (None, None, "bye"),  # exited with an unknown status (conmon gone): it ran, and may have written one
        (_runc("c1", "running", 7), None, ""),  # only an exited container has a message
        (_runc("c1", "created", 7), None, ""),
        (_runc("c1", "stopped"), None, ""),  # conmon still writing the exit file: still running
    ],
)
def test_the_record_carries_the_observed_termination_message_once_exited(
    runc: dict | None, exit: ExitInfo | None, expected: str
) -> None:
    from edgelet.runtime.state import build_record

    # conmon alive only beside runc state: without it, a live conmon means a container still being created.
    o = Observed("c1", _ann(), runc, exit, monitor_alive=runc is not None, termination_message="bye")
    assert build_record(o).termination_message == expected  # type: ignore[union-attr]


# ---------------------------------------------------------------- sandboxes without an infra container


@pytest.mark.parametrize(
    "spec, infra",
    [
        ({}, False),
        ({"host_network": True, "host_ipc": True}, False),
        ({"share_process_namespace": True}, True),  # its pause process is PID 1 of the shared namespace
        ({"share_process_namespace": True, "host_pid": True}, False),  # the host's PID namespace: nothing to hold
    ],
)
def test_only_a_shared_pid_namespace_needs_a_pause_process(spec: dict, infra: bool) -> None:
    from edgelet.runtime.sandbox import needs_infra

    assert needs_infra(_pod(**spec)) is infra


@pytest.mark.parametrize(
    "spec, own_netns, kinds",
    [
        ({}, True, ("net", "ipc", "uts")),
        ({}, False, ("ipc", "uts")),  # CNI made the network namespace
        ({"host_network": True}, True, ("ipc",)),
        ({"host_ipc": True}, True, ("net", "uts")),
        ({"host_network": True, "host_ipc": True}, True, ()),
    ],
)
def test_pinned_kinds(spec: dict, own_netns: bool, kinds: tuple[str, ...]) -> None:
    from edgelet.runtime.sandbox import pinned_kinds

    assert pinned_kinds(_pod(**spec), own_netns=own_netns) == kinds


@pytest.mark.parametrize(
    "pinned, netns, expected",
    [
        (
            {"network": "/r/ns/s/net", "ipc": "/r/ns/s/ipc", "uts": "/r/ns/s/uts"},
            "",
            {"network": "/r/ns/s/net", "ipc": "/r/ns/s/ipc", "uts": "/r/ns/s/uts"},
        ),
        (
            {"ipc": "/r/ns/s/ipc", "uts": "/r/ns/s/uts"},
            "/r/netns/s",
            {"network": "/r/netns/s", "ipc": "/r/ns/s/ipc", "uts": "/r/ns/s/uts"},
        ),
        ({}, "", {}),  # hostNetwork and hostIPC: the host's, nothing to join
    ],
)
def test_containers_join_the_pinned_files(pinned: dict, netns: str, expected: dict) -> None:
    assert sandbox_namespace_paths(_pod(), None, netns, pinned) == expected


def test_namespaces_annotation_round_trips() -> None:
    from edgelet.runtime.state import format_namespaces, parse_namespaces

    ns = {"uts": "/r/ns/s/uts", "ipc": "/r/ns/s/ipc"}
    assert dict(parse_namespaces(format_namespaces(ns))) == ns
    assert parse_namespaces("") == () and parse_namespaces("junk,ipc=/x") == (("ipc", "/x"),)


@pytest.mark.parametrize(
    "observed, state",
    [
        (Observed("s", {}, None, None, started_at=1.0, pinned_live=True), "running"),
        (Observed("s", {}, None, ExitInfo(0, 5.0), started_at=1.0, pinned_live=False), "exited"),  # stopped
        (Observed("s", {}, None, None, started_at=None, pinned_live=False), "exited"),  # a kill before its start
        (Observed("s", {}, None, None, started_at=1.0, pinned_live=False), "exited"),  # namespaces gone (a reboot)
    ],
)
def test_a_pinned_sandbox_runs_while_its_namespaces_are_pinned(observed: Observed, state: str) -> None:
    assert judge_state(observed)[0] == state


def test_a_pinned_sandbox_record_is_rebuilt_from_its_annotations() -> None:
    from edgelet.runtime.layout import ANN_INFRA, ANN_NAMESPACES
    from edgelet.runtime.state import build_record

    rec = build_record(
        Observed(
            "s",
            _ann("sandbox", **{ANN_INFRA: "false", ANN_NAMESPACES: "ipc=/r/ns/s/ipc,network=/r/ns/s/net"}),
            None,
            None,
            started_at=1.0,
            pinned_live=True,
        )
    )
    assert rec is not None and rec.state == "running" and rec.pid is None
    assert rec.infra is False and rec.namespaces == (("ipc", "/r/ns/s/ipc"), ("network", "/r/ns/s/net"))
    assert rec.netns_path() == "/r/ns/s/net"
    old = build_record(Observed("s", _ann("sandbox"), {"status": "running", "pid": 7}))
    assert old is not None and old.infra is True and old.netns_path() == "/proc/7/ns/net"
