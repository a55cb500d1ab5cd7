# Sourced by build-image.sh and build-arm64.sh: what both do the same way around
# an arm64 Debian root made on an amd64 host. They set dry_run (0 or 1),
# HOST_PACKAGES and step() before sourcing it.

# run CMD...: CMD, or with dry_run=1 only its line "+ CMD".
run() {
    if [ "$dry_run" = 1 ]; then
        printf '+ %s\n' "$*"
    else
        "$@"
    fi
}

# host_tools: install what of HOST_PACKAGES is missing, and let the host run
# arm64 programs.
host_tools() {
    local p missing=()
    step "host tools: ${HOST_PACKAGES[*]}"
    for p in "${HOST_PACKAGES[@]}"; do
        dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        run apt-get update -qq
        run env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
    fi
    # binfmt-support registers qemu-aarch64 with the F (fix binary) flag, so
    # arm64 programs run inside the chroot without copying qemu into it.
    if [ "$dry_run" = 1 ] || [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
        run update-binfmts --enable qemu-aarch64
    fi
}

# Mounts are added to `mounted` (not in a dry run); cleanup undoes them, last
# first, and runs again at exit.
mounted=()
cleanup() {
    local i
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
        umount -l "${mounted[$i]}" 2>/dev/null || true
    done
    mounted=()
}
trap cleanup EXIT
