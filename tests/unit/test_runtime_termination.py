"""The runtime's termination-message reader (kubelet getTerminationMessage / readLastStringFromContainerLogs).

What the read needs is recorded as bundle annotations when the container is
created; the read itself takes only the bundle, those annotations and the
exited container's record.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from edgelet.api.types import Container, VolumeMount
from edgelet.container.types import ContainerRecord
from edgelet.runtime.bundle import TERMINATION_LOG
from edgelet.runtime.layout import ANN_TERMINATION_MESSAGE_FILE, ANN_TERMINATION_MESSAGE_POLICY
from edgelet.runtime.termination import MAX_LOG_BYTES, MAX_MESSAGE_BYTES, termination_annotations, termination_message

FILE = {ANN_TERMINATION_MESSAGE_POLICY: "File", ANN_TERMINATION_MESSAGE_FILE: "true"}
FALLBACK = {ANN_TERMINATION_MESSAGE_POLICY: "FallbackToLogsOnError", ANN_TERMINATION_MESSAGE_FILE: "true"}


def _container(
    policy: str | None = "File", path: str | None = "/dev/termination-log", mounts: tuple[str, ...] = ()
) -> Container:
    return Container(
        name="c",
        image="busybox",
        termination_message_path=path,
        termination_message_policy=policy,
        volume_mounts=[VolumeMount(name=f"v{i}", mount_path=m) for i, m in enumerate(mounts)] or None,
    )


@pytest.mark.parametrize(
    ("container", "policy", "reads_file"),
    [
        pytest.param(_container(), "File", "true", id="defaulted"),
        pytest.param(_container("FallbackToLogsOnError"), "FallbackToLogsOnError", "true", id="fallback"),
        pytest.param(_container(None, None), "File", "false", id="undefaulted: no path, kubelet reads nothing"),
        pytest.param(_container(path=""), "File", "false", id="empty path"),
        pytest.param(
            _container(path="/data/msg", mounts=("/data/msg/",)),
            "File",
            "false",
            id="a volume mounted at the path: the bundle's file is not there",
        ),
        pytest.param(_container(path="/data/msg", mounts=("/data",)), "File", "true", id="a volume elsewhere"),
    ],
)
def test_create_records_what_the_read_needs(container: Container, policy: str, reads_file: str) -> None:
    assert termination_annotations(container) == {
        ANN_TERMINATION_MESSAGE_POLICY: policy,
        ANN_TERMINATION_MESSAGE_FILE: reads_file,
    }


def _exited(tmp_path: Path, code: int, log_lines: list[str] | None = None, reason: str = "") -> ContainerRecord:
    log = tmp_path / "logs" / "c.log"
    if log_lines is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("".join(f"2024-01-01T00:00:00.000000000Z stderr F {line}\n" for line in log_lines))
    return ContainerRecord(
        id="c-0",
        pod_uid="u",
        pod_name="p",
        pod_namespace="default",
        name="c",
        attempt=0,
        spec_hash="h",
        sandbox_id="sb",
        state="exited",
        pid=None,
        created_at=1.0,
        exit_code=code,
        reason=reason or ("Completed" if code == 0 else "Error"),
        log_path=str(log),
    )


def _bundle(tmp_path: Path, data: bytes | None = None) -> Path:
    bundle = tmp_path / "bundle"
    bundle.mkdir(exist_ok=True)
    if data is not None:
        (bundle / TERMINATION_LOG).write_bytes(data)
    return bundle


def test_message_file_is_read_and_capped_to_its_last_4_kib(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, b"x" * 10 + b"y" * MAX_MESSAGE_BYTES)
    assert termination_message(bundle, FILE, _exited(tmp_path, 0)) == "y" * MAX_MESSAGE_BYTES


@pytest.mark.parametrize(
    ("annotations", "code", "reason", "file_data", "expected"),
    [
        (FILE, 1, "", None, ""),
        (FILE, 1, "", b"", ""),
        (FALLBACK, 1, "", b"", "line 19\nline 20\n"),  # tail of the log
        (FALLBACK, 1, "", None, "line 19\nline 20\n"),
        (FALLBACK, 1, "", b"from file", "from file"),  # the file wins when it says something
        (FALLBACK, 0, "", b"", ""),  # success: no fallback
        (FALLBACK, 128, "ContainerCannotRun", b"", ""),  # it never ran: its log says nothing of it
        ({**FALLBACK, ANN_TERMINATION_MESSAGE_FILE: "false"}, 1, "", b"hidden", "line 19\nline 20\n"),
        ({}, 1, "", b"old bundle", "old bundle"),  # an older edgelet's bundle: File, and the file is read
        ({}, 1, "", b"", ""),
    ],
)
def test_file_then_fallback_to_logs_on_error(
    tmp_path: Path, annotations: dict[str, str], code: int, reason: str, file_data: bytes | None, expected: str
) -> None:
    r = _exited(tmp_path, code, [f"line {i}" for i in range(1, 21)], reason)
    got = termination_message(_bundle(tmp_path, file_data), annotations, r)
    assert got.endswith(expected) and (expected or got == "")


def test_log_fallback_is_capped_to_80_lines_and_2_kib(tmp_path: Path) -> None:
    r = _exited(tmp_path, 1, [f"{i:03d}" + "z" * 40 for i in range(200)])
    got = termination_message(_bundle(tmp_path), FALLBACK, r)
    assert got.startswith("120") and len(got.encode()) == MAX_LOG_BYTES


def test_message_path_mounted_by_a_volume_is_not_the_runtime_file(tmp_path: Path) -> None:
    c = _container(path="/data/msg", mounts=("/data/msg",))
    assert termination_message(_bundle(tmp_path, b"hidden"), termination_annotations(c), _exited(tmp_path, 1)) == ""


def test_a_symlinked_file_is_not_followed_and_the_error_is_the_message(tmp_path: Path) -> None:
    # A container could point its message file at a host file; kubelet reports a read error in the message.
    secret = tmp_path / "secret"
    secret.write_text("host data")
    bundle = _bundle(tmp_path)
    (bundle / TERMINATION_LOG).symlink_to(secret)
    got = termination_message(bundle, FALLBACK, _exited(tmp_path, 1, ["from the log"]))
    assert got.startswith(f"Error on reading termination log {bundle / TERMINATION_LOG}: ")
    assert "host data" not in got and "from the log" not in got
