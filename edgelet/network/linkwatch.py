"""The pods' links and addresses watched through rtnetlink notifications: one socket in the host's network
namespace, one in each running sandbox's (a socket keeps the namespace it was made in), read on the asyncio
loop; what they report marks the sandboxes whose network may have broken (see linkevents), for a CHECK of
those alone. No process, no period: the kernel writes only when something changes."""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from edgelet.network import linkevents
from edgelet.util.log import get_logger
from edgelet.util.netns import socket_in

log = get_logger(__name__)


@dataclass(frozen=True)
class Target:
    netns: str  # the sandbox's namespace file
    host_links: frozenset[str]  # the host-side links its network uses (its veth, the bridge)


def _index(name: str, root: str) -> int | None:
    if "/" in name or name in (".", ".."):
        return None
    try:
        with open(f"{root}/{name}/ifindex") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _drain(sock: socket.socket) -> tuple[list[linkevents.Event], bool]:
    """What the socket holds now; True as well when the kernel dropped some (the buffer overran)."""
    events: list[linkevents.Event] = []
    while True:
        try:
            data = sock.recv(1 << 16)
        except BlockingIOError:
            return events, False
        except OSError as exc:
            if exc.errno == errno.ENOBUFS:
                return events, True
            raise
        try:
            events.extend(linkevents.parse(data))
        except ValueError as exc:
            log.warning("Cannot read an rtnetlink notification", err=str(exc))


class LinkWatch:
    """The subscriptions, kept to the running sandboxes (`update`), and the sandboxes marked since `take`."""

    def __init__(self, sys_net: str = "/sys/class/net") -> None:
        self.sys_net = sys_net
        self._host: socket.socket | None = None
        self._host_flags: dict[int, int] = {}
        self._users: dict[int, frozenset[str]] = {}  # host interface index -> the sandboxes using it
        self._pods: dict[str, socket.socket] = {}
        self._pod_flags: dict[str, dict[int, int]] = {}
        self._unwatched: set[str] = set()  # sandboxes whose namespace could not be entered (said once)
        self._marked: set[str] = set()

    async def _subscribe(self, netns: str | None) -> socket.socket:
        sock = await socket_in(netns, socket.AF_NETLINK, socket.SOCK_RAW, linkevents.NETLINK_ROUTE)
        try:
            sock.bind((0, linkevents.GROUPS))
        except OSError:
            sock.close()
            raise
        return sock

    async def update(self, targets: Mapping[str, Target]) -> None:
        """Watch exactly the sandboxes of `targets`: subscribe in the new ones' namespaces, close the others'
        (and the host's subscription when none is left). A namespace that cannot be entered leaves its sandbox
        to the safety CHECKs (logged once)."""
        loop = asyncio.get_running_loop()
        if not targets:
            self.close()  # nothing to watch: the host's own link changes would wake the loop for no one
        elif self._host is None:
            try:
                self._host = await self._subscribe(None)
            except OSError as exc:
                log.warning("Cannot watch the host's links; pod networks get their safety CHECKs only", err=str(exc))
            else:
                loop.add_reader(self._host.fileno(), self._read_host)
        for sid in [s for s in self._pods if s not in targets]:
            self.forget(sid)
        self._unwatched &= set(targets)
        for sid, target in targets.items():
            if sid in self._pods or sid in self._unwatched:
                continue
            try:
                sock = await self._subscribe(target.netns)
            except OSError as exc:
                self._unwatched.add(sid)
                log.warning("Cannot watch a pod network's links", sandbox=sid[:12], netns=target.netns, err=str(exc))
                continue
            self._pods[sid] = sock
            self._pod_flags[sid] = {}
            loop.add_reader(sock.fileno(), self._read_pod, sid)
        users: dict[int, set[str]] = {}
        for sid, target in targets.items():
            for name in target.host_links:
                index = _index(name, self.sys_net)
                if index is not None:
                    users.setdefault(index, set()).add(sid)
        self._users = {index: frozenset(sids) for index, sids in users.items()}

    def forget(self, sid: str) -> None:
        """Close the sandbox's subscription (before its network goes, so the socket holds no namespace)."""
        sock = self._pods.pop(sid, None)
        self._pod_flags.pop(sid, None)
        self._marked.discard(sid)
        if sock is not None:
            asyncio.get_running_loop().remove_reader(sock.fileno())
            sock.close()

    def take(self) -> set[str]:
        """The sandboxes marked since the last call."""
        marked, self._marked = self._marked, set()
        return marked

    def close(self) -> None:
        """Every subscription closed."""
        for sid in list(self._pods):
            self.forget(sid)
        if self._host is not None:
            asyncio.get_running_loop().remove_reader(self._host.fileno())
            self._host.close()
            self._host = None

    def _read_host(self) -> None:
        assert self._host is not None
        events, lost = _drain(self._host)
        everyone = frozenset(sid for sids in self._users.values() for sid in sids)
        if lost:
            self._marked |= everyone
        self._marked |= linkevents.affected(events, self._users, self._host_flags, whole=frozenset())

    def _read_pod(self, sid: str) -> None:
        sock = self._pods.get(sid)
        if sock is None:
            return
        events, lost = _drain(sock)
        if lost:
            self._marked.add(sid)
        self._marked |= linkevents.affected(events, {}, self._pod_flags[sid], whole=frozenset({sid}))
