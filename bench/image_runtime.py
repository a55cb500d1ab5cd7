"""The Pi image's runtime handlers on the emulated board: pod start and raw runtime runs, runc against crun, one boot.

Whether the image should default to crun (issue 34) is a question for the board, not for this x86 host:
crun saves process start-up, which under emulation is the dearest thing there is. The built image
(`make image`, or its `.img.xz`) is copied, its card gets an SSH key, a hostname and the arm64 test image
archive (as `make test-image` makes them), and it boots once under qemu-system-aarch64 -M virt (TCG, the
card's kernel, initrd and cmdline.txt, an SSH port forwarded to loopback, as test-image.sh's third boot).
Once the agent runs and the archive is imported, one shell script over SSH measures, interleaved round by
round (the handler that goes first alternates):

- raw: `RUNTIME run` of a `sh -c :` container (the runtime's own default spec, a read-only rootfs of the
  image's dash and libc, every namespace), create to exit and delete, timed around the command;
- pod: a hostNetwork pod with `runtimeClassName: runc|crun` (the test image's sh touching a file in a
  hostPath, then sleeping), from the manifest's rename into /etc/kubernetes/manifests to the file; the
  pods stay, so both handlers see the same growing node.

One warm-up pod and raw run per handler come first, unmeasured. Every figure is from the same boot; the
host's load average is printed at the start and end (other work shares the host: emulation magnifies it).

Run as root after `make image`:
    .venv/bin/python bench/image_runtime.py [--xz dist/edgelet-rpi-arm64.img.xz | --image IMG]
        [--root build/image-cache/root] [--rounds 10] [--timeout 2400]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import REPO, machine, percentile

HANDLERS = ("runc", "crun")
# The guest's side: lines "RTBENCH KIND HANDLER MICROSECONDS" on stdout, and facts as "RTBENCH-INFO ...".
GUEST_SCRIPT = r"""
set -eu
B=/run/rtbench
mkdir -p $B/out $B/bundle/rootfs/bin $B/bundle/rootfs/lib/aarch64-linux-gnu $B/bundle/rootfs/tmp \
    /etc/kubernetes/manifests /etc/kubernetes/rtbench-staging
cp /usr/bin/dash $B/bundle/rootfs/bin/sh
cp /usr/lib/aarch64-linux-gnu/libc.so.6 $B/bundle/rootfs/lib/aarch64-linux-gnu/
cp /usr/lib/aarch64-linux-gnu/ld-linux-aarch64.so.1 $B/bundle/rootfs/lib/
cd $B/bundle
rm -f config.json
runc spec
sed -i -e 's/"terminal": true/"terminal": false/' -e 's/^\([[:space:]]*\)"sh"$/\1"sh", "-c", ":"/' config.json
echo "RTBENCH-INFO runc: $(runc --version | head -n 1)"
echo "RTBENCH-INFO crun: $(crun --version | head -n 1)"
echo "RTBENCH-INFO cgroup2 controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
echo "RTBENCH-INFO default handler: $(grep -E '^#?runtime_handler' /etc/edgelet/config.toml | head -n 1)"
now() { date +%s%N; }
raw() {  # raw HANDLER ID
    t0=$(now)
    "$1" run --bundle $B/bundle "$2" </dev/null >/dev/null 2>$B/raw.err || { cat $B/raw.err; exit 1; }
    t1=$(now)
    echo "RTBENCH raw $1 $(( (t1 - t0) / 1000 ))"
}
pod() {  # pod HANDLER NAME
    cat > /etc/kubernetes/rtbench-staging/$2.yaml <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $2}
spec:
  hostNetwork: true
  runtimeClassName: $1
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: edgelet.local/test-sh:1
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", ": > /out/$2; exec sleep 3600"]
    volumeMounts: [{name: out, mountPath: /out}]
  volumes: [{name: out, hostPath: {path: $B/out, type: Directory}}]
EOF
    t0=$(now)
    mv /etc/kubernetes/rtbench-staging/$2.yaml /etc/kubernetes/manifests/$2.yaml
    while [ ! -e $B/out/$2 ]; do
        sleep 0.02
        if [ $(( ($(now) - t0) / 1000000000 )) -gt 600 ]; then
            echo "RTBENCH-FAIL pod $2 on $1 did not start in 600 s"
            edgelet pods 2>&1 | tail -n 5
            exit 1
        fi
    done
    t1=$(now)
    echo "RTBENCH pod $1 $(( (t1 - t0) / 1000 ))"
}
for h in runc crun; do
    raw $h warm-$h >/dev/null
    pod $h warm-$h >/dev/null
done
i=0
while [ $i -lt $ROUNDS ]; do
    if [ $((i % 2)) = 0 ]; then order="runc crun"; else order="crun runc"; fi
    for h in $order; do raw $h raw-$h-$i; sleep 1; done
    for h in $order; do pod $h pod-$h-$i; sleep 2; done
    i=$((i + 1))
done
echo "RTBENCH-INFO guest load: $(cat /proc/loadavg)"
echo "RTBENCH-INFO pods: $(edgelet pods 2>&1 | grep -c Running) Running"
"""


def run(*argv: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kw)


def prepare(args: argparse.Namespace, work: Path) -> tuple[list[str], Path]:
    """The card copy, its kernel/initrd/cmdline and the card folder's files; returns qemu's -kernel... args."""
    img = work / "card.img"
    if args.image:
        run("cp", "--sparse=always", str(args.image), str(img))
    else:
        subprocess.run(f"xz -dc '{args.xz}' | dd of='{img}' bs=1M conv=sparse status=none", shell=True, check=True)
    os.truncate(img, 4 << 30)  # a 4 GiB card: the first boot grows the root into it
    fat = f"{img}@@4M"
    env = {**os.environ, "MTOOLS_SKIP_CHECK": "1"}
    names = run("mdir", "-b", "-i", fat, "::", env=env).stdout.split()
    files = [n.removeprefix("::/") for n in names]
    kernel = sorted(f for f in files if f.startswith("vmlinuz-"))[-1]
    initrd = sorted(f for f in files if f.startswith("initrd.img-"))[-1]
    for src, dst in ((kernel, "vmlinuz"), (initrd, "initrd.img"), ("cmdline.txt", "cmdline.txt")):
        run("mcopy", "-n", "-i", fat, f"::{src}", str(work / dst), env=env)
    cmdline = (work / "cmdline.txt").read_text().replace("\n", "").replace("console=ttyS1,115200", "")
    cmdline += " console=ttyAMA0,115200 systemd.default_timeout_start_sec=900"
    run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "rtbench", "-f", str(work / "id_ed25519"))
    (work / "hostname").write_text("rtbench\n")
    archive = work / "test-sh.oci.tar"
    run(
        sys.executable,
        str(REPO / "packaging" / "image" / "test-image-archive.py"),
        str(args.root),
        str(archive),
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    for src, dst in (
        (work / "id_ed25519.pub", "edgelet/authorized_keys"),
        (work / "hostname", "edgelet/hostname"),
        (archive, "edgelet/images/test-sh.oci.tar"),
    ):
        run("mcopy", "-o", "-i", fat, str(src), f"::{dst}", env=env)
    kernel_args = ["-kernel", str(work / "vmlinuz"), "-initrd", str(work / "initrd.img"), "-append", cmdline]
    return kernel_args, img


class Guest:
    def __init__(self, work: Path, port: int) -> None:
        self.work, self.port = work, port

    def ssh(self, command: str, *, stdin: str | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
        argv = ["ssh", "-i", str(self.work / "id_ed25519"), "-p", str(self.port), "-o", "BatchMode=yes"]
        argv += ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=60"]
        argv += ["-o", "LogLevel=ERROR", "root@127.0.0.1", command]
        try:
            return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            return subprocess.CompletedProcess(argv, 255, "", f"timed out: {exc}")

    def wait_ready(self, qemu: subprocess.Popen, deadline: float) -> float:
        """Until the agent is active and the card's archive imported; returns the guest's uptime then."""
        probe = (
            "systemctl is-active -q edgelet.service && edgelet images | grep -q test-sh && cut -d' ' -f1 /proc/uptime"
        )
        while time.monotonic() < deadline:
            if qemu.poll() is not None:
                raise RuntimeError(f"qemu exited ({qemu.returncode}); console: {self.work / 'console.log'}")
            p = self.ssh(probe, timeout=120)
            if p.returncode == 0 and p.stdout.strip():
                return float(p.stdout.split()[0])
            time.sleep(10)
        raise TimeoutError(f"the guest was not ready in time; console: {self.work / 'console.log'}")


def report(lines: list[str]) -> None:
    got: dict[tuple[str, str], list[float]] = {}
    for ln in lines:
        parts = ln.split()
        if len(parts) == 4 and parts[0] == "RTBENCH":
            got.setdefault((parts[1], parts[2]), []).append(int(parts[3]) / 1000)
        elif ln.startswith(("RTBENCH-INFO", "RTBENCH-FAIL")):
            print(ln.split(" ", 1)[1])
    med = {k: statistics.median(v) for k, v in got.items()}
    print(f"{'kind':4} {'handler':7} {'n':>3} {'median ms':>10} {'p90 ms':>9} {'min ms':>8}")
    for (kind, h), v in sorted(got.items()):
        print(f"{kind:4} {h:7} {len(v):3} {med[kind, h]:10.1f} {percentile(v, 0.9):9.1f} {min(v):8.1f}")
    for kind, what in (("raw", "raw run of `sh -c :`"), ("pod", "pod start, manifest to container running")):
        if (kind, "runc") in med and (kind, "crun") in med:
            print(f"crun / runc, {what} (median): {med[kind, 'crun'] / med[kind, 'runc']:.2f}x")
    for h in HANDLERS:
        if ("pod", h) in med and ("raw", h) in med:
            print(f"{h}: pod start / raw run (median): {med['pod', h] / med['raw', h]:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--xz", type=Path, default=REPO / "dist" / "edgelet-rpi-arm64.img.xz")
    ap.add_argument("--image", type=Path, default=None, help="the raw image instead of the .img.xz")
    ap.add_argument("--root", type=Path, default=REPO / "build" / "image-cache" / "root", help="the image's root")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=2400, help="seconds from qemu's start to a ready agent")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="edgelet-rtbench-", dir="/var/tmp"))
    qemu: subprocess.Popen | None = None
    try:
        kernel_args, img = prepare(args, work)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        argv = ["qemu-system-aarch64", "-M", "virt", "-cpu", "cortex-a53", "-m", "1G", "-smp", "2"]
        argv += ["-drive", f"file={img},if=none,format=raw,id=card", "-device", "virtio-blk-device,drive=card"]
        argv += ["-netdev", f"user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:{port}-:22"]
        argv += ["-device", "virtio-net-device,netdev=n0", "-serial", f"file:{work / 'console.log'}"]
        argv += [*kernel_args, "-display", "none", "-no-reboot"]
        print(f"host at the start: {machine()}", flush=True)
        t0 = time.monotonic()
        qemu = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        guest = Guest(work, port)
        uptime = guest.wait_ready(qemu, t0 + args.timeout)
        print(f"guest ready (agent active, archive imported) {time.monotonic() - t0:.0f} s after qemu's start", end="")
        print(f" (guest uptime {uptime:.0f} s); load average {os.getloadavg()[0]:.1f}", flush=True)
        p = guest.ssh(f"ROUNDS={args.rounds} sh -s", stdin=GUEST_SCRIPT, timeout=args.rounds * 1200 + 1200)
        lines = p.stdout.splitlines()
        print(f"host at the end: load average {os.getloadavg()[0]:.1f}; emulated (TCG): a Pi is 10-30x faster")
        print(f"rounds: {args.rounds}, interleaved, the first handler alternating; hostNetwork pods kept running")
        report(lines)  # what was measured before a failure still counts, said as such
        if p.returncode != 0:
            print("\n".join(lines[-10:]) + p.stderr, file=sys.stderr)
            raise RuntimeError(f"the guest script failed ({p.returncode}): the figures above are partial")
    finally:
        if qemu is not None and qemu.poll() is None:
            qemu.send_signal(signal.SIGKILL)
            qemu.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
