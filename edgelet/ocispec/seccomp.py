"""Which seccomp profile a container gets (seccompProfile, --seccomp-default) and its OCI form for this host.

Pure: the profile files' text, the host's architecture and kernel version
arrive as arguments. The profile format is moby's (the one Localhost
profiles are written in, a superset of the OCI `linux.seccomp` object):
`archMap` picks the architectures for this host, and each rule's
`includes`/`excludes` (arches, caps, minKernel) decide whether it applies,
as moby's `setupSeccomp` and containerd's CRI plugin do.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from edgelet.ocispec.errors import SecurityError

if TYPE_CHECKING:
    from edgelet.api.types import Container, Pod, SeccompProfile

RUNTIME_DEFAULT = "RuntimeDefault"
LOCALHOST = "Localhost"
UNCONFINED = "Unconfined"

# platform.machine() -> the architecture names profiles use in `includes.arches` (Go's GOARCH).
_GOARCH = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "armv6l": "arm",
    "armv7l": "arm",
    "armv8l": "arm",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
    "i686": "386",
    "i386": "386",
}
# GOARCH -> libseccomp's name of the native architecture, which `archMap` is keyed by.
_SCMP_ARCH = {
    "amd64": "SCMP_ARCH_X86_64",
    "arm64": "SCMP_ARCH_AARCH64",
    "arm": "SCMP_ARCH_ARM",
    "ppc64le": "SCMP_ARCH_PPC64LE",
    "s390x": "SCMP_ARCH_S390X",
    "riscv64": "SCMP_ARCH_RISCV64",
    "386": "SCMP_ARCH_X86",
}


def goarch(machine: str) -> str:
    """`uname -m` as Go names it (profiles' `includes.arches` use Go's names): x86_64 -> amd64, aarch64 -> arm64."""
    return _GOARCH.get(machine, machine)


@dataclass(frozen=True)
class SeccompChoice:
    """The profile a container runs under: `kind` is RuntimeDefault, Localhost or Unconfined."""

    kind: str
    localhost_profile: str | None = None  # relative to <root-dir>/seccomp, for Localhost
    field: str = ""  # where it came from, for messages ("" when it is the node's default)


def _field(profile: SeccompProfile | None) -> SeccompProfile | None:
    return profile if profile is not None and profile.type else None


def compute_seccomp(pod: Pod, container: Container | None, *, default_on: bool) -> SeccompChoice:
    """Container's seccompProfile over the pod's; privileged -> none; neither -> RuntimeDefault when default_on.

    `container` None means the pod's sandbox, which follows the pod-level
    field. kubelet's `--seccomp-default` makes the unset case RuntimeDefault;
    a privileged container gets no filter at all, as kubelet asks of the
    runtime (and containerd applies).
    """
    sc = container.security_context if container is not None else None
    if sc is not None and sc.privileged:
        return SeccompChoice(UNCONFINED, field="securityContext.privileged")
    psc = pod.spec.security_context if pod.spec is not None else None
    chosen, where = None, ""
    if sc is not None and _field(sc.seccomp_profile) is not None:
        chosen, where = sc.seccomp_profile, "securityContext.seccompProfile"
    elif psc is not None and _field(psc.seccomp_profile) is not None:
        chosen, where = psc.seccomp_profile, "spec.securityContext.seccompProfile"
    if chosen is None:
        return SeccompChoice(RUNTIME_DEFAULT if default_on else UNCONFINED)
    kind = chosen.type
    if kind == LOCALHOST:
        name = chosen.localhost_profile or ""
        if not name or name.startswith("/") or ".." in name.split("/"):
            raise SecurityError(f"{where}.localhostProfile {name!r} must be a relative path without '..'")
        return SeccompChoice(LOCALHOST, name, where)
    if kind not in (RUNTIME_DEFAULT, UNCONFINED):
        raise SecurityError(f"{where}.type {kind!r} is not one of RuntimeDefault, Localhost, Unconfined")
    return SeccompChoice(kind, None, where)


@lru_cache(maxsize=1)
def default_profile() -> Mapping[str, Any]:
    """The bundled RuntimeDefault profile (seccomp_default.json), read once on first use."""
    # pkgutil, not importlib.resources: that one imports zipfile and its readers (about 0.4 MB kept by every
    # agent for one read); both read through the package's loader, so a frozen build finds the file too.
    import pkgutil

    data = pkgutil.get_data("edgelet.ocispec", "seccomp_default.json")
    if data is None:
        raise FileNotFoundError("edgelet/ocispec/seccomp_default.json")
    text = data.decode()
    profile: Mapping[str, Any] = json.loads(text)
    return profile


def parse_profile(text: str, name: str) -> Mapping[str, Any]:
    """A Localhost profile's JSON, or a SecurityError naming it."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SecurityError(f"seccomp profile {name!r} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("defaultAction"), str):
        raise SecurityError(f"seccomp profile {name!r} has no defaultAction")
    return data


def _kernel_at_least(kernel: tuple[int, ...] | None, minimum: str) -> bool:
    if kernel is None:
        return True  # unknown: moby would refuse; edgelet assumes a kernel newer than any minKernel in use
    try:
        want = tuple(int(p) for p in minimum.split("."))
    except ValueError:
        raise SecurityError(f"invalid minKernel {minimum!r}") from None
    return tuple(kernel[: len(want)]) >= want


def _applies(rule: Mapping[str, Any], arch: str, caps: Sequence[str], kernel: tuple[int, ...] | None) -> bool:
    inc = rule.get("includes") or {}
    exc = rule.get("excludes") or {}
    if inc.get("arches") and arch not in inc["arches"]:
        return False
    if any(c not in caps for c in inc.get("caps") or ()):
        return False
    if inc.get("minKernel") and not _kernel_at_least(kernel, inc["minKernel"]):
        return False
    if arch in (exc.get("arches") or ()):
        return False
    if any(c in caps for c in exc.get("caps") or ()):
        return False
    if exc.get("minKernel") and _kernel_at_least(kernel, exc["minKernel"]):
        return False
    return True


_PASSED_KEYS = ("defaultErrnoRet", "listenerPath", "listenerMetadata", "flags")


def build_seccomp(
    profile: Mapping[str, Any], *, arch: str, caps: Sequence[str], kernel: tuple[int, ...] | None, name: str
) -> dict[str, Any]:
    """The OCI `linux.seccomp` object for one container: the rules that apply to this arch, caps and kernel.

    `arch` is Go's name (goarch), `caps` the container's bounding set.
    """
    if profile.get("architectures") and profile.get("archMap"):
        raise SecurityError(f"seccomp profile {name!r}: use either architectures or archMap, not both")
    out: dict[str, Any] = {"defaultAction": profile["defaultAction"]}
    for key in _PASSED_KEYS:
        if profile.get(key) is not None:
            out[key] = profile[key]
    if profile.get("architectures"):
        out["architectures"] = list(profile["architectures"])
    else:
        native = _SCMP_ARCH.get(arch)
        for entry in profile.get("archMap") or ():
            if entry.get("architecture") == native:
                out["architectures"] = [native, *(entry.get("subArchitectures") or ())]
    syscalls = []
    for rule in profile.get("syscalls") or ():
        if not isinstance(rule, dict):
            raise SecurityError(f"seccomp profile {name!r}: a syscalls entry is not an object")
        names = list(rule.get("names") or ())
        if rule.get("name"):
            if names:
                raise SecurityError(f"seccomp profile {name!r}: use either name or names, not both")
            names = [rule["name"]]
        if not names or not isinstance(rule.get("action"), str):
            raise SecurityError(f"seccomp profile {name!r}: a syscalls entry needs names and an action")
        if not _applies(rule, arch, caps, kernel):
            continue
        call: dict[str, Any] = {"names": names, "action": rule["action"]}
        if rule.get("errnoRet") is not None:
            call["errnoRet"] = rule["errnoRet"]
        if rule.get("args"):
            call["args"] = [{k: a[k] for k in ("index", "value", "valueTwo", "op") if k in a} for a in rule["args"]]
        syscalls.append(call)
    if syscalls:
        out["syscalls"] = syscalls
    return out


def resolve_seccomp(
    choice: SeccompChoice,
    *,
    localhost_profiles: Mapping[str, str],
    profile_dir: str,
    arch: str,
    caps: Sequence[str],
    kernel: tuple[int, ...] | None,
) -> dict[str, Any] | None:
    """`linux.seccomp` for a choice, None for Unconfined; a missing or bad Localhost profile is a SecurityError.

    `localhost_profiles` maps the profile names the caller read from
    `profile_dir` to their text; a name absent from it does not exist.
    """
    if choice.kind == UNCONFINED:
        return None
    if choice.kind == RUNTIME_DEFAULT:
        return build_seccomp(default_profile(), arch=arch, caps=caps, kernel=kernel, name=RUNTIME_DEFAULT)
    name = choice.localhost_profile or ""
    text = localhost_profiles.get(name)
    if text is None:
        raise SecurityError(
            f"{choice.field}: localhost seccomp profile {name!r} not found in {profile_dir or '<root-dir>/seccomp'}"
        )
    return build_seccomp(parse_profile(text, name), arch=arch, caps=caps, kernel=kernel, name=name)
