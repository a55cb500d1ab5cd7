# Sourced by kube-apiserver.sh and kubelet.sh: the one Kubernetes source both
# build from, where it is cached, and the version stamp both link in.
VERSION=1.20.5+really1.20.2-1.1+deb12u1
GIT_VERSION=v1.20.2
CACHE=${KUBE_CACHE:-/var/cache/edgelet-kube}

# kube_ldflags PKG: the -X flags that make the binaries report $GIT_VERSION
# (PKG is the import path of the tree, k8s.io/kubernetes).
kube_ldflags() {
  local v flags=""
  for v in client-go/pkg/version component-base/version; do
    flags+=" -X $1/vendor/k8s.io/$v.gitVersion=$GIT_VERSION"
    flags+=" -X $1/vendor/k8s.io/$v.gitMajor=1 -X $1/vendor/k8s.io/$v.gitMinor=20"
    flags+=" -X $1/vendor/k8s.io/$v.gitTreeState=clean"
  done
  printf '%s' "$flags"
}
