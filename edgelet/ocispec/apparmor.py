"""Which AppArmor profile a container runs under (appArmorProfile fields, the legacy annotation), decided purely.

Host facts (is AppArmor enabled, which profiles are loaded) arrive as
arguments. Precedence is kubelet's: the container's field, then the
container's `container.apparmor.security.beta.kubernetes.io/<name>`
annotation, then the pod's field. Like containerd's CRI plugin, an unset
profile means the runtime default for unprivileged containers and none for
privileged ones; a Localhost profile applies even to privileged containers.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TYPE_CHECKING

from edgelet.ocispec.errors import SecurityError

if TYPE_CHECKING:
    from edgelet.api.types import Container, Pod

ANNOTATION_PREFIX = "container.apparmor.security.beta.kubernetes.io/"

# The runtime-default profiles edgelet uses when one is loaded, first found wins:
# its own name, then containerd's, Docker's and CRI-O's (any of them is the
# same "runtime/default" policy, installed by those packages).
RUNTIME_DEFAULT_PROFILES: tuple[str, ...] = (
    "edgelet-default",
    "cri-containerd.apparmor.d",
    "docker-default",
    "crio-default",
)


@dataclass(frozen=True)
class AppArmorDecision:
    """`profile` goes into process.apparmorProfile (None: none); `warning` is said once as an event."""

    profile: str | None = None
    warning: str | None = None


def _requested(pod: Pod, container: Container) -> tuple[str | None, str | None, str]:
    """(type, localhost name, field) as asked, or (None, None, "") when nothing is."""
    sc = container.security_context
    if sc is not None and sc.app_armor_profile is not None and sc.app_armor_profile.type:
        p = sc.app_armor_profile
        return p.type, p.localhost_profile, "securityContext.appArmorProfile"
    annotations = (pod.metadata.annotations if pod.metadata is not None else None) or {}
    key = ANNOTATION_PREFIX + container.name
    value = annotations.get(key)
    if value:
        where = f"metadata.annotations[{key}]"
        if value == "runtime/default":
            return "RuntimeDefault", None, where
        if value == "unconfined":
            return "Unconfined", None, where
        if value.startswith("localhost/"):
            return "Localhost", value[len("localhost/") :], where
        raise SecurityError(f"{where}: {value!r} is not runtime/default, unconfined or localhost/<profile>")
    psc = pod.spec.security_context if pod.spec is not None else None
    if psc is not None and psc.app_armor_profile is not None and psc.app_armor_profile.type:
        p = psc.app_armor_profile
        return p.type, p.localhost_profile, "spec.securityContext.appArmorProfile"
    return None, None, ""


def compute_apparmor(pod: Pod, container: Container, *, enabled: bool, loaded: AbstractSet[str]) -> AppArmorDecision:
    """The profile for `container` given whether AppArmor is enabled and which profiles are loaded.

    A Localhost profile that is not loaded (or AppArmor missing) is a
    SecurityError: running the container unconfined would silently drop what
    the manifest asked for. An explicit RuntimeDefault without a loaded
    default profile runs unconfined with a warning.
    """
    kind, name, where = _requested(pod, container)
    privileged = bool(container.security_context and container.security_context.privileged)
    if kind == "Unconfined":
        return AppArmorDecision()
    if kind == "Localhost":
        if not name:
            raise SecurityError(f"{where}.localhostProfile is required for type Localhost")
        if not enabled:
            raise SecurityError(
                f"{where}: AppArmor profile {name!r} asked for, but AppArmor is not enabled on this host"
            )
        if name not in loaded:
            raise SecurityError(f"{where}: AppArmor profile {name!r} is not loaded on this host")
        return AppArmorDecision(profile=name)
    if kind not in (None, "RuntimeDefault"):
        raise SecurityError(f"{where}.type {kind!r} is not one of RuntimeDefault, Localhost, Unconfined")
    if privileged:
        return AppArmorDecision()
    explicit = kind == "RuntimeDefault"
    if not enabled:
        warning = (
            f"{where}: RuntimeDefault asked for, but AppArmor is not enabled on this host; "
            "the container runs without an AppArmor profile"
        )
        return AppArmorDecision(warning=warning if explicit else None)
    for candidate in RUNTIME_DEFAULT_PROFILES:
        if candidate in loaded:
            return AppArmorDecision(profile=candidate)
    warning = (
        f"{where or 'AppArmor'}: no runtime default AppArmor profile is loaded (one of "
        f"{', '.join(RUNTIME_DEFAULT_PROFILES)}); the container runs without an AppArmor profile"
    )
    return AppArmorDecision(warning=warning if explicit else None)
