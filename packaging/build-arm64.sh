#!/usr/bin/env bash
# Builds the arm64 edgelet binary on an amd64 machine: PyInstaller cannot
# cross-build, so it runs inside an arm64 Debian root made with mmdebstrap
# and executed through qemu-user (binfmt_misc). Needs root.
#
#   packaging/build-arm64.sh [--dry-run] [--deb]
#
# Result: the one-dir build dist/arm64/edgelet/ (smoke-tested with `edgelet
# version` under qemu), and with --deb also dist/edgelet_<version>_arm64.deb
# packing it. One-dir, as on x86_64: a one-file build unpacks about 20 MB to
# disk on every command (seconds on a Pi, and SD-card wear). The arm64 root
# is kept in $ARM64_ROOT (default /var/cache/edgelet-image/arm64-root) so a second build skips
# mmdebstrap, and the one-dir build in $IMAGE_BASE_CACHE/onedir/KEY, KEY a
# digest of its inputs' contents (edgelet/, build.spec, pyproject.toml, packaging/docstrings.py, this
# recipe, the root's packages), not of the commit: a later commit that changes
# none of them (docs, tests, the image recipe) reuses it without emulating
# anything, and the .deb is packed again around it (dpkg-deb, seconds). The
# binary names the newest commit that changed those inputs. --dry-run prints
# every step's command instead of running it. Environment: ARM64_ROOT,
# IMAGE_BASE_CACHE, DEBIAN_SUITE (bookworm), DEBIAN_MIRROR (the first
# deb.debian.org-style URI in apt's sources).
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(dirname "$HERE")"
# Outside the checkout, so a CI run from a fresh clone finds it (.ci/run builds the image).
BASE_CACHE="${IMAGE_BASE_CACHE:-/var/cache/edgelet-image}"
ROOT="${ARM64_ROOT:-$BASE_CACHE/arm64-root}"
DEB_CACHE="$BASE_CACHE/debs"
SUITE="${DEBIAN_SUITE:-bookworm}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
HOST_PACKAGES=(mmdebstrap qemu-user-static binfmt-support)
# What the arm64 root needs to pip-install edgelet's dependencies (python-prctl
# builds from source against libcap) and to strip the result.
ROOT_PACKAGES="python3,python3-venv,python3-dev,gcc,libc6-dev,libcap-dev,binutils,ca-certificates"

dry_run=0 deb=0
for arg in "$@"; do
    case "$arg" in
    --dry-run) dry_run=1 ;;
    --deb) deb=1 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "build-arm64.sh: unknown argument $arg" >&2; exit 2 ;;
    esac
done

step() { echo "==> $(date -u +%H:%M:%S) $*"; }
# run, host_tools, and the mounts undone at exit: shared with the other arm64 recipe.
. "$HERE/common.sh"

commit="$(onedir_commit)"
# The cache key: a digest of the inputs' contents (untracked modules too: PyInstaller collects them).
key="$(cd "$REPO" && {
    printf '%s\n' "$SUITE" "$MIRROR" "$ROOT_PACKAGES"
    find "${ONEDIR_INPUTS[@]}" -type f -not -path '*/__pycache__/*' -not -name '*.pyc' -print0 |
        LC_ALL=C sort -z | xargs -0 sha256sum
} | sha256sum | cut -c1-16)"
ONEDIR_CACHE="$BASE_CACHE/onedir"

if [ "$dry_run" = 0 ]; then
    [ "$(id -u)" = 0 ] || { echo "build-arm64.sh: needs root (debootstrap, chroot, mounts)" >&2; exit 1; }
fi

host_tools

locked "$ROOT"
pack_deb() {
    if [ "$deb" = 1 ]; then
        step "arm64 .deb"
        run "$HERE/build-deb.sh" --arch arm64 "$REPO/dist/arm64/edgelet"
    fi
}
if [ "$dry_run" = 0 ] && [ -x "$ONEDIR_CACHE/$key/edgelet/edgelet" ]; then
    step "one-dir build of these inputs cached: $ONEDIR_CACHE/$key (no emulation)"
    rm -rf "$REPO/dist/arm64"
    mkdir -p "$REPO/dist/arm64"
    cp -a "$ONEDIR_CACHE/$key/edgelet" "$REPO/dist/arm64/edgelet"
    touch "$ONEDIR_CACHE/$key"
    pack_deb
    exit 0
fi

step "arm64 Debian root in $ROOT"
unmount_under "$ROOT"
if [ "$dry_run" = 1 ] || [ "$(cat "$ROOT/.edgelet-arm64-root" 2>/dev/null)" != "$ROOT_PACKAGES" ]; then
    remove_tree "$ROOT"
    make_arm64_root "$ROOT" "deb $MIRROR $SUITE main" "$ROOT_PACKAGES"
    [ "$dry_run" = 1 ] || echo "$ROOT_PACKAGES" > "$ROOT/.edgelet-arm64-root"
fi

# mmdebstrap has copied the host's resolv.conf, which pip needs.
mount_in_root() {  # mount_in_root TYPE_OR_BIND SOURCE TARGET
    run mkdir -p "$3"
    if [ "$1" = bind ]; then
        run mount --bind "$2" "$3"
    else
        run mount -t "$1" "$2" "$3"
    fi
    [ "$dry_run" = 1 ] || mounted+=("$3")
}
mount_in_root proc proc "$ROOT/proc"
mount_in_root bind /dev "$ROOT/dev"

step "source tree into $ROOT/src (commit $commit)"
run rm -rf "$ROOT/src"
run mkdir -p "$ROOT/src"
run sh -c "tar -C '$REPO' --exclude=./.venv --exclude=./build --exclude=./dist --exclude=./.git \
    --exclude=./.run --exclude=./.make -cf - . | tar -C '$ROOT/src' -xf -"

step "pip install and pyinstaller, in the arm64 root (under qemu)"
# pip in the root trusts what the host's pip trusts (a build host behind a
# TLS-inspecting proxy has its CA there), and sees none of the host's other
# PIP_* settings: chroot_env starts from an empty environment.
host_ca="${PIP_CERT:-${SSL_CERT_FILE:-${REQUESTS_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}}}"
run cp "$host_ca" "$ROOT/etc/edgelet-build-ca.pem"
chroot_env=(env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 PIP_CERT=/etc/edgelet-build-ca.pem
    PIP_DISABLE_PIP_VERSION_CHECK=1)
for var in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
    [ -z "${!var:-}" ] || chroot_env+=("$var=${!var}")
done
run chroot "$ROOT" "${chroot_env[@]}" /bin/sh -ec "test -x /opt/venv/bin/python || python3 -m venv /opt/venv
/opt/venv/bin/python -m pip install -q '/src[build]'"
run chroot "$ROOT" "${chroot_env[@]}" EDGELET_BUILD_COMMIT="$commit" EDGELET_ONEDIR=1 /bin/sh -ec \
    "cd /src && /opt/venv/bin/pyinstaller --noconfirm --clean --log-level WARN --distpath /src/dist/onedir \
    --workpath /src/build build.spec"

step "result: $REPO/dist/arm64/edgelet/"
run rm -rf "$REPO/dist/arm64"
run mkdir -p "$REPO/dist/arm64"
run cp -a "$ROOT/src/dist/onedir/edgelet" "$REPO/dist/arm64/edgelet"

step "smoke test: edgelet version and edgelet check under qemu"
run chroot "$ROOT" /src/dist/onedir/edgelet/edgelet version --config /dev/null
# The arm64 root has no runc or conmon, so check reports failures (exit 1);
# the smoke test is that the frozen check runs to its report.
run sh -c "chroot '$ROOT' /src/dist/onedir/edgelet/edgelet check --config /dev/null > '$ROOT/check.txt' || true"
run grep -q "cgroups" "$ROOT/check.txt"

step "cache: $ONEDIR_CACHE/$key (the newest 3 kept)"
run mkdir -p "$ONEDIR_CACHE"
run rm -rf "$ONEDIR_CACHE/.$key.tmp"
run mkdir -p "$ONEDIR_CACHE/.$key.tmp"
run cp -a "$REPO/dist/arm64/edgelet" "$ONEDIR_CACHE/.$key.tmp/edgelet"
run rm -rf "$ONEDIR_CACHE/$key"
run mv "$ONEDIR_CACHE/.$key.tmp" "$ONEDIR_CACHE/$key"
if [ "$dry_run" = 0 ]; then
    ls -1t "$ONEDIR_CACHE" | tail -n +4 | while read -r old; do rm -rf "${ONEDIR_CACHE:?}/$old"; done
fi

pack_deb
