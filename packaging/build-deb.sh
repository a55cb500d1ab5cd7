#!/usr/bin/env bash
# Builds edgelet_<version>_<arch>.deb around an already built binary, with dpkg-deb.
#
#   packaging/build-deb.sh [--version V] [--arch A] [--output DIR] BINARY
#
# BINARY is the one-file build (dist/edgelet), or a one-dir build (the
# directory dist/onedir/edgelet), which is installed in /usr/lib/edgelet with
# /usr/bin/edgelet as a symlink to it. Defaults: the version in
# edgelet/__init__.py, the architecture of BINARY's ELF header (else this
# machine's), and dist/ as the output directory. Prints the .deb's path.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(dirname "$HERE")"

die() { echo "build-deb.sh: $*" >&2; exit 1; }

version="" arch="" output="$REPO/dist" binary=""
while [ $# -gt 0 ]; do
    case "$1" in
    --version) version="${2:?--version needs a value}"; shift 2 ;;
    --arch) arch="${2:?--arch needs a value}"; shift 2 ;;
    --output) output="${2:?--output needs a value}"; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    -*) die "unknown option $1" ;;
    *) [ -z "$binary" ] || die "one BINARY only"; binary="$1"; shift ;;
    esac
done
[ -n "$binary" ] || die "usage: build-deb.sh [--version V] [--arch A] [--output DIR] BINARY"
[ -e "$binary" ] || die "$binary does not exist (make binary builds it)"

if [ -z "$version" ]; then
    version="$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$REPO/edgelet/__init__.py")"
    [ -n "$version" ] || die "no __version__ in $REPO/edgelet/__init__.py"
fi

# The Debian architecture of an ELF executable, from its e_machine field.
elf_arch() {
    local exe="$1" magic machine
    magic="$(head -c 4 "$exe" | od -An -tx1 | tr -d ' \n')"
    [ "$magic" = "7f454c46" ] || return 1
    machine="$(od -An -tu2 -j18 -N2 "$exe" | tr -d ' ')"
    case "$machine" in
    62) echo amd64 ;;
    183) echo arm64 ;;
    40) echo armhf ;;
    3) echo i386 ;;
    243) echo riscv64 ;;
    *) return 1 ;;
    esac
}
if [ -z "$arch" ]; then
    exe="$binary"
    [ -d "$binary" ] && exe="$binary/edgelet"
    arch="$(elf_arch "$exe" 2>/dev/null || dpkg --print-architecture)"
fi

# The frozen Python needs at least the glibc it was built against.
libc_depends=""
if libc="$(dpkg-query -W -f='${Version}' libc6 2>/dev/null)" && [ -n "$libc" ]; then
    libc_depends="libc6 (>= ${libc%%-*}), "
fi

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
root="$stage/root"
install -d -m 0755 "$root/DEBIAN" "$root/usr/bin" "$root/lib/systemd/system" "$root/etc/edgelet" \
    "$root/etc/kubernetes/manifests" "$root/usr/share/edgelet" "$root/usr/share/doc/edgelet"
# Root-only: the one-file build unpacks the code it runs under here.
install -d -m 0700 "$root/var/lib/edgelet"

install -d -m 0755 "$root/usr/lib/edgelet"
# The unit starts the launcher (it counts the starts of a self-update on trial: docs/self-update.md).
install -m 0755 "$HERE/launch" "$root/usr/lib/edgelet/launch"
if [ -d "$binary" ]; then
    [ -x "$binary/edgelet" ] || die "$binary/edgelet is not an executable one-dir build"
    # The releases layout: this release under its number, `current` pointing at it (self-update swaps it),
    # its release.json as a self-update's would carry. The bootloader finds _internal/ through
    # /proc/self/exe, so the symlinks work.
    python="${PYTHON:-$REPO/.venv/bin/python}"
    [ -x "$python" ] || python=python3
    number="$("$python" -c "import sys; sys.path.insert(0, '$REPO'); from edgelet.update.release import release_number; print(release_number('$version'))")"
    install -d -m 0755 "$root/usr/lib/edgelet/releases"
    cp -a "$binary" "$root/usr/lib/edgelet/releases/$number"
    "$python" "$REPO/tools/release.py" describe "$binary" --arch "$arch" --label "$version" --version "$number" \
        > "$root/usr/lib/edgelet/releases/$number/release.json"
    ln -s "releases/$number" "$root/usr/lib/edgelet/current"
    ln -s ../lib/edgelet/current/edgelet "$root/usr/bin/edgelet"
else
    install -m 0755 "$binary" "$root/usr/bin/edgelet"
fi
install -m 0644 "$HERE/edgelet.service" "$HERE/edgelet-runonce.service" "$root/lib/systemd/system/"
install -m 0644 "$HERE/config.toml" "$root/etc/edgelet/config.toml"
install -d -m 0755 "$root/usr/lib/systemd/logind.conf.d"
install -m 0644 "$HERE/edgelet-logind.conf" "$root/usr/lib/systemd/logind.conf.d/90-edgelet.conf"
install -m 0644 "$HERE/10-edgelet.conflist" "$root/usr/share/edgelet/10-edgelet.conflist"
install -m 0644 "$REPO/README.md" "$root/usr/share/doc/edgelet/README.md"
install -d -m 0755 "$root/usr/share/doc/edgelet/docs"
install -m 0644 "$REPO"/docs/*.md "$REPO"/docs/*.svg "$root/usr/share/doc/edgelet/docs/"
install -m 0644 "$HERE/README.md" "$root/usr/share/doc/edgelet/README.packaging.md"
install -m 0755 "$HERE/deb/postinst" "$HERE/deb/prerm" "$HERE/deb/postrm" "$root/DEBIAN/"
echo /etc/edgelet/config.toml > "$root/DEBIAN/conffiles"
chmod 0644 "$root/DEBIAN/conffiles"

installed_size="$(du -sk --exclude=DEBIAN "$root" | cut -f1)"
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@INSTALLED_SIZE@/$installed_size/" \
    -e "s/@LIBC_DEPENDS@/$libc_depends/" "$HERE/deb/control.in" > "$root/DEBIAN/control"

mkdir -p "$output"
deb="$output/edgelet_${version}_${arch}.deb"
# xz keeps the download small; -Zxz -z6 is dpkg's own default level.
dpkg-deb --root-owner-group -Zxz -z6 --build "$root" "$deb" >/dev/null
echo "$deb"
