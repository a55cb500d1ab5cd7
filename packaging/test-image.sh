#!/usr/bin/env bash
# make test-image: boots the Raspberry Pi image under qemu-system-aarch64 (TCG) as
# the Pi's firmware would on the raspi3b machine (kernel, initrd, device tree
# and cmdline.txt taken from the image's FAT partition), four times (and once
# more per chained power cut):
#
#   boot 1 (first boot): the card carries a manifest, an image archive (arm64,
#     made from the image's own dash, sleep and libc), a kubeconfig, a hostname.
#     Expected: runonce ran the pod, edgelet adopted it, the archive was
#     imported, the kubeconfig moved to /etc/edgelet and off the card, the
#     hostname applied, the memory controller on. Then qemu is killed (a
#     power cut) and a second manifest is written onto the FAT partition with
#     mtools, as a laptop would.
#   boot 2: both pods run (the first one back after the power cut).
#   boot 3, on qemu's virt machine (the same image, kernel, initrd and
#     cmdline.txt, the console on virt's UART): the network. qemu's raspi3b
#     has no network device of its own, and a USB adapter (usb-net) on its
#     emulated dwc2 controller enumerates in some boots only (the kernel logs
#     "dwc2 3f980000.usb: Not connected" and gives up on the port; rebinding
#     the controller did not help; hotplugged, cdc_subset took the adapter
#     from cdc_ether), so virt's virtio-net stands in for the Pi's Ethernet
#     (MAC in the Raspberry Pi OUI, eth0 as on a Pi). User networking
#     restricted to the host's loopback (no route out; SSH forwarded from
#     127.0.0.1). Expected: systemd-networkd's DHCP lease on eth0, an SSH
#     login as root with the throwaway key the card's authorized_keys carried
#     at first boot, the hostname the card gave, both pods running.
#     Self-update under systemd (docs/self-update.md): before boot 3 the test
#     signs three arm64 releases of the image's own one-dir with a throwaway
#     minisign key (packaging/image/test-image-releases.py), trusts that key
#     in the copy's /etc/edgelet/config.toml (the card may not set
#     trusted_keys; the card's manifests get signatures too) and puts the
#     good one (the next version) into the card's edgelet/update/ with mtools.
#     Expected at boot 3: the update committed, the new release running, no
#     container restarted. Then, over SSH, the broken one (the version after:
#     its program exits at start) is dropped onto the mounted card: rolled
#     back by itself (the launcher's restart loop), the good release running
#     on, every container's id and process the same as before. Last, a power
#     cut during an update: edgelet restarted with a runtime drop-in that
#     holds it at the crash point update.trial (EDGELET_TEST_CRASH_HOLD=1:
#     `current` points at a third release, the old agent has not exited), the
#     third release dropped over SSH, and once the journal shows the hold,
#     qemu is killed (the guest's page cache is lost).
#   (IMAGE_TEST_SELF_UPDATE=0 leaves out the self-update part of boot 3, and boot 4.)
#   boot 4 (virt, its network and tunnel unchecked: the time of a raspi3b
#     boot saved), after that power cut: the third release committed (or
#     rolled back to the one committed before, the outcome recorded), no
#     half-staged release, both pods running.
#   IMAGE_TEST_POWER_CUTS="update.download update.unpack update.swap
#     update.commit update.rollback" (any of them, in any order; not in CI: a
#     boot each) chains more power cuts: the boot that checked the last one
#     cuts the power at the next point with one more release (update.rollback:
#     the agent's trial deadline cut to a second, so the new agent rolls
#     itself back), and the boot after checks the same. update.download's
#     release is not put on the card: a Python http.server on the host's
#     loopback serves it, the virt boots reach it through qemu's guestfwd
#     (10.0.2.100:8080, one relay process per connection, which the
#     restricted network still allows) and a persistent drop-in sets
#     EDGELET_UPDATE_URL; the guest's disk is synced once the agent holds in
#     the middle of the download, so that the next boot finds its .part file.
#
# The guest reports through a test unit written into a copy of the image
# (debugfs, no mount) that prints IMAGE-TEST lines on the serial console.
# Needs root only for nothing; needs qemu-system-arm, mtools, e2fsprogs, openssh-client, minisign.
#
#   packaging/test-image.sh [--image PATH] [--timeout SECONDS]
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(dirname "$HERE")"
CACHE="${IMAGE_CACHE:-$REPO/build/image-cache}"
image="$CACHE/img/edgelet-rpi-arm64.img"
timeout=2400
# The self-update scenario (boot 3's releases and power cut, boot 4), on by default and so in CI;
# IMAGE_TEST_SELF_UPDATE=0 leaves it out.
self_update="${IMAGE_TEST_SELF_UPDATE:-1}"
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
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
passed=0  # checks that printed ok:, for the closing line CI reads
fail() {
    echo "test-image.sh: FAIL: $*" >&2
    [ -z "${releases:-}" ] || kill "$releases" 2>/dev/null || true  # the releases still being packed
    echo "test-image: ${passed} passed, 1 failed"
    exit 1
}

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
# Flashed onto a 4 GiB card (sparse; qemu's raspi3b wants a power-of-two SD size): the first boot grows the
# root partition into it, and edgelet check then finds the free space it wants.
truncate -s 4G "$work/test.img"
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
# Emulated on a loaded host, early boot can take longer than systemd's 90 s for a device to show up
# (RASPIFIRM, ttyS1): the emergency shell, seen in a later boot at load average 20. A Pi needs seconds.
cmdline="$cmdline systemd.default_timeout_start_sec=900"

step "the test unit, written into the root partition with debugfs"
root_start=$(sfdisk -d "$work/test.img" | sed -n 's|.*test.img2 : start= *\([0-9]*\),.*|\1|p')
dd if="$work/test.img" of="$work/root.ext4" bs=4M iflag=skip_bytes skip=$((root_start * 512)) status=none conv=sparse
cat > "$work/edgelet-image-test" <<'EOF'
#!/bin/sh
# Waits until the card's pods run, then reports on the console (IMAGE-TEST lines).
want="$(cat /etc/edgelet-image-test.want)"
# A self-update to wait for (its version): until the agent committed or rolled it back. Over SSH (the broken
# release) the report goes to stdout.
update="${IMAGE_TEST_UPDATE:-$(cat /etc/edgelet-image-test.update 2>/dev/null)}"
out_to="${IMAGE_TEST_OUT:-/dev/console}"
i=0
while [ $i -lt 360 ]; do
    out="$(edgelet pods 2>&1)"
    # The agent itself must be up and serving (not the table --runonce left behind), then every pod Running.
    ok=1
    systemctl is-active -q edgelet.service || ok=0
    # With a network device (boot 3), its DHCP lease too.
    [ -e /sys/class/net/eth0 ] && ! ip -4 -o addr show dev eth0 | grep -q inet && ok=0
    echo "$out" | grep -q "is not running" && ok=0
    if [ -n "$update" ]; then
        [ -e /var/lib/edgelet/update/trial ] && ok=0
        edgelet update history 2>&1 | grep -Eq "[[:space:]]$update[[:space:]]+(committed|rolled-back)" || ok=0
    fi
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
    check="$(edgelet check 2>&1)"
    echo "IMAGE-TEST check-exit: $?"
    echo "$check" | sed 's/^/IMAGE-TEST check: /'
    echo "IMAGE-TEST hostname: $(hostname)"
    echo "IMAGE-TEST net: $(ip -4 -o addr show dev eth0 2>&1 | tr -s ' ')"
    journalctl -b -u systemd-networkd -o cat | grep -E "DHCPv4 address" | sed 's/^/IMAGE-TEST dhcp: /'
    echo "IMAGE-TEST cmdline: $(cat /proc/cmdline)"
    echo "IMAGE-TEST memory: $(grep -w memory /proc/cgroups | tr '\t' ' ')"
    echo "IMAGE-TEST controllers: $(cat /sys/fs/cgroup/cgroup.controllers 2>/dev/null)"
    echo "IMAGE-TEST kubeconfig: $(stat -c '%a %U' /etc/edgelet/kubeconfig 2>&1)"
    echo "IMAGE-TEST card: $(ls /boot/firmware/edgelet | tr '\n' ' ')"
    echo "IMAGE-TEST card-mount: $(findmnt -no OPTIONS /boot/firmware 2>&1)"
    echo "IMAGE-TEST images: $(edgelet images 2>&1 | tr '\n' '|')"
    echo "IMAGE-TEST runonce: $(systemctl show -p Result --value edgelet-runonce.service)"
    echo "IMAGE-TEST agent: $(systemctl is-active edgelet.service) restarts=$(systemctl show -p NRestarts --value edgelet.service)"
    journalctl -b -u edgelet.service -o cat | grep -E "edgelet started|Card|Secret| E |Update|[Tt]rial|Release" |
        sed 's/^/IMAGE-TEST agent-log: /'
    echo "IMAGE-TEST containers: $(edgelet-image-test-containers)"
    # When each container's process started (seconds since boot, /proc) and when the update did: an update that
    # restarted no container leaves every process older than it. (The old agent's snapshot, which the trial
    # compared, goes with the commit: the test cannot read it after.)
    update_at="$(journalctl -b -u edgelet.service -o short-monotonic | grep -m1 "Update started" |
        sed 's/^\[ *\([0-9.]*\)\].*/\1/')"
    echo "IMAGE-TEST container-starts: update=${update_at:-none} processes=$(edgelet-image-test-containers |
        sed 's/.* starts=//')"
    edgelet update status 2>&1 | sed 's/^/IMAGE-TEST update-status: /'
    edgelet update history 2>&1 | sed 's/^/IMAGE-TEST update-history: /'
    journalctl -b -u edgelet.service -o cat | grep "edgelet launch" | sed 's/^/IMAGE-TEST launch: /' 
    # The update's steps on the guest's clock (seconds since boot), for bench/image_update.py.
    journalctl -b -u edgelet.service -o short-monotonic |
        grep -E "Starting edgelet|Update (started|committed)|was rolled back|edgelet launch|crash point" |
        sed 's/^/IMAGE-TEST update-times: /'
    echo "IMAGE-TEST releases: current=$(readlink /usr/lib/edgelet/current) $(ls -A /var/lib/edgelet/releases | tr '\n' ' ')"
    echo "IMAGE-TEST downloads: $(ls -A /var/lib/edgelet/releases/.download 2>/dev/null | tr '\n' ' ')"
    echo "IMAGE-TEST uptime: $(cut -d' ' -f1 /proc/uptime)"
    journalctl -b -u edgelet-card-setup -u edgelet-runonce -o cat | sed 's/^/IMAGE-TEST journal: /'
    echo "IMAGE-TEST-DONE"
} > "$out_to" 2>&1
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
cat > "$work/edgelet-image-test-containers" <<'EOF'
#!/bin/sh
# Each app container's id, the pid of its process (the pods' shell loop) and when that started (seconds since
# boot, /proc), sorted: the same before and after an update when the update stopped no pod. (A script, so that
# pgrep does not find the caller's command line.)
ids="$(edgelet pods -o json | grep -o '"containerID": *"[^"]*"' | sed 's/.*"\([^"]*\)"$/\1/' | sort | tr '\n' ' ')"
pids="$(pgrep -f 'while :; do sleep 3600' | sort -n | tr '\n' ' ')"
tck="$(getconf CLK_TCK)"
echo "ids=${ids}pids=${pids} starts=$(for p in $pids; do awk -v t="$tck" '{printf "%.2f ", $22 / t}' "/proc/$p/stat"; done)"
EOF
chmod 0755 "$work/edgelet-image-test-containers"
# systemd waits 90 s for a device whatever its start timeout; udev took longer than that to find RASPIFIRM at
# load 16-18 (raspi3b and virt), and the boot fell into the emergency shell. A Pi finds it in seconds.
debugfs -R "cat /etc/fstab" "$work/root.ext4" 2>/dev/null |
    sed 's|^\(LABEL=RASPIFIRM [^ ]* vfat [^ ]*\)|\1,x-systemd.device-timeout=15min|' > "$work/fstab"
grep -q "device-timeout" "$work/fstab" || fail "the image's /etc/fstab has no RASPIFIRM line"
echo "hello" > "$work/want"
debugfs -w "$work/root.ext4" >/dev/null <<EOF
write $work/edgelet-image-test /usr/local/sbin/edgelet-image-test
write $work/edgelet-image-test-containers /usr/local/bin/edgelet-image-test-containers
write $work/edgelet-image-test.service /etc/systemd/system/edgelet-image-test.service
write $work/want /etc/edgelet-image-test.want
rm /etc/fstab
write $work/fstab /etc/fstab
symlink /etc/systemd/system/multi-user.target.wants/edgelet-image-test.service /etc/systemd/system/edgelet-image-test.service
EOF
dd if="$work/root.ext4" of="$work/test.img" bs=4M oflag=seek_bytes seek=$((root_start * 512)) conv=notrunc,sparse status=none
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
# A throwaway SSH key, whose public half goes onto the card as a laptop would put it.
ssh-keygen -q -t ed25519 -N '' -C image-test -f "$work/id_ed25519"
cp "$work/id_ed25519.pub" "$work/card/authorized_keys"
mcopy -o -i "$fat" "$work/card/manifests/hello.yaml" ::edgelet/manifests/hello.yaml
mcopy -o -i "$fat" "$work/card/images/test-sh.oci.tar" ::edgelet/images/test-sh.oci.tar
mcopy -o -i "$fat" "$work/card/kubeconfig" ::edgelet/kubeconfig
mcopy -o -i "$fat" "$work/card/hostname" ::edgelet/hostname
mcopy -o -i "$fat" "$work/card/authorized_keys" ::edgelet/authorized_keys
# The self-update releases for boot 3 (xz of the one-dir: minutes on a loaded host), made while boots 1-2 run.
rel="$work/releases"
if [ "$self_update" = 1 ]; then
    PYTHONPATH="$REPO" "$REPO/.venv/bin/python" "$HERE/image/test-image-releases.py" "$base_root" "$rel" \
        "$(wc -w <<<"update.trial ${IMAGE_TEST_POWER_CUTS:-}")" > "$work/releases.env" 2> "$work/releases.log" &
    releases=$!
fi

# boot LOG [virt [STEP]]: qemu raspi3b (or virt, with the network) on the copy until the guest reports, then
# (virt) the function STEP run while the guest is up, then killed (a power cut).
boot() {
    local log="$1" machine="${2:-raspi3b}" then="${3:-}" start
    local -a args=(-M raspi3b -m 1G -smp 4 -dtb "$work/fat/rpi3.dtb" -append "$cmdline"
        -drive "file=$work/test.img,if=sd,format=raw" -serial null -serial "file:$log")
    if [ "$machine" = virt ]; then
        ssh_port="$(free_port)"
        args=(-M virt -cpu cortex-a53 -m 1G -smp 2 -append "${cmdline/console=ttyS1,115200/console=ttyAMA0,115200}"
            -drive "file=$work/test.img,if=none,format=raw,id=card" -device virtio-blk-device,drive=card
            -netdev "user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:$ssh_port-:22${guestfwd:-}"
            -device virtio-net-device,netdev=n0,mac=b8:27:eb:00:00:24 -serial "file:$log")
    fi
    step "boot: qemu-system-aarch64 -M $machine (TCG), console in $log"
    qemu-system-aarch64 "${args[@]}" -kernel "$work/fat/vmlinuz" -initrd "$work/fat/initrd.img" \
        -display none -no-reboot &
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
    if [ "$machine" = virt ]; then
        # A login with the card's key, over the forwarded port (qemu accepts the connection even when the
        # guest does not answer, so each try is bounded); the answer goes beside the console log.
        local try
        for try in 1 2 3; do
            timeout 180 ssh -i "$work/id_ed25519" -p "$ssh_port" -o BatchMode=yes -o StrictHostKeyChecking=no \
                -o UserKnownHostsFile=/dev/null -o ConnectTimeout=60 -o LogLevel=ERROR root@127.0.0.1 \
                'echo "IMAGE-TEST ssh: $(id -un)@$(hostname)"' > "$log.ssh" 2>&1 && break
            sleep 5
        done
        cat "$log.ssh"
        [ "$with_tunnel" != 1 ] || tunnel_steps "$log"
        [ -z "$then" ] || "$then"
    fi
    kill -9 "$qemu"
    wait "$qemu" 2>/dev/null || true
    grep -a "IMAGE-TEST" "$log" | tr -d '\r'
}
guest() {  # guest COMMAND: run over SSH in the virt boot (stdin passed on)
    timeout 900 ssh -i "$work/id_ed25519" -p "$ssh_port" -o BatchMode=yes -o StrictHostKeyChecking=no \
        -o UserKnownHostsFile=/dev/null -o ConnectTimeout=60 -o LogLevel=ERROR root@127.0.0.1 "$@"
}
broken_release() {  # the broken release dropped onto the mounted card while edgelet runs; the report after it
    local name card=/boot/firmware/edgelet/update log="$work/console-3-broken.log"
    name="$(basename "$broken")"
    step "self-update over SSH: the broken release $broken_version onto the running device's card"
    guest 'echo "IMAGE-TEST before-broken: $(edgelet-image-test-containers)"' > "$log" 2>&1 || true
    # The signature first, then the archive under a name the agent ignores, renamed once whole.
    guest "cat > $card/$name.minisig" < "$broken.minisig" &&
        guest "cat > $card/.$name.part && mv $card/.$name.part $card/$name &&
            echo \"IMAGE-TEST broken-dropped: \$(cut -d' ' -f1 /proc/uptime)\"" < "$broken" >> "$log" ||
        fail "cannot copy the broken release onto the guest's card"
    guest "IMAGE_TEST_OUT=/dev/stdout IMAGE_TEST_UPDATE=$broken_version sh /usr/local/sbin/edgelet-image-test" \
        >> "$log" 2>&1 || true
    grep -a "IMAGE-TEST" "$log" | tr -d '\r'
}
power_cut() {  # power_cut POINT VERSION RELEASE LOG [ENV]: RELEASE (of VERSION) applied by an agent held at crash
    # point POINT (ENV: more of the unit's environment); boot() then kills qemu: a power cut
    local point="$1" version="$2" release="$3" log="$4" extra="${5:-}" name card=/boot/firmware/edgelet/update i
    name="$(basename "$release")"
    step "a power cut during an update: edgelet held at $point, release $version onto the card"
    # A runtime drop-in (/run: gone at the next boot) arms the crash point in hold mode; no watchdog, whose
    # restart would let the launcher start the new release before the cut.
    printf '%s\n' "[Service]" "Environment=EDGELET_TEST_CRASH_AT=$point EDGELET_TEST_CRASH_HOLD=1 $extra" \
        "WatchdogSec=0" > "$work/hold.conf"
    : > "$log"
    if [ "$point" = update.download ]; then
        # From the URL, which stays set (a persistent drop-in, synced) so that the next boot downloads again.
        cp "$release" "$release.minisig" "$work/served/"
        printf '%s\n' "[Service]" "Environment=EDGELET_UPDATE_URL=http://10.0.2.100:8080/$name" > "$work/url.conf"
        guest 'd=/etc/systemd/system/edgelet.service.d && mkdir -p $d && cat > $d/image-test-url.conf && sync' \
            < "$work/url.conf" >> "$log" 2>&1 || fail "cannot set edgelet's update URL (see $log)"
    fi
    guest 'd=/run/systemd/system/edgelet.service.d && mkdir -p $d && cat > $d/hold.conf &&
        systemctl daemon-reload && systemctl restart edgelet.service' < "$work/hold.conf" \
        >> "$log" 2>&1 || fail "cannot restart edgelet with the crash point held (see $log)"
    # Synced: the cut is meant to hit the update, not the copy (FAT has no journal: the first chained run lost
    # the release's rename and most of its data with the guest's page cache, and the next boot had nothing to
    # stage again).
    if [ "$point" != update.download ]; then
        guest "cat > $card/$name.minisig" < "$release.minisig" &&
            guest "cat > $card/.$name.part && mv $card/.$name.part $card/$name && sync" < "$release" ||
            fail "cannot copy release $version onto the guest's card"
    fi
    for i in $(seq 1 120); do
        guest "journalctl -b -u edgelet.service -o cat | grep 'crash point $point: holding' &&
            echo \"IMAGE-TEST held: current=\$(readlink /usr/lib/edgelet/current)\" &&
            { cat /var/lib/edgelet/update/trial 2>/dev/null || true; }" >> "$log" 2>&1 && break
        sleep 5
    done
    grep -a "IMAGE-TEST held:" "$log" || fail "edgelet never held at $point (see $log)"
    if [ "$point" = update.download ]; then
        # What the download wrote so far, on the disk: the next boot has to find it and remove it.
        guest 'sync && echo "IMAGE-TEST held-download: $(ls -A /var/lib/edgelet/releases/.download | tr "\n" " ")"' \
            >> "$log" 2>&1 || true
    fi
    echo "IMAGE-TEST cut-point: $point" >> "$log"  # for bench/image_update.py
    step "power cut: qemu killed with edgelet held at $point"
}
# The power cuts in order: update.trial's at the end of boot 3, then each point IMAGE_TEST_POWER_CUTS names at the
# end of the boot that checked the one before (update.rollback: the trial's deadline cut to a second, so that the
# new agent rolls itself back).
read -ra cut_points <<<"update.trial ${IMAGE_TEST_POWER_CUTS:-}"
for point in "${cut_points[@]}"; do
    case "$point" in
    update.trial|update.download|update.unpack|update.swap|update.commit|update.rollback) ;;
    *) fail "IMAGE_TEST_POWER_CUTS: $point is not one of update.download update.unpack update.swap update.commit" \
        "update.rollback" ;;
    esac
done
# update.download's release server: Python's http.server on the host's loopback, which the virt boots reach at
# 10.0.2.100:8080 through qemu's guestfwd: qemu runs the relay once per connection, the guest's TCP stream on
# its stdin and stdout.
if [[ " ${cut_points[*]} " == *" update.download "* ]]; then
    mkdir -p "$work/served"
    cat > "$work/relay.py" <<'EOF'
import os, socket, sys, threading
upstream = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
def to_server():
    while data := os.read(0, 65536):
        upstream.sendall(data)
    upstream.shutdown(socket.SHUT_WR)
threading.Thread(target=to_server, daemon=True).start()
while data := upstream.recv(65536):
    while data:
        data = data[os.write(1, data):]
EOF
    served_port="$(free_port)"
    python3 -m http.server --bind 127.0.0.1 --directory "$work/served" "$served_port" > "$work/served.log" 2>&1 &
    server=$!
    trap 'kill "$server" 2>/dev/null || true' EXIT  # every exit, fail()'s too
    guestfwd=",guestfwd=tcp:10.0.2.100:8080-cmd:python3 $work/relay.py $served_port"
fi
cut_env() {  # cut_env POINT: what else the agent's environment needs to reach POINT
    [ "$1" != update.rollback ] || echo "EDGELET_UPDATE_TRIAL_DEADLINE=1s"
}
next_cut() {  # the chain's power cut number $cut_next, at the end of the boot that checked the one before
    local point="${cut_points[$cut_next]}"
    power_cut "$point" "${cut_vs[$cut_next]}" "${cut_paths[$cut_next]}" "$work/console-cut-$cut_next.log" \
        "$(cut_env "$point")"
}
after_boot3() { broken_release; cut_next=0; next_cut; }
expect() {  # expect LOG PATTERN WHAT (LOG.ssh: what the guest answered over SSH)
    local logs=("$1")
    [ -f "$1.ssh" ] && logs+=("$1.ssh")
    # grep -q would stop reading at the first match: tr, still writing a long report, then dies of SIGPIPE
    # and pipefail fails the check although the line is there (seen once in boot 2, whose journal is longer).
    grep -a -h "IMAGE-TEST" "${logs[@]}" | tr -d '\r' | grep -E "$2" > /dev/null || fail "$3 (no /$2/ in $1)"
    echo "ok: $3"
    passed=$((passed + 1))
}
edit_root() {  # edit_root: the debugfs commands on stdin run on the copy's root partition
    dd if="$work/test.img" of="$work/root.ext4" bs=4M iflag=skip_bytes skip=$((root_start * 512)) status=none conv=sparse
    # Every boot ends in a power cut, so the journal holds transactions the next mount replays: over what
    # debugfs writes now, which lost config.toml's edit and left a directory where a file was written. They are
    # replayed first, as that mount would (e2fsck: 0 or 1 is clean or fixed).
    local rc=0
    e2fsck -E journal_only -y "$work/root.ext4" > /dev/null 2>&1 || rc=$?
    [ "$rc" -le 1 ] || fail "e2fsck could not replay the root partition's journal (exit $rc)"
    debugfs -w "$work/root.ext4" >/dev/null
    dd if="$work/root.ext4" of="$work/test.img" bs=4M oflag=seek_bytes seek=$((root_start * 512)) conv=notrunc,sparse status=none
    rm -f "$work/root.ext4"
}
set_want() {  # set_want PODS: what the guest's test unit waits for, written into the root with debugfs
    echo "$1" > "$work/want"
    printf '%s\n' "rm /etc/edgelet-image-test.want" "write $work/want /etc/edgelet-image-test.want" | edit_root
}

c1="$work/console-1.log"
boot "$c1"
expect "$c1" "IMAGE-TEST pods: .* hello-pi-under-test .*Running" "first boot: the card's pod runs"
expect "$c1" "IMAGE-TEST runonce: success" "first boot: edgelet-runonce.service succeeded"
expect "$c1" "IMAGE-TEST agent: active restarts=0" "edgelet.service runs, never restarted"
expect "$c1" "IMAGE-TEST agent-log: .*edgelet started .*adopted=[1-9]" "edgelet.service adopted the pod runonce started"
expect "$c1" "IMAGE-TEST images: .*edgelet.local/test-sh" "the card's image archive was imported"
expect "$c1" "IMAGE-TEST kubeconfig: 600 root" "the kubeconfig was moved to /etc/edgelet, root only"
if grep -a "IMAGE-TEST card:" "$c1" | grep kubeconfig > /dev/null; then
    fail "the kubeconfig is still on the card"
fi
echo "ok: the kubeconfig is gone from the card"
passed=$((passed + 1))
expect "$c1" "IMAGE-TEST hostname: pi-under-test" "the card's hostname was applied"
expect "$c1" "IMAGE-TEST card-mount: .*nosuid,nodev,noexec" "the card's FAT partition runs no program (noexec, nosuid, nodev)"
expect "$c1" "IMAGE-TEST check: OK +memory cgroup" "edgelet check: the memory controller is on"
expect "$c1" "IMAGE-TEST check: OK +free space" "the root grew to the card: edgelet check finds the free space"
expect "$c1" "IMAGE-TEST check-exit: 0" "edgelet check passes on the device"

step "a second manifest written onto the FAT partition with mtools, after the power cut"
pod later > "$work/card/manifests/later.yaml"
mcopy -o -i "$fat" "$work/card/manifests/later.yaml" ::edgelet/manifests/later.yaml
set_want "hello later"
# A malformed kubeconfig on the card: set aside by edgelet-card-setup, never a crash-looping agent.
printf 'clusters: [unclosed\n' > "$work/card/kubeconfig"
mcopy -o -i "$fat" "$work/card/kubeconfig" ::edgelet/kubeconfig

c2="$work/console-2.log"
boot "$c2"
expect "$c2" "IMAGE-TEST pods: .* hello-pi-under-test .*Running" "after the power cut: the first pod is back"
expect "$c2" "IMAGE-TEST pods: .* later-pi-under-test .*Running" "the manifest written with mtools runs"
expect "$c2" "IMAGE-TEST agent: active restarts=0" "a malformed kubeconfig on the card: edgelet.service runs on"
expect "$c2" "IMAGE-TEST check: WARN +card folder: set aside .*kubeconfig.rejected: invalid YAML" \
    "edgelet check names the kubeconfig set aside and why"
expect "$c2" "IMAGE-TEST kubeconfig: 600 root" "the good kubeconfig stays in use"
expect "$c2" "IMAGE-TEST check-exit: 0" "edgelet check passes (a WARN) with the kubeconfig set aside"

# --- The WireGuard tunnel in boot 3 (packaging/image/test-image-tunnel.sh, docs/tunnel.md) ---
# The card carries a wireguard.conf whose hub is a network namespace the helper makes in the guest, over SSH,
# with the kernel's WireGuard (the Pi kernel's module; this build machine has none).
wg genkey > "$work/hub.key"
printf '%s\n' "[Interface]" "Address = 10.99.0.7/32" "" "[Peer]" "PublicKey = $(wg pubkey < "$work/hub.key")" \
    "Endpoint = 10.201.0.1:51820" "AllowedIPs = 10.99.0.0/24" > "$work/card/wireguard.conf"
mcopy -o -i "$fat" "$work/card/wireguard.conf" ::edgelet/wireguard.conf
tunnel_steps() {  # tunnel_steps LOG: the helper's IMAGE-TEST lines go into LOG.ssh
    local -a ssh=(timeout 1200 ssh -i "$work/id_ed25519" -p "$ssh_port" -o BatchMode=yes -o StrictHostKeyChecking=no
        -o UserKnownHostsFile=/dev/null -o ConnectTimeout=60 -o LogLevel=ERROR root@127.0.0.1)
    step "the tunnel: a kernel WireGuard hub in the guest, edgelet restarted with each backend"
    "${ssh[@]}" 'umask 077; cat > /run/hub.key' < "$work/hub.key" &&
        "${ssh[@]}" 'cat > /run/test-image-tunnel.sh' < "$HERE/image/test-image-tunnel.sh" &&
        "${ssh[@]}" 'sh /run/test-image-tunnel.sh' < /dev/null >> "$1.ssh" 2>&1 || true
    grep -a "tunnel-" "$1.ssh" || true
}


if [ "$self_update" = 1 ]; then
step "self-update: three signed arm64 releases of the image's one-dir; the good one onto the card with mtools"
wait "$releases" || { cat "$work/releases.log" >&2; fail "packaging/image/test-image-releases.py failed"; }
eval "$(cat "$work/releases.env")"
read -ra cut_paths <<<"$cuts"
read -ra cut_vs <<<"$cut_versions"
echo "running $running; good $good_version: $good ($(du -h "$good" | cut -f1)); broken $broken_version: $broken"
# With trusted keys every manifest and archive on the card needs a signature (the archive only while it is there).
for f in manifests/hello.yaml manifests/later.yaml images/test-sh.oci.tar; do
    minisign -S -s "$rel/release.key" -m "$work/card/$f" -t "edgelet-version: 1" > /dev/null
done
mcopy -o -i "$fat" "$work/card/manifests/hello.yaml.minisig" ::edgelet/manifests/hello.yaml.minisig
mcopy -o -i "$fat" "$work/card/manifests/later.yaml.minisig" ::edgelet/manifests/later.yaml.minisig
if mdir -b -i "$fat" ::edgelet/images | grep test-sh.oci.tar > /dev/null; then
    mcopy -o -i "$fat" "$work/card/images/test-sh.oci.tar.minisig" ::edgelet/images/test-sh.oci.tar.minisig
fi
mmd -i "$fat" ::edgelet/update 2>/dev/null || true
mcopy -o -i "$fat" "$good.minisig" "::edgelet/update/$(basename "$good").minisig"
mcopy -o -i "$fat" "$good" "::edgelet/update/$(basename "$good")"
# The key is trusted by the device's own config (the card may not set trusted_keys); the trial deadline is the
# emulation's: a Pi starts the agent in seconds, TCG on a loaded host in minutes.
printf '%s\n' "rdump /etc/edgelet/config.toml $work" | edit_root
{ echo 'trusted_keys = "/etc/edgelet/image-test-release.pub"  # make test-image'
  echo 'update_trial_deadline = "15m"  # make test-image'
  cat "$work/config.toml"; } > "$work/config.toml.new"
chmod 0644 "$work/config.toml.new" "$rel/release.pub"
echo "$good_version" > "$work/update"
printf '%s\n' "rm /etc/edgelet/config.toml" "write $work/config.toml.new /etc/edgelet/config.toml" \
    "write $rel/release.pub /etc/edgelet/image-test-release.pub" "write $work/update /etc/edgelet-image-test.update" |
    edit_root
fi

c3="$work/console-3.log"
with_tunnel=1
boot "$c3" virt "$([ "$self_update" = 1 ] && echo after_boot3 || true)"
with_tunnel=0
expect "$c3" "IMAGE-TEST tunnel-kind: wireguard" "tunnel: edgelet made a kernel WireGuard interface (the Pi kernel's module)"
expect "$c3" "IMAGE-TEST tunnel-wireguard-go: 0" "tunnel: no wireguard-go beside the kernel's"
expect "$c3" "IMAGE-TEST tunnel-handshake: [1-9]" "tunnel: a handshake with the kernel WireGuard hub"
expect "$c3" "IMAGE-TEST tunnel-nodeapi: HTTP/1.1 " "tunnel: the node API answers the hub on the tunnel address"
expect "$c3" "IMAGE-TEST tunnel-node: +TunnelReady +True" "tunnel: edgelet node shows TunnelReady"
expect "$c3" "IMAGE-TEST tunnel-restart: .*adopted=True backend=kernel" "tunnel: systemctl restart edgelet adopts the interface"
expect "$c3" "IMAGE-TEST tunnel-ifindex: same [0-9]+" "tunnel: the same interface (ifindex) after the restart"
expect "$c3" "IMAGE-TEST tunnel-traffic: grew" "tunnel: the hub's traffic to the device goes on after the restart"
expect "$c3" "IMAGE-TEST tunnel-nodeapi-after: HTTP/1.1 " "tunnel: the node API answers on the tunnel address after the restart"
expect "$c3" "IMAGE-TEST tunnel-go-restart: .*adopted=False backend=wireguard-go" "tunnel: wireguard_backend = wireguard-go makes wireguard-go's"
expect "$c3" "IMAGE-TEST tunnel-go-pid: [0-9]+ tun" "tunnel: wireguard-go runs (a TUN device)"
expect "$c3" "IMAGE-TEST tunnel-go-restart-2: .*adopted=True backend=wireguard-go" "tunnel: a restart adopts wireguard-go"
go_pid="$(grep -a -h "IMAGE-TEST tunnel-go-pid: " "$c3.ssh" | awk '{print $3}')"
expect "$c3" "IMAGE-TEST tunnel-go-pid-after: $go_pid \$" "tunnel: the same wireguard-go survived the restart (KillMode=process), not a second"
expect "$c3" "IMAGE-TEST tunnel-go-nodeapi: HTTP/1.1 " "tunnel: the node API answers through wireguard-go after the restart"
expect "$c3" "IMAGE-TEST pods: .* later-pi-under-test .*Running" "virt: the same card boots, its pods run"
expect "$c3" "IMAGE-TEST net: .*eth0 +inet 10\.0\.2\.15/" "virt: eth0 has an address"
expect "$c3" "IMAGE-TEST dhcp: eth0: DHCPv4 address 10\.0\.2\.15" "virt: systemd-networkd got a DHCP lease on eth0"
expect "$c3" "IMAGE-TEST ssh: root@pi-under-test" "virt: SSH login as root with the card's authorized_keys; the card's hostname"
if [ "$self_update" = 1 ]; then
expect "$c3" "IMAGE-TEST update-history: .* $good_version +committed" "self-update: the release on the card was committed at boot"
expect "$c3" "IMAGE-TEST update-status: Release: +image-test-good-$good_version \($good_version, arm64\)" \
    "self-update: the new release is the one running"
expect "$c3" "IMAGE-TEST agent-log: .*Update committed .*version=$good_version" "self-update: the new agent committed it"
report() {  # report LOG WHAT: the value of the guest's last IMAGE-TEST WHAT: line
    grep -a "IMAGE-TEST $2:" "$1" | tr -d '\r' | tail -n 1 | sed "s/.*IMAGE-TEST $2: //"
}
# Every container's process is older than the update (the trial compared ids and processes with the old
# agent's snapshot; this says so from outside).
starts="$(report "$c3" container-starts)"
echo "containers after the commit: $(report "$c3" containers)"
echo "process starts (s since boot) against the update's start: $starts"
update_at="$(sed -n 's/^update=\([0-9.]*\) .*/\1/p' <<<"$starts")"
procs="${starts#*processes=}"
[ -n "$update_at" ] && [ -n "${procs// /}" ] || fail "self-update: no update start or no container process seen ($starts)"
for t in $procs; do
    awk -v a="$t" -v b="$update_at" 'BEGIN { exit !(a < b) }' ||
        fail "self-update: a container process started at ${t}s, after the update started (${update_at}s)"
done
echo "ok: self-update: every container's process predates the update (none restarted)"
passed=$((passed + 1))
c3b="$work/console-3-broken.log"
expect "$c3b" "IMAGE-TEST update-history: .* $broken_version +rolled-back +restart loop: 3 starts without a commit" \
    "self-update: the broken release was rolled back by itself, with the reason"
expect "$c3b" "IMAGE-TEST update-status: Release: +image-test-good-$good_version " "the good release runs on"
expect "$c3b" "IMAGE-TEST pods: .* later-pi-under-test .*Running" "the pods run on after the rollback"
before="$(report "$c3b" before-broken)" after="$(report "$c3b" containers)"
echo "containers before the broken release: $before"
echo "containers after its rollback:        $after"
[ -n "$before" ] && [ "$before" = "$after" ] && grep -q "pids=[0-9]" <<<"$after" ||
    fail "a container was restarted or replaced by the broken release (before: $before; after: $after)"
echo "ok: the broken release and its rollback stopped no container (same ids and processes)"
passed=$((passed + 1))

# --- The power cuts during an update: update.trial's at the end of boot 3, each checked at the next boot (virt), ---
# --- which ends with the next cut of the chain (IMAGE_TEST_POWER_CUTS) ---
committed_label="image-test-good-$good_version"
for cut in "${!cut_points[@]}"; do
    point="${cut_points[$cut]}" version="${cut_vs[$cut]}"
    held="$(report "$work/console-cut-$cut.log" held)"
    echo "held at $point: $held"
    if [ "$point" = update.trial ]; then
        grep -q "current=.*/$version\$" <<<"$held" ||
            fail "power cut: \`current\` did not point at release $version when the power went at $point ($held)"
        echo "ok: power cut: \`current\` already pointed at release $version when the power went"
        passed=$((passed + 1))
    fi
    echo "$version" > "$work/update"
    printf '%s\n' "rm /etc/edgelet-image-test.update" "write $work/update /etc/edgelet-image-test.update" | edit_root
    log="$work/console-$((4 + cut)).log"
    cut_next=$((cut + 1))
    if [ "$cut_next" -lt "${#cut_points[@]}" ]; then boot "$log" virt next_cut; else boot "$log" virt; fi
    what="after the power cut at $point"
    expect "$log" "IMAGE-TEST update-history: .* $version +(committed|rolled-back)" \
        "$what: release $version's outcome is recorded (no trial left open)"
    if grep -a -E "IMAGE-TEST update-history: .* $version +committed" "$log" > /dev/null; then
        committed_label="image-test-cut-$version"
        expect "$log" "IMAGE-TEST update-status: Release: +$committed_label " "$what: release $version was committed and runs"
    else
        expect "$log" "IMAGE-TEST update-status: Release: +$committed_label " \
            "$what: release $version rolled back, the release committed before ($committed_label) runs"
    fi
    grep -a "IMAGE-TEST releases: " "$log" | grep -v "partial" > /dev/null ||
        fail "$what: a half-staged release is left ($(report "$log" releases))"
    echo "ok: $what: no half-staged release ($(report "$log" releases))"
    passed=$((passed + 1))
    if [ "$point" = update.download ]; then
        at_cut="$(report "$work/console-cut-$cut.log" held-download)"
        grep -q "\.part" <<<"$at_cut" || fail "$what: the cut left no partial download to clean up ($at_cut)"
        grep -a "IMAGE-TEST downloads: " "$log" | grep -v "\.part" > /dev/null ||
            fail "$what: the partial download is left ($(report "$log" downloads))"
        echo "ok: $what: the partial download the cut left was removed and the release downloaded again" \
            "(at the cut: $at_cut; after: $(report "$log" downloads))"
        passed=$((passed + 1))
    fi
    expect "$log" "IMAGE-TEST pods: .* hello-pi-under-test .*Running" "$what: the first pod runs"
    expect "$log" "IMAGE-TEST pods: .* later-pi-under-test .*Running" "$what: the second pod runs"
done
fi
step "PASS"
echo "test-image: ${passed} passed, 0 failed"
