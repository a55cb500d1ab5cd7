"""`edgelet images pull` and `images import` show their progress: a real pull from the loopback registry
and a real archive, plain lines without a terminal and redrawn lines on one (a pty)."""

from __future__ import annotations

import os
import pty
import select
import shutil
import subprocess
import sys

import pytest

from tests.integration.registry import Layout, Registry, big_file_layer, busybox_tar

pytestmark = pytest.mark.skipif(
    shutil.which("docker-registry") is None or shutil.which("skopeo") is None,
    reason="needs docker-registry and skopeo (make deps)",
)


@pytest.fixture(scope="module")
def pushed(tmp_path_factory):
    base = tmp_path_factory.mktemp("progress")
    reg = Registry(base / "reg")
    reg.start()
    lay = Layout(base / "layout")
    desc = lay.image([(busybox_tar(), True), (big_file_layer("data/blob", 3 << 20), True)])
    lay.tag(desc)
    reg.push_layout(lay.dir, "test/progress:1")
    yield reg, lay
    reg.stop()


def cli(root, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "edgelet",
        "images",
        *args,
        "--root-dir",
        str(root / "root"),
        "--run-dir",
        str(root / "run"),
        "--config",
        "/dev/null",
    ]


def test_pull_prints_a_line_per_layer_start_and_finish(pushed, tmp_path):
    reg, _ = pushed
    done = subprocess.run(
        cli(tmp_path, "pull", f"{reg.host}/test/progress:1"), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    started = [line for line in lines if line.endswith(")") and "  started (" in line]
    finished = [line for line in lines if "  done " in line and "/s)" in line]
    assert len(started) == len(finished) == 3  # config and two layers
    assert any("started (3.1" in line for line in started)  # the 3 MiB layer (gzip'd random data), by its size
    assert lines[-1].startswith(f"Pulled {reg.host}/test/progress:1 (sha256:")
    assert "\x1b[" not in done.stdout  # no terminal, no cursor movement


def test_pull_on_a_terminal_redraws_bytes_rate_and_eta(pushed, tmp_path):
    reg, _ = pushed
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        cli(tmp_path, "pull", f"{reg.host}/test/progress:1"), stdin=subprocess.DEVNULL, stdout=slave, stderr=slave
    )
    os.close(slave)
    out = b""
    while True:
        ready, _, _ = select.select([master], [], [], 1.0)
        if not ready:
            if proc.poll() is not None:
                break
            continue
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        out += data
    os.close(master)
    assert proc.wait(timeout=60) == 0
    text = out.decode()
    assert "\x1b[2K" in text and "total  " in text  # redrawn in place, with a total over the blobs
    assert " done " in text and "B/s" in text
    assert "Pulled " in text


def test_import_prints_progress(pushed, tmp_path):
    _, lay = pushed
    archive = tmp_path / "progress.oci.tar"
    subprocess.run(["tar", "-C", str(lay.dir), "-cf", str(archive), "."], check=True)
    done = subprocess.run(cli(tmp_path, "import", str(archive)), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "  started (" in done.stdout and "  done " in done.stdout
    assert "Imported " in done.stdout.splitlines()[-1]
