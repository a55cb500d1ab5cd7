"""The container and sandbox config.json builders: every spec validates against the OCI schema, plus rule tables."""

from __future__ import annotations

import pytest

from edgelet.api.types import (
    AppArmorProfile,
    Capabilities,
    Container,
    EnvVar,
    ObjectMeta,
    Pod,
    PodSecurityContext,
    PodSpec,
    ResourceRequirements,
    SeccompProfile,
    SecurityContext,
    Sysctl,
)
from edgelet.images.types import ImageConfig
from edgelet.ocispec.build import (
    ContainerContext,
    Mount,
    SandboxContext,
    SeccompHost,
    SpecError,
    build_container_spec,
    build_sandbox_spec,
)
from edgelet.ocispec.defaults import ALL_CAPABILITIES, DEFAULT_CAPABILITIES, DEFAULT_PATH, MASKED_PATHS
from edgelet.testing.ocischema import OCISchemaError, validate_runtime_config

IMAGE = ImageConfig(
    entrypoint=("/bin/app",), cmd=("--serve",), env=("PATH=/opt/bin:/bin", "LANG=C"), working_dir="/srv"
)
PASSWD = {"root": (0, 0), "app": (1000, 1000)}
GROUPS = {"root": 0, "app": 1000}
NS = {"network": "/proc/42/ns/net", "ipc": "/proc/42/ns/ipc", "uts": "/proc/42/ns/uts"}
ANN = {"io.kubernetes.pod.uid": "uid-1", "io.edgelet.kind": "container"}


def make_pod(container: Container | None = None, **spec) -> Pod:
    c = container or Container(name="app", image="example/app:1")
    return Pod(
        metadata=ObjectMeta(name="web", namespace="default", uid="uid-1"),
        spec=PodSpec(containers=[c], restart_policy="Always", **spec),
    )


def make_ctx(**kw) -> ContainerContext:
    base = dict(
        rootfs="/var/lib/edgelet/pods/uid-1/app/rootfs",
        cgroups_path="/kubepods/burstable/poduid-1/ctr1",
        namespace_paths=NS,
        hostname="web",
        annotations=ANN,
        passwd=PASSWD,
        groups=GROUPS,
        memory_capacity=8 * 2**30,
    )
    base.update(kw)
    return ContainerContext(**base)


def build(pod: Pod, image: ImageConfig = IMAGE, **ctx) -> dict:
    spec = build_container_spec(pod, pod.spec.containers[0], image, make_ctx(**ctx))
    validate_runtime_config(spec)
    return spec


VOLUMES = (
    Mount("/data", "/var/lib/edgelet/pods/uid-1/volumes/data"),
    Mount("/etc/hosts", "/var/lib/edgelet/pods/uid-1/etc-hosts", options=("rbind", "ro")),
    Mount("/data/cache", "/var/lib/edgelet/pods/uid-1/volumes/cache"),
    Mount("/dev/shm", "/run/edgelet/pods/uid-1/shm", options=("rbind", "rw")),
)

CASES: list[tuple[str, Pod, dict]] = [
    ("plain", make_pod(), {}),
    ("privileged", make_pod(Container(name="app", security_context=SecurityContext(privileged=True))), {}),
    (
        "privileged with host devices",
        make_pod(Container(name="app", security_context=SecurityContext(privileged=True))),
        {"host_devices": ({"path": "/dev/ttyUSB0", "type": "c", "major": 188, "minor": 0, "fileMode": 0o660},)},
    ),
    ("hostNetwork", make_pod(host_network=True), {"namespace_paths": {"ipc": NS["ipc"]}}),
    ("hostPID and hostIPC", make_pod(host_pid=True, host_ipc=True), {"namespace_paths": {"network": NS["network"]}}),
    ("shared pid", make_pod(share_process_namespace=True), {"namespace_paths": {**NS, "pid": "/proc/42/ns/pid"}}),
    (
        "runAsUser",
        make_pod(security_context=PodSecurityContext(run_as_user=1000, run_as_group=1000, fs_group=2000)),
        {},
    ),
    ("named user", make_pod(), {}),
    (
        "read-only rootfs",
        make_pod(Container(name="app", security_context=SecurityContext(read_only_root_filesystem=True))),
        {},
    ),
    (
        "resources",
        make_pod(
            Container(
                name="app",
                resources=ResourceRequirements(
                    requests={"cpu": "250m", "memory": "64Mi"}, limits={"cpu": "1", "memory": "128Mi"}
                ),
            )
        ),
        {"swap_controller": True},
    ),
    (
        "sysctls",
        make_pod(
            security_context=PodSecurityContext(
                sysctls=[Sysctl(name="net.ipv4.ip_forward", value="1"), Sysctl(name="kernel.shmmax", value="65536")]
            )
        ),
        {"allowed_unsafe_sysctls": ("net.ipv4.*", "kernel.shmmax")},
    ),
    (
        "caps add/drop",
        make_pod(
            Container(
                name="app", security_context=SecurityContext(capabilities=Capabilities(add=["NET_ADMIN"], drop=["ALL"]))
            )
        ),
        {},
    ),
    ("volumes", make_pod(), {"mounts": VOLUMES}),
    (
        "command, args, env, tty",
        make_pod(
            Container(
                name="app",
                command=["/bin/sh", "-c"],
                args=["echo $(GREETING)"],
                env=[EnvVar(name="GREETING", value="hi")],
                working_dir="/work",
                tty=True,
                security_context=SecurityContext(allow_privilege_escalation=False),
            )
        ),
        {},
    ),
    ("no cgroup mount", make_pod(), {"cgroup_mount": False, "min_oom_score_adj": 0}),
    ("seccomp on arm64", make_pod(), {"seccomp": SeccompHost(arch="arm64", kernel_version=(6, 1))}),
    ("seccomp off", make_pod(), {"seccomp": SeccompHost(default_on=False)}),
    (
        "seccomp Localhost",
        make_pod(
            security_context=PodSecurityContext(
                seccomp_profile=SeccompProfile(type="Localhost", localhost_profile="p.json")
            )
        ),
        {
            "seccomp": SeccompHost(
                localhost_profiles={
                    "p.json": '{"defaultAction": "SCMP_ACT_LOG", "syscalls": '
                    '[{"names": ["mkdir"], "action": "SCMP_ACT_ERRNO", "errnoRet": 13}]}'
                }
            )
        },
    ),
    (
        "AppArmor runtime default",
        make_pod(
            Container(
                name="app", security_context=SecurityContext(app_armor_profile=AppArmorProfile(type="RuntimeDefault"))
            )
        ),
        {"apparmor_enabled": True, "apparmor_loaded": frozenset({"docker-default"})},
    ),
    (
        "privileged within a reduced bounding set",
        make_pod(Container(name="app", security_context=SecurityContext(privileged=True))),
        {"bounding_capabilities": tuple(c for c in ALL_CAPABILITIES if c != "CAP_SYS_RESOURCE")},
    ),
]


@pytest.mark.parametrize(("label", "pod", "ctx"), CASES, ids=[c[0] for c in CASES])
def test_container_spec_validates(label, pod, ctx):
    spec = build(
        pod, image=ImageConfig(entrypoint=("/bin/app",), user="app") if label == "named user" else IMAGE, **ctx
    )
    assert spec["ociVersion"] == "1.0.2-dev"
    assert spec["annotations"] == ANN
    assert spec["linux"]["cgroupsPath"] == "/kubepods/burstable/poduid-1/ctr1"
    assert spec["root"]["path"] == "/var/lib/edgelet/pods/uid-1/app/rootfs"


SANDBOX_CASES = [
    ("plain", make_pod()),
    ("hostNetwork", make_pod(host_network=True)),
    ("hostIPC hostPID", make_pod(host_ipc=True, host_pid=True)),
    (
        "sysctls",
        make_pod(security_context=PodSecurityContext(sysctls=[Sysctl(name="net.ipv4.tcp_syncookies", value="1")])),
    ),
]


@pytest.mark.parametrize(("label", "pod"), SANDBOX_CASES, ids=[c[0] for c in SANDBOX_CASES])
def test_sandbox_spec_validates(label, pod):
    ctx = SandboxContext(
        rootfs="/var/lib/edgelet/pause/rootfs",
        args=("/catatonit", "-P"),
        cgroups_path="/kubepods/besteffort/poduid-1/sandbox",
        hostname="web",
        annotations={"io.edgelet.kind": "sandbox"},
        extra_mounts=(Mount("/etc/resolv.conf", "/run/edgelet/resolv.conf", options=("rbind", "ro")),),
    )
    spec = build_sandbox_spec(pod, ctx)
    validate_runtime_config(spec)
    assert spec["process"]["args"] == ["/catatonit", "-P"]
    assert spec["root"] == {"path": "/var/lib/edgelet/pause/rootfs", "readonly": True}
    assert spec["process"]["capabilities"]["bounding"] == []
    assert spec["process"]["noNewPrivileges"] is True
    assert spec["annotations"] == {"io.edgelet.kind": "sandbox"}
    assert spec["linux"]["cgroupsPath"] == "/kubepods/besteffort/poduid-1/sandbox"
    assert spec["mounts"][-1]["destination"] == "/etc/resolv.conf"


def _ns(spec: dict) -> dict[str, str | None]:
    return {n["type"]: n.get("path") for n in spec["linux"]["namespaces"]}


@pytest.mark.parametrize(
    ("pod", "expected", "hostname"),
    [
        (make_pod(), {"mount": None, "network": None, "ipc": None, "uts": None, "pid": None}, True),
        (make_pod(host_network=True), {"mount": None, "ipc": None, "pid": None}, False),
        (make_pod(host_ipc=True), {"mount": None, "network": None, "uts": None, "pid": None}, True),
        (make_pod(host_pid=True), {"mount": None, "network": None, "ipc": None, "uts": None}, True),
    ],
)
def test_sandbox_namespaces(pod, expected, hostname):
    spec = build_sandbox_spec(pod, SandboxContext(rootfs="/r", args=("/pause",), cgroups_path="/k/s", hostname="web"))
    assert _ns(spec) == expected
    assert ("hostname" in spec) is hostname


@pytest.mark.parametrize(
    ("pod", "paths", "expected"),
    [
        (make_pod(), NS, {"mount": None, "pid": None, **NS}),
        (make_pod(), {**NS, "pid": "/proc/42/ns/pid"}, {"mount": None, "pid": "/proc/42/ns/pid", **NS}),
        (make_pod(host_pid=True), NS, {"mount": None, **NS}),
        (make_pod(host_network=True), {"ipc": NS["ipc"]}, {"mount": None, "pid": None, "ipc": NS["ipc"]}),
    ],
)
def test_container_namespaces(pod, paths, expected):
    spec = build(pod, namespace_paths=paths)
    assert _ns(spec) == expected
    # runc refuses a hostname without a UTS namespace of the container's own
    assert ("hostname" in spec) == ("uts" in expected)


def test_plain_defaults_follow_containerd():
    spec = build(make_pod())
    p = spec["process"]
    assert p["args"] == ["/bin/app", "--serve"]
    assert p["env"] == ["PATH=/opt/bin:/bin", "HOSTNAME=web", "LANG=C"]
    assert p["cwd"] == "/srv"
    assert p["user"] == {"uid": 0, "gid": 0, "additionalGids": [0]}
    assert p["capabilities"]["bounding"] == list(DEFAULT_CAPABILITIES)
    assert p["capabilities"]["effective"] == list(DEFAULT_CAPABILITIES)
    assert p["capabilities"]["permitted"] == list(DEFAULT_CAPABILITIES)
    assert p["capabilities"]["inheritable"] == [] and p["capabilities"]["ambient"] == []
    assert p["noNewPrivileges"] is False
    assert "rlimits" not in p
    assert p["oomScoreAdj"] == 1000  # BestEffort
    assert spec["root"]["readonly"] is False
    assert spec["hostname"] == "web"
    dests = [m["destination"] for m in spec["mounts"]]
    assert dests == ["/proc", "/dev", "/dev/pts", "/dev/shm", "/dev/mqueue", "/sys", "/sys/fs/cgroup"]
    sys_mount = spec["mounts"][5]
    assert "ro" in sys_mount["options"] and "nosuid" in sys_mount["options"]
    assert "ro" in spec["mounts"][6]["options"]
    assert spec["linux"]["maskedPaths"] == list(MASKED_PATHS)
    assert "/proc/sys" in spec["linux"]["readonlyPaths"]
    devices = spec["linux"]["resources"]["devices"]
    assert devices[0] == {"allow": False, "access": "rwm"}
    assert {"allow": True, "type": "c", "major": 1, "minor": 3, "access": "rwm"} in devices
    assert spec["linux"]["resources"]["cpu"] == {"shares": 2, "period": 100000}
    assert "memory" not in spec["linux"]["resources"]
    assert "sysctl" not in spec["linux"]


def test_image_without_path_gets_default_path():
    spec = build(make_pod(), image=ImageConfig(cmd=("/bin/sh",)))
    assert spec["process"]["env"] == [DEFAULT_PATH, "HOSTNAME=web"]
    assert spec["process"]["cwd"] == "/"


def test_container_env_overrides_image_env_in_place():
    c = Container(
        name="app",
        env=[EnvVar(name="LANG", value="de"), EnvVar(name="HOSTNAME", value="x"), EnvVar(name="NEW", value="1")],
    )
    spec = build(make_pod(c))
    assert spec["process"]["env"] == ["PATH=/opt/bin:/bin", "HOSTNAME=x", "LANG=de", "NEW=1"]


def test_command_args_expansion():
    c = Container(
        name="app",
        command=["/bin/sh", "-c", "echo $(A) $$(A) $(MISSING)"],
        args=["$(A)"],
        env=[EnvVar(name="A", value="1")],
    )
    assert build(make_pod(c))["process"]["args"] == ["/bin/sh", "-c", "echo 1 $(A) $(MISSING)", "1"]


def test_only_args_uses_image_entrypoint():
    c = Container(name="app", args=["--port", "80"])
    assert build(make_pod(c))["process"]["args"] == ["/bin/app", "--port", "80"]


def test_seccomp_and_apparmor_land_in_the_spec():
    plain = build(make_pod())
    assert plain["linux"]["seccomp"]["defaultAction"] == "SCMP_ACT_ERRNO"
    assert plain["linux"]["seccomp"]["architectures"][0] == "SCMP_ARCH_X86_64"
    assert "apparmorProfile" not in plain["process"]
    assert "seccomp" not in build(make_pod(), seccomp=SeccompHost(default_on=False))["linux"]
    aa = build(make_pod(), apparmor_enabled=True, apparmor_loaded=frozenset({"cri-containerd.apparmor.d"}))
    assert aa["process"]["apparmorProfile"] == "cri-containerd.apparmor.d"
    sandbox = build_sandbox_spec(
        make_pod(), SandboxContext(rootfs="/p", args=("/pause",), cgroups_path="/k/s", hostname="web")
    )
    assert sandbox["linux"]["seccomp"]["defaultAction"] == "SCMP_ACT_ERRNO"


@pytest.mark.parametrize(
    ("pod", "message"),
    [
        (
            make_pod(
                Container(
                    name="app",
                    security_context=SecurityContext(
                        seccomp_profile=SeccompProfile(type="Localhost", localhost_profile="gone.json")
                    ),
                )
            ),
            "pod default/web container app: securityContext.seccompProfile: localhost seccomp profile 'gone.json' not found",
        ),
        (
            make_pod(Container(name="app", security_context=SecurityContext(proc_mount="Unmasked"))),
            "procMount: Unmasked needs a user namespace (spec.hostUsers: false)",
        ),
        (
            make_pod(Container(name="app", security_context=SecurityContext(proc_mount="Unmasked")), host_users=False),
            "spec.hostUsers: false: user namespaces are not supported by edgelet",
        ),
        (
            make_pod(
                Container(
                    name="app",
                    security_context=SecurityContext(
                        app_armor_profile=AppArmorProfile(type="Localhost", localhost_profile="k8s-x")
                    ),
                )
            ),
            "AppArmor profile 'k8s-x' asked for, but AppArmor is not enabled on this host",
        ),
    ],
    ids=["missing Localhost seccomp", "Unmasked without user namespace", "hostUsers false", "AppArmor Localhost"],
)
def test_security_refusals_name_pod_container_and_field(pod, message):
    with pytest.raises(SpecError) as info:
        build(pod)
    assert message in str(info.value)


def test_privileged():
    c = Container(name="app", security_context=SecurityContext(privileged=True))
    spec = build(make_pod(c))
    assert spec["process"]["capabilities"]["bounding"] == list(ALL_CAPABILITIES)
    assert "seccomp" not in spec["linux"]
    reduced = build(make_pod(c), bounding_capabilities=ALL_CAPABILITIES[:24])
    assert reduced["process"]["capabilities"]["bounding"] == list(ALL_CAPABILITIES[:24])
    assert spec["linux"]["maskedPaths"] == [] and spec["linux"]["readonlyPaths"] == []
    assert spec["linux"]["resources"]["devices"] == [{"allow": True, "access": "rwm"}]
    sysfs = next(m for m in spec["mounts"] if m["destination"] == "/sys")
    assert "ro" not in sysfs["options"]


def test_resources_and_qos():
    c = Container(
        name="app",
        resources=ResourceRequirements(
            requests={"cpu": "250m", "memory": "1Gi"}, limits={"cpu": "1500m", "memory": "2Gi"}
        ),
    )
    spec = build(make_pod(c), swap_controller=True)
    res = spec["linux"]["resources"]
    assert res["cpu"] == {"shares": 256, "period": 100000, "quota": 150000}
    assert res["memory"] == {"limit": 2 * 2**30, "swap": 2 * 2**30}
    assert spec["process"]["oomScoreAdj"] == 875  # Burstable, 1Gi of 8Gi


def test_guaranteed_oom_and_min_clamp():
    c = Container(name="app", resources=ResourceRequirements(limits={"cpu": "1", "memory": "1Gi"}))
    assert build(make_pod(c))["process"]["oomScoreAdj"] == -997
    assert build(make_pod(c), min_oom_score_adj=0)["process"]["oomScoreAdj"] == 0


def test_read_only_rootfs_and_no_new_privs():
    c = Container(
        name="app", security_context=SecurityContext(read_only_root_filesystem=True, allow_privilege_escalation=False)
    )
    spec = build(make_pod(c))
    assert spec["root"]["readonly"] is True
    assert spec["process"]["noNewPrivileges"] is True


def test_user_from_image_name_and_groups():
    spec = build(
        make_pod(security_context=PodSecurityContext(supplemental_groups=[5])),
        image=ImageConfig(cmd=("x",), user="app"),
    )
    assert spec["process"]["user"] == {"uid": 1000, "gid": 1000, "additionalGids": [1000, 5]}


def test_mounts_override_defaults_and_order_parents_first():
    spec = build(make_pod(), mounts=VOLUMES)
    dests = [m["destination"] for m in spec["mounts"]]
    assert dests.count("/dev/shm") == 1
    shm = next(m for m in spec["mounts"] if m["destination"] == "/dev/shm")
    assert shm == {
        "destination": "/dev/shm",
        "type": "bind",
        "source": "/run/edgelet/pods/uid-1/shm",
        "options": ["rbind", "rw"],
    }
    assert dests.index("/data") < dests.index("/data/cache")


def test_sysctls_normalized():
    pod = make_pod(
        security_context=PodSecurityContext(sysctls=[Sysctl(name="net/ipv4/conf/eth0.100/rp_filter", value="0")])
    )
    assert build(pod, allowed_unsafe_sysctls=("net.ipv4.conf.*",))["linux"]["sysctl"] == {
        "net.ipv4.conf.eth0/100.rp_filter": "0"
    }


@pytest.mark.parametrize(
    ("name", "allowed", "ok"),
    [
        ("net.ipv4.tcp_syncookies", (), True),  # kubelet's safe set
        ("kernel.shm_rmid_forced", (), True),
        ("net.core.somaxconn", (), False),
        ("net.core.somaxconn", ("net.core.somaxconn",), True),
        ("net.core.somaxconn", ("net.core.*",), True),
        ("net.core.somaxconn", ("net.ipv4.*",), False),
    ],
)
def test_unsafe_sysctls_need_allowing(name, allowed, ok):
    pod = make_pod(security_context=PodSecurityContext(sysctls=[Sysctl(name=name, value="1")]))
    if ok:
        assert build(pod, allowed_unsafe_sysctls=allowed)["linux"]["sysctl"] == {name: "1"}
    else:
        with pytest.raises(SpecError, match="forbidden sysctl .*allow it with --allowed-unsafe-sysctls"):
            build(pod, allowed_unsafe_sysctls=allowed)


@pytest.mark.parametrize(
    ("pod", "image", "message"),
    [
        (make_pod(), ImageConfig(), "no command specified"),
        (make_pod(), ImageConfig(cmd=("x",), user="ghost"), "ghost"),
        (
            make_pod(security_context=PodSecurityContext(run_as_non_root=True)),
            ImageConfig(cmd=("x",)),
            "container has runAsNonRoot and image will run as root",
        ),
        (
            make_pod(Container(name="app", security_context=SecurityContext(capabilities=Capabilities(add=["BOGUS"])))),
            IMAGE,
            "unknown capability",
        ),
        (make_pod(Container(name="app", resources=ResourceRequirements(limits={"memory": "lots"}))), IMAGE, "lots"),
        (
            make_pod(
                host_network=True,
                security_context=PodSecurityContext(sysctls=[Sysctl(name="net.core.somaxconn", value="1")]),
            ),
            IMAGE,
            "hostNetwork",
        ),
        (
            make_pod(
                host_ipc=True, security_context=PodSecurityContext(sysctls=[Sysctl(name="kernel.shmmax", value="1")])
            ),
            IMAGE,
            "hostIPC",
        ),
        (
            make_pod(security_context=PodSecurityContext(sysctls=[Sysctl(name="vm.swappiness", value="1")])),
            IMAGE,
            "not namespaced",
        ),
    ],
)
def test_spec_errors(pod, image, message):
    with pytest.raises(SpecError, match=message):
        build_container_spec(pod, pod.spec.containers[0], image, make_ctx())


def test_spec_error_names_pod_and_container():
    pod = make_pod()
    with pytest.raises(SpecError, match=r"pod default/web container app: no command specified"):
        build_container_spec(pod, pod.spec.containers[0], ImageConfig(), make_ctx())


def test_builders_are_pure():
    pod = make_pod(security_context=PodSecurityContext(sysctls=[Sysctl(name="net.ipv4.tcp_syncookies", value="1")]))
    ctx = make_ctx(mounts=VOLUMES)
    a = build_container_spec(pod, pod.spec.containers[0], IMAGE, ctx)
    b = build_container_spec(pod, pod.spec.containers[0], IMAGE, ctx)
    assert a == b
    a["annotations"]["x"] = "y"
    assert "x" not in ctx.annotations


def test_schema_helper_reports_path():
    spec = build(make_pod())
    spec["process"]["user"]["uid"] = -1
    with pytest.raises(OCISchemaError) as info:
        validate_runtime_config(spec)
    assert info.value.path == "process.user.uid"
