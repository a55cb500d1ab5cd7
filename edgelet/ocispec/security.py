"""Who a container runs as and with which capabilities: securityContext and image USER, resolved purely.

Host facts (the image's /etc/passwd and /etc/group) arrive as mappings.
Follows containerd's WithUser/WithAdditionalGIDs/WithCapabilities and
kubelet's verifyRunAsNonRoot and determineEffectiveSecurityContext.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from edgelet.ocispec.errors import SecurityError

if TYPE_CHECKING:
    from edgelet.api.types import Container, Pod, PodSecurityContext, SecurityContext


@dataclass(frozen=True)
class ResolvedUser:
    uid: int
    gid: int
    additional_gids: tuple[int, ...]
    username: str = ""  # passwd name of uid, when known


def _pod_sc(pod: Pod) -> PodSecurityContext | None:
    return pod.spec.security_context if pod.spec is not None else None


def _effective(container_sc: SecurityContext | None, pod_sc: PodSecurityContext | None, attr: str) -> Any:
    """Container securityContext over pod securityContext, as kubelet merges them."""
    if container_sc is not None and getattr(container_sc, attr, None) is not None:
        return getattr(container_sc, attr)
    if pod_sc is not None:
        return getattr(pod_sc, attr, None)
    return None


def _name_of_uid(uid: int, passwd: Mapping[str, tuple[int, int]]) -> tuple[str, int] | None:
    for name, (u, g) in passwd.items():
        if u == uid:
            return name, g
    return None


def _parse_image_user(user: str, passwd: Mapping[str, tuple[int, int]], groups: Mapping[str, int]) -> tuple[int, int]:
    """Image USER: "uid", "uid:gid", "name" or "name:group" (mixed forms too), as containerd's WithUser."""
    name, sep, group = user.partition(":")
    if name.isdigit():
        uid = int(name)
        found = _name_of_uid(uid, passwd)
        gid = found[1] if found else 0
    else:
        if name not in passwd:
            raise SecurityError(f"unable to find user {name!r} in the image's /etc/passwd")
        uid, gid = passwd[name]
    if sep:
        if group.isdigit():
            gid = int(group)
        elif group in groups:
            gid = groups[group]
        else:
            raise SecurityError(f"unable to find group {group!r} in the image's /etc/group")
    return uid, gid


def resolve_user(
    pod: Pod,
    container: Container,
    image_user: str,
    passwd: Mapping[str, tuple[int, int]],
    groups: Mapping[str, int],
    group_members: Mapping[str, Sequence[str]] | None = None,
) -> ResolvedUser:
    """uid/gid from runAsUser/runAsGroup (container over pod) else the image USER; checks runAsNonRoot."""
    sc = container.security_context
    psc = _pod_sc(pod)
    run_as_user = _effective(sc, psc, "run_as_user")
    run_as_group = _effective(sc, psc, "run_as_group")
    if run_as_user is not None:
        uid = int(run_as_user)
        found = _name_of_uid(uid, passwd)
        gid = found[1] if found else 0
    elif image_user:
        uid, gid = _parse_image_user(image_user, passwd, groups)
    else:
        uid, gid = 0, 0
    if run_as_group is not None:
        # containerd refuses runAsGroup without runAsUser; edgelet applies it
        # to the image's user instead, as CRI-O does.
        gid = int(run_as_group)

    if _effective(sc, psc, "run_as_non_root"):
        if run_as_user is not None and uid == 0:
            raise SecurityError("container's runAsUser breaks non-root policy")
        if uid == 0:
            # kubelet cannot check a non-numeric image user; edgelet has the
            # image's passwd and resolves it, so a named root is caught too.
            raise SecurityError("container has runAsNonRoot and image will run as root")

    found = _name_of_uid(uid, passwd)
    username = found[0] if found else ""
    extra: list[int] = [gid]
    policy = psc.supplemental_groups_policy if psc is not None else None
    if username and group_members and policy != "Strict":
        for group_name, members in group_members.items():
            if username in members and group_name in groups:
                extra.append(groups[group_name])
    if psc is not None:
        # kubelet's order: fsGroup first, then supplementalGroups.
        if psc.fs_group is not None:
            extra.append(int(psc.fs_group))
        extra.extend(int(g) for g in psc.supplemental_groups or [])
    additional = tuple(dict.fromkeys(extra))  # in order, each once
    return ResolvedUser(uid=uid, gid=gid, additional_gids=additional, username=username)


def _cap_name(name: str) -> str:
    upper = name.strip().upper()
    return upper if upper.startswith("CAP_") else "CAP_" + upper


def compute_capabilities(
    container: Container,
    default: Sequence[str],
    all_caps: Sequence[str],
    bounding: Sequence[str] | None = None,
) -> list[str]:
    """The bounding/effective/permitted set: privileged -> all; else default, then add/drop ("ALL" first).

    `bounding` is what the agent itself may hand on (its CapBnd; None: every
    capability). A privileged container or "ALL" gets the bounding set, and
    the defaults are cut to it, because runc cannot give what the agent lacks
    ("unable to apply caps"); naming a missing capability in `add` is an error.
    """
    have = list(all_caps) if bounding is None else [c for c in all_caps if c in set(bounding)]
    sc = container.security_context
    if sc is not None and sc.privileged:
        return have
    caps = [c for c in default if c in have]
    if sc is None or sc.capabilities is None:
        return caps
    add = [c for c in sc.capabilities.add or []]
    drop = [c for c in sc.capabilities.drop or []]
    # Like containerd: "ALL" in add, then "ALL" in drop, then the single
    # names, so add: [ALL], drop: [CHOWN] is everything but CHOWN.
    if any(c.upper() == "ALL" for c in add):
        caps = list(have)
    if any(c.upper() == "ALL" for c in drop):
        caps = []
    known = set(all_caps)
    for raw in add:
        if raw.upper() == "ALL":
            continue
        name = _cap_name(raw)
        if name not in known:
            raise SecurityError(f"unknown capability {raw!r} in capabilities.add")
        if name not in have:
            raise SecurityError(
                f"capability {raw!r} in capabilities.add is not in edgelet's own bounding set, so no container can have it"
            )
        if name not in caps:
            caps.append(name)
    for raw in drop:
        if raw.upper() == "ALL":
            continue
        name = _cap_name(raw)
        if name not in known:
            raise SecurityError(f"unknown capability {raw!r} in capabilities.drop")
        caps = [c for c in caps if c != name]
    return caps
