"""The Raspberry Pi image recipe (packaging/build-image.sh and packaging/image/) without building it: its dry run,
its units, and the files it puts on the card and in /etc."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from edgelet.settings import read_config_file

REPO = Path(__file__).resolve().parents[2]
PACKAGING = REPO / "packaging"
IMAGE = PACKAGING / "image"


def test_dry_run_prints_every_step_and_does_nothing(tmp_path: Path) -> None:
    cache, base_cache = tmp_path / "cache", tmp_path / "base-cache"
    out = subprocess.run(
        [
            str(PACKAGING / "build-image.sh"),
            "--dry-run",
            "--deb",
            "/x/edgelet_0.1.0_arm64.deb",
            "--output",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "IMAGE_CACHE": str(cache), "IMAGE_BASE_CACHE": str(base_cache)},
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    for expected in (
        # One mmdebstrap run: every package in one apt and dpkg run, dpkg under eatmydata, no docs, the
        # .debs kept outside the checkout for the next build.
        "mmdebstrap --arch=arm64 --variant=minbase",
        "--hook-dir=/usr/share/mmdebstrap/hooks/eatmydata",
        "--dpkgopt=path-exclude=/usr/share/doc/*",
        f"cp -l '{base_cache}/debs'/*.deb",
        "linux-image-arm64,raspi-firmware",
        # The initramfs holds the listed boot modules only, configured before the kernel's postinst builds it.
        f"cp '{IMAGE}/initramfs.conf' \"$1/etc/initramfs-tools/conf.d/edgelet-image.conf\"",
        f"cp '{IMAGE}/initramfs-modules' \"$1/usr/share/initramfs-tools/modules.d/edgelet-image\"",
        "openssh-server",
        "runc,crun,conmon,catatonit,containernetworking-plugins",  # crun: the second runtime handler
        "main non-free-firmware deb http://deb.debian.org/debian bookworm-updates main non-free-firmware",
        'ROOTPART="LABEL=RASPIROOT"',
        "cgroup_enable=memory cgroup_memory=1' > /etc/default/raspi-extra-cmdline",
        "/etc/kernel/postinst.d/z50-raspi-firmware",
        f"cp -a --one-file-system {base_cache}/base {cache}/root",
        f"rm -rf --one-file-system {cache}/root",  # never through a killed build's leftover mounts
        "dpkg -i /tmp/edgelet.deb",
        "systemctl enable systemd-networkd systemd-resolved ssh edgelet.service edgelet-runonce.service",
        "edgelet-card-setup.service edgelet-grow-root.service",
        "mkfs.vfat -F 32 -n RASPIFIRM",
        "mkfs.ext4 -q -L RASPIROOT -d",
        "xz -T0 -6",
        "sha256sum 'edgelet-rpi-arm64.img.xz'",
    ):
        assert expected in text, expected
    assert (
        not cache.exists() and not base_cache.exists() and not (tmp_path / "out" / "edgelet-rpi-arm64.img.xz").exists()
    )


def test_initramfs_lists_the_boot_modules_only() -> None:
    conf = [line for line in (IMAGE / "initramfs.conf").read_text().splitlines() if not line.startswith("#")]
    assert [line for line in conf if line.strip()] == ["MODULES=list"]
    modules = {
        line.strip()
        for line in (IMAGE / "initramfs-modules").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    # The Pi 3/4 SD controllers, the root filesystem, USB boot, and the virtio disk of test-image's virt boot.
    assert {"bcm2835", "sdhci-iproc", "ext4", "dwc2", "xhci-pci", "usb-storage", "virtio_blk"} <= modules


def test_without_deb_this_trees_deb_is_built_never_an_old_one_from_dist(tmp_path: Path) -> None:
    out = subprocess.run(
        [str(PACKAGING / "build-image.sh"), "--dry-run", "--output", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "IMAGE_CACHE": str(tmp_path / "cache"),
            "IMAGE_BASE_CACHE": str(tmp_path / "base-cache"),
        },
    )
    assert out.returncode == 0, out.stderr
    assert f"+ {PACKAGING}/build-arm64.sh --deb" in out.stdout


def test_card_config_example_is_valid_and_empty() -> None:
    # Every line is commented out: flashed as is, the card changes nothing.
    assert read_config_file(IMAGE / "card-config.toml") == {}


def test_journal_stays_in_ram() -> None:
    text = (IMAGE / "journald.conf").read_text()
    assert "Storage=volatile" in text and "RuntimeMaxUse=" in text


def test_card_setup_runs_before_the_network_sshd_and_edgelet() -> None:
    text = (IMAGE / "edgelet-card-setup.service").read_text()
    before = next(line for line in text.splitlines() if line.startswith("Before="))
    for unit in ("network-pre.target", "edgelet-runonce.service", "edgelet.service", "ssh.service"):
        assert unit in before
    assert "ConditionPathIsDirectory=/boot/firmware/edgelet" in text
    assert "ExecStart=/usr/sbin/edgelet-card-setup" in text


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_image_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    units = []
    for name, script in (
        ("edgelet-card-setup.service", "edgelet-card-setup"),
        ("edgelet-grow-root.service", "edgelet-grow-root"),
    ):
        unit = tmp_path / name
        unit.write_text((IMAGE / name).read_text().replace(f"/usr/sbin/{script}", str(IMAGE / script)))
        units.append(str(unit))
    out = subprocess.run(["systemd-analyze", "verify", *units], capture_output=True, text=True, timeout=60)
    problems = [
        line
        for line in (out.stdout + out.stderr).splitlines()
        if "ssh.service" not in line and "systemd-hostnamed" not in line
    ]  # not on a test machine
    assert out.returncode == 0 and not problems, out.stdout + out.stderr


def test_scripts_parse() -> None:
    for script in ("edgelet-card-setup", "edgelet-grow-root"):
        subprocess.run(["sh", "-n", str(IMAGE / script)], check=True)
    for script in ("build-image.sh", "test-image.sh"):
        subprocess.run(["bash", "-n", str(PACKAGING / script)], check=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (bind mounts)")
def test_a_killed_builds_leftover_bind_mount_is_undone_not_followed(tmp_path: Path) -> None:
    """A build SIGKILLed inside its chroot leaves the host's /dev bound into the root; the next build's
    removal of that root must unmount it and never delete through it (here a stand-in for /dev)."""
    host_dev = tmp_path / "host-dev"
    host_dev.mkdir()
    (host_dev / "null").write_text("the host's")
    root = tmp_path / "cache" / "root"
    (root / "dev").mkdir(parents=True)
    (root / "proc").mkdir()
    (root / "etc").mkdir()
    (root / "etc" / "hostname").write_text("x\n")
    subprocess.run(["mount", "--bind", str(host_dev), str(root / "dev")], check=True)
    subprocess.run(["mount", "--bind", str(host_dev), str(root / "proc")], check=True)  # two, nested order
    try:
        script = f"dry_run=0; . {PACKAGING}/common.sh; remove_tree {root}"
        out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert (host_dev / "null").read_text() == "the host's"
        assert not root.exists()
        assert str(root) not in Path("/proc/self/mountinfo").read_text()
    finally:
        for sub in ("dev", "proc"):
            subprocess.run(["umount", "-l", str(root / sub)], capture_output=True)
