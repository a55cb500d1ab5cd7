#!/usr/bin/env bash
# Builds kube-apiserver and kubectl v1.20.2 from Debian's `kubernetes` source
# package, offline, for the apiserver tests; prints the directory holding them.
#
# No package registry ships kube-apiserver, but bookworm's source package
# (with vendor/) builds with Debian's Go 1.19 in GOPATH mode, as upstream
# built 1.20. The result is cached under $KUBE_CACHE keyed by the package
# version, so only the first run on a machine pays for the build (about
# 6 minutes on 2 cores); later runs print the path at once.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/kube-common.sh"   # VERSION, GIT_VERSION, CACHE, kube_ldflags
OUT=$CACHE/$VERSION/bin

if [ -x "$OUT/kube-apiserver" ] && [ -x "$OUT/kubectl" ]; then
  echo "$OUT"
  exit 0
fi

log() { echo "kube-apiserver.sh: $*" >&2; }

# Debian's Go toolchain, etcd, and reflect2 1.0.2 (the vendored 1.0.1 crashes under Go >= 1.18).
need=()
for p in golang-go etcd-server golang-github-modern-go-reflect2-dev dpkg-dev; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
src_list=/etc/apt/sources.list.d/edgelet-deb-src.sources
if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ && ! grep -qs '^deb-src' /etc/apt/sources.list; then
  log "adding a deb-src entry for bookworm main ($src_list)"
  cat >"$src_list" <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  apt-get update -qq
fi
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2
fi

work=$CACHE/$VERSION/work
mkdir -p "$work"
cd "$work"
if [ ! -d src ]; then
  log "fetching the source package kubernetes=$VERSION"
  rm -rf dl && mkdir dl
  (cd dl && apt-get source -qq --download-only "kubernetes=$VERSION" >&2)
  dpkg-source -x dl/kubernetes_"$VERSION".dsc src.tmp >&2
  rm -rf dl
  rm -rf src.tmp/vendor/github.com/modern-go/reflect2
  cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 src.tmp/vendor/github.com/modern-go/reflect2
  mv src.tmp src
fi

export GOPATH=$work/gopath GO111MODULE=off GOCACHE=$CACHE/gocache CGO_ENABLED=0 GOFLAGS=
mkdir -p "$GOPATH/src/k8s.io"
ln -sfn "$work/src" "$GOPATH/src/k8s.io/kubernetes"
cd "$GOPATH/src/k8s.io/kubernetes"
pkg=k8s.io/kubernetes

# The generated OpenAPI definitions are not in the tarball: generate them as the
# upstream Makefile does (every package tagged +k8s:openapi-gen, less the code
# generator's examples and the sample apiserver).
openapi=pkg/generated/openapi/zz_generated.openapi.go
if [ ! -f "$openapi" ]; then
  log "generating $openapi"
  mkdir -p _output/bin
  go build -o _output/bin/openapi-gen ./vendor/k8s.io/kube-openapi/cmd/openapi-gen
  dirs=$( (find pkg cmd plugin third_party -name '*.go' -type f; find -L vendor/k8s.io -name '*.go' -type f) \
    | xargs grep -l '^// *+k8s:openapi-gen=' \
    | grep -v -e '^vendor/k8s.io/code-generator/' -e '^vendor/k8s.io/sample-apiserver/' \
    | xargs -n1 dirname | LC_ALL=C sort -u | sed "s|^|$pkg/|" | paste -sd, -)
  _output/bin/openapi-gen --logtostderr -i "$dirs" -p "$pkg/pkg/generated/openapi" -O zz_generated.openapi \
    -h vendor/k8s.io/code-generator/hack/boilerplate.go.txt -r _output/openapi_violations.report >&2
fi

ldflags=$(kube_ldflags "$pkg")
mkdir -p "$OUT.tmp"
for cmd in kube-apiserver kubectl; do
  log "building $cmd"
  go build -trimpath -ldflags "-s -w$ldflags" -o "$OUT.tmp/$cmd" "./cmd/$cmd"
done
rm -rf "$OUT" && mv "$OUT.tmp" "$OUT"
echo "$OUT"
