"""Raspberry Pi image figures (issue 24): size, boot times and agent RSS under emulation, idle flash writes against stock settings.

Given the built image (`make image`), prints:

- size: the `.img.xz` (what is downloaded), the raw image (what is
  flashed), and the bytes used on its ext4 root (blocks in use, from the
  superblock, before first boot);
- boot times under qemu-system-aarch64 -M raspi3b (TCG, kernel, device tree
  and cmdline.txt from the FAT partition as in `make test-image`): from qemu's
  start to every one of N pods Running (`edgelet pods`, polled by a unit in
  the guest every 5 s), at the first boot and at a later boot after a power
  cut. Emulation is 10-30x slower than a Pi 3/4: these are upper bounds
  that say where the time goes, not a Pi's figures;
- edgelet's VmRSS (the .deb's frozen one-dir arm64 build, the unit's main
  process) with N pods running, after a settle time and after the window;
- flash writes per idle hour of the whole card: sectors written
  (/sys/block/mmcblk0/stat, every partition) over an idle window after the
  later boot, scaled to an hour, for the image as built and for the same
  image with stock settings: persistent journald (Debian's Storage=auto
  with /var/log/journal, the image's volatile drop-in removed), the root
  mounted without noatime/commit=60, the card partition without noatime,
  and edgelet's default container log sizes. The stock copy is made from
  the tuned image after its first boot (loop-mounted, the tunings
  reverted), so both windows are measured on a later boot of the same
  installed card.

The pods are N small sleeping pods (hostNetwork, one container running
dash's `sleep`) from an arm64 image archive imported from the card's
edgelet/images/, as `make test-image` makes it. The guest reports on its
second serial port, not over SSH: a login writes wtmp, lastlog and the
journal, which would count as flash writes in the window. The guest has a
USB Ethernet adapter (qemu's usb-net on the dwc2 controller, user
networking with no route out of loopback), so networkd's DHCP runs as on a
wired Pi; qemu's dwc2 loses its enumeration in some boots, so the guest
rebinds the controller up to 3 times and reports the rebinds and the
address it idled with (`make test-image` checks the network on `virt`).

Run as root (loop mounts), after `make image`:
    .venv/bin/python bench/image.py [--image build/image-cache/img/edgelet-rpi-arm64.img]
        [--xz dist/edgelet-rpi-arm64.img.xz] [--pods 20] [--window 900] [--settle 120]
Three boots (tuned first, tuned later, stock later) plus two windows: about
an hour on a 2-core machine with the defaults.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import REPO, machine

SECTOR = 512
# What the guest runs: waits for every pod, then RSS and the idle window, reported on ttyS1.
GUEST_SCRIPT = r"""#!/bin/sh
. /etc/edgelet-bench.conf
say() { echo "IMAGE-BENCH $*" > /dev/ttyS1; }
up() { cut -d' ' -f1 /proc/uptime; }
sectors() { awk '{print $7}' /sys/block/mmcblk0/stat; }
rss() { pid="$(systemctl show -p MainPID --value edgelet.service)"; awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null; }
say "unit uptime=$(up)"
while :; do
    n=0
    if systemctl is-active -q edgelet.service; then
        n=$(edgelet pods 2>/dev/null | grep -E '[[:space:]]sleep-[0-9]+-' | grep -c Running)
    fi
    [ "$n" -ge "$PODS" ] && break
    sleep 5
done
say "running uptime=$(up) pods=$n"
# qemu's dwc2 emulation fails the USB adapter's enumeration in some boots: probe the controller again
# (at most 3 times, as replugging would) so that both images idle on a network, as make test-image does.
rebinds=0
while ! ip -4 -o addr show dev eth0 2>/dev/null | grep -q inet && [ $rebinds -lt 3 ]; do
    if [ ! -e /sys/class/net/eth0 ]; then
        rebinds=$((rebinds + 1))
        echo 3f980000.usb > /sys/bus/platform/drivers/dwc2/unbind
        sleep 1
        echo 3f980000.usb > /sys/bus/platform/drivers/dwc2/bind
    fi
    w=0
    while [ $w -lt 12 ] && ! ip -4 -o addr show dev eth0 2>/dev/null | grep -q inet; do sleep 5; w=$((w + 1)); done
    [ -e /sys/class/net/eth0 ] || continue
    break
done
say "usb rebinds=$rebinds"
say "mount $(findmnt -no OPTIONS /) firmware $(findmnt -no OPTIONS /boot/firmware)"
say "net $(ip -4 -o addr show dev eth0 2>&1 | awk '{print $2, $4}')"
say "df used=$(df -B1 --output=used / | tail -n 1 | tr -d ' ')"
say "journal $(journalctl --disk-usage 2>&1 | tr -s ' ') persistent=$(ls -d /var/log/journal/*/ 2>/dev/null | wc -l)"
if [ "$MODE" = later ]; then
    sleep "$SETTLE"
    say "rss-settled kib=$(rss) conmons=$(pgrep -c conmon)"
    s0=$(sectors); t0=$(up)
    sleep "$WINDOW"
    s1=$(sectors); t1=$(up)
    say "window sectors=$((s1 - s0)) t0=$t0 t1=$t1"
    say "rss-after kib=$(rss)"
fi
sync
say "DONE"
"""
GUEST_UNIT = """[Unit]
Description=edgelet image bench: report on the console
After=edgelet.service
[Service]
Type=oneshot
ExecStart=/bin/sh /usr/local/sbin/edgelet-bench
[Install]
WantedBy=multi-user.target
"""


def run(*argv: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=True, text=True, capture_output=True, **kw)


def partitions(image: Path) -> list[tuple[int, int]]:
    """(start, size) in bytes of each partition of the image's msdos table."""
    table = json.loads(run("sfdisk", "-J", str(image)).stdout)["partitiontable"]
    return [(p["start"] * SECTOR, p["size"] * SECTOR) for p in table["partitions"]]


class LoopMount:
    """The image's root partition loop-mounted at a temp dir (`with`), undone on exit."""

    def __init__(self, image: Path, part: tuple[int, int], readonly: bool = False) -> None:
        self.image, self.part, self.readonly = image, part, readonly

    def __enter__(self) -> Path:
        self.dir = Path(tempfile.mkdtemp(prefix="edgelet-bench-image-mnt-"))
        self.dev = run(
            "losetup",
            "--find",
            "--show",
            "--offset",
            str(self.part[0]),
            "--sizelimit",
            str(self.part[1]),
            *(["--read-only"] if self.readonly else []),
            str(self.image),
        ).stdout.strip()
        try:
            run("mount", *(["-o", "ro"] if self.readonly else []), self.dev, str(self.dir))
        except subprocess.CalledProcessError:
            run("losetup", "-d", self.dev)
            raise
        return self.dir

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["umount", str(self.dir)], check=False)
        subprocess.run(["losetup", "-d", self.dev], check=False)
        self.dir.rmdir()


def root_used(image: Path, part: tuple[int, int]) -> int:
    """Bytes in use on the ext4 root as the image ships (statvfs of a read-only loop mount)."""
    with LoopMount(image, part, readonly=True) as mnt:
        st = os.statvfs(mnt)
        return (st.f_blocks - st.f_bfree) * st.f_frsize


def install_guest(root: Path, pods: int, mode: str, settle: int, window: int) -> None:
    script = root / "usr/local/sbin/edgelet-bench"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(GUEST_SCRIPT)
    script.chmod(0o755)
    (root / "etc/systemd/system/edgelet-bench.service").write_text(GUEST_UNIT)
    wants = root / "etc/systemd/system/multi-user.target.wants/edgelet-bench.service"
    if not wants.is_symlink():
        wants.symlink_to("/etc/systemd/system/edgelet-bench.service")
    (root / "etc/edgelet-bench.conf").write_text(f"PODS={pods}\nMODE={mode}\nSETTLE={settle}\nWINDOW={window}\n")


def revert_tunings(root: Path) -> list[str]:
    """Stock settings in place of what build-image.sh tunes for the SD card; returns what changed."""
    done = []
    fstab = root / "etc/fstab"
    text = fstab.read_text()
    stock = text.replace("rw,noatime,commit=60,errors=remount-ro", "rw,errors=remount-ro")
    stock = stock.replace("rw,noatime,umask=0077", "rw,umask=0077")
    if stock == text:
        raise SystemExit(f"image.py: {fstab}: the image's mount options were not found (build-image.sh changed?)")
    fstab.write_text(stock)
    done.append("fstab: relatime and ext4's 5 s commit (no noatime, no commit=60)")
    dropin = root / "etc/systemd/journald.conf.d/50-edgelet-image.conf"
    dropin.unlink()
    if not (root / "var/log/journal").is_dir():
        raise SystemExit("image.py: the image has no /var/log/journal: Debian's stock journal would not persist")
    done.append("journald: Debian's Storage=auto with /var/log/journal (persistent), no RuntimeMaxUse")
    config = root / "etc/edgelet/config.toml"
    text = config.read_text()
    stock = re.sub(r'(?m)^container_log_max_size = "2Mi"$', '#container_log_max_size = "10Mi"', text)
    stock = re.sub(r"(?m)^container_log_max_files = 3$", "#container_log_max_files = 5", stock)
    config.write_text(stock)
    done.append("edgelet: default container log rotation (10Mi x 5)")
    return done


def mcopy(fat: str, src: Path, dest: str) -> None:
    run("mcopy", "-o", "-i", fat, str(src), dest, env={**os.environ, "MTOOLS_SKIP_CHECK": "1"})


def boot_files(image: Path, fat: str, out: Path) -> tuple[Path, Path, Path, str]:
    env = {**os.environ, "MTOOLS_SKIP_CHECK": "1"}
    names = [n.removeprefix("::/") for n in run("mdir", "-b", "-i", fat, "::", env=env).stdout.split()]

    def newest(prefix: str) -> str:
        return sorted(
            (n for n in names if n.startswith(prefix)),
            key=lambda n: [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", n)],
        )[-1]

    out.mkdir(parents=True, exist_ok=True)
    files = []
    for src, dest in (
        (newest("vmlinuz-"), "vmlinuz"),
        (newest("initrd.img-"), "initrd.img"),
        ("bcm2837-rpi-3-b.dtb", "rpi3.dtb"),
        ("cmdline.txt", "cmdline.txt"),
    ):
        run("mcopy", "-n", "-i", fat, f"::{src}", str(out / dest), env=env)
        files.append(out / dest)
    # Emulated on a loaded host, early boot can outlast systemd's 90 s wait for a device (RASPIFIRM, ttyS1).
    cmdline = files[3].read_text().replace("\n", "") + " systemd.default_timeout_start_sec=900"
    return files[0], files[1], files[2], cmdline


def boot(image: Path, fat: str, work: Path, log: Path, timeout: int) -> dict[str, Any]:
    """Boots the image under raspi3b until the guest says DONE; kills qemu (a power cut); the report."""
    kernel, initrd, dtb, cmdline = boot_files(image, fat, work / "fat")
    argv = [
        "qemu-system-aarch64",
        "-M",
        "raspi3b",
        "-m",
        "1G",
        "-smp",
        "4",
        "-kernel",
        str(kernel),
        "-initrd",
        str(initrd),
        "-dtb",
        str(dtb),
        "-append",
        cmdline,
        "-drive",
        f"file={image},if=sd,format=raw",
        # A wired Pi: USB Ethernet on the dwc2 controller, user networking with no route out of loopback.
        "-device",
        "usb-net,netdev=n0,mac=b8:27:eb:00:00:24,port=1",
        "-netdev",
        "user,id=n0,restrict=on",
        "-serial",
        "null",
        "-serial",
        f"file:{log}",
        "-display",
        "none",
        "-no-reboot",
    ]
    start = time.monotonic()
    qemu = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    report: dict[str, Any] = {}
    try:
        while True:
            text = log.read_text(errors="replace") if log.exists() else ""
            if "IMAGE-BENCH running" in text and "host_running_s" not in report:
                report["host_running_s"] = time.monotonic() - start
            if "IMAGE-BENCH DONE" in text:
                break
            if "Emergency Mode" in text:
                # Should the device wait still run out (the cmdline raises it to 900 s) or anything else fail.
                raise SystemExit(f"image.py: the guest fell into emergency mode; console: {log}")
            if qemu.poll() is not None:
                raise SystemExit(f"image.py: qemu exited ({qemu.returncode}) before the report; console: {log}")
            if time.monotonic() - start > timeout:
                raise SystemExit(f"image.py: no report within {timeout}s; console: {log}")
            time.sleep(2)
    finally:
        if qemu.poll() is None:
            qemu.send_signal(signal.SIGKILL)
        qemu.wait()
    for line in text.splitlines():
        m = re.search(r"IMAGE-BENCH (\S+) (.*)", line.replace("\r", ""))
        if m:
            report[m.group(1)] = m.group(2)
    return report


def field(report: dict, key: str, name: str) -> float:
    m = re.search(rf"{name}=([0-9.]+)", str(report.get(key, "")))
    if not m:
        raise SystemExit(f"image.py: the guest's report lacks {key} {name}: {report}")
    return float(m.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--image", type=Path, default=REPO / "build/image-cache/img/edgelet-rpi-arm64.img")
    ap.add_argument("--xz", type=Path, default=REPO / "dist/edgelet-rpi-arm64.img.xz")
    ap.add_argument(
        "--root",
        type=Path,
        default=REPO / "build/image-cache/root",
        help="the image's root directory (the pods' arm64 binaries come from it)",
    )
    ap.add_argument("--pods", type=int, default=20)
    ap.add_argument("--window", type=int, default=900, help="idle window in seconds for the flash writes")
    ap.add_argument("--settle", type=int, default=120, help="seconds after every pod runs before measuring")
    ap.add_argument("--timeout", type=int, default=5400, help="seconds per boot before giving up")
    ap.add_argument("--keep", action="store_true", help="keep the work dir (images, consoles)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("image.py: run as root (loop mounts)")
    for p in (args.image, args.xz, args.root):
        if not p.exists():
            raise SystemExit(f"image.py: {p}: not found (make image first)")
    print(f"machine: {machine()}")
    print(f"image: {args.image}, pods: {args.pods}, settle: {args.settle}s, idle window: {args.window}s")
    parts = partitions(args.image)
    fat_part, root_part = parts[0], parts[1]
    sizes = {
        "xz": args.xz.stat().st_size,
        "raw": args.image.stat().st_size,
        "root_used": root_used(args.image, root_part),
    }
    print(
        f"size: .img.xz {sizes['xz'] / 1e6:.1f} MB, raw {sizes['raw'] / 2**30:.2f} GiB,"
        f" root used {sizes['root_used'] / 1e6:.1f} MB",
        flush=True,
    )

    work = Path(tempfile.mkdtemp(prefix="edgelet-bench-image-", dir=REPO / "build"))
    try:
        # The card: N sleeping pods and the arm64 archive their image comes from.
        card = work / "card"
        card.mkdir()
        run(
            sys.executable,
            str(REPO / "packaging/image/test-image-archive.py"),
            str(args.root),
            str(card / "test-sh.oci.tar"),
        )
        tuned = work / "tuned.img"
        run("cp", "--sparse=always", str(args.image), str(tuned))
        fat = f"{tuned}@@{fat_part[0]}"
        mcopy(fat, card / "test-sh.oci.tar", "::edgelet/images/test-sh.oci.tar")
        for i in range(args.pods):
            name = f"sleep-{i:02d}"
            m = card / f"{name}.yaml"
            m.write_text(f"""apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: edgelet.local/test-sh:1
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "while :; do sleep 3600; done"]
""")
            mcopy(fat, m, f"::edgelet/manifests/{name}.yaml")
        with LoopMount(tuned, root_part) as mnt:
            install_guest(mnt, args.pods, "first", args.settle, args.window)

        print("boot 1 (first boot, tuned image) ...", flush=True)
        first = boot(tuned, fat, work, work / "console-first.log", args.timeout)
        print(
            f"  all {args.pods} pods Running {first['host_running_s']:.0f} s after qemu started"
            f" (guest uptime {field(first, 'running', 'uptime'):.0f} s); root used then"
            f" {field(first, 'df', 'used') / 1e6:.1f} MB; network: {first.get('net')}",
            flush=True,
        )

        stock = work / "stock.img"
        run("cp", "--sparse=always", str(tuned), str(stock))
        with LoopMount(stock, root_part) as mnt:
            changes = revert_tunings(mnt)
            install_guest(mnt, args.pods, "later", args.settle, args.window)
        with LoopMount(tuned, root_part) as mnt:
            install_guest(mnt, args.pods, "later", args.settle, args.window)
        print("stock copy: " + "; ".join(changes), flush=True)

        results = {}
        for name, img in (("tuned", tuned), ("stock", stock)):
            print(f"boot 2 ({name}, later boot after a power cut) ...", flush=True)
            r = boot(img, f"{img}@@{fat_part[0]}", work, work / f"console-{name}.log", args.timeout)
            seconds = field(r, "window", "t1") - field(r, "window", "t0")
            written = field(r, "window", "sectors") * SECTOR
            results[name] = r | {"per_hour": written * 3600 / seconds, "written": written, "seconds": seconds}
            print(
                f"  all pods Running {r['host_running_s']:.0f} s after qemu started"
                f" (guest uptime {field(r, 'running', 'uptime'):.0f} s); mount: {r.get('mount')};"
                f" journal: {r.get('journal')}",
                flush=True,
            )
            print(
                f"  idle window {seconds:.0f} s: {written / 1e3:.1f} kB written,"
                f" {written * 3600 / seconds / 1e6:.2f} MB per hour; agent VmRSS {field(r, 'rss-settled', 'kib') / 1024:.1f}"
                f" MiB settled, {field(r, 'rss-after', 'kib') / 1024:.1f} MiB after the window",
                flush=True,
            )

        t, s = results["tuned"], results["stock"]
        print()
        print("figures (emulated raspi3b under TCG, 10-30x slower than a Pi 3/4):")
        print(
            f"  image: .img.xz {sizes['xz'] / 1e6:.1f} MB, raw {sizes['raw'] / 2**30:.2f} GiB,"
            f" installed (root used) {sizes['root_used'] / 1e6:.1f} MB"
        )
        print(
            f"  first boot to {args.pods} pods Running: {first['host_running_s']:.0f} s;"
            f" later boot (after a power cut): {t['host_running_s']:.0f} s"
        )
        print(
            f"  agent VmRSS with {args.pods} pods (frozen one-dir arm64): {field(t, 'rss-after', 'kib') / 1024:.1f} MiB"
            f" ({field(t, 'rss-after', 'kib') * 1024 / 1e6:.1f} MB)"
        )
        ratio = t["per_hour"] / s["per_hour"] if s["per_hour"] else float("nan")
        print(
            f"  flash writes per idle hour, whole card: image {t['per_hour'] / 1e6:.2f} MB,"
            f" stock settings {s['per_hour'] / 1e6:.2f} MB ({ratio:.2f}x)"
        )
    finally:
        if args.keep:
            print(f"work dir kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
