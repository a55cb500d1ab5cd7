"""Where the runc runtime keeps its things on disk, and the annotation keys it writes on every config.json."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# Annotations every config.json carries, so the whole actual state can be
# rebuilt from runc state after an agent restart (see ARCHITECTURE "Runtime").
ANN_KIND = "io.edgelet.kind"  # "sandbox" | "container"
ANN_POD_UID = "io.kubernetes.pod.uid"
ANN_POD_NAME = "io.kubernetes.pod.name"
ANN_POD_NAMESPACE = "io.kubernetes.pod.namespace"
ANN_CONTAINER_NAME = "io.kubernetes.container.name"
ANN_CONTAINER_TYPE = "io.edgelet.container.type"  # "init" | "regular"
ANN_ATTEMPT = "io.kubernetes.container.restartCount"
ANN_HASH = "io.kubernetes.container.hash"
ANN_SANDBOX_ID = "io.kubernetes.cri.sandbox-id"
ANN_IMAGE = "io.kubernetes.cri.image-name"
ANN_IMAGE_ID = "io.edgelet.image-id"
ANN_LOG_PATH = "io.edgelet.log-path"
ANN_CREATED = "io.edgelet.created"  # wall time, seconds, as a decimal string
ANN_GRACE = "io.kubernetes.pod.terminationGracePeriod"  # seconds, as kubelet's container label, for orphans
ANN_POD_IPS = "io.edgelet.pod-ips"  # comma-separated, from CNI
ANN_NETNS = "io.edgelet.netns"  # the network namespace file of the sandbox
ANN_HOST_NETWORK = "io.edgelet.host-network"  # lets a rebuilt SandboxRecord say whether it holds the host's network
# A sandbox without an infra container: "false", and the namespace files it pinned as "<oci type>=<path>,...".
# A sandbox bundle without ANN_INFRA (an older edgelet's) has its pause process.
ANN_INFRA = "io.edgelet.infra"
ANN_NAMESPACES = "io.edgelet.namespaces"
# The runtime handler (runc, crun...) a sandbox and its containers run under; a record without it is runc's.
ANN_RUNTIME_HANDLER = "io.edgelet.runtime-handler"
# What reading an exited container's termination message needs, fixed when it is created as kubelet keeps
# it in the container's annotations: a bundle without them (an older edgelet's) reads as "File" and "true".
ANN_TERMINATION_MESSAGE_POLICY = "io.kubernetes.container.terminationMessagePolicy"  # File | FallbackToLogsOnError
ANN_TERMINATION_MESSAGE_FILE = "io.edgelet.termination-message-file"  # "true" | "false": read the bundle's file

KIND_SANDBOX = "sandbox"  # values of ANN_KIND
KIND_CONTAINER = "container"


@dataclass(frozen=True)
class RuntimePaths:
    """Where the runtime keeps its things; tests point all of them at temp dirs."""

    root_dir: Path  # /var/lib/edgelet
    run_dir: Path  # /run/edgelet
    log_dir: Path  # /var/log
    cgroup_root: str = "/kubepods"  # cgroup parent, relative to each hierarchy's mount

    @property
    def runc_root(self) -> Path:
        return self.run_dir / "runc"

    def handler_root(self, name: str) -> Path:
        """The state root of runtime handler `name`: runc's stays where every earlier edgelet kept it."""
        return self.runc_root if name == "runc" else self.run_dir / "runtimes" / name

    @property
    def exit_dir(self) -> Path:
        return self.run_dir / "exits"

    @property
    def exec_dir(self) -> Path:
        """Scratch of exec sessions: runc's pid files and process specs (which hold the container's env)."""
        return self.run_dir / "exec"

    @property
    def ns_dir(self) -> Path:
        """The namespace files of sandboxes without an infra container, one dir per sandbox id."""
        return self.run_dir / "ns"

    @property
    def socket_dir(self) -> Path:
        return self.run_dir / "socks"

    @property
    def pods_dir(self) -> Path:
        return self.root_dir / "pods"

    @property
    def seccomp_dir(self) -> Path:
        """Localhost seccomp profiles (kubelet's <root-dir>/seccomp): localhostProfile is relative to it."""
        return self.root_dir / "seccomp"

    def pod_dir(self, uid: str) -> Path:
        return self.pods_dir / uid

    def pod_log_dir(self, namespace: str, name: str, uid: str) -> Path:
        return self.log_dir / "pods" / f"{namespace}_{name}_{uid}"

    def container_log_path(self, namespace: str, name: str, uid: str, container: str, attempt: int) -> Path:
        return self.pod_log_dir(namespace, name, uid) / container / f"{attempt}.log"

    def container_log_link(self, namespace: str, name: str, container: str, container_id: str) -> Path:
        return self.log_dir / "containers" / f"{name}_{namespace}_{container}-{container_id}.log"
