"""kubectl views of the pods snapshot: Go tabwriter alignment, describe pod, get -o wide/yaml/json (via the CLI)."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import msgspec
import pytest
import yaml

from edgelet import cli
from edgelet.api.static import make_static_pod
from edgelet.api.types import Pod
from edgelet.cli import common
from edgelet.cli.describe import describe_pod, go_tabwrite, human_duration, rfc1123z
from edgelet.container.types import ContainerRecord, PodRuntimeStatus, SandboxRecord
from edgelet.events import Event, EventsSnapshot, InvolvedObject, events_path
from edgelet.status.compute import compute_pod_status
from edgelet.status.publisher import pod_object
from edgelet.status.snapshot import PodRow, PodsSnapshot, snapshot_path

T0 = 1_700_000_000.0  # 2023-11-14T22:13:20Z


def test_go_tabwriter_aligns_column_blocks() -> None:
    text = "Name:\tfoo\nNamespace:\tdefault\nService Account:\tx\nContainers:\n  c:\n    Image:\tbusybox\n"
    assert go_tabwrite(text) == (
        "Name:             foo\n"
        "Namespace:        default\n"
        "Service Account:  x\n"
        "Containers:\n"
        "  c:\n"
        "    Image:  busybox\n"
    )


def test_go_tabwriter_nested_columns_and_trailing_cells() -> None:
    text = "Conditions:\n  Type\tStatus\n  Initialized \tTrue \n  PodScheduled \tTrue \n"
    assert go_tabwrite(text) == (
        "Conditions:\n  Type           Status\n  Initialized    True \n  PodScheduled   True \n"
    )


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (5, "5s"),
        (119, "119s"),
        (150, "2m30s"),
        (600, "10m"),
        (3 * 3600 + 120, "3h2m"),
        (30 * 3600, "30h"),
        (3 * 86400 + 3600, "3d1h"),
        (20 * 86400, "20d"),
    ],
)
def test_human_duration(seconds: float, text: str) -> None:
    assert human_duration(seconds) == text


def test_rfc1123z() -> None:
    assert rfc1123z("2023-11-14T22:13:20Z") == "Tue, 14 Nov 2023 22:13:20 +0000"


MANIFEST = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web", "labels": {"app": "web", "tier": "edge"}},
    "spec": {
        "restartPolicy": "Always",
        "volumes": [{"name": "shared", "emptyDir": {}}],
        "initContainers": [
            {
                "name": "setup",
                "image": "busybox",
                "command": ["sh", "-c", "echo hi"],
                "volumeMounts": [{"name": "shared", "mountPath": "/data"}],
            }
        ],
        "containers": [
            {
                "name": "app",
                "image": "busybox",
                "args": ["sleep", "3600"],
                "ports": [{"containerPort": 8080}],
                "env": [{"name": "MODE", "value": "edge"}],
                "livenessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 5},
                "volumeMounts": [{"name": "shared", "mountPath": "/data", "readOnly": True}],
            }
        ],
    },
}


def _pod() -> Pod:
    raw = msgspec.convert(MANIFEST, Pod)
    return make_static_pod(raw, node_name="node1", source="file", origin="/m/web.yaml")


def _status(pod: Pod):
    uid = pod.metadata.uid

    def rec(name: str, state: str, attempt: int, code: int | None, ctype: str) -> ContainerRecord:
        return ContainerRecord(
            id=f"{name}{attempt}" * 4,
            pod_uid=uid,
            pod_name="web-node1",
            pod_namespace="default",
            name=name,
            attempt=attempt,
            spec_hash="h",
            sandbox_id="sb",
            state=state,  # type: ignore[arg-type]
            pid=None,
            created_at=T0 + attempt,
            started_at=T0 + 1 + attempt,
            finished_at=T0 + 5 + attempt if state == "exited" else None,
            exit_code=code,
            reason={0: "Completed", 1: "Error"}.get(code, ""),
            image="busybox",  # type: ignore[arg-type]
            image_id="sha256:abc",
            container_type=ctype,
        )  # type: ignore[arg-type]

    rt = PodRuntimeStatus(
        uid=uid,
        sandboxes=(
            SandboxRecord(
                id="sb",
                pod_uid=uid,
                pod_name="web-node1",
                pod_namespace="default",
                attempt=0,
                state="running",
                pid=1,
                created_at=T0,
            ),
        ),
        containers=(
            rec("setup", "exited", 0, 0, "init"),
            rec("app", "running", 1, None, "regular"),
            replace(rec("app", "exited", 0, 1, "regular"), termination_message="boom"),
        ),
    )
    return compute_pod_status(pod, rt, waiting={}, pod_failed=False, now=T0 + 10, host_ip="192.0.2.7")


def _events(pod: Pod) -> list[Event]:
    obj = InvolvedObject(
        namespace="default", name=pod.metadata.name, uid=pod.metadata.uid, field_path="spec.containers{app}"
    )
    return [
        Event(
            type="Normal",
            reason="Started",
            message="Started container: app",
            object=obj,
            first_timestamp=T0 + 1,
            last_timestamp=T0 + 2,
            count=2,
        ),
        Event(
            type="Warning",
            reason="BackOff",
            message="Back-off restarting failed container app",
            object=obj,
            first_timestamp=T0 + 3,
            last_timestamp=T0 + 3,
        ),
    ]


def test_describe_pod_layout() -> None:
    pod = _pod()
    text = describe_pod(pod_object(pod, _status(pod)), _events(pod), now=T0 + 70)
    lines = text.splitlines()
    # One column block from Name to IPs, as wide as its longest cell ("Annotations:") plus 2.
    assert lines[0] == "Name:         web-node1"
    assert lines[1] == "Namespace:    default"
    assert "Node:         node1/192.0.2.7" in lines
    assert "Start Time:   Tue, 14 Nov 2023 22:13:20 +0000" in lines
    assert "Labels:       app=web" in lines and "              tier=edge" in lines
    assert any(line.startswith("Annotations:  kubernetes.io/config.hash: ") for line in lines)
    assert "Status:       Running" in lines
    assert "IPs:          <none>" in lines
    init = text[text.index("Init Containers:") : text.index("\nContainers:")]
    assert "    State:          Terminated\n      Reason:       Completed\n      Exit Code:    0\n" in init
    assert "    Command:\n      sh\n      -c\n      echo hi\n" in init
    main = text[text.index("\nContainers:") : text.index("Conditions:")]
    # "Args:" ends the first block, which is narrower than the state block (as kubectl prints it).
    assert "    Container ID:  runc://app1app1app1app1\n" in main
    assert "    Port:          8080/TCP\n" in main
    assert "    State:          Running\n      Started:      Tue, 14 Nov 2023 22:13:22 +0000\n" in main
    assert (
        "    Last State:     Terminated\n      Reason:       Error\n      Message:      boom\n"
        "      Exit Code:    1\n" in main
    )
    assert "    Ready:          True\n    Restart Count:  1\n" in main
    assert "    Liveness:       exec [true] delay=0s timeout=1s period=5s #success=1 #failure=3\n" in main
    assert "    Environment:\n      MODE:  edge\n" in main
    assert "    Mounts:\n      /data from shared (ro)\n" in main
    conditions = text[text.index("Conditions:") : text.index("Volumes:")].splitlines()
    assert conditions[1].split() == ["Type", "Status"]
    assert [c.split() for c in conditions[2:]] == [
        ["PodReadyToStartContainers", "True"],
        ["Initialized", "True"],
        ["Ready", "True"],
        ["ContainersReady", "True"],
        ["PodScheduled", "True"],
    ]
    assert "    Type:        EmptyDir (a temporary directory that shares a pod's lifetime)\n" in text
    assert "QoS Class:       BestEffort\n" in text
    events = text[text.index("Events:") :].splitlines()
    assert events[1].split() == ["Type", "Reason", "Age", "From", "Message"]
    assert events[2].split() == ["----", "------", "----", "----", "-------"]
    assert events[3].split()[:6] == ["Normal", "Started", "68s", "(x2", "over", "69s)"]
    assert events[4].split()[:4] == ["Warning", "BackOff", "67s", "kubelet"]
    assert events[3].index("Started") == events[1].index("Reason")


def test_describe_pod_without_events() -> None:
    pod = _pod()
    assert describe_pod(pod_object(pod, _status(pod)), [], now=T0).endswith("Events:          <none>\n")


# --- through the CLI ---


def _write(tmp_path: Path) -> Pod:
    pod = _pod()
    status = _status(pod)
    row = PodRow(
        namespace="default",
        name="web-node1",
        uid=pod.metadata.uid,
        ready="1/1",
        status="Running",
        restarts=1,
        created=T0,
        source="file",
        origin="/m/web.yaml",
        phase="Running",
        pod=pod_object(pod, status),
    )
    snap = PodsSnapshot(written_at=T0, agent_pid=os.getpid(), node_name="node1", pods=[row])
    path = Path(snapshot_path(tmp_path / "root"))
    path.parent.mkdir(parents=True)
    path.write_bytes(msgspec.json.encode(snap))
    ev = events_path(tmp_path / "run")
    ev.parent.mkdir(parents=True)
    ev.write_bytes(msgspec.json.encode(EventsSnapshot(written_at=T0, agent_pid=os.getpid(), events=_events(pod))))
    return pod


def run(tmp_path: Path, *argv: str) -> tuple[int, str, str]:
    import io

    out, err = io.StringIO(), io.StringIO()
    rc = cli.main(
        [*argv, "--config", "/dev/null", "--root-dir", str(tmp_path / "root"), "--run-dir", str(tmp_path / "run")],
        out=out,
        err=err,
    )
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(autouse=True)
def _no_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common, "from_agent", lambda settings, path: None)


def test_pods_yaml_is_a_v1_list_of_full_pods(tmp_path: Path) -> None:
    pod = _write(tmp_path)
    rc, out, _ = run(tmp_path, "pods", "-o", "yaml")
    assert rc == 0
    data = yaml.safe_load(out)
    assert (data["apiVersion"], data["kind"]) == ("v1", "List")
    (item,) = data["items"]
    assert (item["apiVersion"], item["kind"], item["metadata"]["uid"]) == ("v1", "Pod", pod.metadata.uid)
    assert item["spec"]["containers"][0]["name"] == "app"
    status = item["status"]
    assert status["phase"] == "Running" and status["hostIP"] == "192.0.2.7" and status["qosClass"] == "BestEffort"
    app = status["containerStatuses"][0]
    assert app["containerID"] == "runc://app1app1app1app1" and app["restartCount"] == 1
    assert app["lastState"]["terminated"] == {
        "containerID": "runc://app0app0app0app0",
        "exitCode": 1,
        "finishedAt": "2023-11-14T22:13:25Z",
        "message": "boom",
        "reason": "Error",
        "startedAt": "2023-11-14T22:13:21Z",
    }
    assert {c["type"] for c in status["conditions"]} == {
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    }
    assert all(c["lastTransitionTime"] for c in status["conditions"])


def test_pods_json_by_name_is_one_pod(tmp_path: Path) -> None:
    _write(tmp_path)
    rc, out, _ = run(tmp_path, "pods", "web", "-o", "json")
    assert rc == 0 and json.loads(out)["kind"] == "Pod"
    rc, _, err = run(tmp_path, "pods", "nope", "-o", "json")
    assert rc == 1 and 'pods "nope" not found' in err


def test_pods_wide_has_kubectls_columns(tmp_path: Path) -> None:
    _write(tmp_path)
    rc, out, _ = run(tmp_path, "pods", "-o", "wide")
    header, row = out.splitlines()[:2]
    assert header.index("IP") < header.index("NODE") < header.index("NOMINATED NODE") < header.index("READINESS GATES")
    assert row[header.index("IP") :].split()[:4] == ["<none>", "node1", "<none>", "<none>"]


def test_describe_pod_command(tmp_path: Path) -> None:
    _write(tmp_path)
    rc, out, _ = run(tmp_path, "describe", "pod", "web")
    assert rc == 0
    assert out.startswith("Name:         web-node1\n")
    assert "Back-off restarting failed container app" in out and "Conditions:" in out
    rc, _, err = run(tmp_path, "describe", "pod", "web", "-n", "other")
    assert rc == 1 and 'pods "web" not found' in err


def test_describe_pod_names_its_runtime_handler() -> None:
    pod = _pod()
    obj = pod_object(pod, _status(pod))
    assert "Runtime Handler:" not in describe_pod(obj, [], now=T0)
    obj["spec"]["runtimeClassName"] = "crun"
    lines = describe_pod(obj, [], now=T0, runtime_handler="crun").splitlines()
    assert "Runtime Class Name:  crun" in lines and "Runtime Handler:     crun" in lines


def test_describe_shows_the_config_maps_and_secrets_a_pod_uses_keys_and_sizes_only() -> None:
    from edgelet.api.configobjects import ObjectReport

    pod = {
        "metadata": {"name": "web-n1", "namespace": "default"},
        "spec": {
            "containers": [{"name": "c", "image": "x"}],
            "volumes": [{"name": "p", "projected": {"sources": [{"secret": {"name": "creds"}}]}}],
        },
        "status": {},
    }
    reports = [
        ObjectReport(
            kind="Secret",
            namespace="default",
            name="creds",
            keys={"PASS": 15},
            source="file",
            origin="/m/web.yaml",
            used_by=["default/web-n1 (volume)"],
        ),
        ObjectReport(kind="ConfigMap", namespace="default", name="other", keys={}, source="", origin="", used_by=[]),
    ]
    text = describe_pod(pod, [], 0.0, objects=reports)
    assert "Projected (a volume that contains injected data from multiple sources)" in text
    assert "ConfigMaps and Secrets:" in text and "Secret creds:" in text and "PASS (15 bytes)" in text
    assert "/m/web.yaml" in text and "other" not in text
