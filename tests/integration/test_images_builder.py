"""The test image builder: deterministic output that skopeo and umoci accept."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from edgelet.testing.images import build_busybox_image, host_architecture

NAME = "edgelet.local/busybox:1.36"


def test_deterministic(tmp_path: Path) -> None:
    for fmt in ("oci-archive", "docker-archive"):
        a = build_busybox_image(tmp_path / f"a-{fmt}", fmt=fmt)  # type: ignore[arg-type]
        b = build_busybox_image(tmp_path / f"b-{fmt}", fmt=fmt)  # type: ignore[arg-type]
        assert a.read_bytes() == b.read_bytes()


def test_layout_contents(tmp_path: Path) -> None:
    out = build_busybox_image(
        tmp_path / "layout",
        name=NAME,
        fmt="oci-layout",
        config={"Cmd": ["sleep", "9"], "User": "65534"},
        extra_layers=[{"etc/motd": b"hi"}],
    )
    index = json.loads((out / "index.json").read_text())
    [desc] = index["manifests"]
    assert desc["annotations"] == {"org.opencontainers.image.ref.name": "1.36", "io.containerd.image.name": NAME}
    manifest = json.loads((out / "blobs/sha256" / desc["digest"].split(":")[1]).read_text())
    config = json.loads((out / "blobs/sha256" / manifest["config"]["digest"].split(":")[1]).read_text())
    assert config["config"]["Cmd"] == ["sleep", "9"] and config["config"]["User"] == "65534"
    assert config["architecture"] == host_architecture() and len(config["rootfs"]["diff_ids"]) == 2
    assert all(la["mediaType"].endswith("tar+gzip") for la in manifest["layers"])
    with pytest.raises(ValueError, match="Bogus"):
        build_busybox_image(tmp_path / "x", config={"Bogus": 1})


def test_command_line(tmp_path: Path) -> None:
    out = tmp_path / "build/images/busybox-1.36.oci.tar"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "edgelet.testing.images",
            "--format",
            "oci-archive",
            "--name",
            NAME,
            "--output",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    assert out.is_file()


@pytest.mark.skipif(shutil.which("skopeo") is None, reason="needs skopeo")
def test_skopeo_accepts_it(tmp_path: Path) -> None:
    oci = build_busybox_image(tmp_path / "bb.oci.tar", name=NAME)
    info = json.loads(
        subprocess.run(["skopeo", "inspect", f"oci-archive:{oci}"], check=True, capture_output=True, text=True).stdout
    )
    assert info["Architecture"] == host_architecture() and info["Os"] == "linux"
    subprocess.run(
        ["skopeo", "copy", "-q", f"oci-archive:{oci}", f"docker-archive:{tmp_path / 'g.tar'}:{NAME}"],
        check=True,
        capture_output=True,
    )
    docker = build_busybox_image(tmp_path / "bb.docker.tar", name=NAME, fmt="docker-archive")
    info = json.loads(
        subprocess.run(
            ["skopeo", "inspect", f"docker-archive:{docker}"], check=True, capture_output=True, text=True
        ).stdout
    )
    assert len(info["Layers"]) == 1


@pytest.mark.skipif(shutil.which("umoci") is None or os.geteuid() != 0, reason="needs umoci and root")
def test_umoci_unpacks_it(tmp_path: Path) -> None:
    layout = build_busybox_image(tmp_path / "layout", name=NAME, fmt="oci-layout", extra_layers=[{"bin/wget": None}])
    subprocess.run(
        ["umoci", "unpack", "--image", f"{layout}:1.36", str(tmp_path / "bundle")], check=True, capture_output=True
    )
    rootfs = tmp_path / "bundle/rootfs"
    assert (rootfs / "bin/busybox").is_file() and os.readlink(rootfs / "bin/sh") == "busybox"
    assert not os.path.lexists(rootfs / "bin/wget")
