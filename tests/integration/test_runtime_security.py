"""seccomp, procMount and privileged containers under real runc and conmon, seen from inside (privileged).

Each test reads what the kernel applied (`Seccomp:` and `CapBnd:` in
/proc/self/status, /proc/mounts, /dev) rather than what config.json says.
"""

from __future__ import annotations

import asyncio
import functools
import json
import uuid
from pathlib import Path

import pytest

from edgelet.api.types import (
    Container,
    ObjectMeta,
    Pod,
    PodSecurityContext,
    PodSpec,
    SeccompProfile,
    SecurityContext,
)
from edgelet.container.errors import CreateContainerConfigError
from edgelet.runtime.host import host_devices, probe_host_facts
from edgelet.runtime.layout import RuntimePaths
from edgelet.runtime.runc_runtime import RuncRuntime
from edgelet.testing.ocischema import validate_runtime_config

pytestmark = pytest.mark.privileged


def aio(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return asyncio.run(fn(*args, **kwargs))

    return wrapper


def _pod(containers: list[Container], **spec) -> Pod:
    return Pod(
        api_version="v1",
        kind="Pod",
        metadata=ObjectMeta(name="sec", namespace="default", uid=str(uuid.uuid4()), annotations={}),
        spec=PodSpec(
            containers=containers,
            restart_policy="Never",
            termination_grace_period_seconds=1,
            dns_policy="Default",
            **spec,
        ),
    )


def _c(name: str, script: str, **sc) -> Container:
    return Container(
        name=name,
        image="edgelet.local/busybox:1.36",
        command=["sh", "-c", script],
        image_pull_policy="IfNotPresent",
        termination_message_path="/dev/termination-log",
        security_context=SecurityContext(**sc) if sc else None,
    )


async def _output(rt: RuncRuntime, pod: Pod, busybox, timeout: float = 30.0) -> dict[str, tuple[int, str]]:
    """Run every container of `pod` to completion: name -> (exit code, stdout+stderr text)."""
    uid = pod.metadata.uid
    sandbox = await rt.run_sandbox(pod, 0)
    for c in pod.spec.containers:
        cid = await rt.create_container(pod, c, sandbox, busybox, 0)
        validate_runtime_config(json.loads((rt.layout(uid).container_dir(c.name, 0) / "config.json").read_text()))
        await rt.start_container(cid)
    out: dict[str, tuple[int, str]] = {}
    for _ in range(int(timeout / 0.05)):
        status = await rt.pod_status(uid)
        for c in pod.spec.containers:
            rec = status.latest(c.name)
            if rec is not None and rec.state == "exited" and c.name not in out:
                lines = Path(rec.log_path).read_text().splitlines()
                out[c.name] = (rec.exit_code, "\n".join(line.split(" ", 3)[3] for line in lines))
        if len(out) == len(pod.spec.containers):
            return out
        await asyncio.sleep(0.05)
    raise AssertionError(f"containers did not exit: {out}")


def _seccomp_mode(text: str) -> int:
    return int(next(line for line in text.splitlines() if line.startswith("Seccomp:")).split()[1])


STATUS = "grep -E '^(Seccomp|CapBnd):' /proc/self/status"

# A Localhost profile: everything allowed but mkdir/mkdirat, which fail with EACCES (13).
DENY_MKDIR = {
    "defaultAction": "SCMP_ACT_ALLOW",
    "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO", "errnoRet": 13}],
}


@pytest.fixture
def rt(runtime_paths: RuntimePaths):
    runtime = RuncRuntime(runtime_paths)
    yield runtime
    for uid in list((runtime_paths.root_dir / "pods").glob("*")):
        asyncio.run(runtime.remove_pod(uid.name))


@aio
async def test_seccomp_mode_for_each_profile_type(rt: RuncRuntime, busybox) -> None:
    seccomp_dir = rt.paths.seccomp_dir
    (seccomp_dir / "profiles").mkdir(parents=True)
    (seccomp_dir / "profiles" / "deny-mkdir.json").write_text(json.dumps(DENY_MKDIR))
    pod = _pod(
        [
            _c("default", STATUS + "; unshare -U -r id; echo unshare=$?"),
            _c("runtime-default", STATUS, seccomp_profile=SeccompProfile(type="RuntimeDefault")),
            _c(
                "localhost",
                STATUS + "; mkdir /tmp/x; echo mkdir=$?",
                seccomp_profile=SeccompProfile(type="Localhost", localhost_profile="profiles/deny-mkdir.json"),
            ),
            _c(
                "unconfined",
                STATUS + "; mkdir /tmp/x; echo mkdir=$?",
                seccomp_profile=SeccompProfile(type="Unconfined"),
            ),
            _c("privileged", STATUS, privileged=True),
        ],
        security_context=PodSecurityContext(seccomp_profile=SeccompProfile(type="RuntimeDefault")),
    )
    out = await _output(rt, pod, busybox)
    # 2 is SECCOMP_MODE_FILTER; 0 is none.
    assert {name: _seccomp_mode(text) for name, (_code, text) in out.items()} == {
        "default": 2,
        "runtime-default": 2,
        "localhost": 2,
        "unconfined": 0,
        "privileged": 0,
    }, out
    # The default profile refuses new user namespaces (unshare needs CAP_SYS_ADMIN under it).
    assert "unshare=0" not in out["default"][1] and "uid=0" not in out["default"][1], out["default"]
    assert "mkdir=0" not in out["localhost"][1] and "Permission denied" in out["localhost"][1], out["localhost"]
    assert "mkdir=0" in out["unconfined"][1]


@aio
async def test_seccomp_default_off_leaves_unset_containers_unconfined(runtime_paths: RuntimePaths, busybox) -> None:
    rt = RuncRuntime(runtime_paths, seccomp_default=False)
    pod = _pod([_c("unset", STATUS), _c("asked", STATUS, seccomp_profile=SeccompProfile(type="RuntimeDefault"))])
    try:
        out = await _output(rt, pod, busybox)
    finally:
        await rt.remove_pod(pod.metadata.uid)
    assert _seccomp_mode(out["unset"][1]) == 0 and _seccomp_mode(out["asked"][1]) == 2


@pytest.mark.parametrize(
    "content", [None, "{not json", '{"syscalls": []}'], ids=["missing", "not JSON", "no defaultAction"]
)
@aio
async def test_a_missing_or_invalid_localhost_profile_fails_the_container_naming_it(
    rt: RuncRuntime, busybox, content: str | None
) -> None:
    if content is not None:
        rt.paths.seccomp_dir.mkdir(parents=True)
        (rt.paths.seccomp_dir / "broken.json").write_text(content)
    c = _c("app", "true", seccomp_profile=SeccompProfile(type="Localhost", localhost_profile="broken.json"))
    pod = _pod([c])
    sandbox = await rt.run_sandbox(pod, 0)
    with pytest.raises(CreateContainerConfigError, match="'broken.json'"):
        await rt.create_container(pod, c, sandbox, busybox, 0)
    # Nothing of the container is left behind.
    assert not (rt.layout(pod.metadata.uid).container_dir("app", 0) / "config.json").exists()


@aio
async def test_proc_sys_is_read_only_unless_privileged_and_unmasked_is_refused(rt: RuncRuntime, busybox) -> None:
    # Writing the value /proc/sys already holds changes nothing on the host even where it succeeds.
    probe = (
        "grep ' /proc/sys ' /proc/mounts; v=$(cat /proc/sys/kernel/printk_ratelimit); "
        "echo $v > /proc/sys/kernel/printk_ratelimit; echo write=$?"
    )
    out = await _output(rt, _pod([_c("default", probe)]), busybox)
    _code, text = out["default"]
    assert "/proc/sys proc ro," in text and "write=0" not in text, text

    # procMount: Unmasked outside a user namespace is the host's writable /proc/sys: refused before runc.
    c = _c("unmasked", probe, proc_mount="Unmasked")
    unmasked = _pod([c])
    sandbox = await rt.run_sandbox(unmasked, 0)
    with pytest.raises(CreateContainerConfigError, match="procMount: Unmasked needs a user namespace"):
        await rt.create_container(unmasked, c, sandbox, busybox, 0)
    # ...and with hostUsers: false, which edgelet cannot provide, the reason names spec.hostUsers.
    users = _pod([c], host_users=False)
    sandbox = await rt.run_sandbox(users, 0)
    with pytest.raises(CreateContainerConfigError, match="spec.hostUsers"):
        await rt.create_container(users, c, sandbox, busybox, 0)


def _mask(text: str, key: str) -> int:
    return int(next(line for line in text.splitlines() if line.startswith(key)).split()[1], 16)


@aio
async def test_privileged_gets_the_agents_bounding_set_host_devices_and_no_masks(rt: RuncRuntime, busybox) -> None:
    agent_bnd = _mask(Path("/proc/self/status").read_text(), "CapBnd:")
    defaults = {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx"}
    extra = [d["path"] for d in host_devices() if d["path"] not in defaults]
    assert extra, "this host has no devices beyond the defaults to look for"
    wanted = extra[:3]
    probe = STATUS + "; grep -c ' /proc/sys ' /proc/mounts; " + "; ".join(f"ls -l {p}" for p in wanted) + "; echo done"
    pod = _pod([_c("priv", probe, privileged=True), _c("plain", probe)])
    out = await _output(rt, pod, busybox)
    code, text = out["priv"]
    assert code == 0, text
    # Exactly the agent's bounding set: on a host lacking CAP_SYS_RESOURCE, runc used to fail ("unable to apply caps").
    assert _mask(text, "CapBnd:") == agent_bnd, text
    assert probe_host_facts().bounding_capabilities is not None
    lines = text.splitlines()
    assert "0" in lines, text  # /proc/sys is not mounted read-only over /proc
    for path in wanted:
        assert any(line.startswith(("c", "b")) and line.endswith(path) for line in lines), (path, text)
    _plain_code, plain = out["plain"]
    assert any("No such file" in line and wanted[0] in line for line in plain.splitlines()), plain
