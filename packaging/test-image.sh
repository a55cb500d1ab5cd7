#!/usr/bin/env bash
# make test-image: boots the Raspberry Pi image under qemu-system-aarch64 (TCG) as
# the Pi's firmware would on the raspi3b machine (kernel, initrd, device tree
# and cmdline.txt taken from the image's FAT partition), twice:
#
#   boot 1 (first boot): the card carries a manifest, an image archive (arm64,
#     made from the image's own dash, sleep and libc), a kubeconfig, a hostname.
#     Expected: runonce ran the pod, edgelet adopted it, the archive was
#     imported, the kubeconfig moved to /etc/edgelet and off the card, the
#     hostname applied, the memory controller on. Then qemu is killed (a
#     power cut) and a second manifest is written onto the FAT partition with
#     mtools, as a laptop would.
#   boot 2: both pods run (the first one back after the power cut).
#
# The guest reports through a test unit written into a copy of the image
# (debugfs, no mount) that prints IMAGE-TEST lines on the serial console.
# Needs root only for nothing; needs qemu-system-arm, mtools, e2fsprogs.
#
#   packaging/test-image.sh [--image PATH] [--timeout SECONDS]
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(dirname "$HERE")"
CACHE="${IMAGE_CACHE:-$REPO/build/image-cache}"
image="$CACHE/img/edgelet-rpi-arm64.img"
timeout=2400
while [ $# -gt 0 ]; do
    case "$1" in
    --image) image="$2"; shift ;;
    --timeout) timeout="$2"; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "test-image.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
step() { echo "==> $(date -u +%H:%M:%S) $*"; }
fail() { echo "test-image.sh: FAIL: $*" >&2; exit 1; }

work="$REPO/build/image-test"
rm -rf "$work"
mkdir -p "$work/fat" "$work/card/manifests" "$work/card/images"
if [ ! -f "$image" ] && [ -f "$REPO/dist/edgelet-rpi-arm64.img.xz" ]; then
    image="$work/source.img"
    xz -dc "$REPO/dist/edgelet-rpi-arm64.img.xz" > "$image"
fi
[ -f "$image" ] || fail "no image: make image first"
step "copy of $image"
cp --sparse=always "$image" "$work/test.img"
fat="$work/test.img@@4M"
export MTOOLS_SKIP_CHECK=1

step "kernel, initrd, device tree and cmdline.txt from the FAT partition"
mcopy -n -i "$fat" ::cmdline.txt "$work/fat/cmdline.txt"
kernel="$(mdir -b -i "$fat" :: | sed -n 's|^::/||p' | grep '^vmlinuz-' | sort -V | tail -n 1)"
initrd="$(mdir -b -i "$fat" :: | sed -n 's|^::/||p' | grep '^initrd.img-' | sort -V | tail -n 1)"
mcopy -n -i "$fat" "::$kernel" "$work/fat/vmlinuz"
mcopy -n -i "$fat" "::$initrd" "$work/fat/initrd.img"
mcopy -n -i "$fat" ::bcm2837-rpi-3-b.dtb "$work/fat/rpi3.dtb"
cmdline="$(tr -d '\n' < "$work/fat/cmdline.txt")"
echo "cmdline.txt: $cmdline"
grep -q "cgroup_enable=memory" <<<"$cmdline" || fail "cmdline.txt lacks cgroup_enable=memory"

step "the test unit, written into the root partition with debugfs"
root_start=$(sfdisk -d "$work/test.img" | sed -n 's|.*test.img2 : start= *\([0-9]*\),.*|\1|p')
dd if="$work/test.img" of="$work/root.ext4" bs=512 skip="$root_start" status=none conv=sparse
cat > "$work/edgelet-image-test" <<'EOF'
#!/bin/sh
# Waits until the card's pods run, then reports on the console (IMAGE-TEST lines).
want="$(cat /etc/edgelet-image-test.want)"
i=0
while [ $i -lt 360 ]; do
    out="$(edgelet pods 2>&1)"
    # The agent itself must be up and serving (not the table --runonce left behind), then every pod Running.
    ok=1
    systemctl is-active -q edgelet.service || ok=0
    echo "$out" | grep -q "is not running" && ok=0
    for pod in $want; do
        echo "$out" | grep -Eq "[[:space:]]$pod-[^[:space:]]+[[:space:]].*Running" || ok=0
    done
    [ $ok = 1 ] && break
    sleep 5
    i=$((i + 1))
done
{
    echo "IMAGE-TEST waited $((i * 5))s"
    echo "$out" | sed 's/^/IMAGE-TEST pods: /'
    edgelet check 2>&1 | sed 's/^/IMAGE-TEST check: /'
    echo "IMAGE-TEST hostname: $(hostname)"
    echo "IMAGE-TEST cmdline: $(cat /proc/cmdline)"
    echo "IMAGE-TEST memory: $(grep -w memory /proc/cgroups | tr '\t' ' ')"
    echo "IMAGE-TEST controllers: $(cat /sys/fs/cgroup/cgroup.controllers 2>/dev/null)"
    echo "IMAGE-TEST kubeconfig: $(stat -c '%a %U' /etc/edgelet/kubeconfig 2>&1)"
    echo "IMAGE-TEST card: $(ls /boot/firmware/edgelet | tr '\n' ' ')"
    echo "IMAGE-TEST images: $(edgelet images 2>&1 | tr '\n' '|')"
    echo "IMAGE-TEST runonce: $(systemctl show -p Result --value edgelet-runonce.service)"
    echo "IMAGE-TEST agent: $(systemctl is-active edgelet.service) restarts=$(systemctl show -p NRestarts --value edgelet.service)"
    journalctl -b -u edgelet.service -o cat | grep -E "edgelet started|Card|Secret| E " | sed 's/^/IMAGE-TEST agent-log: /' 
    echo "IMAGE-TEST uptime: $(cut -d' ' -f1 /proc/uptime)"
    journalctl -b -u edgelet-card-setup -u edgelet-runonce -o cat | sed 's/^/IMAGE-TEST journal: /'
    echo "IMAGE-TEST-DONE"
} > /dev/ttyS1 2>&1
sync
EOF
cat > "$work/edgelet-image-test.service" <<'EOF'
[Unit]
Description=edgelet image test: report on the console
After=edgelet.service
[Service]
Type=oneshot
ExecStart=/bin/sh /usr/local/sbin/edgelet-image-test
[Install]
WantedBy=multi-user.target
EOF
echo "hello" > "$work/want"
debugfs -w "$work/root.ext4" >/dev/null <<EOF
write $work/edgelet-image-test /usr/local/sbin/edgelet-image-test
write $work/edgelet-image-test.service /etc/systemd/system/edgelet-image-test.service
write $work/want /etc/edgelet-image-test.want
symlink /etc/systemd/system/multi-user.target.wants/edgelet-image-test.service /etc/systemd/system/edgelet-image-test.service
EOF
dd if="$work/root.ext4" of="$work/test.img" bs=512 seek="$root_start" conv=notrunc,sparse status=none
rm -f "$work/root.ext4"

step "the card: a manifest, an arm64 image archive, a kubeconfig, a hostname"
base_root="$CACHE/root"
[ -d "$base_root" ] || fail "$base_root (the image's root) is gone: make image again"
"$REPO/.venv/bin/python" "$HERE/image/test-image-archive.py" "$base_root" "$work/card/images/test-sh.oci.tar"
pod() {  # pod NAME: a manifest running the test image, with a memory limit (needs the memory controller)
    printf '%s\n' "apiVersion: v1" "kind: Pod" "metadata:" "  name: $1" "spec:" "  containers:" \
        "  - name: main" "    image: edgelet.local/test-sh:1" "    imagePullPolicy: Never" \
        '    command: ["/bin/sh", "-c", "while :; do sleep 3600; done"]' "    resources:" \
        "      limits: {memory: 32Mi}"
}
pod hello > "$work/card/manifests/hello.yaml"
# Well formed, its apiserver unreachable (TEST-NET-1): the agent keeps running standalone and retries.
printf '%s\n' "apiVersion: v1" "kind: Config" "current-context: test" \
    "clusters: [{name: test, cluster: {server: 'https://192.0.2.1:6443', insecure-skip-tls-verify: true}}]" \
    "users: [{name: test, user: {token: image-test}}]" \
    "contexts: [{name: test, context: {cluster: test, user: test}}]" > "$work/card/kubeconfig"
echo "pi-under-test" > "$work/card/hostname"
mcopy -o -i "$fat" "$work/card/manifests/hello.yaml" ::edgelet/manifests/hello.yaml
mcopy -o -i "$fat" "$work/card/images/test-sh.oci.tar" ::edgelet/images/test-sh.oci.tar
mcopy -o -i "$fat" "$work/card/kubeconfig" ::edgelet/kubeconfig
mcopy -o -i "$fat" "$work/card/hostname" ::edgelet/hostname

# boot LOG: qemu raspi3b on the copy until the guest reports, then killed (a power cut).
boot() {
    local log="$1" start
    step "boot: qemu-system-aarch64 -M raspi3b (TCG), console in $log"
    qemu-system-aarch64 -M raspi3b -m 1G -smp 4 -kernel "$work/fat/vmlinuz" -initrd "$work/fat/initrd.img" \
        -dtb "$work/fat/rpi3.dtb" -append "$cmdline" -drive "file=$work/test.img,if=sd,format=raw" \
        -serial null -serial "file:$log" -display none -no-reboot &
    qemu=$!
    start=$(date +%s)
    while ! grep -aq "IMAGE-TEST-DONE" "$log" 2>/dev/null; do
        if ! kill -0 "$qemu" 2>/dev/null; then
            fail "qemu exited before the report; console: $log"
        fi
        if [ $(( $(date +%s) - start )) -gt "$timeout" ]; then
            kill "$qemu"
            wait "$qemu" || true
            tail -n 30 "$log" >&2
            fail "no report within ${timeout}s; console: $log"
        fi
        sleep 5
    done
    echo "boot to report: $(( $(date +%s) - start ))s (emulated: a Pi is 10-30x faster)"
    kill -9 "$qemu"
    wait "$qemu" 2>/dev/null || true
    grep -a "IMAGE-TEST" "$log" | tr -d '\r'
}
expect() {  # expect LOG PATTERN WHAT
    grep -a "IMAGE-TEST" "$1" | tr -d '\r' | grep -Eq "$2" || fail "$3 (no /$2/ in $1)"
    echo "ok: $3"
}
set_want() {  # set_want PODS: what the guest's test unit waits for, written into the root with debugfs
    echo "$1" > "$work/want"
    dd if="$work/test.img" of="$work/root.ext4" bs=512 skip="$root_start" status=none conv=sparse
    printf '%s\n' "rm /etc/edgelet-image-test.want" "write $work/want /etc/edgelet-image-test.want" |
        debugfs -w "$work/root.ext4" >/dev/null
    dd if="$work/root.ext4" of="$work/test.img" bs=512 seek="$root_start" conv=notrunc,sparse status=none
    rm -f "$work/root.ext4"
}

c1="$work/console-1.log"
boot "$c1"
expect "$c1" "IMAGE-TEST pods: .* hello-pi-under-test .*Running" "first boot: the card's pod runs"
expect "$c1" "IMAGE-TEST runonce: success" "first boot: edgelet-runonce.service succeeded"
expect "$c1" "IMAGE-TEST agent: active restarts=0" "edgelet.service runs, never restarted"
expect "$c1" "IMAGE-TEST agent-log: .*edgelet started .*adopted=[1-9]" "edgelet.service adopted the pod runonce started"
expect "$c1" "IMAGE-TEST images: .*edgelet.local/test-sh" "the card's image archive was imported"
expect "$c1" "IMAGE-TEST kubeconfig: 600 root" "the kubeconfig was moved to /etc/edgelet, root only"
if grep -a "IMAGE-TEST card:" "$c1" | grep -q kubeconfig; then
    fail "the kubeconfig is still on the card"
fi
echo "ok: the kubeconfig is gone from the card"
expect "$c1" "IMAGE-TEST hostname: pi-under-test" "the card's hostname was applied"
expect "$c1" "IMAGE-TEST check: OK +memory cgroup" "edgelet check: the memory controller is on"

step "a second manifest written onto the FAT partition with mtools, after the power cut"
pod later > "$work/card/manifests/later.yaml"
mcopy -o -i "$fat" "$work/card/manifests/later.yaml" ::edgelet/manifests/later.yaml
set_want "hello later"

c2="$work/console-2.log"
boot "$c2"
expect "$c2" "IMAGE-TEST pods: .* hello-pi-under-test .*Running" "after the power cut: the first pod is back"
expect "$c2" "IMAGE-TEST pods: .* later-pi-under-test .*Running" "the manifest written with mtools runs"
step "PASS"
