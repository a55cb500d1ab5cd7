"""ConfigMaps and Secrets end to end with the real agent, runc and conmon: a configMap volume read by the
container and updated in place without a restart, env from a Secret, a missing key refused with
CreateContainerConfigError, an optional one absent, the Secret's volume on its own tmpfs, and the Secret's
bytes nowhere in the log dir, the root dir (outside that tmpfs), the events or the pods table."""

from __future__ import annotations

import base64
import os
import signal
import stat
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import IMAGE, wait_for

pytestmark = pytest.mark.privileged

SECRET = "Zq9-very-secret-4711"


def config_map(name: str, data: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def pod(name: str, script: str, *, annotations: dict | None = None, volumes=(), **container: object) -> dict:
    """A one-container (`c`) pod running `script`; `container` adds env, envFrom (env_from), volumeMounts
    (volume_mounts)."""
    keys = {"env_from": "envFrom", "volume_mounts": "volumeMounts"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **({"annotations": annotations} if annotations else {})},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "volumes": list(volumes),
            "containers": [
                {"name": "c", "image": IMAGE, "command": ["sh", "-c", script]}
                | {keys.get(k, k): v for k, v in container.items()}
            ],
        },
    }


def manifest(conf: str, *, key: str = "PASS", optional_missing: bool = True) -> str:
    secret_b64 = base64.b64encode(SECRET.encode()).decode()
    return yaml.safe_dump_all(
        [
            config_map("app-config", {"app.conf": conf}),
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"}, "data": {"PASS": secret_b64}},
            pod(
                "cfg",
                # The Secret is compared, never printed: the log dir must not hold it.
                'test "$PASS" = "$(cat /etc/creds/PASS)" && echo env-matches-volume; '
                'test -z "${GONE+set}" && echo optional-unset; '
                "while true; do echo conf=$(cat /etc/app/app.conf); sleep 0.2; done",
                volumes=[
                    {"name": "conf", "configMap": {"name": "app-config"}},
                    {"name": "creds", "secret": {"secretName": "creds", "defaultMode": 0o400}},
                    {"name": "maybe", "configMap": {"name": "absent", "optional": optional_missing}},
                ],
                env=[
                    {"name": "PASS", "valueFrom": {"secretKeyRef": {"name": "creds", "key": key}}},
                    {
                        "name": "GONE",
                        "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "x", "optional": True}},
                    },
                ],
                volume_mounts=[
                    {"name": "conf", "mountPath": "/etc/app"},
                    {"name": "creds", "mountPath": "/etc/creds"},
                    {"name": "maybe", "mountPath": "/etc/maybe"},
                ],
            ),
        ]
    )


def _container_log(agent) -> str:
    out = []
    for root, _dirs, files in os.walk(agent.paths.log_dir):
        for name in files:
            out.append(Path(root, name).read_text(errors="replace"))
    return "\n".join(out)


def _local_api(agent, path: str) -> str:
    import httpx

    from edgelet.server.api import socket_path

    transport = httpx.HTTPTransport(uds=str(socket_path(agent.paths.run_dir)))
    with httpx.Client(transport=transport, base_url="http://edgelet", timeout=10) as c:
        r = c.get(path)
        r.raise_for_status()
        return r.text


def _mounts() -> list[tuple[str, str]]:
    """(mount point, fs type) of every mount, from /proc/self/mountinfo."""
    rows = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        sep = fields.index("-")
        rows.append((fields[4].replace("\\040", " "), fields[sep + 1]))
    return rows


def _files_outside_mounts(top: Path) -> list[Path]:
    found = []
    for root, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if not os.path.ismount(os.path.join(root, d))]
        found += [Path(root, f) for f in files if stat.S_ISREG(os.lstat(os.path.join(root, f)).st_mode)]
    return found


def test_config_map_volume_env_from_a_secret_and_an_update_in_place(agent) -> None:
    agent.start()
    agent.write_manifest("cfg.yaml", manifest("one"))
    wait_for(lambda: (r := agent.pod("cfg")) and r["status"] == "Running", timeout=60, what="cfg Running")
    wait_for(lambda: "conf=one" in _container_log(agent), what="the ConfigMap's file read in the container")
    text = _container_log(agent)
    assert "env-matches-volume" in text and "optional-unset" in text

    # The Secret's volume is a tmpfs of its own, files 0400 as asked, its bytes nowhere on disk.
    secret_dirs = [m for m, fs in _mounts() if m.endswith("/volumes/creds") and str(agent.paths.root_dir) in m]
    assert secret_dirs and all(fs == "tmpfs" for m, fs in _mounts() if m in secret_dirs)
    creds = Path(secret_dirs[0])
    assert (creds / "PASS").read_text() == SECRET and (creds / "PASS").stat().st_mode & 0o777 == 0o400
    assert os.readlink(creds / "PASS") == "..data/PASS"
    # The root dir (the card on a device) and the log dir hold no byte of it outside the Secret's tmpfs: the
    # container's config.json has it redacted (runc read the whole spec from the run dir).
    for top in (agent.paths.root_dir, agent.paths.log_dir):
        for f in _files_outside_mounts(top):
            assert SECRET.encode() not in f.read_bytes(), f
    [config] = [f for f in _files_outside_mounts(agent.paths.root_dir) if f.name == "config.json" and "/c/" in str(f)]
    assert "PASS=<redacted: from a Secret>" in config.read_text()
    assert SECRET not in agent.log()
    assert SECRET not in agent.cli("events") and SECRET not in agent.cli("pods", "cfg-testnode", "-o", "yaml")
    secrets = agent.cli("get", "secrets")
    assert "creds" in secrets and f"PASS({len(SECRET)})" in secrets and "default/cfg-testnode (env, volume)" in secrets
    assert SECRET not in secrets and "app.conf(3)" in agent.cli("get", "configmaps")
    described = agent.cli("describe", "pod", "cfg")
    assert "Secret creds:" in described and f"PASS ({len(SECRET)} bytes)" in described and SECRET not in described

    # An edit of the ConfigMap alone: the running container sees the new file, without a restart.
    agent.write_manifest("cfg.yaml", manifest("two"))
    wait_for(lambda: "conf=two" in _container_log(agent), timeout=30, what="the updated file in the container")
    assert agent.pod("cfg")["restarts"] == 0

    # The local API's /pods holds no byte of it either.
    assert SECRET not in _local_api(agent, "/pods") and SECRET not in _local_api(agent, "/secrets")

    # The agent dies (as in a crash) and the pod's manifest goes meanwhile: the restarted agent removes the
    # orphan, its Secret's tmpfs with it.
    assert agent.stop(signal.SIGKILL) == -signal.SIGKILL
    (agent.manifests / "cfg.yaml").unlink()
    agent.start()
    wait_for(lambda: not agent.containers_of("cfg"), timeout=60, what="the orphan's containers removed")
    wait_for(
        lambda: not [m for m, _ in _mounts() if m.startswith(str(agent.paths.root_dir))],
        what="no mount left under the root dir",
    )


def test_a_missing_key_is_create_container_config_error_naming_it(agent) -> None:
    agent.start()
    agent.write_manifest("cfg.yaml", manifest("one", key="NOPE"))
    row = wait_for(
        lambda: (r := agent.pod("cfg")) and r["status"] == "CreateContainerConfigError" and r,
        timeout=60,
        what="CreateContainerConfigError",
    )
    status = yaml.safe_load(agent.cli("pods", "cfg-testnode", "-o", "yaml"))["status"]
    waiting = status["containerStatuses"][0]["state"]["waiting"]
    assert waiting["reason"] == "CreateContainerConfigError"
    assert "couldn't find key NOPE in Secret default/creds" in waiting["message"], waiting
    assert row["restarts"] == 0
    # A non-optional volume of a ConfigMap that does not exist is refused the same way, naming it.
    agent.write_manifest("cfg.yaml", manifest("one", optional_missing=False))
    wait_for(
        lambda: (
            'configmap "absent" not found'
            in str(yaml.safe_load(agent.cli("pods", "cfg-testnode", "-o", "yaml"))["status"])
        ),
        timeout=60,
        what="the missing ConfigMap named",
    )


def rollout_manifest(mode: str) -> str:
    """A pod that crashes unless its ConfigMap's MODE (env) is "good"."""
    script = 'echo mode=$MODE; test "$MODE" = good || exit 1; exec sleep 300'
    return yaml.safe_dump_all(
        [config_map("mode", {"MODE": mode}), pod("app", script, env_from=[{"configMapRef": {"name": "mode"}}])]
    )


def test_a_config_map_change_that_breaks_the_app_is_rolled_back_with_the_old_config(agent) -> None:
    from tests.e2e.test_rollout import GATE, phase, record, running_uids

    agent.start(*GATE)
    agent.write_manifest("app.yaml", rollout_manifest("good"))
    v1 = wait_for(phase(agent, "good"), timeout=90, what="v1 good")["active"]
    # Only the ConfigMap changes: the pod's env needs a restart to see it, so it is a new version, gated.
    agent.write_manifest("app.yaml", rollout_manifest("broken"))
    done = wait_for(phase(agent, "rolled-back"), timeout=120, what="the broken config rolled back")
    assert done["active"] == v1 and done["target"] != v1
    assert "CrashLoopBackOff" in done["reason"] or "exit" in done["reason"]
    # v1 runs again, started afresh with the config it was good with (its env pinned), not the new one.
    wait_for(lambda: running_uids(agent) == {v1}, timeout=60, what="v1 running again")
    wait_for(
        lambda: (r := agent.pod("app")) and r["uid"] == v1 and r["status"] == "Running",
        timeout=60,
        what="v1 Running",
    )
    logs = agent.cli("logs", "app-testnode")
    assert logs.strip().splitlines()[-1] == "mode=good", logs
    assert record(agent)["phase"] == "rolled-back"
    # A restart of the agent gives the pinned pod the same UID: it is adopted as it runs, not replaced.
    before = {c["id"] for c in agent.containers_of("app") if c["status"] == "running"}
    assert agent.stop() == 0
    agent.start(*GATE)
    wait_for(
        lambda: (
            agent.snapshot()["agent_pid"] == agent.proc.pid
            and (r := agent.pod("app"))
            and r["uid"] == v1
            and r["status"] == "Running"
        ),
        timeout=60,
        what="v1 in the new agent's pods table",
    )
    after = record(agent)
    assert (after["phase"], after["active"], after["target"]) == ("rolled-back", v1, done["target"])
    assert {c["id"] for c in agent.containers_of("app") if c["status"] == "running"} == before


def subpath_manifest(conf: str) -> str:
    script = "while true; do echo vol=$(cat /etc/app/app.conf),sub=$(cat /etc/sub.conf),env=$E; sleep 0.2; done"
    sub = pod(
        "sub",
        script,
        # Without a rollout, kubelet's semantics: the container keeps env and subPath as it started.
        annotations={"edgelet.io/rollout": "off"},
        volumes=[{"name": "c", "configMap": {"name": "c"}}],
        env=[{"name": "E", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "app.conf"}}}],
        volume_mounts=[
            {"name": "c", "mountPath": "/etc/app"},
            {"name": "c", "mountPath": "/etc/sub.conf", "subPath": "app.conf"},
        ],
    )
    return yaml.safe_dump_all([config_map("c", {"app.conf": conf}), sub])


def test_env_and_sub_path_keep_their_values_until_a_restart_the_volume_follows(agent) -> None:
    agent.start()
    agent.write_manifest("sub.yaml", subpath_manifest("one"))
    wait_for(lambda: "vol=one,sub=one,env=one" in _container_log(agent), timeout=60, what="the first values")
    agent.write_manifest("sub.yaml", subpath_manifest("two"))
    wait_for(lambda: "vol=two,sub=one,env=one" in _container_log(agent), timeout=30, what="only the volume updated")
    assert agent.pod("sub")["restarts"] == 0
