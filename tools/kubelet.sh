#!/usr/bin/env bash
# Builds kubelet v1.20.2 from the same Debian `kubernetes` source package as
# tools/kube-apiserver.sh, for bench/peers.py; prints the directory holding it.
#
# It reuses the source tree, GOPATH and Go build cache that kube-apiserver.sh
# leaves under $KUBE_CACHE (running it first if needed) and writes kubelet to a
# separate directory, so the apiserver build the test suite relies on is never
# touched. Cached: later runs print the path at once.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/kube-common.sh"   # VERSION, GIT_VERSION, CACHE, kube_ldflags
OUT=$CACHE/$VERSION/kubelet-bin

if [ -x "$OUT/kubelet" ]; then
  echo "$OUT"
  exit 0
fi
# bench/peers.py asks with KUBELET_SH_NO_BUILD=1: report a missing build instead of starting one.
if [ -n "${KUBELET_SH_NO_BUILD:-}" ]; then
  echo "kubelet.sh: no kubelet built yet under $OUT (run tools/kubelet.sh)" >&2
  exit 1
fi

"$here/kube-apiserver.sh" >/dev/null   # unpacks the source (and builds the apiserver) if not yet done

work=$CACHE/$VERSION/work
export GOPATH=$work/gopath GO111MODULE=off GOCACHE=$CACHE/gocache CGO_ENABLED=0 GOFLAGS=
cd "$GOPATH/src/k8s.io/kubernetes"
pkg=k8s.io/kubernetes
ldflags=$(kube_ldflags "$pkg")
mkdir -p "$OUT.tmp"
echo "kubelet.sh: building kubelet" >&2
go build -trimpath -ldflags "-s -w$ldflags" -o "$OUT.tmp/kubelet" ./cmd/kubelet
rm -rf "$OUT" && mv "$OUT.tmp" "$OUT"
echo "$OUT"
