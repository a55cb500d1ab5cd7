#!/usr/bin/env bash
# Builds a bootable SD-card image for Raspberry Pi 3 and 4 (arm64) with
# edgelet inside, from Debian packages only, on an amd64 Debian 12 machine as
# root (mmdebstrap under qemu-user through binfmt_misc). `make image` runs it.
#
#   packaging/build-image.sh [--deb PATH] [--output DIR] [--size SIZE] [--base-only] [--dry-run]
#
# --deb: the arm64 edgelet .deb (default: packaging/build-arm64.sh --deb
# packs this tree's code; its one-dir build is cached by a digest of its
# inputs, else built with PyInstaller under qemu, the slow part). Result: DIR/edgelet-rpi-arm64.img.xz (default DIR: dist) and
# its .sha256. The image: msdos table; partition 1 FAT32 labelled RASPIFIRM,
# mounted at /boot/firmware (raspi-firmware's boot files, the kernel, the
# initrd, cmdline.txt and the card folder edgelet/); partition 2 ext4
# labelled RASPIROOT, grown to the card's size at first boot. SIZE (default
# 2G, a power of two as qemu's raspi3b wants) is the image before growth.
#
# Cached steps: the Debian root with every package ($IMAGE_BASE_CACHE/base,
# default /var/cache/edgelet-image, outside the checkout so a CI run from a
# fresh clone finds it) is kept until the package list or suite changes, and
# the downloaded .debs in $IMAGE_BASE_CACHE/debs; a second build only copies
# the root, installs the .deb, configures and packs (in $IMAGE_CACHE, default
# build/image-cache). --base-only stops once that root is cached (it needs no
# .deb). Environment: IMAGE_CACHE, IMAGE_BASE_CACHE, DEBIAN_SUITE (bookworm),
# DEBIAN_MIRROR, XZ_OPT (default -T0 -6).
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(dirname "$HERE")"
CACHE="${IMAGE_CACHE:-$REPO/build/image-cache}"
# What outlives the checkout (a CI run starts from a fresh clone): the base root and the downloaded .debs.
BASE_CACHE="${IMAGE_BASE_CACHE:-/var/cache/edgelet-image}"
DEB_CACHE="$BASE_CACHE/debs"
SUITE="${DEBIAN_SUITE:-bookworm}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
NAME=edgelet-rpi-arm64
# What the build machine needs (Makefile's IMAGE_APT_PACKAGES installs the same).
HOST_PACKAGES=(mmdebstrap qemu-user-static binfmt-support dosfstools mtools e2fsprogs fdisk xz-utils)
# What the image holds besides edgelet's own dependencies (runc, conmon, catatonit come with the .deb).
IMAGE_PACKAGES=(
    systemd-sysv udev kmod dbus systemd-timesyncd systemd-resolved   # init, devices, clock, DNS
    linux-image-arm64 raspi-firmware initramfs-tools                     # kernel and the Pi's boot files
    openssh-server ca-certificates iproute2 iputils-ping less nano       # a shell for a person
    cloud-guest-utils e2fsprogs fdisk                                    # grow the root at first boot
    runc crun conmon catatonit containernetworking-plugins                # what pods run on (crun: a handler)
    wireguard-go wireguard-tools                                          # --wireguard-config (docs/tunnel.md)
)

deb="" output="$REPO/dist" size=2G dry_run=0 base_only=0
while [ $# -gt 0 ]; do
    case "$1" in
    --deb) deb="$2"; shift ;;
    --output) output="$2"; shift ;;
    --size) size="$2"; shift ;;
    --dry-run) dry_run=1 ;;
    --base-only) base_only=1 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "build-image.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done

step() { echo "==> $(date -u +%H:%M:%S) $*"; }
# run, host_tools, and the mounts undone at exit: shared with the other arm64 recipe.
. "$HERE/common.sh"

if [ "$dry_run" = 0 ]; then
    [ "$(id -u)" = 0 ] || { echo "build-image.sh: needs root (mmdebstrap, chroot)" >&2; exit 1; }
fi

host_tools

# Without --deb, this tree's arm64 .deb: build-arm64.sh reuses the one-dir build of the same inputs
# (seconds), else builds it (PyInstaller under qemu, one core) while the base root (mmdebstrap, mostly
# another core) is made: each is a single-threaded emulated job. Never an older .deb found in dist/, which
# after a code change would ship the old code.
arm64_pid=""
if [ -z "$deb" ] && [ "$base_only" = 0 ]; then
    if [ "$dry_run" = 1 ]; then
        run "$HERE/build-arm64.sh" --deb
        deb=dist/edgelet_VERSION_arm64.deb
    else
        mkdir -p "$CACHE"
        rm -f "$REPO"/dist/edgelet_*_arm64.deb
        step "arm64 .deb: packaging/build-arm64.sh --deb beside the base root (log: $CACHE/build-arm64.log)"
        "$HERE/build-arm64.sh" --deb > "$CACHE/build-arm64.log" 2>&1 &
        arm64_pid=$!
        trap 'cleanup; [ -z "$arm64_pid" ] || wait "$arm64_pid" 2>/dev/null || true' EXIT
    fi
fi
wait_arm64() {
    [ -n "$arm64_pid" ] || return 0
    step "waiting for the arm64 .deb"
    if ! wait "$arm64_pid"; then
        arm64_pid=""
        tail -n 40 "$CACHE/build-arm64.log" >&2
        echo "build-image.sh: packaging/build-arm64.sh --deb failed (log: $CACHE/build-arm64.log)" >&2
        exit 1
    fi
    arm64_pid=""
    grep '^==> ' "$CACHE/build-arm64.log" | sed 's/^/build-arm64: /'
    deb="$(ls -t "$REPO"/dist/edgelet_*_arm64.deb 2>/dev/null | head -n 1 || true)"
}

# chroot_mounts ROOT: what package scripts need (initramfs-tools reads /proc and /dev).
chroot_mounts() {
    local m
    for m in proc sys dev; do
        run mkdir -p "$1/$m"
    done
    run mount -t proc proc "$1/proc"
    [ "$dry_run" = 1 ] || mounted+=("$1/proc")
    run mount -t sysfs sysfs "$1/sys"
    [ "$dry_run" = 1 ] || mounted+=("$1/sys")
    run mount --bind /dev "$1/dev"
    [ "$dry_run" = 1 ] || mounted+=("$1/dev")
}
in_root() {  # in_root ROOT COMMAND...: run a shell command in the arm64 root, under qemu
    local root="$1"
    shift
    run chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
        DEBIAN_FRONTEND=noninteractive /bin/sh -ec "$*"
}

# --- 1. the Debian root with every package (cached) ----------------------------
base="$BASE_CACHE/base"
locked "$base"
unmount_under "$base"
key="$( { printf '%s\n' mmdebstrap-nodoc "$SUITE" "$MIRROR" "${IMAGE_PACKAGES[@]}"
    cat "$HERE/image/initramfs.conf" "$HERE/image/initramfs-modules"; } | sha256sum | cut -c1-16)"
if [ "$dry_run" = 1 ] || [ "$(cat "$base/.edgelet-image-base" 2>/dev/null)" != "$key" ]; then
    step "Debian $SUITE arm64 root with its packages in $base (cached once done)"
    remove_tree "$base"
    include="$(IFS=,; echo "${IMAGE_PACKAGES[*]}")"
    make_arm64_root "$base" "deb $MIRROR $SUITE main non-free-firmware
deb $MIRROR $SUITE-updates main non-free-firmware
deb http://security.debian.org/debian-security $SUITE-security main non-free-firmware" "$include" \
        --setup-hook='mkdir -p "$1/boot/firmware" "$1/etc/initramfs-tools/conf.d" "$1/usr/share/initramfs-tools/modules.d"' \
        --setup-hook="cp '$HERE/image/initramfs.conf' \"\$1/etc/initramfs-tools/conf.d/edgelet-image.conf\"" \
        --setup-hook="cp '$HERE/image/initramfs-modules' \"\$1/usr/share/initramfs-tools/modules.d/edgelet-image\""
    run mkdir -p "$base/boot/firmware" "$base/etc/default"
    if [ "$dry_run" = 0 ]; then
        # No service starts inside the build root.
        printf '#!/bin/sh\nexit 101\n' > "$base/usr/sbin/policy-rc.d"
        chmod 0755 "$base/usr/sbin/policy-rc.d"
    fi
    chroot_mounts "$base"
    # raspi-firmware's kernel hook writes /boot/firmware (kernel, initrd, device trees, config.txt and
    # cmdline.txt) from these at every kernel or firmware upgrade: root by label, the serial console of
    # the Pi 3/4, and the memory controller (Raspberry Pi kernels leave it off; Debian's has it on).
    in_root "$base" "printf '%s\\n' 'ROOTPART=\"LABEL=RASPIROOT\"' 'CONSOLES=\"tty0 ttyS1,115200\"' >> /etc/default/raspi-firmware
echo 'cgroup_enable=memory cgroup_memory=1' > /etc/default/raspi-extra-cmdline
DEB_MAINT_PARAMS=configure /etc/kernel/postinst.d/z50-raspi-firmware"
    cleanup
    [ "$dry_run" = 1 ] || echo "$key" > "$base/.edgelet-image-base"
fi
if [ "$base_only" = 1 ]; then
    step "base root cached in $base"
    exit 0
fi

wait_arm64
if [ "$dry_run" = 0 ]; then
    [ -f "$deb" ] || { echo "build-image.sh: $deb: no such .deb" >&2; exit 1; }
fi
echo "edgelet package: ${deb:-dist/edgelet_VERSION_arm64.deb}"

# --- 2. this build's root: a copy of the base, edgelet and the configuration --------------
root="$CACHE/root"
step "root of this build in $root"
remove_tree "$root"
run cp -a --one-file-system "$base" "$root"
run rm -f "$root/.edgelet-image-base"
run cp "$deb" "$root/tmp/edgelet.deb"
chroot_mounts "$root"
in_root "$root" "dpkg -i /tmp/edgelet.deb && rm -f /tmp/edgelet.deb"
# Without --deb the newest dist/edgelet_*_arm64.deb is packed, which after a code change is the old code:
# say which commit the image carries, and warn when it is not this tree's.
if [ "$dry_run" = 0 ]; then
    packaged="$(chroot "$root" /usr/bin/edgelet version --config /dev/null 2>&1 | head -n 1 || true)"
    echo "packed: $packaged"
    # build-arm64.sh names the newest commit that changed the binary's inputs.
    code_commit="$(onedir_commit)"
    case "$packaged" in
    *"commit $code_commit"*) ;;
    *) echo "build-image.sh: warning: $deb is not built from this tree's code (commit $code_commit;" \
        "without --deb, this tree's is packed)" >&2 ;;
    esac
fi
cleanup

step "configuration"
if [ "$dry_run" = 0 ]; then
    img="$HERE/image"
    etc="$root/etc"
    echo edgelet > "$etc/hostname"
    printf '127.0.0.1\tlocalhost\n127.0.1.1\tedgelet\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' > "$etc/hosts"
    # noatime: no write per read. commit=60: ext4 writes its journal every minute rather than every 5 s;
    # edgelet fsyncs its own state, so a power cut loses at most a minute of logs.
    cat > "$etc/fstab" <<'EOF'
LABEL=RASPIROOT /              ext4 rw,noatime,commit=60,errors=remount-ro 0 1
LABEL=RASPIFIRM /boot/firmware vfat rw,noatime,nosuid,nodev,noexec,umask=0077 0 2
EOF
    install -d "$etc/systemd/network" "$etc/systemd/journald.conf.d" "$etc/cni/net.d" "$etc/ssh/sshd_config.d" \
        "$etc/systemd/system/ssh.service.d"
    install -m 0644 "$img/10-ethernet.network" "$etc/systemd/network/10-ethernet.network"
    install -m 0644 "$img/journald.conf" "$etc/systemd/journald.conf.d/50-edgelet-image.conf"
    install -m 0644 "$img/ssh-host-keys.conf" "$etc/systemd/system/ssh.service.d/50-host-keys.conf"
    install -d "$etc/systemd/system/systemd-networkd-wait-online.service.d"
    install -m 0644 "$img/wait-online.conf" "$etc/systemd/system/systemd-networkd-wait-online.service.d/50-edgelet-image.conf"
    install -m 0755 "$img/edgelet-card-setup" "$root/usr/sbin/edgelet-card-setup"
    install -m 0755 "$img/edgelet-grow-root" "$root/usr/sbin/edgelet-grow-root"
    install -m 0644 "$img/edgelet-card-setup.service" "$img/edgelet-grow-root.service" "$root/lib/systemd/system/"
    cp "$root/usr/share/edgelet/10-edgelet.conflist" "$etc/cni/net.d/10-edgelet.conflist"
    # edgelet: the card folder, and container logs kept small (they are on the SD card).
    sed -i -e 's|^#card_dir = ""|card_dir = "/boot/firmware/edgelet"|' \
        -e 's|^#container_log_max_size = "10Mi"|container_log_max_size = "2Mi"|' \
        -e 's|^#container_log_max_files = 5|container_log_max_files = 3|' "$etc/edgelet/config.toml"
    grep -q '^card_dir = "/boot/firmware/edgelet"' "$etc/edgelet/config.toml"
    # crun by default: on the emulated board a pod starts in 0.40x runc's time (bench/image_runtime.py);
    # a Go binary's start-up is what a small board pays most for. runc stays a handler (runtimeClassName: runc).
    sed -i 's|^#runtime_handler = "runc"|runtime_handler = "crun"|' "$etc/edgelet/config.toml"
    grep -q '^runtime_handler = "crun"' "$etc/edgelet/config.toml"
    # DNS: networkd's DHCP servers through resolved's list of upstream servers, not its 127.0.0.53 stub,
    # which pods (another network namespace) cannot reach.
    ln -sfn /run/systemd/resolve/resolv.conf "$etc/resolv.conf"
    # Every device gets its own machine-id and SSH host keys at first boot.
    : > "$etc/machine-id"
    rm -f "$root/var/lib/dbus/machine-id" "$etc"/ssh/ssh_host_*
    rm -f "$root/usr/sbin/policy-rc.d"
    # The card folder a person writes into from a laptop.
    install -d "$root/boot/firmware/edgelet/manifests" "$root/boot/firmware/edgelet/images"
    install -m 0644 "$img/card-README.txt" "$root/boot/firmware/edgelet/README.txt"
    install -m 0644 "$img/card-config.toml" "$root/boot/firmware/edgelet/config.toml"
    grep -q "cgroup_enable=memory" "$root/boot/firmware/cmdline.txt"
    grep -q "root=LABEL=RASPIROOT" "$root/boot/firmware/cmdline.txt"
fi
in_root "$root" "systemctl enable systemd-networkd systemd-resolved ssh edgelet.service edgelet-runonce.service \
    edgelet-card-setup.service edgelet-grow-root.service"

# --- 3. the image: partitions filled from the root without mounting anything ------------
work="$CACHE/img"
step "image in $work"
run rm -rf "$work"
run mkdir -p "$work" "$output"
fat_mib=256
run truncate -s "$size" "$work/$NAME.img"
run sfdisk --quiet "$work/$NAME.img" <<EOF
label: dos
start=4MiB, size=${fat_mib}MiB, type=c, bootable
start=$((4 + fat_mib))MiB, type=83
EOF
total_mib=$(( $(numfmt --from=iec "$size") / 1048576 ))
root_mib=$((total_mib - 4 - fat_mib))
# FAT32 with Debian's raspi label, filled with mtools (no loop device, no mount).
run mkfs.vfat -F 32 -n RASPIFIRM -C "$work/firm.fat" $((fat_mib * 1024))
run env MTOOLS_SKIP_CHECK=1 sh -c "mcopy -s -i '$work/firm.fat' '$root'/boot/firmware/* ::/"
# ext4 from the directory tree (mke2fs -d), the firmware dir left empty: it is the FAT's mount point.
run rm -rf "$root/boot/firmware"
run mkdir -p "$root/boot/firmware"
run mkfs.ext4 -q -L RASPIROOT -d "$root" -E root_owner=0:0 "$work/root.ext4" "${root_mib}M"
run dd if="$work/firm.fat" of="$work/$NAME.img" bs=1M seek=4 conv=notrunc,sparse status=none
run dd if="$work/root.ext4" of="$work/$NAME.img" bs=1M seek=$((4 + fat_mib)) conv=notrunc,sparse status=none
run rm -f "$work/firm.fat" "$work/root.ext4"

step "compress: $output/$NAME.img.xz"
run sh -c "xz ${XZ_OPT:--T0 -6} -c '$work/$NAME.img' > '$output/$NAME.img.xz.tmp'"
run mv "$output/$NAME.img.xz.tmp" "$output/$NAME.img.xz"
run sh -c "cd '$output' && sha256sum '$NAME.img.xz' > '$NAME.img.xz.sha256'"
# The uncompressed image stays in the cache for make test-image.
[ "$dry_run" = 1 ] || {
    du -h --apparent-size "$output/$NAME.img.xz"
    du -sh "$root" | sed 's/^/installed root: /'
    cat "$output/$NAME.img.xz.sha256"
}
step "done"
