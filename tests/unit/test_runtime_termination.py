"""What the runtime records at create for reading a container's termination message after its exit."""

from __future__ import annotations

import pytest

from edgelet.api.types import Container, VolumeMount
from edgelet.runtime.layout import ANN_TERMINATION_MESSAGE_FILE, ANN_TERMINATION_MESSAGE_POLICY
from edgelet.runtime.termination import termination_annotations


def _container(policy: str | None = "File", path: str | None = "/dev/termination-log",
               mounts: tuple[str, ...] = ()) -> Container:
    return Container(name="c", image="busybox", termination_message_path=path, termination_message_policy=policy,
                     volume_mounts=[VolumeMount(name=f"v{i}", mount_path=m) for i, m in enumerate(mounts)] or None)


@pytest.mark.parametrize(
    ("container", "policy", "reads_file"),
    [
        pytest.param(_container(), "File", "true", id="defaulted"),
        pytest.param(_container("FallbackToLogsOnError"), "FallbackToLogsOnError", "true", id="fallback"),
        pytest.param(_container(None, None), "File", "false", id="undefaulted: no path, kubelet reads nothing"),
        pytest.param(_container(path=""), "File", "false", id="empty path"),
        pytest.param(_container(path="/data/msg", mounts=("/data/msg/",)), "File", "false",
                     id="a volume mounted at the path: the bundle's file is not there"),
        pytest.param(_container(path="/data/msg", mounts=("/data",)), "File", "true", id="a volume elsewhere"),
    ],
)
def test_create_records_what_the_read_needs(container: Container, policy: str, reads_file: str) -> None:
    assert termination_annotations(container) == {
        ANN_TERMINATION_MESSAGE_POLICY: policy, ANN_TERMINATION_MESSAGE_FILE: reads_file}

