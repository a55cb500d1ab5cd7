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

# unmount_under DIR: unmount whatever is still mounted below DIR, deepest first. A build killed by SIGKILL
# or the OOM killer never ran its EXIT trap: its chroot mounts (the host's /dev bound in, /proc, /sys)
# are still there, and the next build must not copy, fill or remove through them. Call it under the lock.
unmount_under() {
    local m
    [ "$dry_run" = 1 ] && return 0
    findmnt -rn -o TARGET | awk -v d="${1%/}/" 'index($0, d) == 1' | sort -r | while read -r m; do
        umount -l "$m" 2>/dev/null || umount -l "$(printf '%b' "$m")" || true
    done
}

# remove_tree DIR: rm -rf DIR that never leaves DIR's filesystem: leftover mounts are undone first, and
# --one-file-system keeps whatever could not be unmounted (the host's /dev, say) out of reach.
remove_tree() {
    unmount_under "$1"
    run rm -rf --one-file-system "$1"
}

# make_arm64_root ROOT SOURCES_LINES INCLUDE [mmdebstrap args...]: a Debian
# arm64 root with the packages INCLUDE (comma separated) in one apt run, by
# mmdebstrap: parallel downloads, one dpkg run (each trigger such as
# update-initramfs runs once), dpkg under eatmydata (no fsync under qemu),
# and no man pages, docs or translations (path-exclude, kept in the root so
# later upgrades skip them too: less to write on an SD card). Downloaded .debs
# are kept in $DEB_CACHE (shared by every root and build, outside the
# checkout), so a rebuild downloads nothing. SOURCES_LINES: one apt line each,
# they become the root's sources.list.
make_arm64_root() {
    local root="$1" sources="$2" include="$3"
    shift 3
    local -a mirrors=()
    mapfile -t mirrors <<<"$sources"
    run mkdir -p "$DEB_CACHE"
    run mmdebstrap --arch=arm64 --variant=minbase --mode=root --include="$include" \
        --hook-dir=/usr/share/mmdebstrap/hooks/eatmydata \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-include=/usr/share/doc/edgelet/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
        --dpkgopt='path-exclude=/usr/share/lintian/*' \
        --skip=essential/unlink,download/empty \
        --setup-hook='mkdir -p "$1/var/cache/apt/archives"' \
        --setup-hook="cp -l '$DEB_CACHE'/*.deb \"\$1/var/cache/apt/archives/\" 2>/dev/null || cp '$DEB_CACHE'/*.deb \"\$1/var/cache/apt/archives/\" 2>/dev/null || true" \
        --customize-hook="for f in \"\$1\"/var/cache/apt/archives/*.deb; do b=\${f##*/}; [ -e '$DEB_CACHE'/\$b ] || { cp \"\$f\" '$DEB_CACHE'/.\$b.\$\$ && mv -f '$DEB_CACHE'/.\$b.\$\$ '$DEB_CACHE'/\$b; }; done" \
        "$@" "$SUITE" "$root" "${mirrors[@]}"
}

# locked DIR: hold an exclusive lock on DIR.lock until this script exits, so two
# builds sharing a cache (other checkouts on the machine) take turns on it.
locked() {
    [ "$dry_run" = 1 ] && return 0
    mkdir -p "$(dirname "$1")"
    exec {lock_fd}>"$1.lock"
    flock "$lock_fd"
}

# What the arm64 one-dir build (build-arm64.sh) is made of, relative to the checkout, besides its root's
# packages.
ONEDIR_INPUTS=(edgelet build.spec pyproject.toml packaging/docstrings.py packaging/build-arm64.sh packaging/common.sh)
# onedir_commit: the commit the arm64 binary names, the newest that changed ONEDIR_INPUTS (-dirty when they
# differ from it): a binary reused by a later commit that did not touch them names code identical to its
# own. Needs REPO.
onedir_commit() {
    local c
    c="$(git -C "$REPO" log -1 --format=%h --abbrev=12 -- "${ONEDIR_INPUTS[@]}" 2>/dev/null || true)"
    if [ -n "$(git -C "$REPO" status --porcelain --untracked-files=no -- "${ONEDIR_INPUTS[@]}" 2>/dev/null)" ]; then
        c="${c:-unknown}-dirty"
    fi
    echo "${c:-unknown}"
}
