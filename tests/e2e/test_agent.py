"""The walking skeleton end to end: manifests in a directory become real runc containers under conmon."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import IMAGE, wait_for

pytestmark = pytest.mark.privileged


def pod_yaml(name: str, command: str, *, restart: str = "Always", containers: int = 1, grace: int = 2) -> str:
    body = "".join(
        f"""
    - name: c{i}
      image: {IMAGE}
      command: ["sh", "-c", {command!r}]"""
        for i in range(containers)
    )
    return f"""apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  restartPolicy: {restart}
  terminationGracePeriodSeconds: {grace}
  containers:{body}
"""


def mounts_under(base: Path) -> list[str]:
    prefix = str(base.resolve())
    return [
        line.split()[4]
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if line.split()[4].startswith(prefix)
    ]


def cgroup_dirs(cgroup_root: str) -> list[Path]:
    rel = cgroup_root.strip("/")
    return [p for h in Path("/sys/fs/cgroup").iterdir() for p in (h / rel).glob("*") if p.is_dir()]


def test_manifest_runs_logs_and_is_cleaned_on_delete(runtime_handler, agent):
    agent.start()
    agent.write_manifest("hello.yaml", pod_yaml("hello", "echo hello-from-container; exec sleep 300"))
    row = wait_for(lambda: (r := agent.pod("hello")) and r["status"] == "Running" and r, what="pod Running")
    assert row["ready"] == "1/1"
    assert row["source"] == "file"
    uid = row["uid"]
    log_file = agent.paths.container_log_path("default", "hello-testnode", uid, "c0", 0)
    line = wait_for(lambda: log_file.exists() and log_file.read_text(), what="container log")
    # CRI format: RFC 3339 time, stream, tag, message.
    first = line.splitlines()[0].split(" ", 3)
    assert first[1:] == ["stdout", "F", "hello-from-container"]
    links = list((agent.paths.log_dir / "containers").glob("hello-testnode_default_c0-*.log"))
    assert links and links[0].resolve() == log_file.resolve()
    assert len(agent.containers_of("hello")) == 1  # the container: its sandbox has no pause process

    (agent.manifests / "hello.yaml").unlink()
    wait_for(lambda: not agent.containers_of("hello"), what="containers removed")
    wait_for(lambda: agent.pod("hello") is None, what="pod gone from the table")
    wait_for(lambda: not agent.paths.pod_dir(uid).exists(), what="pod dir removed")
    assert not mounts_under(agent.paths.root_dir.parent)
    assert not [p for p in cgroup_dirs(agent.paths.cgroup_root) if uid in p.name]
    # kubelet removes a removed pod's logs: its log dir and the links under containers/.
    wait_for(lambda: not log_file.parent.parent.exists(), what="the pod's log dir removed")
    assert not list((agent.paths.log_dir / "containers").glob("hello-testnode_default_c0-*.log"))


def test_edit_replaces_pod(agent):
    agent.start()
    agent.write_manifest("p.yaml", pod_yaml("edit", "exec sleep 300"))
    old = wait_for(lambda: (r := agent.pod("edit")) and r["status"] == "Running" and r, what="first version")
    agent.write_manifest("p.yaml", pod_yaml("edit", "echo v2; exec sleep 301"))
    new = wait_for(
        lambda: (r := agent.pod("edit")) and r["uid"] != old["uid"] and r["status"] == "Running" and r,
        what="second version running",
    )
    wait_for(lambda: not agent.paths.pod_dir(old["uid"]).exists(), what="old pod cleaned")
    assert len(agent.containers_of("edit")) == 1
    assert new["restarts"] == 0


def test_crashing_container_backs_off(agent):
    agent.start()
    agent.write_manifest("crash.yaml", pod_yaml("crash", "echo dying; exit 3"))
    row = wait_for(
        lambda: (r := agent.pod("crash")) and r["status"] == "CrashLoopBackOff" and r,
        what="CrashLoopBackOff",
    )
    assert row["restarts"] >= 1
    # While backing off (10 s, then 20 s) it does not restart again immediately.
    count = row["restarts"]
    wait_for(lambda: agent.pod("crash")["restarts"] >= count, what="restart count stable")
    assert "back-off" in agent.pod("crash")["message"]
    # The same story as kubelet events, read by `edgelet events` from the running agent.
    out = wait_for(
        lambda: (o := agent.cli("events", "--for", "crash-testnode")) and "BackOff" in o and o, what="BackOff event"
    )
    for reason in ("Pulled", "Created", "Started", "BackOff"):
        assert reason in out, out
    assert "x2" in out or "x3" in out, "repeats are aggregated with a count"


def test_onfailure_completes_and_never_fails(agent):
    agent.start()
    agent.write_manifest("ok.yaml", pod_yaml("ok", "echo done", restart="OnFailure"))
    agent.write_manifest("bad.yaml", pod_yaml("bad", "exit 4", restart="Never"))
    ok = wait_for(lambda: (r := agent.pod("ok")) and r["status"] == "Completed" and r, what="ok Completed")
    bad = wait_for(lambda: (r := agent.pod("bad")) and r["status"] == "Error" and r, what="bad Error")
    assert ok["phase"] == "Succeeded" and ok["restarts"] == 0
    assert bad["phase"] == "Failed" and bad["restarts"] == 0


def test_two_containers_share_network_namespace(agent):
    agent.start()
    agent.write_manifest(
        "net.yaml",
        """apiVersion: v1
kind: Pod
metadata: {name: net}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: server
    image: %s
    command: ["sh", "-c", "mkdir -p /www && echo shared-netns > /www/index.html && exec httpd -f -p 8080 -h /www"]
  - name: client
    image: %s
    command: ["sh", "-c", "until wget -qO- http://127.0.0.1:8080/; do sleep 0.2; done; exec sleep 300"]
"""
        % (IMAGE, IMAGE),
    )
    row = wait_for(lambda: (r := agent.pod("net")) and r["ready"] == "2/2" and r, what="both running")
    log = agent.paths.container_log_path("default", "net-testnode", row["uid"], "client", 0)
    wait_for(lambda: "shared-netns" in log.read_text(), what="client fetched the page over the pod's loopback")


def test_sigkill_restart_adopts_without_restarting(runtime_handler, agent):
    agent.start()
    agent.write_manifest("a.yaml", pod_yaml("adopt", "exec sleep 300", containers=2))
    agent.write_manifest("b.yaml", pod_yaml("dies", "sleep 3; exit 7", restart="Never"))
    wait_for(lambda: (r := agent.pod("adopt")) and r["ready"] == "2/2", what="adopt running")
    wait_for(lambda: (r := agent.pod("dies")) and r["status"] == "Running", what="dies running")
    before = {c["id"]: c["pid"] for c in agent.containers_of("adopt")}
    assert {c["handler"] for c in agent.containers_of("adopt")} == {runtime_handler}
    agent.stop(signal.SIGKILL)
    # While the agent is down, a container exits.
    wait_for(
        lambda: all(
            c["status"] == "stopped"
            for c in agent.containers_of("dies")
            if c["annotations"].get("io.edgelet.kind") == "container"
        ),
        what="dies exited",
    )
    agent.start()
    row = wait_for(
        lambda: (r := agent.pod("dies")) and r["status"] == "Error" and r, timeout=30, what="exit while down recorded"
    )
    assert row["restarts"] == 0
    after = {c["id"]: c["pid"] for c in agent.containers_of("adopt")}
    assert after == before, "running containers keep their ids and pids"
    adopt = wait_for(lambda: (r := agent.pod("adopt")) and r["ready"] == "2/2" and r, what="adopted")
    assert adopt["restarts"] == 0


def test_sigterm_leaves_pods_running(agent):
    agent.start()
    agent.write_manifest("a.yaml", pod_yaml("stay", "exec sleep 300"))
    wait_for(lambda: (r := agent.pod("stay")) and r["status"] == "Running", what="running")
    assert agent.stop(signal.SIGTERM) == 0
    assert all(c["status"] == "running" for c in agent.containers_of("stay"))


def test_rejected_manifest_is_visible(agent):
    agent.start()
    agent.write_manifest("good.yaml", pod_yaml("good", "exec sleep 300"))
    agent.write_manifest(
        "broken.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: broken}\nspec:\n  containers:\n  - name: c\n    image: x\n    ports: [{containerPort: http}]\n",
    )
    wait_for(lambda: (r := agent.pod("good")) and r["status"] == "Running", what="good pod runs")
    rejected = wait_for(lambda: agent.snapshot()["rejected"], what="rejection recorded")
    assert any("broken.yaml" in r["origin"] and "containerPort" in r["message"] for r in rejected)
    out = agent.cli("pods")
    assert "good-testnode" in out and "broken.yaml" in out
    events = wait_for(lambda: (o := agent.cli("events")) and "FailedValidation" in o and o, what="event")
    assert "broken.yaml" in events and "containerPort" in events


def test_missing_image_never_pull(agent):
    agent.start()
    agent.write_manifest(
        "n.yaml",
        """apiVersion: v1
kind: Pod
metadata: {name: noimg}
spec:
  containers:
  - {name: c, image: "edgelet.local/absent:1", imagePullPolicy: Never}
""",
    )
    row = wait_for(lambda: (r := agent.pod("noimg")) and r["status"] == "ErrImageNeverPull" and r, what="status")
    assert "not present" in row["message"]


def test_runonce_success_and_failure(agent):
    agent.write_manifest("a.yaml", pod_yaml("svc", "exec sleep 300"))
    agent.write_manifest("b.yaml", pod_yaml("job", "echo ran", restart="OnFailure"))
    res = agent.run_once("--runonce-timeout", "60s")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "svc-testnode" in res.stdout and "job-testnode" in res.stdout
    assert [c for c in agent.containers_of("svc") if c["status"] == "running"], "pods are left running"

    agent.write_manifest("c.yaml", pod_yaml("fails", "exit 1", restart="Never"))
    res = agent.run_once("--runonce-timeout", "60s")
    assert res.returncode != 0
    assert "fails-testnode" in res.stdout


def test_runonce_does_not_report_a_container_that_dies_soon_after_its_start(agent):
    """The verdict comes from observed states, but a container must not be restarting (kubelet's runOnce rule):
    one that exits 0.1 s after each start is never judged running, and the run gives up at its timeout."""
    agent.write_manifest("a.yaml", pod_yaml("flaky", "sleep 0.1; exit 1"))
    res = agent.run_once("--runonce-timeout", "6s")
    assert res.returncode != 0, res.stdout + res.stderr
    assert "flaky-testnode" in res.stdout and "gave up after 6s" in res.stdout


def test_parser_bombs_are_rejected_files_and_the_agent_lives_on(agent):
    agent.start()
    agent.write_manifest("good.yaml", pod_yaml("good", "exec sleep 300"))
    wait_for(lambda: (r := agent.pod("good")) and r["status"] == "Running", what="good pod runs")
    merge = "a0: &a0 {k0: v, k1: v, k2: v, k3: v, k4: v, k5: v, k6: v, k7: v}\n" + "".join(
        f"a{i}: &a{i} {{<<: [*a{i - 1}, *a{i - 1}], x{i}: {{<<: *a{i - 1}}}}}\n" for i in range(1, 12)
    )
    agent.write_manifest("deep.yaml", "- " * 30000 + "x\n")
    agent.write_manifest("merge.yaml", merge)
    rejected = wait_for(lambda: len(r := agent.snapshot()["rejected"]) == 2 and r, what="both rejections", timeout=60)
    by_file = {r["origin"].rsplit("/", 1)[-1]: r["message"] for r in rejected}
    assert "nested more than 100 levels deep" in by_file["deep.yaml"]
    assert "aliases and merge keys expanded" in by_file["merge.yaml"]
    assert agent.proc.poll() is None
    assert agent.pod("good")["status"] == "Running"
    assert all(c["status"] == "running" for c in agent.containers_of("good"))


def test_a_manifest_deleted_while_the_agent_was_down_removes_its_pod_once(agent) -> None:
    """The pod is an orphan at the next start: terminated once (PLEG's cache forgets it at once, so housekeeping
    does not terminate it again every round), and the pods table the previous agent wrote stops listing it."""
    from tests.e2e.conftest import sleeper_yaml

    agent.write_manifest("web.yaml", sleeper_yaml("web", policy="Never"))
    agent.start()
    wait_for(lambda: (r := agent.pod("web")) and r["status"] == "Running", timeout=90, what="web Running")
    agent.stop()
    (agent.manifests / "web.yaml").unlink()
    agent.start()
    wait_for(lambda: "edgelet started" in agent.log(), what="the restart")
    wait_for(
        lambda: agent.pod("web") is None and not agent.containers_of("web"),
        timeout=60,
        what="web gone from the runtime and the pods table",
    )
    time.sleep(5)  # several housekeeping rounds (every 2 s)
    assert agent.log().count("Cleaning up orphaned pod") == 1
    agent.stop()
